"""The compaction engine: the per-partition task (runs on an executor, returns statistics only) and the
driver that plans, runs the tasks, commits each partition crash-safely and builds the report.

What `segjobs compact` does, in users' words, is the docstring of :mod:`jobs.commands.compact`."""

from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs.engine.frame import JobContext, scan_error_entry
from jobs.engine.options import DEFAULT_DEDUPE_BUFFER_BYTES, STRATEGIES, CompactOptions
from jobs.engine.planfile import PlanStage, decision_difference, partition_name
from jobs.engine.report import (
    RunReport,
    attention_table,
    by_topic,
    count_note,
    human_bytes,
    one_line,
    outcome_counts,
    outcome_totals,
    partition_order,
    policy_origins,
    problem_notes,
    purged_totals,
    refused_note,
    render_footer,
    render_table,
    rows_per_partition,
    shared_note,
)
from jobs.engine.scan import PartitionError, empty_batches_from_headers
from jobs.engine.seams import TaskFailure
from jobs.engine.selection import scan_candidates
from jobs.engine.streaming import Tally, run_and_settle
from jobs.logdir.commit import Committer
from jobs.logdir.recover import describe_stuck
from jobs.rules.config import TopicConfig
from jobs.rules.model import PartitionState
from jobs.rules.plan_compact import (
    CompactionPlan,
    group_segments_by_size,
    plan_compaction,
    updated_cleaner_checkpoints,
)
from segment_io.errors import LocatedError, SegjobsError, StorageEnvironmentError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, PartitionListing
from segment_io.storage.base import Storage

#: Extra cleaning passes over a group's output within one run (markers settle after at most two).
MAX_CONVERGENCE_PASSES = 3


# --------------------------------------------------------------------------------------------------
# The per-partition task (runs on an executor; returns statistics only, never record data)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactTask:
    storage: Storage
    listing: PartitionListing
    state: PartitionState
    plan: CompactionPlan
    config: TopicConfig
    txn: Any  # jobs.rules.transactions.TxnState
    now_ms: int
    max_keys: int
    dry_run: bool
    #: the store's commit protocol: says where the task stages the new segments (see Committer.task_stage_uri)
    committer: Committer
    #: memory first (``auto`` on a partition whose records may exceed the map): where to hand the partition
    #: over to external-sort if the map fills (a jobs.engine.external_sort.Handoff)
    handoff: Any = None


@dataclass
class GroupOutcome:
    """One segment group: the old segments, and (when it changed) the staged replacement."""

    old_bases: list[int]
    changed: bool
    bytes_before: int
    bytes_after: int
    records_before: int
    records_after: int
    staged_suffixes: tuple[str, ...] = ()
    #: last-modified time the new segment gets (the last replaced segment's, as Kafka does)
    mtime_ms: int = 0
    #: set by the driver once the group's replacement is committed
    committed: bool = False
    #: what was wrong with the ``.index``/``.timeindex`` files of the group's segments (one line per problem,
    #: naming the file); the rewrite rebuilds them, so a group with such a problem is always rewritten
    corrupt_indexes: tuple[str, ...] = ()


@dataclass
class PartitionOutcome:
    topic: str
    partition: int
    groups: list[GroupOutcome] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    end_offset: int | None = None
    map_full: bool = False
    error: PartitionError | None = None
    seconds: float = 0.0
    #: a memory-first task whose map filled: the pieces it wrote for external-sort (it cleaned nothing)
    handover: Any = None

    def progress_fields(self) -> dict[str, Any]:
        """The structured fields of the partition's ``compact.partition`` progress event (the report's names)."""
        changed = [g for g in self.groups if g.changed]
        return {"partition": f"{self.topic}-{self.partition}", "seconds": self.seconds,
                "records_removed": sum(g.records_before - g.records_after for g in changed),
                "bytes_removed": sum(g.bytes_before - g.bytes_after for g in changed),
                "segments_rewritten": sum(len(g.old_bases) for g in changed), "partial": self.map_full}


def _txn_entries(storage: Storage, listing: PartitionListing, bases: list[int], kept: pa.Table) -> list:
    """The ``.txnindex`` entries of the new segment: the source segments' entries whose abort marker survives."""
    from segment_io.index import read_txn_index

    markers = kept.filter(kept["control"])
    if markers.num_rows == 0:
        return []
    marker_offsets = set(markers["offset"].to_pylist())
    entries = []
    for seg in listing.segments:
        if seg.base_offset in bases and seg.txnindex is not None:
            for e in read_txn_index(storage.read(seg.txnindex.uri), path=seg.txnindex.uri):
                if e.last_offset in marker_offsets:
                    entries.append(e)
    return entries


def _merged_result(later, earlier):
    """The later pass's output with the statistics of both passes (records read once: from the first)."""
    from dataclasses import replace

    stats = earlier.stats.merged(later.stats)
    stats = replace(stats, batches_read=earlier.stats.batches_read, records_read=earlier.stats.records_read,
                    bytes_read=earlier.stats.bytes_read, records_kept=later.stats.records_kept,
                    bytes_kept_estimate=later.stats.bytes_kept_estimate,
                    tombstones_kept=later.stats.tombstones_kept, empty_batches_kept=later.stats.empty_batches_kept)
    return replace(later, stats=stats)


@dataclass
class _GroupRun:
    """One group cleaned in memory: its outcome, statistics and the first-pass view of its output."""

    outcome: GroupOutcome
    stats: Any
    key_hashes: pa.Table  # KEY_HASH_SCHEMA of the surviving records
    empty_batches: pa.Table  # BATCH_SCHEMA of the header-only batches written
    marker_offsets: Any  # numpy: offsets of the surviving control records


