"""The ``kafka-segments`` data source on ``local[2]`` against a plain Parquet read of the same records.
In-process rows: one Spark session in this process, start-up reported apart and excluded from query times.

Data, two log dirs of 1 KB values, uncompressed, each also written to Parquet once, untimed (Spark's default
snappy compression; the random values do not compress, so the files are about as large as the segments):

* ``2 GB``: 8 partitions of 64 MiB segments (``--quick``: 200 MB of 8 MiB segments);
* ``1,720 small segments``: 43 MB in 8 partitions of 25 KB segments (the same with ``--quick``), what a
  log dir of a low-volume topic with short ``segment.ms`` looks like: the case the packing of small segments
  into tasks is for.

Queries, each timed on both sources (best of ``repeat`` runs; the first run of each also warms the Python
workers and the decoder's compiled kernels):

* ``count()``: for Parquet this reads only the footers' row counts, so its ratio flatters Parquet; the data
  source has no such shortcut (it must find record counts in the batches).
* ``groupBy(topic).count()``: what a look at a log dir asks first.
* both again with the ``columns`` option set to ``topic`` (the source decodes no record bytes and hands one
  column to Spark): the column pruning Spark does not do for a Python data source; Parquet prunes by itself.
* ``groupBy(key).count()``: every key crosses into the JVM and is shuffled.
* ``sum(length(value))``: forces a full read of every value on both sides; the fairest like-for-like row.

Before the session starts, ``segjobs inspect`` scans the small segments' dir in a new process, three times:
its wall time, its scan rate (bytes over the time from Spark's start to its last progress line) and the longest
time it printed nothing. Target: 10x the 0.6 MB/s issue 34 found, never silent for more than 5 s.

Without ``--quick``, one more row reads the small segments one task per segment (``maxSplitBytes`` of one byte:
nothing packed), as the source did before it packed them: the ratio packing buys.

The JVM: users query the source from Spark sessions of their own, whose JVM compiles with its default JIT;
segjobs gives the JVMs it launches for its own jobs a C1-only JIT (``FAST_START_JAVA_OPTIONS`` in
:mod:`jobs.engine.runtime.spark_session`: they only schedule tasks), and with ``local[N]`` the same JVM turns every
Arrow batch of the source into rows, which C1-only code does 8-22% slower. So the section builds its session
with the JVM's default JIT, unless a section before it in this process built one already; the start-up row says
which JIT the session has.

With ``--baseline DIR`` (another checkout, e.g. ``git archive <commit> | tar -x -C DIR``), the 2 GB dir's count,
pruned count, pruned groupBy and full read run again in new processes (:mod:`benchmarks.source_probe`), this
checkout and the baseline alternating, three of each: after / before ratios measured in the same run.

Targets (from the issues): at least 500 MB/s of log bytes for the count, and at least 1 GB/s for the pruned
count and groupBy(topic) on the 2 GB dir (an idle machine of this kind).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.baselines import (
    generate_bench_log_dir,
    log_files,
    timed_session,
    verdict,
)
from benchmarks.memory import PeakTreeRss

TARGET_COUNT_MB_PER_S = 500
TARGET_PRUNED_MB_PER_S = 1000
#: inspect over the small segments: 10x the scan rate issue 34 found (0.6 MB/s), and never silent for long
TARGET_INSPECT_MB_PER_S = 6.0
TARGET_INSPECT_SILENCE_S = 5.0
SMALL_SEGMENT_BYTES = 25_000
SMALL_DIR_BYTES = 43_000_000
SMALL_BATCH_RECORDS = 24  #: one 24.7 KB batch a segment: 1,720 or so segments in 43 MB
#: ``--baseline``: new processes of each checkout, alternating
BASELINE_PAIRS = 3


def _best_seconds(action: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _topic_counts(df: Any) -> list[tuple[str, int]]:
    return sorted((r[0], r[1]) for r in df.groupBy("topic").count().collect())


def _queries(full: Any, pruned: Any) -> dict[str, Callable[[], Any]]:
    """The timed queries, by name, on a source read in full (``full``) and with ``columns`` ``topic``
    (``pruned``; for Parquet the same DataFrame: it prunes by itself)."""
    from pyspark.sql import functions as F

    return {
        "count()": lambda: full.count(),
        "groupBy(topic).count()": lambda: _topic_counts(full),
        "count(), columns=topic": lambda: pruned.count(),
        "groupBy(topic).count(), columns=topic": lambda: _topic_counts(pruned),
        "groupBy(key).count()": lambda: full.groupBy("key").count().count(),
        "sum(length(value))": lambda: full.agg(F.sum(F.length("value"))).collect()[0][0],
    }


def _target(name: str, mb_s: float, small: bool) -> dict[str, str]:
    if small:
        return {}
    if name == "count()":
        return {"target": f">= {TARGET_COUNT_MB_PER_S} MB/s", "result": verdict(mb_s >= TARGET_COUNT_MB_PER_S)}
    if name.endswith("columns=topic"):
        return {"target": f">= {TARGET_PRUNED_MB_PER_S} MB/s", "result": verdict(mb_s >= TARGET_PRUNED_MB_PER_S)}
    return {}


def _dir_rows(spark: Any, label: str, src: Path, parquet: Path, gen: Any, repeat: int, small: bool,
              unpacked_row: bool) -> list[dict]:
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    rows: list[dict] = [{"bench": f"{label}: generate input", "partitions": gen.partitions, "segments": gen.segments,
                         "records": gen.records, "MB": round(input_bytes / 1e6)}]
    full = spark.read.format("kafka-segments").load(str(src.resolve()))
    pruned = spark.read.format("kafka-segments").option("columns", "topic").load(str(src.resolve()))
    t0 = time.perf_counter()
    full.write.mode("overwrite").parquet(str(parquet.resolve()))
    parquet_bytes = sum(f.stat().st_size for f in parquet.glob("*.parquet"))
    rows.append({"bench": f"{label}: write the same records to Parquet (untimed set-up)",
                 "parquet_MB": round(parquet_bytes / 1e6), "seconds": round(time.perf_counter() - t0, 1)})
    parquet_df = spark.read.parquet(str(parquet.resolve()))
    rows.append({"bench": f"{label}: Spark tasks of one scan", "kafka_segments": full.rdd.getNumPartitions(),
                 "parquet": parquet_df.rdd.getNumPartitions()})
    baseline = _queries(parquet_df, parquet_df)
    for name, ours in _queries(full, pruned).items():
        with PeakTreeRss() as mem:
            seg_s, seg_result = _best_seconds(ours, repeat)
        par_s, par_result = _best_seconds(baseline[name], repeat)
        if seg_result != par_result:
            raise RuntimeError(f"{label} {name}: kafka-segments gave {seg_result}, Parquet {par_result}")
        mb_s = input_bytes / seg_s / 1e6
        rows.append({"bench": f"{label}: kafka-segments {name}", "seconds": round(seg_s, 2),
                     "log_MB_per_s": round(mb_s), "records_per_s": round(gen.records / seg_s),
                     "parquet_seconds": round(par_s, 2), "time_ratio_to_parquet": round(seg_s / par_s, 2),
                     "peak_tree_RSS_MB": mem.peak_mb, **_target(name, mb_s, small)})
    if unpacked_row:
        one_each = spark.read.format("kafka-segments").option("maxSplitBytes", "1").load(str(src.resolve()))
        packed_s = min(r["seconds"] for r in rows if r["bench"] == f"{label}: kafka-segments count()")
        t0 = time.perf_counter()
        count = one_each.count()
        seconds = time.perf_counter() - t0
        if count != gen.records:
            raise RuntimeError(f"{label}: one task per segment counted {count}, not {gen.records}")
        rows.append({"bench": f"{label}: kafka-segments count(), one task per segment (nothing packed, once)",
                     "tasks": one_each.rdd.getNumPartitions(), "seconds": round(seconds, 2),
                     "time_ratio_to_packed": round(seconds / packed_s, 1)})
    return rows


def _inspect_rows(label: str, log_dir: Path, repeat: int) -> list[dict]:
    """``segjobs inspect`` of ``log_dir`` in a new process, as a user runs it (default options), ``repeat``
    times: wall time, the scan's rate (log bytes over the time from Spark's start to the last progress line, the
    way the command's own summary counts it) and the longest stretch without a progress line; the median run."""
    from benchmarks.e2e_bench import segjobs_in_a_new_process

    input_bytes = sum(f.stat().st_size for f in log_files(log_dir))
    runs = []
    for _ in range(repeat):
        run = segjobs_in_a_new_process(["inspect", "--log-dir", str(log_dir), "--format", "json"], log_dir)
        ready = next((t for t, line in run.lines if line.startswith("Spark ready")), 0.0)  # no Spark: 0
        runs.append((run.wall_s, input_bytes / (run.lines[-1][0] - ready) / 1e6, run.longest_silence(), run))
    wall, mb_s, silence, run = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    return [{"bench": f"{label}: segjobs inspect, new process, default options (median of {repeat})",
             "wall_s": round(wall, 1), "wall_min_max_s": f"{min(r[0] for r in runs):.1f}-{max(r[0] for r in runs):.1f}",
             "scan_MB_per_s": round(mb_s, 1), "longest_silence_s": round(silence, 1), "load": run.load,
             "timeline": run.timeline(),
             "target": f">= {TARGET_INSPECT_MB_PER_S} MB/s (10x the 0.6 MB/s of issue 34), "
                       f"silent <= {TARGET_INSPECT_SILENCE_S} s",
             "result": verdict(mb_s >= TARGET_INSPECT_MB_PER_S and silence <= TARGET_INSPECT_SILENCE_S)}]


