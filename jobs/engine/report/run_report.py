"""Reporting for every job: progress lines, the JSON report, the console summary table, the Delta ledger.

A job builds a :class:`RunReport` with one dict per partition (its own keys) and hands it here; nothing
in this module knows compaction or retention semantics.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO, TypedDict, TypeVar

import pyarrow as pa

from jobs.engine.report.events import ProgressEvent, ProgressLine
from jobs.engine.report.outcomes import LEDGER_NUMBERS, InspectRow, InspectTotals, Outcome, ReportError
from jobs.engine.runtime.delta_spark import append_with_spark, delta_session
from segment_io.storage import StorageOptions, open_storage, scheme_of


class Progress:
    """Progress lines: ``[compact 12.3s] 3/8 partitions: orders-2 done``. With a ``sink`` every line goes to
    it; without one they are printed on stderr unless quiet. :meth:`error` and :meth:`notice` lines are never
    silenced: a failure, or what repeating the run takes, is always shown.

    Every line is a :class:`~jobs.engine.report.events.ProgressEvent` first: ``event`` names it (``scan.done``,
    ``compact.partition``, ...) and keyword arguments are its structured fields (``partition="orders-2"``,
    ``seconds=1.4``), which ``--log-format json`` prints and text mode leaves out. ``progress("text")`` alone
    is an event named ``message``. The sink receives a :class:`~jobs.engine.report.events.ProgressLine`: the text
    line as a ``str``, with the event on its ``event`` attribute."""

    def __init__(self, command: str, *, quiet: bool = False, stream: TextIO | None = None,
                 sink: Callable[[ProgressLine], None] | None = None) -> None:
        self.command = command
        self.quiet = quiet
        self.stream = stream
        self.sink = sink
        self.t0 = time.monotonic()

    def __call__(self, message: str, *, event: str = "message", **fields: Any) -> None:
        """An ``info`` line: silenced by quiet (when there is no sink)."""
        if self.sink is not None or not self.quiet:
            self._emit(self.event("info", event, message, fields))

    def error(self, message: str, *, event: str = "error", **fields: Any) -> None:
        """A failure (a partition left untouched, a report that could not be written): shown even when quiet."""
        self._emit(self.event("error", event, message, fields))

    def notice(self, message: str, *, event: str = "notice", level: str = "notice", **fields: Any) -> None:
        """``segjobs <command>: <message>``, shown even when quiet: what the user must know about the run as a
        whole (the wall-clock instant it acted at, a warning about its input). ``level="error"``: a failure
        worded the same way (the command's own messages, e.g. ``segjobs recover: ... NOT RECOVERED``)."""
        self._emit(self.event(level, event, message, fields, style="named"))

    def event(self, level: str, event: str, message: str, fields: Mapping[str, Any] | None = None, *,
              style: str = "timed") -> ProgressEvent:
        """The event of a line emitted now (not emitted: see :meth:`__call__`, :meth:`error`, :meth:`notice`)."""
        return ProgressEvent(command=self.command, level=level, event=event, message=message,
                             elapsed_s=time.monotonic() - self.t0, ts_ms=time.time_ns() // 1_000_000,
                             fields=dict(fields or {}), style=style)

    def _emit(self, event: ProgressEvent) -> None:
        line = ProgressLine(event)
        if self.sink is not None:
            self.sink(line)
            return
        # sys.stderr is looked up at each line: under spark-submit it is replaced once the JVM is reachable
        # (see jobs.engine.runtime.spark_session.separate_stderr_under_spark_submit).
        print(str(line), file=self.stream or sys.stderr, flush=True)

#: a partition's entry or outcome, as a summary shows it
E = TypeVar("E")


class TopicPolicy(TypedDict):
    """A topic's entry of the report's ``topics``: its cleanup.policy and ``policy_from``, the config entry that set
    it (see :meth:`jobs.rules.config.ConfigSet.origin_of`)."""

    policy: str
    policy_from: str


@dataclass
class RunReport:
    """What one run did (or, with --dry-run, would do)."""

    command: str
    log_dir: str
    now_ms: int
    dry_run: bool
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    finished_ms: int | None = None
    spark_startup_s: float | None = None
    #: when Spark was started ahead of need (the console script's early start; see
    #: :class:`jobs.engine.runtime.spark_session.EarlySession`): how long its start took from its beginning, of which
    #: the run waited ``spark_startup_s``; None when it started at need, or not at all
    spark_started_early_s: float | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)
    #: per topic in scope: its cleanup.policy and the config entry that set it
    topics: dict[str, "TopicPolicy"] = field(default_factory=dict)
    totals: dict[str, Any] = field(default_factory=dict)
    errors: list[ReportError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exit_code: int = 0
    #: a log dir on an object store: the run's requests, by kind, the bytes they moved, and the bytes GETs fetched
    #: against those of the segments in scope (see :class:`jobs.engine.report.store_usage.StoreUsage`); None on
    #: local disk
    store_traffic: dict[str, Any] | None = None
    #: seconds from the start of the run to :meth:`finish` (monotonic clock; Spark start-up included)
    elapsed_s: float | None = None
    #: the HTML report with the charts written by this run (``inspect --html``), else None
    html_report: str | None = None
    #: compact and retain: the outcomes ``partitions`` holds the entries of, in the same order (not in the JSON:
    #: the entries are their serialised form)
    outcomes: list[Outcome] = field(default_factory=list, repr=False)
    #: inspect: the rows ``partitions`` holds the entries of, in the same order (not in the JSON, as ``outcomes``)
    inspected: list[InspectRow] = field(default_factory=list, repr=False)
    #: inspect: the totals ``totals`` holds the serialised form of (not in the JSON, as ``inspected``)
    inspect_totals: InspectTotals | None = field(default=None, repr=False)
    #: partitions whose interrupted commits the run's recovery settled; None where the run recovers nothing (dry
    #: runs, inspect). In the JSON it is the first of ``totals``.
    recovered_partitions: int | None = None
    #: dry runs of compact and retain: each partition (or the log dir, ``partition`` None) whose interrupted commit
    #: a real run's recovery would settle first: its ``uri``, the ``actions`` recovery would take, and how this
    #: run ``planned`` it: ``after recovery`` (on the files recovery leaves), ``pending recovery`` (left out of
    #: the counts), ``not recovered`` (recovery would stop: left untouched) or ``unchanged``. In the JSON only
    #: when not empty.
    recovery_first: list[dict[str, Any]] = field(default_factory=list)

    def add(self, *outcomes: Outcome) -> None:
        """Partitions settled: their outcomes, and their entries (:meth:`~CompactionOutcome.to_entry`)."""
        for o in outcomes:
            self.outcomes.append(o)
            self.partitions.append(o.to_entry())

    def sort_partitions(self) -> None:
        """The outcomes and their entries by topic, then partition number."""
        pairs = sorted(zip(self.outcomes, self.partitions), key=lambda pair: (pair[0].topic, pair[0].partition))
        self.outcomes, self.partitions = [o for o, _ in pairs], [e for _, e in pairs]

    def __post_init__(self) -> None:
        self._t0 = time.monotonic()  # not a field: not part of the JSON

    def finish(self) -> "RunReport":
        self.finished_ms = time.time_ns() // 1_000_000
        self.elapsed_s = round(time.monotonic() - self._t0, 2)
        self.exit_code = 1 if self.errors else 0
        return self

    def to_json(self) -> str:
        doc = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("outcomes", "inspected", "inspect_totals", "recovered_partitions", "recovery_first")}
        if self.recovered_partitions is not None:
            doc["totals"] = {"recovered_partitions": self.recovered_partitions, **self.totals}
        if self.recovery_first:
            doc["recovery_first"] = self.recovery_first
        return json.dumps(doc, indent=2, sort_keys=False, default=str)


