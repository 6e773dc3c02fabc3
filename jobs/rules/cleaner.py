"""Kafka's log-cleaner decisions as pure functions over Arrow tables (no Spark, no I/O, time is a parameter).

This is the second pass of a compaction: given the rows of one segment group, the offset map of the pass
(:mod:`jobs.rules.offset_map`) and the partition's transaction state (:mod:`jobs.rules.transactions`), decide which
records survive, which batches stay as empty headers and which batches get a delete horizon stamped. The rules
are those of Kafka's ``Cleaner.cleanInto`` / ``MemoryRecords.filterTo`` (core LogCleaner.scala):

* per batch (``checkBatchRetention``): a data batch of an aborted transaction, or a marker whose
  transaction left no data in the log (and, for markers, whose delete horizon has passed), is discardable;
  the last batch of an active producer and the batch ending at the round's upper bound are kept even empty;
* per record (``shouldRetainRecord``): records above the map's latest offset are kept as they are; keyless
  records are dropped; a record survives iff no newer record of its key is mapped, and a tombstone also
  needs its batch's delete horizon not to have passed (legacy batches: a per-segment rule, item 13);
* a kept v2 batch that holds a tombstone, or a marker that became removable, gets
  ``deleteHorizonMs = now + delete.retention.ms`` unless it already has one. Where that sum does not fit a
  long (``delete.retention.ms`` near 2^63-1), Kafka's sum wraps negative and ``MemoryRecordsBuilder`` writes no
  negative horizon: the batch keeps none, so its tombstones and markers are never removed. The same here
  (:func:`delete_horizon`).

Every decision is an array operation over rows or batches; no Python code runs per record. The steps are
functions named after Kafka's: :func:`check_batch_retention` (per batch), :func:`should_retain_record` (per row),
:func:`filter_to` (what each batch becomes) and :func:`cleaner_stats`; :func:`clean_records` runs them in turn.

Public API::

    CleanParams(now_ms, upper_bound_offset, delete_retention_ms=DELETE_RETENTION_MS, legacy_delete_horizon_ms=0)
    clean_records(records, *, offset_map, txn_state, params, empty_batches=None, key_hashes=None,
                  segment_last_modified_ms=None) -> CleanResult
    key_hash_table(records, key_hashes=None) -> pa.Table (KEY_HASH_SCHEMA)
    delete_horizon(now_ms, delete_retention_ms) -> int | None
    legacy_delete_horizon(last_clean_segment_mtime_ms, delete_retention_ms) -> int
    CleanResult: .records (RECORD_SCHEMA), .empty_batches (BATCH_SCHEMA), .changed, .rebuilt_batches, .stats
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from jobs.rules.kafka_defaults import DELETE_RETENTION_MS, LONG_MAX
from jobs.rules.offset_map import OffsetMapResult
from jobs.rules.transactions import TxnState
from segment_io.errors import CorruptRecordError, SegjobsError
from segment_io.format import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
)
from segment_io.schema import (
    BATCH_COLUMNS,
    BATCH_SCHEMA,
    KEY_HASH_SCHEMA,
    RECORD_SCHEMA,
    arrow_array,
    int64_or_zero,
    validity,
)


class CleanerInputError(SegjobsError):
    """The tables handed to the cleaner break its contract (unsorted offsets, misaligned hashes)."""


@dataclass(frozen=True)
class CleanParams:
    """Inputs of one cleaning round that are not data.

    ``upper_bound_offset`` is the round's first uncleanable offset: the batch that ends just before it is kept
    even when empty (item 25). ``legacy_delete_horizon_ms`` is, as in Kafka's doClean, the last-modified time
    of the last already-clean segment minus ``delete.retention.ms`` (0 when there is none); see
    :func:`legacy_delete_horizon`.
    """

    now_ms: int
    upper_bound_offset: int
    delete_retention_ms: int = DELETE_RETENTION_MS
    legacy_delete_horizon_ms: int = 0


def delete_horizon(now_ms: int, delete_retention_ms: int) -> int | None:
    """The delete horizon a clean at ``now_ms`` stamps (``now + delete.retention.ms``), or None when Kafka stamps
    none: its long sum overflows (wraps negative), and ``MemoryRecordsBuilder.hasDeleteHorizonMs`` only writes a
    horizon >= 0. Such a batch keeps no horizon, so its tombstones and markers stay until delete.retention.ms is
    lowered: the "never" that 2^63-1 means."""
    horizon = now_ms + delete_retention_ms
    return horizon if 0 <= horizon <= LONG_MAX else None


def legacy_delete_horizon(last_clean_segment_mtime_ms: int | None, delete_retention_ms: int) -> int:
    """Kafka's horizon for pre-v2 tombstones: last clean segment's mtime minus delete.retention.ms, else 0."""
    return 0 if last_clean_segment_mtime_ms is None else last_clean_segment_mtime_ms - delete_retention_ms


@dataclass
class CleanStats:
    """What a clean did. Byte figures for rewritten batches are estimates (the encoder knows the real size)."""

    batches_read: int = 0
    #: records of the batches the clean inspected (Kafka's messagesRead: batches discarded whole are not read)
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_kept_estimate: int = 0
    duplicates_removed: int = 0
    tombstones_kept: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    markers_removed: int = 0
    #: keyless records in a compacted topic (Kafka's invalidMessagesRead)
    keyless_dropped: int = 0
    empty_batches_kept: int = 0
    horizons_stamped: int = 0

    def merged(self, other: "CleanStats") -> "CleanStats":
        """Field-wise sum (for adding up groups or partitions)."""
        return CleanStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class CleanResult:
    """The cleaned form of one segment group.

    ``records``: surviving rows (RECORD_SCHEMA, offset order). Keys, values, headers and offsets are the
    source's. In batches that must be re-encoded (``rebuilt_batches``, by base offset) the header columns
    describe the new header as Kafka's MemoryRecordsBuilder would write it: ``delete_horizon_ms`` (with
    ``batch_base_timestamp`` equal to it when set, else the first kept record's timestamp),
    ``batch_max_timestamp`` over the kept records (unchanged for LOG_APPEND_TIME), and for legacy (magic < 2)
    batches base/last offsets shrunk to the kept records. ``batch_position``/``batch_size`` still describe the
    source batch. Batches not listed are byte-identical to their source and may be copied.

    ``empty_batches``: BATCH_SCHEMA rows to write as header-only batches (Kafka's writeEmptyHeader: no codec,
    base timestamp -1, no delete horizon, magic 2).

    ``changed`` is False when writing the group would reproduce its source batches exactly (nothing dropped,
    emptied or rebuilt), so the job may leave the group's files alone.

    ``partitions``: when several partitions were cleaned in one call (see :class:`PartitionRows`), what each of
    them became, in partition order; ``stats`` and ``changed`` are then the sums over all of them.
    """

    records: pa.Table
    empty_batches: pa.Table
    changed: bool
    rebuilt_batches: np.ndarray
    stats: CleanStats = field(default_factory=CleanStats)
    partitions: tuple["PartitionClean", ...] = ()


@dataclass(frozen=True)
class PartitionRows:
    """The rows of several partitions cleaned in one call of :func:`clean_records` (a bin's small partitions,
    see :mod:`jobs.engine.compact.bin_cleaning`): which partition each row belongs to, and per partition what a
    single-partition clean takes from its map, its round and its topic. Each partition's rows are contiguous
    and in offset order (offsets start again at the next partition); the key hashes given to the cleaner and
    the map it looks them up in are keyed by partition and key (:func:`jobs.rules.offset_map.partition_keyed`),
    so no key of one partition ever shadows another's.

    Only data the per-partition rules treat alike in one array pass may be cleaned together: no transactional
    or control batches (their state is per partition and per transaction), no header-only batches and no legacy
    (magic 0/1) batches; :func:`clean_records` refuses anything else."""

    #: partition index of each row (non-decreasing)
    row_partition: np.ndarray
    #: per partition: its offset map's latest offset (Kafka's ``map.latestOffset``)
    latest_offset: np.ndarray
    #: per partition: its round's first uncleanable offset (``CleanParams.upper_bound_offset``)
    upper_bound_offset: np.ndarray
    #: per partition: its topic's ``delete.retention.ms``
    delete_retention_ms: np.ndarray
    #: per partition: its transaction and producer state (only its active producers matter here)
    txn_states: Sequence[TxnState]

    @property
    def count(self) -> int:
        return len(self.latest_offset)


@dataclass(frozen=True)
class PartitionClean:
    """What one partition of a :class:`PartitionRows` clean became: its kept rows are
    ``CleanResult.records[row_start:row_end]``."""

    changed: bool
    stats: CleanStats
    row_start: int
    row_end: int


#: Records of at most this many bytes (keys, value references, batch columns) are combined into one chunk
#: before cleaning: a bounded copy that saves a concatenation per column and a filter per chunk.
_COMBINE_BYTES = 4 << 20

_BATCH_NUMERIC = ("batch_base_offset", "batch_last_offset", "batch_position", "batch_size", "batch_base_timestamp",
                  "batch_max_timestamp", "timestamp_type", "magic", "codec", "transactional", "control",
                  "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch", "segment_base_offset")


def clean_records(records: pa.Table, *, offset_map: OffsetMapResult, txn_state: TxnState, params: CleanParams,
                  empty_batches: pa.Table | None = None,
                  key_hashes: tuple[np.ndarray, np.ndarray] | None = None,
                  segment_last_modified_ms: Mapping[int, int] | None = None,
                  partitions: PartitionRows | None = None) -> CleanResult:
    """Clean the rows of one segment group (RECORD_SCHEMA, strictly increasing offsets) like Kafka's cleanInto.

    ``empty_batches`` are the group's header-only batches (BATCH_SCHEMA, e.g. kept by an earlier clean): they
    are kept again or dropped by the same rules. ``key_hashes`` (hi, lo) aligned with ``records`` avoids
    rehashing when the caller has them; by default keys are hashed with ``segment_io.decode.hash_keys``, the
    hash the offset map was built with. ``segment_last_modified_ms`` maps a source segment's base offset to its
    file mtime, for the legacy tombstone rule (a segment not listed keeps its legacy tombstones).

    ``partitions`` cleans the rows of several partitions at once (see :class:`PartitionRows`): the map's latest
    offset, the round's upper bound, ``delete.retention.ms`` and the active producers are then each row's
    partition's, ``txn_state`` and those fields of ``params`` are not used, and ``CleanResult.partitions`` says
    what each partition became; every decision is the one a clean of that partition alone makes.

    The steps are Kafka's, each a function over all rows or batches at once: :func:`check_batch_retention`,
    :func:`should_retain_record`, :func:`filter_to`, then :func:`cleaner_stats`.
    """
    rows = CleanRows.read(records, partitions)
    batches = CleanBatches.read(rows, empty_batches, partitions)
    retention = check_batch_retention(batches, txn_state, params, partitions)
    verdict = should_retain_record(rows, batches, retention, offset_map, params, key_hashes=key_hashes,
                                   segment_last_modified_ms=segment_last_modified_ms, partitions=partitions)
    filtered = filter_to(rows, batches, retention, verdict, params, partitions)
    stats = cleaner_stats(rows, batches, retention, verdict, filtered, partitions)
    by_partition: tuple[PartitionClean, ...] = ()
    if partitions is not None:
        changed_of = _Owners(batches.partition, partitions.count).count(filtered.changed)
        kept_of = np.array([s.records_kept for s in stats], np.int64)
        row_end = np.cumsum(kept_of)
        by_partition = tuple(PartitionClean(bool(changed_of[i]), stats[i], int(row_end[i] - kept_of[i]),
                                            int(row_end[i])) for i in range(partitions.count))
    total = stats[0]
    for one in stats[1:]:
        total = total.merged(one)
    return CleanResult(
        records=filtered.records,
        empty_batches=filtered.empty_batches,
        changed=bool(filtered.changed.any()),
        rebuilt_batches=np.sort(batches.col["batch_base_offset"][filtered.rebuilt]),
        stats=total,
        partitions=by_partition,
    )


@dataclass(frozen=True)
class CleanRows:
    """The rows of a clean as its steps read them: the table, its offsets and batch columns as arrays."""

    table: pa.Table
    offset: np.ndarray
    #: each row's partition index (None: the rows are one partition's)
    partition: np.ndarray | None
    #: the ``_BATCH_NUMERIC`` columns, one entry per row
    col: dict[str, np.ndarray]
    has_horizon: np.ndarray
    horizon: np.ndarray

    @property
    def count(self) -> int:
        return self.table.num_rows

    @classmethod
    def read(cls, records: pa.Table, partitions: PartitionRows | None) -> "CleanRows":
        """The rows, checked: offsets strictly increasing (within each partition, partitions contiguous)."""
        n = records.num_rows
        if records.num_columns and records.column(0).num_chunks > 1 \
                and records.get_total_buffer_size() <= _COMBINE_BYTES:  # (`nbytes` costs more than the copy)
            # A small group (the segments of a small partition, one chunk each) is cheaper to handle as one
            # chunk: every column is then read without a concatenation, and the kept rows filtered in one pass.
            records = records.combine_chunks()
        offsets = records.column("offset").to_numpy()
        part = None if partitions is None else np.asarray(partitions.row_partition, np.int64)
        if part is not None and len(part) != n:
            raise CleanerInputError(f"row_partition has {len(part)} entries for {n} records")
        increasing = offsets[1:] > offsets[:-1]
        if part is not None and n > 1:
            if not np.all(part[1:] >= part[:-1]):
                raise CleanerInputError("each partition's rows must be contiguous, in partition order")
            increasing |= part[1:] != part[:-1]
        if n > 1 and not np.all(increasing):
            raise CleanerInputError("clean_records needs rows in strictly increasing offset order")
        horizon_col = records.column("delete_horizon_ms")
        return cls(records, offsets, part, {name: records.column(name).to_numpy() for name in _BATCH_NUMERIC},
                   validity(horizon_col), int64_or_zero(horizon_col))


@dataclass(frozen=True)
class CleanBatches:
    """Every batch a clean reads: the runs of rows from one source batch (in row order), then the header-only
    batches. Each array has one entry per batch."""

    #: each row's batch (an index into the arrays here)
    row_batch: np.ndarray
    #: records each batch holds (0 for a header-only batch)
    count: np.ndarray
    #: the ``_BATCH_NUMERIC`` columns
    col: dict[str, np.ndarray]
    has_horizon: np.ndarray
    horizon: np.ndarray
    #: control type of a control batch's record (-1 for data and header-only batches)
    control_type: np.ndarray
    #: each batch's partition index (None: one partition)
    partition: np.ndarray | None

    def __len__(self) -> int:
        return len(self.count)

    @classmethod
    def read(cls, rows: CleanRows, empty_batches: pa.Table | None, partitions: PartitionRows | None) -> "CleanBatches":
        n, col, part = rows.count, rows.col, rows.partition
        boundary = np.ones(n, bool)
        if n > 1:
            boundary[1:] = ((col["batch_base_offset"][1:] != col["batch_base_offset"][:-1])
                            | (col["batch_position"][1:] != col["batch_position"][:-1])
                            | (col["segment_base_offset"][1:] != col["segment_base_offset"][:-1]))
            if part is not None:
                boundary[1:] |= part[1:] != part[:-1]
        starts = np.flatnonzero(boundary)
        counts = np.diff(np.append(starts, n)).astype(np.int64)
        b = {name: col[name][starts] for name in _BATCH_NUMERIC}
        b_has_h, b_h = rows.has_horizon[starts], rows.horizon[starts]
        b_ctype = _control_types(rows.table, starts, b)
        empties = empty_batches if empty_batches is not None else _empty_batches()
        if partitions is not None and (empties.num_rows or b["transactional"].any() or b["control"].any()
                                       or (b["magic"] < 2).any()):
            raise CleanerInputError("partitions cleaned together may hold no header-only, transactional, control "
                                    "or legacy batches")
        if empties.num_rows:
            e_h = empties.column("delete_horizon_ms")
            for name in _BATCH_NUMERIC:
                b[name] = np.concatenate([b[name], empties.column(name).to_numpy()])
            b_has_h = np.concatenate([b_has_h, validity(e_h)])
            b_h = np.concatenate([b_h, int64_or_zero(e_h)])
            b_ctype = np.concatenate([b_ctype, np.full(empties.num_rows, -1, np.int16)])
            counts = np.concatenate([counts, np.zeros(empties.num_rows, np.int64)])
        return cls(np.cumsum(boundary) - 1, counts, b, b_has_h, b_h, b_ctype, None if part is None else part[starts])


@dataclass(frozen=True)
class BatchRetention:
    """Kafka's ``checkBatchRetention`` for every batch (its ``BatchRetentionResult``)."""

    #: the batch's records go (an aborted transaction's data, or a marker that may go and whose horizon passed)
    discard_records: np.ndarray
    #: the batch stays as a header-only batch if no record of it is kept (``RETAIN_EMPTY``): the last batch
    #: of an active producer, or the one ending just before the round's upper bound
    retain_empty: np.ndarray
    #: ``containsMarkerForEmptyTxn``: a marker whose transaction left no data (it gets a delete horizon)
    marker_for_empty_txn: np.ndarray

    @property
    def deleted_whole(self) -> np.ndarray:
        """Batches discarded without their records being read (Kafka's ``DELETE``)."""
        return self.discard_records & ~self.retain_empty


