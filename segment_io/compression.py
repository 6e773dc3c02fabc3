"""Compression framing for Kafka batch payloads: the one place that knows each codec's wire framing.

Kafka's Java client writes snappy in xerial framing (``\\x82SNAPPY\\x00`` magic, two version ints, then
big-endian length-prefixed raw snappy blocks); other clients write raw snappy, so both are read. LZ4 is the
LZ4 frame format; Java omits the content size, other writers may include it, and both are read. gzip and zstd
are their standard frame formats.

Decompression is bounded: a payload never inflates into more than ``limit + 1`` bytes of memory, however
large it claims or turns out to be (a decompression bomb: a few KB of zstd that inflate to gigabytes). Each
payload is decompressed straight into a preallocated slice of an :class:`Inflater`'s buffer, which the codec
library fills as it streams and refuses to overrun; the slice is sized from what the frame itself says
(:func:`plan_payloads`: zstd and LZ4 content sizes and block headers, snappy length preambles, gzip's ISIZE),
so that a genuine payload decompresses once, and a frame that declares more than the bound is refused before
anything is allocated. The bound (:data:`DEFAULT_MAX_BATCH_BYTES`, :func:`max_batch_bytes`) is per batch.
"""

from __future__ import annotations

import os
import struct

import cramjam
import numpy as np
from numba import njit

from segment_io.errors import (
    ConfigError,
    CorruptRecordError,
    DecompressionError,
    OversizedBatchError,
    UnsupportedCodecError,
)

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

#: Default of :func:`max_batch_bytes`: the most bytes one batch's records may inflate to (256 MiB).
#: Kafka bounds batches before compression only loosely: the Java producer caps a record's serialized size at
#: max.request.size (1 MiB by default) and closes a batch at batch.size (16 KiB by default) of estimated
#: compressed bytes, and brokers cap the compressed batch at message.max.bytes (1 MiB by default; managed
#: services allow at most 8-20 MiB). Genuine batches inflate to a few MiB, rarely tens; 256 MiB leaves more than
#: ten times that while keeping what one corrupt or hostile batch costs a Spark task to a quarter GiB.
DEFAULT_MAX_BATCH_BYTES = 256 << 20
#: Environment variable that overrides :data:`DEFAULT_MAX_BATCH_BYTES` (a byte count) where no explicit
#: ``max_batch_bytes`` is passed: it reaches code the command line does not (Spark executors, the data source).
MAX_BATCH_BYTES_ENV = "SEGJOBS_MAX_BATCH_BYTES"
#: The longest record RecordBatch v2 can frame: a varint length (at most 5 bytes) and an int32 body size. A
#: batch of ``n`` records cannot legitimately inflate past ``n`` times this (so an empty batch inflates to 0).
MAX_RECORD_BYTES = 5 + (2**31 - 1)

_ZSTD_MAGIC = 0xFD2FB528
_LZ4_MAGIC = 0x184D2204
_SKIPPABLE_MASK, _SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50  # zstd and LZ4 skippable frames share these
_ZSTD_MAX_BLOCK = 128 * 1024
_XERIAL_MAGIC_ARRAY = np.frombuffer(XERIAL_MAGIC, dtype=np.uint8)
# What cramjam says when the output slice it decompresses into is full (Rust's io::ErrorKind::WriteZero).
_OUTPUT_FULL = "failed to write whole buffer"
# Without a size in the frame, a first guess at the inflated size: typical ratios are 2-6, and a guess too
# small costs one more decompression of that payload, one too large only untouched (never faulted) memory.
_RATIO_GUESS = 8
_MIN_GUESS = 64 << 10


def codec_from_name(name: str) -> int:
    """``"lz4"`` -> 3. Raises ``ValueError`` naming the valid choices."""
    try:
        return CODEC_BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; choose one of {sorted(CODEC_BY_NAME)}") from None


# --------------------------------------------------------------------------------------------------
# The bound
# --------------------------------------------------------------------------------------------------


