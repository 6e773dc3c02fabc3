"""The external-sort compaction strategy: exact in one run for any number of keys, parallel inside a partition,
its memory bounded by configuration (the bucket size), not by the partition's key count.

The memory strategy (:func:`jobs.engine.compact.cleaning.compact_partition`) is one task per partition with a bounded
offset map; a partition with more dirty keys than the map holds is cleaned partially, like Kafka's cleaner.
This strategy splits the same clean into three stages of plain tasks that Spark spreads over every core (and
every executor), with the decisions of :mod:`jobs.rules.external_sort`:

1. **Key pass** (one task per segment, big segments split at batch boundaries; on an object store each reads
   the copy the partition's transaction-state scan left on its host, where there is one): decode only offsets,
   128-bit key hashes and batch flags of the piece (keys and values never leave the task) and pre-aggregate them with a
   compiled kernel (:func:`jobs.rules.external_sort.piece_rows`): one row per key of the piece (its first
   offset there, its latest mappable offset there), ordered by hash bucket, written as one file to the run's
   work dir (``external-sort/run-<id>/<partition>/piece-*.rows``); the task returns only the rows per bucket.
2. **Reduce** (one task per bucket): read every piece's share of the bucket (one ranged read per piece: a
   bucket is a contiguous range of each piece file), and with a compiled hash table
   (:func:`jobs.rules.external_sort.reduce_bucket`) find each key's latest offset in the partition and the
   (group, key) pairs some later record supersedes; write them ordered by group as one file
   (``bucket-<b>.map``); return the rows per group. A key lives in exactly one bucket, so the buckets are
   independent; the number of buckets is chosen so that one bucket's reduce fits ``sort_bucket_bytes``.
3. **Rewrite** (one task per segment group, several groups of a partition at once): each group is cleaned from
   its source segments with the memory strategy's own group cleaner and an offset map holding only its
   superseded keys (its range of every bucket file), so every record, batch, index and ``.txnindex`` comes out
   as a memory pass with a large enough buffer writes them.

The files move between the stages through the work dir, which lives on the log dir's own storage (a local or
shared file system, or the S3 prefix): every executor of a cluster already reads the segments and stages new
ones there, so it reaches these files too, with no shuffle service and no row crossing into the JVM. The driver
gets counts (rows per piece and bucket, per bucket and group), never per-key data. The result of a partition is
the memory strategy's :class:`~jobs.engine.compact.cleaning.PartitionOutcome` with staged segments, committed by the
driver's unchanged crash-safe loop. The same stages run through any task runner (``InProcessTasks`` in tests).
"""

from __future__ import annotations

import mmap
import shutil
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, ContextManager, Sequence, TypeVar

import numpy as np

from jobs.engine.compact.cleaning import (
    CompactTask,
    Handoff,
    Handover,
    PartitionCleaner,
    PartitionOutcome,
    delete_quietly,
    piece_of,
    write_rows,
)
from jobs.engine.report.run_report import listed
from jobs.engine.runtime.tasks import TaskRunner
from jobs.engine.scan import PartitionError
from jobs.logdir.commit import EXTERNAL_SORT_DIR
from jobs.rules.cleaner import CleanStats
from jobs.rules.external_sort import (
    MAP_COLUMNS,
    PIECE_COLUMNS,
    StrategyChoice,
    bucket_count,
    choose_strategy,
    dirty_record_bound,
    group_offset_map,
    reduce_bucket,
)
from jobs.rules.model import SegmentInfo
from jobs.rules.plan_compact import group_segments_by_size
from jobs.rules.transactions import AbortedTxns
from segment_io.decode import decode_key_hashes_bytes
from segment_io.errors import CorruptRecordError, SegjobsError, StorageEnvironmentError
from segment_io.format import batch_positions
from segment_io.storage.base import FileInfo, Storage
from segment_io.storage.spool import HostSpool

T = TypeVar("T")
R = TypeVar("R")

