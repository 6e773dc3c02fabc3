"""``segjobs tiered audit`` over a generated tiered topic set of 2,000 partitions (``--quick``: 200): its tasks on
the driver against its tasks on Spark, each in a new process as a user runs it.

Data (:mod:`tests.support.tiered_set`): 20 topics of 100 partitions (``--quick``: 4 of 50), 10 metadata
partitions, two finished remote segments per partition in Kafka's LocalTieredStorage layout, a local tail, and
every kind of finding here and there (dangling copies, deleted and stalled segments, dropped events, missing
objects, gaps, deleted topics). The two rows run the same command, once with $SEGJOBS_DRIVER_RUN_MAX_BYTES large
enough for the driver and once ``0`` (Spark tasks on ``local[*]``, the JVM started by the run): wall seconds and
CPU seconds of the whole process tree, and the ratio spark/driver. Both reports must be equal, byte for byte.

The machine's load average is printed with every row: compare runs by their ratios and CPU seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.fixed_cost_bench import _load, _TreeCpu

REPO = Path(__file__).resolve().parents[1]
NOW = "2030-01-01T00:00:00Z"


def _audit(log_dir: Path, remote: Path, out: Path, driver_max: str) -> dict:
    """One ``segjobs tiered audit --format json`` in a new process; its wall and process-tree CPU seconds."""
    cmd = [sys.executable, "-m", "jobs", "tiered", "audit", "--log-dir", str(log_dir), "--remote", str(remote),
           "--set", "*:retention.ms=-1", "--now", NOW, "--format", "json", "--output", str(out)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "SEGJOBS_DRIVER_RUN_MAX_BYTES": driver_max, "PYTHONPATH": str(REPO)}
    load = _load()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    cpu = _TreeCpu(proc.pid)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    cpu_s = cpu.stop()
    if proc.returncode not in (0, 1):  # 1: the set has gaps and missing objects on purpose
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{err[-2000:]}")
    where = "on the driver" if driver_max != "0" else "as Spark tasks"
    if f"({where})" not in err:
        raise RuntimeError(f"expected the tasks to run {where}:\n{err[-2000:]}")
    return {"wall_s": round(wall, 1), "tree_cpu_s": round(cpu_s, 1), "machine": load}


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    from tests.support.tiered_set import generate_tiered_set

    scratch = data_dir / "tiered-audit"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    topics, partitions = (4, 50) if quick else (20, 100)
    t0 = time.perf_counter()
    tiered = generate_tiered_set(scratch / "set", topics=topics, partitions=partitions, metadata_partitions=10)
    generated_s = time.perf_counter() - t0
    what = f"{tiered.partitions} partitions, {tiered.events} metadata events in {tiered.metadata_partitions} partitions"
    driver = _audit(tiered.log_dir, tiered.remote, scratch / "driver.json", str(1 << 40))
    spark = _audit(tiered.log_dir, tiered.remote, scratch / "spark.json", "0")
    same = (scratch / "driver.json").read_bytes() == (scratch / "spark.json").read_bytes()
    shutil.rmtree(scratch, ignore_errors=True)
    if not same:
        raise RuntimeError("the driver's and Spark's reports differ")
    return [
        {"bench": f"tiered audit, tasks on the driver (new process, end to end): {what}", **driver,
         "generated_s": round(generated_s, 1)},
        {"bench": f"tiered audit, Spark tasks on local[*] (new process, end to end, JVM start included): {what}",
         **spark, "spark_vs_driver": round(spark["wall_s"] / driver["wall_s"], 2), "reports_equal": same},
    ]
