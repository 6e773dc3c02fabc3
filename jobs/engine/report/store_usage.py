"""A run's object-store requests as the report and the run's last lines give them (see
:mod:`segment_io.storage.traffic` for how they are counted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from jobs.engine.report.run_report import human_bytes
from segment_io.storage.traffic import StoreTraffic


@dataclass(frozen=True)
class StoreUsage:
    """The requests of a run on an object store: the driver's (listings, the scans it runs on its threads, the
    commits, the lock) and its tasks', by the stage that ran them (the description of its Spark jobs), against
    the bytes of the segments in the run's scope. ``reads_of_segments``, the bytes GETs fetched over those, says
    how many times the run read its log on average: a run that reads each segment once and the indexes too is
    a little above 1 (only due partitions are read in full: a run with little due is well below 1)."""

    driver: StoreTraffic
    tasks: Mapping[str, StoreTraffic]
    segment_bytes: int
    total: StoreTraffic = field(init=False)

    def __post_init__(self) -> None:
        total = StoreTraffic()
        for part in (self.driver, *self.tasks.values()):
            total.merge(part)
        object.__setattr__(self, "total", total)

    @property
    def reads_of_segments(self) -> float | None:
        return round(self.total.get_bytes / self.segment_bytes, 3) if self.segment_bytes else None

    def to_dict(self) -> dict[str, Any]:
        """The report's ``store_traffic``: the totals, the segments' bytes and the ratio, then the parts."""
        return {**self.fields(), "driver": self.driver.to_dict(),
                "tasks": {stage: t.to_dict() for stage, t in self.tasks.items()}}

    def fields(self) -> dict[str, Any]:
        """The ``store.traffic`` event's fields: the totals, the segments' bytes and the ratio."""
        return {**self.total.to_dict(), "segment_bytes": self.segment_bytes,
                "reads_of_segments": self.reads_of_segments}

    def summary(self) -> str:
        t = self.total
        ratio = (f" ({self.reads_of_segments:.2f}x the {human_bytes(self.segment_bytes)} of segments in scope)"
                 if self.reads_of_segments is not None else "")
        others = ", ".join(f"{n:,} {name}" for n, name in ((t.list, "LIST(s)"), (t.head, "HEAD(s)"),
                                                            (t.copy, "COPY(s)"), (t.delete, "DELETE(s)"),
                                                            (t.other, "other(s)")) if n)
        return (f"object store: {t.requests:,} request(s): {t.get:,} GET(s) fetched {human_bytes(t.get_bytes)}{ratio}, "
                f"{t.put:,} PUT(s) sent {human_bytes(t.put_bytes)}" + (f", {others}" if others else ""))
