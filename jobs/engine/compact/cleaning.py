"""The executor side of cleaning, shared by both compaction strategies: the memory strategy's per-partition task
(:func:`compact_partition`), the group cleaner both strategies clean a segment group with
(:class:`PartitionCleaner`), their outcomes, and the hand-over of a memory-first task whose offset map fills to
external-sort (:class:`PieceCollector`). Everything here runs in tasks and returns statistics only, never record
data; the drivers are :mod:`jobs.engine.compact.driver` and :mod:`jobs.engine.compact.external_sort`."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, Iterator, Sequence

import numpy as np
import pyarrow as pa

from jobs.engine.scan import PartitionError, empty_batches_from_headers
from jobs.logdir.commit import Committer
from jobs.rules.cleaner import CleanParams, CleanStats, clean_records, key_hash_table, legacy_delete_horizon
from jobs.rules.config import TopicConfig
from jobs.rules.external_sort import piece_rows
from jobs.rules.model import PartitionState, SegmentInfo
from jobs.rules.offset_map import build_offset_map, mappable_rows, record_map_columns
from jobs.rules.plan_compact import CompactionPlan, group_segments_by_size
from jobs.rules.transactions import AbortedTxns
from segment_io.decode import decode_key_hashes_bytes, decode_segment_and_headers
from segment_io.encode import resolve_value_refs
from segment_io.encode_stream import encoded_size
from segment_io.errors import CorruptRecordError, SegjobsError, StorageEnvironmentError
from segment_io.format import HEADER_ARRAYS, BatchHeaders
from segment_io.hashing import hash_keys
from segment_io.index import check_indexes, read_txn_index
from segment_io.layout import PartitionListing
from segment_io.schema import int64_or_zero, validity
from segment_io.segment_writer import SegmentWriteResult, write_segment
from segment_io.storage.base import FileInfo, Storage, release_mapped_pages
from segment_io.storage.local import storage_error
from segment_io.storage.spool import HostSpool, TaskSpool

#: Extra cleaning passes over a group's output within one run (a horizon due as soon as it is stamped,
#: delete.retention.ms <= 0, settles on the second).
MAX_CONVERGENCE_PASSES = 3

#: A partition whose dirty segments hold at most this many bytes is read into memory whole by the map's pass (one
#: read each, or one GET on an object store, and no spool), and each segment is decoded once, for the map and
#: for the clean (see :data:`HELD_DECODE_BYTES` for larger ones). It also bounds what cleaning a bin of small
#: partitions together takes (:mod:`jobs.engine.compact.bin_cleaning`).
SINGLE_DECODE_BYTES = 4 << 20

#: Larger dirty ranges: the map's pass decodes its dirty segments in full, in offset order, and keeps those decodes
#: for the clean while they hold at most this many bytes of rows in all (values stay in the memory-mapped segment
#: as references, so a 1 KB-value segment of 128 MiB holds about 19 MiB of rows). Each segment kept is mapped and
#: decoded, and its CRCs checked, once instead of twice. Beyond the bound the map's pass takes each segment's key
#: hashes alone and the clean decodes it again, as for any dirty range before. What is kept is small beside the
#: two segment groups' worth a clean holds anyway. The dirty segments of the first group the clean takes are kept
#: beyond this bound: that clean holds their rows at once anyway. The map's pass then holds them, what it keeps
#: within this bound, the map and one more segment's decode; the first group's clean holds them, the same kept
#: rows, the map and the rows it keeps. A segment's bytes that are not mapped (an object store's, when the task
#: has no room to spool them) count as rows. A task that may hand its partition over to external-sort keeps
#: nothing: its clean may never come.
HELD_DECODE_BYTES = 64 << 20

#: At most this many decoded segments are kept (each keeps its mapping, and with it two file descriptors, open).
HELD_DECODE_SEGMENTS = 32

#: What a decoded row holds at least, whatever its key: its fixed-width columns (about 117 bytes) and its key hash
#: (16). A segment whose records times this would not fit in what is left of :data:`HELD_DECODE_BYTES` is not
#: decoded in full by the map's pass (it could not be kept: a 1 GiB segment of 1 KB records holds about 150 MiB).
ROW_BYTES_AT_LEAST = 128


# --------------------------------------------------------------------------------------------------
# The per-partition task (runs on an executor; returns statistics only, never record data)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactTask:
    storage: Storage
    listing: PartitionListing
    state: PartitionState
    plan: CompactionPlan
    config: TopicConfig
    txn: Any  # jobs.rules.transactions.TxnState
    now_ms: int
    max_keys: int
    dry_run: bool
    #: the store's commit protocol: says where the task stages the new segments (see Committer.task_stage_uri)
    committer: Committer
    #: the run's decompression bound (see :func:`segment_io.compression.max_batch_bytes`)
    max_batch_bytes: int
    #: memory first (``auto`` on a partition whose records may exceed the map): where to hand the partition
    #: over to external-sort if the map fills (a jobs.engine.compact.external_sort.Handoff)
    handoff: Any = None
    #: on an object store: the segments the partition's transaction-state scan fetched, when it ran on this host
    #: (the task reads those copies, and removes them when it ends: :func:`release_host_copies`)
    host_spool: HostSpool | None = None


def host_copy(task: CompactTask, f: FileInfo) -> BinaryIO | None:
    """The local copy of the object ``f`` that the partition's scan left on this host, opened; or None."""
    return task.host_spool.open(f) if task.host_spool is not None else None


