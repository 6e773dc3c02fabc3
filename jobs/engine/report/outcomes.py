"""What the jobs did to each partition, as frozen types: the one source of the JSON report's partition entries
and totals, the Delta ledger's rows, the summaries and the results of :mod:`jobs.api`.

An outcome is built once, when its partition is settled (:mod:`jobs.engine.compact.driver`,
:mod:`jobs.engine.retain.driver`); everything the run reports is derived from it: ``to_entry()`` (the JSON report's
``partitions[]`` entry, whose format these types keep as it was), ``ledger_row()`` (one row of ``--ledger``), the
totals (:class:`CompactTotals`, :class:`RetainTotals`) and the summary tables (:mod:`jobs.engine.report.render`). Adding
a field to the report touches its type here and the renderer that shows it, nothing else.

The decisions a plan file records (``--dry-run --plan``, compared by ``--apply``) are types here too:
:class:`RetentionDecision`, :class:`CompactionDecision` and :class:`CleaningDecision`, whose ``to_dict()`` is the
plan file's format (:mod:`jobs.engine.frame.planfile`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Iterable, Mapping, Sequence

from jobs.engine.scan import PartitionError, ReportError
from jobs.rules.plan_compact import CompactionPlan
from jobs.rules.plan_retain import DeletionRule, RetentionPlan


class Action(StrEnum):
    """What was done to a partition (the report's and the ledger's ``action``; the value is the JSON text)."""

    # compact
    COMPACTED = "compacted"
    PARTLY_COMPACTED = "partly compacted"
    UNCHANGED = "unchanged"
    WOULD_COMPACT = "would compact"
    WOULD_LEAVE_UNCHANGED = "would leave unchanged"
    SKIPPED = "skipped"
    # retain
    DELETE = "delete"
    NONE = "none"
    REFUSED = "refused"
    # both
    ERROR = "error"

    @property
    def rewrote(self) -> bool:
        """At least one segment group was rewritten (would be, in a dry run)."""
        return self in (Action.COMPACTED, Action.PARTLY_COMPACTED, Action.WOULD_COMPACT)

    @property
    def failed(self) -> bool:
        """The partition makes the run exit 1 (failed, refused by the delete-fraction limit, or partly done)."""
        return self in (Action.ERROR, Action.REFUSED, Action.PARTLY_COMPACTED)

    @property
    def committed(self) -> bool:
        """Something of the partition was committed (what an interrupted run lists as done)."""
        return self in (Action.COMPACTED, Action.PARTLY_COMPACTED, Action.DELETE)


#: The error kind of a partition the delete-fraction limit refused (its action is ``refused``; text output calls
#: it REFUSED, never FAILED: see :func:`jobs.engine.report.run_report.problem_notes`).
REFUSED_KIND = "MaxDeleteFractionExceeded"

#: The numbers of a ledger row (see :func:`jobs.engine.report.run_report.append_ledger`).
LEDGER_NUMBERS = ("records_before", "records_after", "bytes_before", "bytes_after", "segments_before",
                  "segments_after", "records_removed", "bytes_removed")


def unreadable_reason(error: PartitionError | None) -> str:
    """The ``reason`` of a partition that could not be read (left untouched)."""
    what = "not recovered, left as it is" if error is not None and error.kind == "RecoveryError" else "unreadable"
    return f"{what}: {error}"


# --------------------------------------------------------------------------------------------------
# Retention
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeletedSegment:
    """A segment retention deletes (would delete, in a dry run), and the rule that condemned it."""

    base_offset: int
    next_offset: int
    bytes: int
    rule: DeletionRule
    detail: str
    largest_timestamp: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"base_offset": self.base_offset, "next_offset": self.next_offset, "bytes": self.bytes,
                "rule": str(self.rule), "detail": self.detail, "largest_timestamp": self.largest_timestamp}


@dataclass(frozen=True)
class Refusal:
    """Why the delete-fraction limit left a partition's topic untouched: what retention would have deleted, the
    share of the topic that is, and the limit."""

    would_delete: tuple[DeletedSegment, ...]
    fraction: float
    max_fraction: float

    def to_dict(self) -> dict[str, Any]:
        return {"would_delete": [d.to_dict() for d in self.would_delete], "fraction": round(self.fraction, 4),
                "max_fraction": self.max_fraction}


@dataclass(frozen=True)
class RetentionOutcome:
    """One partition's retention (``segjobs retain``, or compaction's retention first of a compact,delete topic).

    ``readable`` False: the partition could not be read and was left untouched (the numbers are then unknown).
    The fields after ``applied`` say what a real run's steps did; None: the step did not run."""

    topic: str
    partition: int
    action: Action
    reason: str
    warnings: tuple[str, ...] = ()
    error: PartitionError | None = None
    readable: bool = True
    policy: str | None = None
    segments_before: int | None = None
    bytes_before: int | None = None
    log_start_offset_before: int | None = None
    segments_after: int | None = None
    bytes_after: int | None = None
    bytes_removed: int = 0
    rules: tuple[DeletionRule, ...] = ()
    deleted: tuple[DeletedSegment, ...] = ()
    log_start_offset: int | None = None
    #: whether a broker would roll the active segment first (planned partitions only)
    kafka_would_roll: bool | None = None
    applied: bool = False
    renamed: int | None = None
    leader_epoch_trimmed: bool | None = None
    snapshots_deleted: tuple[str, ...] | None = None
    #: file names of the ``.deleted`` files unlinked now
    purged: tuple[str, ...] | None = None
    purged_bytes: int | None = None
    #: base offset (as text) -> when its ``.deleted`` files may go (epoch ms)
    purge_pending: Mapping[str, int] | None = None
    refused: Refusal | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def committed(self) -> bool:
        """Some of the partition's files were changed (what an interrupted run lists as done)."""
        return self.action.committed and self.applied

    @property
    def files_purged(self) -> int:
        return len(self.purged or ())

    def error_dict(self) -> ReportError | None:
        """The entry's ``error``: a refusal is an error of kind :data:`REFUSED_KIND` (exit code 1)."""
        if self.refused is not None:
            return {"kind": REFUSED_KIND, "detail": self.reason}
        return self.error.to_dict() if self.error is not None else None

    def to_entry(self) -> dict[str, Any]:
        """The report's entry of the partition (``partitions[]`` of ``retain``, ``retention`` of ``compact``)."""
        if not self.readable:
            return {"topic": self.topic, "partition": self.partition, "action": self.action.value,
                    "reason": self.reason, "error": self.error_dict(), "segments_before": None,
                    "segments_after": None, "bytes_before": None, "bytes_after": None, "bytes_removed": 0,
                    "deleted": [], "warnings": list(self.warnings)}
        e: dict[str, Any] = {
            "topic": self.topic, "partition": self.partition, "policy": self.policy,
            "segments_before": self.segments_before, "bytes_before": self.bytes_before,
            "log_start_offset_before": self.log_start_offset_before, "warnings": list(self.warnings),
            "action": self.action.value, "reason": self.reason, "segments_after": self.segments_after,
            "bytes_after": self.bytes_after, "bytes_removed": self.bytes_removed,
            "rules": [str(r) for r in self.rules],
            "deleted": [d.to_dict() for d in self.deleted], "log_start_offset": self.log_start_offset,
        }
        if self.kafka_would_roll is not None:
            e["kafka_would_roll"] = self.kafka_would_roll
        if self.renamed is not None:
            e["renamed"] = self.renamed
        if self.leader_epoch_trimmed is not None:
            e["leader_epoch_trimmed"] = self.leader_epoch_trimmed
        if self.snapshots_deleted is not None:
            e["snapshots_deleted"] = list(self.snapshots_deleted)
        if self.purged is not None:
            e["purged"] = list(self.purged)
        if self.purged_bytes is not None:
            e["purged_bytes"] = self.purged_bytes
        if self.purge_pending is not None:
            e["purge_pending"] = dict(self.purge_pending)
        e["applied"] = self.applied
        if self.refused is not None:
            e["refused"] = self.refused.to_dict()
        error = self.error_dict()
        if error is not None:
            e["error"] = error
        return e

    def counts_in_ledger(self, dry_run: bool) -> bool:
        """A compact run's retention step whose deletes its ledger row counts (done, or in a dry run planned)."""
        return bool(self.bytes_removed) and (self.applied or dry_run) and self.action not in (Action.ERROR,
                                                                                             Action.REFUSED)

    def ledger_row(self, dry_run: bool) -> dict[str, Any]:
        """The partition's row of ``--ledger`` (without the run's columns)."""
        numbers = {"records_before": 0, "records_after": 0, "bytes_before": self.bytes_before or 0,
                   "bytes_after": self.bytes_after or 0, "segments_before": self.segments_before or 0,
                   "segments_after": self.segments_after or 0, "records_removed": 0,
                   "bytes_removed": self.bytes_removed}
        return {"topic": self.topic, "partition": self.partition, "action": self.action.value,
                "reason": self.reason, **numbers}


