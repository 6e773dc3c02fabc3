"""The legacy (magic 0 and 1) message-set path of the decoder (segment_io.decode_legacy), through the decoder's
entry points: fields, compressed wrappers (Kafka 0.8's LZ4 frames too), CRCs and corrupt inner message sets."""

from __future__ import annotations

import cramjam
import pytest

from segment_io import errors
from segment_io.decode import decode_segment_bytes
from tests.support.damage import assert_located
from tests.support.legacy_messages import legacy_message


def test_legacy_magic0_lz4_with_kafka08_header_checksum() -> None:
    # Kafka 0.8 computed the LZ4 frame's header checksum over the magic number too (KAFKA-3160).
    inner = b"".join(legacy_message(0, 10 + i, b"k%d" % i, b"value-%d" % i) for i in range(3))
    frame = bytearray(cramjam.lz4.compress(inner))
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    frame[descriptor_end] = (_xxh32_reference(bytes(frame[0:descriptor_end])) >> 8) & 0xFF
    wrapper = legacy_message(0, 12, None, bytes(frame), attributes=3)
    table = decode_segment_bytes(wrapper)
    assert table.column("offset").to_pylist() == [10, 11, 12]
    assert table.column("value").to_pylist() == [b"value-0", b"value-1", b"value-2"]
    assert table.column("timestamp").to_pylist() == [-1, -1, -1]
    assert table.column("batch_base_offset").to_pylist() == [10, 10, 10]


def _xxh32_reference(data: bytes) -> int:
    """xxHash32, straight from its specification (inputs shorter than 16 bytes)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    acc = (p5 + len(data)) & m
    i = 0
    for i in range(0, len(data) - 3, 4):
        acc = rotl((acc + int.from_bytes(data[i:i + 4], "little") * p3) & m, 17) * p4 & m
    i = len(data) - len(data) % 4
    for b in data[i:]:
        acc = rotl((acc + b * p5) & m, 11) * p1 & m
    acc = ((acc ^ (acc >> 15)) * p2) & m
    acc = ((acc ^ (acc >> 13)) * p3) & m
    return acc ^ (acc >> 16)


def test_xxh32_reference_matches_lz4_frames() -> None:
    # the LZ4 frame format's own header checksum is xxh32(descriptor) >> 8: check the reference against it
    frame = bytes(cramjam.lz4.compress(b"abc" * 100))
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    assert frame[descriptor_end] == (_xxh32_reference(frame[4:descriptor_end]) >> 8) & 0xFF


def test_legacy_uncompressed_magic1_fields() -> None:
    data = legacy_message(1, 7, b"k", None, timestamp=123) + legacy_message(1, 8, None, b"v", attributes=0x08,
                                                                            timestamp=456)
    table = decode_segment_bytes(data)
    rows = table.to_pylist()
    assert [(r["offset"], r["timestamp"], r["timestamp_type"], r["key"], r["value"]) for r in rows] == [
        (7, 123, 0, b"k", None), (8, 456, 1, None, b"v")]
    assert {r["producer_id"] for r in rows} == {-1}
    assert {r["headers"] == [] for r in rows} == {True}


def test_legacy_crc_and_inner_corruption() -> None:
    good = legacy_message(1, 3, b"k", b"v", timestamp=1)
    bad = bytearray(legacy_message(1, 4, b"k", b"v", timestamp=1))  # the next offset: only its CRC is wrong
    bad[-1] ^= 1
    with pytest.raises(errors.CrcMismatchError) as info:
        decode_segment_bytes(good + bytes(bad), path="old.log")
    assert_located(info.value, "old.log", len(good), 4)
    # an inner message set that ends mid-message
    inner = legacy_message(0, 0, b"a", b"b")[:-3]
    wrapper = legacy_message(0, 0, None, bytes(cramjam.gzip.compress(inner)), attributes=1)
    with pytest.raises(errors.InvalidLengthError):
        decode_segment_bytes(wrapper)
