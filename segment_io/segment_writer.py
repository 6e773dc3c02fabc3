"""Write a segment: the ``.log`` from RECORD_SCHEMA rows, and the index files Kafka keeps beside it.

The ``.log`` is encoded and written part by part (:func:`segment_io.encode_stream.iter_encoded_parts`):
each part is appended to the staged file of :meth:`Storage.open_write` (local: a temporary file, fsync'd
and renamed at the end; S3: a multipart upload completed at the end) and dropped, so a writer holds one
part's bytes, never a whole segment. The ``.index`` and ``.timeindex`` are built from the batch headers the
encoder reports as it goes (no re-read of the bytes), by :func:`segment_io.index.build_offset_and_time_index`;
``.txnindex`` from the aborted transactions the caller knows. An error at any point (invalid rows, offsets
that do not fit the segment's base, a failed write) discards the staged ``.log``: no partial file appears
under its final name.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import pyarrow as pa

from segment_io.encode_stream import DEFAULT_PART_BYTES, HeaderCollector, iter_encoded_parts
from segment_io.errors import UsageError
from segment_io.format import NO_TIMESTAMP, BatchHeaders
from segment_io.index import DEFAULT_INDEX_INTERVAL_BYTES, AbortedTxn, build_offset_and_time_index, encode_txn_index
from segment_io.layout import parse_segment_file, segment_file_name
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
                  part_bytes: int = DEFAULT_PART_BYTES, durable: bool = True) -> SegmentWriteResult:
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
    """
    segment_base = _segment_base_offset(path_or_uri)
    if storage is None:
        from segment_io.storage import open_storage

        storage = open_storage(path_or_uri)
    parts = iter_encoded_parts(table_or_batches, empty_batches=empty_batches, codec=codec, sources=sources,
                               part_bytes=part_bytes)
    # The first part is encoded before storage is touched: input the encoder rejects outright leaves no
    # directory behind.
    first = next(parts)
    collected = HeaderCollector()
    files: dict[str, bytes] = {}
    directory = path_or_uri.rpartition("/")[0]
    if directory:
        storage.makedirs(directory)
    with storage.open_write(path_or_uri, durable=durable) as stream:
        for part in itertools.chain([first], parts):
            part.write_to(stream)
            collected.add(part)
            del part  # its bytes are in the stream: let them go before the next part is encoded
        del first
        headers = collected.headers()
        # Built inside the block: offsets that do not fit the segment's base raise here and the staged
        # .log is discarded instead of published.
        if write_indexes:
            offset_index, time_index = build_offset_and_time_index(
                headers, segment_base_offset=segment_base, index_interval_bytes=index_interval_bytes)
            files[INDEX_SUFFIX] = offset_index
            files[TIME_INDEX_SUFFIX] = time_index
        if aborted_txns is not None:
            entries = list(aborted_txns)
            if entries:
                files[TXN_INDEX_SUFFIX] = encode_txn_index(entries)

    paths = {LOG_SUFFIX: path_or_uri}
    for suffix, data in files.items():
        uri = segment_sibling(path_or_uri, suffix)
        storage.write_atomic(uri, data, durable=durable)
        paths[suffix] = uri
    n = len(headers)
    return SegmentWriteResult(
        paths=paths, bytes=collected.size, batches=n, records=int(headers.record_count.sum(dtype=np.int64)),
        base_offset=segment_base, last_offset=int(headers.last_offset[-1]) if n else -1,
        max_timestamp=int(headers.max_timestamp.max()) if n else NO_TIMESTAMP, headers=headers,
    )


__all__ = ["SegmentWriteResult", "segment_sibling", "write_segment"]
