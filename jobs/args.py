"""Command-line options shared by the jobs (compact, retain, inspect): one definition, one meaning."""

from __future__ import annotations

import argparse
import fnmatch
import os
from dataclasses import dataclass

from segment_io.errors import UsageError
from segment_io.layout import LogDirListing, closest_topics_hint, parse_partition_dir, parse_segment_file
from segment_io.units import parse_duration, parse_size


#: What every job can print on stdout (--format): the human summary table, or the JSON report.
OUTPUT_FORMATS = ("table", "json")


def add_log_dir_options(p: argparse.ArgumentParser, *, destructive: bool = True, scope_note: str = "",
                        formats: tuple[str, ...] = OUTPUT_FORMATS) -> None:
    """--log-dir, --config, --set, --topic, --partition, --now, --report, --master, the S3 options and the
    output options (--format, --quiet, --verbose). ``scope_note`` ends the --topic/--partition help with what
    naming partitions means to the command; ``formats`` are the --format choices (the first is the default)."""
    p.add_argument("--log-dir", required=True, metavar="URI",
                   help="Kafka log dir: a local path or s3://bucket/prefix")
    p.add_argument("--config", metavar="FILE", help="topic configuration TOML (see conf/topics.toml)")
    p.add_argument("--set", action="append", default=[], metavar="TOPIC_GLOB:KEY=VALUE",
                   help="override one topic config, e.g. 'orders*:min.cleanable.dirty.ratio=0.1' (repeatable)")
    p.add_argument("--topic", action="append", default=[], metavar="GLOB",
                   help="only topics matching this glob (repeatable; default: all)" + scope_note)
    p.add_argument("--partition", action="append", default=[], metavar="TOPIC-N",
                   help="only this partition, e.g. orders-3 (repeatable)" + scope_note)
    p.add_argument("--now", metavar="EPOCH_MS|ISO8601",
                   help="the instant the job acts at (default: the wall clock); fixes horizons and ages, "
                        "so re-running with the same --now reproduces the same decisions")
    if destructive:
        p.add_argument("--dry-run", action="store_true",
                       help="write nothing; report exactly what a real run would remove")
        p.add_argument("--lease-ttl", metavar="DURATION",
                       help="S3: how long the log dir's lease lasts without renewal (default 2m, or "
                            "$SEGJOBS_LEASE_TTL); a heartbeat renews it every third of that while the job runs, "
                            "so a killed run blocks others for at most this long")
    p.add_argument("--max-batch-bytes", type=batch_bytes_arg, metavar="SIZE",
                   help="the most bytes one compressed batch may inflate to before it is reported as corrupt "
                        "(a decompression bomb); default 256MiB, or $SEGJOBS_MAX_BATCH_BYTES")
    p.add_argument("--report", metavar="FILE.json", help="write the JSON report here (local path or s3:// URI)")
    p.add_argument("--ledger", metavar="URI",
                   help="append one row per partition to this Delta table (default: none)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master (default: what spark-submit set, else local[*])")
    p.add_argument("--s3-endpoint", metavar="URL", help="S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
    p.add_argument("--s3-region", metavar="REGION", help="S3 region (default: from the AWS configuration)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr (failures are still shown)")
    _add_output_options(p, formats)


def _add_output_options(p: argparse.ArgumentParser, formats: tuple[str, ...]) -> None:
    """Where a job's output goes: stdout carries the result only (the summary table or, for scripts, the JSON
    report), stderr the progress lines and errors, and Spark's own log lines only when asked for."""
    p.add_argument("--format", "--output", dest="format", choices=formats, default=formats[0],
                   help=f"what stdout gets: {formats[0]} (default) or " + ", ".join(formats[1:])
                        + "; json is the whole report (the same document as --report), and nothing else goes to "
                          "stdout")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's own log lines (INFO) on stderr; SEGJOBS_SPARK_LOG=LEVEL picks another level")


@dataclass(frozen=True)
class Scope:
    """Which partitions a run covers: topic globs and explicit partitions (both empty: everything)."""

    topic_globs: tuple[str, ...] = ()
    partitions: tuple[tuple[str, int], ...] = ()

    @property
    def everything(self) -> bool:
        return not self.topic_globs and not self.partitions

    def explicit(self, topic: str, partition: int) -> bool:
        """True when the user named this partition (or its topic glob) on the command line."""
        return (topic, partition) in self.partitions or any(fnmatch.fnmatchcase(topic, g) for g in self.topic_globs)

    def includes(self, topic: str, partition: int) -> bool:
        return self.everything or self.explicit(topic, partition)

    def check_against(self, present: set[tuple[str, int]]) -> None:
        """Fail before any work when the scope names something the log dir does not hold, saying what it
        does hold: the partitions of a named topic, or the topics closest to a name that matches none."""
        topics = {t for t, _ in present}
        missing = [(t, p) for t, p in self.partitions if (t, p) not in present]
        if missing:
            hints = []
            for t in dict.fromkeys(t for t, _ in missing):
                numbers = sorted(p for pt, p in present if pt == t)
                hints.append(f"{t} has partitions {_number_ranges(numbers)}" if numbers
                             else f"no topic {t!r}; {closest_topics_hint(t, topics)}")
            raise UsageError(f"--partition names partitions not in the log dir: "
                             f"{', '.join(f'{t}-{p}' for t, p in missing)} ({'; '.join(hints)})")
        unmatched = [g for g in self.topic_globs if not any(fnmatch.fnmatchcase(t, g) for t in topics)]
        if unmatched:
            hints = "; ".join(f"{g}: {closest_topics_hint(g, topics)}" for g in unmatched)
            raise UsageError(f"--topic matches no topic in the log dir: {', '.join(unmatched)} ({hints})")


def _number_ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_scope(topic_globs: list[str], partitions: list[str]) -> Scope:
    """The Scope of --topic and --partition options (``UsageError`` for a partition not named TOPIC-N)."""
    parsed = []
    for item in partitions:
        tp = parse_partition_dir(item)  # a partition is named as its directory is
        if tp is None:
            raise UsageError(f"--partition {item!r}: expected TOPIC-N, e.g. orders-3")
        parsed.append(tp)
    return Scope(tuple(topic_globs), tuple(parsed))


def storage_options_from_args(args: argparse.Namespace):
    """StorageOptions from --s3-endpoint/--s3-region on top of the environment."""
    from dataclasses import replace

    from segment_io.storage import StorageOptions

    opts = StorageOptions.from_env()
    if getattr(args, "s3_endpoint", None):
        opts = replace(opts, endpoint_url=args.s3_endpoint)
    if getattr(args, "s3_region", None):
        opts = replace(opts, region=args.s3_region)
    return opts


# --------------------------------------------------------------------------------------------------
# Sizes and durations on the command line (the parsers of segment_io.units, with argparse's error type)
# --------------------------------------------------------------------------------------------------


def size_arg(text: str) -> int:
    """argparse ``type=`` for a size option: ``512MiB``, ``1GiB``, ``4096`` (see :mod:`segment_io.units`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def batch_bytes_arg(text: str) -> int:
    """argparse ``type=`` for ``--max-batch-bytes``: a positive size (the per-batch decompression bound of
    :func:`segment_io.compression.max_batch_bytes`)."""
    value = size_arg(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def duration_arg(text: str) -> int:
    """argparse ``type=`` for a duration option: ``7d``, ``36h``, ``500ms`` (see :mod:`segment_io.units`)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --------------------------------------------------------------------------------------------------
# --log-dir: the usual mistakes (a file, a partition directory), caught before any work
# --------------------------------------------------------------------------------------------------


def check_log_dir_is_dir(storage, log_dir: str) -> None:
    """``UsageError`` when ``--log-dir`` names a file (a segment file, most likely) or a missing local dir."""
    if storage.exists(log_dir):
        parent, _, name = log_dir.rpartition("/")
        grand, _, pdir = parent.rpartition("/")
        if parse_segment_file(name) is not None and parse_partition_dir(pdir) is not None:
            raise UsageError(f"--log-dir {log_dir} is a segment file, not a log dir: give the log dir and the "
                             f"partition, --log-dir {grand or '/'} --partition {pdir} "
                             f"(or read the file with `segjobs dump {log_dir}`)")
        raise UsageError(f"--log-dir {log_dir} is a file, not a log dir (a directory of <topic>-<n> partition "
                         f"directories)")
    local = storage.local_path(log_dir)
    if local is not None and not os.path.isdir(local):
        raise UsageError(f"--log-dir {log_dir}: no such directory")


def partition_dir_hint(log_dir: str, listing: LogDirListing, *, scoped: bool = True) -> str | None:
    """When a log dir without partition directories looks like a partition directory itself (it holds
    segment files), what to give instead (``scoped``: the command takes --partition); None otherwise."""
    if listing.partitions or not any(parse_segment_file(f.name) for f in listing.top_level_files):
        return None
    parent, _, name = log_dir.rstrip("/").rpartition("/")
    if parse_partition_dir(name) is not None:
        if not scoped:
            return f"this looks like a partition; use its parent: --log-dir {parent or '/'}"
        return (f"this looks like a partition; use its parent with --partition {name}: "
                f"--log-dir {parent or '/'} --partition {name}")
    return ("it holds segment files itself, as a partition directory does: give the directory that holds the "
            "<topic>-<n> partition directories")


def check_log_dir_has_partitions(log_dir: str, listing: LogDirListing, *, scoped: bool = True,
                                 required: bool = True) -> None:
    """``UsageError`` when the listing holds no partition directory, with :func:`partition_dir_hint`
    (``required=False``: only when the log dir looks like a partition directory)."""
    if listing.partitions:
        return
    hint = partition_dir_hint(log_dir, listing, scoped=scoped)
    if hint or required:
        raise UsageError(f"--log-dir {log_dir}: no partition directories (<topic>-<n>) found"
                         + (f"; {hint}" if hint else ""))
