"""The key hash of segjobs: MurmurHash3 x64 128 (seed 0), compiled with numba.

This is the one place that defines how a record key becomes the 128-bit identity the compaction offset map
uses. Both the key-hash decoder (:func:`segment_io.decode.read_key_hashes`) and :func:`hash_keys` (for keys
already decoded into Arrow) call :func:`murmur3_128` here, so the two always agree.

The 128-bit digest is returned as two signed int64 halves: ``lo`` is the first 64-bit word of the
canonical digest (``h1``), ``hi`` the second (``h2``); ``mmh3.hash128(key, 0, signed=False)`` equals
``(hi_unsigned << 64) | lo_unsigned``. Null keys hash to ``(0, 0)`` and are told apart by a separate flag.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_M5 = np.uint64(5)
_N1 = np.uint64(0x52DCE729)
_N2 = np.uint64(0x38495AB5)
# Shift amounts as uint64: numba promotes mixed uint64/int64 arithmetic to float64.
_S8 = np.uint64(8)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S33 = np.uint64(33)
_S64 = np.uint64(64)


@njit(cache=True, inline="always")
def _rotl(x: np.uint64, r: np.uint64) -> np.uint64:
    return (x << r) | (x >> (_S64 - r))


@njit(cache=True, inline="always")
def _fmix(k: np.uint64) -> np.uint64:
    k ^= k >> _S33
    k *= _FMIX1
    k ^= k >> _S33
    k *= _FMIX2
    k ^= k >> _S33
    return k


@njit(cache=True, inline="always")
def _le64(buf: np.ndarray, pos: int) -> np.uint64:
    v = np.uint64(0)
    for j in range(7, -1, -1):
        v = (v << _S8) | np.uint64(buf[pos + j])
    return v


@njit(cache=True, inline="always")
def murmur3_128(buf: np.ndarray, start: int, length: int) -> tuple[np.int64, np.int64]:
    """MurmurHash3 x64 128 with seed 0 of ``buf[start:start+length]``; returns ``(hi, lo)`` as int64."""
    h1 = np.uint64(0)
    h2 = np.uint64(0)
    nblocks = length // 16
    for i in range(nblocks):
        p = start + i * 16
        k1 = _le64(buf, p)
        k2 = _le64(buf, p + 8)
        k1 *= _C1
        k1 = _rotl(k1, _S31)
        k1 *= _C2
        h1 ^= k1
        h1 = _rotl(h1, _S27)
        h1 += h2
        h1 = h1 * _M5 + _N1
        k2 *= _C2
        k2 = _rotl(k2, _S33)
        k2 *= _C1
        h2 ^= k2
        h2 = _rotl(h2, _S31)
        h2 += h1
        h2 = h2 * _M5 + _N2
    tail = start + nblocks * 16
    rem = length - nblocks * 16
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    for i in range(rem - 1, -1, -1):
        b = np.uint64(buf[tail + i])
        if i >= 8:
            k2 ^= b << np.uint64(8 * (i - 8))
        else:
            k1 ^= b << np.uint64(8 * i)
    if rem > 8:
        k2 *= _C2
        k2 = _rotl(k2, _S33)
        k2 *= _C1
        h2 ^= k2
    if rem > 0:
        k1 *= _C1
        k1 = _rotl(k1, _S31)
        k1 *= _C2
        h1 ^= k1
    n = np.uint64(length)
    h1 ^= n
    h2 ^= n
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return np.int64(h2), np.int64(h1)


@njit(cache=True)
def _hash_spans(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray,
                out_hi: np.ndarray, out_lo: np.ndarray) -> None:
    for i in range(out_hi.shape[0]):
        if valid[i]:
            start = offsets[i]
            hi, lo = murmur3_128(data, start, offsets[i + 1] - start)
            out_hi[i] = hi
            out_lo[i] = lo
        else:
            out_hi[i] = 0
            out_lo[i] = 0


def _hash_chunk(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    n = len(arr)
    hi = np.zeros(n, dtype=np.int64)
    lo = np.zeros(n, dtype=np.int64)
    if n == 0:
        return hi, lo
    offset_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    else:
        valid = np.ones(n, dtype=np.bool_)
    _hash_spans(data, offsets, valid, hi, lo)
    return hi, lo


def hash_keys(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """128-bit key hashes ``(hi, lo)`` (two int64 arrays) of a binary key column.

    The same hash :func:`segment_io.decode.read_key_hashes` computes while decoding, so a table's keys can be
    matched against a key-hash pass. Null keys give ``(0, 0)``; use the null flags to tell them apart.
    Accepts ``binary`` and ``large_binary`` arrays (``string`` is hashed as its UTF-8 bytes).
    """
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    parts_hi: list[np.ndarray] = []
    parts_lo: list[np.ndarray] = []
    for chunk in chunks:
        if pa.types.is_string(chunk.type):
            chunk = chunk.cast(pa.binary())
        elif pa.types.is_large_string(chunk.type):
            chunk = chunk.cast(pa.large_binary())
        elif not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)):
            raise TypeError(f"hash_keys needs a binary column, got {chunk.type}")
        hi, lo = _hash_chunk(chunk)
        parts_hi.append(hi)
        parts_lo.append(lo)
    if not parts_hi:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(parts_hi) == 1:
        return parts_hi[0], parts_lo[0]
    return np.concatenate(parts_hi), np.concatenate(parts_lo)


__all__ = ["hash_keys", "murmur3_128"]
