"""Legacy message sets (magic 0 and 1, as old archives hold them): decoded message by message in Python, the
messages of a compressed wrapper after inflating it (within the batch bound of :mod:`segment_io.compression`).

Failures raise subclasses of :class:`~segment_io.errors.CorruptRecordError`; :func:`parse_legacy` and
:func:`inner_messages` leave the location to their caller, :func:`decode_legacy` names the file, the byte position
of the failing wrapper and its offset.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from segment_io import compression
from segment_io.decode_input import HEADERS_TYPE, SegmentBytes
from segment_io.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidLengthError,
    InvalidMagicError,
    RecordCountMismatchError,
    UnsupportedCodecError,
)
from segment_io.format import (
    LEGACY_CODEC_MASK,
    LEGACY_CRC,
    LEGACY_MAGIC,
    LEGACY_MIN_SIZE,
    LEGACY_TIMESTAMP_TYPE,
    LEGACY_V0_HEADER,
    LEGACY_V1_HEADER,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
)
from segment_io.hashing import hash_keys
from segment_io.schema import KEY_HASH_SCHEMA, RECORD_SCHEMA

_NO_TIMESTAMP_TYPE, _CREATE_TIME, _LOG_APPEND_TIME = -1, 0, 1
_PRIME32_1, _PRIME32_2, _PRIME32_3, _PRIME32_4, _PRIME32_5 = (
    2654435761, 2246822519, 3266489917, 668265263, 374761393)


def _xxh32_short(data: bytes) -> int:
    """xxHash32 (seed 0) of fewer than 16 bytes: all an LZ4 frame descriptor needs."""
    m = 0xFFFFFFFF
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & m  # noqa: E731
    h = (_PRIME32_5 + len(data)) & m
    i = 0
    while i + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + word * _PRIME32_3) & m, 17) * _PRIME32_4) & m
        i += 4
    for byte in data[i:]:
        h = (rotl((h + byte * _PRIME32_5) & m, 11) * _PRIME32_1) & m
    h ^= h >> 15
    h = (h * _PRIME32_2) & m
    h ^= h >> 13
    h = (h * _PRIME32_3) & m
    h ^= h >> 16
    return h


def _fix_kafka08_lz4(payload: bytes) -> bytes:
    """Magic-0 LZ4 frames (Kafka 0.8/0.9, KAFKA-3160) carry a header checksum computed over the wrong
    bytes; rewrite it so a standard LZ4 frame reader accepts the frame."""
    if len(payload) < 7:
        return payload
    descriptor_end = 6 + (8 if payload[4] & 0x08 else 0) + (4 if payload[4] & 0x01 else 0)
    if len(payload) <= descriptor_end:
        return payload
    hc = (_xxh32_short(payload[4:descriptor_end]) >> 8) & 0xFF
    return payload[:descriptor_end] + bytes([hc]) + payload[descriptor_end + 1:]


@dataclass
class LegacyMessage:
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def parse_legacy(mv: memoryview, pos: int, verify_crc: bool) -> tuple[LegacyMessage, int]:
    """One legacy message at ``pos`` of ``mv``; returns it and the position after it. Raises
    CorruptRecordError subclasses without a location (callers add it)."""
    end = len(mv)
    if end - pos < LOG_OVERHEAD + LEGACY_MIN_SIZE[0]:
        raise InvalidLengthError(f"message at byte {pos} is cut short: {end - pos} bytes left")
    offset, size = struct.unpack_from(">qi", mv, pos)
    magic = mv[pos + LEGACY_MAGIC]
    if magic not in (0, 1):
        raise InvalidMagicError(f"inner message at byte {pos} has magic {magic}; expected 0 or 1")
    if size < LEGACY_MIN_SIZE[magic] or size > end - pos - LOG_OVERHEAD:
        raise InvalidLengthError(f"message size {size} at byte {pos} is impossible (bytes left: "
                                 f"{end - pos - LOG_OVERHEAD})")
    msg_end = pos + LOG_OVERHEAD + size
    if verify_crc:
        (stored,) = struct.unpack_from(">I", mv, pos + LEGACY_CRC)
        actual = zlib.crc32(mv[pos + LEGACY_MAGIC:msg_end])
        if stored != actual:
            raise CrcMismatchError(f"CRC-32 mismatch in message at byte {pos}: stored {stored:#010x}, "
                                   f"computed {actual:#010x}")
    if magic == 1:
        (_, _, _, _, attrs, ts) = LEGACY_V1_HEADER.unpack_from(mv, pos)
        p = pos + LEGACY_V1_HEADER.size
    else:
        (_, _, _, _, attrs) = LEGACY_V0_HEADER.unpack_from(mv, pos)
        ts = NO_TIMESTAMP
        p = pos + LEGACY_V0_HEADER.size
    fields: list[bytes | None] = []
    for what in ("key", "value"):
        if msg_end - p < 4:
            raise InvalidLengthError(f"{what} length of message at byte {pos} runs past the message")
        (n,) = struct.unpack_from(">i", mv, p)
        p += 4
        if n < -1 or n > msg_end - p:
            raise InvalidLengthError(f"{what} length {n} of message at byte {pos} runs past the message")
        if n >= 0:
            fields.append(bytes(mv[p:p + n]))
            p += n
        else:
            fields.append(None)
    if p != msg_end:
        raise InvalidLengthError(f"message at byte {pos} declares {size} bytes but its fields use "
                                 f"{p - pos - LOG_OVERHEAD}")
    return LegacyMessage(offset, magic, attrs, ts, fields[0], fields[1]), msg_end


def inner_messages(wrapper: LegacyMessage, verify_crc: bool,
                    max_batch_bytes: int) -> list[tuple[int, int, int, LegacyMessage]]:
    """Records of a compressed wrapper as ``(absolute offset, timestamp, timestamp type, message)``. The
    wrapper's payload inflates to at most ``max_batch_bytes`` (its record count is unknown until then)."""
    codec = wrapper.attributes & LEGACY_CODEC_MASK
    if wrapper.value is None:
        raise CorruptRecordError("compressed wrapper message has a null value")
    if codec > compression.LZ4:
        raise UnsupportedCodecError(f"codec {codec} is not valid in a magic {wrapper.magic} message")
    payload = wrapper.value
    if codec == compression.LZ4 and wrapper.magic == 0:
        payload = _fix_kafka08_lz4(payload)
    raw = memoryview(compression.decompress(codec, payload, limit=max_batch_bytes))
    inner: list[LegacyMessage] = []
    pos = 0
    while pos < len(raw):
        msg, pos = parse_legacy(raw, pos, verify_crc)
        if msg.attributes & LEGACY_CODEC_MASK:
            raise CorruptRecordError("inner message of a compressed wrapper is itself compressed")
        inner.append(msg)
    if not inner:
        raise RecordCountMismatchError("compressed wrapper holds no messages")
    wrapper_append = wrapper.magic == 1 and bool(wrapper.attributes & LEGACY_TIMESTAMP_TYPE)
    if wrapper.magic == 1 and wrapper.offset != 0:
        # magic 1 stores inner offsets relative to the wrapper, whose own offset is the last record's
        last_inner = inner[-1].offset
        if wrapper.offset < last_inner:
            raise CorruptRecordError(f"wrapper offset {wrapper.offset} is below its last inner offset "
                                     f"{last_inner}")
        base = wrapper.offset - last_inner
    else:
        base = 0  # magic 0 inner offsets are absolute; a zero magic-1 wrapper offset (librdkafka) too
    out = []
    for msg in inner:
        if msg.magic == 0:
            ts, ts_type = NO_TIMESTAMP, _NO_TIMESTAMP_TYPE
        else:
            ts = wrapper.timestamp if wrapper_append else msg.timestamp
            ts_type = _LOG_APPEND_TIME if wrapper_append else _CREATE_TIME
        out.append((base + msg.offset, ts, ts_type, msg))
    return out


