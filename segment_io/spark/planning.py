"""Planning a read: which segments a URI names, and how each segment is cut into byte-range splits.

One split per segment; a segment larger than ``maxSplitBytes`` is cut at batch starts, taken from its
``.index`` (positions checked against the batch headers found there) or, without a usable index, from a
scan of its batch headers. Splits of a segment tile it exactly: each starts where the previous one ends,
so no batch is read twice or lost.

Each split carries bounds that hold for every record in it, used to skip splits that cannot match:
offsets from the segment's base offset, the next segment's base offset and the batch headers at the cuts;
a largest timestamp only where every batch header of the split was read (the broker sets a v2 batch's
max timestamp from its records). A ``.timeindex`` is deliberately not used for skipping: its last entry
is only the largest timestamp when the broker appended the final entry on roll, which index rebuilds
(Kafka's recovery, or ours) do not do, and a wrong bound would silently drop rows.
"""

from __future__ import annotations

import fnmatch
import struct
from dataclasses import dataclass

import numpy as np
from pyspark.sql.datasource import InputPartition

from segment_io.errors import CorruptIndexError, CorruptRecordError, NotFoundError
from segment_io.format import LOG_OVERHEAD, V2_HEADER_SIZE, V2_MAGIC, BatchHeaders, scan_batches
from segment_io.layout import (
    LogDirListing,
    PartitionListing,
    closest_topics_hint,
    list_log_dir,
    listing_from_files,
    parse_partition_dir,
    parse_segment_file,
)
from segment_io.spark.bounds import RowBounds
from segment_io.spark.options import DataSourceOptionError
from segment_io.storage import Storage, StorageOptions

_BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length: the first LOG_OVERHEAD bytes of a batch
_UNKNOWN_TOPIC, _UNKNOWN_PARTITION = "", -1  # what the decoder reports for dirs that are not partition dirs


@dataclass(frozen=True)
class SegmentRef:
    """One live ``.log`` file and what its neighbours tell about it."""

    uri: str
    topic: str
    partition: int
    base_offset: int
    size: int
    #: Base offset of the next segment of the partition: an exclusive upper bound on this one's offsets.
    next_base_offset: int | None
    index_uri: str | None
    #: The offsets of the segment to read, inclusive (None: unbounded): a tiered partition's remote segment that
    #: the local log overlaps keeps only its offsets below it (:mod:`jobs.rules.tiered_read`).
    keep_first: int | None = None
    keep_last: int | None = None


@dataclass(frozen=True)
class SegmentSplit(InputPartition):
    """Bytes ``[start, end)`` of one segment, beginning and ending at batch boundaries."""

    uri: str
    topic: str
    partition: int
    segment_base_offset: int
    start: int
    end: int
    segment_size: int
    #: Inclusive bounds on the offsets of the records in the split (None: unbounded).
    min_offset: int | None
    max_offset: int | None
    #: Upper bound on the records' timestamps (None: unknown).
    max_timestamp: int | None = None
    #: The segment's offsets to read, inclusive (None: unbounded); see :attr:`SegmentRef.keep_first`.
    keep_first: int | None = None
    keep_last: int | None = None
    #: Whether the segment had a successor when it was listed. A broker appends only to a partition's last
    #: segment and truncates, in normal operation, only that one, so a task may map a closed segment's file
    #: rather than copy it into memory; the last one is read (a mapped file cut short under its reader would
    #: kill the process, where a read reports a short file).
    closed: bool = False

    def kept(self, bounds: RowBounds) -> RowBounds:
        """``bounds`` narrowed to the offsets of the segment this split reads."""
        if self.keep_first is None and self.keep_last is None:
            return bounds
        return bounds.narrowed_offsets(self.keep_first, self.keep_last)

    @property
    def is_whole_segment(self) -> bool:
        return self.start == 0 and self.end == self.segment_size

    @property
    def is_segment_tail(self) -> bool:
        """Whether the split ends where the file ends (only there can a batch be cut short)."""
        return self.end == self.segment_size

    def may_match(self, bounds: RowBounds) -> bool:
        """False only when no record of this split can satisfy ``bounds``."""
        return (bounds.wants_partition(self.topic, self.partition)
                and bounds.overlaps_offsets(self.min_offset, self.max_offset)
                and bounds.admits_max_timestamp(self.max_timestamp))


