"""Which partitions to compact, which offsets to clean, and how to group segments: pure functions.

This follows Kafka's LogCleanerManager (cleanableOffsets, calculateCleanableBytes, maxCompactionDelay,
grabFilthiestCompactedLog), LogToClean and LogCleaner.groupSegmentsBySize, with the offline
substitutes of kafka-behaviours.md: the log end offset stands in for the high watermark, and the first
offset of an undecided transaction bounds cleaning (the last stable offset).

A log is split into three sections:

* clean: segments below the first dirty offset (cleaned by an earlier run);
* cleanable (dirty): from the segment holding the first dirty offset up to the first uncleanable
  offset, which is always a segment base;
* uncleanable: the rest, the active segment always included.

Kafka counts the segment that holds the first dirty offset in both the clean and the cleanable bytes
when the checkpoint falls inside a segment; so do we, so that ratios match the broker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from jobs.rules.config import TopicConfig, never_touched
from jobs.rules.kafka_defaults import INT_MAX, default_of
from jobs.rules.model import PartitionState, SegmentInfo
from segment_io.index import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT
from segment_io.units import format_duration

#: Index entries store offsets relative to the segment base in 32 signed bits.
MAX_RELATIVE_OFFSET = INT_MAX

# Labels of what sets the first uncleanable offset, in the order a tie is reported.
BOUND_ACTIVE = "active segment"
BOUND_MIN_LAG = "min.compaction.lag.ms"
BOUND_OPEN_TXN = "open transaction"
BOUND_LOG_END = "log end offset"
BOUND_DIRTY = "first dirty offset"

#: The offset checkpoint files whose entries a compaction decision reads, for the partitions it reads
#: (:func:`compaction_reads`): where cleaning resumes, and the log start (retention first on compact,delete
#: topics, and the first offset the cleaner may clean).
COMPACTION_CHECKPOINTS = (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)


def compaction_reads(topic: str, config: TopicConfig) -> bool:
    """Whether a compaction run reads, and may change, the partitions of ``topic`` (configured ``config``): those
    whose policy includes compact and that segjobs may touch. A delete-only topic's partitions are listed and
    reported as skipped, nothing more: what retention does to them changes no compaction decision (so a plan
    file fingerprints only the partitions this says, see :mod:`jobs.engine.frame.planfile`)."""
    return config.compact and not never_touched(topic)


# --------------------------------------------------------------------------------------------------
# Segment ranges (Kafka's LogSegments.values / nonActiveLogSegmentsFrom)
# --------------------------------------------------------------------------------------------------


def segments_in_range(segments: Sequence[SegmentInfo], from_offset: int, to_offset: int) -> tuple[SegmentInfo, ...]:
    """Segments from the one containing ``from_offset`` (or the first, when ``from_offset`` precedes
    every segment) up to the last whose base is below ``to_offset``. Empty when the two are equal."""
    if from_offset == to_offset:
        return ()
    if to_offset < from_offset:
        raise ValueError(f"invalid segment range [{from_offset}, {to_offset})")
    floor = None
    for s in segments:
        if s.base_offset <= from_offset:
            floor = s.base_offset
        else:
            break
    lo = floor if floor is not None else -1
    return tuple(s for s in segments if lo <= s.base_offset < to_offset)


def non_active_segments_from(segments: Sequence[SegmentInfo], from_offset: int) -> tuple[SegmentInfo, ...]:
    """Segments from the one containing ``from_offset`` up to, not including, the active segment."""
    if not segments or from_offset > segments[-1].base_offset:
        return ()
    return segments_in_range(segments, from_offset, segments[-1].base_offset)


# --------------------------------------------------------------------------------------------------
# Cleanable range
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanableOffsets:
    """Kafka's OffsetsToClean, plus what set the upper bound.

    ``first_uncleanable_dirty_offset`` may fall inside a segment (an open transaction); cleaning stops
    at the base of that segment (see :func:`calculate_cleanable_bytes`).
    """

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    checkpoint_reset: bool
    bound_by: str


def cleanable_offsets(state: PartitionState, config: TopicConfig, now_ms: int) -> CleanableOffsets:
    """The dirty range [first dirty, first uncleanable) of a non-empty partition at ``now_ms``.

    The first dirty offset is the cleaner checkpoint (log start when absent), reset to the log start
    offset when below it or above the log end offset, which also asks for the checkpoint to be
    rewritten. The first uncleanable offset is the least of the last stable offset, the active
    segment's base and the base of the first dirty non-active segment whose largest timestamp is
    later than ``now_ms - min.compaction.lag.ms``; never below the first dirty offset.
    """
    if not state.segments:
        raise ValueError(f"{state.name}: no segments")
    start, leo = state.log_start_offset, state.log_end_offset
    checkpoint = state.cleaner_checkpoint if state.cleaner_checkpoint is not None else start
    reset = checkpoint < start or checkpoint > leo
    first_dirty = start if reset else checkpoint

    bounds: list[tuple[int, str]] = [(state.segments[-1].base_offset, BOUND_ACTIVE)]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for s in non_active_segments_from(state.segments, first_dirty):
            if s.effective_largest_timestamp > now_ms - lag:
                bounds.append((s.base_offset, BOUND_MIN_LAG))
                break
    lso = state.last_stable_offset
    bounds.append((lso, BOUND_OPEN_TXN if lso < leo else BOUND_LOG_END))
    # min() keeps the first of equal offsets, so ties report in the order appended above
    bound, label = min(bounds, key=lambda b: b[0])
    if first_dirty > bound:
        bound, label = first_dirty, BOUND_DIRTY
    return CleanableOffsets(first_dirty, bound, reset, label)


def calculate_cleanable_bytes(state: PartitionState, first_dirty_offset: int,
                              uncleanable_offset: int) -> tuple[int, int]:
    """(first uncleanable offset rounded down to a segment base, cleanable bytes), as Kafka computes
    them: the segment holding ``uncleanable_offset`` (the active one when it lies in or past it) is
    the first uncleanable segment; every segment from the one holding the first dirty offset up to it
    is cleanable."""
    following = non_active_segments_from(state.segments, uncleanable_offset)
    first_uncleanable = (following[0] if following else state.segments[-1]).base_offset
    cleanable = segments_in_range(state.segments, min(first_dirty_offset, first_uncleanable), first_uncleanable)
    return first_uncleanable, sum(s.size_bytes for s in cleanable)


def max_compaction_delay(state: PartitionState, config: TopicConfig, first_dirty_offset: int, now_ms: int) -> int:
    """How long ago, in ms, the dirty section should have been cleaned under ``max.compaction.lag.ms``:
    ``now - max lag`` minus the earliest positive first-batch timestamp among dirty non-active
    segments, or 0 when none is that old."""
    stamps = [s.first_batch_timestamp for s in non_active_segments_from(state.segments, first_dirty_offset)
              if s.first_batch_timestamp is not None and s.first_batch_timestamp > 0]
    if not stamps:
        return 0
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return clean_until - earliest if earliest < clean_until else 0


# --------------------------------------------------------------------------------------------------
# Grouping
# --------------------------------------------------------------------------------------------------


def estimated_index_bytes(segment: SegmentInfo, index_interval_bytes: int) -> tuple[int, int]:
    """(offset index bytes, time index bytes) of a segment: the file sizes when known, else an upper
    bound. Kafka adds an offset index entry before a batch only once more than
    ``index.interval.bytes`` were appended since the last entry (never before the first batch), so a
    segment holds at most ``size // (interval + 1)`` entries, and at most one per batch after the
    first; the time index has at most one entry more (written when the segment is rolled)."""
    if segment.offset_index_bytes is not None and segment.time_index_bytes is not None:
        return segment.offset_index_bytes, segment.time_index_bytes
    entries = segment.size_bytes // (index_interval_bytes + 1)
    if segment.batch_count is not None:
        entries = min(entries, max(segment.batch_count - 1, 0))
    time_entries = entries + 1 if segment.size_bytes > 0 else 0
    offset_bytes = segment.offset_index_bytes if segment.offset_index_bytes is not None \
        else entries * OFFSET_INDEX_ENTRY_SIZE
    time_bytes = segment.time_index_bytes if segment.time_index_bytes is not None \
        else time_entries * TIME_INDEX_ENTRY_SIZE
    return offset_bytes, time_bytes


def group_segments_by_size(segments: Sequence[SegmentInfo], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int,
                           index_interval_bytes: int = int(default_of("index.interval.bytes"))
                           ) -> list[tuple[SegmentInfo, ...]]:
    """Kafka's groupSegmentsBySize: consecutive groups, in order, each becoming one cleaned segment.

    A segment joins the current group while the group's log bytes, offset-index bytes and time-index
    bytes each stay within their limit (``max_size``; ``max_index_size`` for both indexes) and, unless
    the segment is empty, its last offset minus the group's base offset fits a 32-bit relative offset.
    That last offset is estimated as the next segment's base - 1 (``first_uncleanable_offset`` - 1
    for the last segment), since a segment may end in a gap. Index sizes come from
    :func:`estimated_index_bytes`.
    """
    index = [estimated_index_bytes(s, index_interval_bytes) for s in segments]
    groups: list[tuple[SegmentInfo, ...]] = []
    i, n = 0, len(segments)
    while i < n:
        start = i
        log_size = segments[i].size_bytes
        offset_index_size, time_index_size = index[i]
        i += 1
        while i < n:
            seg = segments[i]
            last_offset = (segments[i + 1].base_offset if i + 1 < n else first_uncleanable_offset) - 1
            if not (log_size + seg.size_bytes <= max_size
                    and offset_index_size + index[i][0] <= max_index_size
                    and time_index_size + index[i][1] <= max_index_size
                    # an empty segment never widens the range: two emptied segments may merge
                    and (seg.size_bytes == 0
                         or last_offset - segments[start].base_offset <= MAX_RELATIVE_OFFSET)):
                break
            log_size += seg.size_bytes
            offset_index_size += index[i][0]
            time_index_size += index[i][1]
            i += 1
        groups.append(tuple(segments[start:i]))
    return groups


# --------------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionPlan:
    """The compaction decision for one partition, with the numbers behind it.

    ``first_dirty_offset`` is where cleaning starts; ``first_uncleanable_offset`` (a segment base) is
    where it stops, and the cleaner checkpoint to write after a complete pass (cleaning passes offset
    gaps: the checkpoint becomes the next segment's base). ``first_uncleanable_dirty_offset`` is the
    unrounded bound and ``bound_by`` says what set it. ``checkpoint_reset`` asks for the cleaner
    checkpoint to be rewritten to ``first_dirty_offset`` whether or not the partition is selected.
    ``dirty_ratio`` is cleanable / (clean + cleanable) bytes, 0 for an empty log, None for a topic without the
    compact policy (Kafka's cleaner computes it only for compacted logs: it is how it picks them). ``groups`` are the
    segments below ``first_uncleanable_offset`` (clean ones included: a pass rewrites them too) grouped
    for rewriting, assuming the whole dirty range fits in one pass.
    """

    topic: str
    partition: int
    selected: bool
    reason: str
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    first_uncleanable_offset: int
    bound_by: str
    checkpoint_reset: bool
    previous_checkpoint: int | None
    clean_bytes: int
    cleanable_bytes: int
    uncleanable_bytes: int
    dirty_ratio: float | None
    min_cleanable_dirty_ratio: float
    max_compaction_delay_ms: int
    groups: tuple[tuple[SegmentInfo, ...], ...]
    #: the reason in a few words, for summary tables ("below min.cleanable.dirty.ratio 0.50")
    note: str = ""

    @property
    def total_bytes(self) -> int:
        """Clean plus cleanable bytes (what the dirty ratio divides by)."""
        return self.clean_bytes + self.cleanable_bytes


def plan_compaction(state: PartitionState, config: TopicConfig, now_ms: int, *,
                    requested: bool = False) -> CompactionPlan:
    """Decide whether and what to compact in one partition at ``now_ms``.

    Selected when the topic's policy includes compact, the partition has clean or cleanable bytes, and: the
    user named it (``requested``: ``--topic``/``--partition``, see :class:`jobs.rules.scope.Scope`); or the
    dirty section's earliest first-batch timestamp is older than ``now - max.compaction.lag.ms`` and there
    are cleanable bytes; or the dirty ratio exceeds ``min.cleanable.dirty.ratio``.
    """
    if not state.segments:
        return _empty_plan(state, config, "no segments")
    offsets = cleanable_offsets(state, config, now_ms)
    first_uncleanable, cleanable_bytes = calculate_cleanable_bytes(
        state, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
    clean_bytes = sum(s.size_bytes for s in segments_in_range(state.segments, -1, offsets.first_dirty_offset))
    uncleanable_bytes = sum(s.size_bytes for s in state.segments if s.base_offset >= first_uncleanable)
    total = clean_bytes + cleanable_bytes
    ratio = cleanable_bytes / total if total else 0.0
    delay = max_compaction_delay(state, config, offsets.first_dirty_offset, now_ms)
    groups = group_segments_by_size(segments_in_range(state.segments, 0, first_uncleanable), config.segment_bytes,
                                    config.segment_index_bytes, first_uncleanable, config.index_interval_bytes)

    min_ratio = config.min_cleanable_dirty_ratio
    numbers = f"dirty ratio {ratio:.4f} ({cleanable_bytes} cleanable of {total} bytes)"
    untouchable = never_touched(state.topic)
    if untouchable:  # a Kafka topic segjobs never rewrites, however it is configured or asked for
        selected, reason = False, untouchable
        note = reason
    elif not config.compact:
        selected, reason = False, f"cleanup.policy={config.policy_text}: not a compacted topic"
        note = f"no compact policy (cleanup.policy={config.policy_text})"
    elif total == 0:
        selected, reason = False, (f"nothing to clean: no bytes below the first uncleanable offset "
                                   f"{first_uncleanable} (bound by {offsets.bound_by})")
        note = f"nothing to clean: bound by {offsets.bound_by}"
    elif requested:
        selected = True
        reason = f"explicitly requested; {numbers}"
        note = "requested by --topic/--partition"
        if cleanable_bytes == 0:
            reason += "; no dirty bytes, so only the clean section is rewritten (e.g. to drop expired tombstones)"
    elif delay > 0 and cleanable_bytes > 0:
        selected = True
        reason = (f"max.compaction.lag.ms ({format_duration(config.max_compaction_lag_ms)}) exceeded by "
                  f"{format_duration(delay)}; {numbers}")
        note = "max.compaction.lag.ms exceeded"
    elif ratio > min_ratio:
        selected, reason = True, f"{numbers} > min.cleanable.dirty.ratio {min_ratio}"
        note = f"above min.cleanable.dirty.ratio {min_ratio:.2f}"
    else:
        selected, reason = False, (f"{numbers} <= min.cleanable.dirty.ratio {min_ratio}; "
                                   f"cleanable range ends at {first_uncleanable} (bound by {offsets.bound_by})")
        note = f"below min.cleanable.dirty.ratio {min_ratio:.2f}"

    return CompactionPlan(
        topic=state.topic, partition=state.partition, selected=selected, reason=reason,
        first_dirty_offset=offsets.first_dirty_offset,
        first_uncleanable_dirty_offset=offsets.first_uncleanable_dirty_offset,
        first_uncleanable_offset=first_uncleanable, bound_by=offsets.bound_by,
        # Kafka only looks at (and repairs the checkpoints of) compacted logs
        checkpoint_reset=offsets.checkpoint_reset and config.compact and not untouchable,
        previous_checkpoint=state.cleaner_checkpoint,
        clean_bytes=clean_bytes, cleanable_bytes=cleanable_bytes, uncleanable_bytes=uncleanable_bytes,
        dirty_ratio=ratio if config.compact else None, min_cleanable_dirty_ratio=min_ratio,
        max_compaction_delay_ms=delay,
        groups=tuple(groups), note=note,
    )


def _empty_plan(state: PartitionState, config: TopicConfig, reason: str) -> CompactionPlan:
    start = state.log_start_offset
    return CompactionPlan(state.topic, state.partition, False, reason, start, start, start, BOUND_LOG_END,
                          False, state.cleaner_checkpoint, 0, 0, 0, 0.0 if config.compact else None,
                          config.min_cleanable_dirty_ratio, 0, (),
                          note=reason)


# --------------------------------------------------------------------------------------------------
# Cleaner checkpoint maintenance
# --------------------------------------------------------------------------------------------------

TopicPartition = tuple[str, int]


def updated_cleaner_checkpoints(current: Mapping[TopicPartition, int], live: Collection[TopicPartition], *,
                                update: tuple[TopicPartition, int] | None = None,
                                remove: TopicPartition | None = None) -> dict[TopicPartition, int]:
    """The entries of a cleaner-offset-checkpoint file after an update, as Kafka's updateCheckpoints
    writes them: entries of partitions no longer in the log dir are dropped, ``remove`` is dropped,
    then ``update`` is set."""
    entries = {tp: off for tp, off in current.items() if tp in live and tp != remove}
    if update is not None:
        entries[update[0]] = update[1]
    return entries
