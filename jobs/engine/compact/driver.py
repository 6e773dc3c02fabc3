"""The compaction job's driver: retention first for compact,delete partitions, plan, run the cleaning tasks of
either strategy (:mod:`jobs.engine.compact.cleaning`, :mod:`jobs.engine.compact.external_sort`), commit each partition
crash-safely, and build the report. Its summary is rendered by :mod:`jobs.engine.report.render`.

What `segjobs compact` does, in users' words, is the docstring of :mod:`jobs.commands.compact`."""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from jobs.engine.compact.bin_cleaning import compact_bin
from jobs.engine.compact.cleaning import CompactTask, GroupOutcome, PartitionOutcome, compact_partition
from jobs.engine.compact.external_sort import ExternalSortRun, choose
from jobs.engine.compact.selection import scan_candidates
from jobs.engine.compact.streaming import Tally, run_and_settle_bins
from jobs.engine.frame.job import JobContext
from jobs.engine.frame.options import DEFAULT_DEDUPE_BUFFER_BYTES, STRATEGIES, CompactOptions
from jobs.engine.frame.planfile import PlanStage, partition_name
from jobs.engine.report.outcomes import (
    Action,
    CleanedRange,
    CleaningDecision,
    CompactionDecision,
    CompactionOutcome,
    CompactTotals,
    RetentionDecision,
    RetentionOutcome,
    unreadable_reason,
)
from jobs.engine.report.run_report import Progress
from jobs.engine.retain.driver import (
    DeleteLimit,
    RetentionParams,
    apply_retention_first,
    plan_retention_first,
)
from jobs.engine.runtime.tasks import TaskFailure
from jobs.engine.scan import PartitionError, ReportError
from jobs.logdir.checkpoints import write_cleaner_checkpoint
from jobs.logdir.commit import Committer, ReplaceRequest, StagedSegment
from jobs.logdir.recover import describe_stuck
from jobs.rules.external_sort import handed_over
from jobs.rules.model import PartitionState
from jobs.rules.offset_map import max_keys_for_buffer
from jobs.rules.plan_compact import CompactionPlan, plan_compaction, updated_cleaner_checkpoints
from segment_io.errors import LocatedError, SegjobsError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT

# --------------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------------


def _outcome(plan: CompactionPlan, state: PartitionState, outcome: PartitionOutcome | None, *, dry_run: bool,
             checkpoint: int | None) -> CompactionOutcome:
    """What became of one partition: its plan, and what its cleaning task (None: no task ran) did."""
    segs_before = len(state.segments)
    bytes_before = state.size_bytes
    planned = CompactionOutcome(
        plan.topic, plan.partition, Action.SKIPPED, plan.reason, selected=plan.selected, note=plan.note,
        dirty_ratio=None if plan.dirty_ratio is None else round(plan.dirty_ratio, 4), clean_bytes=plan.clean_bytes,
        cleanable_bytes=plan.cleanable_bytes, first_dirty_offset=plan.first_dirty_offset,
        first_uncleanable_offset=plan.first_uncleanable_offset, bound_by=plan.bound_by,
        previous_checkpoint=plan.previous_checkpoint, new_checkpoint=checkpoint, segments_before=segs_before,
        bytes_before=bytes_before, segments_after=segs_before, bytes_after=bytes_before)
    if outcome is None:
        return planned
    # What counts: in a dry run every group that would change; in a real run the groups actually committed.
    applied = [g for g in outcome.groups if g.changed and (dry_run or g.committed)]
    changed = [g for g in outcome.groups if g.changed]
    removed_segments = sum(len(g.old_bases) - 1 for g in applied)
    bytes_after = bytes_before - sum(g.bytes_before - g.bytes_after for g in applied)
    if outcome.error:
        action = Action.PARTLY_COMPACTED if applied and not dry_run else Action.ERROR
    elif dry_run:
        action = Action.WOULD_COMPACT if applied else Action.WOULD_LEAVE_UNCHANGED
    else:
        action = Action.COMPACTED if applied else Action.UNCHANGED
    cleaned = CleanedRange((plan.first_dirty_offset, outcome.end_offset), partial=outcome.map_full,
                           groups=len(outcome.groups), groups_rewritten=len(applied),
                           records_before=sum(g.records_before for g in applied),
                           records_after=sum(g.records_after for g in applied), stats=outcome.stats,
                           task_seconds=outcome.seconds,
                           indexes_rebuilt=tuple(p for g in applied for p in g.corrupt_indexes))
    reason = plan.reason
    if outcome.error and applied and not dry_run:
        reason = (f"partly compacted: {len(applied)} of {len(changed)} changed segment group(s) were committed "
                  f"before this failure, the rest left untouched and the cleaner checkpoint not advanced (the next "
                  f"run continues): {outcome.error}")
    elif outcome.error:
        reason = f"uncleanable, left untouched: {outcome.error}"
    elif outcome.map_full:
        reason += (f"; offset map full: cleaned up to offset {outcome.end_offset}, the next run continues "
                   f"(raise --dedupe-buffer-bytes to clean more per pass)")
    return dataclasses.replace(planned, action=action, reason=reason, error=outcome.error, cleaned=cleaned,
                               segments_after=segs_before - removed_segments, bytes_after=bytes_after,
                               records_removed=cleaned.records_before - cleaned.records_after,
                               bytes_removed=bytes_before - bytes_after)


