"""Kafka's compaction decisions (kafka-behaviours.md items 1-35) on in-memory logs built with LogBuilder.

Each test names the item it pins and the Kafka test it paraphrases. Expected values are worked out from
Kafka's rules by hand (offsets, keys), never copied from this implementation's output.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs.rules.cleaner import (
    CleanerInputError,
    CleanParams,
    clean_records,
    key_hash_table,
    legacy_delete_horizon,
)
from jobs.rules.offset_map import build_offset_map
from jobs.rules.transactions import derive_txn_state, summarize_batches
from segment_io.decode import hash_keys
from segment_io.errors import CorruptRecordError
from segment_io.schema import BATCH_SCHEMA, RECORD_SCHEMA
from tests.support.builders import LogBuilder, control_key, rec, tombstone
from tests.support.cleaning import LogClean, clean_log

RETENTION = 86_400_000  # delete.retention.ms, set explicitly: the horizons below are worked out from it
T0 = 1_000_000  # LogBuilder's first timestamp
NOW = T0 + 1_000  # producers written by LogBuilder are young at NOW
NEVER_EXPIRE = (1 << 63) - 1


def log_end(table: pa.Table, empties: pa.Table | None = None) -> int:
    lasts = table.column("batch_last_offset").to_pylist()
    if empties is not None:
        lasts += empties.column("batch_last_offset").to_pylist()
    return max(lasts) + 1


def clean(table: pa.Table, *, now: int = NOW, dirty: int = 0, end: int | None = None, max_keys: int = 1000,
          empties: pa.Table | None = None, expiration: int = NEVER_EXPIRE, **kw) -> LogClean:
    """One Kafka doClean of the whole log up to ``end`` (default: the log end, as after a roll)."""
    return clean_log(table, now_ms=now, first_dirty_offset=dirty,
                     first_uncleanable_offset=log_end(table, empties) if end is None else end,
                     max_keys=max_keys, empty_batches=empties, key_hashes=hash_keys(table.column("key")),
                     producer_id_expiration_ms=expiration, delete_retention_ms=RETENTION, **kw)


def again(prev: LogClean, **kw) -> LogClean:
    """Clean the output of a previous clean (records plus its header-only batches)."""
    return clean(prev.result.records, empties=prev.result.empty_batches, **kw)


def offsets(lc: LogClean) -> list[int]:
    return lc.result.records.column("offset").to_pylist()


def keys(lc: LogClean) -> list[bytes | None]:
    """Keys of data records (Kafka's keysInLog skips control batches)."""
    t = lc.result.records.filter(pc.invert(lc.result.records.column("control")))
    return t.column("key").to_pylist()


def batch_last_offsets(lc: LogClean) -> list[int]:
    """Last offset of every batch in the cleaned log, empty ones included (Kafka's lastOffsetsPerBatchInLog)."""
    lasts = set(lc.result.records.column("batch_last_offset").to_pylist())
    lasts |= set(lc.result.empty_batches.column("batch_last_offset").to_pylist())
    return sorted(lasts)


def k(i: int) -> bytes:
    return str(i).encode()


def with_batch_sizes(table: pa.Table, size_of=lambda pos: 70 + pos) -> pa.Table:
    sizes = pa.array([size_of(p) for p in table.column("batch_position").to_pylist()], pa.int32())
    return table.set_column(table.schema.get_field_index("batch_size"), RECORD_SCHEMA.field("batch_size"), sizes)


# --------------------------------------------------------------------------------------------------
# Core deduplication and batch format
# --------------------------------------------------------------------------------------------------


def test_item1_latest_value_per_key_and_bytes_read():
    # item 1 (testCleanSegments): unique keys over three segments, newer copies of 1,3,5,7,9 in a fourth.
    log = LogBuilder()
    for seg in range(3):
        for i in range(seg * 4, seg * 4 + 4):
            log.batch([rec(k(i), b"old")])
        log.roll()
    for i in (1, 3, 5, 7, 9):
        log.batch([rec(k(i), b"new")])
    table = with_batch_sizes(log.table())
    lc = clean(table)
    first_three = lc.result.records.filter(pc.less(lc.result.records.column("offset"), 12))
    assert sorted(first_three.column("key").to_pylist()) == sorted(k(i) for i in (0, 2, 4, 6, 8, 10, 11))
    assert lc.result.stats.bytes_read == sum(70 + p for p in table.column("batch_position").to_pylist())


def test_item2_deleted_keys_lose_their_old_values():
    # item 2: keys 0..N, tombstones for even keys, then padding: no even key keeps a value.
    n = 10
    log = LogBuilder()
    for i in range(n):
        log.batch([rec(k(i), b"v")])
    for i in range(0, n, 2):
        log.batch([tombstone(k(i))])
    for i in range(100, 105):
        log.batch([rec(k(i), b"pad")])
    lc = clean(log.table())
    live = {r["key"] for r in lc.result.records.to_pylist() if r["value"] is not None}
    assert not any(k(i) in live for i in range(0, n, 2))
    assert all(k(i) in live for i in range(1, n, 2))


def test_item3_offsets_never_renumbered_gaps_appear():
    # item 3 (testDuplicateCheckAfterCleaning): three idempotent producers.
    log = LogBuilder()
    log.batch([rec(k(1), b"a"), rec(k(2), b"a"), rec(k(3), b"a")], pid=1, epoch=0, base_sequence=0)
    log.batch([rec(k(3), b"b"), rec(k(1), b"b"), rec(k(4), b"b")], pid=2, epoch=0, base_sequence=0)
    log.batch([rec(k(1), b"c"), rec(k(4), b"c")], pid=3, epoch=0, base_sequence=0)
    lc = clean(log.table())
    assert offsets(lc) == [1, 3, 6, 7]
    assert keys(lc) == [k(2), k(3), k(1), k(4)]
    assert batch_last_offsets(lc) == [2, 5, 7]
    # a later append from producer 4 empties producer 1's batch, which stays as a header (its last sequence)
    t = lc.result.records
    more = LogBuilder(start_offset=8, segment_base_offset=8)
    more.batch([rec(k(2), b"d")], pid=4, epoch=0, base_sequence=0)
    lc2 = clean(pa.concat_tables([t, more.table()]), empties=lc.result.empty_batches)
    assert offsets(lc2) == [3, 6, 7, 8]
    assert batch_last_offsets(lc2) == [2, 5, 7, 8]
    assert lc2.result.empty_batches.column("producer_id").to_pylist() == [1]


def test_item4_v2_batch_keeps_base_and_last_offsets_legacy_batch_shrinks():
    # item 4: only the middle record of a v2 batch survives; base/last offsets stay 0 and 2.
    log = LogBuilder()
    log.batch([rec(b"a", b"1"), rec(b"b", b"1"), rec(b"c", b"1")])
    log.batch([rec(b"a", b"2")])
    log.batch([rec(b"c", b"2")])
    lc = clean(log.table())
    row = lc.result.records.to_pylist()[0]
    assert (row["offset"], row["batch_base_offset"], row["batch_last_offset"]) == (1, 0, 2)
    # legacy (magic 1) compressed wrapper: shrinks to its survivors (MRT 857-974)
    legacy = _as_legacy(LogBuilder().batch([rec(b"a", b"1"), rec(b"b", b"1"), rec(b"c", b"1")], codec=1)
                        .batch([rec(b"a", b"2")]).batch([rec(b"c", b"2")]).table(), magic=1, batches=[0])
    lc = clean(legacy)
    row = lc.result.records.to_pylist()[0]
    assert (row["offset"], row["batch_base_offset"], row["batch_last_offset"]) == (1, 1, 1)


def _as_legacy(table: pa.Table, *, magic: int, batches: list[int]) -> pa.Table:
    """Turn the batches at the given positions into legacy (magic 0/1) batches: no producer fields."""
    is_legacy = np.isin(table.column("batch_position").to_numpy(), batches)

    def put(t: pa.Table, name: str, values: np.ndarray) -> pa.Table:
        return t.set_column(t.schema.get_field_index(name), RECORD_SCHEMA.field(name),
                            pa.array(values, RECORD_SCHEMA.field(name).type))

    t = put(table, "magic", np.where(is_legacy, magic, table.column("magic").to_numpy()))
    for name, none in (("producer_id", -1), ("producer_epoch", -1), ("base_sequence", -1),
                       ("partition_leader_epoch", -1)):
        t = put(t, name, np.where(is_legacy, none, t.column(name).to_numpy()))
    return t


def test_item5_batch_metadata_survives_a_rewrite():
    # item 5: producer id/epoch/sequence, transactional flag, leader epoch, LOG_APPEND_TIME and codec survive.
    log = LogBuilder()
    log.batch([rec(b"a", b"1"), rec(b"b", b"1"), rec(b"c", b"1")], pid=5, epoch=3, base_sequence=17,
              leader_epoch=9, timestamp_type=1, codec=3)
    log.batch([rec(b"a", b"2")])
    src = log.table().to_pylist()[1]
    lc = clean(log.table())
    out = lc.result.records.to_pylist()[0]
    for name in ("producer_id", "producer_epoch", "base_sequence", "transactional", "partition_leader_epoch",
                 "timestamp_type", "codec", "batch_base_offset", "batch_last_offset", "batch_max_timestamp"):
        assert out[name] == src[name], name
    assert out["offset"] == 1
    assert 0 in lc.result.rebuilt_batches


def test_item6_keyless_records_dropped_and_counted():
    # item 6 (LCT 1286-1345): keyless records go and are counted; keyed ones stay.
    log = LogBuilder()
    log.batch([rec(None, b"x"), rec(b"a", b"1")])
    log.batch([rec(None, b"y")])
    log.batch([rec(b"b", b"1")])
    lc = clean(log.table())
    assert keys(lc) == [b"a", b"b"]
    assert lc.result.stats.keyless_dropped == 2


def test_item6_keyless_records_above_the_mapped_range_are_kept():
    # item 6 with item 31: shouldRetainRecord keeps anything above map.latestOffset before looking at the key.
    log = LogBuilder()
    log.batch([rec(b"a", b"1")]).batch([rec(b"a", b"2")]).roll().batch([rec(None, b"late")])
    lc = clean(log.table(), end=2)
    assert offsets(lc) == [1, 2]
    assert lc.result.stats.keyless_dropped == 0


def test_item7_statistics():
    # item 7 (testLogCleanerStats): keys 0,1,0,1,0 cleaned from dirty offset 2 -> end 5; 5 read, 2 written.
    log = LogBuilder()
    for i in (0, 1, 0, 1, 0):
        log.batch([rec(k(i), k(i))])
    table = with_batch_sizes(log.table())
    lc = clean(table, dirty=2, max_keys=3)
    assert lc.offset_map.end_offset == 5
    assert lc.result.stats.records_read == 5
    assert lc.result.stats.records_kept == 2
    assert lc.result.stats.bytes_read == sum(70 + p for p in range(5))
    assert lc.result.stats.keyless_dropped == 0


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_item8_every_codec_and_mixed_magic_compact_alike(codec):
    # item 8: the codec and the magic do not change which records survive.
    def build(c: int) -> pa.Table:
        log = LogBuilder()
        for rnd in range(3):
            log.batch([rec(k(i), f"{rnd}-{i}".encode()) for i in range(4)], codec=c)
        return log.table()

    def survivors(t: pa.Table) -> dict:
        return {r["key"]: (r["value"], r["offset"]) for r in clean(t).result.records.to_pylist()}

    expected = {k(i): (f"2-{i}".encode(), 8 + i) for i in range(4)}
    assert survivors(build(codec)) == expected
    assert survivors(_as_legacy(build(codec), magic=1, batches=[0, 1])) == expected
    assert survivors(_as_legacy(build(codec), magic=0, batches=[0])) == expected


# item 9 (KAFKA-4298 magic repair, trimming a preallocated file) is the encoder's and the writer's concern.


# --------------------------------------------------------------------------------------------------
# Tombstones and the delete horizon
# --------------------------------------------------------------------------------------------------


def test_item10_horizon_counts_from_cleaning_time_not_record_timestamp():
    # item 10 (testCleanTombstone): a tombstone with an ancient timestamp survives its first clean.
    log = LogBuilder()
    log.batch([rec(b"a", b"1", timestamp=0)]).batch([tombstone(b"a", timestamp=0)]).batch([rec(b"z", b"1")])
    lc = clean(log.table(), now=10 * RETENTION)
    assert offsets(lc) == [1, 2]
    assert lc.result.records.to_pylist()[0]["delete_horizon_ms"] == 10 * RETENTION + RETENTION


def test_item11_horizon_written_into_the_v2_header():
    # item 11: deleteHorizonMs = now + delete.retention.ms replaces the base timestamp; record timestamps stay.
    log = LogBuilder()
    log.batch([rec(b"a", b"1", timestamp=500), tombstone(b"b", timestamp=700)]).batch([rec(b"z", b"1")])
    lc = clean(log.table())
    rows = lc.result.records.to_pylist()[:2]
    assert [r["timestamp"] for r in rows] == [500, 700]
    assert {r["delete_horizon_ms"] for r in rows} == {NOW + RETENTION}
    assert {r["batch_base_timestamp"] for r in rows} == {NOW + RETENTION}
    assert lc.result.stats.horizons_stamped == 1
    # batches without tombstones get no horizon
    assert lc.result.records.to_pylist()[2]["delete_horizon_ms"] is None


def test_item12_tombstone_removal_takes_two_cleans():
    # item 12 (runTwoPassClean): pass 1 stamps; same time keeps; now >= horizon drops.
    log = LogBuilder()
    log.batch([rec(b"a", b"1")]).batch([tombstone(b"a")]).batch([rec(b"z", b"1")])
    first = clean(log.table())
    assert offsets(first) == [1, 2]
    same_time = again(first)
    assert offsets(same_time) == [1, 2] and not same_time.result.changed
    just_before = again(first, now=NOW + RETENTION - 1)
    assert offsets(just_before) == [1, 2]
    at_horizon = again(first, now=NOW + RETENTION)
    assert offsets(at_horizon) == [2]
    assert at_horizon.result.stats.tombstones_removed == 1


def test_item13_legacy_tombstones_use_the_segment_mtime_rule():
    # item 13 (LC 597-604, 679): legacy tombstones stay while their segment's mtime > legacy horizon.
    log = LogBuilder()
    log.batch([rec(b"a", b"1")]).batch([tombstone(b"a")]).roll().batch([rec(b"z", b"1")])
    table = _as_legacy(log.table(), magic=1, batches=[0, 1])
    horizon = legacy_delete_horizon(5_000_000, RETENTION)
    assert horizon == 5_000_000 - RETENTION
    young = clean(table, legacy_delete_horizon_ms=horizon, segment_last_modified_ms={0: horizon + 1, 2: horizon + 1})
    assert offsets(young) == [1, 2]
    assert young.result.records.to_pylist()[0]["delete_horizon_ms"] is None  # never stamped below v2
    old = clean(table, legacy_delete_horizon_ms=horizon, segment_last_modified_ms={0: horizon, 2: horizon + 1})
    assert offsets(old) == [2]


# --------------------------------------------------------------------------------------------------
# Transactions
# --------------------------------------------------------------------------------------------------


def _basic_txn_log() -> LogBuilder:
    # testBasicTransactionAwareCleaning
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(k(1), b"p1"), rec(k(2), b"p1")])  # 0-1 aborted
    log.txn_batch(2, 0, [rec(k(2), b"p2"), rec(k(3), b"p2")])  # 2-3 committed
    log.txn_batch(1, 0, [rec(k(3), b"p1"), rec(k(4), b"p1")])  # 4-5 aborted
    log.abort(1, 0)  # 6
    log.commit(2, 0)  # 7
    log.txn_batch(1, 0, [rec(k(2), b"p1b")])  # 8 committed
    log.commit(1, 0)  # 9
    return log