def segment_bytes(task: CompactTask, f: FileInfo) -> bytes:
    """A segment's bytes, read whole: from the scan's copy on this host, else one GET (local disk: a read)."""
    copy = host_copy(task, f)
    if copy is None:
        return task.storage.read(f.uri)
    with copy:
        return copy.read()


def release_host_copies(task: CompactTask) -> None:
    """Remove the copies the partition's scan left on this host: its task is their last reader."""
    if task.host_spool is not None:
        task.host_spool.discard(s.log for s in task.listing.segments)


@dataclass
class GroupOutcome:
    """One segment group: the old segments, and (when it changed) the staged replacement."""

    old_bases: list[int]
    changed: bool
    bytes_before: int
    bytes_after: int
    records_before: int
    records_after: int
    staged_suffixes: tuple[str, ...] = ()
    #: last-modified time the new segment gets (the last replaced segment's, as Kafka does)
    mtime_ms: int = 0
    #: set by the driver once the group's replacement is committed
    committed: bool = False
    #: what was wrong with the ``.index``/``.timeindex`` files of the group's segments (one line per problem,
    #: naming the file); the rewrite rebuilds them, so a group with such a problem is always rewritten
    corrupt_indexes: tuple[str, ...] = ()

    def staged(self, written: SegmentWriteResult, group: Sequence[SegmentInfo], storage: Storage) -> None:
        """Record the replacement a task staged for ``group`` (``written``), and give its files the
        last-modified time of the last segment they replace, as Kafka does: retention of timestamp-less data and
        the legacy tombstone horizon count from it."""
        self.mtime_ms = group[-1].mtime_ms
        for uri in written.paths.values():
            storage.set_mtime(uri, self.mtime_ms)
        self.bytes_after = written.bytes
        self.staged_suffixes = tuple(written.paths)


@dataclass
class PartitionOutcome:
    topic: str
    partition: int
    groups: list[GroupOutcome] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    end_offset: int | None = None
    map_full: bool = False
    error: PartitionError | None = None
    seconds: float = 0.0
    #: a memory-first task whose map filled: the pieces it wrote for external-sort (it cleaned nothing)
    handover: Any = None

    def progress_fields(self) -> dict[str, Any]:
        """The structured fields of the partition's ``compact.partition`` progress event (the report's names)."""
        changed = [g for g in self.groups if g.changed]
        return {"partition": f"{self.topic}-{self.partition}", "seconds": self.seconds,
                "records_removed": sum(g.records_before - g.records_after for g in changed),
                "bytes_removed": sum(g.bytes_before - g.bytes_after for g in changed),
                "segments_rewritten": sum(len(g.old_bases) for g in changed), "partial": self.map_full}


def dirty_segments(task: CompactTask) -> list[SegmentInfo]:
    """The segments a task's offset map reads: those overlapping its dirty range (first dirty to first
    uncleanable offset)."""
    plan = task.plan
    return [s for s in task.state.segments
            if s.next_offset > plan.first_dirty_offset and s.base_offset < plan.first_uncleanable_offset]


