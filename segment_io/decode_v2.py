"""RecordBatch v2 decoding: the records of v2 batches, decoded by the numba kernels of
:mod:`segment_io._decode_kernels`, which write straight into numpy buffers that become Arrow arrays without a
Python object per record; the per-batch Python work is limited to CRC checks and decompressing compressed
payloads (in bounded pieces and runs, see :func:`_v2_pieces`).

Every failure raises a subclass of :class:`~segment_io.errors.CorruptRecordError` naming the file, the byte
position of the failing batch and its base offset.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from segment_io import _decode_kernels as K
from segment_io import compression, crc
from segment_io._crc_kernels import LONG_SHIFT, SHORT_SHIFT
from segment_io.decode_input import CHUNK_BYTES, HEADERS_TYPE, SegmentBytes
from segment_io.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidLengthError,
    InvalidVarintError,
    OffsetOrderError,
    OversizedBatchError,
    RecordCountMismatchError,
    UnsupportedCodecError,
)
from segment_io.format import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    V2_CRC_START,
    V2_HEADER_SIZE,
    BatchHeaders,
)
from segment_io.schema import HEADER_TYPE, KEY_HASH_SCHEMA, RECORD_SCHEMA, VALUE_REF_TYPE, arrow_array

_INT32_MAX = 2**31 - 1
#: the decompressed payloads of one piece of v2 batches (beyond its first batch) are capped at the chunk size
_PAYLOAD_BYTES = CHUNK_BYTES
#: a piece's payloads are kept in the buffer they were decompressed into while it is at most this much larger than
#: they are, else in a copy of just them (see _offer_payloads)
_TIGHT_ENOUGH = 1.5
_RECORD_TYPES = {f.name: f.type for f in RECORD_SCHEMA}
_KEY_HASH_TYPES = {f.name: f.type for f in KEY_HASH_SCHEMA}


@dataclass
class _V2Input:
    """Where the records of a run of v2 batches lie, ready for the kernels."""

    batches: np.ndarray  # int64 indices into hdr of the batches decoded (control batches may be left out)
    dec: np.ndarray  # uint8, decompressed payloads one after another
    src: np.ndarray  # uint8 per batch: 0 records in the segment, 1 in ``dec``
    rstart: np.ndarray  # int64
    rend: np.ndarray  # int64
    counts: np.ndarray  # int64, declared record counts
    crcs: np.ndarray  # int64 per batch: the stored CRC-32C the scan checks (-1: checked before, or not at all)


def check_v2_crcs(seg: SegmentBytes, batches: np.ndarray) -> None:
    """Raise for the first of ``batches`` whose CRC-32C is not the one its header stores (all in one call)."""
    starts, ends = _crc_spans(seg, batches)
    bad = crc.first_mismatch(seg.arr, starts, ends, seg.hdr.crc[batches])
    if bad >= 0:
        raise crc_mismatch(seg, int(batches[bad]), crc.span_crc(seg.arr, int(starts[bad]), int(ends[bad])))


def v2_crcs(seg: SegmentBytes, batches: np.ndarray) -> np.ndarray:
    """The CRC-32C of each of ``batches`` (v2) as computed from its bytes, in one call."""
    return crc.span_crcs(seg.arr, *_crc_spans(seg, batches))


def _crc_spans(seg: SegmentBytes, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the bytes each of ``batches``' CRC-32C covers start and end: from its attributes to its end."""
    position = seg.hdr.position[batches]
    return position + V2_CRC_START, position + seg.hdr.size[batches]


def crc_mismatch(seg: SegmentBytes, b: int, actual: int) -> CorruptRecordError:
    """The error of v2 batch ``b``, whose bytes give the CRC-32C ``actual`` instead of the stored one."""
    return seg.error(CrcMismatchError, f"CRC-32C mismatch: stored {int(seg.hdr.crc[b]):#010x}, "
                                       f"computed {actual:#010x}", b)


def _v2_batches(seg: SegmentBytes, batches: np.ndarray) -> np.ndarray:
    """``batches`` less control batches when the segment leaves them out, with the CRCs checked (when the
    segment asks for it) of those the scan will not check as it walks their records (:func:`_scan_crcs`)."""
    left_out = None if seg.include_control else (seg.hdr.attributes[batches] & ATTR_CONTROL) != 0
    included = batches if left_out is None else batches[~left_out]
    if seg.verify_crc:
        before = _scan_crcs(seg, batches) < 0  # (a batch's CRC is the scan's by its codec alone)
        if left_out is not None:
            before |= left_out
        if before.any():
            check_v2_crcs(seg, batches[before])
    return included


def _scan_crcs(seg: SegmentBytes, batches: np.ndarray) -> np.ndarray:
    """The stored CRC-32C of each of ``batches`` that the scan checks just before walking its records, -1 for the
    others: the uncompressed ones, when the segment asks for CRCs and the processor has the CRC32 instruction
    (:func:`segment_io._decode_kernels.scan_records`). A compressed batch's CRC covers bytes that are
    decompressed before the scan, so it is checked before that, with every batch's where the scan checks none."""
    if not (seg.verify_crc and crc.crc_instruction()):
        return np.full(len(batches), -1, np.int64)
    codecs = seg.hdr.attributes[batches] & ATTR_CODEC_MASK
    return np.where(codecs == 0, seg.hdr.crc[batches].astype(np.int64), -1)


