"""Compaction planning: cleanable range, dirty ratio, selection and grouping as Kafka computes them.

Each test names the kafka-behaviours.md item it pins down. Expected numbers are worked out by hand
from the rule in the comment next to them.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.rules.config import TopicConfig
from jobs.rules.kafka_defaults import INT_MAX
from jobs.rules.plan_compact import (
    BOUND_ACTIVE,
    BOUND_DIRTY,
    BOUND_MIN_LAG,
    BOUND_OPEN_TXN,
    calculate_cleanable_bytes,
    cleanable_offsets,
    estimated_index_bytes,
    group_segments_by_size,
    plan_compaction,
    segments_in_range,
    updated_cleaner_checkpoints,
)
from tests.support.states import DAY, HOUR, NOW, seg, state, uniform_log

COMPACT = TopicConfig.from_settings({"cleanup.policy": "compact"})


def compact(**settings: object) -> TopicConfig:
    return TopicConfig.from_settings({"cleanup.policy": "compact", **{k.replace("_", "."): v
                                                                      for k, v in settings.items()}})


def bases(groups) -> list[list[int]]:
    return [[s.base_offset for s in g] for g in groups]


# ---- segment ranges (Kafka's LogSegments.values) ---------------------------------------------------

def test_segments_in_range_starts_at_the_segment_holding_from() -> None:
    segs = uniform_log(4)  # bases 0, 10, 20, 30
    assert [s.base_offset for s in segments_in_range(segs, 15, 30)] == [10, 20]
    assert [s.base_offset for s in segments_in_range(segs, -1, 20)] == [0, 10]
    assert segments_in_range(segs, 20, 20) == ()
    with pytest.raises(ValueError):
        segments_in_range(segs, 30, 20)


# ---- 27: groupSegmentsBySize ----------------------------------------------------------------------

TEN = uniform_log(10, size=100, index_bytes=16, time_index_bytes=24)


def test_27_huge_limits_give_one_group() -> None:
    groups = group_segments_by_size(TEN, INT_MAX, INT_MAX, 100)
    assert bases(groups) == [[s.base_offset for s in TEN]]


@pytest.mark.parametrize("max_size, max_index", [(1, INT_MAX), (INT_MAX, 1)])
def test_27_tiny_log_or_index_limit_gives_singletons(max_size: int, max_index: int) -> None:
    groups = group_segments_by_size(TEN, max_size, max_index, 100)
    assert bases(groups) == [[s.base_offset] for s in TEN]


def test_27_limit_of_three_segments_plus_one_gives_groups_of_three() -> None:
    groups = group_segments_by_size(TEN, 3 * 100 + 1, INT_MAX, 100)
    assert [len(g) for g in groups] == [3, 3, 3, 1]
    assert [s.base_offset for g in groups for s in g] == [s.base_offset for s in TEN]  # order preserved


def test_27_offset_index_limit_groups_by_three() -> None:
    # offset index 16 bytes each: 3 * 16 + 1 lets three in, not four; the time index (24 each, 72 for
    # three) would not fit that limit, so give it room by making its entries small
    segs = [dataclasses.replace(s, time_index_bytes=1) for s in TEN]
    groups = group_segments_by_size(segs, INT_MAX, 3 * 16 + 1, 100)
    assert [len(g) for g in groups] == [3, 3, 3, 1]


def test_27_time_index_counts_too() -> None:
    # offset indexes are empty; time indexes of 24 bytes: 2 * 24 fits 50, 3 * 24 does not
    segs = [dataclasses.replace(s, offset_index_bytes=0) for s in TEN]
    groups = group_segments_by_size(segs, INT_MAX, 50, 100)
    assert [len(g) for g in groups] == [2, 2, 2, 2, 2]


def test_27_index_sizes_are_estimated_when_unknown() -> None:
    # at most one offset index entry per (interval + 1) bytes, never before the first batch;
    # the time index gets at most one more (written at roll)
    assert estimated_index_bytes(seg(0, 10_000), 4096) == (2 * 8, 3 * 12)          # 10000 // 4097 = 2
    # one entry per batch after the first
    assert estimated_index_bytes(seg(0, 10_000, batches=2), 4096) == (1 * 8, 2 * 12)
    assert estimated_index_bytes(seg(0, 0), 4096) == (0, 0)
    assert estimated_index_bytes(seg(0, 10_000, index_bytes=40, time_index_bytes=60), 4096) == (40, 60)


def test_27_estimated_index_sizes_limit_groups() -> None:
    # 4097 bytes each -> 1 offset entry (8 bytes), 2 time entries (24 bytes); limit 50 fits 2 segments
    segs = uniform_log(4, size=4097)
    groups = group_segments_by_size(segs, INT_MAX, 50, 40, index_interval_bytes=4096)
    assert [len(g) for g in groups] == [2, 2]


@given(sizes=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 2**31)), min_size=1, max_size=12),
       max_size=st.integers(1, 1200), max_index=st.integers(1, 400))
def test_27_groups_partition_the_segments_within_limits_and_greedily(sizes, max_size, max_index) -> None:
    segs, base = [], 0
    for size, span in sizes:
        segs.append(seg(base, size, count=1, index_bytes=size // 10, time_index_bytes=size // 7))
        base += span
    end = base
    groups = group_segments_by_size(segs, max_size, max_index, end)
    assert [s for g in groups for s in g] == segs

    def fits(group) -> bool:
        return (sum(s.size_bytes for s in group) <= max_size
                and sum(s.offset_index_bytes for s in group) <= max_index
                and sum(s.time_index_bytes for s in group) <= max_index
                and all(s.size_bytes == 0 or (segs[segs.index(s) + 1].base_offset if segs.index(s) + 1 < len(segs)
                                              else end) - 1 - group[0].base_offset <= INT_MAX for s in group[1:]))

    for g, following in zip(groups, groups[1:] + [()]):
        assert len(g) == 1 or fits(g)
        if following:  # greedy: the next segment could not have joined
            assert not fits(g + following[:1])


# ---- 28: a group spans at most Int.MaxValue offsets, estimated from the next segment's base -------

def test_28_group_range_uses_next_base_minus_one() -> None:
    a = seg(0, 100, count=10)
    b = seg(100, 100, count=1)  # really ends at 100, but the estimate uses what follows it
    # the last segment's last offset is estimated from the first uncleanable offset
    assert bases(group_segments_by_size([a, b], INT_MAX, INT_MAX, INT_MAX + 1)) == [[0, 100]]
    assert bases(group_segments_by_size([a, b], INT_MAX, INT_MAX, INT_MAX + 2)) == [[0], [100]]
    c = seg(INT_MAX + 2, 100, count=1)
    # with c following, b's estimate is c.base - 1 = INT_MAX + 1: too far from a's base
    assert bases(group_segments_by_size([a, b, c], INT_MAX, INT_MAX, INT_MAX + 10)) == [[0], [100, INT_MAX + 2]]


def test_28_every_group_fits_relative_offsets() -> None:
    segs = [seg(0, 100), seg(INT_MAX // 2, 100), seg(INT_MAX, 100), seg(INT_MAX + 5, 100)]
    end = INT_MAX + 20
    groups = group_segments_by_size(segs, INT_MAX, INT_MAX, end)
    for g in groups:
        i = segs.index(g[-1])
        estimated_last = (segs[i + 1].base_offset if i + 1 < len(segs) else end) - 1
        assert estimated_last - g[0].base_offset <= INT_MAX
    assert len(groups) == 2


# ---- 29: empty segments are exempt from the range check ------------------------------------------

def test_29_non_empty_sparse_segments_do_not_group_but_emptied_ones_merge() -> None:
    span = INT_MAX + 1
    full = [seg(i * span, 100, count=1) for i in range(3)]
    end = 3 * span + 1
    assert bases(group_segments_by_size(full, INT_MAX, INT_MAX, end)) == [[0], [span], [2 * span]]
    # a clean emptied the first two: they join, the third (non-empty) still may not
    emptied = [seg(0, 0), seg(span, 0), full[2]]
    assert bases(group_segments_by_size(emptied, INT_MAX, INT_MAX, end)) == [[0, span], [2 * span]]


# ---- 33 and 34: the cleaning end passes offset gaps; the uncleanable section is untouched -------------

def test_33_cleaning_end_is_the_active_segment_base_across_a_gap() -> None:
    # offsets 0..9, then a gap, the active segment starts at 11
    plan = plan_compaction(state([seg(0, 100, count=10), seg(11, 50, count=1)]), COMPACT, NOW,
                           requested=True)
    assert plan.first_uncleanable_offset == 11  # the checkpoint written after the pass


def test_33_multiple_gaps() -> None:
    segs = [seg(0, 100, count=10), seg(15, 100, count=10), seg(30, 50, count=1)]
    plan = plan_compaction(state(segs), COMPACT, NOW, requested=True)
    assert plan.first_uncleanable_offset == 30
    assert bases(plan.groups) == [[0, 15]]


def test_34_uncleanable_section_is_left_out() -> None:
    # segments 0,1 clean; 2,3 cleanable; 4,5 uncleanable (an open transaction starts at segment 4)
    segs = [seg(i * 10, 100 + i, count=10) for i in range(6)]
    st = state(segs, checkpoint=20, unstable=40)
    plan = plan_compaction(st, COMPACT, NOW)
    assert plan.first_dirty_offset == 20
    assert (plan.first_uncleanable_offset, plan.bound_by) == (40, BOUND_OPEN_TXN)
    assert plan.clean_bytes == 100 + 101
    assert plan.cleanable_bytes == 102 + 103
    assert plan.uncleanable_bytes == 104 + 105
    assert plan.dirty_ratio == pytest.approx(205 / 406)
    assert all(s.base_offset < 40 for g in plan.groups for s in g)
    assert bases(plan.groups) == [[0, 10, 20, 30]]  # the clean section is rewritten with the dirty one


# ---- 36: the active segment is never cleaned --------------------------------------------------------

def test_36_single_segment_log_is_not_cleanable_even_with_log_start_inside_it() -> None:
    st = state([seg(0, 300, count=9)], log_start=2, checkpoint=0)
    plan = plan_compaction(st, COMPACT, NOW)
    assert not plan.selected
    assert plan.cleanable_bytes == 0 and plan.groups == ()
    assert plan.first_uncleanable_offset == 0
    # checkpoint 0 is below log start 2: reset, even though nothing is cleaned (item 43)
    assert plan.checkpoint_reset and plan.first_dirty_offset == 2


def test_36_active_segment_bounds_the_range() -> None:
    st = state(uniform_log(8), checkpoint=0)
    offsets = cleanable_offsets(st, COMPACT, NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, 70)
    assert offsets.bound_by == BOUND_ACTIVE
    plan = plan_compaction(st, COMPACT, NOW, requested=True)
    assert all(s.base_offset != 70 for g in plan.groups for s in g)


# ---- 20 and 37: an undecided transaction bounds cleaning -------------------------------------------

def test_20_open_transaction_blocks_even_past_the_minimum_lag() -> None:
    lag = HOUR
    old = NOW - lag - 1
    # a transaction started at offset 0 and has no marker; segment [0, 3) then the active segment
    st = state([seg(0, 100, count=3, ts=old), seg(3, 0)], checkpoint=0, unstable=0)
    offsets = cleanable_offsets(st, compact(min_compaction_lag_ms=lag), NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, 0)
    # the marker arrives at offset 3 (its own segment, stamped now): the first segment becomes cleanable
    st = state([seg(0, 100, count=3, ts=old), seg(3, 70, count=1, ts=NOW), seg(4, 0)], checkpoint=0)
    offsets = cleanable_offsets(st, compact(min_compaction_lag_ms=lag), NOW)
    assert offsets.first_uncleanable_dirty_offset == 3 and offsets.bound_by == BOUND_MIN_LAG
    # once the lag has passed for the marker too, everything up to the active segment is cleanable
    offsets = cleanable_offsets(st, compact(min_compaction_lag_ms=lag), NOW + lag + 1)
    assert offsets.first_uncleanable_dirty_offset == 4


def test_37_unstable_offset_inside_a_segment_rounds_down_to_its_base() -> None:
    st = state(uniform_log(5), checkpoint=0, unstable=25)
    offsets = cleanable_offsets(st, COMPACT, NOW)
    assert offsets.first_uncleanable_dirty_offset == 25
    first_uncleanable, cleanable = calculate_cleanable_bytes(st, 0, 25)
    assert (first_uncleanable, cleanable) == (20, 200)


# ---- 38: min.compaction.lag.ms ------------------------------------------------------------------------

def test_38_first_segment_younger_than_the_lag_is_uncleanable() -> None:
    lag = HOUR
    t0, t1 = NOW - 2 * lag, NOW - lag // 2
    segs = uniform_log(4, ts=t0) + [seg(40 + 10 * i, 100, count=10, ts=t1) for i in range(4)]
    offsets = cleanable_offsets(state(segs, checkpoint=0), compact(min_compaction_lag_ms=lag), NOW)
    assert (offsets.first_uncleanable_dirty_offset, offsets.bound_by) == (40, BOUND_MIN_LAG)


def test_38_lag_boundary_is_strict() -> None:
    lag = HOUR
    # largest timestamp exactly now - lag is not "later than" it: cleanable
    segs = [seg(0, 100, ts=NOW - lag), seg(10, 100, ts=NOW - lag + 1), seg(20, 100, ts=NOW)]
    offsets = cleanable_offsets(state(segs), compact(min_compaction_lag_ms=lag), NOW)
    assert offsets.first_uncleanable_dirty_offset == 10


def test_38_all_older_than_the_lag_leaves_only_the_active_segment() -> None:
    segs = uniform_log(8, ts=NOW - 2 * HOUR)
    offsets = cleanable_offsets(state(segs), compact(min_compaction_lag_ms=HOUR), NOW)
    assert (offsets.first_uncleanable_dirty_offset, offsets.bound_by) == (70, BOUND_ACTIVE)


def test_38_segment_without_timestamps_uses_its_mtime() -> None:
    young_file = seg(10, 100, ts=None, mtime=NOW - 1)
    segs = [seg(0, 100, ts=NOW - DAY), young_file, seg(20, 100)]
    assert segs[1].largest_timestamp is None
    offsets = cleanable_offsets(state(segs), compact(min_compaction_lag_ms=HOUR), NOW)
    assert offsets.first_uncleanable_dirty_offset == 10


def test_38_only_dirty_segments_are_searched() -> None:
    # a young segment in the clean section does not bound the range
    segs = [seg(0, 100, ts=NOW), seg(10, 100, ts=NOW - DAY), seg(20, 100)]
    offsets = cleanable_offsets(state(segs, checkpoint=10), compact(min_compaction_lag_ms=HOUR), NOW)
    assert offsets.first_uncleanable_dirty_offset == 20


# ---- 39: max.compaction.lag.ms forces a clean -------------------------------------------------------

def test_39_max_lag_forces_a_clean_whatever_the_ratio() -> None:
    max_lag = DAY
    config = compact(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=max_lag)
    first_batch = NOW - max_lag - 5_000
    segs = [seg(0, 100, ts=NOW - HOUR, first_ts=first_batch), seg(10, 100, ts=NOW), seg(20, 100)]
    plan = plan_compaction(state(segs), config, NOW)
    assert plan.dirty_ratio == 1.0  # not above 1.0: only the lag can select it
    assert plan.selected and plan.reason.startswith("max.compaction.lag.ms (1d) exceeded by 5s; ")  # not in ms
    assert plan.max_compaction_delay_ms == (NOW - max_lag) - first_batch  # 5000


def test_39_young_dirty_data_is_not_forced() -> None:
    config = compact(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY)
    segs = [seg(0, 100, first_ts=NOW - DAY + 1), seg(10, 100)]
    plan = plan_compaction(state(segs), config, NOW)
    assert not plan.selected and plan.max_compaction_delay_ms == 0


def test_39_non_positive_first_batch_timestamps_are_ignored() -> None:
    config = compact(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY)
    segs = [seg(0, 100, first_ts=0), seg(10, 100)]
    assert plan_compaction(state(segs), config, NOW).max_compaction_delay_ms == 0


def test_39_max_lag_needs_cleanable_bytes() -> None:
    # old data, but all of it in the clean section: nothing to force
    config = compact(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY)
    segs = [seg(0, 100, first_ts=NOW - 10 * DAY), seg(10, 100)]
    plan = plan_compaction(state(segs, checkpoint=10), config, NOW)
    assert plan.cleanable_bytes == 0 and not plan.selected


# ---- 40: dirty ratio and selection -----------------------------------------------------------------------

def test_40_dirty_ratio_counts_clean_and_cleanable_bytes() -> None:
    segs = [seg(0, 300), seg(10, 100), seg(20, 100), seg(30, 999)]
    plan = plan_compaction(state(segs, checkpoint=10), COMPACT, NOW)
    assert (plan.clean_bytes, plan.cleanable_bytes, plan.uncleanable_bytes) == (300, 200, 999)
    assert plan.dirty_ratio == pytest.approx(200 / 500)
    assert not plan.selected  # 0.4 <= 0.5


def test_40_ratio_must_exceed_the_minimum_strictly() -> None:
    segs = [seg(0, 100), seg(10, 100), seg(20, 100)]
    st = state(segs, checkpoint=10)  # ratio exactly 0.5
    assert not plan_compaction(st, compact(min_cleanable_dirty_ratio=0.5), NOW).selected
    assert plan_compaction(st, compact(min_cleanable_dirty_ratio=0.49), NOW).selected


def test_40_checkpoint_inside_a_segment_counts_it_as_clean_and_cleanable() -> None:
    # Kafka's clean bytes: segments with base < first dirty; cleanable: from the one holding it
    segs = [seg(0, 100), seg(10, 200), seg(20, 100)]
    plan = plan_compaction(state(segs, checkpoint=15), COMPACT, NOW)
    assert (plan.clean_bytes, plan.cleanable_bytes) == (300, 200)


@pytest.mark.parametrize("segments", [[], [seg(0, 0)], [seg(0, 500, count=50)]])
def test_40_logs_without_clean_or_cleanable_bytes_are_skipped(segments) -> None:
    plan = plan_compaction(state(segments), compact(min_cleanable_dirty_ratio=0.0), NOW, requested=True)
    assert not plan.selected and plan.total_bytes == 0


def test_40_only_compacted_topics() -> None:
    st = state(uniform_log(3), checkpoint=0)
    assert plan_compaction(st, compact(), NOW).selected
    delete_only = plan_compaction(st, TopicConfig(), NOW)
    assert not delete_only.selected and "cleanup.policy=delete" in delete_only.reason
    # naming a partition (--partition) does not make a delete-only topic compacted
    assert not plan_compaction(st, TopicConfig(), NOW, requested=True).selected


def test_a_delete_only_topic_has_no_dirty_ratio() -> None:
    # the cleaner computes one only for compacted logs: 1.0 (never cleaned) would read as "very dirty"
    st = state(uniform_log(3))
    assert plan_compaction(st, compact(), NOW).dirty_ratio == 1.0
    assert plan_compaction(st, TopicConfig(), NOW).dirty_ratio is None
    assert plan_compaction(state([]), TopicConfig(), NOW).dirty_ratio is None
    assert plan_compaction(state([]), compact(), NOW).dirty_ratio == 0.0
    both = TopicConfig.from_settings({"cleanup.policy": "compact,delete"})
    assert plan_compaction(st, both, NOW).dirty_ratio == 1.0


def test_explicit_request_bypasses_the_ratio() -> None:
    st = state(uniform_log(4), checkpoint=30)  # everything clean: ratio 0
    assert not plan_compaction(st, COMPACT, NOW).selected
    forced = plan_compaction(st, COMPACT, NOW, requested=True)
    assert forced.selected and "explicitly requested" in forced.reason and forced.cleanable_bytes == 0


# ---- 43 and 44: the cleaner checkpoint --------------------------------------------------------------------

@pytest.mark.parametrize("checkpoint, log_start, expected_dirty, reset", [
    (15, 10, 15, False),   # valid
    (15, 20, 20, True),    # below the log start offset
    (200, 0, 0, True),     # above the log end offset (30)
    (30, 0, 30, False),    # at the log end offset: valid
    (None, 10, 10, False),  # absent: start at the log start offset, nothing to repair
])
def test_43_checkpoint_out_of_range_resets_to_log_start(checkpoint, log_start, expected_dirty, reset) -> None:
    segs = [seg(5 * i, 100, count=5) for i in range(6)]  # log end offset 30
    plan = plan_compaction(state(segs, log_start=log_start, checkpoint=checkpoint), COMPACT, NOW)
    assert (plan.first_dirty_offset, plan.checkpoint_reset) == (expected_dirty, reset)
    assert plan.previous_checkpoint == checkpoint


def test_43_reset_is_reported_even_when_not_selected() -> None:
    segs = [seg(5 * i, 100, count=5) for i in range(6)]
    plan = plan_compaction(state(segs, log_start=20, checkpoint=15), compact(min_cleanable_dirty_ratio=0.9), NOW)
    assert not plan.selected and plan.checkpoint_reset and plan.first_dirty_offset == 20


def test_43_non_compacted_topics_do_not_reset() -> None:
    plan = plan_compaction(state(uniform_log(3), checkpoint=999), TopicConfig(), NOW)
    assert not plan.checkpoint_reset


def test_44_checkpoint_ahead_of_the_active_segment_base_leaves_nothing_cleanable() -> None:
    st = state([seg(0, 200, count=6)], checkpoint=3)
    offsets = cleanable_offsets(st, COMPACT, NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (3, 3)
    assert offsets.bound_by == BOUND_DIRTY and not offsets.checkpoint_reset
    assert not plan_compaction(st, COMPACT, NOW).selected


# ---- 45: removal (truncation, the item's other half, does not arise offline: nothing truncates a log dir) ---

def test_45_update_drops_removed_and_vanished_partitions() -> None:
    current = {("a", 0): 5, ("a", 1): 7, ("gone", 0): 9}
    live = {("a", 0), ("a", 1), ("b", 0)}
    assert updated_cleaner_checkpoints(current, live, remove=("a", 1)) == {("a", 0): 5}
    assert updated_cleaner_checkpoints(current, live, update=(("b", 0), 3)) == {("a", 0): 5, ("a", 1): 7,
                                                                              ("b", 0): 3}