def check_batch_retention(batches: CleanBatches, txn_state: TxnState, params: CleanParams,
                          partitions: PartitionRows | None = None) -> BatchRetention:
    """Kafka's ``Cleaner.checkBatchRetention`` (with ``CleanedTransactionMetadata.onBatchRead`` and
    ``isBatchLastRecordOfProducer``) for every batch at once."""
    b, counts = batches.col, batches.count
    control = b["control"]
    pid, last = b["producer_id"], b["batch_last_offset"]
    txn_data = b["transactional"] & ~control
    aborted_data = np.zeros(len(control), bool)
    if txn_data.any():
        aborted_data[txn_data] = txn_state.aborted.contains(pid[txn_data], last[txn_data])
    known_marker = (batches.control_type == CONTROL_ABORT) | (batches.control_type == CONTROL_COMMIT)
    # A marker may go once its transaction has no data left in the log (for ABORT: every aborted batch is
    # gone, item 15; for COMMIT: this pass saw none of its data, item 16). An emptied marker always may.
    with_data = txn_state.completed.markers_with_data()
    marker_has_data = np.isin(b["batch_base_offset"], with_data) if len(with_data) else np.zeros(len(control), bool)
    can_discard = np.where(control, (counts == 0) | (known_marker & ~marker_has_data), aborted_data)
    discard_records = np.where(control, can_discard & batches.has_horizon & (batches.horizon <= params.now_ms),
                               can_discard)
    if partitions is None:
        last_of_producer = txn_state.active.is_last_batch(pid, last, b["producer_epoch"], control)
        upper_bound: np.ndarray | int = params.upper_bound_offset
    else:
        assert batches.partition is not None
        last_of_producer = _last_of_producers(partitions, batches.partition, pid, last, b["producer_epoch"],
                                              control)
        upper_bound = np.asarray(partitions.upper_bound_offset, np.int64)[batches.partition]
    return BatchRetention(discard_records=discard_records,
                          retain_empty=last_of_producer | (last + 1 == upper_bound),
                          marker_for_empty_txn=can_discard & control)


