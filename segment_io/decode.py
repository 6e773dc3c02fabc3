"""Segment decoder: Kafka ``.log`` bytes -> Arrow tables of :data:`segment_io.schema.RECORD_SCHEMA`.

Framing comes from :func:`segment_io.format.scan_batches` (one step per batch). This module cuts a segment into
chunks and runs of one format, and assembles their columns into tables: records of RecordBatch v2 are decoded by
:mod:`segment_io.decode_v2` (numba kernels, no Python object per record), legacy magic 0/1 message sets (old
archives) by :mod:`segment_io.decode_legacy` (message by message in Python).

Every failure raises a subclass of :class:`~segment_io.errors.CorruptRecordError` naming the file, the
byte position of the failing batch and its base offset.
"""

from __future__ import annotations

import mmap
import posixpath
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np
import pyarrow as pa

from segment_io import compression, layout
from segment_io.decode_input import CHUNK_BYTES, SegmentBytes, as_bytes, open_segment
from segment_io.decode_legacy import decode_legacy, inner_messages, key_hash_legacy, parse_legacy
from segment_io.decode_v2 import control_record_type, crc_mismatch, decode_v2, key_hash_v2, v2_crcs
from segment_io.errors import CorruptRecordError, CrcMismatchError
from segment_io.format import LEGACY_CODEC_MASK, BatchHeaders, cut_short_error, scan_batches
from segment_io.hashing import hash_keys
from segment_io.payloads import KeptPayloads
from segment_io.schema import KEY_HASH_SCHEMA, RECORD_SCHEMA, project, with_value_refs
from segment_io.storage.base import release_mapped_pages

if TYPE_CHECKING:
    from segment_io.storage.base import Storage

#: A compressed batch weighs this many times its size in a chunk's budget (see
#: :data:`segment_io.decode_input.CHUNK_BYTES`).
_COMPRESSED_WEIGHT = 8
_RECORD_REF_SCHEMA = with_value_refs(RECORD_SCHEMA)


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


def _table(seg: SegmentBytes, batches: np.ndarray, schema: pa.Schema) -> pa.Table:
    names = set(schema.names)
    parts: list[dict[str, pa.Array]] = []
    for is_v2, run in _runs(seg.hdr, batches):
        parts.extend(decode_v2(seg, run, names) if is_v2 else decode_legacy(seg, run, names))
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
    seg = open_segment(data, path=path, topic=topic, partition=partition, segment_base_offset=segment_base_offset,
                verify_crc=verify_crc, include_control=include_control,
                allow_truncated_tail=allow_truncated_tail, max_batch_bytes=max_batch_bytes)
    return _decode_all(seg, schema, mapped=data if isinstance(data, mmap.mmap) else None)


def decode_segment_and_headers(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None = None,
                               topic: str = "", partition: int = -1, segment_base_offset: int | None = None,
                               allow_truncated_tail: bool = False, value_refs: bool = False,
                               max_batch_bytes: int | None = None, check_order: bool = True,
                               payloads: KeptPayloads | None = None) -> tuple[pa.Table, BatchHeaders]:
    """:func:`decode_segment_bytes` (every column) and the headers of every batch it read, which are what
    :func:`segment_io.format.scan_batches` returns for the same bytes: one pass over the headers instead of
    two for callers that need both (a memory-mapped file's pages are then touched once).

    With ``value_refs`` and a segment of v2 batches only, values are not copied: the ``value`` column is of
    :data:`~segment_io.schema.VALUE_REF_TYPE` (where each value lies in ``data``; null for a tombstone), and
    the encoder, given ``data`` among its ``sources``, copies each value it writes straight from there (see
    :func:`segment_io.encode.encode_batches`). A segment holding legacy batches is decoded with copied values.
    ``max_batch_bytes`` as for :func:`decode_segment_bytes`. ``check_order=False`` is for bytes that are several
    segments back to back (whose offsets restart at each one): the caller checks the order within each.
    ``payloads``, with ``value_refs``: where the decompressed payloads of compressed batches are left for the
    encoder (within its budget), which then copies their kept values without decompressing them again."""
    seg = open_segment(data, path=path, topic=topic, partition=partition, segment_base_offset=segment_base_offset,
                verify_crc=True, include_control=True, allow_truncated_tail=allow_truncated_tail,
                max_batch_bytes=max_batch_bytes, check_order=check_order)
    seg.value_refs = value_refs and bool(np.all(seg.hdr.magic == 2))
    seg.payloads = payloads if seg.value_refs else None
    schema = _RECORD_REF_SCHEMA if seg.value_refs else RECORD_SCHEMA
    table = _decode_all(seg, schema, mapped=data if isinstance(data, mmap.mmap) else None)
    return table, seg.hdr