class _PartitionCleaner:
    """Kafka's doClean for one partition, group by group, with the pieces the task needs twice."""

    def __init__(self, task: CompactTask, staged_written: list[str]) -> None:
        from jobs.rules.cleaner import CleanParams, legacy_delete_horizon

        self.task = task
        self.files = {s.base_offset: s for s in task.listing.segments}
        self.staged_written = staged_written
        plan, state = task.plan, task.state
        # Kafka's logSegments(0, firstDirtyOffset): every segment starting below the first dirty offset
        clean_before = [s for s in state.segments if s.base_offset < plan.first_dirty_offset]
        legacy_h = legacy_delete_horizon(clean_before[-1].mtime_ms if clean_before else None,
                                         task.config.delete_retention_ms)
        self.params = CleanParams(now_ms=task.now_ms, upper_bound_offset=plan.first_uncleanable_offset,
                                  delete_retention_ms=task.config.delete_retention_ms,
                                  legacy_delete_horizon_ms=legacy_h)

    def read(self, base: int) -> bytes:
        return self.task.storage.read(self.files[base].log.uri)

    def mapped(self, base: int):
        """A closed segment's bytes without a copy (memory-mapped on local disk; one GET on S3). Decoding copies
        what it keeps, so nothing outlives the mapping but the encoder's verbatim copies, made while it is open."""
        return self.task.storage.read_mapped(self.files[base].log.uri)

    def index_problems(self, base: int, headers) -> list[str]:
        """What is wrong with the ``.index`` and ``.timeindex`` of segment ``base`` against its batches (empty
        when sound or absent). Kafka's loader rebuilds an index that fails its own, weaker sanity check; one
        that passes it with wrong entries would be served as is, so compaction rebuilds every index it finds
        wrong in a group it cleans (and says so)."""
        from segment_io.index import check_indexes

        files = self.files[base]
        data = {f.uri: self.task.storage.read(f.uri) for f in (files.index, files.timeindex) if f is not None}
        return [str(e) for e in check_indexes(
            headers, data.get(files.index.uri) if files.index else None,
            data.get(files.timeindex.uri) if files.timeindex else None, path=files.log.uri,
            segment_base_offset=base)]

    def build_map(self, collector=None):
        """The offset map of the dirty range; ``collector`` (memory first: a
        jobs.engine.external_sort.PieceCollector) also gets every decoded segment, to hand over if it fills."""
        from jobs.rules.offset_map import build_offset_map
        from segment_io.decode import decode_key_hashes_bytes

        plan = self.task.plan
        dirty = [s for s in self.task.state.segments
                 if s.next_offset > plan.first_dirty_offset and s.base_offset < plan.first_uncleanable_offset]
        def tables():
            for s in dirty:
                with self.mapped(s.base_offset) as data:
                    table = decode_key_hashes_bytes(data, path=self.files[s.base_offset].log.uri)
                if collector is not None:
                    collector.add(s.base_offset, table)
                yield table

        return build_offset_map(tables(), start_offset=plan.first_dirty_offset,
                                end_offset=plan.first_uncleanable_offset, aborted=self.task.txn.aborted,
                                max_keys=self.task.max_keys)

    def clean_group(self, group, omap, refreshed_txn=None) -> _GroupRun:
        """Clean one group from its source bytes; stage (or, in a dry run, measure) it when it changed.

        The first pass judges with the transaction state of the log as it was scanned. Kafka stamps a marker's
        horizon only on the pass *after* the one that removed its transaction's data, and a second pass can
        change other batches too, so the output is cleaned again (as Kafka's next passes at this `now` would)
        until it is stable, with ``refreshed_txn`` (the state of the log after the first pass) when given. A
        re-run with the same --now then changes nothing.
        """
        with ExitStack() as mappings:
            return self._clean_group(group, omap, refreshed_txn, mappings)

    def _clean_group(self, group, omap, refreshed_txn, mappings: ExitStack) -> _GroupRun:
        from jobs.rules.cleaner import clean_records, key_hash_table
        from segment_io.decode import decode_segment_and_headers
        from segment_io.encode import resolve_value_refs
        from segment_io.encode_stream import encoded_size
        from segment_io.segment_writer import write_segment
        from segment_io.storage.base import release_mapped_pages

        task, plan, storage = self.task, self.task.plan, self.task.storage
        bases = [s.base_offset for s in group]
        sources: dict[int, bytes] = {}
        tables, empties, corrupt_indexes = [], [], []
        for s in group:
            uri = self.files[s.base_offset].log.uri
            data = mappings.enter_context(self.mapped(s.base_offset))
            sources[s.base_offset] = data
            # one pass over the headers gives the rows and the headers (no second scan of the mapped file)
            # values stay in the mapped bytes (references): the encoder copies the kept ones from there
            decoded, headers = decode_segment_and_headers(data, path=uri, topic=plan.topic,
                                                          partition=plan.partition, segment_base_offset=s.base_offset,
                                                          value_refs=True)
            tables.append(decoded)
            del decoded  # `tables` alone holds the rows: dropped as a whole once cleaned
            empties.append(empty_batches_from_headers(headers, s.base_offset))
            corrupt_indexes += self.index_problems(s.base_offset, headers)
            release_mapped_pages(data)  # decoded and checked: its pages need not stay resident (bounded memory)
        if len({t.schema for t in tables}) > 1:  # a segment with legacy batches comes with its values copied
            tables = [resolve_value_refs(t, sources) for t in tables]
        records = pa.concat_tables(tables)
        del tables
        mtimes = {s.base_offset: s.mtime_ms for s in group}
        result = clean_records(records, offset_map=omap, txn_state=task.txn, params=self.params,
                               empty_batches=pa.concat_tables(empties), segment_last_modified_ms=mtimes)
        records_before = records.num_rows
        del records  # only the kept rows are needed from here: the decoded group can go (bounded memory)
        # a group whose index files are wrong is rewritten even when no record goes: that rebuilds them
        changed = result.changed or bool(corrupt_indexes)
        for _ in range(MAX_CONVERGENCE_PASSES):
            again = clean_records(result.records, offset_map=omap, txn_state=refreshed_txn or task.txn,
                                  params=self.params, empty_batches=result.empty_batches,
                                  segment_last_modified_ms=mtimes)
            if not again.changed:
                break
            changed = True
            result = _merged_result(again, result)
        bytes_before = sum(len(d) for d in sources.values())
        g = GroupOutcome(bases, changed, bytes_before, bytes_before, records_before, records_before,
                         corrupt_indexes=tuple(corrupt_indexes))
        if changed:
            g.records_after = result.records.num_rows
            if task.dry_run:
                g.bytes_after = encoded_size(result.records, empty_batches=result.empty_batches, sources=sources)
            else:
                target = task.committer.task_stage_uri(task.listing.uri, bases[0], ".log")
                try:
                    written = write_segment(result.records, target, storage=storage,
                                            empty_batches=result.empty_batches, sources=sources,
                                            index_interval_bytes=task.config.index_interval_bytes,
                                            aborted_txns=_txn_entries(storage, task.listing, bases, result.records))
                except StorageEnvironmentError as exc:
                    if not exc.out_of_space:
                        raise
                    # say how much the new segment needs (its .log; the indexes are small beside it)
                    raise exc.needing(encoded_size(result.records, empty_batches=result.empty_batches,
                                                   sources=sources)) from None
                self.staged_written.extend(written.paths.values())
                # Kafka gives a cleaned segment the last-modified time of the last segment it replaces:
                # retention of timestamp-less data and the legacy tombstone horizon count from it.
                g.mtime_ms = group[-1].mtime_ms
                for uri in written.paths.values():
                    storage.set_mtime(uri, g.mtime_ms)
                g.bytes_after = written.bytes
                g.staged_suffixes = tuple(written.paths)
        kept = result.records
        markers = kept.filter(kept["control"])["offset"].to_numpy()
        return _GroupRun(g, result.stats, key_hash_table(kept), result.empty_batches, markers)

    def refreshed_txn_state(self, runs: list[_GroupRun], round_end: int):
        """Transaction and producer state of the log as the first pass left it: the groups' outputs plus
        every segment beyond the round, replayed like a fresh scan would."""
        from jobs.rules.transactions import derive_txn_state, summarize_batches
        from segment_io.decode import decode_key_hashes_bytes
        from segment_io.format import scan_batches

        tables = [r.key_hashes for r in runs]
        empties = [r.empty_batches for r in runs]
        for s in self.task.state.segments:
            if s.base_offset >= round_end:
                uri = self.files[s.base_offset].log.uri
                data = self.read(s.base_offset)
                active = s is self.task.state.segments[-1]
                tables.append(decode_key_hashes_bytes(data, path=uri, allow_truncated_tail=active))
                empties.append(empty_batches_from_headers(scan_batches(data, path=uri, allow_truncated_tail=active),
                                                          s.base_offset))
        summary = summarize_batches(tables, empty_batches=pa.concat_tables(empties) if empties else None)
        return derive_txn_state(summary, now_ms=self.task.now_ms,
                                producer_id_expiration_ms=self.task.config.producer_id_expiration_ms)


