"""jobs.rules.tiered_audit: each finding of the tiered audit, on metadata events built here (Kafka's encoding,
tests.support.remote_metadata) and a local log described by hand."""

from __future__ import annotations

import pytest

from jobs.rules.remote_log import replay
from jobs.rules.tiered_audit import (
    DANGLING_COPY,
    DELETED,
    OUTSIDE_LINEAGE,
    PARTITION_DELETED,
    STALLED_DELETE,
    TOPIC_REPLACED,
    UNKNOWN,
    Gap,
    LocalLog,
    ObjectInfo,
    Retention,
    audit_partition,
    coverage_gaps,
    lineage_problem,
)
from segment_io.remote_metadata import decode_metadata_value
from tests.support import remote_metadata as rm

T, TID = "t", "AAAAAAAAAAAAAAAAAAAAAQ"
IDS = [f"AAAAAAAAAAAAAAAAAAAA{c}A" for c in "BCDEFGHIJ"]
STARTED, FINISHED, DELETE_STARTED, DELETE_FINISHED = 0, 1, 2, 3
REQUIRED = {True: (".log", ".index"), False: (".log", ".index", ".txnindex")}
DAY = 86_400_000
NOW = 100 * DAY


def _part(*values: bytes):
    state = replay((i, decode_metadata_value(v)) for i, v in enumerate(values))
    return state.partitions.get((TID, 0))


def _finished(i: int, start: int, end: int, *, size: int = 100, max_ts: int = NOW - DAY) -> list[bytes]:
    return [rm.segment_value(T, TID, 0, IDS[i], start, end, size=size, max_ts=max_ts, tagged={0: b"\x01"}),
            rm.update_value(T, TID, 0, IDS[i], FINISHED)]


def _objects(*ids_sizes: tuple[str, int]) -> dict[str, list[ObjectInfo]]:
    return {sid: [ObjectInfo(f"/r/{sid}.log", size, ".log"), ObjectInfo(f"/r/{sid}.index", 0, ".index")]
            for sid, size in ids_sizes}


NO_RETENTION = Retention()


def _audit(part, local, objects, retention=NO_RETENTION, grace_ms=0):
    return audit_partition(part, topic=T, partition=0, topic_id=TID, local=local, objects=objects,
                           required=REQUIRED, size_suffix=".log", retention=retention, now_ms=NOW, grace_ms=grace_ms)


def _local(start: int | None, end: int, log_start: int | None = 0, segments=((0, 0),)) -> LocalLog:
    return LocalLog(log_start, start, end, tuple(segments) if start is not None else ())


def test_coverage_gaps_are_the_offsets_nothing_holds() -> None:
    assert coverage_gaps(0, 30, [(0, 9), (20, 29)]) == [Gap(10, 19)]
    assert coverage_gaps(0, 30, [(0, 9), (5, 29)]) == []
    assert coverage_gaps(5, 30, [(0, 9), (12, 20)]) == [Gap(10, 11), Gap(21, 29)]
    assert coverage_gaps(0, 0, []) == []
    assert coverage_gaps(3, 10, []) == [Gap(3, 9)]


def test_remote_then_local_with_nothing_missing_is_clean() -> None:
    part = _part(*_finished(0, 0, 9), *_finished(1, 10, 19))
    audit = _audit(part, _local(20, 25, segments=((20, 50),)), _objects((IDS[0], 100), (IDS[1], 100)))
    assert (audit.gaps, audit.missing, audit.orphans, audit.overdue) == ([], [], [], [])
    assert audit.finished.segments == 2 and audit.finished.bytes == 200 and not audit.data_loss


def test_a_gap_between_remote_and_local_is_data_loss() -> None:
    part = _part(*_finished(0, 0, 9))
    audit = _audit(part, _local(15, 25, segments=((15, 50),)), _objects((IDS[0], 100)))
    assert audit.gaps == [Gap(10, 14)] and audit.data_loss


