"""``segjobs table``: keep a Delta table with the latest value per key of a compacted topic, incrementally and
exactly once, from a log dir (local or S3) rather than through a broker.

A run, per partition of the topic:

1. reads the table's *applied offset* of the partition (below);
2. scans the partition (batch headers, transaction state: :func:`jobs.engine.scan.scan_partition`) and plans the
   range to apply (:func:`jobs.rules.table.plan_partition`: from the applied offset to the last stable offset;
   a retention gap is an error unless ``rebuild``);
3. decodes the segments of that range and keeps the latest record per key (:class:`segment_io.latest.LatestRows`,
   aborted records and markers out, keyless records out); a range that may not fit ``latest_buffer_bytes`` is
   only planned here, and the driver dedupes it on disk (:mod:`jobs.engine.table.sort`) into the same merge;

then writes every partition's changes in ONE Delta commit (``deltalake``'s MERGE: upserts, deletes for
tombstones, and for rebuilt partitions the rows no longer in the log). When the session has Delta Lake, step 3
runs in Spark instead (a task per segment, then an aggregation by key whose shuffle spills: any number of keys,
nothing collected to the driver) and one delta-spark MERGE per partition writes it
(:mod:`jobs.engine.table.spark_writer`).

The applied offsets: Delta's application transactions
----------------------------------------------------
Each partition's applied offset is a Delta ``txn`` action (``appId`` = ``segjobs-table:<topic>:<partition>``,
``version`` = the next offset to apply), written by the same commit as the rows it accounts for. Delta commits
are atomic (one log entry, created only if absent), so the rows and the offsets are either both in the table or
both absent: a run killed at any point leaves the table at its last commit, and a rerun applies from there
(files a killed writer left behind belong to no commit and are ignored, then vacuumed). ``txn`` actions are part
of the Delta protocol (Structured Streaming's exactly-once sinks use them), so ``deltalake``
(``CommitProperties(app_transactions=...)``, ``DeltaTable.transaction_version``) and delta-spark (the
``txnAppId``/``txnVersion`` write options and settings) read and write the same state. A run with nothing new
writes no commit. The ``deltalake`` commit is made without retries on the version the run read: a run another
writer overtook fails (:class:`TableConflictError`) instead of being rebased onto rows it did not see.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.engine.frame.job import open_log_dir
from jobs.engine.frame.options import InvalidOptionUsage, TieredReadOptions
from jobs.engine.report.run_report import (
    Progress,
    attention_table,
    delta_storage_options,
    render_table,
    rows_per_partition,
)
from jobs.engine.report.store_usage import StoreUsage
from jobs.engine.runtime.delta_spark import DELTA_SPARK_PACKAGE, delta_session
from jobs.engine.runtime.seams import PRODUCTION, Seams
from jobs.engine.runtime.tasks import InProcessTasks, SparkTasks, TaskRunner
from jobs.engine.scan import PartitionError, scan_partition
from jobs.engine.table import sort
from jobs.engine.table.changes import Counts, PartitionChanges
from jobs.engine.table.sort import (
    DEFAULT_LATEST_BUFFER_BYTES,
    SortedCounts,
    SortedPartition,
    latest_bytes_bound,
    read_rows_of,
    remove_work_dir,
    work_dir,
)
from jobs.engine.table.spark_writer import spark_changes, spark_count_changes, write_with_spark
from jobs.engine.table.state import (
    PARTITION_BY,
    TableConflictError,
    app_id,
    applied_offsets,
    open_table,
)
from jobs.logdir.checkpoints import read_job_checkpoints
from jobs.logdir.checks import check_log_dir_has_partitions, rejected_partition_dirs
from jobs.logdir.tiered import tiered_listing
from jobs.rules.table import aborted_rows, plan_partition
from segment_io.decode import decode_segment_bytes, read_segment
from segment_io.errors import ConfigError, SegjobsError, StorageError, UsageError
from segment_io.latest import SOURCE_COLUMNS, TABLE_SCHEMA, LatestRows, eligible_rows
from segment_io.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LogDirListing,
    closest_topics_hint,
    list_log_dir,
)
from segment_io.storage import open_storage
from segment_io.storage.base import Storage
from segment_io.storage.options import StorageOptions
from segment_io.storage.spool import HostSpool, TaskSpool
from segment_io.storage.traffic import StoreTraffic, in_context_iter, metered

#: How a run writes the table (see :class:`TableOptions`).
WRITERS = ("auto", "deltalake", "spark")


@dataclass(frozen=True, kw_only=True)
class TableOptions(TieredReadOptions):
    """The options of :func:`jobs.api.table` (``segjobs table``)."""

    #: the Delta table (local path or s3:// URI); created by the first run
    table: str = ""
    #: the compacted topic whose latest values the table holds
    topic: str = ""
    #: only these partitions of the topic (numbers); default: all
    partitions: Sequence[int] = ()
    #: reapply the partitions from their log start offset and delete rows no longer in the log: what a
    #: retention gap (records deleted before the table applied them) needs
    rebuild: bool = False
    #: write nothing; count exactly what a real run would insert, update and delete
    dry_run: bool = False
    #: "auto": delta-spark's MERGE when the Spark session has Delta Lake, else deltalake; or force one
    writer: str = "auto"
    #: the most bytes one compressed batch may inflate to (None: $SEGJOBS_MAX_BATCH_BYTES, else 256 MiB)
    max_batch_bytes: int | None = None
    #: deltalake writer: the memory one partition's latest rows may take. A partition whose range to apply may
    #: need more (its segments' bytes plus a per-record overhead) is deduped on disk instead, an external-sort
    #: pass whose memory stays within this whatever the key count (:mod:`jobs.engine.table.sort`)
    latest_buffer_bytes: int = DEFAULT_LATEST_BUFFER_BYTES

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        for name in ("table", "topic"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
            elif not isinstance(value, str):
                raise InvalidOptionUsage(f"{owner}.{name}={value!r}: expected a string", field=name)
        if not self.table:
            raise InvalidOptionUsage(f"{owner}.table is required: the Delta table's path or s3:// URI", field="table",
                                     cli_message="--table is required: the Delta table's path or s3:// URI")
        if not self.topic:
            raise InvalidOptionUsage(f"{owner}.topic is required: the compacted topic to keep as a table",
                                     field="topic", cli_message="--topic is required")
        parts = tuple(self.partitions)
        if not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise InvalidOptionUsage(f"{owner}.partitions={self.partitions!r}: expected partition numbers",
                                     field="partitions")
        object.__setattr__(self, "partitions", parts)
        if self.writer not in WRITERS:
            raise InvalidOptionUsage(f"{owner}.writer={self.writer!r}: expected one of {', '.join(WRITERS)}",
                                     field="writer")
        b = self.latest_buffer_bytes
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise InvalidOptionUsage(f"{owner}.latest_buffer_bytes={b!r}: expected a positive number of bytes",
                                     field="latest_buffer_bytes")
        for name in ("rebuild", "dry_run"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidOptionUsage(f"{owner}.{name}={getattr(self, name)!r}: expected True or False",
                                         field=name)


@dataclass(frozen=True)
class TablePartition:
    """One partition of a run. ``action``: ``applied`` (rows and offset committed; dry run: ``would apply``),
    ``rebuilt`` (``would rebuild``), ``unchanged`` (nothing new), ``error`` (left as it was; ``error`` says why)."""

    topic: str
    partition: int
    action: str
    #: the offset the table had applied before the run (None: never) and after it
    applied_before: int | None
    applied_after: int | None
    #: the partition's log start and log end offsets, as scanned
    log_start_offset: int | None
    log_end_offset: int | None
    records_read: int
    #: keys added, keys whose row got a newer value, rows removed (tombstones, and for a rebuild rows no
    #: longer in the log); exact, also in a dry run
    inserts: int
    updates: int
    deletes: int
    #: tombstones of keys the table did not hold (nothing to delete)
    tombstones_without_row: int
    error: str | None = None
    #: how the latest record per key was found: ``memory`` (in the partition's task), ``external-sort`` (on
    #: disk: more than latest_buffer_bytes could be needed) or ``spark`` (delta-spark's aggregation)
    dedupe: str = "memory"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def upserts(self) -> int:
        return self.inserts + self.updates

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


@dataclass(frozen=True)
class TableResult:
    """What a run did (or, in a dry run, would do)."""

    exit_code: int
    log_dir: str
    table: str
    topic: str
    dry_run: bool
    writer: str
    partitions: tuple[TablePartition, ...]
    #: the Delta table version before and after the run (None: no table); equal when nothing was written
    version_before: int | None
    version_after: int | None
    warnings: tuple[str, ...]
    seconds: float
    #: a log dir on an object store: the requests the run made to it (the report's ``store_traffic``, as compact's;
    #: the Delta table's own reads and writes, made by deltalake or Spark, are not counted); None on local disk
    store_traffic: dict[str, Any] | None = None

    @property
    def inserts(self) -> int:
        return sum(p.inserts for p in self.partitions)

    @property
    def updates(self) -> int:
        return sum(p.updates for p in self.partitions)

    @property
    def deletes(self) -> int:
        return sum(p.deletes for p in self.partitions)

    @property
    def records_read(self) -> int:
        return sum(p.records_read for p in self.partitions)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def summary(self, *, layout: str = "auto", width: int | None = None) -> str:
        """What ``segjobs table`` prints: a row per partition (beyond
        :data:`~jobs.engine.report.run_report.PARTITION_ROWS_MAX` partitions, ``layout``: a row for the topic and the
        failed partitions), then the totals; ``width``: the terminal's, which the table fits."""
        return render_summary(self, layout=layout, width=width)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_dict(self) -> dict[str, Any]:
        return {"command": "table", "exit_code": self.exit_code, "log_dir": self.log_dir, "table": self.table,
                "topic": self.topic, "dry_run": self.dry_run, "writer": self.writer,
                "version_before": self.version_before, "version_after": self.version_after,
                "totals": {"inserts": self.inserts, "updates": self.updates, "deletes": self.deletes,
                           "records_read": self.records_read},
                "partitions": [p.to_dict() for p in self.partitions], "warnings": list(self.warnings),
                "seconds": round(self.seconds, 3),
                **({"store_traffic": self.store_traffic} if self.store_traffic is not None else {})}