def compact_partition(task: CompactTask) -> PartitionOutcome:
    """Kafka's doClean for one partition: map the dirty range, then clean every segment group below the map's
    end, staging changed groups for the driver to commit (or, in a dry run, only measuring them)."""
    import numpy as np

    from jobs.rules.cleaner import CleanStats

    t0 = time.monotonic()
    plan, state, storage = task.plan, task.state, task.storage
    out = PartitionOutcome(plan.topic, plan.partition)
    staged_written: list[str] = []
    collector = None
    try:
        cleaner = _PartitionCleaner(task, staged_written)
        if task.handoff is not None:
            from jobs.engine.external_sort import PieceCollector

            collector = PieceCollector(task, task.handoff)
        omap = cleaner.build_map(collector)
        if collector is not None:
            if omap.full:  # more keys than the map holds: external-sort takes over with what was read
                out.handover = collector.hand_over(omap.offset_map.size, omap.end_offset)
                collector = None
                out.seconds = round(time.monotonic() - t0, 3)
                return out
            collector.discard()
            collector = None
        out.end_offset = omap.end_offset
        out.map_full = omap.full
        round_end = min(omap.end_offset, plan.first_uncleanable_offset)
        in_round = [s for s in state.segments if s.base_offset < round_end]
        groups = group_segments_by_size(in_round, task.config.segment_bytes, task.config.segment_index_bytes,
                                         plan.first_uncleanable_offset, task.config.index_interval_bytes)
        runs = [cleaner.clean_group(group, omap) for group in groups]
        # Markers whose transaction lost its last data in this pass: Kafka's next pass would stamp them.
        # Re-clean (from the sources) the groups holding such markers, with the state the pass left.
        if any(r.marker_offsets.size for r in runs):
            refreshed = cleaner.refreshed_txn_state(runs, round_end)
            freed = np.setdiff1d(task.txn.completed.markers_with_data(), refreshed.completed.markers_with_data())
            for i, (group, run) in enumerate(zip(groups, runs)):
                if freed.size and np.isin(run.marker_offsets, freed).any():
                    runs[i] = cleaner.clean_group(group, omap, refreshed)
        total = CleanStats()
        for run in runs:
            total = total.merged(run.stats)
            out.groups.append(run.outcome)
        out.stats = {k: int(v) for k, v in total.__dict__.items()}
    except Exception as exc:  # noqa: BLE001 - one partition's failure must not stop the others
        if collector is not None:
            collector.discard()
        out.error = PartitionError.from_task_exception(exc, task.listing.uri)
        for uri in staged_written:  # leave nothing behind for a partition we will not commit
            try:
                storage.delete(uri)
            except SegjobsError:
                pass
    out.seconds = round(time.monotonic() - t0, 3)
    return out