@contextmanager
def _crc_errors_first(seg: SegmentBytes, batches: np.ndarray) -> Iterator[None]:
    """Report a batch whose CRC does not match in place of any other problem met in ``batches``, as when every
    CRC was checked before any record was read: the scan checks uncompressed batches' CRCs as it goes, so a
    problem in an earlier batch (or a payload that does not decompress) can be met before a later batch's CRC
    was checked. Error paths only: the CRCs are checked again, all of them."""
    try:
        yield
    except CorruptRecordError:
        if seg.verify_crc:
            check_v2_crcs(seg, batches)
        raise


def _inflate_error(seg: SegmentBytes, exc: CorruptRecordError, b: int, limit: int) -> CorruptRecordError:
    """``exc`` located at batch ``b``; past a bound that the batch's record count set (an empty batch inflates
    to nothing) rather than the configured one, it is the record count that is wrong."""
    if isinstance(exc, OversizedBatchError) and limit < seg.max_batch_bytes:
        count = int(seg.hdr.record_count[b])
        return seg.error(RecordCountMismatchError, f"batch declares {count} records, which cannot inflate past "
                                                   f"{limit} bytes, but its compressed payload does", b)
    return seg.error(type(exc), exc.detail, b)


def _first_bad_batch(seg: SegmentBytes, batches: np.ndarray, codecs: np.ndarray, counts: np.ndarray,
                     at_least: np.ndarray, limits: np.ndarray) -> tuple[int, CorruptRecordError | None]:
    """Index (into ``batches``) of the first compressed batch that fails before decompressing, and its error:
    an unknown codec, a negative record count, or frames that declare more than the batch's bound."""
    bad = (codecs > compression.ZSTD) | (counts < 0) | (at_least > limits)
    if not bad.any():
        return len(batches), None
    j = int(np.argmax(bad))
    b, codec, count, limit = int(batches[j]), int(codecs[j]), int(counts[j]), int(limits[j])
    if codec > compression.ZSTD:
        return j, seg.error(UnsupportedCodecError, f"unknown compression codec {codec} in attributes", b)
    if count < 0:  # what the record kernel would say, before anything is decompressed for it
        cls, template = _KERNEL_ERRORS[K.ERR_COUNT_NEGATIVE]
        return j, seg.error(cls, template.format(value=count), b)
    exc = OversizedBatchError(compression.oversized_detail(codec, limit, int(at_least[j])))
    return j, _inflate_error(seg, exc, b, limit)


@dataclass
class _V2Plan:
    """Where the records of ``batches`` lie before any decompression, and what each compressed payload may
    inflate to: worked out once for all of ``batches``, then cut into bounded pieces by :func:`_v2_pieces`."""

    batches: np.ndarray
    rstart: np.ndarray  # records start / end in the segment, per batch
    rend: np.ndarray
    counts: np.ndarray
    which: np.ndarray  # indices (into batches) of the compressed batches; the arrays below follow them
    c_codecs: np.ndarray
    c_start: np.ndarray
    c_end: np.ndarray
    limits: np.ndarray
    capacities: np.ndarray
    cum_capacity: np.ndarray
    crcs: np.ndarray  # per batch, as _V2Input.crcs
    first_bad: int  # index (into which) of the first compressed batch that fails before decompressing
    error: CorruptRecordError | None


def _plan_v2(seg: SegmentBytes, batches: np.ndarray) -> _V2Plan:
    hdr = seg.hdr
    rstart = hdr.position[batches] + V2_HEADER_SIZE
    rend = hdr.position[batches] + hdr.size[batches].astype(np.int64)
    counts = hdr.record_count[batches].astype(np.int64)
    codecs = hdr.attributes[batches] & ATTR_CODEC_MASK  # v2 batches only: BatchHeaders.codec without the legacy case
    which = np.flatnonzero(codecs)
    if len(which) == 0:  # nothing compressed (common for small partitions): nothing to plan or bound
        none = np.zeros(0, np.int64)
        return _V2Plan(batches, rstart, rend, counts, which, none, none, none, none, none, none,
                       _scan_crcs(seg, batches), 0, None)
    c_codecs, c_counts = codecs[which].astype(np.int64), counts[which]
    c_start, c_end = rstart[which], rend[which]
    limits = compression.batch_limit(c_counts, seg.max_batch_bytes)
    at_least, capacities = compression.plan_payloads(seg.arr, c_start, c_end, c_codecs, limits)
    first_bad, error = _first_bad_batch(seg, batches[which], c_codecs, c_counts, at_least, limits)
    return _V2Plan(batches, rstart, rend, counts, which, c_codecs, c_start, c_end, limits, capacities,
                   np.cumsum(capacities), _scan_crcs(seg, batches), first_bad, error)