@dataclass(frozen=True)
class RecordRetention:
    """Kafka's ``shouldRetainRecord`` for every row, with the reasons the statistics count."""

    keep: np.ndarray
    #: the row's batch discards its records (:attr:`BatchRetention.discard_records`)
    discarded_with_batch: np.ndarray
    #: the row is a control record (judged with its batch, never by the map)
    control: np.ndarray
    #: a data row the map judges that has no key (dropped: Kafka's invalid message)
    keyless: np.ndarray
    #: a keyed data row the map judges
    looked_up: np.ndarray
    #: no newer record of the row's key is mapped
    latest_for_key: np.ndarray
    value_null: np.ndarray
    #: a tombstone here would be kept (its delete horizon has not passed)
    retain_deletes: np.ndarray


def should_retain_record(rows: CleanRows, batches: CleanBatches, retention: BatchRetention,
                         offset_map: OffsetMapResult, params: CleanParams, *,
                         key_hashes: tuple[np.ndarray, np.ndarray] | None = None,
                         segment_last_modified_ms: Mapping[int, int] | None = None,
                         partitions: PartitionRows | None = None) -> RecordRetention:
    """Kafka's ``Cleaner.shouldRetainRecord`` for every row at once: records of discarded batches go, control
    records and those above the map's latest offset stay, keyless records go, and a record stays iff no newer
    record of its key is mapped and, for a tombstone, its delete horizon (legacy batches: its segment's rule)
    has not passed."""
    records, offsets, n = rows.table, rows.offset, rows.count
    row_discard = retention.discard_records[batches.row_batch]
    row_control = batches.col["control"][batches.row_batch]
    key_null = ~validity(records.column("key"))
    value_null = ~validity(records.column("value"))
    if partitions is None:
        past_latest = offsets > offset_map.latest_offset
    else:
        assert rows.partition is not None
        past_latest = offsets > np.asarray(partitions.latest_offset, np.int64)[rows.partition]
    judged = ~row_discard & ~row_control & ~past_latest  # data rows the map decides
    keyless = judged & key_null
    lookup = judged & ~key_null
    mapped = np.full(n, -1, np.int64)
    if lookup.any():
        hi, lo = _hashes(records, key_hashes)
        mapped[lookup] = offset_map.offset_map.get(hi[lookup], lo[lookup])
    latest_for_key = offsets >= mapped
    retain_deletes = ~rows.has_horizon | (params.now_ms < rows.horizon)
    legacy_rows = rows.col["magic"] < 2
    if legacy_rows.any():  # the per-segment rule of pre-v2 tombstones (rare: old archives)
        retain_deletes = np.where(legacy_rows, _legacy_retain(rows.col["segment_base_offset"], params,
                                                              segment_last_modified_ms), retain_deletes)
    keep_judged = latest_for_key & (~value_null | retain_deletes)
    keep = ~row_discard & (row_control | past_latest | (lookup & keep_judged))
    return RecordRetention(keep=keep, discarded_with_batch=row_discard, control=row_control, keyless=keyless,
                           looked_up=lookup, latest_for_key=latest_for_key, value_null=value_null,
                           retain_deletes=retain_deletes)


