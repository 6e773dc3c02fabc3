"""Turning a partition's files into what the planners need: the scan every job starts with.

``scan_partition`` runs inside a Spark task (one per partition) and returns a small, picklable
:class:`PartitionScan`: the planner's :class:`~jobs.rules.model.PartitionState` and, when asked, the partition's
transaction and producer state. A partition whose bytes cannot be read comes back with ``error`` set and no
state, so the job reports it and leaves it untouched while the others proceed. Besides bytes that do not
frame as batches, that is an entry with a segment's name that is not a regular file, a partition directory
linked from outside the log dir (:func:`segment_io.layout.unreadable_entry`), and a log-start-offset-checkpoint
entry below zero or above the log end offset. Every scan also carries what
retention keeps in step with the log start offset: the leader-epoch checkpoint entries (read here, in the
task, so the driver does not read thousands of small files one by one) and the producer snapshot offsets.

Three depths:

* ``headers`` (retention): batch headers only. A segment's largest timestamp comes from its ``.timeindex``
  when that passes its sanity checks (a large one is read by its first and last two entries, the ends Kafka's
  own check compares: a broker's 1 GiB segment has up to 3 MiB of entries; then only the segment's end is read, from
  its last ``.index`` entry, to check that it ends on a whole batch), else from the batch headers; the active
  segment's headers are always read (it gives the log end offset).
* ``sizes`` (compaction's selection, see :mod:`jobs.engine.compact.selection`): ``headers``, plus the first batch
  header of every closed segment a ``.timeindex`` dated (one small read: the first batch timestamp that
  ``max.compaction.lag.ms`` counts from, and the check that the segment starts at or above its base offset).
  Everything Kafka's cleaner needs to pick a log, except the last stable offset. Of the active segment, which
  Kafka never cleans, only the log end offset is needed: its batches are read from its last ``.index`` entry on
  (:func:`_active_tail`; a running broker's preallocated index searched for it; the whole segment where the
  index cannot be trusted), so a run with nothing due reads a few KiB of each partition's active segment rather
  than all of it (up to ``segment.bytes``, 1 GiB by default, a GET of the whole object on S3); its largest
  timestamp, batch and record counts are left unknown. Two reads that only retention needs are left out, so a
  partition compaction cannot select costs no request on an object store: the leader-epoch checkpoint
  (``leader_epochs`` is None, ``leader_epochs_error`` says it was not read, so nothing that needs it can mistake
  it for an empty one), and the active segment of a partition that has no other segment, when the checkpoints do
  not reach past its base offset (:func:`active_segment_unread`).
* ``transactions`` (compaction's partitions that may be due, inspect, the ``table`` command, what retention
  leaves of a ``compact,delete`` partition): ``headers`` with every segment's batch headers read (no
  ``.timeindex`` shortcut), replayed into transaction and producer state (:mod:`segment_io.transactions`). No
  data batch is decompressed or decoded: a batch header gives the producer id and epoch, the transactional and
  control flags, offsets, record count and max timestamp; only the control batches' records are decoded (their
  first record's key holds the ABORT/COMMIT type, its timestamp the marker's time), compressed or not. The
  outputs: ``txn`` (aborted transactions, which cleaning drops; transactions completed with data, whose markers
  cleaning keeps while they have some; the active producers, whose last batches cleaning keeps; inspect and
  ``table`` read the aborted ones) and the first unstable offset in ``state``, which bounds the cleanable range.
  On local disk a segment is memory-mapped, so only the pages that hold headers are touched; what comes from disk
  when they are not cached is a page a batch for a closed segment of batches of 128 KiB or more
  (:func:`headers_far_apart`), else the kernel's read-around of them (every byte, in large requests, which the
  cleaning that follows finds cached). An object store has no ranged reads that cheap: the whole object is fetched.
"""

from __future__ import annotations

import functools
import mmap
import traceback
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np
import pyarrow as pa

from jobs.rules.kafka_defaults import PRODUCER_ID_EXPIRATION_MS, default_of
from jobs.rules.model import PartitionState, SegmentInfo
from jobs.rules.timeutil import format_instant
from jobs.rules.transactions import concat_summaries, derive_txn_state, summarize_headers
from segment_io import index as index_io
from segment_io.checkpoint import EpochEntry, read_leader_epoch_checkpoint
from segment_io.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    SegjobsError,
    StorageError,
)
from segment_io.format import (
    LOG_OVERHEAD,
    MAX_BATCH_SIZE,
    SIZE_OFFSET,
    V2_HEADER,
    V2_HEADER_SIZE,
    BatchHeaders,
    batch_bounds,
    check_offset_order,
    scan_batches,
)
from segment_io.index import OFFSET_INDEX_ENTRY, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from segment_io.layout import (
    DELETED_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    PartitionListing,
    SegmentFiles,
    log_dir_file,
    unreadable_entry,
)
from segment_io.schema import BATCH_SCHEMA
from segment_io.storage.base import FileInfo, Storage
from segment_io.storage.local import storage_error
from segment_io.storage.spool import HostSpool, map_file


