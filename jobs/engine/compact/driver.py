"""The compaction job's driver: retention first for compact,delete partitions, plan, run the cleaning tasks of
either strategy (:mod:`jobs.engine.compact.cleaning`, :mod:`jobs.engine.compact.external_sort`), commit each partition
crash-safely, and build the report. Its summary is rendered by :mod:`jobs.engine.report.render`.

What `segjobs compact` does, in users' words, is the docstring of :mod:`jobs.commands.compact`."""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from jobs.engine.compact.bin_cleaning import compact_bin
from jobs.engine.compact.cleaning import CompactTask, GroupOutcome, Handover, PartitionOutcome, compact_partition
from jobs.engine.compact.external_sort import ExternalSortRun, choose
from jobs.engine.compact.selection import scan_candidates
from jobs.engine.compact.streaming import Tally, run_and_settle_bins
from jobs.engine.frame.job import JobContext
from jobs.engine.frame.options import DEFAULT_DEDUPE_BUFFER_BYTES, STRATEGIES, CompactOptions
from jobs.engine.frame.planfile import partition_name
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
from jobs.engine.retain.driver import (
    DeleteLimit,
    RetentionParams,
    apply_retention_first,
    plan_retention_first,
)
from jobs.engine.runtime.tasks import TaskFailure
from jobs.engine.scan import PartitionError, ReportError
from jobs.logdir.checkpoints import cleaner_reset_warning, write_cleaner_checkpoint
from jobs.logdir.commit import ReplaceRequest, StagedSegment
from jobs.logdir.recover import describe_stuck
from jobs.rules.external_sort import StrategyChoice, handed_over
from jobs.rules.model import PartitionState
from jobs.rules.offset_map import max_keys_for_buffer
from jobs.rules.plan_compact import CompactionPlan, plan_compaction, updated_cleaner_checkpoints
from segment_io.errors import LocatedError, SegjobsError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT
from segment_io.storage.spool import HostSpool, remove_host_spool

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
    """The compaction job's work (see :func:`jobs.engine.frame.job.run_job`): one :class:`CompactionRun`."""
    CompactionRun(ctx).run()


#: Progress lines come from the commit thread and the driver's: one at a time, so that two never mix.
_PROGRESS_LOCK = threading.Lock()


def _key(task: CompactTask) -> tuple[str, int]:
    return task.plan.topic, task.plan.partition