def work(ctx: JobContext) -> None:
    """The compaction job's work (see :func:`jobs.engine.frame.job.run_job`): retention first for compact,delete
    partitions, plan, run the cleaning tasks, commit each changed group of each partition, write the cleaner
    checkpoint, and fill the report (entries and totals)."""
    options = ctx.options
    assert isinstance(options, CompactOptions)
    planfile = ctx.planfile
    # the partitions that may be due, read in full (the frame scanned sizes only)
    scan_candidates(ctx.scans, storage=ctx.storage, listing=ctx.listing, checkpoints=ctx.checkpoints,
                    configs=ctx.configs, scope=ctx.scope, now_ms=ctx.now_ms, max_batch_bytes=ctx.max_batch_bytes,
                    runner=ctx.runner, job_description=ctx.job_description, warnings=ctx.report.warnings,
                    progress=ctx.progress)
    max_keys = max_keys_for_buffer(options.dedupe_buffer_bytes)
    # each topic's configuration resolved once: its partitions' tasks then share one object, which a bin's task
    # pickles once (rather than once per partition)
    config_of = functools.cache(ctx.configs.for_topic)
    # compact,delete partitions: retention first, compaction planned on what it leaves (see RetentionFirst)
    first = plan_retention_first(RetentionParams.from_job(ctx), ctx.scans, config_of,
                                 DeleteLimit.of_job(ctx), parallel_map=ctx.parallel_map,
                                 max_batch_bytes=ctx.max_batch_bytes)
    held = first.held()
    plans: dict[tuple[str, int], CompactionPlan] = {}
    states: dict[tuple[str, int], PartitionState] = {}
    tasks: list[CompactTask] = []
    for key, scan in sorted(ctx.scans.items()):
        if scan.error is not None:
            ctx.report.add(CompactionOutcome(scan.topic, scan.partition, Action.ERROR, unreadable_reason(scan.error),
                                             error=scan.error, readable=False))
            ctx.report.errors.append({"partition": scan.name, **scan.error.to_dict()})
            continue
        config = config_of(scan.topic)
        listing, scan = first.compaction_input(key, ctx.listing.partitions[key], scan)
        plan = plan_compaction(scan.scanned, config, ctx.now_ms, requested=ctx.scope.explicit(*key))
        plans[key], states[key] = plan, scan.scanned
        if plan.selected and key not in held:
            tasks.append(CompactTask(ctx.storage, listing, scan.scanned, plan, config, scan.txn, ctx.now_ms, max_keys,
                                     ctx.dry_run, ctx.committer, ctx.max_batch_bytes))
    planfile.check_decisions({partition_name(k): RetentionDecision.of(p, k in held)
                                   for k, p in first.plans.items()}, "retention")
    planfile.check_decisions({partition_name(k): CompactionDecision.of(p, k in held)
                                   for k, p in plans.items()}, "compaction")
    retention = apply_retention_first(first, ctx.scans, config_of, work_uri=ctx.work_uri,
                                      report=ctx.report, progress=ctx.progress)
    # Where retention failed half-way the partition is not what compaction was planned on: leave it alone.
    failed = {k for k, r in retention.items() if r.action is Action.ERROR and k in first.plans}
    tasks = [t for t in tasks if (t.plan.topic, t.plan.partition) not in failed]
    ctx.progress(f"{len(tasks)} of {len(plans)} partition(s) selected for compaction", event="compact.selected",
                 partitions=len(tasks))
    # --strategy: each partition is cleaned by the memory strategy's task or by the external-sort stages
    # (jobs.engine.compact.external_sort); both give PartitionOutcomes with staged groups, committed alike by _settle.
    # Memory-first partitions (auto, more records than the map holds) run as memory tasks that hand the
    # partition over to external-sort, with the pieces they read, if their map fills.
    strategies = choose(tasks, options.strategy)
    sorter = ExternalSortRun(ctx.storage, ctx.work_uri, ctx.report.run_id, dry_run=ctx.dry_run, runner=ctx.runner,
                             describe=ctx.job_description, progress=ctx.progress,
                             bucket_bytes=options.sort_bucket_bytes)
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

    committing = _Committing(ctx.committer, ctx.keep_lease, ctx.fault_for, ctx.progress, ctx.dry_run,
                             {k: ctx.listing.partitions[k].uri for k in plans},
                             {k: ctx.scans[k].warnings for k in plans})

    def settle_bin(batch: list[tuple[tuple[str, int], PartitionOutcome | None]],
                   emit: Callable[[tuple[str, int], _Settled | None], None]) -> None:
        # the bin's partitions committed together (see _commit_bin), each reported as soon as it is done
        def report(key: tuple[str, int], outcome: PartitionOutcome | None, commit: _Commit | None) -> None:
            one = _settle(committing, key, plans[key], states[key], outcome, checkpoint=checkpoints.get(key),
                          untouched=key in held or key in failed, retention=retention, tally=tally, commit=commit)
            if outcome is not None and key in strategies:
                one.outcome = replace(one.outcome, strategy=strategies[key].strategy,
                                      strategy_reason=strategies[key].reason, external_sort=sort_details.get(key))
            emit(key, one)

        commits = []
        for key, outcome in batch:
            if outcome is not None and outcome.handover is not None:
                emit(key, None)  # handed over to external-sort: settled once that has cleaned it
            elif outcome is None or outcome.error is not None or ctx.dry_run or not any(g.changed
                                                                                        for g in outcome.groups):
                report(key, outcome, None)
            else:
                commits.append(_Commit(key, outcome))
        _commit_bin(committing, commits, lambda x: report(x.key, x.outcome, x))

    def settle(key: tuple[str, int], outcome: PartitionOutcome | None) -> _Settled | None:
        one: list[_Settled | None] = []
        settle_bin([(key, outcome)], lambda _, value: one.append(value))
        return one[0] if one else None

    def prepare(i: int, result: PartitionOutcome | TaskFailure) -> PartitionOutcome:
        # on the driver's thread: the plan check records into the plan file's decisions
        outcome = result if isinstance(result, PartitionOutcome) else _died(tasks[i], result)
        if outcome.handover is not None:
            handed[task_keys[i]] = outcome.handover
        elif outcome.error is None:
            _check_outcome_against_plan(ctx, planfile, task_keys[i], outcome)
        return outcome

    # Partitions without a task first (nothing to commit), then each memory task's partition as its task
    # finishes: its commit overlaps the tasks still running (see jobs.engine.compact.streaming); then the external-sort
    # partitions, once their passes are done, one after another in partition order.
    with_task = set(task_keys) | set(sort_keys)
    settled: dict[tuple[str, int], _Settled] = {}
    for key in plans:
        if key not in with_task:
            settled[key] = _must(settle(key, None))
    done: dict[int, _Settled | None] = {}  # the memory tasks' partitions, by task, as each is settled
    try:
        index_of = {key: i for i, key in enumerate(task_keys)}
        run_and_settle_bins(ctx.runner, compact_bin, tasks, sizes=[t.state.size_bytes for t in tasks],
                            prepare=prepare, settled=done,
                            settle=lambda batch, emit: settle_bin([(task_keys[i], o) for i, o in batch],
                                                                  lambda key, v: emit(index_of[key], v)),
                            description=ctx.job_description(
                                f"{'measure' if ctx.dry_run else 'compact'} {len(tasks)} partition(s)"))
        settled.update({task_keys[i]: v for i, v in done.items() if v is not None})
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
    except BaseException:
        # e.g. the lease was lost: what was committed stands and is reported, the checkpoint is not written
        settled.update({task_keys[i]: v for i, v in done.items() if v is not None})
        _record_settled(ctx, plans, settled, checkpoints)
        raise
    finally:
        sorter.close()
    checkpoint_changed = _record_settled(ctx, plans, settled, checkpoints)
    if checkpoint_changed and not ctx.dry_run:
        # once, at the end: a partition's commit is complete without it (a run that stops before
        # this point cleans the committed range again next time, which changes nothing)
        entries = updated_cleaner_checkpoints(checkpoints, live)
        write_cleaner_checkpoint(ctx.storage, ctx.log_dir, entries)
    ctx.write_plan("compact", {name: getattr(options, name) for name in PLAN_OPTIONS})
    _summarize(ctx)


