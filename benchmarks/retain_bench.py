"""Retention at scale: plan and commit retention for 2,000 partitions / 40,000 segments on local[2].

The log dir is generated quickly: one v2 batch is encoded per age ("expired" and "recent"), and every
segment is that batch's bytes with its base offset patched in (the base offset lies outside the CRC), so
40,000 segments cost 40,000 small file writes, not 40,000 encodes. Every partition has 20 segments of 10
records: the first 10 are a day older than retention.ms, the last 10 are recent, so half of all segments
expire. The ``.timeindex`` files are absent, so every segment's batch headers must be scanned.

Measured on a warm Spark session (its start-up is excluded): a dry run (list + scan + plan) and the real
run (lock + recovery + list + scan + plan + two-phase delete + checkpoints), each in seconds and seconds per
1,000 segments. The issue's target: the real run under 60 s for the full size.
"""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

from segment_io.layout import segment_file_name
from segment_io.units import DAY_MS

NOW_MS = 1_700_000_000_000
RETENTION_MS = 7 * DAY_MS
SEGMENTS_PER_PARTITION = 20
RECORDS_PER_SEGMENT = 10


def _batch(timestamp: int) -> bytes:
    """One encoded v2 batch of RECORDS_PER_SEGMENT records at base offset 0."""
    import pyarrow as pa

    from segment_io.encode import encode_batches
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder(topic="bench", partition=0)
    log.batch([rec(f"key-{i:04d}", "v" * 100, timestamp=timestamp + i) for i in range(RECORDS_PER_SEGMENT)])
    encoded = encode_batches(log.table())
    sink = pa.BufferOutputStream()
    encoded.write_to(sink)
    return sink.getvalue().to_pybytes()


def build_log_dir(root: Path, partitions: int) -> int:
    """Write ``partitions`` partitions of SEGMENTS_PER_PARTITION segments each; returns the segment count."""
    expired = _batch(NOW_MS - RETENTION_MS - DAY_MS)
    recent = _batch(NOW_MS - DAY_MS)
    root.mkdir(parents=True)
    count = 0
    for p in range(partitions):
        pdir = root / f"events-{p}"
        pdir.mkdir()
        for s in range(SEGMENTS_PER_PARTITION):
            base = s * RECORDS_PER_SEGMENT
            template = expired if s < SEGMENTS_PER_PARTITION // 2 else recent
            (pdir / segment_file_name(base)).write_bytes(struct.pack(">q", base) + template[8:])
            (pdir / segment_file_name(base, ".index")).write_bytes(b"")  # one batch: no index entry
            count += 1
        end = SEGMENTS_PER_PARTITION * RECORDS_PER_SEGMENT
        (pdir / segment_file_name(end, ".snapshot")).write_bytes(b"")
        (pdir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    return count


def _run(log_dir: Path, spark, *, dry_run: bool):
    from jobs import api

    options = api.RetainOptions(overrides=[f"*:retention.ms={RETENTION_MS}"], dry_run=dry_run)
    t0 = time.perf_counter()
    result = api.retain(log_dir, options, now=NOW_MS, spark=spark)
    seconds = time.perf_counter() - t0
    if result.exit_code != 0:
        raise RuntimeError(f"segjobs retain exited with {result.exit_code}: {result.errors}")
    # the session is warm, but subtract whatever start-up the report still measured
    return seconds - float(result.report.spark_startup_s or 0.0), result


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    """The benchmark section for ``benchmarks/run.py``: one row per measured run."""
    from jobs.engine.runtime.spark_session import build_session

    partitions = 200 if quick else 2_000
    root = Path(data_dir) / "retain"
    shutil.rmtree(root, ignore_errors=True)
    log_dir = root / "logs"
    t0 = time.perf_counter()
    segments = build_log_dir(log_dir, partitions)
    built = time.perf_counter() - t0
    spark = build_session(app_name="segjobs-bench", master="local[2]")  # start-up outside the timings
    rows = []
    try:
        for label, dry_run in (("dry run: list+scan+plan", True), ("real run: +delete+checkpoints", False)):
            seconds, result = _run(log_dir, spark, dry_run=dry_run)
            rows.append({
                "case": label, "partitions": partitions, "segments": segments,
                "segments_deleted": result.segments_deleted, "seconds": round(seconds, 2),
                "s_per_1000_segments": round(seconds / segments * 1000, 3),
                "target_s": 60 if not quick else None, "build_s": round(built, 1),
            })
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