def _txn_entries(storage: Storage, listing: PartitionListing, bases: list[int], markers: np.ndarray,
                 with_data: np.ndarray) -> list:
    """The ``.txnindex`` entries of the new segment: the source segments' entries whose abort marker survives
    (``markers``: the offsets of the surviving control records) and whose transaction this pass found data of
    (``with_data``: ``CompletedTxns.markers_with_data``). Kafka's cleaner writes an aborted transaction's
    entry again only when it read a batch of it (``CleanedTransactionMetadata``): the clean after the one that
    removed its data drops the entry, while its marker stays until its horizon."""
    if len(markers) == 0:
        return []
    marker_offsets = set(markers.tolist()) & set(np.asarray(with_data).tolist())
    entries = []
    for seg in listing.segments:
        if seg.base_offset in bases and seg.txnindex is not None:
            for e in read_txn_index(storage.read(seg.txnindex.uri), path=seg.txnindex.uri):
                if e.last_offset in marker_offsets:
                    entries.append(e)
    return entries


def _merged_result(later, earlier):
    """The later pass's output with the statistics of both passes (records read once: from the first)."""
    stats = earlier.stats.merged(later.stats)
    stats = replace(stats, batches_read=earlier.stats.batches_read, records_read=earlier.stats.records_read,
                    bytes_read=earlier.stats.bytes_read, records_kept=later.stats.records_kept,
                    bytes_kept_estimate=later.stats.bytes_kept_estimate,
                    tombstones_kept=later.stats.tombstones_kept, empty_batches_kept=later.stats.empty_batches_kept)
    return replace(later, stats=stats)


def _stable(result, now_ms: int) -> bool:
    """Whether cleaning ``result`` (a pass's output) again, with the same map, transaction state and ``now``,
    certainly changes nothing, so the convergence pass can be left out. A pass keeps a record iff it is the
    latest of its key in the map (the same map keeps it again) and removes aborted transactional data and keyless
    records (none are left to remove); what only a later pass does concerns transaction markers (their horizon),
    the header-only batches kept for producer state, and
    tombstones whose delete horizon has passed at ``now_ms``. A v2 tombstone this pass kept either has a horizon
    (already there, or stamped now: ``now + delete.retention.ms``, which ``now`` has passed only when
    delete.retention.ms <= 0) or none because Kafka writes none (see :func:`jobs.rules.cleaner.delete_horizon`,
    the same at the same ``now``); a legacy (magic 0/1) tombstone has no horizon and is judged by its segment's
    last-modified time, which no pass changes. So an output without transactional or control records, without
    header-only batches and without a tombstone whose horizon is at or before ``now_ms`` is stable."""
    kept = result.records
    if (result.empty_batches.num_rows
            or kept.column("control").to_numpy(zero_copy_only=False).any()
            or kept.column("transactional").to_numpy(zero_copy_only=False).any()):
        return False
    return not due_tombstones(kept, now_ms).any()


def due_tombstones(kept: pa.Table, now_ms: int) -> np.ndarray:
    """Which of a pass's kept rows are tombstones whose delete horizon has passed at ``now_ms`` (a later pass at
    this ``now`` removes them; see :func:`_stable`)."""
    value = kept.column("value")
    if value.null_count == 0:
        return np.zeros(kept.num_rows, bool)
    horizon = kept.column("delete_horizon_ms")
    return ~validity(value) & validity(horizon) & (int64_or_zero(horizon) <= now_ms)


@dataclass
class GroupRun:
    """One group cleaned in memory: its outcome and statistics."""

    outcome: GroupOutcome
    stats: Any


@dataclass
class _Decoded:
    """A dirty segment decoded in full by the map's pass, for its clean (see :data:`SINGLE_DECODE_BYTES` and
    :data:`HELD_DECODE_BYTES`): its bytes (read, or mapped until ``release`` is called), rows and headers."""

    data: Any
    records: pa.Table
    headers: BatchHeaders
    key_hashes: tuple[np.ndarray, np.ndarray]
    release: ExitStack = field(default_factory=ExitStack)

    @property
    def held_bytes(self) -> int:
        """The memory kept: rows, headers and key hashes, and the segment's bytes unless they are mapped (mapped
        pages are let go once decoded)."""
        unmapped = 0 if isinstance(self.data, mmap.mmap) else len(self.data)
        return (self.records.nbytes + sum(getattr(self.headers, name).nbytes for name in HEADER_ARRAYS)
                + self.key_hashes[0].nbytes + self.key_hashes[1].nbytes + unmapped)


