"""The jobs on a cluster of several hosts, with faults: a standalone master and three workers, each in a network
namespace of its own (:mod:`tests.ops.netns_cluster`), the log dirs on moto_server over the bridge, the drivers
submitted from hosts of their own.

Each test runs one job on the cluster while something fails, and then compares with one clean run of the same job
on a copy of the same log dir (``local[2]`` in this process, same ``--now``): the log dir's objects equal the clean
run's byte for byte, no staging object or external-sort file is left under the work prefix once the run ends, and
the report names every partition once, with the clean run's outcome.

It runs in ``make cluster-test`` (root, namespaces); ``make test`` reports it skipped, and so does a machine where
namespaces cannot be made (the reason is the skip message).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.ops.netns_cluster import SLOW_BUCKETS, NetnsCluster, leftovers, netns_unavailable
from tests.support.compaction_faults import differences_but_stamped_markers, live_logs
from tests.support.s3_objects import PREFIX, contents, put_objects

REPO = Path(__file__).resolve().parents[2]
NOW = "2023-11-30T00:00:00Z"
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n"min.cleanable.dirty.ratio" = "0.01"\n'
WORK_PREFIX = PREFIX + ".segjobs/"
#: What a job may leave under the work prefix once it ends: its lease (released) and ledgers; never staging.
STAGING_MARKS = ("/staged/", "staging/", "external-sort/", ".segjobs-staging/")
OUTCOME_FIELDS = ("action", "records_before", "records_after", "segments_before", "segments_after", "bytes_removed")


def _skip_reason() -> str | None:
    if not os.environ.get("SEGJOBS_DIST"):
        return "runs in `make cluster-test` (SEGJOBS_DIST names make package's output)"
    return netns_unavailable()


_REASON = _skip_reason()
pytestmark = [pytest.mark.skipif(_REASON is not None, reason=f"cluster of network namespaces: {_REASON}"),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    """Master, three workers (1 core, 1 GiB each) and two driver hosts; everything removed afterwards, whatever
    the tests did."""
    root = tmp_path_factory.mktemp("netns-cluster")
    started = time.monotonic()
    running = NetnsCluster.start(root, workers=3, drivers=2, cores=1, memory="1g")
    print(f"cluster of {len(running.hosts)} hosts up in {time.monotonic() - started:.0f} s")
    try:
        yield running
    finally:
        running.stop()
        left = leftovers(running.tag)
        assert not left, f"the cluster left {left}"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log dir every test compacts: six partitions, superseded keys, transactions, zstd."""
    out = tmp_path_factory.mktemp("source") / "logs"
    gen = subprocess.run(
        [sys.executable, "-m", "jobs", "generate", "--out", str(out), "--topics", "orders,users,clicks",
         "--partitions", "2", "--records", "20000", "--segment-bytes", "256KiB", "--superseded", "0.7",
         "--tombstones", "0.05", "--transactional", "0.3", "--aborted", "0.5", "--start", "2023-11-22T00:00:00Z",
         "--span", "7d", "--codec", "zstd", "--seed", "35", "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert gen.returncode == 0, gen.stderr
    return out


@dataclass
class Run:
    """A job on the cluster: where its log dir is, what it reported, what its driver said."""

    bucket: str
    report: dict
    log: str
    returncode: int


class Jobs:
    """Runs ``compact`` on the cluster and, once per argument list, the clean run it must equal."""

    def __init__(self, cluster: NetnsCluster, source: Path, root: Path) -> None:
        self.cluster, self.source, self.root = cluster, source, root
        self.config = root / "topics.toml"
        self.config.write_text(CONFIG)
        self._clean: dict[tuple[str, ...], Run] = {}
        self._n = 0

    @property
    def endpoint(self) -> str:
        assert self.cluster.moto is not None
        return self.cluster.moto.endpoint_url

    def bucket(self, hint: str) -> str:
        assert self.cluster.moto is not None
        bucket = self.cluster.moto.create_bucket(hint)
        put_objects(self.cluster.moto, bucket, self.source)
        return bucket

    def argv(self, bucket: str, extra: tuple[str, ...], report: Path) -> list[str]:
        return ["--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", self.endpoint, "--config", str(self.config),
                "--now", NOW, "--quiet", "--report", str(report), *extra]

    def clean(self, extra: tuple[str, ...]) -> Run:
        """The clean run of ``compact *extra`` (local[2], this process)."""
        if extra not in self._clean:
            from jobs.commands.cli import main

            bucket = self.bucket("clean")
            report = self.root / f"clean-{len(self._clean)}.json"
            rc = main(["compact", *self.argv(bucket, extra, report)])
            assert rc == 0, f"the clean run failed: exit {rc}"
            self._clean[extra] = Run(bucket, json.loads(report.read_text()), "", rc)
        return self._clean[extra]

    def start(self, host: str, bucket: str, extra: tuple[str, ...], conf: dict[str, str] | None = None,
              ) -> tuple[subprocess.Popen, Path, Path]:
        """``compact`` submitted from ``host`` (running; see :meth:`finish`)."""
        self._n += 1
        report, log = self.root / f"run-{self._n}.json", self.root / f"run-{self._n}.log"
        cmd = self.cluster.submit_command(REPO / "jobs" / "compact.py", self.argv(bucket, extra, report), conf=conf)
        return self.cluster.start_driver(host, cmd, log), report, log

    def finish(self, proc: subprocess.Popen, bucket: str, report: Path, log: Path, timeout_s: float = 300) -> Run:
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the driver timed out:\n{log.read_text(errors='replace')[-4000:]}") from None
        finally:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
        text = log.read_text(errors="replace")
        doc = json.loads(report.read_text()) if report.exists() else {}
        return Run(bucket, doc, text, rc)

    def run(self, host: str, bucket: str, extra: tuple[str, ...], conf: dict[str, str] | None = None,
            during: Callable[[], None] | None = None) -> Run:
        """``compact`` from ``host``; ``during`` runs (on a thread) while it does: the fault."""
        proc, report, log = self.start(host, bucket, extra, conf)
        failed: list[BaseException] = []

        def inject() -> None:
            try:
                assert during is not None
                during()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the test's thread
                failed.append(exc)

        fault = threading.Thread(target=inject, daemon=True) if during is not None else None
        if fault is not None:
            fault.start()
        run = self.finish(proc, bucket, report, log)
        if fault is not None:
            fault.join(60)
            if failed:
                raise AssertionError(f"the fault was not injected: {failed[0]!r}\n{run.log[-3000:]}") from failed[0]
        return run


@pytest.fixture(scope="module")
def jobs(cluster: NetnsCluster, source: Path, tmp_path_factory: pytest.TempPathFactory, spark) -> Jobs:
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    return Jobs(cluster, source, tmp_path_factory.mktemp("jobs"))


def outcomes(report: dict) -> dict[str, dict]:
    """What the report says was done to each partition; a partition named twice fails here."""
    names = [f"{e['topic']}-{e['partition']}" for e in report["partitions"]]
    assert len(names) == len(set(names)), f"partitions counted more than once: {sorted(names)}"
    return {f"{e['topic']}-{e['partition']}": {k: e.get(k) for k in OUTCOME_FIELDS} for e in report["partitions"]}


def staging_left(cluster: NetnsCluster, bucket: str) -> list[str]:
    """Staging objects and external-sort files under the work prefix (none may be left once a run ends)."""
    assert cluster.moto is not None
    client = cluster.moto.client()
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=WORK_PREFIX)
            for o in page.get("Contents", [])]
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=WORK_PREFIX).get("Uploads", [])
    return [k for k in keys if any(m in k for m in STAGING_MARKS)] + [f"upload {u['Key']}" for u in uploads]


