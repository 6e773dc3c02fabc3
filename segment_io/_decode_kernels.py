"""numba kernels that walk the records of RecordBatch v2 payloads, and the frame headers of compressed
payloads. Private to :mod:`segment_io.decode` and :mod:`segment_io.compression`.

Records of a batch lie either in the segment buffer itself (uncompressed batches) or in a buffer of
decompressed payloads; ``src[b]`` says which (0 segment, 1 decompressed) and ``rstart[b]:rend[b]`` where.

Each batch is walked twice, so that nothing is written from an unchecked length field:

1. a scan (:func:`_scan_batch`) checks every varint and length against its record and batch end, checks that
   each record's fields use exactly its declared size and that the batch holds exactly its declared number of
   records, and sums the bytes each output column needs (where the processor has the CRC32 instruction, the
   batch's CRC is checked just before, which brings it into the cache);
2. a fill (:func:`_fill_batch`, or :func:`_hash_batch` for the first compaction pass) walks the bytes the scan
   accepted again and writes the columns, checking each length against what is left of its buffer, since mapped
   bytes can change between the two walks.

:func:`scan_fill_records` and :func:`scan_hash_records` do both batch by batch, while the batch is in the cache;
:func:`scan_records` then :func:`fill_records` do each over a whole run, for a run that int32 offsets cannot
address (the scan's sums say whether its columns can be).

Kernels never raise: they report the first problem in ``err`` as ``[code, batch index, byte position in
its buffer, record index, offending value]`` and the caller raises the matching exception.

:func:`plan_payloads` reads, before anything is decompressed, what each compressed payload's frames say about
its inflated size (see :func:`segment_io.compression.plan_payloads`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from segment_io import _crc_kernels as _crc
from segment_io.compression import (
    GZIP,
    LZ4,
    LZ4_MAGIC,
    LZ4_RAW_BLOCK,
    MIN_GUESS,
    NONE,
    RATIO_GUESS,
    SKIPPABLE_MAGIC,
    SKIPPABLE_MASK,
    SNAPPY,
    XERIAL_MAGIC,
    ZSTD,
    ZSTD_MAGIC,
    ZSTD_MAX_BLOCK,
)
from segment_io.format import (
    LEGACY_MAGIC,
    LEGACY_MIN_SIZE,
    LOG_OVERHEAD,
    MAX_BATCH_SIZE,
    SIZE_OFFSET,
    V2_HEADER_SIZE,
    V2_MAGIC,
)
from segment_io.hashing import murmur3_128
from segment_io.schema import REF_CARRIES_LENGTH, REF_MAX_LENGTH, REF_POSITION_BITS, REF_POSITION_MASK

ERR_NONE = 0
ERR_VARINT_PAST_END = 1
ERR_VARINT_TOO_LONG = 2
ERR_LENGTH = 3
ERR_RECORD_SIZE = 4
ERR_COUNT_SHORT = 5
ERR_COUNT_EXTRA = 6
ERR_COUNT_NEGATIVE = 7
ERR_CONTROL_KEY = 8
ERR_CONTROL_VERSION = 9
ERR_CRC = 10
ERR_CHANGED = 11
#: a record's offset delta that is negative, does not increase on the record before it, or lies past its batch's
#: last offset delta (value: the delta)
ERR_OFFSET_DELTA = 12
#: the batches hold more records than the caller gave rows for (value: the rows needed): a defect of the caller's
ERR_ROWS_SHORT = 13

#: Slots of the ``totals`` array :func:`scan_records` fills.
TOT_RECORDS, TOT_KEY_BYTES, TOT_VALUE_BYTES, TOT_HEADERS, TOT_HKEY_BYTES, TOT_HVALUE_BYTES = range(6)

# Varints are at most 5 bytes for int32 fields and 10 for int64 fields (Kafka's ByteUtils limits).
_VARINT32_MAX = 5
_VARINT64_MAX = 10
# Negative "positions" returned by _varint to signal a failure without raising inside compiled code.
_PAST_END = -1
_TOO_LONG = -2
_MASK32 = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)
_SEVEN = np.uint64(7)


@njit(cache=True, inline="always")
def _varint(buf: np.ndarray, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos`` that must end before ``end``. Returns ``(value, next position)``; the
    position is ``_PAST_END`` or ``_TOO_LONG`` on failure. 5-byte varints wrap to int32 like Java does."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if pos >= end:
            return 0, _PAST_END
        b = buf[pos]
        pos += 1
        raw |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == _VARINT32_MAX:
                raw &= _MASK32
                v = np.int64((raw >> _ONE) ^ ((np.uint64(0) - (raw & _ONE)) & _MASK32))
                if v >= 2147483648:
                    v -= 4294967296
                return v, pos
            return np.int64(raw >> _ONE) ^ -np.int64(raw & _ONE), pos
        shift += _SEVEN
    return 0, _TOO_LONG


#: What :func:`control_key_type` returns for a key that is not a control key (both outside int16, so never a type).
CONTROL_KEY_SHORT = -(1 << 16)
CONTROL_KEY_NEGATIVE_VERSION = -(1 << 16) - 1


@njit(cache=True, inline="always")
def _int16(buf, p):  # pragma: no cover - compiled
    v = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
    return v - 65536 if v >= 32768 else v


@njit(cache=True)
def control_key_type(buf: np.ndarray, p: int, klen: int) -> int:
    """The type of a control record from its key, the ``klen`` bytes at ``buf[p]``: the one parser of control keys.

    A control key is an int16 version and an int16 type, big-endian, as Kafka's ``ControlRecordType.parseTypeId``
    reads it: fewer than 4 bytes (or a null key, ``klen`` -1) give :data:`CONTROL_KEY_SHORT`, a negative version
    :data:`CONTROL_KEY_NEGATIVE_VERSION` (Kafka throws for both); a newer version is read like version 0, and any
    bytes after the first 4 are ignored, as in Kafka. :func:`segment_io.decode.control_record_type` is the same
    parser for a key held as Python bytes.
    """
    if klen < 4:
        return CONTROL_KEY_SHORT
    if _int16(buf, p) < 0:
        return CONTROL_KEY_NEGATIVE_VERSION
    return _int16(buf, p + 2)


@njit(cache=True, inline="always")
def _fail(err: np.ndarray, code: int, batch: int, pos: int, record: int, value: int) -> bool:
    err[0] = code
    err[1] = batch
    err[2] = pos
    err[3] = record
    err[4] = value
    return False


@njit(cache=True, inline="always")
def _varint_fail(err: np.ndarray, p: int, batch: int, pos: int, record: int) -> bool:
    code = ERR_VARINT_PAST_END if p == _PAST_END else ERR_VARINT_TOO_LONG
    return _fail(err, code, batch, pos, record, 0)


@njit(inline="always")
def _out_of_order(delta: int, previous: int, last_delta: int) -> bool:
    """Whether a record's offset ``delta`` breaks its batch's order: every writer of a batch makes its records'
    deltas rise from 0 (``previous`` is -1 before the first record) up to the batch's last offset delta, a compacted
    batch skipping some. The scan refuses such a record; the second pass, reading the bytes again, takes it for
    bytes that changed in between."""
    return delta <= previous or delta > last_delta


@njit(cache=True, inline="always")
def _scan_batch(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, rend: np.ndarray,
                counts: np.ndarray, last_delta: np.ndarray, b: int, totals: np.ndarray, err: np.ndarray) -> bool:
    """:func:`scan_records` of batch ``b``: adds its sums to ``totals``; False (and ``err``) on its first
    problem. A record offset out of its batch's order (:func:`_out_of_order`, ``last_delta[b]``) is refused here,
    with its batch and record, rather than met by the writer of a rewrite, which cannot say where it came from."""
    buf = seg if src[b] == 0 else dec
    pos = rstart[b]
    end = rend[b]
    count = counts[b]
    key_bytes = 0
    value_bytes = 0
    n_headers = 0
    hkey_bytes = 0
    hvalue_bytes = 0
    previous = -1
    if count < 0:
        return _fail(err, ERR_COUNT_NEGATIVE, b, pos, 0, count)
    for i in range(count):
        if pos >= end:
            return _fail(err, ERR_COUNT_SHORT, b, pos, i, count)
        length, p = _varint(buf, pos, end, _VARINT32_MAX)
        if p < 0:
            return _varint_fail(err, p, b, pos, i)
        if length < 0 or length > end - p:
            return _fail(err, ERR_LENGTH, b, pos, i, length)
        rec_end = p + length
        if p >= rec_end:  # no room for the attributes byte
            return _fail(err, ERR_RECORD_SIZE, b, pos, i, length)
        p += 1
        _, q = _varint(buf, p, rec_end, _VARINT64_MAX)  # timestamp delta
        if q < 0:
            return _varint_fail(err, q, b, p, i)
        delta, p = _varint(buf, q, rec_end, _VARINT32_MAX)
        if p < 0:
            return _varint_fail(err, p, b, q, i)
        if _out_of_order(delta, previous, last_delta[b]):
            return _fail(err, ERR_OFFSET_DELTA, b, q, i, delta)
        previous = delta
        klen, q = _varint(buf, p, rec_end, _VARINT32_MAX)
        if q < 0:
            return _varint_fail(err, q, b, p, i)
        if klen < -1 or klen > rec_end - q:
            return _fail(err, ERR_LENGTH, b, p, i, klen)
        if klen > 0:
            key_bytes += klen
            q += klen
        vlen, p = _varint(buf, q, rec_end, _VARINT32_MAX)
        if p < 0:
            return _varint_fail(err, p, b, q, i)
        if vlen < -1 or vlen > rec_end - p:
            return _fail(err, ERR_LENGTH, b, q, i, vlen)
        if vlen > 0:
            value_bytes += vlen
            p += vlen
        hcount, q = _varint(buf, p, rec_end, _VARINT32_MAX)
        if q < 0:
            return _varint_fail(err, q, b, p, i)
        # every header takes at least two bytes (two one-byte varints)
        if hcount < 0 or hcount > (rec_end - q) // 2:
            return _fail(err, ERR_LENGTH, b, p, i, hcount)
        for _ in range(hcount):
            hk, p = _varint(buf, q, rec_end, _VARINT32_MAX)
            if p < 0:
                return _varint_fail(err, p, b, q, i)
            if hk < 0 or hk > rec_end - p:  # header keys are never null
                return _fail(err, ERR_LENGTH, b, q, i, hk)
            hkey_bytes += hk
            p += hk
            hv, q = _varint(buf, p, rec_end, _VARINT32_MAX)
            if q < 0:
                return _varint_fail(err, q, b, p, i)
            if hv < -1 or hv > rec_end - q:
                return _fail(err, ERR_LENGTH, b, p, i, hv)
            if hv > 0:
                hvalue_bytes += hv
                q += hv
        n_headers += hcount
        if q != rec_end:
            return _fail(err, ERR_RECORD_SIZE, b, pos, i, length)
        pos = rec_end
    if pos != end:
        return _fail(err, ERR_COUNT_EXTRA, b, pos, count, count)
    totals[TOT_RECORDS] += count
    totals[TOT_KEY_BYTES] += key_bytes
    totals[TOT_VALUE_BYTES] += value_bytes
    totals[TOT_HEADERS] += n_headers
    totals[TOT_HKEY_BYTES] += hkey_bytes
    totals[TOT_HVALUE_BYTES] += hvalue_bytes
    return True


if _crc.HARDWARE:  # the CRC32 instruction compiles only where it is there (see segment_io._crc_kernels)

    @njit(cache=True, inline="always")
    def _batch_crc_ok(seg: np.ndarray, crc_start: np.ndarray, rend: np.ndarray, crcs: np.ndarray,
                      long_shift: np.ndarray, short_shift: np.ndarray, b: int, err: np.ndarray) -> bool:
        """Whether batch ``b`` passes its CRC, where the scan checks it (``crcs[b] >= 0``: one that lies in
        ``seg``): ``seg[crc_start[b]:rend[b]]`` must give the CRC-32C ``crcs[b]``, else False and ``ERR_CRC`` with
        the CRC computed as the offending value. The CRC reads the whole batch into the cache, where its records
        are then walked, instead of being fetched from memory again one record at a time."""
        if crcs[b] >= 0:
            actual = _crc.span_crc(seg, crc_start[b], rend[b], long_shift, short_shift)
            if actual != crcs[b]:
                return _fail(err, ERR_CRC, b, crc_start[b], 0, actual)
        return True

else:

    @njit(cache=True, inline="always")
    def _batch_crc_ok(seg: np.ndarray, crc_start: np.ndarray, rend: np.ndarray, crcs: np.ndarray,
                      long_shift: np.ndarray, short_shift: np.ndarray, b: int, err: np.ndarray) -> bool:
        """Where the processor has no CRC32 instruction the caller checked every CRC before (``crcs`` is all
        -1 there)."""
        return True


@njit(cache=True)
def scan_records(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, rend: np.ndarray,
                 counts: np.ndarray, last_delta: np.ndarray, crc_start: np.ndarray, crcs: np.ndarray,
                 long_shift: np.ndarray, short_shift: np.ndarray, totals: np.ndarray, err: np.ndarray) -> bool:
    """Validating pass over every record of every batch, each batch's CRC first (:func:`_batch_crc_ok`); fills
    ``totals`` (zeroed by the caller). False (and ``err``) on the first problem."""
    for b in range(rstart.shape[0]):
        if not _batch_crc_ok(seg, crc_start, rend, crcs, long_shift, short_shift, b, err):
            return False
        if not _scan_batch(seg, dec, src, rstart, rend, counts, last_delta, b, totals, err):
            return False
    return True


@njit(cache=True, inline="always")
def _skip_varint(buf: np.ndarray, pos: int) -> int:
    while buf[pos] >= 0x80:
        pos += 1
    return pos + 1


@intrinsic
def _copy(typingctx, dst, at, buf, start, n):
    """``dst[at:at+n] = buf[start:start+n]`` as one memcpy: a byte loop, even compiled, runs at a fifth of
    the speed, and an intrinsic (unlike a ctypes call to libc) keeps the kernels cacheable."""
    sig = types.void(dst, types.intp, buf, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        dst_v, at_v, buf_v, start_v, n_v = args
        d = context.make_array(signature.args[0])(context, builder, dst_v)
        s = context.make_array(signature.args[2])(context, builder, buf_v)
        cgutils.raw_memcpy(builder, builder.gep(d.data, [at_v]), builder.gep(s.data, [start_v]), n_v, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def _record_head(buf: np.ndarray, pos: int) -> tuple[int, int, int, int, int]:
    """A record's fields up to its key, read again by the second pass (:func:`fill_records`,
    :func:`_hash_batch`): ``(record end, timestamp delta, offset delta, key length, key's first byte)``. The
    last is negative when they are no longer what the scan accepted (mapped bytes that changed in between): a
    record past the bytes, a varint that does not end in its record, a key longer than what is left of it."""
    length, p = _varint(buf, pos, buf.shape[0], _VARINT32_MAX)
    rec_end = p + length
    if p < 0 or length < 1 or rec_end > buf.shape[0]:
        return 0, 0, 0, 0, -1
    ts_delta, p = _varint(buf, p + 1, rec_end, _VARINT64_MAX)  # (after the attributes, unused in v2 records)
    if p < 0:
        return 0, 0, 0, 0, -1
    off_delta, p = _varint(buf, p, rec_end, _VARINT32_MAX)
    if p < 0:
        return 0, 0, 0, 0, -1
    klen, p = _varint(buf, p, rec_end, _VARINT32_MAX)
    if p < 0 or klen > rec_end - p:
        return 0, 0, 0, 0, -1
    return rec_end, ts_delta, off_delta, klen, p


@njit(cache=True, inline="always")
def _batch_start(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, base_offset: np.ndarray,
                 base_ts: np.ndarray, max_ts: np.ndarray, log_append: np.ndarray,
                 b: int) -> tuple[np.ndarray, int, int, int, int, bool]:
    """What the second pass needs of batch ``b`` before its first record: the buffer its records are in, where
    they start, its base offset, and how its records' timestamps read (base timestamp, max timestamp, whether
    they are log-append time: then every record has the max)."""
    return (seg if src[b] == 0 else dec), rstart[b], base_offset[b], base_ts[b], max_ts[b], log_append[b]


@njit(cache=True, inline="always")
def _put_binary(data: np.ndarray, at: int, valid: np.ndarray, offsets: np.ndarray, r: int, buf: np.ndarray, p: int,
                n: int) -> int:
    """Row ``r`` of a nullable binary column (``data``, ``valid``, ``offsets``) written from byte ``at`` of
    ``data``: the ``n`` bytes at ``buf[p]``, or null where ``n`` is -1. Returns where the column goes on, or -1
    where they do not fit in what is left of ``data`` (nothing written: the bytes changed since the scan sized
    it)."""
    if n >= 0:
        if n > data.shape[0] - at:
            return -1
        _copy(data, at, buf, p, n)
        at += n
        valid[r] = True
    else:
        valid[r] = False
    offsets[r + 1] = at
    return at


@njit(cache=True)
def _fill_batch(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, counts: np.ndarray,
                base_offset: np.ndarray, last_delta: np.ndarray, base_ts: np.ndarray, max_ts: np.ndarray,
                log_append: np.ndarray, want_keys: bool, want_values: bool, want_headers: bool, value_refs: bool,
                offsets: np.ndarray, timestamps: np.ndarray,
                k_offs: np.ndarray, k_data: np.ndarray, k_valid: np.ndarray,
                v_offs: np.ndarray, v_data: np.ndarray, v_valid: np.ndarray, v_refs: np.ndarray,
                h_offs: np.ndarray, hk_offs: np.ndarray, hk_data: np.ndarray,
                hv_offs: np.ndarray, hv_data: np.ndarray, hv_valid: np.ndarray, err: np.ndarray, b: int,
                r: int, ko: int, vo: int, h: int, hko: int, hvo: int) -> tuple[bool, int, int, int, int, int, int]:
    """:func:`fill_records` of batch ``b``, its rows written from row ``r`` on and its binary columns' bytes
    from ``ko``, ``vo``, header ``h``, ``hko`` and ``hvo`` on: ``(True, and each of those past the batch)``, else
    ``(False, ...)`` and ``err``."""
    buf, pos, bo, bts, mts, append_time = _batch_start(seg, dec, src, rstart, base_offset, base_ts, max_ts,
                                                       log_append, b)
    previous = -1
    for i in range(counts[b]):
        rec_end, ts_delta, off_delta, klen, p = _record_head(buf, pos)
        if p < 0 or _out_of_order(off_delta, previous, last_delta[b]):
            return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
        previous = off_delta
        offsets[r] = bo + off_delta
        timestamps[r] = mts if append_time else bts + ts_delta
        if want_keys:
            ko = _put_binary(k_data, ko, k_valid, k_offs, r, buf, p, klen)
            if ko < 0:
                return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
        if klen > 0:
            p += klen
        vpos = p
        vlen, p = _varint(buf, p, rec_end, _VARINT32_MAX)
        if p < 0 or vlen > rec_end - p:
            return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
        if value_refs:
            ref = vpos if src[b] == 0 else vpos - rstart[b]
            if 0 <= vlen <= REF_MAX_LENGTH and ref <= REF_POSITION_MASK:
                # the length, for the encoder (VALUE_REF_TYPE)
                ref |= REF_CARRIES_LENGTH | (vlen + 1) << REF_POSITION_BITS
            v_refs[r] = ref
            v_valid[r] = vlen >= 0
        elif want_values:
            vo = _put_binary(v_data, vo, v_valid, v_offs, r, buf, p, vlen)
            if vo < 0:
                return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
        if want_headers:
            hcount, p2 = _varint(buf, p + (vlen if vlen > 0 else 0), rec_end, _VARINT32_MAX)
            if p2 < 0 or hcount < 0 or hcount > hv_valid.shape[0] - h:
                return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
            q = p2
            for _ in range(hcount):
                hk, q = _varint(buf, q, rec_end, _VARINT32_MAX)
                if q < 0 or hk < 0 or hk > rec_end - q or hk > hk_data.shape[0] - hko:
                    return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
                _copy(hk_data, hko, buf, q, hk)
                hko += hk
                q += hk
                hk_offs[h + 1] = hko
                hv, q = _varint(buf, q, rec_end, _VARINT32_MAX)
                if q < 0 or hv > rec_end - q or hv > hv_data.shape[0] - hvo:
                    return _fail(err, ERR_CHANGED, b, pos, i, 0), r, ko, vo, h, hko, hvo
                if hv >= 0:
                    _copy(hv_data, hvo, buf, q, hv)
                    hvo += hv
                    q += hv
                    hv_valid[h] = True
                else:
                    hv_valid[h] = False
                hv_offs[h + 1] = hvo
                h += 1
            h_offs[r + 1] = h
        pos = rec_end
        r += 1
    return True, r, ko, vo, h, hko, hvo


@njit(cache=True)
def fill_records(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, counts: np.ndarray,
                 base_offset: np.ndarray, last_delta: np.ndarray, base_ts: np.ndarray, max_ts: np.ndarray,
                 log_append: np.ndarray, want_keys: bool, want_values: bool, want_headers: bool, value_refs: bool,
                 offsets: np.ndarray, timestamps: np.ndarray,
                 k_offs: np.ndarray, k_data: np.ndarray, k_valid: np.ndarray,
                 v_offs: np.ndarray, v_data: np.ndarray, v_valid: np.ndarray, v_refs: np.ndarray,
                 h_offs: np.ndarray, hk_offs: np.ndarray, hk_data: np.ndarray,
                 hv_offs: np.ndarray, hv_data: np.ndarray, hv_valid: np.ndarray, err: np.ndarray) -> bool:
    """Second pass over bytes :func:`scan_records` accepted: writes per-record columns into the given
    buffers (binary columns as int32 offsets + data + validity bytes). Columns not wanted are skipped.

    The buffers are sized from what the scan found. Bytes that are memory-mapped can change between the two
    passes (another process writing the file), so every length read again is checked against what is left of
    its buffer and of the bytes before anything is copied, and every offset against its batch's order
    (:func:`_out_of_order`, ``last_delta``), as the scan checked them: False (and ``err``, :data:`ERR_CHANGED`) at
    the first record that is no longer what the scan accepted, nothing written past any buffer.

    With ``value_refs`` values are not copied: ``v_refs[r]`` is where record ``r``'s value length varint
    lies, in the segment for an uncompressed batch, else in the batch's decompressed payload (counted from
    the payload's first byte), with the value's length (:data:`segment_io.schema.VALUE_REF_TYPE`), and
    ``v_valid[r]`` says whether the value is non-null."""
    _start_offsets(want_keys, want_values, want_headers, k_offs, v_offs, h_offs, hk_offs, hv_offs)
    r = ko = vo = h = hko = hvo = 0
    for b in range(rstart.shape[0]):
        ok, r, ko, vo, h, hko, hvo = _fill_batch(
            seg, dec, src, rstart, counts, base_offset, last_delta, base_ts, max_ts, log_append, want_keys,
            want_values, want_headers, value_refs, offsets, timestamps, k_offs, k_data, k_valid, v_offs, v_data,
            v_valid, v_refs, h_offs, hk_offs, hk_data, hv_offs, hv_data, hv_valid, err, b, r, ko, vo, h, hko, hvo)
        if not ok:
            return False
    return True


@njit(cache=True, inline="always")
def _start_offsets(want_keys: bool, want_values: bool, want_headers: bool, k_offs: np.ndarray, v_offs: np.ndarray,
                   h_offs: np.ndarray, hk_offs: np.ndarray, hv_offs: np.ndarray) -> None:
    if want_keys:
        k_offs[0] = 0
    if want_values:
        v_offs[0] = 0
    if want_headers:
        h_offs[0] = 0
        hk_offs[0] = 0
        hv_offs[0] = 0


#: Slots of the ``at`` array :func:`scan_fill_records` fills: how much of each output it wrote (rows; key bytes;
#: value bytes; headers; header key bytes; header value bytes).
AT_ROWS, AT_KEY_BYTES, AT_VALUE_BYTES, AT_HEADERS, AT_HKEY_BYTES, AT_HVALUE_BYTES = range(6)


@njit(cache=True)
def _grown(a: np.ndarray, used: int, size: int) -> np.ndarray:
    """A buffer of ``size`` entries holding the first ``used`` of ``a``."""
    out = np.empty(size, a.dtype)
    out[:used] = a[:used]
    return out


@njit(cache=True, inline="always")
def _room_for(need: int, capacity: int, done: int, room: int, most: int) -> int:
    """The size a buffer that must hold ``need`` entries grows to: what the batches so far (``done`` of the run's
    ``room`` bytes) need per byte, for the whole run; at least double, at most ``most``, never less than
    ``need``."""
    per_byte = need * room // max(done, 1)
    return max(need, min(max(2 * capacity, per_byte), most))


@njit(cache=True)
def scan_fill_records(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, rend: np.ndarray,
                      counts: np.ndarray, base_offset: np.ndarray, last_delta: np.ndarray, base_ts: np.ndarray,
                      max_ts: np.ndarray, log_append: np.ndarray, crc_start: np.ndarray, crcs: np.ndarray,
                      long_shift: np.ndarray, short_shift: np.ndarray,
                      want_keys: bool, want_values: bool, want_headers: bool, value_refs: bool,
                      offsets: np.ndarray, timestamps: np.ndarray,
                      k_offs: np.ndarray, k_data: np.ndarray, k_valid: np.ndarray,
                      v_offs: np.ndarray, v_data: np.ndarray, v_valid: np.ndarray, v_refs: np.ndarray,
                      h_offs: np.ndarray, hk_offs: np.ndarray, hk_data: np.ndarray,
                      hv_offs: np.ndarray, hv_data: np.ndarray, hv_valid: np.ndarray,
                      room: int, at: np.ndarray, err: np.ndarray
                      ) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                 np.ndarray]:
    """:func:`scan_records` and :func:`fill_records` batch by batch: each batch's CRC, scan and fill while its bytes
    are in the cache (the two passes over a whole run fetch every record from memory twice, one dependent load
    after the other). ``room``: the run's record bytes (``rend - rstart`` summed), which int32 offsets address.

    The record columns (``offsets`` ...) must have a row for every record the batches hold. The buffers of the
    binary columns may be short: before a batch is filled, its scan's sums are checked against what is left of each,
    and one that is short grows (:func:`_room_for`; at most ``room``, header counts at most half of it). Returns
    ``(ok, k_data, v_data, hk_offs, hk_data, hv_offs, hv_data, hv_valid)``, the buffers as they are at the end, and
    fills ``at`` with how much of each output was written; ``ok`` is False (and ``err``) on the scan's first
    problem, :data:`ERR_CHANGED` from a fill (the bytes changed between the batch's scan and its fill), or
    :data:`ERR_ROWS_SHORT`."""
    _start_offsets(want_keys, want_values, want_headers, k_offs, v_offs, h_offs, hk_offs, hv_offs)
    sums = np.zeros(6, np.int64)
    r = ko = vo = h = hko = hvo = done = 0
    ok = True
    for b in range(rstart.shape[0]):
        if not _batch_crc_ok(seg, crc_start, rend, crcs, long_shift, short_shift, b, err):
            ok = False
            break
        sums[:] = 0
        if not _scan_batch(seg, dec, src, rstart, rend, counts, last_delta, b, sums, err):
            ok = False
            break
        done += rend[b] - rstart[b]
        if r + sums[TOT_RECORDS] > offsets.shape[0]:
            ok = _fail(err, ERR_ROWS_SHORT, b, rstart[b], 0, r + sums[TOT_RECORDS])
            break
        if want_keys and ko + sums[TOT_KEY_BYTES] > k_data.shape[0]:
            k_data = _grown(k_data, ko, _room_for(ko + sums[TOT_KEY_BYTES], k_data.shape[0], done, room, room))
        if want_values and vo + sums[TOT_VALUE_BYTES] > v_data.shape[0]:
            v_data = _grown(v_data, vo, _room_for(vo + sums[TOT_VALUE_BYTES], v_data.shape[0], done, room, room))
        if want_headers and h + sums[TOT_HEADERS] > hv_valid.shape[0]:
            size = _room_for(h + sums[TOT_HEADERS], hv_valid.shape[0], done, room, room // 2)
            hv_valid = _grown(hv_valid, h, size)
            hk_offs = _grown(hk_offs, h + 1, size + 1)
            hv_offs = _grown(hv_offs, h + 1, size + 1)
        if want_headers and hko + sums[TOT_HKEY_BYTES] > hk_data.shape[0]:
            hk_data = _grown(hk_data, hko, _room_for(hko + sums[TOT_HKEY_BYTES], hk_data.shape[0], done, room, room))
        if want_headers and hvo + sums[TOT_HVALUE_BYTES] > hv_data.shape[0]:
            hv_data = _grown(hv_data, hvo,
                             _room_for(hvo + sums[TOT_HVALUE_BYTES], hv_data.shape[0], done, room, room))
        ok, r, ko, vo, h, hko, hvo = _fill_batch(
            seg, dec, src, rstart, counts, base_offset, last_delta, base_ts, max_ts, log_append, want_keys,
            want_values, want_headers, value_refs, offsets, timestamps, k_offs, k_data, k_valid, v_offs, v_data,
            v_valid, v_refs, h_offs, hk_offs, hk_data, hv_offs, hv_data, hv_valid, err, b, r, ko, vo, h, hko, hvo)
        if not ok:
            break
    at[AT_ROWS], at[AT_KEY_BYTES], at[AT_VALUE_BYTES] = r, ko, vo
    at[AT_HEADERS], at[AT_HKEY_BYTES], at[AT_HVALUE_BYTES] = h, hko, hvo
    return ok, k_data, v_data, hk_offs, hk_data, hv_offs, hv_data, hv_valid


@njit(cache=True)
def _hash_batch(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, counts: np.ndarray,
                base_offset: np.ndarray, last_delta: np.ndarray, base_ts: np.ndarray, max_ts: np.ndarray,
                log_append: np.ndarray, control: np.ndarray, offsets: np.ndarray, timestamps: np.ndarray,
                key_hi: np.ndarray, key_lo: np.ndarray, key_null: np.ndarray, value_null: np.ndarray,
                control_type: np.ndarray, err: np.ndarray, b: int, r: int) -> tuple[bool, int]:
    """The first compaction pass's columns of batch ``b``, which :func:`_scan_batch` accepted: offsets,
    timestamps, key hashes, null flags and control types, without copying keys or values, its rows written from row
    ``r`` on: ``(True, the row after them)``. ``(False, ...)`` and ``err`` when a control record's key is not a
    control key (:func:`control_key_type`), or when a record is no longer what the scan accepted (see
    :func:`fill_records`)."""
    buf, pos, bo, bts, mts, append_time = _batch_start(seg, dec, src, rstart, base_offset, base_ts, max_ts,
                                                       log_append, b)
    is_control = control[b]
    previous = -1
    for i in range(counts[b]):
        rec_end, ts_delta, off_delta, klen, p = _record_head(buf, pos)
        if p < 0 or _out_of_order(off_delta, previous, last_delta[b]):
            return _fail(err, ERR_CHANGED, b, pos, i, 0), r
        previous = off_delta
        offsets[r] = bo + off_delta
        timestamps[r] = mts if append_time else bts + ts_delta
        if klen >= 0:
            hi, lo = murmur3_128(buf, p, klen)
            key_hi[r] = hi
            key_lo[r] = lo
            key_null[r] = False
        else:
            key_hi[r] = 0
            key_lo[r] = 0
            key_null[r] = True
        if is_control:
            ctype = control_key_type(buf, p, klen)
            if ctype == CONTROL_KEY_SHORT:
                return _fail(err, ERR_CONTROL_KEY, b, pos, i, klen), r
            if ctype == CONTROL_KEY_NEGATIVE_VERSION:
                return _fail(err, ERR_CONTROL_VERSION, b, pos, i, _int16(buf, p)), r
            control_type[r] = np.int16(ctype)
        else:
            control_type[r] = -1
        if klen > 0:
            p += klen
        vlen, p = _varint(buf, p, rec_end, _VARINT32_MAX)
        value_null[r] = vlen < 0
        pos = rec_end
        r += 1
    return True, r


@njit(cache=True)
def scan_hash_records(seg: np.ndarray, dec: np.ndarray, src: np.ndarray, rstart: np.ndarray, rend: np.ndarray,
                      counts: np.ndarray, base_offset: np.ndarray, last_delta: np.ndarray, base_ts: np.ndarray,
                      max_ts: np.ndarray, log_append: np.ndarray, control: np.ndarray, crc_start: np.ndarray,
                      crcs: np.ndarray, long_shift: np.ndarray, short_shift: np.ndarray, offsets: np.ndarray,
                      timestamps: np.ndarray, key_hi: np.ndarray, key_lo: np.ndarray, key_null: np.ndarray,
                      value_null: np.ndarray, control_type: np.ndarray, err: np.ndarray) -> int:
    """:func:`scan_records` and :func:`_hash_batch` batch by batch, as :func:`scan_fill_records` does them: every
    column has one entry a record, so the caller sizes them for the records the batches declare (as far as
    their bytes hold them) and nothing grows. The rows written, else -1 (and ``err``, :data:`ERR_ROWS_SHORT` among
    its codes)."""
    sums = np.zeros(6, np.int64)
    r = 0
    for b in range(rstart.shape[0]):
        if not _batch_crc_ok(seg, crc_start, rend, crcs, long_shift, short_shift, b, err):
            return -1
        sums[:] = 0
        if not _scan_batch(seg, dec, src, rstart, rend, counts, last_delta, b, sums, err):
            return -1
        if r + sums[TOT_RECORDS] > offsets.shape[0]:
            _fail(err, ERR_ROWS_SHORT, b, rstart[b], 0, r + sums[TOT_RECORDS])
            return -1
        ok, r = _hash_batch(seg, dec, src, rstart, counts, base_offset, last_delta, base_ts, max_ts, log_append,
                            control, offsets, timestamps, key_hi, key_lo, key_null, value_null, control_type, err,
                            b, r)
        if not ok:
            return -1
    return r


# --------------------------------------------------------------------------------------------------
# Sizes of compressed payloads, from their frame headers (for segment_io.compression, which documents the
# framings; the layout constants come from there)
# --------------------------------------------------------------------------------------------------

# These walk every compressed batch of a segment before it is decompressed, so they are compiled: a few
# microseconds of Python per batch would be a measurable share of decoding small batches. They never fail: a
# frame they cannot follow just says less (the decompressor then reports the damage).

_XERIAL_MAGIC = np.frombuffer(XERIAL_MAGIC, dtype=np.uint8)
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
def _zstd_frame(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """The zstd frame at ``pos``: ``(position after it, at least, at most)``, at most -1 if it cannot be
    followed. A declared Frame_Content_Size counts as the frame's size (the decoder fails a frame that does
    not match it); otherwise raw and RLE blocks count their exact size and compressed blocks at most the block
    maximum, min(window, 128 KiB)."""
    if _le(buf, pos, 4) != ZSTD_MAGIC:
        return pos, 0, -1
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
        return pos, 0, -1
    fcs = -1
    if fcs_len > 0:
        fcs = _le(buf, p, fcs_len) + (256 if fcs_len == 2 else 0)
    p += fcs_len
    block_max = min(fcs if single else window, ZSTD_MAX_BLOCK)
    exact = 0
    bound = 0
    while True:
        if p + 3 > end:
            return pos, fcs if fcs >= 0 else exact, -1
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
            return pos, fcs if fcs >= 0 else exact, -1
        if h & 1:  # last block
            break
    p += 4 if fhd & 0x04 else 0  # content checksum
    if fcs >= 0:
        return p, fcs, fcs
    return p, exact, exact + bound


@njit(cache=True)
def _lz4_frame(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """The LZ4 frame at ``pos``, as :func:`_zstd_frame`. A declared content size counts as the frame's size (what
    the blocks then inflate to is not held to it: a frame that declares less is decompressed again, bigger, up to
    the bound); otherwise stored blocks count their exact size and compressed blocks at most the descriptor's block
    maximum."""
    flg = np.int64(buf[pos + 4])
    size_code = (np.int64(buf[pos + 5]) >> 4) & 7
    if _le(buf, pos, 4) != LZ4_MAGIC or size_code < 4:
        return pos, 0, -1
    block_max = np.int64(1) << (8 + 2 * size_code)  # 4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB
    p = pos + 6
    content = -1
    if flg & 0x08:
        if p + 8 > end:
            return pos, 0, -1
        content = _le(buf, p, 8)
        p += 8
    p += (4 if flg & 0x01 else 0) + 1  # dictionary id, header checksum
    block_checksum = 4 if flg & 0x10 else 0
    exact = 0
    bound = 0
    while True:
        if p + 4 > end:
            return pos, content if content >= 0 else exact, -1
        size = _le(buf, p, 4)
        p += 4
        if size == 0:  # end mark
            break
        if size & LZ4_RAW_BLOCK:
            size &= LZ4_RAW_BLOCK - 1
            exact += size
        else:
            bound += block_max
        p += size + block_checksum
    p += 4 if flg & 0x04 else 0  # content checksum
    if content >= 0:
        return p, content, content
    return p, exact, exact + bound


@njit(cache=True)
def _frames(buf: np.ndarray, pos: int, end: int, codec: int) -> tuple[int, int]:
    """zstd or LZ4 frames one after another, skippable frames (which both formats define alike) between them:
    ``(at least, at most)``, at most -1 if one cannot be followed."""
    lo = 0
    hi = 0
    while pos < end:
        if end - pos < 8 or lo >= _HUGE:
            return lo, -1
        if _le(buf, pos, 4) & SKIPPABLE_MASK == SKIPPABLE_MAGIC:
            pos += 8 + _le(buf, pos + 4, 4)
            continue
        if codec == ZSTD:
            pos, frame_lo, frame_hi = _zstd_frame(buf, pos, end)
        else:
            pos, frame_lo, frame_hi = _lz4_frame(buf, pos, end)
        lo += frame_lo
        if frame_hi < 0:
            return lo, -1
        hi += frame_hi
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
        if xerial and buf[pos + k] != _XERIAL_MAGIC[k]:
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
    nothing is known (see :func:`segment_io.compression.plan_payloads`)."""
    if codec == ZSTD or codec == LZ4:
        return _frames(buf, pos, end, codec)
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
        guess = max(at_least, RATIO_GUESS * compressed, MIN_GUESS)
    return min(guess, limit + 1)


