"""Write a synthetic, broker-style Kafka log dir: topics, partitions, segments with indexes, checkpoint files.

Key cardinality follows from --records and --superseded: with 10,000 records and --superseded 0.5 there are
exactly 5,000 distinct keys per partition, so compaction keeps 5,000 records (fewer where a tombstone is a key's
last record, or where all of a key's records were in aborted transactions).
Timestamps rise evenly over [--start, --start + --span): by default from 2023-11-14T22:13:20Z over 7 days, a
fixed range so that the same command gives the same bytes on any day. Judged at today's date that data is years
old: give the jobs --now (the summary line says which instant follows the data), or generate recent data with
--start (e.g. --start 2026-11-20 --span 2d). Transactions: --transactional is the share of
batches written in a transaction (each closed by its own marker), --aborted the share of those that abort.
Sizes take binary units (4MiB, 1KiB; "MB" is refused as ambiguous), durations ms or a unit (36h, 7d).

Beside the log dir it writes its topics config (--config-out; default OUT.topics.toml): the generated topics
with cleanup.policy=compact (their records supersede each other: made for compaction) and the --segment-bytes
they were written with, ready for `--config`. --out must be new or empty, unless --append.

--append adds to the log dir in --out: a topic not there is created; a topic that is there gets --records more
records per partition, appended after each partition's log end offset in new segments after its last one, as a
producer would: offsets continue, new transactions take producer ids above every one the partition holds, the
batches carry the leader epoch of its leader-epoch checkpoint, its checkpoint entries and its topics config stay
as they were, and its timestamps continue just after its newest one (unless --start). Keys come from the same
key space (ids from 0): the new records' --records x (1 - --superseded) distinct keys are keys the first records
wrote wherever those had as many, so they mostly update and delete existing keys. That is a night's traffic for
`segjobs table` or compaction to pick up.

examples:
  segjobs generate --out /tmp/logs --topics orders,users --partitions 4 --records 200000 \\
      --segment-bytes 4MiB --superseded 0.5 --tombstones 0.02 --value-bytes 1000 --codec lz4
  segjobs generate --out /tmp/logs --topics orders --records 1000 --append    # 1000 more records a partition
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.commands.args import INSTANT_METAVAR, duration_arg, exit_codes_help, positive_size_arg, size_arg
from jobs.engine.report.run_report import listed
from jobs.rules.timeutil import format_instant, parse_instant
from segment_io.compression import CODEC_BY_NAME, codec_from_name
from segment_io.errors import NotWritableError, StorageError, UsageError
from segment_io.layout import parse_partition_dir, partition_dir_name
from segment_io.units import DAY_MS

if TYPE_CHECKING:
    from segment_io.generate import GenerateSpec


#: The default --start: fixed, so that the same command writes the same bytes on any day.
DEFAULT_START = "2023-11-14T22:13:20Z"


def _share(text: str) -> float:
    v = float(text)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share within [0, 1]")
    return v


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True,
                   help="directory to create the log dir in (must be empty or absent, unless --append)")
    p.add_argument("--append", action="store_true",
                   help="add to the log dir already in --out: new --topics are created (and added to its topics "
                        "config); the partitions of a topic already there get --records more records after their "
                        "log end offset, in new segments (see above); everything else is kept")
    p.add_argument("--config-out", metavar="FILE",
                   help="where to write the topics config of what was generated (default: OUT.topics.toml beside "
                        "the log dir, never inside it; 'none': write none)")
    p.add_argument("--topics", default="orders", help="comma-separated topic names (default: orders)")
    p.add_argument("--partitions", type=int, default=None,
                   help="partitions per topic (default: 2; with --append, a topic already there keeps its count)")
    p.add_argument("--records", type=int, default=10_000, help="data records per partition (default: 10000)")
    p.add_argument("--segment-bytes", type=positive_size_arg, default=1 << 20, metavar="SIZE",
                   help="roll a new segment after about this many bytes, e.g. 4MiB (default: 1MiB)")
    p.add_argument("--superseded", type=_share, default=0.5,
                   help="share of records superseded by a later record with the same key (default: 0.5)")
    p.add_argument("--tombstones", type=_share, default=0.02,
                   help="share of records that are tombstones (default: 0.02)")
    p.add_argument("--value-bytes", type=size_arg, default=100, metavar="SIZE",
                   help="bytes per value, e.g. 1KiB (default: 100)")
    p.add_argument("--key-bytes", type=size_arg, default=16, metavar="SIZE", help="bytes per key (default: 16)")
    p.add_argument("--batch-records", type=int, default=50, help="records per batch (default: 50)")
    p.add_argument("--codec", choices=sorted(CODEC_BY_NAME), default="none", help="compression codec (default: none)")
    p.add_argument("--transactional", type=_share, default=0.0, help="share of batches in transactions (default: 0)")
    p.add_argument("--aborted", type=_share, default=0.0, help="share of transactions that abort (default: 0)")
    p.add_argument("--start", default=None, metavar=INSTANT_METAVAR,
                   help=f"timestamp of the first record (default: {DEFAULT_START}, fixed so that output is "
                        "reproducible; run the jobs with --now, or pass a recent --start, e.g. 2026-11-20; with "
                        "--append to a topic already there: just after the newest timestamp of its partitions); "
                        "a time without a zone is UTC")
    p.add_argument("--span", type=duration_arg, default=7 * DAY_MS, metavar="DURATION",
                   help="timestamps spread evenly over [--start, --start + this), e.g. 36h or 30d (default: 7d)")
    p.add_argument("--value-style", choices=("random", "text"), default="random",
                   help="random bytes (incompressible; default) or JSON-like text that compresses like real events")
    p.add_argument("--headers", action="store_true", help="give every record a small header")
    p.add_argument("--seed", type=int, default=42, help="random seed (default: 42): same seed, same bytes")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.epilog = exit_codes_help(
        done="the log dir written in --out (with --append: the records appended), and its topics config written "
             "or added to (unless --config-out none)",
        failed="a partition --append reads is corrupt (the error names the file and byte; nothing is written), or "
               "the machine refused a write once writing began (no space left, ...: one line naming the file and "
               "the errno); what was written before it stays in --out",
        nothing_done="nothing was written: a usage error, an --out that is a file, an --out or --config-out below a "
                     "file, a --config-out that is a directory, an --out the machine refuses (it is created and a "
                     "file made and removed in it first: read-only, permissions); without --append, an --out that "
                     "is not empty or a --config-out that exists; with --append, a --partitions other than the "
                     "topic's, or a partition of any of the --topics that records cannot be appended to (a last "
                     "batch cut short, a crashed run's files: run segjobs recover; files but no segment; a file "
                     "where its directory goes), all checked before the first topic is written",
        interrupted="interrupted (Ctrl-C): what was written before the stop stays in --out, an incomplete log dir: "
                    "the checkpoint files and the topics config, written last, may be missing")


def run(args: argparse.Namespace) -> int:
    from segment_io.generate import GenerateResult, GenerateSpec, generate_log_dir

    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    if not topics:
        raise UsageError("--topics names no topic")
    out = Path(args.out)
    _check_out(out, append=args.append)
    existing = _existing_partitions(out, topics) if args.append else {}
    counts = {t: _partition_count(t, existing.get(t), args.partitions) for t in topics}
    # every partition of every topic, read with or without --start: a partition records cannot be appended to is
    # refused here, before anything is written (exit 2), whichever group of topics it is in
    newest = _newest_timestamp(out, counts)
    start = args.start
    if start is None:
        start = str(newest + 1) if newest is not None else DEFAULT_START
    specs: list[GenerateSpec] = []
    try:
        for n in sorted(set(counts.values())):
            specs.append(GenerateSpec(
                topics=tuple(t for t in topics if counts[t] == n), partitions=n, records=args.records,
                segment_bytes=args.segment_bytes, superseded_share=args.superseded, tombstone_share=args.tombstones,
                value_bytes=args.value_bytes, key_bytes=args.key_bytes, batch_records=args.batch_records,
                codec=codec_from_name(args.codec), transactional_share=args.transactional,
                aborted_share=args.aborted, start_ms=parse_instant(start, option="--start"), span_ms=args.span,
                seed=args.seed, headers=args.headers, value_style=args.value_style))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    spec = specs[0]
    config_out = None if (args.config_out or "").lower() == "none" else Path(args.config_out or f"{out}.topics.toml")
    if config_out is not None:
        _check_config_out(config_out, append=args.append)
    _prove_out_writable(out)  # the first write: refused, it leaves nothing (exit 2)
    t0 = time.monotonic()
    progress = None if args.quiet else (lambda line: print(f"  {line}", file=sys.stderr))
    res = GenerateResult(out_dir=str(out))
    try:
        for one in specs:
            part = generate_log_dir(one, out, progress=progress, append=args.append)
            res.partitions += part.partitions
            res.segments += part.segments
            res.records += part.records
            res.markers += part.markers
            res.bytes += part.bytes
            res.appended += part.appended
    except (OSError, StorageError) as exc:  # the machine refused a write (no space left, ...): one line naming
        # the path and what stays, exit 1
        raise _write_failed(exc, out, f"what was written before stays in --out {out}") from None
    dt = time.monotonic() - t0
    print(f"wrote {res.out_dir}: {res.partitions} partitions, {res.segments} segments, {res.records} records "
          f"(+{res.markers} markers), {res.bytes / 1e6:.1f} MB in {dt:.1f}s"
          + (f"; appended to {listed(res.appended, 5)} after their log end offsets" if res.appended else ""))
    # the instant just after the data: the jobs judge it there (at today's date it may be years old)
    after = spec.start_ms + spec.span_ms + DAY_MS
    new_topics = tuple(t for t in topics if t not in existing)
    if config_out is not None and (new_topics or config_out.exists()):
        try:
            _write_config(config_out, out, spec, new_topics, append=args.append)
        except OSError as exc:
            raise _write_failed(exc, config_out, f"the log dir in --out {out} is written; its topics config "
                                                 f"--config-out {config_out} is not") from None
        policy = f" (cleanup.policy=compact for {', '.join(new_topics)})" if new_topics else ""
        print(f"topics config: {config_out}{policy}; e.g.\n"
              f"  segjobs compact --log-dir {out} --config {config_out} --now {format_instant(after)}")
    else:
        print(f"timestamps run from {format_instant(spec.start_ms)} to {format_instant(spec.start_ms + spec.span_ms)}: "
              f"run the jobs with e.g. --now {format_instant(after)}")
    return 0


def _not_below_a_file(flag: str, path: Path) -> None:
    """``UsageError`` when a directory above ``path`` (which need not exist) is a file: nothing can be created
    there."""
    above = path.parent
    while not above.exists() and above.parent != above:
        above = above.parent
    if above.exists() and not above.is_dir():
        raise UsageError(f"{flag} {path}: {above} is a file, not a directory; nothing was written")


def _check_out(out: Path, *, append: bool) -> None:
    """--out must be a new or empty directory, unless --append."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")
    _not_below_a_file("--out", out)
    present = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if present and not append:
        shown = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
        raise UsageError(f"--out {out} is not empty (it holds {shown}): give a new or empty directory, or pass "
                         f"--append to add these topics to the log dir in it; nothing was written")


