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
from typing import Self

import psutil


def process_tree(pid: int) -> list[psutil.Process]:
    """Process ``pid`` and all its descendants right now (empty once it has exited)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(pid: int | None = None) -> int:
    """Bytes resident right now in process ``pid`` (default: this one) and all its descendants."""
    total = 0
    for proc in process_tree(pid or os.getpid()):
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

    def __enter__(self) -> Self:
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


def _status_kb(pid: int, fields: tuple[str, ...]) -> dict[str, int]:
    """Fields of /proc/<pid>/status in bytes (Linux); empty where it cannot be read."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name in fields:
                    out[name] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def process_role(proc: psutil.Process, root_pid: int) -> str:
    """``driver`` (the root), ``jvm`` (a java process), ``python worker`` (a forked pyspark worker or
    daemon), or ``other``."""
    if proc.pid == root_pid:
        return "driver"
    try:
        name = proc.name()
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "other"
    if name == "java" or "java" in cmd.split(" ")[0]:
        return "jvm"
    if "pyspark" in cmd or "python" in name:
        return "python worker"
    return "other"


class PeakRssByRole(PeakTreeRss):
    """:class:`PeakTreeRss` that also keeps, per role (:func:`process_role`), the largest RSS of any one process
    of that role and its split into anonymous memory (heap, arrays: what a task allocates) and file-backed
    pages (memory-mapped segment files and libraries: page cache, reclaimable, shared).

    Spark forks Python workers from a daemon, so a worker's RSS includes pages it shares with the daemon;
    the figures are per process as the kernel reports them (an upper bound of what the task added)."""

    def __init__(self, interval: float = 0.05, pid: int | None = None) -> None:
        super().__init__(interval, pid)
        #: role -> (peak RSS, RssAnon at that sample, RssFile at that sample) of the single largest process
        self.peak_by_role: dict[str, tuple[int, int, int]] = {}
        #: role -> largest RssAnon of one process of that role
        self.peak_anon_by_role: dict[str, int] = {}

    def _sample(self) -> None:
        while not self._stop.is_set():
            procs = process_tree(self.pid)
            if not procs:
                return
            total = 0
            for proc in procs:
                st = _status_kb(proc.pid, ("VmRSS", "RssAnon", "RssFile"))
                rss = st.get("VmRSS", 0)
                total += rss
                role = process_role(proc, self.pid)
                if rss > self.peak_by_role.get(role, (0, 0, 0))[0]:
                    self.peak_by_role[role] = (rss, st.get("RssAnon", 0), st.get("RssFile", 0))
                self.peak_anon_by_role[role] = max(self.peak_anon_by_role.get(role, 0), st.get("RssAnon", 0))
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval)

    def role_mb(self, role: str) -> dict[str, int]:
        """Peak RSS of the largest process of ``role`` in MB, with its anonymous/file split and the largest
        anonymous RSS seen."""
        rss, anon, file_ = self.peak_by_role.get(role, (0, 0, 0))
        return {"peak_MB": round(rss / 1e6), "anon_MB_then": round(anon / 1e6), "file_MB_then": round(file_ / 1e6),
                "peak_anon_MB": round(self.peak_anon_by_role.get(role, 0) / 1e6)}
