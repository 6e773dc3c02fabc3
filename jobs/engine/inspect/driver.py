"""The inspection engine: per-partition statistics (a task reading the key-hash projection, returning numbers
only), predictions from the planners the jobs use, the report rows and their renderings. From Python (and in
notebooks): :func:`jobs.api.inspect`, :func:`jobs.api.dirty_ratios`.

What `segjobs inspect` reports, in users' words, is the docstring of :mod:`jobs.commands.inspect`."""

from __future__ import annotations

import csv
import io
import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from jobs.engine.compact.cleaning import CompactTask, compact_partition
from jobs.engine.frame.job import JobContext
from jobs.engine.frame.options import DEFAULT_DEDUPE_BUFFER_BYTES, InspectOptions
from jobs.engine.frame.packed_tasks import StageProgress, log_bytes, read_cost, run_packed
from jobs.engine.report.html import inspect_html, write_html
from jobs.engine.report.outcomes import INSPECT_COLUMNS, InspectRow, InspectTotals
from jobs.engine.report.render import (
    in_order,
    inspect_topic_columns,
    inspect_topic_row,
    inspect_totals,
    per_topic,
    rejected_dirs_line,
)
from jobs.engine.report.run_report import (
    RunReport,
    absolute_uri,
    attention_table,
    human_bytes,
    notes_of_problems,
    one_line,
    policy_origins,
    render_footer,
    render_table,
    rows_per_partition,
)
from jobs.engine.retain.driver import DeleteLimit, RetentionParams, plan_retention_first, retention_decisions
from jobs.engine.runtime.tasks import TaskFailure
from jobs.engine.scan import PartitionError
from jobs.logdir.commit import Committer
from jobs.rules.cardinality import HyperLogLog, exact_distinct
from jobs.rules.config import TopicConfig
from jobs.rules.model import PartitionState
from jobs.rules.offset_map import max_keys_for_buffer
from jobs.rules.plan_compact import CompactionPlan, plan_compaction
from jobs.rules.plan_retain import RetentionPlan
from jobs.rules.timeutil import format_instant
from segment_io.decode import decode_key_hashes_bytes
from segment_io.errors import SegjobsError, UsageError
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.layout import PartitionListing
from segment_io.storage.base import Storage
from segment_io.units import DAY_MS

FORMATS = ("table", "json", "csv")

#: The columns of a partition's row, in order: (name, Spark SQL type, meaning), as
#: :class:`~jobs.engine.report.outcomes.InspectRow` declares them: the report entries, the CSV header and
#: :func:`jobs.api.dirty_ratios`' schema all follow it.
COLUMNS: tuple[tuple[str, str, str], ...] = INSPECT_COLUMNS
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in COLUMNS)


# --------------------------------------------------------------------------------------------------
# The per-partition task (runs on an executor; reads the key-hash projection, returns numbers only)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InspectTask:
    """What one partition's inspection needs: the scan's state and transactions, and the compaction plan."""

    storage: Storage
    listing: PartitionListing
    state: PartitionState
    txn: Any  # jobs.rules.transactions.TxnState
    plan: CompactionPlan
    config: TopicConfig
    now_ms: int
    exact: bool
    committer: Committer
    max_batch_bytes: int  #: the run's decompression bound
    #: compact,delete partitions that lose segments to retention: the listing and scan compaction works on
    #: (see jobs.engine.retain.driver.RetentionFirst); None: the partition as it is
    after_retention: tuple[PartitionListing, Any] | None = None
    #: False where compaction would not touch the partition at all (its topic refused by the delete limit)
    compactable: bool = True


