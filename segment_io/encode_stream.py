"""Encode a segment part by part, so that no more than one part's bytes exist at a time.

:func:`iter_encoded_parts` cuts the rows at batch boundaries into parts of about ``part_bytes`` of keys and
values, encodes each part with the encoder of :mod:`segment_io.encode` and hands it out before encoding the
next. Every batch is encoded on its own (header fields, offsets and timestamp deltas, CRC and compression
depend only on the batch's rows), so the parts laid end to end are byte for byte what
:func:`segment_io.encode.encode_batches` returns for the whole input; only the order in which some invalid
inputs are reported can differ (the first invalid part wins).

A segment writer appends each part to a staged file (:meth:`Storage.open_write`: a temporary file on local
disk, a multipart upload on S3) and keeps only the parts' headers, from which the indexes are built; its
memory is then bounded by the part size, not by the segment size.
"""

from __future__ import annotations

import dataclasses
import mmap
from typing import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from segment_io.encode import (
    _EMPTY_INPUT,
    _MAGIC_V2,
    _RECORD_INPUT,
    EncodedSegment,
    _as_table,
    _check_codec,
    _check_refs,
    _encode_table,
    input_columns,
    input_schema,
)
from segment_io.errors import InvalidRecordsError, UsageError
from segment_io.format import HEADER_ARRAYS, BatchHeaders
from segment_io.payloads import KeptPayloads
from segment_io.schema import (
    BATCH_SCHEMA,
    RECORD_SCHEMA,
    has_value_refs,
    int64_or_zero,
    ref_lengths,
    ref_positions,
    validity,
)
from segment_io.storage.base import release_mapped_pages

#: Keys and values per encoded part. Large enough that the per-call cost of the encoder (planning, numba
#: dispatch) is amortised over thousands of records, small enough to be a fixed allowance next to a segment.
DEFAULT_PART_BYTES = 8 << 20

#: What a record costs on the wire beyond its key and value (length, attributes, varint deltas, header
#: count): only used to size parts, so an estimate is enough.
_RECORD_OVERHEAD_ESTIMATE = 16


def _int_column(chunk: pa.RecordBatch, name: str) -> np.ndarray:
    return int64_or_zero(chunk.column(name))


def _byte_lengths(arr: pa.Array) -> np.ndarray:
    """Each entry's bytes (0 for a null) of a binary or string array, from its offsets (no compute call)."""
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    if not large and not (pa.types.is_binary(arr.type) or pa.types.is_string(arr.type)):
        raise TypeError(f"byte lengths of a {arr.type} column")
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64)
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if large else np.int32, count=arr.offset + n + 1)
    lengths = np.diff(offsets[arr.offset:]).astype(np.int64)
    if arr.null_count:  # a null's slot need not be empty
        lengths[~validity(arr)] = 0
    return lengths


def _value_bytes(chunk: pa.RecordBatch) -> np.ndarray:
    """Each row's value bytes. A value reference carries its value's length where the decoder read it; where it
    does not, a row's distance to the next row's reference in the same source batch stands for it (a record's
    size; 0 for a batch's last row): parts only need an estimate."""
    if not has_value_refs(chunk.schema):
        return _byte_lengths(chunk.column("value"))
    refs = _int_column(chunk, "value")
    valid = validity(chunk.column("value"))
    carried = ref_lengths(refs)
    if bool(np.all((carried >= 0) | ~valid)):
        return np.where(valid, carried, 0)
    positions = ref_positions(refs)
    bbo = _int_column(chunk, "batch_base_offset")
    seg = _int_column(chunk, "segment_base_offset")
    est = np.zeros(len(refs), np.int64)
    if len(refs) > 1:
        same = (bbo[1:] == bbo[:-1]) & (seg[1:] == seg[:-1]) & valid[1:] & valid[:-1]
        est[:-1] = np.where(same, np.maximum(positions[1:] - positions[:-1], 0), 0)
    return est