@njit(cache=True)
def lz4_frame_blocks(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, codecs: np.ndarray, first: np.ndarray,
                     count: np.ndarray, block_max: np.ndarray, block_start: np.ndarray, block_size: np.ndarray) -> int:
    """The blocks of each payload ``buf[starts[i]:ends[i]]`` that is one LZ4 frame as Kafka's producers write it
    (independent blocks, no checksums, no dictionary, a content size or none) whose end mark ends the payload:
    ``count[i]`` blocks from ``first[i]`` on in ``block_start`` and ``block_size`` (the size field as written: its
    high bit marks a block stored raw), ``block_max[i]`` the frame's block maximum. Any other payload (another
    codec or framing, several frames, a block or end mark cut short) gets ``count[i] = 0``: the decompressor's own
    frame walk then reads it and says what is wrong. Returns the number of blocks; when the block arrays are
    shorter, they are filled that far (call again with room)."""
    n = 0
    room = block_start.shape[0]
    for i in range(starts.shape[0]):
        first[i] = n
        count[i] = 0
        pos = starts[i]
        end = ends[i]
        if codecs[i] != LZ4 or end - pos < 11 or _le(buf, pos, 4) != LZ4_MAGIC:
            continue
        flg = np.int64(buf[pos + 4])
        size_code = (np.int64(buf[pos + 5]) >> 4) & 7
        if flg & ~0x08 != 0x60 or size_code < 4:
            continue
        p = pos + 7 + (8 if flg & 0x08 else 0)
        k = n
        whole = False
        while p + 4 <= end:
            size = _le(buf, p, 4)
            p += 4
            if size == 0:
                whole = p == end
                break
            stored = size & (LZ4_RAW_BLOCK - 1)
            if p + stored > end:
                break
            if k < room:
                block_start[k] = p
                block_size[k] = size
            k += 1
            p += stored
        if whole:
            count[i] = k - n
            block_max[i] = np.int64(1) << (8 + 2 * size_code)
            n = k
    return n