# --------------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------------


def _entry(plan: CompactionPlan, state: PartitionState, outcome: PartitionOutcome | None, *, dry_run: bool,
           committed: bool, checkpoint: int | None) -> dict[str, Any]:
    segs_before = len(state.segments)
    bytes_before = state.size_bytes
    entry: dict[str, Any] = {
        "topic": plan.topic, "partition": plan.partition, "selected": plan.selected, "reason": plan.reason,
        "note": plan.note,
        "dirty_ratio": None if plan.dirty_ratio is None else round(plan.dirty_ratio, 4),
        "clean_bytes": plan.clean_bytes,
        "cleanable_bytes": plan.cleanable_bytes, "first_dirty_offset": plan.first_dirty_offset,
        "first_uncleanable_offset": plan.first_uncleanable_offset, "bound_by": plan.bound_by,
        "previous_checkpoint": plan.previous_checkpoint, "new_checkpoint": checkpoint,
        "segments_before": segs_before, "bytes_before": bytes_before,
        "segments_after": segs_before, "bytes_after": bytes_before,
        "records_removed": 0, "bytes_removed": 0,
    }
    if outcome is None:
        entry["action"] = "skipped"
        return entry
    # What counts: in a dry run every group that would change; in a real run the groups actually committed.
    applied = [g for g in outcome.groups if g.changed and (dry_run or g.committed)]
    changed = [g for g in outcome.groups if g.changed]
    removed_segments = sum(len(g.old_bases) - 1 for g in applied)
    bytes_after = bytes_before - sum(g.bytes_before - g.bytes_after for g in applied)
    if outcome.error:
        action = "partly compacted" if applied and not dry_run else "error"
    elif dry_run:
        action = "would compact" if applied else "would leave unchanged"
    else:
        action = "compacted" if applied else "unchanged"
    entry.update({
        "action": action,
        "cleaned_range": [plan.first_dirty_offset, outcome.end_offset],
        "partial": outcome.map_full,
        "groups": len(outcome.groups), "groups_rewritten": len(applied),
        "segments_after": segs_before - removed_segments, "bytes_after": bytes_after,
        "records_before": sum(g.records_before for g in applied),
        "records_after": sum(g.records_after for g in applied),
        "bytes_removed": bytes_before - bytes_after,
        "stats": outcome.stats, "task_seconds": outcome.seconds,
        "indexes_rebuilt": [p for g in applied for p in g.corrupt_indexes],
    })
    entry["records_removed"] = entry["records_before"] - entry["records_after"]
    if outcome.error and applied and not dry_run:
        entry["error"] = outcome.error.to_dict()
        entry["reason"] = (f"partly compacted: {len(applied)} of {len(changed)} changed segment group(s) were "
                           f"committed before this failure, the rest left untouched and the cleaner checkpoint "
                           f"not advanced (the next run continues): {outcome.error}")
        return entry
    if outcome.map_full:
        entry["reason"] += (f"; offset map full: cleaned up to offset {outcome.end_offset}, the next run continues "
                            f"(raise --dedupe-buffer-bytes to clean more per pass)")
    if outcome.error:
        entry["error"] = outcome.error.to_dict()
        entry["reason"] = f"uncleanable, left untouched: {outcome.error}"
    return entry