# --------------------------------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanedRange:
    """What the cleaning task of a partition did (would do, in a dry run): present once a task ran."""

    #: [first dirty offset, where the pass ended]
    cleaned_range: tuple[int, int | None]
    #: the offset map filled up: the clean stopped early and the next run continues
    partial: bool
    groups: int
    groups_rewritten: int
    records_before: int
    records_after: int
    stats: Mapping[str, int]
    task_seconds: float
    indexes_rebuilt: tuple[str, ...]


@dataclass(frozen=True)
class CompactionOutcome:
    """One partition's compaction (``segjobs compact``): the plan's view of it, what its task did, and, for a
    compact,delete topic, the retention applied first. ``readable`` False: the partition could not be read."""

    topic: str
    partition: int
    action: Action
    reason: str
    error: PartitionError | None = None
    readable: bool = True
    selected: bool = False
    note: str | None = None
    dirty_ratio: float | None = None
    clean_bytes: int = 0
    cleanable_bytes: int = 0
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    bound_by: str | None = None
    previous_checkpoint: int | None = None
    new_checkpoint: int | None = None
    segments_before: int = 0
    bytes_before: int = 0
    segments_after: int = 0
    bytes_after: int = 0
    records_removed: int = 0
    bytes_removed: int = 0
    cleaned: CleanedRange | None = None
    #: the strategy that cleaned it (``memory``, ``external-sort``) and why; None when no task ran
    strategy: str | None = None
    strategy_reason: str | None = None
    #: external-sort's stages of the partition (task counts, buckets, superseded keys, seconds)
    external_sort: Mapping[str, Any] | None = None
    retention: RetentionOutcome | None = None
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def committed(self) -> bool:
        """Some of the partition's files were changed (what an interrupted run lists as done)."""
        return self.action.committed

    @property
    def partial(self) -> bool:
        return self.cleaned is not None and self.cleaned.partial

    @property
    def segments_removed(self) -> int:
        """Segments gone: merged by compaction, deleted by its retention first."""
        return (max(self.segments_before - self.segments_after, 0)
                + (len(self.retention.deleted) if self.retention is not None else 0))

    def to_entry(self) -> dict[str, Any]:
        """The report's entry of the partition (``partitions[]`` of ``compact``)."""
        if not self.readable:
            return {"topic": self.topic, "partition": self.partition, "action": self.action.value,
                    "reason": self.reason, "error": self.error.to_dict() if self.error else None}
        e: dict[str, Any] = {
            "topic": self.topic, "partition": self.partition, "selected": self.selected, "reason": self.reason,
            "note": self.note, "dirty_ratio": self.dirty_ratio, "clean_bytes": self.clean_bytes,
            "cleanable_bytes": self.cleanable_bytes, "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset, "bound_by": self.bound_by,
            "previous_checkpoint": self.previous_checkpoint, "new_checkpoint": self.new_checkpoint,
            "segments_before": self.segments_before, "bytes_before": self.bytes_before,
            "segments_after": self.segments_after, "bytes_after": self.bytes_after,
            "records_removed": self.records_removed, "bytes_removed": self.bytes_removed,
            "action": self.action.value,
        }
        c = self.cleaned
        if c is not None:
            e.update(cleaned_range=list(c.cleaned_range), partial=c.partial, groups=c.groups,
                     groups_rewritten=c.groups_rewritten, records_before=c.records_before,
                     records_after=c.records_after, stats=dict(c.stats), task_seconds=c.task_seconds,
                     indexes_rebuilt=list(c.indexes_rebuilt))
        if self.error is not None:
            e["error"] = self.error.to_dict()
        if self.retention is not None:
            e["retention"] = self.retention.to_entry()
        e["warnings"] = list(self.warnings)
        if self.strategy is not None:
            e.update(strategy=self.strategy, strategy_reason=self.strategy_reason)
        if self.external_sort is not None:
            e["external_sort"] = dict(self.external_sort)
        return e

    def ledger_row(self, dry_run: bool) -> dict[str, Any]:
        """The partition's row of ``--ledger`` (without the run's columns). A compact run deletes a
        ``compact,delete`` partition's expired segments before cleaning it (the ``retention`` step): its row
        starts from the partition as it was before that step and counts the deleted bytes, so the ledger's
        reclaimed bytes match the run's summary."""
        c = self.cleaned
        numbers = {"records_before": c.records_before if c else 0, "records_after": c.records_after if c else 0,
                   "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                   "segments_before": self.segments_before, "segments_after": self.segments_after,
                   "records_removed": self.records_removed, "bytes_removed": self.bytes_removed}
        r = self.retention
        if r is not None and r.counts_in_ledger(dry_run):
            numbers["bytes_removed"] += r.bytes_removed
            numbers["bytes_before"] = r.bytes_before or numbers["bytes_before"]
            numbers["segments_before"] = r.segments_before or numbers["segments_before"]
        return {"topic": self.topic, "partition": self.partition, "action": self.action.value,
                "reason": self.reason, **numbers}