def _extent(plan: _V2Plan, start: int, budget: int, stop: int) -> tuple[int, int, int]:
    """Where the stretch of ``plan``'s batches from ``start`` on ends, its payloads passing ``budget`` bytes (at
    least one batch), never past batch ``stop``: ``(k0, k1, end)``, its compressed batches ``which[k0:k1]`` and
    its batches ``[start, end)``. Raises the error of the first batch that fails before decompressing when the
    stretch would begin with it; a stretch ends before that batch, whose problem comes after those before it."""
    k0 = int(np.searchsorted(plan.which, start))  # the first compressed batch of the stretch
    k_stop = int(np.searchsorted(plan.which, stop))  # the first at or past ``stop``
    if k0 == k_stop:
        return k0, k0, stop
    if k0 == plan.first_bad:
        assert plan.error is not None  # first_bad < len(which) only when a batch failed
        raise plan.error
    before = int(plan.cum_capacity[k0 - 1]) if k0 else 0
    fitting = int(np.searchsorted(plan.cum_capacity, before + budget, side="right")) - k0
    k1 = k0 + min(plan.first_bad - k0, max(1, fitting), k_stop - k0)
    return k0, k1, int(plan.which[k1]) if k1 < k_stop else stop


def _inflated(seg: SegmentBytes, plan: _V2Plan, start: int, end: int, k0: int, k1: int,
              inflater: compression.Inflater) -> _V2Input:
    """Batches ``[start, end)`` of ``plan`` ready for the kernels, the payloads of ``which[k0:k1]`` (all its
    compressed ones) decompressed into ``inflater``'s buffer from its first byte on.

    Each payload inflates to at most its :func:`compression.batch_limit` and goes straight into a buffer sized
    in advance from what the frames say, so a genuine payload is decompressed once and never copied."""
    src = np.zeros(end - start, dtype=np.uint8)
    rstart, rend, counts = plan.rstart[start:end].copy(), plan.rend[start:end].copy(), plan.counts[start:end]
    batches, crcs = plan.batches[start:end], plan.crcs[start:end]
    if k0 == k1:
        return _V2Input(batches, np.zeros(0, np.uint8), src, rstart, rend, counts, crcs)
    inflater.clear()
    done: list[int] = []
    try:
        inflater.add_all(seg.mv, plan.c_start[k0:k1], plan.c_end[k0:k1], plan.c_codecs[k0:k1], plan.limits[k0:k1],
                         plan.capacities[k0:k1], done)
    except CorruptRecordError as exc:
        k = k0 + len(done)
        raise _inflate_error(seg, exc, int(plan.batches[plan.which[k]]), int(plan.limits[k])) from None
    taken = plan.which[k0:k1] - start
    src[taken] = 1
    rend[taken] = done
    rstart[taken] = [0] + done[:-1]
    return _V2Input(batches, inflater.view(), src, rstart, rend, counts, crcs)


@dataclass
class _Piece:
    """A bounded piece of v2 batches (:func:`_v2_pieces`): those of ``plan`` from ``start`` to ``end``, whose
    compressed ones are ``which[k0:k1]``."""

    seg: SegmentBytes
    plan: _V2Plan
    start: int
    end: int
    k0: int
    k1: int

    @property
    def batches(self) -> np.ndarray:
        return self.plan.batches[self.start:self.end]

    @property
    def counts(self) -> np.ndarray:
        """The record count each of :attr:`batches` declares."""
        return self.plan.counts[self.start:self.end]

    def runs(self) -> Iterator[_V2Input]:
        """The piece in runs of at most :data:`~segment_io.compression.RUN_BYTES` of payloads (at least one batch),
        each decompressed into the buffer the run before it was: read a run before asking for the next. A segment
        whose payloads are offered to a store (``seg.payloads``) gets the piece whole, in a buffer the store may
        keep."""
        if self.k0 == self.k1 or self.seg.payloads is not None:
            yield _inflated(self.seg, self.plan, self.start, self.end, self.k0, self.k1, compression.Inflater())
            return
        inflater, at = compression.Inflater(), self.start
        while at < self.end:
            k0, k1, end = _extent(self.plan, at, compression.RUN_BYTES, self.end)
            yield _inflated(self.seg, self.plan, at, end, k0, k1, inflater)
            at = end


def _v2_pieces(seg: SegmentBytes, batches: np.ndarray) -> Iterator[_Piece]:
    """All of ``batches`` (planned once), one piece after another, each as far as its payloads pass
    ``_PAYLOAD_BYTES`` (always at least one batch): a chunk of batches that each stay within their bound holds no
    more than about that much decompressed at once. A piece is cut before a batch that fails before
    decompressing, and the next piece raises its error: the problems of the batches before it come first."""
    plan, start = _plan_v2(seg, batches), 0
    while start < len(batches):
        k0, k1, end = _extent(plan, start, _PAYLOAD_BYTES, len(batches))
        yield _Piece(seg, plan, start, end, k0, k1)
        start = end


