"""The retention engine: plans per partition, deletes segments crash-safely, advances the log start offset,
and the summary. Also used by compaction for compact,delete topics (retention first).

What `segjobs retain` does, in users' words, is the docstring of :mod:`jobs.commands.retain`."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping

from jobs.engine.frame.job import JobContext
from jobs.engine.frame.planfile import partition_name
from jobs.engine.report.outcomes import (
    Action,
    DeletedSegment,
    Refusal,
    RetainTotals,
    RetentionDecision,
    RetentionOutcome,
    unreadable_reason,
)
from jobs.engine.report.render import describe_retention
from jobs.engine.report.run_report import Progress, RunReport, listed, refused_note
from jobs.engine.runtime.seams import FaultHook
from jobs.engine.scan import PartitionError, PartitionScan, ReportError, ScanItem, newest_record
from jobs.logdir.commit import Committer
from jobs.logdir.retention import delete_segments, follow_log_start, purge, raise_log_start_offsets
from jobs.rules.config import ConfigSet, TopicConfig, never_touched
from jobs.rules.model import PartitionState
from jobs.rules.plan_retain import (
    ACCEPTED_BASELINE,
    LIMITED_RULES,
    DeleteShare,
    RetentionPlan,
    UsedSettings,
    delete_guard,
    fully_dated,
    newest_timestamp,
    plan_retention,
    plausible_stamp,
)
from jobs.rules.timeutil import data_age_warning, format_instant
from segment_io.errors import SegjobsError
from segment_io.layout import LOG_START_OFFSET_CHECKPOINT, LogDirListing, PartitionListing
from segment_io.storage.base import Storage
from segment_io.storage.spool import HostSpool
from segment_io.storage.traffic import in_context
from segment_io.units import format_duration

TopicPartition = tuple[str, int]

#: Partitions committed at once by the job (see :func:`retain_partitions`).
COMMIT_THREADS = 16


#: The options a plan file records for ``retain`` (fields of RetainOptions; see jobs.engine.frame.planfile).
PLAN_OPTIONS = ("max_delete_fraction", "accept_config_baseline")


# --------------------------------------------------------------------------------------------------
# Applying retention (also used by the compaction job for compact,delete topics)
# --------------------------------------------------------------------------------------------------


@dataclass
class RetentionParams:
    """What :func:`apply_retention` needs besides the partition: where, when, and how.

    ``log_start_checkpoint`` is ``log-start-offset-checkpoint`` as this run knows it (read when the run
    started, then kept up to date by :func:`advance_log_start_offsets`). ``fault(partition, step)`` is the
    test seam of :mod:`jobs.engine.runtime.seams` (``partition`` is ``""`` for the log-start-offset checkpoint, which
    the whole dir shares); partitions commit on several threads at once, so it must be thread-safe.
    """

    #: the store's commit protocol (the run's: one per run, never rebuilt per partition)
    committer: Committer
    log_dir: str
    now_ms: int
    dry_run: bool = False
    fault: FaultHook | None = None
    log_start_checkpoint: dict[TopicPartition, int] = field(default_factory=dict)
    #: called before each partition's commit: renews the run's S3 lease when due (see JobContext.keep_lease)
    keep_lease: Callable[[], None] | None = None

    @classmethod
    def from_job(cls, ctx: JobContext) -> "RetentionParams":
        """The parameters of a job run (its committer, log dir, now, dry run, checkpoints and fault seam)."""
        return cls(committer=ctx.committer, log_dir=ctx.log_dir, now_ms=ctx.now_ms,
                   dry_run=ctx.dry_run, fault=ctx.seams.fault,
                   log_start_checkpoint=dict(ctx.checkpoints.get(LOG_START_OFFSET_CHECKPOINT, {})),
                   keep_lease=ctx.keep_lease)

    @property
    def storage(self) -> Storage:
        return self.committer.storage

    def fault_for(self, partition: str) -> Callable[[str], None] | None:
        """The one-argument hook :mod:`jobs.logdir` calls, for the steps of ``partition`` (``""``: the log dir
        as a whole)."""
        hook = self.fault
        return None if hook is None else (lambda step: hook(partition, step))


def _blocked(scan: PartitionScan) -> PartitionError | None:
    """Why retention must leave this partition alone (its files cannot be read), or None."""
    return scan.error if scan.error is not None or scan.state is None else scan.leader_epochs_error


def plan_partition(p: RetentionParams, scan: PartitionScan,
                   config: TopicConfig) -> RetentionPlan | None:
    """The retention plan of one scanned partition at the run's ``now``; None when the partition is not
    retention's to touch (unreadable, or a topic segjobs never touches: see jobs.rules.config.KAFKA_TOPICS)."""
    if _blocked(scan) is not None or scan.state is None or never_touched(scan.topic):
        return None
    return plan_retention(scan.state, config, p.now_ms)


