"""Compression framing for Kafka batch payloads: the one place that knows each codec's wire framing.

Kafka's Java client writes snappy in xerial framing (``\\x82SNAPPY\\x00`` magic, two version ints, then
big-endian length-prefixed raw snappy blocks); other clients write raw snappy, so both are read. LZ4 is the
LZ4 frame format; Java omits the content size, other writers may include it, and both are read. gzip and zstd
are their standard frame formats.

Decompression is bounded: a payload never inflates into more than ``limit + 1`` bytes of memory, however
large it claims or turns out to be (a decompression bomb: a few KB of zstd that inflate to gigabytes). Each
payload is decompressed straight into a preallocated slice of an :class:`Inflater`'s buffer, which the codec
library fills as it streams and refuses to overrun (a zstd frame given at most a MiB of room is inflated by a
reused context into a buffer of at most that room first, then copied: :func:`_unzstd_into`); the slice is sized
from what the frame itself says (:func:`plan_payloads`: zstd and LZ4 content sizes and block headers, snappy
length preambles, gzip's ISIZE), so that a genuine payload decompresses once, and a frame that declares more than
the bound is refused before anything is allocated. The bound (:data:`DEFAULT_MAX_BATCH_BYTES`,
:func:`max_batch_bytes`) is per batch.

LZ4 frames as Kafka's producers write them are decompressed and compressed by compiled code that calls LZ4's block
functions for a whole run of batches (:mod:`segment_io._lz4_kernels`), and zstd payloads of one frame by compiled
code that calls libzstd through reused contexts, straight into the slice (:mod:`segment_io._zstd_kernels`), with
the same rooms and the same bound; everything else, and every error message, is the Python here.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import cramjam
import numpy as np
import zstandard

from segment_io.errors import (
    ConfigError,
    CorruptRecordError,
    DecompressionError,
    OversizedBatchError,
    UnsupportedCodecError,
)
from segment_io.format import readonly_bytes
from segment_io.units import parse_size

# `type: ignore[arg-type]` (and `[dict-item]`) where an ndarray is used as a buffer: numpy declares
# ndarray.__buffer__ only for Python >= 3.12, so on 3.11 a type checker does not see that an ndarray is a
# buffer (at run time it is one).

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
_LZ4_JAVA_HEADER_BYTES = np.frombuffer(_LZ4_JAVA_HEADER, np.uint8)
_LZ4_BLOCK = 64 * 1024

#: Default of :func:`max_batch_bytes`: the most bytes one batch's records may inflate to (256 MiB).
#: Kafka bounds batches before compression only loosely: the Java producer caps a record's serialized size at
#: max.request.size (1 MiB by default) and closes a batch at batch.size (16 KiB by default) of estimated
#: compressed bytes, and brokers cap the compressed batch at message.max.bytes (1 MiB by default; managed
#: services allow at most 8-20 MiB). Genuine batches inflate to a few MiB, rarely tens; 256 MiB leaves more than
#: ten times that while keeping what one corrupt or hostile batch costs a Spark task to a quarter GiB.
DEFAULT_MAX_BATCH_BYTES = 256 << 20
#: Environment variable that overrides :data:`DEFAULT_MAX_BATCH_BYTES` (a size, e.g. ``1GiB``) where no explicit
#: ``max_batch_bytes`` is passed (the jobs resolve it on the driver and pass the value to their tasks; the data
#: source's executors read it from their own environment).
MAX_BATCH_BYTES_ENV = "SEGJOBS_MAX_BATCH_BYTES"
#: The longest record RecordBatch v2 can frame: a varint length (at most 5 bytes) and an int32 body size. A
#: batch of ``n`` records cannot legitimately inflate past ``n`` times this (so an empty batch inflates to 0).
MAX_RECORD_BYTES = 5 + (2**31 - 1)

# Frame layouts the size walkers of segment_io._decode_kernels read (compiled code, kept out of this module
# so that importing it does not load numba)
ZSTD_MAGIC = 0xFD2FB528
LZ4_MAGIC = 0x184D2204
SKIPPABLE_MASK, SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50  # zstd and LZ4 skippable frames share these
ZSTD_MAX_BLOCK = 128 * 1024
LZ4_RAW_BLOCK = 0x80000000  # block-size high bit: the block is stored uncompressed
_LZ4_MAGIC_BYTES = LZ4_MAGIC.to_bytes(4, "little")
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # BD bits 4-6
_LZ4_CONTENT_SIZE_FLAG = 0x08
_LZ4_INDEPENDENT_PLAIN = 0x60  # FLG: version 1, independent blocks, no checksums, no dictionary
# What cramjam says when the output slice it decompresses into is full (Rust's io::ErrorKind::WriteZero).
_OUTPUT_FULL = "failed to write whole buffer"
# Without a size in the frame, a first guess at the inflated size: typical ratios are 2-6, and a guess too
# small costs one more decompression of that payload, one too large only untouched (never faulted) memory.
RATIO_GUESS = 8
MIN_GUESS = 64 << 10


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
    ``SEGJOBS_MAX_BATCH_BYTES`` (a size: ``512MiB``, ``1GiB``, a number of bytes), else
    :data:`DEFAULT_MAX_BATCH_BYTES`. Raises :class:`ConfigError` naming the setting when it is not a positive
    size."""
    if override is None:
        raw = os.environ.get(MAX_BATCH_BYTES_ENV, "").strip()
        if not raw:
            return DEFAULT_MAX_BATCH_BYTES
        try:
            override = parse_size(raw)
        except ValueError as exc:
            raise ConfigError(f"{MAX_BATCH_BYTES_ENV}: {exc}") from None
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
            f"the bound with {MAX_BATCH_BYTES_ENV}=<size> (segjobs dump: --max-batch-bytes; segment_io's decode "
            f"functions: max_batch_bytes=)")