def test_item14_aborted_data_removed_abort_marker_kept():
    # item 14 (testBasicTransactionAwareCleaning, LCT 462-494)
    log = _basic_txn_log()
    before = derive_txn_state(summarize_batches([key_hash_table(log.table(), hash_keys(log.table().column("key")))]),
                              now_ms=NOW)
    lc = clean(log.table())
    assert keys(lc) == [k(3), k(2)]
    assert offsets(lc) == [3, 6, 7, 8, 9]
    assert lc.result.stats.aborted_records_removed == 4
    # the aborted-transaction list (the offline .txnindex) is unchanged by the clean
    after = lc.txn_state
    assert before.aborted.first_offset.tolist() == after.aborted.first_offset.tolist() == [0]
    assert before.aborted.last_offset.tolist() == [6]


def test_item15_abort_marker_stays_until_every_batch_is_gone_across_segments():
    # item 15 (LC 1272-1300; LCT 743-772): aborted data in an earlier segment keeps the marker.
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(b"a", b"x")])  # 0, segment 0
    log.roll()
    log.batch([rec(b"z", b"1")])  # 1
    log.abort(1, 0)  # 2
    log.batch([rec(b"z", b"2")])  # 3
    first = clean(log.table(), expiration=0)  # producer 1 expired: its last batch need not stay
    assert offsets(first) == [2, 3]
    assert first.result.records.to_pylist()[0]["delete_horizon_ms"] is None  # kept, not yet removable
    second = again(first, expiration=0)  # data gone: the marker may go, stamped now
    assert offsets(second) == [2, 3]
    assert second.result.records.to_pylist()[0]["delete_horizon_ms"] == NOW + RETENTION
    third = again(second, now=NOW + RETENTION, expiration=0)
    assert offsets(third) == [3]
    assert third.result.stats.markers_removed == 1


