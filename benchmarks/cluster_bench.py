"""The cost of the network hop and of a lost executor (issue 35): the 2,000-partition row and the external-sort row
on the cluster of several hosts against ``local[2]`` on the same machine, and one run that loses an executor.

The cluster is the fault tests' (:class:`tests.ops.netns_cluster.NetnsCluster`): a Spark standalone master and three
workers (1 core, 1 GiB each), each in a network namespace of its own, a driver host, moto_server as S3 on the
bridge. Root is needed (network namespaces); without it the section says why and measures nothing.

Data: the rows' own generators and sizes: :mod:`benchmarks.many_partitions_bench` (2,000 partitions x 1,000
records, 48 KiB segments; ``--quick``: 200) and :mod:`benchmarks.external_sort_bench` (one partition of 10 M keys,
20 M records, 2.5 GB; ``--quick``: 1 M keys; its generated data is shared with that section's, under
``--data-dir``). Each run gets a fresh bucket holding the log dir (moto is reset first: it keeps objects in
memory) and is ``segjobs compact`` as a user submits it: ``spark-submit jobs/compact.py`` from the driver host
with the job's default options (the row's config, ``--now`` and strategy only), once with the cluster's master URL
and once with ``--master local[2]`` (same settings, same S3 endpoint over the same bridge), alternating which goes
first, ``--repeat`` times (default 3). Reported: the median wall time of the driver process (Spark's start-up
included, as a user waits for it) and its spread, the median without start-up (the report's ``spark_startup_s``),
the one-minute load at each run, and the ratio cluster / ``local[2]``. Every run must report the first run's
outcome for every partition.

Recovery (``--recovery-case``, default the external-sort row): a clean run on the cluster, then the same run in
which, half the clean run's time in, the executor JVM running the most recently started task is SIGKILLed. The
driver logs Spark's task events for both (``SEGJOBS_SPARK_LOG=info``); reported: both times, their ratio, and
from the kill to the driver noticing (the task lost) and to the lost task starting again on another executor.

The run's timeline (cluster up, uploads, every run, the kill and what followed, teardown) is printed at the end
and kept in the results. The cluster is removed however the run ends (namespaces, bridge, JVMs, moto_server).

As a section: ``python -m benchmarks.run --only cluster [--quick] [--repeat N] [--data-dir DIR]``; alone, with
smaller data for a check: ``python -m benchmarks.cluster_bench --partitions 20 --keys 50000 --repeat 1``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.ops.netns_cluster import NetnsCluster
    from tests.support.s3 import MotoServer

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "jobs" / "compact.py"
DRIVER = "driver-0"
LOCAL_MASTER = "local[2]"
DEFAULT_REPEAT = 3
CASES = ("many-partitions", "external-sort")
#: Objects up to this size go up in one PUT; larger ones (external sort's segments) in parts, from the file.
ONE_PUT_BYTES = 8 << 20
#: When the executor is killed: this share of the clean run's time after the faulted run started.
KILL_AT = 0.5

#: Spark's task events at INFO in the driver's log (TaskSetManager).
#: (Spark 4 writes ``(10.201.30.3,executor 2, partition 0, ...)``, Spark 3 a space after the host's comma.)
STARTING = re.compile(r"Starting task (\d+)\.(\d+) in stage (\d+)\.\d+ \(TID (\d+)\) \(([^,\s]+), ?executor (\w+),")
#: A task attempt's end: finished, lost (WARN, counted against the task), or failed with an executor that exited
#: for a reason unrelated to it (INFO, not counted: Spark 4's line for an executor killed under its task).
ENDED = re.compile(r"(?:Finished|Lost) task \d+\.\d+ in stage \d+\.\d+ \(TID (\d+)\)"
                   r"|task \d+\.\d+ in stage \d+\.\d+ \(TID (\d+)\) failed")


@dataclass(frozen=True)
class Case:
    """One benchmark row's log dir and the job's arguments besides the log dir, endpoint and report."""

    name: str
    source: Path
    args: tuple[str, ...]
    detail: str


@dataclass
class Timeline:
    """What happened when, from the section's start; each event is printed as it happens."""

    start: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> float:
        at = time.monotonic() - self.start
        self.events.append((at, what))
        print(f"    {at:8.1f} s  {what}", flush=True)
        return at

    def lines(self) -> list[str]:
        return [f"{at:8.1f} s  {what}" for at, what in self.events]


