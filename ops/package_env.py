"""Build what a Spark cluster needs to run segjobs: the project's wheel and an environment archive for executors.

``make package`` runs this with the project's interpreter (``.venv/bin/python``). It writes into ``--dist``:

* ``segjobs-<version>-py3-none-any.whl``: the project itself (``jobs`` and ``segment_io``), for ``pip install``
  on an edge node or into a container image;
* ``segjobs-env.tar.gz``: a packed virtualenv holding that wheel and every runtime dependency,
  native wheels included (numba and llvmlite, pyarrow, numpy, cramjam, zstandard, lz4, crc32c, deltalake).
  spark-submit ships it with ``--archives dist/segjobs-env.tar.gz#environment``; executors (and, in cluster
  deploy mode, the driver) run ``./environment/bin/python``.

pyspark is left out of the archive on purpose: every Spark node puts its own ``pyspark.zip`` and py4j on the
Python workers' ``PYTHONPATH``, and a second, possibly different, pyspark in the archive would only cost
~490 MB (mostly its jars) in every executor's download. The other packages are pinned to the versions installed in the
running interpreter's environment, so a driver running from ``.venv`` and the executors agree on numpy,
pyarrow and pandas versions (pickled objects cross between them).

The archive does not contain the Python interpreter itself: ``environment/bin/python`` is a link to
the base interpreter the archive was built from (or to ``--python-prefix``/bin/python3.X), which must exist at
that path on every node, with the same minor version and platform as the build machine (native wheels are
built for them). ``--python-prefix /usr`` builds an archive for nodes whose Python is ``/usr/bin/python3.X``.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
ARCHIVE_NAME = "segjobs-env.tar.gz"
#: Requirements the archive leaves out, and why (printed by the build).
LEFT_OUT = {"pyspark": "the cluster's Spark puts its own pyspark.zip and py4j on executors' PYTHONPATH"}


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd`` echoing it; a failure stops the build with the command's own output."""
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, text=True, capture_output=True, **kwargs)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"package: command failed with exit code {proc.returncode}: {' '.join(cmd)}")
    return proc


def build_wheel(dist: Path) -> Path:
    """The project's wheel in ``dist`` (an older one of the same name is replaced)."""
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("segjobs-*.whl"):
        old.unlink()
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(REPO)])
    wheels = sorted(dist.glob("segjobs-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"package: expected one segjobs wheel in {dist}, found {[w.name for w in wheels]}")
    return wheels[0]


def runtime_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines without extras' requirements and without :data:`LEFT_OUT`."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(meta_name).decode()
    requirements = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec = line.split(":", 1)[1].strip()
        if "extra ==" in spec:
            continue  # dev and test tools
        name = re.match(r"[A-Za-z0-9._-]+", spec).group(0).lower().replace("_", "-")
        if name not in LEFT_OUT:
            requirements.append(spec)
    return requirements


def spark_python_path() -> list[Path]:
    """The zips Spark puts on its Python workers' PYTHONPATH, from the pyspark installed beside this build."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(lib.glob("pyspark.zip")) + sorted(lib.glob("py4j-*-src.zip"))
    if len(zips) != 2:
        raise SystemExit(f"package: pyspark.zip and py4j-*-src.zip not found in {lib}; is pyspark installed?")
    return zips


def pip_install(env_python: Path, args: list[str]) -> None:
    """``pip install`` into the environment of ``env_python`` with the running interpreter's pip (the new
    environment has none: it would only add weight to the archive)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(env_python), "install", "--quiet",
                           "--no-warn-script-location", *args], text=True, capture_output=True)
    print("+ pip install " + " ".join(args), flush=True)
    # pip's check reports the requirements left out on purpose as unmet; anything else it says is shown.
    expected = re.compile(rf"segjobs .* requires ({'|'.join(LEFT_OUT)})\b.*which is not installed")
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if not expected.search(ln) and "is ignored: it is neither a file nor a directory" not in ln
             and "dependency resolver does not currently take into account" not in ln]
    if lines:
        sys.stderr.write("\n".join(lines) + "\n")
    if proc.returncode != 0:
        raise SystemExit(f"package: pip install into {env_python.parent.parent} failed (exit {proc.returncode})")


