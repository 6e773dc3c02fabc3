"""What a table run computes per partition, before either writer applies it: the partition's plan and latest
rows (:class:`PartitionChanges`) and, counted against the table's keys, the rows they insert, update and delete
(:class:`Counts`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs.engine.scan import PartitionError
from jobs.rules.table import PartitionPlan


@dataclass
class PartitionChanges:
    """What one partition's task found: its plan and its latest rows (tombstones included), or its error."""

    topic: str
    partition: int
    plan: PartitionPlan | None = None
    rows: pa.Table | None = None
    records_read: int = 0
    segments_read: int = 0
    bytes_read: int = 0
    error: PartitionError | None = None
    warnings: list[str] = field(default_factory=list)
    #: when planned only: the segments to read, ``(uri, allow a truncated tail)``, and the aborted transactions
    segments: list[tuple[str, bool]] = field(default_factory=list)
    aborted: Any = None  # segment_io.transactions.AbortedTxns
    #: the range may need more memory than latest_buffer_bytes: planned only, deduped on disk by the driver
    #: (:mod:`jobs.engine.table.sort`); ``records_bound``: the range's records (by batch headers) or an estimate
    sort_on_disk: bool = False
    records_bound: int = 0
    #: deduped on disk, on an object store, by a task on the driver's host: the spool root under which the task
    #: left its scan's copies of ``segments`` (:attr:`segment_io.storage.spool.HostSpool.local_root`; those it could
    #: keep), for the driver's passes to take over; None when it kept none
    copies_root: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Counts:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    tombstones_without_row: int = 0
