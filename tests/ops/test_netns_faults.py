"""Faults in every stage of external sort on the cluster of several hosts (:mod:`tests.ops.netns_cluster`): a worker
host cut off once the buckets are written, and an executor JVM killed in the scan, the key pass and the bucket
reduce. Each run is compared with one clean run of the same job (:func:`tests.ops.netns_jobs.assert_like_clean_run`:
the log dir byte for byte, nothing staged or sorted left under the work prefix, every partition once in the report
with the clean run's outcome); no external-sort file may be left on any host either.

A fault is aimed at a stage by what that stage does: the scan reads segments (moto's request log names the host
that read one), the key pass writes piece files, the reduce bucket files, the rewrite staged segments. In the slow
buckets these tests use, moto makes each of those requests wait, so the task whose first read or file shows is
still at work when the fault lands; the test then checks where it landed (the driver's log and the files that
existed at that moment), so a fault that missed its stage fails the test instead of passing it unaimed.
"""

from __future__ import annotations

import time

import pytest

from tests.ops.netns_cluster import SLOW_SCAN_BUCKETS, SLOW_SORT_BUCKETS, SLOW_STAGING_S, NetnsCluster
from tests.ops.netns_jobs import (
    Jobs,
    Run,
    assert_like_clean_run,
    cluster_marks,
    kill_executors,
    lost_executor_hosts,
    lost_task_hosts,
    moto_requests,
    recover_late_staging,
    sort_files_on_hosts,
    staging_left,
    wait_for_key,
    wait_for_request,
    work_keys,
)

pytestmark = cluster_marks()

#: External sort with 1 MiB buckets: four buckets a partition, so the reduce is a stage of many tasks.
EXTERNAL_SORT = ("--strategy", "external-sort", "--sort-bucket-bytes", "1MiB")
#: The driver's progress line once the scan (every selected partition's transaction state read) is over.
SCAN_DONE = "partition(s) for their transaction state"


def sort_totals(run: Run) -> tuple[int, int]:
    """The piece files and bucket files the run's external sort wrote in all (from its report)."""
    sorts = [e["external_sort"] for e in run.report["partitions"] if e.get("external_sort")]
    assert sorts, "no partition was external-sorted"
    return sum(s["key_pieces"] for s in sorts), sum(s["buckets"] for s in sorts)


def sort_files(keys: list[str]) -> tuple[int, int]:
    """The piece files and bucket files among ``keys``."""
    return (sum("/piece-" in k and k.endswith(".rows") for k in keys),
            sum("/bucket-" in k and k.endswith(".map") for k in keys))


def staged_partition(key: str) -> str:
    """The partition a staged object's key (``.../commit/<partition>/staged/<run>/<file>``) is staged for."""
    return key.split("/commit/", 1)[1].split("/", 1)[0]


