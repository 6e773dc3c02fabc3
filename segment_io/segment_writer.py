"""Write a segment: the ``.log`` from RECORD_SCHEMA rows, and the index files Kafka keeps beside it.

The ``.index`` and ``.timeindex`` are built from the batch headers the encoder reports (no re-read of the
bytes), by :func:`segment_io.index.build_offset_and_time_index`; ``.txnindex`` from the aborted
transactions the caller knows. Every file is written whole and atomically through a
:class:`~segment_io.storage.base.Storage` (local: temp file, fsync, rename; S3: one upload).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import pyarrow as pa

from segment_io.encode import EncodedSegment, encode_batches
from segment_io.errors import UsageError
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
    #: the encoded batches' headers, positions relative to the start of the file
    encoded: EncodedSegment = field(repr=False)

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
                  aborted_txns: Iterable[AbortedTxn] | None = None) -> SegmentWriteResult:
    """Encode ``table_or_batches`` (see :func:`segment_io.encode.encode_batches` for ``empty_batches``,
    ``codec`` and ``sources``) into the segment file ``path_or_uri`` and write its siblings.

    ``path_or_uri`` names the ``.log`` (``<20-digit base offset>.log``, optionally with a ``.cleaned`` /
    ``.swap`` suffix, which the siblings then carry too); its base offset is the one indexes are relative
    to. With ``write_indexes`` the ``.index`` and ``.timeindex`` Kafka would rebuild for these bytes are
    written; ``aborted_txns``, when given and non-empty, becomes the ``.txnindex`` (Kafka creates no
    ``.txnindex`` file for a segment without aborted transactions). ``storage`` defaults to the store
    :func:`segment_io.storage.open_storage` picks for the URI.
    """
    segment_base = _segment_base_offset(path_or_uri)
    if storage is None:
        from segment_io.storage import open_storage

        storage = open_storage(path_or_uri)
    encoded = encode_batches(table_or_batches, empty_batches=empty_batches, codec=codec, sources=sources)
    # Build the indexes before touching storage so a segment whose offsets do not fit its base leaves
    # nothing behind.
    files: dict[str, bytes] = {}
    if write_indexes:
        offset_index, time_index = build_offset_and_time_index(
            encoded.headers, segment_base_offset=segment_base, index_interval_bytes=index_interval_bytes)
        files[INDEX_SUFFIX] = offset_index
        files[TIME_INDEX_SUFFIX] = time_index
    if aborted_txns is not None:
        entries = list(aborted_txns)
        if entries:
            files[TXN_INDEX_SUFFIX] = encode_txn_index(entries)

    paths = {LOG_SUFFIX: path_or_uri}
    directory = path_or_uri.rpartition("/")[0]
    if directory:
        storage.makedirs(directory)
    with storage.open_write(path_or_uri) as stream:
        encoded.write_to(stream)
    for suffix, data in files.items():
        uri = segment_sibling(path_or_uri, suffix)
        storage.write_atomic(uri, data)
        paths[suffix] = uri
    return SegmentWriteResult(
        paths=paths, bytes=encoded.size, batches=encoded.batch_count, records=encoded.record_count,
        base_offset=segment_base, last_offset=encoded.last_offset, max_timestamp=encoded.max_timestamp,
        encoded=encoded,
    )


__all__ = ["SegmentWriteResult", "segment_sibling", "write_segment"]