class CompactionRun:
    """One compaction run on the driver. Its steps, in the order :meth:`run` takes them: :meth:`plan` (retention
    first for compact,delete partitions, then each partition's compaction plan), :meth:`choose_strategies`, then
    each strategy's partitions (:meth:`settle_without_task`, :meth:`run_memory`, :meth:`run_external_sort`), and
    :meth:`finish` (the report's entries in partition order, the cleaner checkpoint, the plan file, the totals).

    Two words, one meaning each:

    - to **commit** a partition is to make its changed segment groups live, crash-safely, through the store's
      committer (:mod:`jobs.logdir.commit`); a bin's partitions are committed together (:meth:`commit_bin`);
    - to **settle** a partition is to end its part in the run: its commit done when it had one (or it failed,
      or there was nothing to commit), what became of it is decided (:class:`Settled`: its outcome, what it adds
      to the run's errors and warnings, its cleaner checkpoint). A memory task's partitions are settled a bin at
      a time (:meth:`settle_bin`) on the commit thread as their task ends, overlapping the tasks still running
      (:mod:`jobs.engine.compact.streaming`); the others one at a time (:meth:`settle`) on the driver's."""

    def __init__(self, ctx: JobContext) -> None:
        options = ctx.options
        assert isinstance(options, CompactOptions)
        self.ctx, self.options = ctx, options
        #: taken here, on the driver's thread: the commit thread uses it too
        self.committer = ctx.committer
        # each topic's configuration resolved once: its partitions' tasks then share one object, which a bin's task
        # pickles once (rather than once per partition)
        self.config_of = functools.cache(ctx.configs.for_topic)
        self.plans: dict[tuple[str, int], CompactionPlan] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        #: the memory strategy's tasks, then the external-sort strategy's (a handed-over one joins them)
        self.tasks: list[CompactTask] = []
        self.sort_tasks: list[CompactTask] = []
        #: the compact,delete partitions whose retention the delete limit held (left wholly untouched), and those
        #: whose retention failed half-way (no longer what compaction was planned on: left alone)
        self.held: set[tuple[str, int]] = set()
        self.failed: set[tuple[str, int]] = set()
        self.retention: dict[tuple[str, int], RetentionOutcome] = {}
        #: on an object store: where the transaction-state scans leave what they fetch for the cleaning tasks
        self.host_spool: HostSpool | None = ctx.host_spool
        #: the partitions the transaction scans read (by tasks: their copies are where each task ran), and whether tasks
        #: scanned compact,delete partitions again as retention leaves them (adding copies where none were)
        self.read_in_full: list[tuple[str, int]] = []
        self.rescanned = False
        self.strategies: dict[tuple[str, int], StrategyChoice] = {}
        self.handed: dict[tuple[str, int], Handover] = {}
        self.sort_details: dict[tuple[str, int], dict[str, Any]] = {}
        self.settled: dict[tuple[str, int], Settled] = {}
        self.cleaner_checkpoints: dict[tuple[str, int], int] = {}
        #: made by choose_strategies
        self.sorter: ExternalSortRun
        self.tally: Tally

    def run(self) -> None:
        """Every step, in order; a run stopped half-way (the lease lost) reports the partitions settled so far
        and writes no cleaner checkpoint."""
        try:
            self.plan()
            self.choose_strategies()
            self.settle_without_task()
            try:
                self.run_memory()
                self.run_external_sort()
                self.remove_copies()
            except BaseException:
                # e.g. the lease was lost: what was committed stands and is reported, the checkpoint is not written
                self.record()
                raise
            finally:
                self.sorter.close()
            self.finish()
        finally:
            if self.host_spool is not None:  # the driver's own copies (its first scan's), however the run ended
                self.host_spool.remove()

    def remove_copies(self) -> None:
        """Remove what the scans left on their hosts that no cleaning task removed (partitions not selected, held,
        or handed to external-sort): a task for each slot of the session, best effort (a host none of them reaches
        loses the copies with Spark's scratch dirs, or a day later; see :class:`HostSpool`). The driver removes its
        own when the run ends (:meth:`run`)."""
        if self.host_spool is None or not (self.read_in_full or self.rescanned):
            return
        slots = max(1, self.ctx.runner.parallelism)
        try:
            self.ctx.runner.map(remove_host_spool, [self.host_spool] * slots, tasks=slots,
                                description=self.ctx.job_description("remove the scans' copies of segments"))
        except Exception:  # noqa: BLE001 - tidying only: the run's outcome stands
            pass

    def plan(self) -> None:
        """Retention first for compact,delete partitions, then each partition's compaction plan on what it leaves
        (:class:`jobs.engine.retain.driver.RetentionFirst`), checked against an applied plan file; retention then
        carried out, and a cleaning task for each selected partition it left as planned."""
        ctx = self.ctx
        # the partitions that may be due, read in full (the frame scanned sizes only, and the small ones in full)
        self.read_in_full = scan_candidates(
            ctx.scans, storage=ctx.storage, listing=ctx.listing, checkpoints=ctx.checkpoints, configs=ctx.configs,
            scope=ctx.scope, now_ms=ctx.now_ms, max_batch_bytes=ctx.max_batch_bytes, runner=ctx.runner,
            job_description=ctx.job_description, warnings=ctx.report.warnings, progress=ctx.progress,
            spool=self.host_spool, driver_threads=ctx.driver_read_threads)
        max_keys = max_keys_for_buffer(self.options.dedupe_buffer_bytes)
        first = plan_retention_first(RetentionParams.from_job(ctx), ctx.scans, self.config_of,
                                     DeleteLimit.of_job(ctx), parallel_map=ctx.parallel_map,
                                     max_batch_bytes=ctx.max_batch_bytes, spool=self.host_spool)
        self.held = first.held()
        self.rescanned = bool(first.after)
        tasks: list[CompactTask] = []
        for key, scan in sorted(ctx.scans.items()):
            if scan.error is not None:
                ctx.report.add(CompactionOutcome(scan.topic, scan.partition, Action.ERROR,
                                                 unreadable_reason(scan.error), error=scan.error, readable=False))
                ctx.report.errors.append({"partition": scan.name, **scan.error.to_dict()})
                continue
            config = self.config_of(scan.topic)
            listing, scan = first.compaction_input(key, ctx.listing.partitions[key], scan)
            plan = plan_compaction(scan.scanned, config, ctx.now_ms, requested=ctx.scope.explicit(*key))
            self.plans[key], self.states[key] = plan, scan.scanned
            if plan.selected and key not in self.held:
                tasks.append(CompactTask(ctx.storage, listing, scan.scanned, plan, config, scan.txn, ctx.now_ms,
                                         max_keys, ctx.dry_run, self.committer, ctx.max_batch_bytes,
                                         host_spool=self.host_spool))
        ctx.planfile.check_decisions({partition_name(k): RetentionDecision.of(p, k in self.held)
                                      for k, p in first.plans.items()}, "retention")
        ctx.planfile.check_decisions({partition_name(k): CompactionDecision.of(p, k in self.held)
                                      for k, p in self.plans.items()}, "compaction")
        self.retention = apply_retention_first(first, ctx.scans, self.config_of, work_uri=ctx.work_uri,
                                               report=ctx.report, progress=ctx.progress)
        self.failed = {k for k, r in self.retention.items() if r.action is Action.ERROR and k in first.plans}
        self.tasks = [t for t in tasks if _key(t) not in self.failed]
        ctx.progress(f"{len(self.tasks)} of {len(self.plans)} partition(s) selected for compaction",
                     event="compact.selected", partitions=len(self.tasks))

    def choose_strategies(self) -> None:
        """``--strategy``: each selected partition is cleaned by the memory strategy's task or by the external-sort
        stages (:mod:`jobs.engine.compact.external_sort`); both give PartitionOutcomes with staged groups, settled
        alike. Memory-first partitions (auto, more records than the map holds) run as memory tasks that hand the
        partition over to external-sort, with the pieces they read, if their map fills."""
        ctx = self.ctx
        self.strategies = choose(self.tasks, self.options.strategy)
        self.sorter = ExternalSortRun(ctx.storage, ctx.work_uri, ctx.report.run_id, dry_run=ctx.dry_run,
                                      runner=ctx.runner, describe=ctx.job_description, progress=ctx.progress,
                                      bucket_bytes=self.options.sort_bucket_bytes)
        by_sort = [self.strategies[_key(t)].strategy == "external-sort" for t in self.tasks]
        self.sort_tasks = [t for t, s in zip(self.tasks, by_sort) if s]
        self.tasks = [replace(t, handoff=self.sorter.handoff(t)) if self.strategies[_key(t)].memory_first else t
                      for t, s in zip(self.tasks, by_sort) if not s]
        self.cleaner_checkpoints = dict(ctx.checkpoints[CLEANER_OFFSET_CHECKPOINT])
        both = [*self.tasks, *self.sort_tasks]
        self.tally = Tally(len(both), sum(t.state.size_bytes for t in both))

    def settle_without_task(self) -> None:
        """Settle the partitions no task cleans (not selected, held, or their retention failed): nothing to
        commit, so first."""
        with_task = {_key(t) for t in [*self.tasks, *self.sort_tasks]}
        for key in self.plans:
            if key not in with_task:
                self.settled[key] = self.settle(key, None)

    def run_memory(self) -> None:
        """The memory strategy's tasks, packed into bins: each bin's partitions are settled (:meth:`settle_bin`)
        as its task ends, while the remaining tasks run. A memory-first partition whose map filled is handed over
        to :meth:`run_external_sort`."""
        ctx, tasks = self.ctx, self.tasks
        keys = [_key(t) for t in tasks]
        index_of = {key: i for i, key in enumerate(keys)}
        done: dict[int, Settled | None] = {}  # by task, as each is settled (None: handed over)

        def prepare(i: int, result: PartitionOutcome | TaskFailure) -> PartitionOutcome:
            # on the driver's thread: the plan check records into the plan file's decisions
            outcome = result if isinstance(result, PartitionOutcome) else _died(tasks[i], result)
            if outcome.handover is not None:
                self.handed[keys[i]] = outcome.handover
            elif outcome.error is None:
                self.check_against_plan(keys[i], outcome)
            return outcome

        def settle(batch: list[tuple[int, PartitionOutcome]], emit: Callable[[int, Settled | None], None]) -> None:
            self.settle_bin([(keys[i], o) for i, o in batch], lambda key, value: emit(index_of[key], value))

        try:
            run_and_settle_bins(ctx.runner, compact_bin, tasks, sizes=[t.state.size_bytes for t in tasks],
                                prepare=prepare, settled=done, settle=settle,
                                description=ctx.job_description(
                                    f"{'measure' if ctx.dry_run else 'compact'} {len(tasks)} partition(s)"))
        finally:
            self.settled.update({keys[i]: v for i, v in done.items() if v is not None})

    def run_external_sort(self) -> None:
        """The external-sort strategy's partitions, the handed-over ones with them, once their stages are done:
        each settled in turn, in partition order."""
        for t in self.tasks:
            key = _key(t)
            if key in self.handed:
                h = self.handed[key]
                self.strategies[key] = handed_over(self.strategies[key], keys=h.keys, end_offset=h.end_offset,
                                                   segments_read=len(h.pieces))
                self.sort_tasks.append(t)
        outcomes = self.sorter.run(self.sort_tasks, self.sort_details, self.handed)
        for t in self.sort_tasks:
            key = _key(t)
            outcome = outcomes[key]
            if outcome.error is None:
                self.check_against_plan(key, outcome)
            self.settled[key] = self.settle(key, outcome)

    def settle(self, key: tuple[str, int], outcome: PartitionOutcome | None) -> Settled:
        """Settle one partition alone (``outcome``: its cleaning's, None when no task ran): a bin of one."""
        one: list[Settled | None] = []
        self.settle_bin([(key, outcome)], lambda _, value: one.append(value))
        assert one and one[0] is not None  # only a memory-first task's outcome is handed over
        return one[0]

    def settle_bin(self, batch: list[tuple[tuple[str, int], PartitionOutcome | None]],
                   emit: Callable[[tuple[str, int], Settled | None], None]) -> None:
        """Settle a bin's partitions, each emitted as soon as it is settled: those with changed groups once the bin
        has committed them (:meth:`commit_bin`); a handed-over one as None (settled once external-sort cleaned it).
        Runs on the commit thread for the memory tasks' bins: it reads the run's plans, writes nothing of it."""
        commits = []
        for key, outcome in batch:
            if outcome is not None and outcome.handover is not None:
                emit(key, None)
            elif outcome is None or outcome.error is not None or self.ctx.dry_run or not any(g.changed
                                                                                             for g in outcome.groups):
                emit(key, self._settled(key, outcome, None))
            else:
                commits.append(_Commit(key, outcome))
        self.commit_bin(commits, lambda x: emit(x.key, self._settled(x.key, x.outcome, x)))

    def commit_bin(self, commits: Sequence[_Commit], finished: Callable[[_Commit], None]) -> None:
        """Commit the changed groups of a bin's partitions, in lockstep (``Committer.replace_lockstep``): round ``r``
        commits the ``r``-th changed group of every partition that has one, in order, so each partition's groups are
        committed one after another, while the syncs of a round are shared by all of its partitions. The lease is
        checked before each round: a lost lease stops the run between two rounds, each partition's committed groups
        standing. ``finished(commit)`` is called for each partition once its last group is committed or its commit
        failed (``outcome.error`` then says how, and whether it was left mid-commit)."""
        ctx, committer = self.ctx, self.committer
        active = list(commits)
        changed = {x.key: [g for g in x.outcome.groups if g.changed] for x in commits}
        r = 0
        while active:
            ctx.keep_lease()
            groups = [changed[x.key][r] for x in active]
            requests = [ReplaceRequest(self._partition_uri(x.key), g.old_bases,
                                       [StagedSegment(g.old_bases[0], g.staged_suffixes)],
                                       fault=ctx.fault_for(partition_name(x.key)), promote=True, mtime_ms=g.mtime_ms)
                        for x, g in zip(active, groups)]
            results = committer.replace_lockstep(requests, barrier_fault=ctx.fault_for(""))
            still = []
            for x, g, result in zip(active, groups, results):
                if isinstance(result, SegjobsError):
                    # A commit that failed after its intent leaves the partition mid-commit: say so, in what state,
                    # and what to do (the next run's recovery takes it up once the cause is fixed).
                    x.outcome.error = PartitionError.from_exception(result)
                    detail, x.mid_commit = describe_stuck(committer.storage, self._partition_uri(x.key),
                                                          committer.work_uri, result.detail
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

    def _partition_uri(self, key: tuple[str, int]) -> str:
        return self.ctx.listing.partitions[key].uri

    def _settled(self, key: tuple[str, int], outcome: PartitionOutcome | None, commit: _Commit | None) -> Settled:
        """What one partition became once its changed groups are committed (``commit``: how that went; None when
        nothing was to commit) or it failed: its progress line, and what the run's report and checkpoint need.
        Touches only this partition's entry (it runs on the commit thread for partitions with a memory task)."""
        ctx, plan, state = self.ctx, self.plans[key], self.states[key]
        dry_run, untouched = ctx.dry_run, key in self.held or key in self.failed
        committed = commit is not None and commit.committed
        mid_commit = commit is not None and commit.mid_commit
        errors: list[ReportError] = []
        run_warnings: list[str] = []
        warnings = list(ctx.scans[key].warnings)  # the summary's note shows them with the partition's row
        checkpoint = self.cleaner_checkpoints.get(key)
        new_cp, checkpoint_changed = checkpoint, False
        name = f"{plan.topic}-{plan.partition}"
        if plan.checkpoint_reset and not untouched:
            new_cp, checkpoint_changed = plan.first_dirty_offset, True
            note = cleaner_reset_warning(name, checkpoint, state.log_start_offset, state.log_end_offset,
                                         compact_and_delete=self.config_of(key[0]).delete, dry_run=dry_run)
            if note is not None:  # as Kafka's cleaner warns of the reset, the run does, in its report
                with _PROGRESS_LOCK:
                    ctx.progress.notice(f"warning: {note}", event="compact.checkpoint_reset", partition=name)
                run_warnings.append(note)
                warnings.append(note)
        if outcome is not None and outcome.error is None and not dry_run:
            new_cp, checkpoint_changed = outcome.end_offset, True
        done = f" {self.tally.add(state.size_bytes)}" if outcome is not None else ""
        if outcome is not None and outcome.error is not None:
            errors.append({"partition": name, **outcome.error.to_dict()})
            state_word = ("LEFT MID-COMMIT" if mid_commit else "PARTLY COMPACTED, then failed" if committed
                          else "NOT COMPACTED (the machine refused), left untouched"
                          if outcome.error.kind == "StorageEnvironmentError" else "UNCLEANABLE, left untouched")
            with _PROGRESS_LOCK:
                ctx.progress.error(f"{name}: {state_word}: {outcome.error}{done}", event="compact.failed",
                                   partition=name, committed=committed, **self.tally.fields())
        elif outcome is not None:
            with _PROGRESS_LOCK:
                ctx.progress(f"{name}: {'measured' if dry_run else 'compacted'} in {outcome.seconds}s{done}",
                             event="compact.partition", **outcome.progress_fields(), **self.tally.fields())
            for problem in (p for g in outcome.groups if g.committed or dry_run for p in g.corrupt_indexes):
                note = f"{name}: {problem}: {'would rebuild' if dry_run else 'rebuilt'} it"
                with _PROGRESS_LOCK:
                    ctx.progress(note, event="index.rebuilt", partition=name)
                run_warnings.append(note)
                warnings.append(note)
            keyless = outcome.stats.get("keyless_dropped", 0)
            if keyless:  # Kafka's cleaner drops them too; said, since a wrong cleanup.policy loses them this way
                note = (f"{name}: {keyless} record(s) without a key {'would be' if dry_run else 'were'} removed, as "
                        f"Kafka's cleaner removes them from a compacted topic (cleanup.policy "
                        f"{self.config_of(key[0]).policy_text} from {ctx.configs.origin_of(key[0])})")
                with _PROGRESS_LOCK:
                    ctx.progress.notice(f"warning: {note}", event="compact.keyless", partition=name)
                run_warnings.append(note)
                warnings.append(note)
        if dry_run and not untouched:
            would = outcome.end_offset if outcome and not outcome.error else None
            shown = would if would is not None else (plan.first_dirty_offset if plan.checkpoint_reset else new_cp)
        else:
            shown = new_cp
        one = _outcome(plan, state, outcome, dry_run=dry_run, checkpoint=shown)
        if untouched:
            reason = f"left untouched: retention {self.retention[key].reason}"
            one = replace(one, selected=False, action=Action.SKIPPED, reason=reason, note=reason)
        if outcome is not None and key in self.strategies:
            one = replace(one, strategy=self.strategies[key].strategy, strategy_reason=self.strategies[key].reason,
                          external_sort=self.sort_details.get(key))
        return Settled(replace(one, retention=self.retention.get(key), warnings=tuple(warnings)), errors,
                       run_warnings, new_cp, checkpoint_changed)

    def check_against_plan(self, key: tuple[str, int], outcome: PartitionOutcome) -> None:
        """Record what the cleaning task decided (where the pass ends, the groups it rewrites, what goes) and,
        with ``--apply``, turn a difference from the plan into the partition's error: its staged files are
        discarded and nothing of it is committed. The planners and tasks are deterministic, so this only
        happens when segjobs itself changed between plan and apply."""
        planfile = self.ctx.planfile
        changed = [g for g in outcome.groups if g.changed]
        decided = CleaningDecision(end_offset=outcome.end_offset, groups=tuple(tuple(g.old_bases) for g in changed),
                                   records_removed=sum(g.records_before - g.records_after for g in changed),
                                   bytes_removed=sum(g.bytes_before - g.bytes_after for g in changed))
        diff = planfile.record_cleaning(partition_name(key), decided)
        if diff:
            outcome.error = PartitionError("PlanMismatch", f"the cleaning task decided differently than the plan "
                                           f"{planfile.apply_uri} ({diff}); nothing of this partition was committed")
            for g in outcome.groups:
                self.committer.discard(self._partition_uri(key), g.old_bases[0], g.staged_suffixes)

    def record(self) -> bool:
        """The settled partitions into the report (entries, errors, warnings) in partition order, whatever order
        their tasks finished in, their checkpoints into :attr:`cleaner_checkpoints`; whether any changed."""
        report, changed = self.ctx.report, False
        for key in self.plans:
            s = self.settled.get(key)
            if s is None:
                continue
            report.errors.extend(s.errors)
            report.warnings.extend(s.warnings)
            report.add(s.outcome)
            if s.checkpoint is not None:
                self.cleaner_checkpoints[key] = s.checkpoint
            changed |= s.checkpoint_changed
        return changed

    def finish(self) -> None:
        """The settled partitions recorded, the cleaner checkpoint written, the plan file (``--plan``) and the
        totals (the command renders them: :func:`jobs.engine.report.render.render_compact_summary`)."""
        ctx = self.ctx
        if self.record() and not ctx.dry_run:
            # once, at the end: a partition's commit is complete without it (a run that stops before
            # this point cleans the committed range again next time, which changes nothing)
            entries = updated_cleaner_checkpoints(self.cleaner_checkpoints, set(ctx.listing.partitions))
            write_cleaner_checkpoint(ctx.storage, ctx.log_dir, entries)
        ctx.write_plan("compact", {name: getattr(self.options, name) for name in PLAN_OPTIONS})
        outcomes = [o for o in ctx.report.outcomes if isinstance(o, CompactionOutcome)]
        ctx.report.totals.update(CompactTotals.of(outcomes, ctx.report.errors).to_dict())


@dataclass
class Settled:
    """One settled partition (see :class:`CompactionRun`): its outcome, what it adds to the run's errors and
    warnings, and its cleaner checkpoint."""

    outcome: CompactionOutcome
    errors: list[ReportError]
    warnings: list[str]
    checkpoint: int | None
    checkpoint_changed: bool


@dataclass
class _Commit:
    """One partition of a bin whose changed groups are being committed (see :meth:`CompactionRun.commit_bin`)."""

    key: tuple[str, int]
    outcome: PartitionOutcome
    #: some group of it was committed
    committed: bool = False
    #: its commit failed after its intent: the partition is left mid-commit (recovery takes it up)
    mid_commit: bool = False


def _died(task: CompactTask, failure: TaskFailure) -> PartitionOutcome:
    """The outcome of a partition whose task died (its Python worker was killed, its result would not pickle)."""
    return PartitionOutcome(task.plan.topic, task.plan.partition,
                            error=PartitionError(failure.kind, f"the cleaning task failed: {failure.detail}"))


#: The options a plan file records for ``compact`` (fields of CompactOptions; see jobs.engine.frame.planfile).
PLAN_OPTIONS = ("max_delete_fraction", "accept_config_baseline", "dedupe_buffer_bytes", "strategy")

__all__ = ["DEFAULT_DEDUPE_BUFFER_BYTES", "PLAN_OPTIONS", "STRATEGIES", "CompactTask", "GroupOutcome",
           "PartitionOutcome", "compact_partition", "work"]

