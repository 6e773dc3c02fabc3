"""Segment decoder: Kafka ``.log`` bytes -> Arrow tables of :data:`segment_io.schema.RECORD_SCHEMA`.

Framing comes from :func:`segment_io.format.scan_batches` (one step per batch). Records of RecordBatch v2
are decoded by the numba kernels of :mod:`segment_io._decode_kernels`, which write straight into numpy
buffers that become Arrow arrays without a Python object per record; the per-batch Python work is limited
to CRC checks and decompressing compressed payloads. Legacy magic 0/1 message sets (old archives) are
decoded message by message in Python.

Every failure raises a subclass of :class:`~segment_io.errors.CorruptRecordError` naming the file, the
byte position of the failing batch and its base offset.
"""

from __future__ import annotations

import mmap
import posixpath
import struct
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import crc32c
import numpy as np
import pyarrow as pa

from segment_io import _decode_kernels as K
from segment_io import compression, layout
from segment_io.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidLengthError,
    InvalidMagicError,
    InvalidVarintError,
    OversizedBatchError,
    RecordCountMismatchError,
    TruncatedBatchError,
    UnsupportedCodecError,
)
from segment_io.format import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
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
    V2_CRC_START,
    V2_HEADER_SIZE,
    BatchHeaders,
    check_offset_order,
    scan_batches,
)
from segment_io.hashing import hash_keys
from segment_io.schema import (
    HEADER_TYPE,
    KEY_HASH_SCHEMA,
    RECORD_SCHEMA,
    VALUE_REF_TYPE,
    arrow_array,
    project,
    with_value_refs,
)
from segment_io.storage.base import release_mapped_pages

if TYPE_CHECKING:
    from segment_io.storage.base import Storage

_INT32_MAX = 2**31 - 1
# iter_/read_segment decode at most this many batch bytes at once, which keeps every binary column of a
# chunk well inside Arrow's int32 offsets (a chunk that still overflows after decompression is split).
# For compressed batches the chunk also bounds the decompressed payloads held at once: small chunks let the
# allocator reuse the same memory for every chunk instead of faulting in fresh pages. A compressed batch
# therefore counts _COMPRESSED_WEIGHT times its size, giving ~8 MiB chunks of compressed batches (measured on
# 1 KB JSON-like values: 1.7-3x faster than 256 MiB chunks) and 64 MiB ones of uncompressed batches (fewer
# chunks for the encoder and the cleaner downstream; no intermediate buffers to reuse). The decompressed
# payloads held at once are also capped at _CHUNK_BYTES (beyond the first batch, itself bounded by
# compression.max_batch_bytes): a chunk of small batches that inflate a lot is decoded in pieces.
_CHUNK_BYTES = 64 << 20
_COMPRESSED_WEIGHT = 8
_HEADERS_TYPE = RECORD_SCHEMA.field("headers").type
_RECORD_TYPES = {f.name: f.type for f in RECORD_SCHEMA}
_RECORD_REF_SCHEMA = with_value_refs(RECORD_SCHEMA)
_KEY_HASH_TYPES = {f.name: f.type for f in KEY_HASH_SCHEMA}
_NO_TIMESTAMP_TYPE, _CREATE_TIME, _LOG_APPEND_TIME = -1, 0, 1


# --------------------------------------------------------------------------------------------------
# Context and error helpers
# --------------------------------------------------------------------------------------------------


@dataclass
class _Segment:
    """One segment's bytes and the options that apply to all of its batches."""

    mv: memoryview
    arr: np.ndarray  # the same bytes as uint8, zero-copy
    hdr: BatchHeaders
    path: str | None
    topic: str
    partition: int
    segment_base_offset: int
    verify_crc: bool
    include_control: bool
    max_batch_bytes: int  # see compression.max_batch_bytes
    #: v2 values as references into the segment's bytes (VALUE_REF_TYPE) instead of copies
    value_refs: bool = False

    def error(self, cls: type[CorruptRecordError], detail: str, b: int) -> CorruptRecordError:
        """An exception of ``cls`` located at batch ``b`` (index into ``hdr``)."""
        return cls(detail, path=self.path, position=int(self.hdr.position[b]),
                   offset=int(self.hdr.base_offset[b]))


def _as_bytes(data: bytes | bytearray | memoryview | mmap.mmap) -> tuple[memoryview, np.ndarray]:
    mv = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    return mv, np.frombuffer(mv, dtype=np.uint8)


def _open(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None, topic: str, partition: int,
          segment_base_offset: int | None, verify_crc: bool, include_control: bool,
          allow_truncated_tail: bool, max_batch_bytes: int | None, check_order: bool = True) -> _Segment:
    limit = compression.max_batch_bytes(max_batch_bytes)
    mv, arr = _as_bytes(data)
    hdr = scan_batches(mv, path=path, allow_truncated_tail=True)
    if hdr.truncated_tail and not allow_truncated_tail:
        pos = len(mv) - hdr.truncated_tail
        offset = struct.unpack_from(">q", mv, pos)[0] if hdr.truncated_tail >= 8 else None
        raise TruncatedBatchError(
            f"last batch is cut short: only {hdr.truncated_tail} bytes remain at the end of the file",
            path=path, position=pos, offset=offset)
    if check_order:
        check_offset_order(hdr, path)
    if segment_base_offset is None:
        segment_base_offset = int(hdr.base_offset[0]) if len(hdr) else 0
    return _Segment(mv, arr, hdr, path, topic, partition, segment_base_offset, verify_crc, include_control, limit)


