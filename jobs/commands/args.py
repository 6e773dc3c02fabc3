"""Command-line options shared by the jobs (compact, retain, inspect): one definition, one meaning."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from jobs.engine.frame.options import MIN_SORT_BUCKET_BYTES, MIN_SORT_BUCKET_TEXT, InvalidOption
from jobs.engine.report.events import LOG_FORMATS, ProgressEvent, stderr_sink
from jobs.engine.report.run_report import PARTITION_ROWS_MAX, output_width
from jobs.logdir.tiered import DEFAULT_REMOTE_LAYOUT, READABLE_LAYOUTS, RemoteOptions
from jobs.rules.map_capacity import BYTES_PER_ENTRY, LOAD_FACTOR, MIN_BUFFER_BYTES
from segment_io.errors import UsageError
from segment_io.storage.options import StorageOptions
from segment_io.units import parse_duration, parse_size

if TYPE_CHECKING:
    from jobs.api import JobResult
    from jobs.engine.frame.options import ProgressSink

#: What every job can print on stdout (--format): the human summary table, or the JSON report.
OUTPUT_FORMATS = ("table", "json")

#: The metavar of an option that takes an instant (--now), and the help's words on how to write one
#: (:func:`jobs.rules.timeutil.parse_instant`), said by every such option: a reader may take a time without a
#: zone for local time, and segjobs reads it as UTC.
INSTANT_METAVAR = "EPOCH_MS|ISO8601"
INSTANT_FORMS = "epoch milliseconds or ISO-8601, e.g. 2026-11-22T02:00:00Z; a time without a zone is UTC"


#: The titles of the option groups a --help shows after the command's own options, in this order: a long help read
#: by what one looks for (what to work on, how to stay safe, what comes out, where it runs).
SCOPE_GROUP = "what to work on"
SAFETY_GROUP = "safety and plans"
OUTPUT_GROUP = "output and reports"
RUNTIME_GROUP = "Spark, S3 and limits"
_GROUP_ORDER = (SCOPE_GROUP, SAFETY_GROUP, OUTPUT_GROUP, RUNTIME_GROUP)

Group = argparse.ArgumentParser | argparse._ArgumentGroup


def option_group(p: Group, title: str) -> Group:
    """The group of ``p``'s options titled ``title`` (one of :data:`_GROUP_ORDER`), made on first use after the
    groups that come before it: options added in any order show in the same sections of every --help. ``p`` a
    group already: itself (a caller that grouped the options)."""
    if not isinstance(p, argparse.ArgumentParser):
        return p
    for group in p._action_groups:
        if group.title == title:
            return group
    for earlier in _GROUP_ORDER[:_GROUP_ORDER.index(title)]:
        option_group(p, earlier)
    return p.add_argument_group(title)


def add_log_dir_options(p: argparse.ArgumentParser, *, destructive: bool = True, scope_note: str = "",
                        formats: tuple[str, ...] = OUTPUT_FORMATS) -> None:
    """--log-dir, --config, --set, --topic, --partition, --now, --report, --master, the S3 options and the
    output options (--format, --quiet, --verbose), each in its group (:func:`option_group`). ``scope_note`` ends
    the --topic/--partition help with what naming partitions means to the command; ``formats`` are the --format
    choices (the first is the default)."""
    scope, safety = option_group(p, SCOPE_GROUP), option_group(p, SAFETY_GROUP)
    output, runtime = option_group(p, OUTPUT_GROUP), option_group(p, RUNTIME_GROUP)
    scope.add_argument("--log-dir", required=True, metavar="URI",
                   help="Kafka log dir: a local path or s3://bucket/prefix")
    scope.add_argument("--config", metavar="FILE", help="topic configuration TOML (see conf/topics.toml); a "
                                                     "[topics.\"NAME\"] table naming no topic of the log dir is an "
                                                     "error (exit 2), a glob matching none a warning")
    scope.add_argument("--set", action="append", default=[], metavar="TOPIC_GLOB:KEY=VALUE",
                   help="override one topic config, e.g. 'orders*:min.cleanable.dirty.ratio=0.1' (repeatable); an "
                        "exact name the log dir does not hold is an error (exit 2), a glob matching none a warning")
    scope.add_argument("--topic", action="append", default=[], metavar="GLOB",
                   help="only topics matching this glob (repeatable; default: all)" + scope_note)
    scope.add_argument("--partition", action="append", default=[], metavar="TOPIC-N",
                   help="only this partition, e.g. orders-3 (repeatable)" + scope_note)
    scope.add_argument("--now", metavar=INSTANT_METAVAR,
                   help="the instant the job acts at (default: the wall clock); fixes horizons and ages, "
                        f"so re-running with the same --now reproduces the same decisions; {INSTANT_FORMS}")
    if destructive:
        safety.add_argument("--dry-run", action="store_true",
                       help="write nothing; report exactly what a real run would remove. Takes no lock and recovers "
                            "nothing: over a commit a crashed run left unfinished it reports what a real run's "
                            "recovery would do first and plans on the files recovery leaves; a partition it "
                            "cannot read that way (S3 staged copies; renames, with --plan) is PENDING RECOVERY, "
                            "left out of the counts: run `segjobs recover` first for exact counts")
        runtime.add_argument("--lease-ttl", metavar="DURATION",
                       help="S3: how long the log dir's lease lasts without renewal (default 2m, or "
                            "$SEGJOBS_LEASE_TTL); a heartbeat renews it every third of that while the job runs, "
                            "so a killed run blocks others for at most this long")
    add_max_batch_bytes_option(runtime)
    output.add_argument("--report", metavar="FILE.json", help="write the JSON report here (local path or s3:// URI)")
    output.add_argument("--ledger", metavar="URI",
                   help="append one row per partition to this Delta table (default: none)")
    runtime.add_argument("--master", metavar="URL",
                   help="Spark master (default: what spark-submit set, else local[*])")
    add_s3_options(runtime)
    output.add_argument("--quiet", action="store_true", help="no progress lines on stderr (failures are still shown)")
    _add_output_options(output, formats)


def add_s3_options(p: Group) -> None:
    """Where S3 is and its region (read back by :func:`storage_options_from_args`)."""
    p = option_group(p, RUNTIME_GROUP)
    p.add_argument("--s3-endpoint", metavar="URL", help="S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
    p.add_argument("--s3-region", metavar="REGION", help="S3 region (default: from the AWS configuration)")


def add_remote_options(p: argparse.ArgumentParser) -> None:
    """``--remote`` and ``--remote-layout``: read tiered topics as one log, their finished remote segments below the
    local log and then the local segments (read back by :func:`remote_options_from_args`)."""
    p.add_argument("--remote", metavar="URI",
                   help="the remote store of tiered topics (local path or s3://bucket/prefix; for "
                        "local-tiered-storage its dir setting or the kafka-tiered-storage directory in it): each "
                        "partition is read as one log, its finished remote segments (per the log dir's "
                        "__remote_log_metadata) below the local log, then its local segments")
    p.add_argument("--remote-layout", default=DEFAULT_REMOTE_LAYOUT, metavar="NAME",
                   help=f"how the remote store names its objects: {', '.join(READABLE_LAYOUTS)} (default: "
                        f"{DEFAULT_REMOTE_LAYOUT})")


def remote_options_from_args(args: argparse.Namespace) -> RemoteOptions | None:
    """The remote store of ``--remote``/``--remote-layout``; None without ``--remote``."""
    remote = getattr(args, "remote", None)
    if not remote:
        if getattr(args, "remote_layout", DEFAULT_REMOTE_LAYOUT) != DEFAULT_REMOTE_LAYOUT:
            raise UsageError("--remote-layout needs --remote, the remote store's root")
        return None
    return RemoteOptions(remote, args.remote_layout)


def add_max_batch_bytes_option(p: Group) -> None:
    """--max-batch-bytes: the per-batch decompression bound (:func:`segment_io.compression.max_batch_bytes`)."""
    option_group(p, RUNTIME_GROUP).add_argument("--max-batch-bytes", type=positive_size_arg, metavar="SIZE",
                   help="the most bytes one compressed batch may inflate to before it is reported as corrupt "
                        "(a decompression bomb); default 256MiB, or $SEGJOBS_MAX_BATCH_BYTES")


def _add_output_options(p: Group, formats: tuple[str, ...]) -> None:
    """Where a job's output goes: stdout carries the result only (the summary table or, for scripts, the JSON
    report), stderr the progress lines and errors, and Spark's own log lines only when asked for."""
    p.add_argument("--format", "--output", dest="format", choices=formats, default=formats[0],
                   help=f"what stdout gets: {formats[0]} (default) or " + ", ".join(formats[1:])
                        + "; json is the whole report (the same document as --report), and nothing else goes to "
                          "stdout")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's own log lines (INFO) on stderr; SEGJOBS_SPARK_LOG=LEVEL picks another level")
    add_rows_options(p)
    add_log_format_option(p, job=True)


