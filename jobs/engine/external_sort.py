"""The external-sort compaction strategy: exact in one run for any number of keys, parallel inside a partition.

The memory strategy (:func:`jobs.engine.compaction.compact_partition`) is one task per partition with a bounded
offset map; a partition with more dirty keys than the map holds is cleaned partially, like Kafka's cleaner.
This strategy splits the same clean into passes that Spark spreads over every core, with the decisions of
:mod:`jobs.rules.external_sort`:

1. **Key pass** (one task per segment, big segments split at batch boundaries): read only offsets, 128-bit key
   hashes and batch flags of every keyed data record below the first uncleanable offset (the decoder's
   key-hash projection: keys and values never leave the task, nothing but 37 bytes a record crosses to the
   JVM), marking the records a memory pass would map (:func:`jobs.rules.offset_map.mappable_rows`).
2. **Sort** (Spark SQL): each key's latest mappable offset is a window maximum over (partition, key hash), so
   Spark sorts and spills to disk as it needs; the rows some later record supersedes, reduced to one
   (key, latest offset) per segment group, are written per group to the work dir (``external-sort/<partition>/
   group-<n>.arrow``, a few bytes per superseded key).
3. **Rewrite** (one task per segment group, several groups of a partition at once): each group is cleaned from
   its source segments with the memory strategy's own group cleaner and an offset map holding only its
   superseded keys (:func:`jobs.rules.external_sort.group_offset_map`), so every record, batch, index and
   ``.txnindex`` comes out as a memory pass with a large enough buffer writes them. Groups keeping markers then
   give the driver their output's batch summary; as the memory strategy does, the groups whose markers lost
   their transaction's last data are cleaned again with the refreshed transaction state (a second, usually
   empty, wave).

The result of a partition is the memory strategy's :class:`~jobs.engine.compaction.PartitionOutcome` with
staged segments, committed by the driver's unchanged crash-safe loop. Without Spark (``InProcessTasks``, in
tests) step 2 runs in memory (:func:`jobs.rules.external_sort.superseded_keys`), everything else the same.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa

from jobs.engine.scan import PartitionError
from jobs.rules.external_sort import (
    KEY_ROW_SCHEMA,
    SUPERSEDED_SCHEMA,
    StrategyChoice,
    choose_strategy,
    dirty_record_bound,
    freed_markers,
    group_offset_map,
    refreshed_txn_state,
    superseded_keys,
)
from jobs.rules.model import SegmentInfo
from jobs.rules.plan_compact import group_segments_by_size
from jobs.rules.transactions import AbortedTxns, BatchSummary, TxnState, summarize_batches
from segment_io.errors import SegjobsError
from segment_io.storage.base import Storage

if TYPE_CHECKING:
    from jobs.engine.compaction import CompactTask, PartitionOutcome
    from jobs.engine.frame import JobContext

#: A segment bigger than this is read by several key-pass tasks, each taking the batches that start in its
#: share of the bytes: a 1 GiB segment becomes 16 tasks.
SPLIT_BYTES = 64 << 20
#: Where the group maps and key-pass errors live, under the job's work dir (``<WORK_SUBDIR>/run-<run id>/<partition>``,
#: ``dry-<run id>`` for a dry run), removed at the end of the run.
WORK_SUBDIR = "external-sort"


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


# --------------------------------------------------------------------------------------------------
# Pass 1: key rows (runs in tasks)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyReadItem:
    """One key-pass task: the batches of one segment starting in ``[split * size / splits, ...)``."""

    p: int
    g: int
    storage: Storage
    uri: str
    split: int
    splits: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted: AbortedTxns
    error_uri: str
    size: int = 0  #: the segment's bytes


def read_key_rows(item: KeyReadItem) -> pa.Table:
    """KEY_ROW_SCHEMA rows of the keyed data records of ``item``'s share of its segment."""
    from jobs.rules.offset_map import mappable_rows
    from segment_io.decode import decode_key_hashes_bytes
    from segment_io.errors import CorruptRecordError
    from segment_io.format import batch_positions

    with item.storage.read_mapped(item.uri) as data:
        view = memoryview(data)
        start, end = 0, len(view)
        if item.splits > 1:
            positions, _, _ = batch_positions(data, path=item.uri, allow_truncated_tail=False)
            bounds = np.searchsorted(np.asarray(positions + [len(view)], np.int64),
                                     [item.split * len(view) // item.splits,
                                      (item.split + 1) * len(view) // item.splits])
            cut = positions + [len(view)]
            start, end = cut[int(bounds[0])], cut[int(bounds[1])]
        try:
            table = decode_key_hashes_bytes(view[start:end], path=item.uri)
        except CorruptRecordError as exc:
            if start and exc.position is not None:
                exc.position += start  # report the file's byte, not the slice's
            raise
        finally:
            del view
    mappable = mappable_rows(table, start_offset=item.first_dirty_offset, end_offset=item.first_uncleanable_offset,
                             aborted=item.aborted)
    keyed = ~table.column("control").to_numpy() & ~table.column("key_is_null").to_numpy()
    n = int(keyed.sum())
    cols = [np.full(n, item.p, np.int32), np.full(n, item.g, np.int32),
            table.column("key_hash_hi").to_numpy()[keyed], table.column("key_hash_lo").to_numpy()[keyed],
            table.column("offset").to_numpy()[keyed], mappable[keyed]]
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, KEY_ROW_SCHEMA)], schema=KEY_ROW_SCHEMA)


