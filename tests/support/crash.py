"""Run a segjobs command and kill its process outright at a chosen point of a commit: a crash on demand.

    python -m tests.support.crash STEP_PREFIX N -- compact --log-dir ... --now ...

runs ``segjobs compact ...`` in this process and, just before the first commit step whose name starts with
STEP_PREFIX within the N-th segment replace of the run (steps as :mod:`jobs.logdir.commit` names them:
``cleaned-to-swap:``, ``old-to-deleted:``, ``swap-to-live:``, ...), sends itself SIGKILL. Nothing runs after
that: no ``finally``, no lock release but the kernel's, no checkpoint, no report; Spark's JVM exits when its
Python driver's pipe closes. If the run never reaches that point, the command exits normally and the caller
sees a return code other than -9.

The hook is the run's fault seam (``Seams.fault``, :mod:`jobs.engine.runtime.seams`), the same one the in-process fault
tests use (tests/jobs/engine/compact/test_faults.py); here it ends the process instead of raising. The seam also sees
retention's deletes (a ``compact,delete`` topic gets retention first within ``segjobs compact``), whose commits
start with the same ``write-intent`` step: a commit counts as a replace from its first step that only a replace
has (``cleaned-to-swap:`` on local disk, ``copy-new:`` on S3), so STEP_PREFIX must name a step from there on.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

#: the first step of a commit after its intent that tells a segment replace from a segment delete
REPLACE_STEPS = ("cleaned-to-swap:", "copy-new:")


def main(args: list[str]) -> int:
    if len(args) < 4 or args[2] != "--":
        print("usage: python -m tests.support.crash STEP_PREFIX N -- SEGJOBS_ARGS...", file=sys.stderr)
        return 2
    prefix, nth, argv = args[0], int(args[1]), args[3:]

    from jobs.commands.cli import build_parser
    from jobs.engine.runtime.seams import Seams

    replaces = 0
    # partition -> the number of the replace it is in (0: in none, or in a delete); retention commits partitions
    # on several threads, hence the lock
    current: dict[str, int] = {}
    lock = threading.Lock()

    def kill_at(partition: str, step: str) -> None:
        nonlocal replaces
        with lock:
            if step == "write-intent":
                current[partition] = 0
            elif step.startswith(REPLACE_STEPS) and current.get(partition) == 0:
                replaces += 1
                current[partition] = replaces
            if current.get(partition) == nth and step.startswith(prefix):
                print(f"crash: SIGKILL before {step} of replace {nth} ({partition})", file=sys.stderr, flush=True)
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    parsed = build_parser().parse_args(argv)
    if parsed.command not in ("compact", "retain"):
        print("crash: only compact and retain take a fault seam", file=sys.stderr)
        return 2
    return int(parsed._run(parsed, seams=Seams(fault=kill_at)) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