@dataclass
class _Counts:
    """Record counts over a set of segments; ``hll``/``hashes`` count their distinct live keys."""

    exact: bool
    records: int = 0
    markers: int = 0
    keyless: int = 0
    keyed: int = 0
    live_tombstones: int = 0
    expired_tombstones: int = 0
    aborted: int = 0
    oldest: int | None = None
    newest: int | None = None
    hll: HyperLogLog = field(default_factory=HyperLogLog)
    hashes: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def add(self, kh: pa.Table, aborted_txns: Any, now_ms: int) -> None:
        """Count one segment's KEY_HASH_SCHEMA rows (vectorised: no per-record Python work)."""
        col = {name: kh.column(name).to_numpy() for name in (
            "key_is_null", "value_is_null", "timestamp", "batch_last_offset", "transactional", "control",
            "producer_id")}
        control = col["control"]
        data = ~control
        aborted = np.zeros(kh.num_rows, bool)
        txn_data = data & col["transactional"]
        if txn_data.any():
            aborted[txn_data] = aborted_txns.contains(col["producer_id"][txn_data], col["batch_last_offset"][txn_data])
        live = data & ~aborted
        keyed = live & ~col["key_is_null"]
        tombstone = keyed & col["value_is_null"]
        horizon = kh.column("delete_horizon_ms")
        has_horizon = horizon.is_valid().to_numpy(zero_copy_only=False)
        # The cleaner drops a tombstone once now >= its batch's horizon. Legacy (magic 0/1) tombstones have
        # no horizon of their own (Kafka judges them per segment) and count as live here.
        expired = tombstone & has_horizon & (horizon.fill_null(0).to_numpy() <= now_ms)
        stamps = col["timestamp"][data]
        stamps = stamps[stamps >= 0]

        self.records += int(data.sum())
        self.markers += int(control.sum())
        self.keyless += int((live & col["key_is_null"]).sum())
        self.keyed += int(keyed.sum())
        self.expired_tombstones += int(expired.sum())
        self.live_tombstones += int((tombstone & ~expired).sum())
        self.aborted += int(aborted.sum())
        if len(stamps):
            lo, hi = int(stamps.min()), int(stamps.max())
            self.oldest = lo if self.oldest is None else min(self.oldest, lo)
            self.newest = hi if self.newest is None else max(self.newest, hi)
        hash_hi = kh.column("key_hash_hi").to_numpy()[keyed]
        hash_lo = kh.column("key_hash_lo").to_numpy()[keyed]
        if self.exact:
            self.hashes.append((hash_hi, hash_lo))
        else:
            self.hll.add(hash_hi, hash_lo)

    def distinct_keys(self) -> int:
        if self.exact:
            if not self.hashes:
                return 0
            return exact_distinct(np.concatenate([h for h, _ in self.hashes]),
                                  np.concatenate([lo for _, lo in self.hashes]))
        # A sketch can overshoot a small true count; never report more keys than keyed records.
        return min(self.hll.estimate(), self.keyed)


@dataclass
class PartitionStats:
    """What the inspection task returns for one partition (plain numbers; ``error`` when it failed)."""

    topic: str
    partition: int
    values: dict[str, Any] = field(default_factory=dict)
    error: PartitionError | None = None


def _estimate_compaction(rng: _Counts, range_bytes: int, ratio_of_latest: float) -> tuple[int, int]:
    """(records, bytes) a compaction would remove from the rewritten range, estimated without an offset map.

    Removed: records of aborted transactions, keyless records, every keyed record but the latest of its key
    (keyed records minus distinct keys: exact when the clean section was cleaned before, so holds each key
    once) and expired tombstones that are the latest of their key (the share of latest records among keyed
    ones stands in for the unknown share among tombstones). Bytes: that many records of the range's average
    size, batch overhead included.
    """
    superseded = max(rng.keyed - rng.distinct_keys(), 0)
    expired_latest = round(rng.expired_tombstones * ratio_of_latest)
    records = rng.aborted + rng.keyless + superseded + expired_latest
    total = rng.records + rng.markers
    return records, (round(range_bytes * records / total) if total else 0)