#: A segment bigger than this is read by several key-pass tasks, each taking the batches that start in its
#: share of the bytes: a 1 GiB segment becomes 16 tasks.
SPLIT_BYTES = 64 << 20
#: Where the piece and bucket files live, under the job's work dir (``<WORK_SUBDIR>/run-<run id>/<partition>``,
#: ``dry-<run id>`` for a dry run), removed at the end of the run.
WORK_SUBDIR = EXTERNAL_SORT_DIR
#: Bytes of one piece row and of one group-map row in the work files (little-endian int64 columns, row-major).
PIECE_ROW_BYTES = 8 * len(PIECE_COLUMNS)
MAP_ROW_BYTES = 8 * len(MAP_COLUMNS)
#: ``sort_bucket_bytes`` when not given: a quarter of an executor's memory (``spark.executor.pyspark.memory``
#: when set, else ``spark.executor.memory``, 1g by default: 256 MiB), within these bounds.
MIN_BUCKET_BYTES = 64 << 20
MAX_BUCKET_BYTES = 1 << 30


# --------------------------------------------------------------------------------------------------
# Choosing
# --------------------------------------------------------------------------------------------------


def choose(tasks: Sequence[CompactTask], requested: str) -> dict[tuple[str, int], StrategyChoice]:
    """The strategy of every task's partition (see :func:`jobs.rules.external_sort.choose_strategy`)."""
    out = {}
    for t in tasks:
        bound = dirty_record_bound(t.state, t.plan.first_dirty_offset, t.plan.first_uncleanable_offset)
        out[(t.plan.topic, t.plan.partition)] = choose_strategy(requested, dirty_records=bound, max_keys=t.max_keys)
    return out