_KERNEL_ERRORS: dict[int, tuple[type[CorruptRecordError], str]] = {
    K.ERR_VARINT_PAST_END: (InvalidVarintError, "varint runs past the end of its record or batch"),
    K.ERR_VARINT_TOO_LONG: (InvalidVarintError, "varint is longer than allowed"),
    K.ERR_LENGTH: (InvalidLengthError, "length field {value} is negative or runs past its record"),
    K.ERR_RECORD_SIZE: (InvalidLengthError, "record size {value} does not match the fields it holds"),
    K.ERR_COUNT_SHORT: (RecordCountMismatchError, "batch declares {value} records but its bytes end "
                                                  "after {record}"),
    K.ERR_COUNT_EXTRA: (RecordCountMismatchError, "batch declares {value} records but bytes remain after "
                                                  "the last of them"),
    K.ERR_COUNT_NEGATIVE: (RecordCountMismatchError, "negative record count {value}"),
    K.ERR_CONTROL_KEY: (InvalidLengthError, "control record key has {value} bytes; it needs 4 "
                                            "(version, type)"),
    K.ERR_CONTROL_VERSION: (CorruptRecordError, "control record key has version {value}; a negative version "
                                                "is not a control key (version, type)"),
    K.ERR_CHANGED: (CorruptRecordError, "the segment's bytes changed while it was read: this record is no longer "
                                        "the one its CRC check and scan accepted (is something writing the file?)"),
}


def control_record_type(key: bytes | memoryview | None) -> int:
    """The type of a control record from its key held as bytes (``CONTROL_ABORT``, ``CONTROL_COMMIT``, ...), read
    by the same compiled parser as the decoder's (:func:`segment_io._decode_kernels.control_key_type`).

    Raises ``ValueError`` saying why the key is not a control key (fewer than 4 bytes, or a negative version),
    with the decoder's words; the caller names the file and offset.
    """
    buf = np.frombuffer(key, np.uint8) if key is not None else None
    ctype = K.CONTROL_KEY_SHORT if buf is None else int(K.control_key_type(buf, 0, len(buf)))
    if ctype == K.CONTROL_KEY_SHORT:
        code, value = K.ERR_CONTROL_KEY, -1 if buf is None else len(buf)
    elif ctype == K.CONTROL_KEY_NEGATIVE_VERSION and buf is not None:  # (buf is None only for a short key)
        code, value = K.ERR_CONTROL_VERSION, int.from_bytes(bytes(buf[:2]), "big", signed=True)
    else:
        return ctype
    raise ValueError(_KERNEL_ERRORS[code][1].format(value=value))


def _offset_delta_error(seg: SegmentBytes, b: int, delta: int) -> tuple[type[CorruptRecordError], str]:
    """What is wrong with a record's offset ``delta`` in batch ``b`` (the scan refused it)."""
    base, last = int(seg.hdr.base_offset[b]), int(seg.hdr.last_offset[b])
    if delta < 0:
        why = "is negative"
    elif delta > last - base:
        why = f"lies past the batch's last offset delta {last - base} (its offsets end at {last})"
    else:
        why = "does not rise above the record before it's (a batch's records have increasing offsets)"
    return OffsetOrderError, f"offset delta {delta} (offset {base + delta}) {why}"


def _last_deltas(seg: SegmentBytes, inp: _V2Input) -> np.ndarray:
    """Each batch's last offset delta, what its records' offset deltas must stay within (the kernels'
    ``last_delta``)."""
    return seg.hdr.last_offset[inp.batches] - seg.hdr.base_offset[inp.batches]


def _raise_kernel_error(seg: SegmentBytes, inp: _V2Input, err: np.ndarray) -> None:
    code, i, pos, record, value = (int(x) for x in err)
    if code == K.ERR_OFFSET_DELTA:
        cls, detail = _offset_delta_error(seg, int(inp.batches[i]), value)
    else:
        cls, template = _KERNEL_ERRORS[code]
        detail = template.format(value=value, record=record)
    if inp.src[i] == 0:
        where = f"file byte {pos}"
    else:
        where = f"byte {pos - int(inp.rstart[i])} of the decompressed payload"
    raise seg.error(cls, f"{detail} (record {record}, {where})", int(inp.batches[i]))


def _crc_starts(inp: _V2Input) -> np.ndarray:
    """Where each batch's CRC starts (only read for the batches whose CRC the scan checks)."""
    return inp.rstart - (V2_HEADER_SIZE - V2_CRC_START)


def _raise_scan_error(seg: SegmentBytes, inp: _V2Input, err: np.ndarray) -> None:
    if err[0] == K.ERR_CRC:
        raise crc_mismatch(seg, int(inp.batches[err[1]]), int(err[4]))
    _raise_kernel_error(seg, inp, err)


def _scan(seg: SegmentBytes, inp: _V2Input) -> np.ndarray:
    totals = np.zeros(6, dtype=np.int64)
    err = np.zeros(5, dtype=np.int64)
    if not K.scan_records(seg.arr, inp.dec, inp.src, inp.rstart, inp.rend, inp.counts, _last_deltas(seg, inp),
                          _crc_starts(inp), inp.crcs, LONG_SHIFT, SHORT_SHIFT, totals, err):
        _raise_scan_error(seg, inp, err)
    return totals


def _log_append(hdr: BatchHeaders, batches: np.ndarray) -> np.ndarray:
    return (hdr.attributes[batches] & ATTR_TIMESTAMP_TYPE) != 0


def _binary(typ: pa.DataType, n: int, offsets: np.ndarray, data: np.ndarray,
            valid: np.ndarray | None) -> pa.Array:
    null_count = 0 if valid is None else n - int(np.count_nonzero(valid))
    validity = None if valid is None or null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=null_count)