def test_a_copy_that_never_finished_does_not_cover_its_offsets() -> None:
    part = _part(*_finished(0, 0, 9), rm.segment_value(T, TID, 0, IDS[1], 10, 19))
    audit = _audit(part, _local(20, 25, segments=((20, 50),)), _objects((IDS[0], 100), (IDS[1], 100)))
    assert audit.gaps == [Gap(10, 19)]
    assert [(o.segment_id, o.reason, o.bytes) for o in audit.orphans] == [(IDS[1], DANGLING_COPY, 100)]
    assert audit.dangling.segments == 1


def test_the_log_start_offset_bounds_coverage() -> None:
    part = _part(*_finished(1, 10, 19))
    audit = _audit(part, _local(20, 25, log_start=10, segments=((20, 50),)), _objects((IDS[1], 100)))
    assert audit.gaps == [] and audit.log_start_offset == 10
    audit = _audit(part, _local(20, 25, log_start=0, segments=((20, 50),)), _objects((IDS[1], 100)))
    assert audit.gaps == [Gap(0, 9)]


def test_a_finished_segment_with_an_object_absent_or_of_the_wrong_size_is_missing() -> None:
    part = _part(*_finished(0, 0, 9), *_finished(1, 10, 19))
    objects = _objects((IDS[0], 99))
    audit = _audit(part, _local(20, 20), objects)
    assert [(m.segment_id, m.suffix, m.problem) for m in audit.missing] == [
        (IDS[0], ".log", "99 bytes, the metadata says 100"), (IDS[1], ".log", "absent"), (IDS[1], ".index", "absent")]
    assert audit.data_loss


def test_a_transaction_index_is_required_where_the_metadata_says_there_is_one() -> None:
    part = _part(rm.segment_value(T, TID, 0, IDS[0], 0, 9, size=100), rm.update_value(T, TID, 0, IDS[0], FINISHED))
    audit = _audit(part, _local(10, 10), _objects((IDS[0], 100)))
    assert [(m.suffix, m.problem) for m in audit.missing] == [(".txnindex", "absent")]


def test_orphans_say_why_no_finished_segment_stands_behind_them() -> None:
    part = _part(*_finished(0, 0, 9),
                 *_finished(1, 0, 9), rm.update_value(T, TID, 0, IDS[1], DELETE_STARTED),
                 *_finished(2, 0, 9), rm.update_value(T, TID, 0, IDS[2], DELETE_STARTED),
                 rm.update_value(T, TID, 0, IDS[2], DELETE_FINISHED))
    objects = _objects((IDS[0], 100), (IDS[1], 100), (IDS[2], 100), (IDS[3], 7))
    audit = _audit(part, _local(10, 10), objects)
    assert [(o.segment_id, o.reason) for o in audit.orphans] == [
        (IDS[1], STALLED_DELETE), (IDS[2], DELETED), (IDS[3], UNKNOWN)]
    assert audit.orphans[-1].bytes == 7 and audit.deleting.segments == 1


def test_objects_of_a_partition_whose_delete_finished_are_orphans() -> None:
    part = _part(*_finished(0, 0, 9), rm.delete_value(T, TID, 0, 0), rm.delete_value(T, TID, 0, 2))
    audit = _audit(part, None, _objects((IDS[0], 100)))
    assert [(o.segment_id, o.reason) for o in audit.orphans] == [(IDS[0], PARTITION_DELETED)]
    assert audit.gaps == [] and audit.overdue == []  # not in the log dir: nothing to cover, no retention


def test_objects_the_metadata_never_names_are_orphans_even_without_any_metadata() -> None:
    audit = _audit(None, None, _objects((IDS[0], 100)))
    assert [(o.segment_id, o.reason) for o in audit.orphans] == [(IDS[0], UNKNOWN)]