def write_report(report: RunReport, uri: str, options=None) -> None:
    """Write the JSON report atomically to a local path or an s3:// URI (``options``: the run's
    :class:`~segment_io.storage.StorageOptions`, so --s3-endpoint applies here too)."""
    storage = open_storage(uri, options)
    parent = uri.rsplit("/", 1)[0] if "/" in uri else "."
    if storage.local_path(uri) is not None:
        storage.makedirs(parent)
    storage.write_atomic(uri, report.to_json().encode("utf-8"))


def absolute_uri(uri: str) -> str:
    """``uri`` with a relative local path made absolute (reports and ledger rows name files that a reader in
    another directory, or a later run, must find); ``s3://`` and other URIs unchanged."""
    if scheme_of(uri) != "file" or uri.startswith("file://"):
        return uri
    return os.path.abspath(uri)


def purged_totals(totals: dict[str, Any]) -> str:
    """The summary line's ``; purged N .deleted file(s), SIZE`` part (empty when nothing was purged)."""
    if not totals.get("files_purged"):
        return ""
    return f"; purged {totals['files_purged']} .deleted file(s), {human_bytes(totals['bytes_purged'])}"


def human_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


#: The most partitions a summary shows one row each by default; beyond, a row per topic (``--per-partition``
#: asks for every partition's row, ``--per-topic`` for the rollup at any size).
PARTITION_ROWS_MAX = 50
#: What a summary's rows are: ``auto`` (per partition up to :data:`PARTITION_ROWS_MAX` partitions, else per
#: topic), ``partition`` or ``topic``.
ROW_LAYOUTS = ("auto", "partition", "topic")
#: A wrapped column narrower than this is moved below its row instead (a note wrapped into a sliver of a
#: column reads worse than one on its own line).
MIN_WRAP_WIDTH = 30
#: How far a note moved below its row is indented.
NOTE_INDENT = 4