# --------------------------------------------------------------------------------------------------
# What a frame says about its inflated size
# --------------------------------------------------------------------------------------------------


def plan_payloads(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, codecs: np.ndarray,
                  limits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each payload ``buf[starts[i]:ends[i]]`` compressed with ``codecs[i]`` and bounded by ``limits[i]``,
    read from its headers without decompressing: ``(at_least, capacity)``. A valid payload inflates to at
    least ``at_least`` bytes (what its frames declare: zstd and LZ4 content sizes, snappy preambles, stored
    blocks), so ``at_least > limit`` refuses it before anything is allocated. ``capacity`` is the slice
    :meth:`Inflater.add` first decompresses it into: exact or an upper bound where the frames give one, gzip's
    ISIZE, else a typical compression ratio, and never more than ``limit + 1``."""
    from segment_io._decode_kernels import plan_payloads as kernel  # numba loads only when decoding needs it

    at_least = np.empty(len(starts), dtype=np.int64)
    capacity = np.empty(len(starts), dtype=np.int64)
    kernel(buf, starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False),
           codecs.astype(np.int64, copy=False), limits.astype(np.int64, copy=False), at_least, capacity)
    return at_least, capacity


# --------------------------------------------------------------------------------------------------
# Decompressing
# --------------------------------------------------------------------------------------------------


def _unsnappy_into(data: bytes | memoryview, out: np.ndarray) -> int:
    """Raw snappy, or xerial's framing of raw blocks, decompressed into ``out``; the bytes written. Each raw
    block inflates to exactly the length its preamble states (cramjam refuses a block whose preamble does not
    fit what is left of ``out``), the lengths :func:`plan_payloads` adds up."""
    mv = memoryview(data)
    if mv[:8] != XERIAL_MAGIC:
        return cramjam.snappy.decompress_raw_into(mv, out)  # type: ignore[arg-type]
    pos, at = _XERIAL_HEADER.size, 0
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise ValueError(f"xerial block length cut short at payload byte {pos}")
        (n,) = struct.unpack_from(">i", mv, pos)
        pos += 4
        if n < 0 or pos + n > len(mv):
            raise ValueError(f"xerial block length {n} at payload byte {pos - 4} runs past the payload")
        at += cramjam.snappy.decompress_raw_into(mv[pos:pos + n], out[at:])  # type: ignore[arg-type]
        pos += n
    return at


@functools.cache
def _lz4_kernels() -> Any:
    """:mod:`segment_io._lz4_kernels` when its kernels can call LZ4's block functions (``LINKED``), else None: LZ4
    frames then take the Python path, one codec call a block. Imported on first use: it loads numba."""
    from segment_io import _lz4_kernels as kernels

    return kernels if kernels.LINKED else None


@functools.cache
def _zstd_kernels() -> Any:
    """:mod:`segment_io._zstd_kernels` when its kernels can call libzstd (``LINKED``), else None: zstd payloads then
    take the Python path, one codec call a payload. Imported on first use: it loads numba."""
    from segment_io import _zstd_kernels as kernels

    return kernels if kernels.LINKED else None


class _OutputFull(Exception):
    """The buffer a payload decompresses into is full before the payload ends."""


def _unlz4_into(data: bytes | memoryview, out: np.ndarray) -> int:
    """LZ4 frames decompressed into ``out``; the bytes written. Frames as Kafka's Java producer writes them
    (independent blocks, no checksums, no dictionary) go block by block through the block decoder, which is
    faster than the frame decoder's streaming copy; from the first other frame on, the frame decoder."""
    mv = memoryview(data)
    pos = at = 0
    while pos < len(mv):
        flg = mv[pos + 4] if len(mv) - pos > 6 else 0
        block_max = _LZ4_BLOCK_MAX.get((mv[pos + 5] >> 4) & 7 if len(mv) - pos > 6 else 0)
        if (mv[pos:pos + 4] != _LZ4_MAGIC_BYTES or flg & ~_LZ4_CONTENT_SIZE_FLAG != _LZ4_INDEPENDENT_PLAIN
                or block_max is None):
            return at + cramjam.lz4.decompress_into(mv[pos:], out[at:])  # type: ignore[arg-type]
        pos += 7 + (8 if flg & _LZ4_CONTENT_SIZE_FLAG else 0)
        while True:
            if pos + 4 > len(mv):
                raise ValueError(f"lz4 frame cut short at payload byte {pos}")
            (size,) = struct.unpack_from("<I", mv, pos)
            pos += 4
            if size == 0:  # end mark
                break
            stored = size & LZ4_RAW_BLOCK
            size &= LZ4_RAW_BLOCK - 1
            if pos + size > len(mv):
                raise ValueError(f"lz4 block of {size} bytes at payload byte {pos - 4} runs past the payload")
            room = len(out) - at
            if stored:
                if size > room:
                    raise _OutputFull()
                out[at:at + size] = mv[pos:pos + size]
                at += size
            elif room >= block_max:
                block = mv[pos:pos + size]
                at += cramjam.lz4.decompress_block_into(block, out[at:at + block_max])  # type: ignore[arg-type]
            else:  # near the end of the buffer a failure could mean corrupt or too big: tell them apart
                scratch = np.empty(block_max, dtype=np.uint8)
                n = cramjam.lz4.decompress_block_into(mv[pos:pos + size], scratch)  # type: ignore[arg-type]
                if n > room:
                    raise _OutputFull()
                out[at:at + n] = scratch[:n]
                at += n
            pos += size
    return at


#: zstd's default level (libzstd's ZSTD_CLEVEL_DEFAULT), which Kafka's producers also use by default
ZSTD_DEFAULT_LEVEL = 3


class _ZstdContexts(threading.local):
    """zstd's compression (at the default level) and decompression contexts, one of each per thread (a context
    serves one call at a time), made once and reset by every call: making them anew for each payload, as
    cramjam's one-shot calls do, costs up to half as much again as compressing or decompressing a 15 KB payload."""

    def __init__(self) -> None:
        self.decompressor = zstandard.ZstdDecompressor()
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL)