def work(ctx: JobContext) -> None:
    """The compaction job's work (see :func:`jobs.engine.frame.run_job`): retention first for compact,delete
    partitions, plan, run the cleaning tasks, commit each changed group of each partition, write the cleaner
    checkpoint, and fill the report (entries and totals)."""
    from jobs.engine.retention import (
        apply_retention_first,
        plan_retention_first,
        retention_decision,
    )
    from jobs.rules.offset_map import max_keys_for_buffer
    from segment_io.checkpoint import write_offset_checkpoint

    options = ctx.options
    assert isinstance(options, CompactOptions)
    planfile = ctx.planfile
    scan_candidates(ctx)  # the partitions that may be due, read in full (the frame scanned sizes only)
    max_keys = max_keys_for_buffer(options.dedupe_buffer_bytes)
    # compact,delete partitions: retention first, compaction planned on what it leaves (see RetentionFirst)
    first = plan_retention_first(ctx)
    held = first.held()
    plans: dict[tuple[str, int], CompactionPlan] = {}
    states: dict[tuple[str, int], PartitionState] = {}
    tasks: list[CompactTask] = []
    for key, scan in sorted(ctx.scans.items()):
        if scan.error is not None:
            ctx.report.partitions.append(scan_error_entry(scan))
            ctx.report.errors.append({"partition": scan.name, **scan.error.to_dict()})
            continue
        config = ctx.configs.for_topic(scan.topic)
        listing, scan = first.compaction_input(ctx, key)
        plan = plan_compaction(scan.scanned, config, ctx.now_ms, requested=ctx.scope.explicit(*key))
        plans[key], states[key] = plan, scan.scanned
        if plan.selected and key not in held:
            tasks.append(CompactTask(ctx.storage, listing, scan.scanned, plan, config, scan.txn, ctx.now_ms, max_keys,
                                     ctx.dry_run, ctx.committer))
    planfile.check_decisions(ctx, {partition_name(k): retention_decision(p, k in held)
                                   for k, p in first.plans.items()}, "retention")
    planfile.check_decisions(ctx, {partition_name(k): _compaction_decision(p, k in held)
                                   for k, p in plans.items()}, "compaction", later=("outcome",))
    retention = apply_retention_first(ctx, first)
    # Where retention failed half-way the partition is not what compaction was planned on: leave it alone.
    failed = {k for k, e in retention.items() if e["action"] == "error" and k in first.plans}
    tasks = [t for t in tasks if (t.plan.topic, t.plan.partition) not in failed]
    ctx.progress(f"{len(tasks)} of {len(plans)} partition(s) selected for compaction", event="compact.selected",
                 partitions=len(tasks))
    # --strategy: each partition is cleaned by the memory strategy's task or by the external-sort stages
    # (jobs.engine.external_sort); both give PartitionOutcomes with staged groups, committed alike by _settle.
    # Memory-first partitions (auto, more records than the map holds) run as memory tasks that hand the
    # partition over to external-sort, with the pieces they read, if their map fills.
    from dataclasses import replace

    from jobs.engine.external_sort import ExternalSortRun, choose
    from jobs.rules.external_sort import handed_over

    strategies = choose(tasks, options.strategy)
    sorter = ExternalSortRun(ctx)
    sort_tasks = [t for t in tasks if strategies[(t.plan.topic, t.plan.partition)].strategy == "external-sort"]
    tasks = [t if not strategies[(t.plan.topic, t.plan.partition)].memory_first else
             replace(t, handoff=sorter.handoff(t))
             for t in tasks if strategies[(t.plan.topic, t.plan.partition)].strategy != "external-sort"]
    handed: dict[tuple[str, int], Any] = {}
    sort_details: dict[tuple[str, int], dict[str, Any]] = {}
    checkpoints = dict(ctx.checkpoints[CLEANER_OFFSET_CHECKPOINT])
    live = set(ctx.listing.partitions)
    task_keys = [(t.plan.topic, t.plan.partition) for t in tasks]
    sort_keys = [(t.plan.topic, t.plan.partition) for t in sort_tasks]
    tally = Tally(len(tasks) + len(sort_tasks), sum(t.state.size_bytes for t in [*tasks, *sort_tasks]))

    def settle(key: tuple[str, int], outcome: PartitionOutcome | None) -> _Settled | None:
        if outcome is not None and outcome.handover is not None:
            return None  # handed over to external-sort: settled once that has cleaned it
        one = _settle(ctx, key, plans[key], states[key], outcome, checkpoint=checkpoints.get(key),
                      untouched=key in held or key in failed, retention=retention, tally=tally)
        if outcome is not None and key in strategies:
            one.entry.update(strategy=strategies[key].strategy, strategy_reason=strategies[key].reason)
            if key in sort_details:
                one.entry["external_sort"] = sort_details[key]
        return one

    def prepare(i: int, result: PartitionOutcome | TaskFailure) -> PartitionOutcome:
        # on the driver's thread: the plan check records into the plan file's decisions
        outcome = result if isinstance(result, PartitionOutcome) else _died(tasks[i], result)
        if outcome.handover is not None:
            handed[task_keys[i]] = outcome.handover
        elif outcome.error is None:
            _check_outcome_against_plan(ctx, planfile, task_keys[i], outcome)
        return outcome

    # Partitions without a task first (nothing to commit), then each memory task's partition as its task
    # finishes: its commit overlaps the tasks still running (see jobs.engine.streaming); then the external-sort
    # partitions, once their passes are done, one after another in partition order.
    with_task = set(task_keys) | set(sort_keys)
    settled: dict[tuple[str, int], _Settled] = {}
    for key in plans:
        if key not in with_task:
            settled[key] = _must(settle(key, None))
    streamed = False
    try:
        done = run_and_settle(ctx.runner, compact_partition, tasks, sizes=[t.state.size_bytes for t in tasks],
                              prepare=prepare, settle=lambda i, outcome: settle(task_keys[i], outcome),
                              description=ctx.job_description(
                                  f"{'measure' if ctx.dry_run else 'compact'} {len(tasks)} partition(s)"))
        settled.update({task_keys[i]: v for i, v in done.items() if v is not None})
        streamed = True
        for t in tasks:
            key = (t.plan.topic, t.plan.partition)
            if key in handed:
                h = handed[key]
                strategies[key] = handed_over(strategies[key], keys=h.keys, end_offset=h.end_offset,
                                              segments_read=len(h.pieces))
                sort_tasks.append(t)
                sort_keys.append(key)
        sorted_outcomes = sorter.run(sort_tasks, sort_details, handed)
        for key in sort_keys:
            outcome = sorted_outcomes[key]
            if outcome.error is None:
                _check_outcome_against_plan(ctx, planfile, key, outcome)
            settled[key] = _must(settle(key, outcome))
    except BaseException as exc:
        # e.g. the lease was lost: what was committed stands and is reported, the checkpoint is not written
        if not streamed:
            settled.update({task_keys[i]: v for i, v in getattr(exc, "partial", {}).items() if v is not None})
        _record_settled(ctx, plans, settled, checkpoints)
        raise
    finally:
        sorter.close()
    checkpoint_changed = _record_settled(ctx, plans, settled, checkpoints)
    if checkpoint_changed and not ctx.dry_run:
        # once, at the end, as before: a partition's commit is complete without it (a run that stops before
        # this point cleans the committed range again next time, which changes nothing)
        entries = updated_cleaner_checkpoints(checkpoints, live)
        write_offset_checkpoint(ctx.storage, ctx.storage.join(ctx.log_dir, CLEANER_OFFSET_CHECKPOINT),
                                dict(sorted(entries.items())))
    planfile.write(ctx, "compact", {name: getattr(options, name) for name in PLAN_OPTIONS})
    _summarize(ctx)