class PartitionCleaner:
    """Kafka's doClean for one partition, group by group, with the pieces the task needs twice."""

    def __init__(self, task: CompactTask, staged_written: list[str], *, durable: bool = True) -> None:
        self.task = task
        #: False: staged files are written without syncs, and whoever runs the cleaner makes them durable with a
        #: barrier (see :func:`jobs.engine.compact.bin_cleaning.compact_bin`) before the driver may commit them
        self.durable = durable
        self.files = {s.base_offset: s for s in task.listing.segments}
        self.staged_written = staged_written
        #: dirty segments the map's pass decoded in full, by base offset (a small partition's, see build_map)
        self.decoded: dict[int, _Decoded] = {}
        #: the segments of the first group the clean takes when the map holds the whole dirty range (see
        #: HELD_DECODE_BYTES)
        self.first_group = {s.base_offset for s in task.plan.groups[0]} if task.plan.groups else set()
        #: on an object store, the dirty segments of a larger dirty range, fetched once by the map's pass and read
        #: from the task's local copies by the clean (see build_map)
        self.spool: TaskSpool | None = None
        plan, state = task.plan, task.state
        # Kafka's logSegments(0, firstDirtyOffset): every segment starting below the first dirty offset
        clean_before = [s for s in state.segments if s.base_offset < plan.first_dirty_offset]
        legacy_h = legacy_delete_horizon(clean_before[-1].mtime_ms if clean_before else None,
                                         task.config.delete_retention_ms)
        self.params = CleanParams(now_ms=task.now_ms, upper_bound_offset=plan.first_uncleanable_offset,
                                  delete_retention_ms=task.config.delete_retention_ms,
                                  legacy_delete_horizon_ms=legacy_h)

    def mapped(self, base: int):
        """A closed segment's bytes without a copy (memory-mapped on local disk; on S3 the scan's copy on this
        host, else one GET, or the task spool's copy of a dirty segment). Decoding copies what it keeps, so nothing
        outlives the mapping but the encoder's verbatim copies, made while it is open."""
        f = self.files[base].log
        copy = self.task.host_spool.mapped(f) if self.task.host_spool is not None else None
        if copy is not None:
            return copy
        return self.spool.mapped(f.uri) if self.spool is not None else self.task.storage.read_mapped(f.uri)

    def close(self, *, keep_host_copies: bool = False) -> None:
        """Remove what the task keeps on its host's disk (the spool's copies, the scan's). ``keep_host_copies``: a
        partition handed over to external-sort, whose tasks read the scan's copies after this one (the driver
        removes them at the run's end)."""
        for decoded in self.decoded.values():  # kept by the map's pass for a clean that did not come
            decoded.release.close()
        self.decoded.clear()
        if self.spool is not None:
            self.spool.close()
        if not keep_host_copies:
            release_host_copies(self.task)

    def index_problems(self, base: int, headers) -> list[str]:
        """What is wrong with the ``.index`` and ``.timeindex`` of segment ``base`` against its batches (empty
        when sound or absent). Kafka's loader rebuilds an index that fails its own, weaker sanity check; one
        that passes it with wrong entries would be served as is, so compaction rebuilds every index it finds
        wrong in a group it cleans (and says so)."""
        files = self.files[base]
        data = {f.uri: self.task.storage.read(f.uri) for f in (files.index, files.timeindex) if f is not None}
        return [str(e) for e in check_indexes(
            headers, data.get(files.index.uri) if files.index else None,
            data.get(files.timeindex.uri) if files.timeindex else None, path=files.log.uri,
            segment_base_offset=base)]

    def decode(self, data, base: int):
        """Segment ``base``'s records (values as references into ``data``) and batch headers."""
        plan = self.task.plan
        return decode_segment_and_headers(data, path=self.files[base].log.uri, topic=plan.topic,
                                          partition=plan.partition, segment_base_offset=base, value_refs=True,
                                          max_batch_bytes=self.task.max_batch_bytes)

    def build_map(self, collector=None):
        """The offset map of the dirty range; ``collector`` (memory first: a
        jobs.engine.compact.external_sort.PieceCollector) also gets every decoded segment, to hand over if it fills.
        Dirty segments of at most :data:`SINGLE_DECODE_BYTES` in all are read whole and decoded in full, once: the
        map is built from that decode and :meth:`clean_group` cleans from it. Of larger ones, the first are mapped
        and decoded in full, and kept for the clean, while they hold at most :data:`HELD_DECODE_BYTES` of rows
        (:meth:`_may_hold` before a decode, :meth:`_fits` after it); the rest give the map their key hashes alone.
        On an object store, a larger range's segments are fetched once, into the task's spool
        (:class:`~segment_io.storage.spool.TaskSpool`), which the clean reads them from."""
        plan = self.task.plan
        dirty = dirty_segments(self.task)
        once = sum(s.size_bytes for s in dirty) <= SINGLE_DECODE_BYTES
        if not once:  # the dirty segments the scan left no copy of
            self.spool = TaskSpool(self.task.storage, [
                f for f in (self.files[s.base_offset].log for s in dirty)
                if self.task.host_spool is None or self.task.host_spool.find(f) is None])

        def tables():
            holding = collector is None  # a partition that may be handed over keeps nothing (HELD_DECODE_BYTES)
            for s in dirty:
                holding = holding and self._may_hold(s)
                if once or holding:
                    decoded = self._decode_whole(s.base_offset, mapped=not once)
                    if once or self._fits(s.base_offset, decoded.held_bytes):
                        self.decoded[s.base_offset] = decoded
                    else:  # over the bound: this one maps, and is decoded again by its clean; so are the rest
                        decoded.release.close()
                        holding = False
                    if collector is not None:
                        collector.add(s.base_offset, key_hash_table(decoded.records, decoded.key_hashes))
                    yield record_map_columns(decoded.records, decoded.key_hashes)
                    continue
                with self.mapped(s.base_offset) as data:
                    table = decode_key_hashes_bytes(data, path=self.files[s.base_offset].log.uri,
                                                    max_batch_bytes=self.task.max_batch_bytes)
                if collector is not None:
                    collector.add(s.base_offset, table)
                yield table

        return build_offset_map(tables(), start_offset=plan.first_dirty_offset,
                                end_offset=plan.first_uncleanable_offset, aborted=self.task.txn.aborted,
                                max_keys=self.task.max_keys)

    def _decode_whole(self, base: int, *, mapped: bool) -> _Decoded:
        """Segment ``base`` decoded in full with its key hashes: read into memory, or ``mapped`` (its mapping open
        until the result's ``release`` is closed; its pages let go once decoded, as the clean does)."""
        if not mapped:
            data = segment_bytes(self.task, self.files[base].log)
            records, headers = self.decode(data, base)
            return _Decoded(data, records, headers, hash_keys(records.column("key")))
        with ExitStack() as stack:  # closed here if the decode fails, else handed to the result
            data = stack.enter_context(self.mapped(base))
            records, headers = self.decode(data, base)
            release_mapped_pages(data)
            return _Decoded(data, records, headers, hash_keys(records.column("key")), stack.pop_all())

    def _may_hold(self, segment: SegmentInfo) -> bool:
        """Whether segment ``segment``, decoded, might be kept within the bounds (see :data:`ROW_BYTES_AT_LEAST`):
        its records (the scan's count, else its offsets' span, which is at least that) at the least a row holds."""
        records = segment.record_count
        if records is None:
            records = segment.next_offset - segment.base_offset
        return self._fits(segment.base_offset, records * ROW_BYTES_AT_LEAST)

    def _fits(self, base: int, more: int) -> bool:
        """Whether segment ``base``'s decode of ``more`` bytes may be kept with what the map's pass keeps already:
        within :data:`HELD_DECODE_SEGMENTS`, and within :data:`HELD_DECODE_BYTES` unless it is of the first group."""
        if len(self.decoded) >= HELD_DECODE_SEGMENTS:
            return False
        if base in self.first_group:
            return True
        held = sum(d.held_bytes for b, d in self.decoded.items() if b not in self.first_group)
        return held + more <= HELD_DECODE_BYTES

    def clean_group(self, group, omap) -> GroupRun:
        """Clean one group from its source bytes; stage (or, in a dry run, measure) it when it changed.

        Every pass judges transactions with the state of the log as it was scanned, as Kafka's cleaner judges
        them with what its pass traverses: a marker whose transaction's last data this run removes keeps no
        horizon until the next run (Kafka's next clean) stamps one. The output is cleaned again (as Kafka's
        next passes at this `now` would) until it is stable under that state.
        """
        try:
            with ExitStack() as mappings:
                return self._clean_group(group, omap, mappings)
        finally:
            if self.spool is not None:  # each segment is cleaned in one group: nothing of it is read again
                for s in group:
                    self.spool.release(self.files[s.base_offset].log.uri)

    def _clean_group(self, group, omap, mappings: ExitStack) -> GroupRun:
        task = self.task
        bases = [s.base_offset for s in group]
        sources: dict[int, bytes] = {}
        tables, empties, corrupt_indexes = [], [], []
        hashes: list[tuple[np.ndarray, np.ndarray] | None] = []  # known from the map's pass, else None
        for s in group:
            cached = self.decoded.pop(s.base_offset, None)
            if cached is not None:
                mappings.enter_context(cached.release)  # its mapping closes with this group's
                data, decoded, headers = cached.data, cached.records, cached.headers
                hashes.append(cached.key_hashes)
            else:
                data = mappings.enter_context(self.mapped(s.base_offset))
                # one pass over the headers gives the rows and the headers (no second scan of the mapped file)
                # values stay in the mapped bytes (references): the encoder copies the kept ones from there
                decoded, headers = self.decode(data, s.base_offset)
                hashes.append(None)
            sources[s.base_offset] = data
            tables.append(decoded)
            del decoded  # `tables` alone holds the rows: dropped as a whole once cleaned
            empties.append(empty_batches_from_headers(headers, s.base_offset))
            corrupt_indexes += self.index_problems(s.base_offset, headers)
            release_mapped_pages(data)  # decoded and checked: its pages need not stay resident (bounded memory)
        # a segment with legacy batches comes with its values copied (schemas compared, not hashed: cheaper)
        if any(t.schema != tables[0].schema for t in tables[1:]):
            tables = [resolve_value_refs(t, sources) for t in tables]
        # the key hashes of the segments the map's pass kept are known: the clean hashes only the others' keys
        key_hashes = None
        if any(h is not None for h in hashes):
            known = [h if h is not None else hash_keys(t.column("key")) for h, t in zip(hashes, tables)]
            key_hashes = (np.concatenate([h[0] for h in known]), np.concatenate([h[1] for h in known]))
        records = pa.concat_tables(tables)
        del tables
        mtimes = {s.base_offset: s.mtime_ms for s in group}
        result = clean_records(records, offset_map=omap, txn_state=task.txn, params=self.params,
                               empty_batches=pa.concat_tables(empties), key_hashes=key_hashes,
                               segment_last_modified_ms=mtimes)
        records_before = records.num_rows
        del records  # only the kept rows are needed from here: the decoded group can go (bounded memory)
        # a group whose index files are wrong is rewritten even when no record goes: that rebuilds them
        changed = result.changed or bool(corrupt_indexes)
        for _ in range(MAX_CONVERGENCE_PASSES):
            if _stable(result, self.params.now_ms):
                break
            again = clean_records(result.records, offset_map=omap, txn_state=task.txn,
                                  params=self.params, empty_batches=result.empty_batches,
                                  segment_last_modified_ms=mtimes)
            if not again.changed:
                break
            changed = True
            result = _merged_result(again, result)
        kept = result.records
        markers = kept.column("offset").to_numpy()[kept.column("control").to_numpy(zero_copy_only=False)]
        bytes_before = sum(len(d) for d in sources.values())
        g = GroupOutcome(bases, changed, bytes_before, bytes_before, records_before, records_before,
                         corrupt_indexes=tuple(corrupt_indexes))
        if changed:
            g.records_after = result.records.num_rows
            with self._naming_source_files():
                self._stage(g, group, result, sources, markers)
        return GroupRun(g, result.stats)

    @contextmanager
    def _naming_source_files(self) -> Iterator[None]:
        """Errors the encoder raises about a source segment (which it knows by base offset, from the bytes it was
        given) name that segment's file, as the decode's do."""
        try:
            yield
        except CorruptRecordError as exc:
            info = self.files.get(exc.segment) if exc.path is None and exc.segment is not None else None
            if info is None:
                raise
            raise exc.located(path=info.log.uri) from None

    def _stage(self, g: GroupOutcome, group, result, sources: dict[int, Any], markers: np.ndarray) -> None:
        """Stage the cleaned group's new segment (in a dry run, only measure it)."""
        task, storage, bases = self.task, self.task.storage, g.old_bases
        if task.dry_run:
            g.bytes_after = encoded_size(result.records, empty_batches=result.empty_batches, sources=sources,
                                         max_batch_bytes=task.max_batch_bytes)
            return
        target = task.committer.task_stage_uri(task.listing.uri, bases[0], ".log")
        try:
            written = write_segment(result.records, target, storage=storage,
                                    empty_batches=result.empty_batches, sources=sources,
                                    index_interval_bytes=task.config.index_interval_bytes,
                                    aborted_txns=_txn_entries(storage, task.listing, bases, markers,
                                                              task.txn.completed.markers_with_data()),
                                    durable=self.durable, max_batch_bytes=task.max_batch_bytes)
        except StorageEnvironmentError as exc:
            if not exc.out_of_space:
                raise
            # say how much the new segment needs (its .log; the indexes are small beside it)
            raise exc.needing(encoded_size(result.records, empty_batches=result.empty_batches,
                                           sources=sources, max_batch_bytes=task.max_batch_bytes)) from None
        self.staged_written.extend(written.paths.values())
        g.staged(written, group, storage)