_ZSTD = _ZstdContexts()
#: The most room a zstd payload is decompressed through this thread's context with. Its buffer is the context's
#: own (as large as the room, for a frame without a content size), so a batch given room for up to the
#: per-batch bound (a decompression bomb's) must not take that path: it would hold the bound twice. Past a MiB
#: the one-shot call's own context costs little next to the payload.
_ZSTD_CONTEXT_MAX = 1 << 20
_ZSTD_MAGIC_BYTES = ZSTD_MAGIC.to_bytes(4, "little")


def _unzstd_into(data: bytes | memoryview, out: np.ndarray) -> int:
    """Decompress a zstd payload into ``out``; returns its length. The common payload, one zstd frame of some bytes
    and nothing after it that fits ``out``, goes through this thread's context; anything else through cramjam's
    one-shot call, which reads every frame and says what is wrong: several frames, a skippable one (its length
    field, not checked by the context before it allocates that much), a frame stating more than ``out`` holds or no
    bytes at all (the context returns at once for a frame that states 0, without reading what follows it), bytes
    that are not a whole frame. So does a payload given room for more than :data:`_ZSTD_CONTEXT_MAX` bytes: the
    context inflates into a buffer of its own, then copied to ``out``."""
    if len(out) > _ZSTD_CONTEXT_MAX or data[:4] != _ZSTD_MAGIC_BYTES:
        return int(cramjam.zstd.decompress_into(data, out))  # type: ignore[arg-type]
    try:
        stated = zstandard.frame_content_size(data)  # -1: not stated
        inflated = None if stated > len(out) else _ZSTD.decompressor.decompress(
            data, max_output_size=len(out), allow_extra_data=False)
    except zstandard.ZstdError:
        inflated = None
    if not inflated or len(inflated) > len(out):
        return int(cramjam.zstd.decompress_into(data, out))  # type: ignore[arg-type]
    n = len(inflated)
    out[:n] = np.frombuffer(inflated, np.uint8)
    return n