#: Progress lines come from the commit thread and the driver's: one at a time, so that two never mix.
_PROGRESS_LOCK = threading.Lock()


@dataclass
class _Settled:
    """One partition after its commit: its report entry, what it adds to the run's errors and warnings, and
    its cleaner checkpoint."""

    entry: dict[str, Any]
    errors: list[dict[str, Any]]
    warnings: list[str]
    checkpoint: int | None
    checkpoint_changed: bool


def _must(one: _Settled | None) -> _Settled:
    """A settled partition that was not handed over (only a memory-first task's outcome is)."""
    assert one is not None
    return one


def _died(task: CompactTask, failure: TaskFailure) -> PartitionOutcome:
    """The outcome of a partition whose task died (its Python worker was killed, its result would not pickle)."""
    return PartitionOutcome(task.plan.topic, task.plan.partition,
                            error=PartitionError(failure.kind, f"the cleaning task failed: {failure.detail}"))


def _settle(ctx: JobContext, key: tuple[str, int], plan: CompactionPlan, state: PartitionState,
            outcome: PartitionOutcome | None, *, checkpoint: int | None, untouched: bool,
            retention: dict[tuple[str, int], dict[str, Any]], tally: Tally) -> _Settled:
    """Commit each changed group of one partition (crash-safe, in order) and build its report entry. Runs on
    the commit thread for partitions with a task (see jobs.engine.streaming): it touches only this partition's
    files and returns what the run's report and checkpoint need."""
    from jobs.logdir.commit import StagedSegment

    committed = mid_commit = False
    errors: list[dict[str, Any]] = []
    run_warnings: list[str] = []
    warnings = list(ctx.scans[key].warnings)  # the summary's note shows them with the partition's row
    new_cp, checkpoint_changed = checkpoint, False
    if plan.checkpoint_reset and not untouched:
        new_cp, checkpoint_changed = plan.first_dirty_offset, True
    if outcome is not None and outcome.error is None and not ctx.dry_run:
        p_uri = ctx.listing.partitions[key].uri
        try:
            for g in outcome.groups:
                if g.changed:
                    ctx.keep_lease()
                    ctx.committer.promote(p_uri, g.old_bases[0], g.staged_suffixes, g.mtime_ms)
                    ctx.committer.replace_segments(p_uri, old_base_offsets=g.old_bases,
                                                   new_segments=[StagedSegment(g.old_bases[0], g.staged_suffixes)],
                                                   fault=ctx.fault_for(partition_name(key)))
                    g.committed = committed = True
            new_cp, checkpoint_changed = outcome.end_offset, True
        except SegjobsError as exc:
            # A commit that failed after its intent leaves the partition mid-commit: say so, in what state, and
            # what to do (the next run's recovery takes it up once the cause is fixed).
            outcome.error = PartitionError.from_exception(exc)
            detail, mid_commit = describe_stuck(ctx.storage, p_uri, ctx.work_uri, exc.detail
                                                if isinstance(exc, LocatedError) else exc)
            if mid_commit:
                outcome.error = dataclasses.replace(outcome.error, detail=detail)
    done = f" {tally.add(state.size_bytes)}" if outcome is not None else ""
    if outcome is not None and outcome.error is not None:
        errors.append({"partition": f"{plan.topic}-{plan.partition}", **outcome.error.to_dict()})
        state_word = ("LEFT MID-COMMIT" if mid_commit else "PARTLY COMPACTED, then failed" if committed
                      else "UNCLEANABLE, left untouched")
        with _PROGRESS_LOCK:
            ctx.progress.error(f"{plan.topic}-{plan.partition}: {state_word}: {outcome.error}{done}",
                               event="compact.failed", partition=f"{plan.topic}-{plan.partition}",
                               committed=committed, **tally.fields())
    elif outcome is not None:
        with _PROGRESS_LOCK:
            ctx.progress(f"{plan.topic}-{plan.partition}: {'measured' if ctx.dry_run else 'compacted'} in "
                         f"{outcome.seconds}s{done}", event="compact.partition", **outcome.progress_fields(),
                         **tally.fields())
        for problem in (p for g in outcome.groups if g.committed or ctx.dry_run for p in g.corrupt_indexes):
            note = f"{plan.topic}-{plan.partition}: {problem}: {'would rebuild' if ctx.dry_run else 'rebuilt'} it"
            with _PROGRESS_LOCK:
                ctx.progress(note, event="index.rebuilt", partition=f"{plan.topic}-{plan.partition}")
            run_warnings.append(note)
            warnings.append(note)
    if ctx.dry_run and not untouched:
        would = outcome.end_offset if outcome and not outcome.error else None
        shown = would if would is not None else (plan.first_dirty_offset if plan.checkpoint_reset else new_cp)
    else:
        shown = new_cp
    entry = _entry(plan, state, outcome, dry_run=ctx.dry_run, committed=committed, checkpoint=shown)
    if untouched:
        reason = f"left untouched: retention {retention[key]['reason']}"
        entry.update(selected=False, action="skipped", reason=reason, note=reason)
    if key in retention:
        entry["retention"] = retention[key]
    entry["warnings"] = warnings
    return _Settled(entry, errors, run_warnings, new_cp, checkpoint_changed)