@dataclass(frozen=True)
class Filtered:
    """What :func:`filter_to` made of the batches: the kept rows, the header-only batches, and per batch."""

    records: pa.Table
    empty_batches: pa.Table
    #: records kept of each batch
    kept: np.ndarray
    #: the batch is written with records
    written: np.ndarray
    #: the batch gets a delete horizon stamped
    need_horizon: np.ndarray
    #: the batch is written re-encoded (some records dropped, or a horizon stamped)
    rebuilt: np.ndarray
    #: the batch stays as a header-only batch
    empty_header: np.ndarray
    #: writing the batch does not reproduce its source bytes
    changed: np.ndarray


def filter_to(rows: CleanRows, batches: CleanBatches, retention: BatchRetention, verdict: RecordRetention,
              params: CleanParams, partitions: PartitionRows | None = None) -> Filtered:
    """Kafka's ``MemoryRecords.filterTo`` for every batch at once: which batches are written with their kept
    records (re-encoded where a record went or a delete horizon is stamped), which as header-only batches
    (``writeEmptyHeader``), and the header columns of the rebuilt ones as ``MemoryRecordsBuilder`` writes them."""
    b, counts, nb = batches.col, batches.count, len(batches)
    keep = verdict.keep
    kept = (np.bincount(batches.row_batch[keep], minlength=nb).astype(np.int64) if rows.count
            else np.zeros(nb, np.int64))
    kept_tombstones = (np.bincount(batches.row_batch[keep & verdict.value_null], minlength=nb) if rows.count
                       else np.zeros(nb, np.int64))
    written = kept > 0
    need_horizon = (written & (b["magic"] >= 2) & ((kept_tombstones > 0) | retention.marker_for_empty_txn)
                    & ~batches.has_horizon)
    if partitions is None:
        horizon = delete_horizon(params.now_ms, params.delete_retention_ms)
        if horizon is None:
            need_horizon[:] = False  # no horizon Kafka would write: the batch keeps none (see delete_horizon)
        stamp: np.ndarray | np.int64 = np.int64(horizon or 0)
    else:
        assert batches.partition is not None
        horizons = [delete_horizon(params.now_ms, int(ms)) for ms in partitions.delete_retention_ms]
        need_horizon &= np.array([h is not None for h in horizons], bool)[batches.partition]
        stamp = np.array([h or 0 for h in horizons], np.int64)[batches.partition]
    new_has_h = batches.has_horizon | need_horizon
    new_h = np.where(need_horizon, stamp, batches.horizon)
    rebuilt = written & ((kept < counts) | need_horizon)
    empty_header = ~written & retention.retain_empty
    header_differs = ((b["batch_base_timestamp"] != NO_TIMESTAMP) | (b["codec"] != 0) | batches.has_horizon
                      | (b["magic"] != 2))
    changed = (rebuilt | ((counts > 0) & ~written) | ((counts == 0) & ~empty_header)
               | ((counts == 0) & empty_header & header_differs))
    return Filtered(records=_surviving_rows(rows.table, keep, batches.row_batch, rebuilt, new_has_h, new_h, b),
                    empty_batches=_empty_headers(b, empty_header), kept=kept, written=written,
                    need_horizon=need_horizon, rebuilt=rebuilt, empty_header=empty_header, changed=changed)


