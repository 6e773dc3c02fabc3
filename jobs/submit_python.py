"""The Python that ``spark-submit jobs/<command>.py`` runs its driver in: standard library only, because it
runs before anything else of segjobs can be imported.

spark-submit starts the script with ``$PYSPARK_DRIVER_PYTHON``, else ``$PYSPARK_PYTHON``, else ``python3``
from PATH. Called as ``.venv/bin/spark-submit`` without the venv activated and without those variables, that
is the system's Python, which has neither segjobs nor its dependencies. The Python environment spark-submit
itself belongs to (its SPARK_HOME is that environment's ``pyspark`` package) is the one that has them: the
script re-executes itself there, in the same process (spark-submit's gateway is found through the
environment, which is kept), and that interpreter is also the workers' Python unless one was chosen.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

#: What the error says when no interpreter with segjobs can be found.
FIX = ("set PYSPARK_PYTHON to the Python segjobs is installed in (e.g. PYSPARK_PYTHON=$PWD/.venv/bin/python), "
       "or activate that virtualenv")


def environment_python(spark_home: str | None) -> str | None:
    """The interpreter of the Python environment whose ``pyspark`` package is ``spark_home`` (pip's
    ``<prefix>/lib/pythonX.Y/site-packages/pyspark``, possibly through a symlink), or None."""
    if not spark_home:
        return None
    home = Path(spark_home).resolve()
    if home.name != "pyspark" or home.parent.name != "site-packages" or not home.parent.parent.name.startswith(
            "python"):
        return None
    bin_dir = home.parents[3] / "bin"
    for name in (home.parent.parent.name, "python3", "python"):  # python3.11 first: the exact minor version
        candidate = bin_dir / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def reexec_in_spark_python(script: str, error: ImportError) -> NoReturn:
    """Run ``script`` again, with this process's arguments, in spark-submit's own Python environment (see the
    module docstring); never returns. When there is none, or it is this interpreter already, print what to set
    and exit 2."""
    target = environment_python(os.environ.get("SPARK_HOME"))
    if target is not None and Path(target).resolve() != Path(sys.executable).resolve() \
            and not os.environ.get("SEGJOBS_REEXEC"):
        os.environ["SEGJOBS_REEXEC"] = "1"  # once: a second failure is reported, not looped
        os.environ.setdefault("PYSPARK_PYTHON", target)  # the workers' Python too, unless one was chosen
        sys.stderr.flush()
        os.execv(target, [target, script, *sys.argv[1:]])
    print(f"segjobs: {Path(script).name} runs in {sys.executable}, which cannot import segjobs ({error}): {FIX}",
          file=sys.stderr)
    sys.exit(2)


__all__ = ["environment_python", "reexec_in_spark_python"]