class ReportError(TypedDict):
    """An entry of the report's ``errors`` (each makes the run exit 1), and a partition entry's ``error``: what went
    wrong and, for a partition's error, which partition, in which step of the run (``during``, e.g. ``retention``
    before compaction) and where in its files (as :meth:`PartitionError.to_dict` gives it)."""

    kind: str
    detail: str
    partition: NotRequired[str]
    during: NotRequired[str]
    file: NotRequired[str | None]
    position: NotRequired[int | None]
    offset: NotRequired[int | None]


@dataclass(frozen=True)
class PartitionError:
    """Why a partition could not be scanned (or processed): enough to find the bytes with ``segjobs dump``."""

    kind: str  #: exception class name, e.g. ``CrcMismatchError``
    detail: str
    file: str | None = None
    position: int | None = None
    offset: int | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> "PartitionError":
        return cls(type(exc).__name__, getattr(exc, "detail", str(exc)),
                   getattr(exc, "path", None) or getattr(exc, "uri", None),
                   getattr(exc, "position", None), getattr(exc, "offset", None))

    @classmethod
    def from_task_exception(cls, exc: BaseException, path: str | None = None) -> "PartitionError":
        """What a partition's task failed with: a segjobs error as it is; an ``OSError`` that escaped the storage
        layer as the storage error it is (disk full, quota, read-only, permissions: the machine's, said so, with
        the path, ``path`` where the error names none); anything else as a segjobs bug, with the trace to report."""
        if isinstance(exc, OSError):
            exc = storage_error(exc, path or "")
        if isinstance(exc, SegjobsError):
            return cls.from_exception(exc)
        return cls("InternalError", f"{type(exc).__name__}: {exc} (a segjobs bug; please report it with this "
                                    f"trace: {traceback.format_exc(limit=-3)!r})")

    def __str__(self) -> str:
        where = ", ".join(p for p in (self.file, None if self.position is None else f"byte {self.position}",
                                       None if self.offset is None else f"offset {self.offset}") if p)
        return f"{where}: {self.detail} ({self.kind})" if where else f"{self.detail} ({self.kind})"

    def to_dict(self) -> ReportError:
        return {"kind": self.kind, "detail": self.detail, "file": self.file, "position": self.position,
                "offset": self.offset}


@dataclass
class PartitionScan:
    """The result of scanning one partition."""

    topic: str
    partition: int
    uri: str
    state: PartitionState | None = None
    txn: Any = None  #: jobs.rules.transactions.TxnState when scanned at depth "transactions"
    error: PartitionError | None = None
    warnings: list[str] = field(default_factory=list)
    #: the partition's leader-epoch-checkpoint entries (empty when it has none); None when unreadable,
    #: then ``leader_epochs_error`` says why (retention must not touch such a partition)
    leader_epochs: list[EpochEntry] | None = field(default_factory=list)
    leader_epochs_error: PartitionError | None = None
    #: offsets of the producer-state ``.snapshot`` files, ascending (from the listing)
    snapshot_offsets: tuple[int, ...] = ()
    #: whether the partition holds ``.deleted`` files (from the listing): something a purge may unlink
    has_deleted_files: bool = False
    #: the active segment was not read (see :func:`active_segment_unread`): its entry in ``state`` has the
    #: listing's sizes and its base offset as ``next_offset`` (a lower bound of the log end offset), and no
    #: timestamps or counts
    active_unread: bool = False

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def scanned(self) -> PartitionState:
        """``state``, for a partition that scanned without an error (callers check ``error`` first)."""
        if self.state is None:
            raise ValueError(f"partition {self.name} has no scanned state: {self.error}")
        return self.state


@functools.cache
def _no_empty_batches() -> pa.Table:
    """No header-only batch (made at first use: pyarrow's ``empty_table`` imports pandas, which a run that
    decodes nothing, or ``--help``, has no use for)."""
    return BATCH_SCHEMA.empty_table()


def empty_batches_from_headers(h: BatchHeaders, segment_base_offset: int) -> pa.Table:
    """BATCH_SCHEMA rows for the v2 batches that hold no record (header-only batches a clean kept): they
    carry producer state although no record row shows them."""
    idx = np.flatnonzero((h.magic == 2) & (h.record_count == 0))
    n = len(idx)
    if n == 0:  # the common case: nothing to assemble (an Arrow table is immutable, so one can be shared)
        return _no_empty_batches()
    horizon = np.where(h.has_delete_horizon[idx], h.base_timestamp[idx], 0)
    cols = {
        "batch_base_offset": h.base_offset[idx], "batch_last_offset": h.last_offset[idx],
        "batch_position": h.position[idx], "batch_size": h.size[idx],
        "batch_base_timestamp": h.base_timestamp[idx], "batch_max_timestamp": h.max_timestamp[idx],
        "timestamp_type": ((h.attributes[idx] & 0x08) != 0).astype(np.int8), "magic": h.magic[idx],
        "codec": h.codec[idx], "transactional": h.transactional[idx], "control": h.control[idx],
        "producer_id": h.producer_id[idx], "producer_epoch": h.producer_epoch[idx],
        "base_sequence": h.base_sequence[idx], "partition_leader_epoch": h.partition_leader_epoch[idx],
        "segment_base_offset": np.full(n, segment_base_offset, np.int64),
    }
    arrays = []
    for f in BATCH_SCHEMA:
        if f.name == "delete_horizon_ms":
            arrays.append(pa.array(horizon, pa.int64(), mask=~h.has_delete_horizon[idx]))
        else:
            arrays.append(pa.array(np.asarray(cols[f.name]).astype(f.type.to_pandas_dtype()), f.type))
    return pa.Table.from_arrays(arrays, schema=BATCH_SCHEMA)


