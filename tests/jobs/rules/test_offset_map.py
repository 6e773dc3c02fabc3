"""The bounded offset map: Kafka's buildOffsetMap rules (kafka-behaviours items 31-33) and the hash table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.rules.cleaner import key_hash_table
from jobs.rules.offset_map import (
    BYTES_PER_ENTRY,
    LOAD_FACTOR,
    OffsetMap,
    build_offset_map,
    max_keys_for_buffer,
)
from jobs.rules.transactions import AbortedTxns, derive_txn_state, summarize_batches
from segment_io.decode import hash_keys
from segment_io.errors import ConfigError
from tests.support.builders import LogBuilder, rec, tombstone


def k(i: int) -> bytes:
    return str(i).encode()


def kh_of(table: pa.Table) -> pa.Table:
    return key_hash_table(table, hash_keys(table.column("key")))


def segments(table: pa.Table) -> list[pa.Table]:
    """One key-hash table per source segment, as the decoder yields them."""
    kh = kh_of(table)
    seg = table.column("segment_base_offset").to_numpy()
    return [kh.filter(pa.array(seg == s)) for s in np.unique(seg)]


def lookup(result, table: pa.Table, keys: list[bytes]) -> list[int]:
    hi, lo = hash_keys(pa.array(keys, pa.binary()))
    return result.offset_map.get(hi, lo).tolist()


def test_capacity_follows_kafka_slots_times_load_factor():
    # Kafka: slots = memory / 24 (MD5's 16 bytes + an 8-byte offset); full at (slots * 0.9).toInt, 0.9 being
    # CleanerConfig.LOG_CLEANER_DEDUPE_BUFFER_LOAD_FACTOR
    assert LOAD_FACTOR == 0.9
    assert max_keys_for_buffer(3 * BYTES_PER_ENTRY) == 2  # 2.7
    assert max_keys_for_buffer(128 * 1024 * 1024) == 5_033_164  # 5,592,405 slots
    assert max_keys_for_buffer(300_000) == 11_250  # the demo's map: 12,500 slots
    assert max_keys_for_buffer(300_000, load_factor=0.75) == 9_375  # what Kafka's cleaner tests pass
    with pytest.raises(ConfigError):
        max_keys_for_buffer(BYTES_PER_ENTRY)  # 1 slot * 0.9 -> 0 keys: no progress possible


def test_item31_build_offset_map_over_ranges():
    # item 31 (testBuildOffsetMap): keys i at offset i over three segments; each range maps exactly its keys
    log = LogBuilder()
    for seg in range(4):
        for i in range(seg * 25, seg * 25 + 25):
            log.batch([rec(k(i), k(i))])
        log.roll()
    table = log.table()
    for start, end in ((0, 25), (25, 75), (75, 100)):
        result = build_offset_map(segments(table), start_offset=start, end_offset=end, aborted=AbortedTxns.empty(),
                                  max_keys=1000)
        assert result.end_offset == end and not result.full
        assert result.offset_map.size == end - start
        assert lookup(result, table, [k(i) for i in range(start, end)]) == list(range(start, end))
        assert lookup(result, table, [k(start - 1), k(end)]) == [-1, -1]
        assert result.records_read == end - start


def test_item31_sparse_offsets_follow_the_real_last_offset():
    # item 31 (testBuildOffsetMapFakeLarge): two keys at offsets 0 and 7206178
    log = LogBuilder()
    log.batch([rec(k(0), b"a", offset=0)]).batch([rec(k(1), b"b", offset=7_206_178)])
    table = log.table()
    result = build_offset_map([kh_of(table)], start_offset=0, end_offset=7_206_179, aborted=AbortedTxns.empty(),
                              max_keys=1000)
    assert result.latest_offset == 7_206_178
    assert lookup(result, table, [k(0), k(1)]) == [0, 7_206_178]


def test_item32_partial_map_stops_where_kafka_stops():
    # item 32 (testBuildPartialOffsetMap): a 2-key map from offset 2 over keys 0..4 maps 2 and 3 only
    log = LogBuilder()
    for i in range(5):
        log.batch([rec(k(i), k(i))])
    table = log.table()
    result = build_offset_map([kh_of(table)], start_offset=2, end_offset=1 << 40, aborted=AbortedTxns.empty(),
                              max_keys=2)
    assert result.full
    assert result.offset_map.size == 2
    assert lookup(result, table, [k(0), k(2), k(3), k(4)]) == [-1, 2, 3, -1]
    assert result.end_offset == 4


def test_item32_full_map_inside_a_batch_ends_after_the_last_mapped_record():
    # Kafka stops at the record that does not fit: inside a batch, latestOffset is the last record put.
    log = LogBuilder()
    log.batch([rec(k(0), b"x"), rec(k(1), b"x"), rec(None, b"keyless"), rec(k(2), b"x")])
    result = build_offset_map([kh_of(log.table())], start_offset=0, end_offset=4, aborted=AbortedTxns.empty(),
                              max_keys=2)
    assert result.full and result.latest_offset == 1


def test_item33_latest_offset_passes_trailing_gaps():
    # item 33: when the map does not fill, the pass reaches end - 1 even past the last real offset
    log = LogBuilder()
    log.batch([rec(k(0), b"a")]).batch([rec(k(1), b"b")])
    result = build_offset_map([kh_of(log.table())], start_offset=0, end_offset=50, aborted=AbortedTxns.empty(),
                              max_keys=10)
    assert result.end_offset == 50


def test_aborted_control_and_keyless_records_are_not_mapped():
    # items 14/19/6: an aborted value must not shadow the live one; markers and keyless records are skipped
    log = LogBuilder()
    log.batch([rec(b"a", b"live")])  # 0
    log.txn_batch(1, 0, [rec(b"a", b"aborted")])  # 1
    log.abort(1, 0)  # 2
    log.batch([rec(None, b"keyless")])  # 3
    log.batch([tombstone(b"b")])  # 4: tombstones are mapped like values
    table = log.table()
    state = derive_txn_state(summarize_batches([kh_of(table)]), now_ms=0)
    result = build_offset_map([kh_of(table)], start_offset=0, end_offset=5, aborted=state.aborted, max_keys=10)
    assert lookup(result, table, [b"a", b"b"]) == [0, 4]
    assert result.offset_map.size == 2


@given(st.lists(st.integers(0, 300), min_size=1, max_size=400), st.integers(1, 50))
def test_hash_table_agrees_with_a_dict(key_ids, capacity):
    # the compiled table against the obvious model, including probe chains at full load
    hi = np.asarray([i * 7919 - 1000 for i in key_ids], np.int64)
    lo = np.asarray([i % 3 for i in key_ids], np.int64)  # many equal lo halves: exercises probing
    offs = np.arange(len(key_ids), dtype=np.int64)
    omap = OffsetMap(capacity)
    stop, _, _ = omap._put_run(hi, lo, offs, offs, np.ones(len(offs), bool))
    model: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(hi.tolist(), lo.tolist())):
        if len(model) >= capacity:
            assert stop == i
            break
        model[key] = i
    else:
        assert stop == -1
    probe_hi = np.asarray([h for h, _ in model] + [123456789], np.int64)
    probe_lo = np.asarray([lo for _, lo in model] + [5], np.int64)
    assert omap.get(probe_hi, probe_lo).tolist() == list(model.values()) + [-1]
    assert omap.size == len(model)


def _runs_of(keys: np.ndarray, first_offset: int, run: int):
    """Key-hash inputs of ``OffsetMap._put_run`` in runs of ``run`` records, offsets from ``first_offset``."""
    for start in range(0, len(keys), run):
        chunk = keys[start:start + run]
        offsets = np.arange(first_offset + start, first_offset + start + len(chunk), dtype=np.int64)
        yield chunk, offsets


@pytest.mark.parametrize("max_keys", [50_000, 7_000])
def test_the_table_grows_with_the_keys_and_fills_at_max_keys_alone(max_keys: int) -> None:
    # 20,000 distinct keys (many times the table's first size), each written twice, in runs of 3,000 records
    rng = np.random.default_rng(5)
    hi = rng.integers(-(2**62), 2**62, 20_000)
    lo = rng.integers(-(2**62), 2**62, 20_000)
    order = np.concatenate([np.arange(20_000), rng.permutation(20_000)])
    omap = OffsetMap(max_keys)
    first_slots = omap.slots
    latest: dict[int, int] = {}
    stopped = None
    for chunk, offsets in _runs_of(order, 0, 3_000):
        stop, _, _ = omap._put_run(hi[chunk], lo[chunk], offsets, offsets, np.ones(len(chunk), bool))
        end = len(chunk) if stop < 0 else stop
        for key, off in zip(chunk[:end], offsets[:end]):
            latest[int(key)] = int(off)
        if stop >= 0:
            stopped = int(offsets[stop])
            break
    assert omap.slots > first_slots
    assert omap.size == len(latest) == min(max_keys, 20_000)
    # the full map stops at the first record of a new key once max_keys are mapped, as the fixed table did
    assert (stopped is not None) == (max_keys < 20_000)
    if stopped is not None:
        assert stopped == max_keys and omap.slots <= max(max_keys + 1, int(np.ceil(max_keys / LOAD_FACTOR)))
    keys = np.array(sorted(latest))
    assert omap.get(hi[keys], lo[keys]).tolist() == [latest[int(k)] for k in keys]
    missing = np.setdiff1d(np.arange(20_000), keys)[:100]
    assert (omap.get(hi[missing], lo[missing]) == -1).all()


def test_the_map_columns_of_decoded_records_are_those_of_the_key_hash_pass(tmp_path) -> None:
    """``record_map_columns`` (a segment's full decode and its keys' hashes) gives what the key-hash decode gives
    the map, and ``key_hash_table`` of the same the whole KEY_HASH_SCHEMA table (what a memory-first task hands
    to external-sort): on v2 segments with transactions, aborts, markers, tombstones, headers and zstd, and on a
    legacy (magic 1) one."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from jobs.rules.offset_map import _MAP_COLUMNS, record_map_columns
    from segment_io.decode import decode_key_hashes_bytes, decode_segment_and_headers
    from segment_io.generate import GenerateSpec, generate_log_dir

    generate_log_dir(GenerateSpec(partitions=1, records=1200, segment_bytes=16 << 10, codec=4, tombstone_share=0.1,
                                  transactional_share=0.4, aborted_share=0.4, headers=True, seed=3), str(tmp_path))
    segments = [p.read_bytes() for p in sorted(tmp_path.rglob("*.log"))]
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(6):
        legacy.append(i, timestamp=1_000 + i, key=None if i == 2 else k(i % 3), value=None if i == 4 else b"v")
    segments.append(bytes(legacy.build()))
    for data in segments:
        expected = decode_key_hashes_bytes(data, allow_truncated_tail=True)
        records, _ = decode_segment_and_headers(data, allow_truncated_tail=True, value_refs=True)
        hashes = hash_keys(records.column("key"))
        cols = record_map_columns(records, hashes)
        assert sorted(cols) == sorted(_MAP_COLUMNS)
        for name in _MAP_COLUMNS:
            assert np.array_equal(cols[name], expected.column(name).to_numpy()), name
        assert key_hash_table(records, hashes).equals(expected)
    assert any(expected.column("control").to_numpy().any() for expected in
               (decode_key_hashes_bytes(d, allow_truncated_tail=True) for d in segments))
