"""The decisions of the external-sort compaction strategy, as pure functions (no Spark, no I/O).

The only cross-record decision of a compaction is "does a later record of this key exist in the mapped range"
(DESIGN.md, distributed dedupe). The memory strategy answers it with a bounded offset map built in one task;
the external-sort strategy answers it for any number of keys by hash-partitioning the keys into buckets that
each fit a task's memory, and hands every segment group only what it needs: the keys of that group that some
later record supersedes, each with its latest offset. Two compiled kernels do the work: :func:`piece_rows`
pre-aggregates one piece of a segment (one row per key: its first offset in the piece and its latest mappable
one) and orders the rows by bucket; :func:`reduce_bucket` takes every piece's rows of one bucket and gives, per
segment group, the keys a later record supersedes. A key lives in exactly one bucket, so the buckets are
independent and each is reduced by one task, in memory, whatever the partition's key count. A group cleaned
with that small map decides every record exactly as with the partition's whole map (a key missing from it has
no superseded record in the group, and the whole map would keep all of its records too), so
:func:`jobs.rules.cleaner.clean_records` runs unchanged and the output is the same bytes.

Everything else a clean decides depends on the record, its batch and the partition's transaction and producer
state. In segjobs that state is the whole partition's (:class:`jobs.rules.transactions.TxnState`, replayed from
every batch by the scan), not something carried from one group to the next, so it is computed once and given
to every group (a marker whose transaction loses its last data in this run is stamped by the next run, as by
Kafka's next clean). With it precomputed the groups are independent and may be rewritten in parallel.

Public API::

    piece_rows(key_hash_hi, key_hash_lo, offset, mappable, keyed, buckets) -> (rows (n, 4) int64, counts)
    reduce_bucket(rows, group, groups) -> (map rows (m, 3) int64, counts per group)
    bucket_count(records, bucket_bytes, parallelism) -> int
    superseded_keys(partition, group, key_hash_hi, key_hash_lo, offset, mappable) -> pa.Table (the reference)
    group_offset_map(key_hash_hi, key_hash_lo, latest, *, start_offset, end_offset) -> OffsetMapResult
    dirty_record_bound(state, first_dirty_offset, first_uncleanable_offset) -> int | None
    choose_strategy(requested, *, dirty_records, max_keys) -> StrategyChoice
    handed_over(choice, *, keys, end_offset, segments_read) -> StrategyChoice
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from jobs.rules.model import PartitionState
from jobs.rules.offset_map import OffsetMap, OffsetMapResult

#: What the sort hands a group: one row per (key, group) with a superseded record in the group.
SUPERSEDED_SCHEMA = pa.schema([
    pa.field("p", pa.int32(), nullable=False),  # the partition's index in the run
    pa.field("g", pa.int32(), nullable=False),  # the group's index in the partition
    pa.field("key_hash_hi", pa.int64(), nullable=False),
    pa.field("key_hash_lo", pa.int64(), nullable=False),
    pa.field("latest", pa.int64(), nullable=False),  # the key's latest mappable offset
])

#: Columns of a piece row (:func:`piece_rows`), int64 each, row-major: the key hash, the key's first offset in
#: the piece (any keyed data record) and its latest mappable offset in the piece (-1 when none).
PIECE_COLUMNS = ("key_hash_hi", "key_hash_lo", "first", "latest")
#: Columns of a group-map row (:func:`reduce_bucket`), int64 each, row-major.
MAP_COLUMNS = ("key_hash_hi", "key_hash_lo", "latest")
#: Memory a bucket's reduce takes per piece row, at most: the row (32 bytes), its group and slot index (12), the
#: hash table (2-4 slots of 33 bytes a row: at most 132) and the output (24), rounded up. Buckets are sized with it.
REDUCE_BYTES_PER_ROW = 208
#: Buckets below this many rows are not worth a task of their own (a small partition is one bucket).
MIN_BUCKET_ROWS = 1 << 18


def bucket_count(records: int, bucket_bytes: int, parallelism: int) -> int:
    """How many buckets a partition's key rows go to: enough that one bucket's reduce stays within
    ``bucket_bytes`` (``records``, the dirty record bound, bounds the rows: a piece has at most one row per
    record), and at least one per core when the partition is big enough for that to pay."""
    need = -(-max(records, 0) * REDUCE_BYTES_PER_ROW // max(bucket_bytes, 1))
    return int(max(1, need, min(parallelism, -(-max(records, 0) // MIN_BUCKET_ROWS))))


@numba.njit(cache=True)
def _table_slots(n):  # pragma: no cover - compiled
    slots = 16
    while slots < 2 * n:
        slots *= 2
    return slots


@numba.njit(cache=True)
def _probe_start(hi, lo, mask):  # pragma: no cover - compiled
    # Golden-ratio mixing of both halves (as the offset map does); the bucket uses other bits (see _bucket).
    return ((hi ^ (lo * -7046029254386353131)) & 0x7FFFFFFFFFFFFFFF) & mask


@numba.njit(cache=True)
def _bucket(hi, buckets):  # pragma: no cover - compiled
    return (hi & 0x7FFFFFFFFFFFFFFF) % buckets


@numba.njit(cache=True)
def _piece_kernel(hi, lo, off, ok, keyed, buckets):  # pragma: no cover - compiled
    # One slot holds (hi, lo, first, latest): a probe touches one cache line, not one per array.
    n = len(hi)
    slots = _table_slots(n)
    mask = slots - 1
    table = np.empty((slots, 4), np.int64)
    used = np.zeros(slots, np.bool_)
    k = 0
    for i in range(n):
        if not keyed[i]:
            continue
        s = _probe_start(hi[i], lo[i], mask)
        while True:
            if not used[s]:
                used[s] = True
                table[s, 0] = hi[i]
                table[s, 1] = lo[i]
                table[s, 2] = off[i]
                table[s, 3] = off[i] if ok[i] else -1
                k += 1
                break
            if table[s, 0] == hi[i] and table[s, 1] == lo[i]:
                if off[i] < table[s, 2]:
                    table[s, 2] = off[i]
                if ok[i] and off[i] > table[s, 3]:
                    table[s, 3] = off[i]
                break
            s = (s + 1) & mask
    counts = np.zeros(buckets, np.int64)
    for s in range(slots):
        if used[s]:
            counts[_bucket(table[s, 0], buckets)] += 1
    at = np.zeros(buckets, np.int64)
    for x in range(1, buckets):
        at[x] = at[x - 1] + counts[x - 1]
    out = np.empty((k, 4), np.int64)
    for s in range(slots):
        if used[s]:
            b = _bucket(table[s, 0], buckets)
            r = at[b]
            at[b] += 1
            for c in range(4):
                out[r, c] = table[s, c]
    return out, counts


def piece_rows(key_hash_hi: np.ndarray, key_hash_lo: np.ndarray, offset: np.ndarray, mappable: np.ndarray,
               keyed: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """One piece of a partition (any rows of it, e.g. a share of a segment) pre-aggregated for the buckets:
    one row per key of its keyed data records (``keyed``: not control, key not null), with the key's first
    offset among them and its latest ``mappable`` offset (-1 when none), as an ``(n, 4)`` int64 array of
    :data:`PIECE_COLUMNS` ordered by bucket; and the rows per bucket. A key's rows go to one bucket whatever
    the piece, so a bucket's reduce sees every piece's row of each of its keys."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    return _piece_kernel(np.ascontiguousarray(key_hash_hi, np.int64), np.ascontiguousarray(key_hash_lo, np.int64),
                         np.ascontiguousarray(offset, np.int64), np.ascontiguousarray(mappable, np.bool_),
                         np.ascontiguousarray(keyed, np.bool_), int(buckets))