#: A ``.timeindex`` of at most this size is read whole (one small request, every entry checked); a larger one, such as
#: a closed segment's of a broker's default 1 GiB (up to 3 MiB of entries), by its first and last entries (and the
#: one before the last): the entries Kafka's own sanity check of a time index compares; the last dates the segment.
TIMEINDEX_WHOLE_READ_BYTES = 4096


def _timeindex_largest(storage: Storage, seg: SegmentFiles, next_base: int | None) -> int | None:
    """The largest timestamp from a segment's ``.timeindex`` when it passes a standalone sanity check
    (entries inside the segment's offset range, timestamps increasing and not negative, offsets not
    decreasing); None when it cannot be trusted. The check covers every entry of an index read whole, and the
    first and the last two of a larger one (:data:`TIMEINDEX_WHOLE_READ_BYTES`)."""
    if seg.timeindex is None or seg.timeindex.size == 0:
        return None
    try:
        entries = _timeindex_ends(storage, seg.timeindex) if seg.timeindex.size > TIMEINDEX_WHOLE_READ_BYTES else None
        if entries is None:
            entries = index_io.read_time_index(storage.read(seg.timeindex.uri), path=seg.timeindex.uri)
    except (CorruptIndexError, StorageError):
        return None
    if not len(entries):
        return None
    ts = np.asarray(entries.timestamp)
    rel = np.asarray(entries.relative_offset)
    # Kafka appends a time index entry only with a strictly greater timestamp, never a smaller offset,
    # and never a negative timestamp: anything else is not an index Kafka would have trusted either.
    if (np.diff(ts) <= 0).any() or (np.diff(rel) < 0).any() or (rel < 0).any() or (ts < 0).any():
        return None
    if next_base is not None and (seg.base_offset + rel >= next_base).any():
        return None
    return int(ts[-1])


def _timeindex_ends(storage: Storage, timeindex: FileInfo) -> index_io.TimeIndexEntries | None:
    """The first and the last two entries of a ``.timeindex`` (two small reads: the last entry dates the segment,
    and must exceed the one before it as well as the first); None when the last one is all zeros (a broker's
    preallocated file not trimmed: the whole read finds its last written entry), the size is not a whole number of
    entries, or a read comes back short (a file replaced since its listing): the whole read then decides."""
    size = timeindex.size
    if size % TIME_INDEX_ENTRY_SIZE or size < 3 * TIME_INDEX_ENTRY_SIZE:
        return None
    last_two = bytes(storage.read_range(timeindex.uri, size - 2 * TIME_INDEX_ENTRY_SIZE, 2 * TIME_INDEX_ENTRY_SIZE))
    if len(last_two) != 2 * TIME_INDEX_ENTRY_SIZE or not any(last_two[TIME_INDEX_ENTRY_SIZE:]):
        return None
    first = bytes(storage.read_range(timeindex.uri, 0, TIME_INDEX_ENTRY_SIZE))
    if len(first) != TIME_INDEX_ENTRY_SIZE:
        return None
    return index_io.read_time_index(first + last_two, path=timeindex.uri)


def newest_record(storage: Storage, listing: PartitionListing) -> int | None:
    """The newest record timestamp of a partition, cheaply: its last segment holding bytes, dated by its
    ``.timeindex`` (the last entry a broker wrote: two small reads, or the checked whole of a closed segment's),
    else by its batch headers; records without timestamps (magic 0) by the file's mtime, as Kafka dates them.
    None when it holds no record or cannot be read (it then tells nothing)."""
    segs = [seg for seg in listing.segments if seg.log.size]
    if not segs:
        return None
    seg = segs[-1]
    active = seg is listing.segments[-1]
    try:
        if seg.timeindex is not None and seg.timeindex.size:
            if active:  # possibly preallocated: only its ends are read, never the whole (up to 10 MB) file
                entries = _timeindex_ends(storage, seg.timeindex)
                if entries is not None and len(entries) and int(entries.timestamp[-1]) >= 0:
                    return int(entries.timestamp[-1])
            else:
                following = listing.segments[listing.segments.index(seg) + 1].base_offset
                largest = _timeindex_largest(storage, seg, following)
                if largest is not None:
                    return largest
        with (nullcontext(storage.read(seg.log.uri)) if active else storage.read_mapped(seg.log.uri)) as data:
            h = scan_batches(data, path=seg.log.uri, allow_truncated_tail=active)
    except (SegjobsError, OSError):
        return None
    if not len(h):
        return None
    biggest = int(h.max_timestamp.max())
    return biggest if biggest >= 0 else seg.log.mtime_ms