# --------------------------------------------------------------------------------------------------
# Per partition: scan, plan, read (a task: runs on an executor under Spark)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionItem:
    storage: Storage
    listing: Any  # segment_io.layout.PartitionListing
    applied: int | None
    log_start_checkpoint: int | None
    cleaner_checkpoint: int | None
    rebuild: bool
    max_batch_bytes: int | None
    #: False: plan only, and list the segments to read (Spark reads and dedupes them:
    #: :mod:`jobs.engine.table.spark_writer`)
    read_rows: bool = True
    #: a range that may need more memory than this is planned only, and deduped on disk by the driver
    latest_buffer_bytes: int = DEFAULT_LATEST_BUFFER_BYTES
    #: on an object store: where the task's scan keeps the segments it fetches, so that reading their rows
    #: fetches none of them again (the task removes its copies when it ends, but those of a range deduped on disk
    #: when it runs on the driver's host: the driver's passes take them over)
    spool: HostSpool | None = None


def partition_changes(item: PartitionItem) -> PartitionChanges:
    """One partition's latest rows over the range its plan applies (never raises: errors are returned)."""
    pl = item.listing
    out = PartitionChanges(pl.topic, pl.partition)
    try:
        scan = scan_partition(item.storage, pl, depth="transactions", log_start_checkpoint=item.log_start_checkpoint,
                              cleaner_checkpoint=item.cleaner_checkpoint, max_batch_bytes=item.max_batch_bytes,
                              spool=item.spool if item.read_rows else None)
        out.warnings.extend(scan.warnings)
        if scan.error is not None:
            out.error = scan.error
            return out
        state = scan.scanned
        plan = plan_partition(pl.topic, pl.partition, applied=item.applied, log_start=state.log_start_offset,
                              log_end=state.log_end_offset, last_stable=state.last_stable_offset,
                              cleaner_checkpoint=item.cleaner_checkpoint, rebuild=item.rebuild)
        out.plan = plan
        if plan.warning:
            out.warnings.append(plan.warning)
        latest = LatestRows()
        if plan.end > plan.start:
            segments = pl.segments
            in_range = []
            record_count: int | None = 0
            for i, seg in enumerate(segments):
                info = state.segments[i] if i < len(state.segments) else None
                next_offset = info.next_offset if info is not None else None
                if next_offset is not None and next_offset <= plan.start:
                    continue
                if seg.base_offset >= plan.end:
                    break
                in_range.append((i, seg))
                count = info.record_count if info is not None else None
                record_count = None if record_count is None or count is None else record_count + count
            size = sum(seg.log.size for _, seg in in_range)
            # unknown record counts (compressed legacy wrappers): no fewer records than 10 bytes each
            out.records_bound = record_count if record_count is not None else size // 10
            need = latest_bytes_bound(size, out.records_bound)
            out.sort_on_disk = item.read_rows and need > item.latest_buffer_bytes
            for i, seg in in_range:
                if not item.read_rows or out.sort_on_disk:
                    out.segments.append((seg.log.uri, i == len(segments) - 1))
                    out.bytes_read += seg.log.size
                    continue
                records = _segment_rows(item, seg, last=i == len(segments) - 1)
                out.segments_read += 1
                out.bytes_read += seg.log.size
                latest.add(records, eligible_rows(records, aborted=aborted_rows(records, scan.txn),
                                                  start=plan.start, end=plan.end))
        if item.read_rows and not out.sort_on_disk:
            out.rows = latest.rows()
            out.records_read = latest.records_read
        else:
            out.aborted = scan.txn.aborted if scan.txn is not None else None
    except SegjobsError as exc:
        out.error = PartitionError.from_exception(exc)
    except Exception as exc:  # noqa: BLE001 - one partition's failure is reported, the others proceed
        out.error = PartitionError.from_task_exception(exc, pl.uri)
    finally:
        if item.spool is not None:
            # the copies of a range deduped on disk stay for the driver's two passes over it, where it can take them
            keep = out.sort_on_disk and out.error is None and item.spool.on_origin_host
            kept = {uri for uri, _ in out.segments} if keep else set()
            if kept:
                out.copies_root = item.spool.local_root
            item.spool.discard(seg.log for seg in pl.segments if seg.log.uri not in kept)
    return out


