"""Progress events: what a run says while it works, as one line of text or one JSON object.

Every progress line a job prints (:class:`jobs.engine.report.run_report.Progress`) is an event first:

* ``ts``: when it happened, ISO-8601 UTC with milliseconds (``2026-11-24T02:00:13.402Z``);
* ``command``: ``compact``, ``retain``, ``inspect``, ``recover``;
* ``elapsed_s``: seconds since the run started (monotonic clock);
* ``level``: ``info`` (silenced by ``--quiet``), ``notice`` (what the user must know about the run as a
  whole: the wall-clock instant it acted at, a warning about its input) or ``error`` (a partition failed, a
  report could not be written); notices and errors are never silenced;
* ``event``: a stable, dotted name to filter on (``scan.done``, ``compact.partition``, ``retain.partition``,
  ...; :data:`EVENTS` lists them), ``message`` when the emitter gave none;
* ``message``: the text line's words;
* structured fields where the emitter knows them: ``partition`` (``orders-3``), ``partitions`` (a count),
  ``seconds``, ``bytes_removed``, ``records_removed``, ``segments``, ``uri``, ... (named as in the JSON report).

Text mode (the default) prints :meth:`ProgressEvent.text`, exactly the lines segjobs always printed;
``--log-format json`` prints :meth:`ProgressEvent.to_json`, one object per line. A progress sink of the Python
API (:data:`jobs.engine.frame.options.ProgressSink`) receives a :class:`ProgressLine`: a ``str`` holding the text
line, so a sink written for text keeps working, with the event on its ``event`` attribute.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, TextIO

from jobs.rules.timeutil import format_instant

#: The levels, from least to most severe.
LEVELS = ("info", "notice", "error")

#: The keys every JSON event has; structured fields may not reuse them.
BASE_KEYS = ("ts", "command", "elapsed_s", "level", "event", "message")

#: The event names segjobs emits (documentation and a check in the tests; an emitter may add more).
EVENTS = {
    "message": "a line given without an event name",
    "notice": "a notice given without an event name",
    "error": "an error given without an event name",
    "failed": "the command stopped before doing anything (exit code 2) or was interrupted",
    "run.start": "the log dir and the instant the run acts at",
    "run.now": "no --now was given: the wall-clock instant chosen (pass it as --now to repeat the run)",
    "lease.notice": "the log dir's lock or lease was taken over from a dead run",
    "lease.lost": "the S3 lease was lost: the run stopped before its next commit",
    "lock.held": "a run that takes no lock (inspect, a dry run) found the log dir's lock or lease held: what it read "
                 "may be caught mid-write",
    "recovery.done": "what recovery did to the partitions interrupted runs left (partitions: how many), per partition "
                     "or per topic summed",
    "recovery.failed": "a partition recovery could not settle (left untouched)",
    "recovery.planned": "a dry run: what a real run's recovery would do first, planned on the files it leaves",
    "recovery.pending": "a dry run: a partition left out of the counts until `segjobs recover` has run",
    "recovery.foreign": "recovery made live a .swap no segjobs run left (a broker's cleaner's), deleting the live "
                        "segments it replaces as a broker's loader does (a dry run: would)",
    "config.shadowed": "a topic's config key is overridden by a more specific entry",
    "config.unmatched": "a config entry (a glob, a name of Kafka's own topics, an imported table) matches no topic "
                        "of the log dir: no effect",
    "spark.ready": "Spark started (spark_startup_s: how long the run waited for it): only when some task needs it "
                   "(a run with nothing due starts none); spark_started_early_s: how long its start took when it "
                   "was started ahead of need, overlapping the run's own work",
    "scan.start": "the partitions are being scanned (spark_startup_s: Spark's start-up when it started first)",
    "scan.progress": "how far a scan that reads whole logs is (done: partitions scanned, of: in all; seconds since "
                     "its start): when results come back, and every few seconds while none does "
                     "(jobs.engine.frame.packed_tasks)",
    "scan.done": "every partition in scope was scanned (read_in_full: how many small ones that may be due had "
                 "their batch headers and control records read at once, for their transaction state)",
    "partition.unreadable": "a partition could not be read (left untouched)",
    "partition.rejected": "a directory named like a partition is not one (its topic or number Kafka would not "
                          "write): never read nor written, reported (exit code 1)",
    "checkpoint.orphan": "a log-start-offset-checkpoint entry names a partition the log dir does not hold",
    "data.stale": "the data is older than any retention at the wall clock (a backup?)",
    "scan.full": "how many more partitions compaction read the batch headers and control records of, in tasks "
                 "or (on_driver) on the driver's threads, for their transaction state (those that may be due; the "
                 "others are not)",
    "compact.selected": "how many partitions compaction selected",
    "compact.partition": "a partition was compacted (or measured, in a dry run)",
    "compact.failed": "a partition's compaction failed",
    "compact.checkpoint_reset": "a cleaner-offset-checkpoint entry outside the log was reset to the log start, as "
                                "Kafka's cleaner does (a warning)",
    "index.rebuilt": "a wrong .index/.timeindex was rebuilt by the rewrite",
    "retain.partition": "a partition's retention (deleted segments, or nothing to delete)",
    "retain.failed": "a partition's retention failed",
    "retain.refused": "the delete-fraction limit left a topic untouched",
    "inspect.start": "how many partitions are being inspected",
    "inspect.progress": "how far the inspection tasks are (done: partitions inspected, of: in all), as scan.progress",
    "plan.written": "the plan file of a dry run was written",
    "store.traffic": "a log dir on an object store: the run's requests by kind (get, head, list, put, copy, delete, "
                     "other; requests: their sum), the bytes GETs fetched (get_bytes) and PUTs sent (put_bytes), the "
                     "bytes of the segments in scope (segment_bytes) and get_bytes over them (reads_of_segments)",
    "report.written": "the JSON report was written",
    "html.written": "the HTML report with the charts was written (inspect --html)",
    "html.failed": "the HTML report could not be written",
    "report.failed": "the JSON report could not be written",
    "ledger.appended": "rows were appended to the Delta ledger",
    "ledger.failed": "the Delta ledger could not be appended to",
}


@dataclass(frozen=True)
class ProgressEvent:
    """One progress event (see the module docstring)."""

    command: str
    level: str
    event: str
    message: str
    elapsed_s: float
    #: wall-clock time of the event, epoch milliseconds
    ts_ms: int
    fields: Mapping[str, Any] = field(default_factory=dict)
    #: how the text line looks: ``timed`` (``[compact   1.2s] message``) or ``named`` (``segjobs compact: message``)
    style: str = "timed"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"progress event level {self.level!r}: expected one of {', '.join(LEVELS)}")
        clash = sorted(set(self.fields) & set(BASE_KEYS))
        if clash:
            raise ValueError(f"progress event {self.event!r}: field(s) {', '.join(clash)} would overwrite the "
                             f"event's own keys; name them otherwise")

    @property
    def ts(self) -> str:
        return format_instant(self.ts_ms)

    @property
    def partition(self) -> str | None:
        """The partition the event is about (``orders-3``), when it is about one."""
        value = self.fields.get("partition")
        return None if value is None else str(value)

    def text(self) -> str:
        """The line text mode prints."""
        if self.style == "named":
            return f"segjobs {self.command}: {self.message}"
        return f"[{self.command} {self.elapsed_s:6.1f}s] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the base keys first, then the structured fields."""
        return {"ts": self.ts, "command": self.command, "elapsed_s": round(self.elapsed_s, 3), "level": self.level,
                "event": self.event, "message": self.message, **self.fields}

    def to_json(self) -> str:
        """One line of JSON (newlines inside the message are escaped). Values JSON has no type for (a path
        object, say) are written as their ``str``."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)


class ProgressLine(str):
    """A progress line as a progress sink receives it: the text line itself (a ``str``, so sinks written for
    text need no change), and the :class:`ProgressEvent` it came from on :attr:`event`."""

    event: ProgressEvent

    def __new__(cls, event: ProgressEvent) -> "ProgressLine":
        line = super().__new__(cls, event.text())
        line.event = event
        return line


def event_of(line: str, command: str = "") -> ProgressEvent:
    """The event of a progress line; a plain string (from code that predates events) becomes an ``info``
    event named ``message``."""
    if isinstance(line, ProgressLine):
        return line.event
    return ProgressEvent(command=command, level="info", event="message", message=str(line), elapsed_s=0.0,
                         ts_ms=0)


#: the ``--log-format`` choices
LOG_FORMATS = ("text", "json")


def stderr_sink(log_format: str = "text", *, min_level: str = "info", stream: TextIO | None = None,
                live: bool | None = None) -> "StderrSink":
    """A progress sink printing on stderr (or ``stream``): each event's text line, or with ``log_format="json"``
    its JSON object, one per line. Events below ``min_level`` are dropped (``"notice"``: what ``--quiet``
    keeps). ``live`` (text only; None: when the stream is a terminal, checked at each line) draws the events
    that count partitions through a stage (those with ``done`` and ``of`` fields) as one status line updated
    in place, with a bar: see :class:`StderrSink`."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    if min_level not in LEVELS:
        raise ValueError(f"min_level {min_level!r}: expected one of {', '.join(LEVELS)}")
    return StderrSink(log_format, LEVELS.index(min_level), stream, live)