def _tail_agrees(storage: Storage, seg: SegmentFiles, largest: int, next_base: int) -> bool:
    """Whether the batches at the end of a closed segment agree with the ``largest`` timestamp its ``.timeindex``
    gives: they frame to the end of the file, lie within its offsets [base offset, ``next_base``) and none has a
    larger max timestamp. Raises the framing error of a segment that does not end on a whole batch (a truncated or
    garbled end, what an interrupted copy leaves). False when they disagree: an index cut short, or another
    segment's (a partial copy), would date the segment by older records than it holds and let retention delete
    records still inside ``retention.ms``, or a segment overwritten by another's bytes would be dated by an index
    that is not its own; the caller then reads every batch header. Only the last batches are judged: an index cut
    short of a segment whose newer records lie before them (timestamps out of order) still dates it, as it dates
    it for a broker; reading every header of every closed segment to catch that would cost retention a read of
    each batch it otherwise never makes.

    Cheap: the batches read are those from the position of the last ``.index`` entry (two small reads, a few more
    where the index is preallocated: :func:`_last_index_entry`); with no usable entry, or when the walk from there
    fails (the index may be the one at fault), every batch header of the file is read, with true byte positions."""
    size = seg.log.size
    start = _last_indexed_position(storage, seg)
    bounds, walked = None, False
    if 0 < start < size:
        try:
            bounds = batch_bounds(storage.read_range(seg.log.uri, start, size - start), path=seg.log.uri,
                                  allow_truncated_tail=False)
            walked = True
        except CorruptRecordError:
            pass  # decided below on the whole file, with true byte positions
    if not walked:
        with storage.read_mapped(seg.log.uri) as data:
            bounds = batch_bounds(data, path=seg.log.uri, allow_truncated_tail=False)
    if bounds is None:
        return False
    first, last, newest = bounds
    return first >= seg.base_offset and last < next_base and newest <= largest


def _raise_overlap(h: BatchHeaders, seg: SegmentFiles, next_base: int) -> None:
    """Raise the error of a closed segment whose batches reach the next segment's base offset: the two hold the
    same offsets (another segment's bytes copied over this one, or a concatenation), which no broker writes, and
    whichever copy a reader takes, records would be read twice or dropped."""
    b = int(np.flatnonzero(h.last_offset >= next_base)[0])
    raise CorruptRecordError(
        f"this batch holds offsets {int(h.base_offset[b])}-{int(h.last_offset[b])}, at or past the next segment's "
        f"base offset {next_base}: the two segments overlap, which no broker writes (a segment's offsets end "
        f"before the next one's begin; another segment's bytes copied over this one, or a concatenation?)",
        path=seg.log.uri, position=int(h.position[b]), offset=int(h.base_offset[b]))


def _stale_timeindex_warning(seg: SegmentFiles, index_largest: int, largest: int | None) -> str:
    index = seg.timeindex.uri if seg.timeindex is not None else seg.log.uri
    if largest is not None and largest > index_largest:
        why = (f"its last entry dates the segment {format_instant(index_largest)} while its batches hold "
               f"timestamps up to {format_instant(largest)}")
    else:
        why = "its entries do not match the offsets of the segment's last batches"
    return (f"{index}: {why} (an index cut short, or another segment's); the segment is dated from its batch "
            f"headers, not from the index a broker would trust")


def _last_indexed_position(storage: Storage, seg: SegmentFiles) -> int:
    """The position of a segment's last ``.index`` entry (a batch start), 0 when there is none to trust."""
    entry = _last_index_entry(storage, seg)
    return entry[1] if entry is not None else 0


#: Kafka's default ``index.interval.bytes``: what bounds the written entries of a preallocated index, in one read
_DEFAULT_INDEX_INTERVAL_BYTES = int(default_of("index.interval.bytes"))


