"""Compression framing for Kafka batch payloads: the one place that knows each codec's wire framing.

Kafka's Java client writes snappy in xerial framing (``\\x82SNAPPY\\x00`` magic, two version ints, then
big-endian length-prefixed raw snappy blocks); other clients write raw snappy, so both are read. LZ4 is the
LZ4 frame format; Java omits the content size, other writers may include it, and both are read. gzip and zstd
are their standard frame formats.
"""

from __future__ import annotations

import struct

import cramjam

from segment_io.errors import DecompressionError, UnsupportedCodecError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_BY_NAME = {name: code for code, name in CODEC_NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
# Block size the Java client's SnappyOutputStream uses (32 KiB).
_XERIAL_BLOCK = 32 * 1024
# LZ4 frame header as the Java producer writes it: magic, FLG 0x60 (version 1, independent blocks, no
# checksums, no content size), BD 0x40 (64 KiB blocks), header checksum (second byte of xxh32 over FLG BD).
# Every LZ4 batch of the real broker fixtures starts with exactly these bytes.
_LZ4_JAVA_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK = 64 * 1024
_LZ4_RAW_BLOCK = 0x80000000  # block-size high bit: the block is stored uncompressed
# Refuse to believe a payload inflates more than this; protects against decompression bombs in corrupt data.
MAX_DECOMPRESSED_BYTES = 1 << 31


def codec_from_name(name: str) -> int:
    """``"lz4"`` -> 3. Raises ``ValueError`` naming the valid choices."""
    try:
        return CODEC_BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; choose one of {sorted(CODEC_BY_NAME)}") from None


def _unxerial(data: bytes | memoryview) -> bytes:
    mv = memoryview(data)
    pos = _XERIAL_HEADER.size
    out = []
    total = 0
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise ValueError(f"xerial block length cut short at payload byte {pos}")
        (n,) = struct.unpack_from(">i", mv, pos)
        pos += 4
        if n < 0 or pos + n > len(mv):
            raise ValueError(f"xerial block length {n} at payload byte {pos - 4} runs past the payload")
        block = cramjam.snappy.decompress_raw(mv[pos:pos + n])
        total += len(block)
        if total > MAX_DECOMPRESSED_BYTES:
            raise ValueError("decompressed size exceeds the 2 GiB limit")
        out.append(memoryview(block))
        pos += n
    return b"".join(out)


def _lz4_java_frame(data: bytes | memoryview, level: int | None) -> bytes:
    """An LZ4 frame laid out as Kafka's Java producer (``Lz4BlockOutputStream``) writes it: 64 KiB
    independent blocks, a block stored raw when compressing does not shrink it, no checksums, no content
    size, a zero end mark."""
    mv = memoryview(data)
    parts = [_LZ4_JAVA_HEADER]
    kw = {} if level is None else {"mode": "high_compression", "compression": level}
    for start in range(0, len(mv), _LZ4_BLOCK):
        chunk = mv[start:start + _LZ4_BLOCK]
        block = cramjam.lz4.compress_block(chunk, store_size=False, **kw)
        if len(block) >= len(chunk):
            parts.append(struct.pack("<I", len(chunk) | _LZ4_RAW_BLOCK))
            parts.append(bytes(chunk))
        else:
            parts.append(struct.pack("<I", len(block)))
            parts.append(bytes(block))
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def decompress(codec: int, data: bytes | memoryview) -> bytes | memoryview:
    """Decompress one batch payload into a bytes-like object (a memoryview over the codec library's own
    buffer: no copy). Raises :class:`DecompressionError` (without a location: callers add file, position and
    offset with :meth:`CorruptRecordError.located`)."""
    try:
        if codec == GZIP:
            return memoryview(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC:
                return _unxerial(data)
            return memoryview(cramjam.snappy.decompress_raw(data))
        if codec == LZ4:
            return memoryview(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return memoryview(cramjam.zstd.decompress(data))
        if codec == NONE:
            return memoryview(data)
    except DecompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueErrors
        raise DecompressionError(f"{CODEC_NAMES.get(codec, codec)} payload does not decompress: {exc}") from None
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress one batch payload the way Kafka's Java producer frames it (xerial snappy, LZ4 frame
    without content size)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        mv = memoryview(data)
        parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
        for start in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[start:start + _XERIAL_BLOCK]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        return _lz4_java_frame(data, level)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise UnsupportedCodecError(f"unknown compression codec {codec}")