def cleaner_stats(rows: CleanRows, batches: CleanBatches, retention: BatchRetention, verdict: RecordRetention,
                  filtered: Filtered, partitions: PartitionRows | None = None) -> list[CleanStats]:
    """Kafka's ``CleanerStats`` of the clean, one per partition (one when the rows are one partition's)."""
    k = 1 if partitions is None else partitions.count
    per_row = _Owners(rows.partition, k)
    per_batch = _Owners(batches.partition, k)
    counts, nb = batches.count, len(batches)
    v = verdict
    columns = dict(
        batches_read=per_batch.count(np.ones(nb, bool)),
        records_read=per_batch.total(np.where(retention.deleted_whole, 0, counts)),
        records_kept=per_row.count(v.keep),
        bytes_read=per_batch.total(batches.col["batch_size"].astype(np.int64)),
        bytes_kept_estimate=per_batch.estimate(
            _bytes_kept(batches.col["batch_size"], counts, filtered.kept, filtered.written, filtered.rebuilt),
            V2_HEADER_SIZE * per_batch.count(filtered.empty_header)),
        duplicates_removed=per_row.count(v.looked_up & ~v.latest_for_key),
        tombstones_kept=per_row.count(v.keep & v.value_null & ~v.control),
        tombstones_removed=per_row.count(v.looked_up & v.latest_for_key & v.value_null & ~v.retain_deletes),
        aborted_records_removed=per_row.count(v.discarded_with_batch & ~v.control),
        markers_removed=per_row.count(v.discarded_with_batch & v.control),
        keyless_dropped=per_row.count(v.keyless),
        empty_batches_kept=per_batch.count(filtered.empty_header),
        horizons_stamped=per_batch.count(filtered.need_horizon),
    )
    return [CleanStats(**{name: int(values[i]) for name, values in columns.items()}) for i in range(k)]