def inspect_partition(task: InspectTask) -> PartitionStats:
    """Count one partition's records, keys and tombstones from its key-hash projection (one segment in memory
    at a time), and what compaction would remove: estimated, or with ``exact`` measured by
    :func:`jobs.engine.compact.cleaning.compact_partition` as a dry run."""
    plan = task.plan
    out = PartitionStats(plan.topic, plan.partition)
    try:
        whole = _Counts(task.exact)
        in_range = _Counts(exact=False)  # the rewritten range, for the estimate only
        last = len(task.listing.segments) - 1
        range_bytes = 0
        rewritable = task.config.compact and plan.total_bytes > 0 and task.compactable
        # what compaction works on: the segments retention leaves (all of them when it deletes none)
        kept = {s.base_offset for s in (task.after_retention[0] if task.after_retention else task.listing).segments}
        for i, seg in enumerate(task.listing.segments):
            data = task.storage.read(seg.log.uri)
            kh = decode_key_hashes_bytes(data, path=seg.log.uri, allow_truncated_tail=i == last,
                                         max_batch_bytes=task.max_batch_bytes)
            whole.add(kh, task.txn.aborted, task.now_ms)
            if (rewritable and not task.exact and seg.base_offset in kept
                    and seg.base_offset < plan.first_uncleanable_offset):
                in_range.add(kh, task.txn.aborted, task.now_ms)
                range_bytes += len(data)
        distinct = whole.distinct_keys()
        values: dict[str, Any] = {
            "records": whole.records, "markers": whole.markers, "keyless_records": whole.keyless,
            "distinct_keys": distinct, "distinct_keys_exact": task.exact,
            "superseded_records": max(whole.keyed - distinct, 0),
            "live_tombstones": whole.live_tombstones, "expired_tombstones": whole.expired_tombstones,
            "aborted_records": whole.aborted, "oldest_timestamp": whole.oldest, "newest_timestamp": whole.newest,
            "compaction_records_removed": 0, "compaction_bytes_removed": 0,
            "compaction_measured": task.exact, "compaction_partial": False,
        }
        if rewritable and task.exact:
            measured, out.error = _measure_compaction(task)
            values.update(measured)
        elif rewritable:
            latest_share = distinct / whole.keyed if whole.keyed else 1.0
            records, removed = _estimate_compaction(in_range, range_bytes, latest_share)
            values.update(compaction_records_removed=records, compaction_bytes_removed=removed)
        out.values = values
    except SegjobsError as exc:
        out.error = PartitionError.from_exception(exc)
    return out


def _measure_compaction(task: InspectTask) -> tuple[dict[str, Any], PartitionError | None]:
    """Run the compaction task itself as a dry run: the numbers a compaction dry run reports, by construction
    (or the located error that would make the partition uncleanable)."""
    listing, state, txn = task.listing, task.state, task.txn
    if task.after_retention is not None:
        listing, scan = task.after_retention
        state, txn = scan.state, scan.txn
    outcome = compact_partition(CompactTask(
        task.storage, listing, state, task.plan, task.config, txn, task.now_ms,
        max_keys_for_buffer(DEFAULT_DEDUPE_BUFFER_BYTES), dry_run=True, committer=task.committer,
        max_batch_bytes=task.max_batch_bytes))
    return ({"compaction_records_removed": sum(g.records_before - g.records_after for g in outcome.groups),
             "compaction_bytes_removed": sum(g.bytes_before - g.bytes_after for g in outcome.groups),
             "compaction_partial": outcome.map_full}, outcome.error)


# --------------------------------------------------------------------------------------------------
# The driver: plans, tasks, rows
# --------------------------------------------------------------------------------------------------