@dataclass
class _Fields:
    """The record fields of a run of v2 batches as :func:`K.fill_records` writes them: per record, and the binary
    columns as int32 offsets (from 0), data and validity; arrays of fields not asked for are empty."""

    batches: np.ndarray
    counts: np.ndarray
    h: int  # headers (counted even when their arrays are not asked for)
    offsets: np.ndarray
    timestamps: np.ndarray
    k_offs: np.ndarray
    k_data: np.ndarray
    k_valid: np.ndarray
    v_offs: np.ndarray
    v_data: np.ndarray
    v_valid: np.ndarray
    v_refs: np.ndarray
    h_offs: np.ndarray
    hk_offs: np.ndarray
    hk_data: np.ndarray
    hv_offs: np.ndarray
    hv_data: np.ndarray
    hv_valid: np.ndarray

    @property
    def n(self) -> int:
        """Records."""
        return len(self.offsets)


def _fits_int32(*sizes: int) -> bool:
    """Whether Arrow's int32 offsets can address items and bytes of these counts."""
    return max(sizes) <= _INT32_MAX


def _fields(seg: SegmentBytes, inp: _V2Input, names: set[str]) -> _Fields | None:
    """The record fields of one run of v2 batches, in one pass where int32 offsets address the run's bytes;
    None when a binary column would overflow int32 offsets."""
    room = int(np.maximum(inp.rend - inp.rstart, 0).sum())  # the records' bytes: no column needs more
    if _fits_int32(room):
        return _fields_in_one_pass(seg, inp, names, room)
    return _fields_in_two_passes(seg, inp, names)


def _alloc(wanted: bool, size: int, dtype: type) -> np.ndarray:
    return np.empty(size if wanted else 0, dtype=dtype)


def _batch_fields(seg: SegmentBytes, inp: _V2Input) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                               np.ndarray]:
    """What the fill kernels read of each batch of the run: its base offset, last offset delta, base and max
    timestamps, and whether its timestamps are log-append time."""
    hdr, batches = seg.hdr, inp.batches
    return (hdr.base_offset[batches], _last_deltas(seg, inp), hdr.base_timestamp[batches],
            hdr.max_timestamp[batches], _log_append(hdr, batches))


def _fields_in_two_passes(seg: SegmentBytes, inp: _V2Input, names: set[str]) -> _Fields | None:
    """:func:`_fields` by a scan of the whole run (:func:`K.scan_records`), then its fill into buffers of the sizes
    the scan found (:func:`K.fill_records`): for a run whose bytes int32 offsets cannot address, whose columns may
    still fit."""
    totals = _scan(seg, inp)
    n = int(totals[K.TOT_RECORDS])
    h = int(totals[K.TOT_HEADERS])
    if not _fits_int32(h, int(totals[K.TOT_KEY_BYTES]), int(totals[K.TOT_VALUE_BYTES]),
                       int(totals[K.TOT_HKEY_BYTES]), int(totals[K.TOT_HVALUE_BYTES])):
        return None
    want_k, want_v, want_h = "key" in names, "value" in names, "headers" in names
    refs = want_v and seg.value_refs
    copy_v = want_v and not refs
    f = _Fields(inp.batches, inp.counts, h, np.empty(n, np.int64), np.empty(n, np.int64),
                _alloc(want_k, n + 1, np.int32), _alloc(want_k, int(totals[K.TOT_KEY_BYTES]), np.uint8),
                _alloc(want_k, n, np.bool_),
                _alloc(copy_v, n + 1, np.int32), _alloc(copy_v, int(totals[K.TOT_VALUE_BYTES]), np.uint8),
                _alloc(want_v, n, np.bool_), _alloc(refs, n, np.int64),
                _alloc(want_h, n + 1, np.int32),
                _alloc(want_h, h + 1, np.int32), _alloc(want_h, int(totals[K.TOT_HKEY_BYTES]), np.uint8),
                _alloc(want_h, h + 1, np.int32), _alloc(want_h, int(totals[K.TOT_HVALUE_BYTES]), np.uint8),
                _alloc(want_h, h, np.bool_))
    err = np.zeros(5, dtype=np.int64)
    base, last, base_ts, max_ts, log_append = _batch_fields(seg, inp)
    if not K.fill_records(seg.arr, inp.dec, inp.src, inp.rstart, inp.counts, base, last, base_ts, max_ts, log_append,
                          want_k, copy_v, want_h, refs, f.offsets, f.timestamps, f.k_offs, f.k_data, f.k_valid,
                          f.v_offs, f.v_data, f.v_valid, f.v_refs, f.h_offs, f.hk_offs, f.hk_data, f.hv_offs,
                          f.hv_data, f.hv_valid, err):
        _raise_kernel_error(seg, inp, err)
    if refs and seg.payloads is not None and len(inp.dec):
        _offer_payloads(seg, inp)
    return f


#: The fewest bytes a v2 record takes: its length, attributes, timestamp delta, offset delta, key length, value
#: length and header count, one byte each.
_MIN_RECORD_BYTES = 7