def max_batch_bytes(override: int | None = None) -> int:
    """The most bytes one batch's records may inflate to: ``override`` when given, else the environment's
    ``SEGJOBS_MAX_BATCH_BYTES``, else :data:`DEFAULT_MAX_BATCH_BYTES`. Raises :class:`ConfigError` naming the
    setting when it is not a positive integer."""
    if override is None:
        raw = os.environ.get(MAX_BATCH_BYTES_ENV, "").strip()
        if not raw:
            return DEFAULT_MAX_BATCH_BYTES
        try:
            override = int(raw)
        except ValueError:
            raise ConfigError(f"{MAX_BATCH_BYTES_ENV}={raw!r}: expected a number of bytes") from None
        if override <= 0:
            raise ConfigError(f"{MAX_BATCH_BYTES_ENV}={raw!r}: must be positive")
    elif isinstance(override, bool) or not isinstance(override, int) or override <= 0:
        raise ConfigError(f"max_batch_bytes={override!r}: must be a positive number of bytes")
    return override


def batch_limit(record_count: np.ndarray, max_bytes: int) -> np.ndarray:
    """The bound for v2 batches of ``record_count`` records each: the count times the longest record the
    format can frame (:data:`MAX_RECORD_BYTES`), capped by ``max_bytes`` (see :func:`max_batch_bytes`)."""
    return np.minimum(max_bytes, np.maximum(np.asarray(record_count, dtype=np.int64), 0) * MAX_RECORD_BYTES)


def oversized_detail(codec: int, limit: int, declared: int | None = None) -> str:
    """The detail of an :class:`OversizedBatchError`: what the payload does (inflates past ``limit``, or its
    frames declare ``declared`` bytes), the bound, and how to raise it."""
    what = ("payload inflates past" if declared is None else
            f"payload's frames declare at least {declared} bytes, over")
    return (f"{CODEC_NAMES.get(codec, codec)} {what} the per-batch bound of {limit} bytes "
            f"({limit / (1 << 20):g} MiB): a decompression bomb or corrupt data. If the batch is genuine, raise "
            f"the bound with {MAX_BATCH_BYTES_ENV}=<bytes> (segjobs dump: --max-batch-bytes; segment_io's decode "
            f"functions: max_batch_bytes=)")


# --------------------------------------------------------------------------------------------------
# What a frame says about its inflated size
# --------------------------------------------------------------------------------------------------


# The walkers below run over every compressed batch of a segment before it is decompressed, so they are
# compiled: a few microseconds of Python per batch would be a measurable share of decoding small batches.
# They never raise: a frame they cannot follow just says less (the decompressor then reports the damage).

_HUGE = 1 << 62  # sizes are capped here so that sums of absurd declared sizes cannot overflow int64


@njit(cache=True, inline="always")
def _le(buf: np.ndarray, p: int, n: int) -> int:
    """Little-endian unsigned integer of ``n`` bytes at ``p``, capped at ``_HUGE``."""
    v = 0
    for k in range(n - 1, -1, -1):
        if v >= _HUGE >> 8:
            return _HUGE
        v = (v << 8) | np.int64(buf[p + k])
    return v