def _plan_values(state: PartitionState, config: TopicConfig, plan: CompactionPlan, retention: RetentionPlan | None,
                 now_ms: int) -> dict[str, Any]:
    """The columns the planners decide (no record data needed). ``state`` is the partition as it is; ``plan``
    is made on what retention leaves of it (see :func:`work`); ``retention`` is what ``retain`` would delete
    (None: nothing, as for a topic the delete-fraction limit refuses)."""
    deletions = retention.deletions if retention is not None else ()
    return {
        "policy": config.policy_text, "segments": len(state.segments), "bytes": state.size_bytes,
        "clean_bytes": plan.clean_bytes, "cleanable_bytes": plan.cleanable_bytes,
        "uncleanable_bytes": plan.uncleanable_bytes, "dirty_ratio": plan.dirty_ratio,
        "min_cleanable_dirty_ratio": plan.min_cleanable_dirty_ratio,
        "log_start_offset": state.log_start_offset, "log_end_offset": state.log_end_offset,
        "first_dirty_offset": plan.first_dirty_offset, "first_uncleanable_offset": plan.first_uncleanable_offset,
        "bound_by": plan.bound_by, "compaction_selected": plan.selected, "compaction_reason": plan.reason,
        "compaction_note": plan.note,
        "retention_segments_deleted": len(deletions), "retention_bytes_deleted": sum(d.size_bytes for d in deletions),
        "retention_rules": ",".join(sorted({d.rule for d in deletions})) or None,
        "retention_log_start_offset": state.log_start_offset if retention is None else retention.new_log_start_offset,
        "segment_bytes": [s.size_bytes for s in state.segments],
        "segment_age_ms": [now_ms - s.effective_largest_timestamp for s in state.segments],
    }


def _failed_inspection(task: InspectTask, failure: TaskFailure) -> PartitionStats:
    """The statistics of a partition whose inspection task died: its row reports the error."""
    return PartitionStats(task.listing.topic, task.listing.partition, error=PartitionError(failure.kind,
                                                                                          failure.detail))


def work(ctx: JobContext) -> None:
    """The inspection job's work (see :func:`jobs.engine.frame.job.run_job`): one row per partition into the
    report, and the totals. Nothing is written to the log dir."""
    options = ctx.options
    assert isinstance(options, InspectOptions)
    exact = options.exact
    values: dict[tuple[str, int], dict[str, Any]] = {}  #: each partition's columns, until its row is built
    tasks: list[InspectTask] = []
    # retain's own decisions: a topic the delete-fraction limit refuses is predicted to lose nothing, as it does
    params, limit = RetentionParams.from_job(ctx), DeleteLimit.of_job(ctx)
    retentions, refused = retention_decisions(params, ctx.scans, ctx.configs.for_topic, limit)
    # compact,delete partitions: compaction predicted on what retention leaves, as `compact` runs them
    first = plan_retention_first(params, ctx.scans, ctx.configs.for_topic, limit, parallel_map=ctx.parallel_map,
                                 max_batch_bytes=ctx.max_batch_bytes)
    held_keys = first.held()
    for key, scan in sorted(ctx.scans.items()):
        if scan.error is not None:
            values[key] = {"error": str(scan.error)}
            ctx.report.errors.append({"partition": scan.name, **scan.error.to_dict()})
            continue
        config = ctx.configs.for_topic(scan.topic)
        held = key in held_keys
        # As an unforced (nightly) run would decide: inspect's --topic only narrows what is shown.
        _, compacted = first.compaction_input(key, ctx.listing.partitions[key], scan)
        plan = plan_compaction(compacted.scanned, config, ctx.now_ms)
        if held:
            why = f"left untouched: retention {first.refused[key[0]].message()}"
            plan = replace(plan, selected=False, reason=why, note=why)
        retention = retentions.get(key)
        if retention is not None:
            ctx.report.warnings.extend(f"{scan.name}: retention: {w}" for w in retention.warnings)
        kept = None if key[0] in refused else retention
        values[key] = {**_plan_values(scan.scanned, config, plan, kept, ctx.now_ms),
                       "retention_refused": refused[key[0]].message() if key[0] in refused else None}
        tasks.append(InspectTask(ctx.storage, ctx.listing.partitions[key], scan.scanned, scan.txn, plan, config,
                                 ctx.now_ms, exact, ctx.committer, ctx.max_batch_bytes, first.after.get(key),
                                 compactable=not held))
    ctx.progress(f"inspecting {len(tasks)} partition(s)" + (" (exact)" if exact else ""), event="inspect.start",
                 partitions=len(tasks), exact=exact)
    costs = [read_cost(task.listing) for task in tasks]
    inspected = run_packed(ctx.runner, inspect_partition, tasks, costs,
                           description=ctx.job_description(f"inspect {len(tasks)} partition(s)"
                                                           + (" (exact)" if exact else "")),
                           progress=StageProgress(ctx.progress, "inspecting",
                                                  [log_bytes(task.listing) for task in tasks], "inspect.progress"),
                           on_failure=_failed_inspection)
    for stats in inspected:
        key = (stats.topic, stats.partition)
        if stats.error is not None:
            name = f"{stats.topic}-{stats.partition}"
            values[key] = {"error": str(stats.error)}
            ctx.report.errors.append({"partition": name, **stats.error.to_dict()})
            # on stderr even when quiet, as a scan's failure is: a damaged partition is never only a table cell
            ctx.progress.error(f"{name}: UNREADABLE: {stats.error}", event="partition.unreadable", partition=name)
        else:
            values[key].update(stats.values)
    rows = [InspectRow.of(*k, values[k]) for k in sorted(values)]
    ctx.report.inspected.extend(rows)
    ctx.report.partitions.extend(r.to_entry() for r in rows)
    ctx.report.inspect_totals = InspectTotals.of(rows, exact=exact)
    ctx.report.totals.update(ctx.report.inspect_totals.to_dict())
    html = getattr(ctx.options, "html", None)  # InspectOptions: ctx.options is typed as any job's
    if html:
        _write_html(ctx, html)