def assert_like_clean_run(jobs: Jobs, run: Run, extra: tuple[str, ...], *,
                          cleaned_twice: frozenset[str] = frozenset()) -> None:
    """The run's log dir, report and work prefix against the clean run's. ``cleaned_twice``: the partitions a
    killed run had replaced before this rerun, which cleans them once more as Kafka's cleaner does after an
    interrupted clean (their transaction markers gain a delete horizon: all that may differ there), and whose
    outcome in the report is a second clean's."""
    assert run.returncode == 0, f"exit {run.returncode}\n{run.log[-5000:]}\n{jobs.cluster.executor_logs()}"
    clean = jobs.clean(extra)
    assert jobs.cluster.moto is not None
    got = contents(jobs.cluster.moto, run.bucket)
    want = contents(jobs.cluster.moto, clean.bucket)
    assert differences_but_stamped_markers(want, got, set(cleaned_twice)) == []
    assert staging_left(jobs.cluster, run.bucket) == []
    got_outcomes, want_outcomes = outcomes(run.report), outcomes(clean.report)
    assert sorted(got_outcomes) == sorted(want_outcomes)
    assert {p: o for p, o in got_outcomes.items() if p not in cleaned_twice} == \
        {p: o for p, o in want_outcomes.items() if p not in cleaned_twice}
    assert any(o["action"] == "compacted" for o in got_outcomes.values())