# --------------------------------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------------------------------


def list_segments(storage: Storage, uri: str, bounds: RowBounds) -> list[SegmentRef]:
    """The live segments ``uri`` names, in scope of ``bounds``, ordered by partition then base offset.

    ``uri`` is a log dir (partition dirs below it), a partition dir (segments in it) or one ``.log`` file
    (anywhere: outside a partition dir its topic is ``""`` and its partition -1, as the decoder reports).
    Transient files (``.cleaned``, ``.swap``, ``.deleted``) are not live and never read.
    """
    root = uri.rstrip("/")
    parent, name = _split_uri(root)
    parsed = parse_segment_file(name)
    if parsed is not None and parsed[1:] == (".log", ""):
        segments = _single_segment(storage, parent, name, parsed[0])
    else:
        segments = _partition_segments(storage, root)
        if not segments:
            listing = list_log_dir(storage, root)
            if not listing.partitions and not listing.top_level_files and not listing.other_dirs:
                raise NotFoundError("nothing found: not a log dir, partition dir or segment file", uri=uri)
            segments = [s for p in listing.partitions.values() for s in _segment_refs(p)]
    _check_topics_option(bounds.topic_globs, {s.topic for s in segments}, uri)
    return [s for s in segments if bounds.wants_partition(s.topic, s.partition)]


def tiered_log_dir(storage: Storage, uri: str) -> tuple[LogDirListing, tuple[str, int] | None]:
    """The listing of the log dir a tiered read of ``uri`` reads (``uri`` itself, or the log dir of the partition
    dir ``uri``: it holds the remote log metadata), and the one partition ``uri`` names, if it is a partition dir."""
    root = uri.rstrip("/")
    parent, name = _split_uri(root)
    tp = parse_partition_dir(name)
    listing = list_log_dir(storage, root)
    one = tp if not listing.partitions else None
    if one is not None:
        listing = list_log_dir(storage, parent)
    if not listing.partitions:
        raise NotFoundError("no partition dirs: a tiered topic is read from its broker's log dir (or one of its "
                            "partition dirs)", uri=uri)
    return listing, one


def list_tiered_segments(storage: Storage, uri: str, bounds: RowBounds, remote: str, remote_layout: str,
                         storage_options: StorageOptions | None, *, whole_segments: bool = False
                         ) -> list[SegmentRef]:
    """The segments to read of the tiered partitions of the log dir ``uri`` (or of the partition dir ``uri``, in
    its log dir), in scope of ``bounds``: per partition its finished remote segments below the local log, then
    its local segments, each with the offsets to keep (:func:`jobs.logdir.tiered.read_tiered_plans`). A
    partition a finished remote segment of which cannot be read fails the read, naming the segment. With
    ``whole_segments`` (a reader of whole segments), a remote segment the local log starts inside is a view of its
    offsets below the local log (:func:`jobs.logdir.tiered.whole_segment_files`)."""
    from jobs.logdir.tiered import (
        RemoteOptions,
        read_tiered_plans,
        remote_segment_storage,
        unreadable_error,
        whole_segment_files,
    )

    listing, one = tiered_log_dir(storage, uri)
    keys = [k for k in listing.partitions if one is None or k == one]
    _check_topics_option(bounds.topic_globs, {t for t, _ in keys}, uri)
    views = remote_segment_storage(storage, listing.root, storage_options)
    plans = read_tiered_plans(storage, listing, RemoteOptions(remote, remote_layout), storage_options,
                              [k for k in keys if bounds.wants_partition(*k)], views=views)
    refs = []
    for (topic, partition), plan in plans.items():
        error = unreadable_error(plan)
        if error is not None:
            raise error
        for i, source in enumerate(plan.sources):
            following = plan.sources[i + 1].base_offset if i + 1 < len(plan.sources) else None
            files = whole_segment_files(source, remote_layout, views) if whole_segments else source.files
            index = files.index
            kept = source.trimmed and files is source.files  # a cut view holds only the offsets kept
            refs.append(SegmentRef(
                uri=files.log.uri, topic=topic, partition=partition, base_offset=source.base_offset,
                size=files.log.size, next_base_offset=following,
                index_uri=index.uri if index is not None and index.size else None,
                keep_first=source.keep_first if kept else None,
                keep_last=source.keep_last if kept else None))
    return refs