def _declared_rows(inp: _V2Input) -> int:
    """The records the run's batches declare, each batch's count as far as its bytes can hold that many: a count
    past that (or a negative one) is the scan's to report, before anything is written for its batch, and must not
    size an allocation first."""
    return int(np.minimum(np.maximum(inp.counts, 0), np.maximum(inp.rend - inp.rstart, 0) // _MIN_RECORD_BYTES).sum())


def _fields_in_one_pass(seg: SegmentBytes, inp: _V2Input, names: set[str], room: int) -> _Fields:
    """:func:`_fields` with each batch's CRC, scan and fill in one compiled walk (:func:`K.scan_fill_records`),
    for a run of ``room`` record bytes, which int32 offsets address. The per-record columns have a row for each
    record the batches declare (as far as their bytes can hold them); the binary columns' buffers start empty
    (copied values: at ``room``), grow in the walk as batches need, and are cut to what was written."""
    want_k, want_v, want_h = "key" in names, "value" in names, "headers" in names
    refs = want_v and seg.value_refs
    copy_v = want_v and not refs
    n = _declared_rows(inp)
    offsets, timestamps = np.empty(n, np.int64), np.empty(n, np.int64)
    k_offs, k_valid = _alloc(want_k, n + 1, np.int32), _alloc(want_k, n, np.bool_)
    v_offs, v_valid, v_refs = _alloc(copy_v, n + 1, np.int32), _alloc(want_v, n, np.bool_), _alloc(refs, n, np.int64)
    h_offs = _alloc(want_h, n + 1, np.int32)
    at, err = np.zeros(6, np.int64), np.zeros(5, np.int64)
    base, last, base_ts, max_ts, log_append = _batch_fields(seg, inp)
    ok, k_data, v_data, hk_offs, hk_data, hv_offs, hv_data, hv_valid = K.scan_fill_records(
        seg.arr, inp.dec, inp.src, inp.rstart, inp.rend, inp.counts, base, last, base_ts, max_ts, log_append,
        _crc_starts(inp), inp.crcs, LONG_SHIFT, SHORT_SHIFT, want_k, copy_v, want_h, refs, offsets, timestamps,
        k_offs, _alloc(want_k, 0, np.uint8), k_valid, v_offs, _alloc(copy_v, room, np.uint8), v_valid, v_refs,
        h_offs, _alloc(want_h, 1, np.int32), _alloc(want_h, 0, np.uint8), _alloc(want_h, 1, np.int32),
        _alloc(want_h, 0, np.uint8), _alloc(want_h, 0, np.bool_), room, at, err)
    if not ok:
        if err[0] == K.ERR_ROWS_SHORT:
            raise RuntimeError(f"batch {err[1]} of a run needs {err[4]} rows of the {n} its batches declare")
        _raise_scan_error(seg, inp, err)
    h = int(at[K.AT_HEADERS])
    if refs and seg.payloads is not None and len(inp.dec):
        _offer_payloads(seg, inp)
    return _Fields(inp.batches, inp.counts, h, offsets, timestamps, k_offs, _cut(k_data, at[K.AT_KEY_BYTES]), k_valid,
                   v_offs, _cut(v_data, at[K.AT_VALUE_BYTES]), v_valid, v_refs, h_offs, _cut(hk_offs, h + 1),
                   _cut(hk_data, at[K.AT_HKEY_BYTES]), _cut(hv_offs, h + 1), _cut(hv_data, at[K.AT_HVALUE_BYTES]),
                   _cut(hv_valid, h))


def _cut(buffer: np.ndarray, used: int) -> np.ndarray:
    """The part of a grown buffer that was written (a buffer of a column not asked for stays empty): a view, so the
    buffer's unwritten end stays allocated with it (little: a buffer grows to what the run needs per byte so far,
    which it rarely passes by much, or doubles)."""
    return buffer[:int(used)] if len(buffer) else buffer


def _joined_offsets(parts: list[np.ndarray]) -> np.ndarray:
    """The offsets (each from 0, one more than its items) of consecutive runs, as one array over their data
    joined in order."""
    if not len(parts[0]):  # a column not asked for
        return parts[0]
    out = np.empty(sum(len(p) - 1 for p in parts) + 1, parts[0].dtype)
    at = base = 0
    for p in parts:
        k = len(p) - 1
        np.add(p[:k], base, out=out[at:at + k])
        at += k
        base += int(p[k])
    out[at] = base
    return out


def _joined(runs: list[_Fields]) -> _Fields | None:
    """The fields of consecutive runs as those of one; None when a binary column would overflow int32 offsets."""
    if len(runs) == 1:
        return runs[0]

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(f, name) for f in runs])

    def offsets(name: str) -> np.ndarray:
        return _joined_offsets([getattr(f, name) for f in runs])

    h = sum(f.h for f in runs)
    if not _fits_int32(h, *(sum(len(getattr(f, name)) for f in runs)
                            for name in ("k_data", "v_data", "hk_data", "hv_data"))):
        return None  # (before anything is copied)
    return _Fields(batches=cat("batches"), counts=cat("counts"), h=h,
                   offsets=cat("offsets"), timestamps=cat("timestamps"),
                   k_offs=offsets("k_offs"), k_data=cat("k_data"), k_valid=cat("k_valid"),
                   v_offs=offsets("v_offs"), v_data=cat("v_data"), v_valid=cat("v_valid"), v_refs=cat("v_refs"),
                   h_offs=offsets("h_offs"), hk_offs=offsets("hk_offs"), hk_data=cat("hk_data"),
                   hv_offs=offsets("hv_offs"), hv_data=cat("hv_data"), hv_valid=cat("hv_valid"))


