"""Seams: what a test may replace in a job run, passed as parameters (never by patching module globals).

* ``fault(partition, step)``: called before every destructive step of a commit (compaction's replace,
  retention's delete, its checkpoint writes and purges) with the partition's name (``orders-3``; ``""`` for a
  step on the log dir as a whole) and the protocol's step name (``write-intent``, ``cleaned-to-swap:<file>``,
  ...; see :mod:`jobs.logdir.commit`). Raising from it simulates a crash right there. Compaction commits the
  partitions of a bin in lockstep and calls it with ``("", "barrier:<step>")`` before each durability barrier
  they share (``barrier:write-intent``, ``barrier:intent-entry``, ``barrier:cleaned-to-swap``, ...). Retention
  commits partitions on several threads at once, so a hook must be thread-safe.
* ``clock()``: the wall clock in epoch ms. It times the S3 lease (taking it, the heartbeat, the check before
  each commit) and is the default of ``now``. Decisions are never made on it otherwise: ``now`` is an input.
* ``runner``: how the per-partition tasks (scans, cleaning, inspection) run: as Spark tasks
  (:class:`~jobs.engine.runtime.tasks.SparkTasks`, the default) or one after another in this process
  (:class:`~jobs.engine.runtime.tasks.InProcessTasks`), so the drivers' commit loops can be tested without a Spark
  session (see :mod:`jobs.engine.runtime.tasks`).

Users never need them: :func:`jobs.api.compact` and the others take ``seams=None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from jobs.engine.runtime.tasks import TaskRunner
from jobs.rules.timeutil import wall_clock_ms

#: ``fault(partition, step)``: see the module docstring.
FaultHook = Callable[[str, str], None]


@dataclass(frozen=True)
class Seams:
    """The test seams of one run (see the module docstring). The defaults are what production uses."""

    fault: FaultHook | None = None
    clock: Callable[[], int] = wall_clock_ms
    #: None: Spark (the session given to the API, else the active one, else a new one)
    runner: TaskRunner | None = None

    def fault_for(self, partition: str) -> Callable[[str], None] | None:
        """The one-argument hook :mod:`jobs.logdir.commit` calls, for the steps of ``partition``."""
        hook = self.fault
        if hook is None:
            return None
        return lambda step: hook(partition, step)


#: The seams of a production run.
PRODUCTION = Seams()

__all__ = ["FaultHook", "PRODUCTION", "Seams"]
