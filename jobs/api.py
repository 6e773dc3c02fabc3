"""segjobs as a Python library: :func:`compact`, :func:`retain`, :func:`inspect` and :func:`recover`, with typed
options in and typed results out. The ``segjobs`` commands and the ``spark-submit`` scripts are thin layers
over these functions.

::

    from jobs import api

    result = api.compact("/var/kafka/logs", api.CompactOptions(config="conf/topics.toml", dry_run=True),
                         now="2026-11-22T02:00:00Z")
    print(result.records_removed, result.bytes_removed, result.exit_code)
    for p in result.partitions:
        print(p.name, p.action, p.records_removed)

Options (:mod:`jobs.engine.frame.options`) are frozen dataclasses checked when they are made: a value they refuse
raises :class:`InvalidOptionUsage` / :class:`InvalidOptionConfig` naming the field. ``now`` is the instant the
decisions are made at: epoch milliseconds, an ISO-8601 string or a datetime (naive: UTC); None means the wall
clock, and the result says so (``now_from_wall_clock``). ``spark`` is the session the tasks run in: None takes
the active session, or creates one (``options.master``).

Errors: when nothing was done (a configuration or usage error, the log dir locked by another run) the
functions raise :class:`~segment_io.errors.ConfigError`, :class:`~segment_io.errors.UsageError` or
:class:`~segment_io.errors.LockHeldError` (exit code 2 on the command line); their messages name options as the
command line spells them (``--dry-run`` is ``dry_run``). Otherwise they return a result whose ``exit_code`` is 0,
or 1 when some partition failed (its entry says why; the others were done).

``seams`` (:class:`Seams`) are for tests only: fault injection, the clock, and running tasks in this process.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

from jobs.engine.compact import driver as compaction
from jobs.engine.compact.selection import SELECTION_DEPTH, may_read_in_full, read_at_first_scan
from jobs.engine.frame.job import JobRun, hold_log_dir, open_log_dir, recover_under, run_job
from jobs.engine.frame.options import (
    DEFAULT_DEDUPE_BUFFER_BYTES,
    STRATEGIES,
    ChangeOptions,
    CompactOptions,
    InspectOptions,
    InvalidOption,
    InvalidOptionConfig,
    InvalidOptionUsage,
    JobOptions,
    LockingOptions,
    ProgressSink,
    RecoverOptions,
    RetainOptions,
    RunOptions,
)
from jobs.engine.frame.planfile import load_for_apply
from jobs.engine.inspect import driver as inspection
from jobs.engine.report.outcomes import (
    Action,
    CompactionOutcome,
    CompactTotals,
    InspectRow,
    InspectTotals,
    ReportError,
    RetainTotals,
    RetentionOutcome,
)
from jobs.engine.report.render import render_compact_summary, render_retain_summary
from jobs.engine.report.run_report import Progress, RunReport, render_stopped_summary, short_error
from jobs.engine.retain import driver as retention
from jobs.engine.runtime.seams import PRODUCTION, Seams
from jobs.engine.runtime.tasks import InProcessTasks, SparkTasks
from jobs.logdir.checks import check_log_dir_has_partitions, check_log_dir_writable
from jobs.logdir.lock import LeaseLost, lease_ttl_ms, work_uri
from jobs.logdir.recover import RecoveryAction, RecoveryReport, RecoveryTally, tally_reports
from jobs.rules.config import ConfigSet
from jobs.rules.timeutil import Instant, parse_instant, resolve_now
from segment_io.errors import LockHeldError, UsageError
from segment_io.layout import list_log_dir_top
from segment_io.storage import StorageOptions

if TYPE_CHECKING:
    from jobs.engine.tiered.audit import TieredAudit, TieredAuditOptions
    from jobs.engine.tiered.clean import CleanResult

OptionsT = TypeVar("OptionsT", bound=RunOptions)


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """What every job run returns. The typed fields are the common questions; ``report`` (the JSON report
    as written by ``--report``) has everything else."""

    #: 0: done; 1: some partition failed, or the report/ledger could not be written (see ``errors``)
    exit_code: int
    run_id: str
    log_dir: str
    #: the instant the decisions were made at (epoch ms)
    now_ms: int
    #: True when ``now`` was not given and the wall clock chose it (pass ``now=now_ms`` to repeat the run)
    now_from_wall_clock: bool
    dry_run: bool
    #: False when the run stopped before its end (its S3 lease was lost): ``partitions`` holds what was done
    completed: bool
    #: one dict per failure: ``partition`` (when one), ``kind``, ``detail``, and where known ``file``,
    #: ``position``, ``offset``
    errors: tuple[dict[str, Any], ...]
    warnings: tuple[str, ...]
    report: RunReport

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> str:
        """The JSON report (the document ``--report`` writes and ``--format json`` prints)."""
        return self.report.to_json()

    @staticmethod
    def _common(run: JobRun) -> dict[str, Any]:
        r = run.report
        return dict(exit_code=r.exit_code, run_id=r.run_id, log_dir=r.log_dir, now_ms=r.now_ms,
                    now_from_wall_clock=run.now_from_clock, dry_run=r.dry_run, completed=run.completed,
                    errors=tuple(r.errors), warnings=tuple(r.warnings), report=r)


@dataclass(frozen=True, kw_only=True)
class PartitionResult:
    """One partition of a run: the common fields, and its report ``entry`` (a dict) with everything else."""

    topic: str
    partition: int
    #: what was done; see the subclasses for the values
    action: str
    #: why the partition failed or was refused, in a few words; None when it did not
    error: str | None
    entry: dict[str, Any]

    @property
    def name(self) -> str:
        """``topic-partition``, as the partition's directory is named."""
        return f"{self.topic}-{self.partition}"