def _v2_columns(piece: _Piece, names: set[str]) -> dict[str, pa.Array] | None:
    """Record columns of one piece of v2 batches, read run by run; None when a binary column would overflow
    int32 offsets."""
    seg = piece.seg
    runs: list[_Fields] = []
    for inp in piece.runs():
        f = _fields(seg, inp, names)
        if f is None:
            return None
        runs.append(f)
    f = _joined(runs)
    if f is None:
        return None
    want_k, want_v, want_h = "key" in names, "value" in names, "headers" in names
    n, h = f.n, f.h
    cols: dict[str, pa.Array] = {"offset": pa.array(f.offsets), "timestamp": pa.array(f.timestamps)}
    if want_k:
        cols["key"] = _binary(pa.binary(), n, f.k_offs, f.k_data, f.k_valid)
    if want_v and seg.value_refs:
        cols["value"] = pa.array(f.v_refs, VALUE_REF_TYPE, mask=~f.v_valid)
    elif want_v:
        cols["value"] = _binary(pa.binary(), n, f.v_offs, f.v_data, f.v_valid)
    if want_h:
        hkeys = _binary(pa.string(), h, f.hk_offs, f.hk_data, None)
        try:
            hkeys.validate(full=True)
        except pa.ArrowInvalid:
            bad = int(f.batches[0])
            raise seg.error(CorruptRecordError, "a record header key is not valid UTF-8 (in this batch or one "
                                                "of the batches after it)", bad) from None
        hvals = _binary(pa.binary(), h, f.hv_offs, f.hv_data, f.hv_valid)
        items = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_TYPE))
        cols["headers"] = pa.Array.from_buffers(HEADERS_TYPE, n, [None, pa.py_buffer(f.h_offs)], children=[items])
    cols.update(_v2_batch_columns(seg, f.batches, f.counts, names))
    return cols


def _offer_payloads(seg: SegmentBytes, inp: _V2Input) -> None:
    """Offer the decompressed payloads of a piece's compressed batches, which its value references point into,
    to the encoder that will copy the kept values from them (:class:`segment_io.payloads.KeptPayloads`)."""
    assert seg.payloads is not None
    packed = np.flatnonzero(inp.src)
    dec = inp.dec
    if isinstance(dec.base, np.ndarray) and dec.base.nbytes > _TIGHT_ENOUGH * dec.nbytes:
        # the buffer was sized from what the frames may inflate to (an LZ4 frame without a content size: a whole
        # 64 KiB block for each batch of 15 KB) and the store would hold all of it: keep a copy of what was written
        dec = dec.copy()
    seg.payloads.offer(seg.segment_base_offset, seg.hdr.position[inp.batches[packed]], dec, inp.rstart[packed],
                       inp.rend[packed])


def _v2_batch_columns(seg: SegmentBytes, batches: np.ndarray, counts: np.ndarray,
                      names: set[str]) -> dict[str, pa.Array]:
    """Batch-level columns of RECORD_SCHEMA, repeated once per record."""
    hdr = seg.hdr
    attrs = hdr.attributes[batches]
    # each record's batch, once: every column is then one gather (not a gather per batch and a repeat)
    rows = np.repeat(batches, counts)
    row_attrs = np.repeat(attrs, counts)
    per_row = {
        "timestamp_type": lambda: ((row_attrs & ATTR_TIMESTAMP_TYPE) != 0).astype(np.int8),
        "batch_base_offset": lambda: hdr.base_offset[rows],
        "batch_last_offset": lambda: hdr.last_offset[rows],
        "batch_position": lambda: hdr.position[rows],
        "batch_size": lambda: hdr.size[rows],
        "batch_base_timestamp": lambda: hdr.base_timestamp[rows],
        "batch_max_timestamp": lambda: hdr.max_timestamp[rows],
        "magic": lambda: hdr.magic[rows],
        "codec": lambda: (row_attrs & ATTR_CODEC_MASK).astype(np.int8),  # v2 only: no legacy codec bits to pick
        "transactional": lambda: (row_attrs & ATTR_TRANSACTIONAL) != 0,
        "control": lambda: (row_attrs & ATTR_CONTROL) != 0,
        "producer_id": lambda: hdr.producer_id[rows],
        "producer_epoch": lambda: hdr.producer_epoch[rows],
        "base_sequence": lambda: hdr.base_sequence[rows],
        "partition_leader_epoch": lambda: hdr.partition_leader_epoch[rows],
    }
    out: dict[str, pa.Array] = {}
    for name, values in per_row.items():
        if name in names:
            out[name] = arrow_array(values(), _RECORD_TYPES[name])
    if "delete_horizon_ms" in names:
        out["delete_horizon_ms"] = _horizons(attrs, hdr.base_timestamp[batches], counts)
    return out