def _log_start_due(p: RetentionParams, key: TopicPartition, plan: RetentionPlan) -> int | None:
    """The entry ``log-start-offset-checkpoint`` must get for ``plan``, or None when it needs none.

    Segments are deleted: the entry becomes the new start (Kafka raises the log start before removing
    them). An existing entry below the start is raised. A missing entry is not added otherwise: Kafka
    itself only checkpoints a log start above the first segment's base, and derives it otherwise.
    """
    recorded = p.log_start_checkpoint.get(key)
    new = plan.new_log_start_offset
    if recorded is not None and new <= recorded:
        return None
    if plan.deletions or recorded is not None:
        return new
    return None


def advance_log_start_offsets(p: RetentionParams,
                              plans: Mapping[TopicPartition, RetentionPlan]) -> dict[TopicPartition, int]:
    """Raise the ``log-start-offset-checkpoint`` entries ``plans`` need, in ONE atomic write of the file
    (it is shared by every partition of the dir), *before* any segment is deleted, as Kafka raises the log
    start before it removes segments. A crash after this write leaves segments wholly below the log start,
    which the next run deletes by the log-start rule: the outcome is the same as without the crash.

    Entries only rise; other partitions' entries are kept (the file is re-read, not trusted from the start
    of the run). Returns the entries written; empty (and the file untouched) when none is due or in a dry run.
    """
    due = {k: v for k, plan in plans.items() if (v := _log_start_due(p, k, plan)) is not None}
    if not due or p.dry_run:
        return {}
    entries, changed = raise_log_start_offsets(p.committer, p.log_dir, due, fault=p.fault_for(""))
    p.log_start_checkpoint.update(entries)
    return changed


def apply_retention(p: RetentionParams, scan: PartitionScan, config: TopicConfig,
                    *, plan: RetentionPlan | None = None) -> RetentionOutcome:
    """Apply retention to ONE already-scanned partition and return its outcome.

    Plans (unless ``plan`` is given) with :func:`jobs.rules.plan_retain.plan_retention` at the run's ``now``;
    unless it is a dry run, then: raises the partition's log-start-offset-checkpoint entry (one write, skipped
    when :func:`advance_log_start_offsets` already did it for a batch of partitions), renames the condemned
    segments to ``.deleted`` (:func:`jobs.logdir.commit.delete_segments`), trims ``leader-epoch-checkpoint`` to the
    new log start (Kafka's ``truncateFromStart``), removes producer snapshots below it, and unlinks
    ``.deleted`` segments whose ``file.delete.delay.ms`` has passed (:func:`jobs.logdir.commit.purge_deleted`).

    ``scan`` must be current (taken after any change to the partition, e.g. after compaction committed).
    Every step converges: after a crash anywhere, recovery plus the next run end where an uninterrupted run
    would have. A :class:`~segment_io.errors.SegjobsError` comes back as an ``Action.ERROR`` outcome; a
    partition whose files cannot be read is left untouched.
    """
    blocked = _blocked(scan)
    if blocked is not None or scan.state is None:
        return RetentionOutcome(scan.topic, scan.partition, Action.ERROR, unreadable_reason(blocked),
                                warnings=tuple(scan.warnings), error=blocked, readable=False)
    state = scan.state
    key = (state.topic, state.partition)
    before: dict[str, Any] = dict(topic=state.topic, partition=state.partition, policy=config.policy_text,
                  segments_before=len(state.segments), bytes_before=state.size_bytes,
                  log_start_offset_before=state.log_start_offset)
    plan = plan if plan is not None else plan_partition(p, scan, config)
    if plan is None:  # never touched
        return RetentionOutcome(**before, action=Action.NONE, reason=str(never_touched(state.topic)),
                                warnings=tuple(scan.warnings), segments_after=len(state.segments),
                                bytes_after=state.size_bytes, log_start_offset=state.log_start_offset)
    planned = RetentionOutcome(**before, **_plan_fields(plan, state, config),
                               warnings=(*scan.warnings, *plan.warnings))
    if p.dry_run:
        return planned
    done: dict[str, Any] = {}
    try:
        if p.keep_lease is not None:
            p.keep_lease()
        advance_log_start_offsets(p, {key: plan})
        if plan.deletions:
            result = delete_segments(p.committer, scan.uri, plan.deleted_bases, now_ms=p.now_ms,
                                     fault=p.fault_for(partition_name(key)))
            done["renamed"] = len(result.renamed)
        done.update(_follow_log_start(p, scan, plan.new_log_start_offset))
        done.update(_purge(p, scan, config, just_deleted=bool(plan.deletions)))
        return replace(planned, applied=True, **done)
    except SegjobsError as exc:
        err = PartitionError.from_exception(exc)
        return replace(planned, **done, action=Action.ERROR, applied=False, error=err,
                       reason=f"failed: {err}; the next run (after its recovery) completes or redoes it")


