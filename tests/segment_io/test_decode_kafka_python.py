"""Cross-check the decoder against kafka-python, an independent implementation of the record format.

Batches are built with kafka-python's builders (which write zero base offsets: we patch our own in, the
base offset is outside every CRC), decoded with segjobs, and compared field by field with what
kafka-python's own reader returns for the same bytes.
"""

from __future__ import annotations

import random
import struct

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from segment_io.decode import decode_key_hashes_bytes, decode_segment_bytes, hash_keys
from segment_io.format import ATTR_DELETE_HORIZON, ATTR_TIMESTAMP_TYPE
from tests.support.kafka_python_batches import random_records, rewrite_header, v2_batch

V2_CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd


def _kafka_python_records(data: bytes) -> list[dict]:
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            out.append({"offset": r.offset, "timestamp": r.timestamp, "timestamp_type": r.timestamp_type,
                        "key": r.key, "value": r.value,
                        "headers": [{"key": k, "value": v} for k, v in (getattr(r, "headers", None) or [])]})
    return out


def _ours(data: bytes) -> list[dict]:
    table = decode_segment_bytes(data, columns=["offset", "timestamp", "timestamp_type", "key", "value",
                                                "headers"])
    return table.to_pylist()


@pytest.mark.parametrize("codec", V2_CODECS)
def test_v2_every_codec_matches_kafka_python(codec: int) -> None:
    rng = random.Random(1000 + codec)
    batches = [
        v2_batch(codec, random_records(rng, 7), base_offset=0),
        v2_batch(codec, random_records(rng, 1), base_offset=40),
        v2_batch(codec, random_records(rng, 60), base_offset=1_000_000_007, transactional=True, pid=77,
                 epoch=3, seq=12),
        v2_batch(codec, random_records(rng, 5), base_offset=2_000_000_000, offset_step=3),
    ]
    data = b"".join(batches)
    expected = _kafka_python_records(data)
    assert len(expected) == 73
    assert _ours(data) == expected

    table = decode_segment_bytes(data)
    # kafka-python stores a batch uncompressed when compression would not shrink it: read each batch's codec
    batch_codecs = [struct.unpack_from(">h", b, 21)[0] & 7 for b in batches]
    assert table.column("codec").to_pylist() == [c for c, n in zip(batch_codecs, (7, 1, 60, 5)) for _ in range(n)]
    assert batch_codecs[2] == codec
    txn = table.filter(table.column("transactional")).to_pylist()
    assert len(txn) == 60
    assert {(r["producer_id"], r["producer_epoch"], r["base_sequence"]) for r in txn} == {(77, 3, 12)}
    assert {r["batch_base_offset"] for r in txn} == {1_000_000_007}
    assert {r["batch_last_offset"] for r in txn} == {1_000_000_007 + 59}


def test_log_append_time_records_read_the_batch_max_timestamp() -> None:
    rng = random.Random(5)
    batch = v2_batch(0, random_records(rng, 4), base_offset=10)
    (attrs,) = struct.unpack_from(">h", batch, 21)
    stamped = rewrite_header(batch, attributes=attrs | ATTR_TIMESTAMP_TYPE, max_ts=1_234_567)
    table = decode_segment_bytes(stamped)
    assert table.column("timestamp").to_pylist() == [1_234_567] * 4
    assert table.column("timestamp_type").to_pylist() == [1] * 4
    # kafka-python agrees
    assert [r["timestamp"] for r in _kafka_python_records(stamped)] == [1_234_567] * 4


def test_delete_horizon_batch_reports_horizon_and_offsets_record_timestamps_from_it() -> None:
    rng = random.Random(6)
    records = random_records(rng, 3)
    batch = v2_batch(0, records, base_offset=0)
    (attrs,) = struct.unpack_from(">h", batch, 21)
    original_base = records[0][3]
    horizon = 9_000_000_000_000
    stamped = rewrite_header(batch, attributes=attrs | ATTR_DELETE_HORIZON, base_ts=horizon)
    table = decode_segment_bytes(stamped)
    assert table.column("delete_horizon_ms").to_pylist() == [horizon] * 3
    # record timestamps are baseTimestamp + delta, and the deltas were written against the original base
    assert table.column("timestamp").to_pylist() == [horizon + ts - original_base for *_, ts in records]
    hashes = decode_key_hashes_bytes(stamped)
    assert hashes.column("delete_horizon_ms").to_pylist() == [horizon] * 3
    plain = decode_segment_bytes(batch)
    assert plain.column("delete_horizon_ms").null_count == 3


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_legacy_message_sets_match_kafka_python(magic: int, codec: int) -> None:
    rng = random.Random(magic * 10 + codec)
    parts = []
    next_offset = 500
    for n in (1, 5, 12):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 24)
        for i in range(n):
            key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(1, 20))
            value = None if (codec == 0 and rng.random() < 0.2) else (rng.randbytes(5) * 50)[:rng.randrange(0, 200)]
            # magic 1 compressed: inner offsets are relative (0..n-1); otherwise absolute
            offset = i if (magic == 1 and codec) else next_offset + i
            builder.append(offset, timestamp=None if magic == 0 else 1_600_000_000_000 + i * 7,
                           key=key, value=value)
        data = bytearray(builder.build())
        if magic == 1 and codec:
            struct.pack_into(">q", data, 0, next_offset + n - 1)  # wrapper offset = absolute last offset
        parts.append(bytes(data))
        next_offset += n + 3
    data = b"".join(parts)
    expected = _kafka_python_records(data)
    for row in expected:  # kafka-python reports magic 0 as timestamp None / type None
        row["timestamp"] = -1 if row["timestamp"] is None else row["timestamp"]
        row["timestamp_type"] = -1 if row["timestamp_type"] is None else row["timestamp_type"]
    assert len(expected) == 18
    assert _ours(data) == expected
    table = decode_segment_bytes(data)
    assert set(table.column("magic").to_pylist()) == {magic}
    assert set(table.column("codec").to_pylist()) <= {0, codec}
    assert table.column("codec").to_pylist()[-12:] == [codec] * 12
    assert table.column("offset").to_pylist()[:6] == [500, 504, 505, 506, 507, 508]


@pytest.mark.parametrize("codec", [0, 3])
def test_key_hashes_match_hash_keys_of_decoded_keys(codec: int) -> None:
    rng = random.Random(42 + codec)
    data = b"".join(v2_batch(codec, random_records(rng, 30), base_offset=i * 100) for i in range(3))
    full = decode_segment_bytes(data)
    hashes = decode_key_hashes_bytes(data)
    hi, lo = hash_keys(full.column("key"))
    assert hashes.column("key_hash_hi").to_numpy().tolist() == hi.tolist()
    assert hashes.column("key_hash_lo").to_numpy().tolist() == lo.tolist()
    assert hashes.column("key_is_null").to_pylist() == full.column("key").is_null().to_pylist()
    assert hashes.column("value_is_null").to_pylist() == full.column("value").is_null().to_pylist()
    for name in ("offset", "timestamp", "batch_base_offset", "batch_last_offset", "producer_id"):
        assert hashes.column(name).to_pylist() == full.column(name).to_pylist()
    assert hashes.column("control_type").to_pylist() == [-1] * 90
