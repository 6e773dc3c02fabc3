"""Every real broker-written segment in the shared fixtures decodes, consistently with its batch headers."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from segment_io.decode import (
    decode_key_hashes_bytes,
    decode_segment_bytes,
    read_segment,
    verify_segment_crcs,
)
from segment_io.format import scan_batches
from tests.support.paths import KAFKA_REAL

LOGS = sorted(KAFKA_REAL.glob("**/*.log")) + sorted(KAFKA_REAL.glob("_supplemental/*/*.messageset"))


def _rel(path: Path) -> str:
    return str(path.relative_to(KAFKA_REAL))


@pytest.mark.parametrize("path", LOGS, ids=_rel)
def test_fixture_decodes_consistently_with_headers(path: Path) -> None:
    data = path.read_bytes()
    table = read_segment(path)
    headers = scan_batches(data)
    v2 = headers.magic == 2
    if v2.all():
        assert table.num_rows == int(headers.record_count.sum())
        # each batch's records lie between its base and last offset
        base = table.column("batch_base_offset").to_numpy()
        last = table.column("batch_last_offset").to_numpy()
        offsets = table.column("offset").to_numpy()
        assert np.all((base <= offsets) & (offsets <= last))
    else:
        # legacy: uncompressed messages are one record each; wrappers hold at least one
        assert table.num_rows >= len(headers)
    offsets = table.column("offset").to_numpy()
    assert np.all(np.diff(offsets) > 0)
    assert verify_segment_crcs(data, path=str(path)) == []
    hashes = decode_key_hashes_bytes(data)
    assert hashes.column("offset").to_pylist() == offsets.tolist()
    assert hashes.column("key_is_null").to_pylist() == table.column("key").is_null().to_pylist()


def test_fixtures_were_found() -> None:
    assert len(LOGS) >= 50


def _fixture(rel: str) -> Path:
    return KAFKA_REAL / rel


def test_snappy_record_with_headers() -> None:
    table = read_segment(_fixture("seanorth-kafka2.8-snappy-headers/kafka-logs/some-topic-0/00000000000000000000.log"))
    assert set(table.column("codec").to_pylist()) == {2}
    first = table.slice(0, 1).to_pylist()[0]
    assert first["topic"] == "some-topic" and first["partition"] == 0
    assert first["headers"] == [{"key": "__Key_TypeId__", "value": b"bbejeck.model.PurchaseKey"}]
    assert first["value"].startswith(b'{"item"')


def test_commit_markers_of_a_transactional_topic() -> None:
    path = _fixture("danielowo-ksqldb-kraft-txn/kafka_data/_confluent-ksql-default__command_topic-0/"
                    "00000000000000000000.log")
    table = read_segment(path)
    control = table.filter(table.column("control"))
    assert control.num_rows == 4
    assert all(control.column("transactional").to_pylist())
    for key in control.column("key").to_pylist():
        assert struct.unpack(">hh", key) == (0, 1)  # version 0, COMMIT
    hashes = decode_key_hashes_bytes(path.read_bytes())
    assert sorted(hashes.column("control_type").to_pylist()) == [-1] * 4 + [1] * 4
    assert read_segment(path, include_control=False).num_rows == 4


def test_lz4_log_append_time_batches() -> None:
    path = _fixture("rjmfernandes-cp7.6-kraft-lz4/data/_confluent-monitoring-0/00000000000000000000.log")
    table = read_segment(path, columns=["timestamp", "timestamp_type", "batch_max_timestamp", "codec"])
    assert set(table.column("codec").to_pylist()) == {3}
    assert set(table.column("timestamp_type").to_pylist()) == {1}
    assert table.column("timestamp").equals(table.column("batch_max_timestamp"))


def test_gzip_batches_from_kafkajs() -> None:
    path = _fixture("berkayakcay-kafkajs-gzip/kafka-data/topic-logx-001-0/00000000000000000000.log")
    table = read_segment(path)
    assert table.num_rows == 17
    assert set(table.column("codec").to_pylist()) == {1}
    assert table.column("offset").to_pylist() == list(range(17))


def test_magic1_segment() -> None:
    table = read_segment(_fixture("xpxwo100-kafka0.10-magic-v1/tmp/kafka-logs/topic1-0/00000000000000000000.log"))
    assert table.num_rows == 5
    assert set(table.column("magic").to_pylist()) == {1}
    assert all(ts > 1_400_000_000_000 for ts in table.column("timestamp").to_pylist())
    assert set(table.column("delete_horizon_ms").to_pylist()) == {None}


@pytest.mark.parametrize("codec_name, codec", [("gzip", 1), ("snappy", 2)])
def test_magic0_compressed_wrappers_match_uncompressed_capture(codec_name: str, codec: int) -> None:
    base = KAFKA_REAL / "_supplemental/kafka-rust-v0-fetch-messagesets"
    plain = decode_segment_bytes((base / "fetch1.mytopic.1p.nocompression.kafka.0821.messageset").read_bytes())
    packed = decode_segment_bytes((base / f"fetch1.mytopic.1p.{codec_name}.kafka.0821.messageset").read_bytes())
    assert packed.num_rows == plain.num_rows == 42
    assert set(packed.column("codec").to_pylist()) == {codec}
    assert packed.column("offset").to_pylist() == list(range(42))
    assert set(packed.column("timestamp").to_pylist()) == {-1}
    assert set(packed.column("batch_last_offset").to_pylist()) == {41}
    assert set(packed.column("batch_base_offset").to_pylist()) == {0}
    # the same producer run, once compressed and once not: the payloads have the same shape
    assert [len(v) for v in packed.column("value").to_pylist()] == [len(v) for v in plain.column("value").to_pylist()]


def test_segment_with_non_zero_base_offset() -> None:
    path = _fixture("donaldy-kafka2.7-compacted-offsets/kafka-logs/__consumer_offsets-39/00000000000000000018.log")
    table = read_segment(path)
    assert table.column("offset").to_pylist() == [18, 19]
    assert set(table.column("segment_base_offset").to_pylist()) == {18}
    assert table.column("value").null_count == 2  # both tombstones
    assert set(table.column("topic").to_pylist()) == {"__consumer_offsets"}
    assert set(table.column("partition").to_pylist()) == {39}