def rows_per_partition(layout: str, partitions: int) -> bool:
    """Whether a summary of ``partitions`` partitions shows a row per partition under ``layout``
    (:data:`ROW_LAYOUTS`)."""
    if layout not in ROW_LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(ROW_LAYOUTS)}")
    return layout == "partition" or (layout == "auto" and partitions <= PARTITION_ROWS_MAX)


def output_width(stream: TextIO | None = None) -> int | None:
    """The width a table printed on ``stream`` (default stdout) should fit: the terminal's columns when it is
    a terminal, else None (a file or a pipe takes lines of any length: each row stays whole on one line)."""
    stream = stream or sys.stdout
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or fake stream
        return None
    return shutil.get_terminal_size().columns


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], *, width: int | None = None,
                 wrap: str = "note") -> str:
    """A plain-text table: ``columns`` are (key, heading) pairs; numbers align right. No cell is ever cut.

    With ``width`` (a terminal's columns) a table that would be wider first puts two-word headings on two
    lines, then wraps the last column when it is ``wrap`` (a free-text note) within the room left, or, when
    that room is under :data:`MIN_WRAP_WIDTH`, prints each row's note below the row, indented and wrapped to
    ``width``. Without ``width`` every row is one line, however long."""
    cells = [["-" if row.get(k) is None else str(row.get(k)) for k, _ in columns] for row in rows]
    headings = [[h] for _, h in columns]
    numeric = [bool(cells) and all(_numberish(r[i]) for r in cells) for i in range(len(columns))]
    flexible = bool(columns) and columns[-1][0] == wrap

    def widths(heads: list[list[str]], upto: int) -> list[int]:
        return [max([len(x) for x in heads[i]] + [len(r[i]) for r in cells]) for i in range(upto)]

    def total(ws: list[int]) -> int:
        return sum(ws) + 2 * (len(ws) - 1)

    full = widths(headings, len(columns))
    if width is None or total(full) <= width:
        return _table_lines(headings, cells, full, numeric, None)
    headings = [_two_lines(h[0]) for h in headings]
    full = widths(headings, len(columns))
    if total(full) <= width or not flexible:
        return _table_lines(headings, cells, full, numeric, None)
    fixed = widths(headings, len(columns) - 1)
    room = width - total(fixed) - 2
    if room >= MIN_WRAP_WIDTH:
        return _table_lines(headings, cells, fixed + [room], numeric, ("wrap", room))
    return _table_lines(headings[:-1], cells, fixed, numeric, ("below", max(width - NOTE_INDENT, MIN_WRAP_WIDTH)))


def _two_lines(heading: str) -> list[str]:
    """A heading of several words on two lines, split at the space nearest its middle."""
    spaces = [i for i, c in enumerate(heading) if c == " "]
    if not spaces:
        return [heading]
    cut = min(spaces, key=lambda i: abs(i - len(heading) / 2))
    return [heading[:cut], heading[cut + 1:]]


