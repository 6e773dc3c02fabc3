"""The frame every job runs in: preflight → locked (lock → recover → list → scan → job work) → deliver.

A job (compact, retain, inspect) gives :func:`run_job` its typed options (:mod:`jobs.engine.frame.options`) and a
work function; the run is one :class:`JobContext`, whose methods are the frame's steps and which the work function
receives (storage, committer, configs, scope, listing, scans, task runner, report): it fills
``report.partitions`` and ``report.totals``. Everything that can be checked without
Spark (configuration, ``now``, scope syntax, the log dir's existence, that S3 answers and that the report and
ledger destinations can be written) is checked before Spark starts, so a typo costs a second, not a session
start, and a report that could not be written is known before any work. Spark itself starts only when a task
first needs it (:class:`jobs.engine.runtime.tasks.LazySparkTasks`): the header and size scans run on the driver's
threads, so a compaction or retention run that finds nothing due reports, writes its ledger and exits without a JVM.

The frame prints nothing on stdout: it returns the finished report (:class:`JobRun`), and the command prints
the summary or the JSON. Progress and errors go to the options' progress sink (stderr by default).
"""

from __future__ import annotations

import functools
import os
import traceback
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ContextManager, Sequence, TypeVar

from jobs.engine.frame.options import ChangeOptions, JobOptions, LockingOptions
from jobs.engine.frame.packed_tasks import StageProgress, failed_scan, log_bytes, read_cost, run_packed
from jobs.engine.frame.planfile import Plan, PlanStage, config_origins, describe_plan, fingerprint
from jobs.engine.report.outcomes import ledger_rows
from jobs.engine.report.recovery import recovered_text
from jobs.engine.report.run_report import (
    Progress,
    RunReport,
    absolute_uri,
    append_ledger,
    write_report,
)
from jobs.engine.report.store_usage import StoreUsage
from jobs.engine.runtime import spark_session
from jobs.engine.runtime.collector import frozen_heap
from jobs.engine.runtime.kernels import COLD_NOTICE, kernels_cold
from jobs.engine.runtime.seams import PRODUCTION, Seams
from jobs.engine.runtime.tasks import (
    DRIVER_SCAN_THREADS,
    DriverTasks,
    LazySparkTasks,
    TaskRunner,
    driver_scan_threads,
    local_parallelism,
    map_in_driver,
    small_run_on_driver,
)
from jobs.engine.scan import PartitionError, PartitionScan, ReportError, ScanItem
from jobs.logdir.checkpoints import read_job_checkpoints
from jobs.logdir.checks import (
    check_log_dir_has_partitions,
    check_log_dir_is_dir,
    check_log_dir_writable,
    probe_new_file,
    rejected_partition_dirs,
)
from jobs.logdir.commit import Committer, committer_for, partition_name
from jobs.logdir.lock import Holder, Lease, LeaseLost, acquire, lease_ttl_ms, work_uri, writer_at_work
from jobs.logdir.recover import RecoveryReport, fence_of, fence_to_take_over, recover_log_dir, tally_reports
from jobs.logdir.tiered import tiered_listing
from jobs.rules.config import ConfigSet
from jobs.rules.scope import Scope, parse_scope
from jobs.rules.timeutil import Instant, format_instant, resolve_now
from segment_io import compression
from segment_io.errors import (
    ConfigError,
    LockHeldError,
    SegjobsError,
    StorageError,
)
from segment_io.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    DELETED_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    SWAP_SUFFIX,
    LogDirListing,
    PartitionListing,
    list_log_dir,
    list_log_dir_top,
    listing_from_files,
    parse_partition_dir,
)
from segment_io.storage import open_storage
from segment_io.storage.base import FileInfo, Storage, map_ahead
from segment_io.storage.local import storage_error, temp_name
from segment_io.storage.options import StorageOptions
from segment_io.storage.spool import HostSpool
from segment_io.storage.traffic import StoreTraffic, metered

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class JobSpec:
    """What a job (compact, retain, inspect) brings to the frame: its command, its work, how deep the frame scans
    its partitions, whether it writes, and its two forecasts (see :func:`run_job`)."""

    command: str
    #: the job's work: fills ``ctx.report.partitions`` and ``ctx.report.totals``
    work: Callable[["JobContext"], None]
    #: the depth of the frame's scan (:class:`jobs.engine.scan.ScanItem`): headers, sizes or transactions
    scan_depth: str
    #: the job may change the log dir (takes the lock and recovers first unless a dry run); False: inspect
    destructive: bool = True
    spark_likely: "SparkForecast | None" = None
    read_first: "FirstReads | None" = None