def test_item15_abort_marker_kept_while_an_empty_batch_of_the_txn_remains():
    # item 15 + 22 (testLogCleanerRetainsLastSequenceEvenIfTransactionAborted)
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(k(1), b"x")])  # 0
    log.txn_batch(1, 0, [rec(k(2), b"x"), rec(k(3), b"x")], base_sequence=1)  # 1-2
    log.abort(1, 0)  # 3
    lc = clean(log.table())
    assert batch_last_offsets(lc) == [2, 3]
    assert keys(lc) == [] and offsets(lc) == [3]
    more = LogBuilder(start_offset=4, segment_base_offset=4).txn_batch(1, 0, [rec(k(1), b"y"), rec(k(5), b"y")],
                                                                    base_sequence=3).table()
    lc2 = clean(pa.concat_tables([lc.result.records, more]), empties=lc.result.empty_batches)
    assert batch_last_offsets(lc2) == [3, 5]
    assert keys(lc2) == [k(1), k(5)]
    assert offsets(lc2) == [3, 4, 5]


def _commit_marker_log() -> LogBuilder:
    # testCommitMarkerRemoval, first part
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(k(1), b"a")])  # 0
    log.txn_batch(1, 0, [rec(k(2), b"a"), rec(k(3), b"a")])  # 1-2
    log.commit(1, 0)  # 3
    log.txn_batch(1, 0, [rec(k(2), b"b")])  # 4
    log.commit(1, 0)  # 5
    return log


def test_item16_commit_marker_removable_only_without_data_and_after_horizon():
    # item 16 (testCommitMarkerRemoval, LCT 541-588), with Kafka's largeTimestamp style clock.
    large = (1 << 62)
    lc = clean(_commit_marker_log().table(), now=large)
    assert keys(lc) == [k(1), k(3), k(2)]
    assert offsets(lc) == [0, 2, 3, 4, 5]
    more = LogBuilder(start_offset=6, segment_base_offset=6)
    more.txn_batch(1, 0, [rec(k(1), b"c"), rec(k(3), b"c")]).commit(1, 0)  # 6-7, marker 8
    lc = clean(pa.concat_tables([lc.result.records, more.table()]), empties=lc.result.empty_batches, now=large)
    assert keys(lc) == [k(2), k(1), k(3)]
    assert offsets(lc) == [3, 4, 5, 6, 7, 8]  # marker 3 kept: this pass saw batch 1-2 of its transaction
    lc = again(lc, now=large)
    assert offsets(lc) == [3, 4, 5, 6, 7, 8]  # stamped now, not removed early
    lc = again(lc, now=(1 << 63) - 1)
    assert offsets(lc) == [4, 5, 6, 7, 8]


def test_item16_commit_marker_of_an_emptied_transaction_goes_after_two_passes():
    # item 16 (LCT 720-742): all data of a committed txn superseded -> the marker is stamped, then removed.
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(b"a", b"1")])  # 0
    log.commit(1, 0)  # 1
    log.batch([rec(b"a", b"2")])  # 2
    lc = clean(log.table(), expiration=0)
    assert offsets(lc) == [1, 2]
    lc = again(lc, expiration=0)
    assert lc.result.records.to_pylist()[0]["delete_horizon_ms"] == NOW + RETENTION
    lc = again(lc, now=NOW + RETENTION, expiration=0)
    assert offsets(lc) == [2]


