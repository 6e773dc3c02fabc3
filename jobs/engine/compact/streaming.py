"""Tasks whose results are acted on as they finish: a job's per-partition commits overlap its remaining tasks.

Over thousands of small partitions, waiting for every cleaning task and then committing the partitions one after
another would add the commits up (a chain of small writes, renames and directory fsyncs each: latency, not CPU)
and print nothing until the last task ended. Instead a driver thread takes each partition's result as
its task finishes (:meth:`jobs.engine.runtime.tasks.TaskRunner.stream`), checks it (``prepare``, on the driver's
thread: it may touch shared state) and hands its commit (``settle``) to a commit thread, which commits the
partitions in partition order while the remaining tasks run. Each partition's commit keeps the crash-safe
protocol of :mod:`jobs.logdir.commit`; a lost lease or a kill stops the run between two partitions.
:func:`run_and_settle_bins` does the same a bin at a time: one task call cleans a bin's partitions, and the
commit thread gets them together, to commit in lockstep (one durability barrier per protocol step for the bin,
see :meth:`jobs.logdir.commit.Committer.replace_lockstep`).

:class:`Tally` words the running count, bytes done and an ETA of the progress lines.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

from jobs.engine.report.run_report import human_bytes
from jobs.engine.runtime.tasks import BinTask, TaskFailure, TaskRunner
from segment_io.storage.traffic import in_context

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")


class Tally:
    """Counts finished partitions and their bytes for the progress lines: ``[12/500, 1.9 MB of 63.5 MB,
    ETA 31s]``. The ETA extrapolates the bytes per second since the tally started, once 5% of the bytes are
    done (before that, the first tasks' start-up, the Python workers' imports, would dominate the rate).
    Thread-safe: the commit thread reports to it."""

    def __init__(self, items: int, total_bytes: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.items = items
        self.total_bytes = total_bytes
        self.done_items = 0
        self.done_bytes = 0
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> str:
        """Count one finished item of ``nbytes`` and return the progress suffix after it."""
        with self._lock:
            self.done_items += 1
            self.done_bytes += max(0, int(nbytes))
            return self._suffix()

    def _suffix(self) -> str:
        text = f"[{self.done_items}/{self.items}, {human_bytes(self.done_bytes)} of {human_bytes(self.total_bytes)}"
        eta = self.eta_seconds()
        if eta is not None:
            text += f", ETA {_duration(eta)}"
        return text + "]"

    def fields(self) -> dict[str, float | int | None]:
        """The tally as structured fields of a progress event (``--log-format json``)."""
        with self._lock:
            eta = self.eta_seconds()
            return {"done": self.done_items, "of": self.items, "bytes_done": self.done_bytes,
                    "bytes_total": self.total_bytes, "eta_s": None if eta is None else round(eta, 1)}

    def eta_seconds(self) -> float | None:
        """Seconds left at the rate so far (0 when everything is done, None before 5% of the bytes are)."""
        if self.done_items >= self.items:
            return 0.0
        if self.done_bytes <= 0 or self.done_bytes * 20 < self.total_bytes:
            return None
        elapsed = self._clock() - self._t0
        return elapsed * max(self.total_bytes - self.done_bytes, 0) / self.done_bytes


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m{s % 60:02d}s"


def run_and_settle(runner: TaskRunner, fn: Callable[[T], R], items: Sequence[T], *, sizes: Sequence[int],
                   prepare: Callable[[int, "R | TaskFailure"], R], settle: Callable[[int, R], S],
                   settled: dict[int, S] | None = None, description: str | None = None) -> dict[int, S]:
    """Run ``fn`` over ``items`` as bin-packed tasks (``sizes`` in bytes) and, as each item's result arrives,
    call ``prepare(index, result)`` on this thread (it turns a :class:`TaskFailure` into the item's own error
    result, and may touch shared state), then ``settle(index, prepared)`` on a commit thread, in item order:
    item ``i`` is settled once items ``0..i-1`` are (the tasks are consecutive runs of items, submitted in
    order, so little waits). Returns ``settle``'s results by index, gathered into ``settled`` (a new dict when
    not given) as each commit completes. ``description`` names the tasks' Spark jobs (as for
    :meth:`jobs.engine.runtime.tasks.TaskRunner.map`).

    One commit at a time, in order, as the job did before its commits overlapped its tasks: a lost lease or a
    kill stops the run between two partitions, the earlier ones committed and the later ones untouched. If a
    ``settle`` raises (e.g. :class:`jobs.logdir.lock.LeaseLost` before a commit), nothing after it is settled,
    the remaining tasks are abandoned, and the exception is raised; ``settled`` (the caller's) then holds the
    results settled so far, so the caller can report them."""

    def settle_one_by_one(batch: list[tuple[int, R]], emit: Callable[[int, S], None]) -> None:
        for index, result in batch:
            emit(index, settle(index, result))

    return run_and_settle_bins(runner, BinTask(fn), items, sizes=sizes, prepare=prepare, settle=settle_one_by_one,
                               settled=settled, description=description)


def run_and_settle_bins(runner: TaskRunner, bin_fn: Callable[[list[T]], Sequence["R | TaskFailure"]],
                        items: Sequence[T], *, sizes: Sequence[int], prepare: Callable[[int, "R | TaskFailure"], R],
                        settle: Callable[[list[tuple[int, R]], Callable[[int, S], None]], None],
                        settled: dict[int, S] | None = None, description: str | None = None) -> dict[int, S]:
    """:func:`run_and_settle` a bin at a time: ``bin_fn`` gets a whole bin of items in one task call and returns
    their results (an item's own failure as its :class:`TaskFailure`), and ``settle(batch, emit)`` gets the bin's
    prepared results together (``[(index, prepared), ...]``, in item order), on the commit thread, bins in item
    order, and calls ``emit(index, value)`` for each item it has settled: what was emitted before a ``settle``
    raised is in ``settled``, as with :func:`run_and_settle`. So a bin's partitions are committed together (see
    :meth:`jobs.logdir.commit.Committer.replace_lockstep`)."""
    settled = {} if settled is None else settled
    failure: list[BaseException] = []
    guard = threading.Lock()

    def emit(index: int, value: S) -> None:
        with guard:
            settled[index] = value

    def one(batch: list[tuple[int, R]]) -> None:
        with guard:
            if failure:
                return
        try:
            settle(batch, emit)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            with guard:
                failure.append(exc)

    futures: list[Future] = []
    ready: dict[int, list[tuple[int, R]]] = {}  # bins by their first index
    next_index = 0
    # one thread: commits in submission order, which is item order
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="segjobs-commit") as pool:
        stream = runner.stream_bins(bin_fn, items, sizes=sizes, description=description)
        try:
            for pairs in stream:
                with guard:
                    if failure:
                        break
                batch = sorted((index, prepare(index, result)) for index, result in pairs)
                if not batch:
                    continue
                ready[batch[0][0]] = batch
                while next_index in ready:
                    batch = ready.pop(next_index)
                    futures.append(pool.submit(in_context(one), batch))
                    next_index = batch[-1][0] + 1
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # cancels the tasks not yet finished when we stopped early
    # (leaving the pool waited for the commits under way)
    for f in futures:
        f.result()
    if failure:
        raise failure[0]
    return settled


__all__ = ["Tally", "run_and_settle", "run_and_settle_bins"]