def _last_index_entry(storage: Storage, seg: SegmentFiles) -> tuple[int, int] | None:
    """A segment's last ``.index`` entry, ``(offset, position)``: a batch starts at that position, and the offset is
    its last one (a leader's append) or that of a later batch appended with it (a follower's append of several
    batches at once). None when there is none to trust (no index, a size that is not whole entries, no written
    entry, a read that comes back short or fails).

    An index whose last entry is all zeros is the active segment's of a running broker, preallocated to
    ``segment.index.bytes`` (10 MiB by default) and trimmed only when the segment rolls or the broker stops: a copy
    of a live log dir has one. Its last written entry is searched for (:func:`_last_written_entry`), so that the
    segment's end is still read from there on, not the whole segment. What it finds is a candidate like any last
    entry: the callers read the batches from its position to the end and fall back to the whole segment unless
    they frame and hold its offset."""
    if seg.index is None or seg.index.size < OFFSET_INDEX_ENTRY_SIZE or seg.index.size % OFFSET_INDEX_ENTRY_SIZE:
        return None
    try:
        count = seg.index.size // OFFSET_INDEX_ENTRY_SIZE
        entries = _index_entries(storage, seg.index.uri, count - 1, 1)
        if entries is not None and _unwritten(entries[0]):
            entries = _last_written_entry(storage, seg.index.uri, count, seg.log.size)
    except StorageError:
        return None
    if entries is None:
        return None
    entry = entries[-1]
    position = int(entry["position"])
    return (seg.base_offset + int(entry["relative_offset"]), position) if position > 0 else None


def _index_entries(storage: Storage, uri: str, first: int, count: int) -> np.ndarray | None:
    """``count`` offset index entries from entry ``first`` on (one read); None when the read comes back short."""
    data = storage.read_range(uri, first * OFFSET_INDEX_ENTRY_SIZE, count * OFFSET_INDEX_ENTRY_SIZE)
    if len(data) != count * OFFSET_INDEX_ENTRY_SIZE:
        return None
    return np.frombuffer(data, dtype=OFFSET_INDEX_ENTRY)


