"""External-sort compaction against the memory strategy, on one big partition (issue 12).

Data: one generated partition of ``records`` records with 100 B values, half of them superseded (``records / 2``
distinct keys), uncompressed, in segments of ``records / 8`` records' bytes (the topic's ``segment.bytes`` set to
the same size, so every segment is a group of its own, as on a broker). Every job runs through
:func:`jobs.api.compact` on a fresh copy, at a fixed ``--now``, in one ``local[2]`` session built beforehand.

Cases (the issue's, at full size: 20 M records, 10 M keys, the default 128 MiB buffer, which holds 5.03 M keys):

* ``external-sort``, one run, the default buffer: time, process-tree CPU time (CPU/wall > 1 means both cores
  worked inside the one partition), Spark tasks of its jobs, spilled bytes (from Spark's status REST API when
  the UI is up), peak RSS of the process tree;
* ``memory`` with the same buffer, run after run until the map no longer fills (Kafka's multi-pass): the sum;
* ``memory`` with a buffer that holds every key (1 GiB at full size): one pass.

Targets: external-sort <= 1.5x the single big-buffer memory pass, and faster than the sum of the partial runs.
A crossover table (``--crossover``) times both strategies at several key counts (one memory pass with a
buffer big enough, against external-sort), which is what ``auto``'s rule rests on. ``--huge`` adds the 50 M-key
case (one external-sort run with ``spark.driver.memory=2g`` is what the issue asks; the session of this module
is the one ``timed_session`` built).

Scaling: a run with fewer records than 20 M scales the buffer with the keys (a buffer holding half the keys, as
5.03 M of 10 M at full size) so that the memory strategy still needs several passes; the targets are not scaled.
``make bench`` runs the full size; ``--quick`` runs 2 M records. Run alone:
``python -m benchmarks.external_sort_bench --records 2000000 --crossover 250000,500000``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.baselines import log_files, timed_session, verdict
from benchmarks.memory import PeakTreeRss

FULL_RECORDS = 20_000_000
QUICK_RECORDS = 2_000_000
VALUE_BYTES = 100
TARGET_VS_BIG_BUFFER = 1.5
NOW = str(1_700_000_000_000 + 8 * 86_400_000)  # after every generated timestamp (7 days from the start)


def _tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live descendants (the JVM, the Python workers)."""
    import psutil

    root = psutil.Process(os.getpid())
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def _spark_numbers(spark: Any, group: str) -> dict[str, Any]:
    """Tasks of the jobs of ``group`` (status tracker; a run's jobs are in ``segjobs-compact-<run id>``) and
    spilled bytes (REST API; None without the UI)."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    stages = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        stages += list(info.stageIds) if info else []
    tasks = 0
    for sid in stages:
        st = tracker.getStageInfo(sid)
        tasks += st.numTasks if st else 0
    spilled = None
    if sc.uiWebUrl:
        try:
            url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
            with urllib.request.urlopen(url, timeout=10) as resp:  # our own driver's UI
                data = json.loads(resp.read())
            spilled = sum(int(s.get("diskBytesSpilled", 0)) for s in data if s.get("stageId") in set(stages))
        except (OSError, ValueError):
            spilled = None
    return {"spark_tasks": tasks, "spill_disk_bytes": spilled}


def _generate(out: Path, records: int) -> Path:
    from segment_io.generate import GenerateSpec, generate_log_dir

    if out.exists():
        shutil.rmtree(out)
    record_bytes = VALUE_BYTES + 40  # value, 16-byte key and the record's framing, roughly
    spec = GenerateSpec(topics=("big",), partitions=1, records=records, value_bytes=VALUE_BYTES,
                        superseded_share=0.5, tombstone_share=0.0, batch_records=200,
                        segment_bytes=max(1 << 20, records * record_bytes // 8))
    generate_log_dir(spec, out)
    return out


def _compact(spark: Any, src: Path, work: Path, strategy: str, buffer: int, segment_bytes: int,
             group: str) -> tuple[float, dict, Any]:
    """One run on ``work`` (which must already hold the data): wall seconds, the partition's entry, result."""
    from jobs import api
    from jobs.rules.config import ConfigSet

    config = ConfigSet().with_overrides(["*:cleanup.policy=compact", f"*:segment.bytes={segment_bytes}"])
    options = api.CompactOptions(config=config, topics=("*",), strategy=strategy, dedupe_buffer_bytes=buffer,
                                 progress=lambda line: None)
    t0 = time.perf_counter()
    result = api.compact(work, options, now=NOW, spark=spark)
    wall = time.perf_counter() - t0
    if result.exit_code != 0:
        raise RuntimeError(f"{strategy}: exit {result.exit_code}: {result.errors}")
    (entry,) = [p.entry for p in result.partitions]
    return wall, entry, result