def _batch_starts(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers where a new output batch starts (where ``segment_base_offset`` or ``batch_base_offset``
    changes, as the encoder groups rows) and the estimated wire bytes of all rows before each of them.

    Works chunk by chunk, so the temporaries are one chunk's columns; the result has one entry per batch."""
    starts: list[np.ndarray] = []
    before: list[np.ndarray] = []
    row0 = 0
    bytes0 = 0
    prev: tuple[int, int] | None = None
    for chunk in table.to_batches():
        n = chunk.num_rows
        if n == 0:
            continue
        seg = _int_column(chunk, "segment_base_offset")
        bbo = _int_column(chunk, "batch_base_offset")
        boundary = np.empty(n, dtype=np.bool_)
        boundary[0] = prev is None or prev != (int(seg[0]), int(bbo[0]))
        boundary[1:] = (seg[1:] != seg[:-1]) | (bbo[1:] != bbo[:-1])
        sizes = _byte_lengths(chunk.column("key")) + _value_bytes(chunk) + _RECORD_OVERHEAD_ESTIMATE
        cum = np.zeros(n, dtype=np.int64)
        np.cumsum(sizes[:-1], out=cum[1:])
        at = np.flatnonzero(boundary)
        starts.append(at + row0)
        before.append(cum[at] + bytes0)
        row0 += n
        bytes0 += int(cum[-1] + sizes[-1])
        prev = (int(seg[-1]), int(bbo[-1]))
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(before)


def _part_bounds(table: pa.Table, part_bytes: int) -> list[tuple[int, int]]:
    """Row ranges ``[start, end)`` of the parts: whole batches, each part starting at the first batch that
    begins at or after the next multiple of ``part_bytes`` (a batch larger than that is a part of its own)."""
    n = table.num_rows
    starts, before = _batch_starts(table)
    if n == 0 or len(starts) == 0:
        return [(0, n)]
    cuts = [0]
    next_cut = part_bytes
    # batches are few next to rows, and a part holds many: a loop over parts with a binary search each
    while True:
        i = int(np.searchsorted(before, next_cut, side="left"))
        if i >= len(starts):
            break
        if i <= cuts[-1]:
            i = cuts[-1] + 1
            if i >= len(starts):
                break
        cuts.append(i)
        next_cut = int(before[i]) + part_bytes
    rows = [int(starts[i]) for i in cuts] + [n]
    return list(zip(rows[:-1], rows[1:]))


def _first_base(part: pa.Table) -> int:
    """Base offset of a part's first batch as the encoder plans it (legacy rows: the first record's offset)."""
    magic = part.column("magic")[0].as_py()
    if magic is not None and magic < _MAGIC_V2:
        return int(part.column("offset")[0].as_py())
    return int(part.column("batch_base_offset")[0].as_py())


def iter_encoded_parts(records: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], *,
                       empty_batches: pa.Table | None = None, codec: int | str | None = None,
                       sources: Mapping[int, bytes | memoryview] | None = None,
                       part_bytes: int = DEFAULT_PART_BYTES,
                       payloads: KeptPayloads | None = None,
                       max_batch_bytes: int | None = None) -> Iterator[EncodedSegment]:
    """The encoding of ``records`` (see :func:`segment_io.encode.encode_batches` for the arguments) as
    consecutive parts of whole batches, about ``part_bytes`` each; every part's header positions are
    relative to its own first byte. Concatenated, the parts are the bytes ``encode_batches`` returns.

    Yields at least one part (possibly empty). Checks that span parts (record offsets increasing, batches
    not overlapping) are made as the parts are produced, so an invalid input raises
    :class:`~segment_io.errors.InvalidRecordsError` after some parts were handed out: a writer must not
    publish what it wrote before the generator is exhausted.
    """
    if part_bytes <= 0:
        raise UsageError(f"part_bytes must be positive, got {part_bytes}")
    override = _check_codec(codec)
    table = input_columns(records, _RECORD_INPUT, RECORD_SCHEMA)
    target = input_schema(table, _RECORD_INPUT, RECORD_SCHEMA)
    _check_refs(table, sources)
    empties = None
    if empty_batches is not None and empty_batches.num_rows:
        empties = _as_table(empty_batches, _EMPTY_INPUT, BATCH_SCHEMA)
    bounds = _part_bounds(table, part_bytes)
    # header-only batches go to the part whose first batch base offset they follow, as a sort of all the
    # batches by base offset would place them (ties: after the records batch, as the encoder's stable sort)
    owner = None
    if empties is not None:
        firsts = np.array([_first_base(table.slice(a, 1)) for a, _ in bounds[1:]], dtype=np.int64)
        owner = np.searchsorted(firsts, empties.column("batch_base_offset").to_numpy(), side="right")
    prev_offset: int | None = None
    prev_last: int | None = None
    released: dict[int, int] = {}
    for k, (a, b) in enumerate(bounds):
        part = table.slice(a, b - a)
        if not part.schema.equals(target):
            part = part.cast(target)  # per part: casting the whole input would copy all of it at once
        part = part.combine_chunks()
        if prev_offset is not None and part.num_rows:
            first = int(part.column("offset")[0].as_py())
            if first <= prev_offset:
                raise InvalidRecordsError(f"record offsets must increase strictly: {first} follows "
                                          f"{prev_offset}", offset=first)
        part_empties = None
        if owner is not None and empties is not None:
            mask = owner == k
            if mask.any():
                part_empties = empties.filter(pa.array(mask))
        encoded = _encode_table(part, part_empties, override, sources, payloads=payloads,
                                max_batch_bytes=max_batch_bytes)
        headers = encoded.headers
        if prev_last is not None and len(headers) and int(headers.base_offset[0]) <= prev_last:
            base = int(headers.base_offset[0])
            raise InvalidRecordsError(f"batch with base offset {base} overlaps the previous batch, which ends "
                                      f"at offset {prev_last}", offset=base)
        if part.num_rows:
            prev_offset = int(part.column("offset")[part.num_rows - 1].as_py())
        if len(headers):
            prev_last = int(headers.last_offset[-1])
        yield encoded
        del encoded
        if sources:
            _release_sources_before(part, sources, released)