def _segment_rows(item: PartitionItem, seg: Any, *, last: bool) -> pa.Table:
    """The source columns of segment ``seg`` of the item's partition: from the copy its scan left on this host
    when there is one (an object store's), else read from the store."""
    pl = item.listing
    copy = item.spool.mapped(seg.log) if item.spool is not None else None
    if copy is None:
        return read_segment(seg.log.uri, columns=SOURCE_COLUMNS, storage=item.storage, topic=pl.topic,
                            partition=pl.partition, allow_truncated_tail=last, max_batch_bytes=item.max_batch_bytes)
    with copy as data:
        return decode_segment_bytes(data, path=seg.log.uri, topic=pl.topic, partition=pl.partition,
                                    segment_base_offset=seg.base_offset, columns=SOURCE_COLUMNS,
                                    allow_truncated_tail=last, max_batch_bytes=item.max_batch_bytes)


# --------------------------------------------------------------------------------------------------
# Exact counts: the changes against the table's current keys
# --------------------------------------------------------------------------------------------------


def count_changes(dt: Any | None, changes: Sequence[PartitionChanges]) -> dict[int, Counts]:
    """Per partition, how many rows the changes insert, update and delete in the table ``dt`` (exact: the
    partitions' current keys are read, key column only)."""
    existing: dict[int, pa.Array] = {}
    parts = [c.partition for c in changes]
    if dt is not None and parts:
        keys = dt.to_pyarrow_dataset().to_table(columns=["partition", "key"],
                                                filter=pc.field("partition").isin(parts))
        part_col = keys.column("partition").to_numpy()
        for p in parts:
            existing[p] = keys.column("key").filter(pa.array(part_col == p)).combine_chunks() \
                if keys.num_rows else pa.array([], pa.binary())
    out: dict[int, Counts] = {}
    for c in changes:
        rows = c.rows if c.rows is not None else TABLE_SCHEMA.empty_table()
        have = existing.get(c.partition, pa.array([], pa.binary()))
        live = pc.is_valid(rows.column("value")).to_numpy(zero_copy_only=False)
        present = pc.is_in(rows.column("key"), value_set=have).to_numpy(zero_copy_only=False) \
            if len(have) else np.zeros(rows.num_rows, bool)
        deletes = int((~live & present).sum())
        if c.plan is not None and c.plan.rebuild and len(have):
            deletes += int((~pc.is_in(have, value_set=rows.column("key").combine_chunks())
                            .to_numpy(zero_copy_only=False)).sum())
        out[c.partition] = Counts(inserts=int((live & ~present).sum()), updates=int((live & present).sum()),
                                  deletes=deletes, tombstones_without_row=int((~live & ~present).sum()))
    return out


# --------------------------------------------------------------------------------------------------
# Writing: deltalake (one commit for every partition)
# --------------------------------------------------------------------------------------------------

_MERGE_PREDICATE = "t.partition = s.partition AND t.key = s.key"
_SET = {name: f"s.{name}" for name in TABLE_SCHEMA.names}