def test_overdue_by_retention_ms_waits_out_the_grace() -> None:
    part = _part(*_finished(0, 0, 9, max_ts=NOW - 3 * DAY), *_finished(1, 10, 19, max_ts=NOW - DAY))
    objects = _objects((IDS[0], 100), (IDS[1], 100))
    audit = _audit(part, _local(20, 20), objects, Retention(ms=2 * DAY))
    assert [(o.segment_id, o.reason) for o in audit.overdue] == [
        (IDS[0], f"newest record older than retention.ms={2 * DAY}")]
    assert _audit(part, _local(20, 20), objects, Retention(ms=2 * DAY), grace_ms=2 * DAY).overdue == []
    assert _audit(part, _local(20, 20), objects, Retention(ms=-1)).overdue == []


def test_overdue_by_retention_bytes_counts_the_local_only_segments() -> None:
    part = _part(*_finished(0, 0, 9), *_finished(1, 10, 19), *_finished(2, 20, 29))
    objects = _objects((IDS[0], 100), (IDS[1], 100), (IDS[2], 100))
    # 300 bytes remote, none local above them: 50 over 250, less than a segment; 100 over 200, one segment
    assert _audit(part, _local(30, 30), objects, Retention(bytes=250)).overdue == []
    assert [o.segment_id for o in _audit(part, _local(30, 30), objects, Retention(bytes=200)).overdue] == [IDS[0]]
    # 220 more bytes in local segments above the remote ones: 270 over 250, two remote segments must go (a local
    # segment the remote ones also hold does not count twice)
    local = _local(20, 50, segments=((20, 100), (30, 100), (40, 120)))
    assert [o.segment_id for o in _audit(part, local, objects, Retention(bytes=250)).overdue] == [IDS[0], IDS[1]]


def test_overdue_below_the_log_start_offset() -> None:
    part = _part(*_finished(0, 0, 9), *_finished(1, 10, 19))
    audit = _audit(part, _local(20, 20, log_start=10), _objects((IDS[0], 100), (IDS[1], 100)))
    assert [(o.segment_id, o.reason) for o in audit.overdue] == [(IDS[0], "ends below the log start offset 10")]


# --- the leader-epoch lineage (Kafka's RemoteLogManager.isRemoteSegmentWithinLeaderEpochs, case by case) ---

LINEAGE = ((5, 10), (7, 15), (9, 100))


@pytest.mark.parametrize("epochs, end, problem", [
    (((5, 10), (7, 15)), 50, None),  # Kafka's own example: segment1
    (((5, 14), (7, 15), (9, 100)), 150, None),  # and segment2, which overlaps it
    (((7, 15),), 99, None),
    (((7, 15),), 100, "it ends at 100, after epoch 7 ends at 99"),
    (((9, 100),), 200, "it ends at 200, at or past the log end 200"),
    (((11, 200),), 210, "its last epoch 11 is outside the lineage's epochs 5-9"),
    (((3, 0),), 9, "its last epoch 3 is outside the lineage's epochs 5-9"),
    (((6, 12),), 50, "its epoch 6 is not in the lineage"),
    (((5, 10), (6, 12), (7, 15)), 50, "after its epoch 5 comes epoch 6 at 12, not the lineage's"),
    (((7, 12),), 50, "its epoch 7 starts at 12, before the lineage's 15"),
    (((5, 10), (7, 16)), 50, "after its epoch 5 comes epoch 7 at 16, not the lineage's"),
    (((5, 10), (6, 15), (7, 15)), 50, None),  # epoch 6 holds no record: left out, as Kafka does
    (((3, 0), (7, 15)), 50, None),  # epochs before the lineage's first (truncated by the log start) are skipped
])
def test_a_segment_within_or_outside_the_lineage(epochs, end, problem) -> None:
    assert lineage_problem(epochs, end, 200, LINEAGE) == problem


def test_a_finished_segment_outside_the_lineage_is_an_orphan_and_covers_nothing() -> None:
    # an unclean election: epoch 1 wrote 10-19 remotely, the new leader's epoch 2 rewrote from 10 on
    part = _part(*_finished(0, 0, 9),
                 rm.segment_value(T, TID, 0, IDS[1], 10, 19, epochs=((1, 10),), size=100, tagged={0: b"\x01"}),
                 rm.update_value(T, TID, 0, IDS[1], FINISHED))
    local = LocalLog(0, 15, 30, ((15, 100),), ((0, 0), (2, 10)))
    audit = _audit(part, local, _objects((IDS[0], 100), (IDS[1], 100)))
    assert [(o.segment_id, o.reason, o.bytes) for o in audit.orphans] == [
        (IDS[1], f"{OUTSIDE_LINEAGE}: its epoch 1 is not in the lineage", 100)]
    assert audit.gaps == [Gap(10, 14)]  # its offsets count as lost: Kafka will not serve them from it
    assert audit.finished.segments == 2  # the metadata's count