# codec -> decompress into a given buffer, failing when it is too small
_INTO: dict[int, Callable[[bytes | memoryview, np.ndarray], int]] = {
    GZIP: cramjam.gzip.decompress_into,  # type: ignore[dict-item]
    SNAPPY: _unsnappy_into,
    LZ4: _unlz4_into,
    ZSTD: _unzstd_into,
}


@dataclass(frozen=True)
class _Lz4Blocks:
    """The blocks of a run of payloads' LZ4 frames (see :func:`segment_io._decode_kernels.lz4_frame_blocks`): payload
    ``i`` has ``count[i]`` blocks from ``first[i]`` on in ``block_start`` and ``block_size``, of at most
    ``block_max[i]`` bytes each; 0 blocks when it is not one frame as Kafka's producers write it."""

    first: np.ndarray
    count: np.ndarray
    block_max: np.ndarray
    block_start: np.ndarray
    block_size: np.ndarray


def _lz4_frame_blocks(data: memoryview, starts: np.ndarray, ends: np.ndarray, codecs: np.ndarray) -> _Lz4Blocks:
    """The blocks of each payload ``data[starts[i]:ends[i]]`` that is an LZ4 frame as Kafka's producers write it:
    every ``count`` 0 when no payload is LZ4."""
    k = len(starts)
    first, count, block_max = np.zeros(k, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64)
    if not (codecs == LZ4).any():
        return _Lz4Blocks(first, count, block_max, np.zeros(0, np.int64), np.zeros(0, np.int64))
    from segment_io._decode_kernels import lz4_frame_blocks  # numba loads only when decoding needs it

    buf = np.frombuffer(data, np.uint8)
    room = 2 * k  # a batch's records are one 64 KiB block or a few
    while True:
        block_start, block_size = np.empty(room, np.int64), np.empty(room, np.int64)
        n = int(lz4_frame_blocks(buf, starts, ends, codecs, first, count, block_max, block_start, block_size))
        if n <= room:
            return _Lz4Blocks(first, count, block_max, block_start[:n], block_size[:n])
        room = n