def decode_legacy(seg: SegmentBytes, batches: np.ndarray, names: set[str]) -> list[dict[str, pa.Array]]:
    hdr = seg.hdr
    rows: dict[str, list] = {name: [] for name in (
        "offset", "timestamp", "timestamp_type", "key", "value", "batch_base_offset", "batch_last_offset",
        "batch_position", "batch_size", "batch_base_timestamp", "batch_max_timestamp", "magic", "codec")}
    for b in batches.tolist():
        pos = int(hdr.position[b])
        try:
            wrapper, _ = parse_legacy(seg.mv[:pos + int(hdr.size[b])], pos, seg.verify_crc)
            codec = wrapper.attributes & LEGACY_CODEC_MASK
            if codec == 0:
                ts_type = _NO_TIMESTAMP_TYPE if wrapper.magic == 0 else int(
                    bool(wrapper.attributes & LEGACY_TIMESTAMP_TYPE))
                records = [(wrapper.offset, wrapper.timestamp, ts_type, wrapper)]
            else:
                records = inner_messages(wrapper, seg.verify_crc, seg.max_batch_bytes)
        except CorruptRecordError as exc:
            raise seg.error(type(exc), exc.detail, b) from None
        first = records[0][0]
        for offset, ts, ts_type, msg in records:
            rows["offset"].append(offset)
            rows["timestamp"].append(ts)
            rows["timestamp_type"].append(ts_type)
            rows["key"].append(msg.key)
            rows["value"].append(msg.value)
            rows["batch_base_offset"].append(first)
            rows["batch_last_offset"].append(wrapper.offset)
            rows["batch_position"].append(pos)
            rows["batch_size"].append(int(hdr.size[b]))
            rows["batch_base_timestamp"].append(wrapper.timestamp)
            rows["batch_max_timestamp"].append(wrapper.timestamp)
            rows["magic"].append(wrapper.magic)
            rows["codec"].append(codec)
    n = len(rows["offset"])
    cols = {name: pa.array(values, type=RECORD_SCHEMA.field(name).type)
            for name, values in rows.items() if name in names}
    constants = {
        "headers": pa.array([[]] * n, type=HEADERS_TYPE) if "headers" in names else None,
        "transactional": np.zeros(n, np.bool_), "control": np.zeros(n, np.bool_),
        "producer_id": np.full(n, NO_PRODUCER_ID, np.int64),
        "producer_epoch": np.full(n, NO_PRODUCER_EPOCH, np.int16),
        "base_sequence": np.full(n, NO_SEQUENCE, np.int32),
        "partition_leader_epoch": np.full(n, NO_PARTITION_LEADER_EPOCH, np.int32),
        "delete_horizon_ms": pa.nulls(n, pa.int64()),
    }
    for name, values in constants.items():
        if name in names:
            cols[name] = values if isinstance(values, pa.Array) else pa.array(values)
    return [cols]