@numba.njit(cache=True)
def _reduce_kernel(rows, group, groups):  # pragma: no cover - compiled
    # One slot holds (hi, lo, latest, the last group the key was emitted for); key_of[i] is row i's slot.
    n = rows.shape[0]
    slots = _table_slots(n)
    mask = slots - 1
    table = np.empty((slots, 4), np.int64)
    used = np.zeros(slots, np.bool_)
    key_of = np.empty(n, np.int64)
    for i in range(n):
        hi = rows[i, 0]
        lo = rows[i, 1]
        s = _probe_start(hi, lo, mask)
        while True:
            if not used[s]:
                used[s] = True
                table[s, 0] = hi
                table[s, 1] = lo
                table[s, 2] = rows[i, 3]
                table[s, 3] = -1
                break
            if table[s, 0] == hi and table[s, 1] == lo:
                if rows[i, 3] > table[s, 2]:
                    table[s, 2] = rows[i, 3]
                break
            s = (s + 1) & mask
        key_of[i] = s
    # Rows come in ascending group order, so one (group, key) is emitted once: on its first superseded row.
    m = 0
    for i in range(n):
        s = key_of[i]
        if rows[i, 2] < table[s, 2] and table[s, 3] != group[i]:
            table[s, 3] = group[i]
            m += 1
    out = np.empty((m, 3), np.int64)
    counts = np.zeros(groups, np.int64)
    for s in range(slots):
        if used[s]:
            table[s, 3] = -1
    m = 0
    for i in range(n):
        s = key_of[i]
        if rows[i, 2] < table[s, 2] and table[s, 3] != group[i]:
            table[s, 3] = group[i]
            out[m, 0] = table[s, 0]
            out[m, 1] = table[s, 1]
            out[m, 2] = table[s, 2]
            counts[group[i]] += 1
            m += 1
    return out, counts


