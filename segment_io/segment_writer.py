"""Write a segment: the ``.log`` from RECORD_SCHEMA rows, and the index files Kafka keeps beside it.

The ``.log`` is encoded and written part by part (:func:`segment_io.encode_stream.iter_encoded_parts`):
each part is appended to the staged file of :meth:`Storage.open_write` (local: a temporary file, fsync'd
and renamed at the end; S3: a multipart upload completed at the end) and dropped, so a writer holds one
part's bytes, never a whole segment. The ``.index`` and ``.timeindex`` are built from the batch headers the
encoder reports as it goes (no re-read of the bytes), by :func:`segment_io.index.build_offset_and_time_index`;
``.txnindex`` from the aborted transactions the caller knows. An error at any point (invalid rows, offsets
that do not fit the segment's base, a failed write) discards the staged ``.log``: no partial file appears
under its final name.

:func:`write_segments` writes the segments of several partitions from one table of their rows: one encode
over all of them (a small partition's segment costs the encoder's fixed work once per bin, not once per
partition), cut into one file each, every file what :func:`write_segment` writes for its rows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from segment_io.encode import _RECORD_INPUT, _check_refs, _encode_table, input_columns, input_schema
from segment_io.encode_stream import DEFAULT_PART_BYTES, HeaderCollector, iter_encoded_parts
from segment_io.errors import CorruptRecordError, InvalidRecordsError, UsageError
from segment_io.format import NO_TIMESTAMP, BatchHeaders
from segment_io.index import DEFAULT_INDEX_INTERVAL_BYTES, AbortedTxn, build_offset_and_time_index, encode_txn_index
from segment_io.layout import parse_segment_file, segment_file_name
from segment_io.payloads import KeptPayloads
from segment_io.schema import RECORD_SCHEMA
from segment_io.storage.base import Storage

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"


@dataclass(frozen=True)
class SegmentWriteResult:
    """What :func:`write_segment` wrote."""

    #: suffix (``.log``, ``.index``, ``.timeindex``, ``.txnindex``) -> path or URI written
    paths: dict[str, str]
    #: bytes of the ``.log``
    bytes: int
    batches: int
    records: int
    #: the segment's base offset (from its file name)
    base_offset: int
    #: last offset of the last batch; -1 for an empty segment
    last_offset: int
    #: largest batch max timestamp; -1 when no batch has one
    max_timestamp: int
    #: the written batches' headers, positions relative to the start of the file (the bytes themselves went
    #: to storage part by part and are not kept)
    headers: BatchHeaders = field(repr=False)

    @property
    def log_path(self) -> str:
        return self.paths[LOG_SUFFIX]


def segment_sibling(log_uri: str, suffix: str) -> str:
    """The path of ``log_uri``'s sibling with ``suffix``, keeping a transient suffix:
    ``.../00000000000000000042.log.cleaned`` -> ``.../00000000000000000042.index.cleaned``."""
    directory, sep, name = log_uri.rpartition("/")
    parsed = parse_segment_file(name)
    if parsed is None or parsed[1] != LOG_SUFFIX:
        raise UsageError(f"{log_uri}: not a segment log file name (expected <20-digit base offset>.log, "
                         "optionally followed by .cleaned, .swap or .deleted)")
    base, _, transient = parsed
    return f"{directory}{sep}{segment_file_name(base, suffix)}{transient}"


def _segment_base_offset(log_uri: str) -> int:
    parsed = parse_segment_file(log_uri.rpartition("/")[2])
    if parsed is None or parsed[1] != LOG_SUFFIX:
        segment_sibling(log_uri, LOG_SUFFIX)  # raises the UsageError naming the expected form
    assert parsed is not None
    return parsed[0]


def write_segment(table_or_batches: pa.Table | Iterable[pa.RecordBatch], path_or_uri: str, *,
                  storage: Storage | None = None, empty_batches: pa.Table | None = None,
                  codec: int | str | None = None, sources: Mapping[int, bytes | memoryview] | None = None,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, write_indexes: bool = True,
                  aborted_txns: Iterable[AbortedTxn] | None = None,
                  part_bytes: int = DEFAULT_PART_BYTES, durable: bool = True,
                  payloads: KeptPayloads | None = None, max_batch_bytes: int | None = None) -> SegmentWriteResult:
    """Encode ``table_or_batches`` (see :func:`segment_io.encode.encode_batches` for ``empty_batches``,
    ``codec`` and ``sources``) into the segment file ``path_or_uri`` and write its siblings.

    ``path_or_uri`` names the ``.log`` (``<20-digit base offset>.log``, optionally with a ``.cleaned`` /
    ``.swap`` suffix, which the siblings then carry too); its base offset is the one indexes are relative
    to. With ``write_indexes`` the ``.index`` and ``.timeindex`` Kafka would rebuild for these bytes are
    written; ``aborted_txns``, when given and non-empty, becomes the ``.txnindex`` (Kafka creates no
    ``.txnindex`` file for a segment without aborted transactions). ``storage`` defaults to the store
    :func:`segment_io.storage.open_storage` picks for the URI. ``part_bytes`` is how much of the input is
    encoded at a time (the writer's memory; the bytes written do not depend on it). ``durable=False`` writes
    every file without a sync: the caller makes them durable with one :meth:`Storage.barrier` over
    :attr:`SegmentWriteResult.paths` and their directory (a cleaning task does, once for a whole bin).
    ``payloads``: the decompressed payloads a decode left for the encoder, and ``max_batch_bytes`` the bound a
    payload decompressed again is held to (see :func:`segment_io.encode.encode_batches`).
    """
    segment_base = _segment_base_offset(path_or_uri)
    if storage is None:
        from segment_io.storage import open_storage

        storage = open_storage(path_or_uri)
    parts = iter_encoded_parts(table_or_batches, empty_batches=empty_batches, codec=codec, sources=sources,
                               part_bytes=part_bytes, payloads=payloads, max_batch_bytes=max_batch_bytes)
    # The first part is encoded before storage is touched: input the encoder rejects outright leaves no
    # directory behind.
    first = next(parts)
    collected = HeaderCollector()
    files: dict[str, bytes] = {}
    directory = path_or_uri.rpartition("/")[0]
    if directory:
        storage.makedirs(directory)
    with storage.open_write(path_or_uri, durable=durable, uncached=True) as stream:
        for part in itertools.chain([first], parts):
            part.write_to(stream)
            collected.add(part)
            del part  # its bytes are in the stream: let them go before the next part is encoded
        del first
        headers = collected.headers()
        # Built inside the block: offsets that do not fit the segment's base raise here and the staged
        # .log is discarded instead of published.
        if write_indexes:
            files.update(_index_files(headers, segment_base, index_interval_bytes))
        if aborted_txns is not None:
            entries = list(aborted_txns)
            if entries:
                files[TXN_INDEX_SUFFIX] = encode_txn_index(entries)

    paths = _write_siblings(storage, path_or_uri, files, durable)
    return _result(paths, collected.size, headers, segment_base)


def _index_files(headers: BatchHeaders, segment_base: int, index_interval_bytes: int) -> dict[str, bytes]:
    offset_index, time_index = build_offset_and_time_index(
        headers, segment_base_offset=segment_base, index_interval_bytes=index_interval_bytes)
    return {INDEX_SUFFIX: offset_index, TIME_INDEX_SUFFIX: time_index}


def _write_siblings(storage: Storage, log_uri: str, files: dict[str, bytes], durable: bool) -> dict[str, str]:
    """Write the ``.log``'s sibling files; every path written, the ``.log``'s included, by suffix."""
    paths = {LOG_SUFFIX: log_uri}
    for suffix, data in files.items():
        uri = segment_sibling(log_uri, suffix)
        storage.write_atomic(uri, data, durable=durable)
        paths[suffix] = uri
    return paths


def _result(paths: dict[str, str], size: int, headers: BatchHeaders, segment_base: int) -> SegmentWriteResult:
    n = len(headers)
    return SegmentWriteResult(
        paths=paths, bytes=size, batches=n, records=int(headers.record_count.sum(dtype=np.int64)),
        base_offset=segment_base, last_offset=int(headers.last_offset[-1]) if n else -1,
        max_timestamp=int(headers.max_timestamp.max()) if n else NO_TIMESTAMP, headers=headers,
    )


# --------------------------------------------------------------------------------------------------
# Several segments from one encode
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentSplit:
    """One segment :func:`write_segments` writes: where, and which rows of its input it holds."""

    #: the ``.log`` to write, named as for :func:`write_segment` (``<20-digit base offset>.log``, optionally
    #: followed by ``.cleaned`` or ``.swap``)
    uri: str
    #: the segment holds the rows ``records[row_start:row_end]``
    row_start: int
    row_end: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES


def write_segments(records: pa.Table, splits: Sequence[SegmentSplit], *, storage: Storage,
                   sources: Mapping[int, bytes | memoryview] | None = None,
                   durable: bool = True, payloads: KeptPayloads | None = None,
                   max_batch_bytes: int | None = None) -> list[SegmentWriteResult]:
    """Write one segment per split of ``records`` (RECORD_SCHEMA rows; values may be references into
    ``sources``, as for :func:`segment_io.encode.encode_batches`), encoding all of them at once.

    Result ``i``, and the files it names, are byte for byte what
    ``write_segment(records.slice(s.row_start, s.row_end - s.row_start), s.uri, storage=storage,
    sources=sources, index_interval_bytes=s.index_interval_bytes, durable=durable)`` gives for
    ``s = splits[i]``; but the encoder's fixed work (planning, checks, verbatim copies, the compiled kernel,
    laying out the bytes) is done once for all the rows, which is what makes a bin of small partitions cheap.

    The splits come in row order, each non-empty, none overlapping another (rows outside every split are not
    written). A split's rows are in offset order; the splits may be of different partitions, so offsets may
    start again at any split. ``sources`` is keyed by ``segment_base_offset`` as for ``write_segment``: when
    several partitions' segments have the same base offset, the caller numbers them apart in that column
    and in ``sources`` (the column is not written). No header-only batches, codec override or aborted
    transactions: those segments go through :func:`write_segment`.

    Everything is encoded, and every index built, before the first file is written: input the encoder
    rejects raises :class:`~segment_io.errors.InvalidRecordsError` naming the split's ``.log`` and writes
    nothing. All the segments' bytes are held at once, so this is for inputs of tens of MiB, not for large
    segments (those stream through :func:`write_segment`). Files are written as ``write_segment`` writes
    them (each directory created once); with ``durable=False`` the caller makes them durable with one
    :meth:`Storage.barrier` over every result's :attr:`SegmentWriteResult.paths`. ``payloads`` and
    ``max_batch_bytes`` as for :func:`write_segment`.
    """
    bases = [_segment_base_offset(s.uri) for s in splits]
    starts = _split_starts(splits, records.num_rows)
    if not splits:
        return []
    table = input_columns(records, _RECORD_INPUT, RECORD_SCHEMA)
    target = input_schema(table, _RECORD_INPUT, RECORD_SCHEMA)
    _check_refs(table, sources)
    first, last = splits[0].row_start, splits[-1].row_end
    if all(a.row_end == b.row_start for a, b in zip(splits, splits[1:])):  # no rows between splits
        table = table.slice(first, last - first)
        starts = starts - first
    else:
        table = pa.concat_tables([table.slice(s.row_start, s.row_end - s.row_start) for s in splits])
        starts = np.concatenate(([0], np.cumsum([s.row_end - s.row_start for s in splits])[:-1])).astype(np.int64)
    if not table.schema.equals(target):
        table = table.cast(target)
    table = table.combine_chunks()
    try:
        encoded = _encode_table(table, None, None, sources, split_starts=starts, payloads=payloads,
                                max_batch_bytes=max_batch_bytes)
    except InvalidRecordsError as exc:
        raise _naming_the_split(exc, table, starts, splits, sources) from None
    # every batch holds rows (no header-only ones here) and each split starts a batch: a split's first batch
    # is the one with as many rows before it as there are before the split
    counts = encoded.headers.record_count.astype(np.int64)
    rows_before = np.cumsum(counts) - counts
    cuts = np.append(np.searchsorted(rows_before, starts), len(counts))
    pieces = encoded.split(cuts)
    del encoded
    indexes = []
    for split, base, piece in zip(splits, bases, pieces):
        try:
            indexes.append(_index_files(piece.headers, base, split.index_interval_bytes))
        except CorruptRecordError as exc:
            raise exc.located(path=split.uri) from None

    results = []
    made: set[str] = set()
    for split, base, piece, files in zip(splits, bases, pieces, indexes):
        directory = split.uri.rpartition("/")[0]
        if directory and directory not in made:
            storage.makedirs(directory)
            made.add(directory)
        with storage.open_write(split.uri, durable=durable, uncached=True) as stream:
            piece.write_to(stream)
        paths = _write_siblings(storage, split.uri, files, durable)
        results.append(_result(paths, piece.size, piece.headers, base))
    return results


def _split_starts(splits: Sequence[SegmentSplit], num_rows: int) -> np.ndarray:
    """The splits' first rows, after checking that they are non-empty ranges of the input, in order."""
    end = 0
    for s in splits:
        if not end <= s.row_start < s.row_end <= num_rows:
            raise UsageError(f"{s.uri}: rows [{s.row_start}, {s.row_end}) are not a non-empty range of the "
                             f"{num_rows} input rows after the previous split's (which ends at row {end})")
        if s.index_interval_bytes < 0:
            raise UsageError(f"{s.uri}: index_interval_bytes must be >= 0, got {s.index_interval_bytes}")
        end = s.row_end
    return np.array([s.row_start for s in splits], dtype=np.int64)


def _naming_the_split(exc: InvalidRecordsError, table: pa.Table, starts: np.ndarray,
                      splits: Sequence[SegmentSplit], sources: Mapping[int, bytes | memoryview] | None,
                      ) -> InvalidRecordsError:
    """The encoder's error for the first split it rejects alone, naming that split's ``.log``; on the error
    path only, so the encode of all the splits together need not know which rows belong to which file."""
    ends = np.append(starts[1:], table.num_rows)
    for split, a, b in zip(splits, starts.tolist(), ends.tolist()):
        try:
            _encode_table(table.slice(a, b - a), None, None, sources)
        except InvalidRecordsError as alone:
            return InvalidRecordsError(alone.detail, offset=alone.offset, path=split.uri)
    return exc


__all__ = ["SegmentSplit", "SegmentWriteResult", "segment_sibling", "write_segment", "write_segments"]
