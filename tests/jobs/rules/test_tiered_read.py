"""jobs.rules.tiered_read: which segments of a tiered partition are read, and which offsets of each, on metadata
events built here (Kafka's encoding, tests.support.remote_metadata), remote objects and local segments described by
hand."""

from __future__ import annotations

import itertools

from jobs.rules.remote_log import replay
from jobs.rules.tiered_audit import OUTSIDE_LINEAGE
from jobs.rules.tiered_read import COVERED_LOCALLY, SUPERSEDED, TieredLogPlan, plan_tiered_log
from segment_io.layout import SegmentFiles
from segment_io.remote_layout import LocalTieredStorageLayout
from segment_io.remote_metadata import decode_metadata_value
from segment_io.storage.base import FileInfo
from tests.support import remote_metadata as rm

T, TID = "t", "AAAAAAAAAAAAAAAAAAAAAQ"
IDS = [f"AAAAAAAAAAAAAAAAAAAA{c}A" for c in "BCDEFGHIJ"]
STARTED, FINISHED, DELETE_STARTED = 0, 1, 2
SIZE = 100
ROOT = "/remote"
LAYOUT = LocalTieredStorageLayout()


def _segment(i: int, start: int, end: int, state: int | None = FINISHED, epochs=((0, 0),)) -> list[bytes]:
    values = [rm.segment_value(T, TID, 0, IDS[i], start, end, size=SIZE, epochs=epochs)]
    return values + ([rm.update_value(T, TID, 0, IDS[i], state)] if state not in (None, STARTED) else [])


def _replayed(*segments: list[bytes]):
    state = replay((n, decode_metadata_value(v)) for n, v in enumerate(itertools.chain(*segments)))
    return state.partitions[(TID, 0)]


def _remote_files(*ids: int, size: int = SIZE, starts: dict[int, int] | None = None) -> dict[str, SegmentFiles]:
    starts = starts or {}
    return {IDS[i]: SegmentFiles(starts.get(i, 0), FileInfo(f"{ROOT}/{IDS[i]}.log", size, 0)) for i in ids}


def _local(*bases: int) -> list[SegmentFiles]:
    return [SegmentFiles(b, FileInfo(f"/logs/t-0/{b:020d}.log", 10, 0)) for b in bases]


def _plan(part, local, remote_files, **kw) -> TieredLogPlan:  # type: ignore[no-untyped-def]
    return plan_tiered_log(part.finished(), local, remote_files, layout=LAYOUT, root=ROOT, **kw)


def _ranges(plan: TieredLogPlan) -> list[tuple[str, int, int | None]]:
    return [(s.remote.segment_id if s.remote else f"local {s.base_offset}", s.keep_first, s.keep_last)
            for s in plan.sources]


def test_remote_segments_below_the_local_log_are_read_whole_then_the_local_segments() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39))
    plan = _plan(part, _local(40, 60), _remote_files(0, 1))
    assert _ranges(plan) == [(IDS[0], 0, 19), (IDS[1], 20, 39), ("local 40", 40, None), ("local 60", 60, None)]
    assert plan.skipped == () and plan.error() is None
    assert not any(s.trimmed for s in plan.sources)
    assert plan.sources[0].uri == f"{ROOT}/{IDS[0]}.log"


def test_a_remote_segment_overlapping_the_local_tail_keeps_only_the_offsets_below_it() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39))
    plan = _plan(part, _local(30), _remote_files(0, 1))
    assert _ranges(plan) == [(IDS[0], 0, 19), (IDS[1], 20, 29), ("local 30", 30, None)]
    assert plan.sources[1].trimmed
    assert plan.sources[1].describe() == f"remote segment {IDS[1]} (offsets 20-39, keeping 20-29)"


def test_a_remote_segment_the_local_segments_cover_is_skipped() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39), _segment(2, 40, 59))
    plan = _plan(part, _local(20, 40), _remote_files(0, 1, 2))
    assert _ranges(plan) == [(IDS[0], 0, 19), ("local 20", 20, None), ("local 40", 40, None)]
    assert [(s.segment.segment_id, s.reason) for s in plan.skipped] == [(IDS[1], COVERED_LOCALLY),
                                                                        (IDS[2], COVERED_LOCALLY)]