#: Cells of the progress bar on a terminal.
BAR_CELLS = 24


class StderrSink:
    """The progress sink of the command line (made by :func:`stderr_sink`).

    Not on a terminal (a file, a pipe, Airflow's task log), and always with ``--log-format json``: exactly one
    line per event, the text line (:meth:`ProgressEvent.text`) or the JSON object. On a terminal, in text mode,
    an ``info`` event with ``done`` and ``of`` fields (a partition of a stage: ``compact.partition``,
    ``retain.partition``) redraws one status line in place: ``[compact  12.3s] #####----- orders-7: compacted
    in 0.04s [812/2000, 103.2 MB of 254.1 MB, ETA 41s]``, cut to the terminal's width;
    any other line (the stage's start and end, notices, every error) is printed above it, whole, except that
    lines the same as the one before but for their partition (a topic's refusal, partition after partition) are
    counted on one line redrawn in place: ``... the same for 99 more partition(s): orders-1 to orders-99``. The
    status line stays on the screen when its stage completes (``done == of``) or the sink is closed
    (:meth:`close`, which the command line calls at the end of the run), so the last state is never lost."""

    def __init__(self, log_format: str, floor: int, stream: TextIO | None, live: bool | None) -> None:
        self.log_format = log_format
        self.floor = floor
        self.stream = stream
        self.live = live
        self._status: str | None = None  # the status line on the screen, if one is
        #: lines the same but for their partition, after the first: (key, first, last partition, how many)
        self._repeat: tuple[tuple[str, str, str] | None, str | None, str | None, int] = (None, None, None, 0)
        self._lock = threading.Lock()

    def _out(self) -> TextIO:
        # sys.stderr is looked up at each line: under spark-submit it is replaced once the JVM is reachable
        # (see jobs.engine.runtime.spark_session.separate_stderr_under_spark_submit).
        return self.stream or sys.stderr

    def _is_live(self, out: TextIO) -> bool:
        if self.log_format != "text":
            return False
        if self.live is not None:
            return self.live
        try:
            return out.isatty()
        except (AttributeError, ValueError):
            return False

    def __call__(self, line: str) -> None:
        event = event_of(line)
        if LEVELS.index(event.level) < self.floor:
            return
        out = self._out()
        with self._lock:
            if not self._is_live(out):
                print(event.to_json() if self.log_format == "json" else str(line), file=out, flush=True)
                return
            counted = event.level == "info" and isinstance(event.fields.get("done"), int) \
                and isinstance(event.fields.get("of"), int)
            if counted:
                self._end_repeats(out)
                self._status = self._status_line(event, out)
                out.write("\r" + self._status + "\x1b[K")
                if event.fields["done"] >= event.fields["of"]:  # the stage is complete: its last state stays
                    out.write("\n")
                    self._status = None
                out.flush()
                return
            key = self._repeat_key(event)
            if key is not None and key == self._repeat[0]:
                # the same line as the one before but for the partition (a topic's refusal, partition after
                # partition): counted on one line redrawn in place
                self._repeat = (key, self._repeat[1] or event.partition, event.partition, self._repeat[3] + 1)
                out.write("\r" + self._repeat_line(out) + "\x1b[K")
                out.flush()
                return
            self._end_repeats(out)
            if self._status is not None:
                out.write("\r\x1b[K")  # the line goes above the status line, which is drawn again below it
            out.write(str(line) + "\n")
            self._repeat = (key, None, None, 0)
            if self._status is not None:
                out.write(self._status + "\x1b[K")
            out.flush()

    @staticmethod
    def _repeat_key(event: ProgressEvent) -> tuple[str, str, str] | None:
        """What makes two lines the same but for their partition: the event, level and message with the partition's
        name taken out (None for a line about no partition)."""
        partition = event.partition
        if not partition or partition not in event.message:
            return None
        return event.event, event.level, event.message.replace(partition, "", 1)

    def _repeat_line(self, out: TextIO) -> str:
        _, first, last, n = self._repeat
        return _fit(f"    ... the same for {n} more partition(s): {first}" + (f" to {last}" if n > 1 else ""), out)

    def _end_repeats(self, out: TextIO) -> None:
        """Leave the count of repeated lines on the screen (the status line, if any, is drawn after it)."""
        if self._repeat[3]:
            if self._status is not None:
                out.write("\r" + self._repeat_line(out) + "\x1b[K\n" + self._status + "\x1b[K")
            else:
                out.write("\n")
        self._repeat = (None, None, None, 0)

    def close(self) -> None:
        """End the status line on the screen, if one is (it stays, as the last state of its stage), and the count
        of repeated lines."""
        with self._lock:
            out = self._out()
            self._end_repeats(out)
            if self._status is not None:
                out.write("\n")
                self._status = None
            out.flush()

    @staticmethod
    def _status_line(event: ProgressEvent, out: TextIO) -> str:
        """The status line of a counted event, at most the terminal's width less one column (so the cursor
        never wraps to a new line)."""
        done, of = int(event.fields["done"]), max(int(event.fields["of"]), 1)
        unicode = (getattr(out, "encoding", None) or "").lower().replace("-", "") in ("utf8", "utf_8")
        full, empty = ("\u2588", "\u2591") if unicode else ("#", "-")
        filled = min(BAR_CELLS, BAR_CELLS * done // of)
        bar = full * filled + empty * (BAR_CELLS - filled)
        # the message says the count itself ("[812/2000, ...]", "812/2000 partitions: ...")
        return _fit(f"{event.text().split('] ', 1)[0]}] {bar} {event.message}", out)


def _fit(text: str, out: TextIO) -> str:
    """``text`` cut to the terminal's width less one column (so the cursor never wraps to a new line): for lines
    redrawn in place only; every other line is printed whole."""
    try:
        columns = os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 80
    return text[: max(columns - 1, 20)]


__all__ = ["EVENTS", "LEVELS", "LOG_FORMATS", "ProgressEvent", "ProgressLine", "StderrSink", "event_of",
           "stderr_sink"]