def _users_session() -> tuple[Any, float]:
    """The section's session, with the JVM's default JIT as a user's own session has it (module docstring)."""
    from jobs.engine.runtime.spark_session import JIT_OPTS_ENV

    before = os.environ.get(JIT_OPTS_ENV)
    os.environ[JIT_OPTS_ENV] = ""
    try:
        return timed_session("local[2]")
    finally:
        if before is None:
            del os.environ[JIT_OPTS_ENV]
        else:
            os.environ[JIT_OPTS_ENV] = before


def _jit_of(spark: Any) -> str:
    from jobs.engine.runtime.spark_session import FAST_START_JAVA_OPTIONS

    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "") or ""
    return "C1 only (segjobs' fast start)" if FAST_START_JAVA_OPTIONS in options else "the JVM's default"


def _probe(tree: Path, log_dir: Path, repeat: int) -> dict[str, Any]:
    """:mod:`benchmarks.source_probe` in a new process with ``tree``'s ``segment_io`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("source_probe.py")), str(log_dir.resolve()),
                           str(repeat)], env=env, cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"source probe of {tree} exited {proc.returncode}: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if Path(result["segment_io"]).resolve() != tree.resolve():
        raise RuntimeError(f"the probe of {tree} imported segment_io from {result['segment_io']}")
    return result


def _baseline_rows(label: str, log_dir: Path, input_bytes: int, baseline: Path, pairs: int) -> list[dict]:
    """The probe's queries on this checkout and on ``baseline``, alternating, ``pairs`` times each: the median of
    each query's best-of-3 seconds and the ratio after / before."""
    here = Path(__file__).resolve().parent.parent
    runs: dict[str, list[dict[str, Any]]] = {"after": [], "before": []}
    for _ in range(pairs):
        for which, tree in (("before", baseline), ("after", here)):
            runs[which].append(_probe(tree, log_dir, 3))
    rows = []
    for query in runs["after"][0]["seconds"]:
        after = statistics.median(r["seconds"][query] for r in runs["after"])
        before = statistics.median(r["seconds"][query] for r in runs["before"])
        rows.append({"bench": f"{label}: kafka-segments {query}, this checkout against --baseline (new processes, "
                              f"alternating, median of {pairs})", "seconds": after,
                     "log_MB_per_s": round(input_bytes / after / 1e6), "baseline_seconds": before,
                     "after_over_before": round(after / before, 2),
                     "loads": [r["load"] for which in ("before", "after") for r in runs[which]]})
    return rows