@dataclass
class JobContext:
    """One job's run: its typed options, everything the frame derives from them, and the frame's steps.

    :func:`run_job` takes the steps in order: :meth:`preflight` (everything that needs no Spark and no lock),
    :meth:`locked` (under the log dir's lock: :meth:`lock`, :meth:`recover`, :meth:`list_partitions`,
    :meth:`scan`, then the job's work, which gets this object) and :meth:`deliver` (the report and the ledger).
    A job's work reads the fields and calls the helpers (:meth:`parallel_map`, :meth:`keep_lease`,
    :meth:`write_plan`)."""

    job: JobSpec
    options: JobOptions
    storage: Storage
    log_dir: str
    work_uri: str
    configs: ConfigSet
    scope: Scope
    now_ms: int
    #: True when ``now`` was not given and the wall clock (``seams.clock``) chose it
    now_from_clock: bool
    dry_run: bool
    #: the log dir's partitions: before the lock its top level only (the names the scope is checked against);
    #: from :meth:`list_partitions` on, every file, listed under the lock after recovery
    listing: LogDirListing
    #: the offset checkpoint files, by file name, read with :attr:`listing`
    checkpoints: dict[str, dict[tuple[str, int], int]]
    report: RunReport
    progress: Progress
    seams: Seams
    #: the plan file being applied, or the decisions collected for one
    planfile: PlanStage
    #: the run's decompression bound (see :func:`segment_io.compression.max_batch_bytes`): every task that
    #: decodes gets it as a parameter
    max_batch_bytes: int
    #: where :meth:`deliver` writes the report and appends the ledger rows (None: not asked for)
    report_uri: str | None
    ledger_uri: str | None
    storage_options: StorageOptions
    #: S3: how long the lease :meth:`lock` takes lasts without renewal
    lease_ttl_ms: int
    #: the session to run tasks in (None: the active one, else a new one), and the one started ahead of need
    spark: Any = None
    early: "spark_session.EarlySession | None" = None
    #: a small run: its tasks run on the driver, no JVM is started (see :func:`small_run_on_driver`)
    on_driver: bool = False
    #: the driver's threads that read whole logs' batch headers (compaction's transaction scans) while the Spark it
    #: started early on this host comes up, for a log dir on local disk; 0: those reads are Spark tasks (see
    #: :func:`jobs.engine.compact.selection.scan_candidates`)
    driver_read_threads: int = 0
    #: filled by :meth:`scan`
    scans: dict[tuple[str, int], PartitionScan] = field(default_factory=dict)
    lease: "Lease | None" = None  #: while the job holds the log dir (None in dry runs and for inspect)
    #: inspect --remote: the tiered partitions whose remote segments cannot be read, with why (see :meth:`scan`)
    tiered_errors: dict[tuple[str, int], Exception] = field(default_factory=dict)
    #: runs the per-partition tasks (Spark, or in this process for tests); Spark starts when a task first needs it
    runner: TaskRunner = field(init=False)

    def __post_init__(self) -> None:
        self.runner = self._task_runner()

    # ---- what a job's work uses ----

    @functools.cached_property
    def host_spool(self) -> HostSpool | None:
        """On an object store, where the scans that read a partition in full keep what they fetch, for its
        cleaning task on the same host (see :class:`~segment_io.storage.spool.HostSpool`); None on local disk,
        whose page cache keeps it."""
        return HostSpool.for_store(self.report.run_id, self.storage, self.log_dir)

    @functools.cached_property
    def committer(self) -> Committer:
        """The store's commit protocol for this log dir (see :func:`jobs.logdir.commit.committer_for`)."""
        return committer_for(self.storage, self.work_uri, self.report.run_id, log_dir=self.log_dir)

    def keep_lease(self) -> None:
        """Jobs call this before each commit. Raises :class:`jobs.logdir.lock.LeaseLost` once the run's S3 lease
        is no longer its own (another run took it over after it expired, or it could not be renewed in time),
        so the run commits nothing more; the frame reports it. A heartbeat renews the lease in the background;
        this renews it here only if that fell behind. Local locks do not expire. A lease is timed on the wall
        clock (``seams.clock``), never on ``now``: ``now`` is the instant the job's decisions are made at, often
        in the past, while a lease guards the real time the job runs."""
        if self.lease is not None:
            self.lease.check(self.seams.clock())

    def parallel_map(self, fn: Callable[[T], R], items: Sequence[T], *, tasks: int | None = None,
                     description: str | None = None) -> list[R]:
        """Run ``fn`` over ``items`` as tasks (one task per item, or ``tasks`` tasks each taking a contiguous
        share of the items) and collect the results in order. ``fn`` and the items must pickle; results must
        be small (statistics, never record data). ``description`` (``scan 8 partition(s)``) names the Spark
        job in the UI as ``segjobs <command>: <description>`` (default: the function and the item count)."""
        what = description or f"{getattr(fn, '__name__', 'tasks')} over {len(items)} item(s)"
        return self.runner.map(fn, items, tasks=tasks, description=self.job_description(what))

    def job_description(self, what: str) -> str:
        """How a Spark job of this run is named in the UI: ``segjobs <command>: <what>``."""
        return f"segjobs {self.report.command}: {what}"

    def fault_for(self, partition: str) -> Callable[[str], None] | None:
        """The fault hook of the commit steps of ``partition`` (``""``: the log dir as a whole); None in use."""
        return self.seams.fault_for(partition)

    def write_plan(self, command: str, options: dict[str, Any]) -> None:
        """With ``--plan FILE`` (a dry run): write this run's plan (``options``: the command's options a plan
        records), with the decisions its work collected in :attr:`planfile`."""
        if not self.planfile.write_uri:
            return
        assert isinstance(self.options, JobOptions)  # only compact and retain take --plan
        topics = sorted({t for t, _ in self.scans})
        plan = Plan(command=command, log_dir=self.log_dir, now_ms=self.now_ms,
                    scope={"topics": list(self.options.topics), "partitions": list(self.options.partitions)},
                    options=options, configs={t: self.configs.for_topic(t).to_settings() for t in topics},
                    config_origins=config_origins(self.configs, topics),
                    fingerprint=fingerprint(command, self.listing, self.scans, self.configs, self.checkpoints),
                    decisions={}, run_id=self.report.run_id, made_ms=self.seams.clock())
        self.planfile.write(plan, self.options.storage_options(), self.progress)

    # ---- the steps ----

    @classmethod
    def preflight(cls, job: JobSpec, log_dir: str, options: JobOptions, *, now: Instant | None, seams: Seams,
                  applying: Plan | None, spark: Any) -> "JobContext":
        """Everything that needs no Spark and no lock, first: the configs, ``now``, the scope, the store and the
        run's destinations (:func:`open_log_dir`), and against the log dir's top level the scope, the topics'
        configs and the checkpoint files; Spark started ahead of need when the run will want it. Raises (exit code
        2) when something is wrong: nothing has been done yet."""
        configs = options.load_configs()
        now_ms, now_note = resolve_now(now, seams.clock)
        scope = parse_scope(list(options.topics), list(options.partitions))
        locking = options if isinstance(options, LockingOptions) else None
        dry_run = bool(locking and locking.dry_run)
        log_dir = absolute_uri(log_dir.rstrip("/") if log_dir not in ("/",) else log_dir)
        storage_options = options.storage_options()
        report_uri = absolute_uri(options.report) if options.report else None
        ledger_uri = absolute_uri(options.ledger) if options.ledger else None
        # max_batch_bytes, else $SEGJOBS_MAX_BATCH_BYTES: a malformed one is exit 2 here
        max_batch = compression.max_batch_bytes(options.max_batch_bytes)
        html_uri = getattr(options, "html", None)
        plan_uri = getattr(options, "plan", None)
        progress = Progress(job.command, quiet=options.progress is None, sink=options.progress)
        storage = open_log_dir(log_dir, storage_options, report_uri=report_uri, ledger_uri=ledger_uri,
                               html_uri=absolute_uri(html_uri) if html_uri else None,
                               plan_uri=absolute_uri(plan_uri) if plan_uri else None, progress=progress)
        if job.destructive and not dry_run:  # a read-only log dir is exit code 2 here, not a failure of every partition
            check_log_dir_writable(storage, log_dir, job.command)
        report = RunReport(command=job.command, log_dir=log_dir, now_ms=now_ms, dry_run=dry_run)
        # The scope, the topics' configs and the checkpoint files are checked against a first listing before the
        # lock and recovery: exit code 2 promises that nothing was done. Recovery does not add or remove partitions.
        # These checks need only the names at the log dir's top level: a listing of that level, not of every file
        # (on S3 a page per thousand partitions rather than per thousand files).
        listing = _check_scope(storage, log_dir, scope, configs, list_log_dir_top(storage, log_dir))
        for note in configs.check_entries({t for t, _ in listing.partitions}, log_dir):
            report.warnings.append(note)
            progress.notice(f"warning: {note}", event="config.unmatched")
        checkpoints = read_job_checkpoints(storage, log_dir, listing)
        early = None
        # a small local run from the command line starts no JVM: its tasks run on the driver (tasks.DriverTasks)
        on_driver = spark is None and seams.runner is None and small_run_on_driver(storage, listing, scope,
                                                                                     options.master)
        if spark is None and seams.runner is None and not on_driver:
            early = _early_session(job, options, storage, log_dir, listing, checkpoints, configs, scope)
        ttl_ms = lease_ttl_ms(locking.lease_ttl if locking is not None else None)
        change = options if isinstance(options, ChangeOptions) else None
        planfile = PlanStage(applying=applying, apply_uri=change.apply if change else None,
                             write_uri=change.plan if change else None)
        ctx = cls(job=job, options=options, storage=storage, log_dir=log_dir, work_uri=work_uri(log_dir),
                  configs=configs, scope=scope, now_ms=now_ms, now_from_clock=now_note is not None, dry_run=dry_run,
                  listing=listing, checkpoints=checkpoints, report=report, progress=progress, seams=seams,
                  planfile=planfile, max_batch_bytes=max_batch, report_uri=report_uri, ledger_uri=ledger_uri,
                  storage_options=storage_options, lease_ttl_ms=ttl_ms, spark=spark, early=early, on_driver=on_driver,
                  driver_read_threads=_driver_read_threads(early, storage, log_dir, options.master))
        ctx._announce(now_note)
        return ctx

    def _announce(self, now_note: str | None) -> None:
        """The run's first lines: the instant chosen, the log dir, a cold start's compiling, the plan applied."""
        progress = self.progress
        if now_note:  # even when quiet: it is what repeating this run's decisions takes
            progress.notice(now_note, event="run.now", now_ms=self.now_ms)
        progress(f"log dir {self.log_dir}, now {format_instant(self.now_ms)} ({self.now_ms})"
                 + (" [dry run]" if self.dry_run else ""), event="run.start", log_dir=self.log_dir,
                 now_ms=self.now_ms, dry_run=self.dry_run, run_id=self.report.run_id)
        if kernels_cold():  # a first run's minute of compiling, announced as what it is
            progress(COLD_NOTICE, event="kernels.compiling")
        applying, uri = self.planfile.applying, self.planfile.apply_uri
        if applying is not None and uri:  # even when quiet: what this run is about to do
            progress.notice(describe_plan(applying, uri), event="plan.applying", uri=uri)

    def locked(self) -> bool:
        """Under the log dir's lock (a run that writes): :meth:`lock`, :meth:`recover`, :meth:`list_partitions`,
        :meth:`scan`, the job's work, then this run's staging leftovers. What stops the run (a lost lease, an
        error no partition's handling caught) goes into the report, what was committed before standing; Ctrl-C is
        :class:`RunInterrupted`. Returns whether the work returned (False: it stopped early)."""
        completed = False
        report, progress = self.report, self.progress
        try:
            with ExitStack() as stack:
                if self.early is not None:  # a run that needed no Spark after all does not wait for it
                    stack.callback(self.early.abandon)
                if self.job.destructive and not self.dry_run:
                    self.lock(stack)
                recovered = self.recover()
                self.scan(self.list_partitions(recovered), recovered.unrecovered)
                with frozen_heap():  # the modules and the session are loaded by now (see jobs.engine.runtime.collector)
                    self.job.work(self)
                completed = True
                if self.lease is not None:  # under the lock still: what late task attempts staged, then the
                    # directories this run's staging left empty go
                    self.committer.sweep_own_staging(pl.uri for pl in self.listing.partitions.values())
                    self.committer.remove_empty_dirs(pl.uri for pl in self.listing.partitions.values())
        except LeaseLost as exc:
            # Raised before a commit: nothing more was committed after the lease was lost. What was committed
            # before stands (each commit is crash-safe on its own); the next run's recovery settles the rest.
            report.errors.append({"kind": "LeaseLost", "detail": f"{exc}; the run stopped before its next commit"})
            progress.error(f"LOST THE LEASE, stopped before the next commit: {exc}", event="lease.lost")
        except KeyboardInterrupt:
            # Ctrl-C: each partition's commit is complete or not begun (the commits run to their end on their own
            # thread; the lock is released by now). Say what stands; the rest is the next run's.
            raise RunInterrupted(interrupted_message(report, writes=self.job.destructive and not self.dry_run,
                                                     lock_taken=self.lease is not None)) from None
        except LockHeldError as exc:
            if self.lease is None or report.finished_ms is not None:
                raise  # could not take the lock: nothing was done
            # The lease was lost while working (another run took it over after it expired): what this run
            # committed stands, but the user must know another run may have worked at the same time.
            report.errors.append({"kind": "LockHeldError", "detail": str(exc)})
            progress.error(f"LOST THE LEASE: {exc}", event="lease.lost")
        except Exception as exc:
            if isinstance(exc, SegjobsError) and exc.exit_code == 2:
                raise  # nothing was done: the command says so (exit code 2)
            # Something no partition's handling caught stopped the run (its Spark tasks are cancelled, not awaited):
            # what was committed before stands and is reported, the next run's recovery settles the partition that
            # was being committed, and the run ends now with its report and exit code 1.
            report.errors.append(_stopped_error(exc))
            progress.error(f"STOPPED: {report.errors[-1]['detail']}", event="run.stopped")
        return completed

    def lock(self, stack: ExitStack) -> None:
        """Take the log dir's lock or S3 lease (:func:`hold_log_dir`) for as long as ``stack`` is open."""
        # The holder's run id is the report's: a refusal names the run the reports and ledger know.
        self.lease = stack.enter_context(hold_log_dir(self.storage, self.log_dir, self.seams, ttl_ms=self.lease_ttl_ms,
                                                      run_id=self.report.run_id))
        if self.lease.notice:
            self.report.warnings.append(self.lease.notice)
            self.progress(self.lease.notice, event="lease.notice")

    def recover(self) -> "_Recovered":
        """A run that writes: the log dir's recovery, under the lock. A dry run, and inspect: the account of the
        recovery a run that writes does first (:meth:`_recovery_first`), so that they plan on the files it leaves,
        as that run does (an unfinished swap's segment counted once, where recovery puts it)."""
        recovered = _Recovered()
        if self.job.destructive and not self.dry_run:
            recovered.listed = self._recover_log_dir(recovered.unrecovered)
        else:
            self._say_writer_at_work()
            dry_listed = self._recovery_first(recovered)
            if self.storage.local_path(self.log_dir) is None:
                recovered.listed = dry_listed  # nothing has changed it (on local disk listed again, as a real run)
        return recovered

    def _say_writer_at_work(self) -> None:
        """A run that takes no lock warns when somebody holds it: a job or a broker may be writing as it reads."""
        who = writer_at_work(self.storage, self.log_dir, self.seams.clock())
        if who:
            warning = (f"{who}: it may be writing as this run reads, so what this run reads may be caught "
                       f"mid-write (sizes, records, dirty ratios)")
            self.report.warnings.append(warning)
            self.progress.notice(f"warning: {warning}", event="lock.held")

    def _recover_log_dir(self, unrecovered: dict[tuple[str, int] | None, Exception]) -> list[FileInfo] | None:
        """Recovery of the log dir under the lock; what it could not settle into ``unrecovered``. Returns the log
        dir as recovery found it when nothing changed it since (None: to be listed again)."""
        storage, log_dir, report, progress = self.storage, self.log_dir, self.report, self.progress
        listed: list[FileInfo] | None = storage.list(log_dir, recursive=True, irregular=True)
        reports = recover_under(storage, log_dir, self.now_ms, self.lease, self.seams, listed=listed)
        if any(r.actions for r in reports) or storage.local_path(log_dir) is not None:
            listed = None  # changed (or on local disk, where recovery also tidies directories): listed again
        for r in reports:
            for problem in r.problems:  # harmless where it is: the partition is worked on all the same
                report.warnings.append(problem)
                progress.notice(problem, event="recovery.leftover")
            for note in r.notes:
                progress(note, event="recovery.kept")
            for warning in r.warnings:
                report.warnings.append(warning)
                progress.notice(f"warning: {warning}", event="recovery.foreign",
                                partition=partition_name(r.partition_uri))
            if r.error is not None:
                unrecovered[parse_partition_dir(partition_name(r.partition_uri))] = r.error
                progress.error(f"{r.partition_uri}: NOT RECOVERED, left as it is and not touched by this run: "
                               f"{r.error}", event="recovery.failed", partition=partition_name(r.partition_uri))
        # what a crashed run left, per partition (its private staging too), summed: one line
        tallies = tally_reports(reports, log_dir, self.work_uri)
        report.recovered_partitions = sum(1 for t in tallies if t.partition)
        if tallies:
            progress(f"recovered {recovered_text(tallies)}", event="recovery.done",
                     partitions=report.recovered_partitions, actions=sum(len(r.actions) for r in reports))
        return listed

    def list_partitions(self, recovered: "_Recovered") -> list[tuple[str, int]]:
        """The log dir listed under the lock (unless recovery's listing still holds) with its checkpoint files, a
        dry run's partitions as its real run's recovery leaves them; ``--apply`` refused on a changed log dir.
        Returns the partitions the run works on, in order."""
        storage, log_dir = self.storage, self.log_dir
        # again, unless recovery changed nothing since it listed: S3 lists a thousand keys a request
        listing = _check_scope(storage, log_dir, self.scope, self.configs,
                               None if recovered.listed is None else listing_from_files(log_dir, recovered.listed))
        # a dry run: these partitions as the real run's recovery leaves them
        for key, files in recovered.foreseen.items():
            if key in listing.partitions:
                after = _listing_after(listing.root, key, files)
                if after is not None:
                    listing.partitions[key] = replace(after,
                                                      outside_log_dir=listing.partitions[key].outside_log_dir)
        remote = getattr(self.options, "remote", None)  # inspect --remote: tiered partitions read as one log
        tiered = (tiered_listing(storage, listing, remote, self.options.storage_options(),
                                 [k for k in listing.partitions if self.scope.includes(*k)]) if remote else None)
        if tiered is not None:  # its remote segments are read through the store that serves them too
            listing, self.storage = tiered.listing, tiered.storage
        self.tiered_errors = dict(tiered.errors) if tiered is not None else {}
        self.listing = listing
        for name, error in rejected_partition_dirs(listing, self.scope.includes):  # never read nor written
            self.report.errors.append({"partition": name, **PartitionError.from_exception(error).to_dict()})
            self.progress.error(f"{name}: NOT A PARTITION, left untouched: {error.detail}",
                                event="partition.rejected", partition=name)
        if not listing.partitions:  # a broker's log dir holding none (_check_scope lets only such a dir through)
            self.progress.notice(f"{log_dir} holds no partition directory (its broker files say it is a log dir): "
                                 f"nothing to do", event="logdir.empty")
        self.checkpoints = read_job_checkpoints(storage, log_dir, listing)
        selected = sorted(k for k in listing.partitions if self.scope.includes(*k) and k not in recovered.pending)
        # --apply on a changed log dir: refused here, before Spark starts (nothing has been done yet)
        self.planfile.check_unchanged(storage, log_dir, listing, selected, self.configs, self.checkpoints)
        for topic in sorted({t for t, _ in selected}):
            for note in self.configs.shadowed(topic):
                self.progress(note, event="config.shadowed", topic=topic)
            self.report.topics[topic] = {"policy": self.configs.for_topic(topic).policy_text,
                                         "policy_from": self.configs.origin_of(topic)}
        return selected

    def scan(self, selected: list[tuple[str, int]], unrecovered: dict[tuple[str, int] | None, Exception]) -> None:
        """Scan the ``selected`` partitions at the job's depth into :attr:`scans` (one that recovery could not
        settle marked unreadable: nobody touches it), and warn about orphan log start offset entries."""
        report, progress, scan_depth = self.report, self.progress, self.job.scan_depth
        # Header and size scans take milliseconds a partition: they run on the driver's threads, and Spark
        # starts only when a task needs it (a run with nothing due starts none). A test's runner runs them all.
        in_driver = self.seams.runner is None and scan_depth in DRIVER_SCAN_DEPTHS
        where = ("tasks run in this process" if self.seams.runner is not None
                 else "on the driver" if in_driver or self.on_driver else "as Spark tasks")
        progress(f"scanning {len(selected)} partition(s) ({where})", event="scan.start", partitions=len(selected),
                 spark_startup_s=report.spark_startup_s)
        full: set[tuple[str, int]] = set()
        if self.job.read_first is not None and scan_depth == "sizes":
            full = self.job.read_first(self.listing, self.checkpoints, self.configs, self.scope) & set(selected)
        start = self.checkpoints[LOG_START_OFFSET_CHECKPOINT]
        cleaner = self.checkpoints[CLEANER_OFFSET_CHECKPOINT]
        # a partition read in full here keeps its copies on the driver's host: a local[N] run cleans it there
        items = [ScanItem(self.storage, self.listing.partitions[k], "transactions" if k in full else scan_depth,
                          start.get(k), cleaner.get(k), self.now_ms,
                          self.configs.for_topic(k[0]).producer_id_expiration_ms, self.max_batch_bytes,
                          self.host_spool if k in full else None)
                 for k in selected]
        for scan in self._run_scans(items, in_driver=in_driver):
            error = unrecovered.get((scan.topic, scan.partition))
            if error is not None:  # an interrupted commit recovery could not settle: nobody touches the partition
                scan.error, scan.state, scan.txn = PartitionError.from_exception(error), None, None
            elif (scan.topic, scan.partition) in self.tiered_errors:  # its remote segments cannot be read
                failed = self.tiered_errors[(scan.topic, scan.partition)]
                scan.error, scan.state, scan.txn = PartitionError.from_exception(failed), None, None
            self.scans[(scan.topic, scan.partition)] = scan
            for w in scan.warnings:
                report.warnings.append(w)
            if scan.error is not None and error is None:  # one recovery could not settle is reported above
                progress.error(f"{scan.name}: UNREADABLE, left untouched: {scan.error}", event="partition.unreadable",
                               partition=scan.name)
        progress(f"scanned {len(items)} partition(s)" + (f", {len(full)} small one(s) that may be due with their "
                                                          "transaction state" if full else ""),
                 event="scan.done", partitions=len(items), read_in_full=len(full))
        self._warn_orphan_log_start_entries()

    def _run_scans(self, items: list[ScanItem], *, in_driver: bool) -> list[PartitionScan]:
        """The scans of ``items``: on the driver's threads, or as tasks shaped by what a scan costs."""
        what = f"scan {len(items)} partition(s) ({self.job.scan_depth})"
        if in_driver:
            threads = driver_scan_threads(self.storage.io_concurrency, self.job.scan_depth,
                                          [log_bytes(item.listing) for item in items])
            return map_in_driver(scan_task, items, threads=threads)
        # A header scan takes milliseconds, less than a Spark task's own overhead: thousands of partitions
        # go in a few tasks per core. Transaction scans read whole logs: one task per partition balances them.
        tasks = self.runner.parallelism * 4 if self.job.scan_depth in DRIVER_SCAN_DEPTHS else None
        if tasks is not None and self.storage.io_concurrency > 1:
            # on an object store each task also overlaps its partitions' round trips (storage.io_concurrency)
            return [s for part in self.parallel_map(scan_chunk_task, _chunks(items, tasks), description=what)
                    for s in part]
        if tasks is None:  # whole logs: packed by bytes, each task's scans reported as it ends
            costs, sizes = [read_cost(item.listing) for item in items], [log_bytes(item.listing) for item in items]
            return run_packed(self.runner, scan_task, items, costs, description=self.job_description(what),
                              progress=StageProgress(self.progress, "scanning", sizes, "scan.progress"),
                              on_failure=failed_scan)
        return self.parallel_map(scan_task, items, tasks=tasks, description=what)

    def _warn_orphan_log_start_entries(self) -> None:
        """Warn about every ``log-start-offset-checkpoint`` entry naming a partition the log dir does not hold.

        A warning, not an error: Kafka ignores such entries (it looks up the entry of each log it loads), and a
        broker leaves them behind for a while after a partition is deleted or moved to another log dir; a copy
        of some of a dir's partitions has them too (two of the real broker dirs in the test fixtures do). The
        entry is kept as it is."""
        uri = self.storage.join(self.log_dir, LOG_START_OFFSET_CHECKPOINT)
        for (topic, partition), offset in self.checkpoints[LOG_START_OFFSET_CHECKPOINT].items():
            if (topic, partition) not in self.listing.partitions:
                note = (f"{uri}: the entry for {topic}-{partition} is {offset}, but the log dir holds no partition "
                        f"{topic}-{partition}: ignored and kept, as Kafka does (a leftover of a deleted or moved "
                        f"partition, or a copy of only some partitions; if this file came from another log dir, "
                        f"replace it)")
                self.report.warnings.append(note)
                self.progress(note, event="checkpoint.orphan", partition=f"{topic}-{partition}")

    def deliver(self, *, completed: bool, traffic: StoreTraffic | None = None) -> "JobRun":
        """The report finished, written (``--report``) and its rows appended to the ledger (``--ledger``); a
        failure to write either is an error line and exit code 1, never a lost summary. ``traffic``: the
        object-store requests the driver made (its tasks' are the runner's), reported for a log dir on one."""
        report, progress, storage_options = self.report, self.progress, self.storage_options
        if traffic is not None and self.storage.local_path(self.log_dir) is None:
            self._report_store_traffic(traffic)
        report.finish()
        delivered = True
        if self.report_uri:
            uri = self.report_uri
            delivered &= _deliver(progress, f"report written to {uri}", f"could not write the report {uri}",
                                  lambda: write_report(report, uri, storage_options), "report", uri=uri)
        if self.ledger_uri:
            ledger = self.ledger_uri
            delivered &= _deliver(progress, f"{len(report.partitions)} row(s) appended to the ledger {ledger}",
                                  f"could not append to the ledger {ledger}",
                                  lambda: append_ledger(ledger, report, ledger_rows(report.outcomes,
                                                                                    dry_run=report.dry_run),
                                                        storage_options),
                                  "ledger", uri=ledger, rows=len(report.partitions))
        if not delivered:
            report.exit_code = 1  # the work ran, but what it did is not (all) on record
        return JobRun(report, completed=completed, now_from_clock=self.now_from_clock, options=self.options)

    def _report_store_traffic(self, driver: StoreTraffic) -> None:
        """The run's object-store requests in the report (``store_traffic``) and a line saying how many bytes its
        GETs fetched against the bytes of the segments in scope: how many times the run read its log, on average."""
        tasks = self.runner.store_traffic()
        usage = StoreUsage(driver, tasks, segment_bytes=sum(
            s.log.size for key, p in self.listing.partitions.items() if self.scope.includes(*key)
            for s in p.segments))
        self.report.store_traffic = usage.to_dict()
        self.progress(usage.summary(), event="store.traffic", **usage.fields())

    def _recovery_first(self, recovered: "_Recovered") -> list[FileInfo]:
        """A dry run's account of the recovery a real run does first (it takes no lock and changes nothing, so it
        only plans that recovery: reads only). Every partition the plans would change is reported (progress,
        ``report.recovery_first``), and then:

        - recovery would stop in it: it is marked not recovered (``recovered.unrecovered``), as the real run marks
          it;
        - otherwise recovery only deletes files (leftovers, ``.cleaned`` files, aborted swaps, originals, intents),
          renames them (a ``.swap`` made live, an old segment put back, a delete intent's segments to
          ``.deleted``) or writes the deletion ledger: the partition is returned with the files recovery leaves
          (by their names then, each read where it is now: see :func:`_listing_after`), and planned on them:
          exactly the state the real run plans on (``recovered.foreseen``);
        - recovery would copy S3 staged objects to their live names (an intent rolled forward: the report does not
          name the objects), or, with ``--plan``, rename files (a plan records the files by name, and names read
          before recovery would not be the ones ``--apply`` finds): pending (``recovered.pending``), left out of
          the run and its counts.

        Returns the listing it planned on.
        """
        storage, log_dir, progress = self.storage, self.log_dir, self.progress
        root = (storage.local_path(log_dir) or log_dir).rstrip("/")
        listed = storage.list(root, recursive=True, irregular=True)
        reports = recover_under(storage, log_dir, self.now_ms, None, self.seams, listed=listed, dry_run=True)
        foreseen, pending = recovered.foreseen, recovered.pending
        for r in reports:
            key = parse_partition_dir(partition_name(r.partition_uri))
            if not r.actions and r.error is None:
                continue
            for warning in r.warnings:  # said now: the dry run is where a person can still look before the real run
                warning = f"a real run's recovery would do this: {warning}"
                self.report.warnings.append(warning)
                progress.notice(f"warning: {warning}", event="recovery.foreign",
                                partition=partition_name(r.partition_uri))
            actions = ", ".join(dict.fromkeys(a.action for a in r.actions))
            if key is None:  # the log dir's and work dir's own leftovers: nothing the run reads
                planned, note = "unchanged", f"recovery first: {r.partition_uri}: a real run would first {actions}"
            elif r.error is not None:
                recovered.unrecovered[key] = r.error
                planned, note = "not recovered", (f"recovery first: {r.partition_uri}: a real run's recovery would "
                                                  f"stop here ({r.error}); planned as the real run would: left "
                                                  f"untouched")
            elif any(a.action in UNFORESEEABLE_ACTIONS for a in r.actions) or (
                    self.planfile.write_uri and any(a.action in _RENAMED_FROM for a in r.actions)):
                pending.add(key)
                planned, note = "pending recovery", (
                    f"{partition_name(r.partition_uri)}: pending recovery: a real run would first {actions} (what "
                    f"it leaves cannot be read before it ran: staged objects it copies, or with --plan files it "
                    f"renames, which a plan records by name); "
                    f"left out of these counts: run `segjobs recover` first for exact counts"
                    + ("; --apply refuses this plan, which does not hold the partition" if self.planfile.write_uri
                       else ""))
                self.report.warnings.append(note)
            else:
                foreseen[key] = _files_after(root, log_dir, partition_name(r.partition_uri), listed, r)
                planned, note = "after recovery", (f"recovery first: {r.partition_uri}: a real run would first "
                                                   f"{actions}; planned on the files that leaves")
            self.report.recovery_first.append({"uri": r.partition_uri, "partition": None if key is None else
                                               partition_name(r.partition_uri), "planned": planned,
                                               "actions": [a.describe() for a in r.actions]})
            if planned == "pending recovery":
                progress.notice(note, event="recovery.pending", partition=partition_name(r.partition_uri))
            elif planned == "not recovered":
                progress.error(note, event="recovery.failed", partition=partition_name(r.partition_uri))
            else:
                progress(note, event="recovery.planned", partition=partition_name(r.partition_uri))
        return listed

    def _task_runner(self) -> TaskRunner:
        """The seams' runner, else Spark tasks in the given session (or the active one, or a new one)."""
        if self.seams.runner is not None:
            return self.seams.runner
        if self.on_driver:
            return DriverTasks()
        app_name = f"segjobs-{self.job.command}"

        def build() -> Any:
            if self.spark is not None:
                return self.spark
            if self.early is not None:
                return self.early.session()
            return spark_session.start_session(app_name, self.options.master, verbose=self.options.spark_verbose)

        def started(waited: float, took: float) -> None:
            self.report.spark_startup_s = round(waited, 2)
            if round(took, 2) > self.report.spark_startup_s:  # started ahead: its start overlapped the run's work
                self.report.spark_started_early_s = round(took, 2)
                self.progress(f"Spark ready: started early, its start took {self.report.spark_started_early_s}s, "
                              f"{self.report.spark_startup_s}s of it waited for", event="spark.ready",
                              spark_startup_s=self.report.spark_startup_s,
                              spark_started_early_s=self.report.spark_started_early_s)
            else:
                self.progress(f"Spark ready in {self.report.spark_startup_s}s", event="spark.ready",
                              spark_startup_s=self.report.spark_startup_s)

        # Built when a task first needs it. One Spark job group per run, named by the run id the report and the
        # ledger carry.
        return LazySparkTasks(build, job_group=f"segjobs-{self.job.command}-{self.report.run_id}", on_start=started)