def reduce_bucket(rows: np.ndarray, group: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """One bucket's piece rows (``(n, 4)`` of :data:`PIECE_COLUMNS`, every piece's rows of the bucket, of one
    partition) and each row's segment group (ascending: pieces in group order) -> the group maps of the
    bucket: one ``(key hash, latest)`` row (:data:`MAP_COLUMNS`) per key and group where some record of the
    key in the group lies below the key's latest mappable offset in the partition, ordered by group; and the
    rows per group (``groups`` of them). What :func:`superseded_keys` computes, per bucket, in one pass."""
    g = np.ascontiguousarray(group, np.int32)
    if len(g) > 1 and (np.diff(g) < 0).any():
        raise ValueError("reduce_bucket: rows must come in ascending group order")
    return _reduce_kernel(np.ascontiguousarray(rows, np.int64).reshape(-1, 4), g, int(groups))


def superseded_keys(partition: np.ndarray, group: np.ndarray, key_hash_hi: np.ndarray, key_hash_lo: np.ndarray,
                    offset: np.ndarray, mappable: np.ndarray) -> pa.Table:
    """For every row whose key's latest mappable offset (within its partition) is above the row's offset,
    ``(partition, group, key, latest)``, one row per (partition, group, key), sorted, by sorting everything in
    memory: the reference the buckets (:func:`piece_rows`, :func:`reduce_bucket`) are tested against."""
    p = np.asarray(partition, np.int32)
    g = np.asarray(group, np.int32)
    hi = np.asarray(key_hash_hi, np.int64)
    lo = np.asarray(key_hash_lo, np.int64)
    off = np.asarray(offset, np.int64)
    ok = np.asarray(mappable, bool)
    n = len(off)
    if n == 0:
        return SUPERSEDED_SCHEMA.empty_table()
    order = np.lexsort((off, lo, hi, p))
    p, g, hi, lo, off, ok = p[order], g[order], hi[order], lo[order], off[order], ok[order]
    start = np.r_[True, (p[1:] != p[:-1]) | (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])]
    key_id = np.cumsum(start) - 1
    latest_of_key = np.full(int(key_id[-1]) + 1, -1, np.int64)
    np.maximum.at(latest_of_key, key_id[ok], off[ok])
    latest = latest_of_key[key_id]
    sup = latest > off
    cols = [p[sup], g[sup], hi[sup], lo[sup], latest[sup]]
    if len(cols[0]):
        order = np.lexsort((cols[3], cols[2], cols[1], cols[0]))
        cols = [c[order] for c in cols]
        keep = np.r_[True, (np.diff(cols[0]) != 0) | (np.diff(cols[1]) != 0) | (np.diff(cols[2]) != 0)
                     | (np.diff(cols[3]) != 0)]
        cols = [c[keep] for c in cols]
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, SUPERSEDED_SCHEMA)],
                                schema=SUPERSEDED_SCHEMA)