def _write_html(ctx: JobContext, uri: str) -> None:
    """The HTML report with the charts (``--html``), named by the JSON report's ``html_report``; a failure to
    write it is the run's error (exit code 1), not a lost inspection."""
    uri = absolute_uri(uri)
    try:
        write_html(uri, inspect_html(ctx.report), ctx.options.storage_options())
    except (OSError, SegjobsError) as exc:
        ctx.report.errors.append({"kind": "HtmlReportFailed", "detail": f"could not write {uri}: {exc}"})
        ctx.progress.error(f"could not write the HTML report {uri}: {exc}", event="html.failed", uri=uri)
        return
    ctx.report.html_report = uri
    ctx.progress(f"HTML report written to {uri}", event="html.written", uri=uri)


# --------------------------------------------------------------------------------------------------
# Output formats
# --------------------------------------------------------------------------------------------------


def _table_columns(estimated: bool) -> tuple[tuple[str, str], ...]:
    est = " (est.)" if estimated else ""
    return (("partition", "partition"), ("policy", "policy"), ("segments", "segs"), ("size", "size"),
            ("dirty", "dirty"), ("records", "records"), ("keys", f"keys{est}"), ("superseded", f"superseded{est}"),
            ("tombstones", "tombstones live/exp"), ("aborted", "aborted"), ("compact", "compact"),
            ("compaction", f"compaction frees{est}"), ("retention", "retention frees"), ("oldest", "oldest"),
            ("newest", "newest"), ("note", "note"))


def _table_row(r: InspectRow) -> dict[str, Any]:
    name = f"{r.topic}-{r.partition}"
    problems = notes_of_problems(None, "", r.error, ())
    if not r.readable:
        return {"partition": name, "policy": "UNREADABLE", "note": one_line("; ".join(problems))}
    return {
        "partition": name, "policy": r.policy, "segments": r.segments, "size": human_bytes(r.bytes or 0),
        "dirty": None if r.dirty_ratio is None else f"{r.dirty_ratio:.2f}",  # None: "-"
        "records": r.records, "keys": r.distinct_keys,
        "superseded": r.superseded_records, "tombstones": f"{r.live_tombstones}/{r.expired_tombstones}",
        "aborted": r.aborted_records, "compact": "yes" if r.compaction_selected else "no",
        "compaction": human_bytes(r.compaction_bytes_removed or 0),
        "retention": human_bytes(r.retention_bytes_deleted or 0),
        "oldest": format_instant(r.oldest_timestamp)[:10], "newest": format_instant(r.newest_timestamp)[:10],
        "note": one_line("; ".join(problems + [r.compaction_note or ""]).strip("; ")) or None,
    }


#: Warnings the table shows below it, at most (a log dir of thousands of partitions can give as many)
_WARNINGS_SHOWN = 10


