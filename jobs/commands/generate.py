"""Write a synthetic, broker-style Kafka log dir: topics, partitions, segments with indexes, checkpoint files.

Key cardinality follows from --records and --superseded: with 10,000 records and --superseded 0.5 there are
exactly 5,000 distinct keys per partition, so compaction keeps 5,000 records (fewer where a tombstone is a key's
last record, or where all of a key's records were in aborted transactions).
Timestamps rise evenly over [--start, --start + --span). Transactions: --transactional is the share of
batches written in a transaction (each closed by its own marker), --aborted the share of those that abort.
Sizes take binary units (4MiB, 1KiB; "MB" is refused as ambiguous), durations ms or a unit (36h, 7d).

example:
  segjobs generate --out /tmp/logs --topics orders,users --partitions 4 --records 200000 \\
      --segment-bytes 4MiB --superseded 0.5 --tombstones 0.02 --value-bytes 1000 --codec lz4
"""

from __future__ import annotations

import argparse
import sys
import time

from jobs.commands.args import duration_arg, size_arg
from jobs.rules.timeutil import parse_instant
from segment_io.compression import CODEC_BY_NAME, codec_from_name
from segment_io.errors import UsageError
from segment_io.units import DAY_MS


def _share(text: str) -> float:
    v = float(text)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share within [0, 1]")
    return v


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="directory to create the log dir in (must be empty or absent)")
    p.add_argument("--topics", default="orders", help="comma-separated topic names (default: orders)")
    p.add_argument("--partitions", type=int, default=2, help="partitions per topic (default: 2)")
    p.add_argument("--records", type=int, default=10_000, help="data records per partition (default: 10000)")
    p.add_argument("--segment-bytes", type=size_arg, default=1 << 20, metavar="SIZE",
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
    p.add_argument("--start", default="2023-11-14T22:13:20Z", help="timestamp of the first record (ms or ISO-8601)")
    p.add_argument("--span", type=duration_arg, default=7 * DAY_MS, metavar="DURATION",
                   help="timestamps spread over this long, e.g. 36h or 30d (default: 7d)")
    p.add_argument("--value-style", choices=("random", "text"), default="random",
                   help="random bytes (incompressible; default) or JSON-like text that compresses like real events")
    p.add_argument("--headers", action="store_true", help="give every record a small header")
    p.add_argument("--seed", type=int, default=42, help="random seed (default: 42): same seed, same bytes")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from segment_io.generate import GenerateSpec, generate_log_dir

    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    if not topics:
        raise UsageError("--topics names no topic")
    try:
        spec = GenerateSpec(
            topics=topics, partitions=args.partitions, records=args.records, segment_bytes=args.segment_bytes,
            superseded_share=args.superseded, tombstone_share=args.tombstones, value_bytes=args.value_bytes,
            key_bytes=args.key_bytes, batch_records=args.batch_records, codec=codec_from_name(args.codec),
            transactional_share=args.transactional, aborted_share=args.aborted,
            start_ms=parse_instant(args.start, option="--start"), span_ms=args.span, seed=args.seed,
            headers=args.headers, value_style=args.value_style,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    t0 = time.monotonic()
    progress = None if args.quiet else (lambda line: print(f"  {line}", file=sys.stderr))
    try:
        res = generate_log_dir(spec, args.out, progress=progress)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    dt = time.monotonic() - t0
    print(f"wrote {res.out_dir}: {res.partitions} partitions, {res.segments} segments, {res.records} records "
          f"(+{res.markers} markers), {res.bytes / 1e6:.1f} MB in {dt:.1f}s")
    return 0
