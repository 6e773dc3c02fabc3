"""Small constructors of planner inputs, so plan tests read like Kafka's own log set-ups."""

from __future__ import annotations

from typing import Sequence

from jobs.rules.model import PartitionState, SegmentInfo

#: An arbitrary fixed "now" for plan tests: 2024-01-01T00:00:00Z.
NOW = 1_704_067_200_000
HOUR = 3_600_000
DAY = 24 * HOUR


def seg(base: int, size: int = 100, *, count: int | None = None, next_offset: int | None = None,
        ts: int | None = NOW - DAY, first_ts: int | None = None, mtime: int = NOW - DAY,
        batches: int | None = None, index_bytes: int | None = None,
        time_index_bytes: int | None = None) -> SegmentInfo:
    """A segment at ``base``: ``count`` offsets (default: 10, 0 when ``size`` is 0) unless ``next_offset``
    is given; ``ts`` is its largest timestamp and, unless ``first_ts`` says otherwise, its first batch's."""
    if next_offset is None:
        next_offset = base + (count if count is not None else (10 if size else 0))
    return SegmentInfo(base_offset=base, size_bytes=size, next_offset=next_offset,
                       first_batch_timestamp=first_ts if first_ts is not None else (ts if size else None),
                       largest_timestamp=ts if size else None, mtime_ms=mtime, batch_count=batches,
                       offset_index_bytes=index_bytes, time_index_bytes=time_index_bytes)


def uniform_log(n: int, *, size: int = 100, per_segment: int = 10, ts: int = NOW - DAY, **kw) -> list[SegmentInfo]:
    """``n`` contiguous segments of ``per_segment`` offsets and ``size`` bytes each, all stamped ``ts``."""
    return [seg(i * per_segment, size, count=per_segment, ts=ts, **kw) for i in range(n)]


def state(segments: Sequence[SegmentInfo], *, topic: str = "t", partition: int = 0,
          log_start: int | None = None, checkpoint: int | None = None,
          unstable: int | None = None) -> PartitionState:
    """A partition over ``segments`` (log start: the checkpoint value, raised to the first base)."""
    return PartitionState.build(topic, partition, segments, log_start_checkpoint=log_start,
                                cleaner_checkpoint=checkpoint, first_unstable_offset=unstable)