def _read_or_report(item: KeyReadItem) -> pa.Table | None:
    """:func:`read_key_rows`, or None after writing why it failed to ``item.error_uri`` (the partition is then
    left untouched; the other partitions of the run go on)."""
    try:
        return read_key_rows(item)
    except SegjobsError as exc:
        err = PartitionError.from_exception(exc)
        item.storage.makedirs(item.error_uri.rsplit("/", 1)[0])
        item.storage.write_atomic(item.error_uri, json.dumps(err.to_dict()).encode())
        return None


# --------------------------------------------------------------------------------------------------
# Group maps (written by the sort, read by the rewrite tasks)
# --------------------------------------------------------------------------------------------------


def write_group_map(storage: Storage, uri: str, rows: pa.Table) -> int:
    """Write one group's superseded keys (any rows with ``key_hash_hi``/``key_hash_lo``/``latest``), one
    row per key, as an Arrow IPC file; returns the number of keys."""
    hi = rows.column("key_hash_hi").to_numpy()
    lo = rows.column("key_hash_lo").to_numpy()
    latest = rows.column("latest").to_numpy()
    if len(hi) > 1:
        order = np.lexsort((lo, hi))
        hi, lo, latest = hi[order], lo[order], latest[order]
        first = np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])]
        hi, lo, latest = hi[first], lo[first], latest[first]
    table = pa.table({"key_hash_hi": pa.array(hi, pa.int64()), "key_hash_lo": pa.array(lo, pa.int64()),
                      "latest": pa.array(latest, pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    storage.makedirs(uri.rsplit("/", 1)[0])
    storage.write_atomic(uri, sink.getvalue().to_pybytes())
    return len(hi)


def read_group_map(storage: Storage, uri: str | None) -> pa.Table:
    """What :func:`write_group_map` wrote (no keys when ``uri`` is None: nothing of the group is superseded)."""
    if uri is None:
        return pa.table({"key_hash_hi": pa.array([], pa.int64()), "key_hash_lo": pa.array([], pa.int64()),
                         "latest": pa.array([], pa.int64())})
    return pa.ipc.open_file(pa.BufferReader(storage.read(uri))).read_all()


# --------------------------------------------------------------------------------------------------
# Pass 2: group rewrites (runs in tasks)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupItem:
    """One rewrite task: group ``g`` of partition ``p`` (``task`` is the memory strategy's task of it)."""

    p: int
    g: int
    task: CompactTask
    group: tuple[SegmentInfo, ...]
    map_uri: str | None
    #: the partition's state after every group's first clean (second wave only)
    refreshed: TxnState | None = None


@dataclass
class GroupResult:
    """What a rewrite task returns: statistics and a batch summary, never record data."""

    p: int
    g: int
    outcome: Any = None  # GroupOutcome
    stats: Any = None  # CleanStats
    summary: BatchSummary | None = None
    marker_offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    staged: list[str] = field(default_factory=list)
    error: PartitionError | None = None
    seconds: float = 0.0


def clean_group_item(item: GroupItem) -> GroupResult:
    """Clean (stage, or in a dry run measure) one group with its superseded keys; see the module docstring."""
    # The memory strategy's group cleaner itself: the same decisions, encoder and files, by construction.
    from jobs.engine.compaction import _PartitionCleaner

    t0 = time.monotonic()
    out = GroupResult(item.p, item.g)
    try:
        plan = item.task.plan
        omap = group_offset_map(read_group_map(item.task.storage, item.map_uri), start_offset=plan.first_dirty_offset,
                                end_offset=plan.first_uncleanable_offset)
        run = _PartitionCleaner(item.task, out.staged).clean_group(item.group, omap, item.refreshed)
        out.outcome, out.stats, out.marker_offsets = run.outcome, run.stats, np.asarray(run.marker_offsets, np.int64)
        if item.refreshed is None:  # every group's batches count for the state the second wave needs
            out.summary = summarize_batches([run.key_hashes], empty_batches=run.empty_batches)
    except Exception as exc:  # noqa: BLE001 - one group's failure fails its partition, not the run
        out.error = _task_error(exc)
        _delete_quietly(item.task.storage, out.staged)
        out.staged = []
    out.seconds = time.monotonic() - t0
    return out


@dataclass(frozen=True)
class TailItem:
    """The batch summary of a partition's segments from ``round_end`` on (what stays as it is)."""

    p: int
    task: CompactTask
    round_end: int


def summarize_tail(item: TailItem) -> tuple[int, BatchSummary | PartitionError]:
    """As the memory strategy's ``refreshed_txn_state`` reads them: every segment beyond the cleaned range."""
    from jobs.engine.scan import empty_batches_from_headers
    from segment_io.decode import decode_key_hashes_bytes
    from segment_io.format import scan_batches

    try:
        files = {s.base_offset: s for s in item.task.listing.segments}
        tables, empties = [], []
        segments = item.task.state.segments
        for s in segments:
            if s.base_offset >= item.round_end:
                uri = files[s.base_offset].log.uri
                data = item.task.storage.read(uri)
                active = s is segments[-1]
                tables.append(decode_key_hashes_bytes(data, path=uri, allow_truncated_tail=active))
                empties.append(empty_batches_from_headers(scan_batches(data, path=uri, allow_truncated_tail=active),
                                                          s.base_offset))
        return item.p, summarize_batches(tables, empty_batches=pa.concat_tables(empties) if empties else None)
    except Exception as exc:  # noqa: BLE001
        return item.p, _task_error(exc)


def _task_error(exc: BaseException) -> PartitionError:
    return PartitionError.from_task_exception(exc)


def _delete_quietly(storage: Storage, uris: Sequence[str]) -> None:
    for uri in uris:
        try:
            storage.delete(uri)
        except SegjobsError:
            pass


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
    key_tasks: int = 0
    superseded: int = 0
    maps: dict[int, str] = field(default_factory=dict)


def run_external_sort(ctx: JobContext, tasks: Sequence[CompactTask], details: dict[tuple[str, int], dict[str, Any]]
                      ) -> dict[tuple[str, int], PartitionOutcome]:
    """Clean every partition of ``tasks`` with the external-sort strategy; outcomes as the memory strategy's.
    ``details`` receives, per partition, what the report shows of the passes (task counts, superseded keys,
    wall time)."""
    from jobs.engine.compaction import PartitionOutcome

    if not tasks:
        return {}
    storage = ctx.storage
    # One dir per run: a dry run (which takes no lock) may run beside a real one. A real run holds the lock, so
    # another real run's dir can only be a crashed run's leftover: it goes.
    sort_root = storage.join(ctx.work_uri, WORK_SUBDIR)
    if not ctx.dry_run:
        for d in storage.list_dirs(sort_root):
            if d.rstrip("/").rsplit("/", 1)[-1].startswith("run-"):
                _clear(storage, d)
    run_dir = storage.join(sort_root, f"{'dry' if ctx.dry_run else 'run'}-{ctx.report.run_id}")
    parts: list[_Partition] = []
    for i, t in enumerate(tasks):
        cfg = t.config
        end = t.plan.first_uncleanable_offset
        groups = group_segments_by_size([s for s in t.state.segments if s.base_offset < end], cfg.segment_bytes,
                                        cfg.segment_index_bytes, end, cfg.index_interval_bytes)
        work = storage.join(run_dir, f"{t.plan.topic}-{t.plan.partition}")
        out = PartitionOutcome(t.plan.topic, t.plan.partition)
        out.end_offset = max(t.plan.first_uncleanable_offset, t.plan.first_dirty_offset)
        parts.append(_Partition(i, t, groups, work, out, time.monotonic()))
    try:
        t0 = time.monotonic()
        _sort_pass(ctx, parts)
        ctx.progress(f"external-sort: key pass and sort of {len(parts)} partition(s) in "
                     f"{time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        _rewrite_passes(ctx, parts, details)
        ctx.progress(f"external-sort: {sum(len(p.groups) for p in parts)} segment group(s) rewritten in "
                     f"{time.monotonic() - t0:.1f}s")
    finally:
        _clear(storage, run_dir)
    return {(p.outcome.topic, p.outcome.partition): p.outcome for p in parts}


def task_count(items: int, total_bytes: int, parallelism: int) -> int:
    """How many tasks share ``items`` (contiguous runs of them) that read ``total_bytes``: every slot busy, and
    no more tasks than :data:`SPLIT_BYTES` shares of the bytes, so small partitions do not pay a task start
    per segment or group while a big one gets one task per item."""
    return max(1, min(items, max(parallelism, -(-total_bytes // SPLIT_BYTES))))


def _clear(storage: Storage, uri: str) -> None:
    _delete_quietly(storage, [f.uri for f in storage.list(uri, recursive=True)])
    _remove_dirs(storage, uri)


def _remove_dirs(storage: Storage, uri: str) -> None:
    """Remove the (now empty) directories under and at ``uri`` on local disk; S3 has none."""
    import shutil

    path = storage.local_path(uri)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _key_items(parts: Sequence[_Partition]) -> list[KeyReadItem]:
    items = []
    for part in parts:
        t = part.task
        files_of = {s.base_offset: s for s in t.listing.segments}
        error_uri = t.storage.join(part.work, "key-pass-error.json")
        for g, group in enumerate(part.groups):
            for s in group:
                if s.size_bytes == 0:
                    continue
                splits = max(1, -(-s.size_bytes // SPLIT_BYTES))
                for k in range(splits):
                    items.append(KeyReadItem(part.p, g, t.storage, files_of[s.base_offset].log.uri, k, splits,
                                             t.plan.first_dirty_offset, t.plan.first_uncleanable_offset,
                                             t.txn.aborted, error_uri, s.size_bytes))
                    part.key_tasks += 1
    return items


def _sort_pass(ctx: JobContext, parts: list[_Partition]) -> None:
    """Passes 1 and 2: key rows, then each group's superseded keys written to the work dir."""
    from jobs.engine.seams import SparkTasks

    items = _key_items(parts)
    runner = ctx.runner
    counts: dict[tuple[int, int], int]
    try:
        if isinstance(runner, SparkTasks):
            from jobs.engine.seams import spark_job_labels

            what = ctx.job_description(f"external-sort key pass and sort of {len(parts)} partition(s)")
            with spark_job_labels(runner.spark.sparkContext, runner.job_group, what):
                counts = _spark_sort(runner.spark, items, parts)
        else:
            counts = _local_sort(ctx, items, parts)
    except Exception as exc:  # noqa: BLE001 - e.g. Spark failed the stage: every partition of it fails
        err = _task_error(exc)
        for part in parts:
            part.outcome.error = err
        return
    for part in parts:
        uri = ctx.storage.join(part.work, "key-pass-error.json")
        if ctx.storage.exists(uri):
            part.outcome.error = PartitionError(**json.loads(ctx.storage.read(uri)))
            continue
        for (p, g), n in counts.items():
            if p == part.p and n:
                part.maps[g] = _map_uri(ctx.storage, part.work, g)
                part.superseded += n


def _map_uri(storage: Storage, work: str, g: int) -> str:
    return storage.join(work, f"group-{g:06d}.arrow")


def _local_sort(ctx: JobContext, items: list[KeyReadItem], parts: list[_Partition]) -> dict[tuple[int, int], int]:
    """Without Spark: the key pass through the runner, the sort in memory."""
    tasks = task_count(len(items), sum(i.size // i.splits for i in items), ctx.runner.parallelism)
    tables = [t for t in ctx.parallel_map(_read_or_report, items, tasks=tasks,
                                          description=f"external-sort key pass over {len(items)} piece(s)")
              if t is not None]
    rows = pa.concat_tables(tables) if tables else KEY_ROW_SCHEMA.empty_table()
    col = {f.name: rows.column(f.name).to_numpy() for f in KEY_ROW_SCHEMA}
    sup = superseded_keys(col["p"], col["g"], col["key_hash_hi"], col["key_hash_lo"], col["offset"], col["mappable"])
    counts = {}
    p_col, g_col = sup.column("p").to_numpy(), sup.column("g").to_numpy()
    work = {part.p: part.work for part in parts}
    # the (partition, group) pairs present, without a Python tuple per superseded key
    for p, g in np.unique(np.stack([p_col, g_col], axis=1), axis=0).tolist():
        mask = (p_col == p) & (g_col == g)
        counts[(p, g)] = write_group_map(ctx.storage, _map_uri(ctx.storage, work[p], g), sup.filter(pa.array(mask)))
    return counts


def _spark_sort(spark: Any, items: list[KeyReadItem], parts: list[_Partition]) -> dict[tuple[int, int], int]:
    """The key pass as ``mapInArrow`` tasks (one per item), each key's latest offset as a window maximum
    (Spark sorts, spilling to disk), and one ``applyInArrow`` call per group writing its superseded keys."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not items:
        return {}
    storage = parts[0].task.storage
    work = {part.p: part.work for part in parts}

    def key_pass(batches):  # runs in the Python workers
        for batch in batches:
            for i in batch.column(0).to_pylist():
                table = _read_or_report(items[i])
                if table is not None:
                    yield from table.to_batches(max_chunksize=1 << 16)

    # No annotations: pyspark infers the function's form from type hints and fails on partial ones.
    def write_group(key, table):
        p, g = int(key[0].as_py()), int(key[1].as_py())
        n = write_group_map(storage, _map_uri(storage, work[p], g), table)
        return pa.table({"p": pa.array([p], pa.int32()), "g": pa.array([g], pa.int32()),
                         "n": pa.array([n], pa.int64())})

    tasks = task_count(len(items), sum(i.size // i.splits for i in items), int(spark.sparkContext.defaultParallelism))
    rows = spark.range(0, len(items), 1, tasks).mapInArrow(
        key_pass, "p int, g int, key_hash_hi long, key_hash_lo long, offset long, mappable boolean")
    by_key = Window.partitionBy("p", "key_hash_hi", "key_hash_lo")
    latest = F.max(F.when(F.col("mappable"), F.col("offset"))).over(by_key)
    superseded = (rows.withColumn("latest", latest).where(F.col("latest") > F.col("offset"))
                  .select(*SUPERSEDED_SCHEMA.names))
    written = superseded.groupBy("p", "g").applyInArrow(write_group, "p int, g int, n long").collect()
    return {(int(r["p"]), int(r["g"])): int(r["n"]) for r in written}


def _rewrite_passes(ctx: JobContext, parts: list[_Partition], details: dict[tuple[str, int], dict[str, Any]]) -> None:
    """Pass 3: every group of every partition as one task; then the second wave for freed markers."""
    from jobs.rules.cleaner import CleanStats

    live = [part for part in parts if part.outcome.error is None]
    items = [GroupItem(part.p, g, part.task, group, part.maps.get(g)) for part in live
             for g, group in enumerate(part.groups)]
    results: dict[tuple[int, int], GroupResult] = {(r.p, r.g): r for r in _map_groups(ctx, items)}
    # The state each group's markers are judged by on the second wave: the log as the first wave left it.
    needs_tail = [part for part in live if not _failed(part, results)
                  and any(len(results[(part.p, g)].marker_offsets) for g in range(len(part.groups)))]
    # the memory strategy's round end: its map never fills here, so the round ends at the first uncleanable offset
    tail_items = [TailItem(part.p, part.task, part.task.plan.first_uncleanable_offset) for part in needs_tail]
    tails = dict(ctx.parallel_map(summarize_tail, tail_items, description=f"external-sort state after the first "
                                                                          f"wave, {len(tail_items)} partition(s)"))
    again = []
    for part in needs_tail:
        tail = tails[part.p]
        if isinstance(tail, PartitionError):
            part.outcome.error = tail
            continue
        t = part.task
        summaries = [results[(part.p, g)].summary for g in range(len(part.groups))]
        refreshed = refreshed_txn_state([*(x for x in summaries if x is not None), tail], now_ms=t.now_ms,
                                        producer_id_expiration_ms=t.config.producer_id_expiration_ms)
        freed = freed_markers(t.txn, refreshed)
        if freed.size:
            again += [GroupItem(part.p, g, t, group, part.maps.get(g), refreshed) for g, group in enumerate(part.groups)
                      if np.isin(results[(part.p, g)].marker_offsets, freed).any()]
    for r in _map_groups(ctx, again):
        results[(r.p, r.g)] = r
    for part in parts:
        out = part.outcome
        group_results = [results[(part.p, g)] for g in range(len(part.groups)) if (part.p, g) in results]
        staged = [u for r in group_results for u in r.staged]
        if out.error is None and _failed(part, results):
            out.error = next(r.error for r in group_results if r.error is not None)
        if out.error is not None:
            _delete_quietly(ctx.storage, staged)
            out.groups = []
        else:
            total = CleanStats()
            for r in group_results:
                total = total.merged(r.stats)
                out.groups.append(r.outcome)
            out.stats = {k: int(v) for k, v in total.__dict__.items()}
        out.seconds = round(sum(r.seconds for r in group_results), 3)
        details[(out.topic, out.partition)] = {
            "key_pieces": part.key_tasks, "groups": len(part.groups),
            "groups_recleaned": sum(1 for i in again if i.p == part.p), "superseded_keys": part.superseded,
            "wall_seconds": round(time.monotonic() - part.t0, 3)}


def _map_groups(ctx: JobContext, items: list[GroupItem]) -> list[GroupResult]:
    size = sum(s.size_bytes for i in items for s in i.group)
    wave = "second wave, " if items and items[0].refreshed is not None else ""
    return ctx.parallel_map(clean_group_item, items, tasks=task_count(len(items), size, ctx.runner.parallelism),
                            description=f"external-sort rewrite, {wave}{len(items)} segment group(s)")


def _failed(part: _Partition, results: dict[tuple[int, int], GroupResult]) -> bool:
    return any(results[(part.p, g)].error is not None for g in range(len(part.groups)) if (part.p, g) in results)


__all__ = ["SPLIT_BYTES", "GroupItem", "GroupResult", "KeyReadItem", "choose", "clean_group_item",
           "read_group_map", "read_key_rows", "run_external_sort", "write_group_map"]