def _error_text(error: ReportError | None) -> str | None:
    return short_error(error) if error else None


@dataclass(frozen=True, kw_only=True)
class RetainedPartition(PartitionResult):
    """A partition's retention. ``action``: ``delete`` (would, in a dry run), ``none``, ``refused`` (the
    delete-fraction limit left its topic untouched) or ``error``."""

    segments_deleted: int
    bytes_removed: int
    #: the log start offset after retention (None when the partition could not be read)
    log_start_offset: int | None
    #: the rules that condemned the deleted segments (``retention.ms``, ``retention.bytes``, ``log-start-offset``)
    rules: tuple[str, ...]
    #: ``.deleted`` files unlinked because their file.delete.delay.ms had passed
    files_purged: int

    #: the partition's typed outcome (``entry`` is its serialised form)
    outcome: RetentionOutcome

    @classmethod
    def of(cls, o: RetentionOutcome, entry: dict[str, Any]) -> "RetainedPartition":
        return cls(topic=o.topic, partition=o.partition, action=o.action.value, error=_error_text(o.error_dict()),
                   entry=entry, outcome=o, segments_deleted=len(o.deleted), bytes_removed=o.bytes_removed,
                   log_start_offset=o.log_start_offset, rules=o.rules, files_purged=o.files_purged)


@dataclass(frozen=True, kw_only=True)
class CompactedPartition(PartitionResult):
    """A partition's compaction. ``action``: ``compacted``, ``unchanged``, ``partly compacted``, ``skipped``,
    ``error`` (dry run: ``would compact``, ``would leave unchanged``)."""

    #: the planner selected it (dirty ratio, max lag, or named in ``topics``/``partitions``)
    selected: bool
    records_removed: int
    bytes_removed: int
    segments_before: int | None
    segments_after: int | None
    #: the offset map filled up: the clean stopped early and the next run continues
    partial: bool
    #: compact,delete topics: the retention applied before compaction
    retention: RetainedPartition | None

    #: the partition's typed outcome (``entry`` is its serialised form)
    outcome: CompactionOutcome

    @classmethod
    def of(cls, o: CompactionOutcome, entry: dict[str, Any]) -> "CompactedPartition":
        retention = (RetainedPartition.of(o.retention, entry["retention"]) if o.retention is not None else None)
        return cls(topic=o.topic, partition=o.partition, action=o.action.value,
                   error=_error_text(o.error.to_dict() if o.error else None), entry=entry, outcome=o,
                   selected=o.selected, records_removed=o.records_removed, bytes_removed=o.bytes_removed,
                   segments_before=o.segments_before if o.readable else None,
                   segments_after=o.segments_after if o.readable else None, partial=o.partial, retention=retention)


