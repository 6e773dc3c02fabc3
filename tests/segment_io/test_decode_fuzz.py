"""Fuzz the decoder: any bytes give records or a CorruptRecordError subclass, never another exception
(IndexError, ValueError, a numba crash, MemoryError, ...) and never a hang.

CRC checks are switched off for the mutated inputs, or nearly every mutation would stop at the CRC and
the record kernels would never see corrupt bytes. Compressed batches that inflate a lot, in every framing
segjobs reads, run against a lowered per-batch bound (``max_batch_bytes``) so that each example stays small.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io.decode import (
    decode_key_hashes_bytes,
    decode_segment_bytes,
    verify_segment_crcs,
)
from segment_io.errors import CorruptRecordError, OversizedBatchError
from tests.support.bombs import (
    VARIANTS,
    inflating_payload,
    records_payload,
    v2_batch_around,
)
from tests.support.hypothesis_budget import examples
from tests.support.kafka_python_batches import random_records, v2_batch
from tests.support.paths import KAFKA_REAL

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
    seeds.append(v2_batch(4, random_records(rng, 6), base_offset=12))
    seeds.append(v2_batch(0, random_records(rng, 6), base_offset=99))
    return seeds


SEEDS = _seeds()


def _decode_every_way(data: bytes, *, verify_crc: bool, max_batch_bytes: int | None = None) -> list:
    """Decode ``data`` the ways segjobs does; returns what each way gave (a table or the error)."""
    outcomes: list = []
    for call in (
        lambda: decode_segment_bytes(data, verify_crc=verify_crc, max_batch_bytes=max_batch_bytes),
        lambda: decode_segment_bytes(data, verify_crc=verify_crc, allow_truncated_tail=True,
                                     columns=["offset", "headers"], max_batch_bytes=max_batch_bytes),
        lambda: decode_key_hashes_bytes(data, verify_crc=verify_crc, include_control=False,
                                        max_batch_bytes=max_batch_bytes),
    ):
        try:
            table = call()
        except CorruptRecordError as exc:
            assert exc.detail
            outcomes.append(exc)
            continue
        table.validate(full=True)
        outcomes.append(table)
    verify_segment_crcs(data, max_batch_bytes=max_batch_bytes)
    return outcomes


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


# Fuzzing the decoder: cheap examples, and more of them find more: above the profile's budget here and below.
@settings(max_examples=examples(2), suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    _decode_every_way(data, verify_crc=True)
    _decode_every_way(data, verify_crc=False)


@settings(max_examples=examples(2), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_fixtures(data: bytes) -> None:
    _decode_every_way(data, verify_crc=False)


@given(st.binary(min_size=0, max_size=120))
def test_random_record_region_behind_a_valid_header(payload: bytes) -> None:
    # a well-formed v2 header in front of arbitrary record bytes exercises the record kernel directly
    import struct

    from tests.support.kafka_python_batches import rewrite_header

    header = bytearray(v2_batch(0, [(b"k", b"v", [], 1)], base_offset=0)[:61])
    struct.pack_into(">i", header, 8, 49 + len(payload))
    batch = rewrite_header(bytes(header) + payload, count=len(payload) // 8 + 1)
    _decode_every_way(batch, verify_crc=True)


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_prefix_of_a_seed(seed: int) -> None:
    data = SEEDS[seed][:2000]
    for cut in range(0, len(data), max(1, len(data) // 150)):
        _decode_every_way(data[:cut], verify_crc=True)


# --------------------------------------------------------------------------------------------------
# Batches that inflate: every codec and framing, against a lowered bound
# --------------------------------------------------------------------------------------------------

BOUND = 256 << 10
PATTERN = b"0123456789abcdefghijklmnopqrstuvwxyz!"  # does not divide any block size: compressed blocks


def _content(kind: str, size: int) -> bytes:
    if kind == "records":  # a genuine one-record batch whose value makes it about ``size`` bytes
        return records_payload(max(size - 20, 0))
    return (PATTERN * (size // len(PATTERN) + 1))[:size] if kind == "pattern" else bytes(size)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("kind", ["zeros", "pattern", "records"])
def test_an_inflating_batch_of_every_framing_decodes_below_the_bound_and_is_refused_above(variant: str,
                                                                                           kind: str) -> None:
    for size in (BOUND // 2, 3 * BOUND):
        content = _content(kind, size)
        data = v2_batch_around(inflating_payload(variant, len(content), content), codec=VARIANTS[variant],
                               count=1, base_offset=7)
        outcomes = _decode_every_way(data, verify_crc=True, max_batch_bytes=BOUND)
        if len(content) > BOUND:
            assert all(isinstance(o, OversizedBatchError) and o.offset == 7 for o in outcomes), outcomes
        elif kind == "records":
            assert outcomes[0]["value"].to_pylist() == [bytes(size - 20)]
        else:  # zeros and text are not records: a clear error about them, not about the size
            assert all(isinstance(o, CorruptRecordError) and not isinstance(o, OversizedBatchError)
                       for o in outcomes), outcomes


@st.composite
def inflating_batches(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A segment whose last batch inflates: any framing, content, size around the bound and record count,
    sometimes with bytes of the compressed payload changed (the CRC stays correct, so the damage reaches
    the decompressor). Returns the bytes and whether the payload inflates intact past the bound."""
    variant = draw(st.sampled_from(sorted(VARIANTS)))
    kind = draw(st.sampled_from(["zeros", "pattern", "records"]))
    size = draw(st.sampled_from([0, 1, BOUND - 1, BOUND, BOUND + 1, 4 * BOUND]) | st.integers(0, 4 * BOUND))
    content = _content(kind, size)
    payload = bytearray(inflating_payload(variant, len(content), content))
    mutations = draw(st.integers(0, 3)) if payload else 0
    for _ in range(mutations):
        at = draw(st.integers(0, len(payload) - 1))
        payload[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF])) ^ draw(st.booleans())
    count = draw(st.sampled_from([1, 1, 2, 0, 1000]))
    front = draw(st.sampled_from(SEEDS[-2:] + [b""]))  # a generated v2 batch (zstd or none) before it
    batch = v2_batch_around(bytes(payload), codec=VARIANTS[variant], count=count, base_offset=10_000)
    return front + batch, mutations == 0 and count > 0 and len(content) > BOUND


@settings(max_examples=examples(1.5), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inflating_batches())
def test_inflating_batches(case: tuple[bytes, bool]) -> None:
    data, oversized = case
    for verify_crc in (True, False):
        outcomes = _decode_every_way(data, verify_crc=verify_crc, max_batch_bytes=BOUND)
        if oversized:
            assert all(isinstance(o, OversizedBatchError) for o in outcomes), outcomes