def test_a_worker_cut_off_once_the_buckets_are_written_loses_its_tasks_not_the_buckets(
        netns_jobs: Jobs, netns_cluster: NetnsCluster) -> None:
    bucket = netns_jobs.bucket(SLOW_SORT_BUCKETS + "cut")
    cut: list[tuple[str, int]] = []
    seen: list[str] = []

    def fault() -> None:
        # the first rewritten segment is staged: every bucket file is written, and the host that staged it is
        # still staging the rest of its groups (each staged object waits in moto)
        wait_for_key(netns_cluster, bucket, "/staged/")
        worker = wait_for_request(netns_cluster, bucket, "PUT", "/staged/", netns_cluster.workers)
        netns_cluster.cut(worker)
        at, started = netns_cluster.moto_log.stat().st_size, time.monotonic()
        cut.append((worker, at))
        seen.extend(work_keys(netns_cluster, bucket))
        # how long the cluster takes to run the cut host's task again elsewhere (for the record: printed)
        mine = {staged_partition(k) for h, k in moto_requests(netns_cluster, bucket, "PUT", "/staged/") if h == worker}
        while time.monotonic() - started < 240 and not mine & {
                staged_partition(k) for h, k in moto_requests(netns_cluster, bucket, "PUT", "/staged/", since=at)
                if h != worker}:
            time.sleep(0.2)
        print(f"the cut host's task was staging again on another host {time.monotonic() - started:.0f} s after the cut")

    try:
        run = netns_jobs.run("driver-0", bucket, EXTERNAL_SORT, during=fault)
        # what the run left, while the cut host still cannot write
        left_at_its_end = staging_left(netns_cluster, bucket)
        ended_at = netns_cluster.moto_log.stat().st_size
    finally:
        for worker, _ in cut:
            netns_cluster.reconnect(worker)
    assert cut, "no worker was cut off"
    [(worker, at)] = cut
    assert sort_files(seen)[1] == sort_totals(run)[1], "the cut came before every bucket file was written"
    # The cut host's executor was lost and its rewrite task run again on another host, from the bucket files: a
    # partition the cut host was staging was staged again by another host afterwards. (Spark names the lost task
    # only when the driver's heartbeat timeout noticed first: the master's "worker lost" is no task's fault, said
    # at INFO.)
    staged = moto_requests(netns_cluster, bucket, "PUT", "/staged/")
    cut_staging = {staged_partition(k) for h, k in staged if h == worker}
    again = {staged_partition(k) for h, k in moto_requests(netns_cluster, bucket, "PUT", "/staged/", since=at)
             if h != worker}
    assert worker in lost_executor_hosts(netns_cluster, run.log), run.log[-3000:]
    assert cut_staging & again, (cut_staging, again)
    assert left_at_its_end == []
    # Back on the network, the cut host's executor (its application gone) may finish a PUT its run no longer
    # wants before it notices and exits: a task attempt still running after its run ended, whose staging the next
    # run's recovery removes (docs/architecture.md). Only the cut host wrote after the run's end.
    time.sleep(SLOW_STAGING_S + 3)  # a PUT the executor sent before it ended is stored when moto gets to it
    late_writers = {h for method in ("PUT", "POST")
                    for h, _ in moto_requests(netns_cluster, bucket, method, "/staged/", since=ended_at)}
    assert late_writers <= {worker}, late_writers
    recover_late_staging(netns_jobs, bucket, run, "cut-host")
    assert_like_clean_run(netns_jobs, run, EXTERNAL_SORT)
    assert sort_files_on_hosts(netns_cluster) == []


@pytest.mark.parametrize("stage", ["scan", "key pass", "bucket reduce"])
def test_an_executor_killed_in_a_stage_of_external_sort_is_retried_and_writes_the_bytes_of_a_clean_run(
        netns_jobs: Jobs, netns_cluster: NetnsCluster, stage: str) -> None:
    bucket = netns_jobs.bucket((SLOW_SCAN_BUCKETS if stage == "scan" else SLOW_SORT_BUCKETS) + "killed")
    killed: list[int] = []
    seen: list[str] = []

    def fault() -> None:
        if stage == "scan":  # a worker read a segment: the scan's tasks are under way (each read waits in moto)
            wait_for_request(netns_cluster, bucket, "GET", ".log", netns_cluster.workers)
        else:
            wait_for_key(netns_cluster, bucket, "/piece-" if stage == "key pass" else "/bucket-")
        killed.extend(kill_executors(netns_cluster))
        seen.extend(work_keys(netns_cluster, bucket))

    started = time.monotonic()
    run = netns_jobs.run("driver-0", bucket, EXTERNAL_SORT, during=fault, quiet=False)
    print(f"{stage}: the run took {time.monotonic() - started:.0f} s")
    assert killed, "no executor was killed"
    assert lost_task_hosts(netns_cluster, run.log), run.log[-3000:]
    pieces, buckets = sort_files(seen)
    total_pieces, total_buckets = sort_totals(run)
    if stage == "scan":  # the tasks were lost before the scan ended, and nothing was sorted yet
        first_loss = run.log.index("ExecutorLostFailure")
        assert first_loss < run.log.index(SCAN_DONE), run.log[-3000:]
        assert (pieces, buckets) == (0, 0)
    elif stage == "key pass":  # some piece files, not all (every piece of this log dir has keys), no bucket file
        assert 0 < pieces < total_pieces and buckets == 0, (pieces, total_pieces, buckets)
    else:  # some bucket files, not all (every bucket has superseded keys here), nothing staged yet
        assert 0 < buckets < total_buckets, (buckets, total_buckets)
        assert not [k for k in seen if "/staged/" in k]
    assert_like_clean_run(netns_jobs, run, EXTERNAL_SORT)
    assert sort_files_on_hosts(netns_cluster) == []
