"""``segjobs table`` on the cluster of several hosts (:mod:`tests.ops.netns_cluster`) with an executor lost while its
tasks read the partitions: the Delta table (deltalake writer, the default) is the one a clean run writes, each key
once.

(``segjobs retain`` gives executors nothing to do: its scan reads batch headers on the driver's threads and its
deletes are the driver's commits, so an executor lost mid-run cannot touch its work.)
"""

from __future__ import annotations

from tests.ops.netns_cluster import SLOW_SCAN_BUCKETS, NetnsCluster
from tests.ops.netns_jobs import (
    Jobs,
    cluster_marks,
    kill_executors,
    lost_task_hosts,
    staging_left,
    table_rows,
    wait_for_request,
)

pytestmark = cluster_marks()

TABLE = ("--topic", "orders", "--writer", "deltalake")


def test_an_executor_killed_while_table_reads_the_partitions_leaves_the_table_a_clean_run_writes(
        netns_jobs: Jobs, netns_cluster: NetnsCluster) -> None:
    bucket = netns_jobs.bucket(SLOW_SCAN_BUCKETS + "table")
    killed: list[int] = []

    def fault() -> None:  # a worker read a segment: the partitions' tasks are under way (each read waits in moto)
        wait_for_request(netns_cluster, bucket, "GET", ".log", netns_cluster.workers)
        killed.extend(kill_executors(netns_cluster))

    run = netns_jobs.run("driver-0", bucket, TABLE, during=fault, command="table")
    assert run.returncode == 0, f"exit {run.returncode}\n{run.log[-5000:]}\n{netns_cluster.executor_logs()}"
    assert killed, "no executor was killed"
    assert lost_task_hosts(netns_cluster, run.log), run.log[-3000:]
    clean = netns_jobs.clean(TABLE, "table")
    version, rows = table_rows(netns_cluster, bucket, TABLE)
    assert rows and (version, rows) == table_rows(netns_cluster, clean.bucket, TABLE)
    assert len({(r["partition"], r["key"]) for r in rows}) == len(rows), "a key is in the table twice"
    assert staging_left(netns_cluster, bucket) == []