#: Progress lines come from the commit thread and the driver's: one at a time, so that two never mix.
_PROGRESS_LOCK = threading.Lock()


@dataclass
class _Settled:
    """One partition after its commit: its outcome, what it adds to the run's errors and warnings, and
    its cleaner checkpoint."""

    outcome: CompactionOutcome
    errors: list[ReportError]
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


@dataclass(frozen=True)
class _Committing:
    """What settling a partition uses (see :func:`_settle`): the store's commit protocol, the lease check made
    before each commit, the fault hook of a partition's commit steps, where progress goes, whether the run is a
    dry run, and per partition its directory and the warnings its scan found."""

    committer: Committer
    keep_lease: Callable[[], None]
    fault_for: Callable[[str], Callable[[str], None] | None]
    progress: Progress
    dry_run: bool
    partition_uris: Mapping[tuple[str, int], str]
    warnings: Mapping[tuple[str, int], Sequence[str]]


@dataclass
class _Commit:
    """One partition of a bin whose changed groups are being committed (see :func:`_commit_bin`)."""

    key: tuple[str, int]
    outcome: PartitionOutcome
    #: some group of it was committed
    committed: bool = False
    #: its commit failed after its intent: the partition is left mid-commit (recovery takes it up)
    mid_commit: bool = False