Outcome = CompactionOutcome | RetentionOutcome


# --------------------------------------------------------------------------------------------------
# Totals
# --------------------------------------------------------------------------------------------------


def _failed_and_refused(errors: Sequence[ReportError]) -> tuple[int, int]:
    """The run's errors split into failures and refusals by the delete-fraction limit."""
    refused = sum(1 for e in errors if e["kind"] == REFUSED_KIND)
    return len(errors) - refused, refused


@dataclass(frozen=True)
class CompactTotals:
    """The totals of a compact run (the report's ``totals``). ``errors`` counts every entry of the report's
    errors (each makes the run exit 1); ``failed`` and ``refused`` split them into failures and partitions the
    delete-fraction limit left untouched."""

    partitions: int
    selected: int
    records_removed: int
    #: by compaction and, for compact,delete topics, by retention first
    bytes_removed: int
    errors: int
    failed: int
    refused: int
    #: the bytes of the selected partitions (before the run)
    bytes_compacted: int
    files_purged: int
    bytes_purged: int

    @classmethod
    def of(cls, outcomes: Sequence[CompactionOutcome], errors: Sequence[ReportError]) -> "CompactTotals":
        failed, refused = _failed_and_refused(errors)
        retention = [o.retention for o in outcomes if o.retention is not None]
        return cls(partitions=len(outcomes), selected=sum(1 for o in outcomes if o.selected),
                   records_removed=sum(o.records_removed for o in outcomes),
                   bytes_removed=sum(o.bytes_removed for o in outcomes) + sum(r.bytes_removed for r in retention),
                   errors=len(errors), failed=failed, refused=refused,
                   bytes_compacted=sum(o.bytes_before for o in outcomes if o.selected),
                   files_purged=sum(r.files_purged for r in retention),
                   bytes_purged=sum(r.purged_bytes or 0 for r in retention))

    def to_dict(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "selected": self.selected, "records_removed": self.records_removed,
                "bytes_removed": self.bytes_removed, "errors": self.errors, "failed": self.failed,
                "refused": self.refused, "bytes_compacted": self.bytes_compacted,
                "files_purged": self.files_purged, "bytes_purged": self.bytes_purged}