def compact_partition(task: CompactTask, *, durable: bool = True,
                      staged_written: list[str] | None = None) -> PartitionOutcome:
    """Kafka's doClean for one partition: map the dirty range, then clean every segment group below the map's
    end, staging changed groups for the driver to commit (or, in a dry run, only measuring them). With
    ``durable=False`` the staged files are written without syncs and their URIs appended to ``staged_written``:
    the caller makes them durable (:func:`jobs.engine.compact.bin_cleaning.compact_bin`)."""
    t0 = time.monotonic()
    plan, state, storage = task.plan, task.state, task.storage
    out = PartitionOutcome(plan.topic, plan.partition)
    staged_written = [] if staged_written is None else staged_written
    collector = None
    cleaner: PartitionCleaner | None = None
    try:
        cleaner = PartitionCleaner(task, staged_written, durable=durable)
        if task.handoff is not None:
            collector = PieceCollector(task, task.handoff)
        omap = cleaner.build_map(collector)
        if collector is not None:
            if omap.full:  # more keys than the map holds: external-sort takes over with what was read
                out.handover = collector.hand_over(omap.offset_map.size, omap.end_offset)
                collector = None
                out.seconds = round(time.monotonic() - t0, 3)
                return out
            collector.discard()
            collector = None
        out.end_offset = omap.end_offset
        out.map_full = omap.full
        round_end = min(omap.end_offset, plan.first_uncleanable_offset)
        in_round = [s for s in state.segments if s.base_offset < round_end]
        groups = group_segments_by_size(in_round, task.config.segment_bytes, task.config.segment_index_bytes,
                                         plan.first_uncleanable_offset, task.config.index_interval_bytes)
        runs = [cleaner.clean_group(group, omap) for group in groups]
        total = CleanStats()
        for run in runs:
            total = total.merged(run.stats)
            out.groups.append(run.outcome)
        out.stats = {k: int(v) for k, v in total.__dict__.items()}
    except Exception as exc:  # noqa: BLE001 - one partition's failure must not stop the others
        if collector is not None:
            collector.discard()
        out.error = PartitionError.from_task_exception(exc, task.listing.uri)
        for uri in staged_written:  # leave nothing behind for a partition we will not commit
            try:
                storage.delete(uri)
            except SegjobsError:
                pass
    finally:
        if cleaner is not None:
            cleaner.close(keep_host_copies=out.handover is not None)
    out.seconds = round(time.monotonic() - t0, 3)
    return out