class _BlockWalk:
    """The blocks of :class:`_Lz4Blocks` as lists, for the Python walk of a payload's blocks (where the compiled one
    cannot call LZ4): ``blocks(j)`` is payload ``j``'s (block maximum, starts, size fields), or None without any."""

    def __init__(self, blocks: _Lz4Blocks) -> None:
        self._first, self._count = blocks.first.tolist(), blocks.count.tolist()
        self._max = blocks.block_max.tolist()
        self._start, self._size = blocks.block_start.tolist(), blocks.block_size.tolist()

    def blocks(self, j: int) -> tuple[int, list[int], list[int]] | None:
        if not self._count[j]:
            return None
        a, b = self._first[j], self._first[j] + self._count[j]
        return self._max[j], self._start[a:b], self._size[a:b]


class Inflater:
    """Decompresses payloads one after another into one buffer, each bounded by its own ``limit``.

    The buffer grows as needed (:meth:`add_all` sizes it once for a run of planned payloads, so nothing is
    copied later). :meth:`view` returns the payloads decompressed so far.
    """

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=np.uint8)
        self.size = 0

    @staticmethod
    def capacity(codec: int, data: bytes | memoryview, limit: int) -> int:
        """The slice :meth:`add` first decompresses ``data`` into (see :func:`plan_payloads`). Raises
        :class:`OversizedBatchError` when the framing alone says the payload holds more than ``limit`` bytes,
        before anything is allocated."""
        from segment_io._decode_kernels import plan_payload

        at_least, capacity = plan_payload(np.frombuffer(data, dtype=np.uint8), codec, limit)
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
        if into is None:
            raise UnsupportedCodecError(f"unknown compression codec {codec}")
        try:
            if capacity is None:
                capacity = self.capacity(codec, data, limit)
            while True:
                try:
                    n = into(data, self._reserve(capacity))
                except _OutputFull:
                    n = capacity + 1  # at least
                except cramjam.DecompressionError as exc:
                    if str(exc) != _OUTPUT_FULL:
                        raise
                    n = capacity + 1
                if n > limit:
                    raise OversizedBatchError(oversized_detail(codec, limit))
                if n <= capacity:
                    break
                # the framing understated the size (gzip with several members): decompress again, bigger
                capacity = min(max(4 * capacity, MIN_GUESS), limit + 1)
        except CorruptRecordError:
            raise
        except Exception as exc:  # cramjam raises its own DecompressionError, ValueErrors and OSErrors
            raise DecompressionError(f"{name} payload does not decompress: {exc}") from None
        self.size += n
        return n

    def add_all(self, data: memoryview, starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray,
                codecs: Sequence[int] | np.ndarray, limits: Sequence[int] | np.ndarray,
                capacities: Sequence[int] | np.ndarray, done: list[int]) -> None:
        """:meth:`add` of each payload ``data[starts[j]:ends[j]]`` in turn, its :meth:`capacity` already known
        (from :func:`plan_payloads`), appending to ``done`` where each one ends in the buffer; when one fails,
        ``len(done)`` is its index. One call per run of batches: decoding small batches pays per batch only
        the codec call when the planned slice fits, as it does for genuine payloads; LZ4 frames as Kafka's
        producers write them are decompressed by one compiled call for a run of them (:mod:`segment_io._lz4_kernels`),
        where it can call LZ4's block functions, and so are zstd frames (:mod:`segment_io._zstd_kernels`)."""
        starts, ends, codecs, limits, capacities = (np.asarray(column, np.int64)
                                                    for column in (starts, ends, codecs, limits, capacities))
        blocks = _lz4_frame_blocks(data, starts, ends, codecs)
        kernels = _lz4_kernels() if blocks.count.any() else None
        zstd = _zstd_kernels() if (codecs == ZSTD).any() else None
        src = np.frombuffer(data, np.uint8)
        at_end = np.empty(len(starts), np.int64)
        # the rooms of payload j and of every one after it, reserved before j: once for all of them when nothing
        # outgrows its plan, again after a payload the Python path inflates past its plan (it grows the buffer for
        # itself only, and the compiled calls refuse a room past the buffer's end)
        rooms_from = np.cumsum(capacities[::-1])[::-1]
        if kernels is not None:
            scratch = np.empty(int(blocks.block_max.max()), np.uint8)
        walk = None if kernels is not None else _BlockWalk(blocks)
        j = 0
        while j < len(starts):
            self._reserve(int(rooms_from[j]))
            stop = j
            if kernels is not None and blocks.count[j]:
                stop, self.size = kernels.inflate_frames(
                    src, blocks.first, blocks.count, blocks.block_max, blocks.block_start, blocks.block_size,
                    capacities, limits, j, self._buf, self.size, scratch, at_end)
            elif zstd is not None and codecs[j] == ZSTD:
                stop, self.size = zstd.inflate_frames(src, starts, ends, codecs, capacities, limits, j, self._buf,
                                                      self.size, at_end, zstd.decompression_context())
            if stop > j:
                done.extend(at_end[j:stop].tolist())
                if stop == len(starts):
                    return
                # another codec or framing, or a payload the kernel stopped on: the Python path below reads it
                # and says what is wrong
                j = stop
            self._add_planned(data, int(starts[j]), int(ends[j]), int(codecs[j]), int(limits[j]),
                              int(capacities[j]), None if walk is None else walk.blocks(j))
            done.append(self.size)
            j += 1

    def _add_planned(self, data: memoryview, start: int, end: int, codec: int, limit: int, capacity: int,
                     blocks: tuple[int, list[int], list[int]] | None) -> None:
        """:meth:`add` of one payload of :meth:`add_all`: first through its LZ4 ``blocks`` (block maximum, starts
        and size fields) one codec call a block, when given, else the codec's frame walk into its planned slice;
        anything either fails on goes to :meth:`add`, which says what is wrong."""
        buf = self._buf
        payload = data[start:end]
        at = self.size
        n = -1
        if blocks is not None:
            # an LZ4 frame as Kafka's producers write it, its blocks already found: one codec call a block, as
            # _unlz4_into makes them; anything it would fail on goes to it below, to say what is wrong
            most, block_start, block_size = blocks
            pos, stop = at, at + capacity
            inflate_block = cramjam.lz4.decompress_block_into
            try:
                for size, s in zip(block_size, block_start):
                    if size & LZ4_RAW_BLOCK:
                        size &= LZ4_RAW_BLOCK - 1
                        if size > stop - pos:
                            raise _OutputFull()
                        buf[pos:pos + size] = data[s:s + size]
                        pos += size
                    elif stop - pos >= most:
                        pos += inflate_block(data[s:s + size], buf[pos:pos + most])  # type: ignore[arg-type]
                    else:  # the slice's last bytes (a declared content size): through a block of room
                        scratch = np.empty(most, np.uint8)
                        k = inflate_block(data[s:s + size], scratch)  # type: ignore[arg-type]
                        if k > stop - pos:
                            raise _OutputFull()
                        buf[pos:pos + k] = scratch[:k]
                        pos += k
                n = pos - at
            except Exception:  # noqa: BLE001 - the frame walk below reads it again and says what is wrong
                n = -1
        if n < 0:
            try:
                n = _INTO[codec](payload, buf[at:at + capacity])
            except Exception:  # noqa: BLE001 - the general path below says what is wrong
                n = -1
        if 0 <= n <= min(limit, capacity):
            self.size = at + n
        else:
            self.add(codec, payload, limit, capacity)

    def view(self) -> np.ndarray:
        """The payloads decompressed so far, one after another."""
        return self._buf[:self.size]

    def clear(self) -> None:
        """Start again at the buffer's first byte, keeping the buffer: whatever :meth:`view` returned before is
        overwritten by the next payloads."""
        self.size = 0

    @property
    def capacity_bytes(self) -> int:
        """The buffer's size."""
        return len(self._buf)