def _existing_partitions(out: Path, topics: tuple[str, ...]) -> dict[str, list[int]]:
    """The partition numbers of each of ``topics`` that --out already holds (topics it lacks are left out)."""
    found: dict[str, list[int]] = {}
    for entry in sorted(out.iterdir()) if out.is_dir() else []:
        tp = parse_partition_dir(entry.name)
        if entry.is_dir() and tp is not None and tp[0] in topics:
            found.setdefault(tp[0], []).append(tp[1])
    return {t: sorted(ps) for t, ps in found.items()}


def _partition_count(topic: str, existing: list[int] | None, asked: int | None) -> int:
    """How many partitions ``topic`` gets: --partitions (2 by default), or the count it has when it exists."""
    if existing is None:
        return 2 if asked is None else asked
    have = max(existing) + 1
    if asked is not None and asked != have:
        raise UsageError(f"--partitions {asked}: {topic} has {have} partition(s) in the log dir already; --append "
                         f"adds records to those (omit --partitions); nothing was written")
    return have


def _newest_timestamp(out: Path, counts: dict[str, int]) -> int | None:
    """The newest batch timestamp of the partitions records are appended to (None: none, or no timestamp), of the
    ``counts[topic]`` partitions of each topic. ``UsageError`` for one records cannot be appended to (see
    :func:`segment_io.generate.partition_tail`), or that cannot be written at all: a file where its directory
    goes, or a directory that holds files but no segment. All are checked before anything is written, so that a
    refusal leaves every topic as it was (the topics are written in groups, one per partition count)."""
    from segment_io.generate import partition_tail

    newest = -1
    for topic, count in counts.items():
        for p in range(count):
            pdir = out / partition_dir_name(topic, p)
            if not pdir.exists():
                continue
            if not pdir.is_dir():
                raise UsageError(f"{pdir} is a file, where {topic}'s partition {p} goes: remove it or generate "
                                 f"elsewhere; nothing was written")
            try:
                tail = partition_tail(pdir, p)
            except ValueError as exc:
                raise UsageError(f"--append: {exc}; nothing was written") from None
            if tail is not None:
                newest = max(newest, tail.max_timestamp)
            elif any(pdir.iterdir()):
                held = ", ".join(sorted(e.name for e in pdir.iterdir())[:3])
                raise UsageError(f"--append: {pdir} holds files but no segment ({held}): records cannot be appended "
                                 f"to it; remove them (or the directory) or generate elsewhere; nothing was written")
    return newest if newest >= 0 else None