def write_with_deltalake(uri: str, dt: Any | None, topic: str, changes: Sequence[PartitionChanges],
                         options: StorageOptions | None, fault: Callable[[str], None] | None = None,
                         sorted_rows: Callable[[bool], Iterator[pa.RecordBatch]] | None = None,
                         written: set[int] | None = None) -> int:
    """Apply every partition's changes and applied offset to the table in one Delta commit; returns the new
    table version. ``sorted_rows(live_only)`` (partitions deduped on disk) streams more rows to the same merge.
    ``written`` receives every partition once the commit is in the table. ``fault`` (tests) is called with
    ``merge:start`` and ``merge:committed``."""
    from deltalake import CommitProperties, Transaction

    now = int(time.time() * 1000)
    txns = [Transaction(app_id(topic, c.partition), c.plan.end, now) for c in changes if c.plan is not None]
    # No retries: a commit retried on a newer version would have been computed from an older table and log
    # (another run's newer rows overwritten with older ones, applied offsets moved back); it fails instead.
    commit = CommitProperties(app_transactions=txns, custom_metadata={"segjobs.table.topic": topic},
                              max_commit_retries=0)
    rows = pa.concat_tables([c.rows for c in changes if c.rows is not None] or [TABLE_SCHEMA.empty_table()])
    so = delta_storage_options(uri, options)

    def source(live_only: bool) -> Any:
        first = rows.filter(pc.is_valid(rows.column("value"))) if live_only else rows
        if sorted_rows is None:
            return first
        # one stream: the merge reads it once, a segment's rows at a time (streamed_exec), never whole; on threads
        # of its own, where the stream's requests still count into the run's
        return pa.RecordBatchReader.from_batches(TABLE_SCHEMA, itertools.chain(
            first.to_batches(), in_context_iter(sorted_rows(live_only))))

    if fault:
        fault("merge:start")
    try:
        _commit(uri, dt, topic, changes, rows, source, commit, so, streamed=sorted_rows is not None)
    except Exception as exc:
        if _is_conflict(exc):
            raise TableConflictError(uri, None if dt is None else int(dt.version()), f"{type(exc).__name__}: "
                                                                                     f"{exc}") from exc
        raise
    if written is not None:
        written.update(c.partition for c in changes)
    if fault:
        fault("merge:committed")
    final = open_table(uri, options)
    return int(final.version()) if final is not None else -1


def _is_conflict(exc: BaseException) -> bool:
    """Whether a failed Delta write lost a race: a commit of that version already exists (``deltalake`` says
    CommitFailedError; creating a table someone else created in the meantime says it already exists)."""
    from deltalake.exceptions import CommitFailedError

    return isinstance(exc, CommitFailedError) or "already exists" in str(exc).lower()


def _whole_partitions(changes: Sequence[PartitionChanges]) -> bool:
    """Whether every partition's rows are read from its log start (rebuilt, or new to the table), with at
    least one rebuilt: the run then knows each partition's whole content."""
    plans = [c.plan for c in changes]
    return bool(plans) and all(p is not None and (p.rebuild or p.applied is None) for p in plans) \
        and any(p is not None and p.rebuild for p in plans)


def _commit(uri: str, dt: Any | None, topic: str, changes: Sequence[PartitionChanges], rows: pa.Table,
            source: Callable[[bool], Any], commit: Any, so: dict[str, str] | None, *, streamed: bool) -> None:
    from deltalake import write_deltalake

    if dt is None:
        write_deltalake(uri, source(True), mode="error", partition_by=list(PARTITION_BY), name=topic,
                        description=f"segjobs table: the latest value per key of Kafka topic {topic}",
                        storage_options=so, commit_properties=commit)
    elif _whole_partitions(changes):
        # a rebuild: each partition's rows are its whole new content, so they replace its files (no join with
        # the table's rows, whose memory grows with them: the rows are streamed to the writer as in a first build)
        parts = ", ".join(str(c.partition) for c in changes)
        write_deltalake(dt, source(True), mode="overwrite", predicate=f"partition IN ({parts})", storage_options=so,
                        commit_properties=commit)
    else:
        before = dt.version()
        rebuilt = sorted(c.partition for c in changes if c.plan is not None and c.plan.rebuild)
        if rows.num_rows or rebuilt or streamed:
            merger = dt.merge(source(False), _MERGE_PREDICATE, source_alias="s", target_alias="t",
                              commit_properties=commit, streamed_exec=True) \
                .when_matched_delete(predicate="s.value IS NULL") \
                .when_matched_update(updates=_SET, predicate="s.value IS NOT NULL") \
                .when_not_matched_insert(updates=_SET, predicate="s.value IS NOT NULL")
            if rebuilt:
                merger = merger.when_not_matched_by_source_delete(
                    predicate=f"t.partition IN ({', '.join(str(p) for p in rebuilt)})")
            merger.execute()
            dt.update_incremental()
        if dt.version() == before:
            # no row changed (only markers, aborted or keyless records, tombstones of absent keys): the
            # applied offsets still move, in a commit of their own that adds no file
            write_deltalake(dt, TABLE_SCHEMA.empty_table(), mode="append", storage_options=so,
                            commit_properties=commit)


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def _runner(spark: Any, seams: Seams) -> TaskRunner:
    if seams.runner is not None:
        return seams.runner
    if spark is not None:
        return SparkTasks(spark, job_group="segjobs-table")
    return InProcessTasks()


def run_table(log_dir: str, options: TableOptions, *, spark: Any = None, seams: Seams | None = None) -> TableResult:
    """Bring the table up to date with the log dir (see the module docstring): a :class:`TableRun`'s steps."""
    with metered() as traffic:  # the driver's requests; the tasks' come back with their results
        run = TableRun.open(log_dir, options, spark=spark, seams=seams or PRODUCTION)
        try:
            run.read()
            run.sort_on_disk()
            run.report_reads()
            run.count()
            run.write()
            result = run.deliver()
        finally:
            run.close()
    return run.with_store_traffic(result, traffic)