def build_env(wheel: Path, env_dir: Path, constraints: Path) -> Path:
    """A fresh virtualenv at ``env_dir`` with the wheel and its runtime requirements; returns its python."""
    if env_dir.exists():
        shutil.rmtree(env_dir)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    # venv links bin/python to the base interpreter behind the running one (sys._base_executable).
    run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)])
    env_python = env_dir / "bin" / "python"
    # Pin every package to the version the project's own environment runs (see the module docstring).
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"]).stdout
    constraints.write_text("".join(ln + "\n" for ln in frozen.splitlines()
                                   if ln and not ln.startswith(("-e ", "segjobs"))))
    pip_install(env_python, ["--constraint", str(constraints), *runtime_requirements(wheel)])
    pip_install(env_python, ["--no-deps", str(wheel)])
    return env_python


#: Directories no executor needs: the libraries' own test suites (numpy, pandas, pyarrow, numba, llvmlite) are a
#: third of the files and ~80 MB that every executor would unpack for nothing.
EXCLUDED_DIRS = ("tests",)


def pack(env_dir: Path, archive: Path, python_prefix: str | None) -> Path:
    """Write ``env_dir`` as a relocatable ``.tar.gz`` (what ``venv-pack`` does for a ``python -m venv`` env; its
    0.2.0 turns ``--python-prefix /usr`` into a link to ``/usr/bin/python3.113.11``, hence this function).

    * ``bin/`` keeps only the ``python`` links: console scripts and activate scripts name the build directory
      and no executor runs them;
    * ``bin/python3.X`` links to ``PYTHON_PREFIX/bin/python3.X`` (the nodes' interpreter) when a prefix is
      given, else to this machine's base interpreter; ``pyvenv.cfg`` says the same;
    * modification times are kept, so the compiled ``.pyc`` files stay valid after unpacking.

    Returns the interpreter the archive's ``bin/python`` links to.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = (Path(python_prefix) / "bin" / version if python_prefix
                   else Path(os.readlink(env_dir / "bin" / version)))
    if not interpreter.is_absolute():
        raise SystemExit(f"package: the interpreter the archive links to must be an absolute path, not {interpreter}")
    keep_in_bin = {"python", "python3", version}
    pyvenv_cfg = (f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
                  f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n"
                  f"executable = {interpreter}\n").encode()

    def entries() -> Iterator[Path]:
        """Every path to archive, relative to ``env_dir``, parents before children."""
        for dirpath, dirnames, filenames in os.walk(env_dir):  # symlinked dirs (lib64) are listed, not entered
            rel_dir = Path(dirpath).relative_to(env_dir)
            if rel_dir == Path("bin"):
                dirnames[:], filenames = [], [n for n in filenames if n in keep_in_bin]
            dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
            yield from (rel_dir / name for name in dirnames + sorted(filenames))

    partial = archive.with_name(archive.name + ".partial")
    try:
        _write_tar(partial, env_dir, entries(), pyvenv_cfg, Path("bin") / version, interpreter)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.chmod(0o644)  # copied to every node: readable by all
    partial.replace(archive)
    return interpreter


def _write_tar(path: Path, env_dir: Path, entries: Iterator[Path], pyvenv_cfg: bytes, python_link: Path,
               interpreter: Path) -> None:
    with tarfile.open(path, "w:gz", compresslevel=4) as tar:
        for rel in entries:
            info = tar.gettarinfo(env_dir / rel, arcname=str(rel))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if rel == Path("pyvenv.cfg"):
                info.size = len(pyvenv_cfg)
                tar.addfile(info, io.BytesIO(pyvenv_cfg))
            elif info.isfile():
                with open(env_dir / rel, "rb") as f:
                    tar.addfile(info, f)
            else:
                if rel == python_link:
                    info.linkname = str(interpreter)
                tar.addfile(info)


def verify_archive(archive: Path, scratch: Path) -> None:
    """Unpack ``archive`` as an executor does and import what executors need, in a process set up as a Python
    worker is: the archive's python with nothing but Spark's pyspark.zip and py4j on PYTHONPATH (this build's
    copies stand in for the nodes'). Only meaningful when the archive links to this machine's interpreter."""
    if scratch.exists():
        shutil.rmtree(scratch)
    unpacked = scratch / "environment"
    unpacked.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        # The "tar" filter keeps the link to the interpreter; Pythons before 3.11.4 have no filters.
        tar.extractall(unpacked, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    probe = ("import jobs.commands.cli, jobs.engine.compact.driver, jobs.engine.retain.driver, jobs.engine.scan, "
             "jobs.rules.offset_map, segment_io.decode, segment_io.encode, numba, llvmlite, pyarrow, pandas, "
             "cramjam, zstandard, lz4, crc32c, boto3, deltalake, sys, segment_io._lz4_kernels as lz4_kernels; "
             "assert lz4_kernels.LINKED, 'the lz4 package exports no LZ4 block functions'; print(sys.prefix)")
    worker_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    worker_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in spark_python_path())
    # Relative, as spark.pyspark.python names it: sys.prefix must come out as the unpacked copy.
    prefix = run(["./environment/bin/python", "-c", probe], cwd=scratch, env=worker_env).stdout.strip()
    if Path(prefix).resolve() != unpacked.resolve():
        raise SystemExit(f"package: the unpacked archive runs with sys.prefix {prefix}, not {unpacked}")
    shutil.rmtree(scratch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ops/package_env.py",
        description=__doc__,
        epilog="example:\n  .venv/bin/python ops/package_env.py --dist dist --build build\n"
               "  .venv/bin/python ops/package_env.py --python-prefix /usr   # nodes run /usr/bin/python3.X",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="where the wheel and archive go "
                        "(default: dist/)")
    parser.add_argument("--build", type=Path, default=REPO / "build",
                        help="scratch directory for the environment being packed, emptied afterwards "
                             "(default: build/)")
    parser.add_argument("--python-prefix", default=os.environ.get("EXECUTOR_PYTHON_PREFIX") or None,
                        help="prefix of the Python on the cluster nodes, when it differs from this machine's "
                             f"({sys.base_prefix}); the archive's bin/python links to PREFIX/bin/python"
                             f"{sys.version_info.major}.{sys.version_info.minor} (default: "
                             "$EXECUTOR_PYTHON_PREFIX, else this machine's)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    dist, build = args.dist.resolve(), args.build.resolve()
    wheel = build_wheel(dist)
    env_dir = build / "executor-env"
    build_env(wheel, env_dir, build / "constraints.txt")
    archive = dist / ARCHIVE_NAME
    interpreter = pack(env_dir, archive, args.python_prefix)
    shutil.rmtree(env_dir)  # ~640 MB of scratch: the archive is the product
    if Path(interpreter).exists():
        verify_archive(archive, build / "archive-check")
    else:
        print(f"note: {interpreter} does not exist here: the archive's imports were not tried")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    print(f"\nwheel:   {wheel} ({wheel.stat().st_size / 2**10:.0f} KiB)")
    print(f"archive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB, {sysconfig.get_platform()}, "
          f"Python {version})")
    for name, why in LEFT_OUT.items():
        print(f"         without {name}: {why}")
    print(f"         every node needs {interpreter} (the archive's bin/python links to it)")
    print(f"built in {time.monotonic() - started:.0f} s; submit with:\n"
          f"  spark-submit --archives {archive}#environment "
          "--conf spark.pyspark.python=./environment/bin/python jobs/compact.py --log-dir ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
