"""Index rebuild, readers and sanity checks, against real broker-written index files.

The rebuild follows Kafka's per-batch recovery. Where a broker's files differ from a recovery, the test
states why and proves it: an independent, loop-per-batch restatement of Kafka's *append* path
(:func:`kafka_append_model`) fed with that reason reproduces the broker's bytes exactly, and the same model
without the reason reproduces our rebuild exactly.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segment_io.errors import CorruptIndexError, CorruptRecordError
from segment_io.format import (
    ATTR_CODEC_MASK,
    ATTR_TIMESTAMP_TYPE,
    BatchHeaders,
    scan_batches,
)
from segment_io.index import (
    AbortedTxn,
    build_offset_and_time_index,
    check_indexes,
    encode_txn_index,
    largest_timestamp,
    read_offset_index,
    read_time_index,
    read_txn_index,
)

# --------------------------------------------------------------------------------------------------
# An independent model of LogSegment.append / close, one batch per append
# --------------------------------------------------------------------------------------------------


def kafka_append_model(headers: BatchHeaders, base: int, interval: int = 4096, *,
                       restart_after_offsets: frozenset[int] = frozenset(),
                       max_ts_offset: Callable[[int], int] | None = None) -> tuple[bytes, bytes]:
    """What a broker writes when each batch arrives in its own append.

    ``restart_after_offsets``: the broker closed the segment after the batch ending at one of these offsets
    (close appends the max timestamp so far to the time index) and reopened it (a new LogSegment object
    starts counting bytes since the last index entry from 0). ``max_ts_offset(row)``: the offset the append
    reports for the batch's max timestamp (recovery and Kafka >= 3.8 use the batch's last offset).
    """
    oi, ti = bytearray(), bytearray()
    last_ti_ts = -1
    max_ts, max_off = -1, base
    since = 0

    def maybe_time() -> None:
        nonlocal last_ti_ts
        if max_ts > last_ti_ts:
            ti.extend(struct.pack(">qi", max_ts, max_off - base))
            last_ti_ts = max_ts

    for i in range(len(headers)):
        if int(headers.max_timestamp[i]) > max_ts:
            max_ts = int(headers.max_timestamp[i])
            max_off = max_ts_offset(i) if max_ts_offset else int(headers.last_offset[i])
        if since > interval:
            oi.extend(struct.pack(">ii", int(headers.last_offset[i]) - base, int(headers.position[i])))
            maybe_time()
            since = 0
        since += int(headers.size[i])
        if int(headers.last_offset[i]) in restart_after_offsets:
            maybe_time()
            since = 0
    maybe_time()
    return bytes(oi), bytes(ti)


def record_offset_of_max_timestamp(log: bytes, headers: BatchHeaders) -> Callable[[int], int]:
    """Kafka < 3.8 leader appends of uncompressed CreateTime batches (``assignOffsetsNonCompressed``)
    report the offset of the first *record* holding the batch's max timestamp, not the batch's last offset.
    Records are read with kafka-python, an independent decoder."""
    from kafka.record.default_records import DefaultRecordBatch

    def offset(row: int) -> int:
        attrs = int(headers.attributes[row])
        if headers.magic[row] != 2 or attrs & ATTR_CODEC_MASK or attrs & ATTR_TIMESTAMP_TYPE:
            return int(headers.last_offset[row])
        start = int(headers.position[row])
        batch = DefaultRecordBatch(log[start:start + int(headers.size[row])])
        best_ts, best_off = -1, int(headers.last_offset[row])
        for rec in batch:
            if rec.timestamp > best_ts:
                best_ts, best_off = rec.timestamp, rec.offset
        return best_off

    return offset


# --------------------------------------------------------------------------------------------------
# Real fixtures
# --------------------------------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "data" / "kafka-real"


def _segments_with_indexes() -> list[str]:
    found = []
    for log in sorted(FIXTURES.rglob("*.log")):
        if log.with_suffix(".index").exists() and log.with_suffix(".timeindex").exists():
            found.append(str(log.relative_to(FIXTURES)))
    return found


#: Broker index files that are not what a recovery writes, and why (each proven by the model below).
PRE_3_8_RECORD_OFFSET = "Confluent 7.6 = Kafka 3.6 leader: time index holds the record offset of the max timestamp"
RESTART = "broker restarted mid-segment: close/recovery time entry, then byte counter restarted at 0"
DIFFERS: dict[str, tuple[str, frozenset[int]]] = {
    # Uncompressed multi-record batches whose max-timestamp record is not the batch's last record.
    "rjmfernandes-cp7.6-kraft-lz4/data/promotions-0/00000000000000000000.log": (PRE_3_8_RECORD_OFFSET, frozenset()),
    "rjmfernandes-cp7.6-kraft-lz4/data/orders-0/00000000000000000000.log": (PRE_3_8_RECORD_OFFSET, frozenset()),
    "rjmfernandes-cp7.6-kraft-lz4/data/loyalty_levels-0/00000000000000000000.log": (PRE_3_8_RECORD_OFFSET,
                                                                                     frozenset()),
    # The segment was closed (or recovered) when it ended at these offsets, then appended to again. For
    # sagarrao1 the restart is where partitionLeaderEpoch goes from 0 to 3 (offset 450).
    "itumelengmogase-ksqldb-txn-state/kafka-data/__consumer_offsets-29/00000000000000000000.log": (
        RESTART, frozenset({38})),
    "itumelengmogase-ksqldb-txn-state/kafka-data/_schemas-0/00000000000000000000.log": (RESTART, frozenset({37})),
    "sagarrao1-multibroker-epochs/MultiNode/kafka-logs-2/my_topic-0/00000000000000000000.log": (
        RESTART, frozenset({449})),
}


def _load(rel: str) -> tuple[bytes, BatchHeaders, int, bytes, bytes]:
    log = FIXTURES / rel
    data = log.read_bytes()
    return (data, scan_batches(data, path=str(log)), int(log.name[:20]), log.with_suffix(".index").read_bytes(),
            log.with_suffix(".timeindex").read_bytes())


def test_fixtures_have_clean_shutdown_indexes(kafka_real: Path) -> None:
    segments = _segments_with_indexes()
    assert len(segments) >= 20
    assert set(DIFFERS) <= set(segments)
    # at least one non-trivial index (several entries) matches exactly
    assert any((FIXTURES / s).with_suffix(".index").stat().st_size >= 80 for s in segments if s not in DIFFERS)


@pytest.mark.parametrize("rel", [s for s in _segments_with_indexes() if s not in DIFFERS])
def test_rebuild_matches_broker_bytes(rel: str) -> None:
    _, headers, base, index, timeindex = _load(rel)
    built_index, built_timeindex = build_offset_and_time_index(headers, segment_base_offset=base)
    assert built_index == index
    assert built_timeindex == timeindex
    # the independent model agrees as well: for these files append and recovery coincide
    assert kafka_append_model(headers, base) == (index, timeindex)


@pytest.mark.parametrize("rel", sorted(DIFFERS))
def test_documented_differences_are_exactly_explained(rel: str) -> None:
    data, headers, base, index, timeindex = _load(rel)
    reason, restarts = DIFFERS[rel]
    rebuilt = build_offset_and_time_index(headers, segment_base_offset=base)
    assert rebuilt != (index, timeindex)
    # our rebuild is exactly Kafka's recovery (the model without the documented circumstance) ...
    assert kafka_append_model(headers, base) == rebuilt
    # ... and the documented circumstance alone turns it into the broker's bytes
    if reason == PRE_3_8_RECORD_OFFSET:
        explained = kafka_append_model(headers, base, max_ts_offset=record_offset_of_max_timestamp(data, headers))
        assert rebuilt[0] == index  # the offset index is unaffected
    else:
        explained = kafka_append_model(headers, base, restart_after_offsets=restarts)
    assert explained == (index, timeindex)
    # the broker's files are sound all the same
    assert check_indexes(headers, index, timeindex, path=str(FIXTURES / rel), segment_base_offset=base) == []


@pytest.mark.parametrize("rel", _segments_with_indexes())
def test_sanity_checks_pass_on_every_fixture_index(rel: str) -> None:
    _, headers, base, index, timeindex = _load(rel)
    assert check_indexes(headers, index, timeindex, path=str(FIXTURES / rel), segment_base_offset=base) == []


# --------------------------------------------------------------------------------------------------
# Rebuild rules on synthetic headers
# --------------------------------------------------------------------------------------------------


def make_headers(sizes: list[int], last_deltas: list[int], max_ts: list[int], *, base: int = 0,
                 gaps: list[int] | None = None) -> BatchHeaders:
    """Headers of v2 batches laid end to end; ``last_deltas`` = records per batch - 1."""
    n = len(sizes)
    position = np.cumsum([0] + list(sizes))[:-1].astype(np.int64)
    gaps = gaps or [0] * n
    base_offset = np.empty(n, np.int64)
    nxt = base
    for i in range(n):
        base_offset[i] = nxt + gaps[i]
        nxt = base_offset[i] + last_deltas[i] + 1
    z = np.zeros(n)
    return BatchHeaders(
        position=position, size=np.asarray(sizes, np.int32), base_offset=base_offset,
        last_offset=base_offset + np.asarray(last_deltas, np.int64), magic=np.full(n, 2, np.int8),
        attributes=z.astype(np.int16), base_timestamp=np.asarray(max_ts, np.int64),
        max_timestamp=np.asarray(max_ts, np.int64), producer_id=np.full(n, -1, np.int64),
        producer_epoch=np.full(n, -1, np.int16), base_sequence=np.full(n, -1, np.int32),
        partition_leader_epoch=z.astype(np.int32), record_count=np.asarray(last_deltas, np.int32) + 1,
        crc=z.astype(np.uint32))


def _entries(oi: bytes, ti: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    o, t = read_offset_index(oi), read_time_index(ti)
    return (list(zip(o.relative_offset.tolist(), o.position.tolist())),
            list(zip(t.timestamp.tolist(), t.relative_offset.tolist())))


def test_entry_records_batch_last_offset_and_start_position() -> None:
    # 3000-byte batches: bytes before batch 2 are 6000 > 4096 -> entry; then 3000, 6000 since the last one.
    h = make_headers([3000] * 5, [4, 4, 4, 4, 4], [10, 20, 30, 40, 50], base=100)
    oi, ti = build_offset_and_time_index(h, segment_base_offset=100)
    offsets, times = _entries(oi, ti)
    assert offsets == [(14, 6000), (24, 12000)]
    # a time entry with each offset entry; the final close entry (50 again) is not strictly greater
    assert times == [(30, 14), (50, 24)]


def test_interval_comparison_is_strict() -> None:
    exactly = make_headers([4096, 10], [0, 0], [1, 2])
    above = make_headers([4097, 10], [0, 0], [1, 2])
    assert build_offset_and_time_index(exactly, segment_base_offset=0)[0] == b""
    assert _entries(*build_offset_and_time_index(above, segment_base_offset=0))[0] == [(1, 4097)]


def test_time_index_keeps_first_batch_reaching_the_max_and_skips_equal_timestamps() -> None:
    # batch 1 reaches 500 first; batch 2 ties (not greater) so the shallow offset stays at batch 1
    h = make_headers([5000, 5000, 5000, 5000], [1, 1, 1, 1], [100, 500, 500, 400])
    offsets, times = _entries(*build_offset_and_time_index(h, segment_base_offset=0))
    assert offsets == [(3, 5000), (5, 10000), (7, 15000)]
    assert times == [(500, 3)]


def test_no_timestamps_means_empty_time_index() -> None:
    h = make_headers([5000, 5000, 5000], [0, 0, 0], [-1, -1, -1])
    oi, ti = build_offset_and_time_index(h, segment_base_offset=0)
    assert len(read_offset_index(oi)) == 2 and ti == b""


def test_empty_log_gives_empty_indexes() -> None:
    assert build_offset_and_time_index(make_headers([], [], []), segment_base_offset=7) == (b"", b"")


def test_offset_not_representable_relative_to_base_is_refused() -> None:
    h = make_headers([100, 100], [0, 0], [1, 2], base=10)
    with pytest.raises(CorruptRecordError) as e:
        build_offset_and_time_index(h, segment_base_offset=11)
    assert e.value.position == 0 and e.value.offset == 10
    huge = make_headers([100, 100], [0, 0], [1, 2], base=0, gaps=[0, 1 << 31])
    with pytest.raises(CorruptRecordError) as e:
        build_offset_and_time_index(huge, segment_base_offset=0)
    assert e.value.position == 100


@given(st.lists(st.tuples(st.integers(70, 3000), st.integers(0, 20), st.integers(-1, 50), st.integers(0, 3)),
                min_size=0, max_size=60),
       st.sampled_from([0, 1, 100, 4096]), st.integers(0, 1 << 40))
def test_rebuild_equals_the_loop_model(batches, interval: int, base: int) -> None:
    sizes, deltas, ts, gaps = (list(c) for c in zip(*batches)) if batches else ([], [], [], [])
    h = make_headers(sizes, deltas, ts, base=base, gaps=gaps)
    built = build_offset_and_time_index(h, segment_base_offset=base, index_interval_bytes=interval)
    assert built == kafka_append_model(h, base, interval)
    assert check_indexes(h, *built, path="x.log", segment_base_offset=base) == []


# --------------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------------


def test_readers_drop_the_preallocated_zero_tail() -> None:
    h = make_headers([5000] * 4, [0] * 4, [10, 20, 30, 40])
    oi, ti = build_offset_and_time_index(h, segment_base_offset=0)
    live_oi, live_ti = oi + bytes(8 * 100), ti + bytes(12 * 100)
    assert _entries(live_oi, live_ti) == _entries(oi, ti)
    assert len(read_offset_index(bytes(80))) == 0 and len(read_time_index(bytes(120))) == 0
    assert check_indexes(h, live_oi, live_ti, path="a/00000000000000000000.log", segment_base_offset=0) == []


def test_readers_refuse_sizes_that_are_not_whole_entries() -> None:
    with pytest.raises(CorruptIndexError) as e:
        read_offset_index(bytes(20), path="s.index")
    assert e.value.path == "s.index" and e.value.position == 16
    with pytest.raises(CorruptIndexError) as e:
        read_time_index(bytes(13), path="s.timeindex")
    assert e.value.position == 12


def test_txn_index_round_trip_and_layout() -> None:
    entries = [AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=5),
               AbortedTxn(producer_id=-2, first_offset=30, last_offset=31, last_stable_offset=30)]
    data = encode_txn_index(entries)
    assert len(data) == 68
    # Kafka's AbortedTxn layout: version int16, producerId, firstOffset, lastOffset, lastStableOffset int64
    assert data[:34] == struct.pack(">hqqqq", 0, 7, 10, 20, 5)
    assert read_txn_index(data) == entries
    assert read_txn_index(b"") == [] and encode_txn_index([]) == b""


def test_txn_index_refuses_torn_entries_and_unknown_versions() -> None:
    good = encode_txn_index([AbortedTxn(1, 2, 3, 4)])
    with pytest.raises(CorruptIndexError) as e:
        read_txn_index(good + good[:10], path="t.txnindex")
    assert e.value.position == 34
    with pytest.raises(CorruptIndexError) as e:
        read_txn_index(good + struct.pack(">hqqqq", 1, 1, 9, 9, 9), path="t.txnindex")
    assert e.value.position == 34 and e.value.offset == 9


# --------------------------------------------------------------------------------------------------
# Sanity checks catch corruption, at the right place
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_segment() -> tuple[BatchHeaders, int, bytes, bytes, str]:
    rel = "sagarrao1-multibroker-epochs/MultiNode/kafka-logs-2/my_topic-0/00000000000000000000.log"
    _, h, base, oi, ti = _load(rel)
    return h, base, oi, ti, str(FIXTURES / rel)


def _one(errors: list[CorruptIndexError]) -> CorruptIndexError:
    assert errors, "corruption not detected"
    return errors[0]


def test_entry_past_log_end_is_caught(real_segment) -> None:
    h, base, oi, _ti, path = real_segment
    bad = oi + struct.pack(">ii", int(h.last_offset[-1]) + 5 - base, h.end + 100)
    err = _one(check_indexes(h, bad, None, path=path, segment_base_offset=base))
    assert err.path == path[:-4] + ".index"
    assert err.position == len(oi) and err.offset == int(h.last_offset[-1]) + 5
    assert "outside the log" in err.detail


def test_decreasing_offsets_are_caught(real_segment) -> None:
    h, base, oi, _ti, path = real_segment
    e = np.frombuffer(oi, dtype=[("o", ">i4"), ("p", ">i4")]).copy()
    e["o"][3] = e["o"][1]
    errors = check_indexes(h, e.tobytes(), None, path=path, segment_base_offset=base)
    assert any(x.position == 24 and x.offset == base + int(e["o"][1]) and "does not increase" in x.detail
               for x in errors)


def test_entry_not_at_batch_start_or_wrong_offset_is_caught(real_segment) -> None:
    h, base, oi, _ti, path = real_segment
    e = np.frombuffer(oi, dtype=[("o", ">i4"), ("p", ">i4")]).copy()
    e["p"][2] += 1
    err = _one(check_indexes(h, e.tobytes(), None, path=path, segment_base_offset=base))
    assert err.position == 16 and "not the start of a batch" in err.detail
    e = np.frombuffer(oi, dtype=[("o", ">i4"), ("p", ">i4")]).copy()
    e["o"][4] -= 1
    err = _one(check_indexes(h, e.tobytes(), None, path=path, segment_base_offset=base))
    assert err.position == 32 and err.offset == base + int(e["o"][4]) and "ends at offset" in err.detail


def test_odd_sizes_are_caught(real_segment) -> None:
    h, base, oi, ti, path = real_segment
    errors = check_indexes(h, oi + b"\x01\x02\x03", ti[:-5], path=path, segment_base_offset=base)
    assert [(x.path, x.position) for x in errors] == [(path[:-4] + ".index", len(oi)),
                                                       (path[:-4] + ".timeindex", len(ti) - 12)]


def test_time_index_corruption_is_caught(real_segment) -> None:
    h, base, _oi, ti, path = real_segment
    e = np.frombuffer(ti, dtype=[("t", ">i8"), ("o", ">i4")]).copy()
    e["t"][5] = e["t"][4] - 1
    err = _one(check_indexes(h, None, e.tobytes(), path=path, segment_base_offset=base))
    assert err.path == path[:-4] + ".timeindex" and err.position == 60 and "does not increase" in err.detail
    e = np.frombuffer(ti, dtype=[("t", ">i8"), ("o", ">i4")]).copy()
    e["o"][-1] += 50
    err = _one(check_indexes(h, None, e.tobytes(), path=path, segment_base_offset=base))
    assert err.position == len(ti) - 12 and "past the log's last offset" in err.detail
    e = np.frombuffer(ti, dtype=[("t", ">i8"), ("o", ">i4")]).copy()
    e["t"][2] += 1  # still increasing, but not the timestamp of the batch it names
    err = _one(check_indexes(h, None, e.tobytes(), path=path, segment_base_offset=base))
    assert err.position == 24 and "max timestamp" in err.detail


def test_index_entries_for_an_empty_log_are_caught() -> None:
    empty = make_headers([], [], [])
    errors = check_indexes(empty, struct.pack(">ii", 1, 5000), struct.pack(">qi", 99, 1), path="p/x.log",
                           segment_base_offset=0)
    assert [x.path for x in errors] == ["p/x.index", "p/x.timeindex"]


# --------------------------------------------------------------------------------------------------
# Largest timestamp
# --------------------------------------------------------------------------------------------------


def test_largest_timestamp_from_time_index_headers_or_mtime() -> None:
    h = make_headers([5000] * 3, [0] * 3, [10, 70, 30])
    _, ti = build_offset_and_time_index(h, segment_base_offset=0)
    assert largest_timestamp(ti, None) == 70
    assert largest_timestamp(None, h) == 70
    # an active segment's time index may lag the log: the batches after its last entry count too
    assert largest_timestamp(struct.pack(">qi", 10, 0), h) == 70
    assert largest_timestamp(b"\x00" * 5, h) == 70  # unreadable index: headers decide
    # no timestamps at all: Kafka falls back to the segment file's last-modified time
    none = make_headers([100], [0], [-1])
    assert largest_timestamp(b"", none, last_modified_ms=1234) == 1234
    assert largest_timestamp(None, none) == -1


def test_largest_timestamp_of_real_segments_matches_batch_maximum(kafka_real: Path) -> None:
    for rel in _segments_with_indexes():
        _, h, _, _, ti = _load(rel)
        expected = int(h.max_timestamp.max()) if len(h) else -1
        assert largest_timestamp(ti, None) == expected, rel  # closed segments: last entry is the maximum