class TableRun:
    """One ``segjobs table`` run. Its steps, in the order :func:`run_table` takes them: :meth:`open` (the log dir
    listed, the partitions checked, the table opened, the writer chosen), :meth:`read` (each partition's task:
    scan, plan, latest rows), :meth:`sort_on_disk` (the ranges that may not fit ``latest_buffer_bytes``),
    :meth:`report_reads`, :meth:`count` (exact inserts, updates and deletes against the table), :meth:`write`
    (with its retries: a partition whose read fails during the merge is left out and the others written again)
    and :meth:`deliver` (the result); :meth:`close` removes the on-disk dedupe's work dir."""

    def __init__(self, log_dir: str, options: TableOptions, *, spark: Any, seams: Seams, progress: Progress,
                 t0: float, storage: Storage, storage_options: StorageOptions, listing: LogDirListing,
                 checkpoints: dict[str, dict[tuple[str, int], int]], wanted: list[int], dt: Any | None,
                 version_before: int | None, applied: dict[int, int | None], writer: str,
                 unreadable: dict[int, PartitionError] | None = None) -> None:
        self.log_dir, self.options, self.spark, self.seams, self.progress = log_dir, options, spark, seams, progress
        #: when the run started (time.monotonic)
        self.t0 = t0
        self.storage, self.storage_options = storage, storage_options
        #: the log dir's listing and offset checkpoint files, and the topic's partitions the run applies
        self.listing, self.checkpoints, self.wanted = listing, checkpoints, wanted
        #: the Delta table (None: not created yet), its version before the run, and how this run writes it
        self.dt, self.version_before, self.writer = dt, version_before, writer
        self.version_after = version_before
        #: each partition's applied offset before the run (None: never applied)
        self.applied = applied
        #: partitions that fail before their task (a tiered partition whose remote segments cannot be read)
        self.unreadable = dict(unreadable or {})
        self.results: list[PartitionChanges] = []
        self.warnings: list[str] = []
        #: the partitions deduped on disk, and the work dir that holds their files
        self.on_disk: dict[int, SortedPartition] = {}
        #: on an object store: each of those partitions' segments, fetched once for both of their passes
        self.sort_spools: dict[int, TaskSpool] = {}
        self.work_store: Storage | None = None
        self.work_root: str | None = None
        #: the partitions with something to write, by number, and what they insert, update and delete
        self.to_write: list[PartitionChanges] = []
        self.by_partition: dict[int, PartitionChanges] = {}
        self.counts: dict[int, Counts] = {}
        #: with delta-spark: the latest rows of every partition, as Spark deduped them (cached until written)
        self.spark_latest: Any = None
        #: (partition, what stopped its read) of the on-disk partitions streamed into the merge
        self.stream_errors: list[tuple[int, BaseException]] = []
        #: why the write failed (None: it did not); the partitions whose rows and applied offset a commit of THIS
        #: run holds: only they are reported as applied (a winning concurrent run may have committed the same
        #: offsets; its rows are not this run's to count)
        self.write_error: str | None = None
        self.written: set[int] = set()
        #: runs the partitions' tasks (Spark's, with a session) and counts their object-store requests
        self.runner = _runner(spark, seams)
        #: on an object store: where each task's scan keeps what it fetches for the task's read of the rows
        self.spool = HostSpool.for_store(f"table-{uuid.uuid4().hex}", storage, log_dir)

    @classmethod
    def open(cls, log_dir: str, options: TableOptions, *, spark: Any, seams: Seams) -> "TableRun":
        """The log dir listed and the topic's partitions (``options.partitions``) checked against it, the table
        opened (it must hold the same topic) and the writer chosen. Raises (exit code 2) when nothing can be done."""
        t0 = time.monotonic()
        progress = Progress("table", quiet=options.progress is None, sink=options.progress)
        storage_options = options.storage_options()
        log_dir = log_dir.rstrip("/") or "/"
        # as the other commands: S3 that cannot be used (credentials, endpoint, bucket; within seconds), a log dir
        # that is a file or does not exist, one without partition directories (with what to give instead) are
        # refused before anything is read (exit code 2)
        storage = open_log_dir(log_dir, storage_options)
        try:  # the --table's bucket likewise (delta-rs would go on to an instance-metadata lookup and retries
            # before an error that names neither the credentials nor the endpoint)
            open_storage(options.table, storage_options).check_reachable(options.table)
        except StorageError as exc:
            raise ConfigError(f"--table {options.table}: {exc.detail}; nothing was done") from None
        listing = list_log_dir(storage, log_dir)
        check_log_dir_has_partitions(log_dir, listing, storage=storage)
        topics = {t for t, _ in listing.partitions}
        wanted = sorted(p for t, p in listing.partitions if t == options.topic)
        if not wanted:
            raise UsageError(f"--topic {options.topic}: no partition of it in {log_dir} "
                             f"({closest_topics_hint(options.topic, topics)})")
        if options.partitions:
            missing = sorted(set(options.partitions) - set(wanted))
            if missing:
                raise UsageError(f"--partition {missing[0]}: {options.topic} has no partition {missing[0]} in "
                                 f"{log_dir} (it has {', '.join(str(p) for p in wanted)})")
            wanted = sorted(options.partitions)
        # a tiered topic: its partitions' remote segments listed with their local ones; one it cannot read fails alone
        tiered = (tiered_listing(storage, listing, options.remote, storage_options,
                                 [(options.topic, p) for p in wanted]) if options.remote is not None else None)
        if tiered is not None:  # its remote segments are read through the store that serves them too
            listing, storage = tiered.listing, tiered.storage
        unreadable = {p: PartitionError.from_exception(e) for (_, p), e in tiered.errors.items()} if tiered else {}
        checkpoints = read_job_checkpoints(storage, log_dir, listing)
        dt = open_table(options.table, storage_options)
        if dt is not None:
            name = dt.metadata().name
            if name and name != options.topic:
                raise ConfigError(f"--table {options.table} holds topic {name!r}, not {options.topic!r}: give each "
                                  f"topic its own table")
        version_before = int(dt.version()) if dt is not None else None
        applied = applied_offsets(dt, options.topic, wanted)
        progress(f"{options.topic}: {len(wanted)} partition(s); table {options.table} at "
                 + (f"version {version_before}" if dt is not None else "(new)"), event="table.start",
                 partitions=len(wanted))
        run = cls(log_dir, options, spark=spark, seams=seams, progress=progress, t0=t0, storage=storage,
                  storage_options=storage_options, listing=listing, checkpoints=checkpoints, wanted=wanted, dt=dt,
                  version_before=version_before, applied=applied,
                  writer=_choose_writer(options.writer, spark, options.table), unreadable=unreadable)
        # a directory of the topic named like a partition that is not one ('orders-01', a full-width digit): not
        # read into the table, as the jobs never touch it; said, since it may hold records the table then lacks
        for name, error in rejected_partition_dirs(listing, lambda t, p: t == options.topic and (
                not options.partitions or p in options.partitions)):
            note = f"{name}: NOT A PARTITION, not read into the table: {error.detail}"
            run.warnings.append(note)
            progress.notice(f"warning: {note}", event="partition.rejected", partition=name)
        return run

    def read(self) -> None:
        """Each partition's task (:func:`partition_changes`): its scan, its plan and, unless Spark or the on-disk
        dedupe reads them later, its latest rows."""
        options, storage, topic, checkpoints = self.options, self.storage, self.options.topic, self.checkpoints
        # With delta-spark, Spark reads and dedupes the records (a shuffle that spills, never a collect to the driver)
        items = [PartitionItem(storage, self.listing.partition(topic, p), self.applied[p],
                               checkpoints[LOG_START_OFFSET_CHECKPOINT].get((topic, p)),
                               checkpoints[CLEANER_OFFSET_CHECKPOINT].get((topic, p)), options.rebuild,
                               options.max_batch_bytes, read_rows=self.writer != "spark",
                               latest_buffer_bytes=options.latest_buffer_bytes, spool=self.spool)
                 for p in self.wanted if p not in self.unreadable]
        results = self.runner.map(partition_changes, items, description=f"segjobs table {topic}: read partitions")
        self.results = sorted([*results, *(PartitionChanges(topic, p, error=e) for p, e in self.unreadable.items())],
                              key=lambda r: r.partition)

    def sort_on_disk(self) -> None:
        """The key pass and buckets of every partition whose range may not fit ``latest_buffer_bytes``
        (:func:`jobs.engine.table.sort.prepare`), in this process, into a work dir :meth:`close` removes; a
        partition that fails is reported, the others go on."""
        if not any(r.sort_on_disk and r.error is None for r in self.results):
            return
        self.work_store, self.work_root = work_dir()
        dataset = self.dt.to_pyarrow_dataset() if self.dt is not None else None
        options = self.options
        for r in self.results:
            if not r.sort_on_disk or r.error is not None or r.plan is None:
                continue
            plan = r.plan
            in_partition = pc.field("partition") == r.partition
            table_keys: Any = ()
            table_rows = 0
            if dataset is not None:
                table_rows = dataset.count_rows(filter=in_partition)
                table_keys = (b.column(0) for b in dataset.to_batches(columns=["key"], filter=in_partition))
            spool = self._sort_spool(r)
            try:
                part = sort.prepare(self.storage, self.work_store, self.work_root, partition=r.partition,
                                    start=plan.start, end=plan.end, rebuild=plan.rebuild, segments=r.segments,
                                    aborted=r.aborted, records=r.records_bound, table_keys=table_keys,
                                    table_rows=table_rows, latest_buffer_bytes=options.latest_buffer_bytes,
                                    max_batch_bytes=options.max_batch_bytes, spool=spool)
            except Exception as exc:  # noqa: BLE001 - one partition's failure is reported, the others proceed
                r.error = (PartitionError.from_exception(exc) if isinstance(exc, SegjobsError)
                           else PartitionError.from_task_exception(exc, r.segments[0][0] if r.segments else None))
                if spool is not None:
                    spool.close()
                continue
            self.on_disk[r.partition] = part
            r.records_read = part.counts.records_read
            self.progress(f"{r.name}: up to {r.records_bound} record(s) in offsets {plan.start}..{plan.end - 1} may "
                          f"not fit --latest-buffer-bytes {options.latest_buffer_bytes}: deduped on disk "
                          f"({part.buckets} bucket(s), {part.keys} latest key(s))", event="table.partition.sorted",
                          partition=r.name, keys=part.keys, buckets=part.buckets)

    def _sort_spool(self, r: PartitionChanges) -> TaskSpool | None:
        """On an object store, where partition ``r``'s segments are kept for both passes of its dedupe on disk
        (:attr:`sort_spools`): the copies its task's scan left, when it ran on this host (always, with
        ``local[N]``), else fetched by the first pass; None on local disk, whose page cache keeps them (a tiered
        topic's remote segments then stay in their store too)."""
        if self.spool is None:
            return None
        listed = {s.log.uri: s.log for s in self.listing.partition(self.options.topic, r.partition).segments}
        files = [listed[uri] for uri, _ in r.segments if uri in listed]
        also = [r.copies_root] if r.copies_root is not None else []
        adopted = {f.uri: path for f in files if (path := self.spool.find(f, also=also)) is not None}
        spool = self.sort_spools[r.partition] = TaskSpool(self.storage, files, adopted=adopted)
        return spool

    def report_reads(self) -> None:
        """Each partition's warnings, error, or what its task read."""
        progress = self.progress
        for r in self.results:
            self.warnings.extend(r.warnings)
            for w in r.warnings:
                progress.notice(w, event="table.warning", partition=r.name)
            if r.error is not None:
                progress.error(f"{r.name}: {r.error}; left as it was", event="table.partition.error",
                               partition=r.name)
                continue
            plan = r.plan
            assert plan is not None
            if not plan.has_work:
                progress(f"{r.name}: nothing new (applied up to offset {plan.end})", event="table.partition.read",
                         partition=r.name, records=0, bytes=0)
            elif self.writer == "spark":
                progress(f"{r.name}: offsets {plan.start}..{plan.end - 1} in {len(r.segments)} segment(s), read "
                         f"by Spark", event="table.partition.planned", partition=r.name, bytes=r.bytes_read)
            elif r.partition not in self.on_disk:
                progress(f"{r.name}: read {r.records_read} record(s) in {r.segments_read} segment(s), offsets "
                         f"{plan.start}..{plan.end - 1}: {r.rows.num_rows if r.rows is not None else 0} latest "
                         f"key(s)", event="table.partition.read", partition=r.name, records=r.records_read,
                         bytes=r.bytes_read)

    def count(self) -> None:
        """Exactly what each partition with something new inserts, updates and deletes against the table: Spark's
        count, the rows' keys against the table's, or (deduped on disk) as its rows stream (a dry run reads them
        here, a real run in the merge)."""
        options = self.options
        self.to_write = [r for r in self.results if r.error is None and r.plan is not None and r.plan.has_work]
        if self.writer == "spark" and self.to_write:
            self.spark_latest, read_counts = spark_changes(self.spark, self.storage, options.topic, self.to_write,
                                                           options.max_batch_bytes)
            self.counts = spark_count_changes(self.spark, options.table, self.spark_latest, self.to_write)
            for r in self.to_write:
                r.records_read = read_counts.get(r.partition, 0)
            self.progress(f"Spark read {sum(read_counts.values())} record(s) of {len(self.to_write)} partition(s)",
                          event="table.read", records=sum(read_counts.values()))
        else:
            self.counts = count_changes(self.dt, [r for r in self.to_write if r.partition not in self.on_disk])
        self.by_partition = {r.partition: r for r in self.to_write}
        if self.on_disk and options.dry_run:
            for part in self.on_disk.values():  # counts only
                try:
                    for _ in self._read_sorted(part, live_only=False):
                        pass
                except SegjobsError as exc:
                    self.by_partition[part.partition].error = PartitionError.from_exception(exc)

    def _read_sorted(self, part: SortedPartition, *, live_only: bool) -> Iterator[pa.RecordBatch]:
        assert self.work_store is not None
        return read_rows_of(self.storage, self.work_store, part, topic=self.options.topic, live_only=live_only,
                            max_batch_bytes=self.options.max_batch_bytes, spool=self.sort_spools.get(part.partition))

    def _sorted_rows(self, live_only: bool) -> Iterator[pa.RecordBatch]:
        """The on-disk partitions' rows still to write, streamed into the merge; what stops a partition's read is
        kept (the merge may wrap it: the run reports this one)."""
        for part in self.on_disk.values():
            if part.partition not in self.by_partition:
                continue
            try:
                yield from self._read_sorted(part, live_only=live_only)
            except Exception as exc:
                self.stream_errors.append((part.partition, exc))
                raise

    def write(self) -> None:
        """A real run: every partition's changes and applied offset written (deltalake: one commit; delta-spark: a
        MERGE per partition). A commit another writer overtook fails the write (:class:`TableConflictError`). A
        partition whose read failed during the merge (its log changed under the run), nothing being committed, is
        left out and reported, and the others are written again without it, as its dry run says."""
        if self.to_write and not self.options.dry_run:
            self.progress(f"writing {len(self.to_write)} partition(s) with {self.writer}", event="table.write",
                          partitions=len(self.to_write))
            fault = self.seams.fault_for(self.options.topic) if self.seams.fault else None
            while self.to_write and not self._write_once(fault):
                self._leave_out_failed_read()
        if self.spark_latest is not None:
            self.spark_latest.unpersist()

    def _write_once(self, fault: Callable[[str], None] | None) -> bool:
        """One write of :attr:`to_write`; False when a partition's read failed during it and the write is to be
        retried without that partition, True otherwise (written, or failed for good: :attr:`write_error`)."""
        options, progress = self.options, self.progress
        try:
            if self.writer == "spark":
                self.version_after = write_with_spark(self.spark, options.table, self.dt, options.topic,
                                                      self.to_write, self.storage_options, self.spark_latest,
                                                      fault=fault, progress=progress, written=self.written)
            else:
                self.version_after = write_with_deltalake(options.table, self.dt, options.topic, self.to_write,
                                                          self.storage_options, fault=fault,
                                                          sorted_rows=self._sorted_rows if self.on_disk else None,
                                                          written=self.written)
            return True
        except TableConflictError as exc:
            self.write_error = str(exc)
            progress.error(f"the table was not written: {self.write_error}", event="table.write.conflict")
            return True
        except SegjobsError as exc:
            if not self.stream_errors:
                raise
            self.write_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a Delta commit that failed: nothing of this run is in the table
            cause = self.stream_errors[-1][1] if self.stream_errors else exc
            self.write_error = f"{type(cause).__name__}: {cause}"
            if not self.stream_errors or not isinstance(cause, SegjobsError):
                progress.error(f"the table was not written: {self.write_error}", event="table.write.error")
                return True
        return not isinstance(self.stream_errors[-1][1], SegjobsError)

    def _leave_out_failed_read(self) -> None:
        """The partition whose read failed during the write reported and left as it was; the others to write again."""
        failed, cause = self.stream_errors.pop()
        self.stream_errors.clear()
        self.write_error = None
        r = self.by_partition.pop(failed)
        r.error = PartitionError.from_exception(cause)
        self.progress.error(f"{r.name}: {r.error}; left as it was", event="table.partition.error", partition=r.name)
        self.to_write = [w for w in self.to_write if w.partition != failed]
        for part in self.on_disk.values():  # the next write counts them again
            part.counts = SortedCounts(records_read=part.counts.records_read)

    def deliver(self) -> TableResult:
        """What the run did to each partition (or, in a dry run, would do), with the counts, as a result."""
        dry = self.options.dry_run
        for part in self.on_disk.values():
            sc = part.counts
            self.counts[part.partition] = Counts(sc.inserts, sc.updates, sc.deletes, sc.tombstones_without_row)
        parts = [self._partition(r, dry=dry) for r in self.results]
        failed = any(p.action == "error" for p in parts)
        return TableResult(exit_code=1 if failed else 0, log_dir=self.log_dir, table=self.options.table,
                           topic=self.options.topic, dry_run=dry, writer=self.writer, partitions=tuple(parts),
                           version_before=self.version_before, version_after=self.version_after,
                           warnings=tuple(self.warnings), seconds=time.monotonic() - self.t0)

    def with_store_traffic(self, result: TableResult, driver: StoreTraffic) -> TableResult:
        """``result`` with the run's requests to its log dir's object store (the driver's, ``driver``, and its
        tasks'), against the bytes of the topic's segments, and the line that says so; on local disk, as it is."""
        if self.storage.local_path(self.log_dir) is not None:
            return result
        usage = StoreUsage(driver, self.runner.store_traffic(), segment_bytes=sum(
            s.log.size for p in self.wanted for s in self.listing.partition(self.options.topic, p).segments))
        self.progress(usage.summary(), event="store.traffic", **usage.fields())
        return replace(result, store_traffic=usage.to_dict())

    def _partition(self, r: PartitionChanges, *, dry: bool) -> TablePartition:
        """What became of the partition of ``r``."""
        plan, applied = r.plan, self.applied.get(r.partition)
        if r.error is not None or plan is None:
            return TablePartition(r.topic, r.partition, "error", applied, applied, None, None, r.records_read,
                                  0, 0, 0, 0, error=str(r.error))
        if self.write_error is not None and plan.has_work and r.partition not in self.written:
            return TablePartition(r.topic, r.partition, "error", plan.applied, plan.applied, plan.log_start,
                                  plan.log_end, r.records_read, 0, 0, 0, 0, error=self.write_error)
        if not plan.has_work:
            action = "unchanged"
        elif plan.rebuild:
            action = "would rebuild" if dry else "rebuilt"
        else:
            action = "would apply" if dry else "applied"
        after = plan.applied if (dry or not plan.has_work) else plan.end
        c = self.counts.get(r.partition, Counts())
        dedupe = "spark" if self.writer == "spark" else "external-sort" if r.partition in self.on_disk else "memory"
        return TablePartition(r.topic, r.partition, action, plan.applied, after, plan.log_start, plan.log_end,
                              r.records_read, c.inserts, c.updates, c.deletes, c.tombstones_without_row,
                              dedupe=dedupe)

    def close(self) -> None:
        """The on-disk dedupe's work dir removed, whatever stopped the run (an interrupt included), and what the
        tasks on this host left of their copies (a task removes its own as it ends, but those it leaves for the
        dedupe on disk, which go here if the dedupe did not take them)."""
        if self.work_root is not None:
            remove_work_dir(self.work_root)
        for spool in self.sort_spools.values():
            spool.close()
        if self.spool is not None:  # with the copies left for a dedupe on disk that did not run
            self.spool.remove(also={r.copies_root for r in self.results if r.copies_root is not None})