def _record_settled(ctx: JobContext, plans: dict[tuple[str, int], CompactionPlan],
                    settled: dict[tuple[str, int], _Settled], checkpoints: dict[tuple[str, int], int]) -> bool:
    """Report entries, errors and warnings of the settled partitions in partition order (whatever order their
    tasks finished in), their checkpoints into ``checkpoints``; whether any checkpoint changed."""
    changed = False
    for key in plans:
        s = settled.get(key)
        if s is None:
            continue
        ctx.report.errors.extend(s.errors)
        ctx.report.warnings.extend(s.warnings)
        ctx.report.partitions.append(s.entry)
        if s.checkpoint is not None:
            checkpoints[key] = s.checkpoint
        changed |= s.checkpoint_changed
    return changed


def _compaction_decision(plan: CompactionPlan, held: bool) -> dict[str, Any]:
    """What a plan file records of a partition's compaction before any task runs (compared by ``--apply``
    before anything is changed); the task's outcome is added by :func:`_check_outcome_against_plan`."""
    if held:
        return {"selected": False, "held": True}
    out: dict[str, Any] = {"selected": plan.selected}
    if plan.selected:
        out.update(first_dirty_offset=plan.first_dirty_offset, first_uncleanable_offset=plan.first_uncleanable_offset)
    return out


def _check_outcome_against_plan(ctx: JobContext, planfile: PlanStage, key: tuple[str, int],
                                outcome: PartitionOutcome) -> None:
    """Record what the cleaning task decided (where the pass ends, the groups it rewrites, what goes) and,
    with ``--apply``, turn a difference from the plan into the partition's error: its staged files are
    discarded and nothing of it is committed. The planners and tasks are deterministic, so this only
    happens when segjobs itself changed between plan and apply."""
    name = partition_name(key)
    decided = {"end_offset": outcome.end_offset,
               "groups": [g.old_bases for g in outcome.groups if g.changed],
               "records_removed": sum(g.records_before - g.records_after for g in outcome.groups if g.changed),
               "bytes_removed": sum(g.bytes_before - g.bytes_after for g in outcome.groups if g.changed)}
    planfile.decisions.setdefault(name, {}).setdefault("compaction", {})["outcome"] = decided
    planned = planfile.planned(name, "compaction")
    if planned is None:
        return
    diff = decision_difference(planned.get("outcome"), decided, "compaction.outcome")
    if diff:
        outcome.error = PartitionError("PlanMismatch", f"the cleaning task decided differently than the plan "
                                       f"{planfile.apply_uri} ({diff}); nothing of this partition was committed")
        _discard_staged(ctx, ctx.listing.partitions[key].uri, outcome)


def _discard_staged(ctx: JobContext, partition_uri: str, outcome: PartitionOutcome) -> None:
    for g in outcome.groups:
        ctx.committer.discard(partition_uri, g.old_bases[0], g.staged_suffixes)


_TABLE_COLUMNS = (("partition", "partition"), ("action", "action"), ("strategy", "strategy"), ("dirty", "dirty"),
                  ("segments", "segments"), ("bytes", "bytes"), ("records_removed", "records removed"),
                  ("tombstones_removed", "tombstones removed"), ("aborted_removed", "aborted removed"),
                  ("retention", "retention"), ("note", "note"))


_TOPIC_COLUMNS = (("topic", "topic"), ("partitions", "partitions"), ("selected", "selected"),
                  ("compacted", "compacted"), ("segments", "segments"), ("bytes", "bytes"),
                  ("records_removed", "records removed"), ("tombstones_removed", "tombstones removed"),
                  ("aborted_removed", "aborted removed"), ("retention", "retention"), ("note", "note"))


def _note(e: dict[str, Any]) -> str | None:
    """Why a partition was (not) compacted, what failed, whether the clean was partial, and what its
    retention (compact,delete topics) purged or left pending, in one line."""
    from jobs.engine.retention import purge_notes

    retention = e.get("retention") or {}
    if retention.get("action") == "refused":  # the row's whole news: the limit held the partition, said once
        return one_line("; ".join([f"left untouched: {refused_note(retention)}"] + purge_notes(retention)))
    notes = problem_notes(e)
    if e.get("partial"):
        notes.append(f"partial: map full at offset {(e.get('cleaned_range') or [None, '?'])[1]}, "
                     f"next run continues (external-sort would clean it in one run)")
    if e.get("strategy") == "external-sort":  # why memory was not enough (or not asked for)
        notes.append(f"{e['strategy']}: {e.get('strategy_reason')}")
    notes += problem_notes(retention, label="retention") + purge_notes(retention)
    if not e.get("error"):
        # why it was skipped is the news of a skipped row; why a compacted one was selected comes last
        notes.insert(0 if not e.get("selected") else len(notes), e.get("note") or "")
    return one_line("; ".join(n for n in notes if n)) or None


def _summarize(ctx: JobContext) -> None:
    """Totals into the report (the command renders them: :func:`render_summary`). ``errors`` counts every entry
    of ``report.errors`` (each makes the run exit 1); ``failed`` and ``refused`` split them into failures and
    partitions the delete-fraction limit left untouched."""
    from jobs.engine.retention import REFUSED_KIND

    failed, refused = outcome_counts(ctx.report, REFUSED_KIND)
    totals = {"partitions": len(ctx.report.partitions), "selected": 0, "records_removed": 0, "bytes_removed": 0,
              "errors": len(ctx.report.errors), "failed": failed, "refused": refused, "bytes_compacted": 0,
              "files_purged": 0, "bytes_purged": 0}
    for e in ctx.report.partitions:
        if e.get("selected"):
            totals["selected"] += 1
            totals["bytes_compacted"] += int(e.get("bytes_before") or 0)
        totals["records_removed"] += int(e.get("records_removed") or 0)
        totals["bytes_removed"] += int(e.get("bytes_removed") or 0)
        retention = e.get("retention") or {}
        if retention.get("bytes_removed"):
            totals["bytes_removed"] += int(retention["bytes_removed"])
        totals["files_purged"] += len(retention.get("purged") or [])
        totals["bytes_purged"] += int(retention.get("purged_bytes") or 0)
    ctx.report.totals.update(totals)