@dataclass(frozen=True)
class RetainTotals:
    """The totals of a retain run (the report's ``totals``; ``errors``, ``failed``, ``refused`` as for
    :class:`CompactTotals`)."""

    partitions: int
    segments_deleted: int
    bytes_removed: int
    #: partitions that lost segments
    partitions_changed: int
    errors: int
    failed: int
    refused: int
    warnings: int
    files_purged: int
    bytes_purged: int
    bytes_in_scope: int

    @classmethod
    def of(cls, outcomes: Sequence[RetentionOutcome], errors: Sequence[ReportError],
           warnings: int) -> "RetainTotals":
        failed, refused = _failed_and_refused(errors)
        return cls(partitions=len(outcomes), segments_deleted=sum(len(o.deleted) for o in outcomes),
                   bytes_removed=sum(o.bytes_removed for o in outcomes),
                   partitions_changed=sum(1 for o in outcomes if o.action is Action.DELETE),
                   errors=len(errors), failed=failed, refused=refused, warnings=warnings,
                   files_purged=sum(o.files_purged for o in outcomes),
                   bytes_purged=sum(o.purged_bytes or 0 for o in outcomes),
                   bytes_in_scope=sum(o.bytes_before or 0 for o in outcomes))

    def to_dict(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "segments_deleted": self.segments_deleted,
                "bytes_removed": self.bytes_removed, "partitions_changed": self.partitions_changed,
                "errors": self.errors, "failed": self.failed, "refused": self.refused, "warnings": self.warnings,
                "files_purged": self.files_purged, "bytes_purged": self.bytes_purged,
                "bytes_in_scope": self.bytes_in_scope}