def add_rows_options(p: Group) -> None:
    """``--per-partition`` / ``--per-topic``: the rows of the summary table (see
    :func:`jobs.engine.report.run_report.rows_per_partition`)."""
    rows = option_group(p, OUTPUT_GROUP).add_mutually_exclusive_group()
    rows.add_argument("--per-partition", dest="rows", action="store_const", const="partition", default="auto",
                      help=f"the summary table on stdout gets one row per partition however many there are "
                           f"(default: one row per partition up to {PARTITION_ROWS_MAX} partitions; beyond, one "
                           f"row per topic, then the partitions that failed or warn, each on its own row). On a "
                           f"terminal the table fits its width: long notes wrap, or go on their own line below "
                           f"the row; piped or redirected, every row stays on one line. The JSON report (and inspect's "
                           f"--format csv) always holds every partition")
    rows.add_argument("--per-topic", dest="rows", action="store_const", const="topic",
                      help="the summary table gets one row per topic (its partitions added up) however few "
                           "partitions there are")


def summary_view(args: argparse.Namespace) -> dict[str, Any]:
    """How the summary table is laid out: ``layout`` (--per-partition / --per-topic, else auto) and ``width``
    (the terminal's columns when stdout is one, else no limit): keyword arguments of the results' ``summary``."""
    return {"layout": getattr(args, "rows", "auto") or "auto", "width": output_width(sys.stdout)}


