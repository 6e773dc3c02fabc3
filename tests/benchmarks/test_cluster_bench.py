"""The cluster section's reading of the driver's log (:mod:`benchmarks.cluster_bench`): which tasks run (the one
whose executor the recovery run kills) and when a lost task started again. The lines are Spark 4.3's, copied
from a driver's log on the cluster of network namespaces (the host's comma has no space after it there)."""

from __future__ import annotations

from benchmarks.cluster_bench import lost, rerun_of, running_tasks

SCAN_AND_KEY_PASS = """\
26/11/29 11:20:28 INFO TaskSetManager: Starting task 0.0 in stage 0.0 (TID 0) (10.201.30.3,executor 2, partition 0, PROCESS_LOCAL, 14603 bytes)
26/11/29 11:21:06 INFO TaskSetManager: Finished task 0.0 in stage 0.0 (TID 0) in 37791 ms on 10.201.30.3 (executor 2) (1/1)
26/11/29 11:21:09 INFO TaskSetManager: Starting task 0.0 in stage 1.0 (TID 1) (10.201.30.3,executor 2, partition 0, PROCESS_LOCAL, 11135 bytes)
26/11/29 11:21:09 INFO TaskSetManager: Starting task 1.0 in stage 1.0 (TID 2) (10.201.30.5,executor 0, partition 1, PROCESS_LOCAL, 11135 bytes)
26/11/29 11:21:09 INFO TaskSetManager: Starting task 2.0 in stage 1.0 (TID 3) (10.201.30.4,executor 1, partition 2, PROCESS_LOCAL, 12301 bytes)
26/11/29 11:21:11 INFO TaskSetManager: Finished task 0.0 in stage 1.0 (TID 1) in 1974 ms on 10.201.30.3 (executor 2) (1/3)
"""  # noqa: E501 - Spark's lines as they are

#: Spark 4.3 says so at INFO when the executor exited for a reason unrelated to the task (Spark 3 and a task's own
#: fault: a WARN ``Lost task 2.0 in stage 1.0 (TID 3) (host executor 1): ExecutorLostFailure ...``).
LOST_AND_AGAIN = """\
26/11/29 11:21:12 ERROR TaskSchedulerImpl: Lost executor 1 on 10.201.30.4: Command exited with code 137
26/11/29 11:21:12 INFO TaskSetManager: task 2.0 in stage 1.0 (TID 3) failed because while it was being computed, its executor exited for a reason unrelated to the task. Not counting this failure towards the maximum number of failures for the task.
26/11/29 11:21:13 INFO TaskSetManager: Starting task 2.1 in stage 1.0 (TID 4) (10.201.30.3,executor 2, partition 2, PROCESS_LOCAL, 12301 bytes)
"""  # noqa: E501 - Spark's lines as they are


def test_the_running_tasks_are_those_started_and_neither_finished_nor_lost_in_the_order_they_started() -> None:
    assert running_tasks(SCAN_AND_KEY_PASS) == [(1, 0, 1, 2, "10.201.30.5"), (2, 0, 1, 3, "10.201.30.4")]
    assert running_tasks(SCAN_AND_KEY_PASS + LOST_AND_AGAIN) == [(1, 0, 1, 2, "10.201.30.5"),
                                                                 (2, 1, 1, 4, "10.201.30.3")]


def test_a_space_after_the_hosts_comma_as_spark_3_writes_it_is_read_too() -> None:
    spark3 = SCAN_AND_KEY_PASS.replace(",executor", ", executor")
    assert running_tasks(spark3)[-1] == (2, 0, 1, 3, "10.201.30.4")


def test_the_lost_task_runs_again_once_a_later_attempt_of_it_started_on_some_executor() -> None:
    assert rerun_of(SCAN_AND_KEY_PASS, 2, 0, 1, 3) is None
    assert rerun_of(SCAN_AND_KEY_PASS + LOST_AND_AGAIN, 2, 0, 1, 3) == ("10.201.30.3", "2")
    # another task's attempt, or the same index in another stage, is not its rerun
    assert rerun_of(SCAN_AND_KEY_PASS + LOST_AND_AGAIN, 1, 0, 1, 2) is None
    assert rerun_of(SCAN_AND_KEY_PASS + LOST_AND_AGAIN.replace("stage 1.0 (TID 4)", "stage 2.0 (TID 4)"),
                    2, 0, 1, 3) is None


def test_a_task_is_lost_once_the_driver_says_its_attempt_failed_or_was_lost_not_when_it_finished() -> None:
    assert not lost(SCAN_AND_KEY_PASS, 3)
    assert lost(SCAN_AND_KEY_PASS + LOST_AND_AGAIN, 3)
    warned = "WARN TaskSetManager: Lost task 2.0 in stage 1.0 (TID 3) (10.201.30.4 executor 1): ExecutorLostFailure\n"
    assert lost(SCAN_AND_KEY_PASS + warned, 3)
    assert not lost(SCAN_AND_KEY_PASS + LOST_AND_AGAIN, 1)  # finished
    assert not lost(SCAN_AND_KEY_PASS + LOST_AND_AGAIN, 2)  # still running