@njit(cache=True)
def plan_payloads(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, codecs: np.ndarray, limits: np.ndarray,
                  at_least: np.ndarray, capacity: np.ndarray) -> None:
    """Fills ``at_least`` and ``capacity`` for each payload ``buf[starts[i]:ends[i]]``."""
    for i in range(starts.shape[0]):
        lo, guess = _frame_size(buf, starts[i], ends[i], codecs[i])
        at_least[i] = lo
        capacity[i] = _first_capacity(lo, guess, ends[i] - starts[i], limits[i])


@njit(cache=True)
def plan_payload(buf: np.ndarray, codec: int, limit: int) -> tuple[int, int]:
    """``(at_least, capacity)`` of one payload, all of ``buf``."""
    lo, guess = _frame_size(buf, 0, buf.shape[0], codec)
    return lo, _first_capacity(lo, guess, buf.shape[0], limit)


# --------------------------------------------------------------------------------------------------
# The framing walk (segment_io.format.batch_positions)
# --------------------------------------------------------------------------------------------------

#: Why :func:`walk_batches` stopped: the end of the buffer, its output arrays full, an incomplete last batch, an
#: unknown magic byte, an impossible size field.
WALK_END, WALK_FULL, WALK_SHORT, WALK_BAD_MAGIC, WALK_BAD_SIZE = range(5)
_PREFIX_BYTES = LOG_OVERHEAD + 5  # offset, size, leader epoch (legacy: crc), magic
_MIN_SIZE_V2 = V2_HEADER_SIZE - LOG_OVERHEAD
_MIN_SIZE_V0 = LEGACY_MIN_SIZE[0]
_MIN_SIZE_V1 = LEGACY_MIN_SIZE[1]
assert LEGACY_MAGIC == V2_MAGIC


