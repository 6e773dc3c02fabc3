"""The Python worker daemon of the Spark sessions segjobs builds (``spark.python.daemon.module``).

PySpark starts one daemon per executor and forks a Python worker from it for each worker it needs; a fresh
worker then imports pyarrow, numpy, numba and segjobs' task modules (over a second) and loads each kernel's
cached code at its first call (about a second more), and pyarrow imports pandas at its first array conversion.
This daemon does all of it once, before it forks, so every worker starts with them. Then it is PySpark's own
daemon (:func:`pyspark.daemon.manager`).

PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task. Over the heap these imports
build (some 170,000 tracked objects) that took about 75 ms of CPU a task, more than a small partition's whole
cleaning; so the daemon freezes that heap (:func:`gc.freeze`) before it forks: its workers' collections then only
look at what their tasks allocated. The frozen objects are modules, classes and compiled kernels, which live as
long as the process anyway; a worker's pages of them also stay shared with the daemon, which a collection
(writing every object's header) would otherwise copy.

PySpark's daemon imports its worker module after the fork, since a library that starts threads at import time
makes a fork unsafe in general. numpy's BLAS threads are not started (segjobs does no linear algebra:
one BLAS thread); pyarrow's own pools are re-created in a forked child (Arrow's at-fork handlers).
"""

from __future__ import annotations

import gc
import importlib
import os


def preload() -> None:
    """Import the modules every segjobs task uses, load their kernels' cached code, and freeze the heap that
    built (see the module docstring)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: no BLAS thread pool to fork over
    from jobs.engine.runtime.kernels import KERNEL_MODULES, load_cached_kernels

    # pandas: pyarrow imports it at its first conversion of an array (a task's first decode), over half a second
    # of CPU that every worker would otherwise pay on its own; segjobs' modules no longer import it themselves
    for name in ("numpy", "pyarrow", "pandas", *KERNEL_MODULES, "jobs.engine.frame.job", "jobs.engine.compact.cleaning",
                 "jobs.engine.compact.driver", "jobs.engine.compact.external_sort", "jobs.engine.retain.driver",
                 "jobs.engine.inspect.driver", "segment_io.spark.source", "pyspark.worker"):
        importlib.import_module(name)
    load_cached_kernels()
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