def group_offset_map(key_hash_hi: np.ndarray, key_hash_lo: np.ndarray, latest: np.ndarray, *, start_offset: int,
                     end_offset: int) -> OffsetMapResult:
    """The offset map one group is cleaned with: its superseded keys (what :func:`reduce_bucket` gives the
    group, from every bucket) and their latest offsets, reaching over the whole range
    ``[start_offset, end_offset)`` (a complete pass: never ``full``). Duplicate keys must carry the same
    latest offset."""
    hi = np.ascontiguousarray(key_hash_hi, np.int64)
    lo = np.ascontiguousarray(key_hash_lo, np.int64)
    latest = np.ascontiguousarray(latest, np.int64)
    omap = OffsetMap(max(len(hi), 1))
    if len(hi):
        omap._put_run(hi, lo, latest, latest, np.ones(len(hi), bool))
    return OffsetMapResult(omap, start_offset, max(end_offset, start_offset) - 1, False, 0)


def dirty_record_bound(state: PartitionState, first_dirty_offset: int, first_uncleanable_offset: int) -> int | None:
    """An upper bound on the keys a pass over ``[first_dirty_offset, first_uncleanable_offset)`` maps: the
    records, by batch headers, of every segment overlapping the range (each mapped key needs a record). None
    when a segment's count is unknown (compressed legacy wrappers, or a scan that did not read headers)."""
    total = 0
    for s in state.segments:
        if s.next_offset > first_dirty_offset and s.base_offset < first_uncleanable_offset:
            if s.record_count is None:
                return None
            total += s.record_count
    return total


@dataclass(frozen=True)
class StrategyChoice:
    """Which strategy cleans a partition, and why (in words for the report)."""

    strategy: str  # "memory" or "external-sort"
    reason: str
    #: memory first: if the map fills, the partition moves to external-sort with what the memory task read
    memory_first: bool = False


def choose_strategy(requested: str, *, dirty_records: int | None, max_keys: int) -> StrategyChoice:
    """``--strategy`` for one partition. ``auto`` takes memory when the dirty records, an upper bound on the
    dirty keys, stay below the map's capacity: one pass then certainly cleans the whole range (the map fills
    only on a put once ``max_keys`` keys are in it). Otherwise records may share keys (a changelog of 6 M
    records may hold 1 M keys), and the memory task's own map is the exact count of what it has read: auto
    starts with memory, and the task hands the partition to external-sort only when its map fills, with the
    key-pass pieces of the segments it read (see :mod:`jobs.engine.compact.external_sort`), so nothing is read twice."""
    if requested == "memory":
        return StrategyChoice("memory", "requested")
    if requested == "external-sort":
        return StrategyChoice("external-sort", "requested")
    if requested != "auto":
        raise ValueError(f"unknown strategy {requested!r}")
    if dirty_records is None:
        return StrategyChoice("memory", f"auto: dirty record count unknown (compressed legacy messages), map holds "
                                        f"{max_keys:,} keys: memory first", memory_first=True)
    if dirty_records < max_keys:
        return StrategyChoice("memory", f"auto: {dirty_records:,} dirty records < {max_keys:,} keys the map holds")
    return StrategyChoice("memory", f"auto: {dirty_records:,} dirty records >= {max_keys:,} keys the map holds, "
                                    f"but they may share keys: memory first", memory_first=True)


def handed_over(choice: StrategyChoice, *, keys: int, end_offset: int, segments_read: int) -> StrategyChoice:
    """What a memory-first partition became when its map filled: external-sort, and why."""
    return StrategyChoice("external-sort", f"{choice.reason}; the map filled with {keys:,} keys at offset "
                                           f"{end_offset:,}: external-sort, reusing the {segments_read} "
                                           f"segment(s) read", memory_first=True)


__all__ = ["MAP_COLUMNS", "PIECE_COLUMNS", "REDUCE_BYTES_PER_ROW", "SUPERSEDED_SCHEMA", "StrategyChoice",
           "bucket_count", "choose_strategy", "dirty_record_bound", "group_offset_map", "handed_over",
           "piece_rows", "reduce_bucket", "superseded_keys"]
