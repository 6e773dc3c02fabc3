"""Fixed cost of a run, distance to the I/O floor, and bounded task memory (issue 11, items 2-4).

Rows, each with its target and PASS/MISS:

* **fixed cost**: ``segjobs compact`` on the demo log dir (``make demo``'s first night), end to end in a fresh
  process: interpreter, imports, JVM and Spark start-up, Python workers, scan, compaction, commits. Reported
  as wall seconds and as CPU seconds of the whole process tree (JVM and Python workers included): on a shared
  machine the wall time mostly measures the other tenants, the CPU time much less so. Target: <= 8 s wall on
  an idle machine.
* **nothing due**: ``segjobs compact`` over 2,000 small partitions that are all clean (``--quick``: 200), end to
  end in a fresh process, three times: no Spark starts. Target: <= 3 s wall (the median) on an idle machine.
* **floor ratio** and **kafka-python ratio**: the compaction job on 8 partitions of 1 KB values (4 GB;
  ``--quick`` 400 MB), against reading the input twice and writing the output once, and against a
  kafka-python compactor, in the same run (see :mod:`benchmarks.compact_bench` for both baselines). The job's
  time includes everything after Spark start-up (scan, tasks, commits). Targets: <= 2x the floor, >= 10x
  kafka-python.
* **peak RSS per task**: partitions of large segments (``segment.bytes`` 1 GiB; ``--quick`` 256 MiB), two
  partitions of 1.9 segments (one full group each), on ``local[2]``: the largest RSS of any one Python worker
  (a task runs in one) against ``2 x segment.bytes`` plus the fixed allowance :data:`ALLOWANCE_BYTES` plus
  the offset map
  (``--dedupe-buffer-bytes``, 128 MiB by default). The allowance (interpreter, pyarrow, numba and their
  libraries, the encoder's part buffer, the cleaner's per-row temporaries) was measured with this section.

The machine's load average is printed with every row: compare runs by their ratios and CPU seconds.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from benchmarks.baselines import (
    kafka_python_compact,
    log_files,
    read_write_floor,
    timed_session,
    verdict,
)
from benchmarks.compact_bench import CONFIG_TOML, _now_after_generated
from benchmarks.memory import PeakRssByRole, process_tree

TARGET_FIXED_S = 8.0
TARGET_VS_FLOOR = 2.0
TARGET_VS_KAFKA_PYTHON = 10.0
#: What a Python worker holds besides 2 x segment.bytes and the offset map: ~230 MB interpreter, pyarrow,
#: numpy and numba with their libraries (about half of it file-backed, shared), ~100 MB encoder part, cleaner
#: temporaries and allocator slack. Measured by the "peak RSS per task" row (256 MiB and 1 GiB segments).
ALLOWANCE_BYTES = 400 << 20
DEFAULT_DEDUPE_BYTES = 128 << 20

REPO = Path(__file__).resolve().parents[1]
_NOW_DEMO = "1700691200000"  # the demo's first night (jobs.commands.demo)


def _load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


class _TreeCpu:
    """CPU seconds (user + system) of a process and all its descendants, sampled until it exits (a descendant
    that exits between samples loses at most one interval of CPU)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            procs = process_tree(self.pid)
            if not procs:
                return
            for p in procs:
                try:
                    t = p.cpu_times()
                    self._last[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            self._stop.wait(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self._last.values())


def fixed_cost(scratch: Path) -> dict:
    """``segjobs compact`` on a fresh demo log dir, as a user runs it (a new process)."""
    from jobs.commands.demo import DEMO_DEDUPE_BUFFER_BYTES, build

    src, work = scratch / "demo-source", scratch / "demo-logs"
    for d in (src, work):
        shutil.rmtree(d, ignore_errors=True)
    build(src)
    shutil.copytree(src, work)
    report = scratch / "demo-report.json"
    cmd = [str(Path(sys.executable).with_name("segjobs")), "compact", "--log-dir", str(work), "--config",
           str(REPO / "conf" / "demo-topics.toml"), "--now", _NOW_DEMO, "--dedupe-buffer-bytes",
           str(DEMO_DEDUPE_BUFFER_BYTES), "--report", str(report)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    load = _load()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    cpu = _TreeCpu(proc.pid)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    cpu_s = cpu.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{err[-2000:]}")
    marks = {m.group(2): float(m.group(1)) for m in re.finditer(r"\[compact\s+([\d.]+)s\] (Spark ready|scanned)", err)}
    spark_s = json.loads(report.read_text()).get("spark_startup_s")
    return {"bench": "fixed cost: segjobs compact on the demo log dir (new process, end to end)",
            "command": " ".join(["segjobs", *cmd[1:]]), "wall_s": round(wall, 1), "tree_cpu_s": round(cpu_s, 1),
            "spark_ready_at_s": marks.get("Spark ready"), "spark_startup_s": spark_s,
            "scanned_at_s": marks.get("scanned"), "machine": load, "target": f"<= {TARGET_FIXED_S} s wall (idle)",
            "result": verdict(wall <= TARGET_FIXED_S)}


TARGET_NOTHING_DUE_S = 3.0


def nothing_due_log_dir(out: Path, partitions: int) -> None:
    """A log dir of ``partitions`` small compacted partitions (topic ``orders``, 200 records each, two closed
    segments and an active one) whose cleaner checkpoint stands at each active segment's base: all cleaned, as
    after last night's run, so a compaction finds nothing due."""
    from segment_io.checkpoint import write_offset_checkpoint
    from segment_io.generate import GenerateSpec, generate_log_dir
    from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, list_log_dir
    from segment_io.storage import open_storage

    generate_log_dir(GenerateSpec(topics=("orders",), partitions=partitions, records=200, value_bytes=20,
                                  segment_bytes=4 << 10, superseded_share=0.5), str(out))
    storage = open_storage(str(out))
    listing = list_log_dir(storage, str(out))
    write_offset_checkpoint(storage, storage.join(str(out), CLEANER_OFFSET_CHECKPOINT),
                            {k: p.segments[-1].base_offset for k, p in listing.partitions.items()})


#: Runs of the nothing-due command (new processes on the same log dir): the row gives their median, and their range.
NOTHING_DUE_RUNS = 3


def nothing_due(scratch: Path, quick: bool) -> dict:
    """``segjobs compact`` over 2,000 clean partitions (``--quick``: 200), as a user runs it (a new process):
    lock, recovery, listing, the size scan and the selection, then the report; no Spark. :data:`NOTHING_DUE_RUNS`
    runs: one run's wall time moved by 1 s from one to the next on this project's shared machines."""
    n = 200 if quick else 2000
    logs = scratch / "nothing-due"
    nothing_due_log_dir(logs, n)
    config = scratch / "nothing-due.toml"
    config.write_text('[defaults]\n"cleanup.policy" = "compact"\n')
    report = scratch / "nothing-due-report.json"
    cmd = [str(Path(sys.executable).with_name("segjobs")), "compact", "--log-dir", str(logs), "--config",
           str(config), "--now", _NOW_DEMO, "--report", str(report)]
    load = _load()
    walls, cpus = [], []
    try:
        for _ in range(NOTHING_DUE_RUNS):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
            got = json.loads(report.read_text())
            if got["totals"].get("selected") or got.get("spark_startup_s") is not None:
                raise RuntimeError(f"expected nothing due and no Spark: {got['totals']}, "
                                   f"{got.get('spark_startup_s')}")
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    wall = statistics.median(walls)
    return {"bench": f"fixed cost: segjobs compact with nothing due over {n} partitions (new process, end to end, "
                     f"median of {NOTHING_DUE_RUNS})",
            "wall_s": round(wall, 2), "runs_wall_s": " ".join(f"{w:.2f}" for w in walls),
            "cpu_s": round(statistics.median(cpus), 2), "machine": load,
            "target": f"<= {TARGET_NOTHING_DUE_S} s wall (idle)", "result": verdict(wall <= TARGET_NOTHING_DUE_S)}


def _compact_once(spark, log_dir: Path, config: Path, *, dedupe: int | None = None) -> tuple:
    from jobs import api

    opts = api.CompactOptions(config=config) if dedupe is None else \
        api.CompactOptions(config=config, dedupe_buffer_bytes=dedupe)
    with PeakRssByRole() as mem:
        t0 = time.perf_counter()
        result = api.compact(log_dir, opts, now=_now_after_generated(), spark=spark)
        wall = time.perf_counter() - t0
    if result.exit_code != 0:
        raise RuntimeError(f"segjobs compact exited {result.exit_code}: {result.errors}")
    if not result.records_removed:
        raise RuntimeError("the job removed nothing: the benchmark data or config is wrong")
    return result, wall - float(result.report.spark_startup_s or 0.0), mem


def floor_and_baseline(spark, scratch: Path, quick: bool) -> list[dict]:
    total = 400_000_000 if quick else 4_000_000_000
    src, work = scratch / "bulk-source", scratch / "bulk-logs"
    _generate_elsewhere(src, total, segment_bytes=(8 if quick else 64) << 20)
    shutil.copytree(src, work)
    config = scratch / "bulk.toml"
    config.write_text(CONFIG_TOML)
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    load = _load()
    _, job_s, mem = _compact_once(spark, work, config)
    output_bytes = sum(f.stat().st_size for f in log_files(work))
    floor_s = read_write_floor(log_files(src), output_bytes, scratch / "floor")
    one = sorted(p for p in src.iterdir() if p.is_dir())[0]
    base = kafka_python_compact(one, scratch / "kafka-python" / one.name)
    scaled_s = base.seconds * input_bytes / base.bytes_in
    ratio, speedup = job_s / floor_s, scaled_s / job_s
    rows = [
        {"bench": "compaction job (after Spark start-up)", "partitions": len([p for p in src.iterdir() if p.is_dir()]),
         "segments": len(log_files(src)),
         "input_MB": round(input_bytes / 1e6), "output_MB": round(output_bytes / 1e6), "seconds": round(job_s, 1),
         "MB_per_s": round(input_bytes / job_s / 1e6), "machine": load},
        {"bench": "floor ratio: job / (read input twice + write output once, fsync)", "floor_s": round(floor_s, 2),
         "ratio": round(ratio, 2), "target": f"<= {TARGET_VS_FLOOR}x", "result": verdict(ratio <= TARGET_VS_FLOOR)},
        {"bench": "kafka-python ratio: kafka-python compactor / job (same bytes)",
         "kafka_python_measured": f"{round(base.bytes_in / 1e6)} MB in {base.seconds:.1f} s (1 partition)",
         "kafka_python_scaled_s": round(scaled_s, 1), "speedup": round(speedup, 1),
         "target": f">= {TARGET_VS_KAFKA_PYTHON}x", "result": verdict(speedup >= TARGET_VS_KAFKA_PYTHON)},
        {"bench": "peak RSS of this run (1 KB values, 64 MiB segments)", "tree_peak_MB": mem.peak_mb,
         **{f"worker_{k}": v for k, v in mem.role_mb("python worker").items()},
         "jvm_peak_MB": mem.role_mb("jvm")["peak_MB"], "driver_peak_MB": mem.role_mb("driver")["peak_MB"]},
    ]
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return rows


def _generate_elsewhere(out_dir: Path, total_bytes: int, **kw: int) -> None:
    """:func:`generate_bench_log_dir` in a child process: the generator holds a whole partition in memory, and
    an allocator seldom gives that back, so generating here would inflate the driver's RSS in the job's rows."""
    code = ("import sys; from pathlib import Path; from benchmarks.baselines import generate_bench_log_dir; "
            f"generate_bench_log_dir(Path(sys.argv[1]), {int(total_bytes)}, **{kw!r})")
    subprocess.run([sys.executable, "-c", code, str(out_dir)], check=True, cwd=REPO)


def bounded_memory(spark, scratch: Path, quick: bool) -> dict:
    segment_bytes = (256 if quick else 1024) << 20
    src, work = scratch / "large-source", scratch / "large-logs"
    # 2 partitions of 1.9 segments: one full group each (the active segment is not cleaned); the generator
    # builds a partition as one Arrow array, so a partition stays under 2 GiB
    _generate_elsewhere(src, int(2 * 1.9 * segment_bytes), partitions=2, segment_bytes=segment_bytes)
    shutil.copytree(src, work)
    config = scratch / "large.toml"
    config.write_text(CONFIG_TOML + f'"segment.bytes" = {segment_bytes}\n')
    load = _load()
    _, job_s, mem = _compact_once(spark, work, config)
    worker = mem.role_mb("python worker")
    bound = 2 * segment_bytes + ALLOWANCE_BYTES + DEFAULT_DEDUPE_BYTES
    peak = mem.peak_by_role.get("python worker", (0, 0, 0))[0]
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return {"bench": f"peak RSS per task, segment.bytes={segment_bytes >> 20} MiB, local[2], 2 partitions",
            "seconds": round(job_s, 1), **{f"worker_{k}": v for k, v in worker.items()},
            "jvm_peak_MB": mem.role_mb("jvm")["peak_MB"], "driver_peak_MB": mem.role_mb("driver")["peak_MB"],
            "bound_MB": round(bound / 1e6), "machine": load,
            "target": "worker peak <= 2 x segment.bytes + dedupe buffer + "
                      f"{ALLOWANCE_BYTES >> 20} MiB", "result": verdict(0 < peak <= bound)}


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    scratch = data_dir / "fixed-cost"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    rows: list[dict] = []

    def part(name: str, fn) -> None:
        # one failing measurement must not take the others' numbers with it
        try:
            out = fn()
            rows.extend(out if isinstance(out, list) else [out])
        except Exception as exc:  # noqa: BLE001 - reported as the row's result
            rows.append({"bench": name, "result": f"ERROR: {type(exc).__name__}: {exc}"})
        print(f"  ... {name} done", flush=True)

    try:
        part("fixed cost", lambda: fixed_cost(scratch))
        part("nothing due", lambda: nothing_due(scratch, quick))
        spark, startup_s = timed_session("local[2]")
        rows.append({"bench": "Spark start-up and its Python workers in this process (excluded from job times)",
                     "seconds": round(startup_s, 1)})
        part("bounded memory", lambda: bounded_memory(spark, scratch, quick))
        part("floor and kafka-python", lambda: floor_and_baseline(spark, scratch, quick))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows
