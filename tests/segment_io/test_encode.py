"""Encoder behaviour, cross-checked with kafka-python (an independent implementation of the record format)."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from kafka.record import MemoryRecords

from segment_io import encode
from segment_io.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from segment_io.encode import encode_batches
from segment_io.errors import InvalidRecordsError, UsageError
from segment_io.format import (
    ATTR_DELETE_HORIZON,
    V2_CRC,
    V2_CRC_START,
    V2_HEADER_SIZE,
    scan_batches,
)
from segment_io.schema import RECORD_SCHEMA
from tests.support.builders import LogBuilder, empty_batch, rec, tombstone

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


def kafka_python_batches(data: bytes) -> list:
    """Every batch of ``data`` as kafka-python parses it, with its records, CRC-checked."""
    records = MemoryRecords(data)
    out = []
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        assert batch.validate_crc(), f"kafka-python rejects the CRC of batch {batch.base_offset}"
        out.append((batch, list(batch)))


def sample_log(codec: int) -> LogBuilder:
    log = LogBuilder(topic="orders", partition=3, start_offset=100, timestamp=1_700_000_000_000)
    log.batch([rec(b"k1", b"v1", headers=[("trace", b"abc"), ("empty", b""), ("nil", None)]),
               rec(None, b"keyless"), rec(b"k2", None), rec(b"", b"")], codec=codec, leader_epoch=5)
    log.batch([rec(b"k3", b"x" * 3000, timestamp=1_600_000_000_000),
               rec(b"k4", b"y" * 10, timestamp=1_800_000_000_000)], pid=42, epoch=3, base_sequence=17,
              codec=codec, leader_epoch=6)
    log.txn_batch(pid=43, epoch=1, records=[rec(b"t1", b"tv1"), rec(b"t2", b"tv2")], base_sequence=0, codec=codec)
    log.commit(pid=43, epoch=1)
    return log


def expected_rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_reads_every_field(codec: int) -> None:
    table = sample_log(codec).table()
    data = encode_batches(table).to_bytes()
    parsed = kafka_python_batches(data)
    rows = expected_rows(table)
    by_batch: dict[int, list[dict]] = {}
    for row in rows:
        by_batch.setdefault(row["batch_base_offset"], []).append(row)
    assert [b.base_offset for b, _ in parsed] == sorted(by_batch)
    for batch, records in parsed:
        want = by_batch[batch.base_offset]
        first = want[0]
        assert batch.last_offset_delta == first["batch_last_offset"] - first["batch_base_offset"]
        # the control marker is never compressed by the builder; data batches carry the requested codec
        assert batch.compression_type == first["codec"]
        assert batch.producer_id == first["producer_id"]
        assert batch.producer_epoch == first["producer_epoch"]
        assert batch.base_sequence == first["base_sequence"]
        assert batch.leader_epoch == first["partition_leader_epoch"]
        assert batch.is_transactional == first["transactional"]
        assert batch.is_control_batch == first["control"]
        assert batch.timestamp_type == first["timestamp_type"]
        assert batch.first_timestamp == first["timestamp"]
        assert batch.max_timestamp == max(r["timestamp"] for r in want)
        assert batch.records_count == len(want)
        got = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in records]
        assert got == [(r["offset"], r["timestamp"], r["key"], r["value"],
                        [(h["key"], h["value"]) for h in r["headers"]]) for r in want]


def test_only_a_middle_record_survives_keeps_batch_offsets() -> None:
    log = LogBuilder(start_offset=10)
    log.batch([rec("a", "1"), rec("b", "2"), rec("c", "3"), rec("d", "4")], pid=9, epoch=0, base_sequence=5)
    table = log.table()
    middle = table.filter(pa.compute.equal(table["offset"], 12))
    data = encode_batches(middle).to_bytes()
    ((batch, records),) = kafka_python_batches(data)
    assert batch.base_offset == 10
    assert batch.last_offset == 13
    assert batch.base_sequence == 5
    assert [(r.offset, r.key) for r in records] == [(12, b"c")]
    # Kafka's builder: base timestamp is the first *written* record's, so its delta is zero
    assert batch.first_timestamp == middle["timestamp"][0].as_py()
    raw = data[V2_HEADER_SIZE:]
    # record: length, attributes 0, timestamp delta 0, offset delta 2 (zig-zag 4)
    assert raw[1:4] == b"\x00\x00\x04"


@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_delete_horizon_is_the_base_timestamp(codec: int) -> None:
    horizon = 1_000_000_000
    log = LogBuilder(timestamp=5_000)
    log.batch([tombstone("k", timestamp=5_001), rec("j", "v", timestamp=9_000)], delete_horizon_ms=horizon,
              codec=codec)
    table = log.table()
    enc = encode_batches(table)
    data = enc.to_bytes()
    (batch, records), = kafka_python_batches(data)
    assert batch.attributes & ATTR_DELETE_HORIZON
    assert batch.first_timestamp == horizon
    assert batch.max_timestamp == 9_000
    # kafka-python knows nothing of horizons: base + delta must still give the record timestamps
    assert [r.timestamp for r in records] == [5_001, 9_000]
    assert enc.headers.base_timestamp[0] == horizon
    assert bool(enc.headers.has_delete_horizon[0])


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    log = LogBuilder(timestamp=1_000)
    log.batch([rec("a", "1", timestamp=1_001), rec("b", "2", timestamp=1_005)], timestamp_type=1)
    table = log.table()  # rows of a LOG_APPEND_TIME batch read as the batch max timestamp
    data = encode_batches(table).to_bytes()
    (batch, records), = kafka_python_batches(data)
    assert batch.timestamp_type == 1
    assert batch.max_timestamp == 1_005
    assert batch.first_timestamp == 1_005
    assert [r.timestamp for r in records] == [1_005, 1_005]


def test_empty_batches_are_header_only_and_merged_by_offset() -> None:
    log = LogBuilder()
    log.batch([rec("a", "1")])
    log.batch([rec("b", "2")], base_offset=10)
    table = log.table()
    empties = pa.concat_tables([
        empty_batch(3, 7, pid=77, epoch=2, base_sequence=30, max_timestamp=123_456, leader_epoch=4,
                    transactional=True, codec=GZIP, delete_horizon_ms=99),
        empty_batch(11, 11, control=True, transactional=True, pid=5, epoch=0, timestamp_type=1),
    ])
    enc = encode_batches(table, empty_batches=empties)
    data = enc.to_bytes()
    parsed = kafka_python_batches(data)
    assert [(b.base_offset, b.last_offset, b.records_count) for b, _ in parsed] == [
        (0, 0, 1), (3, 7, 0), (10, 10, 1), (11, 11, 0)]
    empty = parsed[1][0]
    assert empty.producer_id == 77 and empty.producer_epoch == 2 and empty.base_sequence == 30
    assert empty.leader_epoch == 4 and empty.is_transactional and not empty.is_control_batch
    # writeEmptyHeader: no compression, no horizon, base timestamp -1, the batch's max timestamp kept
    assert empty.compression_type == NONE
    assert not empty.attributes & ATTR_DELETE_HORIZON
    assert empty.first_timestamp == -1
    assert empty.max_timestamp == 123_456
    assert empty.size_in_bytes == V2_HEADER_SIZE
    marker = parsed[3][0]
    assert marker.is_control_batch and marker.timestamp_type == 1
    scanned = scan_batches(data)
    assert scanned.position.tolist() == enc.headers.position.tolist()
    assert scanned.crc.tolist() == enc.headers.crc.tolist()
    assert scanned.record_count.tolist() == [1, 0, 1, 0]


def test_header_description_matches_a_scan_of_the_bytes() -> None:
    table = sample_log(SNAPPY).table()
    enc = encode_batches(table)
    scanned = scan_batches(enc.to_bytes())
    for name in ("position", "size", "base_offset", "last_offset", "magic", "attributes", "base_timestamp",
                 "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch",
                 "record_count", "crc"):
        assert getattr(scanned, name).tolist() == getattr(enc.headers, name).tolist(), name
    assert enc.size == len(enc.to_bytes())
    assert enc.record_count == table.num_rows


def test_codec_override_applies_to_every_batch() -> None:
    table = sample_log(NONE).table()
    data = encode_batches(table, codec="zstd").to_bytes()
    assert {b.compression_type for b, _ in kafka_python_batches(data)} == {ZSTD}
    with pytest.raises(UsageError):
        encode_batches(table, codec=9)


def test_legacy_rows_are_written_as_v2() -> None:
    log = LogBuilder(start_offset=40)
    log.batch([rec("a", "1", timestamp=7), rec("b", "2", timestamp=9)], codec=GZIP)
    table = log.table()
    legacy = table.set_column(table.schema.get_field_index("magic"), "magic",
                              pa.array([1] * table.num_rows, pa.int8()))
    # a legacy wrapper reports its own offset as the batch's: the encoder must not trust it as a base
    legacy = legacy.set_column(legacy.schema.get_field_index("batch_base_offset"), "batch_base_offset",
                               pa.array([41] * table.num_rows, pa.int64()))
    (batch, records), = kafka_python_batches(encode_batches(legacy).to_bytes())
    assert batch.magic == 2
    assert (batch.base_offset, batch.last_offset) == (40, 41)
    assert [(r.offset, r.timestamp, r.key) for r in records] == [(40, 7, b"a"), (41, 9, b"b")]


def _with(table: pa.Table, name: str, values: list) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, RECORD_SCHEMA.field(name), pa.array(values, RECORD_SCHEMA.field(name).type))


def test_invalid_rows_raise_with_the_offset() -> None:
    log = LogBuilder()
    log.batch([rec("a", "1"), rec("b", "2")])
    log.batch([rec("c", "3")])
    table = log.table()
    with pytest.raises(InvalidRecordsError, match="increase") as err:
        encode_batches(_with(table, "offset", [0, 0, 2]))
    assert err.value.offset == 0
    with pytest.raises(InvalidRecordsError, match="producer_id") as err:
        encode_batches(_with(table, "producer_id", [-1, 5, -1]))
    assert err.value.offset == 1
    with pytest.raises(InvalidRecordsError, match="outside"):
        encode_batches(_with(table, "batch_last_offset", [0, 0, 2]))
    with pytest.raises(InvalidRecordsError, match="overlaps"):
        encode_batches(table, empty_batches=empty_batch(1, 1))
    with pytest.raises(InvalidRecordsError, match="timestamp"):
        encode_batches(_with(table, "timestamp", [-5, 1, 2]))


@pytest.mark.parametrize("stacked_rows", [1 << 14, 0], ids=["stacked", "column-by-column"])
def test_batch_columns_differing_within_a_batch_name_the_first_such_column(stacked_rows: int,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # both ways of recognising valid input: all columns in one comparison (few rows) and one by one (many)
    monkeypatch.setattr(encode, "_STACKED_CHECK_ROWS", stacked_rows)
    log = LogBuilder()
    log.batch([rec("a", "1"), rec("b", "2"), rec("c", "3")])
    log.batch([rec("d", "4")])
    table = log.table()
    # producer_id differs on the second row, partition_leader_epoch on the third: the column checked first
    # (the encoder's order of batch-level columns) is named, with the first row where it differs
    bad = _with(_with(table, "producer_id", [-1, 7, 7, -1]), "partition_leader_epoch", [0, 0, 3, 0])
    with pytest.raises(InvalidRecordsError, match="producer_id") as err:
        encode_batches(bad)
    assert err.value.offset == 1
    with pytest.raises(InvalidRecordsError, match="partition_leader_epoch") as err:
        encode_batches(_with(table, "partition_leader_epoch", [0, 0, 3, 0]))
    assert err.value.offset == 2
    # values that differ between batches but not within one are fine
    assert encode_batches(_with(table, "producer_epoch", [1, 1, 1, 2])).batch_count == 2


def test_nothing_encodes_to_nothing() -> None:
    enc = encode_batches(RECORD_SCHEMA.empty_table())
    assert enc.size == 0 and enc.to_bytes() == b"" and enc.batch_count == 0
    assert enc.last_offset == -1 and enc.max_timestamp == -1


def test_record_batches_and_big_types_are_accepted() -> None:
    table = sample_log(NONE).table()
    expected = encode_batches(table).to_bytes()
    assert encode_batches(table.to_batches(max_chunksize=3)).to_bytes() == expected
    big = table.cast(pa.schema([f.with_type(pa.large_binary()) if f.type == pa.binary() else f
                                for f in RECORD_SCHEMA]))
    assert encode_batches(big).to_bytes() == expected
    # a sliced table (non-zero Arrow offsets) encodes its own rows only
    tail = table.slice(4)
    assert encode_batches(tail).to_bytes() == encode_batches(pa.Table.from_pylist(tail.to_pylist(),
                                                                                  schema=RECORD_SCHEMA)).to_bytes()


# --------------------------------------------------------------------------------------------------
# Verbatim copies from the source segment
# --------------------------------------------------------------------------------------------------


def _recompress(batch: bytes, codec: int, level: int) -> bytes:
    """The same batch with its payload compressed differently (still a valid batch, different bytes)."""
    from segment_io.compression import decompress

    payload = compress(codec, decompress(codec, batch[V2_HEADER_SIZE:]), level=level)
    out = bytearray(batch[:V2_HEADER_SIZE] + payload)
    out[8:12] = struct.pack(">i", len(out) - 12)
    out[V2_CRC:V2_CRC + 4] = struct.pack(">I", crc32c.crc32c(bytes(out[V2_CRC_START:])))
    return bytes(out)


def _source_segment(codec: int, **first_batch: Any) -> tuple[pa.Table, bytes]:
    """Rows of a segment and its bytes, where the bytes are *not* what the encoder would produce; ``first_batch``:
    more arguments of its first batch (LogBuilder.batch)."""
    log = LogBuilder(segment_base_offset=0)
    log.batch([rec(f"k{i}", f"value {i} " * 20) for i in range(20)], codec=codec, **first_batch)
    log.batch([tombstone("k1"), rec("k2", "v")], codec=codec)
    table = log.table()
    enc = encode_batches(table)
    data = enc.to_bytes()
    pieces = [_recompress(data[p:p + s], codec, 1) for p, s in zip(enc.headers.position, enc.headers.size)]
    source = b"".join(pieces)
    positions = scan_batches(source).position
    rows_per_batch = [20, 2]
    table = _with(table, "batch_position", [int(p) for p, n in zip(positions, rows_per_batch) for _ in range(n)])
    return table, source


def test_whole_batches_are_copied_verbatim() -> None:
    table, source = _source_segment(GZIP)
    assert encode_batches(table).to_bytes() != source  # would not match by re-encoding
    assert encode_batches(table, sources={0: source}).to_bytes() == source


def test_partial_batch_changed_horizon_or_damage_forces_reencoding() -> None:
    table, source = _source_segment(GZIP)
    first_len = scan_batches(source).size[0]
    partial = table.filter(pa.compute.not_equal(table["offset"], 3))
    out = encode_batches(partial, sources={0: source}).to_bytes()
    assert out[-(len(source) - first_len):] == source[first_len:]  # the intact second batch is copied
    assert scan_batches(out).record_count.tolist() == [19, 2]

    stamped = _with(table, "delete_horizon_ms", [None] * 20 + [5_000, 5_000])
    out = encode_batches(stamped, sources={0: source}).to_bytes()
    assert out[:first_len] == source[:first_len]
    assert scan_batches(out).base_timestamp.tolist()[1] == 5_000

    damaged = bytearray(source)
    damaged[first_len - 1] ^= 0xFF
    out = encode_batches(table, sources={0: bytes(damaged)}).to_bytes()
    assert out[:first_len] != bytes(damaged[:first_len])
    assert kafka_python_batches(out)[0][0].records_count == 20

    # a codec override that differs from the source's codec re-encodes too
    out = encode_batches(table, sources={0: source}, codec=LZ4).to_bytes()
    assert set(scan_batches(out).codec.tolist()) == {LZ4}


def _first_batch_changed(source: bytes, at: int, width: int) -> bytes:
    """``source`` with the big-endian field of ``width`` bytes at ``at`` of its first batch one higher, and that
    batch's CRC made right again: only a comparison of the header can tell the batch from the one the rows
    describe."""
    first_len = int(scan_batches(source).size[0])
    changed = bytearray(source)
    value = int.from_bytes(changed[at:at + width], "big", signed=True)
    changed[at:at + width] = (value + 1).to_bytes(width, "big", signed=True)
    changed[V2_CRC:V2_CRC + 4] = crc32c.crc32c(bytes(changed[V2_CRC_START:first_len])).to_bytes(4, "big")
    return bytes(changed)


def _first_batch_copied(table: pa.Table, source: bytes) -> bool:
    first_len = int(scan_batches(source).size[0])
    out = encode_batches(table, sources={0: source}).to_bytes()
    assert kafka_python_batches(out)[0][0].records_count == 20
    return out[:first_len] == source[:first_len]


@pytest.mark.parametrize("field, at, width", [
    ("base offset", 0, 8), ("partition leader epoch", 12, 4), ("attributes", 21, 2), ("last offset delta", 23, 4),
    ("producer id", 43, 8), ("producer epoch", 51, 2), ("base sequence", 53, 4), ("record count", 57, 4)])
def test_a_source_batch_whose_header_differs_in_one_field_is_re_encoded(field: str, at: int, width: int) -> None:
    table, source = _source_segment(GZIP)
    assert _first_batch_copied(table, source)  # unchanged, it is copied
    assert not _first_batch_copied(table, _first_batch_changed(source, at, width))


def test_a_source_batch_s_timestamps_count_where_what_is_written_depends_on_them() -> None:
    base_ts, max_ts = (27, 8), (35, 8)
    # a stamped delete horizon is the base timestamp: another one there is another batch
    table, source = _source_segment(GZIP, delete_horizon_ms=5_000_000)
    assert _first_batch_copied(table, source)
    assert not _first_batch_copied(table, _first_batch_changed(source, *base_ts))
    # with log-append time the max timestamp is every record's timestamp
    table, source = _source_segment(GZIP, timestamp_type=1)
    assert _first_batch_copied(table, source)
    assert not _first_batch_copied(table, _first_batch_changed(source, *max_ts))
    # with create time, a producer may store a max timestamp that is not its records' largest: kept as it is
    table, source = _source_segment(GZIP)
    assert _first_batch_copied(table, _first_batch_changed(source, *max_ts))


def test_a_table_of_several_chunks_encodes_to_the_same_bytes_as_one_chunk() -> None:
    """Decoded segments arrive as one chunk each; the encoder encodes chunk by chunk instead of copying them
    into one. The bytes must not depend on how the rows are chunked, nor on where header-only batches fall."""
    import numpy as np

    from segment_io.generate import GenerateSpec, synthetic_table
    from tests.support.builders import empty_batch

    table = synthetic_table(GenerateSpec(records=6_000, transactional_share=0.3, aborted_share=0.5, headers=True,
                                         codec=1), "t", 0).combine_chunks()
    base = table["batch_base_offset"].to_numpy()
    cuts = [int(np.searchsorted(base, base[i])) for i in (1_500, 4_000)]  # at batch starts
    gap = cuts[1]
    # make room for a header-only batch between the chunks: drop the batch starting at the second cut
    nxt = int(np.searchsorted(base, base[gap], side="right"))
    hole_base, hole_last = int(base[gap]), int(table["batch_last_offset"][gap].as_py())
    kept = pa.concat_tables([table.slice(0, gap), table.slice(nxt)]).combine_chunks()
    empties = pa.concat_tables([empty_batch(hole_base, hole_last, pid=9, epoch=0, max_timestamp=5),
                                empty_batch(int(base[-1]) + 10_000, int(base[-1]) + 10_000, pid=9, epoch=0)])
    bounds = [0, cuts[0], gap, kept.num_rows]
    chunked = pa.Table.from_batches([kept.slice(a, b - a).to_batches()[0] for a, b in zip(bounds, bounds[1:])])
    assert chunked.column(0).num_chunks == 3
    one = encode_batches(kept, empty_batches=empties)
    many = encode_batches(chunked, empty_batches=empties)
    assert many.to_bytes() == one.to_bytes()
    assert np.array_equal(many.headers.position, one.headers.position)
    # a chunk boundary inside a batch falls back to combining, with the same result
    inside = cuts[0] + 1
    split = pa.Table.from_batches([kept.slice(0, inside).to_batches()[0], kept.slice(inside).combine_chunks()
                                   .to_batches()[0]])
    assert encode_batches(split, empty_batches=empties).to_bytes() == one.to_bytes()


def test_an_encoding_split_into_segments_of_whole_batches() -> None:
    """Pieces of whole batches cut across copied, compressed and plain runs: laid end to end they are the
    encoding, each piece's headers positioned from its own first byte."""
    import numpy as np

    from segment_io.decode import decode_segment_bytes

    log = LogBuilder()
    for i in range(9):
        log.batch([rec(f"k{i}", f"v{i}" * 10), rec(f"j{i}", None)], codec=(0, 0, 1, 3)[i % 4])
    data = encode_batches(log.table()).to_bytes()
    decoded = decode_segment_bytes(data, segment_base_offset=0)
    kept = decoded.filter(pa.array([i % 6 != 1 for i in range(decoded.num_rows)]))  # every third batch re-encoded
    whole = encode_batches(kept, sources={0: data})
    assert len(whole.buffers) > 3
    for cuts in ([0, 9], [0, 1, 2, 9], [0, 4, 4, 5, 9], [0, 3, 6, 7, 8, 9]):
        pieces = whole.split(cuts)
        assert b"".join(p.to_bytes() for p in pieces) == whole.to_bytes()
        for piece, a, b in zip(pieces, cuts, cuts[1:]):
            assert piece.batch_count == b - a
            first = whole.headers.position[a] if b > a else 0
            assert np.array_equal(piece.headers.position, whole.headers.position[a:b] - first)
            assert np.array_equal(piece.headers.crc, whole.headers.crc[a:b])
            assert piece.size == sum(len(v) for v in piece.buffers)
    for bad in ([0], [1, 9], [0, 8], [0, 5, 3, 9]):
        with pytest.raises(UsageError, match="batch cuts"):
            whole.split(bad)
