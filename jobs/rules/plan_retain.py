"""Which segments retention deletes: pure functions, following Kafka's UnifiedLog.deleteOldSegments.

Kafka runs up to three rules, in this order, each over what the previous one left:

1. log start offset (every policy): a segment goes when the *next* segment's base is at or below the
   log start offset, i.e. the whole segment lies below it;
2. ``retention.bytes`` (policy includes delete, limit >= 0, log at least that big): with
   ``excess = size - retention.bytes``, a segment goes while ``excess - segment size >= 0``;
3. ``retention.ms`` (policy includes delete, limit >= 0): a segment goes when
   ``now - largest timestamp > retention.ms`` (largest timestamp falls back to the file's mtime).

Each rule walks segments oldest first and stops at the first segment it keeps, so only a prefix is
deleted. After each rule the log start offset rises to the base of the first remaining segment.

Kafka deletes the last (active) segment too when a rule condemns it, by rolling a new empty segment at
the log end offset first. Offline there is no roll: the last segment is never deleted, the plan says
what Kafka would have done. An empty last segment is never deleted, by Kafka either. With the log end
offset standing in for the high watermark, Kafka's high-watermark bound never holds a segment back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from jobs.rules.config import TopicConfig
from jobs.rules.model import PartitionState, SegmentInfo

RULE_LOG_START = "log-start-offset"
RULE_SIZE = "retention.bytes"
RULE_TIME = "retention.ms"


@dataclass(frozen=True)
class SegmentDeletion:
    """One segment condemned by a rule, with the reason in words."""

    segment: SegmentInfo
    rule: str
    detail: str

    @property
    def size_bytes(self) -> int:
        return self.segment.size_bytes


@dataclass(frozen=True)
class RetentionPlan:
    """Retention decisions for one partition.

    ``deletions`` are in offset order (a prefix of the segments). ``new_log_start_offset`` is
    max(old log start, base of the first surviving segment): what to write to
    log-start-offset-checkpoint (and where to truncate the leader-epoch checkpoint from).
    ``kafka_would_roll`` is set when a rule condemned the last, non-empty segment: Kafka would roll an
    empty segment at the log end offset and delete it; offline it stays. ``warnings`` explain anything
    that blocks retention (future timestamps) or that differs from Kafka.
    """

    topic: str
    partition: int
    deletions: tuple[SegmentDeletion, ...]
    old_log_start_offset: int
    new_log_start_offset: int
    kafka_would_roll: bool
    warnings: tuple[str, ...]

    @property
    def bytes_deleted(self) -> int:
        return sum(d.size_bytes for d in self.deletions)

    @property
    def deleted_bases(self) -> tuple[int, ...]:
        return tuple(d.segment.base_offset for d in self.deletions)


#: A rule's predicate: (segment, next segment or None) -> why it goes, or None to keep it.
_Predicate = Callable[[SegmentInfo, "SegmentInfo | None"], "str | None"]


def plan_retention(state: PartitionState, config: TopicConfig, now_ms: int) -> RetentionPlan:
    """Decide which segments of ``state`` retention deletes at ``now_ms`` under ``config``."""
    remaining: list[SegmentInfo] = list(state.segments)
    log_start = state.log_start_offset
    deletions: list[SegmentDeletion] = []
    warnings: list[str] = []
    would_roll = False

    def run(rule: str, predicate: _Predicate) -> None:
        nonlocal remaining, log_start, would_roll
        condemned: list[SegmentDeletion] = []
        for i, seg in enumerate(remaining):
            nxt = remaining[i + 1] if i + 1 < len(remaining) else None
            if nxt is None and seg.is_empty:
                break  # Kafka never deletes an empty last segment
            why = predicate(seg, nxt)
            if why is None:
                break
            if nxt is None:
                would_roll = True
                warnings.append(
                    f"{rule}: the last segment {seg.base_offset} ({seg.size_bytes} bytes) is past retention "
                    f"({why}); Kafka would roll an empty segment at the log end offset "
                    f"{state.log_end_offset} and delete it, but offline the last segment is kept")
                break
            condemned.append(SegmentDeletion(seg, rule, why))
        if condemned:
            deletions.extend(condemned)
            remaining = remaining[len(condemned):]
            log_start = max(log_start, remaining[0].base_offset)

    def below_log_start(seg: SegmentInfo, nxt: SegmentInfo | None) -> str | None:
        if nxt is not None and nxt.base_offset <= log_start:
            return f"next segment base {nxt.base_offset} <= log start offset {log_start}"
        return None

    run(RULE_LOG_START, below_log_start)

    if config.delete:
        if config.retention_bytes >= 0:
            size = sum(s.size_bytes for s in remaining)
            if size >= config.retention_bytes:
                excess = size - config.retention_bytes

                def over_size(seg: SegmentInfo, nxt: SegmentInfo | None) -> str | None:
                    nonlocal excess
                    if excess - seg.size_bytes < 0:
                        return None
                    why = (f"log is {excess} bytes over retention.bytes {config.retention_bytes}, "
                           f"segment holds {seg.size_bytes}")
                    excess -= seg.size_bytes
                    return why

                run(RULE_SIZE, over_size)

        if config.retention_ms >= 0:
            def expired(seg: SegmentInfo, nxt: SegmentInfo | None) -> str | None:
                age = now_ms - seg.effective_largest_timestamp
                if age > config.retention_ms:
                    return f"largest timestamp {_stamp(seg)} is {age} ms old > retention.ms {config.retention_ms}"
                return None

            run(RULE_TIME, expired)
            warnings.extend(_future_timestamp_warnings(remaining, config, now_ms))

    return RetentionPlan(state.topic, state.partition, tuple(deletions), state.log_start_offset,
                         max(log_start, state.log_start_offset), would_roll, tuple(warnings))


def _stamp(seg: SegmentInfo) -> str:
    if seg.largest_timestamp is not None and seg.largest_timestamp >= 0:
        return str(seg.largest_timestamp)
    return f"{seg.mtime_ms} (file mtime: no record timestamps)"


def _future_timestamp_warnings(remaining: Sequence[SegmentInfo], config: TopicConfig, now_ms: int) -> list[str]:
    """A warning when time retention stopped at a segment stamped in the future: it never expires
    while ``now`` is before its timestamp, and holds back every later segment."""
    if not remaining:
        return []
    first = remaining[0]
    ts = first.effective_largest_timestamp
    if ts <= now_ms or (len(remaining) == 1 and first.is_empty):
        return []
    blocked = [s for s in remaining[1:-1] if now_ms - s.effective_largest_timestamp > config.retention_ms]
    tail = (f"; it holds back {len(blocked)} later segment(s), {sum(s.size_bytes for s in blocked)} bytes, "
            f"that are past retention" if blocked else "")
    return [f"retention.ms: segment {first.base_offset} has largest timestamp {ts}, {ts - now_ms} ms after "
            f"now ({now_ms}); time retention cannot pass it{tail}"]


# --------------------------------------------------------------------------------------------------
# The safety limit: how much of a topic a run may delete
# --------------------------------------------------------------------------------------------------

#: The rules ``segjobs.max.delete.fraction`` counts: the ones a wrong ``--config`` or ``--now`` can set off.
#: The log-start rule is not counted: it carries out what an operator already did explicitly (DeleteRecords,
#: recorded in log-start-offset-checkpoint), not a judgement of this run's settings.
LIMITED_RULES: frozenset[str] = frozenset({RULE_SIZE, RULE_TIME})


@dataclass(frozen=True)
class DeleteShare:
    """What retention's time and size rules would delete of one topic, against the topic's limit.

    ``bytes_judged`` is what those rules look at: the topic's bytes (over the partitions planned together)
    minus what the log-start rule removes first. ``refused`` when more than ``max_fraction`` of it would go.
    """

    topic: str
    partitions: int
    bytes_deleted: int
    bytes_judged: int
    max_fraction: float

    @property
    def fraction(self) -> float:
        return self.bytes_deleted / self.bytes_judged if self.bytes_judged else 0.0

    @property
    def refused(self) -> bool:
        return self.fraction > self.max_fraction

    def message(self) -> str:
        """Why the topic is left alone, and the two ways to allow it."""
        return (f"refused: would delete {self.fraction:.1%} of {self.topic}'s bytes ({self.bytes_deleted} of "
                f"{self.bytes_judged} in {self.partitions} partition(s), by retention.ms/retention.bytes; max "
                f"{self.max_fraction:.0%}); raise --max-delete-fraction or set segjobs.max.delete.fraction for "
                f"the topic")


def delete_shares(states: Mapping[tuple[str, int], PartitionState],
                  plans: Mapping[tuple[str, int], RetentionPlan],
                  max_fraction_for: Callable[[str], float]) -> dict[str, DeleteShare]:
    """Per topic, the share of its bytes that ``plans`` delete by time and size (see :class:`DeleteShare`).

    Only partitions with both a state and a plan count (an unreadable partition is neither judged nor
    touched). ``max_fraction_for(topic)`` is the topic's limit.
    """
    totals: dict[str, list[int]] = {}
    for key, plan in plans.items():
        state = states.get(key)
        if state is None:
            continue
        by_log_start = sum(d.size_bytes for d in plan.deletions if d.rule not in LIMITED_RULES)
        limited = sum(d.size_bytes for d in plan.deletions if d.rule in LIMITED_RULES)
        t = totals.setdefault(key[0], [0, 0, 0])
        t[0] += 1
        t[1] += limited
        t[2] += state.size_bytes - by_log_start
    return {topic: DeleteShare(topic, n, deleted, judged, max_fraction_for(topic))
            for topic, (n, deleted, judged) in sorted(totals.items())}