@dataclass
class Timed:
    """One run of the job: the driver process's wall seconds, Spark's start-up in it, the load, its report."""

    seconds: float
    startup_s: float
    load: float
    report: dict
    log: Path


def load_1m() -> float:
    return round(os.getloadavg()[0], 2)


# ------------------------------------------------------------------------------------------------ data


def many_partitions_case(root: Path, partitions: int) -> Case:
    """The 2,000-partition row's log dir (kept under ``root`` for the next run) and its job arguments."""
    from benchmarks.many_partitions_bench import CONFIG_TOML, _generate, _now

    out, marker = root / f"many-{partitions}", root / f"many-{partitions}.done"
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        _generate(out, partitions, 1000, 48 << 10)
        marker.touch()
    config = root / "many-topics.toml"
    config.write_text(CONFIG_TOML)
    return Case("many-partitions", out, ("--config", str(config), "--now", _now()),
                f"{partitions} partitions x 1000 records")


def external_sort_case(data_dir: Path, keys: int) -> Case:
    """The external-sort row's partition (shared with that section's data) and its job arguments."""
    from benchmarks.external_sort_bench import NOW, generated, segment_bytes_for

    src, _ = generated(data_dir / "external-sort", keys)
    return Case("external-sort", src, ("--topic", "*", "--set", "*:cleanup.policy=compact",
                                       "--set", f"*:segment.bytes={segment_bytes_for(2 * keys)}",
                                       "--strategy", "external-sort", "--now", NOW),
                f"one partition of {keys:,} keys, {2 * keys:,} records, external-sort")


def input_bytes(case: Case) -> int:
    return sum(f.stat().st_size for f in case.source.rglob("*") if f.is_file())


# ------------------------------------------------------------------------------------------------ runs


class Runner:
    """Submits the job from the driver host, each run on a fresh bucket holding the case's log dir."""

    def __init__(self, cluster: NetnsCluster, root: Path, timeline: Timeline) -> None:
        self.cluster, self.root, self.timeline = cluster, root, timeline
        self._n = 0

    @property
    def moto(self) -> MotoServer:
        assert self.cluster.moto is not None, "the cluster was stopped"
        return self.cluster.moto

    def fresh_bucket(self, case: Case) -> str:
        """moto reset (it holds every object in memory) and a new bucket with ``case``'s log dir."""
        from tests.support.s3_objects import PREFIX

        moto = self.moto
        urllib.request.urlopen(urllib.request.Request(f"{moto.endpoint_url}/moto-api/reset", method="POST")).read()
        bucket = moto.create_bucket(case.name)
        client = moto.client()
        files = [p for p in sorted(case.source.rglob("*")) if p.is_file()]

        def put(p: Path) -> None:
            key = f"{PREFIX}/{p.relative_to(case.source)}"
            if p.stat().st_size <= ONE_PUT_BYTES:
                client.put_object(Bucket=bucket, Key=key, Body=p.read_bytes())
            else:
                client.upload_file(str(p), bucket, key)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, files))
        return bucket

    def start(self, case: Case, master: str | None, *, spark_log: str | None = None
              ) -> tuple[subprocess.Popen, float, Path, Path]:
        """``case``'s job submitted from the driver host (``master`` None: the cluster's); running."""
        from jobs.engine.runtime.spark_session import LOG_LEVEL_ENV
        from tests.support.s3_objects import PREFIX

        bucket = self.fresh_bucket(case)
        self.timeline.mark(f"{case.name} on {master or 'cluster'}: uploaded, submitted")
        self._n += 1
        report, log = self.root / f"run-{self._n}.json", self.root / f"run-{self._n}.log"
        args = ["--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", self.moto.endpoint_url,
                "--report", str(report), *case.args]
        cmd = self.cluster.submit_command(SCRIPT, args, master=master)
        before = os.environ.get(LOG_LEVEL_ENV)
        if spark_log:
            os.environ[LOG_LEVEL_ENV] = spark_log  # the driver's environment is this process's
        try:
            t0 = time.perf_counter()
            proc = self.cluster.start_driver(DRIVER, cmd, log)
        finally:
            if spark_log:
                os.environ.pop(LOG_LEVEL_ENV) if before is None else os.environ.update({LOG_LEVEL_ENV: before})
        return proc, t0, report, log

    def finish(self, proc: subprocess.Popen, t0: float, report: Path, log: Path, timeout_s: float = 3600) -> Timed:
        import json

        from tests.ops.netns_cluster import _kill_group

        try:
            rc = proc.wait(timeout_s)
            seconds = time.perf_counter() - t0
        finally:
            _kill_group(proc)
        if rc != 0:
            raise RuntimeError(f"the job exited {rc}; its log {log}:\n{log.read_text(errors='replace')[-3000:]}")
        doc = json.loads(report.read_text())
        return Timed(seconds, float(doc.get("spark_startup_s") or 0.0), load_1m(), doc, log)

    def run(self, case: Case, master: str | None, **kwargs: Any) -> Timed:
        where = master or "cluster"
        self.timeline.mark(f"{case.name} on {where}: upload")
        timed = self.finish(*self.start(case, master, **kwargs))
        self.timeline.mark(f"{case.name} on {where}: done in {timed.seconds:.1f} s (load {timed.load})")
        return timed