def test_a_clean_run_on_three_hosts_writes_the_bytes_of_a_local_run(jobs: Jobs, cluster: NetnsCluster) -> None:
    run = jobs.run("driver-0", jobs.bucket("plain"), ())
    assert_like_clean_run(jobs, run, ())
    # every worker's executor took part (each its own host): the run was spread, not run on one host
    for worker in cluster.workers:
        assert list((cluster.root / worker / "work").glob("app-*/*/stderr")), worker


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------


def work_keys(cluster: NetnsCluster, bucket: str) -> list[str]:
    assert cluster.moto is not None
    client = cluster.moto.client()
    return [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=WORK_PREFIX)
            for o in page.get("Contents", [])]


def wait_for_key(cluster: NetnsCluster, bucket: str, mark: str, timeout_s: float = 240) -> str:
    """The first object under the work prefix whose key holds ``mark``, once there is one: the stage that writes
    it is under way (its other tasks still run: six partitions on three executors)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [k for k in work_keys(cluster, bucket) if mark in k]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no object with {mark!r} under s3://{bucket}/{WORK_PREFIX} within {timeout_s:.0f} s")


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # ended by itself meanwhile


def test_an_executor_killed_mid_rewrite_is_retried_and_writes_the_bytes_of_a_clean_run(
        jobs: Jobs, cluster: NetnsCluster) -> None:
    bucket = jobs.bucket("executor-killed")
    killed: list[str] = []

    def fault() -> None:
        wait_for_key(cluster, bucket, "/staged/")  # a task has staged a rewritten segment: the rewrite is under way
        for worker in cluster.workers:
            pids = cluster.executor_pids(worker)
            kill(pids)
            killed.extend(pids)

    run = jobs.run("driver-0", bucket, (), during=fault)
    assert killed, "no executor was killed"
    assert "ExecutorLostFailure" in run.log, run.log[-3000:]
    assert_like_clean_run(jobs, run, ())


def test_a_python_worker_killed_mid_rewrite_is_retried_and_writes_the_bytes_of_a_clean_run(
        jobs: Jobs, cluster: NetnsCluster) -> None:
    # A slow bucket: each staged object takes a second to write, so the task whose first staged object shows is
    # still staging the rest when its Python worker dies (on a fast bucket the kill could land between tasks and
    # kill only idle workers, which Spark never notices).
    bucket = jobs.bucket(SLOW_BUCKETS + "python-killed")
    killed: list[int] = []

    def fault() -> None:
        wait_for_key(cluster, bucket, "/staged/")
        for worker in cluster.workers:  # those running a task and those waiting for the next (worker reuse)
            pids = cluster.python_worker_pids(worker)
            kill(pids)
            killed.extend(pids)

    run = jobs.run("driver-0", bucket, (), during=fault)
    assert killed, "no Python worker was killed"
    assert LOST_TO_A_DEAD_PYTHON_WORKER.search(run.log), run.log[-3000:]
    assert_like_clean_run(jobs, run, ())


#: Spark's warning for a task whose Python worker died under it (the task is then retried).
LOST_TO_A_DEAD_PYTHON_WORKER = re.compile(r"Lost task \d+\.\d+ in stage .*(Python worker exited unexpectedly|"
                                          r"EOFException|Connection reset)")
#: Spark's warning for the losing attempt of a speculated task: killed once another attempt of the same task
#: succeeded, or once the stage it belonged to finished (when it was the stage's last task). Attempt numbers
#: from 1 up are the copies speculation launched (no attempt failed in this run).
LOST_SPECULATIVE_COPY = re.compile(r"Lost task \d+\.[1-9]\d* in stage [\d.]+ .*TaskKilled "
                                   r"\((another attempt succeeded|Stage cancelled)")

#: Speculation as eager as Spark allows: a copy of any task that runs longer than half a second.
SPECULATION = {
    "spark.speculation": "true", "spark.speculation.interval": "100ms", "spark.speculation.multiplier": "1",
    "spark.speculation.quantile": "0", "spark.speculation.minTaskRuntime": "100ms",
    "spark.speculation.task.duration.threshold": "500ms",
}


def test_speculative_attempts_racing_to_stage_one_partition_write_the_bytes_of_a_clean_run(
        jobs: Jobs, cluster: NetnsCluster) -> None:
    # On a slow bucket every rewrite task stages for seconds, past the speculation threshold: copies of them race.
    bucket = jobs.bucket(SLOW_BUCKETS + "speculation")
    run = jobs.run("driver-0", bucket, ("--strategy", "memory"), conf=SPECULATION)
    # The race happened: a second attempt of a task ran beside the first, and the loser was killed (Spark says
    # so at WARN).
    assert LOST_SPECULATIVE_COPY.search(run.log), run.log[-3000:]
    assert "ExecutorLostFailure" not in run.log and "Python worker exited" not in run.log
    assert_like_clean_run(jobs, run, ("--strategy", "memory"))


def test_the_driver_killed_mid_commit_then_a_rerun_from_another_host_writes_the_bytes_of_a_clean_run(
        jobs: Jobs, cluster: NetnsCluster) -> None:
    bucket = jobs.bucket("driver-killed")
    proc, report, _ = jobs.start("driver-0", bucket, ())
    try:
        wait_for_key(cluster, bucket, "/replace.json")  # a commit's intent: the commit point is passed
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not report.exists()
    # The dead run's lease names host driver-0: another host is refused until it breaks the lease.
    refused = jobs.run("driver-1", bucket, ())
    assert refused.returncode == 2, refused.log[-3000:]
    assert cluster.moto is not None
    holder = json.loads(cluster.moto.client().get_object(Bucket=bucket, Key=WORK_PREFIX + "lease.json")["Body"]
                        .read())["holder"]
    assert holder["host"] == "driver-0", holder
    recover = cluster.root / "recover.log"
    rc = cluster.run_driver("driver-1", [sys.executable, "-m", "jobs", "recover", "--log-dir",
                                         f"s3://{bucket}/{PREFIX}", "--s3-endpoint", jobs.endpoint,
                                         "--break-lease", holder["run_id"]], recover)
    assert rc == 0, recover.read_text()
    # Recovery settled the commit the driver died in (every partition all old or all new); it keeps the broken
    # run's recent staged objects (that run might still be staging), which the rerun deletes.
    recovered = contents(cluster.moto, bucket)
    source = {str(p.relative_to(jobs.source)): p.read_bytes() for p in jobs.source.rglob("*") if p.is_file()}
    replaced = frozenset(p for p in {k.split("/", 1)[0] for k in source}
                         if live_logs(recovered, p) != live_logs(source, p))
    assert replaced, "the killed run had replaced no partition: it was not killed mid-commit"
    run = jobs.run("driver-1", bucket, ())
    assert_like_clean_run(jobs, run, (), cleaned_twice=replaced)