def _choose_writer(requested: str, spark: Any, uri: str) -> str:
    if requested == "deltalake":
        return "deltalake"
    session = delta_session(uri) if spark is not None or requested == "spark" else None
    if requested == "spark" and session is None:
        raise UsageError(f"--writer spark: the Spark session has no Delta Lake (start it with delta-spark's package "
                         f"{DELTA_SPARK_PACKAGE} and extensions, see docs/guide/table.md), or it cannot write the "
                         f"--table URI")
    return "spark" if session is not None else "deltalake"


_PARTITION_COLUMNS = [("partition", "partition"), ("action", "action"), ("applied", "applied from"),
                      ("to", "applied to"), ("read", "records read"), ("inserts", "inserts"), ("updates", "updates"),
                      ("deletes", "deletes"), ("note", "note")]
_TOPIC_COLUMNS = [("topic", "topic"), ("partitions", "partitions"), ("actions", "actions"), ("read", "records read"),
                  ("inserts", "inserts"), ("updates", "updates"), ("deletes", "deletes"), ("note", "note")]


def _partition_row(p: TablePartition) -> dict[str, str]:
    return {"partition": p.name, "action": p.action,
            "applied": "-" if p.applied_before is None else str(p.applied_before),
            "to": "-" if p.applied_after is None else str(p.applied_after),
            "read": str(p.records_read), "inserts": str(p.inserts), "updates": str(p.updates),
            "deletes": str(p.deletes), "note": p.error or ""}