def _check_config_out(path: Path, *, append: bool) -> None:
    """``UsageError`` for a ``--config-out`` that cannot be written: one that exists (unless --append, which adds
    to it), a directory, or below a file."""
    if path.is_dir():
        raise UsageError(f"--config-out {path} is a directory: give a file name (or 'none'); nothing was written")
    if path.exists() and not append:
        raise UsageError(f"--config-out {path} exists: name another file with --config-out FILE (or 'none'), "
                         f"or remove it; nothing was written")
    _not_below_a_file("--config-out", path)


def _prove_out_writable(out: Path) -> None:
    """Create --out (and its missing parents) and a file in it, removed at once: the first write, so that a
    directory the machine refuses (read-only, permissions, a path it cannot create) is an error before anything
    is written (:class:`NotWritableError`, exit code 2). The directories created here are removed again when
    the probe fails."""
    from jobs.logdir.checks import probe_new_file
    from segment_io.storage.local import storage_error, temp_name

    created = []
    above = out
    while not above.exists() and above.parent != above:
        created.append(above)
        above = above.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        cause = storage_error(exc, str(out))
        raise NotWritableError(f"--out {out}: creating it failed: {cause.detail}; nothing was written",
                               uri=str(out), cause=cause) from None
    failed = probe_new_file(str(out / temp_name(".segjobs-probe")))
    if failed is not None:
        for made in created:  # deepest first
            try:
                made.rmdir()
            except OSError:
                break
        step, cause = failed
        raise NotWritableError(f"--out {out}: {'creating' if step == 'create' else 'removing'} a file in it failed: "
                               f"{cause.detail}; nothing was written", uri=str(out), cause=cause)