def test_item17_transactions_interleaved_across_segments():
    # item 17 (LCT 495-540): a committed and an aborted transaction interleaved over two segments.
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(b"a", b"c1")])  # 0 committed
    log.txn_batch(2, 0, [rec(b"a", b"ab")])  # 1 aborted
    log.roll()
    log.txn_batch(1, 0, [rec(b"b", b"c1")])  # 2
    log.commit(1, 0)  # 3
    log.txn_batch(2, 0, [rec(b"b", b"ab")])  # 4
    log.abort(2, 0)  # 5
    log.batch([rec(b"z", b"1")])  # 6
    lc = clean(log.table(), expiration=0)
    assert [(r["key"], r["value"]) for r in lc.result.records.to_pylist() if not r["control"]] == [
        (b"a", b"c1"), (b"b", b"c1"), (b"z", b"1")]
    assert offsets(lc) == [0, 2, 3, 5, 6]
    lc = again(lc, expiration=0)
    lc = again(lc, now=NOW + RETENTION, expiration=0)
    assert offsets(lc) == [0, 2, 3, 6]  # abort marker gone; commit marker stays while its data do


def test_item18_multi_pass_with_a_tiny_map():
    # item 18 (LCT 369-461): with a 3-key map the clean needs several passes; aborted-txn entries persist
    # until their data are gone, markers go after delete.retention.ms.
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(k(i), b"ab") for i in range(3)])  # 0-2 aborted
    log.batch([rec(k(i), b"v1") for i in range(3)])  # 3-5
    log.abort(1, 0)  # 6
    log.batch([rec(k(i), b"v2") for i in range(3)])  # 7-9
    log.batch([rec(k(i), b"v3") for i in range(3, 6)])  # 10-12
    table = log.table()
    first = clean(table, max_keys=3, expiration=0)
    # keys 0-2 fill the map at 3-5; Kafka declares it full at the next keyed record (7), known key or not
    assert first.offset_map.full and first.offset_map.end_offset == 7
    assert len(first.txn_state.aborted) == 1
    assert offsets(first) == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # marker kept: its data were seen this pass
    second = again(first, dirty=7, max_keys=3, expiration=0)
    assert second.offset_map.full and second.offset_map.end_offset == 10
    assert len(second.txn_state.aborted) == 0  # no aborted data left: the derived index entry is gone
    assert offsets(second) == [6, 7, 8, 9, 10, 11, 12]
    assert second.result.records.to_pylist()[0]["delete_horizon_ms"] == NOW + RETENTION
    third = again(second, dirty=10, now=NOW + RETENTION, max_keys=3, expiration=0)
    assert not third.offset_map.full and third.offset_map.end_offset == 13
    assert offsets(third) == [7, 8, 9, 10, 11, 12]


def test_item19_data_key_equal_to_a_control_key_is_not_a_marker():
    # item 19 (LCT 1119-1161): data records whose keys look like control keys are ordinary data.
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(control_key(0), b"d1")])  # 0, aborted
    log.abort(1, 0)  # 1
    log.txn_batch(1, 0, [rec(control_key(1), b"d2")])  # 2
    log.commit(1, 0)  # 3
    log.batch([rec(control_key(0), b"plain")])  # 4
    lc = clean(log.table(), expiration=0)
    data = [(r["key"], r["value"]) for r in lc.result.records.to_pylist() if not r["control"]]
    assert data == [(control_key(1), b"d2"), (control_key(0), b"plain")]
    kh = key_hash_table(log.table(), hash_keys(log.table().column("key")))
    assert kh.column("control_type").to_pylist() == [-1, 0, -1, 1, -1]


def test_item20_open_transaction_blocks_cleaning_from_its_first_offset():
    # item 20 [A] (LCMT 664-708): the first unstable offset is the open transaction's first offset.
    log = LogBuilder()
    log.batch([rec(b"a", b"1")])  # 0
    log.txn_batch(1, 0, [rec(b"a", b"2")])  # 1 open
    log.batch([rec(b"a", b"3")], pid=2, epoch=0)  # 2
    t = log.table()
    state = derive_txn_state(summarize_batches([key_hash_table(t, hash_keys(t.column("key")))]), now_ms=NOW)
    assert state.first_unstable_offset == 1
    t2 = pa.concat_tables([t, LogBuilder(start_offset=3).commit(1, 0).table()])
    state = derive_txn_state(summarize_batches([key_hash_table(t2, hash_keys(t2.column("key")))]), now_ms=NOW)
    assert state.first_unstable_offset is None


def test_item21_empty_control_batches_are_discarded():
    # item 21 (LCT 686-719, 589-618): a header-only control batch goes without error.
    log = LogBuilder()
    log.batch([rec(b"a", b"1")])  # 0
    log.batch([rec(b"z", b"1")])  # 2 (offset 1 is the empty marker below)
    table = log.table()
    for name in ("offset", "batch_base_offset", "batch_last_offset"):
        table = table.set_column(table.schema.get_field_index(name), RECORD_SCHEMA.field(name),
                                 pa.array([0, 2], pa.int64()))
    empty_marker = _empty_batch(base=1, pid=1, control=True, transactional=True)
    lc = clean(table, empties=empty_marker, expiration=0)
    assert lc.result.empty_batches.num_rows == 0
    assert offsets(lc) == [0, 2]
    assert lc.result.changed


def _empty_batch(*, base: int, pid: int, control: bool, transactional: bool, epoch: int = 0,
                 max_ts: int = T0) -> pa.Table:
    row = {"batch_base_offset": base, "batch_last_offset": base, "batch_position": 99, "batch_size": 61,
           "batch_base_timestamp": -1, "batch_max_timestamp": max_ts, "timestamp_type": 0, "magic": 2, "codec": 0,
           "transactional": transactional, "control": control, "producer_id": pid, "producer_epoch": epoch,
           "base_sequence": 0, "partition_leader_epoch": 0, "delete_horizon_ms": None, "segment_base_offset": 0}
    return pa.Table.from_pylist([row], schema=BATCH_SCHEMA)


# --------------------------------------------------------------------------------------------------
# Producer state and empty batches
# --------------------------------------------------------------------------------------------------


def test_item22_active_producers_last_batch_kept_empty():
    # item 22 (testLogCleanerRetainsProducerLastSequence, LCT 1062-1118)
    log = LogBuilder()
    log.batch([rec(k(0), b"0")])  # 0
    log.batch([rec(k(0), b"1")], pid=1, epoch=0, base_sequence=0)  # 1
    log.batch([rec(k(0), b"2")], pid=2, epoch=0, base_sequence=0)  # 2
    log.batch([rec(k(0), b"3")], pid=3, epoch=0, base_sequence=0)  # 3
    log.batch([rec(k(1), b"1")], pid=2, epoch=0, base_sequence=1)  # 4
    lc = clean(log.table())
    assert batch_last_offsets(lc) == [1, 3, 4]
    assert keys(lc) == [k(0), k(1)]
    assert offsets(lc) == [3, 4]
    header = lc.result.empty_batches.to_pylist()
    assert [(h["producer_id"], h["base_sequence"], h["batch_base_timestamp"], h["codec"]) for h in header] == [
        (1, 0, -1, 0)]


def test_item22_expired_producers_batches_may_go():
    # item 22 [A]: once now - newest batch timestamp >= producer.id.expiration.ms, nothing is kept for it.
    log = LogBuilder()
    log.batch([rec(k(0), b"1")], pid=1, epoch=0, base_sequence=0)  # 0, ts T0+1
    log.batch([rec(k(0), b"2")])  # 1
    expiration = 10_000
    alive = clean(log.table(), now=T0 + 1 + expiration - 1, expiration=expiration)
    assert batch_last_offsets(alive) == [0, 1]
    expired = clean(log.table(), now=T0 + 1 + expiration, expiration=expiration)
    assert batch_last_offsets(expired) == [1]


def test_item23_empty_batch_dropped_once_the_producer_writes_again():
    # item 23 (LCT 619-685, 844-906)
    log = LogBuilder()
    log.batch([rec(b"a", b"1")], pid=1, epoch=0, base_sequence=0)  # 0
    log.batch([rec(b"a", b"2")])  # 1
    lc = clean(log.table())
    assert batch_last_offsets(lc) == [0, 1]
    more = LogBuilder(start_offset=2, segment_base_offset=2)
    more.batch([rec(b"b", b"1")], pid=1, epoch=0, base_sequence=1)  # 2
    lc2 = clean(pa.concat_tables([lc.result.records, more.table()]), empties=lc.result.empty_batches)
    assert batch_last_offsets(lc2) == [1, 2]
    assert lc2.result.empty_batches.num_rows == 0


def test_item24_sequence_reuse_still_lets_old_empty_batches_and_markers_go():
    # item 24 (testEmptyBatchRemovalWithSequenceReuse, LCT 803-843)
    large = 1 << 62
    log = LogBuilder()
    log.txn_batch(1, 0, [rec(k(1), b"t1")], base_sequence=0)  # 0
    log.commit(1, 0)  # 1
    log.txn_batch(1, 0, [rec(k(2), b"t2")], base_sequence=0)  # 2
    log.commit(1, 0)  # 3
    log.batch([rec(k(1), b"1")])  # 4
    log.batch([rec(k(2), b"1")])  # 5
    lc = clean(log.table(), now=large)
    assert offsets(lc) == [1, 3, 4, 5]
    assert batch_last_offsets(lc) == [1, 2, 3, 4, 5]
    lc = again(again(lc, now=large), now=large + RETENTION + 1)
    assert offsets(lc) == [3, 4, 5]
    assert batch_last_offsets(lc) == [2, 3, 4, 5]


def test_item25_last_batch_of_the_round_kept_even_if_empty():
    # item 25 (LCT 1368-1399; LC 779-782): the batch ending just before the round's upper bound stays as an
    # empty header when all its records go; the same batch elsewhere in the round would be dropped.
    log = LogBuilder()
    log.batch([rec(b"a", b"1")]).batch([tombstone(b"b")]).roll().batch([rec(b"z", b"1")])
    lc = clean(log.table(), end=2)
    assert offsets(lc) == [0, 1, 2]
    lc = again(lc, end=2, now=NOW + RETENTION)
    assert offsets(lc) == [0, 2]
    assert lc.result.empty_batches.column("batch_last_offset").to_pylist() == [1]
    # the same tombstone batch in the middle of the round is dropped
    lc = clean(log.table(), end=3)
    lc = again(lc, end=3, now=NOW + RETENTION)
    assert offsets(lc) == [0, 2] and lc.result.empty_batches.num_rows == 0


