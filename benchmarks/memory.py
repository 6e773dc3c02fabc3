"""Peak resident memory of the whole process tree: this Python process, the Spark JVM it launched and the
Python workers the JVM forked.

Spark's memory lives mostly outside the driver's Python process, so ``resource.getrusage`` (one process, or
only waited-for children) would under-report it. A background thread sums the RSS of the process and all
its descendants every ``interval`` seconds and keeps the maximum. Sampling can miss a spike shorter than
the interval; the result is a lower bound, close for the steady allocations that matter here.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

import psutil


def tree_rss(pid: int | None = None) -> int:
    """Bytes resident right now in process ``pid`` (default: this one) and all its descendants."""
    root = psutil.Process(pid or os.getpid())
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass  # a worker that exited between listing and reading: it holds nothing any more
    return total


class PeakTreeRss:
    """Context manager sampling :func:`tree_rss` in a thread; ``peak_bytes`` is the largest sample, and
    ``start_bytes`` the tree's RSS when sampling began (what was resident before the measured work)."""

    def __init__(self, interval: float = 0.05, pid: int | None = None) -> None:
        self.interval = interval
        self.pid = pid or os.getpid()
        self.start_bytes = 0
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, tree_rss(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakTreeRss":
        self.start_bytes = self.peak_bytes = tree_rss(self.pid)
        self._thread = threading.Thread(target=self._sample, name="peak-tree-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_bytes = max(self.peak_bytes, tree_rss(self.pid))

    @property
    def peak_mb(self) -> int:
        return round(self.peak_bytes / 1e6)

    @property
    def start_mb(self) -> int:
        return round(self.start_bytes / 1e6)
