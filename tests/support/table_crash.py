"""Run ``segjobs table`` and kill its process outright at a step of its Delta write: a crash on demand.

    python -m tests.support.table_crash STEP -- table --log-dir ... --topic ... --table ...

STEP is a step the table job's fault seam names (``merge:start``: the changes are computed, nothing is written
yet; ``merge:committed``: the Delta commit is in the table's log, the run has not returned). Like
tests/support/crash.py for compaction, the hook sends SIGKILL to this process: no ``finally`` runs. If the run
never reaches STEP the command exits normally and the caller sees a return code other than -9.
"""

from __future__ import annotations

import os
import signal
import sys


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m tests.support.table_crash STEP -- table ARGS...", file=sys.stderr)
        return 2
    step, argv = args[0], args[2:]

    from jobs.commands.cli import build_parser
    from jobs.engine.runtime.seams import Seams
    from jobs.engine.runtime.tasks import InProcessTasks

    def kill_at(partition: str, at: str) -> None:
        if at == step:
            print(f"table_crash: SIGKILL at {at}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    parsed = build_parser().parse_args(argv)
    if parsed.command != "table":
        print("table_crash: only the table command", file=sys.stderr)
        return 2
    return int(parsed._run(parsed, seams=Seams(fault=kill_at, runner=InProcessTasks())) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
