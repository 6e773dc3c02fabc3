"""Which orphans of the tiered audit (:mod:`jobs.rules.tiered_audit`) ``segjobs tiered clean-orphans`` deletes.
Pure: a function of the audit's findings, the remote objects' listing stamps, the replayed metadata's newest event
and the limits.

An orphan segment's objects are deleted only when all of these hold, each rule keeping it otherwise (with the
reason in the report):

- **never a finished segment**: no object of a segment the metadata holds as COPY_SEGMENT_FINISHED is deleted,
  whatever the audit calls it (one outside the leader-epoch lineage, one of a topic deleted and created again:
  Kafka's own expiration task deletes those, with their metadata);
- **older than the metadata by** ``min_age_ms``: the orphan's newest object was last modified at least
  ``min_age_ms`` before the newest event of the metadata read, and, for a copy that never finished
  (COPY_SEGMENT_STARTED), so was its event. What is newer, the metadata read cannot judge: an object written
  after it (by a copy the metadata does not reach yet), a copy started just before it (it may be finishing on
  another broker, its COPY_SEGMENT_FINISHED beyond what was read). Segments the metadata says are deleted or
  being deleted are judged by their objects alone: no broker writes them again;
- **the mass-delete guard**: per topic id, the bytes of orphans that no metadata event names (the audit's
  ``no metadata names this segment``: condemned only by an absence, which is also what a missing
  ``__remote_log_metadata`` partition or a store of another cluster looks like) may be at most ``max_fraction``
  (the topic's) of the topic id's listed remote bytes; above it the topic id's orphans are all kept and it is
  refused.
  Orphans the metadata names (a copy that never finished, a delete that stalled, a segment or partition deleted)
  are explained by their events and do not count, as deletes below the log start offset do not count in
  retention's guard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from jobs.rules.remote_log import RemoteLogState
from jobs.rules.tiered_audit import DANGLING_COPY, UNKNOWN, PartitionAudit
from segment_io.units import format_duration

KEEP_FINISHED = "its segment is COPY_SEGMENT_FINISHED in the metadata: never deleted here"


@dataclass(frozen=True)
class Stamp:
    """An object as the listing saw it: what a delete checks again before it deletes."""

    uri: str
    size: int
    mtime_ms: int
    etag: str | None = None


@dataclass(frozen=True)
class OrphanDelete:
    """One orphan segment whose objects are deleted."""

    topic: str
    partition: int
    topic_id: str
    segment_id: str
    reason: str
    objects: tuple[Stamp, ...]
    start_offset: int | None = None
    end_offset: int | None = None

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


@dataclass(frozen=True)
class OrphanKept:
    """One orphan segment left alone, and why."""

    topic: str
    partition: int
    segment_id: str
    reason: str  #: the audit's reason it is an orphan
    kept_because: str
    bytes: int


@dataclass(frozen=True)
class TopicRefusal:
    """A topic whose orphans the mass-delete guard keeps."""

    topic: str
    topic_id: str
    unknown_bytes: int
    listed_bytes: int
    max_fraction: float

    def message(self) -> str:
        share = self.unknown_bytes / self.listed_bytes if self.listed_bytes else 1.0
        return (f"refused: {share:.1%} of the remote bytes of {self.topic} [{self.topic_id}] ({self.unknown_bytes} of "
                f"{self.listed_bytes}) "
                f"are objects no metadata names, more than max {self.max_fraction:.0%}: is every "
                f"__remote_log_metadata partition in the metadata dir, and is --remote this cluster's store? If "
                f"they are, run again with --max-delete-fraction 1")


@dataclass
class CleanPlan:
    """What a clean deletes and keeps, and the topics the guard refuses."""

    metadata_newest_ms: int | None
    deletes: list[OrphanDelete] = field(default_factory=list)
    kept: list[OrphanKept] = field(default_factory=list)
    refused: list[TopicRefusal] = field(default_factory=list)

    @property
    def delete_bytes(self) -> int:
        return sum(d.bytes for d in self.deletes)

    @property
    def delete_objects(self) -> int:
        return sum(len(d.objects) for d in self.deletes)


def metadata_newest_ms(state: RemoteLogState) -> int | None:
    """The newest event time of the replayed metadata (its segments' last events, and partition delete markers)."""
    times = [seg.metadata.event_timestamp_ms for part in state.partitions.values()
             for group in (part.segments, part.deleted, part.forgotten) for seg in group.values()]
    times += [p.delete_marker.event_timestamp_ms for p in state.partitions.values() if p.delete_marker is not None]
    return max(times, default=None)


def _copy_started_ms(state: RemoteLogState, key: tuple[str, int], segment_id: str) -> int | None:
    part = state.partitions.get(key)
    seg = part.segments.get(segment_id) if part is not None else None
    return seg.metadata.event_timestamp_ms if seg is not None else None


def _finished_ids(state: RemoteLogState, key: tuple[str, int]) -> set[str]:
    part = state.partitions.get(key)
    return {s.segment_id for s in part.finished()} if part is not None else set()


def plan_clean(audits: Sequence[PartitionAudit], state: RemoteLogState, stamps: Mapping[str, Stamp], *,
               listed_bytes: Mapping[str, int], min_age_ms: int,
               max_fraction_for: Callable[[str], float]) -> CleanPlan:
    """The clean of the audit's orphans (see the module docstring). ``stamps``: every listed remote object by URI;
    ``listed_bytes``: per topic id, the bytes of all its listed remote objects; ``max_fraction_for(topic)``: the
    guard's limit."""
    newest = metadata_newest_ms(state)
    plan = CleanPlan(newest)
    candidates: list[OrphanDelete] = []
    for audit in audits:
        key = (audit.topic_id, audit.partition)
        finished = _finished_ids(state, key)
        for orphan in audit.orphans:
            objects = tuple(stamps[o.uri] for o in orphan.objects)
            kept = OrphanKept(audit.topic, audit.partition, orphan.segment_id, orphan.reason, "", orphan.bytes)
            if orphan.segment_id in finished:
                plan.kept.append(_because(kept, KEEP_FINISHED))
                continue
            written = max(o.mtime_ms for o in objects)
            started = _copy_started_ms(state, key, orphan.segment_id) if orphan.reason == DANGLING_COPY else None
            if newest is None or written > newest - min_age_ms:
                plan.kept.append(_because(kept, _too_young("its newest object was written", written, newest,
                                                           min_age_ms)))
                continue
            if started is not None and started > newest - min_age_ms:
                plan.kept.append(_because(kept, _too_young("its copy started", started, newest, min_age_ms)))
                continue
            candidates.append(OrphanDelete(audit.topic, audit.partition, audit.topic_id, orphan.segment_id,
                                           orphan.reason, objects, orphan.start_offset, orphan.end_offset))
    refused = _guard(candidates, listed_bytes, max_fraction_for)
    plan.refused = sorted(refused.values(), key=lambda r: (r.topic, r.topic_id))
    for d in candidates:
        if d.topic_id in refused:
            plan.kept.append(OrphanKept(d.topic, d.partition, d.segment_id, d.reason,
                                        f"the mass-delete guard refused {d.topic} [{d.topic_id}]", d.bytes))
        else:
            plan.deletes.append(d)
    return plan


def _because(kept: OrphanKept, why: str) -> OrphanKept:
    return OrphanKept(kept.topic, kept.partition, kept.segment_id, kept.reason, why, kept.bytes)


def _too_young(what: str, at_ms: int, newest: int | None, min_age_ms: int) -> str:
    if newest is None:
        return "the metadata has no event to judge it by"
    when = (f"{format_duration(newest - at_ms)} before" if at_ms <= newest
            else f"{format_duration(at_ms - newest)} after")
    return (f"{what} {when} the metadata's newest event, less than --min-age {format_duration(min_age_ms)} before "
            f"it: the metadata read may not have seen what became of it")


def _guard(candidates: Iterable[OrphanDelete], listed_bytes: Mapping[str, int],
           max_fraction_for: Callable[[str], float]) -> dict[str, TopicRefusal]:
    unknown: dict[tuple[str, str], int] = {}
    for d in candidates:
        if d.reason == UNKNOWN:
            unknown[(d.topic_id, d.topic)] = unknown.get((d.topic_id, d.topic), 0) + d.bytes
    out = {}
    for (topic_id, topic), n in unknown.items():
        total, limit = listed_bytes.get(topic_id, 0), max_fraction_for(topic)
        if not total or n / total > limit:
            out[topic_id] = TopicRefusal(topic, topic_id, n, total, limit)
    return out


__all__ = ["KEEP_FINISHED", "CleanPlan", "OrphanDelete", "OrphanKept", "Stamp", "TopicRefusal", "metadata_newest_ms",
           "plan_clean"]