def _check_topics_option(globs: tuple[str, ...], topics: set[str], uri: str) -> None:
    """A ``topics`` glob that matches no topic is a mistake (a typo, the wrong log dir), not a request for
    zero rows: fail naming the closest topics."""
    unmatched = [g for g in globs if not any(fnmatch.fnmatchcase(t, g) for t in topics)]
    if unmatched:
        hints = "; ".join(f"{g}: {closest_topics_hint(g, topics - {_UNKNOWN_TOPIC})}" for g in unmatched)
        raise DataSourceOptionError("topics", f"{', '.join(map(repr, unmatched))} matches no topic in {uri} "
                                              f"({hints})")


def _split_uri(uri: str) -> tuple[str, str]:
    parent, _, name = uri.rpartition("/")
    return parent or "/", name


def _partition_segments(storage: Storage, dir_uri: str) -> list[SegmentRef]:
    """The segments of ``dir_uri`` when it is a partition dir holding any; else empty."""
    parent, name = _split_uri(dir_uri)
    tp = parse_partition_dir(name)
    if tp is None:
        return []
    listing = listing_from_files(parent, storage.list(dir_uri)).partitions.get(tp)
    return _segment_refs(listing) if listing is not None else []


def _single_segment(storage: Storage, dir_uri: str, name: str, base_offset: int) -> list[SegmentRef]:
    """The segment file ``name`` in ``dir_uri``, with what its partition dir's listing tells about it."""
    found = [s for s in _partition_segments(storage, dir_uri) if _split_uri(s.uri)[1] == name]
    if found:
        return found
    # A loose segment file outside any partition dir: nothing is known about its neighbours.
    info = next((f for f in storage.list(dir_uri) if f.name == name), None)
    if info is None:
        raise NotFoundError("no such segment file", uri=f"{dir_uri}/{name}")
    return [SegmentRef(uri=info.uri, topic=_UNKNOWN_TOPIC, partition=_UNKNOWN_PARTITION, base_offset=base_offset,
                       size=info.size, next_base_offset=None, index_uri=None)]


def _segment_refs(listing: PartitionListing) -> list[SegmentRef]:
    segments = listing.segments
    return [
        SegmentRef(uri=s.log.uri, topic=listing.topic, partition=listing.partition, base_offset=s.base_offset,
                   size=s.log.size,
                   next_base_offset=segments[i + 1].base_offset if i + 1 < len(segments) else None,
                   index_uri=s.index.uri if s.index is not None and s.index.size else None)
        for i, s in enumerate(segments)
    ]


# --------------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------------


def plan_splits(storage: Storage, segment: SegmentRef, max_split_bytes: int) -> list[SegmentSplit]:
    """Cut ``segment`` into splits of at most ``max_split_bytes`` (more only where one batch is larger)."""
    upper = None if segment.next_base_offset is None else segment.next_base_offset - 1
    if segment.size <= max_split_bytes:
        return [_split(segment, 0, segment.size, segment.base_offset, upper)]
    cuts = _cuts_from_index(storage, segment, max_split_bytes)
    if cuts is not None:
        positions, first_offsets = cuts
        return [
            _split(segment, int(positions[i]),
                   int(positions[i + 1]) if i + 1 < len(positions) else segment.size,
                   int(first_offsets[i]) if i else segment.base_offset,
                   int(first_offsets[i + 1]) - 1 if i + 1 < len(positions) else upper)
            for i in range(len(positions))
        ]
    return _splits_from_scan(storage, segment, max_split_bytes, upper)


def _split(segment: SegmentRef, start: int, end: int, low: int | None, high: int | None,
           max_timestamp: int | None = None) -> SegmentSplit:
    return SegmentSplit(uri=segment.uri, topic=segment.topic, partition=segment.partition,
                        segment_base_offset=segment.base_offset, start=start, end=end,
                        segment_size=segment.size, min_offset=low, max_offset=high, max_timestamp=max_timestamp,
                        keep_first=segment.keep_first, keep_last=segment.keep_last,
                        closed=segment.next_base_offset is not None)


