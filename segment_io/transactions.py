"""Transaction and producer state of a partition, derived offline from its batches.

It lives in ``segment_io`` so that everything reading a topic the way a ``read_committed`` consumer does shares
it: the jobs (through :mod:`jobs.rules.transactions`, which adds Kafka's default producer expiry) and the
``kafka-segments`` source's ``latest`` read mode.

A broker knows which transactions were aborted from its ``.txnindex`` files and which producers are active
from its producer-state snapshots. Offline we rebuild both from the log itself, by replaying every batch of
the partition the way Kafka's ProducerStateManager does when it loads a log:

* a transactional data batch opens a transaction of its producer when none is open (its base offset is the
  transaction's first offset);
* an ABORT/COMMIT marker closes the open transaction; a marker with no open transaction closes nothing
  (Kafka writes no ``.txnindex`` entry for an empty transaction);
* a change of producer epoch forgets the producer's data batches (so an epoch-bumping marker leaves the
  producer with no "last data offset");
* an empty control batch (a marker the cleaner already emptied) changes nothing.

Because a cleaned log only ever loses batches whose transaction has no remaining data, replaying the current
log gives the same answers the broker's cleaner would get from its (equally cleaned) transaction index.

Public API::

    summarize_batches(key_hash_tables, *, empty_batches=None) -> BatchSummary
    derive_txn_state(batches, *, now_ms, producer_id_expiration_ms) -> TxnState
    TxnState: .aborted (AbortedTxns), .completed (CompletedTxns), .open_producer_ids, .open_first_offsets,
              .first_unstable_offset, .active (ActiveProducers)
    AbortedTxns.contains(producer_ids, batch_last_offsets) -> bool mask   (is a data batch aborted?)

Control type 0 is ABORT and 1 is COMMIT (``segment_io.format.CONTROL_ABORT``/``CONTROL_COMMIT``); other types
(e.g. KRaft's leader-change records) neither open nor close transactions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numba
import numpy as np
import pyarrow as pa

from segment_io.format import CONTROL_ABORT, CONTROL_COMMIT, NO_PRODUCER_ID

if TYPE_CHECKING:
    import mmap

    from segment_io.format import BatchHeaders

_SUMMARY_COLUMNS = ("batch_base_offset", "batch_last_offset", "producer_id", "producer_epoch", "transactional",
                    "control", "control_type", "batch_max_timestamp", "timestamp", "offset")


@dataclass(frozen=True)
class BatchSummary:
    """One entry per batch of a partition log, sorted by base offset (numpy arrays of equal length).

    ``record_count`` is 0 for empty batches (header-only batches a previous clean kept);
    ``control_type`` is the type of the batch's first control record, -1 for data and empty batches;
    ``marker_timestamp`` is the first record's timestamp (what Kafka stores as a producer's last timestamp
    when the batch is a marker), the batch max timestamp for empty batches.
    """

    base_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64
    producer_id: np.ndarray  # int64
    producer_epoch: np.ndarray  # int16
    transactional: np.ndarray  # bool
    control: np.ndarray  # bool
    control_type: np.ndarray  # int16
    max_timestamp: np.ndarray  # int64
    marker_timestamp: np.ndarray  # int64
    record_count: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.base_offset)


def summarize_batches(key_hash_tables: Iterable[pa.Table], *, empty_batches: pa.Table | None = None) -> BatchSummary:
    """Reduce KEY_HASH_SCHEMA rows (one table per segment, or any split, in offset order) to one entry per batch.

    ``empty_batches`` (BATCH_SCHEMA rows) adds batches that hold no records, which a per-record table cannot
    show; they count for producer state exactly like Kafka counts them when it reloads a log.
    """
    parts = [t.select(list(_SUMMARY_COLUMNS)) for t in key_hash_tables if t.num_rows]
    if parts:
        table = pa.concat_tables(parts)
        cols = {name: table.column(name).to_numpy() for name in _SUMMARY_COLUMNS}
        offsets = cols["offset"]
        if len(offsets) > 1 and not np.all(np.diff(offsets) > 0):
            raise ValueError("key-hash rows must be in strictly increasing offset order")
        base = cols["batch_base_offset"]
        starts = np.flatnonzero(np.r_[True, base[1:] != base[:-1]])
        counts = np.diff(np.r_[starts, len(base)])
        summary = {
            "base_offset": base[starts], "last_offset": cols["batch_last_offset"][starts],
            "producer_id": cols["producer_id"][starts], "producer_epoch": cols["producer_epoch"][starts],
            "transactional": cols["transactional"][starts], "control": cols["control"][starts],
            "control_type": cols["control_type"][starts], "max_timestamp": cols["batch_max_timestamp"][starts],
            "marker_timestamp": cols["timestamp"][starts], "record_count": counts.astype(np.int64),
        }
    else:
        summary = _empty_summary()
    if empty_batches is not None and empty_batches.num_rows:
        e = {name: empty_batches.column(name).to_numpy() for name in (
            "batch_base_offset", "batch_last_offset", "producer_id", "producer_epoch", "transactional", "control",
            "batch_max_timestamp")}
        extra = {
            "base_offset": e["batch_base_offset"], "last_offset": e["batch_last_offset"],
            "producer_id": e["producer_id"], "producer_epoch": e["producer_epoch"],
            "transactional": e["transactional"], "control": e["control"],
            "control_type": np.full(len(e["batch_base_offset"]), -1, np.int16),
            "max_timestamp": e["batch_max_timestamp"], "marker_timestamp": e["batch_max_timestamp"],
            "record_count": np.zeros(len(e["batch_base_offset"]), np.int64),
        }
        merged = {k: np.concatenate([summary[k], extra[k]]) for k in summary}
        order = np.argsort(merged["base_offset"], kind="stable")
        summary = {k: v[order] for k, v in merged.items()}
    return BatchSummary(**{k: np.ascontiguousarray(v) for k, v in summary.items()})


def summarize_headers(segments: Iterable[tuple["BatchHeaders", bytes | memoryview | mmap.mmap]], *,
                      path: str | None = None, max_batch_bytes: int | None = None) -> BatchSummary:
    """The same :class:`BatchSummary` as :func:`summarize_batches`, from batch headers alone.

    ``segments`` are ``(headers, segment bytes)`` pairs in offset order (``segment_io.format.scan_batches``
    output and the bytes it scanned). Only control batches are decoded (their first record holds the control
    type and the marker's timestamp): all of them at once, from one buffer of their bytes. A log without
    transactions therefore costs no record-level work at all. ``max_batch_bytes``: the decompression bound of
    those control batches (see :func:`segment_io.compression.max_batch_bytes`).
    """
    from segment_io.decode import decode_key_hashes_bytes

    parts: list[dict[str, np.ndarray]] = []
    for h, data in segments:
        if not len(h):
            continue
        legacy = h.magic < 2
        count = np.where(legacy, 1, h.record_count).astype(np.int64)
        control = np.asarray(h.control, bool)
        ctype = np.full(len(h), -1, np.int16)
        marker_ts = h.max_timestamp.astype(np.int64).copy()
        live_control = np.flatnonzero(control & (count > 0))
        if live_control.size:
            mv = memoryview(data)
            blob = b"".join(mv[int(h.position[i]):int(h.position[i] + h.size[i])] for i in live_control)
            rows = decode_key_hashes_bytes(blob, path=path, max_batch_bytes=max_batch_bytes)
            base = rows.column("batch_base_offset").to_numpy()
            first = np.flatnonzero(np.r_[True, base[1:] != base[:-1]])
            at = np.searchsorted(h.base_offset[live_control], base[first])
            ctype[live_control[at]] = rows.column("control_type").to_numpy()[first]
            marker_ts[live_control[at]] = rows.column("timestamp").to_numpy()[first]
        parts.append({
            "base_offset": h.base_offset.astype(np.int64), "last_offset": h.last_offset.astype(np.int64),
            "producer_id": h.producer_id.astype(np.int64), "producer_epoch": h.producer_epoch.astype(np.int16),
            "transactional": np.asarray(h.transactional, bool), "control": control, "control_type": ctype,
            "max_timestamp": h.max_timestamp.astype(np.int64), "marker_timestamp": marker_ts, "record_count": count,
        })
    if not parts:
        return BatchSummary(**_empty_summary())
    if len(parts) == 1:  # one segment (a scan summarizes segment by segment): its arrays are new and contiguous
        return BatchSummary(**parts[0])
    return BatchSummary(**{k: np.ascontiguousarray(np.concatenate([p[k] for p in parts])) for k in parts[0]})


def concat_summaries(summaries: Iterable[BatchSummary]) -> BatchSummary:
    """Summaries of consecutive parts of a log (e.g. one per segment, in offset order) as one."""
    parts = [s for s in summaries if len(s)]
    if not parts:
        return BatchSummary(**_empty_summary())
    if len(parts) == 1:
        return parts[0]
    names = BatchSummary.__dataclass_fields__
    return BatchSummary(**{k: np.ascontiguousarray(np.concatenate([getattr(p, k) for p in parts])) for k in names})


def _empty_summary() -> dict[str, np.ndarray]:
    i64 = np.zeros(0, np.int64)
    return {"base_offset": i64, "last_offset": i64, "producer_id": i64,
            "producer_epoch": np.zeros(0, np.int16), "transactional": np.zeros(0, bool),
            "control": np.zeros(0, bool), "control_type": np.zeros(0, np.int16), "max_timestamp": i64,
            "marker_timestamp": i64, "record_count": i64}


@dataclass(frozen=True)
class AbortedTxns:
    """Aborted transactions: the offline ``.txnindex``. ``last_offset`` is the offset of the ABORT marker.

    Sorted by (producer_id, first_offset); transactions of one producer never overlap.
    """

    producer_id: np.ndarray  # int64
    first_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.producer_id)

    @classmethod
    def of(cls, producer_id: Iterable[int], first_offset: Iterable[int], last_offset: Iterable[int]) -> "AbortedTxns":
        """Build from plain sequences (sorted here)."""
        pid = np.asarray(list(producer_id), np.int64)
        first = np.asarray(list(first_offset), np.int64)
        last = np.asarray(list(last_offset), np.int64)
        order = np.lexsort((first, pid))
        return cls(pid[order], first[order], last[order])

    @classmethod
    def empty(cls) -> "AbortedTxns":
        return cls.of([], [], [])

    def contains(self, producer_ids: np.ndarray, batch_last_offsets: np.ndarray) -> np.ndarray:
        """Which data batches belong to an aborted transaction of their producer.

        Kafka's rule (CleanedTransactionMetadata.onBatchRead): a transactional data batch is aborted when an
        aborted transaction of its producer starts at or before the batch's last offset and its marker comes
        after it. The caller restricts the answer to transactional, non-control batches.
        """
        producer_ids = np.asarray(producer_ids, np.int64)
        points = np.asarray(batch_last_offsets, np.int64)
        if len(self) == 0 or len(points) == 0:
            return np.zeros(len(points), bool)
        return _in_intervals(self.producer_id, self.first_offset, self.last_offset, producer_ids, points)


@numba.njit(cache=True)
def _in_intervals(iv_pid, iv_first, iv_last, pids, points):  # pragma: no cover - compiled
    # Intervals are sorted by (pid, first); binary search the last interval starting at or before the point.
    out = np.zeros(len(points), np.bool_)
    n = len(iv_pid)
    for i in range(len(points)):
        p = pids[i]
        x = points[i]
        lo = 0
        hi = n
        while lo < hi:  # first index with (pid, first) > (p, x)
            mid = (lo + hi) >> 1
            if iv_pid[mid] < p or (iv_pid[mid] == p and iv_first[mid] <= x):
                lo = mid + 1
            else:
                hi = mid
        j = lo - 1
        if j >= 0 and iv_pid[j] == p and x < iv_last[j]:
            out[i] = True
    return out


@dataclass(frozen=True)
class CompletedTxns:
    """Transactions closed by a marker while they had data: (producer, first offset, marker offset, aborted)."""

    producer_id: np.ndarray  # int64
    first_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64, offset of the marker
    aborted: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.producer_id)

    def markers_with_data(self) -> np.ndarray:
        """Sorted offsets of markers whose transaction still has data batches in the log."""
        return np.sort(self.last_offset)


@dataclass(frozen=True)
class ActiveProducers:
    """Producers that count as active at ``now``, sorted by producer id.

    ``last_data_offset`` is the last offset of the producer's newest data batch in its current epoch, -1 when
    it has none (its newest batch is then a marker, which carries the epoch needed for fencing).
    """

    producer_id: np.ndarray  # int64
    producer_epoch: np.ndarray  # int16
    last_data_offset: np.ndarray  # int64
    last_timestamp: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.producer_id)

    def is_last_batch(self, producer_ids: np.ndarray, last_offsets: np.ndarray, epochs: np.ndarray,
                      control: np.ndarray) -> np.ndarray:
        """Kafka's ``isBatchLastRecordOfProducer``: the batch holding the producer's last data offset, or, when
        the producer has no data in its epoch, any control batch of that epoch. Producer id -1 never matches."""
        producer_ids = np.asarray(producer_ids, np.int64)
        out = np.zeros(len(producer_ids), bool)
        if len(self) == 0 or len(producer_ids) == 0:
            return out
        idx = np.searchsorted(self.producer_id, producer_ids)
        idx_c = np.minimum(idx, len(self) - 1)
        found = (self.producer_id[idx_c] == producer_ids) & (producer_ids != NO_PRODUCER_ID)
        last_data = self.last_data_offset[idx_c]
        has_data = last_data >= 0
        by_data = has_data & (np.asarray(last_offsets) == last_data)
        by_marker = ~has_data & np.asarray(control) & (np.asarray(epochs) == self.producer_epoch[idx_c])
        return found & (by_data | by_marker)


@dataclass(frozen=True)
class TxnState:
    """Everything the cleaner and the planner need to know about transactions and producers of a partition."""

    aborted: AbortedTxns
    completed: CompletedTxns
    #: producers with a transaction that has no marker yet, and that transaction's first offset
    open_producer_ids: np.ndarray
    open_first_offsets: np.ndarray
    active: ActiveProducers

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest still-open transaction (Kafka's last stable offset when one is open):
        cleaning must stop before it (kafka-behaviours item 20). ``None`` when no transaction is open."""
        return int(self.open_first_offsets.min()) if len(self.open_first_offsets) else None

    @classmethod
    def empty(cls) -> "TxnState":
        """No transactions and no active producers (a log without producer ids)."""
        i64 = np.zeros(0, np.int64)
        return cls(AbortedTxns.empty(), CompletedTxns(i64, i64, i64, np.zeros(0, bool)), i64, i64,
                   ActiveProducers(i64, np.zeros(0, np.int16), i64, i64))


def derive_txn_state(batches: BatchSummary, *, now_ms: int, producer_id_expiration_ms: int) -> TxnState:
    """Replay every batch of a partition (``batches`` must cover the WHOLE log, including the uncleanable part
    and the active segment) into transaction outcomes and producer state.

    A producer is active at ``now_ms`` while it has an open transaction or while ``now_ms`` minus the
    timestamp of its newest batch is below ``producer_id_expiration_ms`` (Kafka's isProducerExpired; the
    offline stand-in for the broker's producer-state snapshot, kafka-behaviours item 22 tag [A]).
    """
    has_pid = batches.producer_id >= 0
    idx = np.flatnonzero(has_pid)
    order = idx[np.lexsort((batches.base_offset[idx], batches.producer_id[idx]))]
    (c_pid, c_first, c_last, c_aborted, o_pid, o_first, p_pid, p_epoch, p_last_data, p_ts) = _replay(
        batches.producer_id[order], batches.producer_epoch[order].astype(np.int64), batches.base_offset[order],
        batches.last_offset[order], batches.transactional[order], batches.control[order],
        batches.control_type[order].astype(np.int64), batches.max_timestamp[order],
        batches.marker_timestamp[order], batches.record_count[order], CONTROL_ABORT, CONTROL_COMMIT)
    completed = CompletedTxns(c_pid, c_first, c_last, c_aborted)
    aborted = AbortedTxns(c_pid[c_aborted], c_first[c_aborted], c_last[c_aborted])  # already (pid, first) sorted
    open_pids = set(o_pid.tolist())
    alive = (now_ms - p_ts < producer_id_expiration_ms) | np.isin(p_pid, np.asarray(sorted(open_pids), np.int64))
    active = ActiveProducers(p_pid[alive], p_epoch[alive].astype(np.int16), p_last_data[alive], p_ts[alive])
    return TxnState(aborted, completed, o_pid, o_first, active)


@numba.njit(cache=True, nogil=True)
def _replay(pid, epoch, base, last, transactional, control, ctype, max_ts, marker_ts, count,
            abort_type, commit_type):  # pragma: no cover - compiled
    # Batches arrive sorted by (producer id, offset): one sequential state machine per producer, as in
    # ProducerAppendInfo.append (appendDataBatch / appendEndTxnMarker).
    n = len(pid)
    c_pid = np.empty(n, np.int64)
    c_first = np.empty(n, np.int64)
    c_last = np.empty(n, np.int64)
    c_ab = np.empty(n, np.bool_)
    nc = 0
    o_pid = np.empty(n, np.int64)
    o_first = np.empty(n, np.int64)
    no = 0
    p_pid = np.empty(n, np.int64)
    p_epoch = np.empty(n, np.int64)
    p_last = np.empty(n, np.int64)
    p_ts = np.empty(n, np.int64)
    npr = 0
    i = 0
    while i < n:
        cur = pid[i]
        cur_epoch = -1  # RecordBatch.NO_PRODUCER_EPOCH: an entry with no batches yet
        last_data = -1
        last_ts = -1
        open_first = -1
        has_any = False
        while i < n and pid[i] == cur:
            if control[i]:
                kind = ctype[i]
                if count[i] == 0:
                    # A marker a clean emptied but kept as the producer's last batch: it still carries the
                    # producer's epoch and time, so the producer stays known (and active while that is young)
                    # on every later scan; it opens and closes nothing.
                    if epoch[i] != cur_epoch:
                        last_data = -1
                        cur_epoch = epoch[i]
                    last_ts = max_ts[i]
                    has_any = True
                elif kind == abort_type or kind == commit_type:
                    if epoch[i] != cur_epoch:
                        last_data = -1
                        cur_epoch = epoch[i]
                    last_ts = marker_ts[i]
                    has_any = True
                    if open_first >= 0:
                        c_pid[nc] = cur
                        c_first[nc] = open_first
                        c_last[nc] = base[i]
                        c_ab[nc] = kind == abort_type
                        nc += 1
                        open_first = -1
            else:
                if epoch[i] != cur_epoch:
                    last_data = -1
                    cur_epoch = epoch[i]
                last_data = last[i]
                last_ts = max_ts[i]
                has_any = True
                if transactional[i] and open_first < 0:
                    open_first = base[i]
            i += 1
        if open_first >= 0:
            o_pid[no] = cur
            o_first[no] = open_first
            no += 1
        if has_any:
            p_pid[npr] = cur
            p_epoch[npr] = cur_epoch
            p_last[npr] = last_data
            p_ts[npr] = last_ts
            npr += 1
    return (c_pid[:nc], c_first[:nc], c_last[:nc], c_ab[:nc], o_pid[:no], o_first[:no],
            p_pid[:npr], p_epoch[:npr], p_last[:npr], p_ts[:npr])


__all__ = ["AbortedTxns", "ActiveProducers", "BatchSummary", "CompletedTxns", "TxnState", "concat_summaries",
           "derive_txn_state", "summarize_batches", "summarize_headers"]
