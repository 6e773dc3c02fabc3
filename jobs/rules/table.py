"""What a ``segjobs table`` run applies to a compacted topic's table, per partition, as pure functions.

The table holds, per partition, the latest record of every key up to an *applied offset* ``A``: every record
below ``A`` has been applied, none at or above it. A run applies ``[A, B)`` where ``B`` is the partition's last
stable offset (the first offset of its earliest undecided transaction, else its log end offset): as a
``read_committed`` consumer, the table never shows records past an open transaction, since that transaction may
still abort (kafka-behaviours item 20: the cleaner stops there too).

Why the log may change between runs without breaking the table:

* **compaction** only removes a record when a later record of its key exists in the cleaned range (and, for
  tombstones, markers and aborted data, when the record no longer matters to any reader). A removed record at
  ``>= A`` is therefore superseded by a record the run still applies; a removed record below ``A`` was applied
  already and its key's later record decides the row either way. Offsets are never renumbered, so ``A`` keeps
  its meaning. The one thing a reader can miss is a tombstone removed before it read it: Kafka gives every
  reader ``delete.retention.ms`` for that, counted from the first clean that saw the tombstone. Records at
  ``>= A`` were beyond the cleanable range when the table last ran (the cleaner also stops at the last stable
  offset, and ``A`` is at most that), so the table is exact as long as it runs at least once every
  ``delete.retention.ms``; :func:`plan_partition` warns when compaction has cleaned past ``A``.
* **retention** deletes whole segments below a new log start offset. When that passes ``A``, records the table
  never applied are gone: the run refuses the partition (:class:`GapError` names partition, applied offset and
  log start offset) unless asked to rebuild it, which reapplies the partition from its log start offset and
  deletes every row that is no longer in the log.

Public API::

    PartitionPlan, plan_partition(...) -> PartitionPlan
    GapError, AheadError
    aborted_rows(records, txn_state) -> np.ndarray | None   (segment_io.latest's, shared with the data source)
"""

from __future__ import annotations

from dataclasses import dataclass

from segment_io.errors import SegjobsError
from segment_io.latest import aborted_rows


class GapError(SegjobsError):
    """Retention deleted records of a partition the table had not applied yet."""

    def __init__(self, partition: str, applied: int, log_start: int) -> None:
        self.partition, self.applied, self.log_start = partition, applied, log_start
        super().__init__(
            f"{partition}: the table applied offsets below {applied}, but the log now starts at {log_start}: "
            f"retention deleted offsets {applied}..{log_start - 1} before the table read them, so keys updated or "
            f"deleted there may be wrong in the table; rerun with --rebuild to rebuild this partition from the "
            f"log (rows of keys no longer in the log are deleted)")


class AheadError(SegjobsError):
    """The table applied offsets a partition no longer has: the topic was recreated or truncated."""

    def __init__(self, partition: str, applied: int, log_end: int) -> None:
        self.partition, self.applied, self.log_end = partition, applied, log_end
        super().__init__(
            f"{partition}: the table applied offsets below {applied}, but the log ends at {log_end}: the topic was "
            f"recreated or truncated, or --log-dir names another cluster's copy; write the table to a new --table "
            f"URI (or delete it) to build it from this log")


@dataclass(frozen=True)
class PartitionPlan:
    """What a run does to one partition's rows.

    ``start``..``end`` is the offset range applied (empty when ``start == end``); ``rebuild`` means every row of
    the partition not written by this run is deleted; ``applied`` is what the table had (None: never applied).
    """

    topic: str
    partition: int
    applied: int | None
    start: int
    end: int
    rebuild: bool
    log_start: int
    log_end: int
    warning: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def has_work(self) -> bool:
        """Whether the run writes anything for this partition: rows, or the applied offset alone (a partition
        the table has never seen gets its applied offset even when empty, so the first run creates the table)."""
        return self.rebuild or self.end > self.start or self.applied is None


def plan_partition(topic: str, partition: int, *, applied: int | None, log_start: int, log_end: int,
                   last_stable: int, cleaner_checkpoint: int | None = None, rebuild: bool = False) -> PartitionPlan:
    """Decide the range a run applies to one partition.

    ``applied``: the table's applied offset for the partition (None when it has none); ``log_start``,
    ``log_end``, ``last_stable``: the partition's log start, log end and last stable offsets;
    ``cleaner_checkpoint``: its cleaner-offset-checkpoint entry (the end of what compaction has cleaned).
    Raises :class:`GapError` or :class:`AheadError` (see the module docstring).
    """
    name = f"{topic}-{partition}"
    if applied is not None and applied > log_end:
        raise AheadError(name, applied, log_end)
    if rebuild or applied is None:
        return PartitionPlan(topic, partition, applied, log_start, last_stable, rebuild and applied is not None,
                             log_start, log_end)
    if applied < log_start:
        raise GapError(name, applied, log_start)
    warning = None
    if cleaner_checkpoint is not None and cleaner_checkpoint > applied:
        warning = (f"{name}: compaction cleaned offsets {applied}..{cleaner_checkpoint - 1} before the table applied "
                   f"them; the table stays exact while it runs at least once every delete.retention.ms (a tombstone "
                   f"removed before the table read it would leave its key's old row); run the table before "
                   f"compaction to avoid this")
    return PartitionPlan(topic, partition, applied, applied, max(last_stable, applied), False, log_start, log_end,
                         warning)


__all__ = ["AheadError", "GapError", "PartitionPlan", "aborted_rows", "plan_partition"]