# --------------------------------------------------------------------------------------------------
# RecordBatch v2
# --------------------------------------------------------------------------------------------------


@dataclass
class _V2Input:
    """Where the records of a run of v2 batches lie, ready for the kernels."""

    batches: np.ndarray  # int64 indices into hdr of the batches decoded (control batches may be left out)
    dec: np.ndarray  # uint8, decompressed payloads one after another
    src: np.ndarray  # uint8 per batch: 0 records in the segment, 1 in ``dec``
    rstart: np.ndarray  # int64
    rend: np.ndarray  # int64
    counts: np.ndarray  # int64, declared record counts


def _check_v2_crcs(seg: _Segment, batches: np.ndarray) -> None:
    hdr, mv = seg.hdr, seg.mv
    for b, pos, size, stored in zip(batches.tolist(), hdr.position[batches].tolist(), hdr.size[batches].tolist(),
                                    hdr.crc[batches].tolist()):
        actual = crc32c.crc32c(mv[pos + V2_CRC_START:pos + size])
        if actual != stored:
            raise seg.error(CrcMismatchError, f"CRC-32C mismatch: stored {stored:#010x}, "
                                              f"computed {actual:#010x}", b)


def _v2_batches(seg: _Segment, batches: np.ndarray) -> np.ndarray:
    """``batches`` with their CRCs checked (when the segment asks for it), less control batches when the
    segment leaves them out."""
    if seg.verify_crc:
        _check_v2_crcs(seg, batches)
    if not seg.include_control:
        batches = batches[(seg.hdr.attributes[batches] & ATTR_CONTROL) == 0]
    return batches


def _inflate_error(seg: _Segment, exc: CorruptRecordError, b: int, limit: int) -> CorruptRecordError:
    """``exc`` located at batch ``b``; past a bound that the batch's record count set (an empty batch inflates
    to nothing) rather than the configured one, it is the record count that is wrong."""
    if isinstance(exc, OversizedBatchError) and limit < seg.max_batch_bytes:
        count = int(seg.hdr.record_count[b])
        return seg.error(RecordCountMismatchError, f"batch declares {count} records, which cannot inflate past "
                                                   f"{limit} bytes, but its compressed payload does", b)
    return seg.error(type(exc), exc.detail, b)