# --------------------------------------------------------------------------------------------------
# Memory first: the hand-over from a memory task whose map fills
# --------------------------------------------------------------------------------------------------


def piece_of(table: Any, *, first_dirty_offset: int, first_uncleanable_offset: int, aborted: AbortedTxns,
             buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """A KEY_HASH_SCHEMA table's piece rows and rows per bucket (:func:`jobs.rules.external_sort.piece_rows`
    over its keyed data records, the mappable ones those a memory pass would map)."""
    mappable = mappable_rows(table, start_offset=first_dirty_offset, end_offset=first_uncleanable_offset,
                             aborted=aborted)
    keyed = ~table.column("control").to_numpy() & ~table.column("key_is_null").to_numpy()
    return piece_rows(table.column("key_hash_hi").to_numpy(), table.column("key_hash_lo").to_numpy(),
                      table.column("offset").to_numpy(), mappable, keyed, buckets)


def write_rows(storage: Storage, uri: str, rows: np.ndarray) -> None:
    """One work file: ``rows`` (an int64 array) as little-endian bytes, written whole or not at all: two attempts
    of one task (a retry beside a slow first attempt, speculation) may write the same file at once, and a reader
    must never see a truncated one. On local disk a temporary file of this process renamed into place, without
    fsync (a work file lives for one run, and a crashed run's are removed by the next one); on S3 one PUT."""
    data = np.ascontiguousarray(rows, "<i8")
    storage.makedirs(uri.rsplit("/", 1)[0])
    path = storage.local_path(uri)
    if path is None:
        storage.write_atomic(uri, data.tobytes())
        return
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data.data)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk is the machine's (StorageEnvironmentError), with the bytes it needed
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise storage_error(exc, path, needed_bytes=data.nbytes) from exc


