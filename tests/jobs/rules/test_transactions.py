"""Offline transaction and producer state (the .txnindex and producer-snapshot substitutes)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from jobs.rules.cleaner import key_hash_table
from jobs.rules.transactions import (
    AbortedTxns,
    TxnState,
    derive_txn_state,
    summarize_batches,
)
from segment_io.decode import hash_keys
from segment_io.schema import BATCH_SCHEMA
from tests.support.builders import LogBuilder, rec

T0 = 1_000_000


def state_of(log: LogBuilder, *, now: int = T0 + 100, expiration: int = 86_400_000,
             empties: pa.Table | None = None, split_segments: bool = True) -> TxnState:
    table = log.table()
    kh = key_hash_table(table, hash_keys(table.column("key")))
    if split_segments:  # one table per segment, as the decoder yields them
        seg = table.column("segment_base_offset").to_numpy()
        tables = [kh.filter(pa.array(seg == s)) for s in np.unique(seg)]
    else:
        tables = [kh]
    return derive_txn_state(summarize_batches(tables, empty_batches=empties), now_ms=now,
                            producer_id_expiration_ms=expiration)


def test_aborted_and_committed_transactions_with_their_ranges():
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(b"a", b"1"), rec(b"b", b"1")])  # 0-1
    log.txn_batch(2, 0, [rec(b"c", b"1")])  # 2
    log.txn_batch(1, 0, [rec(b"d", b"1")])  # 3
    log.abort(1, 0)  # 4
    log.commit(2, 0)  # 5
    log.txn_batch(1, 0, [rec(b"e", b"1")])  # 6
    log.abort(1, 0)  # 7
    s = state_of(log)
    assert list(zip(s.aborted.producer_id.tolist(), s.aborted.first_offset.tolist(), s.aborted.last_offset.tolist())) \
        == [(1, 0, 4), (1, 6, 7)]
    assert s.completed.markers_with_data().tolist() == [4, 5, 7]
    assert s.first_unstable_offset is None
    # which data batches are aborted: pid 1's batches before each abort marker, not pid 2's
    assert s.aborted.contains(np.array([1, 2, 1, 1, 1]), np.array([1, 2, 3, 6, 8])).tolist() == [
        True, False, True, True, False]


def test_item15_17_marker_in_a_later_segment_than_its_data():
    # items 15 and 17: the transaction's data are in segment 0, its marker in segment 2
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(b"a", b"1")])  # 0
    log.roll()
    log.batch([rec(b"z", b"1")])  # 1
    log.roll()
    log.abort(1, 0)  # 2
    s = state_of(log)
    assert s.aborted.first_offset.tolist() == [0] and s.aborted.last_offset.tolist() == [2]


def test_marker_without_data_opens_and_closes_nothing():
    log = LogBuilder()
    log.commit(1, 0)  # 0: its transaction was cleaned away
    log.abort(1, 0)  # 1
    s = state_of(log)
    assert len(s.completed) == 0 and len(s.aborted) == 0


def test_item20_open_transactions_and_first_unstable_offset():
    # item 20 [A]: the earliest open transaction's first offset; a later open one does not lower it
    log = LogBuilder()
    log.batch([rec(b"a", b"1")])  # 0
    log.txn_batch(3, 0, [rec(b"b", b"1")])  # 1 open
    log.txn_batch(2, 0, [rec(b"c", b"1")])  # 2 committed below
    log.txn_batch(3, 0, [rec(b"b", b"2")])  # 3 same open txn
    log.commit(2, 0)  # 4
    log.txn_batch(4, 0, [rec(b"d", b"1")])  # 5 open
    s = state_of(log)
    assert sorted(zip(s.open_producer_ids.tolist(), s.open_first_offsets.tolist())) == [(3, 1), (4, 5)]
    assert s.first_unstable_offset == 1


def test_item22_active_producers_last_data_offset_and_epoch():
    # item 22 [A]: last data offset per producer; a marker with a bumped epoch forgets the data (fencing)
    log = LogBuilder()
    log.batch([rec(b"a", b"1")], pid=1, epoch=0, base_sequence=0)  # 0
    log.batch([rec(b"a", b"2")], pid=1, epoch=0, base_sequence=1)  # 1
    log.txn_batch(2, 0, [rec(b"b", b"1")])  # 2
    log.abort(2, 1)  # 3: coordinator aborts with a bumped epoch
    log.txn_batch(5, 0, [rec(b"c", b"1")])  # 4
    log.commit(5, 0)  # 5: same epoch: the data batch stays the last data offset
    s = state_of(log)
    active = dict(zip(s.active.producer_id.tolist(), zip(s.active.producer_epoch.tolist(),
                                                         s.active.last_data_offset.tolist())))
    assert active == {1: (0, 1), 2: (1, -1), 5: (0, 4)}
    # Kafka's isBatchLastRecordOfProducer for each batch of the log
    pids = np.array([1, 1, 2, 2, 5, 5])
    lasts = np.array([0, 1, 2, 3, 4, 5])
    epochs = np.array([0, 0, 0, 1, 0, 0])
    control = np.array([False, False, False, True, False, True])
    assert s.active.is_last_batch(pids, lasts, epochs, control).tolist() == [False, True, False, True, True, False]


def test_item22_expiry_uses_the_newest_batch_timestamp_and_spares_open_transactions():
    log = LogBuilder()
    log.batch([rec(b"a", b"1", timestamp=1_000)], pid=1, epoch=0)  # 0: old
    log.batch([rec(b"a", b"2", timestamp=5_000)], pid=2, epoch=0)  # 1: younger
    log.txn_batch(3, 0, [rec(b"b", b"1", timestamp=1_000)])  # 2: old but open
    s = state_of(log, now=6_000, expiration=2_000)
    assert s.active.producer_id.tolist() == [2, 3]
    s = state_of(log, now=6_999, expiration=2_000)  # 6_999 - 5_000 < 2_000: producer 2 still active
    assert 2 in s.active.producer_id.tolist()
    s = state_of(log, now=7_000, expiration=2_000)  # exactly at expiry: gone (Kafka's >=)
    assert s.active.producer_id.tolist() == [3]


def test_empty_batches_count_as_batches_but_empty_markers_do_not():
    # an empty transactional data batch (kept by an earlier clean) still opens the transaction its marker closes;
    # an empty control batch changes nothing (ProducerAppendInfo skips it)
    log = LogBuilder()
    log.batch([rec(b"z", b"1")])  # 0
    log.abort(1, 0, base_offset=None)  # 1
    empties = pa.Table.from_pylist([
        {"batch_base_offset": 2, "batch_last_offset": 3, "batch_position": 0, "batch_size": 61,
         "batch_base_timestamp": -1, "batch_max_timestamp": T0, "timestamp_type": 0, "magic": 2, "codec": 0,
         "transactional": True, "control": False, "producer_id": 1, "producer_epoch": 0, "base_sequence": 0,
         "partition_leader_epoch": 0, "delete_horizon_ms": None, "segment_base_offset": 0},
        {"batch_base_offset": 4, "batch_last_offset": 4, "batch_position": 1, "batch_size": 61,
         "batch_base_timestamp": -1, "batch_max_timestamp": T0, "timestamp_type": 0, "magic": 2, "codec": 0,
         "transactional": True, "control": True, "producer_id": 1, "producer_epoch": 0, "base_sequence": -1,
         "partition_leader_epoch": 0, "delete_horizon_ms": None, "segment_base_offset": 0},
    ], schema=BATCH_SCHEMA)
    more = LogBuilder(start_offset=5).abort(1, 0)  # 5
    table = pa.concat_tables([log.table(), more.table()])
    kh = key_hash_table(table, hash_keys(table.column("key")))
    summary = summarize_batches([kh], empty_batches=empties)
    assert summary.base_offset.tolist() == [0, 1, 2, 4, 5]
    assert summary.record_count.tolist() == [1, 1, 0, 0, 1]
    s = derive_txn_state(summary, now_ms=T0 + 10)
    assert list(zip(s.aborted.first_offset.tolist(), s.aborted.last_offset.tolist())) == [(2, 5)]
    assert s.active.last_data_offset.tolist() == [3]


def test_unknown_control_types_neither_open_nor_close():
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(b"a", b"1")])  # 0
    log.marker(1, 0, 2)  # 1: LEADER_CHANGE-like control record
    s = state_of(log)
    assert s.first_unstable_offset == 0 and len(s.completed) == 0


def test_aborted_txns_of_plain_sequences_sorts():
    a = AbortedTxns.of([2, 1], [10, 5], [20, 8])
    assert a.producer_id.tolist() == [1, 2]
    assert a.contains(np.array([2, 2, 1]), np.array([15, 20, 7])).tolist() == [True, False, True]
    assert TxnState.empty().first_unstable_offset is None


def test_summary_from_headers_agrees_with_the_record_level_summary(kafka_real, tmp_path):
    """The scan builds producer/transaction state from batch headers (decoding only control batches); it must
    give the replay the same inputs as the record-level summary, on real logs and generated transactional ones."""
    import glob

    from jobs.engine.scan import empty_batches_from_headers
    from jobs.rules.transactions import summarize_batches, summarize_headers
    from segment_io.decode import decode_key_hashes_bytes
    from segment_io.format import scan_batches
    from segment_io.generate import GenerateSpec, generate_log_dir

    generate_log_dir(GenerateSpec(topics=("t",), partitions=1, records=6000, transactional_share=0.4,
                                  aborted_share=0.5, segment_bytes=100_000), tmp_path)
    files = sorted(glob.glob(str(kafka_real / "**" / "*.log"), recursive=True)) + sorted(
        glob.glob(str(tmp_path / "*" / "*.log")))
    compared = 0
    for f in files:
        data = open(f, "rb").read()
        h = scan_batches(data)
        if h.truncated_tail or not len(h):
            continue
        by_headers = summarize_headers([(h, data)])
        by_records = summarize_batches([decode_key_hashes_bytes(data)],
                                       empty_batches=empty_batches_from_headers(h, 0))
        markers = by_records.control & (by_records.record_count > 0)
        for name in by_records.__dataclass_fields__:
            ours, theirs = getattr(by_headers, name), getattr(by_records, name)
            if name == "marker_timestamp":  # only meaningful for markers (the replay reads it nowhere else)
                ours, theirs = ours[markers], theirs[markers]
            assert np.array_equal(ours, theirs), (f, name)
        compared += 1
    assert compared > 40