def _last_written_entry(storage: Storage, uri: str, count: int, log_bytes: int) -> np.ndarray | None:
    """The last written entry (as a one-entry array) of an offset index of ``count`` entries whose last one is
    unwritten; None when the first is unwritten too, the entries read are not in order, one is neither written nor
    all zeros (damaged), or a read comes back short.

    Kafka writes an entry only for a batch more than ``index.interval.bytes`` past the previous entry's, and never
    for the batch at position 0, so an entry is written where its position is above 0. A broker fills its
    preallocated index from the start: the written entries come first, in increasing offset and position, and the
    zeros after them. (A follower's truncation of its active segment moves the index's end back without zeroing
    what lay past it, so older entries can follow the newer ones: where they break the order in what is read they
    are seen; where not, the entry found is checked against the batches by the caller like any other.) With the
    default interval (4096) a segment of ``log_bytes`` has at most ``log_bytes // 4096`` entries: they are read in
    one request, a fifth of a percent of the segment's bytes. When even the last of those is written (a topic with
    a smaller interval), the rest of the index is searched by halving, one entry a read."""
    head = min(count, log_bytes // _DEFAULT_INDEX_INTERVAL_BYTES + 1)
    entries = _index_entries(storage, uri, 0, head)
    if entries is None:
        return None
    not_written = np.flatnonzero(entries["position"] <= 0)
    written_head = entries[:not_written[0]] if len(not_written) else entries
    if not len(written_head) or (np.diff(written_head["position"]) <= 0).any() or \
            (np.diff(written_head["relative_offset"]) <= 0).any():
        return None
    if len(not_written):  # the first entry without a position must be a zero, not a damaged one
        return written_head[-1:] if _unwritten(entries[not_written[0]]) else None
    written, unwritten_at = head - 1, count - 1  # entry `written` has a position above 0, entry `unwritten_at` is zero
    last = entries[-1:]
    while unwritten_at - written > 1:
        middle = (written + unwritten_at) // 2
        probe = _index_entries(storage, uri, middle, 1)
        if probe is None:
            return None
        if int(probe[0]["position"]) > 0:
            written, last = middle, probe
        elif _unwritten(probe[0]):
            unwritten_at = middle
        else:
            return None
    return last


def _unwritten(entry: np.void) -> bool:
    """An offset index entry as preallocated: all zeros."""
    return int(entry["position"]) == 0 and int(entry["relative_offset"]) == 0


def _active_tail(storage: Storage, seg: SegmentFiles) -> tuple[int, int] | None:
    """The active segment's log end offset from its end alone, and the bytes of an incomplete batch at its end:
    the batches from its last ``.index`` entry on (two small reads, a few more for a running broker's preallocated
    index: see :func:`_last_index_entry`; the whole segment, up to ``segment.bytes``, would be one large one). None
    when that cannot be trusted: no usable entry, a position at or past the end, bytes from there that do not frame
    as batches in offset order, or an entry's offset that is not one of theirs (the whole segment is then read, and
    its framing decides). What lies before the entry is not read, so damage there goes unreported here, as in a
    closed segment a ``.timeindex`` dated: compaction never cleans the active segment, and the partition's
    transaction-state scan, if it is due, reads it all."""
    entry = _last_index_entry(storage, seg)
    size = seg.log.size
    if entry is None or not 0 < entry[1] < size:
        return None
    offset, position = entry
    try:
        h = scan_batches(storage.read_range(seg.log.uri, position, size - position), path=seg.log.uri,
                         allow_truncated_tail=True)
        if not len(h):
            return None
        check_offset_order(h, seg.log.uri)
    except CorruptRecordError:
        return None
    if not int(h.base_offset[0]) <= offset <= int(h.last_offset[-1]) or int(h.base_offset[0]) < seg.base_offset:
        return None
    return int(h.last_offset[-1]) + 1, int(h.truncated_tail)


def _listed_info(seg: SegmentFiles, *, next_offset: int, first_batch_timestamp: int | None = None,
                 largest_timestamp: int | None = None) -> SegmentInfo:
    """A segment's :class:`SegmentInfo` from its listing and what the scan learned without reading its batch
    headers (no batch or record counts)."""
    return SegmentInfo(base_offset=seg.base_offset, size_bytes=seg.log.size, next_offset=next_offset,
                       first_batch_timestamp=first_batch_timestamp, largest_timestamp=largest_timestamp,
                       mtime_ms=seg.log.mtime_ms, offset_index_bytes=seg.index.size if seg.index else None,
                       time_index_bytes=seg.timeindex.size if seg.timeindex else None)


def _truncated_warning(seg: SegmentFiles, truncated: int) -> str:
    return (f"{seg.log.uri}: last {truncated} bytes are an incomplete batch (cut short, or zeros a broker "
            f"preallocated; a broker's recovery would truncate them); the active segment is left as is")


#: A closed segment whose batches average at least this many bytes has its header scan read only the pages its batch
#: headers lie on (:func:`headers_far_apart`): Linux's read-around of a mapping reads its window (128 KiB by default)
#: about each page touched, so from there on it costs a request a batch anyway and reads 16 times the bytes or more.
#: Below it, read-around fetches every byte in fewer, larger requests: slower to do without (measured cold, 52 KB
#: batches: 2.0 s with it, 4.2 s without, though 4.4x fewer bytes), and the cleaning that follows finds them cached.
SPARSE_HEADERS_BATCH_BYTES = 128 << 10


def headers_far_apart(seg: SegmentFiles) -> bool:
    """Whether a closed segment's batches average at least :data:`SPARSE_HEADERS_BATCH_BYTES`, judged from the file
    sizes of the listing alone: Kafka's ``.index`` holds at most one entry a batch (one every
    ``index.interval.bytes``, 4 KiB by default, for smaller batches), so the log's bytes per index entry bound the
    average batch from above and equal it for batches past that interval. Without an index entry, False."""
    if seg.index is None or seg.index.size < OFFSET_INDEX_ENTRY_SIZE:
        return False
    return seg.log.size // (seg.index.size // OFFSET_INDEX_ENTRY_SIZE) >= SPARSE_HEADERS_BATCH_BYTES


def read_headers_only(data: object) -> None:
    """Have a memory-mapped segment (what :meth:`Storage.read_mapped` yields on local disk) read from disk only the
    pages that are touched, without read-around: a header scan then reads each batch's header page, not every byte
    of the segment (a separate read of every byte, when the pages are not cached). Anything else is left alone."""
    if isinstance(data, mmap.mmap) and not data.closed and hasattr(mmap, "MADV_RANDOM"):
        data.madvise(mmap.MADV_RANDOM)


#: Bytes read to find a segment's first batch header: most first batches fit; a bigger one costs a second read.
_FIRST_BATCH_READ = 1 << 16


def _first_batch_timestamp(storage: Storage, seg: SegmentFiles) -> int | None:
    """A closed segment's first batch timestamp (its first batch's max timestamp, None when negative or the
    segment is empty), from a read of its first batch's header (61 bytes; a batch in a legacy format, or one that
    does not frame, is read whole). Raises the framing error when the segment does not
    start with a batch at or above its base offset, as a full header scan would."""
    size = seg.log.size
    if size == 0:
        return None
    if size >= V2_HEADER_SIZE:
        # A v2 batch's header holds its max timestamp: read it alone when it frames inside the file and starts at
        # or above the base offset (anything else is read as below, for the error a full scan gives).
        head = storage.read_range(seg.log.uri, 0, V2_HEADER_SIZE)
        if len(head) == V2_HEADER_SIZE:  # a short read (an object replaced since its listing) is read below
            (base, length, _, magic, _, _, _, _, max_ts, *_) = V2_HEADER.unpack_from(head)
            if (magic == 2 and V2_HEADER_SIZE - LOG_OVERHEAD <= length <= MAX_BATCH_SIZE
                    and LOG_OVERHEAD + length <= size and base >= seg.base_offset):
                return max_ts if max_ts >= 0 else None
    data = storage.read_range(seg.log.uri, 0, min(size, _FIRST_BATCH_READ))
    h = scan_batches(data, path=seg.log.uri, allow_truncated_tail=True)
    if not len(h) and size > len(data) and len(data) >= LOG_OVERHEAD:
        length = int.from_bytes(bytes(data[SIZE_OFFSET:LOG_OVERHEAD]), "big", signed=True)
        if 0 < length <= size - LOG_OVERHEAD:
            data = storage.read_range(seg.log.uri, 0, LOG_OVERHEAD + length)
            h = scan_batches(data, path=seg.log.uri, allow_truncated_tail=True)
    if not len(h):  # not even one whole batch where one must start: the full scan says what is wrong
        with storage.read_mapped(seg.log.uri) as whole:
            h = scan_batches(whole, path=seg.log.uri, allow_truncated_tail=False)
    if len(h) and int(h.base_offset[0]) < seg.base_offset:
        raise CorruptRecordError(f"first batch offset {int(h.base_offset[0])} lies below the segment's "
                                 f"base offset {seg.base_offset}", path=seg.log.uri, position=0,
                                 offset=int(h.base_offset[0]))
    first = int(h.max_timestamp[0]) if len(h) else -1
    return first if first >= 0 else None


def _check_log_start(listing: PartitionListing, log_start: int | None, log_end: int) -> None:
    """Raise when the partition's ``log-start-offset-checkpoint`` entry is impossible: below zero or above the
    log end offset. Such an entry is corrupt input, not an instruction: acted upon, it would condemn every
    segment but the active one."""
    if log_start is None or 0 <= log_start <= log_end:
        return
    where = "below zero" if log_start < 0 else f"above the partition's log end offset {log_end}"
    name = f"{listing.topic}-{listing.partition}"
    raise CorruptCheckpointError(
        f"the entry for {name} is {log_start}, {where}: the file is corrupt or belongs to other data; "
        f"fix: correct or remove the line '{listing.topic} {listing.partition} {log_start}' (keeping the entry "
        f"count on line 2 in step); {name} is left untouched until then",
        path=log_dir_file(listing.uri, LOG_START_OFFSET_CHECKPOINT))


#: The kind of :attr:`PartitionScan.leader_epochs_error` of a scan that did not read the leader-epoch checkpoint.
NOT_READ = "NotRead"


def active_segment_unread(listing: PartitionListing, depth: str, log_start_checkpoint: int | None,
                          cleaner_checkpoint: int | None) -> bool:
    """Whether a scan at ``depth`` leaves the active segment unread: at depth ``sizes``, when it is the
    partition's only segment and neither checkpoint lies past its base offset. Compaction's selection then
    cannot depend on what it holds: the cleanable range ends at the active segment's base (Kafka never cleans
    the active segment), so there is nothing to clean and the partition is not selected; the checkpoints lie
    at or below the log end offset whatever it is, so neither is reset or found impossible by it. (A log start
    entry below zero is read as usual: the scan reports it.) Pure: a function of the listing and the
    checkpoints."""
    if depth != "sizes" or len(listing.segments) != 1:
        return False
    base = listing.segments[0].base_offset
    return (log_start_checkpoint is None or 0 <= log_start_checkpoint <= base) and \
        (cleaner_checkpoint is None or cleaner_checkpoint <= base)


def scan_partition(storage: Storage, listing: PartitionListing, *, depth: str = "transactions",
                   log_start_checkpoint: int | None = None, cleaner_checkpoint: int | None = None,
                   now_ms: int = 0, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                   max_batch_bytes: int | None = None, spool: HostSpool | None = None) -> PartitionScan:
    """Read what the planners need from one partition (see the module docstring for ``depth``);
    ``max_batch_bytes``: the decompression bound (see :func:`segment_io.compression.max_batch_bytes`);
    ``spool``: at depth ``transactions`` on an object store, where the segments fetched go, for the partition's
    cleaning task on this host (see :class:`~segment_io.storage.spool.HostSpool`)."""
    if depth not in ("headers", "sizes", "transactions"):
        raise ValueError(f"unknown scan depth {depth!r}")
    out = PartitionScan(listing.topic, listing.partition, listing.uri,
                        snapshot_offsets=tuple(off for off, _ in listing.producer_snapshots),
                        has_deleted_files=any(t.transient == DELETED_SUFFIX for t in listing.transient))
    if depth == "sizes":  # compaction's selection does not need them: retention plans on scans that read them
        out.leader_epochs = None
        out.leader_epochs_error = PartitionError(NOT_READ, "the leader-epoch checkpoint is not read by a scan at "
                                                           "depth sizes")
    elif listing.leader_epoch_checkpoint is not None:
        try:
            out.leader_epochs = read_leader_epoch_checkpoint(storage, listing.leader_epoch_checkpoint.uri)
        except SegjobsError as exc:
            out.leader_epochs, out.leader_epochs_error = None, PartitionError.from_exception(exc)
    try:
        unreadable = unreadable_entry(listing)
        if unreadable is not None:
            raise unreadable
        infos: list[SegmentInfo] = []
        summaries = []
        segs = listing.segments
        if active_segment_unread(listing, depth, log_start_checkpoint, cleaner_checkpoint):
            infos.append(_listed_info(segs[0], next_offset=segs[0].base_offset))
            out.active_unread = True
            segs = ()
        for i, seg in enumerate(segs):
            active = i == len(segs) - 1
            next_base = segs[i + 1].base_offset if not active else None
            largest = None if (active or depth == "transactions") else _timeindex_largest(storage, seg, next_base)
            index_disagrees = largest is not None and next_base is not None \
                and not _tail_agrees(storage, seg, largest, next_base)
            if largest is not None and next_base is not None and not index_disagrees:
                first_ts = _first_batch_timestamp(storage, seg) if depth == "sizes" else None
                # Bounded by the next segment's base: all retention needs of a non-active segment.
                infos.append(_listed_info(seg, next_offset=next_base, first_batch_timestamp=first_ts,
                                          largest_timestamp=largest))
                continue
            if active and depth == "sizes":
                tail = _active_tail(storage, seg)
                if tail is not None:
                    nxt, truncated = tail
                    if truncated:
                        out.warnings.append(_truncated_warning(seg, truncated))
                    infos.append(_listed_info(seg, next_offset=nxt))
                    continue
            # Closed segments are mapped (only header pages are touched); the active one, which a broker may
            # still append to or truncate, is read whole.
            copy = spool.fetch(storage, seg.log) if spool is not None and depth == "transactions" else None
            reader = (map_file(copy) if copy is not None  # an object store's object, fetched once for the run
                      else nullcontext(storage.read(seg.log.uri)) if active else storage.read_mapped(seg.log.uri))
            with reader as data:
                if not active and headers_far_apart(seg):
                    read_headers_only(data)
                h = scan_batches(data, path=seg.log.uri, allow_truncated_tail=active)
                size = len(data)
                if depth == "transactions":
                    # control batches are copied out of the mapping before it closes
                    summaries.append(summarize_headers([(h, data)], path=seg.log.uri,
                                                        max_batch_bytes=max_batch_bytes))
            if h.truncated_tail:
                out.warnings.append(_truncated_warning(seg, h.truncated_tail))
            check_offset_order(h, seg.log.uri)
            if len(h) and int(h.base_offset[0]) < seg.base_offset:
                raise CorruptRecordError(f"first batch offset {int(h.base_offset[0])} lies below the segment's "
                                         f"base offset {seg.base_offset}", path=seg.log.uri, position=0,
                                         offset=int(h.base_offset[0]))
            if next_base is not None and len(h) and int(h.last_offset.max()) >= next_base:
                _raise_overlap(h, seg, next_base)
            nxt = int(h.last_offset[-1]) + 1 if len(h) else seg.base_offset
            first_ts = int(h.max_timestamp[0]) if len(h) and int(h.max_timestamp[0]) >= 0 else None
            biggest = int(h.max_timestamp.max()) if len(h) else -1
            if index_disagrees and largest is not None:
                out.warnings.append(_stale_timeindex_warning(seg, largest, biggest if biggest >= 0 else None))
            infos.append(SegmentInfo(
                base_offset=seg.base_offset, size_bytes=size, next_offset=max(nxt, seg.base_offset),
                first_batch_timestamp=first_ts, largest_timestamp=biggest if biggest >= 0 else None,
                mtime_ms=seg.log.mtime_ms, batch_count=len(h),
                offset_index_bytes=seg.index.size if seg.index else None,
                time_index_bytes=seg.timeindex.size if seg.timeindex else None,
                record_count=int(h.record_count.astype(np.int64).sum()) if (h.record_count >= 0).all() else None))
        fixed = infos
        if fixed:
            _check_log_start(listing, log_start_checkpoint, fixed[-1].next_offset)
        first_unstable = None
        if depth == "transactions":
            summary = concat_summaries(summaries)
            out.txn = derive_txn_state(summary, now_ms=now_ms, producer_id_expiration_ms=producer_id_expiration_ms)
            first_unstable = out.txn.first_unstable_offset
        out.state = PartitionState.build(listing.topic, listing.partition, fixed,
                                         log_start_checkpoint=log_start_checkpoint,
                                         cleaner_checkpoint=cleaner_checkpoint,
                                         first_unstable_offset=first_unstable)
    except SegjobsError as exc:
        out.error = PartitionError.from_exception(exc)
        out.state = None
        out.txn = None
    return out


@dataclass(frozen=True)
class ScanItem:
    """One partition's scan as a task's payload (it pickles into Spark tasks): the arguments of
    :func:`scan_partition`."""

    storage: Storage
    listing: PartitionListing
    depth: str
    log_start_checkpoint: int | None
    cleaner_checkpoint: int | None
    now_ms: int
    producer_id_expiration_ms: int
    max_batch_bytes: int | None
    spool: HostSpool | None = None

    def scan(self) -> PartitionScan:
        return scan_partition(self.storage, self.listing, depth=self.depth,
                              log_start_checkpoint=self.log_start_checkpoint,
                              cleaner_checkpoint=self.cleaner_checkpoint, now_ms=self.now_ms,
                              producer_id_expiration_ms=self.producer_id_expiration_ms,
                              max_batch_bytes=self.max_batch_bytes, spool=self.spool)