@dataclass
class JobRun:
    """What :func:`run_job` returns."""

    report: RunReport  #: finished: totals, errors, warnings and exit code set
    #: the work function returned; False when it stopped early (the S3 lease was lost): the report then holds
    #: the partitions done so far
    completed: bool
    #: True when ``now`` was not given and the wall clock chose it
    now_from_clock: bool
    #: the options the run used
    options: JobOptions


def scan_task(item: ScanItem) -> PartitionScan:
    """One partition's scan as a task."""
    return item.scan()


def scan_chunk_task(chunk: list[ScanItem]) -> list[PartitionScan]:
    """:func:`scan_task` over a task's share of the partitions, up to the store's ``io_concurrency`` at once:
    a header scan on an object store is a few round trips of waiting, which threads overlap (reads only)."""
    if not chunk:
        return []
    return list(map_ahead(scan_task, chunk, chunk[0].storage.io_concurrency))


def _chunks(items: list[ScanItem], n: int) -> list[list[ScanItem]]:
    """``items`` in ``n`` (or fewer) contiguous shares of near-equal length, in order."""
    n = max(1, min(n, len(items)))
    step, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + step + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


#: The scan depths the frame runs on the driver (milliseconds a partition); deeper scans are Spark tasks, except
#: compaction's transaction scans while its own Spark starts (:attr:`JobContext.driver_read_threads`).
DRIVER_SCAN_DEPTHS = ("headers", "sizes")