def _commit_bin(c: _Committing, commits: Sequence[_Commit], finished: Callable[[_Commit], None]) -> None:
    """Commit the changed groups of a bin's partitions, in lockstep (``Committer.replace_lockstep``): round ``r``
    commits the ``r``-th changed group of every partition that has one, in order, so each partition's groups are
    committed one after another, while the syncs of a round are shared by all of its partitions. The lease is
    checked before each round: a lost lease stops the run
    between two rounds, each partition's committed groups standing. ``finished(commit)`` is called for each
    partition once its last group is committed or its commit failed (``outcome.error`` then says how, and
    whether it was left mid-commit)."""
    active = list(commits)
    changed = {x.key: [g for g in x.outcome.groups if g.changed] for x in commits}
    r = 0
    while active:
        c.keep_lease()
        groups = [changed[x.key][r] for x in active]
        requests = [ReplaceRequest(c.partition_uris[x.key], g.old_bases, [StagedSegment(g.old_bases[0],
                                                                                         g.staged_suffixes)],
                                   fault=c.fault_for(partition_name(x.key)), promote=True, mtime_ms=g.mtime_ms)
                    for x, g in zip(active, groups)]
        results = c.committer.replace_lockstep(requests, barrier_fault=c.fault_for(""))
        still = []
        for x, g, result in zip(active, groups, results):
            if isinstance(result, SegjobsError):
                # A commit that failed after its intent leaves the partition mid-commit: say so, in what state,
                # and what to do (the next run's recovery takes it up once the cause is fixed).
                x.outcome.error = PartitionError.from_exception(result)
                detail, x.mid_commit = describe_stuck(c.committer.storage, c.partition_uris[x.key],
                                                      c.committer.work_uri, result.detail
                                                      if isinstance(result, LocatedError) else result)
                if x.mid_commit:
                    x.outcome.error = dataclasses.replace(x.outcome.error, detail=detail)
                finished(x)
                continue
            g.committed = x.committed = True
            if r + 1 < len(changed[x.key]):
                still.append(x)
            else:
                finished(x)
        active, r = still, r + 1