#: Payloads read through are decompressed in runs of about this many bytes, each run into the buffer of the run
#: before it, and used while they are still in the processor's cache: on the project's 2-core VM, LZ4 writing into
#: a reused buffer of 16 MiB or less costs about two thirds of what writing into one of tens of MiB does, and what
#: reads the run next (the decode's scan and fill, the encoder's copy of the kept values) reads from the cache
#: (docs/performance.md).
RUN_BYTES = 4 << 20

_SPARE = threading.local()


@contextmanager
def reused_inflater() -> Iterator[Inflater]:
    """An :class:`Inflater`, empty, whose buffer the calling thread had from its previous use (memory the process
    has already touched, not new pages for the kernel to fault in and clear). Whatever its :meth:`~Inflater.view`
    returned is overwritten by the next use: copy out what is kept before leaving. A use inside another gets a new
    one; a buffer grown past twice :data:`RUN_BYTES` (a single huge payload) is not kept."""
    inflater = getattr(_SPARE, "inflater", None) or Inflater()
    _SPARE.inflater = None
    try:
        yield inflater
    finally:
        inflater.clear()
        if inflater.capacity_bytes <= 2 * RUN_BYTES:
            _SPARE.inflater = inflater


def decompress(codec: int, data: bytes | memoryview, *, limit: int | None = None) -> bytes | memoryview:
    """Decompress one batch payload into a bytes-like object, inflating to at most ``limit`` bytes (default:
    :func:`max_batch_bytes`). Raises :class:`OversizedBatchError` past it and :class:`DecompressionError` when
    the payload does not decompress (both without a location: callers add file, position and offset)."""
    if codec == NONE:
        return memoryview(data)
    inflater = Inflater()
    inflater.add(codec, data, max_batch_bytes() if limit is None else limit)
    return memoryview(inflater.view())  # type: ignore[arg-type]


