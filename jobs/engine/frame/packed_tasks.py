"""Per-partition tasks that read whole logs (transaction scans, inspection), packed by bytes and reported as they end.

One Spark task per partition spends a task's own cost (tens of milliseconds) on each of thousands of small
partitions, and a stage of all of them says nothing until its last task ends. Here partitions are packed into
tasks of consecutive partitions by what reading them costs: their segments' bytes plus, for every segment file,
what opening one costs (:data:`segment_io.spark.options.SPLIT_OPEN_COST_BYTES`, the weight the ``kafka-segments``
source packs segments by), into tasks of up to :data:`TASK_COST_BYTES` of it (the source's default split): over
1,720 single-segment partitions, 14 tasks, as the source reads those segments in. Each task's results come back
as it ends, and the run says how far it is: a progress line when results come back, at most every
:data:`PROGRESS_EVERY_S`, and a line saying what is still running whenever nothing has come back for that long
(Spark starting its Python workers, one large partition), so it is never silent for longer.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence, TypeVar

from jobs.engine.runtime.tasks import STREAM_TARGET_BYTES, BinTask, TaskFailure, TaskRunner
from jobs.engine.scan import PartitionError, PartitionScan, ScanItem
from segment_io.layout import PartitionListing
from segment_io.spark.options import DEFAULT_MAX_SPLIT_BYTES, SPLIT_OPEN_COST_BYTES
from segment_io.units import format_duration

T = TypeVar("T")
R = TypeVar("R")

#: The longest a packed stage goes without a progress line, in seconds.
PROGRESS_EVERY_S = 3.0
#: The read cost (:func:`read_cost`) of one task: what one task of the ``kafka-segments`` source reads. Each task is
#: a Spark job of its own (results come back as it ends), which costs more than a task of one job does: a task of
#: a few small partitions would spend more on that than on its work.
TASK_COST_BYTES = DEFAULT_MAX_SPLIT_BYTES


def log_bytes(listing: PartitionListing) -> int:
    """The bytes of the segments of ``listing``: what progress lines count."""
    return sum(s.log.size for s in listing.segments)


def read_cost(listing: PartitionListing) -> int:
    """What reading the whole log of ``listing`` costs a task, in bytes: its segments' bytes plus the cost of
    opening each segment file."""
    return sum(s.log.size + SPLIT_OPEN_COST_BYTES for s in listing.segments)


class StageProgress:
    """The progress lines of one packed stage: ``<doing>: 3 of 8 partition(s) done, 12.0 of 43.1 MB`` (of
    ``sizes``, each item's bytes) when results
    come back (at most every ``every_s``), and the same line again whenever there was none for ``every_s``, with
    ``still running`` when no result came back meanwhile either."""

    def __init__(self, emit: Callable[..., None], doing: str, sizes: Sequence[int], event: str, *,
                 every_s: float = PROGRESS_EVERY_S) -> None:
        self.emit, self.doing, self.event, self.every_s = emit, doing, event, every_s
        self.sizes = list(sizes)
        self.total = len(self.sizes)
        self.done = 0
        self.done_bytes = 0
        self.started = self.last = self.last_result = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="segjobs-stage-progress", daemon=True)

    def __enter__(self) -> "StageProgress":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def finished(self, indices: Sequence[int]) -> None:
        """The items ``indices`` came back: a line when the last one was ``every_s`` ago or this is the end."""
        with self._lock:
            self.done += len(indices)
            self.done_bytes += sum(self.sizes[i] for i in indices)
            self.last_result = time.monotonic()
            if self.done == self.total or self.last_result - self.last >= self.every_s:
                self._line(still=False)

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s / 4):
            with self._lock:
                now = time.monotonic()
                if now - self.last >= self.every_s and self.done < self.total:
                    self._line(still=now - self.last_result >= self.every_s)

    def _line(self, *, still: bool) -> None:
        """Emit a line (under the lock)."""
        now = time.monotonic()
        self.last = now
        mb = f"{self.done_bytes / 1e6:,.1f} of {sum(self.sizes) / 1e6:,.1f} MB"
        tail = f", still running after {format_duration(int((now - self.started) * 1000))}" if still else ""
        self.emit(f"{self.doing}: {self.done:,} of {self.total:,} partition(s) done, {mb}{tail}",
                  event=self.event, done=self.done, of=self.total, seconds=round(now - self.started, 3))


def run_packed(runner: TaskRunner, fn: Callable[[T], R], items: Sequence[T], costs: Sequence[int], *,
               description: str, progress: StageProgress,
               on_failure: Callable[[T, TaskFailure], R]) -> list[R]:
    """``[fn(item) for item in items]`` as packed tasks (:meth:`TaskRunner.stream` with ``costs`` as sizes), in
    the order of ``items``; ``progress`` is told as bins end. An item whose task died, or whose ``fn`` raised,
    becomes ``on_failure(item, failure)``: the other items of its bin are not affected."""
    results: list[R | None] = [None] * len(items)
    # The runner packs sizes into bins of STREAM_TARGET_BYTES: costs in units that make a bin TASK_COST_BYTES.
    sizes = [max(1, cost * STREAM_TARGET_BYTES // TASK_COST_BYTES) for cost in costs]
    with progress:
        for pairs in runner.stream_bins(BinTask(fn), items, sizes=sizes, description=description):
            for index, result in pairs:
                results[index] = on_failure(items[index], result) if isinstance(result, TaskFailure) else result
            progress.finished([index for index, _ in pairs])
    return results  # type: ignore[return-value]  # every index came back


def failed_scan(item: ScanItem, failure: TaskFailure) -> PartitionScan:
    """The scan of a partition whose task died: the partition is reported unreadable and left untouched, as a
    scan that raised."""
    listing = item.listing
    return PartitionScan(listing.topic, listing.partition, listing.uri,
                         error=PartitionError(failure.kind, failure.detail))


__all__ = ["PROGRESS_EVERY_S", "TASK_COST_BYTES", "StageProgress", "failed_scan", "log_bytes", "read_cost",
           "run_packed"]