@njit(cache=True)
def _zstd_frames(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """zstd frames one after another: a declared Frame_Content_Size counts as the frame's size (the decoder
    fails a frame that does not match it); otherwise raw and RLE blocks count their exact size and compressed
    blocks at most the block maximum, min(window, 128 KiB)."""
    lo = 0
    hi = 0
    while pos < end:
        if end - pos < 8 or lo >= _HUGE:
            return lo, -1
        magic = _le(buf, pos, 4)
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            pos += 8 + _le(buf, pos + 4, 4)
            continue
        if magic != _ZSTD_MAGIC:
            return lo, -1
        fhd = np.int64(buf[pos + 4])
        p = pos + 5
        single = (fhd & 0x20) != 0
        window = 0
        if not single:
            wd = np.int64(buf[p])
            p += 1
            base = np.int64(1) << (10 + (wd >> 3))
            window = base + (base >> 3) * (wd & 7)
        did = fhd & 3
        p += 4 if did == 3 else did  # dictionary id: 0, 1, 2 or 4 bytes
        code = fhd >> 6
        fcs_len = (1 if single else 0) if code == 0 else 1 << code  # 2, 4 or 8 bytes
        if p + fcs_len > end:
            return lo, -1
        fcs = -1
        if fcs_len > 0:
            fcs = _le(buf, p, fcs_len) + (256 if fcs_len == 2 else 0)
        p += fcs_len
        block_max = min(fcs if single else window, _ZSTD_MAX_BLOCK)
        exact = 0
        bound = 0
        while True:
            if p + 3 > end:
                return lo + (fcs if fcs >= 0 else exact), -1
            h = _le(buf, p, 3)
            kind = (h >> 1) & 3
            size = h >> 3
            if kind == 2:  # compressed
                bound += block_max
                p += 3 + size
            elif kind == 0:  # raw: the bytes themselves
                exact += size
                p += 3 + size
            elif kind == 1:  # RLE: one byte repeated size times
                exact += size
                p += 4
            else:
                return lo + (fcs if fcs >= 0 else exact), -1
            if h & 1:  # last block
                break
        p += 4 if fhd & 0x04 else 0  # content checksum
        lo += fcs if fcs >= 0 else exact
        hi += fcs if fcs >= 0 else exact + bound
        pos = p
    return lo, hi


@njit(cache=True)
def _lz4_frames(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """LZ4 frames one after another: a declared content size counts as the frame's size (the decoder checks
    it); otherwise stored blocks count their exact size and compressed blocks at most the descriptor's block
    maximum."""
    lo = 0
    hi = 0
    while pos < end:
        if end - pos < 7 or lo >= _HUGE:
            return lo, -1
        magic = _le(buf, pos, 4)
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            if end - pos < 8:
                return lo, -1
            pos += 8 + _le(buf, pos + 4, 4)
            continue
        flg = np.int64(buf[pos + 4])
        size_code = (np.int64(buf[pos + 5]) >> 4) & 7
        if magic != _LZ4_MAGIC or size_code < 4:
            return lo, -1
        block_max = np.int64(1) << (8 + 2 * size_code)  # 4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB
        p = pos + 6
        content = -1
        if flg & 0x08:
            if p + 8 > end:
                return lo, -1
            content = _le(buf, p, 8)
            p += 8
        p += (4 if flg & 0x01 else 0) + 1  # dictionary id, header checksum
        block_checksum = 4 if flg & 0x10 else 0
        exact = 0
        bound = 0
        while True:
            if p + 4 > end:
                return lo + (content if content >= 0 else exact), -1
            size = _le(buf, p, 4)
            p += 4
            if size == 0:  # end mark
                break
            if size & _LZ4_RAW_BLOCK:
                size &= _LZ4_RAW_BLOCK - 1
                exact += size
            else:
                bound += block_max
            p += size + block_checksum
        p += 4 if flg & 0x04 else 0  # content checksum
        lo += content if content >= 0 else exact
        hi += content if content >= 0 else exact + bound
        pos = p
    return lo, hi


@njit(cache=True, inline="always")
def _snappy_preamble(buf: np.ndarray, pos: int, end: int) -> int:
    """The uncompressed length a raw snappy block starts with (a varint of at most 5 bytes); -1 if unreadable."""
    v = 0
    for k in range(5):
        if pos + k >= end:
            return -1
        b = np.int64(buf[pos + k])
        v |= (b & 0x7F) << (7 * k)
        if b < 0x80:
            return v
    return -1


@njit(cache=True)
def _snappy_frames(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """Raw snappy, or xerial framing (magic, two version ints, then big-endian length-prefixed raw blocks):
    the sum of the preambles, which the decoder holds each block to exactly."""
    xerial = end - pos >= 8
    for k in range(8):
        if xerial and buf[pos + k] != _XERIAL_MAGIC_ARRAY[k]:
            xerial = False
    if not xerial:
        n = _snappy_preamble(buf, pos, end)
        return (n, n) if n >= 0 else (0, -1)
    p = pos + 16
    total = 0
    while p < end:
        if p + 4 > end:
            return total, -1
        n = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | buf[p + 3]
        p += 4
        if n >= 0x80000000 or p + n > end:
            return total, -1
        block = _snappy_preamble(buf, p, p + n)
        if block < 0:
            return total, -1
        total += block
        p += n
    return total, total


@njit(cache=True)
def _frame_size(buf: np.ndarray, pos: int, end: int, codec: int) -> tuple[int, int]:
    """What one payload's framing says about its inflated size: ``(at_least, guess)``, ``guess`` -1 when
    nothing is known (see :func:`plan_payloads`)."""
    if codec == ZSTD:
        return _zstd_frames(buf, pos, end)
    if codec == LZ4:
        return _lz4_frames(buf, pos, end)
    if codec == SNAPPY:
        return _snappy_frames(buf, pos, end)
    if codec == GZIP and end - pos >= 18 and buf[pos] == 0x1F and buf[pos + 1] == 0x8B:
        # ISIZE, the last member's length mod 2**32, is exact for the single member producers write; it comes
        # after the data, so it is only a guess until the data proved valid
        return 0, _le(buf, end - 4, 4)
    if codec == NONE:
        return end - pos, end - pos
    return 0, -1


@njit(cache=True, inline="always")
def _first_capacity(at_least: int, guess: int, compressed: int, limit: int) -> int:
    """The slice a payload is first decompressed into: the framing's guess where it has one, else a typical
    compression ratio; never more than ``limit + 1`` (one byte more than the bound proves it is exceeded)."""
    if guess < 0:
        guess = max(at_least, _RATIO_GUESS * compressed, _MIN_GUESS)
    return min(guess, limit + 1)


@njit(cache=True)
def _plan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, codecs: np.ndarray, limits: np.ndarray,
          at_least: np.ndarray, capacity: np.ndarray) -> None:
    for i in range(starts.shape[0]):
        lo, guess = _frame_size(buf, starts[i], ends[i], codecs[i])
        at_least[i] = lo
        capacity[i] = _first_capacity(lo, guess, ends[i] - starts[i], limits[i])


@njit(cache=True)
def _plan_one(buf: np.ndarray, codec: int, limit: int) -> tuple[int, int]:
    lo, guess = _frame_size(buf, 0, buf.shape[0], codec)
    return lo, _first_capacity(lo, guess, buf.shape[0], limit)


def plan_payloads(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, codecs: np.ndarray,
                  limits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each payload ``buf[starts[i]:ends[i]]`` compressed with ``codecs[i]`` and bounded by ``limits[i]``,
    read from its headers without decompressing: ``(at_least, capacity)``. A valid payload inflates to at
    least ``at_least`` bytes (what its frames declare: zstd and LZ4 content sizes, snappy preambles, stored
    blocks), so ``at_least > limit`` refuses it before anything is allocated. ``capacity`` is the slice
    :meth:`Inflater.add` first decompresses it into: exact or an upper bound where the frames give one, gzip's
    ISIZE, else a typical compression ratio, and never more than ``limit + 1``."""
    at_least = np.empty(len(starts), dtype=np.int64)
    capacity = np.empty(len(starts), dtype=np.int64)
    _plan(buf, starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False),
          codecs.astype(np.int64, copy=False), limits.astype(np.int64, copy=False), at_least, capacity)
    return at_least, capacity


def _snappy_blocks(data: bytes | memoryview) -> list[tuple[memoryview, int]]:
    """The raw snappy blocks of a payload (one, or xerial's many) with the length each one's preamble states
    (the decoder refuses a block that does not inflate to exactly that)."""
    mv = memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC:
        return [(mv, cramjam.snappy.decompress_raw_len(mv))]
    pos = _XERIAL_HEADER.size
    blocks = []
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise DecompressionError(f"snappy payload does not decompress: xerial block length cut short at "
                                     f"payload byte {pos}")
        (n,) = struct.unpack_from(">i", mv, pos)
        pos += 4
        if n < 0 or pos + n > len(mv):
            raise DecompressionError(f"snappy payload does not decompress: xerial block length {n} at payload "
                                     f"byte {pos - 4} runs past the payload")
        block = mv[pos:pos + n]
        blocks.append((block, cramjam.snappy.decompress_raw_len(block)))
        pos += n
    return blocks


# --------------------------------------------------------------------------------------------------
# Decompressing
# --------------------------------------------------------------------------------------------------


_INTO = {GZIP: cramjam.gzip.decompress_into, LZ4: cramjam.lz4.decompress_into,
         ZSTD: cramjam.zstd.decompress_into}


class Inflater:
    """Decompresses payloads one after another into one buffer, each bounded by its own ``limit``.

    The buffer grows as needed; give ``capacity`` (the sum of :meth:`capacity` over the payloads to come) and
    it is allocated once, with nothing copied later. :meth:`view` returns the payloads decompressed so far.
    """

    def __init__(self, capacity: int = 0) -> None:
        self._buf = np.empty(capacity, dtype=np.uint8)
        self.size = 0

    @staticmethod
    def capacity(codec: int, data: bytes | memoryview, limit: int) -> int:
        """The slice :meth:`add` first decompresses ``data`` into (see :func:`plan_payloads`). Raises :class:`OversizedBatchError` when the framing alone says the payload
        holds more than ``limit`` bytes, before anything is allocated."""
        at_least, capacity = _plan_one(np.frombuffer(data, dtype=np.uint8), codec, limit)
        if at_least > limit:
            raise OversizedBatchError(oversized_detail(codec, limit, at_least))
        return capacity

    def _reserve(self, n: int) -> np.ndarray:
        if self.size + n > len(self._buf):
            grown = np.empty(max(2 * len(self._buf), self.size + n), dtype=np.uint8)
            grown[:self.size] = self._buf[:self.size]
            self._buf = grown
        return self._buf[self.size:self.size + n]

    def add(self, codec: int, data: bytes | memoryview, limit: int, capacity: int | None = None) -> int:
        """Append ``data`` decompressed; returns its length. ``capacity`` is :meth:`capacity` if already known.

        Raises :class:`OversizedBatchError` when the payload inflates past ``limit`` bytes, having written at
        most ``limit + 1``; :class:`DecompressionError` when it does not decompress (both without a location:
        callers add file, position and offset).
        """
        name = CODEC_NAMES.get(codec, codec)
        into = _INTO.get(codec)
        if into is None and codec != SNAPPY:
            raise UnsupportedCodecError(f"unknown compression codec {codec}")
        try:
            if into is None:
                return self._add_snappy(data, limit)
            if capacity is None:
                capacity = self.capacity(codec, data, limit)
            while True:
                try:
                    n = into(data, self._reserve(capacity))
                except cramjam.DecompressionError as exc:
                    if str(exc) != _OUTPUT_FULL:
                        raise
                    n = capacity + 1  # at least
                if n > limit:
                    raise OversizedBatchError(oversized_detail(codec, limit))
                if n <= capacity:
                    break
                # the framing understated the size (gzip with several members): decompress again, bigger
                capacity = min(max(4 * capacity, _MIN_GUESS), limit + 1)
        except CorruptRecordError:
            raise
        except Exception as exc:  # cramjam raises its own DecompressionError, ValueErrors and OSErrors
            raise DecompressionError(f"{name} payload does not decompress: {exc}") from None
        self.size += n
        return n

    def _add_snappy(self, data: bytes | memoryview, limit: int) -> int:
        blocks = _snappy_blocks(data)
        total = sum(size for _, size in blocks)
        if total > limit:
            raise OversizedBatchError(oversized_detail(SNAPPY, limit, total))
        out = self._reserve(total)
        at = 0
        for block, size in blocks:
            if cramjam.snappy.decompress_raw_into(block, out[at:at + size]) != size:
                raise DecompressionError(f"snappy block does not inflate to the {size} bytes it declares")
            at += size
        self.size += total
        return total

    def view(self) -> np.ndarray:
        """The payloads decompressed so far, one after another."""
        return self._buf[:self.size]


def decompress(codec: int, data: bytes | memoryview, *, limit: int | None = None) -> bytes | memoryview:
    """Decompress one batch payload into a bytes-like object, inflating to at most ``limit`` bytes (default:
    :func:`max_batch_bytes`). Raises :class:`OversizedBatchError` past it and :class:`DecompressionError` when
    the payload does not decompress (both without a location: callers add file, position and offset)."""
    if codec == NONE:
        return memoryview(data)
    inflater = Inflater()
    inflater.add(codec, data, max_batch_bytes() if limit is None else limit)
    return memoryview(inflater.view())


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