#: A job's forecast, from the first listing and the offset checkpoints (before any file is read), of whether its
#: run will need Spark tasks: (listing, checkpoints by file name, configs, scope) -> bool. Only when Spark starts
#: depends on it, never what the run does.
SparkForecast = Callable[[LogDirListing, dict[str, dict[tuple[str, int], int]], ConfigSet, Scope], bool]

#: Of a job whose scan is at depth ``sizes``: the partitions of the listing (with the offset checkpoints, configs and
#: scope) that its scan reads at depth ``transactions`` at once, as its work would read them in full anyway (small
#: partitions that may be due: reading them on the driver's threads costs less than a stage of tasks to read
#: them again; see :func:`jobs.engine.compact.selection.read_at_first_scan`).
FirstReads = Callable[[LogDirListing, dict[str, dict[tuple[str, int], int]], ConfigSet, Scope], set[tuple[str, int]]]


def run_job(command: str, log_dir: str, options: JobOptions, work: Callable[[JobContext], None], *,
            scan_depth: str, now: Instant | None = None, destructive: bool = True, spark: Any = None,
            seams: Seams | None = None, applying: Plan | None = None,
            spark_likely: SparkForecast | None = None, read_first: FirstReads | None = None) -> JobRun:
    """Run one job end to end and return its finished report (exit code 0 ok, 1 some partition failed).
    Raises :class:`~segment_io.errors.ConfigError`, :class:`~segment_io.errors.UsageError` or
    :class:`~segment_io.errors.LockHeldError` when nothing was done (exit code 2 on the command line).

    ``now``: the instant the decisions are made at (default: ``seams.clock()``, the wall clock). ``spark``: the
    session to run tasks in (default: the active one, else a new one; none is needed with ``seams.runner``).
    ``applying``: the plan file being carried out (see :func:`jobs.engine.frame.planfile.load_for_apply`).
    ``spark_likely``: the job's forecast of whether it will need Spark; on the command line a run that will
    (its scan is Spark tasks, or the forecast says so) starts Spark on a background thread before it takes the
    lock (see :class:`jobs.engine.runtime.spark_session.EarlySession`). ``read_first``: of a job whose scan is at depth
    ``sizes``, the partitions its scan reads at depth ``transactions`` at once (see :data:`FirstReads`)."""
    job = JobSpec(command, work, scan_depth, destructive, spark_likely, read_first)
    with metered() as traffic:  # the driver's requests; the tasks' come back with their results
        ctx = JobContext.preflight(job, log_dir, options, now=now, seams=seams or PRODUCTION, applying=applying,
                                   spark=spark)
        completed = ctx.locked()
    return ctx.deliver(completed=completed, traffic=traffic)