# --------------------------------------------------------------------------------------------------
# inspect's rows
# --------------------------------------------------------------------------------------------------


def _key(spark: str, doc: str) -> Any:
    return field(metadata={"spark": spark, "doc": doc})


def _col(spark: str, doc: str) -> Any:
    return field(default=None, metadata={"spark": spark, "doc": doc})


@dataclass(frozen=True)
class InspectRow:
    """One partition's row of ``inspect``: the only serialiser of the JSON report's ``partitions[]`` entry, the CSV
    row and the DataFrame row of an inspect run (:meth:`to_entry`). Each field is a column, with its Spark SQL type
    and its meaning (:data:`INSPECT_COLUMNS`); an unreadable partition has ``error`` and None elsewhere."""

    topic: str = _key("string", "topic")
    partition: int = _key("int", "partition number")
    policy: str | None = _col("string", "cleanup.policy")
    segments: int | None = _col("int", "live segments")
    bytes: int | None = _col("bigint", "bytes of all segments")
    clean_bytes: int | None = _col("bigint", "bytes below the first dirty offset (cleaned before)")
    cleanable_bytes: int | None = _col("bigint", "bytes from the first dirty offset to the first uncleanable offset")
    uncleanable_bytes: int | None = _col("bigint", "bytes from the first uncleanable offset on (active segment "
                                                   "included)")
    dirty_ratio: float | None = _col("double", "cleanable / (clean + cleanable) bytes; null where the topic has no "
                                               "compact policy (a compaction measure: not applicable to delete-only "
                                               "topics)")
    min_cleanable_dirty_ratio: float | None = _col("double", "the topic's min.cleanable.dirty.ratio")
    log_start_offset: int | None = _col("bigint", "log start offset")
    log_end_offset: int | None = _col("bigint", "log end offset")
    first_dirty_offset: int | None = _col("bigint", "where the next clean starts")
    first_uncleanable_offset: int | None = _col("bigint", "where the next clean stops (a segment base)")
    bound_by: str | None = _col("string", "what sets the first uncleanable offset")
    records: int | None = _col("bigint", "data records (transaction markers not counted)")
    markers: int | None = _col("bigint", "transaction markers (control records)")
    keyless_records: int | None = _col("bigint", "data records without a key (outside aborted transactions)")
    distinct_keys: int | None = _col("bigint", "distinct keys of the keyed records not in aborted transactions")
    distinct_keys_exact: bool | None = _col("boolean", "false: distinct_keys and superseded_records are HyperLogLog "
                                                       "estimates")
    superseded_records: int | None = _col("bigint", "keyed records a later record of the same key replaces")
    live_tombstones: int | None = _col("bigint", "tombstones a clean at now keeps (no delete horizon, or one after "
                                                 "now)")
    expired_tombstones: int | None = _col("bigint", "tombstones whose delete horizon is <= now")
    aborted_records: int | None = _col("bigint", "data records of aborted transactions")
    oldest_timestamp: int | None = _col("bigint", "smallest record timestamp (epoch ms), null when none")
    newest_timestamp: int | None = _col("bigint", "largest record timestamp (epoch ms), null when none")
    compaction_selected: bool | None = _col("boolean", "would a compaction run at now select the partition")
    compaction_reason: str | None = _col("string", "why (not)")
    compaction_note: str | None = _col("string", "why (not), in a few words")
    compaction_records_removed: int | None = _col("bigint", "records a compaction at now would remove")
    compaction_bytes_removed: int | None = _col("bigint", "bytes a compaction at now would remove")
    compaction_measured: bool | None = _col("boolean", "true: measured by a compaction dry run (--exact); false: "
                                                       "estimated")
    compaction_partial: bool | None = _col("boolean", "the offset map would fill up: one run cleans only part of the "
                                                      "range")
    retention_segments_deleted: int | None = _col("int", "segments retention would delete at now (none where it is "
                                                         "refused)")
    retention_bytes_deleted: int | None = _col("bigint", "bytes retention would delete at now (none where it is "
                                                         "refused)")
    retention_rules: str | None = _col("string", "the rules that condemn them (comma-separated)")
    retention_log_start_offset: int | None = _col("bigint", "the log start offset after retention")
    retention_refused: str | None = _col("string", "why retention would leave the topic untouched (delete-fraction "
                                                   "limit); null when it would not")
    segment_bytes: Sequence[int] | None = _col("array<bigint>", "size of each segment, oldest first")
    segment_age_ms: Sequence[int] | None = _col("array<bigint>", "now minus each segment's largest timestamp (what "
                                                                 "retention.ms compares)")
    error: str | None = _col("string", "why the partition could not be inspected; null when it could")

    @classmethod
    def of(cls, topic: str, partition: int, values: Mapping[str, Any]) -> "InspectRow":
        """The row of ``topic``-``partition`` with ``values`` (by column name; a name that is no column is an
        error), None in every other column."""
        return cls(topic=topic, partition=partition, **values)

    @property
    def readable(self) -> bool:
        return self.error is None

    def to_entry(self) -> dict[str, Any]:
        """Every column, in order (the report's entry)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: inspect's columns, in order: (name, Spark SQL type, meaning), from :class:`InspectRow`.
INSPECT_COLUMNS: tuple[tuple[str, str, str], ...] = tuple((f.name, f.metadata["spark"], f.metadata["doc"])
                                                          for f in fields(InspectRow))


@dataclass(frozen=True)
class InspectTotals:
    """The totals of an inspect run (the report's ``totals``), from its rows."""

    partitions: int
    errors: int
    bytes: int
    records: int
    #: partitions a compaction at now would select
    compaction_selected: int
    #: what a compaction run at now reclaims: the selected partitions only
    compaction_bytes_removed: int
    retention_bytes_deleted: int
    #: distinct keys counted and compaction measured exactly (else estimates)
    exact: bool

    @classmethod
    def of(cls, rows: Sequence[InspectRow], *, exact: bool) -> "InspectTotals":
        ok = [r for r in rows if r.readable]
        return cls(partitions=len(rows), errors=len(rows) - len(ok), bytes=sum(r.bytes or 0 for r in ok),
                   records=sum(r.records or 0 for r in ok),
                   compaction_selected=sum(bool(r.compaction_selected) for r in ok),
                   compaction_bytes_removed=sum(r.compaction_bytes_removed or 0 for r in ok if r.compaction_selected),
                   retention_bytes_deleted=sum(r.retention_bytes_deleted or 0 for r in ok), exact=exact)

    def to_dict(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "errors": self.errors, "bytes": self.bytes, "records": self.records,
                "compaction_selected": self.compaction_selected,
                "compaction_bytes_removed": self.compaction_bytes_removed,
                "retention_bytes_deleted": self.retention_bytes_deleted, "exact": self.exact}


# --------------------------------------------------------------------------------------------------
# The decisions a plan file records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedDeletion:
    """A segment a plan's retention deletes: its base offset, bytes and the rule that condemned it."""

    segment: int
    bytes: int
    rule: DeletionRule

    def to_dict(self) -> dict[str, Any]:
        return {"segment": self.segment, "bytes": self.bytes, "rule": str(self.rule)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "PlannedDeletion":
        return cls(doc["segment"], doc["bytes"], DeletionRule(doc["rule"]))


@dataclass(frozen=True)
class RetentionDecision:
    """What a plan file records of one partition's retention (compared field by field by ``--apply``)."""

    #: retention leaves the partition alone whatever its segments (unreadable, or the KRaft metadata log)
    untouched: bool = False
    delete: tuple[PlannedDeletion, ...] = ()
    log_start_offset: int | None = None
    #: the delete-fraction limit refused the partition's topic
    refused: bool = False

    @classmethod
    def of(cls, plan: RetentionPlan | None, refused: bool) -> "RetentionDecision":
        """The decision of ``plan`` (None: retention does not touch the partition); ``refused``: its topic is
        held by the delete-fraction limit."""
        if plan is None:
            return cls(untouched=True)
        return cls(delete=tuple(PlannedDeletion(d.segment.base_offset, d.size_bytes, d.rule) for d in plan.deletions),
                   log_start_offset=plan.new_log_start_offset, refused=refused)

    def to_dict(self) -> dict[str, Any]:
        if self.untouched:
            return {"untouched": True}
        out: dict[str, Any] = {"delete": [d.to_dict() for d in self.delete], "log_start_offset": self.log_start_offset}
        if self.refused:
            out["refused"] = True
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "RetentionDecision":
        if doc.get("untouched"):
            return cls(untouched=True)
        return cls(delete=tuple(PlannedDeletion.from_dict(d) for d in doc["delete"]),
                   log_start_offset=doc["log_start_offset"], refused=bool(doc.get("refused")))


@dataclass(frozen=True)
class CompactionDecision:
    """What a plan file records of a partition's compaction before any task runs (compared by ``--apply``
    before anything is changed); what the task decides is a :class:`CleaningDecision`, recorded later."""

    selected: bool
    #: the delete-fraction limit holds the partition's topic (no retention, no compaction)
    held: bool = False
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None

    @classmethod
    def of(cls, plan: CompactionPlan, held: bool) -> "CompactionDecision":
        if held:
            return cls(selected=False, held=True)
        if not plan.selected:
            return cls(selected=False)
        return cls(selected=True, first_dirty_offset=plan.first_dirty_offset,
                   first_uncleanable_offset=plan.first_uncleanable_offset)

    def to_dict(self) -> dict[str, Any]:
        if self.held:
            return {"selected": False, "held": True}
        out: dict[str, Any] = {"selected": self.selected}
        if self.selected:
            out.update(first_dirty_offset=self.first_dirty_offset,
                       first_uncleanable_offset=self.first_uncleanable_offset)
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "CompactionDecision":
        if doc.get("held"):
            return cls(selected=False, held=True)
        if not doc["selected"]:
            return cls(selected=False)
        return cls(selected=True, first_dirty_offset=doc["first_dirty_offset"],
                   first_uncleanable_offset=doc["first_uncleanable_offset"])


@dataclass(frozen=True)
class CleaningDecision:
    """What a partition's cleaning task decided (the plan file's ``compaction.outcome``): where the pass ends,
    the groups it rewrites (each by the base offsets of its old segments) and what goes."""

    end_offset: int | None  #: None: the task ended before it decided (an error)
    groups: tuple[tuple[int, ...], ...]
    records_removed: int
    bytes_removed: int

    def to_dict(self) -> dict[str, Any]:
        return {"end_offset": self.end_offset, "groups": [list(g) for g in self.groups],
                "records_removed": self.records_removed, "bytes_removed": self.bytes_removed}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "CleaningDecision":
        return cls(end_offset=doc["end_offset"], groups=tuple(tuple(g) for g in doc["groups"]),
                   records_removed=doc["records_removed"], bytes_removed=doc["bytes_removed"])


#: A decision a plan file records, under its part (``retention``, ``compaction``).
Decision = RetentionDecision | CompactionDecision


@dataclass(frozen=True)
class PartitionDecisions:
    """Everything a plan file records of one partition: its retention and its compaction (each None when the run
    did not decide it), and what its cleaning task decided (None until then; the plan file's
    ``compaction.outcome``)."""

    retention: RetentionDecision | None = None
    compaction: CompactionDecision | None = None
    cleaning: CleaningDecision | None = None

    def with_decision(self, decision: Decision | CleaningDecision) -> "PartitionDecisions":
        """These decisions with ``decision`` in its place."""
        if isinstance(decision, RetentionDecision):
            return replace(self, retention=decision)
        if isinstance(decision, CompactionDecision):
            return replace(self, compaction=decision)
        return replace(self, cleaning=decision)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.retention is not None:
            out["retention"] = self.retention.to_dict()
        if self.compaction is not None or self.cleaning is not None:
            compaction = self.compaction.to_dict() if self.compaction is not None else {}
            if self.cleaning is not None:
                compaction["outcome"] = self.cleaning.to_dict()
            out["compaction"] = compaction
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "PartitionDecisions":
        """The decisions of a plan file as read back; ``ValueError`` when the document is not one that
        :meth:`to_dict` writes (an unknown key, a value of another shape), so that what ``--apply`` compares is
        exactly what the file says."""
        try:
            retention = doc.get("retention")
            compaction = doc.get("compaction")
            decisions = cls(
                retention=None if retention is None else RetentionDecision.from_dict(retention),
                compaction=CompactionDecision.from_dict(compaction)
                if compaction is not None and ("selected" in compaction or "held" in compaction) else None,
                cleaning=None if compaction is None or compaction.get("outcome") is None
                else CleaningDecision.from_dict(compaction["outcome"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed decisions {doc!r} ({type(exc).__name__}: {exc})") from None
        if decisions.to_dict() != doc:
            raise ValueError(f"decisions {doc!r} are not as this version writes them")
        return decisions


def ledger_rows(outcomes: Iterable[Outcome], *, dry_run: bool) -> list[dict[str, Any]]:
    """The ledger rows of a run's outcomes (see :func:`jobs.engine.report.run_report.append_ledger`)."""
    return [o.ledger_row(dry_run) for o in outcomes]


__all__ = ["INSPECT_COLUMNS", "LEDGER_NUMBERS", "REFUSED_KIND", "Action", "CleanedRange", "CleaningDecision",
           "CompactTotals", "CompactionDecision", "CompactionOutcome", "Decision", "DeletedSegment", "InspectRow",
           "InspectTotals", "Outcome", "PartitionDecisions", "PlannedDeletion", "Refusal", "RetainTotals",
           "ReportError", "RetentionDecision",
           "RetentionOutcome", "ledger_rows", "unreadable_reason"]
