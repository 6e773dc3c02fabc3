"""Kafka's per-segment index files: ``.index``, ``.timeindex`` and ``.txnindex``.

Byte layouts (all big-endian, no header):

* ``.index``: entries of (int32 offset relative to the segment base, int32 byte position of a batch).
* ``.timeindex``: entries of (int64 timestamp, int32 relative offset).
* ``.txnindex``: entries of (int16 version, int64 producer id, int64 first offset, int64 last offset,
  int64 last stable offset), one per aborted transaction.

What a broker records, from ``LogSegment.recover`` (the per-batch rebuild Kafka runs after an unclean
shutdown or a missing index):

* a running ``validBytes`` counts the bytes of all batches before the current one, and ``lastIndexEntry``
  the position of the last indexed batch (0 at the start). A batch gets an offset-index entry when
  ``validBytes - lastIndexEntry > index.interval.bytes`` *before* its own bytes are counted; the entry is
  (the batch's **last** offset, the batch's start position). So the first batch is never indexed.
* the max timestamp so far and the *shallow* offset of it (the last offset of the first batch that reached
  it) are updated before that test; each offset-index entry is followed by a time-index append of
  (max timestamp so far, its shallow offset), which the time index ignores unless the timestamp is strictly
  greater than its last entry's (initially -1, so batches without timestamps never produce entries).
* at the end (and likewise when a segment is rolled or closed) one more time-index append of the max
  timestamp so far is made regardless of the index being full, then both files are trimmed to their entries.

``LogSegment.append`` applies the same rule per *append call* rather than per batch (position = start of
the append, offset = its largest offset, shallow offset of max timestamp = last offset of the first batch
of the append carrying that maximum). Appends holding several batches (follower fetches, the cleaner's
output, a leader's multi-batch appends of legacy data) therefore index differently from a rebuild, as does
an active segment reopened after a restart (its byte counter starts again at 0).
:func:`build_offset_and_time_index` reproduces the recovery rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from segment_io.errors import CorruptIndexError, CorruptRecordError
from segment_io.format import NO_TIMESTAMP, BatchHeaders

#: Kafka's default ``index.interval.bytes``.
DEFAULT_INDEX_INTERVAL_BYTES = 4096

OFFSET_INDEX_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_INDEX_ENTRY = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
TXN_INDEX_ENTRY = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                            ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
OFFSET_INDEX_ENTRY_SIZE = OFFSET_INDEX_ENTRY.itemsize  # 8
TIME_INDEX_ENTRY_SIZE = TIME_INDEX_ENTRY.itemsize  # 12
TXN_INDEX_ENTRY_SIZE = TXN_INDEX_ENTRY.itemsize  # 34
#: The only ``.txnindex`` entry version Kafka writes (AbortedTxn.CURRENT_VERSION).
TXN_INDEX_VERSION = 0

_INT32_MAX = (1 << 31) - 1


# --------------------------------------------------------------------------------------------------
# Rebuild
# --------------------------------------------------------------------------------------------------


def _relative(offsets: np.ndarray, segment_base_offset: int, headers: BatchHeaders, rows: np.ndarray,
              ) -> np.ndarray:
    """Offsets relative to the segment base as int32; Kafka refuses offsets that do not fit."""
    rel = offsets - segment_base_offset
    bad = (rel < 0) | (rel > _INT32_MAX)
    if bad.any():
        i = int(rows[np.argmax(bad)])
        raise CorruptRecordError(
            f"last offset {int(headers.last_offset[i])} cannot be stored relative to segment base offset "
            f"{segment_base_offset} (must be base .. base + {_INT32_MAX})",
            position=int(headers.position[i]), offset=int(headers.base_offset[i]))
    return rel.astype(np.int32)


def _indexed_batches(position: np.ndarray, interval: int) -> np.ndarray:
    """Rows of the batches that receive an offset-index entry. The entry after one at batch ``j`` goes to the
    first batch more than ``interval`` bytes past it: that successor is found for every batch in one search,
    and the chain of entries is then followed in a compiled loop (a step per entry)."""
    from segment_io._encode_kernels import follow_chain  # numba: loaded by the first index built

    successor = np.searchsorted(position, position + interval, side="right").astype(np.int64)
    rows = np.empty(len(position), np.int64)
    count = follow_chain(successor, int(np.searchsorted(position, interval, side="right")), rows)
    return rows[:count]


def build_offset_and_time_index(headers: BatchHeaders, *, segment_base_offset: int,
                                index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                                ) -> tuple[bytes, bytes]:
    """The exact ``.index`` and ``.timeindex`` bytes Kafka's recovery writes for a segment holding ``headers``.

    ``headers`` must describe the whole segment from byte 0 (as :func:`segment_io.format.scan_batches`
    returns it); a truncated tail is ignored, as recovery truncates it. Raises
    :class:`~segment_io.errors.CorruptRecordError` when a batch's last offset does not fit relative to
    ``segment_base_offset`` (Kafka's IndexOffsetOverflowException).
    """
    if index_interval_bytes < 0:
        raise ValueError(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
    n = len(headers)
    if n == 0:
        return b"", b""
    position = headers.position.astype(np.int64)
    last_offset = headers.last_offset.astype(np.int64)
    _relative(last_offset, segment_base_offset, headers, np.arange(n))  # Kafka checks every batch

    rows = _indexed_batches(position, index_interval_bytes)
    offset_index = np.empty(len(rows), dtype=OFFSET_INDEX_ENTRY)
    offset_index["relative_offset"] = _relative(last_offset[rows], segment_base_offset, headers, rows)
    offset_index["position"] = position[rows]

    # Running max timestamp (starting from the empty time index's -1) and the shallow offset where it was
    # first reached: a batch moves the maximum only when strictly greater than everything before it.
    max_ts = headers.max_timestamp.astype(np.int64)
    running = np.maximum.accumulate(np.maximum(max_ts, NO_TIMESTAMP))
    before = np.concatenate(([NO_TIMESTAMP], running[:-1]))
    raised = np.where(max_ts > before, np.arange(n), -1)
    owner = np.maximum.accumulate(raised)
    shallow = np.where(owner >= 0, last_offset[np.maximum(owner, 0)], segment_base_offset)

    # Time-index appends happen after each offset-index entry plus once at the end; only strictly
    # increasing timestamps are kept. `running` never decreases, so comparing each candidate with the
    # previous candidate (or -1) is the same as comparing it with the last entry actually written.
    candidates = np.concatenate((rows, [n - 1]))
    cand_ts = running[candidates]
    prev_ts = np.concatenate(([NO_TIMESTAMP], cand_ts[:-1]))
    keep = candidates[cand_ts > prev_ts]
    time_index = np.empty(len(keep), dtype=TIME_INDEX_ENTRY)
    time_index["timestamp"] = running[keep]
    time_index["relative_offset"] = _relative(shallow[keep], segment_base_offset, headers, keep)
    return offset_index.tobytes(), time_index.tobytes()


# --------------------------------------------------------------------------------------------------
# Read
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetIndexEntries:
    """Entries of an ``.index`` file (preallocated zero tail removed)."""

    relative_offset: np.ndarray  # int32
    position: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.position)


@dataclass(frozen=True)
class TimeIndexEntries:
    """Entries of a ``.timeindex`` file (preallocated zero tail removed)."""

    timestamp: np.ndarray  # int64
    relative_offset: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.timestamp)


@dataclass(frozen=True)
class AbortedTxn:
    """One ``.txnindex`` entry: an aborted transaction of ``producer_id`` spanning first..last offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = TXN_INDEX_VERSION


def _entries(data: bytes | memoryview, dtype: np.dtype, *, path: str | None, kind: str) -> np.ndarray:
    size = len(data)
    if size % dtype.itemsize:
        raise CorruptIndexError(f"{kind} is {size} bytes, not a multiple of its {dtype.itemsize}-byte entry size",
                                path=path, position=size - size % dtype.itemsize)
    return np.frombuffer(data, dtype=dtype)


def _without_zero_tail(entries: np.ndarray) -> np.ndarray:
    """Drop the trailing all-zero entries a live broker's preallocated file carries.

    A running broker preallocates the active segment's indexes (``segment.index.bytes``, 10 MiB) and keeps
    the entry count in memory; only a close or roll trims the file. An all-zero entry is never a real one
    in a file with earlier entries: offset-index positions are > 0 (the first batch is never indexed) and
    time-index entries strictly increase. A file consisting only of zeros is read as empty.
    """
    raw = entries.view(np.uint8).reshape(len(entries), entries.dtype.itemsize)
    if not len(entries) or raw[-1].any():  # a closed segment's index: nothing to trim
        return entries
    nonzero = np.flatnonzero(raw.any(axis=1))
    return entries[: int(nonzero[-1]) + 1 if len(nonzero) else 0]


def read_offset_index(data: bytes | memoryview, *, path: str | None = None) -> OffsetIndexEntries:
    """Parse an ``.index`` file. Raises :class:`CorruptIndexError` when its size is not a multiple of 8."""
    e = _without_zero_tail(_entries(data, OFFSET_INDEX_ENTRY, path=path, kind="offset index"))
    return OffsetIndexEntries(e["relative_offset"].astype(np.int32), e["position"].astype(np.int32))


def read_time_index(data: bytes | memoryview, *, path: str | None = None) -> TimeIndexEntries:
    """Parse a ``.timeindex`` file. Raises :class:`CorruptIndexError` when its size is not a multiple of 12."""
    e = _without_zero_tail(_entries(data, TIME_INDEX_ENTRY, path=path, kind="time index"))
    return TimeIndexEntries(e["timestamp"].astype(np.int64), e["relative_offset"].astype(np.int32))


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """The ``.txnindex`` bytes for ``entries`` (in the order given; Kafka appends by increasing last offset)."""
    rows = list(entries)
    arr = np.empty(len(rows), dtype=TXN_INDEX_ENTRY)
    for i, t in enumerate(rows):  # one entry per aborted transaction, not per record
        arr[i] = (t.version, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
    return arr.tobytes()


def read_txn_index(data: bytes | memoryview, *, path: str | None = None) -> list[AbortedTxn]:
    """Parse a ``.txnindex`` file.

    Stricter than Kafka, which silently ignores a partial trailing entry: a size that is not a multiple of
    34 bytes (a torn append) raises :class:`CorruptIndexError`, as does an entry version above 0 (Kafka
    refuses those too).
    """
    arr = _entries(data, TXN_INDEX_ENTRY, path=path, kind="transaction index")
    bad = np.flatnonzero(arr["version"] > TXN_INDEX_VERSION)
    if len(bad):
        i = int(bad[0])
        raise CorruptIndexError(f"aborted-transaction entry version {int(arr['version'][i])} is unknown "
                                f"(expected {TXN_INDEX_VERSION})", path=path, position=i * TXN_INDEX_ENTRY_SIZE,
                                offset=int(arr["first_offset"][i]))
    return [AbortedTxn(int(p), int(f), int(last), int(lso), int(v))
            for v, p, f, last, lso in arr.tolist()]



# --------------------------------------------------------------------------------------------------
# Sanity checks
# --------------------------------------------------------------------------------------------------


def _index_path(log_path: str | None, suffix: str) -> str | None:
    if log_path is None:
        return None
    return (log_path[:-4] if log_path.endswith(".log") else log_path) + suffix


def _first_bad(mask: np.ndarray) -> int | None:
    # any/argmax: two calls into C (np.flatnonzero goes through several Python layers; indexes are small)
    return int(mask.argmax()) if mask.any() else None


def _check_offset_index(headers: BatchHeaders, data: bytes, path: str | None, base: int,
                        ) -> list[CorruptIndexError]:
    try:
        entries = read_offset_index(data, path=path)
    except CorruptIndexError as e:
        return [e]
    if not len(entries):
        return []
    errors: list[CorruptIndexError] = []
    offsets = base + entries.relative_offset.astype(np.int64)
    positions = entries.position.astype(np.int64)

    def report(i: int, detail: str) -> None:
        errors.append(CorruptIndexError(detail, path=path, position=i * OFFSET_INDEX_ENTRY_SIZE,
                                        offset=int(offsets[i])))

    # Kafka's own check: the last entry must not lie before the segment's base offset.
    if offsets[-1] < base:
        report(len(offsets) - 1, f"last entry's offset is below the segment base offset {base}")
    i = _first_bad(offsets[1:] <= offsets[:-1])
    if i is not None:
        report(i + 1, f"offset does not increase (previous entry has offset {int(offsets[i])})")
    i = _first_bad(positions[1:] <= positions[:-1])
    if i is not None:
        report(i + 1, f"position {int(positions[i + 1])} does not increase (previous entry has "
                      f"position {int(positions[i])})")
    log_end = headers.end
    i = _first_bad((positions >= log_end) | (positions < 0))
    if i is not None:
        report(i, f"position {int(positions[i])} lies outside the log ({log_end} bytes of whole batches)")
    if not len(headers):
        return errors
    # Every entry must name the start of a batch whose last offset is the entry's offset.
    inside = (positions >= 0) & (positions < log_end)
    row = np.minimum(np.searchsorted(headers.position, positions), len(headers) - 1)
    starts = inside & (headers.position[row] == positions)
    i = _first_bad(inside & ~starts)
    if i is not None:
        report(i, f"position {int(positions[i])} is not the start of a batch")
    i = _first_bad(starts & (headers.last_offset[row] != offsets))
    if i is not None:
        report(i, f"the batch at position {int(positions[i])} ends at offset {int(headers.last_offset[row[i]])}, "
                  f"not at the entry's offset")
    return errors


def _check_time_index(headers: BatchHeaders, data: bytes, path: str | None, base: int,
                      ) -> list[CorruptIndexError]:
    try:
        entries = read_time_index(data, path=path)
    except CorruptIndexError as e:
        return [e]
    if not len(entries):
        return []
    errors: list[CorruptIndexError] = []
    offsets = base + entries.relative_offset.astype(np.int64)
    ts = entries.timestamp

    def report(i: int, detail: str) -> None:
        errors.append(CorruptIndexError(detail, path=path, position=i * TIME_INDEX_ENTRY_SIZE,
                                        offset=int(offsets[i])))

    if offsets[-1] < base:
        report(len(offsets) - 1, f"last entry's offset is below the segment base offset {base}")
    # Kafka appends only strictly greater timestamps and never a smaller offset.
    i = _first_bad(ts[1:] <= ts[:-1])
    if i is not None:
        report(i + 1, f"timestamp {int(ts[i + 1])} does not increase (previous entry has {int(ts[i])})")
    i = _first_bad(offsets[1:] < offsets[:-1])
    if i is not None:
        report(i + 1, f"offset decreases (previous entry has offset {int(offsets[i])})")
    i = _first_bad(ts < 0)
    if i is not None:
        report(i, f"timestamp {int(ts[i])} is negative")
    if not len(headers):
        report(0, "entry in the time index of an empty log")
        return errors
    # The entry's offset must fall inside a batch (for legacy compressed wrappers, whose inner offsets are
    # unknown from the header, anywhere after the previous wrapper) whose max timestamp is the entry's.
    row = np.searchsorted(headers.last_offset, offsets)
    past = row >= len(headers)
    i = _first_bad(past)
    if i is not None:
        report(i, f"offset is past the log's last offset {int(headers.last_offset[-1])}")
    safe = np.minimum(row, len(headers) - 1)
    prev_last = np.concatenate(([base - 1], headers.last_offset[:-1]))[safe]
    first = np.where(headers.magic[safe] == 2, headers.base_offset[safe], prev_last + 1)
    i = _first_bad(~past & (offsets < first))
    if i is not None:
        report(i, "offset lies in a gap between batches")
    i = _first_bad(~past & (offsets >= first) & (headers.max_timestamp[safe] != ts))
    if i is not None:
        report(i, f"timestamp {int(ts[i])} differs from the max timestamp {int(headers.max_timestamp[safe[i]])} "
                  f"of the batch holding its offset")
    return errors


def check_indexes(log_headers: BatchHeaders, offset_index: bytes | None, time_index: bytes | None, *,
                  path: str | None, segment_base_offset: int) -> list[CorruptIndexError]:
    """Every problem found in a segment's ``.index`` and ``.timeindex`` against its log; empty when sound.

    ``path`` is the segment's ``.log`` path; errors name the index file derived from it, the byte position
    of the bad entry and its absolute offset. Beyond Kafka's own sanity checks (size a multiple of the
    entry size, last entry not below the base offset) this checks that offset-index entries point at batch
    starts inside the log whose last offset is the entry's, that offsets, positions and timestamps
    increase, and that time-index entries name an offset inside the log with that batch's max timestamp.
    A zero-filled preallocated tail is not an error (see :func:`read_offset_index`). ``None`` skips a file.
    """
    errors: list[CorruptIndexError] = []
    if offset_index is not None:
        errors += _check_offset_index(log_headers, offset_index, _index_path(path, ".index"), segment_base_offset)
    if time_index is not None:
        errors += _check_time_index(log_headers, time_index, _index_path(path, ".timeindex"), segment_base_offset)
    return errors


def largest_timestamp(time_index: bytes | None, headers: BatchHeaders | None, *,
                      last_modified_ms: int | None = None, path: str | None = None) -> int:
    """A segment's largest timestamp as retention sees it (Kafka's ``LogSegment.largestTimestamp``).

    Kafka takes the max timestamp so far (the ``.timeindex`` last entry, plus any larger batch timestamp
    after it, as ``readLargestTimestamp`` scans) and, when the segment holds no timestamp at all (< 0:
    magic 0 data or an empty segment), falls back to the log file's last-modified time. Here: the larger
    of the time index's last entry (when it parses) and the batches' max timestamps (when ``headers`` are
    given); when that is negative, ``last_modified_ms`` if given, else -1.
    """
    best = NO_TIMESTAMP
    if time_index is not None:
        try:
            entries = read_time_index(time_index, path=path)
        except CorruptIndexError:
            entries = None  # an unreadable index says nothing; the batch headers decide
        if entries is not None and len(entries):
            best = max(best, int(entries.timestamp[-1]))
    if headers is not None and len(headers):
        best = max(best, int(headers.max_timestamp.max()))
    if best < 0 and last_modified_ms is not None:
        return last_modified_ms
    return best

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES", "OFFSET_INDEX_ENTRY_SIZE", "TIME_INDEX_ENTRY_SIZE", "TXN_INDEX_ENTRY_SIZE",
    "OffsetIndexEntries", "TimeIndexEntries", "AbortedTxn", "build_offset_and_time_index",
    "read_offset_index", "read_time_index", "encode_txn_index", "read_txn_index", "check_indexes",
    "largest_timestamp",
]