# item 26 [B] duplicate detection after reload needs a broker; item 27-30 (grouping, overflow splits) belong to
# the planner and the job.


# --------------------------------------------------------------------------------------------------
# Offset map and progress (map-level checks are in test_offset_map.py)
# --------------------------------------------------------------------------------------------------


def test_item32_partial_map_makes_progress_over_repeated_runs():
    # item 32 (testPartialSegmentClean, LCT 1162-1193): a one-key map cleans one record per run.
    log = LogBuilder()
    for i in (0, 1, 0, 1, 0):
        log.batch([rec(k(i), k(i))])
    lc = clean(log.table(), dirty=2, end=5, max_keys=1)
    assert keys(lc) == [k(1), k(0), k(1), k(0)] and offsets(lc) == [1, 2, 3, 4]
    lc = again(lc, dirty=lc.offset_map.end_offset, end=5, max_keys=1)
    assert keys(lc) == [k(0), k(1), k(0)] and offsets(lc) == [2, 3, 4]
    lc = again(lc, dirty=lc.offset_map.end_offset, end=5, max_keys=1)
    assert keys(lc) == [k(1), k(0)] and offsets(lc) == [3, 4]


def test_item33_cleaning_passes_offset_gaps():
    # item 33 (LCT 1955-1996): after a gap the next dirty offset is the uncleanable segment's base.
    log = LogBuilder()
    log.batch([rec(b"a", b"1", offset=0)]).batch([rec(b"a", b"2", offset=10)])
    lc = clean(log.table(), end=20)
    assert lc.offset_map.end_offset == 20
    assert offsets(lc) == [10]


def test_item34_uncleanable_section_untouched():
    # item 34 (testCleaningWithUncleanableSection): segments at or above the first uncleanable offset are
    # returned exactly as they were, duplicates and all.
    log = LogBuilder()
    for i in range(6):
        log.batch([rec(k(i % 2), k(i))])
    log.roll()
    for i in range(6, 12):
        log.batch([rec(k(i % 2), k(i))])
    table = log.table()
    lc = clean(table, end=6)
    assert offsets(lc) == [4, 5] + list(range(6, 12))
    assert lc.result.records.slice(2).equals(table.slice(6))


# item 35 (abort signal deleting .cleaned) is the job's: these functions have no side effects to undo.


# --------------------------------------------------------------------------------------------------
# Contract details
# --------------------------------------------------------------------------------------------------


def test_unchanged_group_reports_changed_false():
    log = LogBuilder()
    log.batch([rec(b"a", b"1")]).batch([rec(b"b", b"1")])
    lc = clean(log.table())
    assert not lc.result.changed
    assert lc.result.records.equals(log.table())
    assert len(lc.result.rebuilt_batches) == 0


def test_unsorted_input_is_refused():
    log = LogBuilder()
    log.batch([rec(b"a", b"1")]).batch([rec(b"b", b"1")])
    t = log.table()
    t = pa.concat_tables([t.slice(1), t.slice(0, 1)])
    kh = key_hash_table(log.table(), hash_keys(log.table().column("key")))
    state = derive_txn_state(summarize_batches([kh]), now_ms=NOW)
    omap = build_offset_map([kh], start_offset=0, end_offset=2, aborted=state.aborted, max_keys=10)
    with pytest.raises(CleanerInputError):
        clean_records(t, offset_map=omap, txn_state=state, params=CleanParams(now_ms=NOW, upper_bound_offset=2),
                      key_hashes=hash_keys(t.column("key")))


@pytest.mark.parametrize("key, words", [(b"\x00", "has 1 bytes; it needs 4"),
                                        (b"\xff\xff\x00\x01", "version -1; a negative version")])
def test_malformed_control_key_is_a_corrupt_record_naming_the_offset(key, words):
    log = LogBuilder()
    log.batch([rec(b"k", b"v")])
    log.batch([rec(key, b"x")], pid=1, epoch=0, transactional=True, control=True)
    with pytest.raises(CorruptRecordError, match=words) as err:
        key_hash_table(log.table(), hash_keys(log.table().column("key")))
    assert err.value.offset == 1 and err.value.position is not None


# --------------------------------------------------------------------------------------------------
# Properties over random logs
# --------------------------------------------------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KEYS = [b"a", b"b", b"c", b"d"]
_RECORD_COLUMNS = ["offset", "timestamp", "timestamp_type", "key", "value", "headers", "producer_id",
                   "producer_epoch", "base_sequence", "partition_leader_epoch", "codec", "transactional", "control",
                   "magic", "segment_base_offset", "batch_position"]


