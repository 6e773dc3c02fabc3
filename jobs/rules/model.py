"""What the planners know about a partition: plain frozen values, filled by the jobs from listings,
checkpoint files and batch headers. No storage, no Spark, no clock.

Timestamps are epoch milliseconds. Offsets follow Kafka: a segment covers [base_offset, next_offset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class SegmentInfo:
    """One live segment (its ``.log`` file and what its batch headers and index files say).

    ``first_batch_timestamp`` is the *max* timestamp of the first batch, which is what Kafka calls
    the segment's first batch timestamp (``LogSegment.getFirstBatchTimestamp``); None when the
    segment is empty or that timestamp is negative. ``largest_timestamp`` is the largest record
    timestamp; None when unknown or when no record carries one (v0 messages). ``offset_index_bytes``
    and ``time_index_bytes`` are the sizes of the ``.index`` and ``.timeindex`` files when known
    (None: estimate them, see :func:`jobs.rules.plan_compact.estimated_index_bytes`).
    """

    base_offset: int
    size_bytes: int
    next_offset: int
    first_batch_timestamp: int | None
    largest_timestamp: int | None
    mtime_ms: int
    batch_count: int | None = None
    offset_index_bytes: int | None = None
    time_index_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.base_offset < 0 or self.size_bytes < 0 or self.next_offset < self.base_offset:
            raise ValueError(f"inconsistent segment {self}")

    @property
    def is_empty(self) -> bool:
        """No bytes at all (Kafka's ``segment.size == 0``)."""
        return self.size_bytes == 0

    @property
    def effective_largest_timestamp(self) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: the largest record timestamp when there is one
        (>= 0), else the file's last-modified time. Retention and the minimum compaction lag use it."""
        if self.largest_timestamp is not None and self.largest_timestamp >= 0:
            return self.largest_timestamp
        return self.mtime_ms


@dataclass(frozen=True)
class PartitionState:
    """One partition as the planners see it.

    ``segments`` are sorted by base offset; the last one is the active segment. ``log_start_offset``
    is what Kafka would load: the log-start-offset checkpoint raised to the first segment's base
    (use :meth:`build`). ``cleaner_checkpoint`` is the partition's entry in cleaner-offset-checkpoint,
    None when absent. ``first_unstable_offset`` is the first offset of the earliest transaction
    without a marker yet, None when every transaction is decided.

    Offline there is no high watermark: the log end offset stands in for it (kafka-behaviours [A]).
    """

    topic: str
    partition: int
    segments: tuple[SegmentInfo, ...]
    log_start_offset: int
    cleaner_checkpoint: int | None = None
    first_unstable_offset: int | None = None

    def __post_init__(self) -> None:
        bases = [s.base_offset for s in self.segments]
        if any(a >= b for a, b in zip(bases, bases[1:])):
            raise ValueError(f"{self.topic}-{self.partition}: segments must be sorted by distinct base offsets")

    @classmethod
    def build(cls, topic: str, partition: int, segments: Iterable[SegmentInfo], *,
              log_start_checkpoint: int | None = None, cleaner_checkpoint: int | None = None,
              first_unstable_offset: int | None = None) -> "PartitionState":
        """Sort ``segments`` and derive the log start offset as Kafka's LogLoader does:
        max(checkpointed log start, first segment base), the checkpoint counting as 0 when absent."""
        ordered = tuple(sorted(segments, key=lambda s: s.base_offset))
        checkpoint = log_start_checkpoint if log_start_checkpoint is not None else 0
        start = max(checkpoint, ordered[0].base_offset) if ordered else checkpoint
        return cls(topic, partition, ordered, start, cleaner_checkpoint, first_unstable_offset)

    @property
    def name(self) -> str:
        """``topic-partition``, as Kafka names the partition."""
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> SegmentInfo | None:
        """The last segment: the one a broker appends to, never cleaned, never deleted offline."""
        return self.segments[-1] if self.segments else None

    @property
    def log_end_offset(self) -> int:
        """The next offset to be written: the active segment's next offset."""
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO with the log end offset as high watermark: the first unstable offset when
        below it, else the log end offset."""
        leo = self.log_end_offset
        if self.first_unstable_offset is not None and self.first_unstable_offset < leo:
            return self.first_unstable_offset
        return leo

    @property
    def size_bytes(self) -> int:
        """Total bytes of all segments (Kafka's ``UnifiedLog.size``)."""
        return sum(s.size_bytes for s in self.segments)


