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

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Callable, Iterable, Mapping, Sequence

from jobs.rules.config import TopicConfig, never_touched
from jobs.rules.model import PartitionState, SegmentInfo
from jobs.rules.timeutil import format_instant
from segment_io.layout import LOG_START_OFFSET_CHECKPOINT
from segment_io.units import format_duration


class DeletionRule(StrEnum):
    """The rule that condemns a segment (Kafka's ``SegmentDeletionReason``); the value is the text the report, the
    ledger and the plan file carry."""

    LOG_START = "log-start-offset"
    SIZE = "retention.bytes"
    TIME = "retention.ms"


RULE_LOG_START = DeletionRule.LOG_START
RULE_SIZE = DeletionRule.SIZE
RULE_TIME = DeletionRule.TIME

#: The offset checkpoint files whose entries a retention decision reads, for the partitions it reads
#: (:func:`retention_reads`).
RETENTION_CHECKPOINTS = (LOG_START_OFFSET_CHECKPOINT,)


def retention_reads(topic: str, config: TopicConfig) -> bool:
    """Whether a retention run reads, and may change, the partitions of ``topic``: every one segjobs may touch,
    whatever its policy (the log start rule applies to compact topics too). ``config`` is not needed for that;
    it is taken for the same shape as :func:`jobs.rules.plan_compact.compaction_reads`."""
    return not never_touched(topic)


@dataclass(frozen=True)
class SegmentDeletion:
    """One segment condemned by a rule, with the reason in words."""

    segment: SegmentInfo
    rule: DeletionRule
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

    def run(rule: DeletionRule, predicate: _Predicate) -> None:
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
LIMITED_RULES: frozenset[DeletionRule] = frozenset({RULE_SIZE, RULE_TIME})


#: Where the reference settings come from when a run accepts its own as the baseline (``--accept-config-baseline``).
ACCEPTED_BASELINE = "this run's settings, accepted as the baseline (--accept-config-baseline)"


def setting_words(key: str, value: int | str) -> str:
    """A retention setting as a person reads it: a duration as ``3d`` (``retention.ms``), Kafka's ``-1`` as
    ``unlimited``, anything else as it is."""
    if isinstance(value, int) and value < 0:
        return "unlimited"
    if key.endswith(".ms") and isinstance(value, int):
        return format_duration(value)
    return str(value)


@dataclass(frozen=True)
class UsedSettings:
    """The retention settings a run applied to a topic: what the next runs judge their config against."""

    cleanup_policy: str  #: ``delete``, ``compact`` or ``compact,delete``
    retention_ms: int
    retention_bytes: int
    #: where they come from, in words: ``run <id> at <now>``, or ``Kafka's default`` when no run recorded any
    source: str

    @classmethod
    def of(cls, config: TopicConfig, source: str) -> "UsedSettings":
        return cls(config.policy_text, config.retention_ms, config.retention_bytes, source)

    def differs_from(self, config: TopicConfig) -> list[str]:
        """The settings of ``config`` that differ from these, as ``key value (was value)`` words
        (``retention.ms 3d (was 7d)``)."""
        pairs = (("cleanup.policy", config.policy_text, self.cleanup_policy),
                 ("retention.ms", config.retention_ms, self.retention_ms),
                 ("retention.bytes", config.retention_bytes, self.retention_bytes))
        return [f"{key} {setting_words(key, now)} (was {setting_words(key, was)})" for key, now, was in pairs
                if now != was]

    def applied_to(self, config: TopicConfig) -> TopicConfig:
        """``config`` with these retention settings instead of its own."""
        return replace(config, cleanup_policy=frozenset(self.cleanup_policy.split(",")),
                       retention_ms=self.retention_ms, retention_bytes=self.retention_bytes)


