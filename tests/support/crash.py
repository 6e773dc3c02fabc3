"""Run a segjobs command and kill its process outright at a chosen point of a commit: a crash on demand.

    python -m tests.support.crash STEP_PREFIX N -- compact --log-dir ... --now ...

runs ``segjobs compact ...`` in this process and, just before the first commit step whose name starts with
STEP_PREFIX within the N-th segment replace of the run (steps as :mod:`jobs.commit` names them:
``cleaned-to-swap:``, ``old-to-deleted:``, ``swap-to-live:``, ...), sends itself SIGKILL. Nothing runs after
that: no ``finally``, no lock release but the kernel's, no checkpoint, no report; Spark's JVM exits when its
Python driver's pipe closes. If the run never reaches that point, the command exits normally and the caller
sees a return code other than -9.

The hook is the compaction driver's fault seam (``jobs.engine.compaction.COMMIT_FAULT``), the same one the
in-process fault tests use; here it ends the process instead of raising.
"""

from __future__ import annotations

import os
import signal
import sys


def main(args: list[str]) -> int:
    if len(args) < 4 or args[2] != "--":
        print("usage: python -m tests.support.crash STEP_PREFIX N -- SEGJOBS_ARGS...", file=sys.stderr)
        return 2
    prefix, nth, argv = args[0], int(args[1]), args[3:]

    import jobs.engine.compaction
    from jobs.commands.cli import main as segjobs

    replaces = 0

    def kill_at(step: str) -> None:
        nonlocal replaces
        if step == "write-intent":  # the first step of every replace
            replaces += 1
        if replaces == nth and step.startswith(prefix):
            print(f"crash: SIGKILL before {step} of replace {nth}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    jobs.engine.compaction.COMMIT_FAULT = kill_at
    return segjobs(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
