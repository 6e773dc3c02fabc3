"""Compiled hot loops of the encoder: sizing and writing RecordBatch v2 records straight from Arrow buffers.

The Python side (:mod:`segment_io.encode`) decides, per batch, what to write (header fields, base offset and
base timestamp the deltas are relative to); these kernels then visit every record once to size it and once
to write it, without creating a Python object per record. All batches of a call are written into one
preallocated buffer, header first and records after it, and values that are references into the source
segments are copied from there into their place. Their CRC-32Cs are computed afterwards, all in one call with the
processor's CRC32 instruction (:mod:`segment_io.crc`); without that instruction small batches get theirs here (a
table-driven loop) and large ones from the ``crc32c`` package. Keys, values and headers are
copied with an LLVM memcpy: numba's slice assignment copies byte by byte (about 1 GB/s against 10+ GB/s).

Arrow binary/string columns arrive as (int32 offsets, uint8 data, bool validity) triples; ``headers`` as the
list offsets plus the triples of its struct children.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from segment_io._crc_kernels import POLY as CRC32C_POLY
from segment_io.format import (
    LOG_OVERHEAD,
    SIZE_OFFSET,
    V2_ATTRIBUTES,
    V2_BASE_SEQUENCE,
    V2_BASE_TIMESTAMP,
    V2_CRC,
    V2_HEADER_SIZE,
    V2_LAST_OFFSET_DELTA,
    V2_MAGIC,
    V2_MAX_TIMESTAMP,
    V2_PARTITION_LEADER_EPOCH,
    V2_PRODUCER_EPOCH,
    V2_PRODUCER_ID,
    V2_RECORDS_COUNT,
)
from segment_io.schema import REF_CARRIES_LENGTH, REF_LENGTH_MASK, REF_POSITION_BITS, REF_POSITION_MASK

_U7 = np.uint64(7)
_U63 = np.uint64(63)
_U7F = np.uint64(0x7F)
_U80 = np.uint64(0x80)
_MAGIC_V2 = 2


def _crc32c_tables() -> np.ndarray:
    """Slicing-by-8 tables of CRC-32C (Castagnoli, its reflected polynomial :data:`CRC32C_POLY`)."""
    tables = np.zeros((8, 256), dtype=np.int64)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        tables[0, n] = c
    for k in range(1, 8):
        prev = tables[k - 1]
        tables[k] = (prev >> 8) ^ tables[0][prev & 0xFF]
    return tables


CRC32C_TABLES = _crc32c_tables()


@njit(inline="always")
def _crc32c(tables: np.ndarray, buf: np.ndarray, start: int, end: int) -> int:
    # Only for small batches, where calling the hardware-accelerated crc32c package from Python per batch
    # would cost more than this table-driven loop.
    crc = np.int64(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        lo = crc ^ (np.int64(buf[i]) | (np.int64(buf[i + 1]) << 8) | (np.int64(buf[i + 2]) << 16)
                    | (np.int64(buf[i + 3]) << 24))
        crc = (tables[7, lo & 0xFF] ^ tables[6, (lo >> 8) & 0xFF] ^ tables[5, (lo >> 16) & 0xFF]
               ^ tables[4, (lo >> 24) & 0xFF] ^ tables[3, buf[i + 4]] ^ tables[2, buf[i + 5]]
               ^ tables[1, buf[i + 6]] ^ tables[0, buf[i + 7]])
        i += 8
    while i < end:
        crc = tables[0, (crc ^ buf[i]) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ 0xFFFFFFFF


@njit(inline="always")
def _zigzag(v: np.int64) -> np.uint64:
    # Kafka zig-zags int32 varints in 32 bits and varlongs in 64; for any value that fits an int32 both give
    # the same number, so one 64-bit routine serves both.
    u = np.uint64(v)
    return (u << np.uint64(1)) ^ np.uint64(np.int64(v) >> 63)


@njit(inline="always")
def _varint_size(u: np.uint64) -> int:
    n = 1
    while u >= _U80:
        u >>= _U7
        n += 1
    return n


@njit(inline="always")
def _put_varint(out: np.ndarray, p: int, u: np.uint64) -> int:
    while u >= _U80:
        out[p] = np.uint8((u & _U7F) | _U80)
        u >>= _U7
        p += 1
    out[p] = np.uint8(u)
    return p + 1


@njit(inline="always")
def _put_be(out: np.ndarray, p: int, v: np.int64, nbytes: int) -> None:
    for i in range(nbytes):
        out[p + nbytes - 1 - i] = np.uint8((v >> (8 * i)) & 0xFF)


@intrinsic
def _memcpy(typingctx, dst, dst_start, src, src_start, count):
    """``dst[dst_start:dst_start+count] = src[src_start:src_start+count]`` as one LLVM memcpy (numba's slice
    assignment and plain loops copy byte by byte inside a kernel this size)."""
    sig = types.void(dst, dst_start, src, src_start, count)

    def codegen(context, builder, signature, args):
        d, d_start, s, s_start, n = args
        kinds = signature.args
        d_start = context.cast(builder, d_start, kinds[1], types.intp)
        s_start = context.cast(builder, s_start, kinds[3], types.intp)
        n = context.cast(builder, n, kinds[4], types.intp)
        d_ptr = builder.gep(context.make_array(kinds[0])(context, builder, d).data, [d_start])
        s_ptr = builder.gep(context.make_array(kinds[2])(context, builder, s).data, [s_start])
        cgutils.raw_memcpy(builder, d_ptr, s_ptr, n, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def _put_bytes(out: np.ndarray, p: int, data: np.ndarray, start: int, n: int) -> int:
    _memcpy(out, p, data, start, n)
    return p + n


@njit(inline="always")
def _nullable_size(offsets: np.ndarray, valid: np.ndarray, i: int) -> int:
    if not valid[i]:
        return 1  # varint(-1)
    n = offsets[i + 1] - offsets[i]
    return _varint_size(_zigzag(np.int64(n))) + n


@njit(inline="always")
def _put_nullable(out: np.ndarray, p: int, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray,
                  i: int) -> int:
    if not valid[i]:
        out[p] = np.uint8(1)  # zig-zag of -1
        return p + 1
    start = offsets[i]
    n = offsets[i + 1] - start
    p = _put_varint(out, p, _zigzag(np.int64(n)))
    return _put_bytes(out, p, data, start, n)


@njit(cache=True, nogil=True)
def record_body_sizes(row_start, row_end, base_offset, base_timestamp, offsets, timestamps,
                      key_off, key_valid, val_off, val_valid,
                      hdr_off, hdr_valid, hk_off, hv_off, hv_valid,
                      body_sizes, batch_bodies) -> None:
    """Size every record of every batch: ``body_sizes[row]`` is the record's length field (bytes after the
    length varint); ``batch_bodies[b]`` the bytes all records of batch ``b`` take, length varints included."""
    for b in range(row_start.shape[0]):
        total = 0
        base_off = base_offset[b]
        base_ts = base_timestamp[b]
        for r in range(row_start[b], row_end[b]):
            size = 1  # record attributes (always zero)
            size += _varint_size(_zigzag(timestamps[r] - base_ts))
            size += _varint_size(_zigzag(offsets[r] - base_off))
            size += _nullable_size(key_off, key_valid, r)
            size += _nullable_size(val_off, val_valid, r)
            nh = 0
            if hdr_valid[r]:
                h0 = hdr_off[r]
                h1 = hdr_off[r + 1]
                nh = h1 - h0
                for h in range(h0, h1):
                    klen = hk_off[h + 1] - hk_off[h]
                    size += _varint_size(_zigzag(np.int64(klen))) + klen
                    size += _nullable_size(hv_off, hv_valid, h)
            size += _varint_size(_zigzag(np.int64(nh)))
            body_sizes[r] = size
            total += _varint_size(_zigzag(np.int64(size))) + size
        batch_bodies[b] = total


@njit(cache=True, nogil=True)
def write_batches(out, batch_pos, row_start, row_end, base_offset, last_offset, base_timestamp, max_timestamp,
                  attributes, producer_id, producer_epoch, base_sequence, leader_epoch, batch_bodies,
                  body_sizes, offsets, timestamps,
                  key_off, key_data, key_valid, val_off, val_data, val_valid, values_later, value_at,
                  hdr_off, hdr_valid, hk_off, hk_data, hv_off, hv_data, hv_valid) -> None:
    """Write batch ``b`` at ``out[batch_pos[b]:]``: the 61-byte v2 header and its records, uncompressed, with
    the CRC field left zero (:func:`table_crcs`, or :func:`segment_io.crc.span_crcs`). Sizes come from
    :func:`record_body_sizes`. ``values_later``: each non-null value's length is written but not its bytes
    (``val_data`` is not read): ``value_at[r]`` gets where they go, for :func:`gather_ref_values` to copy them
    there straight from the source segment."""
    for b in range(row_start.shape[0]):
        p = batch_pos[b]
        size = V2_HEADER_SIZE + batch_bodies[b]
        _put_be(out, p, base_offset[b], 8)
        _put_be(out, p + SIZE_OFFSET, np.int64(size - LOG_OVERHEAD), 4)
        _put_be(out, p + V2_PARTITION_LEADER_EPOCH, np.int64(leader_epoch[b]), 4)
        out[p + V2_MAGIC] = np.uint8(_MAGIC_V2)
        for i in range(V2_MAGIC + 1, V2_ATTRIBUTES):
            out[p + i] = np.uint8(0)
        _put_be(out, p + V2_ATTRIBUTES, np.int64(attributes[b]), 2)
        _put_be(out, p + V2_LAST_OFFSET_DELTA, last_offset[b] - base_offset[b], 4)
        _put_be(out, p + V2_BASE_TIMESTAMP, base_timestamp[b], 8)
        _put_be(out, p + V2_MAX_TIMESTAMP, max_timestamp[b], 8)
        _put_be(out, p + V2_PRODUCER_ID, producer_id[b], 8)
        _put_be(out, p + V2_PRODUCER_EPOCH, np.int64(producer_epoch[b]), 2)
        _put_be(out, p + V2_BASE_SEQUENCE, np.int64(base_sequence[b]), 4)
        _put_be(out, p + V2_RECORDS_COUNT, np.int64(row_end[b] - row_start[b]), 4)
        p += V2_HEADER_SIZE
        base_off = base_offset[b]
        base_ts = base_timestamp[b]
        for r in range(row_start[b], row_end[b]):
            p = _put_varint(out, p, _zigzag(np.int64(body_sizes[r])))
            out[p] = np.uint8(0)
            p += 1
            p = _put_varint(out, p, _zigzag(timestamps[r] - base_ts))
            p = _put_varint(out, p, _zigzag(offsets[r] - base_off))
            p = _put_nullable(out, p, key_off, key_data, key_valid, r)
            if not values_later:
                p = _put_nullable(out, p, val_off, val_data, val_valid, r)
            elif val_valid[r]:
                n = val_off[r + 1] - val_off[r]
                p = _put_varint(out, p, _zigzag(np.int64(n)))
                value_at[r] = p
                p += n
            else:
                out[p] = np.uint8(1)  # zig-zag of -1
                p += 1
            if hdr_valid[r]:
                h0 = hdr_off[r]
                h1 = hdr_off[r + 1]
                p = _put_varint(out, p, _zigzag(np.int64(h1 - h0)))
                for h in range(h0, h1):
                    ks = hk_off[h]
                    kn = hk_off[h + 1] - ks
                    p = _put_varint(out, p, _zigzag(np.int64(kn)))
                    p = _put_bytes(out, p, hk_data, ks, kn)
                    p = _put_nullable(out, p, hv_off, hv_data, hv_valid, h)
            else:
                out[p] = np.uint8(0)
                p += 1


@njit(cache=True, nogil=True)
def table_crcs(out, batch_pos, batch_size, todo, crc_tables, crc_out) -> None:
    """For each batch ``b`` with ``todo[b]``, written whole at ``out[batch_pos[b]:]`` with ``batch_size[b]``
    bytes: its CRC-32C computed with the tables (no CRC32 instruction needed), stored in its header and in
    ``crc_out[b]``."""
    for b in range(todo.shape[0]):
        if todo[b]:
            start = batch_pos[b]
            crc = _crc32c(crc_tables, out, start + V2_ATTRIBUTES, start + batch_size[b])
            _put_be(out, start + V2_CRC, crc, 4)
            crc_out[b] = crc


@njit(cache=True, inline="always")
def _length_varint(buf, p, n) -> tuple[np.uint64, int]:
    """The raw (still zig-zag) varint of at most 5 bytes at ``buf[p]``, which must end before ``n``, and the
    position after it; the position is -1 where it does not."""
    u = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if p >= n or shift > np.uint64(28):
            return u, -1
        byte = np.uint64(buf[p])
        p += 1
        u |= (byte & _U7F) << shift
        if byte < _U80:
            return u, p
        shift += _U7


@njit(cache=True, inline="always")
def _ref_place(ref, base, n) -> tuple[int, int]:
    """Where the length varint of value reference ``ref`` lies in ``buf`` (relative to ``base``) and the length it
    carries (-1: none, see :data:`segment_io.schema.VALUE_REF_TYPE`); the place is -1 where it is not inside
    ``buf[base:n]``."""
    if ref < 0:
        return -1, -1
    pos, carried = ref, -1
    field = (ref >> REF_POSITION_BITS) & REF_LENGTH_MASK
    if ref & REF_CARRIES_LENGTH and field:  # a flag above a zero field carries nothing: the whole is a position
        pos = ref & REF_POSITION_MASK
        carried = field - 1
    if pos >= n - base:  # compared before adding: a huge reference must not wrap
        return -1, -1
    return base + pos, carried


@njit(cache=True, nogil=True)
def ref_value_lengths(buf, refs, base, limit, valid, rows, lengths) -> int:
    """For each row ``r = rows[i]`` with a non-null value: ``lengths[r]`` = the length in the zig-zag varint at
    the place ``refs[r]`` names from ``buf[base[i]]`` on, which must be a non-negative int32 whose bytes lie inside
    ``buf[base[i]:limit[i]]`` (the payload the reference is relative to), and the length the reference carries if
    it carries one. Returns the first ``i`` whose reference is not such a place, else -1."""
    for i in range(rows.shape[0]):
        r = rows[i]
        if not valid[r]:
            lengths[r] = 0
            continue
        n = limit[i]
        at, carried = _ref_place(refs[r], base[i], n)
        if at < 0:
            return i
        u, p = _length_varint(buf, at, n)
        if p < 0 or u & np.uint64(1) or u > np.uint64(0xFFFFFFFF):
            return i  # negative (a null value where the row says there is one) or wider than an int32
        length = np.int64(u >> np.uint64(1))
        if p + length > n or (carried >= 0 and carried != length):
            return i
        lengths[r] = length
    return -1


@njit(cache=True, nogil=True)
def gather_ref_values(buf, refs, base, limit, valid, rows, offsets, dest, data) -> int:
    """Copy the value that ``refs[r]`` points at from ``base[i]`` on (``offsets[r + 1] - offsets[r]`` bytes: the
    length its reference carries, or :func:`ref_value_lengths` measured) to ``data[dest[r]:]`` for each row
    ``r = rows[i]`` with a non-null value. Returns the first ``i`` whose reference is no longer inside
    ``buf[base[i]:limit[i]]``, whose length varint no longer reads as that length, or whose bytes would now lie
    past ``limit[i]`` (the buffer's bytes changed since they were measured: a mapped segment rewritten under the
    job), having read nothing past the limit; else -1."""
    for i in range(rows.shape[0]):
        r = rows[i]
        if not valid[r]:
            continue
        n = limit[i]
        at, _ = _ref_place(refs[r], base[i], n)
        if at < 0:
            return i
        u, p = _length_varint(buf, at, n)
        length = np.int64(offsets[r + 1]) - np.int64(offsets[r])
        # a length's zig-zag varint is twice the length
        if p < 0 or u != np.uint64(2 * length) or p + length > n:
            return i
        _memcpy(data, dest[r], buf, p, length)
    return -1


@njit(cache=True, nogil=True)
def follow_chain(successor: np.ndarray, first: int, out: np.ndarray) -> int:
    """``out`` = ``first``, ``successor[first]``, ``successor[successor[first]]``, ... while below
    ``len(successor)``; returns how many (the batches that get an offset-index entry, see segment_io.index)."""
    n, j, count = successor.shape[0], first, 0
    while j < n:
        out[count] = j
        count += 1
        j = successor[j]
    return count