def _forecast_listing(storage: Storage, log_dir: str, top: LogDirListing) -> LogDirListing:
    """The listing a forecast of Spark's need reads before the lock: every file on a local disk, where that costs
    little; on an object store the top level alone (``top``), where every file costs a request per thousand: the
    forecast then sees no segments and starts Spark early only for what it reads in full whatever the segments
    (``compact,delete`` topics)."""
    return list_log_dir(storage, log_dir) if storage.local_path(log_dir) is not None else top


class RunInterrupted(KeyboardInterrupt):
    """A job stopped by Ctrl-C (SIGINT). Still a KeyboardInterrupt (a notebook's interrupt stays one); its
    message says which partitions were committed before the stop and what the next run does about the rest.
    The command line prints it and exits with 130."""


def interrupted_message(report: RunReport, *, writes: bool, lock_taken: bool, shown: int = 20) -> str:
    """What an interrupted run says: which partitions it committed (at most ``shown`` by name) and that the
    next run recovers and does the rest. ``writes``: the run may change files (not a dry run, not inspect);
    ``lock_taken``: it got as far as taking the log dir's lock."""
    if not writes:
        return "interrupted: nothing was changed (this run writes nothing)"
    if not lock_taken:
        return "interrupted before any work: nothing was changed"
    committed = [f"{o.name} ({o.action})" for o in sorted(report.outcomes, key=lambda o: (o.topic, o.partition))
                 if o.committed]
    rest = ("; the other partitions were left as they were: run the command again to do them (its recovery "
            "first completes or rolls back any commit the stop cut short; `segjobs recover` does only that)")
    if not committed:
        return "interrupted: no partition was committed" + rest
    names = ", ".join(committed[:shown]) + (f" and {len(committed) - shown} more" if len(committed) > shown else "")
    return f"interrupted: committed before the stop: {len(committed)} partition(s): {names}" + rest