def key_hash_legacy(seg: SegmentBytes, batches: np.ndarray) -> pa.Table:
    # Legacy message sets are rare (old archives) and decoded in Python anyway: hash the decoded keys.
    names = {"offset", "timestamp", "key", "value", "batch_base_offset", "batch_last_offset",
             "batch_max_timestamp", "magic"}
    (cols,) = decode_legacy(seg, batches, names)
    n = len(cols["offset"])
    hi, lo = hash_keys(cols["key"])
    out = {
        "offset": cols["offset"], "key_hash_hi": pa.array(hi), "key_hash_lo": pa.array(lo),
        "key_is_null": cols["key"].is_null(), "value_is_null": cols["value"].is_null(),
        "timestamp": cols["timestamp"], "batch_base_offset": cols["batch_base_offset"],
        "batch_last_offset": cols["batch_last_offset"], "transactional": pa.array(np.zeros(n, np.bool_)),
        "control": pa.array(np.zeros(n, np.bool_)), "producer_id": pa.array(np.full(n, NO_PRODUCER_ID, np.int64)),
        "producer_epoch": pa.array(np.full(n, NO_PRODUCER_EPOCH, np.int16)),
        "batch_max_timestamp": cols["batch_max_timestamp"], "delete_horizon_ms": pa.nulls(n, pa.int64()),
        "magic": cols["magic"], "control_type": pa.array(np.full(n, -1, np.int16)),
    }
    return pa.Table.from_arrays([out[name] for name in KEY_HASH_SCHEMA.names], schema=KEY_HASH_SCHEMA)


__all__ = ["LegacyMessage", "decode_legacy", "inner_messages", "key_hash_legacy", "parse_legacy"]
