"""Run a segjobs command whose commit meets an unexpected exception at a chosen step, as the console script runs it.

    python -m tests.support.stop STEP_PREFIX -- compact --log-dir ... --now ...

runs ``segjobs compact ...`` in this process (then stops the Spark session, as ``segjobs`` does) and raises a
``RuntimeError`` (an exception no partition's handling expects: a stand-in for a bug, or for an ``OSError`` that
escaped the storage layer) just before the first commit step whose name starts with STEP_PREFIX, through the run's
fault seam (``Seams.fault``, :mod:`jobs.engine.runtime.seams`). Before raising it prints one line on stderr::

    stop: raised before STEP of PARTITION at EPOCH_SECONDS with N task thread(s) running Spark jobs

so that the caller can tell how long the process took to end after the exception, and whether Spark jobs were in
flight when it came (the driver threads that submit the tasks' jobs are alive while they have one to run).
The exit code is the command's.
"""

from __future__ import annotations

import sys
import threading
import time


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m tests.support.stop STEP_PREFIX -- SEGJOBS_ARGS...", file=sys.stderr)
        return 2
    prefix, argv = args[0], args[2:]

    from jobs.commands.cli import build_parser
    from jobs.engine.runtime.seams import Seams
    from jobs.engine.runtime.spark_session import stop_active_session

    raised = threading.Event()

    def stop_at(partition: str, step: str) -> None:
        if raised.is_set() or not step.startswith(prefix):
            return
        raised.set()
        # The driver threads that run the tasks' Spark jobs (jobs.engine.runtime.tasks.SparkTasks.stream) live while
        # they have a job in flight or one more to submit: those are what once kept a stopped run's process alive.
        active = sum(1 for t in threading.enumerate() if t.name.startswith("segjobs-tasks") and t.is_alive())
        print(f"stop: raised before {step} of {partition} at {time.time():.3f} with {active} task thread(s) "
              f"running Spark jobs", file=sys.stderr, flush=True)
        raise RuntimeError(f"injected before {step} of {partition}")

    parsed = build_parser().parse_args(argv)
    try:
        return int(parsed._run(parsed, seams=Seams(fault=stop_at)) or 0)
    finally:
        stop_active_session()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
