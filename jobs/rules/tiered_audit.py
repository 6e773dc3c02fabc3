"""The audit of one tiered partition: what the replayed remote log metadata (:mod:`jobs.rules.remote_log`), the
log dir and the remote store's listing say together. Pure: a function of them, the topic's retention and
``now``.

Findings, per partition:

- **gap** (data loss): an offset range from the log start offset to the log end offset in no finished remote
  segment and no local segment (each local segment holding its base offset up to its last);
- **missing object**: a finished segment whose object the layout requires is absent, or whose segment object's
  size is not the metadata's, or that the layout found wrong on reading it (a manifest that does not hold
  together, an object not of the size the manifest gives);
- **orphan**: an object no finished segment stands behind: a copy that never finished (COPY_SEGMENT_STARTED), a
  delete that stalled (DELETE_SEGMENT_STARTED), a segment deleted (DELETE_SEGMENT_FINISHED) or forgotten by a
  finished partition delete, or a segment id the metadata never named; and a finished segment outside the
  partition's leader-epoch lineage (the log dir's ``leader-epoch-checkpoint``), which Kafka never serves: its
  epochs judged as Kafka's remote log manager judges them (:func:`lineage_problem`), and it covers no offset;
  and a finished segment of a topic id the log dir has replaced (its topic's name now has another id there: the
  topic was deleted and created again, and the delete never reached the remote store);
- **overdue**: a finished segment remote retention should already have deleted, judged as Kafka's expiration
  task judges, oldest first and stopping at the first segment not due (:func:`overdue`): its end offset below
  the log start offset; its max timestamp at or before ``now`` minus ``retention.ms`` (and the ``grace_ms`` the
  task needs to come round); the partition's size (finished remote segments plus the local segments above the
  last remote offset) less the segment's size still at or above ``retention.bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from jobs.rules.remote_log import PartitionReplay, RemoteSegment
from segment_io.remote_metadata import SegmentState

#: orphan reasons, in the words of the reports
DANGLING_COPY = "copy never finished (COPY_SEGMENT_STARTED)"
STALLED_DELETE = "delete never finished (DELETE_SEGMENT_STARTED)"
DELETED = "segment deleted (DELETE_SEGMENT_FINISHED)"
PARTITION_DELETED = "partition deleted (DELETE_PARTITION_FINISHED)"
UNKNOWN = "no metadata names this segment"
OUTSIDE_LINEAGE = "finished, outside the leader-epoch lineage"
TOPIC_REPLACED = "finished, of a deleted topic"


@dataclass(frozen=True)
class LocalLog:
    """What the log dir says of one user partition (None where it does not say)."""

    log_start_offset: int | None  #: the log-start-offset checkpoint's (Kafka's log start, remote included)
    local_start: int | None  #: the first local segment's base offset
    log_end: int | None  #: the next offset to be written
    #: (base offset, bytes) of each local segment, in offset order
    segments: tuple[tuple[int, int], ...] = ()
    #: the partition's leader-epoch lineage, (epoch, start offset) in epoch order (its leader-epoch-checkpoint)
    epochs: tuple[tuple[int, int], ...] = ()
    #: one past the last offset of each local segment, in the order of ``segments`` (empty: unknown, and the
    #: local log is taken as contiguous from ``local_start`` to ``log_end``)
    next_offsets: tuple[int, ...] = ()

    def ranges(self) -> list[tuple[int, int]]:
        """The offset ranges (first, last inclusive) the local segments hold."""
        if self.next_offsets:
            return [(base, end - 1) for (base, _), end in zip(self.segments, self.next_offsets) if end > base]
        if self.local_start is not None and self.log_end is not None and self.log_end > self.local_start:
            return [(self.local_start, self.log_end - 1)]
        return []

    @property
    def local_bytes(self) -> int:
        return sum(size for _, size in self.segments)


@dataclass(frozen=True)
class Retention:
    """A topic's remote retention: ``retention.ms`` and ``retention.bytes`` (-1: none)."""

    ms: int = -1
    bytes: int = -1


@dataclass(frozen=True)
class ObjectInfo:
    """One remote object as the audit needs it."""

    uri: str
    size: int
    suffix: str


@dataclass(frozen=True)
class Gap:
    first: int
    last: int  #: inclusive


@dataclass(frozen=True)
class MissingObject:
    segment_id: str
    start_offset: int
    end_offset: int
    suffix: str
    problem: str  #: "absent" or what is wrong with its size
    uri: str | None = None


@dataclass(frozen=True)
class Orphan:
    segment_id: str
    reason: str
    objects: tuple[ObjectInfo, ...]
    start_offset: int | None = None
    end_offset: int | None = None

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


