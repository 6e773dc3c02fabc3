"""jobs.rules.remote_log: Kafka's remote log metadata cache replayed from ``__remote_log_metadata``.

The real broker's partition (tests/data/kafka-tiered/SOURCES.md) first, then one test per rule of Kafka's
cache, each on events built here (tests.support.remote_metadata writes them as Kafka does).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.rules.remote_log import is_valid_transition, merge_states, replay
from segment_io.remote_metadata import (
    PartitionDeleteState,
    SegmentState,
    decode_metadata_value,
    read_metadata_partition,
)
from tests.support import remote_metadata as rm

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "kafka-tiered" / "kafka-4.1.1"
T, TID = "t", "AAAAAAAAAAAAAAAAAAAAAQ"
S1, S2 = "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
STARTED, FINISHED, DELETE_STARTED, DELETE_FINISHED = 0, 1, 2, 3


def _replay(*values: bytes):
    return replay((i, decode_metadata_value(v)) for i, v in enumerate(values))


def _only(state):
    (part,) = state.partitions.values()
    return part


def test_a_real_brokers_metadata_replays_to_what_the_broker_did() -> None:
    state = replay(read_metadata_partition(str(FIXTURE / "logs" / "__remote_log_metadata-0")))
    parts = {(p.partition.topic, p.partition.partition): p for p in state.partitions.values()}
    assert sorted(parts) == [("dropped", 0), ("expiring", 0), ("kept", 0)]
    kept, expiring, dropped = parts["kept", 0], parts["expiring", 0], parts["dropped", 0]
    assert [(s.start_offset, s.end_offset) for s in kept.finished()] == [(i, i + 19) for i in range(0, 120, 20)]
    assert [s.metadata.leader_epochs for s in kept.finished()][2:4] == [((0, 40),), ((2, 60),)]
    assert [(s.start_offset, s.end_offset) for s in expiring.finished()] == [(i, i + 19) for i in range(20, 120, 20)]
    assert [(s.start_offset, s.state) for s in expiring.deleted.values()] == [(0, SegmentState.DELETE_SEGMENT_FINISHED)]
    # the dropped topic: all four segments deleted, the copy its first stop interrupted among them
    assert dropped.segments == {} and len(dropped.deleted) == 4
    assert sorted(s.start_offset for s in dropped.deleted.values()) == [0, 20, 40, 40]
    assert state.dropped() == [] and state.events == 41


@pytest.mark.parametrize("current, target, valid", [
    (None, SegmentState.COPY_SEGMENT_STARTED, True),
    (None, SegmentState.COPY_SEGMENT_FINISHED, False),
    (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED, True),
    (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED, True),
    (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED, False),
    (SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED, True),
    (SegmentState.COPY_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_STARTED, False),
    (SegmentState.COPY_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_FINISHED, True),
    (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED, True),
    (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED, False),
    (SegmentState.DELETE_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_STARTED, False),
])
def test_transitions_are_kafkas(current, target, valid) -> None:
    assert is_valid_transition(current, target) is valid


def test_a_copy_with_no_finish_stays_started_and_is_not_readable() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.segment_value(T, TID, 0, S2, 10, 19),
                         rm.update_value(T, TID, 0, S2, FINISHED)))
    assert [s.segment_id for s in part.in_state(SegmentState.COPY_SEGMENT_STARTED)] == [S1]
    assert [s.segment_id for s in part.finished()] == [S2]
    assert part.finished()[0].first_event == 1 and part.finished()[0].last_event == 2


def test_a_move_kafka_refuses_is_dropped_and_said_why() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9),
                         rm.update_value(T, TID, 0, S1, DELETE_FINISHED),  # skips DELETE_SEGMENT_STARTED
                         rm.update_value(T, TID, 0, S1, FINISHED)))
    assert [s.segment_id for s in part.finished()] == [S1]
    (drop,) = part.dropped
    assert (drop.offset, drop.segment_id) == (1, S1)
    assert drop.reason == "COPY_SEGMENT_STARTED cannot move to DELETE_SEGMENT_FINISHED"


def test_a_retried_event_in_the_same_state_is_applied_again() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
                         rm.update_value(T, TID, 0, S1, FINISHED, event_ts=9_999)))
    (seg,) = part.finished()
    assert seg.metadata.event_timestamp_ms == 9_999 and part.dropped == []


def test_an_update_of_a_segment_never_started_is_dropped() -> None:
    part = _only(_replay(rm.update_value(T, TID, 0, S1, FINISHED)))
    assert part.segments == {}
    assert [d.reason for d in part.dropped] == ["no COPY_SEGMENT_STARTED for this segment before it"]


def test_metadata_not_in_copy_started_or_for_a_finished_segment_is_dropped() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S2, 0, 9, state=FINISHED),
                         rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
                         rm.segment_value(T, TID, 0, S1, 0, 99)))
    assert [(s.segment_id, s.end_offset) for s in part.finished()] == [(S1, 9)]
    assert [(d.offset, d.reason) for d in part.dropped] == [
        (0, "a segment's metadata in state COPY_SEGMENT_FINISHED: Kafka adds segments only as COPY_SEGMENT_STARTED"),
        (3, "the segment is already COPY_SEGMENT_FINISHED: it cannot start its copy again")]


def test_an_update_back_to_copy_started_is_dropped() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, STARTED)))
    assert part.segments[S1].last_event == 0
    assert [d.reason for d in part.dropped] == ["an update cannot move a segment to COPY_SEGMENT_STARTED"]


def test_delete_finished_takes_the_segment_out_and_later_updates_of_it_are_dropped() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
                         rm.update_value(T, TID, 0, S1, DELETE_STARTED),
                         rm.update_value(T, TID, 0, S1, DELETE_FINISHED),
                         rm.update_value(T, TID, 0, S1, DELETE_FINISHED)))
    assert part.segments == {} and list(part.deleted) == [S1]
    assert [d.reason for d in part.dropped] == ["the segment was already deleted"]


def test_a_stalled_delete_stays_in_the_cache_not_readable() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
                         rm.update_value(T, TID, 0, S1, DELETE_STARTED)))
    assert part.finished() == [] and [s.segment_id for s in part.in_state(SegmentState.DELETE_SEGMENT_STARTED)] == [S1]


def test_a_finished_partition_delete_forgets_the_cache() -> None:
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
                         rm.delete_value(T, TID, 0, 0), rm.delete_value(T, TID, 0, 1)))
    assert part.delete_marker is not None and part.delete_marker.state == PartitionDeleteState.DELETE_PARTITION_STARTED
    assert [s.segment_id for s in part.finished()] == [S1]
    part = _only(_replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
                         rm.delete_value(T, TID, 0, 0), rm.delete_value(T, TID, 0, 2)))
    assert part.segments == {} and list(part.forgotten) == [S1]
    assert part.delete_marker is None and part.delete_finished


def test_partitions_are_told_apart_by_topic_id_not_name() -> None:
    other = "AAAAAAAAAAAAAAAAAAAABA"
    state = _replay(rm.segment_value(T, TID, 0, S1, 0, 9), rm.segment_value(T, other, 0, S2, 0, 9),
                    rm.segment_value(T, TID, 1, S2, 0, 9))
    assert sorted(state.partitions) == [(TID, 0), (TID, 1), (other, 0)]


# ---- several metadata partitions replayed apart (the audit's tasks) ----

T2 = "AAAAAAAAAAAAAAAAAAAABA"


def test_metadata_partitions_replayed_apart_and_merged_are_one_replay_of_them_all() -> None:
    # two metadata partitions, each the events of its own user partitions, a delete marker and a dropped event in
    # each; the merged state is the state of one replay of the partitions one after the other
    first = [rm.segment_value(T, TID, 0, S1, 0, 9), rm.update_value(T, TID, 0, S1, FINISHED),
             rm.update_value(T, TID, 0, S1, STARTED), rm.segment_value(T, TID, 1, S2, 0, 9)]
    second = [rm.segment_value("u", T2, 0, S1, 0, 9), rm.update_value("u", T2, 0, S2, FINISHED),
              rm.delete_value("u", T2, 0, PartitionDeleteState.DELETE_PARTITION_FINISHED),
              rm.segment_value(T, TID, 2, S2, 5, 9)]
    apart = [_replay(*first), replay((i, decode_metadata_value(v)) for i, v in enumerate(second))]
    merged = merge_states(apart)
    together = replay([(i, decode_metadata_value(v)) for i, v in enumerate(first)]
                      + [(i, decode_metadata_value(v)) for i, v in enumerate(second)])
    assert merged is not None
    assert merged.partitions == together.partitions and list(merged.partitions) == list(together.partitions)
    assert (merged.events, merged.snapshots, merged.dropped()) == (together.events, together.snapshots,
                                                                  together.dropped())
    assert [d.offset for d in merged.dropped()] == [1, 2]  # sorted over both, as one replay sorts them


def test_a_user_partition_in_two_metadata_partitions_cannot_be_merged() -> None:
    # its events would have to be replayed in sequence: the second partition's update needs the first's segment
    first = _replay(rm.segment_value(T, TID, 0, S1, 0, 9))
    second = _replay(rm.update_value(T, TID, 0, S1, FINISHED))
    assert merge_states([first, second]) is None