def _group(result: Any) -> str:
    """The Spark job group of a run (see jobs.engine.seams.SparkTasks)."""
    return f"segjobs-compact-{result.run_id}"


def _fresh(src: Path, work: Path) -> None:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)


def compare(spark: Any, root: Path, records: int, *, big_buffer: int | None = None) -> list[dict]:
    """The three cases on one partition of ``records`` records; rows for the table."""
    from jobs.rules.map_capacity import buffer_bytes_for_keys

    keys = records // 2
    scaled = records < FULL_RECORDS
    default_buffer = 128 << 20
    buffer = default_buffer if not scaled else buffer_bytes_for_keys(max(1, keys // 2))
    big = big_buffer or (1 << 30 if not scaled else buffer_bytes_for_keys(keys + 1))
    src = _generate(root / f"src-{records}", records)
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    segment_bytes = max(1 << 20, records * (VALUE_BYTES + 40) // 8)
    work = root / "work"
    rows: list[dict] = [{"bench": "input", "records": records, "keys": keys, "MB": round(input_bytes / 1e6),
                         "buffer_bytes": buffer, "buffer_keys": _keys(buffer),
                         "scaled": "yes: buffer holds half the keys, as 128 MiB of 10 M at full size" if scaled
                         else "no"}]

    _fresh(src, work)
    cpu0 = _tree_cpu_seconds()
    with PeakTreeRss() as mem:
        ext_s, entry, ext_result = _compact(spark, src, work, "external-sort", buffer, segment_bytes, "ext-sort")
    cpu = _tree_cpu_seconds() - cpu0
    ext_files = {f.name: f.read_bytes() for f in sorted((work / "big-0").iterdir())}
    rows.append({"bench": "external-sort, one run", "seconds": round(ext_s, 1), "cpu_seconds": round(cpu, 1),
                 "cpu_per_wall": round(cpu / ext_s, 2), "MB_per_s": round(input_bytes / ext_s / 1e6, 1),
                 "records_removed": entry["records_removed"], "partial": entry["partial"],
                 "peak_rss_MB": round(mem.peak_bytes / 1e6), **entry.get("external_sort", {}),
                 **_spark_numbers(spark, _group(ext_result))})

    _fresh(src, work)
    runs, partial_s, removed = 0, 0.0, 0
    while True:
        s, entry, _ = _compact(spark, src, work, "memory", buffer, segment_bytes, f"mem-{runs}")
        runs += 1
        partial_s += s
        removed += entry["records_removed"]
        if not entry["partial"] or runs > 50:
            break
    rows.append({"bench": "memory, same buffer, runs until complete", "runs": runs, "seconds": round(partial_s, 1),
                 "records_removed": removed})

    _fresh(src, work)
    big_s, entry, _ = _compact(spark, src, work, "memory", big, segment_bytes, "mem-big")
    same = {f.name: f.read_bytes() for f in sorted((work / "big-0").iterdir())} == ext_files
    rows.append({"bench": f"memory, one pass, buffer {big >> 20} MiB", "seconds": round(big_s, 1),
                 "records_removed": entry["records_removed"], "partial": entry["partial"],
                 "bytes_identical_to_external_sort": same})
    rows.append({"bench": "ratios", "external_sort_vs_big_buffer": round(ext_s / big_s, 2),
                 "target": f"<= {TARGET_VS_BIG_BUFFER}",
                 "verdict_big_buffer": verdict(ext_s / big_s <= TARGET_VS_BIG_BUFFER),
                 "external_sort_vs_partial_runs_sum": round(ext_s / partial_s, 2), "target_partial": "< 1",
                 "verdict_partial": verdict(ext_s < partial_s)})
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return rows


def _keys(buffer: int) -> int:
    from jobs.rules.map_capacity import max_keys_for_buffer

    return max_keys_for_buffer(buffer)


def crossover(spark: Any, root: Path, key_counts: list[int]) -> list[dict]:
    """Both strategies at each key count (records = 2 x keys), memory with a buffer holding every key."""
    from jobs.rules.map_capacity import buffer_bytes_for_keys

    rows = []
    for keys in key_counts:
        records = 2 * keys
        src = _generate(root / f"cross-{keys}", records)
        segment_bytes = max(1 << 20, records * (VALUE_BYTES + 40) // 8)
        work = root / "work"
        times = {}
        for strategy in ("memory", "external-sort"):
            _fresh(src, work)
            s, _, _ = _compact(spark, src, work, strategy, buffer_bytes_for_keys(keys + 1), segment_bytes,
                               f"cross-{keys}-{strategy}")
            times[strategy] = s
        rows.append({"bench": "crossover", "keys": keys, "records": records, "memory_s": round(times["memory"], 1),
                     "external_sort_s": round(times["external-sort"], 1),
                     "ratio": round(times["external-sort"] / times["memory"], 2)})
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)
    return rows


def huge(spark: Any, root: Path, keys: int) -> list[dict]:
    """One external-sort run on a partition of ``keys`` distinct keys (2 x keys records), default buffer."""
    records = 2 * keys
    src = _generate(root / "huge", records)
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    segment_bytes = max(1 << 20, records * (VALUE_BYTES + 40) // 8)
    cpu0 = _tree_cpu_seconds()
    with PeakTreeRss() as mem:
        s, entry, huge_result = _compact(spark, src, src, "external-sort", 128 << 20, segment_bytes, "huge")
    shutil.rmtree(src, ignore_errors=True)
    return [{"bench": f"external-sort, {keys:,} keys", "seconds": round(s, 1),
             "cpu_seconds": round(_tree_cpu_seconds() - cpu0, 1), "MB": round(input_bytes / 1e6),
             "MB_per_s": round(input_bytes / s / 1e6, 1), "target_MB_per_s": 50,
             "verdict": verdict(input_bytes / s / 1e6 >= 50), "partial": entry["partial"],
             "peak_rss_MB": round(mem.peak_bytes / 1e6), **_spark_numbers(spark, _group(huge_result))}]


def run(quick: bool = False, data_dir: Path = Path("bench-data"), *, records: int | None = None,
        crossover_keys: list[int] | None = None, huge_keys: int | None = None) -> list[dict]:
    records = records or (QUICK_RECORDS if quick else FULL_RECORDS)
    if crossover_keys is None:
        crossover_keys = [250_000, 500_000, 1_000_000] if quick else [1_000_000, 5_000_000, 20_000_000, 50_000_000]
    root = data_dir / "external-sort"
    spark, startup_s = timed_session("local[2]")
    rows: list[dict] = [{"bench": "Spark start-up (local[2], excluded)", "seconds": round(startup_s, 1)}]
    try:
        # Warm-up, not reported: Python workers start and load the compiled kernels once, whichever case is first.
        crossover(spark, root, [10_000])
        rows += compare(spark, root, records)
        rows += crossover(spark, root, crossover_keys)
        if huge_keys:
            rows += huge(spark, root, huge_keys)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.external_sort_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=FULL_RECORDS, help="records of the compared partition")
    p.add_argument("--crossover", default="", help="comma-separated key counts for the crossover table")
    p.add_argument("--huge", type=int, default=0, help="distinct keys of the one-run case (50000000 in the issue)")
    p.add_argument("--data-dir", default="bench-data")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    keys = [int(k) for k in args.crossover.split(",") if k.strip()]
    for row in run(data_dir=Path(args.data_dir), records=args.records, crossover_keys=keys, huge_keys=args.huge):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