def _row(e: dict[str, Any]) -> dict[str, Any]:
    """A partition's row of the summary table."""
    stats = e.get("stats") or {}
    retention = e.get("retention") or {}
    return {
        "partition": f"{e['topic']}-{e['partition']}", "action": e.get("action", ""),
        "strategy": e.get("strategy") or "-",
        "dirty": None if e.get("dirty_ratio") is None else f"{float(e['dirty_ratio']):.2f}",  # None: "-"
        "segments": f"{e.get('segments_before', '-')}->{e.get('segments_after', '-')}",
        "bytes": f"{human_bytes(e.get('bytes_before'))} -> {human_bytes(e.get('bytes_after'))}",
        "records_removed": e.get("records_removed", 0),
        "tombstones_removed": stats.get("tombstones_removed", "-"),
        "aborted_removed": stats.get("aborted_records_removed", "-"),
        "retention": (f"-{len(retention.get('deleted') or [])} seg, "
                      f"{human_bytes(retention.get('bytes_removed'))}") if retention.get("bytes_removed") else "-",
        "note": _note(e),
    }


def _sum(entries: list[dict[str, Any]], key: str, within: str | None = None) -> int:
    return sum(int(((e.get(within) or {}) if within else e).get(key) or 0) for e in entries)


def _topic_row(topic: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A topic's row of the per-topic summary: its partitions added up, and in the note what its partitions'
    rows would have said when they all say it (a refusal once, counts of failed and partial partitions)."""
    retentions = [e.get("retention") or {} for e in entries]
    refused = next((r for r in retentions if r.get("action") == "refused"), None)
    failed = sum(1 for e in entries if e.get("error")) + sum(1 for r in retentions
                                                             if r.get("error") and r.get("action") != "refused")
    notes = [f"left untouched: {refused_note(refused)}" if refused else "",
             count_note(failed, "FAILED (listed below)"),
             count_note(sum(1 for e in entries if e.get("partial")), "partial (listed below)")]
    if not any(notes):
        notes.append(shared_note(_note(e) for e in entries))
    deleted = sum(len(r.get("deleted") or []) for r in retentions)
    removed = _sum(retentions, "bytes_removed") if not refused else 0
    return {
        "topic": topic, "partitions": len(entries), "selected": sum(1 for e in entries if e.get("selected")),
        "compacted": sum(1 for e in entries if e.get("action") in ("compacted", "partly compacted", "would compact")),
        "segments": f"{_sum(entries, 'segments_before')}->{_sum(entries, 'segments_after')}",
        "bytes": f"{human_bytes(_sum(entries, 'bytes_before'))} -> {human_bytes(_sum(entries, 'bytes_after'))}",
        "records_removed": _sum(entries, "records_removed"),
        "tombstones_removed": _sum(entries, "tombstones_removed", "stats"),
        "aborted_removed": _sum(entries, "aborted_records_removed", "stats"),
        "retention": f"-{deleted} seg, {human_bytes(removed)}" if removed else "-",
        "note": one_line("; ".join(n for n in notes if n)) or None,
    }


def _needs_a_look(e: dict[str, Any]) -> bool:
    """A partition a per-topic summary names below its table: failed, partial, or with a warning (a refusal
    is said once on its topic's row)."""
    retention = e.get("retention") or {}
    return bool(e.get("error") or e.get("partial") or e.get("warnings")
                or (retention.get("error") and retention.get("action") != "refused") or retention.get("warnings"))


def render_summary(report: RunReport, *, dry_run: bool, layout: str = "auto", width: int | None = None) -> str:
    """The compact command's stdout: the table, the totals line and the footer (elapsed, MB/s). The table has a
    row per partition (by topic and partition number), or beyond :data:`~jobs.engine.report.PARTITION_ROWS_MAX`
    partitions (``layout``: see :func:`~jobs.engine.report.rows_per_partition`) a row per topic, followed by
    the partitions that need a look. ``width``: the terminal's, which the table fits (notes wrap, never cut).
    The summary is the command's output: --quiet only silences progress."""
    entries = sorted(report.partitions, key=partition_order)
    if rows_per_partition(layout, len(entries)):
        body = [render_table([_row(e) for e in entries], _TABLE_COLUMNS, width=width)]
    else:
        body = [render_table([_topic_row(t, es) for t, es in by_topic(entries)], _TOPIC_COLUMNS, width=width)]
        body += attention_table([e for e in entries if _needs_a_look(e)], _row, _TABLE_COLUMNS, width=width)
    t = report.totals
    verb = "would remove" if dry_run else "removed"
    return "\n".join([
        *body, "",
        f"{t['selected']} of {t['partitions']} partition(s) selected; {verb} {t['records_removed']} record(s), "
        f"{human_bytes(t['bytes_removed'])}"
        + purged_totals(t)
        + outcome_totals(t),
        render_footer(report, t.get("bytes_compacted", 0), "in the selected partitions"),
        *filter(None, [policy_origins(report)]),
    ])


#: The options a plan file records for ``compact`` (fields of CompactOptions; see jobs.engine.planfile).
PLAN_OPTIONS = ("max_delete_fraction", "dedupe_buffer_bytes", "strategy")

__all__ = ["DEFAULT_DEDUPE_BUFFER_BYTES", "PLAN_OPTIONS", "STRATEGIES", "CompactTask", "GroupOutcome",
           "PartitionOutcome", "compact_partition", "render_summary", "work"]