class _Owners:
    """Sums over rows or batches per partition (``owner``: each row's or batch's partition index; None: all of
    them are the one partition's)."""

    def __init__(self, owner: np.ndarray | None, k: int) -> None:
        self.owner, self.k = owner, k

    def count(self, mask: np.ndarray) -> np.ndarray:
        if self.owner is None:
            return np.array([np.count_nonzero(mask)], np.int64)
        return np.bincount(self.owner[mask], minlength=self.k)

    def total(self, values: np.ndarray) -> np.ndarray:
        if self.owner is None:
            return np.array([int(values.sum())], np.int64)
        return self._sums(values).astype(np.int64)

    def estimate(self, values: np.ndarray, extra: np.ndarray) -> np.ndarray:
        """Float ``values`` summed, plus ``extra``, truncated to whole bytes: each partition's sum taken over its
        own (contiguous) values as one array, so that it rounds exactly as a clean of that partition alone."""
        if self.owner is None:
            return np.array([int(values.sum() + int(extra[0]))], np.int64)
        bounds = np.searchsorted(self.owner, np.arange(self.k + 1))
        return np.array([int(values[bounds[i]:bounds[i + 1]].sum() + int(extra[i])) for i in range(self.k)],
                        np.int64)

    def _sums(self, values: np.ndarray) -> np.ndarray:
        assert self.owner is not None
        sums = np.zeros(self.k, values.dtype)
        np.add.at(sums, self.owner, values)
        return sums