def _stopped_error(exc: Exception) -> ReportError:
    """The report's error for an exception that stopped a run: a segjobs error as it reads; anything else is a
    bug of segjobs', with the trace to report."""
    if isinstance(exc, SegjobsError):
        detail = f"{exc}; the run stopped here"
    else:
        detail = (f"{type(exc).__name__}: {exc}; the run stopped here (a segjobs bug; please report it with this "
                  f"trace: {traceback.format_exc(limit=-4)!r})")
    return {"kind": type(exc).__name__, "detail": detail + "; what was committed before stands, and the next run's "
            "recovery completes or rolls back a commit that was under way"}


def _deliver(progress: Progress, done: str, failed: str, write: Callable[[], Any], what: str, **fields: Any) -> bool:
    """Write the report or the ledger (``what``) after the work; a failure is an error line, not a lost summary."""
    try:
        write()
    except (SegjobsError, OSError) as exc:
        progress.error(f"{failed}: {exc}", event=f"{what}.failed", **fields)
        return False
    progress(done, event="report.written" if what == "report" else "ledger.appended", **fields)
    return True


def preflight(storage: Storage, log_dir: str, report_uri: str | None, ledger_uri: str | None,
              options: StorageOptions | None, *, html_uri: str | None = None, plan_uri: str | None = None,
              progress: Callable[..., None] | None = None) -> None:
    """Check, before anything is done, that the run can reach its log dir and write what it promises: S3
    buckets answer (credentials, endpoint, bucket; within seconds), local ``--report``, ``--html``, ``--plan``
    and ``--ledger`` destinations take a file (see :func:`check_destinations`; a missing directory created is
    said on ``progress``). Raises :class:`~segment_io.errors.ConfigError` naming the option and the fix (exit
    code 2: nothing was done)."""
    try:
        storage.check_reachable(log_dir)
    except StorageError as exc:
        raise ConfigError(f"--log-dir {log_dir}: {exc.detail}; nothing was done") from None
    check_destinations([(flag, uri) for flag, uri in (("--report", report_uri), ("--ledger", ledger_uri),
                                                      ("--html", html_uri), ("--plan", plan_uri)) if uri],
                       options, progress)