def test_a_segment_below_the_log_start_is_overdue_not_an_orphan_of_the_truncated_lineage() -> None:
    # the log start moved to 10: Kafka truncated the lineage to it, and deletes segment 0-9 by the log start
    part = _part(*_finished(0, 0, 9),
                 rm.segment_value(T, TID, 0, IDS[1], 10, 19, epochs=((1, 10),), size=100, tagged={0: b"\x01"}),
                 rm.update_value(T, TID, 0, IDS[1], FINISHED))
    local = LocalLog(10, 20, 20, ((20, 0),), ((1, 10),))
    audit = _audit(part, local, _objects((IDS[0], 100), (IDS[1], 100)))
    assert audit.orphans == [] and audit.gaps == []
    assert [(o.segment_id, o.reason) for o in audit.overdue] == [(IDS[0], "ends below the log start offset 10")]


def test_finished_segments_of_a_replaced_topic_id_are_orphans_and_nothing_else_is_judged() -> None:
    part = _part(*_finished(0, 0, 9))
    audit = audit_partition(part, topic=T, partition=0, topic_id=TID, local=None, objects=_objects((IDS[0], 100)),
                            required=REQUIRED, size_suffix=".log", retention=Retention(bytes=0), now_ms=NOW,
                            replaced_by="AAAAAAAAAAAAAAAAAAAAAA")
    assert [(o.segment_id, o.reason, o.bytes) for o in audit.orphans] == [
        (IDS[0], f"{TOPIC_REPLACED} (the log dir's t is topic id AAAAAAAAAAAAAAAAAAAAAA)", 100)]
    assert audit.missing == [] and audit.overdue == []


def test_local_segments_cover_each_its_own_offsets() -> None:
    part = _part(*_finished(0, 0, 9))
    local = LocalLog(0, 10, 40, ((10, 50), (30, 50)), next_offsets=(20, 40))
    assert _audit(part, local, _objects((IDS[0], 100))).gaps == [Gap(20, 29)]


def test_the_expiration_walk_stops_at_the_first_segment_not_due() -> None:
    # segment 10-19 holds older records than 0-9 (CreateTime set by producers): Kafka's walk stops at 0-9
    part = _part(*_finished(0, 0, 9, max_ts=NOW - DAY), *_finished(1, 10, 19, max_ts=NOW - 5 * DAY))
    assert _audit(part, _local(20, 20), _objects((IDS[0], 100), (IDS[1], 100)), Retention(ms=2 * DAY)).overdue == []


def test_a_segment_taken_by_time_counts_against_the_size_too() -> None:
    part = _part(*_finished(0, 0, 9, max_ts=NOW - 5 * DAY), *_finished(1, 10, 19), *_finished(2, 20, 29))
    objects = _objects((IDS[0], 100), (IDS[1], 100), (IDS[2], 100))
    # 300 bytes, 150 kept by size: 150 over. 0-9 goes by time, which leaves 50 over: less than 10-19's 100
    audit = _audit(part, _local(30, 30), objects, Retention(ms=2 * DAY, bytes=150))
    assert [(o.segment_id, o.reason) for o in audit.overdue] == [
        (IDS[0], f"newest record older than retention.ms={2 * DAY}")]
    # 100 kept by size: 200 over; 100 left after time took 0-9, exactly 10-19's size
    audit = _audit(part, _local(30, 30), objects, Retention(ms=2 * DAY, bytes=100))
    assert [o.segment_id for o in audit.overdue] == [IDS[0], IDS[1]]