#: What --log-format says, shared by every command that prints progress.
LOG_FORMAT_HELP = (
    "how the progress lines on stderr are written: text (default), e.g. '[compact   4.2s] orders-2: compacted in "
    "1.3s', or json: one JSON object per line and event, for a log collector, with ts (ISO-8601 UTC), command, "
    "elapsed_s, level (info, notice or error), event (a stable name such as scan.done, compact.partition, "
    "retain.partition, report.written), message (the text line's words) and, where known, partition, "
    "partitions, seconds, bytes_removed, records_removed, uri. ")
#: ... and what it leaves alone, for a job (compact, retain, inspect)
LOG_FORMAT_JOB_HELP = ("--quiet keeps the notice and error events. stdout (--format) is not affected; Spark's own log "
                       "lines (--verbose) stay text. In text mode on a terminal, the per-partition lines of a stage "
                       "(compact.partition, retain.partition) are one status line with a bar, redrawn in place; "
                       "piped, redirected or in json, each event is exactly one line")


def add_log_format_option(p: Group, *, job: bool = False) -> None:
    """``--log-format text|json``: see :data:`LOG_FORMAT_HELP` and :mod:`jobs.engine.report.events`. ``job``: the
    command has --quiet, --format and --verbose (the help says how they combine)."""
    tail = LOG_FORMAT_JOB_HELP if job else "stdout (the command's result) is not affected"
    option_group(p, OUTPUT_GROUP).add_argument("--log-format", choices=LOG_FORMATS, default="text",
                                               help=LOG_FORMAT_HELP + tail)


def progress_sink(args: argparse.Namespace, *, quiet: bool | None = None) -> "ProgressSink | None":
    """Where the command's progress events go: stderr, as text lines or (--log-format json) JSON objects. With
    --quiet, text mode passes None (the job prints failures and notices itself, as text); JSON mode keeps
    those two levels in JSON."""
    quiet = bool(getattr(args, "quiet", False)) if quiet is None else quiet
    log_format = getattr(args, "log_format", "text")
    if log_format == "text":
        sink = None if quiet else stderr_sink("text")
    else:
        sink = stderr_sink(log_format, min_level="notice" if quiet else "info")
    args._progress_sink = sink  # closed by jobs.commands.cli.main when the command ends (see close_progress)
    return sink