@dataclass(frozen=True, kw_only=True)
class CompactResult(JobResult):
    """What :func:`compact` did (or, in a dry run, would do)."""

    partitions: tuple[CompactedPartition, ...]
    #: partitions the planner selected
    partitions_selected: int
    #: partitions with at least one segment group rewritten (``compacted`` or ``partly compacted``; dry run:
    #: ``would compact``)
    partitions_compacted: int
    records_removed: int
    #: by compaction and, for compact,delete topics, by retention first
    bytes_removed: int
    #: segments gone: merged by compaction, deleted by retention
    segments_removed: int
    files_purged: int
    bytes_purged: int
    #: partitions whose interrupted commits recovery settled at the start of the run
    recovered_partitions: int

    @classmethod
    def of(cls, run: JobRun) -> "CompactResult":
        report = run.report
        outcomes = [o for o in report.outcomes if isinstance(o, CompactionOutcome)]
        parts = tuple(CompactedPartition.of(o, e) for o, e in zip(outcomes, report.partitions))
        # the totals of what was settled (all of it, unless the run stopped early)
        t = CompactTotals.of(outcomes, report.errors)
        return cls(**cls._common(run), partitions=parts, partitions_selected=t.selected,
                   partitions_compacted=sum(o.action.rewrote for o in outcomes),
                   records_removed=t.records_removed, bytes_removed=t.bytes_removed,
                   segments_removed=sum(o.segments_removed for o in outcomes), files_purged=t.files_purged,
                   bytes_purged=t.bytes_purged, recovered_partitions=report.recovered_partitions or 0)

    def summary(self, *, layout: str = "auto", width: int | None = None) -> str:
        """The human summary ``segjobs compact`` prints: a row per partition (``layout``: ``auto`` switches to a
        row per topic beyond :data:`~jobs.engine.report.run_report.PARTITION_ROWS_MAX` partitions; ``partition``,
        ``topic``), totals, elapsed time; fitted to ``width`` columns when given (notes wrap, never cut)."""
        if not self.completed:
            return render_stopped_summary(self.report, width=width)
        return render_compact_summary(self.report, dry_run=self.dry_run, layout=layout, width=width)


@dataclass(frozen=True, kw_only=True)
class RetainResult(JobResult):
    """What :func:`retain` did (or, in a dry run, would do)."""

    partitions: tuple[RetainedPartition, ...]
    #: partitions that lost segments
    partitions_changed: int
    segments_deleted: int
    bytes_removed: int
    files_purged: int
    bytes_purged: int
    #: topics the delete-fraction limit left untouched
    refused_topics: tuple[str, ...]
    recovered_partitions: int

    @classmethod
    def of(cls, run: JobRun) -> "RetainResult":
        report = run.report
        outcomes = [o for o in report.outcomes if isinstance(o, RetentionOutcome)]
        parts = tuple(RetainedPartition.of(o, e) for o, e in zip(outcomes, report.partitions))
        t = RetainTotals.of(outcomes, report.errors, len(report.warnings))
        return cls(**cls._common(run), partitions=parts, partitions_changed=t.partitions_changed,
                   segments_deleted=t.segments_deleted, bytes_removed=t.bytes_removed, files_purged=t.files_purged,
                   bytes_purged=t.bytes_purged,
                   refused_topics=tuple(sorted({o.topic for o in outcomes if o.action is Action.REFUSED})),
                   recovered_partitions=report.recovered_partitions or 0)

    def summary(self, *, layout: str = "auto", width: int | None = None) -> str:
        """The human summary ``segjobs retain`` prints (``layout`` and ``width`` as for
        :meth:`CompactResult.summary`)."""
        if not self.completed:
            return render_stopped_summary(self.report, width=width)
        return render_retain_summary(self.report, dry_run=self.dry_run, layout=layout, width=width)


