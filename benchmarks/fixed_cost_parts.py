"""Where a tiny log dir's end-to-end seconds go: each part of a run's fixed cost measured on its own, in new processes.

Parts (median and minimum of ``--repeat`` runs, 3 by default; every one a new process, as a user's run is; wall
seconds and, where the process tree is this one's children, CPU seconds, which the machine's other tenants
inflate less):

* **interpreter**: ``python -c pass``;
* **imports**: ``python -c "import jobs.commands.compact"`` (what ``segjobs compact`` imports before it parses
  its arguments) less the interpreter, and the share of its heaviest dependencies, each on top of those it
  needs (numpy and pyarrow; pandas, which pyarrow imports at its first array conversion; numba, for the kernels;
  pyspark, which a run whose tasks run on the driver does not import);
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
  timeline: a run this small does its tasks on the driver and starts no JVM
  (:func:`jobs.engine.runtime.tasks.small_run_on_driver`). Beside it, alternating with it on fresh copies, the
  same run on Spark (``SEGJOBS_DRIVER_RUN_MAX_BYTES=0``: what every such run did before), and the ratio of the
  two medians. The session's parts above add up to about the difference.

The machine's load is printed with each row: on a shared machine the seconds mostly measure the other tenants.
Target (issue 34): a tiny log dir within 6 s end to end, idle machine.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.baselines import verdict
from benchmarks.compact_bench import CONFIG_TOML
from benchmarks.e2e_bench import Run, compact_in_a_new_process
from jobs.engine.runtime.tasks import DRIVER_RUN_ENV

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


def _timed(args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a new process running ``args``; the CPU of the process and of the children it waited
    for (user and system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


#: What ``segjobs compact`` imports, and the heaviest of it, each on top of what it needs itself: (name, what is
#: imported first, what is timed).
_IMPORTS = (("imports of segjobs compact (import jobs.commands.compact)", "", "import jobs.commands.compact"),
            ("numpy and pyarrow", "", "import numpy, pyarrow"),
            ("pandas (imported by pyarrow's first array conversion)", "import numpy, pyarrow", "import pandas"),
            ("numba", "import numpy", "import numba"),
            ("pyspark (not imported by a run on the driver)", "import numpy, pyarrow, pandas", "import pyspark"))


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


def _median_row(name: str, seconds: list[float], cpu: list[float] | None = None) -> dict:
    row = {"bench": f"fixed cost: {name}", "median_s": round(statistics.median(seconds), 2),
           "min_s": round(min(seconds), 2), "max_s": round(max(seconds), 2)}
    if cpu is not None:
        row.update(cpu_median_s=round(statistics.median(cpu), 2), cpu_min_s=round(min(cpu), 2))
    return {**row, "load": _load()}


def _import_rows(repeat: int) -> list[dict]:
    """The interpreter's start and the imports' parts (see the module docstring): each a difference of two new
    processes' medians, the one with the import less the one without."""
    rows = []
    bare = [_timed([sys.executable, "-c", "pass"]) for _ in range(repeat)]
    rows.append(_median_row("interpreter (python -c pass)", [w for w, _ in bare], [c for _, c in bare]))
    for name, first, timed in _IMPORTS:
        without = [_timed([sys.executable, "-c", first or "pass"]) for _ in range(repeat)]
        with_it = [_timed([sys.executable, "-c", f"{first}; {timed}" if first else timed]) for _ in range(repeat)]
        base_wall = statistics.median(w for w, _ in without)
        base_cpu = statistics.median(c for _, c in without)
        rows.append(_median_row(f"{name}, less {first or 'the interpreter'}", [w - base_wall for w, _ in with_it],
                                [c - base_cpu for _, c in with_it]))
    return rows


def tiny_log_dir(out: Path) -> None:
    """One partition of 11 records in two segments: the closed one is due, so the run starts Spark and cleans."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    shutil.rmtree(out, ignore_errors=True)
    generate_log_dir(GenerateSpec(topics=("tiny",), partitions=1, records=11, value_bytes=100, batch_records=2,
                                  segment_bytes=700), out)


#: The two ways a tiny log dir is compacted (see the module docstring): (name, the run's own environment).
_PATHS = (("default options (tasks on the driver)", {}),
          (f"on Spark ({DRIVER_RUN_ENV}=0, as before)", {DRIVER_RUN_ENV: "0"}))


def run(quick: bool = False, data_dir: Path = Path("bench-data"), repeat: int | None = None) -> list[dict]:
    repeat = repeat or DEFAULT_REPEAT
    rows = _import_rows(repeat)
    parts = [session_parts() for _ in range(repeat)]
    for name in parts[0]:
        rows.append(_median_row(f"{name} (new process, build_session, local[*])", [p[name] for p in parts]))
    root = data_dir / "fixed-cost-parts"
    try:
        src, work, config = root / "source", root / "log-dir", root / "topics.toml"
        tiny_log_dir(src)
        config.write_text(CONFIG_TOML)
        runs: dict[str, list[Run]] = {name: [] for name, _ in _PATHS}
        for i in range(repeat):
            for name, env in _PATHS:  # alternating: both see the same spells of load
                shutil.rmtree(work, ignore_errors=True)
                shutil.rmtree(work.with_name(work.name + ".segjobs"), ignore_errors=True)
                shutil.copytree(src, work)
                result = compact_in_a_new_process(work, config, env)
                runs[name].append(result)
                rows.append({"bench": f"fixed cost: segjobs compact on a tiny log dir, {name}, run {i + 1} of "
                                      f"{repeat}", "wall_s": round(result.wall_s, 1), "load": result.load,
                             "timeline": result.timeline()})
        medians = {}
        for name, _ in _PATHS:
            walls = [r.wall_s for r in runs[name]]
            medians[name] = statistics.median(walls)
            row = {"bench": f"fixed cost: segjobs compact on a tiny log dir (new process), {name}",
                   "median_s": round(medians[name], 1), "min_max_s": f"{min(walls):.1f}-{max(walls):.1f}",
                   "loads": "; ".join(r.load for r in runs[name])}
            if name == _PATHS[0][0]:
                row.update(target=f"<= {TARGET_TINY_S} s (idle)", result=verdict(medians[name] <= TARGET_TINY_S))
            rows.append(row)
        (default, _), (spark, _) = _PATHS
        rows.append({"bench": "fixed cost: tiny log dir, on Spark / default options (medians, same run)",
                     "ratio": round(medians[spark] / medians[default], 2)})
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the run's work dir (log-dir.segjobs) with it
    return rows
