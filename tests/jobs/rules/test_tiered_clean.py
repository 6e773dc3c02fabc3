"""jobs.rules.tiered_clean: which orphans a clean deletes, on metadata events built here (Kafka's encoding,
tests.support.remote_metadata); the command's runs on broker-written fixtures are in
tests/jobs/engine/tiered/test_clean.py."""

from __future__ import annotations

from jobs.rules.remote_log import replay
from jobs.rules.tiered_audit import DANGLING_COPY, DELETED, UNKNOWN, LocalLog, ObjectInfo, Retention, audit_partition
from jobs.rules.tiered_clean import KEEP_FINISHED, Stamp, metadata_newest_ms, plan_clean
from segment_io.remote_metadata import decode_metadata_value
from tests.support import remote_metadata as rm

T, TID = "t", "AAAAAAAAAAAAAAAAAAAAAQ"
IDS = [f"AAAAAAAAAAAAAAAAAAAA{c}A" for c in "BCDEFGHIJ"]
STARTED, FINISHED, DELETE_STARTED, DELETE_FINISHED = 0, 1, 2, 3
HOUR = 3_600_000
NEWEST = 100 * HOUR


def _plan(values: list[bytes], objects: dict[str, int], *, mtime: int = 0, min_age: int = HOUR,
          limit: float = 0.5, listed: int | None = None):  # type: ignore[no-untyped-def]
    state = replay((i, decode_metadata_value(v)) for i, v in enumerate(values))
    infos = {sid: [ObjectInfo(f"/r/{sid}.log", size, ".log")] for sid, size in objects.items()}
    stamps = {f"/r/{sid}.log": Stamp(f"/r/{sid}.log", size, mtime) for sid, size in objects.items()}
    audit = audit_partition(state.partitions.get((TID, 0)), topic=T, partition=0, topic_id=TID,
                            local=LocalLog(0, 100, 100, epochs=((0, 0),)), objects=infos,
                            required={True: (".log",), False: (".log",)}, size_suffix=".log", retention=Retention(),
                            now_ms=NEWEST)
    total = sum(objects.values()) if listed is None else listed
    return state, plan_clean([audit], state, stamps, listed_bytes={TID: total}, min_age_ms=min_age,
                             max_fraction_for=lambda topic: limit)


def _seg(i: int, start: int, end: int, *, at: int) -> bytes:
    return rm.segment_value(T, TID, 0, IDS[i], start, end, event_ts=at, tagged={0: b"\x01"})


def _ids(items) -> list[str]:  # type: ignore[no-untyped-def]
    return [x.segment_id for x in items]


def test_the_newest_event_is_the_metadatas_clock() -> None:
    state, _ = _plan([_seg(0, 0, 9, at=5), rm.update_value(T, TID, 0, IDS[0], FINISHED, event_ts=NEWEST)], {})
    assert metadata_newest_ms(state) == NEWEST


def test_a_copy_that_never_finished_goes_once_it_is_older_than_min_age() -> None:
    old = [_seg(0, 0, 9, at=NEWEST - 2 * HOUR), _seg(1, 10, 19, at=NEWEST)]
    _, plan = _plan(old, {IDS[0]: 10, IDS[1]: 10})
    assert [(d.segment_id, d.reason) for d in plan.deletes] == [(IDS[0], DANGLING_COPY)]
    (kept,) = plan.kept
    assert kept.segment_id == IDS[1] and kept.kept_because.startswith("its copy started 0ms before the metadata's")


def test_a_deleted_segment_goes_whenever_its_objects_are_old_enough() -> None:
    values = [_seg(0, 0, 9, at=NEWEST - 3), rm.update_value(T, TID, 0, IDS[0], FINISHED, event_ts=NEWEST - 2),
              rm.update_value(T, TID, 0, IDS[0], DELETE_STARTED, event_ts=NEWEST - 1),
              rm.update_value(T, TID, 0, IDS[0], DELETE_FINISHED, event_ts=NEWEST)]
    _, plan = _plan(values, {IDS[0]: 10})
    assert [(d.segment_id, d.reason) for d in plan.deletes] == [(IDS[0], DELETED)]
    _, plan = _plan(values, {IDS[0]: 10}, mtime=NEWEST - HOUR + 1)
    assert plan.deletes == [] and "its newest object was written 59m 59s before" in plan.kept[0].kept_because


def test_a_finished_segment_is_kept_whatever_the_audit_calls_it() -> None:
    # finished, but past the log end: outside the lineage, an orphan to the audit
    values = [_seg(0, 100, 109, at=1), rm.update_value(T, TID, 0, IDS[0], FINISHED, event_ts=NEWEST)]
    _, plan = _plan(values, {IDS[0]: 10})
    assert plan.deletes == [] and [(k.segment_id, k.kept_because) for k in plan.kept] == [(IDS[0], KEEP_FINISHED)]


def test_the_guard_counts_only_what_no_metadata_names() -> None:
    values = [_seg(0, 0, 9, at=1), _seg(2, 50, 59, at=NEWEST)]  # a dangling copy (named), and the newest event
    _, plan = _plan(values, {IDS[0]: 60, IDS[1]: 40})
    assert sorted(_ids(plan.deletes)) == [IDS[0], IDS[1]] and plan.refused == []
    _, plan = _plan(values, {IDS[0]: 40, IDS[1]: 60})
    assert plan.deletes == [] and [r.unknown_bytes for r in plan.refused] == [60]
    assert {k.reason for k in plan.kept} == {DANGLING_COPY, UNKNOWN}
    _, plan = _plan(values, {IDS[0]: 40, IDS[1]: 60}, limit=1.0)
    assert len(plan.deletes) == 2
