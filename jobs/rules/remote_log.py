"""Kafka's remote log metadata cache, replayed: the events of ``__remote_log_metadata`` (decoded by
:mod:`segment_io.remote_metadata`) in offset order -> per user partition, every remote segment Kafka knows and
its state, as a broker that read the topic from the start would hold them.

The rules are those of Kafka's metadata cache (``RemoteLogMetadataCache``, ``RemotePartitionMetadataStore``):

- a segment enters with its COPY_SEGMENT_STARTED metadata; moves COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED
  or DELETE_SEGMENT_STARTED, COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED, DELETE_SEGMENT_STARTED ->
  DELETE_SEGMENT_FINISHED; a move to the state it is in is accepted again (retries);
- any other event is dropped, as Kafka drops it (logged, not applied): a move the table above does not allow, an
  update of a segment the cache does not hold (a broker reading the topic from the start drops these silently),
  a segment's metadata written with a state other than COPY_SEGMENT_STARTED or for a segment already past it,
  an update to COPY_SEGMENT_STARTED. Each dropped event is kept here (:class:`DroppedEvent`) with its reason;
- DELETE_SEGMENT_FINISHED takes the segment out of the cache (kept here in :attr:`PartitionReplay.deleted`:
  its objects should be gone);
- a partition delete marker is remembered; DELETE_PARTITION_FINISHED forgets the partition's whole cache (the
  segments it still held are kept in :attr:`PartitionReplay.forgotten`: nothing will ever delete their objects),
  and later events for that topic id start a new one.

Only COPY_SEGMENT_FINISHED segments are readable (:meth:`PartitionReplay.finished`). Snapshot messages (type 3)
belong to Kafka's snapshot files, not to the topic: they are counted and otherwise left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from segment_io.remote_metadata import (
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)

#: the moves Kafka's cache accepts between two different states (a move to the same state is also accepted)
_NEXT: dict[SegmentState | None, frozenset[SegmentState]] = {
    None: frozenset({SegmentState.COPY_SEGMENT_STARTED}),
    SegmentState.COPY_SEGMENT_STARTED: frozenset({SegmentState.COPY_SEGMENT_FINISHED,
                                                  SegmentState.DELETE_SEGMENT_STARTED}),
    SegmentState.COPY_SEGMENT_FINISHED: frozenset({SegmentState.DELETE_SEGMENT_STARTED}),
    SegmentState.DELETE_SEGMENT_STARTED: frozenset({SegmentState.DELETE_SEGMENT_FINISHED}),
    SegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


def is_valid_transition(current: SegmentState | None, target: SegmentState) -> bool:
    """Whether Kafka's cache moves a segment from ``current`` (None: not known yet) to ``target``."""
    return target in _NEXT[current] or (current is not None and current == target)


@dataclass(frozen=True)
class RemoteSegment:
    """One remote segment as the cache holds it: its metadata with the state and event fields of the last
    event applied, and the metadata offsets of the first and last event applied."""

    metadata: SegmentMetadata
    first_event: int
    last_event: int

    @property
    def segment_id(self) -> str:
        return self.metadata.segment_id

    @property
    def state(self) -> SegmentState:
        return self.metadata.state

    @property
    def start_offset(self) -> int:
        return self.metadata.start_offset

    @property
    def end_offset(self) -> int:
        return self.metadata.end_offset

    @property
    def size_bytes(self) -> int:
        return self.metadata.size_bytes


@dataclass(frozen=True)
class DroppedEvent:
    """A metadata event Kafka's cache does not apply: where it is (metadata offset), whose, and why."""

    offset: int
    partition: TopicIdPartition
    segment_id: str | None
    reason: str


@dataclass
class PartitionReplay:
    """The replayed cache of one user partition (one topic id and partition)."""

    partition: TopicIdPartition
    #: segment id -> segment, every state but DELETE_SEGMENT_FINISHED (what Kafka's cache holds)
    segments: dict[str, RemoteSegment] = field(default_factory=dict)
    #: segments that reached DELETE_SEGMENT_FINISHED (out of Kafka's cache)
    deleted: dict[str, RemoteSegment] = field(default_factory=dict)
    #: segments the cache held when a DELETE_PARTITION_FINISHED forgot it
    forgotten: dict[str, RemoteSegment] = field(default_factory=dict)
    #: the last partition delete marker still in force (None: none, or its delete finished)
    delete_marker: PartitionDelete | None = None
    #: whether a partition delete finished for this topic id
    delete_finished: bool = False
    dropped: list[DroppedEvent] = field(default_factory=list)

    def in_state(self, state: SegmentState) -> list[RemoteSegment]:
        """The cache's segments in ``state``, by start offset (then by first event)."""
        return sorted((s for s in self.segments.values() if s.state == state),
                      key=lambda s: (s.start_offset, s.first_event))

    def finished(self) -> list[RemoteSegment]:
        """The readable segments (COPY_SEGMENT_FINISHED), by start offset."""
        return self.in_state(SegmentState.COPY_SEGMENT_FINISHED)


