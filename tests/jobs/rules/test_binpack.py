"""Bin-packing partitions into tasks by bytes (:mod:`jobs.rules.binpack`) and the progress tally of streamed
commits (:class:`jobs.engine.compact.streaming.Tally`): pure functions, no files, no Spark."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.engine.compact.streaming import Tally
from jobs.rules.binpack import pack_by_bytes, pack_in_order


def loads(bins: list[list[int]], sizes: list[int]) -> list[int]:
    return [sum(max(sizes[i], 1) for i in b) for b in bins]


def test_no_items_no_bins() -> None:
    assert pack_by_bytes([]) == []


def test_small_items_share_bins_and_a_big_one_gets_its_own() -> None:
    sizes = [10] * 20 + [1000]
    bins = pack_by_bytes(sizes, target_bytes=100, max_items=64, min_bins=1)
    # 1200 bytes in bins of 100: 12 bins; the big item alone in the first (heaviest) bin
    assert len(bins) == 12
    assert bins[0] == [20]
    assert all(20 not in b for b in bins[1:])
    assert sorted(i for b in bins for i in b) == list(range(21))


def test_min_bins_spreads_work_over_the_cores_but_never_makes_empty_bins() -> None:
    assert len(pack_by_bytes([5] * 10, target_bytes=1 << 30, min_bins=4)) == 4
    assert len(pack_by_bytes([5] * 3, target_bytes=1 << 30, min_bins=4)) == 3


def test_max_items_caps_every_bin() -> None:
    bins = pack_by_bytes([1] * 100 + [50], target_bytes=1 << 30, max_items=8, min_bins=1)
    assert max(len(b) for b in bins) <= 8
    assert len(bins) == 13  # ceil(101 / 8)


def test_zero_byte_items_count_as_one_byte() -> None:
    bins = pack_by_bytes([0, 0, 0, 0], target_bytes=2, min_bins=1)
    assert len(bins) == 2 and sorted(map(len, bins)) == [2, 2]


def test_bins_come_heaviest_first_with_indices_ascending() -> None:
    bins = pack_by_bytes([1, 9, 2, 8, 3, 7], target_bytes=10, min_bins=1)
    assert loads(bins, [1, 9, 2, 8, 3, 7]) == sorted(loads(bins, [1, 9, 2, 8, 3, 7]), reverse=True)
    assert all(b == sorted(b) for b in bins)


@pytest.mark.parametrize("kwargs", [dict(target_bytes=0), dict(max_items=0), dict(min_bins=0)])
def test_bad_parameters_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        pack_by_bytes([1, 2], **kwargs)


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        pack_by_bytes([1, -2])


@given(st.lists(st.integers(0, 10_000), max_size=300), st.integers(1, 20_000), st.integers(1, 40), st.integers(1, 8))
def test_every_item_in_exactly_one_bin_balanced_and_deterministic(sizes, target, max_items, min_bins) -> None:
    bins = pack_by_bytes(sizes, target_bytes=target, max_items=max_items, min_bins=min_bins)
    assert sorted(i for b in bins for i in b) == list(range(len(sizes)))
    assert all(b and len(b) <= max_items for b in bins)
    assert bins == pack_by_bytes(list(sizes), target_bytes=target, max_items=max_items, min_bins=min_bins)
    if sizes:
        total = sum(max(s, 1) for s in sizes)
        expected = min(len(sizes), max(-(-total // target), -(-len(sizes) // max_items), min_bins))
        assert len(bins) == expected
        # greedy into the lightest bin: unless item caps forced it, no bin exceeds the lightest by more than
        # its own heaviest item
        if max_items * len(bins) >= 2 * len(sizes):
            weights = [max(s, 1) for s in sizes]
            lightest = min(loads(bins, sizes))
            assert all(load - max(weights[i] for i in b) <= lightest for b, load in zip(bins, loads(bins, sizes)))


def test_in_order_bins_are_consecutive_runs_within_the_byte_and_item_limits() -> None:
    assert pack_in_order([]) == []
    assert pack_in_order([10] * 10, target_bytes=30, min_bins=1) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    # min_bins lowers the limit so the cores share the work: 100 bytes over 4 bins = 25 per bin
    assert pack_in_order([10] * 10, target_bytes=1000, min_bins=4) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert pack_in_order([1] * 5, target_bytes=1000, max_items=2) == [[0, 1], [2, 3], [4]]
    # a big item gets a bin of its own; zero-size items count as one byte
    assert pack_in_order([1, 500, 1, 0, 0], target_bytes=10) == [[0], [1], [2, 3, 4]]


@pytest.mark.parametrize("kwargs", [dict(target_bytes=0), dict(max_items=0), dict(min_bins=0)])
def test_in_order_bad_parameters_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        pack_in_order([1, 2], **kwargs)
    with pytest.raises(ValueError, match="negative"):
        pack_in_order([1, -2])


@given(st.lists(st.integers(0, 10_000), max_size=300), st.integers(1, 20_000), st.integers(1, 40), st.integers(1, 8))
def test_in_order_bins_cover_every_item_once_in_order(sizes, target, max_items, min_bins) -> None:
    bins = pack_in_order(sizes, target_bytes=target, max_items=max_items, min_bins=min_bins)
    assert [i for b in bins for i in b] == list(range(len(sizes)))
    limit = min(target, max(1, -(-sum(max(s, 1) for s in sizes) // min_bins)))
    for b in bins:
        assert 0 < len(b) <= max_items
        assert len(b) == 1 or sum(max(sizes[i], 1) for i in b) <= limit


def test_tally_counts_bytes_and_extrapolates_an_eta() -> None:
    now = [100.0]
    tally = Tally(4, 4000, clock=lambda: now[0])
    now[0] = 110.0
    assert tally.add(1000) == "[1/4, 1.0 KB of 4.0 KB, ETA 30s]"
    now[0] = 130.0
    assert tally.add(1000) == "[2/4, 2.0 KB of 4.0 KB, ETA 30s]"
    assert tally.add(0) == "[3/4, 2.0 KB of 4.0 KB, ETA 30s]"
    assert tally.add(2000) == "[4/4, 4.0 KB of 4.0 KB, ETA 0s]"


def test_tally_has_no_eta_before_5_percent_of_the_bytes_and_words_long_ones_in_minutes() -> None:
    now = [0.0]
    tally = Tally(4, 10_000, clock=lambda: now[0])
    assert "ETA" not in tally.add(0)
    now[0] = 10.0
    assert tally.add(499) == "[2/4, 499 B of 10.0 KB]"  # the first tasks' start-up would make it absurd
    now[0] = 100.0
    assert tally.add(501).endswith("ETA 15m00s]")