@dataclass(frozen=True)
class Overdue:
    segment_id: str
    start_offset: int
    end_offset: int
    size_bytes: int
    reason: str


@dataclass(frozen=True)
class StateTotals:
    segments: int = 0
    bytes: int = 0


@dataclass
class PartitionAudit:
    """Every finding of one partition, and the totals of its remote segments by state."""

    topic: str
    partition: int
    topic_id: str
    in_log_dir: bool
    log_start_offset: int | None
    log_end: int | None
    local: LocalLog | None
    finished: StateTotals = StateTotals()
    dangling: StateTotals = StateTotals()
    deleting: StateTotals = StateTotals()
    #: segments whose delete finished (DELETE_SEGMENT_FINISHED), or that a finished partition delete forgot
    deleted: StateTotals = StateTotals()
    gaps: list[Gap] = field(default_factory=list)
    missing: list[MissingObject] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    overdue: list[Overdue] = field(default_factory=list)
    dropped_events: int = 0

    @property
    def data_loss(self) -> bool:
        """Records Kafka should serve cannot be read: a gap, or a finished segment with an object missing."""
        return bool(self.gaps or self.missing)


def _totals(segments: Sequence[RemoteSegment]) -> StateTotals:
    return StateTotals(len(segments), sum(s.size_bytes for s in segments))


def coverage_gaps(log_start: int, log_end: int, ranges: Sequence[tuple[int, int]]) -> list[Gap]:
    """The offset ranges in [``log_start``, ``log_end``) that no range (first, last inclusive) covers."""
    gaps, next_needed = [], log_start
    for first, last in sorted(ranges):
        if last < next_needed:
            continue
        if first > next_needed:
            gaps.append(Gap(next_needed, min(first, log_end) - 1))
        next_needed = max(next_needed, last + 1)
        if next_needed >= log_end:
            break
    if next_needed < log_end:
        gaps.append(Gap(next_needed, log_end - 1))
    return [g for g in gaps if g.first <= g.last]


def _coverage(local: LocalLog, finished: Sequence[RemoteSegment]) -> tuple[int | None, list[Gap]]:
    ranges = [(s.start_offset, s.end_offset) for s in finished] + local.ranges()
    starts = [first for first, _ in ranges] + ([local.local_start] if local.local_start is not None else [])
    log_start = local.log_start_offset if local.log_start_offset is not None else (min(starts) if starts else None)
    if log_start is None or local.log_end is None:
        return log_start, []
    return log_start, coverage_gaps(log_start, local.log_end, ranges)