def render(report: RunReport, fmt: str, *, layout: str = "auto", width: int | None = None) -> str:
    """The inspect report as text: ``table`` (with each partition's compaction reason and any error below
    it), ``json`` (the whole report, one document) or ``csv`` (every column; arrays space-separated). The table
    has a row per partition, or beyond :data:`~jobs.engine.report.run_report.PARTITION_ROWS_MAX` partitions (``layout``)
    a row per topic (then only the unreadable partitions are named below it); ``width``: the terminal's, which
    the table fits (notes wrap, never cut). CSV and JSON always hold every partition."""
    if fmt == "json":
        return report.to_json() + "\n"
    rows, t = report.inspected, inspect_totals(report)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COLUMN_NAMES, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (" ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.to_entry().items()})
        return buf.getvalue()
    if fmt != "table":
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    estimated = not t.exact
    ordered = in_order(rows)
    per_partition = rows_per_partition(layout, len(ordered))
    lines = [f"log dir {report.log_dir} at {format_instant(report.now_ms)} ({report.now_ms})", ""]
    if per_partition:
        lines.append(render_table([_table_row(r) for r in ordered], _table_columns(estimated), width=width))
    else:
        lines.append(render_table([inspect_topic_row(topic, rs) for topic, rs in per_topic(ordered)],
                                  inspect_topic_columns(estimated), width=width))
        lines += attention_table([r for r in ordered if not r.readable], _table_row, _table_columns(estimated),
                                 width=width)
    below = []  # each partition's verdict (the rollup leaves them to --per-partition), every error in full
    for r in rows:
        name = f"{r.topic}-{r.partition}"
        if not r.readable:
            below.append(f"{name}: ERROR {r.error}")
        elif per_partition:
            verdict = "selected" if r.compaction_selected else "not selected"
            retention = (f"; retention deletes {r.retention_segments_deleted} segment(s) "
                         f"({r.retention_rules})" if r.retention_segments_deleted else "")
            refused = r.retention_refused
            if refused and refused not in (r.compaction_reason or ""):  # (a held compact,delete topic says it already)
                retention += f"; retention {refused}"
            below.append(f"{name}: {verdict}: {r.compaction_reason}{retention}")
    # what the run found worth a warning (an active segment's incomplete tail, a stale index, retention's notes, a
    # lock held): the table has no column for them, and JSON lists them all
    warned = [f"warning: {w}" for w in report.warnings[:_WARNINGS_SHOWN]]
    if len(report.warnings) > _WARNINGS_SHOWN:
        warned.append(f"... and {len(report.warnings) - _WARNINGS_SHOWN} more warning(s) (--format json lists all)")
    if below or warned:
        lines += ["", *below, *warned]
    approx = "" if t.exact else " (est.: estimated; --exact counts and measures)"
    held = sum(1 for r in rows if r.retention_refused)
    lines += ["", f"{t.partitions} partition(s), {human_bytes(t.bytes)}; compaction at now selects "
                  f"{t.compaction_selected} and frees {human_bytes(t.compaction_bytes_removed)}; retention "
                  f"frees {human_bytes(t.retention_bytes_deleted)}{approx}"
              + (f"; retention would be REFUSED for {held} partition(s) by the delete-fraction limit" if held else "")
              + (f"; {t.errors} partition(s) UNREADABLE" if t.errors else ""),
              *filter(None, [rejected_dirs_line(report, [f"{r.topic}-{r.partition}" for r in rows])]),
              render_footer(report, t.bytes, "inspected"), *filter(None, [policy_origins(report)]), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Notebooks (the functions themselves are jobs.api.dirty_ratios and jobs.api.inspect)
# --------------------------------------------------------------------------------------------------


def spark_schema():
    """The Spark schema of :func:`jobs.api.dirty_ratios`' DataFrame (built from :data:`COLUMNS`)."""
    from pyspark.sql.types import _parse_datatype_string  # start-up: pyspark, for the notebook's DataFrame only

    return _parse_datatype_string(", ".join(f"{name}: {typ}" for name, typ, _ in COLUMNS))


@dataclass(frozen=True)
class DemoLogDir:
    """A generated log dir to try inspect on: where it is, the topic settings it is meant with, and a now."""

    log_dir: str
    overrides: tuple[str, ...]
    now_ms: int


def write_demo_log_dir(out_dir: str | os.PathLike, *, records: int = 2_000) -> DemoLogDir:
    """Write a small log dir into ``out_dir/logs``: a compacted changelog with tombstones and aborted
    transactions, a compact,delete topic, and a delete topic whose oldest segments are past retention at the
    returned ``now`` (a day after the last record). A few hundred KB with the default ``records``."""
    start, span = 1_700_000_000_000, 7 * DAY_MS
    log_dir = Path(out_dir) / "logs"
    common: dict[str, Any] = dict(records=records, start_ms=start, span_ms=span, segment_bytes=64 << 10,
                                  value_bytes=100)
    for spec in (
        GenerateSpec(topics=("users-changelog",), partitions=2, superseded_share=0.7, tombstone_share=0.05,
                     transactional_share=0.3, aborted_share=0.5, seed=1, **common),
        GenerateSpec(topics=("orders",), partitions=1, superseded_share=0.3, tombstone_share=0.01, seed=2,
                     **common),
        GenerateSpec(topics=("clicks",), partitions=1, superseded_share=0.0, tombstone_share=0.0, seed=3, **common),
    ):
        generate_log_dir(spec, log_dir)
    overrides = ("users-changelog:cleanup.policy=compact", "orders:cleanup.policy=compact,delete",
                 "orders:retention.ms=7d", "clicks:retention.ms=4d")
    return DemoLogDir(str(log_dir), overrides, start + span + DAY_MS)


#: The notebook's parameters that the environment can set (``SEGJOBS_<NAME>``), and how its text is read: ``text``
#: as it is, ``list`` split like a shell's words (``SEGJOBS_TOPICS="orders* users"``), ``bool`` 1/0, true/false,
#: yes/no. NOW stays text: the jobs take an ISO-8601 instant or epoch milliseconds.
NOTEBOOK_PARAMETERS: dict[str, str] = {"LOG_DIR": "text", "NOW": "text", "TOPICS": "list", "CONFIG": "text",
                                       "OVERRIDES": "list", "EXACT": "bool", "LEDGER": "text",
                                       "SPARK_MASTER": "text"}
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def notebook_parameters(environ: Mapping[str, str] | None = None, **defaults: Any) -> tuple[Any, ...]:
    """The notebook's parameters (``defaults``: its parameters cell's values, by name), each replaced by
    ``SEGJOBS_<NAME>`` where ``environ`` (default: the process's environment) sets it and is not empty, so that a
    headless run (``SEGJOBS_LOG_DIR=/var/kafka/logs jupyter nbconvert --execute ...``) needs no edit of the
    notebook. Returned in the order given. A name that is no parameter, or a value that cannot be read, is a
    :class:`~segment_io.errors.UsageError` naming the variable."""
    env = os.environ if environ is None else environ
    values = []
    for name, default in defaults.items():
        kind = NOTEBOOK_PARAMETERS.get(name)
        if kind is None:
            raise UsageError(f"{name}: not a parameter of the notebook; they are {', '.join(NOTEBOOK_PARAMETERS)}")
        text = env.get(f"SEGJOBS_{name}", "").strip()
        if not text:
            values.append(default)
        elif kind == "list":
            values.append(shlex.split(text))
        elif kind == "bool":
            if text.lower() not in _BOOLEANS:
                raise UsageError(f"SEGJOBS_{name}={text!r}: expected 1 or 0 (true/false, yes/no)")
            values.append(_BOOLEANS[text.lower()])
        else:
            values.append(text)
    return tuple(values)


__all__ = ["COLUMNS", "COLUMN_NAMES", "DemoLogDir", "FORMATS", "InspectTask", "NOTEBOOK_PARAMETERS",
           "PartitionStats", "inspect_partition", "notebook_parameters", "render", "spark_schema", "work",
           "write_demo_log_dir"]

