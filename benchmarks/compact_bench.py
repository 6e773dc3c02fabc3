"""End-to-end compaction: the real ``segjobs compact`` job on ``local[2]`` against its baselines.

Data: a generated log dir of 8 partitions of 1 KB values, uncompressed, half of the records superseded
(4 GB; ``--quick``: 400 MB). The job runs on a fresh copy of it through :func:`jobs.api.compact`, in this process,
with the Spark session built (and timed) beforehand, so start-up is reported on its own.

Targets (from the issue): input MB/s >= 300 (input bytes / job time without start-up); >= 10x a
straightforward kafka-python compactor on the same data in the same run; <= 3x the time to merely read the
input twice and write the output once. Peak RSS of the whole process tree (the JVM and Python workers
included) during the job is reported.

The kafka-python compactor is slow, so it runs on one partition and its time is scaled to the whole input by
bytes (rows say so). Input bytes are all ``.log`` bytes of the log dir: the job reads all of them (the scan
reads every segment, the compaction task reads the cleanable ones twice), although Kafka's rule leaves each
partition's active segment uncleaned.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from benchmarks.baselines import (
    generate_bench_log_dir,
    kafka_python_compact,
    log_files,
    read_write_floor,
    timed_session,
    verdict,
)
from benchmarks.memory import PeakTreeRss

TARGET_MB_PER_S = 300
TARGET_VS_KAFKA_PYTHON = 10
TARGET_VS_FLOOR = 3.0

#: Topic config of the run: compact everything that is dirty; defaults otherwise (Kafka's).
CONFIG_TOML = '[defaults]\n"cleanup.policy" = "compact"\n'


def _now_after_generated() -> str:
    """An instant after every generated timestamp (the generator spreads them over 7 days from a fixed
    start), so no min-lag or horizon rule depends on the wall clock."""
    from segment_io.generate import GenerateSpec

    spec = GenerateSpec()
    return str(spec.start_ms + spec.span_ms + 24 * 3600 * 1000)


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    from jobs import api

    total = 400_000_000 if quick else 4_000_000_000
    segment_bytes = (8 if quick else 64) << 20
    root = data_dir / "compact"
    src, work, scratch = root / "source", root / "log-dir", root / "scratch"
    rows: list[dict] = []
    try:
        gen, gen_s = generate_bench_log_dir(src, total, segment_bytes=segment_bytes)
        input_bytes = sum(f.stat().st_size for f in log_files(src))
        rows.append({"bench": "generate input", "partitions": gen.partitions, "segments": gen.segments,
                     "records": gen.records, "MB": round(input_bytes / 1e6), "seconds": round(gen_s, 1),
                     "MB_per_s": round(input_bytes / gen_s / 1e6)})

        spark, startup_s = timed_session("local[2]")
        rows.append({"bench": "Spark start-up and its Python workers (local[2], excluded from job times)",
                     "seconds": round(startup_s, 1)})

        shutil.copytree(src, work)
        config = root / "topics.toml"
        config.write_text(CONFIG_TOML)
        with PeakTreeRss() as mem:
            t0 = time.perf_counter()
            result = api.compact(work, api.CompactOptions(config=config), now=_now_after_generated(), spark=spark)
            wall_s = time.perf_counter() - t0
        if result.exit_code != 0:
            raise RuntimeError(f"segjobs compact exited {result.exit_code}: {result.errors}")
        job_s = wall_s - float(result.report.spark_startup_s or 0.0)
        output_bytes = sum(f.stat().st_size for f in log_files(work))
        cleanable = sum(int(p.entry.get("cleanable_bytes") or 0) for p in result.partitions)
        if not result.records_removed:
            raise RuntimeError("the job removed nothing: the benchmark data or config is wrong")
        mb_s = input_bytes / job_s / 1e6
        rows.append({"bench": "segjobs compact (memory strategy)", "input_MB": round(input_bytes / 1e6),
                     "cleanable_MB": round(cleanable / 1e6), "output_MB": round(output_bytes / 1e6),
                     "records_removed": result.records_removed, "seconds": round(job_s, 1),
                     "input_MB_per_s": round(mb_s), "target": f">= {TARGET_MB_PER_S} MB/s",
                     "result": verdict(mb_s >= TARGET_MB_PER_S)})
        rows.append({"bench": "peak RSS, whole process tree (driver + JVM + Python workers)",
                     "before_job_MB": mem.start_mb, "peak_MB": mem.peak_mb})

        # kafka-python compactor on one partition of the same (page-cached) input, scaled by bytes.
        one = sorted(p for p in src.iterdir() if p.is_dir())[0]
        base = kafka_python_compact(one, scratch / "kafka-python" / one.name)
        scaled_s = base.seconds * input_bytes / base.bytes_in
        speedup = scaled_s / job_s
        rows.append({"bench": "kafka-python compactor (read all, dict of last record per key, rewrite)",
                     "measured_on": f"1 partition, {round(base.bytes_in / 1e6)} MB, {base.records_in} records "
                                    f"-> {base.records_out}", "measured_seconds": round(base.seconds, 1),
                     "scaled_seconds_for_all_input": round(scaled_s, 1),
                     "MB_per_s": round(base.bytes_in / base.seconds / 1e6),
                     "segjobs_speedup": round(speedup, 1), "target": f">= {TARGET_VS_KAFKA_PYTHON}x",
                     "result": verdict(speedup >= TARGET_VS_KAFKA_PYTHON)})

        floor_s = read_write_floor(log_files(src), output_bytes, scratch)
        ratio = job_s / floor_s
        rows.append({"bench": "floor: read input twice + write output once (fsync)",
                     "seconds": round(floor_s, 2), "MB_per_s": round(input_bytes / floor_s / 1e6),
                     "segjobs_time_ratio": round(ratio, 2), "target": f"<= {TARGET_VS_FLOOR}x",
                     "result": verdict(ratio <= TARGET_VS_FLOOR)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