def same_outcomes(case: Case, first: Timed, other: Timed) -> None:
    """Every run must do what the first did to every partition (a faster wrong run measures nothing)."""
    from tests.ops.netns_jobs import outcomes

    if outcomes(other.report) != outcomes(first.report):
        raise RuntimeError(f"{case.name}: {other.log} reports other outcomes than {first.log}")


def summary(times: list[Timed]) -> dict[str, Any]:
    walls = [t.seconds for t in times]
    jobs = [t.seconds - t.startup_s for t in times]
    median = statistics.median(walls)
    return {"median_s": round(median, 1), "min_s": round(min(walls), 1), "max_s": round(max(walls), 1),
            "spread_pct": round(100 * (max(walls) - min(walls)) / median, 1),
            "median_without_startup_s": round(statistics.median(jobs), 1),
            "median_startup_s": round(statistics.median(t.startup_s for t in times), 1),
            "runs_s": [round(w, 1) for w in walls], "load_1m": [t.load for t in times]}


def compare(runner: Runner, case: Case, repeat: int) -> list[dict]:
    """``case`` on the cluster and on ``local[2]``, alternating which goes first, ``repeat`` times each."""
    times: dict[str, list[Timed]] = {"cluster": [], LOCAL_MASTER: []}
    for n in range(repeat):
        for master in ((None, LOCAL_MASTER) if n % 2 == 0 else (LOCAL_MASTER, None)):
            timed = runner.run(case, master)
            times[master or "cluster"].append(timed)
    first = times["cluster"][0]
    for timed in [*times["cluster"], *times[LOCAL_MASTER]]:
        same_outcomes(case, first, timed)
    cluster, local = summary(times["cluster"]), summary(times[LOCAL_MASTER])
    return [{"bench": f"{case.name} ({case.detail}), 3 workers x 1 core", **cluster},
            {"bench": f"{case.name} ({case.detail}), {LOCAL_MASTER} on the driver's host", **local},
            {"bench": f"{case.name}: cluster / {LOCAL_MASTER}",
             "ratio": round(cluster["median_s"] / local["median_s"], 2),
             "ratio_without_startup": round(cluster["median_without_startup_s"]
                                            / max(0.1, local["median_without_startup_s"]), 2)}]


# ------------------------------------------------------------------------------------------------ recovery


