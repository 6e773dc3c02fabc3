"""Several partitions cleaned in one call (``clean_records(partitions=...)`` with one map keyed by partition and
key) decide exactly what a clean of each partition alone decides: kept rows, rewritten headers, statistics."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.rules.cleaner import CleanerInputError, CleanParams, PartitionRows, clean_records, key_hash_table
from jobs.rules.kafka_defaults import PRODUCER_ID_EXPIRATION_MS
from jobs.rules.offset_map import (
    OffsetMapResult,
    build_offset_map,
    build_partitions_offset_map,
    partition_keyed,
    record_map_columns,
)
from jobs.rules.transactions import TxnState, derive_txn_state, summarize_batches
from segment_io.hashing import hash_keys
from tests.support.builders import LogBuilder, rec, tombstone
from tests.support.hypothesis_budget import examples

START = 1_000_000


@st.composite
def partitions(draw) -> dict:
    """One partition's log (v2 data batches: duplicate keys, tombstones with and without a stamped horizon,
    keyless records, idempotent producers) and its round."""
    log = LogBuilder(timestamp=START)
    for _ in range(draw(st.integers(1, 8))):
        pid = draw(st.sampled_from([-1, -1, 7, 9]))
        recs = []
        for _ in range(draw(st.integers(1, 4))):
            key = draw(st.sampled_from([b"a", b"b", b"c", b"d", None]))
            if key is not None and draw(st.integers(0, 3)) == 0:
                recs.append(tombstone(key))
            else:
                recs.append(rec(key, b"v"))
        horizon = draw(st.sampled_from([None, None, START + 50, START + 10_000_000]))
        if horizon is not None and not any(r.value is None for r in recs):
            horizon = None  # Kafka stamps a horizon only on batches that hold a tombstone or a marker
        log.batch(recs, pid=pid, epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                  delete_horizon_ms=horizon)
    table = log.table()
    end = int(table.column("offset").to_numpy()[-1]) + 1
    dirty = draw(st.integers(0, end))
    return {"table": table, "dirty": dirty, "uncleanable": draw(st.integers(dirty, end)),
            "retention": draw(st.sampled_from([0, 1_000, 86_400_000]))}


def alone(p: dict, now: int):
    table = p["table"]
    hashes = hash_keys(table.column("key"))
    txn = derive_txn_state(summarize_batches([key_hash_table(table, hashes)]), now_ms=now,
                           producer_id_expiration_ms=PRODUCER_ID_EXPIRATION_MS)
    omap = build_offset_map([key_hash_table(table, hashes)], start_offset=p["dirty"], end_offset=p["uncleanable"],
                            aborted=txn.aborted, max_keys=1000)
    params = CleanParams(now_ms=now, upper_bound_offset=p["uncleanable"], delete_retention_ms=p["retention"])
    return clean_records(table, offset_map=omap, txn_state=txn, params=params, key_hashes=hashes), txn, omap


def together(parts: list[dict], txns: list[TxnState], now: int, *, max_keys: int = 1000):
    records = pa.concat_tables([p["table"] for p in parts])
    row_part = np.repeat(np.arange(len(parts)), [p["table"].num_rows for p in parts])
    pmap = build_partitions_offset_map(
        record_map_columns(records, hash_keys(records.column("key"))), row_partition=row_part,
        start_offsets=np.array([p["dirty"] for p in parts]), end_offsets=np.array([p["uncleanable"] for p in parts]),
        max_keys=max_keys)
    if pmap is None:
        return None, None
    layout = PartitionRows(row_part, pmap.latest_offset, np.array([p["uncleanable"] for p in parts]),
                           np.array([p["retention"] for p in parts]), txns)
    result = clean_records(records, offset_map=OffsetMapResult(pmap.offset_map, 0, -1, False, 0),
                           txn_state=TxnState.empty(), params=CleanParams(now, 0),
                           key_hashes=(pmap.key_hash_hi, pmap.key_hash_lo), partitions=layout)
    return result, pmap


@settings(max_examples=examples(1.0), deadline=None)
@given(st.lists(partitions(), min_size=2, max_size=5),
       st.integers(START, START + PRODUCER_ID_EXPIRATION_MS + 100))
@pytest.mark.slow
def test_partitions_cleaned_together_decide_what_each_alone_decides(parts, now):
    singles = [alone(p, now) for p in parts]
    result, pmap = together(parts, [s[1] for s in singles], now)
    assert result is not None and pmap is not None
    assert len(result.partitions) == len(parts)
    for p, (single, _, omap), pc in zip(parts, singles, result.partitions):
        assert pmap.latest_offset[parts.index(p)] == omap.latest_offset
        kept = result.records.slice(pc.row_start, pc.row_end - pc.row_start)
        assert kept.equals(single.records), "kept rows and their rewritten headers"
        assert pc.stats == single.stats
        assert pc.changed == single.changed
    assert result.changed == any(s[0].changed for s in singles)
    assert result.stats.records_kept == sum(s[0].stats.records_kept for s in singles)


def test_a_key_of_one_partition_never_shadows_the_same_key_of_another():
    # partition 0 writes k last at offset 1, partition 1 at offset 0: each keeps its own latest value
    p0 = {"table": LogBuilder().batch([rec(b"k", b"old"), rec(b"k", b"new")]).table(), "dirty": 0,
          "uncleanable": 2, "retention": 1000}
    p1 = {"table": LogBuilder(partition=1).batch([rec(b"k", b"only")]).table(), "dirty": 0, "uncleanable": 1,
          "retention": 1000}
    result, _ = together([p0, p1], [TxnState.empty(), TxnState.empty()], START)
    assert result is not None
    assert result.records.column("value").to_pylist() == [b"new", b"only"]
    assert [(pc.row_start, pc.row_end) for pc in result.partitions] == [(0, 1), (1, 2)]


def test_partition_keyed_hashes_differ_between_partitions_and_not_within():
    hi, lo = hash_keys(pa.array([b"k", b"k", b"k"]))
    khi, klo = partition_keyed(hi, lo, np.array([0, 1, 1]))
    assert khi[1] == khi[2] and khi[0] != khi[1]
    assert (klo == lo).all() and khi[0] == hi[0]


def test_a_map_that_could_fill_is_left_to_each_partition():
    p = {"table": LogBuilder().batch([rec(b"a", b"1"), rec(b"b", b"2")]).table(), "dirty": 0, "uncleanable": 2,
         "retention": 0}
    assert together([p, dict(p)], [TxnState.empty()] * 2, START, max_keys=3) == (None, None)


def test_transactional_or_control_rows_are_refused():
    log = LogBuilder().txn_batch(5, 0, [rec(b"a", b"1")]).commit(5, 0)
    p = {"table": log.table(), "dirty": 0, "uncleanable": 2, "retention": 0}
    q = {"table": LogBuilder().batch([rec(b"a", b"1")]).table(), "dirty": 0, "uncleanable": 1, "retention": 0}
    records = pa.concat_tables([q["table"], p["table"]])
    layout = PartitionRows(np.array([0, 1, 1]), np.array([0, 1]), np.array([1, 2]), np.array([0, 0]),
                           [TxnState.empty()] * 2)
    with pytest.raises(CleanerInputError, match="transactional"):
        clean_records(records, offset_map=OffsetMapResult(build_offset_map(
            [], start_offset=0, end_offset=0, aborted=TxnState.empty().aborted, max_keys=10).offset_map, 0, -1,
            False, 0), txn_state=TxnState.empty(), params=CleanParams(START, 0), partitions=layout)


def test_rows_of_a_partition_must_be_contiguous():
    t = LogBuilder().batch([rec(b"a", b"1"), rec(b"b", b"2")]).table()
    records = pa.concat_tables([t, t])
    layout = PartitionRows(np.array([0, 1, 0, 1]), np.array([1, 1]), np.array([2, 2]), np.array([0, 0]),
                           [TxnState.empty()] * 2)
    omap = build_offset_map([], start_offset=0, end_offset=0, aborted=TxnState.empty().aborted, max_keys=10)
    with pytest.raises(CleanerInputError, match="contiguous"):
        clean_records(records, offset_map=omap, txn_state=TxnState.empty(), params=CleanParams(START, 0),
                      partitions=layout)
