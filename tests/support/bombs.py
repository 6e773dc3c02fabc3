"""Builders for compressed batches that inflate a lot: decompression bombs and their harmless cousins.

The bytes are produced by the real codec libraries, fed in chunks, so a payload that inflates to gigabytes
costs the test a few seconds of compression and a few MiB of memory, never the inflated size:

    payload = inflating_payload("zstd", 2 << 30)                       # ~65 KB
    log_bytes = v2_batch_around(payload, codec=ZSTD, count=1, base_offset=6)

Every framing segjobs reads has a variant (see :data:`VARIANTS`): gzip, raw and xerial snappy, LZ4 frames
with and without a content size (Java omits it), zstd frames with and without a content size (Java's
streaming writer omits it).
"""

from __future__ import annotations

import struct
import zlib
from typing import Callable, Iterator

import cramjam
import crc32c

from segment_io.compression import GZIP, LZ4, SNAPPY, XERIAL_MAGIC, ZSTD
from segment_io.format import V2_HEADER, V2_HEADER_SIZE

#: variant -> codec id in the batch attributes
VARIANTS: dict[str, int] = {
    "gzip": GZIP,
    "snappy-raw": SNAPPY,
    "snappy-xerial": SNAPPY,
    "lz4-content-size": LZ4,
    "lz4-no-content-size": LZ4,
    "zstd-content-size": ZSTD,
    "zstd-no-content-size": ZSTD,
}

_CHUNK = 1 << 20


def chunks(size: int, content: bytes = b"\0") -> Iterator[bytes]:
    """``size`` bytes of ``content`` repeated, in chunks of at most 1 MiB (the pattern continues across
    chunks, so the whole is exactly ``(content * n)[:size]``)."""
    if size <= 0:
        return
    block = content * (_CHUNK // len(content) + 2)
    done = 0
    while done < size:
        shift = done % len(content)
        n = min(_CHUNK, size - done)
        yield block[shift:shift + n]
        done += n


def _gzip(parts: Iterator[bytes], size: int) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return b"".join([c.compress(p) for p in parts] + [c.flush()])


def _snappy_raw(parts: Iterator[bytes], size: int) -> bytes:
    # one raw snappy block holds the whole input: raw snappy cannot be written in pieces
    return bytes(cramjam.snappy.compress_raw(b"".join(parts)))


def _snappy_xerial(parts: Iterator[bytes], size: int) -> bytes:
    out = [struct.pack(">8sii", XERIAL_MAGIC, 1, 1)]
    for p in parts:
        for start in range(0, len(p), 32 * 1024):
            block = bytes(cramjam.snappy.compress_raw(p[start:start + 32 * 1024]))
            out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


def _lz4(with_size: bool) -> Callable[[Iterator[bytes], int], bytes]:
    def compress(parts: Iterator[bytes], size: int) -> bytes:
        import lz4.frame  # test-only dependency (kafka-python's lz4 extra)

        c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
        out = [c.begin(source_size=size if with_size else 0)]
        out += [c.compress(p) for p in parts]
        out.append(c.flush())
        return b"".join(out)

    return compress


def _zstd(with_size: bool) -> Callable[[Iterator[bytes], int], bytes]:
    def compress(parts: Iterator[bytes], size: int) -> bytes:
        import zstandard  # test-only dependency (kafka-python's zstd extra)

        c = zstandard.ZstdCompressor(level=1, write_content_size=with_size).compressobj(
            size=size if with_size else -1)
        return b"".join([c.compress(p) for p in parts] + [c.flush()])

    return compress


_COMPRESSORS: dict[str, Callable[[Iterator[bytes], int], bytes]] = {
    "gzip": _gzip,
    "snappy-raw": _snappy_raw,
    "snappy-xerial": _snappy_xerial,
    "lz4-content-size": _lz4(True),
    "lz4-no-content-size": _lz4(False),
    "zstd-content-size": _zstd(True),
    "zstd-no-content-size": _zstd(False),
}


def inflating_payload(variant: str, size: int, content: bytes = b"\0") -> bytes:
    """``content`` repeated to ``size`` bytes, compressed as ``variant`` (see :data:`VARIANTS`) from 1 MiB
    chunks. Zeros make zstd write RLE blocks (sizes visible in the block headers); a longer ``content`` that
    does not divide 128 KiB makes it write compressed blocks whose size shows only once decompressed."""
    return _COMPRESSORS[variant](chunks(size, content), size)


def v2_batch_around(payload: bytes, *, codec: int, count: int, base_offset: int = 0,
                    timestamp: int = 1_000_000) -> bytes:
    """A RecordBatch v2 holding ``payload`` as its (compressed) records, with ``count`` records at offsets
    ``base_offset ..`` and a correct CRC: the header is valid whatever the payload inflates to."""
    length = V2_HEADER_SIZE - 12 + len(payload)
    head = V2_HEADER.pack(base_offset, length, 0, 2, 0, codec, max(count - 1, 0), timestamp, timestamp,
                          -1, -1, -1, count)
    batch = bytearray(head + payload)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def records_payload(value_size: int, *, key: bytes = b"k") -> bytes:
    """The uncompressed records region of a valid one-record v2 batch whose value is ``value_size`` zero
    bytes: what a genuine large batch inflates to."""
    from segment_io.encode import encode_batches
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder()
    log.batch([rec(key, bytes(value_size))])
    return encode_batches(log.table()).to_bytes()[V2_HEADER_SIZE:]