def _first_bad_batch(seg: _Segment, batches: np.ndarray, codecs: np.ndarray, counts: np.ndarray,
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
    inflate to: worked out once for all of ``batches``, then cut into bounded pieces by :func:`_prepare_v2`."""

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
    first_bad: int  # index (into which) of the first compressed batch that fails before decompressing
    error: CorruptRecordError | None


def _plan_v2(seg: _Segment, batches: np.ndarray) -> _V2Plan:
    hdr = seg.hdr
    rstart = hdr.position[batches] + V2_HEADER_SIZE
    rend = hdr.position[batches] + hdr.size[batches].astype(np.int64)
    counts = hdr.record_count[batches].astype(np.int64)
    codecs = hdr.attributes[batches] & ATTR_CODEC_MASK  # v2 batches only: BatchHeaders.codec without the legacy case
    which = np.flatnonzero(codecs)
    if len(which) == 0:  # nothing compressed (common for small partitions): nothing to plan or bound
        none = np.zeros(0, np.int64)
        return _V2Plan(batches, rstart, rend, counts, which, none, none, none, none, none, none, 0, None)
    c_codecs, c_counts = codecs[which].astype(np.int64), counts[which]
    c_start, c_end = rstart[which], rend[which]
    limits = compression.batch_limit(c_counts, seg.max_batch_bytes)
    at_least, capacities = compression.plan_payloads(seg.arr, c_start, c_end, c_codecs, limits)
    first_bad, error = _first_bad_batch(seg, batches[which], c_codecs, c_counts, at_least, limits)
    return _V2Plan(batches, rstart, rend, counts, which, c_codecs, c_start, c_end, limits, capacities,
                   np.cumsum(capacities), first_bad, error)


def _prepare_v2(seg: _Segment, plan: _V2Plan, start: int) -> tuple[_V2Input, int]:
    """The piece of ``plan`` from batch ``start`` on, decompressing payloads until they pass ``_CHUNK_BYTES``
    (always at least one batch): returns the input and the index of the first batch after it.

    Each payload inflates to at most its :func:`compression.batch_limit` and goes straight into one buffer
    allocated in advance from what the frames say, so a genuine payload is decompressed once and never copied,
    and a chunk of batches that each stay within the bound still holds no more than about ``_CHUNK_BYTES``."""
    n = len(plan.batches)
    k0 = int(np.searchsorted(plan.which, start))  # the first compressed batch of the piece
    src = np.zeros(n - start, dtype=np.uint8)
    rstart, rend, counts = plan.rstart[start:].copy(), plan.rend[start:].copy(), plan.counts[start:]
    if k0 == len(plan.which):
        return _V2Input(plan.batches[start:], np.zeros(0, np.uint8), src, rstart, rend, counts), n
    if k0 == plan.first_bad:
        assert plan.error is not None  # first_bad < len(which) only when a batch failed
        raise plan.error
    # decode the batches before the first bad one (their errors come first) and within the chunk budget
    before = int(plan.cum_capacity[k0 - 1]) if k0 else 0
    fitting = int(np.searchsorted(plan.cum_capacity, before + _CHUNK_BYTES, side="right")) - k0
    k1 = k0 + min(plan.first_bad - k0, max(1, fitting))
    end = int(plan.which[k1]) if k1 < len(plan.which) else n
    inflater = compression.Inflater()
    done: list[int] = []
    try:
        inflater.add_all(seg.mv, plan.c_start[k0:k1].tolist(), plan.c_end[k0:k1].tolist(),
                         plan.c_codecs[k0:k1].tolist(), plan.limits[k0:k1].tolist(),
                         plan.capacities[k0:k1].tolist(), done)
    except CorruptRecordError as exc:
        k = k0 + len(done)
        raise _inflate_error(seg, exc, int(plan.batches[plan.which[k]]), int(plan.limits[k])) from None
    taken = plan.which[k0:k1] - start
    src[taken] = 1
    rend[taken] = done
    rstart[taken] = [0] + done[:-1]
    m = end - start
    return _V2Input(plan.batches[start:end], inflater.view(), src[:m], rstart[:m], rend[:m], counts[:m]), end


def _v2_inputs(seg: _Segment, batches: np.ndarray) -> Iterator[_V2Input]:
    """All of ``batches``, one bounded piece (:func:`_prepare_v2`) after another, planned once."""
    plan, start = _plan_v2(seg, batches), 0
    while start < len(batches):
        inp, start = _prepare_v2(seg, plan, start)
        yield inp


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


def _raise_kernel_error(seg: _Segment, inp: _V2Input, err: np.ndarray) -> None:
    code, i, pos, record, value = (int(x) for x in err)
    cls, template = _KERNEL_ERRORS[code]
    detail = template.format(value=value, record=record)
    if inp.src[i] == 0:
        where = f"file byte {pos}"
    else:
        where = f"byte {pos - int(inp.rstart[i])} of the decompressed payload"
    raise seg.error(cls, f"{detail} (record {record}, {where})", int(inp.batches[i]))


def _scan(seg: _Segment, inp: _V2Input) -> np.ndarray:
    totals = np.zeros(6, dtype=np.int64)
    err = np.zeros(5, dtype=np.int64)
    if not K.scan_records(seg.arr, inp.dec, inp.src, inp.rstart, inp.rend, inp.counts, totals, err):
        _raise_kernel_error(seg, inp, err)
    return totals


def _log_append(hdr: BatchHeaders, batches: np.ndarray) -> np.ndarray:
    return (hdr.attributes[batches] & ATTR_TIMESTAMP_TYPE) != 0


def _binary(typ: pa.DataType, n: int, offsets: np.ndarray, data: np.ndarray,
            valid: np.ndarray | None) -> pa.Array:
    null_count = 0 if valid is None else n - int(np.count_nonzero(valid))
    validity = None if valid is None or null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=null_count)


def _v2_columns(seg: _Segment, inp: _V2Input, names: set[str]) -> dict[str, pa.Array] | None:
    """Record columns of one run of v2 batches; None when a binary column would overflow int32 offsets."""
    totals = _scan(seg, inp)
    n = int(totals[K.TOT_RECORDS])
    h = int(totals[K.TOT_HEADERS])
    if max(totals[K.TOT_KEY_BYTES], totals[K.TOT_VALUE_BYTES], totals[K.TOT_HKEY_BYTES],
           totals[K.TOT_HVALUE_BYTES], h) > _INT32_MAX:
        return None
    want_k, want_v, want_h = "key" in names, "value" in names, "headers" in names

    def alloc(wanted: bool, size: int, dtype: type) -> np.ndarray:
        return np.empty(size if wanted else 0, dtype=dtype)

    hdr, batches = seg.hdr, inp.batches
    offsets = np.empty(n, np.int64)
    timestamps = np.empty(n, np.int64)
    k_offs, k_data, k_valid = (alloc(want_k, n + 1, np.int32), alloc(want_k, int(totals[K.TOT_KEY_BYTES]), np.uint8),
                               alloc(want_k, n, np.bool_))
    refs = want_v and seg.value_refs
    copy_v = want_v and not refs
    v_offs, v_data, v_valid = (alloc(copy_v, n + 1, np.int32),
                               alloc(copy_v, int(totals[K.TOT_VALUE_BYTES]), np.uint8), alloc(want_v, n, np.bool_))
    v_refs = alloc(refs, n, np.int64)
    h_offs = alloc(want_h, n + 1, np.int32)
    hk_offs, hk_data = alloc(want_h, h + 1, np.int32), alloc(want_h, int(totals[K.TOT_HKEY_BYTES]), np.uint8)
    hv_offs, hv_data, hv_valid = (alloc(want_h, h + 1, np.int32),
                                  alloc(want_h, int(totals[K.TOT_HVALUE_BYTES]), np.uint8), alloc(want_h, h, np.bool_))
    K.fill_records(seg.arr, inp.dec, inp.src, inp.rstart, inp.counts, hdr.base_offset[batches],
                   hdr.base_timestamp[batches], hdr.max_timestamp[batches], _log_append(hdr, batches),
                   want_k, copy_v, want_h, refs, offsets, timestamps, k_offs, k_data, k_valid, v_offs, v_data,
                   v_valid, v_refs, h_offs, hk_offs, hk_data, hv_offs, hv_data, hv_valid)

    cols: dict[str, pa.Array] = {"offset": pa.array(offsets), "timestamp": pa.array(timestamps)}
    if want_k:
        cols["key"] = _binary(pa.binary(), n, k_offs, k_data, k_valid)
    if refs:
        cols["value"] = pa.array(v_refs, VALUE_REF_TYPE, mask=~v_valid)
    elif want_v:
        cols["value"] = _binary(pa.binary(), n, v_offs, v_data, v_valid)
    if want_h:
        hkeys = _binary(pa.string(), h, hk_offs, hk_data, None)
        try:
            hkeys.validate(full=True)
        except pa.ArrowInvalid:
            bad = int(batches[0])
            raise seg.error(CorruptRecordError, "a record header key is not valid UTF-8 (in this batch or one "
                                                "of the batches after it)", bad) from None
        hvals = _binary(pa.binary(), h, hv_offs, hv_data, hv_valid)
        items = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_TYPE))
        cols["headers"] = pa.Array.from_buffers(_HEADERS_TYPE, n, [None, pa.py_buffer(h_offs)], children=[items])
    cols.update(_v2_batch_columns(seg, batches, inp.counts, names))
    return cols


def _v2_batch_columns(seg: _Segment, batches: np.ndarray, counts: np.ndarray, names: set[str]) -> dict[str, pa.Array]:
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


def _decode_v2(seg: _Segment, batches: np.ndarray, names: set[str]) -> list[dict[str, pa.Array]]:
    return _decode_v2_records(seg, _v2_batches(seg, batches), names)


def _decode_v2_records(seg: _Segment, batches: np.ndarray, names: set[str]) -> list[dict[str, pa.Array]]:
    out: list[dict[str, pa.Array]] = []
    for inp in _v2_inputs(seg, batches):
        cols = _v2_columns(seg, inp, names)
        if cols is not None:
            out.append(cols)
            continue
        if len(inp.batches) == 1:
            raise seg.error(InvalidLengthError, "batch holds more than 2 GiB of keys, values or headers",
                            int(inp.batches[0]))
        half = len(inp.batches) // 2
        out += _decode_v2_records(seg, inp.batches[:half], names)
        out += _decode_v2_records(seg, inp.batches[half:], names)
    return out


# --------------------------------------------------------------------------------------------------
# Legacy magic 0 / 1
# --------------------------------------------------------------------------------------------------

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
class _LegacyMessage:
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _parse_legacy(mv: memoryview, pos: int, verify_crc: bool) -> tuple[_LegacyMessage, int]:
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
    return _LegacyMessage(offset, magic, attrs, ts, fields[0], fields[1]), msg_end


def _inner_messages(wrapper: _LegacyMessage, verify_crc: bool,
                    max_batch_bytes: int) -> list[tuple[int, int, int, _LegacyMessage]]:
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
    inner: list[_LegacyMessage] = []
    pos = 0
    while pos < len(raw):
        msg, pos = _parse_legacy(raw, pos, verify_crc)
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


def _decode_legacy(seg: _Segment, batches: np.ndarray, names: set[str]) -> list[dict[str, pa.Array]]:
    hdr = seg.hdr
    rows: dict[str, list] = {name: [] for name in (
        "offset", "timestamp", "timestamp_type", "key", "value", "batch_base_offset", "batch_last_offset",
        "batch_position", "batch_size", "batch_base_timestamp", "batch_max_timestamp", "magic", "codec")}
    for b in batches.tolist():
        pos = int(hdr.position[b])
        try:
            wrapper, _ = _parse_legacy(seg.mv[:pos + int(hdr.size[b])], pos, seg.verify_crc)
            codec = wrapper.attributes & LEGACY_CODEC_MASK
            if codec == 0:
                ts_type = _NO_TIMESTAMP_TYPE if wrapper.magic == 0 else int(
                    bool(wrapper.attributes & LEGACY_TIMESTAMP_TYPE))
                records = [(wrapper.offset, wrapper.timestamp, ts_type, wrapper)]
            else:
                records = _inner_messages(wrapper, seg.verify_crc, seg.max_batch_bytes)
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
        "headers": pa.array([[]] * n, type=_HEADERS_TYPE) if "headers" in names else None,
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


# --------------------------------------------------------------------------------------------------
# Assembling tables
# --------------------------------------------------------------------------------------------------


def _runs(hdr: BatchHeaders, batches: np.ndarray) -> Iterator[tuple[bool, np.ndarray]]:
    """Split batch indices into maximal runs of v2 (True) and legacy (False) batches."""
    if len(batches) == 0:
        return
    is_v2 = hdr.magic[batches] == 2
    if is_v2.all():
        yield True, batches
        return
    cuts = np.flatnonzero(is_v2[1:] != is_v2[:-1]) + 1
    for run in np.split(batches, cuts):
        yield bool(hdr.magic[run[0]] == 2), run


def _table(seg: _Segment, batches: np.ndarray, schema: pa.Schema) -> pa.Table:
    names = set(schema.names)
    parts: list[dict[str, pa.Array]] = []
    for is_v2, run in _runs(seg.hdr, batches):
        parts.extend(_decode_v2(seg, run, names) if is_v2 else _decode_legacy(seg, run, names))
    tables = []
    for cols in parts:
        n = len(cols["offset"])
        if "topic" in names:
            cols["topic"] = pa.repeat(pa.scalar(seg.topic, pa.string()), n)
        if "partition" in names:
            cols["partition"] = pa.array(np.full(n, seg.partition, np.int32))
        if "segment_base_offset" in names:
            cols["segment_base_offset"] = pa.array(np.full(n, seg.segment_base_offset, np.int64))
        tables.append(pa.Table.from_arrays([cols[name] for name in schema.names], schema=schema))
    if not tables:
        return schema.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _chunks(hdr: BatchHeaders, max_rows: int | None, max_bytes: int) -> Iterator[np.ndarray]:
    """Consecutive groups of whole batches holding about ``max_rows`` records and at most about
    ``max_bytes`` batch bytes, compressed batches weighing ``_COMPRESSED_WEIGHT`` times their size (a single
    larger batch forms its own group)."""
    n = len(hdr)
    if n == 0:
        return
    if max_rows is None and hdr.end - int(hdr.position[0]) <= max_bytes // _COMPRESSED_WEIGHT:
        yield np.arange(n, dtype=np.int64)  # within budget even if every batch were compressed: one chunk
        return
    rows = np.cumsum(np.maximum(hdr.record_count.astype(np.int64), 1))
    weight = np.where(hdr.codec != 0, _COMPRESSED_WEIGHT, 1)
    sizes = np.cumsum(hdr.size.astype(np.int64) * weight)
    start = 0
    while start < n:
        base_rows = rows[start - 1] if start else 0
        base_bytes = sizes[start - 1] if start else 0
        stop = int(np.searchsorted(sizes, base_bytes + max_bytes, side="right"))
        if max_rows is not None:
            stop = min(stop, int(np.searchsorted(rows, base_rows + max_rows, side="left")) + 1)
        stop = min(max(stop, start + 1), n)
        yield np.arange(start, stop, dtype=np.int64)
        start = stop


def _select(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table if table.schema.names == schema.names else table.select(schema.names)


def _with_offset(schema: pa.Schema) -> pa.Schema:
    """Assembly needs the offset column (it sizes the others); add it when the caller did not ask for it."""
    if "offset" in schema.names:
        return schema
    return pa.schema([RECORD_SCHEMA.field("offset"), *schema])


def decode_segment_bytes(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None = None, topic: str = "",
                         partition: int = -1, segment_base_offset: int | None = None,
                         columns: Sequence[str] | None = None, verify_crc: bool = True,
                         include_control: bool = True, allow_truncated_tail: bool = False,
                         max_batch_bytes: int | None = None) -> pa.Table:
    """Decode a whole segment's bytes into a table of RECORD_SCHEMA (or its projection on ``columns``).

    ``path`` only names the file in errors. ``segment_base_offset`` defaults to the first batch's base
    offset. ``include_control=False`` leaves out the records of control batches. A final batch cut short
    raises :class:`TruncatedBatchError` unless ``allow_truncated_tail``, which returns the records before it.
    A compressed batch that inflates past ``max_batch_bytes`` (default:
    :func:`segment_io.compression.max_batch_bytes`, 256 MiB unless ``SEGJOBS_MAX_BATCH_BYTES`` says otherwise)
    raises :class:`OversizedBatchError` having allocated no more than that.
    """
    schema = project(list(columns) if columns is not None else None)
    seg = _open(data, path=path, topic=topic, partition=partition, segment_base_offset=segment_base_offset,
                verify_crc=verify_crc, include_control=include_control,
                allow_truncated_tail=allow_truncated_tail, max_batch_bytes=max_batch_bytes)
    return _decode_all(seg, schema, mapped=data if isinstance(data, mmap.mmap) else None)


def decode_segment_and_headers(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None = None,
                               topic: str = "", partition: int = -1, segment_base_offset: int | None = None,
                               allow_truncated_tail: bool = False, value_refs: bool = False,
                               max_batch_bytes: int | None = None,
                               check_order: bool = True) -> tuple[pa.Table, BatchHeaders]:
    """:func:`decode_segment_bytes` (every column) and the headers of every batch it read, which are what
    :func:`segment_io.format.scan_batches` returns for the same bytes: one pass over the headers instead of
    two for callers that need both (a memory-mapped file's pages are then touched once).

    With ``value_refs`` and a segment of v2 batches only, values are not copied: the ``value`` column is of
    :data:`~segment_io.schema.VALUE_REF_TYPE` (where each value lies in ``data``; null for a tombstone), and
    the encoder, given ``data`` among its ``sources``, copies each value it writes straight from there (see
    :func:`segment_io.encode.encode_batches`). A segment holding legacy batches is decoded with copied values.
    ``max_batch_bytes`` as for :func:`decode_segment_bytes`. ``check_order=False`` is for bytes that are several
    segments back to back (whose offsets restart at each one): the caller checks the order within each."""
    seg = _open(data, path=path, topic=topic, partition=partition, segment_base_offset=segment_base_offset,
                verify_crc=True, include_control=True, allow_truncated_tail=allow_truncated_tail,
                max_batch_bytes=max_batch_bytes, check_order=check_order)
    seg.value_refs = value_refs and bool(np.all(seg.hdr.magic == 2))
    schema = _RECORD_REF_SCHEMA if seg.value_refs else RECORD_SCHEMA
    table = _decode_all(seg, schema, mapped=data if isinstance(data, mmap.mmap) else None)
    return table, seg.hdr


def _decode_all(seg: _Segment, schema: pa.Schema, mapped: mmap.mmap | None = None) -> pa.Table:
    """Every record of ``seg``, chunk by chunk. When the bytes are a memory-mapped file (``mapped``), the pages of
    each decoded chunk are given back as it goes (the table holds copies), so a segment's pages and its decoded
    rows are not both resident in full."""
    full = _with_offset(schema)
    tables = []
    for chunk in _chunks(seg.hdr, None, _CHUNK_BYTES):
        tables.append(_table(seg, chunk, full))
        if mapped is not None and len(chunk):
            end = int(seg.hdr.position[chunk[-1]] + seg.hdr.size[chunk[-1]])
            release_mapped_pages(mapped, int(seg.hdr.position[chunk[0]]), end)
    if not tables:
        return schema.empty_table()
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return _select(table, schema)


def _iter_decoded(seg: _Segment, schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
    full = _with_offset(schema)
    for chunk in _chunks(seg.hdr, batch_rows, _CHUNK_BYTES):
        table = _select(_table(seg, chunk, full), schema)
        if table.num_rows:
            yield from table.combine_chunks().to_batches(max_chunksize=None)


# --------------------------------------------------------------------------------------------------
# Key hashes (first compaction pass)
# --------------------------------------------------------------------------------------------------


def _key_hash_v2(seg: _Segment, batches: np.ndarray) -> list[pa.Table]:
    return [_key_hash_input(seg, inp) for inp in _v2_inputs(seg, _v2_batches(seg, batches))]


def _key_hash_input(seg: _Segment, inp: _V2Input) -> pa.Table:
    hdr = seg.hdr
    totals = _scan(seg, inp)
    n = int(totals[K.TOT_RECORDS])
    b = inp.batches
    out = {name: np.empty(n, dtype) for name, dtype in (
        ("offset", np.int64), ("timestamp", np.int64), ("key_hash_hi", np.int64), ("key_hash_lo", np.int64),
        ("key_is_null", np.bool_), ("value_is_null", np.bool_), ("control_type", np.int16))}
    err = np.zeros(5, dtype=np.int64)
    control = (hdr.attributes[b] & ATTR_CONTROL) != 0
    if not K.hash_records(seg.arr, inp.dec, inp.src, inp.rstart, inp.counts, hdr.base_offset[b],
                          hdr.base_timestamp[b], hdr.max_timestamp[b], _log_append(hdr, b), control,
                          out["offset"], out["timestamp"], out["key_hash_hi"], out["key_hash_lo"],
                          out["key_is_null"], out["value_is_null"], out["control_type"], err):
        _raise_kernel_error(seg, inp, err)
    counts = inp.counts
    attrs = hdr.attributes[b]
    repeated = {
        "batch_base_offset": hdr.base_offset[b], "batch_last_offset": hdr.last_offset[b],
        "transactional": (attrs & ATTR_TRANSACTIONAL) != 0, "control": control,
        "producer_id": hdr.producer_id[b], "producer_epoch": hdr.producer_epoch[b],
        "batch_max_timestamp": hdr.max_timestamp[b], "magic": hdr.magic[b],
    }
    cols: dict[str, pa.Array] = {name: arrow_array(values, _KEY_HASH_TYPES[name]) for name, values in out.items()}
    for name, values in repeated.items():
        cols[name] = arrow_array(np.repeat(values, counts), _KEY_HASH_TYPES[name])
    cols["delete_horizon_ms"] = _horizons(attrs, hdr.base_timestamp[b], counts)
    return pa.Table.from_arrays([cols[name] for name in KEY_HASH_SCHEMA.names], schema=KEY_HASH_SCHEMA)


def _key_hash_legacy(seg: _Segment, batches: np.ndarray) -> pa.Table:
    # Legacy message sets are rare (old archives) and decoded in Python anyway: hash the decoded keys.
    names = {"offset", "timestamp", "key", "value", "batch_base_offset", "batch_last_offset",
             "batch_max_timestamp", "magic"}
    (cols,) = _decode_legacy(seg, batches, names)
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


def decode_key_hashes_bytes(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None = None,
                            verify_crc: bool = True, include_control: bool = True,
                            allow_truncated_tail: bool = False, max_batch_bytes: int | None = None) -> pa.Table:
    """The first compaction pass's view of a segment (KEY_HASH_SCHEMA): offsets, 128-bit key hashes (see
    :mod:`segment_io.hashing`), null flags, timestamps and batch flags, without materialising keys or
    values. Control records carry their control type (0 abort, 1 commit) from the record key.
    ``max_batch_bytes`` as for :func:`decode_segment_bytes`."""
    seg = _open(data, path=path, topic="", partition=-1, segment_base_offset=None, verify_crc=verify_crc,
                include_control=include_control, allow_truncated_tail=allow_truncated_tail,
                max_batch_bytes=max_batch_bytes)
    tables = []
    for chunk in _chunks(seg.hdr, None, _CHUNK_BYTES):
        for is_v2, run in _runs(seg.hdr, chunk):
            tables.extend(_key_hash_v2(seg, run) if is_v2 else [_key_hash_legacy(seg, run)])
        if isinstance(data, mmap.mmap) and len(chunk):  # pages read: not kept resident (see _decode_all)
            release_mapped_pages(data, int(seg.hdr.position[chunk[0]]),
                                 int(seg.hdr.position[chunk[-1]] + seg.hdr.size[chunk[-1]]))
    if not tables:
        return KEY_HASH_SCHEMA.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


# --------------------------------------------------------------------------------------------------
# CRC verification (segjobs dump --verify)
# --------------------------------------------------------------------------------------------------


def verify_segment_crcs(data: bytes | bytearray | memoryview, *, path: str | None = None,
                        max_batch_bytes: int | None = None) -> list[CorruptRecordError]:
    """Every CRC problem of a segment, without stopping at the first: one :class:`CrcMismatchError` per
    bad batch (for legacy compressed wrappers also per bad inner message, decompressing the wrapper within
    ``max_batch_bytes`` as decoding does), plus a :class:`TruncatedBatchError` for a cut-short tail. A framing
    error that makes the rest of the file unreadable (bad magic, impossible size) is reported last and ends
    the scan."""
    mv, arr = _as_bytes(data)
    problems: list[CorruptRecordError] = []
    framing: CorruptRecordError | None = None
    try:
        hdr = scan_batches(mv, path=path, allow_truncated_tail=True)
    except CorruptRecordError as exc:
        framing = exc
        # the batches before the bad framing are still worth checking
        hdr = scan_batches(mv[:exc.position or 0], path=path, allow_truncated_tail=True)
    seg = _Segment(mv, arr, hdr, path, "", -1, 0, True, True, compression.max_batch_bytes(max_batch_bytes))
    for b in range(len(hdr)):
        try:
            if hdr.magic[b] == 2:
                _check_v2_crcs(seg, np.array([b]))
            else:
                pos = int(hdr.position[b])
                wrapper, _ = _parse_legacy(mv[:pos + int(hdr.size[b])], pos, True)
                if wrapper.attributes & LEGACY_CODEC_MASK:
                    _inner_messages(wrapper, True, seg.max_batch_bytes)
        except CrcMismatchError as exc:
            problems.append(exc if exc.path is not None else seg.error(CrcMismatchError, exc.detail, b))
        except CorruptRecordError:
            continue  # not a CRC problem: decoding reports it
    if framing is not None:
        problems.append(framing)
    elif hdr.truncated_tail:
        problems.append(TruncatedBatchError(f"last batch is cut short: {hdr.truncated_tail} bytes remain",
                                            path=path, position=len(mv) - hdr.truncated_tail))
    return problems


#: The name :func:`segment_io.format.scan_batches` refers to.
verify_crcs = verify_segment_crcs


# --------------------------------------------------------------------------------------------------
# Files and URIs
# --------------------------------------------------------------------------------------------------


def _location(uri: str, topic: str | None, partition: int | None) -> tuple[str, int, int | None]:
    """Topic and partition (from the parent directory unless given) and the base offset in the file name."""
    name = posixpath.basename(uri.rstrip("/"))
    parent = posixpath.basename(posixpath.dirname(uri.rstrip("/")).rstrip("/"))
    parsed = layout.parse_partition_dir(parent)
    if topic is None:
        topic = parsed[0] if parsed else ""
    if partition is None:
        partition = parsed[1] if parsed else -1
    seg_file = layout.parse_segment_file(name)
    return topic, partition, seg_file[0] if seg_file else None


@contextmanager
def _file_bytes(path_or_uri: str | Path,
                storage: "Storage | None") -> Iterator[tuple[bytes | memoryview | mmap.mmap, str]]:
    """A segment file's bytes while the block runs: read through ``storage`` when given, else a local file
    memory-mapped (decoding copies what it keeps, so the file is not first copied whole into fresh memory,
    which cost a third of the time of a read) and an S3 object read."""
    uri = str(path_or_uri)
    if storage is not None:
        yield storage.read(uri), uri
        return
    from segment_io.storage import open_storage

    with open_storage(uri).read_mapped(uri) as data:
        yield data, uri


def _open_file(data: bytes | memoryview | mmap.mmap, uri: str, *, topic: str | None,
               partition: int | None, verify_crc: bool, include_control: bool,
               allow_truncated_tail: bool, max_batch_bytes: int | None) -> _Segment:
    topic, partition, base = _location(uri, topic, partition)
    return _open(data, path=uri, topic=topic, partition=partition, segment_base_offset=base,
                 verify_crc=verify_crc, include_control=include_control, allow_truncated_tail=allow_truncated_tail,
                 max_batch_bytes=max_batch_bytes)


def read_segment(path_or_uri: str | Path, columns: Sequence[str] | None = None, *,
                 storage: "Storage | None" = None, topic: str | None = None, partition: int | None = None,
                 verify_crc: bool = True, include_control: bool = True,
                 allow_truncated_tail: bool = False, max_batch_bytes: int | None = None) -> pa.Table:
    """Read one ``.log`` segment (local path or ``s3://`` URI) into a RECORD_SCHEMA table.

    ``topic``/``partition`` default to what the parent directory's name says (``""``/``-1`` when it is not a
    partition directory); ``segment_base_offset`` comes from the file name (else the first batch). Other
    options as for :func:`decode_segment_bytes`.
    """
    schema = project(list(columns) if columns is not None else None)
    with _file_bytes(path_or_uri, storage) as (data, uri):
        seg = _open_file(data, uri, topic=topic, partition=partition, verify_crc=verify_crc,
                         include_control=include_control, allow_truncated_tail=allow_truncated_tail,
                         max_batch_bytes=max_batch_bytes)
        table = _decode_all(seg, schema, mapped=data if isinstance(data, mmap.mmap) else None)
        del seg  # its views of the mapping go before the mapping is closed (the table holds copies)
    return table


def iter_segment(path_or_uri: str | Path, columns: Sequence[str] | None = None, *, batch_rows: int = 65536,
                 storage: "Storage | None" = None, topic: str | None = None, partition: int | None = None,
                 verify_crc: bool = True, include_control: bool = True,
                 allow_truncated_tail: bool = False, max_batch_bytes: int | None = None) -> Iterator[pa.RecordBatch]:
    """Stream a segment as Arrow record batches of whole Kafka batches, about ``batch_rows`` rows each
    (a Kafka batch is never split), without building the whole table. Same options as :func:`read_segment`."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    schema = project(list(columns) if columns is not None else None)
    with _file_bytes(path_or_uri, storage) as (data, uri):
        seg = _open_file(data, uri, topic=topic, partition=partition, verify_crc=verify_crc,
                         include_control=include_control, allow_truncated_tail=allow_truncated_tail,
                         max_batch_bytes=max_batch_bytes)
        yield from _iter_decoded(seg, schema, batch_rows)  # every batch yielded holds copies
        del seg


def iter_segment_bytes(data: bytes | bytearray | memoryview, columns: Sequence[str] | None = None, *,
                       batch_rows: int = 65536, path: str | None = None, topic: str = "", partition: int = -1,
                       segment_base_offset: int | None = None, verify_crc: bool = True,
                       include_control: bool = True, allow_truncated_tail: bool = False,
                       max_batch_bytes: int | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`iter_segment` on bytes already in memory (options as :func:`decode_segment_bytes`)."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    schema = project(list(columns) if columns is not None else None)
    seg = _open(data, path=path, topic=topic, partition=partition, segment_base_offset=segment_base_offset,
                verify_crc=verify_crc, include_control=include_control, allow_truncated_tail=allow_truncated_tail,
                max_batch_bytes=max_batch_bytes)
    yield from _iter_decoded(seg, schema, batch_rows)


def read_key_hashes(path_or_uri: str | Path, *, storage: "Storage | None" = None, verify_crc: bool = True,
                    include_control: bool = True, allow_truncated_tail: bool = False,
                    max_batch_bytes: int | None = None) -> pa.Table:
    """:func:`decode_key_hashes_bytes` of a segment file or ``s3://`` object."""
    with _file_bytes(path_or_uri, storage) as (data, uri):
        return decode_key_hashes_bytes(data, path=uri, verify_crc=verify_crc, include_control=include_control,
                                       allow_truncated_tail=allow_truncated_tail, max_batch_bytes=max_batch_bytes)


__all__ = [
    "control_record_type", "decode_segment_and_headers", "decode_segment_bytes", "decode_key_hashes_bytes",
    "hash_keys", "iter_segment",
    "iter_segment_bytes", "read_key_hashes", "read_segment", "verify_crcs", "verify_segment_crcs",
]
