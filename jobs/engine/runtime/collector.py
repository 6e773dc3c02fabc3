"""The garbage collector during a run: the heap a process has built before the run's work starts (PySpark, py4j,
numba's kernels, pyarrow, segjobs' modules: some 180,000 tracked objects) never becomes garbage, yet each of
CPython's full collections walks all of it. Over 2,000 small partitions the driver ran seven such collections
(1.1-1.4 s of CPU, a fifth of all its work). :func:`frozen_heap` keeps the collector off that heap for the run's
duration (:func:`gc.freeze`) and gives it back afterwards (:func:`gc.unfreeze`), so a notebook or an Airflow worker
that calls the API keeps its own collector exactly as it was. Reference counting still frees every frozen object
that is dropped; only cyclic garbage among them waits until the run ends."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Within the block, collections look only at what the block allocates. Does nothing if the collector is
    off, or if the process froze objects itself (its freeze is its own to undo)."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


__all__ = ["frozen_heap"]
