"""The memory strategy's task over a bin of partitions (:func:`compact_bin`), whose small partitions are cleaned
together: one decode, one offset map, one clean and one encode over all their records, rather than one small
pipeline each (:func:`clean_together`); what that leaves is cleaned one partition at a time
(:func:`jobs.engine.compact.cleaning.compact_partition`).

A small partition's cleaning is a few hundred numpy, Arrow and kernel calls on a few thousand rows, so its cost is
the calls, not the rows; done once for a bin of tens of partitions it is paid once. Every decision stays the one a
clean of each partition alone makes: the map is keyed by partition and key (``jobs.rules.offset_map``), and the
cleaner takes each partition's bounds, topic settings and producers (``jobs.rules.cleaner.PartitionRows``); each
partition still gets its own staged segment and indexes, byte for byte those of its own pipeline.

Only what one array pass treats alike is taken: partitions without transactions, whose whole round is one segment
group of at most :data:`jobs.engine.compact.cleaning.SINGLE_DECODE_BYTES` dirty bytes, of v2 batches that hold records
and no control or transactional batch, and whose cleaned output needs no second pass. Anything else, and any error at
all (a corrupt batch, a failed write), goes to the per-partition pipeline, which reports it with its file, byte
position and offset: cleaning together is never the reason a partition fails.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from jobs.engine.compact.cleaning import (
    SINGLE_DECODE_BYTES,
    CompactTask,
    GroupOutcome,
    PartitionCleaner,
    PartitionOutcome,
    compact_partition,
    delete_quietly,
    dirty_segments,
    due_tombstones,
    release_host_copies,
    segment_bytes,
)
from jobs.engine.scan import PartitionError
from jobs.rules.cleaner import CleanParams, PartitionRows, clean_records
from jobs.rules.model import SegmentInfo
from jobs.rules.offset_map import OffsetMapResult, build_partitions_offset_map, record_map_columns
from jobs.rules.transactions import TxnState
from segment_io.decode import decode_segment_and_headers
from segment_io.errors import OffsetOrderError, SegjobsError
from segment_io.format import BatchHeaders, check_offset_order
from segment_io.hashing import hash_keys
from segment_io.payloads import KeptPayloads
from segment_io.schema import VALUE_REF_TYPE
from segment_io.segment_writer import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    SegmentSplit,
    segment_sibling,
    write_segments,
)

#: Partitions of a bin that must qualify before they are cleaned together (fewer gain nothing).
TOGETHER_MIN_PARTITIONS = 2

#: The files :func:`write_segments` writes for a segment (no ``.txnindex``: no partition here has aborted data).
_WRITTEN_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

#: Segment bytes cleaned together at most (they and their decoded rows are held at once); a bin holding more
#: small partitions cleans them in several such rounds.
TOGETHER_MAX_BYTES = 32 << 20


def compact_bin(tasks: list[CompactTask]) -> list[PartitionOutcome]:
    """The memory strategy's task over a bin of partitions (see
    :func:`jobs.engine.compact.streaming.run_and_settle_bins`): its small partitions cleaned together
    (:func:`clean_together`), :func:`compact_partition` of each of the others, their staged files written without
    a sync, then one :meth:`Storage.barrier` over all of them before the task returns, so that the driver only
    ever commits durable staged files. If the barrier fails, every partition that staged files fails with it (its
    files deleted)."""
    staged: list[list[str]] = [[] for _ in tasks]
    together = clean_together(tasks, staged)
    outcomes = []
    for i, task in enumerate(tasks):
        if i in together:
            outcomes.append(together[i])
            continue
        outcomes.append(compact_partition(task, durable=False, staged_written=staged[i]))
        if outcomes[-1].error is not None:
            staged[i] = []
    uris = [u for written in staged for u in written]
    if uris:
        t0 = time.monotonic()
        storage = tasks[0].storage
        try:
            storage.barrier([*uris, *dict.fromkeys(u.rsplit("/", 1)[0] for u in uris)])
        except SegjobsError as exc:
            for task, out, written in zip(tasks, outcomes, staged):
                if written:
                    out.error = PartitionError.from_task_exception(exc, task.listing.uri)
                    delete_quietly(storage, written)
        # the barrier is part of every staging partition's cost: shared out evenly
        share = (time.monotonic() - t0) / max(1, sum(1 for w in staged if w))
        for out, written in zip(outcomes, staged):
            if written:
                out.seconds = round(out.seconds + share, 3)
    for task, out in zip(tasks, outcomes):  # those cleaned together, whose cleaner did not; not those handed over
        if out.handover is None:
            release_host_copies(task)
    return outcomes


@dataclass(frozen=True)
class _Member:
    """A partition taken into a round: its task's index in the bin, its cleaner (its files, its index checks)
    and its one segment group."""

    index: int
    task: CompactTask
    cleaner: PartitionCleaner
    group: tuple[SegmentInfo, ...]


def _group_if_small(task: CompactTask) -> tuple[SegmentInfo, ...] | None:
    """The partition's single segment group when it may be cleaned together (see the module notes), else None.
    With a map that does not fill, the round ends at the first uncleanable offset: its groups are the plan's."""
    txn = task.txn
    if task.dry_run or task.handoff is not None or len(txn.aborted) or len(txn.completed) \
            or len(txn.open_producer_ids):
        return None
    dirty = dirty_segments(task)
    if not dirty or sum(s.size_bytes for s in dirty) > SINGLE_DECODE_BYTES:
        return None
    return task.plan.groups[0] if len(task.plan.groups) == 1 else None