def open_log_dir(log_dir: str, options: StorageOptions | None, *, report_uri: str | None = None,
                 ledger_uri: str | None = None, html_uri: str | None = None, plan_uri: str | None = None,
                 progress: Callable[..., None] | None = None) -> Storage:
    """The store of ``log_dir``, checked before anything is done: it answers (within seconds on S3), the run's
    destinations can be written (:func:`preflight`) and the log dir is a directory. Raises
    :class:`~segment_io.errors.ConfigError` or :class:`~segment_io.errors.UsageError` otherwise (exit code 2)."""
    storage = open_storage(log_dir, options)
    preflight(storage, log_dir, report_uri, ledger_uri, options, html_uri=html_uri, plan_uri=plan_uri,
              progress=progress)
    check_log_dir_is_dir(storage, log_dir)
    return storage


def hold_log_dir(storage: Storage, log_dir: str, seams: Seams, *, ttl_ms: int, run_id: str | None = None,
                 break_run_id: str | None = None) -> ContextManager[Lease]:
    """The log dir's lock (local disk) or lease (S3) for a run that writes (:func:`~jobs.logdir.lock.acquire`):
    timed on the wall clock, never on ``now`` (it guards the real time the run takes), held by this process under
    ``run_id`` (the run the reports and the ledger name); ``break_run_id`` takes over that run's S3 lease."""
    return acquire(storage, log_dir, now_ms=seams.clock(), ttl_ms=ttl_ms, holder=Holder.this_process(run_id),
                   clock=seams.clock, break_run_id=break_run_id)


def recover_under(storage: Storage, log_dir: str, now_ms: int, lease: Lease | None, seams: Seams, *,
                  listed: list[FileInfo] | None = None, dry_run: bool = False) -> list[RecoveryReport]:
    """Recovery of the log dir (:func:`~jobs.logdir.recover.recover_log_dir`), at the start of a run or by
    ``segjobs recover``, under ``lease``: checked before each partition recovery changes, and the run it took
    over fenced. ``listed``: the log dir's listing taken under the lock; ``dry_run``: the plans, nothing applied."""
    check = None if lease is None else (lambda: lease.check(seams.clock()))
    fence = fence_of(lease, seams.clock())
    if dry_run and lease is None:  # no lease taken: fence the runs a real run taking the lease over would
        fence = fence_to_take_over(storage, log_dir, fence.wall_ms)
    return recover_log_dir(storage, log_dir, now_ms=now_ms, work_uri=work_uri(log_dir), check=check,
                           fence=fence, listed=listed, dry_run=dry_run)


def check_destinations(destinations: Sequence[tuple[str, str]], options: StorageOptions | None,
                       progress: Callable[..., None] | None = None) -> None:
    """Check that each (flag, uri) of ``destinations`` can be written: an S3 bucket that answers; on local disk the
    file itself (or, for ``--ledger``, a file in the table's directory) created and removed again, its missing
    parent directories created (and said so on ``progress``). Raises :class:`~segment_io.errors.ConfigError`
    naming the flag, what failed and the fix (exit code 2: nothing was done)."""
    for flag, uri in destinations:
        store = open_storage(uri, options)
        try:
            store.check_reachable(uri)
        except StorageError as exc:
            raise ConfigError(f"{flag} {uri}: {exc.detail}; nothing was done") from None
        path = store.local_path(uri)
        if path is not None:
            problem = _prove_local_destination(flag, path, file_expected=flag != "--ledger", progress=progress)
            if problem:
                raise ConfigError(f"{flag} {uri}: {problem}; nothing was done")


def _prove_local_destination(flag: str, path: str, *, file_expected: bool,
                             progress: Callable[..., None] | None) -> str | None:
    """Why ``path`` cannot be written, or None once that is proven by writing there: a file destination is created
    and removed at once (so a run refused later leaves no empty report behind), an existing one must be a
    writable file in a directory that takes the temporary file it is replaced from; a ledger's directory must take
    a file. Neither the mode bits nor ``os.access`` prove it (root passes both where the filesystem refuses, as
    in ``/proc``). The missing parent directories are created first (said on ``progress``) and stay; removed
    again when the check fails."""
    if file_expected and os.path.isdir(path):
        return "is a directory: give a file name, e.g. report.json or report.html"
    directory = os.path.dirname(path) if file_expected else path
    existing = directory
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if existing and not os.path.isdir(existing):
        return f"{existing} is not a directory"
    created = _missing_dirs(directory)
    try:
        os.makedirs(directory or os.curdir, exist_ok=True)
        problem = _cannot_write_to(path, directory, file_expected=file_expected)
    except OSError as exc:
        problem = f"creating the directory {directory} failed: {storage_error(exc, directory).detail}"
    if problem is not None:
        for d in reversed(created):  # innermost first; a directory something else put there since stays
            try:
                os.rmdir(d)
            except OSError:
                pass
        return problem
    if created and progress is not None:
        above = f" (and its missing parents from {created[0]})" if len(created) > 1 else ""
        progress(f"{flag}: created the missing directory {created[-1]}{above}", event="destination.created_dir",
                 flag=flag, directory=created[-1])
    return None


