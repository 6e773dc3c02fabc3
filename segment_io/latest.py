"""A compacted topic read as a table: the latest record per key, the kernel the ``segjobs table`` job and the
``kafka-segments`` source's ``latest`` read mode share (both may import ``segment_io``; ``jobs`` may not be
imported from here).

What a ``read_committed`` consumer would keep after reading a partition up to its last stable offset, one row
per key:

* only data records count: control batches (transaction markers) never appear;
* records of aborted transactions never appear (the caller says which rows those are: it knows the
  partition's transaction state);
* keyless records are not part of the table (Kafka's cleaner drops them from a compacted topic, too);
* per key the record with the highest offset wins; when that record is a tombstone (null value) the key is
  deleted.

Keys are grouped by their 128-bit hash (:func:`segment_io.hashing.hash_keys`, the hash compaction's offset map
uses), so no Python object is made per record.

Public API::

    TABLE_SCHEMA                                        the table's columns (also its Delta schema)
    eligible_rows(records, *, aborted, start, end) -> np.ndarray   rows that can be a key's latest
    latest_indices(hi, lo, offsets, eligible) -> np.ndarray        indices of each key's latest row
    LatestRows                                          the latest rows of a partition, fed segment by segment
    aborted_rows(records, txn_state) -> np.ndarray | None          rows of aborted transactions
    partition_latest(segments, ...) -> pa.Table         a whole partition's live rows, from its segments' bytes
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from segment_io.schema import RECORD_SCHEMA
from segment_io.transactions import TxnState

#: The table's rows: one per live key of a partition. ``topic``, ``partition`` and ``offset`` join a row back
#: to its record in the log; ``key`` is never null (keyless records are not in the table) and neither is
#: ``value`` in practice (a tombstone deletes its key's row). The fields are the record schema's own.
TABLE_SCHEMA = pa.schema([
    RECORD_SCHEMA.field(name).with_nullable(False) if name == "key" else RECORD_SCHEMA.field(name)
    for name in ("topic", "partition", "key", "value", "headers", "offset", "timestamp", "timestamp_type")
])

#: The decoded columns the table needs (plus ``control``, ``transactional``, ``producer_id`` and
#: ``batch_last_offset``, which decide eligibility).
SOURCE_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
                  "batch_last_offset", "transactional", "control", "producer_id")


def eligible_rows(records: pa.Table, *, aborted: np.ndarray | None, start: int, end: int) -> np.ndarray:
    """Which rows of ``records`` (decoded RECORD_SCHEMA columns) may be their key's latest: data records with a
    key, not aborted (``aborted``: a mask aligned with the rows, None when no row is), at an offset in
    ``[start, end)``."""
    offsets = records.column("offset").to_numpy()
    ok = (offsets >= start) & (offsets < end)
    ok &= ~records.column("control").to_numpy(zero_copy_only=False)
    ok &= pc.is_valid(records.column("key")).to_numpy(zero_copy_only=False)
    if aborted is not None:
        ok &= ~np.asarray(aborted, bool)
    return ok


def latest_indices(hi: np.ndarray, lo: np.ndarray, offsets: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Indices (in offset order) of the eligible row with the highest offset of each key (by its hash)."""
    idx = np.flatnonzero(eligible)
    if not len(idx):
        return idx
    order = idx[np.lexsort((offsets[idx], lo[idx], hi[idx]))]
    h, lw = hi[order], lo[order]
    last = np.ones(len(order), bool)
    last[:-1] = (h[1:] != h[:-1]) | (lw[1:] != lw[:-1])
    return np.sort(order[last])