def _table_lines(headings: list[list[str]], cells: list[list[str]], widths: list[int], numeric: list[bool],
                 last: tuple[str, int] | None) -> str:
    """The lines of :func:`render_table`: ``last`` says what becomes of the last column (``("wrap", width)``:
    wrapped within its column; ``("below", width)``: not a column, printed under each row)."""
    n = len(widths)
    depth = max(len(h) for h in headings) if headings else 1
    lines = []
    for line in range(depth):  # headings sit on their last line(s), bottom-aligned
        parts = []
        for i in range(n):
            h = headings[i]
            text = h[line - (depth - len(h))] if line >= depth - len(h) else ""
            parts.append(text.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        shown = r[:n]
        if last is not None and last[0] == "wrap":
            wrapped = textwrap.wrap(shown[-1], last[1], break_long_words=True, break_on_hyphens=False) or [""]
            shown = shown[:-1] + [wrapped[0]]
        else:
            wrapped = []
        parts = [(c.rjust(w) if numeric[i] else c.ljust(w)) for i, (c, w) in enumerate(zip(shown, widths))]
        lines.append("  ".join(parts).rstrip())
        indent = " " * (sum(widths[:-1]) + 2 * (n - 1))
        lines.extend(indent + more for more in wrapped[1:])
        if last is not None and last[0] == "below" and r[-1] not in ("", "-"):
            lines.extend(" " * NOTE_INDENT + x for x in textwrap.wrap(r[-1], last[1], break_long_words=True,
                                                                       break_on_hyphens=False))
    return "\n".join(lines)


def one_line(text: str) -> str:
    """``text`` on one line (whitespace runs, newlines included, made one space), never cut: what a table's note
    holds (:func:`render_table` wraps it to the terminal)."""
    return " ".join(text.split())


def short_error(error: Any) -> str:
    """A report entry's ``error`` (a string, or a dict with kind/detail/file/position/offset) in a few words:
    ``CrcMismatchError in 00000000000000000000.log byte 70, offset 2: ...``."""
    if not isinstance(error, dict):
        return str(error)
    where = ", ".join(p for p in (
        str(error["file"]).rsplit("/", 1)[-1] if error.get("file") else None,
        f"byte {error['position']}" if error.get("position") is not None else None,
        f"offset {error['offset']}" if error.get("offset") is not None else None) if p)
    kind = error.get("kind") or "error"
    return f"{kind}{' in ' + where if where else ''}: {error.get('detail', '')}"


def problem_notes(entry: dict[str, Any], *, label: str = "") -> list[str]:
    """What went wrong in one partition's report entry, for the summary's note column, whichever job or
    check put it there: ``REFUSED: <why>`` for an entry whose action is ``refused`` (the delete-fraction limit
    left it untouched: not a failure, and never called one), ``FAILED: <short error>`` for any other
    ``error``, ``warning: ...`` for ``warnings``."""
    return notes_of_problems(entry.get("action"), str(entry.get("reason") or ""), entry.get("error"),
                             entry.get("warnings") or (), label=label)


def notes_of_problems(action: str | None, reason: str, error: Any, warnings: Sequence[str], *,
                      label: str = "") -> list[str]:
    """:func:`problem_notes` of a partition's action, reason, error (None when it has none) and warnings."""
    notes = []
    prefix = f"{label}: " if label else ""
    if action == "refused":
        notes.append(f"{prefix}{refused_note(reason)}")
    elif error:
        notes.append(f"{prefix}FAILED: {short_error(error)}")
    warnings = [w for w in warnings if w]
    if warnings:
        more = f" (+{len(warnings) - 1} more)" if len(warnings) > 1 else ""
        notes.append(f"{prefix}warning: {warnings[0]}{more}")
    return notes


#: The one word every text output uses for a partition the delete-fraction limit left untouched (the report's
#: ``action`` is ``refused``; ``FAILED`` is kept for real failures).
REFUSED = "REFUSED"


def refused_note(reason: str) -> str:
    """``REFUSED: would delete 90.6% of orders' bytes (...)`` for a refused partition (from its ``reason``)."""
    return f"{REFUSED}: {reason.removeprefix('refused: ')}"


def outcome_totals(totals: Mapping[str, Any]) -> str:
    """The totals line's ``; 12 partition(s) REFUSED ...; 1 partition(s) FAILED ...`` part."""
    out = ""
    if totals.get("refused"):
        out += (f"; {totals['refused']} partition(s) {REFUSED} by the delete-fraction limit and left untouched "
                f"(--max-delete-fraction)")
    if totals.get("failed"):
        out += f"; {totals['failed']} partition(s) FAILED (see the notes; full errors on stderr)"
    return out


def partition_order(entry: dict[str, Any]) -> tuple[str, int]:
    """Sort key of report entries: topic, then partition number (orders-2 before orders-10)."""
    return str(entry.get("topic", "")), int(entry.get("partition", -1))


def listed(names: Sequence[str], shown: int) -> str:
    """The first ``shown`` names, comma-separated, and how many more there are (``a, b and 3 more``)."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def count_note(n: int, what: str) -> str:
    """``3 FAILED`` style counts for a topic row's note (empty when ``n`` is 0)."""
    return f"{n} {what}" if n else ""


def shared_note(notes: Iterable[str | None]) -> str:
    """The value every partition of a topic row shares (its policy), or "" when they differ."""
    distinct = {n for n in notes if n}
    return next(iter(distinct)) if len(distinct) == 1 else ""


#: Distinct notes a topic row's note names at most (then it counts the partitions whose notes it leaves out).
TOPIC_NOTES_MAX = 2


def partitions_note(notes: Sequence[str | None]) -> str:
    """What a topic row says of its partitions' notes (``notes``: one per partition, None or "" where a partition
    has none), true of every partition it summarises: a note every partition has, once; a note only some have,
    with how many (``2 of 3 partition(s): no segment past retention``), the commonest first and at most
    :data:`TOPIC_NOTES_MAX` of them, then how many partitions say something else. "" when none has a note."""
    counts: dict[str, int] = {}
    for note in notes:
        if note:
            counts[note] = counts.get(note, 0) + 1
    if not counts:
        return ""
    n = len(notes)
    if len(counts) == 1 and next(iter(counts.values())) == n:
        return next(iter(counts))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{k} of {n} partition(s): {note}" for note, k in ranked[:TOPIC_NOTES_MAX]]
    rest = sum(k for _, k in ranked[TOPIC_NOTES_MAX:])
    if rest:
        parts.append(f"{rest} of {n} partition(s) other notes (--per-partition)")
    return "; ".join(parts)


#: Partitions a per-topic summary lists below its table at most (the failed and partial ones first).
ATTENTION_ROWS_MAX = 20


def attention_table(entries: Sequence[E], row: Callable[[E], dict[str, Any]], columns: Sequence[tuple[str, str]], *,
                    width: int | None) -> list[str]:
    """Below a per-topic summary: the partitions worth a look (``entries``: failed, partial, with warnings), one
    row each as in the per-partition table, at most :data:`ATTENTION_ROWS_MAX`; empty when there are none."""
    if not entries:
        return []
    shown = list(entries)[:ATTENTION_ROWS_MAX]
    more = len(entries) - len(shown)
    head = (f"partitions to look at ({len(entries)}"
            + (f", the first {len(shown)} shown" if more else "") + "; --per-partition lists every partition):")
    return ["", head, render_table([row(e) for e in shown], columns, width=width)]


def policy_origins(report: RunReport, *, shown: int = 6) -> str | None:
    """The summary line saying where each topic's cleanup.policy comes from, topics grouped by the entry:
    ``cleanup.policy: compact from topics.toml [topics."orders"] (orders); delete from Kafka's default (clicks)``.
    None when the run covered no topic."""
    groups: dict[tuple[str, str], list[str]] = {}
    for topic, t in sorted(report.topics.items()):
        groups.setdefault((t["policy"], t["policy_from"]), []).append(topic)
    if not groups:
        return None
    parts = [f"{policy} from {origin} ({', '.join(topics[:shown])}"
             + (f" and {len(topics) - shown} more)" if len(topics) > shown else ")")
             for (policy, origin), topics in groups.items()]
    return "cleanup.policy: " + "; ".join(parts)


def render_footer(report: RunReport, processed_bytes: int, what: str) -> str:
    """The summary's last line: how long the run took and how fast it went through ``processed_bytes``
    (``what`` says which bytes: "compacted", "in scope"). The rate excludes Spark's start-up, which does
    not grow with the data."""
    elapsed = report.elapsed_s or 0.0
    startup = report.spark_startup_s or 0.0
    work = max(elapsed - startup, 0.0)
    mbps = processed_bytes / 1e6 / work if work > 0 else 0.0
    shown = f"{mbps:.0f}" if mbps >= 10 else f"{mbps:.1f}" if mbps >= 0.1 else f"{mbps:.3f}"
    rate = f", {shown} MB/s excluding start-up" if mbps else ""
    startup_text = f" (Spark start-up {startup:.1f}s)" if report.spark_startup_s is not None else ""
    if report.spark_started_early_s is not None:  # the rate excludes only what the run waited for
        startup_text = f" (Spark start-up {report.spark_started_early_s:.1f}s, started early: {startup:.1f}s waited)"
    return f"elapsed {elapsed:.1f}s{startup_text}; {human_bytes(processed_bytes)} {what}{rate}"


def render_stopped_summary(report: RunReport, *, width: int | None = None) -> str:
    """The summary of a run whose work stopped before it could summarise itself: the partitions it reported
    so far, its errors, and the elapsed time."""
    rows = [{"partition": f"{e.get('topic')}-{e.get('partition')}", "action": e.get("action"),
             "note": one_line("; ".join(problem_notes(e))) or None}
            for e in sorted(report.partitions, key=partition_order)]
    columns = (("partition", "partition"), ("action", "action"), ("note", "note"))
    lines = [render_table(rows, columns, width=width), ""] if rows else []
    lines.append(f"{report.command} stopped before the end: {len(report.errors)} error(s), on stderr and in the report")
    lines.append(f"elapsed {report.elapsed_s or 0:.1f}s")
    return "\n".join(lines)


def _numberish(s: str) -> bool:
    t = s.replace(".", "", 1).replace("-", "", 1).replace("%", "").replace(",", "")
    for unit in (" B", " KB", " MB", " GB", " TB"):
        if t.endswith(unit):
            t = t[: -len(unit)]
    return t.isdigit() or s == "-"


def append_ledger(uri: str, report: RunReport, rows: Iterable[Mapping[str, Any]], options=None) -> int:
    """Append ``rows`` (one per partition: :func:`jobs.engine.report.outcomes.ledger_rows` of the report's outcomes) to
    the Delta table at ``uri`` (created on first use) and return how many.

    Columns: run_id, command, log_dir, now_ms, dry_run, finished_ms (the report's), then each row's topic,
    partition, action, reason and numbers (:data:`~jobs.engine.report.outcomes.LEDGER_NUMBERS`, 0 where a row has
    none). Written through Spark's Delta writer when the job's Spark session has Delta Lake
    (:mod:`jobs.engine.runtime.delta_spark`: concurrent runs are then serialised by Delta's commit protocol), else with
    the embedded ``deltalake`` package; any Delta reader reads either.
    """
    from deltalake import write_deltalake  # start-up: ~15 ms on every command; the ledger only

    run = {"run_id": report.run_id, "command": report.command, "log_dir": report.log_dir, "now_ms": report.now_ms,
           "dry_run": report.dry_run, "finished_ms": report.finished_ms or 0}
    out = [{**run, **dict.fromkeys(LEDGER_NUMBERS, 0), **row} for row in rows]
    if not out:
        return 0
    schema = pa.schema([("run_id", pa.string()), ("command", pa.string()), ("log_dir", pa.string()),
                        ("now_ms", pa.int64()), ("dry_run", pa.bool_()), ("finished_ms", pa.int64()),
                        ("topic", pa.string()), ("partition", pa.int32()), ("action", pa.string()),
                        ("reason", pa.string())] + [(k, pa.int64()) for k in LEDGER_NUMBERS])
    table = pa.Table.from_pylist(out, schema=schema)
    spark = delta_session(uri)
    if spark is not None:
        append_with_spark(spark, uri, table)
        return len(out)
    write_deltalake(uri, table, mode="append", storage_options=delta_storage_options(uri, options))
    return len(out)


def delta_storage_options(uri: str, options: StorageOptions | None = None) -> dict[str, str] | None:
    """What ``deltalake`` needs to reach the Delta table at ``uri`` (None for a local path), from segjobs'
    StorageOptions (default: the environment), as the jobs use them."""
    if not uri.startswith("s3://"):
        return None
    return _object_store_options(options or StorageOptions.from_env())


def _object_store_options(options) -> dict[str, str]:
    """StorageOptions in the key names delta-rs' object store takes."""
    out = {}
    for key, value in (("AWS_ENDPOINT_URL", options.endpoint_url), ("AWS_REGION", options.region),
                       ("AWS_ACCESS_KEY_ID", options.access_key_id),
                       ("AWS_SECRET_ACCESS_KEY", options.secret_access_key),
                       ("AWS_SESSION_TOKEN", options.session_token)):
        if value:
            out[key] = value
    if options.endpoint_url and options.endpoint_url.startswith("http://"):
        out["AWS_ALLOW_HTTP"] = "true"
    # delta-rs needs a locking provider or this flag for concurrent writers on S3; the job holds the log
    # dir's lease, and ledger appends are one writer per run.
    out["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return out