def _plan_fields(plan: RetentionPlan, state: PartitionState, config: TopicConfig) -> dict[str, Any]:
    """The outcome's fields that describe the decisions (identical in a dry run and a real run)."""
    removed = plan.bytes_deleted
    rules = sorted({d.rule for d in plan.deletions})
    if plan.deletions:
        reason = f"{len(plan.deletions)} segment(s) past {', '.join(rules)}"
    elif not config.delete:
        reason = f"cleanup.policy={config.policy_text}: only segments below the log start offset go; none are"
    else:
        reason = "no segment past retention"
    return dict(
        action=Action.DELETE if plan.deletions else Action.NONE, reason=reason,
        segments_after=len(state.segments) - len(plan.deletions), bytes_after=state.size_bytes - removed,
        bytes_removed=removed, rules=tuple(rules),
        deleted=tuple(DeletedSegment(d.segment.base_offset, d.segment.next_offset, d.size_bytes, d.rule, d.detail,
                                     d.segment.effective_largest_timestamp) for d in plan.deletions),
        log_start_offset=plan.new_log_start_offset, kafka_would_roll=plan.kafka_would_roll)


def _follow_log_start(p: RetentionParams, scan: PartitionScan, new_start: int) -> dict[str, Any]:
    """Trim the leader-epoch checkpoint and drop the producer snapshots below ``new_start``
    (:func:`jobs.logdir.retention.follow_log_start`); the report's fields of it."""
    done = follow_log_start(p.committer, scan.uri, new_start, leader_epochs=scan.leader_epochs or [],
                            snapshot_offsets=scan.snapshot_offsets, fault=p.fault_for(scan.name))
    return {"leader_epoch_trimmed": done.leader_epoch_trimmed, "snapshots_deleted": done.snapshots_deleted}


def _purge(p: RetentionParams, scan: PartitionScan, config: TopicConfig, *, just_deleted: bool) -> dict[str, Any]:
    """Unlink ``.deleted`` segments whose file.delete.delay.ms has passed (this run's, or earlier runs')."""
    if not just_deleted and not scan.has_deleted_files:
        return {"purged": (), "purge_pending": {}}
    res = purge(p.committer, scan.uri, now_ms=p.now_ms, file_delete_delay_ms=config.file_delete_delay_ms,
                fault=p.fault_for(scan.name))
    return {"purged": tuple(u.rsplit("/", 1)[-1] for u in res.purged), "purged_bytes": res.purged_bytes,
            "purge_pending": {str(b): due for b, due in sorted(res.kept_until_ms.items())}}


def retain_partitions(p: RetentionParams, scans: Iterable[PartitionScan],
                      config_for: Callable[[str], TopicConfig],
                      on_entry: Callable[[RetentionOutcome], None] | None = None, *,
                      threads: int = 1,
                      plans: Mapping[TopicPartition, RetentionPlan] | None = None) -> list[RetentionOutcome]:
    """Retention for many scanned partitions: plan them all (or take their plans from ``plans``), raise their
    log start offsets in one write, then apply each (:func:`apply_retention`). ``config_for(topic)`` gives a
    topic's config; ``on_entry`` sees each outcome, in ``scans`` order, as soon as it is done
    (progress). Returns the outcomes.

    ``threads`` > 1 commits that many partitions at once. A partition's commit is a chain of small
    synchronous writes, renames and directory fsyncs (or S3 requests): latency, not CPU, so overlapping
    partitions (each one touching only its own files) is what makes thousands of them affordable. The
    steps within a partition keep their order; those of different partitions interleave (a fault hook sees
    them from several threads).
    """
    scans = list(scans)
    given, plans = plans, {}
    for scan in scans:
        key = (scan.topic, scan.partition)
        plan = given.get(key) if given is not None else plan_partition(p, scan, config_for(scan.topic))
        if plan is not None:
            plans[key] = plan
    advance_log_start_offsets(p, plans)

    def one(scan: PartitionScan) -> RetentionOutcome:
        return apply_retention(p, scan, config_for(scan.topic), plan=plans.get((scan.topic, scan.partition)))

    out = []
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for e in (pool.map(in_context(one), scans) if threads > 1 else map(one, scans)):
            out.append(e)
            if on_entry is not None:
                on_entry(e)
    return out


# --------------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------------