def running_tasks(text: str) -> list[tuple[int, int, int, int, str]]:
    """The tasks the driver's ``text`` shows started and not yet ended: (index, attempt, stage, TID, host), in
    the order they started."""
    ended = {int(m.group(1) or m.group(2)) for m in ENDED.finditer(text)}
    return [(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
            for m in STARTING.finditer(text) if int(m.group(4)) not in ended]


def lost(text: str, tid: int) -> bool:
    """Whether the driver's ``text`` says the task attempt ``tid`` ended other than finished (see :data:`ENDED`)."""
    return any(int(m.group(1) or m.group(2)) == tid and not m.group(0).startswith("Finished")
               for m in ENDED.finditer(text))


def rerun_of(text: str, index: int, attempt: int, stage: int, tid: int) -> tuple[str, str] | None:
    """The host and executor of a later attempt of task ``index`` of ``stage`` (a retried stage attempt
    included) in the driver's ``text``, once it started."""
    for m in STARTING.finditer(text):
        if (int(m.group(1)), int(m.group(3))) == (index, stage) and int(m.group(2)) > attempt \
                and int(m.group(4)) > tid:
            return m.group(5), m.group(6)
    return None


@dataclass
class Kill:
    """What the fault did and when (seconds from the kill, observed in the driver's log by polling)."""

    at_s: float = 0.0
    worker: str = ""
    task: str = ""
    pids: list[int] = field(default_factory=list)
    lost_after_s: float | None = None
    rerun_after_s: float | None = None
    rerun_on: str = ""
    error: str = ""


def kill_mid_stage(runner: Runner, log: Path, t0: float, after_s: float, kill: Kill) -> None:
    """Once ``after_s`` of the run have passed and a task runs, SIGKILL the executor JVM of the task started
    last; then wait for the driver to lose that task and start it again."""
    from tests.ops.netns_jobs import kill as sigkill

    cluster = runner.cluster
    by_address = {h.address: h.name for h in cluster.hosts.values()}
    while time.perf_counter() - t0 < after_s:
        time.sleep(0.1)
    deadline = time.perf_counter() + 600
    while time.perf_counter() < deadline:
        tasks = [t for t in running_tasks(log.read_text(errors="replace")) if t[4] in by_address]
        if tasks and (pids := cluster.executor_pids(by_address[tasks[-1][4]])):
            index, attempt, stage, tid, address = tasks[-1]
            sigkill(pids)
            killed = time.perf_counter()
            kill.at_s, kill.worker, kill.pids = killed - t0, by_address[address], pids
            kill.task = f"task {index}.{attempt} of stage {stage} (TID {tid})"
            runner.timeline.mark(f"SIGKILL of the executor on {kill.worker} running {kill.task}")
            break
        time.sleep(0.1)
    else:
        kill.error = "no task ran on an executor"
        return
    while time.perf_counter() - killed < 600:
        text = log.read_text(errors="replace")
        if kill.lost_after_s is None and lost(text, tid):
            kill.lost_after_s = time.perf_counter() - killed
            runner.timeline.mark(f"the driver lost {kill.task}")
        if (again := rerun_of(text, index, attempt, stage, tid)) is not None:
            kill.rerun_after_s = time.perf_counter() - killed
            kill.rerun_on = f"{by_address.get(again[0], again[0])} (executor {again[1]})"
            runner.timeline.mark(f"task {index} of stage {stage} started again on {kill.rerun_on}")
            return
        time.sleep(0.1)
    kill.error = "the lost task did not start again within 600 s"


def recovery(runner: Runner, case: Case) -> list[dict]:
    """A clean run of ``case`` on the cluster, then one that loses an executor mid-stage."""
    clean = runner.run(case, None, spark_log="info")
    runner.timeline.mark(f"{case.name}: the faulted run: upload")
    proc, t0, report, log = runner.start(case, None, spark_log="info")
    kill = Kill()
    fault = threading.Thread(target=kill_mid_stage, args=(runner, log, t0, KILL_AT * clean.seconds, kill),
                             daemon=True)
    fault.start()
    faulted = runner.finish(proc, t0, report, log)
    fault.join(60)
    runner.timeline.mark(f"{case.name}: the faulted run done in {faulted.seconds:.1f} s (load {faulted.load})")
    same_outcomes(case, clean, faulted)
    if kill.error or not kill.pids:
        raise RuntimeError(f"recovery: {kill.error or 'nothing was killed'} (driver log {log})")
    return [{"bench": f"recovery: {case.name} on the cluster, clean", "seconds": round(clean.seconds, 1),
             "load_1m": clean.load},
            {"bench": f"recovery: {case.name} on the cluster, one executor JVM killed mid-stage",
             "seconds": round(faulted.seconds, 1), "load_1m": faulted.load,
             "ratio_to_clean": round(faulted.seconds / clean.seconds, 2),
             "extra_s": round(faulted.seconds - clean.seconds, 1), "killed": f"{kill.task} on {kill.worker}",
             "killed_at_s": round(kill.at_s, 1),
             "task_lost_after_s": None if kill.lost_after_s is None else round(kill.lost_after_s, 1),
             "task_running_again_after_s": None if kill.rerun_after_s is None else round(kill.rerun_after_s, 1),
             "running_again_on": kill.rerun_on}]


# ------------------------------------------------------------------------------------------------ section


def _interrupt_on_sigterm() -> Any:
    """SIGTERM (``timeout``, a CI job cancelled) raises KeyboardInterrupt, so the cluster is removed as after
    Ctrl-C (Python's default for SIGTERM ends the process at once); returns the handler it replaced."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, interrupt)


def run(quick: bool = False, data_dir: Path = Path("bench-data"), repeat: int | None = None, *,
        partitions: int | None = None, keys: int | None = None, compared: tuple[str, ...] = CASES,
        recovery_case: str | None = "external-sort") -> list[dict]:
    """The section: rows for the table (see the module docstring). ``compared``: the cases run on both masters;
    ``recovery_case`` None: no recovery runs."""
    from benchmarks.external_sort_bench import FULL_KEYS, QUICK_KEYS
    from tests.ops.netns_cluster import NetnsCluster, leftovers, netns_unavailable

    if (why := netns_unavailable()) is not None:
        return [{"bench": "cluster of network namespaces", "skipped": why}]
    partitions = partitions or (200 if quick else 2000)
    keys = keys or (QUICK_KEYS if quick else FULL_KEYS)
    repeat = repeat or DEFAULT_REPEAT
    root = (data_dir / "cluster").resolve()
    root.mkdir(parents=True, exist_ok=True)
    timeline = Timeline()
    cases = {"many-partitions": many_partitions_case(root, partitions),
             "external-sort": external_sort_case(data_dir.resolve(), keys)}
    timeline.mark("data generated (or reused)")
    rows: list[dict] = [{"bench": f"input: {c.name}", "detail": c.detail, "MB": round(input_bytes(c) / 1e6),
                         "files": sum(1 for f in c.source.rglob("*") if f.is_file())} for c in cases.values()]
    cluster_root = root / f"run-{os.getpid()}"
    cluster_root.mkdir()
    previous = _interrupt_on_sigterm()
    try:
        cluster = NetnsCluster.start(cluster_root, workers=3, drivers=1, cores=1, memory="1g")
        try:
            rows.append({"bench": "cluster: master, 3 workers (1 core, 1 GiB), 1 driver host, moto_server",
                         "up_s": round(timeline.mark("cluster up"), 1), "load_1m": load_1m()})
            runner = Runner(cluster, cluster_root, timeline)
            for name in compared:
                rows += compare(runner, cases[name], repeat)
            if recovery_case:
                rows += recovery(runner, cases[recovery_case])
        finally:
            cluster.stop()
            left = leftovers(cluster.tag)
            timeline.mark(f"cluster removed{'; LEFT: ' + ', '.join(left) if left else ''}")
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    rows.append({"bench": "timeline", "events": timeline.lines()})
    print("  timeline:\n" + "\n".join("    " + line for line in timeline.lines()), flush=True)
    if left:
        raise RuntimeError(f"the cluster left {left}")
    return rows


def main(argv: list[str] | None = None) -> int:
    import json

    p = argparse.ArgumentParser(prog="benchmarks.cluster_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the rows' quick sizes (200 partitions, 1 M keys)")
    p.add_argument("--partitions", type=int, help="partitions of the many-partitions case (default 2000)")
    p.add_argument("--keys", type=int, help="keys of the external-sort case (default 10 M)")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="runs of each case on each master")
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"comma-separated cases run on both masters, of {list(CASES)} (empty: none)")
    p.add_argument("--recovery-case", choices=[*CASES, "none"], default="external-sort",
                   help="the case of the recovery runs (none: no recovery runs)")
    p.add_argument("--data-dir", default="bench-data", help="generated data, kept for the next run")
    p.add_argument("--out", type=Path, help="write the rows here (JSON)")
    args = p.parse_args(argv)
    compared = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    if unknown := [c for c in compared if c not in CASES]:
        p.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    rows = run(args.quick, Path(args.data_dir), args.repeat, partitions=args.partitions, keys=args.keys,
               compared=compared, recovery_case=None if args.recovery_case == "none" else args.recovery_case)
    for row in rows:
        if row["bench"] != "timeline":
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
