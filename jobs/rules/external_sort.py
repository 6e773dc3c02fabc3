"""The decisions of the external-sort compaction strategy, as pure functions (no Spark, no I/O).

The only cross-record decision of a compaction is "does a later record of this key exist in the mapped range"
(DESIGN.md, distributed dedupe). The memory strategy answers it with a bounded offset map built in one task;
the external-sort strategy answers it for any number of keys by sorting (key hash, offset) pairs, and hands
every segment group only what it needs: the keys of that group that some later record supersedes, each with
its latest offset. A group cleaned with that small map decides every record exactly as with the partition's
whole map (a key missing from it has no superseded record in the group, and the whole map would keep all of
its records too), so :func:`jobs.rules.cleaner.clean_records` runs unchanged and the output is the same bytes.

Everything else a clean decides depends on the record, its batch and the partition's transaction and producer
state. In segjobs that state is the whole partition's (:class:`jobs.rules.transactions.TxnState`, replayed from
every batch by the scan), not something carried from one group to the next, so it is computed once and given
to every group; so is the state after the first clean of every group (:func:`refreshed_txn_state`), which
decides the markers whose transaction lost its last data in this run (Kafka stamps those on its next pass,
and the memory strategy re-cleans such groups at once). With both precomputed the groups are independent and
may be rewritten in parallel.

Public API::

    superseded_keys(partition, group, key_hash_hi, key_hash_lo, offset, mappable) -> pa.Table (SUPERSEDED_SCHEMA)
    group_offset_map(superseded, *, start_offset, end_offset) -> OffsetMapResult
    refreshed_txn_state(summaries, *, now_ms, producer_id_expiration_ms) -> TxnState
    freed_markers(before, after) -> np.ndarray
    dirty_record_bound(state, first_dirty_offset, first_uncleanable_offset) -> int | None
    choose_strategy(requested, *, dirty_records, max_keys) -> StrategyChoice
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa

from jobs.rules.model import PartitionState
from jobs.rules.offset_map import OffsetMap, OffsetMapResult
from jobs.rules.transactions import BatchSummary, TxnState, concat_summaries, derive_txn_state

#: What the sort hands a group: one row per (key, group) with a superseded record in the group.
SUPERSEDED_SCHEMA = pa.schema([
    pa.field("p", pa.int32(), nullable=False),  # the partition's index in the run
    pa.field("g", pa.int32(), nullable=False),  # the group's index in the partition
    pa.field("key_hash_hi", pa.int64(), nullable=False),
    pa.field("key_hash_lo", pa.int64(), nullable=False),
    pa.field("latest", pa.int64(), nullable=False),  # the key's latest mappable offset
])

#: What the first pass reads of every keyed data record below the first uncleanable offset.
KEY_ROW_SCHEMA = pa.schema([
    pa.field("p", pa.int32(), nullable=False),
    pa.field("g", pa.int32(), nullable=False),
    pa.field("key_hash_hi", pa.int64(), nullable=False),
    pa.field("key_hash_lo", pa.int64(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    # the record counts for its key's latest offset (see jobs.rules.offset_map.mappable_rows)
    pa.field("mappable", pa.bool_(), nullable=False),
])


def superseded_keys(partition: np.ndarray, group: np.ndarray, key_hash_hi: np.ndarray, key_hash_lo: np.ndarray,
                    offset: np.ndarray, mappable: np.ndarray) -> pa.Table:
    """In memory, what the Spark sort computes: for every row whose key's latest mappable offset (within its
    partition) is above the row's offset, ``(partition, group, key, latest)``, one row per (partition, group,
    key), sorted. The reference the Spark plan is tested against, and the plan itself for runs without Spark."""
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


def group_offset_map(superseded: pa.Table, *, start_offset: int, end_offset: int) -> OffsetMapResult:
    """The offset map one group is cleaned with: its superseded keys (SUPERSEDED_SCHEMA rows of the group, or
    any table with ``key_hash_hi``/``key_hash_lo``/``latest``) and their latest offsets, reaching over the
    whole range ``[start_offset, end_offset)`` (a complete pass: never ``full``). Duplicate keys must carry
    the same latest offset."""
    hi = np.ascontiguousarray(superseded.column("key_hash_hi").to_numpy(), np.int64)
    lo = np.ascontiguousarray(superseded.column("key_hash_lo").to_numpy(), np.int64)
    latest = np.ascontiguousarray(superseded.column("latest").to_numpy(), np.int64)
    omap = OffsetMap(max(len(hi), 1))
    if len(hi):
        omap._put_run(hi, lo, latest, latest, np.ones(len(hi), bool))
    return OffsetMapResult(omap, start_offset, max(end_offset, start_offset) - 1, False, 0)


def refreshed_txn_state(summaries: Iterable[BatchSummary], *, now_ms: int,
                        producer_id_expiration_ms: int) -> TxnState:
    """Transaction and producer state of a partition from the batch summaries of its parts in offset order
    (each group's first-clean output, then the segments beyond the cleaned range): what a fresh scan of the
    log the first clean leaves would find."""
    return derive_txn_state(concat_summaries(summaries), now_ms=now_ms,
                            producer_id_expiration_ms=producer_id_expiration_ms)


def freed_markers(before: TxnState, after: TxnState) -> np.ndarray:
    """Offsets of the markers whose transaction had data before the clean and has none after it."""
    return np.setdiff1d(before.completed.markers_with_data(), after.completed.markers_with_data())


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


def choose_strategy(requested: str, *, dirty_records: int | None, max_keys: int) -> StrategyChoice:
    """``--strategy`` for one partition. ``auto`` takes memory when the dirty records, an upper bound on the
    dirty keys, stay below the map's capacity: one pass then certainly cleans the whole range (the map fills
    only on a put once ``max_keys`` keys are in it). Otherwise some of those records may share keys and memory
    might still fit, but only reading every key would tell, which is most of external-sort's first pass; and
    external-sort is exact whatever the count, so auto takes it."""
    if requested == "memory":
        return StrategyChoice("memory", "requested")
    if requested == "external-sort":
        return StrategyChoice("external-sort", "requested")
    if requested != "auto":
        raise ValueError(f"unknown strategy {requested!r}")
    if dirty_records is None:
        return StrategyChoice("external-sort", f"auto: dirty record count unknown (compressed legacy messages), "
                                               f"map holds {max_keys:,} keys")
    if dirty_records < max_keys:
        return StrategyChoice("memory", f"auto: {dirty_records:,} dirty records < {max_keys:,} keys the map holds")
    return StrategyChoice("external-sort", f"auto: {dirty_records:,} dirty records >= {max_keys:,} keys the "
                                           f"map holds")


__all__ = ["KEY_ROW_SCHEMA", "SUPERSEDED_SCHEMA", "StrategyChoice", "choose_strategy", "dirty_record_bound",
           "freed_markers", "group_offset_map", "refreshed_txn_state", "superseded_keys"]