@dataclass(frozen=True, kw_only=True)
class InspectedPartition:
    """One row of :func:`inspect`: the typed row (``outcome``), whose every column is also in ``row``."""

    topic: str
    partition: int
    #: why the partition could not be read; None when it could (then the numbers below are set)
    error: str | None
    dirty_ratio: float | None
    compaction_selected: bool
    compaction_records_removed: int
    compaction_bytes_removed: int
    retention_bytes_deleted: int
    records: int | None
    distinct_keys: int | None
    row: dict[str, Any]
    #: the row as the run built it (every column, typed)
    outcome: InspectRow

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def of(cls, r: InspectRow) -> "InspectedPartition":
        """From the run's row (an unreadable partition's numbers are None)."""
        return cls(topic=r.topic, partition=r.partition, error=r.error, dirty_ratio=r.dirty_ratio,
                   compaction_selected=bool(r.compaction_selected),
                   compaction_records_removed=r.compaction_records_removed or 0,
                   compaction_bytes_removed=r.compaction_bytes_removed or 0,
                   retention_bytes_deleted=r.retention_bytes_deleted or 0, records=r.records,
                   distinct_keys=r.distinct_keys, row=r.to_entry(), outcome=r)


@dataclass(frozen=True, kw_only=True)
class InspectResult(JobResult):
    """What :func:`inspect` found: one row per partition, and what compaction and retention would reclaim."""

    partitions: tuple[InspectedPartition, ...]
    bytes: int
    records: int
    #: partitions a compaction at now would select
    compaction_selected: int
    #: bytes a compaction at now would remove from the selected partitions
    compaction_bytes_removed: int
    retention_bytes_deleted: int
    #: True: distinct keys counted and compaction measured exactly; False: estimates
    exact: bool

    @classmethod
    def of(cls, run: JobRun) -> "InspectResult":
        rows = run.report.inspected
        t = InspectTotals.of(rows, exact=bool(run.options.exact) if isinstance(run.options, InspectOptions) else False)
        return cls(**cls._common(run), partitions=tuple(InspectedPartition.of(r) for r in rows), bytes=t.bytes,
                   records=t.records, compaction_selected=t.compaction_selected,
                   compaction_bytes_removed=t.compaction_bytes_removed,
                   retention_bytes_deleted=t.retention_bytes_deleted, exact=t.exact)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts of every column (:data:`jobs.engine.inspect.driver.COLUMNS`)."""
        return [p.row for p in self.partitions]

    def summary(self, fmt: str = "table", *, layout: str = "auto", width: int | None = None) -> str:
        """What ``segjobs inspect --format FMT`` prints: ``table``, ``csv`` or ``json`` (``layout`` and ``width``:
        the table's, as for :meth:`CompactResult.summary`)."""
        return inspection.render(self.report, fmt, layout=layout, width=width)

    def to_dataframe(self, spark: Any):
        """The rows as a Spark DataFrame with the declared schema (one column per :data:`COLUMNS` entry)."""
        data = [tuple(r[name] for name in inspection.COLUMN_NAMES) for r in self.rows]
        return spark.createDataFrame(data, schema=inspection.spark_schema())


@dataclass(frozen=True, kw_only=True)
class RecoverResult:
    """What :func:`recover` did (or, in a dry run, would do)."""

    #: 0: recovered; 1: a partition could not be settled (``failed``), a leftover could not be deleted
    #: (``problems``), or the lease was lost
    exit_code: int
    log_dir: str
    now_ms: int
    now_from_wall_clock: bool
    dry_run: bool
    #: False when the run stopped before the end (its S3 lease was taken over): ``reports`` is then empty and
    #: the partitions before the stop are recovered; run recover again
    completed: bool
    #: one report per partition (in name order) and, when it changed anything, one for the log dir itself
    reports: tuple[RecoveryReport, ...]
    #: why the lease was lost, when it was (during the run, or found when releasing it)
    lease_lost: str | None

    @property
    def partitions(self) -> tuple[RecoveryReport, ...]:
        """The partitions' reports (without the log dir's own)."""
        return tuple(r for r in self.reports if r.partition_uri != self.log_dir)

    @property
    def tallies(self) -> tuple[RecoveryTally, ...]:
        """Per partition, what was completed or rolled back, summed; a partition's files in the work dir (its
        private staging, its staged uploads) counted as its own. Partitions where nothing was done are left out;
        the log dir's and work dir's own leftovers are the one tally whose ``partition`` is ``""``."""
        return tuple(tally_reports(self.reports, self.log_dir, work_uri(self.log_dir)))

    @property
    def partitions_recovered(self) -> int:
        """How many partitions recovery changed something for (what `segjobs recover` prints)."""
        return sum(1 for t in self.tallies if t.partition)

    @property
    def failed(self) -> tuple[RecoveryReport, ...]:
        """Partitions whose leftovers could not be settled safely: left as they were, and jobs leave them alone."""
        return tuple(r for r in self.reports if r.error is not None)

    @property
    def problems(self) -> tuple[str, ...]:
        """Leftovers that could not be deleted (harmless where they are; their partitions are recovered)."""
        return tuple(p for r in self.reports for p in r.problems)

    @property
    def actions(self) -> tuple[RecoveryAction, ...]:
        return tuple(a for r in self.reports for a in r.actions)

    @property
    def leftovers(self) -> tuple[RecoveryAction, ...]:
        """The actions that removed leftovers of interrupted runs (staged files, temporaries, uploads)."""
        return tuple(a for r in self.reports for a in r.leftovers)


# --------------------------------------------------------------------------------------------------
# The functions
# --------------------------------------------------------------------------------------------------


def _checked(options: OptionsT | None, kind: type[OptionsT], function: str) -> OptionsT:
    if options is None:
        return kind()
    if not isinstance(options, kind):
        raise UsageError(f"{function}() takes {kind.__name__}, not {type(options).__name__}")
    return options


def compact(log_dir: str | os.PathLike, options: CompactOptions | None = None, *, now: Instant | None = None,
            spark: Any = None, seams: Seams | None = None) -> CompactResult:
    """Compact the partitions of the log dir (a local path or s3:// URI) whose cleanup.policy includes compact,
    with Kafka's log-cleaner semantics; compact,delete topics get retention first. ``segjobs compact --help``
    says what it does in detail. Returns what was done; see the module docstring for ``now``, ``spark``,
    errors and ``seams``."""
    options = _checked(options, CompactOptions, "compact")
    log_dir = os.fspath(log_dir)
    options, now, applying = load_for_apply(options, "compact", log_dir, now, compaction.PLAN_OPTIONS)
    run = run_job("compact", log_dir, options, compaction.work, scan_depth=SELECTION_DEPTH, now=now, spark=spark,
                  seams=seams, applying=applying, spark_likely=may_read_in_full,
                  read_first=read_at_first_scan)
    return CompactResult.of(run)


def retain(log_dir: str | os.PathLike, options: RetainOptions | None = None, *, now: Instant | None = None,
           spark: Any = None, seams: Seams | None = None) -> RetainResult:
    """Apply Kafka's retention (log start offset, retention.bytes, retention.ms) to the log dir and delete the
    condemned segments crash-safely; ``segjobs retain --help`` says what it does in detail."""
    options = _checked(options, RetainOptions, "retain")
    log_dir = os.fspath(log_dir)
    options, now, applying = load_for_apply(options, "retain", log_dir, now, retention.PLAN_OPTIONS)
    run = run_job("retain", log_dir, options, retention.work, scan_depth="headers", now=now, spark=spark,
                  seams=seams, applying=applying)
    return RetainResult.of(run)


def inspect(log_dir: str | os.PathLike, options: InspectOptions | None = None, *, now: Instant | None = None,
            spark: Any = None, seams: Seams | None = None) -> InspectResult:
    """Report, per partition, how dirty the log dir is and what compaction and retention would reclaim at
    ``now``. Writes nothing and takes no lock: safe on a directory a broker owns."""
    options = _checked(options, InspectOptions, "inspect")
    run = run_job("inspect", os.fspath(log_dir), options, inspection.work, scan_depth="transactions", now=now,
                  spark=spark, seams=seams, destructive=False)
    return InspectResult.of(run)


def recover(log_dir: str | os.PathLike, options: RecoverOptions | None = None, *, now: Instant | None = None,
            seams: Seams | None = None) -> RecoverResult:
    """Complete or roll back what interrupted runs left in the log dir, under its lock (every job does this at
    its start). ``now`` is the instant recorded for ``.deleted`` files the deletion ledger does not know yet.
    With ``dry_run`` no lock is taken and nothing changes: the reports list what a real run would do."""
    options = _checked(options, RecoverOptions, "recover")
    seams = seams or PRODUCTION
    progress = Progress("recover", quiet=options.progress is None, sink=options.progress)
    now_ms, now_note = resolve_now(now, seams.clock)
    log_dir = os.fspath(log_dir).rstrip("/") or "/"
    storage = open_log_dir(log_dir, options.storage_options())  # S3 answers (within seconds), or exit code 2
    # an empty log dir is fine (nothing to recover); a partition directory given as one is a mistake
    check_log_dir_has_partitions(log_dir, list_log_dir_top(storage, log_dir), scoped=False, required=False)

    def result(reports: Sequence[RecoveryReport], lost: str | None, completed: bool = True) -> RecoverResult:
        failed = any(r.error is not None or r.problems for r in reports)
        return RecoverResult(exit_code=1 if failed or lost else 0, log_dir=log_dir, now_ms=now_ms,
                             now_from_wall_clock=now_note is not None, dry_run=options.dry_run, completed=completed,
                             reports=tuple(reports), lease_lost=lost)

    if options.dry_run:
        return result(recover_under(storage, log_dir, now_ms, None, seams, dry_run=True), None)
    check_log_dir_writable(storage, log_dir, "recover")  # a read-only log dir: exit code 2, nothing done
    if now_note:
        progress.notice(now_note, event="run.now", now_ms=now_ms)
    reports = None
    try:
        with hold_log_dir(storage, log_dir, seams, ttl_ms=lease_ttl_ms(options.lease_ttl),
                          break_run_id=options.break_lease) as lease:
            if lease.notice:
                progress.notice(lease.notice, event="lease.notice")
            reports = recover_under(storage, log_dir, now_ms, lease, seams)
    except LeaseLost as exc:
        # Each partition's recovery is complete or not begun; the next recovery does the rest.
        return result((), str(exc), completed=False)
    except LockHeldError as exc:
        if reports is None:
            raise  # refused: nothing was done
        return result(reports, str(exc))  # taken over after the work was done, found at the release
    return result(reports, None)


# --------------------------------------------------------------------------------------------------
# Notebooks
# --------------------------------------------------------------------------------------------------


def inspect_report(uri: str | os.PathLike, *, topics: str | Sequence[str] | None = None, now: Instant | None = None,
                   exact: bool = False, config: str | os.PathLike | None = None, overrides: Sequence[str] = (),
                   master: str | None = None) -> RunReport:
    """:func:`inspect` with keyword arguments, returning the report: one entry per partition in
    ``report.partitions`` (the :data:`~jobs.engine.inspect.driver.COLUMNS`), unreadable partitions with ``error``
    set and listed in ``report.errors``. Runs in the active Spark session (one is created when none is)."""
    options = InspectOptions(topics=topics or (), exact=exact, config=config, overrides=overrides, master=master)
    return inspect(uri, options, now=now).report


def dirty_ratios(spark: Any, uri: str | os.PathLike, *, topics: str | Sequence[str] | None = None,
                 now: Instant | None = None, exact: bool = False, config: str | os.PathLike | None = None,
                 overrides: Sequence[str] = ()):
    """One row per partition of the log dir at ``uri``, as a Spark DataFrame of
    :data:`~jobs.engine.inspect.driver.COLUMNS`: what ``segjobs inspect`` reports, for notebooks. An unreadable
    partition is a row with ``error`` set and no numbers."""
    options = InspectOptions(topics=topics or (), exact=exact, config=config, overrides=overrides)
    return inspect(uri, options, now=now, spark=spark).to_dataframe(spark)


__all__ = [
    # functions
    "compact", "retain", "inspect", "recover", "dirty_ratios", "inspect_report",
    # options
    "RunOptions", "LockingOptions", "JobOptions", "ChangeOptions", "CompactOptions", "RetainOptions",
    "InspectOptions", "RecoverOptions", "ProgressSink", "DEFAULT_DEDUPE_BUFFER_BYTES", "STRATEGIES",
    "InvalidOption", "InvalidOptionConfig", "InvalidOptionUsage",
    # results
    "JobResult", "PartitionResult", "CompactResult", "CompactedPartition", "RetainResult", "RetainedPartition",
    "InspectResult", "InspectedPartition", "RecoverResult", "RecoveryReport", "RecoveryAction",
    # test seams
    "Seams", "InProcessTasks", "SparkTasks",
]


# --------------------------------------------------------------------------------------------------
# Compacted topics as Delta tables
# --------------------------------------------------------------------------------------------------

from jobs.engine.table.driver import TableOptions, TablePartition, TableResult, run_table  # noqa: E402 - appended section


def table(log_dir: str | os.PathLike, options: TableOptions, *, spark: Any = None,
          seams: Seams | None = None) -> TableResult:
    """Keep the Delta table ``options.table`` equal to the latest value per key of ``options.topic`` in the log
    dir (local path or s3:// URI), applying only what was written since the last run, exactly once (``segjobs
    table --help`` and docs/guide/table.md say how). Reads the log dir only: no lock, nothing written to it.
    ``spark``: the session whose executors read the partitions (None: the active session, else this process);
    with Delta Lake in it the table is written by its MERGE, else by ``deltalake``. Returns per partition what
    was inserted, updated and deleted (a dry run: what would be); ``exit_code`` 1 when some partition failed."""
    options = _checked(options, TableOptions, "table")
    if spark is None and (seams is None or seams.runner is None):
        spark = _active_spark()
    return run_table(os.fspath(log_dir), options, spark=spark, seams=seams)


def _active_spark() -> Any:
    """The running Spark session of this process, None when there is none (never starts one)."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:
        return None
    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


__all__ += ["table", "TableOptions", "TableResult", "TablePartition"]


# --------------------------------------------------------------------------------------------------
# Tiered storage
# --------------------------------------------------------------------------------------------------


def tiered_audit(log_dir: str | os.PathLike, remote: str | os.PathLike, *, layout: str = "local-tiered-storage",
                 metadata_dir: str | os.PathLike | None = None, topic_ids: dict[str, str] | None = None,
                 config: str | os.PathLike | None = None, overrides: Sequence[str] = (), now: Instant | None = None,
                 grace_ms: int = 0, storage_options: StorageOptions | None = None,
                 progress: ProgressSink | None = None) -> TieredAudit:
    """Audit tiered storage: ``log_dir``'s ``__remote_log_metadata`` replayed, its partitions and the remote store
    ``remote`` (in ``layout``) read together; per partition, gaps, missing objects, orphans and overdue segments
    (see :mod:`jobs.engine.tiered.audit`). ``topic_ids`` maps topic ids to names for topics ``log_dir`` has no
    partition of; ``config``/``overrides`` give each topic's retention; ``storage_options`` reach ``s3://`` URIs
    (None: from the environment); ``progress`` gets the run's progress lines (None: none). Reads only. The
    result's ``exit_code`` is 1 when records cannot be read (a gap or a missing object)."""
    # imported here: the other commands' start-up (and their fail-fast checks) does not pay for it
    from jobs.engine.tiered.audit import run_audit

    return run_audit(_audit_options(log_dir, remote, layout, metadata_dir, topic_ids, config, overrides, now,
                                    grace_ms, storage_options), progress=progress)


def tiered_clean_orphans(log_dir: str | os.PathLike, remote: str | os.PathLike, *,
                         layout: str = "local-tiered-storage", metadata_dir: str | os.PathLike | None = None,
                         topic_ids: dict[str, str] | None = None, config: str | os.PathLike | None = None,
                         overrides: Sequence[str] = (), now: Instant | None = None, min_age_ms: int | None = None,
                         max_delete_fraction: float | None = None, dry_run: bool = False,
                         plan: str | os.PathLike | None = None, apply: str | os.PathLike | None = None,
                         storage_options: StorageOptions | None = None) -> "CleanResult":
    """Delete the objects of the orphan segments :func:`tiered_audit` finds, as ``segjobs tiered clean-orphans``
    does (see :mod:`jobs.rules.tiered_clean` for the rules: never a finished segment, only what is older than the
    metadata by ``min_age_ms`` (None: one hour), a per-topic mass-delete guard of ``max_delete_fraction`` (None:
    each topic's ``segjobs.max.delete.fraction``), under the log dir's lock). ``dry_run`` deletes nothing and, with
    ``plan``, writes the plan file; ``apply`` carries out a plan file exactly, or nothing. Raises
    :class:`~segment_io.errors.LockHeldError` when a broker or a run holds the log dir. The result's ``exit_code``
    is 1 when a topic was refused, an object left or the lease lost."""
    from jobs.engine.tiered.clean import DEFAULT_MIN_AGE_MS, CleanOptions, run_clean

    audit = _audit_options(log_dir, remote, layout, metadata_dir, topic_ids, config, overrides, now, 0,
                           storage_options)
    return run_clean(CleanOptions(audit, min_age_ms=DEFAULT_MIN_AGE_MS if min_age_ms is None else min_age_ms,
                                  max_delete_fraction=max_delete_fraction, dry_run=dry_run,
                                  plan_uri=None if plan is None else os.fspath(plan),
                                  apply_uri=None if apply is None else os.fspath(apply)))


def _audit_options(log_dir: str | os.PathLike, remote: str | os.PathLike, layout: str,
                   metadata_dir: str | os.PathLike | None, topic_ids: dict[str, str] | None,
                   config: str | os.PathLike | None, overrides: Sequence[str], now: Instant | None, grace_ms: int,
                   storage_options: StorageOptions | None) -> "TieredAuditOptions":
    from jobs.engine.tiered.audit import TieredAuditOptions

    configs = (ConfigSet.load(os.fspath(config), overrides=list(overrides)) if config is not None
               else ConfigSet().with_overrides(list(overrides)))
    return TieredAuditOptions(os.fspath(log_dir), os.fspath(remote), layout=layout,
                              metadata_dir=None if metadata_dir is None else os.fspath(metadata_dir),
                              topic_ids=dict(topic_ids or {}), configs=configs, now_ms=parse_instant(now),
                              grace_ms=grace_ms, storage_options=storage_options)


__all__ += ["tiered_audit", "tiered_clean_orphans"]