class LatestRows:
    """The latest row per key of one partition, fed its records in offset order (a segment at a time), so a
    partition never has to be decoded whole: what is held is one row per distinct key seen so far (plus the
    rows superseded since the last compaction of the held rows, at most as many again).

    Each :meth:`add` costs time linear in the rows it is given (amortized): a compiled hash table maps each key
    hash to its held row, and a row a later record of its key supersedes is only marked dead; the held rows are
    compacted when the dead ones outnumber the live ones, or when the table grows.

    ``rows()`` gives TABLE_SCHEMA rows in offset order, tombstones included (a null ``value``: the key is
    deleted), so a caller can tell upserts from deletes.
    """

    def __init__(self) -> None:
        self._chunks: list[pa.Table] = []
        self._hi_chunks: list[np.ndarray] = []
        self._lo_chunks: list[np.ndarray] = []
        self._dead = np.zeros(0, np.bool_)
        self._total = 0  # rows held, dead ones included
        self._live = 0
        self._slots = _empty_slots(16)
        #: records looked at and records that could count (data, keyed, committed, in range)
        self.records_read = 0
        self.records_eligible = 0

    def add(self, records: pa.Table, eligible: np.ndarray) -> None:
        """Fold ``records`` (later offsets than any added before) into the latest rows."""
        from segment_io.hashing import hash_keys

        self.records_read += records.num_rows
        idx = np.flatnonzero(eligible)
        self.records_eligible += len(idx)
        if not len(idx):
            return
        new = records.take(pa.array(idx)).select(list(TABLE_SCHEMA.names)).cast(TABLE_SCHEMA)
        hi, lo = hash_keys(new.column("key"))
        n = len(idx)
        if 2 * (self._live + n) > len(self._slots[2]):
            self._compact(slots=_slot_count(2 * (self._live + n)))
        if self._total + n > len(self._dead):
            dead = np.zeros(max(2 * len(self._dead), self._total + n), np.bool_)
            dead[:self._total] = self._dead[:self._total]
            self._dead = dead
        slot_hi, slot_lo, slot_row = self._slots
        self._live += _upsert(slot_hi, slot_lo, slot_row, np.ascontiguousarray(hi, np.int64),
                              np.ascontiguousarray(lo, np.int64), self._total, self._dead)
        self._chunks.append(new)
        self._hi_chunks.append(hi)
        self._lo_chunks.append(lo)
        self._total += n
        if self._total - self._live > max(self._live, 1 << 16):
            self._compact(slots=len(slot_row))

    def _compact(self, *, slots: int) -> None:
        """Drop the dead rows, renumber the live ones and rebuild the hash table with ``slots`` slots."""
        keep = ~self._dead[:self._total]
        rows = pa.concat_tables(self._chunks).filter(pa.array(keep)).combine_chunks() if self._chunks \
            else TABLE_SCHEMA.empty_table()
        hi = np.concatenate(self._hi_chunks)[keep] if self._hi_chunks else np.zeros(0, np.int64)
        lo = np.concatenate(self._lo_chunks)[keep] if self._lo_chunks else np.zeros(0, np.int64)
        self._chunks, self._hi_chunks, self._lo_chunks = [rows], [hi], [lo]
        self._total = self._live = len(hi)
        self._dead = np.zeros(max(len(hi), 16), np.bool_)
        self._slots = _empty_slots(slots)
        _upsert(*self._slots, np.ascontiguousarray(hi, np.int64), np.ascontiguousarray(lo, np.int64), 0,
                self._dead)

    def rows(self) -> pa.Table:
        if self._total != self._live or len(self._chunks) != 1:
            self._compact(slots=len(self._slots[2]))
        return self._chunks[0]

    def hashes(self) -> tuple[np.ndarray, np.ndarray]:
        """The key hashes of :meth:`rows`, aligned with them."""
        self.rows()
        return self._hi_chunks[0], self._lo_chunks[0]


def _slot_count(n: int) -> int:
    """A power of two of at least ``n`` (and 16) slots."""
    return 1 << max(4, int(n - 1).bit_length())