@dataclass
class RemoteLogState:
    """Every user partition the metadata names, keyed by (topic id, partition)."""

    partitions: dict[tuple[str, int], PartitionReplay] = field(default_factory=dict)
    #: snapshot messages met in the topic (Kafka writes none there)
    snapshots: int = 0
    #: how many metadata records were replayed
    events: int = 0

    def partition(self, tp: TopicIdPartition) -> PartitionReplay:
        key = (tp.topic_id, tp.partition)
        state = self.partitions.get(key)
        if state is None:
            state = self.partitions[key] = PartitionReplay(tp)
        return state

    def dropped(self) -> list[DroppedEvent]:
        """Every dropped event, in metadata order."""
        return sorted((d for p in self.partitions.values() for d in p.dropped), key=lambda d: d.offset)


def _add(part: PartitionReplay, offset: int, meta: SegmentMetadata) -> None:
    existing = part.segments.get(meta.segment_id)
    current = existing.state if existing else None
    if meta.state != SegmentState.COPY_SEGMENT_STARTED:
        reason = f"a segment's metadata in state {meta.state.name}: Kafka adds segments only as COPY_SEGMENT_STARTED"
    elif not is_valid_transition(current, meta.state):
        reason = f"the segment is already {current.name if current else '?'}: it cannot start its copy again"
    else:
        first = existing.first_event if existing else offset
        part.segments[meta.segment_id] = RemoteSegment(meta, first, offset)
        return
    part.dropped.append(DroppedEvent(offset, meta.partition, meta.segment_id, reason))


def _update(part: PartitionReplay, offset: int, upd: SegmentUpdate) -> None:
    existing = part.segments.get(upd.segment_id)
    if existing is None:
        gone = upd.segment_id in part.deleted or upd.segment_id in part.forgotten
        reason = ("the segment was already deleted" if gone
                  else "no COPY_SEGMENT_STARTED for this segment before it")
    elif not is_valid_transition(existing.state, upd.state):
        reason = f"{existing.state.name} cannot move to {upd.state.name}"
    elif upd.state == SegmentState.COPY_SEGMENT_STARTED:
        reason = "an update cannot move a segment to COPY_SEGMENT_STARTED"
    else:
        meta = replace(existing.metadata, state=upd.state, event_timestamp_ms=upd.event_timestamp_ms,
                       broker_id=upd.broker_id, custom_metadata=upd.custom_metadata)
        seg = RemoteSegment(meta, existing.first_event, offset)
        if upd.state == SegmentState.DELETE_SEGMENT_FINISHED:
            del part.segments[upd.segment_id]
            part.deleted[upd.segment_id] = seg
        else:
            part.segments[upd.segment_id] = seg
        return
    part.dropped.append(DroppedEvent(offset, upd.partition, upd.segment_id, reason))


def _partition_delete(part: PartitionReplay, marker: PartitionDelete) -> None:
    part.delete_marker = marker
    if marker.state == PartitionDeleteState.DELETE_PARTITION_FINISHED:
        part.forgotten.update(part.segments)
        part.segments.clear()
        part.delete_marker = None
        part.delete_finished = True


def replay(events: Iterable[tuple[int, RemoteLogMetadata]]) -> RemoteLogState:
    """Kafka's cache after applying ``events`` ((metadata offset, message), in offset order) from an empty one."""
    state = RemoteLogState()
    for offset, message in events:
        state.events += 1
        if isinstance(message, SegmentSnapshot):
            state.snapshots += 1
        elif isinstance(message, SegmentMetadata):
            _add(state.partition(message.partition), offset, message)
        elif isinstance(message, SegmentUpdate):
            _update(state.partition(message.partition), offset, message)
        elif isinstance(message, PartitionDelete):
            _partition_delete(state.partition(message.partition), message)
    return state


def merge_states(states: Sequence[RemoteLogState]) -> RemoteLogState | None:
    """The state of replaying several metadata partitions' events one partition after the other, from the state
    of each replayed alone (in the order given); None when two of them name the same user partition.

    Every piece of the replay's state but its two counters belongs to one user partition (a partition delete
    marker too: it names its topic id and partition), and Kafka writes every event of a user partition, its
    delete markers included, to the one metadata partition its topic id and partition hash to. So the metadata
    partitions replay apart and their states are disjoint. Only metadata written under another partition count
    breaks that; the caller then replays the partitions as one sequence."""
    merged = RemoteLogState()
    for state in states:
        if not merged.partitions.keys().isdisjoint(state.partitions):
            return None
        # each state's partitions in its own order, the states in the order given: the order a replay of all the
        # events one partition after the other creates them in (RemoteLogState.dropped sorts stably over it)
        merged.partitions.update(state.partitions)
        merged.snapshots += state.snapshots
        merged.events += state.events
    return merged


__all__ = ["DroppedEvent", "PartitionReplay", "RemoteLogState", "RemoteSegment", "is_valid_transition",
           "merge_states", "replay"]