@dataclass(frozen=True)
class DeleteShare:
    """What retention's time and size rules would delete of one topic, and how much of that its inputs do not
    explain (see :func:`delete_guard`), against the topic's limit.

    ``bytes_judged`` is what those rules look at: the topic's bytes (over the partitions planned together)
    minus what the log-start rule removes first. ``bytes_unexplained`` is the part of ``bytes_deleted`` that the
    reference (the newest record's time, the settings used before) would keep. ``refused`` when more than
    ``max_fraction`` of ``bytes_judged`` is unexplained.
    """

    topic: str
    partitions: int
    bytes_deleted: int
    bytes_judged: int
    max_fraction: float
    bytes_unexplained: int = 0
    #: why ``--now`` is doubtful, in words (it is beyond the newest record), or None
    now_doubt: str | None = None
    #: why the settings are doubtful, in words (they changed since the reference), or None
    settings_doubt: str | None = None
    #: the part of ``bytes_unexplained`` that stays unexplained with this run's settings as the reference (what
    #: only the doubtful ``--now`` condemns; see ``--accept-config-baseline``)
    bytes_unexplained_if_accepted: int = 0

    @property
    def accepting_suffices(self) -> bool:
        """Whether accepting this run's settings as the baseline alone would let the topic through."""
        return self.settings_doubt is not None and (
            not self.bytes_judged or self.bytes_unexplained_if_accepted / self.bytes_judged <= self.max_fraction)

    @property
    def doubts(self) -> tuple[str, ...]:
        """Why the unexplained bytes look like a mistake, in words: the doubtful ``--now`` (unless accepting the
        settings alone would let the topic through: then it is not what refuses it), the changed settings."""
        now = None if self.accepting_suffices else self.now_doubt
        return tuple(d for d in (now, self.settings_doubt) if d)

    @property
    def fraction(self) -> float:
        """The share of the judged bytes deleted on the strength of a doubtful input."""
        return self.bytes_unexplained / self.bytes_judged if self.bytes_judged else 0.0

    @property
    def refused(self) -> bool:
        return self.fraction > self.max_fraction

    def message(self) -> str:
        """Why the topic is left alone, and the ways to allow it: accepting the config as the baseline when its
        settings are what is doubtful, lifting the limit when ``--now`` is."""
        why = "; ".join(self.doubts) or "the inputs differ from the reference"
        lift = "--max-delete-fraction 1 (or set segjobs.max.delete.fraction for the topic)"
        if self.settings_doubt and not self.accepting_suffices:
            fix = (f"If the config is right, run again with --accept-config-baseline (its settings become the "
                   f"reference later runs are judged against); if --now is right too, add {lift}")
        elif self.settings_doubt:
            fix = ("If the config is right, run again with --accept-config-baseline: its settings become the "
                   "reference later runs are judged against")
        else:
            fix = f"If --now is right, run again with {lift}"
        return (f"refused: would delete {_percent(self.fraction, self.max_fraction)} of {self.topic}'s bytes "
                f"({self.bytes_unexplained} of {self.bytes_judged} in {self.partitions} partition(s), by "
                f"retention.ms/retention.bytes) that only this run's inputs condemn: {why}; max "
                f"{self.max_fraction:.0%}. {fix}")


def _percent(fraction: float, limit: float) -> str:
    """``fraction`` as a percentage with as many decimals as it takes to read as more than ``limit``'s (a share
    just over 50% is not printed as ``50.0%`` beside ``max 50%``)."""
    for decimals in range(1, 5):
        text = f"{fraction:.{decimals}%}"
        if fraction <= limit or float(text.rstrip("%")) > limit * 100:
            return text
    return text


#: How far after ``--now`` a record may be stamped and still say how recent the log dir is: Kafka's default for
#: ``message.timestamp.after.max.ms`` (one hour, from Kafka 4.0; before it, brokers took any future timestamp).
#: A record stamped later says only that a producer's clock was wrong; taken as the log dir's newest, one such record
#: anywhere made any ``--now`` before it pass for every topic.
FUTURE_STAMP_TOLERANCE_MS = 3_600_000


def plausible_stamp(stamp: int | None, now_ms: int) -> int | None:
    """``stamp`` where it can say how recent the log dir is at ``now_ms`` (at most
    :data:`FUTURE_STAMP_TOLERANCE_MS` after it), else None."""
    return stamp if stamp is not None and stamp <= now_ms + FUTURE_STAMP_TOLERANCE_MS else None


def newest_timestamp(states: Iterable[PartitionState], now_ms: int) -> int | None:
    """The newest record timestamp of the partitions: the log dir's own idea of "now". Taken from the segments that
    were read, by their records' timestamps; a segment whose records carry none (magic 0, or -1) by its file's mtime,
    as Kafka dates it. Never the mtime of a segment that was not read: a copy, a backup or a restore gives every
    file the day it was made. A segment stamped in the future of ``now_ms`` (:func:`plausible_stamp`) dates nothing.
    None when no segment was read."""
    stamps = [stamp for state in states for s in state.segments
              if _dated(s) and (stamp := plausible_stamp(s.effective_largest_timestamp, now_ms)) is not None]
    return max(stamps) if stamps else None