def _empty_slots(slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An empty hash table of key hash -> held row: its hi, lo and row columns (row -1: a free slot)."""
    return np.zeros(slots, np.int64), np.zeros(slots, np.int64), np.full(slots, -1, np.int64)


@njit(cache=True)
def _upsert(slot_hi, slot_lo, slot_row, hi, lo, first_row, dead):  # pragma: no cover - compiled
    # Open addressing with linear probing; rows come in offset order, so a key's later row replaces its earlier
    # one, which is marked dead. Returns how many keys were new.
    mask = len(slot_row) - 1
    added = 0
    for i in range(len(hi)):
        s = ((hi[i] ^ (lo[i] * -7046029254386353131)) & 0x7FFFFFFFFFFFFFFF) & mask
        while True:
            r = slot_row[s]
            if r < 0:
                slot_hi[s] = hi[i]
                slot_lo[s] = lo[i]
                slot_row[s] = first_row + i
                added += 1
                break
            if slot_hi[s] == hi[i] and slot_lo[s] == lo[i]:
                dead[r] = True
                slot_row[s] = first_row + i
                break
            s = (s + 1) & mask
    return added


def aborted_rows(records: pa.Table, txn: TxnState | None) -> np.ndarray | None:
    """Which rows of ``records`` (decoded, with ``transactional``, ``control``, ``producer_id``,
    ``batch_last_offset``) belong to an aborted transaction; None when none can (no aborted transaction)."""
    if txn is None or not len(txn.aborted) or not records.num_rows:
        return None
    data = records.column("transactional").to_numpy(zero_copy_only=False) \
        & ~records.column("control").to_numpy(zero_copy_only=False)
    out = np.zeros(records.num_rows, bool)
    if data.any():
        out[data] = txn.aborted.contains(records.column("producer_id").to_numpy()[data],
                                         records.column("batch_last_offset").to_numpy()[data])
    return out


def partition_latest(segments: list[tuple[str, bytes]], *, topic: str, partition: int, verify_crc: bool = True,
                     allow_truncated_tail: bool = False, log_start: int = 0,
                     max_batch_bytes: int | None = None) -> pa.Table:
    """The live rows (TABLE_SCHEMA) of one partition from its segments' bytes, ``(uri, bytes)`` in offset order:
    the whole log is replayed for its transactions, and read from ``log_start`` (the partition's
    log-start-offset-checkpoint entry: records below it are deleted for every consumer, even while their segment
    remains) up to its last stable offset (the first offset of a transaction with no marker yet, else the log
    end). ``allow_truncated_tail`` applies to the last segment; ``max_batch_bytes`` bounds what one compressed
    batch may inflate to (None: :func:`segment_io.compression.max_batch_bytes`'s default)."""
    from segment_io.decode import decode_segment_bytes
    from segment_io.format import scan_batches
    from segment_io.layout import parse_segment_file
    from segment_io.transactions import concat_summaries, derive_txn_state, summarize_headers

    summaries = []
    log_end = 0
    for i, (uri, data) in enumerate(segments):
        h = scan_batches(data, path=uri, allow_truncated_tail=allow_truncated_tail and i == len(segments) - 1)
        summaries.append(summarize_headers([(h, data)], path=uri, max_batch_bytes=max_batch_bytes))
        if len(h):
            log_end = max(log_end, int(h.last_offset[-1]) + 1)
    # producer expiry decides nothing here (it only matters to which empty batches a clean keeps)
    txn = derive_txn_state(concat_summaries(summaries), now_ms=0, producer_id_expiration_ms=0)
    end = log_end if txn.first_unstable_offset is None else min(log_end, txn.first_unstable_offset)
    latest = LatestRows()
    for i, (uri, data) in enumerate(segments):
        name = parse_segment_file(uri.rsplit("/", 1)[-1])
        records = decode_segment_bytes(data, path=uri, topic=topic, partition=partition,
                                       segment_base_offset=name[0] if name else None, columns=SOURCE_COLUMNS,
                                       verify_crc=verify_crc,
                                       allow_truncated_tail=allow_truncated_tail and i == len(segments) - 1,
                                       max_batch_bytes=max_batch_bytes)
        latest.add(records, eligible_rows(records, aborted=aborted_rows(records, txn), start=log_start, end=end))
    return live_rows(latest.rows())


def live_rows(rows: pa.Table) -> pa.Table:
    """The rows that are in the table: the latest rows whose value is not a tombstone."""
    return rows.filter(pc.is_valid(rows.column("value")))


__all__ = ["LatestRows", "SOURCE_COLUMNS", "TABLE_SCHEMA", "aborted_rows", "eligible_rows", "latest_indices",
           "live_rows", "partition_latest"]