def work(ctx: JobContext) -> None:
    """The retention job's work (see :func:`jobs.engine.frame.job.run_job`): plan every partition, apply the
    delete-fraction limit, commit the deletes (several partitions at once), and fill the report."""
    params = RetentionParams.from_job(ctx)
    planfile = ctx.planfile
    keys = sorted(ctx.scans)
    if ctx.now_from_clock:  # judged at the wall clock: is the data older than any retention? (a backup?)
        stale = data_age_warning([s.largest_timestamp for state in (ctx.scans[k].state for k in keys) if state
                                  for s in state.segments],
                                 [c.retention_ms for c in map(ctx.configs.for_topic, {t for t, _ in keys}) if c.delete],
                                 ctx.now_ms)
        if stale:
            ctx.report.warnings.append(stale)
            ctx.progress.notice(f"warning: {stale}", event="data.stale")
    limit = DeleteLimit.of_job(ctx)
    plans, refused = retention_decisions(params, ctx.scans, ctx.configs.for_topic, limit)
    planfile.check_decisions({partition_name(k): RetentionDecision.of(plans.get(k), k[0] in refused)
                                   for k in keys}, "retention")
    announce_accepted(limit, {k[0] for k in plans}, ctx.progress, dry_run=ctx.dry_run)
    unset = defaults_only_warning({k: plan for k, plan in plans.items() if k[0] not in refused}, ctx.configs,
                                  dry_run=ctx.dry_run)
    if unset:
        ctx.report.warnings.append(unset)
        ctx.progress.notice(f"warning: {unset}", event="retain.defaults_only")
    every = max(1, len(keys) // 10)
    done = 0

    outcomes: list[RetentionOutcome] = []

    def progress(o: RetentionOutcome) -> None:
        nonlocal done
        done += 1
        outcomes.append(o)
        ctx.report.add(o)  # at once: a run interrupted later still lists what it committed
        _record_errors(ctx.report, o)
        line = f"{done}/{len(keys)} partitions: {o.name} {describe_retention(o, ctx.dry_run)}"
        if o.action is Action.ERROR:
            ctx.progress.error(line, **progress_fields(o), done=done, of=len(keys))
        elif o.action is Action.REFUSED:  # said once for its whole topic (see refused_line)
            pass
        elif o.action is not Action.NONE or done % every == 0 or done == len(keys):
            ctx.progress(line, **progress_fields(o), done=done, of=len(keys))

    held = {k for k in plans if k[0] in refused}
    retain_partitions(params, [ctx.scans[k] for k in keys if k not in held], ctx.configs.for_topic, progress,
                      threads=COMMIT_THREADS, plans=plans)
    if not ctx.dry_run:
        record_used_settings(ctx.storage, ctx.work_uri, ctx.configs.for_topic, {k[0] for k in plans if k not in held},
                             now_ms=ctx.now_ms)
    for topic, share in sorted(refused.items()):
        message, fields = refused_line(share)
        ctx.progress.error(message, **fields)
        for k in sorted(k for k in held if k[0] == topic):
            progress(refused_outcome(params, ctx.scans[k], ctx.configs.for_topic(topic), plans[k], share))
    ctx.report.sort_partitions()
    ctx.write_plan("retain", {name: getattr(ctx.options, name) for name in PLAN_OPTIONS})
    ctx.report.totals.update(RetainTotals.of(outcomes, ctx.report.errors, len(ctx.report.warnings)).to_dict())


# --------------------------------------------------------------------------------------------------
# The safety limit, and the decisions a plan file records
# --------------------------------------------------------------------------------------------------


def retention_decisions(params: RetentionParams, scans: Mapping[TopicPartition, PartitionScan],
                        config_for: Callable[[str], TopicConfig],
                        limit: DeleteLimit) -> tuple[dict[TopicPartition, RetentionPlan], dict[str, DeleteShare]]:
    """What a ``retain`` run at ``params.now_ms`` decides before it touches anything: the plan of every scanned
    partition retention may touch (:func:`plan_partition`), and the topics the delete-fraction ``limit``
    refuses, whose partitions it leaves untouched. ``retain`` (dry run or not) and ``inspect``'s prediction both
    take their decisions from here, so they agree by construction."""
    plans = {k: plan for k in sorted(scans)
             if (plan := plan_partition(params, scans[k], config_for(k[0]))) is not None}
    return plans, limit.refused(plans, scans)


#: ``<work>/retention-settings.json``: per topic, the retention settings the last real run applied (see
#: :func:`jobs.rules.plan_retain.delete_guard`, which judges a run's config against them).
USED_SETTINGS_FILE = "retention-settings.json"


def read_used_settings(storage: Storage, work_uri: str) -> dict[str, UsedSettings]:
    """The retention settings earlier runs applied, by topic (empty when none is recorded or the record is
    unreadable: the guard then judges against Kafka's defaults)."""
    try:
        doc = json.loads(storage.read(storage.join(work_uri, USED_SETTINGS_FILE)))
        return {t: UsedSettings(str(v["cleanup.policy"]), int(v["retention.ms"]), int(v["retention.bytes"]),
                                str(v["source"])) for t, v in doc["topics"].items()}
    except (SegjobsError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def record_used_settings(storage: Storage, work_uri: str, config_for: Callable[[str], TopicConfig],
                         topics: Iterable[str], *, now_ms: int) -> None:
    """Record the retention settings a real run at ``now_ms`` applied to ``topics`` (``config_for(topic)``), for
    the next runs' guard, in ``<work_uri>/retention-settings.json``."""
    topics = sorted(set(topics))
    if not topics:
        return
    before = read_used_settings(storage, work_uri)
    # no run id in it: reruns of the same interval (a backfill) leave the same file
    source = f"the settings a run applied at --now {format_instant(now_ms)}"
    used = dict(before)
    for t in topics:
        now_used = UsedSettings.of(config_for(t), source)
        if t not in before or before[t].differs_from(config_for(t)):
            used[t] = now_used  # only a change is news: unchanged settings keep the run that first applied them
    if used == before:
        return
    doc = {"version": 1, "topics": {t: {"cleanup.policy": u.cleanup_policy, "retention.ms": u.retention_ms,
                                         "retention.bytes": u.retention_bytes, "source": u.source}
                                     for t, u in sorted(used.items())}}
    storage.makedirs(work_uri)
    storage.write_atomic(storage.join(work_uri, USED_SETTINGS_FILE),
                             json.dumps(doc, indent=1, sort_keys=True).encode())


def reference_settings(storage: Storage, work_uri: str) -> Callable[[str], UsedSettings]:
    """Per topic, the retention settings the safety limit judges a run's config against: those the last real run
    applied (recorded under ``work_uri``), else Kafka's defaults for the topic."""
    recorded = read_used_settings(storage, work_uri)
    defaults = ConfigSet()

    def used_for(topic: str) -> UsedSettings:
        return recorded.get(topic) or UsedSettings.of(defaults.for_topic(topic), "Kafka's default (no earlier run "
                                                                                   "recorded settings for it)")
    return used_for


def refused_topics(plans: Mapping[TopicPartition, RetentionPlan], *, scans: Mapping[TopicPartition, PartitionScan],
                   listing: LogDirListing, config_for: Callable[[str], TopicConfig], storage: Storage, work_uri: str,
                   now_ms: int, max_delete_fraction: float | None,
                   accept_config_baseline: bool = False) -> dict[str, DeleteShare]:
    """The topics retention must leave wholly untouched: :func:`jobs.rules.plan_retain.delete_guard` over the
    run's ``scans`` and ``plans``, with the newest record of the log dir (``listing``) and the settings earlier
    runs applied (read from ``work_uri``; with ``accept_config_baseline``, this run's own) as the reference. The
    limit is ``max_delete_fraction`` (``--max-delete-fraction``) when given, else the topic's
    ``segjobs.max.delete.fraction``. Retention, compaction's retention first and ``inspect`` all call this."""
    def limit(topic: str) -> float:
        return max_delete_fraction if max_delete_fraction is not None else config_for(topic).max_delete_fraction

    used_for: Callable[[str], UsedSettings] = (
        (lambda topic: UsedSettings.of(config_for(topic), ACCEPTED_BASELINE)) if accept_config_baseline
        else reference_settings(storage, work_uri))

    states = {k: state for k in plans if (state := scans[k].state) is not None}
    newest = newest_timestamp((s.state for s in scans.values() if s.state is not None), now_ms)

    def judged(newest_ms: int | None) -> dict[str, DeleteShare]:
        shares = delete_guard(states, plans, now_ms=now_ms, config_for=config_for, max_fraction_for=limit,
                              used_for=used_for, newest_ms=newest_ms)
        return {t: share for t, share in shares.items() if share.refused}

    limited = any(d.rule in LIMITED_RULES for k in states for d in plans[k].deletions)
    if not limited:  # only deletions by time or size can be refused, whatever the reference
        return {}
    refused = judged(newest)
    if refused or newest is None:
        # The partitions the run's scans did not date (out of its scope, or an active segment compaction's
        # selection sizes from the listing) still tell how recent the log dir is. A newer record there can only
        # lift the reference, so they are read only when a refusal is at stake, and by their records, never
        # their files' mtimes: a copy, a backup or a restore gives every file the day it was made, which let any
        # --now pass (compact deleted 86% of a compact,delete topic that retain refused at the same --now). The
        # refusal is judged again after 1, 2, 4, ... partitions read: reading stops once it is lifted.
        dated = {k for k, scan in scans.items() if scan.state is not None and fully_dated(scan.state)}
        undated = {k: pl for k, pl in listing.partitions.items() if k not in dated}
        def lifts(stamp: int | None) -> bool:
            return stamp is not None and (newest is None or stamp > newest)

        judged_at, last = 1, None
        for reads, last in enumerate(newest_records_of(storage, undated, above=newest, now_ms=now_ms), 1):
            if reads == judged_at:
                judged_at *= 2
                if lifts(last) and not (refused := judged(last)):
                    return refused
        if lifts(last):
            refused = judged(last)
    return refused


def newest_records_of(storage: Storage, partitions: Mapping[TopicPartition, PartitionListing], *,
                      above: int | None, now_ms: int) -> Iterator[int | None]:
    """The newest record timestamp of ``partitions`` so far (None while none told one), after each partition read
    (:func:`~jobs.engine.scan.newest_record`: its last segment, by its time index, else its batch headers), where it
    can be newer than ``above``: a partition whose segment files were all last written at or before ``above``
    cannot hold a newer record (producers' clocks aside) and is not read. Stops once a record at or past ``now_ms``
    is found (the reference is never later than ``now``). A partition that cannot be read tells nothing, nor does
    one whose newest record is stamped in the future of ``now_ms`` (:func:`~jobs.rules.plan_retain.plausible_stamp`:
    a producer's clock)."""
    newest = None
    candidates = sorted(((max(seg.log.mtime_ms for seg in pl.segments), k, pl) for k, pl in partitions.items()
                         if pl.segments), key=lambda c: c[0], reverse=True)
    for written, _, pl in candidates:
        known = max((t for t in (above, newest) if t is not None), default=None)
        if known is not None and written <= known:
            return  # sorted by mtime: none after this one can hold a newer record either
        stamp = plausible_stamp(newest_record(storage, pl), now_ms)
        if stamp is not None:
            newest = stamp if newest is None else max(newest, stamp)
        yield newest
        if newest is not None and newest >= now_ms:
            return


@dataclass(frozen=True)
class DeleteLimit:
    """The delete-fraction limit as one run applies it: :func:`refused_topics` with the run's log dir, configs,
    work dir, ``now`` and ``--max-delete-fraction``."""

    listing: LogDirListing
    config_for: Callable[[str], TopicConfig]
    storage: Storage
    work_uri: str
    now_ms: int
    max_delete_fraction: float | None
    #: ``--accept-config-baseline``: this run's settings are the reference (see :func:`refused_topics`)
    accept_config_baseline: bool = False

    @classmethod
    def of_job(cls, ctx: JobContext) -> "DeleteLimit":
        """The limit of a job run."""
        return cls(listing=ctx.listing, config_for=ctx.configs.for_topic, storage=ctx.storage,
                   work_uri=ctx.work_uri, now_ms=ctx.now_ms,
                   max_delete_fraction=ctx.options.max_delete_fraction,
                   accept_config_baseline=ctx.options.accept_config_baseline)

    def refused(self, plans: Mapping[TopicPartition, RetentionPlan],
                scans: Mapping[TopicPartition, PartitionScan]) -> dict[str, DeleteShare]:
        """The topics of ``plans`` the limit refuses (see :func:`refused_topics`)."""
        return refused_topics(plans, scans=scans, listing=self.listing, config_for=self.config_for,
                              storage=self.storage, work_uri=self.work_uri, now_ms=self.now_ms,
                              max_delete_fraction=self.max_delete_fraction,
                              accept_config_baseline=self.accept_config_baseline)

    def accepted(self, topics: Iterable[str]) -> list[str]:
        """With ``accept_config_baseline``: per topic of ``topics`` whose settings differ from the reference it
        replaces, what is accepted, in words (``clicks: retention.ms 3d (was 7d) against Kafka's default (...)``);
        empty without it."""
        if not self.accept_config_baseline:
            return []
        used_for = reference_settings(self.storage, self.work_uri)
        return [f"{topic}: {', '.join(changed)} against {used_for(topic).source}" for topic in sorted(set(topics))
                if (changed := used_for(topic).differs_from(self.config_for(topic)))]


def defaults_only_warning(plans: Mapping[TopicPartition, RetentionPlan], configs: ConfigSet, *,
                          dry_run: bool, shown: int = 6) -> str | None:
    """The warning for segments deleted from topics that nothing but Kafka's defaults configures (no table of
    ``--config``, no ``[defaults]``, no ``--set``): their ``cleanup.policy`` is Kafka's ``delete`` because the
    run was told nothing about them, which is also what a forgotten ``--config`` looks like; a topic compacted
    on its brokers would lose segments compaction keeps. None when there are none."""
    deleting: dict[str, int] = {}
    for (topic, _), plan in sorted(plans.items()):
        if plan.deletions and not configs.has_own_settings(topic):
            deleting[topic] = deleting.get(topic, 0) + len(plan.deletions)
    if not deleting:
        return None
    first = next(iter(deleting))
    config = configs.for_topic(first)
    named = listed([f"{t} ({n} segment(s))" for t, n in deleting.items()], shown)
    return (f"retention {'would delete' if dry_run else 'deletes'} {sum(deleting.values())} segment(s) of "
            f"{len(deleting)} topic(s) that no --config table, [defaults] or --set configures, by Kafka's "
            f"defaults (cleanup.policy=delete, retention.ms={format_duration(config.retention_ms)}): {named}. "
            f"If a topic is compacted on its brokers, give its configs (--config FILE; `segjobs config import` "
            f"writes one from the cluster); name a topic (e.g. --set '{first}:cleanup.policy=delete') to keep "
            f"this without the warning")


def announce_accepted(limit: DeleteLimit, topics: Iterable[str], progress: Progress, *, dry_run: bool,
                      shown: int = 6) -> None:
    """Say (even when quiet) which topics' new settings ``--accept-config-baseline`` lets through (the first
    ``shown`` of them in full), and that a real run records them as the reference of later runs."""
    accepted = limit.accepted(topics)
    if accepted:
        verb = "would be" if dry_run else "are"
        more = f"; and {len(accepted) - shown} more topic(s)" if len(accepted) > shown else ""
        progress.notice(f"--accept-config-baseline: the settings of {len(accepted)} topic(s) {verb} accepted as the "
                        f"safety limit's baseline and recorded for later runs: " + "; ".join(accepted[:shown]) + more,
                        event="retain.baseline", topics=len(accepted))


def refused_line(share: DeleteShare, what: str = "") -> tuple[str, dict[str, Any]]:
    """The one progress line (and its fields) of a topic the delete-fraction limit refused, for all its
    partitions (the summary and the report have each one): ``clicks: 3 partition(s) REFUSED: would delete ...``;
    ``what`` names the stage (``retention`` in a compaction run)."""
    return (f"{share.topic}: {share.partitions} partition(s) {what + ' ' if what else ''}"
            f"{refused_note(share.message())}",
            {"event": "retain.refused", "topic": share.topic, "partitions": share.partitions})


def refused_outcome(p: RetentionParams, scan: PartitionScan, config: TopicConfig, plan: RetentionPlan,
                    share: DeleteShare) -> RetentionOutcome:
    """The outcome of a partition whose topic the limit refused: nothing deleted, the plan's deletions kept
    under ``refused.would_delete``, and an error (exit code 1)."""
    planned = apply_retention(replace(p, dry_run=True), scan, config, plan=plan)
    return replace(planned, action=Action.REFUSED, reason=share.message(), applied=False, deleted=(), rules=(),
                   bytes_removed=0, segments_after=planned.segments_before, bytes_after=planned.bytes_before,
                   log_start_offset=planned.log_start_offset_before,
                   refused=Refusal(planned.deleted, share.fraction, share.max_fraction))


def _record_errors(report: RunReport, o: RetentionOutcome, *, during: str | None = None) -> None:
    """A partition's error (a failure or a refusal: exit code 1) and warnings into the run's report."""
    error = o.error_dict()
    if o.action in (Action.ERROR, Action.REFUSED) and error is not None:
        entry: ReportError = {"partition": o.name, "during": during, **error} if during \
            else {"partition": o.name, **error}
        report.errors.append(entry)
    report.warnings.extend(f"{o.name}: {during + ': ' if during else ''}{w}" for w in o.warnings)


def progress_fields(o: RetentionOutcome) -> dict[str, Any]:
    """The progress event of a partition's retention: its name (``retain.partition``, ``retain.failed``,
    ``retain.refused``) and structured fields (the report's names)."""
    event = {Action.ERROR: "retain.failed", Action.REFUSED: "retain.refused"}.get(o.action, "retain.partition")
    return {"event": event, "partition": o.name, "action": o.action.value, "segments_deleted": len(o.deleted),
            "bytes_removed": o.bytes_removed, "log_start_offset": o.log_start_offset}


# --------------------------------------------------------------------------------------------------
# Before compaction (compact,delete topics)
# --------------------------------------------------------------------------------------------------


def listing_after_retention(listing: PartitionListing, plan: RetentionPlan) -> PartitionListing:
    """``listing`` without the segments ``plan`` deletes."""
    gone = set(plan.deleted_bases)
    return replace(listing, segments=tuple(s for s in listing.segments if s.base_offset not in gone))


def _after_retention_task(item: ScanItem) -> PartitionScan:
    """The scan of a partition as retention leaves it (``item``: its listing without the deleted segments, its new
    log start offset)."""
    return item.scan()


@dataclass
class RetentionFirst:
    """Retention of the ``compact,delete`` partitions of a compaction run (or an inspection), decided before
    compaction is planned.

    A broker's retention thread runs every few minutes, long before its cleaner reaches old segments; compacting
    first would merge expired segments into ones whose largest timestamp is recent, and retention would then
    free nothing. So compaction is planned on what retention leaves: the listing minus the condemned segments,
    with the raised log start offset (the cleaner only cleans from there), its transaction state replayed from
    the remaining segments only. :func:`plan_retention_first` derives that state in ONE way for the dry run,
    the real run and ``inspect``: by scanning the remaining segments, which retention does not change, so the
    scan is the same before and after the deletes, and a dry run predicts the real run exactly.
    """

    #: the compact,delete partitions retention may touch (readable, not the KRaft log), by key
    plans: dict[TopicPartition, RetentionPlan]
    #: topics the delete-fraction limit refuses: neither retention nor compaction touches them
    refused: dict[str, DeleteShare]
    #: for the partitions whose segments retention deletes: the listing and scan of what remains
    after: dict[TopicPartition, tuple[PartitionListing, PartitionScan]]
    #: the run's retention parameters (they follow the log-start-offset checkpoint as it is raised)
    params: RetentionParams
    #: the delete-fraction limit the plans were judged by
    limit: DeleteLimit | None = None

    def held(self) -> set[TopicPartition]:
        """The partitions the limit refused: left wholly untouched (no retention, no compaction)."""
        return {k for k in self.plans if k[0] in self.refused}

    def compaction_input(self, key: TopicPartition, listing: PartitionListing,
                         scan: PartitionScan) -> tuple[PartitionListing, PartitionScan]:
        """The listing and scan compaction must plan ``key`` on: the partition as retention leaves it (as
        ``listing`` and ``scan`` show it when retention deletes nothing of it)."""
        return self.after.get(key) or (listing, scan)


def _takes_retention_first(config: TopicConfig, scan: PartitionScan) -> bool:
    return config.compact and config.delete and scan.error is None and not never_touched(scan.topic)


def plan_retention_first(params: RetentionParams, scans: Mapping[TopicPartition, PartitionScan],
                         config_for: Callable[[str], TopicConfig], limit: DeleteLimit, *,
                         parallel_map: Callable[..., list[Any]], max_batch_bytes: int,
                         spool: HostSpool | None = None) -> RetentionFirst:
    """Plan retention of the ``compact,delete`` partitions among ``scans`` at ``params.now_ms``, apply the
    delete-fraction ``limit``, and scan what remains of each partition that loses segments, as tasks of
    ``parallel_map`` (:meth:`jobs.engine.frame.job.JobContext.parallel_map`) decoding under ``max_batch_bytes``;
    nothing is written. ``spool``: where the run's earlier scans left copies of what they fetched from an object
    store, which these scans read where they run on the same host (and add to)."""
    plans = {}
    for key in sorted(scans):
        if _takes_retention_first(config_for(key[0]), scans[key]):
            plan = plan_partition(params, scans[key], config_for(key[0]))
            if plan is not None:
                plans[key] = plan
    refused = limit.refused(plans, scans)
    todo = [ScanItem(params.storage, listing_after_retention(limit.listing.partitions[k], plan), "transactions",
                     plan.new_log_start_offset, scans[k].scanned.cleaner_checkpoint, params.now_ms,
                     config_for(k[0]).producer_id_expiration_ms, max_batch_bytes, spool)
            for k, plan in plans.items() if plan.deletions and k[0] not in refused]
    after = {}
    rescans = parallel_map(_after_retention_task, todo,
                           description=f"scan {len(todo)} partition(s) as retention leaves them")
    for scan, item in zip(rescans, todo):
        after[(scan.topic, scan.partition)] = (item.listing, scan)
    return RetentionFirst(plans, refused, after, params, limit)


def apply_retention_first(first: RetentionFirst, scans: Mapping[TopicPartition, PartitionScan],
                          config_for: Callable[[str], TopicConfig], *, work_uri: str, report: RunReport,
                          progress: Progress) -> dict[TopicPartition, RetentionOutcome]:
    """Carry out (or, in a dry run, report) the retention ``first`` planned, before compaction. Errors go to
    ``report.errors`` (with ``"during": "retention"``), warnings to ``report.warnings``, the applied settings
    under ``work_uri``. Returns the retention outcome of every ``compact,delete`` partition, by key."""
    params = first.params
    outcomes: dict[TopicPartition, RetentionOutcome] = {}

    def attach(o: RetentionOutcome) -> None:
        _record_errors(report, o, during="retention")
        outcomes[(o.topic, o.partition)] = o
        if o.action in (Action.ERROR, Action.REFUSED):
            progress.error(f"{o.name}: retention {describe_retention(o, params.dry_run)}", **progress_fields(o))
        elif o.action is not Action.NONE:
            progress(f"{o.name}: retention {describe_retention(o, params.dry_run)}", **progress_fields(o))

    held = first.held()
    keys = [k for k in sorted(scans) if _takes_retention_first(config_for(k[0]), scans[k]) and k not in held]
    if first.limit is not None:
        announce_accepted(first.limit, {k[0] for k in keys}, progress, dry_run=params.dry_run)
    retain_partitions(params, [scans[k] for k in keys], config_for, attach,
                      threads=COMMIT_THREADS, plans=first.plans)
    if not params.dry_run:
        record_used_settings(params.storage, work_uri, config_for, {k[0] for k in keys}, now_ms=params.now_ms)
    for topic, share in sorted(first.refused.items()):
        message, fields = refused_line(share, "retention")
        progress.error(message, **fields)
        for k in sorted(k for k in held if k[0] == topic):
            o = refused_outcome(params, scans[k], config_for(topic), first.plans[k], share)
            _record_errors(report, o, during="retention")
            outcomes[k] = o
    return outcomes


__all__ = ["COMMIT_THREADS", "PLAN_OPTIONS", "DeleteLimit", "RetentionFirst", "RetentionParams", "work",
           "advance_log_start_offsets", "announce_accepted", "apply_retention", "apply_retention_first",
           "listing_after_retention", "plan_partition", "plan_retention_first", "read_used_settings",
           "record_used_settings", "reference_settings", "refused_line", "refused_outcome", "refused_topics",
           "retain_partitions", "retention_decisions"]