def _horizons(attrs: np.ndarray, base_timestamp: np.ndarray, counts: np.ndarray) -> pa.Array:
    """The ``delete_horizon_ms`` column of records of v2 batches: the base timestamp of a batch whose delete
    horizon flag is set, else null."""
    horizon = (attrs & ATTR_DELETE_HORIZON) != 0
    n = int(counts.sum())
    if not horizon.any():  # the common case: no mask to build and apply
        return pa.nulls(n, pa.int64())
    return pa.array(np.repeat(base_timestamp, counts), type=pa.int64(), mask=~np.repeat(horizon, counts))


def decode_v2(seg: SegmentBytes, batches: np.ndarray, names: set[str]) -> list[dict[str, pa.Array]]:
    with _crc_errors_first(seg, batches):
        return _decode_v2_records(seg, _v2_batches(seg, batches), names)


def _decode_v2_records(seg: SegmentBytes, batches: np.ndarray, names: set[str]) -> list[dict[str, pa.Array]]:
    out: list[dict[str, pa.Array]] = []
    for piece in _v2_pieces(seg, batches):
        cols = _v2_columns(piece, names)
        if cols is not None:
            out.append(cols)
            continue
        held = piece.batches
        if len(held) == 1:
            raise seg.error(InvalidLengthError, "batch holds more than 2 GiB of keys, values or headers",
                            int(held[0]))
        half = len(held) // 2
        out += _decode_v2_records(seg, held[:half], names)
        out += _decode_v2_records(seg, held[half:], names)
    return out



# --------------------------------------------------------------------------------------------------
# Key hashes (first compaction pass)
# --------------------------------------------------------------------------------------------------


def key_hash_v2(seg: SegmentBytes, batches: np.ndarray) -> list[pa.Table]:
    with _crc_errors_first(seg, batches):
        return [_key_hash_piece(piece) for piece in _v2_pieces(seg, _v2_batches(seg, batches))]


#: The columns of the key-hash table written a record at a time, and their types.
_KEY_HASH_ROWS = (("offset", np.int64), ("timestamp", np.int64), ("key_hash_hi", np.int64), ("key_hash_lo", np.int64),
                  ("key_is_null", np.bool_), ("value_is_null", np.bool_), ("control_type", np.int16))


def _key_hash_piece(piece: _Piece) -> pa.Table:
    """The key-hash table of one piece of v2 batches, read run by run (:meth:`_Piece.runs`): every column has one
    fixed-width entry a record, sized for the records each run's batches declare as far as their bytes can hold
    them (:func:`_declared_rows`), and the scan holds each batch to its count."""
    seg, hdr = piece.seg, piece.seg.hdr
    b = piece.batches
    counts = piece.counts
    parts: list[dict[str, np.ndarray]] = []
    err = np.zeros(5, dtype=np.int64)
    for inp in piece.runs():
        n = _declared_rows(inp)
        rows = {name: np.empty(n, dtype) for name, dtype in _KEY_HASH_ROWS}
        rb = inp.batches
        base, last, base_ts, max_ts, log_append = _batch_fields(seg, inp)
        m = K.scan_hash_records(seg.arr, inp.dec, inp.src, inp.rstart, inp.rend, inp.counts, base, last, base_ts,
                                max_ts, log_append, (hdr.attributes[rb] & ATTR_CONTROL) != 0, _crc_starts(inp),
                                inp.crcs, LONG_SHIFT, SHORT_SHIFT, rows["offset"], rows["timestamp"],
                                rows["key_hash_hi"], rows["key_hash_lo"], rows["key_is_null"], rows["value_is_null"],
                                rows["control_type"], err)
        if m < 0 and err[0] == K.ERR_ROWS_SHORT:
            raise RuntimeError(f"batch {err[1]} of a run needs {err[4]} rows of the {n} its batches declare")
        if m < 0:
            _raise_scan_error(seg, inp, err)
        if m != n:
            raise RuntimeError(f"{m} records read in a run whose batches declare {n}")
        parts.append(rows)
    out = parts[0] if len(parts) == 1 else {
        name: np.concatenate([p[name] for p in parts] or [np.empty(0, dtype)]) for name, dtype in _KEY_HASH_ROWS}
    attrs = hdr.attributes[b]
    repeated = {
        "batch_base_offset": hdr.base_offset[b], "batch_last_offset": hdr.last_offset[b],
        "transactional": (attrs & ATTR_TRANSACTIONAL) != 0, "control": (attrs & ATTR_CONTROL) != 0,
        "producer_id": hdr.producer_id[b], "producer_epoch": hdr.producer_epoch[b],
        "batch_max_timestamp": hdr.max_timestamp[b], "magic": hdr.magic[b],
    }
    cols: dict[str, pa.Array] = {name: arrow_array(values, _KEY_HASH_TYPES[name]) for name, values in out.items()}
    for name, values in repeated.items():
        cols[name] = arrow_array(np.repeat(values, counts), _KEY_HASH_TYPES[name])
    cols["delete_horizon_ms"] = _horizons(attrs, hdr.base_timestamp[b], counts)
    return pa.Table.from_arrays([cols[name] for name in KEY_HASH_SCHEMA.names], schema=KEY_HASH_SCHEMA)


__all__ = ["check_v2_crcs", "control_record_type", "crc_mismatch", "decode_v2", "key_hash_v2", "v2_crcs"]