def _topic_row(run: TableResult) -> dict[str, str]:
    """The partitions of the run added up: how many took each action, and the counts."""
    actions = Counter(p.action for p in run.partitions)
    failed = actions["error"]
    return {"topic": run.topic, "partitions": str(len(run.partitions)),
            "actions": ", ".join(f"{a} {n}" for a, n in sorted(actions.items())), "read": str(run.records_read),
            "inserts": str(run.inserts), "updates": str(run.updates), "deletes": str(run.deletes),
            "note": f"{failed} partition(s) failed, below" if failed else ""}


def render_summary(run: TableResult, *, layout: str = "auto", width: int | None = None) -> str:
    """The human summary: a row per partition, or beyond :data:`~jobs.engine.report.run_report.PARTITION_ROWS_MAX`
    partitions (as every command's summary, ``layout``) a row for the topic and the failed partitions below it;
    then the totals."""
    if rows_per_partition(layout, len(run.partitions)):
        lines = [render_table([_partition_row(p) for p in run.partitions], _PARTITION_COLUMNS, width=width)]
    else:
        lines = [render_table([_topic_row(run)], _TOPIC_COLUMNS, width=width)]
        lines += attention_table([p for p in run.partitions if p.action == "error"], _partition_row,
                                 _PARTITION_COLUMNS, width=width)
    verb = "would write" if run.dry_run else "wrote"
    if run.version_after == run.version_before and not run.dry_run:
        version = "no new table version (nothing new)" if run.exit_code == 0 else "no new table version"
    elif run.dry_run:
        version = "dry run: nothing written"
    else:
        before = "-" if run.version_before is None else run.version_before
        version = f"table version {before} -> {run.version_after}"
    lines.append(f"{run.topic}: {verb} {run.inserts} insert(s), {run.updates} update(s), {run.deletes} delete(s) "
                 f"with {run.writer}; {version}; {run.seconds:.1f}s")
    return "\n".join(lines) + "\n"


__all__ = ["TableOptions", "TablePartition", "TableResult", "TableRun", "WRITERS", "count_changes", "partition_changes",
           "render_summary", "run_table", "write_with_deltalake"]