@st.composite
def random_logs(draw) -> tuple[pa.Table, set[int]]:
    """A log of plain batches and transactions (interleaved, committed or aborted, every one closed), with
    random segment rolls. Returns the table and the offsets of aborted data."""
    log = LogBuilder()
    aborted: set[int] = set()
    open_txns: dict[int, list[int]] = {}
    record = st.tuples(st.sampled_from(_KEYS + [None]), st.sampled_from([b"1", b"2", b"3", None]))
    for _ in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["plain", "plain", "txn", "end", "roll"]))
        if op == "roll":
            log.roll()
        elif op == "plain":
            recs = [rec(k_, v) for k_, v in draw(st.lists(record, min_size=1, max_size=3))]
            log.batch(recs, codec=draw(st.sampled_from([0, 1, 4])))
        elif op == "txn":
            pid = draw(st.sampled_from([1, 2]))
            recs = [rec(k_, v) for k_, v in draw(st.lists(record, min_size=1, max_size=3))]
            first = log.next_offset
            log.txn_batch(pid, 0, recs)
            open_txns.setdefault(pid, []).extend(range(first, log.next_offset))
        elif open_txns:
            pid = draw(st.sampled_from(sorted(open_txns)))
            _close(log, pid, open_txns, aborted, draw(st.booleans()))
    for pid in sorted(open_txns):
        _close(log, pid, open_txns, aborted, draw(st.booleans()))
    if not log._rows:
        log.batch([rec(b"a", b"1")])
    return log.table(), aborted


def _close(log: LogBuilder, pid: int, open_txns: dict[int, list[int]], aborted: set[int], abort: bool) -> None:
    offs = open_txns.pop(pid)
    if abort:
        aborted.update(offs)
        log.abort(pid, 0)
    else:
        log.commit(pid, 0)


def replay(table: pa.Table, aborted: set[int]) -> dict[bytes, bytes | None]:
    """What a read_committed consumer rebuilding a table ends with: key -> latest value (None = tombstone)."""
    state: dict[bytes, bytes | None] = {}
    for r in table.select(["offset", "key", "value", "control"]).to_pylist():
        if not r["control"] and r["key"] is not None and r["offset"] not in aborted:
            state[r["key"]] = r["value"]
    return state


def clean_until_done(table: pa.Table, empties: pa.Table | None, *, now: int, max_keys: int) -> LogClean:
    """Repeat partial cleans (a small map) until the whole log has been covered once, like Kafka's passes."""
    end = log_end(table, empties)
    dirty = 0
    while True:
        lc = clean(table, empties=empties, now=now, dirty=dirty, end=end, max_keys=max_keys)
        table, empties, dirty = lc.result.records, lc.result.empty_batches, lc.offset_map.end_offset
        if dirty >= end:
            return lc


@given(random_logs(), st.sampled_from([1, 2, 3, 1000]))
def test_property_cleaned_log_replays_to_the_same_state(log_and_aborted, max_keys):
    table, aborted = log_and_aborted
    expected = replay(table, aborted)
    first = clean_until_done(table, None, now=NOW, max_keys=max_keys)
    # before the horizon, deleted keys are still present as tombstones
    assert replay(first.result.records, aborted) == expected
    # every surviving row is its source row, unchanged
    source = {r["offset"]: r for r in table.select(_RECORD_COLUMNS).to_pylist()}
    for r in first.result.records.select(_RECORD_COLUMNS).to_pylist():
        assert r == source[r["offset"]]
    # no aborted data survive
    assert not aborted & set(first.result.records.column("offset").to_pylist())
    # once past the horizon, deleted keys are gone altogether
    later = clean_until_done(first.result.records, first.result.empty_batches, now=NOW + RETENTION,
                             max_keys=max_keys)
    assert replay(later.result.records, aborted) == {k_: v for k_, v in expected.items() if v is not None}
    data = later.result.records.filter(pc.invert(later.result.records.column("control")))
    assert data.column("value").null_count == 0


@given(random_logs())
def test_property_cleaning_again_at_the_same_time_converges(log_and_aborted):
    # Kafka stamps a marker only on the pass after the one that removed its transaction's last data, so the
    # second clean at the same time may stamp markers (and nothing else); from then on nothing changes.
    table, _ = log_and_aborted
    first = clean(table)
    second = again(first)
    ctl = pc.invert(first.result.records.column("control"))
    assert second.result.records.filter(pc.invert(second.result.records.column("control"))).equals(
        first.result.records.filter(ctl))
    assert second.result.empty_batches.equals(first.result.empty_batches)
    third = again(second)
    assert not third.result.changed
    assert third.result.records.equals(second.result.records)
    assert third.result.empty_batches.equals(second.result.empty_batches)


# --------------------------------------------------------------------------------------------------
# Real broker-written segments
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", [
    "danielowo-ksqldb-kraft-txn/kafka_data/_confluent-ksql-default__command_topic-0/00000000000000000000.log",
    "donaldy-kafka2.7-compacted-offsets/kafka-logs/__consumer_offsets-39/00000000000000000018.log",
])
def test_real_segments_key_hash_projection_and_clean(kafka_real, rel):
    # the projection the cleaner builds from decoded records agrees with the decoder's own first-pass reader,
    # and a clean of the real partition replays to the same committed state
    from segment_io.decode import read_key_hashes, read_segment

    path = str(kafka_real / rel)
    records = read_segment(path)
    mine = key_hash_table(records, hash_keys(records.column("key")))
    theirs = read_key_hashes(path)
    for name in ("offset", "key_hash_hi", "key_hash_lo", "key_is_null", "value_is_null", "control", "control_type",
                 "producer_id", "batch_last_offset"):
        assert mine.column(name).to_pylist() == theirs.column(name).to_pylist(), name
    lc = clean(records, now=NOW)
    aborted = set()  # these fixtures hold no aborted transactions (SOURCES.md)
    assert replay(lc.result.records, aborted) == replay(records, aborted)