def _dated(segment: SegmentInfo) -> bool:
    """Whether the scan read ``segment``'s largest timestamp (from its time index or its batch headers, which give
    its batch count), rather than dating it by its listing alone; an empty segment holds no record to date."""
    return bool(segment.size_bytes) and (segment.largest_timestamp is not None or segment.batch_count is not None)


def fully_dated(state: PartitionState) -> bool:
    """Whether every segment of ``state`` that holds bytes was read for its largest timestamp (a scan that dates
    a segment by its listing alone, as compaction's selection does the active one, leaves it unread)."""
    return all(_dated(s) for s in state.segments if s.size_bytes)


def delete_guard(states: Mapping[tuple[str, int], PartitionState],
                 plans: Mapping[tuple[str, int], RetentionPlan], *, now_ms: int,
                 config_for: Callable[[str], TopicConfig], max_fraction_for: Callable[[str], float],
                 used_for: Callable[[str], UsedSettings], newest_ms: int | None) -> dict[str, DeleteShare]:
    """The safety limit on retention (``segjobs.max.delete.fraction``), per topic: a pure function.

    It is aimed at two mistakes, a wrong ``--now`` and a wrong ``--config``, and not at routine retention. Each
    partition is planned again against a *reference*: ``now`` no later than ``newest_ms`` (the newest record of
    the log dir: a ``--now`` far beyond it is doubtful, a quiet topic's old records are not), and the retention
    settings ``used_for(topic)`` (those the previous runs applied, else Kafka's defaults for the topic: a setting
    that changed is doubtful, one used before is not). A segment that the time and size rules delete under
    this run's inputs but not under the reference is *unexplained*; a topic is refused when its unexplained bytes
    exceed ``max_fraction_for(topic)`` of its judged bytes (see :class:`DeleteShare`). Only partitions with both
    a state and a plan count (an unreadable partition is neither judged nor touched).
    """
    totals: dict[str, list[int]] = {}
    doubts: dict[str, tuple[str | None, str | None]] = {}
    for key, plan in plans.items():
        state = states.get(key)
        if state is None:
            continue
        topic = key[0]
        config = config_for(topic)
        used = used_for(topic)
        ref_now = now_ms if newest_ms is None else min(now_ms, newest_ms)
        limited = [d for d in plan.deletions if d.rule in LIMITED_RULES]
        unexplained = _kept_by(state, plan, used.applied_to(config), ref_now)
        # what would stay unexplained with this run's settings as the reference (--accept-config-baseline)
        if_accepted = _kept_by(state, plan, config, ref_now) if unexplained and used.differs_from(config) \
            else unexplained
        by_log_start = sum(d.size_bytes for d in plan.deletions if d.rule not in LIMITED_RULES)
        t = totals.setdefault(topic, [0, 0, 0, 0, 0])
        t[0] += 1
        t[1] += sum(d.size_bytes for d in limited)
        t[2] += state.size_bytes - by_log_start
        t[3] += unexplained
        t[4] += if_accepted
        if unexplained and topic not in doubts:
            doubts[topic] = _doubts(config, used, now_ms, newest_ms)
    return {topic: DeleteShare(topic, n, deleted, judged, max_fraction_for(topic), unexplained,
                               *doubts.get(topic, (None, None)), bytes_unexplained_if_accepted=if_accepted)
            for topic, (n, deleted, judged, unexplained, if_accepted) in sorted(totals.items())}


def _kept_by(state: PartitionState, plan: RetentionPlan, reference: TopicConfig, reference_now: int) -> int:
    """The bytes of ``plan``'s deletions by the limited rules that retention under ``reference`` at
    ``reference_now`` keeps: what the reference does not explain."""
    kept = set(plan.deleted_bases) - set(plan_retention(state, reference, reference_now).deleted_bases)
    return sum(d.size_bytes for d in plan.deletions if d.rule in LIMITED_RULES and d.segment.base_offset in kept)


def _doubts(config: TopicConfig, used: UsedSettings, now_ms: int,
            newest_ms: int | None) -> tuple[str | None, str | None]:
    """Why ``--now`` and why the settings are doubtful, in words (None where they are not)."""
    now = None
    if newest_ms is not None and now_ms > newest_ms:
        now = (f"--now is {format_duration(now_ms - newest_ms)} after the newest record in the log dir "
               f"({format_instant(newest_ms)})")
    changed = used.differs_from(config)
    return now, (f"{', '.join(changed)} against {used.source}" if changed else None)