def run(quick: bool = False, data_dir: Path = Path("bench-data"), baseline: Path | None = None) -> list[dict]:
    from segment_io.spark import register

    total = 200_000_000 if quick else 2_000_000_000
    root = data_dir / "source"
    repeat = 2
    try:
        large, large_s = generate_bench_log_dir(root / "log-dir", total, segment_bytes=(8 if quick else 64) << 20)
        small, small_s = generate_bench_log_dir(root / "small-segments", SMALL_DIR_BYTES,
                                                segment_bytes=SMALL_SEGMENT_BYTES, batch_records=SMALL_BATCH_RECORDS)
        rows: list[dict] = [{"bench": "generate both log dirs (untimed set-up)",
                             "seconds": round(large_s + small_s, 1)}]
        rows += _inspect_rows(f"{small.segments:,} small segments", root / "small-segments", repeat=3)
        spark, startup_s = _users_session()
        rows.append({"bench": "Spark start-up (local[2], excluded from query times)", "seconds": round(startup_s, 1),
                     "jvm_jit": _jit_of(spark)})
        register(spark)
        label = f"{round(total / 1e9, 1)} GB"
        rows += _dir_rows(spark, label, root / "log-dir", root / "parquet", large, repeat,
                          small=False, unpacked_row=False)
        if baseline is not None:
            rows += _baseline_rows(label, root / "log-dir", sum(f.stat().st_size for f in log_files(root / "log-dir")),
                                   baseline, BASELINE_PAIRS)
        rows += _dir_rows(spark, f"{small.segments:,} small segments", root / "small-segments",
                          root / "small-parquet", small, repeat, small=True, unpacked_row=not quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
