"""Many small partitions: the per-partition cost of a compaction run, against the same records in 8 partitions.

Data: topic ``orders``, 100-byte values, half of the records superseded, uncompressed. "Many": 2,000 partitions x
1,000 records (``--quick``: 200 x 1,000), 48 KiB segments, so each partition has two closed segments and an
active one (the shape of a broker's small partitions). "Few": the same number of records in 8 partitions, with
1 MiB segments (the generator's default; the same segment size would give the few partitions hundreds of
segments each, and inflate their time). Both are compacted by the real job through :func:`jobs.api.compact`
on ``local[2]``, in one process with the Spark session built (and timed) beforehand, its Python workers started
(their preload would otherwise fall into the first run timed, the few partitions').

The floor, measured in the same run on copies of both dirs: the file work alone of a crash-safe rewrite
(:func:`_rewrite_floor`), whose many/few ratio bounds what the job's ratio can reach on this disk.

Targets (issue 11): compacting the many partitions takes at most 2x the few; a second run over the many
partitions, in which nothing is dirty any more, takes under 10 s (Spark start-up excluded). The machine load
(``os.getloadavg``) at each step is reported: on a shared machine the numbers are only comparable within a run.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
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


def _rewrite_floor(log_dir: Path) -> float:
    """Seconds of the file work a crash-safe compactor of ``log_dir`` cannot avoid, and nothing else: read each
    partition's closed segments, write one new segment (half their bytes) and its two indexes, then Kafka's
    replace protocol (``.cleaned`` -> ``.swap`` -> live, old files -> ``.deleted``, unlink), each durability step
    one barrier over every partition at once (concurrent fsyncs: the least syncing the protocol allows). The
    per-partition work runs on two threads (the job's two cores). Consumes ``log_dir``."""
    from segment_io.storage.local import _fsync_path as fsync  # the job's own fsync of a file or a directory

    parts = sorted(d for d in log_dir.iterdir() if d.is_dir())
    plans: list[tuple[Path, list[str], list[str]]] = []

    def stage(part: Path) -> tuple[Path, list[str], list[str]]:
        logs = sorted(f.name for f in part.iterdir() if f.name.endswith(".log"))[:-1]  # the active one stays
        data = b"".join((part / name).read_bytes() for name in logs)
        new = [logs[0][:-4] + sfx for sfx in (".log", ".index", ".timeindex")]
        for name, blob in zip(new, (data[: len(data) // 2], bytes(80), bytes(120))):
            (part / (name + ".cleaned")).write_bytes(blob)
        old = [n for log in logs for n in (log, log[:-4] + ".index", log[:-4] + ".timeindex") if (part / n).exists()]
        return part, new, old

    def step(fn: Any, barrier: list[str] | None) -> None:
        list(work.map(fn, plans))
        if barrier:
            list(syncs.map(fsync, barrier))

    def swap(p: tuple[Path, list[str], list[str]]) -> None:
        for n in p[1]:
            os.rename(p[0] / (n + ".cleaned"), p[0] / (n + ".swap"))

    def old_away(p: tuple[Path, list[str], list[str]]) -> None:
        for n in p[2]:
            os.rename(p[0] / n, p[0] / (n + ".deleted"))

    def live(p: tuple[Path, list[str], list[str]]) -> None:
        for n in p[1]:
            os.rename(p[0] / (n + ".swap"), p[0] / n)

    def purge(p: tuple[Path, list[str], list[str]]) -> None:
        for n in p[2]:
            os.unlink(p[0] / (n + ".deleted"))

    os.sync()  # the copy's own writes are not this floor's
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as work, ThreadPoolExecutor(8) as syncs:
        plans.extend(work.map(stage, parts))
        list(syncs.map(fsync, [str(p / (n + ".cleaned")) for p, new, _ in plans for n in new]))
        dirs = [str(p) for p, _, _ in plans]
        step(swap, dirs)
        step(old_away, dirs)
        step(live, dirs)
        step(purge, None)
    return time.perf_counter() - t0


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

        floors = {}
        for name in ("few", "many"):
            shutil.copytree(root / name, root / f"floor-{name}")
            floors[name] = _rewrite_floor(root / f"floor-{name}")
            shutil.rmtree(root / f"floor-{name}")
        floor_ratio = floors["many"] / floors["few"]
        rows.append({"bench": "floor: the file work of a crash-safe rewrite (read, write, Kafka's renames, one "
                     "barrier per step over all partitions), two threads", "few_s": round(floors["few"], 2),
                     "many_s": round(floors["many"], 2), "ratio": round(floor_ratio, 2), "load": _load()})

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
                     "result": verdict(ratio <= TARGET_MANY_VS_FEW),
                     "floor_ratio": round(floor_ratio, 2), "job_to_floor_many": round(many_s / floors["many"], 2),
                     "job_to_floor_few": round(few_s / floors["few"], 2), "load": _load()})

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