def _last_of_producers(partitions: PartitionRows, b_part: np.ndarray, pid: np.ndarray, last: np.ndarray,
                       epoch: np.ndarray, control: np.ndarray) -> np.ndarray:
    """Kafka's isBatchLastRecordOfProducer for batches of several partitions, each judged by its own partition's
    active producers (one call per partition that has any, never per batch)."""
    out = np.zeros(len(b_part), bool)
    bounds = np.searchsorted(b_part, np.arange(partitions.count + 1))
    for i, state in enumerate(partitions.txn_states):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if hi > lo and len(state.active):
            out[lo:hi] = state.active.is_last_batch(pid[lo:hi], last[lo:hi], epoch[lo:hi], control[lo:hi])
    return out


def _control_types(records: pa.Table, starts: np.ndarray, b: dict[str, np.ndarray]) -> np.ndarray:
    """Control type of each record-holding batch's first record (-1 for data batches).

    One Python step per control batch (markers are one record each), never per data record, with the decoder's
    parser (:func:`segment_io.decode.control_record_type`). A key that is not a control key makes Kafka's
    ControlRecordType.parseTypeId throw; so does this.
    """
    from segment_io.decode import control_record_type

    ctype = np.full(len(starts), -1, np.int16)
    ctl = np.flatnonzero(b["control"])
    if len(ctl) == 0:
        return ctype
    keys = records.column("key").take(pa.array(starts[ctl])).to_pylist()
    for j, key in zip(ctl, keys):
        try:
            ctype[j] = control_record_type(key)
        except ValueError as exc:
            raise CorruptRecordError(f"{exc}: key {key!r}; source segment {int(b['segment_base_offset'][j])}",
                                     position=int(b["batch_position"][j]),
                                     offset=int(b["batch_base_offset"][j])) from None
    return ctype


