"""Fuzz the decoder: any bytes give records or a CorruptRecordError subclass, never another exception
(IndexError, ValueError, a numba crash, ...) and never a hang.

CRC checks are switched off for the mutated inputs, or nearly every mutation would stop at the CRC and
the record kernels would never see corrupt bytes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io.decode import decode_key_hashes_bytes, decode_segment_bytes, verify_segment_crcs
from segment_io.errors import CorruptRecordError
from tests.conftest import KAFKA_REAL
from tests.segment_io.test_decode_kafka_python import _random_records, _v2_batch

SMALL_FIXTURES = [
    "seanorth-kafka2.8-snappy-headers/kafka-logs/some-topic-0/00000000000000000000.log",
    "rjmfernandes-cp7.6-kraft-lz4/data/_confluent-command-0/00000000000000000000.log",
    "christseng89-kraft-leader-changes/kafka-logs/__cluster_metadata-0/00000000000000000000.log",
    "xpxwo100-kafka0.10-magic-v1/tmp/kafka-logs/topic1-0/00000000000000000000.log",
    "danielowo-ksqldb-kraft-txn/kafka_data/CURRENTLOCATION-0/00000000000000000000.log",
    "_supplemental/kafka-rust-v0-fetch-messagesets/fetch1.mytopic.1p.gzip.kafka.0821.messageset",
    "_supplemental/kafka-rust-v0-fetch-messagesets/fetch2.mytopic.nocompression.kafka.0900.messageset",
    "mscaldas2012-cp5.1-lz4-connect/kafka-data/_confluent-command-0/00000000000000000000.log",
]


def _seeds() -> list[bytes]:
    seeds = [(KAFKA_REAL / rel).read_bytes() for rel in SMALL_FIXTURES]
    rng = random.Random(3)
    # zstd and headers-with-null-values are not in the fixtures
    seeds.append(_v2_batch(4, _random_records(rng, 6), base_offset=12))
    seeds.append(_v2_batch(0, _random_records(rng, 6), base_offset=99))
    return seeds


SEEDS = _seeds()


def _decode_every_way(data: bytes, *, verify_crc: bool) -> None:
    for call in (
        lambda: decode_segment_bytes(data, verify_crc=verify_crc),
        lambda: decode_segment_bytes(data, verify_crc=verify_crc, allow_truncated_tail=True,
                                     columns=["offset", "headers"]),
        lambda: decode_key_hashes_bytes(data, verify_crc=verify_crc, include_control=False),
    ):
        try:
            table = call()
        except CorruptRecordError as exc:
            assert exc.detail
            continue
        table.validate(full=True)
    verify_segment_crcs(data)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    _decode_every_way(data, verify_crc=True)
    _decode_every_way(data, verify_crc=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_fixtures(data: bytes) -> None:
    _decode_every_way(data, verify_crc=False)


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=120))
def test_random_record_region_behind_a_valid_header(payload: bytes) -> None:
    # a well-formed v2 header in front of arbitrary record bytes exercises the record kernel directly
    import struct

    from tests.segment_io.test_decode_kafka_python import _rewrite_header

    header = bytearray(_v2_batch(0, [(b"k", b"v", [], 1)], base_offset=0)[:61])
    struct.pack_into(">i", header, 8, 49 + len(payload))
    batch = _rewrite_header(bytes(header) + payload, count=len(payload) // 8 + 1)
    _decode_every_way(batch, verify_crc=True)


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_prefix_of_a_seed(seed: int) -> None:
    data = SEEDS[seed][:2000]
    for cut in range(0, len(data), max(1, len(data) // 150)):
        _decode_every_way(data[:cut], verify_crc=True)
