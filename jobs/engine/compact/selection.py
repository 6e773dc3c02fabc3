"""Which partitions a compaction run reads in full: Kafka's cleaner picks a log from sizes, checkpoints and
timestamps; so does segjobs, before it reads any log.

The frame scans every partition at depth ``sizes`` (:mod:`jobs.engine.scan`): file sizes from the listing,
the checkpoints, the ``.timeindex`` and first batch of each closed segment, the active segment's batch headers
(except where the active segment is the only one and the checkpoints lie at or below its base: then nothing is
cleanable whatever it holds, and nothing is read, see :func:`jobs.engine.scan.active_segment_unread`).
That is all Kafka's selection uses except the last stable offset, which only a replay of the log's transactions
gives offline. Leaving it out can only widen the cleanable range: an open transaction lowers the first
uncleanable offset, and with it the cleanable bytes, the dirty ratio and whether a log is due under
``max.compaction.lag.ms``. So a partition the planner does not select on its ``sizes`` scan would not be
selected on a full one either, and is never read further: in a nightly run over a broker's log dir, where
most partitions are clean, that is most of them.

Every partition that may be selected is then scanned at depth ``transactions`` (every batch header of the whole log
and the records of its control batches, replayed into transaction and producer state; no data batch is decompressed,
see :mod:`jobs.engine.scan` for what comes from disk), in bin-packed tasks (on the driver's threads, while the JVM
starts, when the run started its own Spark on this host over a local disk:
:attr:`jobs.engine.frame.job.JobContext.driver_read_threads`), and planned on that (the cleaning task
then reads the records: the dirty section's keys for the offset map, then what it cleans, see
:mod:`jobs.engine.compact.cleaning`). So are the ``compact,delete`` partitions, whose retention runs first and is
planned on the full scan. A small partition that the listing and its cleaner checkpoint say may be due
(:func:`read_at_first_scan`) is read at that depth by the frame's scan itself, on the driver's threads: that read
costs about a millisecond, less than a task's round trip to read it again, so a log dir of thousands of small
partitions has no second scan stage; its scan, plan and cleaning are the same (on an object store the scan keeps
what it fetched on the driver's host, for the cleaning task there:
:attr:`jobs.engine.frame.job.JobContext.host_spool`). What a partition left at depth ``sizes`` does not get: its
report entry gives the cleanable range as if no transaction were open (an open one can only shorten it), and a
corrupt closed segment that a sane ``.timeindex`` dated and whose first batch and end frame well goes unnoticed
until a run compacts it (the check ``retain`` makes, and more than a broker makes before its cleaner reads the
segment); nor does a damaged active segment of a partition that has no other one, which compaction cannot touch
(``retain`` and ``inspect`` read it).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, MutableMapping

from jobs.engine.frame.job import scan_task
from jobs.engine.report.run_report import Progress
from jobs.engine.runtime.tasks import BinTask, TaskFailure, TaskRunner, map_in_driver
from jobs.engine.scan import PartitionError, PartitionScan, ScanItem
from jobs.rules.config import ConfigSet, TopicConfig, never_touched
from jobs.rules.kafka_defaults import LONG_MAX
from jobs.rules.plan_compact import plan_compaction
from jobs.rules.scope import Scope
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, LogDirListing, PartitionListing
from segment_io.storage.base import Storage
from segment_io.storage.spool import HostSpool

TopicPartition = tuple[str, int]

#: The scan depth a compaction run's frame uses (see the module docstring).
SELECTION_DEPTH = "sizes"


def needs_full_scan(scan: PartitionScan, config: TopicConfig, now_ms: int, *, requested: bool) -> bool:
    """Whether compaction must read the partition of ``scan`` in full: it may be selected at ``now_ms``
    (planned on its ``sizes`` scan, which can only over-select; ``requested``: named by the run's scope), or
    retention runs on it first (``compact,delete``). Unreadable partitions and those already scanned in full
    are not read again."""
    if scan.error is not None or scan.txn is not None:
        return False
    if never_touched(scan.topic) or not config.compact:
        return False
    if config.delete:
        return True
    # the same call compaction's work makes for the partition (see jobs.engine.compact.driver.work)
    return plan_compaction(scan.scanned, config, now_ms, requested=requested).selected


#: A partition of at most this many bytes that may be due is read in full by the run's first scan, on the driver's
#: threads (:func:`read_at_first_scan`): its header scan takes about a millisecond.
SMALL_PARTITION_BYTES = 1 << 20
#: At most this many bytes in all are read in full that way (the first partitions in order); the rest are read by
#: the stage of tasks, which a cluster's executors share (the driver's threads are one machine's).
FIRST_SCAN_BUDGET_BYTES = 256 << 20


def _may_be_due(key: TopicPartition, partition: PartitionListing, cleaner: Mapping[TopicPartition, int],
                configs: ConfigSet, scope: Scope) -> bool:
    """A forecast, from the listing and the cleaner checkpoint alone, of whether :func:`needs_full_scan` may pick
    the partition (see :func:`may_read_in_full`)."""
    if not scope.includes(*key) or never_touched(key[0]):
        return False
    config = configs.for_topic(key[0])
    if not config.compact:
        return False
    if config.delete:
        return True
    if len(partition.segments) < 2:
        return False  # the active segment alone: nothing below the first uncleanable offset
    checkpoint = cleaner.get(key)
    return scope.explicit(*key) or checkpoint is None or checkpoint < partition.segments[-1].base_offset


def _dirty_enough(partition: PartitionListing, checkpoint: int | None, config: TopicConfig, requested: bool) -> bool:
    """Whether the closed segments past the cleaner checkpoint, by their file sizes, may reach
    ``min.cleanable.dirty.ratio`` (or another rule may select the partition whatever its bytes). Generous: the plan's
    cleanable bytes stop at the first uncleanable offset, never beyond the active segment."""
    if requested or config.delete or config.max_compaction_lag_ms < LONG_MAX:
        return True
    closed = partition.segments[:-1]
    dirty = sum(s.log.size for s in closed if checkpoint is None or s.base_offset >= checkpoint)
    total = sum(s.log.size for s in closed)
    return total > 0 and dirty / total >= config.min_cleanable_dirty_ratio


def may_read_in_full(listing: LogDirListing, checkpoints: dict[str, dict[tuple[str, int], int]], configs: ConfigSet,
                     scope: Scope) -> bool:
    """A forecast of whether :func:`needs_full_scan` will pick some partition (and so whether the run will need
    Spark), from the listing and the checkpoints alone, before any file is read: some partition in scope is of a
    ``compact,delete`` topic (always read in full), or of a compacted topic with a closed segment and either
    requested by name or holding bytes past its cleaner checkpoint (a clean partition's checkpoint stands at its
    active segment). It can err both ways (dirty bytes below ``min.cleanable.dirty.ratio``; a checkpoint ahead
    of a truncated log); the frame only uses it to start Spark early (``run_job(spark_likely=)``)."""
    cleaner = checkpoints.get(CLEANER_OFFSET_CHECKPOINT, {})
    return any(_may_be_due(key, partition, cleaner, configs, scope) for key, partition in listing.partitions.items())


def read_at_first_scan(listing: LogDirListing, checkpoints: dict[str, dict[tuple[str, int], int]],
                       configs: ConfigSet, scope: Scope) -> set[TopicPartition]:
    """The partitions compaction's first scan reads in full at once (``run_job(read_first=)``): those that may be
    due (:func:`may_read_in_full`'s forecast, per partition) and hold at most :data:`SMALL_PARTITION_BYTES`, in
    partition order up to :data:`FIRST_SCAN_BUDGET_BYTES` in all. Reading one that turns out not due costs its
    header scan (about a millisecond); a partition read this way is never read again by :func:`scan_candidates`,
    and its scan, plan and cleaning are exactly those of a partition read by the stage."""
    cleaner = checkpoints.get(CLEANER_OFFSET_CHECKPOINT, {})
    chosen: set[TopicPartition] = set()
    budget = FIRST_SCAN_BUDGET_BYTES
    for key in sorted(listing.partitions):
        partition = listing.partitions[key]
        size = sum(s.log.size for s in partition.segments)
        if size <= min(SMALL_PARTITION_BYTES, budget) and _may_be_due(key, partition, cleaner, configs, scope) \
                and _dirty_enough(partition, cleaner.get(key), configs.for_topic(key[0]), scope.explicit(*key)):
            chosen.add(key)
            budget -= size
    return chosen


def scan_candidates(scans: MutableMapping[TopicPartition, PartitionScan], *, storage: Storage,
                    listing: LogDirListing, checkpoints: Mapping[str, Mapping[TopicPartition, int]],
                    configs: ConfigSet, scope: Scope, now_ms: int, max_batch_bytes: int, runner: TaskRunner,
                    job_description: Callable[[str], str], warnings: list[str],
                    progress: Progress, spool: HostSpool | None = None, driver_threads: int = 0
                    ) -> list[TopicPartition]:
    """Scan at depth ``transactions`` (tasks of ``runner``, bin-packed by bytes, decoding under ``max_batch_bytes``)
    every partition :func:`needs_full_scan` picks, and put the scans into ``scans`` in place of the
    ``sizes`` ones; new scan warnings go to ``warnings``. A partition that turns out unreadable gets its error
    line, as in the frame's scan. ``spool``: where the scans keep what they fetch from an object store for the
    cleaning tasks (see :class:`~segment_io.storage.spool.HostSpool`). ``driver_threads``: run the scans on that
    many of the driver's threads instead of as tasks (:attr:`jobs.engine.frame.job.JobContext.driver_read_threads`;
    the same scans, a failure of one its own). Returns the keys scanned."""
    keys = [k for k in sorted(scans)
            if needs_full_scan(scans[k], configs.for_topic(k[0]), now_ms, requested=scope.explicit(*k))]
    if not keys:
        return []
    start = checkpoints[LOG_START_OFFSET_CHECKPOINT]
    cleaner = checkpoints[CLEANER_OFFSET_CHECKPOINT]
    items = [ScanItem(storage, listing.partitions[k], "transactions", start.get(k), cleaner.get(k), now_ms,
                      configs.for_topic(k[0]).producer_id_expiration_ms, max_batch_bytes, spool) for k in keys]
    on_driver = driver_threads > 0
    scanner = "on the driver" if on_driver else "task"
    if on_driver:
        results: Iterable[tuple[int, PartitionScan | TaskFailure]] = enumerate(
            map_in_driver(_scan_or_failure, items, threads=driver_threads))
    else:
        sizes = [scans[k].scanned.size_bytes for k in keys]
        description = job_description(f"read the transaction state of {len(keys)} partition(s)")
        results = runner.stream(scan_task, items, sizes=sizes, description=description)
    for i, result in results:
        key = keys[i]
        before = scans[key]
        if isinstance(result, TaskFailure):
            result = PartitionScan(key[0], key[1], before.uri,
                                   error=PartitionError(result.kind, f"the scan {scanner} failed: {result.detail}"))
        warnings.extend(w for w in result.warnings if w not in before.warnings)
        scans[key] = result
        if result.error is not None:
            progress.error(f"{result.name}: UNREADABLE, left untouched: {result.error}",
                           event="partition.unreadable", partition=result.name)
    where = " on the driver" if on_driver else ""
    progress(f"read the batch headers of {len(keys)} of {len(scans)} partition(s) for their transaction state{where} "
             "(the others are not due)",
             event="scan.full", partitions=len(keys), of=len(scans), on_driver=on_driver)
    return keys


def _scan_or_failure(item: ScanItem) -> PartitionScan | TaskFailure:
    """:func:`~jobs.engine.frame.job.scan_task` on the driver: an exception becomes the item's
    :class:`~jobs.engine.runtime.tasks.TaskFailure`, as in a task."""
    return BinTask(scan_task)([item])[0]


__all__ = ["FIRST_SCAN_BUDGET_BYTES", "SELECTION_DEPTH", "SMALL_PARTITION_BYTES", "may_read_in_full",
           "needs_full_scan", "read_at_first_scan", "scan_candidates"]