def _hashes(records: pa.Table, key_hashes: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    if key_hashes is None:
        from segment_io.decode import hash_keys

        key_hashes = hash_keys(records.column("key"))
    hi, lo = (np.asarray(h, np.int64) for h in key_hashes)
    if len(hi) != records.num_rows or len(lo) != records.num_rows:
        raise CleanerInputError(f"key_hashes has {len(hi)}/{len(lo)} entries for {records.num_rows} records")
    return hi, lo


def _legacy_retain(segment_base: np.ndarray, params: CleanParams,
                   mtimes: Mapping[int, int] | None) -> np.ndarray:
    """Kafka's retainLegacyDeletesAndTxnMarkers per row: its segment was modified after the legacy horizon."""
    if not mtimes:
        return np.ones(len(segment_base), bool)
    segs, inverse = np.unique(segment_base, return_inverse=True)
    per_seg = np.array([mtimes.get(int(s), params.legacy_delete_horizon_ms + 1) > params.legacy_delete_horizon_ms
                        for s in segs], bool)
    return per_seg[inverse]


def _surviving_rows(records: pa.Table, keep: np.ndarray, batch_id: np.ndarray, rebuilt: np.ndarray,
                    new_has_h: np.ndarray, new_h: np.ndarray, b: dict[str, np.ndarray]) -> pa.Table:
    """Kept rows; header columns of rebuilt batches recomputed as MemoryRecordsBuilder would write them."""
    # every row kept (a later pass that changes nothing): the same rows, without copying all of them again
    out = records if keep.all() else records.filter(pa.array(keep))
    if not rebuilt.any():
        return out
    bid = batch_id[keep]
    row_rebuilt = rebuilt[bid]
    ts = out.column("timestamp").to_numpy()
    offs = out.column("offset").to_numpy()
    nb = len(rebuilt)
    # Rows of one batch are contiguous and in offset order (batch ids never decrease): the first kept row of
    # each batch gives its first timestamp/offset, the last its last offset, a reduction over each run its
    # max timestamp. (Rows are kept, so there is at least one run.)
    first_idx = np.flatnonzero(np.diff(bid, prepend=-1))
    present = bid[first_idx]
    first_row = np.zeros(nb, np.int64)
    first_row[present] = first_idx
    max_ts = np.full(nb, np.iinfo(np.int64).min, np.int64)
    max_ts[present] = np.maximum.reduceat(ts, first_idx)
    last_off = np.full(nb, -1, np.int64)
    last_off[present] = offs[np.append(first_idx[1:], len(bid)) - 1]

    has_h = np.where(row_rebuilt, new_has_h[bid], validity(out.column("delete_horizon_ms")))
    h = np.where(row_rebuilt, new_h[bid], int64_or_zero(out.column("delete_horizon_ms")))
    base_ts = np.where(new_has_h, new_h, ts[first_row])
    batch_max = np.where(b["timestamp_type"] == 1, b["batch_max_timestamp"], max_ts)
    legacy = b["magic"] < 2
    batch_base = np.where(legacy, offs[first_row], b["batch_base_offset"])
    batch_last = np.where(legacy, last_off, b["batch_last_offset"])

    def patched(name: str, per_batch: np.ndarray) -> pa.Array:
        current = out.column(name).to_numpy()
        return arrow_array(np.where(row_rebuilt, per_batch[bid], current), RECORD_SCHEMA.field(name).type)

    out = out.set_column(out.schema.get_field_index("delete_horizon_ms"), RECORD_SCHEMA.field("delete_horizon_ms"),
                         pa.array(h, pa.int64(), mask=~has_h))
    for name, per_batch in (("batch_base_timestamp", base_ts), ("batch_max_timestamp", batch_max),
                            ("batch_base_offset", batch_base), ("batch_last_offset", batch_last)):
        out = out.set_column(out.schema.get_field_index(name), RECORD_SCHEMA.field(name), patched(name, per_batch))
    return out


def _empty_headers(b: dict[str, np.ndarray], selected: np.ndarray) -> pa.Table:
    """Header-only batches as Kafka's DefaultRecordBatch.writeEmptyHeader writes them."""
    k = int(np.count_nonzero(selected))
    if k == 0:  # the common case: no table to assemble column by column
        return _empty_batches()
    cols = {name: b[name][selected] for name in _BATCH_NUMERIC}
    cols["batch_size"] = np.full(k, V2_HEADER_SIZE, np.int32)
    cols["batch_base_timestamp"] = np.full(k, NO_TIMESTAMP, np.int64)
    cols["codec"] = np.zeros(k, np.int8)
    # Writing is v2 only; a legacy batch kept empty becomes a v2 header (Kafka would refuse: see module notes).
    legacy = cols["magic"] < 2
    cols["timestamp_type"] = np.where(legacy & (cols["timestamp_type"] < 0), 0, cols["timestamp_type"])
    cols["magic"] = np.full(k, 2, np.int8)
    arrays = []
    for name in BATCH_COLUMNS:
        ftype = BATCH_SCHEMA.field(name).type
        if name == "delete_horizon_ms":
            arrays.append(pa.nulls(k, ftype))
        else:
            arrays.append(arrow_array(cols[name], ftype))
    table = pa.Table.from_arrays(arrays, schema=BATCH_SCHEMA)
    return table.sort_by("batch_base_offset") if k > 1 else table


@functools.cache
def _empty_batches() -> pa.Table:
    """No header-only batch (made at first use: pyarrow's ``empty_table`` imports pandas, which a run that
    decodes nothing, or ``--help``, has no use for)."""
    return BATCH_SCHEMA.empty_table()


def _bytes_kept(size: np.ndarray, counts: np.ndarray, kept: np.ndarray, written: np.ndarray,
                rebuilt: np.ndarray) -> np.ndarray:
    """Each record-holding batch's estimated bytes after the clean (header-only batches are counted apart)."""
    size = size.astype(np.int64)
    payload = np.maximum(size - V2_HEADER_SIZE, 0)
    share = np.divide(kept, counts, out=np.zeros(len(counts)), where=counts > 0)
    return np.where(rebuilt, V2_HEADER_SIZE + payload * share, np.where(written, size, 0))


# --------------------------------------------------------------------------------------------------
# Whole-partition convenience: one Kafka doClean over an in-memory log
# --------------------------------------------------------------------------------------------------


def key_hash_table(records: pa.Table, key_hashes: tuple[np.ndarray, np.ndarray] | None = None) -> pa.Table:
    """The KEY_HASH_SCHEMA projection of decoded records (what ``segment_io.read_key_hashes`` gives from files).

    Null keys hash to (0, 0). ``key_hashes`` defaults to ``segment_io.decode.hash_keys`` of the key column.
    """
    hi, lo = _hashes(records, key_hashes)
    key_null = ~validity(records.column("key"))
    hi = np.where(key_null, 0, hi)
    lo = np.where(key_null, 0, lo)
    n = records.num_rows
    ctype = np.full(n, -1, np.int16)
    if n:
        control = records.column("control").to_numpy()
        boundary = np.ones(n, bool)
        base = records.column("batch_base_offset").to_numpy()
        boundary[1:] = base[1:] != base[:-1]
        starts = np.flatnonzero(boundary)
        batch_cols = {"control": control[starts], "segment_base_offset":
                      records.column("segment_base_offset").to_numpy()[starts],
                      "batch_position": records.column("batch_position").to_numpy()[starts],
                      "batch_base_offset": base[starts]}
        per_batch = _control_types(records, starts, batch_cols)
        ctype = np.where(control, per_batch[np.cumsum(boundary) - 1], -1).astype(np.int16)
    arrays = {
        "key_hash_hi": arrow_array(hi, pa.int64()), "key_hash_lo": arrow_array(lo, pa.int64()),
        "key_is_null": pa.array(key_null), "value_is_null": pa.array(~validity(records.column("value"))),
        "control_type": arrow_array(ctype, pa.int16()),
    }
    return pa.table([arrays[f.name] if f.name in arrays else records.column(f.name) for f in KEY_HASH_SCHEMA],
                    schema=KEY_HASH_SCHEMA)


__all__ = [
    "CleanParams", "CleanResult", "CleanStats", "CleanerInputError", "clean_records", "key_hash_table",
    "delete_horizon", "legacy_delete_horizon",
]