def delete_quietly(storage: Storage, uris: Sequence[str]) -> None:
    for uri in uris:
        try:
            storage.delete(uri)
        except SegjobsError:
            pass



@dataclass(frozen=True)
class Handoff:
    """Given to a memory-first task (``CompactTask.handoff``): where its partition's external-sort files go,
    each segment's group, the bucket count, and how many bytes of pieces it may hold before writing them."""

    work: str
    group_of: tuple[tuple[int, int], ...]  #: (segment base offset, group index)
    buckets: int
    hold_bytes: int


@dataclass(frozen=True)
class HandedPiece:
    """A piece file a memory-first task wrote: one whole segment's rows, per bucket."""

    uri: str
    g: int
    base_offset: int
    counts: np.ndarray


@dataclass
class Handover:
    """What a memory-first task whose map filled returns instead of cleaning (``PartitionOutcome.handover``)."""

    pieces: list[HandedPiece]
    keys: int  #: in the map when it filled
    end_offset: int  #: where the map filled


class PieceCollector:
    """Inside a memory-first task: the key-pass piece of every segment its map pass decodes, held in memory up to
    ``hold_bytes`` and written to the work dir beyond that. If the map fills, :meth:`hand_over` writes the rest
    and the partition goes to external-sort with these pieces (nothing read twice); if it does not,
    :meth:`discard` removes what was written."""

    def __init__(self, task: CompactTask, handoff: Handoff) -> None:
        self.task = task
        self.handoff = handoff
        self.group_of = dict(handoff.group_of)
        self.held: list[tuple[HandedPiece, np.ndarray]] = []
        self.held_bytes = 0
        self.written: list[HandedPiece] = []

    def add(self, base_offset: int, table: Any) -> None:
        """The piece of the segment at ``base_offset`` from its KEY_HASH_SCHEMA ``table``."""
        g = self.group_of.get(base_offset)
        if g is None:  # not below the first uncleanable offset: external-sort does not read it
            return
        plan = self.task.plan
        rows, counts = piece_of(table, first_dirty_offset=plan.first_dirty_offset,
                                first_uncleanable_offset=plan.first_uncleanable_offset,
                                aborted=self.task.txn.aborted, buckets=self.handoff.buckets)
        uri = self.task.storage.join(self.handoff.work, f"piece-{g:06d}-{base_offset:020d}-0000.rows")
        self.held.append((HandedPiece(uri, g, base_offset, counts), rows))
        self.held_bytes += rows.nbytes
        if self.held_bytes > self.handoff.hold_bytes:
            self._write()

    def _write(self) -> None:
        for piece, rows in self.held:
            if len(rows):
                write_rows(self.task.storage, piece.uri, rows)
            self.written.append(piece)
        self.held, self.held_bytes = [], 0

    def hand_over(self, keys: int, end_offset: int) -> Handover:
        self._write()
        return Handover(self.written, keys, end_offset)

    def discard(self) -> None:
        self.held, self.held_bytes = [], 0
        delete_quietly(self.task.storage, [p.uri for p in self.written if p.counts.any()])
        self.written = []