def _lz4_java_frame(data: bytes | memoryview, level: int | None) -> bytes:
    """An LZ4 frame laid out as Kafka's Java producer (``Lz4BlockOutputStream``) writes it: 64 KiB
    independent blocks, a block stored raw when compressing does not shrink it, no checksums, no content
    size, a zero end mark."""
    src = memoryview(data).cast("B")
    out, _ = _lz4_java_frames(src, np.zeros(1, np.int64), np.full(1, len(src), np.int64), 0, level)
    return out.tobytes()


def _lz4_java_frames(src: memoryview, starts: np.ndarray, sizes: np.ndarray, head: int,
                     level: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_lz4_java_frame` of each ``src[starts[i]:starts[i] + sizes[i]]``, one after another in one buffer,
    each after ``head`` bytes left for the caller, at LZ4's high-compression ``level`` if given; returns what
    :func:`compress_all` does. At the default level one compiled call frames them all, calling LZ4's block
    compressor for each block (:mod:`segment_io._lz4_kernels`), where it can; otherwise (and at a high-compression
    level) Python makes one codec call a block (a batch's records are one block up to 64 KiB), and the frame
    headers and the blocks' size fields are written afterwards, in one scatter each."""
    kw: dict[str, Any] = {} if level is None else {"mode": "high_compression", "compression": level}
    blocks = -(-sizes // _LZ4_BLOCK)
    # each frame's worst case: its header, a size field for each block and the end mark, each block's
    # LZ4_COMPRESSBOUND (its bytes, one in 255, and 16)
    bound = head + len(_LZ4_JAVA_HEADER) + 4 * (blocks + 1) + sizes + sizes // 255 + 16 * blocks
    out = np.empty(int(bound.sum()), np.uint8)
    kernels = _lz4_kernels() if level is None else None
    if kernels is not None:
        ends_at = np.empty(len(starts) + 1, np.int64)
        at = kernels.deflate_java_frames(np.frombuffer(readonly_bytes(src), np.uint8), np.asarray(starts, np.int64),
                                         np.asarray(sizes, np.int64), head, _LZ4_JAVA_HEADER_BYTES, out, ends_at)
        return out[:at], ends_at
    dst = memoryview(out)  # type: ignore[arg-type]
    compress_block = cramjam.lz4.compress_block_into
    frame_at: list[int] = []
    field_at: list[int] = []
    fields: list[int] = []
    ends: list[int] = [0]
    at = 0
    for a, n in zip(starts.tolist(), sizes.tolist()):
        at += head
        frame_at.append(at)
        at += len(_LZ4_JAVA_HEADER)
        stop = a + n
        while a < stop:
            size = min(_LZ4_BLOCK, stop - a)
            written = compress_block(src[a:a + size], out[at + 4:at + 4 + size + size // 255 + 16],  # type: ignore[arg-type]
                                     store_size=False, **kw)
            field_at.append(at)
            if written >= size:  # compressing does not shrink it: stored raw, as Lz4BlockOutputStream does
                dst[at + 4:at + 4 + size] = src[a:a + size]
                fields.append(size | LZ4_RAW_BLOCK)
                written = size
            else:
                fields.append(written)
            at += 4 + written
            a += size
        field_at.append(at)  # the end mark
        fields.append(0)
        at += 4
        ends.append(at)
    if frame_at:
        out[np.asarray(frame_at, np.int64)[:, None] + np.arange(len(_LZ4_JAVA_HEADER))] = _LZ4_JAVA_HEADER_BYTES
        out[np.asarray(field_at, np.int64)[:, None] + np.arange(4)] = \
            np.asarray(fields, "<u4").view(np.uint8).reshape(-1, 4)
    return out[:at], np.asarray(ends, np.int64)


def _zstd_bounds(sizes: np.ndarray) -> np.ndarray:
    """zstd's worst case for a frame of each of ``sizes`` bytes (``ZSTD_COMPRESSBOUND``)."""
    return sizes + (sizes >> 8) + np.where(sizes < (128 << 10), ((128 << 10) - sizes) >> 11, 0)


def compress_all(codec: int, data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 head: int) -> tuple[np.ndarray, np.ndarray]:
    """Each payload ``data[starts[i]:ends[i]]`` compressed and framed exactly as :func:`compress` frames it (default
    level), one after another into one buffer, each after ``head`` bytes left for the caller (a batch header).
    Returns the buffer and where each payload's room begins in it (``positions``, plus the buffer's length at the
    end): payload ``i``'s frame is ``buffer[positions[i] + head:positions[i + 1]]``.

    LZ4 compresses straight into the buffer (see :func:`_lz4_java_frames`); zstd one call a frame through this thread's
    context, each frame copied in; the other codecs are framed by :func:`compress` and copied in."""
    starts = np.asarray(starts, np.int64)
    sizes = np.asarray(ends, np.int64) - starts
    src = memoryview(data)  # type: ignore[arg-type]
    if codec == LZ4:
        return _lz4_java_frames(src, starts, sizes, head)
    positions: list[int] = [0]
    at = 0
    if codec == ZSTD:
        bounds = _zstd_bounds(sizes)
        out = np.empty(int(bounds.sum()) + head * len(sizes), np.uint8)
        kernels = _zstd_kernels()
        if kernels is not None:
            ends_at = np.empty(len(starts) + 1, np.int64)
            at = kernels.deflate_frames(np.frombuffer(readonly_bytes(src), np.uint8), starts, sizes, head, bounds, out,
                                        ends_at, kernels.compression_context())
            if at >= 0:
                return out[:at], ends_at
            # a payload libzstd did not compress (it says why below, through the Python path)
        into = memoryview(out)  # type: ignore[arg-type]
        compress_one = _ZSTD.compressor.compress
        for a, n in zip(starts.tolist(), sizes.tolist()):
            at += head
            frame = compress_one(src[a:a + n])
            into[at:at + len(frame)] = frame
            at += len(frame)
            positions.append(at)
        return out[:at], np.asarray(positions, np.int64)
    frames = [compress(codec, src[a:a + n]) for a, n in zip(starts.tolist(), sizes.tolist())]
    out = np.empty(sum(len(f) for f in frames) + head * len(frames), np.uint8)
    dst = memoryview(out)  # type: ignore[arg-type]
    for frame in frames:
        at += head
        dst[at:at + len(frame)] = frame
        at += len(frame)
        positions.append(at)
    return out[:at], np.asarray(positions, np.int64)


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
        if level is None:
            return _ZSTD.compressor.compress(data)
        return bytes(cramjam.zstd.compress(data, level=level))  # any level cramjam takes, as before
    raise UnsupportedCodecError(f"unknown compression codec {codec}")
