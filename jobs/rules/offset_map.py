"""The bounded key -> latest offset map of the first compaction pass (Kafka's SkimpyOffsetMap + buildOffsetMap).

Keys are represented by their 128-bit hash (``key_hash_hi``/``key_hash_lo`` of KEY_HASH_SCHEMA), so one entry
costs 24 bytes (16 hash + 8 offset) as in Kafka. The table is open-addressed with linear probing, compiled with
numba, and never holds more than ``int(slots * load factor)`` keys, with ``slots = buffer bytes // 24`` and Kafka's
default load factor 0.9 (``log.cleaner.io.buffer.load.factor``; Kafka's cleaner tests pass 0.75, its broker
default is 0.9): the capacity of Kafka's ``SkimpyOffsetMap`` under the bound its ``buildOffsetMapForSegment``
puts on it. Like Kafka, a full map ends the pass early and the clean point becomes the last mapped offset + 1,
so a partition with more keys than the map is cleaned over several runs (kafka-behaviours items 31-33).

Public API::

    max_keys_for_buffer(dedupe_buffer_bytes) -> int    (from jobs.rules.map_capacity)
    buffer_bytes_for_keys(keys) -> int
    build_offset_map(key_hash_tables, *, start_offset, end_offset, aborted, max_keys) -> OffsetMapResult
    record_map_columns(records, key_hashes) -> what build_offset_map reads, from decoded records
    mappable_rows(key_hash_table, *, start_offset, end_offset, aborted) -> bool mask (the rows a pass maps)
    OffsetMap.get(key_hash_hi, key_hash_lo) -> np.ndarray     # -1 where the key is not mapped
    OffsetMapResult: .offset_map, .latest_offset, .end_offset (the new clean point), .full, .records_read
    build_partitions_offset_map(columns, *, row_partition, start_offsets, end_offsets, max_keys)
        -> PartitionsMap | None     (one map over several small partitions, keyed by partition and key)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, TypeAlias

import numba
import numpy as np
import pyarrow as pa

from jobs.rules.map_capacity import BYTES_PER_ENTRY, LOAD_FACTOR, buffer_bytes_for_keys, max_keys_for_buffer
from jobs.rules.transactions import AbortedTxns
from segment_io.errors import ConfigError
from segment_io.schema import validity

_EMPTY = -1  # offsets are >= 0, so a slot with offset -1 is free


class OffsetMap:
    """A fixed-capacity hash table from 128-bit key hash to offset (numpy arrays, compiled probing)."""

    def __init__(self, max_keys: int) -> None:
        if max_keys < 1:
            raise ConfigError(f"an offset map must hold at least one key (asked for {max_keys})")
        self.max_keys = int(max_keys)
        # The table starts small and grows as keys come (never past the slots max_keys needs): a 150 KB
        # partition must not pay for filling a 128 MiB table. Which keys fit, and when the map is full, depend
        # on max_keys alone, never on the table's current size.
        self._allocate(_slots_for(min(self.max_keys, _INITIAL_KEYS)))
        self.size = 0

    def _allocate(self, slots: int) -> None:
        self.slots = slots
        self._hi = np.zeros(slots, np.int64)
        self._lo = np.zeros(slots, np.int64)
        self._off = np.full(slots, _EMPTY, np.int64)

    def _reserve(self, keys: int) -> None:
        """Grow the table (rehashing what it holds) so that ``keys`` keys stay within the load factor."""
        keys = min(keys, self.max_keys)
        if _slots_for(keys) <= self.slots:
            return
        # at least double: n inserts cost O(n) rehashing in all
        grown = min(max(keys, 2 * int(self.slots * LOAD_FACTOR)), self.max_keys)
        hi, lo, off = self._hi, self._lo, self._off
        self._allocate(_slots_for(grown))
        _rehash(self._hi, self._lo, self._off, hi, lo, off)

    def get(self, key_hash_hi: np.ndarray, key_hash_lo: np.ndarray) -> np.ndarray:
        """The mapped offset of each key hash, -1 where the key is not in the map."""
        hi = np.ascontiguousarray(key_hash_hi, np.int64)
        lo = np.ascontiguousarray(key_hash_lo, np.int64)
        return _lookup(self._hi, self._lo, self._off, hi, lo)

    def _put_run(self, hi: np.ndarray, lo: np.ndarray, offsets: np.ndarray, batch_base: np.ndarray,
                 eligible: np.ndarray) -> tuple[int, int, int]:
        """Insert eligible rows in order until the map is full; see :func:`_insert_run`."""
        self._reserve(self.size + int(np.count_nonzero(eligible)))
        size, stop, last_put, last_put_batch = _insert_run(
            self._hi, self._lo, self._off, self.size, self.max_keys, hi, lo, offsets, batch_base, eligible)
        self.size = int(size)
        return int(stop), int(last_put), int(last_put_batch)

    @property
    def utilization(self) -> float:
        """Fraction of the full-size table in use (Kafka's bufferUtilization), however far it has grown."""
        return self.size / _slots_for(self.max_keys)


#: Keys the table has room for before it first grows (a small partition's: a thousand records of 48 KiB
#: segments hold fewer keys; allocating and clearing room for more cost it more than the mapping).
_INITIAL_KEYS = 1024


def _slots_for(keys: int) -> int:
    """Enough slots that ``keys`` keys are at most the load factor: probes stay short."""
    return max(keys + 1, math.ceil(keys / LOAD_FACTOR))


@numba.njit(cache=True)
def _rehash(t_hi, t_lo, t_off, hi, lo, off):  # pragma: no cover - compiled
    slots = len(t_off)
    for j in range(len(off)):
        if off[j] == -1:
            continue
        s = _slot(hi[j], lo[j], slots)
        while t_off[s] != -1:
            s += 1
            if s == slots:
                s = 0
        t_hi[s] = hi[j]
        t_lo[s] = lo[j]
        t_off[s] = off[j]


# Golden-ratio multiplier as a signed int64: mixing the halves keeps numba in int64 arithmetic (a uint64
# constant would promote to float).
_MIX = 0x9E3779B97F4A7C15 - (1 << 64)


@numba.njit(cache=True)
def _slot(hi, lo, slots):  # pragma: no cover - compiled
    h = (hi ^ (lo * _MIX)) & 0x7FFFFFFFFFFFFFFF
    return h % slots


@numba.njit(cache=True)
def _lookup(t_hi, t_lo, t_off, hi, lo):  # pragma: no cover - compiled
    slots = len(t_off)
    out = np.full(len(hi), -1, np.int64)
    for i in range(len(hi)):
        s = _slot(hi[i], lo[i], slots)
        while t_off[s] != -1:
            if t_hi[s] == hi[i] and t_lo[s] == lo[i]:
                out[i] = t_off[s]
                break
            s += 1
            if s == slots:
                s = 0
    return out


@numba.njit(cache=True)
def _insert_run(t_hi, t_lo, t_off, size, max_keys, hi, lo, offsets, batch_base, eligible):  # pragma: no cover
    # Kafka checks fullness before every put, even for a key already mapped, and stops at that record.
    slots = len(t_off)
    last_put = -1
    last_put_batch = -1
    for i in range(len(hi)):
        if not eligible[i]:
            continue
        if size >= max_keys:
            return size, i, last_put, last_put_batch
        s = _slot(hi[i], lo[i], slots)
        while True:
            if t_off[s] == -1:
                t_hi[s] = hi[i]
                t_lo[s] = lo[i]
                t_off[s] = offsets[i]
                size += 1
                break
            if t_hi[s] == hi[i] and t_lo[s] == lo[i]:
                t_off[s] = offsets[i]
                break
            s += 1
            if s == slots:
                s = 0
        last_put = offsets[i]
        last_put_batch = batch_base[i]
    return size, -1, last_put, last_put_batch


@dataclass(frozen=True)
class OffsetMapResult:
    """The map of one pass and how far it reaches.

    ``latest_offset`` is Kafka's ``map.latestOffset``: records above it are outside this pass and are kept as
    they are. ``end_offset = latest_offset + 1`` is the new clean point (the cleaner-offset-checkpoint value
    after the pass). When the map did not fill, ``latest_offset == end_offset_requested - 1`` even if the last
    offsets are gaps (item 31). When it filled (``full``), it is the offset of the last mapped record if that
    record shares a batch with the one that did not fit, else the offset just before that batch (item 32).
    """

    offset_map: OffsetMap
    start_offset: int
    latest_offset: int
    full: bool
    #: records of the range the pass looked at (Kafka's mapMessagesRead, counting a control batch once)
    records_read: int

    @property
    def end_offset(self) -> int:
        """First offset not covered by this pass: the next first dirty offset."""
        return self.latest_offset + 1


_MAP_COLUMNS = ("offset", "key_hash_hi", "key_hash_lo", "key_is_null", "batch_base_offset", "batch_last_offset",
                "transactional", "control", "producer_id")

#: the map's columns that decoded records (RECORD_SCHEMA) hold as they are
_RECORD_MAP_COLUMNS = ("offset", "batch_base_offset", "batch_last_offset", "transactional", "control", "producer_id")

#: What :func:`build_offset_map` reads of a segment: a KEY_HASH_SCHEMA table, or its ``_MAP_COLUMNS`` as numpy
#: arrays (see :func:`record_map_columns`).
MapSource: TypeAlias = "pa.Table | Mapping[str, np.ndarray]"


def _map_columns(source: MapSource) -> Mapping[str, np.ndarray]:
    if isinstance(source, pa.Table):
        return {name: source.column(name).to_numpy() for name in _MAP_COLUMNS}
    return source


def record_map_columns(records: pa.Table, key_hashes: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
    """What :func:`build_offset_map` reads of a segment, from its decoded records (RECORD_SCHEMA, one segment in
    offset order) and their keys' hashes (``segment_io.hashing.hash_keys``, aligned with ``records``): the same
    rows as its KEY_HASH_SCHEMA table gives, so a task that decodes a segment in full for its clean anyway
    maps it without a second decode."""
    cols = {name: records.column(name).to_numpy() for name in _RECORD_MAP_COLUMNS}
    cols["key_hash_hi"], cols["key_hash_lo"] = key_hashes
    cols["key_is_null"] = ~validity(records.column("key"))
    return cols


def build_offset_map(key_hash_tables: Iterable[MapSource], *, start_offset: int, end_offset: int,
                     aborted: AbortedTxns, max_keys: int) -> OffsetMapResult:
    """Map each key to its latest offset over ``[start_offset, end_offset)``, Kafka's ``buildOffsetMap``.

    ``key_hash_tables`` are KEY_HASH_SCHEMA tables in offset order (typically one per segment, from
    ``segment_io.read_key_hashes``), or the same columns as :func:`record_map_columns` gives them; they are
    consumed one at a time, so memory stays bounded by the map.
    ``end_offset`` is the first uncleanable offset (a segment base in Kafka). Control batches, records of
    aborted transactions (``aborted`` from :func:`jobs.rules.transactions.derive_txn_state`) and keyless records are
    not mapped: an aborted value must never shadow a live one. When ``max_keys`` distinct keys are mapped and
    another keyed record comes, the pass stops there (a partial map); run again from ``result.end_offset``.
    """
    omap = OffsetMap(max_keys)
    records_read = 0
    for table in key_hash_tables:
        cols = _map_columns(table)
        if len(cols["offset"]) == 0:
            continue
        offsets = np.ascontiguousarray(cols["offset"], np.int64)
        in_range = (offsets >= start_offset) & (offsets < end_offset)
        if not in_range.any():
            continue
        control = cols["control"]
        eligible = _mappable(cols, in_range, aborted)
        stop, last_put, last_put_batch = omap._put_run(
            np.ascontiguousarray(cols["key_hash_hi"], np.int64), np.ascontiguousarray(cols["key_hash_lo"], np.int64),
            offsets, np.ascontiguousarray(cols["batch_base_offset"], np.int64), np.ascontiguousarray(eligible))
        if stop >= 0:
            records_read += _records_read(in_range[:stop], control[:stop], cols["batch_base_offset"][:stop])
            stop_batch = int(cols["batch_base_offset"][stop])
            if last_put >= 0 and last_put_batch == stop_batch:
                latest = last_put  # Kafka stopped inside the batch, after its last put
            else:
                latest = stop_batch - 1  # everything before the batch was read
            latest = min(latest, int(offsets[stop]) - 1)
            return OffsetMapResult(omap, start_offset, latest, True, records_read)
        records_read += _records_read(in_range, control, cols["batch_base_offset"])
    return OffsetMapResult(omap, start_offset, max(end_offset, start_offset) - 1, False, records_read)


#: Partition ``p``'s key hashes are moved by ``p`` times this odd constant in their high half (see
#: :func:`partition_keyed`): a bijection for each partition, and two partitions never map a key to the same pair.
_PARTITION_MIX = 0xC2B2AE3D27D4EB4F - (1 << 64)


def partition_keyed(key_hash_hi: np.ndarray, key_hash_lo: np.ndarray,
                    row_partition: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Key hashes keyed by partition as well: one map can then hold several partitions' keys, a key of one never
    shadowing the same key of another (their pairs differ whenever the partitions do; two different keys meet
    no more often than two random 128-bit hashes do)."""
    with np.errstate(over="ignore"):
        moved = np.asarray(row_partition, np.int64) * np.int64(_PARTITION_MIX)
    return np.asarray(key_hash_hi, np.int64) ^ moved, np.asarray(key_hash_lo, np.int64)


@dataclass(frozen=True)
class PartitionsMap:
    """One offset map over several partitions (:func:`build_partitions_offset_map`)."""

    offset_map: OffsetMap
    #: per partition: what :attr:`OffsetMapResult.latest_offset` is for a map of that partition alone
    latest_offset: np.ndarray
    #: the rows' key hashes keyed by partition (:func:`partition_keyed`): what the clean looks up
    key_hash_hi: np.ndarray
    key_hash_lo: np.ndarray


def build_partitions_offset_map(columns: Mapping[str, np.ndarray], *, row_partition: np.ndarray,
                                start_offsets: np.ndarray, end_offsets: np.ndarray,
                                max_keys: int) -> PartitionsMap | None:
    """:func:`build_offset_map` of several partitions at once, in one map keyed by partition and key.

    ``columns`` are :func:`record_map_columns` of all their rows, each partition's rows contiguous and in offset
    order, ``row_partition`` the partition index of each row, ``start_offsets``/``end_offsets`` each partition's
    range. Only partitions without transactions may be mapped together (no aborted data to leave out). Returns
    None when a map of ``max_keys`` keys could fill (more mappable rows than that): a full map ends a partition's
    pass early, which only a map of its own gives right. Otherwise every partition's map is complete, as alone."""
    part = np.asarray(row_partition, np.int64)
    offsets = np.ascontiguousarray(columns["offset"], np.int64)
    start = np.asarray(start_offsets, np.int64)
    end = np.asarray(end_offsets, np.int64)
    in_range = (offsets >= start[part]) & (offsets < end[part])
    if (columns["transactional"] & ~columns["control"]).any():
        raise ValueError("partitions with transactional data are mapped one at a time")
    eligible = _mappable(columns, in_range, AbortedTxns.empty())
    if np.count_nonzero(eligible) > max_keys:
        return None
    hi, lo = partition_keyed(columns["key_hash_hi"], columns["key_hash_lo"], part)
    omap = OffsetMap(max_keys)
    stop, _, _ = omap._put_run(hi, lo, offsets, np.ascontiguousarray(columns["batch_base_offset"], np.int64),
                               np.ascontiguousarray(eligible))
    assert stop < 0, "a map with room for every mappable row cannot fill"
    return PartitionsMap(omap, np.maximum(end, start) - 1, hi, lo)


def mappable_rows(table: pa.Table, *, start_offset: int, end_offset: int, aborted: AbortedTxns) -> np.ndarray:
    """Which rows of a KEY_HASH_SCHEMA table a pass over ``[start_offset, end_offset)`` maps (the rows
    :func:`build_offset_map` puts): keyed data records in the range that no aborted transaction holds. The
    external-sort strategy computes each key's latest offset over exactly these rows."""
    cols = _map_columns(table)
    offsets = cols["offset"]
    return _mappable(cols, (offsets >= start_offset) & (offsets < end_offset), aborted)


def _mappable(cols: Mapping[str, np.ndarray], in_range: np.ndarray, aborted: AbortedTxns) -> np.ndarray:
    control = cols["control"]
    txn = cols["transactional"] & ~control
    is_aborted = np.zeros(len(in_range), bool)
    if txn.any() and len(aborted):
        is_aborted[txn] = aborted.contains(cols["producer_id"][txn], cols["batch_last_offset"][txn])
    return in_range & ~control & ~is_aborted & ~cols["key_is_null"]


def _records_read(in_range: np.ndarray, control: np.ndarray, batch_base: np.ndarray) -> int:
    data = int(np.count_nonzero(in_range & ~control))
    ctl_bases = batch_base[in_range & control]
    return data + len(np.unique(ctl_bases))


__all__ = ["BYTES_PER_ENTRY", "LOAD_FACTOR", "MapSource", "OffsetMap", "OffsetMapResult", "PartitionsMap",
           "buffer_bytes_for_keys", "build_offset_map", "build_partitions_offset_map", "mappable_rows",
           "max_keys_for_buffer", "partition_keyed", "record_map_columns"]