def _release_sources_before(part: pa.Table, sources: Mapping[int, bytes | memoryview],
                            released: dict[int, int]) -> None:
    """Once a part is written, the pages of its source segments up to its last batch are not needed again
    (batches come in file order): a memory-mapped source gives them back, so reading the sources for verbatim
    copies does not make a whole segment resident. A later read of them would only fault them back in.

    ``released`` holds, per source segment, where the pages already given back end (a page boundary): each part
    releases only the pages after it, so the parts of a segment walk its mapping once, not once each."""
    if part.num_rows == 0:
        return
    segs = np.asarray(part.column("segment_base_offset").to_numpy(), dtype=np.int64)
    pos = int64_or_zero(part.column("batch_position"))
    # one reduction per run of rows from one segment (rows are in offset order: a segment's rows are one run)
    runs = np.flatnonzero(np.concatenate(([True], segs[1:] != segs[:-1])))
    for seg, furthest in zip(segs[runs].tolist(), np.maximum.reduceat(pos, runs).tolist()):
        src = sources.get(seg)
        start = released.get(seg, 0)
        if src is not None and furthest > start:
            release_mapped_pages(src, start, furthest)
            released[seg] = max(start, furthest // mmap.PAGESIZE * mmap.PAGESIZE)


class HeaderCollector:
    """Headers of consecutive parts, positions shifted to be relative to the first part's first byte."""

    def __init__(self) -> None:
        self._parts: list[BatchHeaders] = []
        self.size = 0

    def add(self, part: EncodedSegment) -> None:
        headers = part.headers
        if self.size:
            headers = dataclasses.replace(headers, position=headers.position + self.size)
        self._parts.append(headers)
        self.size += part.size

    def headers(self) -> BatchHeaders:
        """All batches' headers, in order."""
        if len(self._parts) == 1:
            return self._parts[0]
        cols = {name: np.concatenate([getattr(h, name) for h in self._parts]) for name in HEADER_ARRAYS}
        return BatchHeaders(**cols)  # type: ignore[arg-type]  # every field but truncated_tail


def encoded_size(records: pa.Table | Iterable[pa.RecordBatch], *, empty_batches: pa.Table | None = None,
                 codec: int | str | None = None, sources: Mapping[int, bytes | memoryview] | None = None,
                 part_bytes: int = DEFAULT_PART_BYTES, payloads: KeptPayloads | None = None,
                 max_batch_bytes: int | None = None) -> int:
    """Bytes the encoding of ``records`` takes, computed part by part (memory bounded by ``part_bytes``)."""
    return sum(p.size for p in iter_encoded_parts(records, empty_batches=empty_batches, codec=codec,
                                                  sources=sources, part_bytes=part_bytes, payloads=payloads,
                                                  max_batch_bytes=max_batch_bytes))


__all__ = ["DEFAULT_PART_BYTES", "HeaderCollector", "encoded_size", "iter_encoded_parts"]