def clean_together(tasks: list[CompactTask], staged: list[list[str]]) -> dict[int, PartitionOutcome]:
    """Clean the bin's partitions that may be cleaned together (module notes), in rounds of at most
    :data:`TOGETHER_MAX_BYTES`; their outcomes by index into ``tasks``, their staged files (written without a
    sync: the bin's barrier makes them durable) appended to ``staged[index]``. A partition not in the result is
    left for the per-partition pipeline, with nothing of it staged."""
    members = []
    for i, task in enumerate(tasks):
        group = _group_if_small(task)
        if group is not None:
            members.append(_Member(i, task, PartitionCleaner(task, [], durable=False), group))
    if len(members) < TOGETHER_MIN_PARTITIONS:
        return {}
    rounds: list[list[_Member]] = [[]]
    size = 0
    for m in members:
        bytes_ = sum(s.size_bytes for s in m.group)
        if rounds[-1] and size + bytes_ > TOGETHER_MAX_BYTES:
            rounds.append([])
            size = 0
        rounds[-1].append(m)
        size += bytes_
    done: dict[int, PartitionOutcome] = {}
    for members_ in rounds:
        if len(members_) >= TOGETHER_MIN_PARTITIONS:
            done.update(_Round(members_).run(staged))
    return done


class _Round:
    """One round of partitions cleaned together."""

    def __init__(self, members: list[_Member]) -> None:
        self.members = members
        first = members[0].task
        self.storage, self.now_ms = first.storage, first.now_ms

    def run(self, staged: list[list[str]]) -> dict[int, PartitionOutcome]:
        t0 = time.monotonic()
        written: list[str] = []
        try:
            outcomes = self._clean(written)
        except Exception:  # noqa: BLE001 - each partition's own pipeline runs instead, and reports what it finds
            delete_quietly(self.storage, written)
            return {}
        # what the round cost, shared out evenly (a partition's progress line shows its task seconds)
        share = round((time.monotonic() - t0) / max(1, len(self.members)), 3)
        for index, (outcome, paths) in outcomes.items():
            outcome.seconds = share
            staged[index].extend(paths)
        return {index: outcome for index, (outcome, _) in outcomes.items()}

    def _decode(self, members: list[_Member]) -> "_Joined":
        """The members' group segments back to back, decoded once."""
        datas, piece_member, piece_base = [], [], []
        for k, m in enumerate(members):
            for seg in m.group:
                datas.append(segment_bytes(m.task, m.cleaner.files[seg.base_offset].log))
                piece_member.append(k)
                piece_base.append(seg.base_offset)
        lengths = np.array([len(d) for d in datas], np.int64)
        piece_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        blob = b"".join(datas)
        del datas
        payloads = KeptPayloads()  # the compressed batches' payloads, decompressed once for the decode and the encode
        records, headers = decode_segment_and_headers(blob, path="(segments cleaned together)",
                                                      segment_base_offset=0, value_refs=True,
                                                      max_batch_bytes=members[0].task.max_batch_bytes,
                                                      check_order=False, payloads=payloads)
        # Each segment parsed alone must give exactly these batches: the batches tile the bytes, and every
        # segment starts at a batch boundary.
        position, size = headers.position, headers.size.astype(np.int64)
        tiled = (len(headers) > 0 and position[0] == 0 and int(position[-1] + size[-1]) == len(blob)
                 and np.array_equal(position[1:], position[:-1] + size[:-1])
                 and np.isin(piece_start[lengths > 0], position).all())
        if headers.truncated_tail or not tiled:
            raise _NotTogether("the segments do not split into whole batches")
        batch_piece = np.searchsorted(piece_start, position, side="right") - 1
        # Offsets restart at each segment (and partition), so their order is judged within a segment only; a
        # segment whose offsets go backwards is cleaned alone, where the decoder names its file, byte and offset.
        try:
            check_offset_order(headers, None, pieces=batch_piece)
        except OffsetOrderError:
            raise _NotTogether("offsets go backwards in a segment") from None
        return _Joined(blob, records, headers, np.asarray(piece_member, np.int64), piece_base, piece_start,
                        lengths, batch_piece, payloads)

    def _clean(self, written: list[str]) -> dict[int, tuple[PartitionOutcome, list[str]]]:
        storage = self.storage
        # ---- one decode: every group's segments, back to back; decoded again without the partitions found to
        # hold what is not cleaned together (rare: transactions the scan did not show, legacy or header-only
        # batches) ----
        members = self.members
        while True:
            d = self._decode(members)
            h = d.headers
            odd = (h.magic != 2) | h.control | h.transactional | (h.record_count == 0)
            if not odd.any():
                break
            refused = set(d.piece_member[d.batch_piece[odd]].tolist())
            del d, h  # the next decode's bytes, rows and payloads are not held beside these
            members = [m for k, m in enumerate(members) if k not in refused]
            if len(members) < TOGETHER_MIN_PARTITIONS:
                raise _NotTogether("too few partitions qualify")
        records, headers, blob = d.records, d.headers, d.blob
        if records.schema.field("value").type != VALUE_REF_TYPE:
            raise _NotTogether("values not decoded as references")
        row_part = _row_owner(records, d.piece_start, d.piece_member)
        lengths, piece_start, piece_member = d.lengths, d.piece_start, d.piece_member

        # ---- one map, keyed by partition and key ----
        hashes = hash_keys(records.column("key"))
        plans = [m.task.plan for m in members]
        pmap = build_partitions_offset_map(
            record_map_columns(records, hashes), row_partition=row_part,
            start_offsets=np.array([p.first_dirty_offset for p in plans], np.int64),
            end_offsets=np.array([p.first_uncleanable_offset for p in plans], np.int64),
            max_keys=members[0].task.max_keys)
        if pmap is None:
            raise _NotTogether("the map could fill")

        # ---- one clean ----
        layout = PartitionRows(
            row_partition=row_part, latest_offset=pmap.latest_offset,
            upper_bound_offset=np.array([p.first_uncleanable_offset for p in plans], np.int64),
            delete_retention_ms=np.array([m.task.config.delete_retention_ms for m in members], np.int64),
            txn_states=[m.task.txn for m in members])
        result = clean_records(records, offset_map=OffsetMapResult(pmap.offset_map, 0, -1, False, 0),
                               txn_state=TxnState.empty(), params=CleanParams(self.now_ms, 0),
                               key_hashes=(pmap.key_hash_hi, pmap.key_hash_lo), partitions=layout)
        records_before = np.bincount(row_part, minlength=len(members))
        del records
        kept = result.records
        # A partition whose output a second pass would change again goes through its own pipeline (which runs
        # that pass); so does one whose every record goes (its new segment is empty).
        due = due_tombstones(kept, self.now_ms)
        kept_part = np.repeat(np.arange(len(members)), [pc.row_end - pc.row_start for pc in result.partitions])
        unsettled = np.bincount(kept_part[due], minlength=len(members)) > 0

        # ---- index checks, then one encode for every partition that changed ----
        bounds = np.searchsorted(d.batch_piece, np.arange(len(lengths) + 1))
        outcomes: dict[int, tuple[PartitionOutcome, list[str]]] = {}
        splits, split_of = [], []
        for j, m in enumerate(members):
            pc = result.partitions[j]
            if unsettled[j] or pc.stats.empty_batches_kept or pc.row_end == pc.row_start:
                continue
            pieces = np.flatnonzero(piece_member == j)
            problems: list[str] = []
            for p in pieces:
                problems += m.cleaner.index_problems(d.piece_base[p], headers.part(int(bounds[p]), int(bounds[p + 1]),
                                                                                 int(piece_start[p])))
            bases = [s.base_offset for s in m.group]
            before = int(lengths[pieces].sum())
            g = GroupOutcome(bases, pc.changed or bool(problems), before, before, int(records_before[j]),
                             int(records_before[j]), corrupt_indexes=tuple(problems))
            out = PartitionOutcome(m.task.plan.topic, m.task.plan.partition, groups=[g], stats=asdict(pc.stats),
                                   end_offset=int(pmap.latest_offset[j]) + 1)
            outcomes[m.index] = (out, [])
            if g.changed:
                g.records_after = pc.row_end - pc.row_start
                splits.append(SegmentSplit(m.task.committer.task_stage_uri(m.task.listing.uri, bases[0], ".log"),
                                           pc.row_start, pc.row_end, m.task.config.index_interval_bytes))
                split_of.append((m, g))
        if splits:
            # every file the encode may write, known before it starts: a write that fails half-way (a full disk)
            # leaves none of them behind
            written.extend(segment_sibling(s.uri, suffix) for s in splits for suffix in _WRITTEN_SUFFIXES)
            results = write_segments(kept, splits, storage=storage, sources={0: blob}, durable=False,
                                     payloads=d.payloads, max_batch_bytes=members[0].task.max_batch_bytes)
            for (m, g), w in zip(split_of, results):
                outcomes[m.index][1].extend(w.paths.values())
                g.staged(w, m.group, storage)
        return outcomes


@dataclass
class _Joined:
    """Segments decoded as one byte string: the bytes, rows and batch headers, and per segment (piece) its
    member, base offset, start in the bytes and length; per batch its piece."""

    blob: bytes
    records: pa.Table
    headers: BatchHeaders
    piece_member: np.ndarray
    piece_base: list[int]
    piece_start: np.ndarray
    lengths: np.ndarray
    batch_piece: np.ndarray
    #: the decompressed payloads the decode kept for the encode
    payloads: KeptPayloads


class _NotTogether(Exception):
    """These partitions are not cleaned together after all: each goes through its own pipeline."""


def _row_owner(records: pa.Table, piece_start: np.ndarray, piece_member: np.ndarray) -> np.ndarray:
    """The member each decoded row belongs to (from its batch's position among the segments decoded as one)."""
    position = records.column("batch_position").to_numpy()
    return piece_member[np.searchsorted(piece_start, position, side="right") - 1]


__all__ = ["TOGETHER_MAX_BYTES", "TOGETHER_MIN_PARTITIONS", "clean_together", "compact_bin"]
