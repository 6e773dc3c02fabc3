"""Where a tiny log dir's end-to-end seconds go: each part of a run's fixed cost measured on its own, in new processes.

Parts (medians of ``--repeat`` runs, 3 by default; every one a new process, as a user's run is):

* **interpreter**: ``python -c pass``;
* **imports**: ``python -c "import jobs.commands.cli"`` (what the console script imports before it parses its
  arguments) less the interpreter;
* in one process that builds segjobs' session (:func:`jobs.engine.runtime.spark_session.build_session`, ``local[*]`` as
  the console script), times taken from inside it:

  - **JVM and Spark session**: ``build_session`` returning;
  - **Python workers and first task**: a first one-element job (Spark starts the Python worker daemon, which
    preloads segjobs' modules and kernels: :mod:`jobs.engine.runtime.worker_daemon`);
  - **a warm task**: the same job again (what each later Spark job of a run costs at least);
  - **stop**: :func:`jobs.engine.runtime.spark_session.stop_active_session` as the console script calls it at exit;
  - **exit**: from the stop's return to the process's end, timed by this process;

* **end to end**: ``segjobs compact`` on a tiny log dir (one partition of 11 records in two segments, one of them
  due), a new process with default options (:func:`benchmarks.e2e_bench.compact_in_a_new_process`), with its
  timeline. The parts above add up to about its floor; the rest is the job's own work and its stages' tasks.

The machine's load is printed with each row: on a shared machine the seconds mostly measure the other tenants.
Target (issue 34): a tiny log dir within 6 s end to end, idle machine.
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

from benchmarks.baselines import verdict
from benchmarks.compact_bench import CONFIG_TOML
from benchmarks.e2e_bench import compact_in_a_new_process

TARGET_TINY_S = 6.0
DEFAULT_REPEAT = 3

#: The session's parts, timed inside a new process; prints its marks (epoch seconds) as JSON on stdout.
_SESSION_PARTS = """
import json, time
marks = {"started": time.time()}
from jobs.engine.runtime.spark_session import build_session, stop_active_session
marks["imported"] = time.time()
spark = build_session("segjobs-fixed-cost")
marks["session"] = time.time()
sc = spark.sparkContext
sc.parallelize([0], 1).map(abs).collect()
marks["first_task"] = time.time()
sc.parallelize([0], 1).map(abs).collect()
marks["warm_task"] = time.time()
stop_active_session(exiting=True)
marks["stopped"] = time.time()
print(json.dumps(marks), flush=True)
"""


def _load() -> str:
    return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def _wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def session_parts() -> dict[str, float]:
    """One new process's session parts, in seconds (see the module docstring)."""
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", _SESSION_PARTS], check=True, capture_output=True, text=True).stdout
    ended = time.time()
    marks = json.loads(out.strip().splitlines()[-1])
    return {"interpreter start to first line": marks["started"] - t0,
            "imports (jobs.engine.runtime.spark_session)": marks["imported"] - marks["started"],
            "JVM and Spark session (pyspark's imports included)": marks["session"] - marks["imported"],
            "Python workers and first task": marks["first_task"] - marks["session"],
            "a warm task": marks["warm_task"] - marks["first_task"],
            "stop": marks["stopped"] - marks["warm_task"],
            "exit": ended - marks["stopped"],
            "whole process": ended - t0}


def _median_row(name: str, seconds: list[float]) -> dict:
    return {"bench": f"fixed cost: {name}", "median_s": round(statistics.median(seconds), 2),
            "min_max_s": f"{min(seconds):.2f}-{max(seconds):.2f}", "load": _load()}


def tiny_log_dir(out: Path) -> None:
    """One partition of 11 records in two segments: the closed one is due, so the run starts Spark and cleans."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    shutil.rmtree(out, ignore_errors=True)
    generate_log_dir(GenerateSpec(topics=("tiny",), partitions=1, records=11, value_bytes=100, batch_records=2,
                                  segment_bytes=700), out)


def run(quick: bool = False, data_dir: Path = Path("bench-data"), repeat: int | None = None) -> list[dict]:
    repeat = repeat or DEFAULT_REPEAT
    rows: list[dict] = []
    interpreter = [_wall([sys.executable, "-c", "pass"]) for _ in range(repeat)]
    imports = [_wall([sys.executable, "-c", "import jobs.commands.cli"]) - statistics.median(interpreter)
               for _ in range(repeat)]
    rows.append(_median_row("interpreter (python -c pass)", interpreter))
    rows.append(_median_row("imports of the command line (import jobs.commands.cli, less the interpreter)", imports))
    parts = [session_parts() for _ in range(repeat)]
    for name in parts[0]:
        rows.append(_median_row(f"{name} (new process, build_session, local[*])", [p[name] for p in parts]))
    root = data_dir / "fixed-cost-parts"
    try:
        src, work, config = root / "source", root / "log-dir", root / "topics.toml"
        tiny_log_dir(src)
        config.write_text(CONFIG_TOML)
        walls = []
        for i in range(repeat):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(src, work)
            load = _load()
            result = compact_in_a_new_process(work, config)
            walls.append(result.wall_s)
            rows.append({"bench": f"fixed cost: segjobs compact on a tiny log dir, run {i + 1} of {repeat}",
                         "wall_s": round(result.wall_s, 1), "load": load, "timeline": result.timeline()})
        median = statistics.median(walls)
        rows.append({"bench": "fixed cost: segjobs compact on a tiny log dir (new process, default options)",
                     "median_s": round(median, 1), "min_max_s": f"{min(walls):.1f}-{max(walls):.1f}",
                     "target": f"<= {TARGET_TINY_S} s (idle)", "result": verdict(median <= TARGET_TINY_S)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
