"""``make demo``: generate a demo log dir and run two nights of retention and compaction on it, printing each
run's summary.

The dataset has four topics: a compacted changelog with transactions and tombstones, a compact,delete orders
topic, a delete-only clickstream topic, and a small payments topic whose only segment is still active. Each
night runs ``segjobs retain`` then ``segjobs compact`` (the nightly order) at a fixed ``--now`` (night 1: one
day after the last record; night 2: a day later), so the output is the same on every machine; then every
partition is verified with ``segjobs dump --verify``. Between them the two nights show every outcome the
summary reports: partitions compacted, skipped and why, a partial clean continued the next night (the demo gives
the offset map 300 KB, room for 11,250 keys, where the default is 128 MiB, so that the changelog's 12,000 keys
per partition take two passes; it asks for the memory strategy, which ``auto`` would replace by external-sort's
single exact pass there), segments deleted by retention and pending purge, and their purge a night later.
(clicks' first retention run deletes 70% of the topic, more than the default delete-fraction limit:
conf/demo-topics.toml allows it.)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
from pathlib import Path

from jobs.commands.cli import main as segjobs
from jobs.rules.map_capacity import buffer_bytes_for_keys
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.units import DAY_MS

START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
SPAN_MS = 7 * DAY_MS
NOW_MS = START_MS + SPAN_MS + DAY_MS
#: Keys the demo's offset map holds: the changelog's 12,000 keys per partition do not fit in one pass, while what
#: is left of orders after retention does. The demo's output depends on this number only, not on the load factor.
DEMO_MAP_KEYS = 11_250
#: The offset map of the demo's runs: 300,000 bytes, 12,500 slots of 24 bytes at Kafka's 0.9 load factor.
DEMO_DEDUPE_BUFFER_BYTES = buffer_bytes_for_keys(DEMO_MAP_KEYS)


def build(out: Path) -> None:
    """Write the demo log dir (about 50 MB) into ``out``."""
    specs = [
        GenerateSpec(topics=("users-changelog",), partitions=3, records=40_000, superseded_share=0.7,
                     tombstone_share=0.05, value_bytes=200, transactional_share=0.2, aborted_share=0.25,
                     segment_bytes=1 << 20, codec=3, start_ms=START_MS, span_ms=SPAN_MS, seed=1, headers=True),
        GenerateSpec(topics=("orders",), partitions=2, records=30_000, superseded_share=0.5, tombstone_share=0.01,
                     value_bytes=300, segment_bytes=1 << 20, start_ms=START_MS, span_ms=SPAN_MS, seed=2),
        GenerateSpec(topics=("clicks",), partitions=2, records=20_000, superseded_share=0.0, tombstone_share=0.0,
                     value_bytes=150, segment_bytes=512 << 10, codec=1, start_ms=START_MS, span_ms=SPAN_MS, seed=3),
        GenerateSpec(topics=("payments",), partitions=1, records=500, superseded_share=0.5, tombstone_share=0.0,
                     value_bytes=100, segment_bytes=1 << 20, start_ms=START_MS, span_ms=SPAN_MS, seed=4),
    ]
    for spec in specs:
        res = generate_log_dir(spec, out)
        print(f"  generated {spec.topics[0]}: {res.partitions} partitions, {res.segments} segments, "
              f"{res.records} records, {res.bytes / 1e6:.1f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.commands.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="demo-data",
                        help="where to build the demo: DIR/logs and DIR/*-report.json, replaced on every run "
                             "(default: demo-data)")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    log_dir = root / "logs"
    # Start afresh, removing only what an earlier demo run made.
    for leftover in (log_dir, Path(str(log_dir) + ".segjobs")):
        shutil.rmtree(leftover, ignore_errors=True)
    for report in root.glob("night-*-report.json"):
        report.unlink()
    (root / "compact-report.json").unlink(missing_ok=True)  # an older demo's report
    root.mkdir(parents=True, exist_ok=True)
    config = Path(__file__).resolve().parents[2] / "conf" / "demo-topics.toml"
    # retain before compact each night, the nightly order (docs/guide/compact.md, the Airflow DAG): what retention
    # deletes, compaction then need not read or rewrite
    runs = [(night, command, extra) for night in (1, 2)
            for command, extra in (("retain", []), ("compact", ["--dedupe-buffer-bytes", str(DEMO_DEDUPE_BUFFER_BYTES),
                                                               "--strategy", "memory"]))]
    total = len(runs) + 2  # generate, each run, verify
    print(f"== 1/{total} generating a demo log dir in {log_dir}")
    build(log_dir)
    for step, (night, command, extra) in enumerate(runs, start=2):
        now = NOW_MS + (night - 1) * DAY_MS
        report = root / f"night-{night}-{command}-report.json"
        argv = [command, "--log-dir", str(log_dir), "--config", str(config), "--now", str(now), *extra,
                "--report", str(report)]
        print(f"\n== {step}/{total} night {night}: segjobs {' '.join(argv)}", flush=True)
        code = segjobs(argv)
        sys.stdout.flush()
        if code != 0:
            print(f"{command} exited with {code}", file=sys.stderr)
            return code
    print(f"\n== {total}/{total} verifying every partition with segjobs dump --verify")
    for pdir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        code = _verify(pdir)
        if code != 0:
            return code
    print(f"\nDone. The reports are {root}/night-*-report.json; try:\n"
          f"  .venv/bin/segjobs inspect --log-dir {log_dir} --config {config} --now {NOW_MS + DAY_MS}\n"
          f"  .venv/bin/segjobs dump --deep {log_dir}/users-changelog-0 | head")
    return 0


def _verify(pdir: Path) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = segjobs(["dump", "--verify", str(pdir)])
    status = "OK" if code == 0 else "FAILED"
    print(f"  {pdir.name}: {status}")
    if code != 0:
        print(err.getvalue(), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