def close_progress(args: argparse.Namespace) -> None:
    """End the command's progress output: a status line drawn in place on a terminal stays, and what is
    printed next (the summary, an error) starts on a line of its own."""
    sink = getattr(args, "_progress_sink", None)
    if sink is not None and hasattr(sink, "close"):
        sink.close()


def error_line(args: argparse.Namespace, message: str, *, event: str = "failed", **fields: Any) -> str:
    """The stderr line of a command that stops with ``message``: ``segjobs <command>: <message>``, or with
    --log-format json the same as a JSON ``error`` event."""
    command = getattr(args, "command", None) or "segjobs"
    if getattr(args, "log_format", "text") != "json":
        return f"segjobs {command}: {message}"
    started = getattr(args, "_started", None)
    elapsed = time.monotonic() - started if started is not None else 0.0
    return ProgressEvent(command=command, level="error", event=event, message=message, elapsed_s=elapsed,
                         ts_ms=time.time_ns() // 1_000_000, fields=fields, style="named").to_json()


def add_plan_options(p: Group) -> None:
    """``--plan FILE`` and ``--apply FILE`` (see :mod:`jobs.engine.frame.planfile`)."""
    p = option_group(p, SAFETY_GROUP)
    p.add_argument("--plan", metavar="FILE.json",
                   help="with --dry-run: also write the plan (decisions, resolved configs, --now, scope and a "
                        "fingerprint of the log dir) to FILE (local path or s3:// URI) for review; "
                        "--apply FILE carries it out")
    p.add_argument("--apply", metavar="FILE.json",
                   help="carry out exactly the plan in FILE (written by --dry-run --plan), with its --now, topic "
                        "configs and scope; refused with exit code 2, naming the first difference, if the log "
                        "dir changed since the plan was made. With --dry-run: only show what it would do")


# --------------------------------------------------------------------------------------------------
# Exit codes, as each command's --help states them
# --------------------------------------------------------------------------------------------------

#: The exit code of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130
#: The page that lists every case of every exit code; a --help names the usual ones and points there.
EXIT_CODES_PAGE = "docs/guide/commands.md#exit-codes"
#: What exit code 2 means for a job that takes the log dir's lock (compact, retain): it stopped before changing
#: anything.
JOB_NOTHING_DONE = ("nothing was done: a usage or configuration error, no usable Java, the log dir locked by a broker "
                    "or another run (the holder is named), a --report, --plan or local --ledger that cannot be "
                    "written, an --apply plan the log dir no longer matches")
#: What exit code 130 means for a job that commits partition by partition (compact, retain).
JOB_INTERRUPTED = ("interrupted (Ctrl-C): the partitions committed before the stop are named, the others left as they "
                   "were (a --dry-run changed nothing); run the command again to do the rest: its recovery settles a "
                   "commit the stop cut short")


def exit_codes_help(*, done: str, failed: str, nothing_done: str, interrupted: str) -> str:
    """The ``exit codes:`` block of a command's --help (set as its epilog): what 0, 1, 2 and 130 mean for this
    command, each wrapped under its code, and where every case is listed. One layout for every command, so that
    a script's author finds the same block wherever they look."""
    lines = ["exit codes:"]
    for code, meaning in ((0, done), (1, failed), (2, nothing_done), (INTERRUPTED, interrupted)):
        lines.append(textwrap.fill(meaning, width=116, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7,
                                   break_on_hyphens=False))
    lines.append(f"Every case of each code: {EXIT_CODES_PAGE}")
    return "\n".join(lines)


def storage_options_from_args(args: argparse.Namespace) -> StorageOptions:
    """StorageOptions from --s3-endpoint/--s3-region on top of the environment."""
    opts = StorageOptions.from_env()
    if getattr(args, "s3_endpoint", None):
        opts = replace(opts, endpoint_url=args.s3_endpoint)
    if getattr(args, "s3_region", None):
        opts = replace(opts, region=args.s3_region)
    return opts


# --------------------------------------------------------------------------------------------------
# From parsed arguments to typed options, and from results to stdout
# --------------------------------------------------------------------------------------------------


def job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~jobs.engine.frame.options.JobOptions` fields the shared options (:func:`add_log_dir_options`)
    give, as keyword arguments; --dry-run, --lease-ttl, --plan and --apply where the command has them."""
    out: dict[str, Any] = dict(
        config=args.config, overrides=tuple(args.set), topics=tuple(args.topic), partitions=tuple(args.partition),
        storage=storage_options_from_args(args), report=args.report, ledger=args.ledger,
        max_batch_bytes=args.max_batch_bytes, max_delete_fraction=getattr(args, "max_delete_fraction", None),
        accept_config_baseline=bool(getattr(args, "accept_config_baseline", False)),
        master=args.master, spark_verbose=bool(args.verbose), progress=progress_sink(args))
    for name in ("dry_run", "lease_ttl", "plan", "apply"):
        if hasattr(args, name):
            out[name] = getattr(args, name)
    return out


@contextmanager
def cli_wording() -> Iterator[None]:
    """Options refused while being made from the command line are reported with its flags (``--strategy``),
    not the Python API's field names."""
    try:
        yield
    except InvalidOption as exc:
        raise exc.for_cli() from None


def print_result(args: argparse.Namespace, result: "JobResult", summary: Callable[[], str]) -> None:
    """stdout gets the result and nothing else: the JSON report (``--format json``), or ``summary()`` (the
    table, or for inspect the CSV). The progress output ends first (:func:`close_progress`)."""
    close_progress(args)
    text = result.to_json() + "\n" if args.format == "json" else summary()
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------------------
# Sizes and durations on the command line (the parsers of segment_io.units, with argparse's error type)
# --------------------------------------------------------------------------------------------------


def size_arg(text: str) -> int:
    """argparse ``type=`` for a size option: ``512MiB``, ``1GiB``, ``4096`` (see :mod:`segment_io.units`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_size_arg(text: str) -> int:
    """argparse ``type=`` for a size that must be positive (``--max-batch-bytes``, ``--dedupe-buffer-bytes``,
    ``generate --segment-bytes``, where 0 would write a segment per batch).
    Refused here rather than when the options are made, so that the error names the flag the user typed
    (``argument --dedupe-buffer-bytes: must be positive``), not the setting behind it."""
    value = size_arg(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _size_at_least(minimum: int, least: str, why: str, parse: Callable[[str], int]) -> Callable[[str], int]:
    """An argparse ``type=`` reading a size with ``parse`` and refusing one below ``minimum``, naming the flag (argparse
    does) and the least it takes (``least``, ``why``), rather than leaving it to the options, whose error names
    their field or the Kafka setting behind it."""
    def arg(text: str) -> int:
        value = parse(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {least}, {why}, got {text!r}")
        return value
    return arg


#: ``--dedupe-buffer-bytes``: a positive size whose offset map holds at least one key
#: (:data:`~jobs.rules.map_capacity.MIN_BUFFER_BYTES`; the options would say ``log.cleaner.dedupe.buffer.size=10 holds
#: 0 slots ...``).
dedupe_buffer_arg = _size_at_least(
    MIN_BUFFER_BYTES, f"{MIN_BUFFER_BYTES} bytes", f"the smallest offset map that holds one key ({BYTES_PER_ENTRY} "
    f"bytes a slot, full at {LOAD_FACTOR:g} of the slots)", positive_size_arg)
#: ``--sort-bucket-bytes``: a size of at least :data:`~jobs.engine.frame.options.MIN_SORT_BUCKET_BYTES` (the options
#: would say ``CompactOptions.sort_bucket_bytes=1024: ...``).
sort_bucket_arg = _size_at_least(
    MIN_SORT_BUCKET_BYTES, f"{MIN_SORT_BUCKET_TEXT} ({MIN_SORT_BUCKET_BYTES} bytes)",
    "the least memory one reduce task of the external sort takes", size_arg)


def duration_arg(text: str) -> int:
    """argparse ``type=`` for a duration option: ``7d``, ``36h``, ``500ms`` (see :mod:`segment_io.units`)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --------------------------------------------------------------------------------------------------
# --log-dir: the usual mistakes (a file, a partition directory), caught before any work
# --------------------------------------------------------------------------------------------------