def _cannot_write_to(path: str, directory: str, *, file_expected: bool) -> str | None:
    """Why the destination ``path`` (in the existing ``directory``) cannot be written, or None: a new file is
    created there and removed; an existing one (replaced from a temporary sibling) must be writable and the
    directory must take that sibling; a ledger's directory must take a file."""
    exists = file_expected and os.path.lexists(path)
    if file_expected and not exists:
        return _cannot_create(path)
    problem = _cannot_create(os.path.join(directory or os.curdir, temp_name(os.path.basename(path) or "probe")))
    if problem is None and exists and not os.access(path, os.W_OK):
        return "exists and may not be replaced (not writable)"
    return problem


def _missing_dirs(directory: str) -> list[str]:
    """The directories of ``directory``'s path that do not exist yet, outermost first."""
    missing = []
    while directory and not os.path.exists(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return missing[::-1]


def _cannot_create(path: str) -> str | None:
    """Why the new file ``path`` cannot be created (and removed again), or None when it was."""
    failed = probe_new_file(path)
    if failed is None:
        return None
    step, error = failed
    if step == "create":
        return f"creating it failed: {error.detail}"
    return f"removing the file it created failed ({path} is left): {error.detail}"


@dataclass
class _Recovered:
    """What :meth:`JobContext.recover` leaves for the listing and the scan."""

    #: the partitions recovery could not settle (None: the log dir's own files), and why: left untouched
    unrecovered: dict[tuple[str, int] | None, Exception] = field(default_factory=dict)
    #: the log dir as recovery found it, while nothing changed it since (None: listed again)
    listed: list[FileInfo] | None = None
    #: a dry run: the partitions its real run's recovery changes, by the files that leaves
    foreseen: dict[tuple[str, int], dict[str, FileInfo]] = field(default_factory=dict)
    #: a dry run: the partitions pending recovery, left out of the run
    pending: set[tuple[str, int]] = field(default_factory=set)


def _driver_read_threads(early: "spark_session.EarlySession | None", storage: Storage, log_dir: str,
                         master: str | None) -> int:
    """:attr:`JobContext.driver_read_threads` of a run: the cores here (up to :data:`DRIVER_SCAN_THREADS`) when it
    started its own Spark early, for a master on this host, over a log dir on local disk. The tasks would then run
    on this host and read the same disk, while the driver only waits for the JVM; and a stage costs more than the
    reads (2 GB of 1 KB records: 0.4 s on two threads, 4.3 s as a stage, most of it the start of the Python
    workers, which the cleaning stage then pays instead while the reads are already done)."""
    if early is None or storage.local_path(log_dir) is None or not spark_session.runs_on_this_host(master):
        return 0
    # at most as many as the other driver scans: each holds an active segment read whole, in the driver's memory
    return min(local_parallelism(), DRIVER_SCAN_THREADS)


def _early_session(job: JobSpec, options: JobOptions, storage: Storage, log_dir: str, top: LogDirListing,
                   checkpoints: dict[str, dict[tuple[str, int], int]], configs: ConfigSet,
                   scope: Scope) -> "spark_session.EarlySession | None":
    """Of a run that will start Spark (no session given, no test runner): Java checked, the session started now
    on a background thread when the run will need it (its scan is Spark tasks, or its forecast says so)."""
    spark_session.check_java()  # no Java is exit 2 here, before the lock and any work
    if spark_session.can_start_early() and (job.scan_depth not in DRIVER_SCAN_DEPTHS or (
            job.spark_likely is not None
            and job.spark_likely(_forecast_listing(storage, log_dir, top), checkpoints, configs, scope))):
        # the JVM's seconds of start-up overlap the lock, recovery and scans
        return spark_session.EarlySession(app_name=f"segjobs-{job.command}", master=options.master,
                                          verbose=options.spark_verbose)
    return None


#: What a file recovery renames was called before, from its new name: recovery's renaming actions (a delete intent's
#: segments to ``.deleted``, a ``.swap`` made live, an aborted replace's old segment put back).
_RENAMED_FROM: dict[str, Callable[[str], str]] = {
    "finish-delete": lambda uri: uri[: -len(DELETED_SUFFIX)],
    "complete-swap": lambda uri: uri + SWAP_SUFFIX,
    "restore-old": lambda uri: uri + DELETED_SUFFIX,
}
#: Recovery's actions whose outcome a dry run cannot read before recovery ran: an S3 staged object copied to its live
#: name (the report does not name the object), a roll-forward another run finished at the same time.
UNFORESEEABLE_ACTIONS = frozenset({"copy-new", "settled-elsewhere"})


def _files_after(root: str, log_dir: str, name: str, listed: list[FileInfo],
                 report: RecoveryReport) -> dict[str, FileInfo]:
    """Partition ``name``'s entries in ``listed`` (the log dir's recursive listing under ``root``) once the actions
    of ``report`` (recovery's plan, with no action of :data:`UNFORESEEABLE_ACTIONS`) are done: by the URI they
    have then, the entry of the file that is there now (deleted files gone, renamed ones under their new URI).
    Recovery only deletes and renames in a partition dir, so every file it leaves is one that is there now."""
    prefix = root + "/"
    files = {f.uri[len(prefix):]: f for f in listed if f.uri.startswith(prefix)
             and (f.uri[len(prefix):] == name or f.uri[len(prefix):].startswith(name + "/"))}
    log_prefix = log_dir.rstrip("/") + "/"
    for a in report.actions:
        if not a.uri.startswith(log_prefix):
            continue  # the work dir's (intents, staged objects, the deletion ledger): not in the listing
        rel = a.uri[len(log_prefix):]
        renamed_from = _RENAMED_FROM.get(a.action)
        if renamed_from is not None:
            info = files.pop(renamed_from(rel), None)
            if info is not None:
                files[rel] = info
        else:  # a delete
            files.pop(rel, None)
    return {prefix + rel: info for rel, info in files.items()}


def _listing_after(root: str, key: tuple[str, int], files: dict[str, FileInfo]) -> PartitionListing | None:
    """The listing of partition ``key`` holding ``files`` (:func:`_files_after`): classified by the names recovery
    leaves, each segment file read where it is now (a ``.swap`` file recovery would make live is read as it is)."""
    after = listing_from_files(root, [replace(info, uri=uri) for uri, info in files.items()]).partitions.get(key)
    if after is None:
        return None

    def now(info: FileInfo | None) -> FileInfo | None:
        return None if info is None else files[info.uri]

    segments = tuple(replace(s, log=files[s.log.uri], index=now(s.index), timeindex=now(s.timeindex),
                             txnindex=now(s.txnindex), snapshot=now(s.snapshot)) for s in after.segments)
    return replace(after, segments=segments,
                   producer_snapshots=tuple((o, files[i.uri]) for o, i in after.producer_snapshots))


def _check_scope(storage: Storage, log_dir: str, scope: Scope, configs: ConfigSet,
                 listing: LogDirListing | None = None) -> LogDirListing:
    """Fail with a UsageError/ConfigError when the log dir holds no partition, the scope names one it
    does not hold, or two topic globs of equal specificity claim a topic. ``listing``: the log dir's, when the
    caller has it (default: listed here)."""
    listing = listing if listing is not None else list_log_dir(storage, log_dir)
    check_log_dir_has_partitions(log_dir, listing, storage=storage)
    present = set(listing.partitions)
    scope.check_against(present)
    configs.check_topics({t for t, _ in present})
    return listing


__all__ = ["JobContext", "JobRun", "JobSpec", "RunInterrupted", "hold_log_dir", "interrupted_message", "open_log_dir",
           "preflight", "recover_under", "run_job"]