def without_empty_epochs(epochs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``epochs`` less those that hold no record: an epoch whose start offset is the next epoch's."""
    ordered = sorted(epochs)
    return [e for e, n in zip(ordered, [*ordered[1:], None]) if n is None or n[1] != e[1]]


def lineage_problem(epochs: Sequence[tuple[int, int]], end_offset: int, log_end: int,
                    lineage: Sequence[tuple[int, int]]) -> str | None:
    """Why a remote segment (its ``epochs`` and ``end_offset``) lies outside the partition's leader-epoch
    ``lineage`` ending at ``log_end``; None when it lies within. Kafka's rule, epochs without records left out of
    both: the segment's last epoch is within the lineage's; from its first epoch at or after the lineage's first,
    each epoch is in the lineage, the first starts no earlier than the lineage says (unless it is the lineage's
    first), each but the last is followed by the same epoch at the same offset in both, the last ends before
    the lineage's next epoch starts; and the segment ends before the log end."""
    seg, line = without_empty_epochs(epochs), dict(without_empty_epochs(lineage))
    if not seg or not line:
        return None if seg else "the segment has no leader epoch"
    line_epochs, seg_map = sorted(line), dict(seg)
    last = seg[-1][0]
    if not line_epochs[0] <= last <= line_epochs[-1]:
        return f"its last epoch {last} is outside the lineage's epochs {line_epochs[0]}-{line_epochs[-1]}"
    first = next((e for e, _ in seg if e >= line_epochs[0]), None)
    if first is None:
        return f"none of its epochs is at or after the lineage's first, {line_epochs[0]}"
    for epoch, offset in seg:
        if epoch < first:
            continue
        if epoch not in line:
            return f"its epoch {epoch} is not in the lineage"
        if epoch == first and epoch != line_epochs[0] and offset < line[epoch]:
            return f"its epoch {epoch} starts at {offset}, before the lineage's {line[epoch]}"
        later = [e for e in line_epochs if e > epoch]
        if epoch == last:
            if later and end_offset > line[later[0]] - 1:
                return f"it ends at {end_offset}, after epoch {epoch} ends at {line[later[0]] - 1}"
        else:
            seg_next = min(e for e in seg_map if e > epoch)
            if not later or (later[0], line[later[0]]) != (seg_next, seg_map[seg_next]):
                return f"after its epoch {epoch} comes epoch {seg_next} at {seg_map[seg_next]}, not the lineage's"
    if end_offset >= log_end:
        return f"it ends at {end_offset}, at or past the log end {log_end}"
    return None


def outside_lineage(finished: Sequence[RemoteSegment], *, log_start: int | None, log_end: int | None,
                    epochs: Sequence[tuple[int, int]]) -> dict[str, str]:
    """Segment id -> why, for the finished segments outside the leader-epoch lineage ``epochs`` ((epoch, start
    offset), the leader-epoch-checkpoint's) ending at ``log_end``. As the audit: nothing is judged without a
    lineage or a log end, nor a segment ending below the log start (due for deletion, which Kafka judges first)."""
    if not epochs or log_end is None:
        return {}
    out = {}
    for seg in finished:
        if log_start is not None and seg.end_offset < log_start:
            continue
        why = lineage_problem(seg.metadata.leader_epochs, seg.end_offset, log_end, epochs)
        if why is not None:
            out[seg.segment_id] = f"{OUTSIDE_LINEAGE}: {why}"
    return out


def _outside_lineage(finished: Sequence[RemoteSegment], local: LocalLog,
                     objects: Mapping[str, Sequence[ObjectInfo]]) -> list[Orphan]:
    by_id = {seg.segment_id: seg for seg in finished}
    return [Orphan(seg_id, why, tuple(sorted(objects.get(seg_id, ()), key=lambda o: o.uri)),
                   by_id[seg_id].start_offset, by_id[seg_id].end_offset)
            for seg_id, why in outside_lineage(finished, log_start=local.log_start_offset, log_end=local.log_end,
                                               epochs=local.epochs).items()]


def missing_objects(finished: Sequence[RemoteSegment], objects: Mapping[str, Sequence[ObjectInfo]],
                    required: Mapping[bool, Sequence[str]], size_suffix: str | None,
                    problems: Mapping[str, Sequence[tuple[str, str]]] | None = None) -> list[MissingObject]:
    """The objects of finished segments that are absent, or (the ``size_suffix`` object) not of the metadata's
    size, or wrong as the layout found on reading them (``problems``: segment id -> (suffix, problem) pairs).
    ``objects``: segment id -> its objects; ``required``: txn_index_empty -> the suffixes a segment needs."""
    out = []
    for seg in finished:
        have = {o.suffix: o for o in objects.get(seg.segment_id, ())}
        for suffix in required[seg.metadata.txn_index_empty]:
            obj = have.get(suffix)
            if obj is None:
                out.append(MissingObject(seg.segment_id, seg.start_offset, seg.end_offset, suffix, "absent"))
            elif suffix == size_suffix and obj.size != seg.size_bytes:
                out.append(MissingObject(seg.segment_id, seg.start_offset, seg.end_offset, suffix,
                                         f"{obj.size} bytes, the metadata says {seg.size_bytes}", obj.uri))
        for suffix, problem in (problems or {}).get(seg.segment_id, ()):
            obj = have.get(suffix)
            out.append(MissingObject(seg.segment_id, seg.start_offset, seg.end_offset, suffix, problem,
                                     obj.uri if obj else None))
    return out


def orphans(part: PartitionReplay | None, objects: Mapping[str, Sequence[ObjectInfo]]) -> list[Orphan]:
    """Objects with no finished segment behind them, per segment id, with the reason."""
    out = []
    for segment_id, objs in sorted(objects.items()):
        seg, reason = _owner(part, segment_id)
        if reason is None:
            continue
        out.append(Orphan(segment_id, reason, tuple(sorted(objs, key=lambda o: o.uri)),
                          seg.start_offset if seg else None, seg.end_offset if seg else None))
    return out


def _owner(part: PartitionReplay | None, segment_id: str) -> tuple[RemoteSegment | None, str | None]:
    if part is None:
        return None, UNKNOWN
    seg = part.segments.get(segment_id)
    if seg is not None:
        return seg, {SegmentState.COPY_SEGMENT_FINISHED: None, SegmentState.COPY_SEGMENT_STARTED: DANGLING_COPY,
                     SegmentState.DELETE_SEGMENT_STARTED: STALLED_DELETE}.get(seg.state, DELETED)
    if segment_id in part.deleted:
        return part.deleted[segment_id], DELETED
    if segment_id in part.forgotten:
        return part.forgotten[segment_id], PARTITION_DELETED
    return None, UNKNOWN


def overdue(finished: Sequence[RemoteSegment], local: LocalLog | None, retention: Retention, *, now_ms: int,
            log_start: int | None, grace_ms: int = 0) -> list[Overdue]:
    """Finished segments the expiration task should have deleted by ``now_ms``. Its walk: oldest first, each
    segment is due when it ends below the log start offset, else when its newest record is at or before ``now_ms``
    minus ``retention.ms`` (and ``grace_ms``), else when deleting it still leaves the partition at or above
    ``retention.bytes`` (finished remote segments plus the local segments above the last remote offset); the walk
    stops at the first segment that is not due, as Kafka's does."""
    ordered = sorted(finished, key=lambda s: (s.start_offset, s.first_event))
    remote_end = max((s.end_offset for s in ordered), default=-1)
    local_only = sum(size for base, size in (local.segments if local else ()) if base > remote_end)
    breach = sum(s.size_bytes for s in ordered) + local_only - retention.bytes
    limit = now_ms - retention.ms - grace_ms
    out = []
    for seg in ordered:
        if log_start is not None and seg.end_offset < log_start:
            reason = f"ends below the log start offset {log_start}"
        elif retention.ms >= 0 and seg.metadata.max_timestamp_ms <= limit:
            breach = max(0, breach - seg.size_bytes)  # what time deletes, the size need not
            reason = f"newest record older than retention.ms={retention.ms}"
        elif retention.bytes >= 0 and breach > 0 and breach - seg.size_bytes >= 0:
            breach -= seg.size_bytes
            reason = f"beyond retention.bytes={retention.bytes}"
        else:
            break
        out.append(Overdue(seg.segment_id, seg.start_offset, seg.end_offset, seg.size_bytes, reason))
    return out


def audit_partition(part: PartitionReplay | None, *, topic: str, partition: int, topic_id: str,
                    local: LocalLog | None, objects: Mapping[str, Sequence[ObjectInfo]],
                    required: Mapping[bool, Sequence[str]], size_suffix: str | None, retention: Retention,
                    now_ms: int, grace_ms: int = 0, replaced_by: str | None = None,
                    problems: Mapping[str, Sequence[tuple[str, str]]] | None = None) -> PartitionAudit:
    """Every finding of one partition. ``part`` is its replayed metadata (None: the metadata never names it),
    ``local`` what the log dir says (None: the partition is not in the log dir, so coverage and retention are
    not judged), ``objects`` its remote objects per segment id; ``replaced_by`` the topic id the log dir has for
    this partition's topic name when it is another (this topic id was deleted); ``problems`` what the layout
    found wrong on reading finished segments' objects (see :func:`missing_objects`)."""
    finished = part.finished() if part else []
    if replaced_by is not None:
        outside = [Orphan(seg.segment_id, f"{TOPIC_REPLACED} (the log dir's {topic} is topic id {replaced_by})",
                          tuple(sorted(objects.get(seg.segment_id, ()), key=lambda o: o.uri)), seg.start_offset,
                          seg.end_offset) for seg in finished]
    else:
        outside = _outside_lineage(finished, local, objects) if local is not None else []
    if outside:
        dropped = {o.segment_id for o in outside}
        finished = [s for s in finished if s.segment_id not in dropped]
    audit = PartitionAudit(topic, partition, topic_id, local is not None, None, local.log_end if local else None,
                           local)
    if part is not None:
        audit.finished = _totals(part.finished())
        audit.dangling = _totals(part.in_state(SegmentState.COPY_SEGMENT_STARTED))
        audit.deleting = _totals(part.in_state(SegmentState.DELETE_SEGMENT_STARTED))
        audit.deleted = _totals([*part.deleted.values(), *part.forgotten.values()])
        audit.dropped_events = len(part.dropped)
    if local is not None:
        audit.log_start_offset, audit.gaps = _coverage(local, finished)
        audit.overdue = overdue(finished, local, retention, now_ms=now_ms, log_start=audit.log_start_offset,
                                grace_ms=grace_ms)
    audit.missing = missing_objects(finished, objects, required, size_suffix, problems)
    audit.orphans = sorted([*orphans(part, objects), *outside], key=lambda o: o.segment_id)
    return audit


__all__ = ["DANGLING_COPY", "DELETED", "OUTSIDE_LINEAGE", "PARTITION_DELETED", "STALLED_DELETE", "TOPIC_REPLACED",
           "UNKNOWN", "Gap",
           "LocalLog", "MissingObject", "ObjectInfo", "Orphan", "Overdue", "PartitionAudit", "Retention",
           "StateTotals", "audit_partition", "coverage_gaps", "lineage_problem", "missing_objects", "orphans",
           "outside_lineage", "overdue", "without_empty_epochs"]