def choose_cuts(positions: np.ndarray, max_split_bytes: int) -> np.ndarray:
    """Indices into ``positions`` (sorted batch starts, the first being the split's start) where splits
    begin: each split spans as many batches as fit in ``max_split_bytes``, and at least one."""
    chosen = [0]
    while True:
        limit = int(positions[chosen[-1]]) + max_split_bytes
        following = int(np.searchsorted(positions, limit, side="right")) - 1
        following = max(following, chosen[-1] + 1)
        if following >= len(positions):
            return np.asarray(chosen, dtype=np.int64)
        chosen.append(following)


def _cuts_from_index(storage: Storage, segment: SegmentRef,
                     max_split_bytes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Cut positions from the offset index, with the base offset of the batch at each cut; None when
    there is no index or it does not agree with the log (then the caller scans the batch headers)."""
    if segment.index_uri is None:
        return None
    from segment_io.index import read_offset_index

    try:
        entries = read_offset_index(storage.read(segment.index_uri), path=segment.index_uri)
    except (CorruptIndexError, NotFoundError):
        return None
    positions = np.concatenate([[0], entries.position.astype(np.int64)])
    if np.any(np.diff(positions) <= 0) or positions[-1] >= segment.size:
        return None  # stale or foreign index: positions must increase and stay inside the log
    cuts = positions[choose_cuts(positions, max_split_bytes)]
    first_offsets = np.empty(len(cuts), dtype=np.int64)
    previous = segment.base_offset - 1
    for i, position in enumerate(cuts):
        # One small read per cut confirms a v2 batch starts there and gives its exact base offset.
        head = storage.read_range(segment.uri, int(position), V2_HEADER_SIZE)
        if len(head) < V2_HEADER_SIZE or head[V2_MAGIC] != 2:
            return None  # legacy batches carry no exact base offset in their header: scan instead
        base_offset, length = _BATCH_PREFIX.unpack_from(head)
        if base_offset <= previous or length <= 0 or position + LOG_OVERHEAD + length > segment.size:
            return None
        first_offsets[i] = previous = base_offset
    return cuts, first_offsets


def _splits_from_scan(storage: Storage, segment: SegmentRef, max_split_bytes: int,
                      upper: int | None) -> list[SegmentSplit]:
    try:
        headers = scan_batches(storage.read(segment.uri), path=segment.uri)
    except CorruptRecordError:
        # The reader reports the corruption with its position when it decodes the segment.
        return [_split(segment, 0, segment.size, segment.base_offset, upper)]
    if len(headers) == 0:
        return [_split(segment, 0, segment.size, segment.base_offset, upper)]
    positions = headers.position
    cuts = choose_cuts(positions, max_split_bytes)
    first_offsets = batch_min_offsets(headers)
    ends = np.append(cuts[1:], len(positions))
    splits = []
    for i, (first, stop) in enumerate(zip(cuts.tolist(), ends.tolist())):
        magic = headers.magic[first:stop]
        max_ts = int(headers.max_timestamp[first:stop].max()) if np.all(magic == 2) else None
        splits.append(_split(
            segment, int(positions[first]),
            int(positions[stop]) if stop < len(positions) else segment.size,
            max(segment.base_offset, int(first_offsets[first])) if i else segment.base_offset,
            int(first_offsets[stop]) - 1 if stop < len(positions) else upper,
            max_ts,
        ))
    return splits


def batch_min_offsets(headers: BatchHeaders, first_floor: int | None = None) -> np.ndarray:
    """A lower bound on the first offset of every batch.

    Exact for v2 (the header's base offset). A legacy compressed wrapper carries only its last inner
    offset, so there the bound is one past the previous batch's last offset (offsets increase through a
    log), and ``first_floor`` (or the smallest int64) for the first batch.
    """
    floor = np.iinfo(np.int64).min if first_floor is None else first_floor
    after_previous = np.concatenate([[floor], headers.last_offset[:-1] + 1]).astype(np.int64)
    return np.where(headers.magic == 2, headers.base_offset, after_previous).astype(np.int64)
