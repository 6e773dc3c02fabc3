"""Many small partitions: the per-partition cost of a compaction run, against the same records in 8 partitions.

Data: topic ``orders``, 100-byte values, half of the records superseded, uncompressed. "Many": 2,000 partitions x
1,000 records (``--quick``: 200 x 1,000), 48 KiB segments, so each partition has two closed segments and an
active one (the shape of a broker's small partitions). "Few": the same number of records in 8 partitions, with
1 MiB segments (the generator's default; the same segment size would give the few partitions hundreds of
segments each, and inflate their time). Both are compacted by the real job through :func:`jobs.api.compact`
on ``local[2]``, in one process with the Spark session built (and timed) beforehand, its Python workers started
(their preload would otherwise fall into the first run timed, the few partitions').

Targets (issue 11): compacting the many partitions takes at most 2x the few; a second run over the many
partitions, in which nothing is dirty any more, takes under 10 s (Spark start-up excluded). The machine load
(``os.getloadavg``) at each step is reported: on a shared machine the numbers are only comparable within a run.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.baselines import log_files, timed_session, verdict

TARGET_MANY_VS_FEW = 2.0
TARGET_CLEAN_RUN_S = 10.0

CONFIG_TOML = '[defaults]\n"cleanup.policy" = "compact"\n'


def _generate(out: Path, partitions: int, records: int, segment_bytes: int) -> Any:
    from segment_io.generate import GenerateSpec, generate_log_dir

    spec = GenerateSpec(topics=("orders",), partitions=partitions, records=records, segment_bytes=segment_bytes,
                        value_bytes=100, superseded_share=0.5)
    return generate_log_dir(spec, str(out))


def _now() -> str:
    """An instant after every generated timestamp, so no min-lag or horizon rule depends on the wall clock."""
    from segment_io.generate import GenerateSpec

    spec = GenerateSpec()
    return str(spec.start_ms + spec.span_ms + 24 * 3600 * 1000)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _compact(spark: Any, log_dir: Path, config: Path) -> tuple[float, Any]:
    from jobs import api

    t0 = time.perf_counter()
    result = api.compact(log_dir, api.CompactOptions(config=config, progress=lambda line: None), now=_now(),
                         spark=spark)
    seconds = time.perf_counter() - t0 - float(result.report.spark_startup_s or 0.0)
    if result.exit_code != 0:
        raise RuntimeError(f"segjobs compact exited {result.exit_code} on {log_dir}: {result.errors}")
    return seconds, result


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    many_n = 200 if quick else 2000
    records = 1000
    few_n = 8
    root = data_dir / "many-partitions"
    shutil.rmtree(root, ignore_errors=True)
    config = root / "topics.toml"
    rows: list[dict] = []
    try:
        root.mkdir(parents=True)
        config.write_text(CONFIG_TOML)
        t0 = time.perf_counter()
        many = _generate(root / "many", many_n, records, 48 << 10)
        few = _generate(root / "few", few_n, many_n * records // few_n, 1 << 20)
        many_mb = sum(f.stat().st_size for f in log_files(root / "many")) / 1e6
        few_mb = sum(f.stat().st_size for f in log_files(root / "few")) / 1e6
        rows.append({"bench": "generate input", "many": f"{many.partitions} partitions, {many.segments} segments, "
                     f"{many.records} records, {many_mb:.0f} MB", "few": f"{few.partitions} partitions, "
                     f"{few.segments} segments, {few.records} records, {few_mb:.0f} MB",
                     "seconds": round(time.perf_counter() - t0, 1)})

        spark, startup_s = timed_session("local[2]")
        rows.append({"bench": "Spark start-up and its Python workers (local[2], excluded from job times)",
                     "seconds": round(startup_s, 1),
                     "load": _load()})

        few_s, few_result = _compact(spark, root / "few", config)
        rows.append({"bench": f"compact {few_n} partitions", "seconds": round(few_s, 1),
                     "selected": few_result.report.totals.get("selected"), "records_removed":
                     few_result.records_removed, "load": _load()})
        many_s, many_result = _compact(spark, root / "many", config)
        if many_result.report.totals.get("selected") != many_n:
            raise RuntimeError(f"expected all {many_n} partitions selected: {many_result.report.totals}")
        ratio = many_s / few_s
        rows.append({"bench": f"compact {many_n} partitions (same records)", "seconds": round(many_s, 1),
                     "selected": many_result.report.totals.get("selected"),
                     "records_removed": many_result.records_removed,
                     "per_partition_ms": round(1000 * (many_s - few_s) / many_n, 1),
                     "ratio_to_few": round(ratio, 2), "target": f"<= {TARGET_MANY_VS_FEW}x",
                     "result": verdict(ratio <= TARGET_MANY_VS_FEW), "load": _load()})

        clean_s, clean_result = _compact(spark, root / "many", config)
        if clean_result.report.totals.get("selected"):
            raise RuntimeError(f"the second run found dirty partitions: {clean_result.report.totals}")
        rows.append({"bench": f"compact {many_n} partitions again: nothing dirty", "seconds": round(clean_s, 1),
                     "per_partition_ms": round(1000 * clean_s / many_n, 2), "target": f"< {TARGET_CLEAN_RUN_S} s",
                     "result": verdict(clean_s < TARGET_CLEAN_RUN_S), "load": _load()})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":  # python -m benchmarks.many_partitions_bench [--quick]
    import sys

    for row in run(quick="--quick" in sys.argv):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