@njit(cache=True, nogil=True)
def walk_batches(buf: np.ndarray, pos: int, positions: np.ndarray, magics: np.ndarray,
                 state: np.ndarray) -> int:
    """The start and magic of every whole batch from byte ``pos`` of ``buf``, written into ``positions`` and
    ``magics`` until they are full; returns how many. ``state[0]`` gets the position where the walk stopped and
    ``state[1]`` why (``WALK_*``): at a problem, the position is that batch's start. Batch starts form a chain,
    each following from the previous size field, so the walk touches one header per batch and nothing else."""
    n = len(buf)
    count = 0
    code = WALK_END
    while pos < n:
        if n - pos < _PREFIX_BYTES:
            code = WALK_SHORT
            break
        magic = np.int64(buf[pos + V2_MAGIC])  # where legacy messages keep theirs too
        if magic > 2:  # also every negative magic, read here unsigned
            code = WALK_BAD_MAGIC
            break
        size = ((np.int64(buf[pos + SIZE_OFFSET]) << 24) | (np.int64(buf[pos + SIZE_OFFSET + 1]) << 16)
                | (np.int64(buf[pos + SIZE_OFFSET + 2]) << 8) | np.int64(buf[pos + SIZE_OFFSET + 3]))
        if size >= 2147483648:
            size -= 4294967296
        min_size = _MIN_SIZE_V2 if magic == 2 else (_MIN_SIZE_V1 if magic == 1 else _MIN_SIZE_V0)
        if size < min_size or size > MAX_BATCH_SIZE:
            code = WALK_BAD_SIZE
            break
        if pos + LOG_OVERHEAD + size > n:
            code = WALK_SHORT
            break
        if count == len(positions):
            code = WALK_FULL
            break
        positions[count] = pos
        magics[count] = magic
        count += 1
        pos += LOG_OVERHEAD + size
    state[0] = pos
    state[1] = code
    return count