def _settle(c: _Committing, key: tuple[str, int], plan: CompactionPlan, state: PartitionState,
            outcome: PartitionOutcome | None, *, checkpoint: int | None, untouched: bool,
            retention: dict[tuple[str, int], RetentionOutcome], tally: Tally, commit: _Commit | None) -> _Settled:
    """The outcome of one partition once its changed groups are committed (``commit``: how that went; None when
    nothing was to commit) or it failed. Runs on the commit thread for partitions with a task (see
    jobs.engine.compact.streaming): it touches only this partition's entry and returns what the run's report and
    checkpoint need."""
    committed = commit is not None and commit.committed
    mid_commit = commit is not None and commit.mid_commit
    errors: list[ReportError] = []
    run_warnings: list[str] = []
    warnings = list(c.warnings[key])  # the summary's note shows them with the partition's row
    new_cp, checkpoint_changed = checkpoint, False
    if plan.checkpoint_reset and not untouched:
        new_cp, checkpoint_changed = plan.first_dirty_offset, True
    if outcome is not None and outcome.error is None and not c.dry_run:
        new_cp, checkpoint_changed = outcome.end_offset, True
    done = f" {tally.add(state.size_bytes)}" if outcome is not None else ""
    if outcome is not None and outcome.error is not None:
        errors.append({"partition": f"{plan.topic}-{plan.partition}", **outcome.error.to_dict()})
        state_word = ("LEFT MID-COMMIT" if mid_commit else "PARTLY COMPACTED, then failed" if committed
                      else "NOT COMPACTED (the machine refused), left untouched"
                      if outcome.error.kind == "StorageEnvironmentError" else "UNCLEANABLE, left untouched")
        with _PROGRESS_LOCK:
            c.progress.error(f"{plan.topic}-{plan.partition}: {state_word}: {outcome.error}{done}",
                               event="compact.failed", partition=f"{plan.topic}-{plan.partition}",
                               committed=committed, **tally.fields())
    elif outcome is not None:
        with _PROGRESS_LOCK:
            c.progress(f"{plan.topic}-{plan.partition}: {'measured' if c.dry_run else 'compacted'} in "
                         f"{outcome.seconds}s{done}", event="compact.partition", **outcome.progress_fields(),
                         **tally.fields())
        for problem in (p for g in outcome.groups if g.committed or c.dry_run for p in g.corrupt_indexes):
            note = f"{plan.topic}-{plan.partition}: {problem}: {'would rebuild' if c.dry_run else 'rebuilt'} it"
            with _PROGRESS_LOCK:
                c.progress(note, event="index.rebuilt", partition=f"{plan.topic}-{plan.partition}")
            run_warnings.append(note)
            warnings.append(note)
    if c.dry_run and not untouched:
        would = outcome.end_offset if outcome and not outcome.error else None
        shown = would if would is not None else (plan.first_dirty_offset if plan.checkpoint_reset else new_cp)
    else:
        shown = new_cp
    one = _outcome(plan, state, outcome, dry_run=c.dry_run, checkpoint=shown)
    if untouched:
        reason = f"left untouched: retention {retention[key].reason}"
        one = replace(one, selected=False, action=Action.SKIPPED, reason=reason, note=reason)
    return _Settled(replace(one, retention=retention.get(key), warnings=tuple(warnings)), errors, run_warnings, new_cp,
                    checkpoint_changed)


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
        ctx.report.add(s.outcome)
        if s.checkpoint is not None:
            checkpoints[key] = s.checkpoint
        changed |= s.checkpoint_changed
    return changed


def _check_outcome_against_plan(ctx: JobContext, planfile: PlanStage, key: tuple[str, int],
                                outcome: PartitionOutcome) -> None:
    """Record what the cleaning task decided (where the pass ends, the groups it rewrites, what goes) and,
    with ``--apply``, turn a difference from the plan into the partition's error: its staged files are
    discarded and nothing of it is committed. The planners and tasks are deterministic, so this only
    happens when segjobs itself changed between plan and apply."""
    name = partition_name(key)
    changed = [g for g in outcome.groups if g.changed]
    decided = CleaningDecision(end_offset=outcome.end_offset, groups=tuple(tuple(g.old_bases) for g in changed),
                               records_removed=sum(g.records_before - g.records_after for g in changed),
                               bytes_removed=sum(g.bytes_before - g.bytes_after for g in changed))
    diff = planfile.record_cleaning(name, decided)
    if diff:
        outcome.error = PartitionError("PlanMismatch", f"the cleaning task decided differently than the plan "
                                       f"{planfile.apply_uri} ({diff}); nothing of this partition was committed")
        _discard_staged(ctx, ctx.listing.partitions[key].uri, outcome)


def _discard_staged(ctx: JobContext, partition_uri: str, outcome: PartitionOutcome) -> None:
    for g in outcome.groups:
        ctx.committer.discard(partition_uri, g.old_bases[0], g.staged_suffixes)


def _summarize(ctx: JobContext) -> None:
    """Totals into the report (the command renders them: :func:`jobs.engine.report.render.render_compact_summary`)."""
    outcomes = [o for o in ctx.report.outcomes if isinstance(o, CompactionOutcome)]
    ctx.report.totals.update(CompactTotals.of(outcomes, ctx.report.errors).to_dict())


#: The options a plan file records for ``compact`` (fields of CompactOptions; see jobs.engine.frame.planfile).
PLAN_OPTIONS = ("max_delete_fraction", "accept_config_baseline", "dedupe_buffer_bytes", "strategy")

__all__ = ["DEFAULT_DEDUPE_BUFFER_BYTES", "PLAN_OPTIONS", "STRATEGIES", "CompactTask", "GroupOutcome",
           "PartitionOutcome", "compact_partition", "work"]