def test_without_local_segments_every_finished_segment_is_read() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39))
    assert _ranges(_plan(part, [], _remote_files(0, 1))) == [(IDS[0], 0, 19), (IDS[1], 20, 39)]


def test_only_finished_segments_are_read_whatever_objects_the_store_holds() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39, state=STARTED),
                     _segment(2, 20, 39, state=DELETE_STARTED), _segment(3, 40, 59))
    plan = _plan(part, _local(60), _remote_files(0, 1, 2, 3))
    assert _ranges(plan) == [(IDS[0], 0, 19), (IDS[3], 40, 59), ("local 60", 60, None)]


def test_a_segment_outside_the_leader_epoch_lineage_is_not_read() -> None:
    # the lineage: epoch 0 from 0, epoch 2 from 20; segment 1 was written in epoch 1, which the lineage does not hold
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39, epochs=((1, 20),)),
                     _segment(2, 20, 39, epochs=((2, 20),)))
    plan = _plan(part, _local(40), _remote_files(0, 1, 2), log_start=0, log_end=50, epochs=[(0, 0), (2, 20)])
    assert _ranges(plan) == [(IDS[0], 0, 19), (IDS[2], 20, 39), ("local 40", 40, None)]
    assert [s.segment.segment_id for s in plan.skipped] == [IDS[1]]
    assert plan.skipped[0].reason.startswith(OUTSIDE_LINEAGE)


def test_a_later_copy_from_the_same_offset_wins_and_an_earlier_segment_gives_way_to_the_next_start() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 0, 19), _segment(2, 10, 29))
    plan = _plan(part, _local(30), _remote_files(0, 1, 2))
    assert _ranges(plan) == [(IDS[1], 0, 9), (IDS[2], 10, 29), ("local 30", 30, None)]
    assert [(s.segment.segment_id, s.reason) for s in plan.skipped] == [(IDS[0], SUPERSEDED)]


def test_a_finished_segment_whose_object_is_missing_makes_the_partition_unreadable_naming_it() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39))
    plan = _plan(part, _local(40), _remote_files(0))
    assert [u.segment.segment_id for u in plan.unreadable] == [IDS[1]]
    path = f"{ROOT}/{T}-0-{TID}/{20:020d}-{IDS[1]}.log"
    assert plan.error() == (f"remote segment {IDS[1]} (offsets 20-39): its segment object ({path}) is absent: the "
                            f"partition cannot be read as one log (restore the object, see segjobs tiered audit)")


def test_a_segment_object_of_another_size_than_the_metadata_is_unreadable() -> None:
    part = _replayed(_segment(0, 0, 19))
    plan = _plan(part, _local(20), _remote_files(0, size=SIZE - 1))
    assert "is 99 bytes, the metadata says 100" in (plan.error() or "")


def test_a_missing_object_of_a_segment_the_local_log_covers_is_no_error() -> None:
    part = _replayed(_segment(0, 0, 19), _segment(1, 20, 39))
    plan = _plan(part, _local(20), _remote_files(0))
    assert plan.error() is None and _ranges(plan) == [(IDS[0], 0, 19), ("local 20", 20, None)]


def test_no_offset_is_kept_twice_whatever_the_segments() -> None:
    """Every arrangement of up to four finished segments over offsets 0-39 (any starts and ends, some
    overlapping) and a local log starting anywhere: the kept ranges ascend without overlapping, and each kept
    range lies inside its segment."""
    bounds = [(s, e) for s in range(0, 40, 10) for e in range(s + 9, 40, 10)]
    for n in (1, 2, 3):
        for chosen in itertools.combinations(bounds, n):
            part = _replayed(*(_segment(i, s, e) for i, (s, e) in enumerate(chosen)))
            for local_first in (None, 0, 15, 20, 40):
                local = _local(local_first) if local_first is not None else []
                plan = _plan(part, local, _remote_files(*range(n)))
                previous = -1
                for s in plan.sources:
                    last = s.keep_last if s.keep_last is not None else 10**9
                    assert previous < s.keep_first <= last, (chosen, local_first, _ranges(plan))
                    if s.remote is not None:
                        assert s.remote.start_offset <= s.keep_first and last <= s.remote.end_offset
                    previous = last
