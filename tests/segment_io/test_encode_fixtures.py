"""Real broker-written segments: decoded rows re-encode byte for byte (uncompressed v2 batches), copy byte for
byte through ``sources`` (every v2 batch), and re-encode to the same rows otherwise."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # makes pa.compute available
import pytest
from kafka.record import MemoryRecords

from segment_io.decode import decode_segment_bytes
from segment_io.encode import encode_batches
from segment_io.format import scan_batches
from tests.support.corpus import empty_batches_of, fixture_files

#: Columns that describe where a batch sat in its source file, or what only a copy can reproduce.
PLACEMENT = ("batch_position", "batch_size")


def supplemental_files(root: Path) -> list[Path]:
    return sorted((root / "_supplemental").rglob("*.messageset"))


@pytest.fixture(scope="module")
def segments(kafka_real: Path) -> list[tuple[Path, bytes, pa.Table]]:
    out = []
    for path in fixture_files(kafka_real):
        data = path.read_bytes()
        out.append((path, data, decode_segment_bytes(data, path=str(path), segment_base_offset=0)))
    assert len(out) > 40
    return out


@pytest.mark.slow
def test_every_uncompressed_v2_batch_reencodes_byte_for_byte(segments) -> None:
    checked = 0
    for path, data, table in segments:
        original = scan_batches(data)
        enc = encode_batches(table, empty_batches=empty_batches_of(data))
        out = enc.to_bytes()
        by_base = {int(b): i for i, b in enumerate(enc.headers.base_offset)}
        for i in range(len(original)):
            if original.magic[i] != 2 or original.codec[i] != 0:
                continue
            j = by_base[int(original.base_offset[i])]
            p, s = int(original.position[i]), int(original.size[i])
            q, t = int(enc.headers.position[j]), int(enc.headers.size[j])
            assert out[q:q + t] == data[p:p + s], f"{path}: batch at byte {p} differs when re-encoded"
            checked += 1
        if all(original.magic == 2) and all(original.codec == 0):
            assert out == data, path
    assert checked > 40_000  # the corpus holds about 49 000 uncompressed v2 batches


def test_every_v2_batch_copies_byte_for_byte(segments) -> None:
    compressed = 0
    for path, data, table in segments:
        original = scan_batches(data)
        out = encode_batches(table, empty_batches=empty_batches_of(data), sources={0: data}).to_bytes()
        if all(original.magic == 2):
            assert out == data, path
        compressed += int(((original.magic == 2) & (original.codec != 0)).sum())
    assert compressed > 2_000  # gzip, snappy and lz4 batches from real producers


def _comparable(table: pa.Table) -> pa.Table:
    return table.drop_columns(list(PLACEMENT))


def test_compressed_batches_reencode_to_the_same_rows(segments) -> None:
    for path, data, table in segments:
        original = scan_batches(data)
        if not (original.magic == 2).all() or not (original.codec != 0).any():
            continue
        out = encode_batches(table).to_bytes()
        again = decode_segment_bytes(out, path="re-encoded", segment_base_offset=0)
        # LOG_APPEND_TIME batches lose the producer's base timestamp (their records read as the append time):
        # like Kafka's cleaner, the encoder writes the append time as base, all deltas zero
        lat = pa.compute.equal(table["timestamp_type"], 1)
        expected_base = pa.compute.if_else(lat, table["batch_max_timestamp"], table["batch_base_timestamp"])
        assert again["batch_base_timestamp"].equals(expected_base), path
        assert _comparable(again).drop_columns(["batch_base_timestamp"]).equals(
            _comparable(table).drop_columns(["batch_base_timestamp"])), path
        # and an independent reader agrees on every record
        records = MemoryRecords(out)
        seen = []
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            seen.extend((r.offset, r.key, r.value) for r in batch)
        assert seen == list(zip(table["offset"].to_pylist(), table["key"].to_pylist(), table["value"].to_pylist()))


def test_legacy_message_sets_become_v2_with_the_same_records(segments, kafka_real: Path) -> None:
    legacy = [(p, d, t) for p, d, t in segments if (scan_batches(d).magic < 2).any()]
    legacy += [(p, p.read_bytes(), decode_segment_bytes(p.read_bytes(), path=str(p), segment_base_offset=0))
               for p in supplemental_files(kafka_real)]
    assert len(legacy) >= 4
    for path, _data, table in legacy:
        out = encode_batches(table).to_bytes()
        assert (scan_batches(out).magic == 2).all()
        again = decode_segment_bytes(out, path="re-encoded", segment_base_offset=0)
        for column in ("offset", "timestamp", "key", "value", "producer_id", "transactional"):
            assert again[column].equals(table[column]), (path, column)