def default_bucket_bytes(runner: TaskRunner) -> int:
    """``sort_bucket_bytes`` when not given: a quarter of an executor's memory, between
    :data:`MIN_BUCKET_BYTES` and :data:`MAX_BUCKET_BYTES` (256 MiB with Spark's default 1g, and without Spark)."""
    memory = runner.executor_memory_bytes() or 1 << 30
    return max(MIN_BUCKET_BYTES, min(MAX_BUCKET_BYTES, memory // 4))


# --------------------------------------------------------------------------------------------------
# Stage 1: key pass (runs in tasks)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PieceItem:
    """One key-pass task: the batches of one segment starting in ``[split * size / splits, ...)``, of group
    ``g`` of partition ``p``, written to ``out_uri`` in ``buckets`` buckets."""

    p: int
    g: int
    storage: Storage
    uri: str
    split: int
    splits: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted: AbortedTxns
    buckets: int
    out_uri: str
    max_batch_bytes: int  #: the run's decompression bound
    size: int = 0  #: the segment's bytes
    #: on an object store: the segment as listed, and the run's copies on each host, which hold it where the
    #: partition's transaction-state scan ran (every piece of the segment then reads that copy, not the object)
    log: FileInfo | None = None
    host_spool: HostSpool | None = None

    def mapped(self) -> ContextManager[bytes | memoryview | mmap.mmap]:
        """The segment's bytes: the scan's copy on this host, else the store's (on S3 one GET of the object)."""
        copy = self.host_spool.mapped(self.log) if self.host_spool is not None and self.log is not None else None
        return copy if copy is not None else self.storage.read_mapped(self.uri)


@dataclass
class PieceResult:
    """What a key-pass task returns: the rows it wrote per bucket (or why it failed)."""

    counts: np.ndarray
    error: PartitionError | None = None
    seconds: float = 0.0


def read_key_hashes(item: PieceItem) -> Any:
    """The KEY_HASH_SCHEMA rows of ``item``'s share of its segment (whole batches: those starting in it)."""
    with item.mapped() as data:
        view = memoryview(data)
        start, end = 0, len(view)
        if item.splits > 1:
            positions, _, _ = batch_positions(data, path=item.uri, allow_truncated_tail=False)
            cut = np.append(positions, len(view))
            bounds = np.searchsorted(cut, [item.split * len(view) // item.splits,
                                           (item.split + 1) * len(view) // item.splits])
            start, end = int(cut[int(bounds[0])]), int(cut[int(bounds[1])])
        try:
            return decode_key_hashes_bytes(view[start:end], path=item.uri, max_batch_bytes=item.max_batch_bytes)
        except CorruptRecordError as exc:
            if start and exc.position is not None:
                exc.position += start  # report the file's byte, not the slice's
            raise
        finally:
            del view
def read_rows(storage: Storage, uri: str, start_row: int, rows: int, columns: int) -> np.ndarray:
    """Rows ``[start_row, start_row + rows)`` of a work file of ``columns`` int64 columns: one ranged read."""
    data = storage.read_range(uri, start_row * 8 * columns, rows * 8 * columns)
    if len(data) != rows * 8 * columns:
        raise SegjobsError(f"{uri}: expected {rows * 8 * columns} bytes at {start_row * 8 * columns}, got "
                           f"{len(data)} (a work file changed under the run)")
    return np.frombuffer(data, "<i8").reshape(rows, columns)


def read_piece(item: PieceItem) -> PieceResult:
    """Stage 1 for one piece: its rows per bucket written to ``item.out_uri`` (nothing when it has no keys)."""
    t0 = time.monotonic()
    try:
        table = read_key_hashes(item)
        rows, counts = piece_of(table, first_dirty_offset=item.first_dirty_offset,
                                first_uncleanable_offset=item.first_uncleanable_offset, aborted=item.aborted,
                                buckets=item.buckets)
        del table
        if len(rows):
            write_spill(item.storage, item.out_uri, rows)
        return PieceResult(counts, seconds=time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - the partition fails, the others go on
        return PieceResult(np.zeros(item.buckets, np.int64), _task_error(exc), time.monotonic() - t0)


def write_spill(storage: Storage, uri: str, rows: np.ndarray) -> None:
    """One work file of the sort (:func:`~jobs.engine.compact.cleaning.write_rows`). Out of space is the machine's
    fault, said as such (:class:`~segment_io.errors.StorageEnvironmentError`, the bytes needed and free) with what fixes
    it here: the work files go to the log dir's work dir, not beside the segments. A file the machine refused is
    removed at once, so its partial bytes do not fail the other partitions' files too."""
    try:
        write_rows(storage, uri, rows)
    except StorageEnvironmentError as exc:
        delete_quietly(storage, [uri])  # what a full disk took of it goes back to the other partitions' files
        if not exc.out_of_space:
            raise
        work = uri.split(f"/{WORK_SUBDIR}/", 1)[0]
        raise StorageEnvironmentError(
            exc.reason, uri=exc.uri, errno_name=exc.errno_name, needed_bytes=exc.needed_bytes,
            free_bytes=exc.free_bytes,
            fix=f"the external sort writes its work files (about {PIECE_ROW_BYTES} bytes per dirty key, twice) to "
                f"the work dir {work} beside the log dir: free space on its filesystem and run again, or compact "
                f"these partitions with --strategy memory (no work files; a partition with more dirty keys than "
                f"the offset map holds is then cleaned over several runs)") from None


# --------------------------------------------------------------------------------------------------
# Stage 2: buckets (runs in tasks)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    """Rows ``[start, start + rows)`` of a work file."""

    uri: str
    start: int
    rows: int


@dataclass(frozen=True)
class BucketItem:
    """One reduce task: bucket ``b`` of partition ``p``, its rows in every piece (in group order, with each
    piece's group), reduced into ``out_uri``."""

    p: int
    b: int
    storage: Storage
    pieces: tuple[tuple[Slice, int], ...]
    groups: int
    out_uri: str


@dataclass
class BucketResult:
    """What a reduce task returns: the superseded keys it wrote per group (or why it failed)."""

    p: int
    b: int
    counts: np.ndarray
    error: PartitionError | None = None
    seconds: float = 0.0


def reduce_bucket_item(item: BucketItem) -> BucketResult:
    """Stage 2 for one bucket: its group maps, ordered by group, written to ``item.out_uri``."""
    t0 = time.monotonic()
    try:
        parts = [read_rows(item.storage, s.uri, s.start, s.rows, len(PIECE_COLUMNS)) for s, _ in item.pieces]
        rows = np.concatenate(parts) if parts else np.zeros((0, len(PIECE_COLUMNS)), np.int64)
        group = np.repeat(np.asarray([g for _, g in item.pieces], np.int32),
                          [s.rows for s, _ in item.pieces]) if parts else np.zeros(0, np.int32)
        del parts
        out, counts = reduce_bucket(rows, group, item.groups)
        del rows, group
        if len(out):
            write_spill(item.storage, item.out_uri, out)
        return BucketResult(item.p, item.b, counts, seconds=time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001
        return BucketResult(item.p, item.b, np.zeros(item.groups, np.int64), _task_error(exc),
                            time.monotonic() - t0)


# --------------------------------------------------------------------------------------------------
# Stage 3: group rewrites (runs in tasks)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupItem:
    """One rewrite task: group ``g`` of partition ``p`` (``task`` is the memory strategy's task of it)."""

    p: int
    g: int
    task: CompactTask
    group: tuple[SegmentInfo, ...]
    #: the group's superseded keys: its range of every bucket file that has some
    maps: tuple[Slice, ...]


@dataclass
class GroupResult:
    """What a rewrite task returns: statistics, never record data."""

    p: int
    g: int
    outcome: Any = None  # GroupOutcome
    stats: Any = None  # CleanStats
    staged: list[str] = field(default_factory=list)
    error: PartitionError | None = None
    seconds: float = 0.0


def clean_group_item(item: GroupItem) -> GroupResult:
    """Clean (stage, or in a dry run measure) one group with its superseded keys; see the module docstring."""
    t0 = time.monotonic()
    out = GroupResult(item.p, item.g)
    try:
        plan = item.task.plan
        parts = [read_rows(item.task.storage, m.uri, m.start, m.rows, len(MAP_COLUMNS)) for m in item.maps]
        rows = np.concatenate(parts) if parts else np.zeros((0, len(MAP_COLUMNS)), np.int64)
        del parts
        omap = group_offset_map(rows[:, 0], rows[:, 1], rows[:, 2], start_offset=plan.first_dirty_offset,
                                end_offset=plan.first_uncleanable_offset)
        del rows
        # the memory strategy's group cleaner itself: the same decisions, encoder and files, by construction
        run = PartitionCleaner(item.task, out.staged).clean_group(item.group, omap)
        out.outcome, out.stats = run.outcome, run.stats
    except Exception as exc:  # noqa: BLE001 - one group's failure fails its partition, not the run
        out.error = _task_error(exc)
        delete_quietly(item.task.storage, out.staged)
        out.staged = []
    out.seconds = time.monotonic() - t0
    return out


def _task_error(exc: BaseException) -> PartitionError:
    return PartitionError.from_task_exception(exc)


# --------------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------------


@dataclass
class _Partition:
    p: int
    task: CompactTask
    groups: list[tuple[SegmentInfo, ...]]
    work: str  #: this partition's external-sort dir in the work dir
    outcome: PartitionOutcome
    t0: float
    buckets: int = 1
    key_tasks: int = 0
    superseded: int = 0
    #: seconds the tasks of each stage worked for this partition (summed over tasks)
    task_seconds: dict[str, float] = field(default_factory=dict)
    #: per group, its slices of the bucket files
    maps: list[list[Slice]] = field(default_factory=list)
    handed: Handover | None = None


class ExternalSortRun:
    """The external-sort side of one compaction run: its work dir, its bucket size, the hand-over specs of the
    memory-first partitions, and the stages over the partitions that take this strategy.

    Made before any cleaning task starts (a real run holds the log dir's lock, so another real run's dir under
    the work dir can only be a crashed run's leftover: it goes now); :meth:`close` removes this run's files.
    One dir per run: a dry run (which takes no lock) may run beside a real one."""

    def __init__(self, storage: Storage, work_uri: str, run_id: str, *, dry_run: bool, runner: TaskRunner,
                 describe: Callable[[str], str], progress: Callable[[str], None],
                 bucket_bytes: int | None = None) -> None:
        """``runner`` runs the stages' tasks, their Spark jobs named ``describe(what)``; ``progress`` is told
        how long each stage took; ``bucket_bytes``: ``--sort-bucket-bytes`` (None: from the executors' memory)."""
        self.storage = storage
        self.runner = runner
        self.describe = describe
        self.progress = progress
        self._bucket_bytes = bucket_bytes
        sort_root = storage.join(work_uri, WORK_SUBDIR)
        if not dry_run:
            for d in storage.list_dirs(sort_root):
                if d.rstrip("/").rsplit("/", 1)[-1].startswith("run-"):
                    _clear(storage, d)
        self.run_dir = storage.join(sort_root, f"{'dry' if dry_run else 'run'}-{run_id}")

    @cached_property
    def bucket_bytes(self) -> int:
        """The bucket size; asked only when a partition is sorted (the default reads Spark's settings, which
        starts Spark)."""
        return self._bucket_bytes or default_bucket_bytes(self.runner)

    def layout(self, t: CompactTask) -> tuple[list[tuple[SegmentInfo, ...]], str, int]:
        """A partition's segment groups (every segment below the first uncleanable offset, grouped as the
        memory strategy groups them when its map does not fill), work dir and bucket count."""
        cfg = t.config
        end = t.plan.first_uncleanable_offset
        groups = group_segments_by_size([s for s in t.state.segments if s.base_offset < end], cfg.segment_bytes,
                                        cfg.segment_index_bytes, end, cfg.index_interval_bytes)
        work = self.storage.join(self.run_dir, f"{t.plan.topic}-{t.plan.partition}")
        records = sum(_records_bound(s) for g in groups for s in g)
        return groups, work, bucket_count(records, self.bucket_bytes, self.runner.parallelism)

    def handoff(self, t: CompactTask) -> Handoff:
        """What a memory-first task of ``t``'s partition needs to hand it over (see :class:`PieceCollector`)."""
        groups, work, buckets = self.layout(t)
        return Handoff(work, tuple((s.base_offset, g) for g, group in enumerate(groups) for s in group), buckets,
                       self.bucket_bytes)

    def run(self, tasks: Sequence[CompactTask], details: dict[tuple[str, int], dict[str, Any]],
            handed: dict[tuple[str, int], Handover] | None = None) -> dict[tuple[str, int], PartitionOutcome]:
        """Clean every partition of ``tasks`` with the external-sort strategy; outcomes as the memory
        strategy's. ``handed``: the pieces memory-first tasks wrote before their map filled (their segments
        are not read again). ``details`` receives, per partition, what the report shows of the stages (task
        counts, buckets, superseded keys, seconds)."""
        handed = handed or {}
        parts: list[_Partition] = []
        for i, t in enumerate(tasks):
            key = (t.plan.topic, t.plan.partition)
            groups, work, buckets = self.layout(t)
            out = PartitionOutcome(t.plan.topic, t.plan.partition)
            out.end_offset = max(t.plan.first_uncleanable_offset, t.plan.first_dirty_offset)
            parts.append(_Partition(i, t, groups, work, out, time.monotonic(), buckets=buckets,
                                    handed=handed.get(key)))
        if not parts:
            return {}
        t0 = time.monotonic()
        _key_and_bucket_passes(self, parts)
        self.progress(f"external-sort: key pass and buckets of {len(parts)} partition(s) in "
                     f"{time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        _rewrite_passes(self, parts, details)
        done = [p for p in parts if p.outcome.error is None]
        self.progress(f"external-sort: {sum(len(p.groups) for p in done)} segment group(s) of {len(done)} "
                      f"partition(s) rewritten in {time.monotonic() - t0:.1f}s" + _not_compacted(parts))
        return {(p.outcome.topic, p.outcome.partition): p.outcome for p in parts}

    def close(self) -> None:
        """Remove this run's work files (piece files, bucket files, a dry run's too)."""
        _clear(self.storage, self.run_dir)

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, tasks: int | None = None,
            description: str) -> list[R]:
        """One stage's tasks (``description``: what they do, which names their Spark job)."""
        return self.runner.map(fn, items, tasks=tasks, description=self.describe(description))



def _not_compacted(parts: Sequence[_Partition], shown: int = 10) -> str:
    """The progress line's ``; 2 partition(s) not compacted: orders-0, orders-1 (StorageEnvironmentError: ...)``
    (empty when every partition was): names, and each distinct reason once."""
    failed = [p for p in parts if p.outcome.error is not None]
    if not failed:
        return ""
    names = [f"{p.outcome.topic}-{p.outcome.partition}" for p in failed]
    reasons = dict.fromkeys(f"{p.outcome.error.kind}: {p.outcome.error.detail}" for p in failed
                            if p.outcome.error is not None)
    return (f"; {len(failed)} partition(s) not compacted: {listed(names, shown)} "
            f"({'; '.join(list(reasons)[:3])})")


def _records_bound(s: SegmentInfo) -> int:
    """A segment's records by its batch headers; a compressed legacy wrapper hides its count, so then its bytes
    (a record takes at least one byte even compressed): bucket sizing only, never a decision."""
    return s.record_count if s.record_count is not None else s.size_bytes


def task_count(items: int, total_bytes: int, parallelism: int) -> int:
    """How many tasks share ``items`` (contiguous runs of them) that read ``total_bytes``: every slot busy, and
    no more tasks than :data:`SPLIT_BYTES` shares of the bytes, so small partitions do not pay a task start
    per segment or group while a big one gets one task per item."""
    return max(1, min(items, max(parallelism, -(-total_bytes // SPLIT_BYTES))))


def _clear(storage: Storage, uri: str) -> None:
    delete_quietly(storage, [f.uri for f in storage.list(uri, recursive=True)])
    _remove_dirs(storage, uri)


def _remove_dirs(storage: Storage, uri: str) -> None:
    """Remove the (now empty) directories under and at ``uri`` on local disk; S3 has none."""
    path = storage.local_path(uri)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _piece_items(parts: Sequence[_Partition]) -> list[PieceItem]:
    """Every key-pass task, partition by partition, in group order (but the segments a memory-first task
    already read)."""
    items = []
    for part in parts:
        t = part.task
        files_of = {s.base_offset: s for s in t.listing.segments}
        covered = {p.base_offset for p in part.handed.pieces} if part.handed else set()
        for g, group in enumerate(part.groups):
            for s in group:
                if s.size_bytes == 0 or s.base_offset in covered:
                    continue
                splits = max(1, -(-s.size_bytes // SPLIT_BYTES))
                for k in range(splits):
                    out = t.storage.join(part.work, f"piece-{g:06d}-{s.base_offset:020d}-{k:04d}.rows")
                    log = files_of[s.base_offset].log
                    items.append(PieceItem(part.p, g, t.storage, log.uri, k, splits,
                                           t.plan.first_dirty_offset, t.plan.first_uncleanable_offset,
                                           t.txn.aborted, part.buckets, out, t.max_batch_bytes, s.size_bytes,
                                           log=log, host_spool=t.host_spool))
                    part.key_tasks += 1
    return items


def _key_and_bucket_passes(run: ExternalSortRun, parts: list[_Partition]) -> None:
    """Stages 1 and 2: piece files, then every bucket reduced into its group maps; ``part.maps`` says where
    each group's keys are. A failed task fails its partition (``part.outcome.error``), not the others."""
    storage = run.storage
    items = _piece_items(parts)
    results = run.map(read_piece, items,
                      tasks=task_count(len(items), sum(i.size // i.splits for i in items), run.runner.parallelism),
                      description=f"external-sort key pass over {len(items)} piece(s)")
    # every piece of a partition as (file, group, rows per bucket), read or handed over
    pieces: dict[int, list[tuple[str, int, np.ndarray]]] = {part.p: [] for part in parts}
    errors: dict[int, PartitionError] = {}
    seconds: dict[int, float] = {}
    for item, result in zip(items, results):
        pieces[item.p].append((item.out_uri, item.g, result.counts))
        seconds[item.p] = seconds.get(item.p, 0.0) + result.seconds
        if result.error is not None:
            errors.setdefault(item.p, result.error)
    buckets: list[BucketItem] = []
    for part in parts:
        part.task_seconds["key_pass"] = round(seconds.get(part.p, 0.0), 3)
        if part.p in errors:
            part.outcome.error = errors[part.p]
            continue
        mine = pieces[part.p] + [(h.uri, h.g, h.counts) for h in (part.handed.pieces if part.handed else [])]
        mine.sort(key=lambda piece: piece[0])  # by name: group, segment, split (the reduce needs group order)
        starts = [np.r_[0, np.cumsum(counts)] for _, _, counts in mine]
        for b in range(part.buckets):
            slices = tuple((Slice(uri, int(at[b]), int(counts[b])), g) for (uri, g, counts), at in zip(mine, starts)
                           if counts[b])
            buckets.append(BucketItem(part.p, b, storage, slices, len(part.groups),
                                      storage.join(part.work, f"bucket-{b:06d}.map")))
    rows = sum(s.rows for item in buckets for s, _ in item.pieces)
    reduced = run.map(reduce_bucket_item, buckets,
                      tasks=task_count(len(buckets), rows * PIECE_ROW_BYTES * 4, run.runner.parallelism),
                      description=f"external-sort reduce of {len(buckets)} bucket(s)")
# the piece files have served: free their space before the rewrite writes the new segments
    delete_quietly(storage, [uri for mine in pieces.values() for uri, _, counts in mine if counts.any()]
                    + [h.uri for part in parts if part.handed for h in part.handed.pieces if h.counts.any()])
    of = {part.p: part for part in parts}
    for part in parts:
        part.maps = [[] for _ in part.groups]
    for bucket, done in zip(buckets, reduced):
        part = of[bucket.p]
        part.task_seconds["reduce"] = round(part.task_seconds.get("reduce", 0.0) + done.seconds, 3)
        if done.error is not None:
            part.outcome.error = part.outcome.error or done.error
            continue
        at = np.r_[0, np.cumsum(done.counts)]
        for g in np.flatnonzero(done.counts).tolist():
            part.maps[g].append(Slice(bucket.out_uri, int(at[g]), int(done.counts[g])))
            part.superseded += int(done.counts[g])


def _rewrite_passes(run: ExternalSortRun, parts: list[_Partition],
                    details: dict[tuple[str, int], dict[str, Any]]) -> None:
    """Stage 3: every group of every partition as one task."""
    items = [GroupItem(part.p, g, part.task, group, tuple(part.maps[g])) for part in parts
             if part.outcome.error is None for g, group in enumerate(part.groups)]
    results: dict[tuple[int, int], GroupResult] = {(r.p, r.g): r for r in _map_groups(run, items)}
    for part in parts:
        out = part.outcome
        group_results = [results[(part.p, g)] for g in range(len(part.groups)) if (part.p, g) in results]
        staged = [u for r in group_results for u in r.staged]
        if out.error is None and _failed(part, results):
            out.error = next(r.error for r in group_results if r.error is not None)
        if out.error is not None:
            delete_quietly(run.storage, staged)
            out.groups = []
        else:
            total = CleanStats()
            for r in group_results:
                total = total.merged(r.stats)
                out.groups.append(r.outcome)
            out.stats = {k: int(v) for k, v in total.__dict__.items()}
        out.seconds = round(sum(r.seconds for r in group_results), 3)
        details[(out.topic, out.partition)] = {
            "key_pieces": part.key_tasks, "reused_pieces": len(part.handed.pieces) if part.handed else 0,
            "buckets": part.buckets, "groups": len(part.groups),
            "superseded_keys": part.superseded,
            "task_seconds": {**part.task_seconds, "rewrite": out.seconds},
            "wall_seconds": round(time.monotonic() - part.t0, 3)}


def _map_groups(run: ExternalSortRun, items: list[GroupItem]) -> list[GroupResult]:
    size = sum(s.size_bytes for i in items for s in i.group)
    return run.map(clean_group_item, items, tasks=task_count(len(items), size, run.runner.parallelism),
                   description=f"external-sort rewrite, {len(items)} segment group(s)")


def _failed(part: _Partition, results: dict[tuple[int, int], GroupResult]) -> bool:
    return any(results[(part.p, g)].error is not None for g in range(len(part.groups)) if (part.p, g) in results)


__all__ = ["SPLIT_BYTES", "WORK_SUBDIR", "BucketItem", "ExternalSortRun", "GroupItem", "GroupResult", "PieceItem",
           "Slice", "choose", "clean_group_item",
           "default_bucket_bytes", "piece_of", "read_key_hashes", "read_piece", "reduce_bucket_item"]