def _decode_all(seg: SegmentBytes, schema: pa.Schema, mapped: mmap.mmap | None = None) -> pa.Table:
    """Every record of ``seg``, chunk by chunk. When the bytes are a memory-mapped file (``mapped``), the pages of
    each decoded chunk are given back as it goes (the table holds copies), so a segment's pages and its decoded
    rows are not both resident in full."""
    full = _with_offset(schema)
    tables = []
    for chunk in _chunks(seg.hdr, None, CHUNK_BYTES):
        tables.append(_table(seg, chunk, full))
        if mapped is not None and len(chunk):
            end = int(seg.hdr.position[chunk[-1]] + seg.hdr.size[chunk[-1]])
            release_mapped_pages(mapped, int(seg.hdr.position[chunk[0]]), end)
    if not tables:
        return schema.empty_table()
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return _select(table, schema)


def _iter_decoded(seg: SegmentBytes, schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
    full = _with_offset(schema)
    for chunk in _chunks(seg.hdr, batch_rows, CHUNK_BYTES):
        table = _select(_table(seg, chunk, full), schema)
        if table.num_rows:
            yield from table.combine_chunks().to_batches(max_chunksize=None)




def decode_key_hashes_bytes(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None = None,
                            verify_crc: bool = True, include_control: bool = True,
                            allow_truncated_tail: bool = False, max_batch_bytes: int | None = None) -> pa.Table:
    """The first compaction pass's view of a segment (KEY_HASH_SCHEMA): offsets, 128-bit key hashes (see
    :mod:`segment_io.hashing`), null flags, timestamps and batch flags, without materialising keys or
    values. Control records carry their control type (0 abort, 1 commit) from the record key.
    ``max_batch_bytes`` as for :func:`decode_segment_bytes`."""
    seg = open_segment(data, path=path, topic="", partition=-1, segment_base_offset=None, verify_crc=verify_crc,
                include_control=include_control, allow_truncated_tail=allow_truncated_tail,
                max_batch_bytes=max_batch_bytes)
    tables = []
    for chunk in _chunks(seg.hdr, None, CHUNK_BYTES):
        for is_v2, run in _runs(seg.hdr, chunk):
            tables.extend(key_hash_v2(seg, run) if is_v2 else [key_hash_legacy(seg, run)])
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
    mv, arr = as_bytes(data)
    problems: list[CorruptRecordError] = []
    framing: CorruptRecordError | None = None
    try:
        hdr = scan_batches(mv, path=path, allow_truncated_tail=True)
    except CorruptRecordError as exc:
        framing = exc
        # the batches before the bad framing are still worth checking
        hdr = scan_batches(mv[:exc.position or 0], path=path, allow_truncated_tail=True)
    seg = SegmentBytes(mv, arr, hdr, path, "", -1, 0, True, True, compression.max_batch_bytes(max_batch_bytes))
    v2 = np.flatnonzero(hdr.magic == 2)
    actual = dict(zip(v2.tolist(), v2_crcs(seg, v2).tolist()))  # every v2 batch's CRC in one call
    for b in range(len(hdr)):
        try:
            if hdr.magic[b] == 2:
                if actual[b] != hdr.crc[b]:
                    problems.append(crc_mismatch(seg, b, actual[b]))
            else:
                pos = int(hdr.position[b])
                wrapper, _ = parse_legacy(mv[:pos + int(hdr.size[b])], pos, True)
                if wrapper.attributes & LEGACY_CODEC_MASK:
                    inner_messages(wrapper, True, seg.max_batch_bytes)
        except CrcMismatchError as exc:
            problems.append(exc if exc.path is not None else seg.error(CrcMismatchError, exc.detail, b))
        except CorruptRecordError:
            continue  # not a CRC problem: decoding reports it
    if framing is not None:
        problems.append(framing)
    elif hdr.truncated_tail:
        problems.append(cut_short_error(mv, hdr.truncated_tail, path))
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
               allow_truncated_tail: bool, max_batch_bytes: int | None) -> SegmentBytes:
    topic, partition, base = _location(uri, topic, partition)
    return open_segment(data, path=uri, topic=topic, partition=partition, segment_base_offset=base,
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
    seg = open_segment(data, path=path, topic=topic, partition=partition, segment_base_offset=segment_base_offset,
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