def _write_failed(exc: OSError | StorageError, path: Path, what_stays: str) -> StorageError:
    """A write the machine refused once generating began (exit code 1): the file, the errno and the fix, and
    what stays."""
    from segment_io.storage.local import storage_error

    cause = exc if isinstance(exc, StorageError) else storage_error(exc, str(path))
    return StorageError(f"{cause.detail}; {what_stays}", uri=cause.uri)


def _write_config(path: Path, out: Path, spec: "GenerateSpec", topics: tuple[str, ...], *, append: bool) -> None:
    """The topics config of the new ``topics`` (appended to an existing one with --append; a topic the log dir
    had keeps its table there)."""
    if not topics:
        return
    end = spec.start_ms + spec.span_ms
    lines = [] if append and path.exists() else [
        f"# Topic configuration of the log dir {out}, written by `segjobs generate`.",
        "# Its topics were generated for compaction (records supersede each other by key), so they are",
        "# compact topics. Their timestamps are fixed by --start/--span: give the jobs a --now after them.",
        "# Edit freely: see conf/topics.toml for every key and how tables combine.",
    ]
    lines += ["", f"# {', '.join(topics)}: timestamps {format_instant(spec.start_ms)} .. {format_instant(end)}"]
    for topic in topics:
        lines += [f'[topics."{topic}"]', '"cleanup.policy" = "compact"', f'"segment.bytes" = {spec.segment_bytes}', ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
