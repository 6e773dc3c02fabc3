"""The jobs on a cluster of several hosts, with faults: a standalone master and three workers, each in a network
namespace of its own (:mod:`tests.ops.netns_cluster`), the log dirs on moto_server over the bridge, the drivers
submitted from hosts of their own.

Each test runs one job on the cluster while something fails, and then compares with one clean run of the same job
on a copy of the same log dir (``local[2]`` in this process, same ``--now``; :mod:`tests.ops.netns_jobs`): the log
dir's objects equal the clean run's byte for byte, no staging object or external-sort file is left under the work
prefix once the run ends, and the report names every partition once, with the clean run's outcome. The faults in
the other stages and jobs are in ``test_netns_faults.py``; both share one cluster (``tests/ops/conftest.py``).

It runs in ``make cluster-test`` (root, namespaces); ``make test`` reports it skipped, and so does a machine where
namespaces cannot be made (the reason is the skip message).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

from tests.ops.netns_cluster import SLOW_BUCKETS, SLOW_STAGING_S, NetnsCluster
from tests.ops.netns_jobs import (
    WORK_PREFIX,
    Jobs,
    assert_like_clean_run,
    cluster_marks,
    kill,
    kill_executors,
    recover_late_staging,
    wait_for_key,
)
from tests.support.compaction_faults import live_logs
from tests.support.s3_objects import PREFIX, contents

pytestmark = cluster_marks()


def test_a_clean_run_on_three_hosts_writes_the_bytes_of_a_local_run(netns_jobs: Jobs,
                                                                    netns_cluster: NetnsCluster) -> None:
    run = netns_jobs.run("driver-0", netns_jobs.bucket("plain"), ())
    assert_like_clean_run(netns_jobs, run, ())
    # every worker's executor took part (each its own host): the run was spread, not run on one host
    for worker in netns_cluster.workers:
        assert list((netns_cluster.root / worker / "work").glob("app-*/*/stderr")), worker


def test_an_executor_killed_mid_rewrite_is_retried_and_writes_the_bytes_of_a_clean_run(
        netns_jobs: Jobs, netns_cluster: NetnsCluster) -> None:
    bucket = netns_jobs.bucket("executor-killed")
    killed: list[int] = []

    def fault() -> None:
        wait_for_key(netns_cluster, bucket, "/staged/")  # a task has staged a rewritten segment: the rewrite runs
        killed.extend(kill_executors(netns_cluster))

    run = netns_jobs.run("driver-0", bucket, (), during=fault)
    assert killed, "no executor was killed"
    assert "ExecutorLostFailure" in run.log, run.log[-3000:]
    assert_like_clean_run(netns_jobs, run, ())


def test_a_python_worker_killed_mid_rewrite_is_retried_and_writes_the_bytes_of_a_clean_run(
        netns_jobs: Jobs, netns_cluster: NetnsCluster) -> None:
    # A slow bucket: each staged object takes a second to write, so the task whose first staged object shows is
    # still staging the rest when its Python worker dies (on a fast bucket the kill could land between tasks and
    # kill only idle workers, which Spark never notices).
    bucket = netns_jobs.bucket(SLOW_BUCKETS + "python-killed")
    killed: list[int] = []

    def fault() -> None:
        wait_for_key(netns_cluster, bucket, "/staged/")
        for worker in netns_cluster.workers:  # those running a task and those waiting for the next (worker reuse)
            pids = netns_cluster.python_worker_pids(worker)
            kill(pids)
            killed.extend(pids)

    run = netns_jobs.run("driver-0", bucket, (), during=fault)
    assert killed, "no Python worker was killed"
    assert LOST_TO_A_DEAD_PYTHON_WORKER.search(run.log), run.log[-3000:]
    assert_like_clean_run(netns_jobs, run, ())


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
        netns_jobs: Jobs, netns_cluster: NetnsCluster) -> None:
    # On a slow bucket every rewrite task stages for seconds, past the speculation threshold: copies of them race.
    bucket = netns_jobs.bucket(SLOW_BUCKETS + "speculation")
    run = netns_jobs.run("driver-0", bucket, ("--strategy", "memory"), conf=SPECULATION)
    # The race happened: a second attempt of a task ran beside the first, and the loser was killed (Spark says
    # so at WARN).
    assert LOST_SPECULATIVE_COPY.search(run.log), run.log[-3000:]
    assert "ExecutorLostFailure" not in run.log and "Python worker exited" not in run.log
    # A losing copy is killed, not stopped at once: Spark ends its Python worker only after
    # spark.python.task.killTimeout (2 s), and a PUT it sent meanwhile is stored when the store gets to it. So a
    # loser may stage an object after the run swept its staging at its end. It is never live (no intent names
    # it), and the next run's recovery deletes it (this run's lease was released, not taken over: nothing of it
    # is fenced). Once the losers are gone, recovery is that next run.
    time.sleep(2 + SLOW_STAGING_S + 3)
    recover_late_staging(netns_jobs, bucket, run, "speculation")
    assert_like_clean_run(netns_jobs, run, ("--strategy", "memory"))


def test_the_driver_killed_mid_commit_then_a_rerun_from_another_host_writes_the_bytes_of_a_clean_run(
        netns_jobs: Jobs, netns_cluster: NetnsCluster) -> None:
    bucket = netns_jobs.bucket("driver-killed")
    proc, report, _ = netns_jobs.start("driver-0", bucket, ())
    try:
        wait_for_key(netns_cluster, bucket, "/replace.json")  # a commit's intent: the commit point is passed
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not report.exists()
    # The dead run's lease names host driver-0: another host is refused until it breaks the lease.
    refused = netns_jobs.run("driver-1", bucket, ())
    assert refused.returncode == 2, refused.log[-3000:]
    assert netns_cluster.moto is not None
    holder = json.loads(netns_cluster.moto.client().get_object(Bucket=bucket, Key=WORK_PREFIX + "lease.json")["Body"]
                        .read())["holder"]
    assert holder["host"] == "driver-0", holder
    recover = netns_cluster.root / "recover.log"
    rc = netns_cluster.run_driver("driver-1", [sys.executable, "-m", "jobs", "recover", "--log-dir",
                                         f"s3://{bucket}/{PREFIX}", "--s3-endpoint", netns_jobs.endpoint,
                                         "--break-lease", holder["run_id"]], recover)
    assert rc == 0, recover.read_text()
    # Recovery settled the commit the driver died in (every partition all old or all new); it keeps the broken
    # run's recent staged objects (that run might still be staging), which the rerun deletes.
    recovered = contents(netns_cluster.moto, bucket)
    source = {str(p.relative_to(netns_jobs.source)): p.read_bytes() for p in netns_jobs.source.rglob("*")
              if p.is_file()}
    replaced = frozenset(p for p in {k.split("/", 1)[0] for k in source}
                         if live_logs(recovered, p) != live_logs(source, p))
    assert replaced, "the killed run had replaced no partition: it was not killed mid-commit"
    run = netns_jobs.run("driver-1", bucket, ())
    assert_like_clean_run(netns_jobs, run, (), cleaned_twice=replaced)

