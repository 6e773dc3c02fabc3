"""Rows of RECORD_SCHEMA back to RecordBatch v2 bytes, as Kafka's log cleaner would write them.

Rules (from Kafka's ``MemoryRecords.filterTo``, ``MemoryRecordsBuilder`` and ``DefaultRecordBatch``):

* Rows are grouped into output batches by ``(segment_base_offset, batch_base_offset)``; every row of a
  group must carry the same batch-level fields. A batch keeps its base offset and its last offset even when
  only some of its records are written (offset deltas stay relative to the original base offset).
* Base timestamp: the delete horizon when the batch has one (attribute bit 0x40 set), else the first written
  record's timestamp. Record timestamp deltas are relative to that base.
* Max timestamp: for LOG_APPEND_TIME the batch's max timestamp (its log-append time); for CREATE_TIME the
  largest timestamp among the written records (-1 when none has one).
* Empty batches (``empty_batches``, BATCH_SCHEMA rows) are written the way ``writeEmptyHeader`` writes them:
  no records, no compression, base timestamp -1, max timestamp kept, no delete horizon.
* Legacy (magic 0/1) rows become v2 batches: base offset = first record's offset, last offset = last
  record's (what Kafka's builder does for pre-v2 input), timestamp type CREATE_TIME when they had none.
* A batch whose rows are all present, and whose header would not change, is copied verbatim from
  ``sources`` (the original segment bytes) when given: compressed batches thus stay byte-identical.

Records are written by the compiled kernels in :mod:`segment_io._encode_kernels`; the Python here works per
batch, never per record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from segment_io import _encode_kernels as kernels
from segment_io import compression
from segment_io.compression import (
    CODEC_NAMES,
    NONE,
    Inflater,
    codec_from_name,
    compress_all,
    max_batch_bytes,
    oversized_detail,
    plan_payloads,
    reused_inflater,
)
from segment_io.crc import crc_instruction, span_crcs
from segment_io.errors import CorruptRecordError, InvalidRecordsError, OversizedBatchError, UsageError
from segment_io.format import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_ARRAYS,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    SIZE_OFFSET,
    V2_CRC,
    V2_CRC_START,
    V2_HEADER_SIZE,
    V2_MAGIC,
    BatchHeaders,
    v2_headers_at,
)
from segment_io.payloads import KeptPayloads
from segment_io.schema import (
    BATCH_SCHEMA,
    RECORD_SCHEMA,
    has_value_refs,
    int64_or_zero,
    ref_lengths,
    validity,
    with_value_refs,
)

# `memoryview(ndarray)  # type: ignore[arg-type]`: numpy declares ndarray.__buffer__ only for Python >= 3.12,
# so on 3.11 a type checker does not see that an ndarray is a buffer (at run time it is one).

_INT32_MAX = (1 << 31) - 1
_INT64_MIN = np.int64(-(1 << 63))
#: Up to this many rows the batch-constant columns are checked stacked in one comparison (see _plan_records).
_STACKED_CHECK_ROWS = 1 << 14
_LOG_APPEND_TIME = 1
_MAGIC_V2 = 2

#: Columns the encoder reads; the others (topic, partition, batch_size, batch_base_timestamp) are not needed
#: to reproduce a batch.
_RECORD_INPUT = (
    "offset", "timestamp", "timestamp_type", "key", "value", "headers", "batch_base_offset",
    "batch_last_offset", "batch_position", "batch_max_timestamp", "magic", "codec", "transactional", "control",
    "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch", "delete_horizon_ms",
    "segment_base_offset",
)
#: Batch-level columns that must be equal on every row of one batch.
_BATCH_CONSTANT = (
    "batch_last_offset", "batch_position", "batch_max_timestamp", "magic", "codec", "timestamp_type",
    "transactional", "control", "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch",
)
_EMPTY_INPUT = (
    "batch_base_offset", "batch_last_offset", "batch_position", "batch_max_timestamp", "timestamp_type",
    "magic", "transactional", "control", "producer_id", "producer_epoch", "base_sequence",
    "partition_leader_epoch", "segment_base_offset",
)


@dataclass(frozen=True)
class EncodedSegment:
    """Encoded batches, in order, and what was written.

    ``buffers`` concatenated are the segment bytes (kept apart so verbatim copies and large encoded runs
    are not copied again). ``headers`` describes every batch written, positions relative to the first byte,
    so indexes can be built without re-reading the bytes.
    """

    buffers: tuple[memoryview, ...]
    headers: BatchHeaders

    @property
    def size(self) -> int:
        """Total bytes."""
        return self.headers.end

    @property
    def batch_count(self) -> int:
        return len(self.headers)

    @property
    def record_count(self) -> int:
        return int(self.headers.record_count.sum(dtype=np.int64))

    @property
    def base_offset(self) -> int:
        """Base offset of the first batch, -1 when nothing was written."""
        return int(self.headers.base_offset[0]) if len(self.headers) else -1

    @property
    def last_offset(self) -> int:
        """Last offset of the last batch, -1 when nothing was written."""
        return int(self.headers.last_offset[-1]) if len(self.headers) else -1

    @property
    def max_timestamp(self) -> int:
        """Largest batch max timestamp, -1 when there is none."""
        return int(self.headers.max_timestamp.max()) if len(self.headers) else NO_TIMESTAMP

    def to_bytes(self) -> bytes:
        """All bytes in one object (copies; prefer :meth:`write_to` for files)."""
        if len(self.buffers) == 1:
            return bytes(self.buffers[0])
        return b"".join(self.buffers)

    def write_to(self, stream: BinaryIO) -> int:
        """Write all bytes to ``stream``; returns the number written."""
        for buf in self.buffers:
            stream.write(buf)
        return self.size

    def split(self, batch_cuts: Sequence[int] | np.ndarray) -> list["EncodedSegment"]:
        """The batches ``[batch_cuts[i], batch_cuts[i + 1])`` as segments of their own, in order: their
        buffers are views of this one's bytes (nothing copied), their header positions relative to their own
        first byte. ``batch_cuts`` ascend from 0 to :attr:`batch_count`."""
        cuts = np.asarray(batch_cuts, dtype=np.int64)
        nb = self.batch_count
        if len(cuts) < 2 or cuts[0] != 0 or cuts[-1] != nb or np.any(np.diff(cuts) < 0):
            raise UsageError(f"batch cuts must ascend from 0 to {nb}, got {cuts.tolist()}")
        byte_cuts = np.append(self.headers.position, self.size)[cuts].tolist()
        pieces: list[EncodedSegment] = []
        buf_no, buf_start = 0, 0  # the buffer holding the next byte to hand out, and its first byte's position
        for k, (a, b) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist())):
            lo, hi = byte_cuts[k], byte_cuts[k + 1]
            views: list[memoryview] = []
            while lo < hi:
                while buf_start + len(self.buffers[buf_no]) <= lo:
                    buf_start += len(self.buffers[buf_no])
                    buf_no += 1
                buf = self.buffers[buf_no]
                view = buf[lo - buf_start:min(hi - buf_start, len(buf))]
                views.append(view)
                lo += len(view)
            pieces.append(EncodedSegment(tuple(views), self.headers.part(a, b, byte_cuts[k])))
        return pieces


# --------------------------------------------------------------------------------------------------
# Arrow input
# --------------------------------------------------------------------------------------------------


def input_columns(records: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch] | None,
                  columns: tuple[str, ...], schema: pa.Schema) -> pa.Table:
    """The encoder's input ``columns`` of ``records`` as a table, chunks kept as they are (nothing copied or
    cast yet); an error naming the columns the input lacks."""
    if records is None:
        return schema.empty_table().select(list(columns))
    if isinstance(records, pa.RecordBatch):
        table = pa.Table.from_batches([records])
    elif isinstance(records, pa.Table):
        table = records
    else:
        batches = list(records)
        table = pa.Table.from_batches(batches) if batches else schema.empty_table()
    names = set(table.schema.names)  # one set: `column_names` builds a new list on every access
    missing = [c for c in columns if c not in names]
    if missing:
        raise UsageError(f"encoder input lacks column(s) {missing}")
    return table.select(list(columns))


def input_schema(table: pa.Table, columns: tuple[str, ...], schema: pa.Schema) -> pa.Schema:
    """The types the kernels want for ``columns``: ``schema``'s, with value references kept as such."""
    refs = has_value_refs(table.schema)
    # Built once per (columns, schema, refs): assembling a schema field by field costs more than encoding a
    # small partition's batches. Keyed by identity (hashing a schema costs as much); the entry keeps the
    # schema it was built from alive, so an identity match is that schema.
    key = (columns, id(schema), refs)
    hit = _INPUT_SCHEMAS.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    target = pa.schema([schema.field(c) for c in columns])
    target = with_value_refs(target) if refs else target
    _INPUT_SCHEMAS[key] = (schema, target)
    return target


_INPUT_SCHEMAS: dict[tuple[tuple[str, ...], int, bool], tuple[pa.Schema, pa.Schema]] = {}


def _as_table(records: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch] | None,
              columns: tuple[str, ...], schema: pa.Schema, *, combine: bool = True) -> pa.Table:
    table = input_columns(records, columns, schema)
    target = input_schema(table, columns, schema)
    if not table.schema.equals(target):
        # Readers may hand over large_binary or binary_view columns; the kernels want the plain layouts.
        table = table.cast(target)
    return table.combine_chunks() if combine else table


def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks) if col.num_chunks else \
        pa.array([], type=col.type)


def _ints(table: pa.Table, name: str, dtype: type) -> np.ndarray:
    arr = _column(table, name)
    if arr.null_count == len(arr):  # e.g. no delete horizon anywhere: no compute call for it
        return np.zeros(len(arr), dtype=dtype)
    if arr.null_count:
        if not pa.types.is_boolean(arr.type):  # from the buffers: no compute call for a small column
            return int64_or_zero(arr).astype(dtype, copy=False)
        arr = arr.fill_null(False)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int32[n+1], data uint8, validity bool[n]) of a binary or string array, zero-copy."""
    n = len(arr)
    bufs = arr.buffers()
    if n == 0 or bufs[1] is None:
        offsets = np.zeros(n + 1, dtype=np.int32)
    else:
        offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if len(bufs) > 2 and bufs[2] is not None else \
        np.zeros(0, dtype=np.uint8)
    return offsets, data, validity(arr)


def _header_parts(arr: pa.ListArray) -> tuple[np.ndarray, ...]:
    """List offsets and validity of ``headers``, then the (offsets, data, validity) of header keys and of
    header values, all indexed the way the list offsets point into them."""
    n = len(arr)
    if n == 0:
        empty = np.zeros(1, dtype=np.int32)
        none = np.zeros(0, dtype=np.uint8)
        return (empty, np.zeros(0, np.bool_), empty, none, empty, none, np.zeros(0, np.bool_))
    list_offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int32)
    keys, values = arr.values.flatten()
    hk_off, hk_data, _ = _binary_parts(keys)
    hv_off, hv_data, hv_valid = _binary_parts(values)
    return (list_offsets, validity(arr), hk_off, hk_data, hv_off, hv_data, hv_valid)


# --------------------------------------------------------------------------------------------------
# Planning: one entry per output batch
# --------------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """Header fields of every output batch, in output order, and the row range holding its records."""

    row_start: np.ndarray
    row_end: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    base_timestamp: np.ndarray
    max_timestamp: np.ndarray
    attributes: np.ndarray
    codec: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_sequence: np.ndarray
    leader_epoch: np.ndarray
    has_horizon: np.ndarray
    segment_base_offset: np.ndarray
    batch_position: np.ndarray

    def take(self, order: np.ndarray) -> "_Plan":
        return _Plan(**{k: v[order] for k, v in self.__dict__.items()})

    @staticmethod
    def concat(a: "_Plan", b: "_Plan") -> "_Plan":
        return _Plan(**{k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in a.__dict__})


def _attributes(codec: np.ndarray, ts_type: np.ndarray, txn: np.ndarray, control: np.ndarray,
                horizon: np.ndarray) -> np.ndarray:
    attrs = codec.astype(np.int16)
    attrs |= np.where(ts_type == _LOG_APPEND_TIME, ATTR_TIMESTAMP_TYPE, 0).astype(np.int16)
    attrs |= np.where(txn, ATTR_TRANSACTIONAL, 0).astype(np.int16)
    attrs |= np.where(control, ATTR_CONTROL, 0).astype(np.int16)
    attrs |= np.where(horizon, ATTR_DELETE_HORIZON, 0).astype(np.int16)
    return attrs


def _check_codec(codec: int | str | None) -> int | None:
    if codec is None:
        return None
    if isinstance(codec, str):
        try:
            return codec_from_name(codec)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if int(codec) not in CODEC_NAMES:
        raise UsageError(f"unknown compression codec {codec}; choose one of {sorted(CODEC_NAMES)}")
    return int(codec)


def _plan_records(table: pa.Table, codec_override: int | None, split_starts: np.ndarray | None = None) -> _Plan:
    """One entry per output batch of ``table``'s rows. ``split_starts`` (row numbers) cut the rows into runs
    that belong to different segments: a batch starts at each of them even when its neighbour row shares the
    batch columns, and offsets may go back there (different partitions)."""
    n = table.num_rows
    offsets = _ints(table, "offset", np.int64)
    timestamps = _ints(table, "timestamp", np.int64)
    seg = _ints(table, "segment_base_offset", np.int64)
    bbo = _ints(table, "batch_base_offset", np.int64)
    if n == 0:
        starts = np.zeros(0, dtype=np.int64)
    else:
        restart = np.zeros(n, dtype=np.bool_)
        if split_starts is not None:
            restart[split_starts] = True
        bad = np.flatnonzero((np.diff(offsets) <= 0) & ~restart[1:])
        if len(bad):
            i = int(bad[0])
            raise InvalidRecordsError(f"record offsets must increase strictly: {offsets[i + 1]} follows "
                                      f"{offsets[i]}", offset=int(offsets[i + 1]))
        boundary = np.ones(n, dtype=np.bool_)
        boundary[1:] = (seg[1:] != seg[:-1]) | (bbo[1:] != bbo[:-1]) | restart[1:]
        starts = np.flatnonzero(boundary)
    ends = np.append(starts[1:], n).astype(np.int64)
    counts = ends - starts

    cols = {name: _ints(table, name, np.int64) for name in _BATCH_CONSTANT}
    horizon_arr = _column(table, "delete_horizon_ms")
    has_h = validity(horizon_arr)
    horizon = _ints(table, "delete_horizon_ms", np.int64)
    checked = list(cols.items()) + [("delete_horizon_ms", np.where(has_h, horizon, _INT64_MIN))]
    if n > 1:
        # Valid input (the common case) is recognised by comparing each row with the row before it in its
        # batch; the column-by-column search below then only runs to name the first offending column. Few
        # rows: all columns stacked into one comparison (per-call overhead dominates); many: one column at a
        # time (no copy of all of them at once).
        inside = ~boundary[1:]
        if n <= _STACKED_CHECK_ROWS:
            stacked = np.stack([values for _, values in checked])
            differ = bool(((stacked[:, 1:] != stacked[:, :-1]) & inside).any())
        else:
            differ = any(bool(((values[1:] != values[:-1]) & inside).any()) for _, values in checked)
        if not differ:
            checked = []
    for name, values in checked:
        differs = np.flatnonzero(values != np.repeat(values[starts], counts))
        if len(differs):
            i = int(differs[0])
            raise InvalidRecordsError(f"column {name!r} differs between records of the batch with base offset "
                                      f"{bbo[i]} (record offset {offsets[i]})", offset=int(offsets[i]))

    magic = cols["magic"][starts]
    legacy = magic < _MAGIC_V2
    first_off, last_row_off = offsets[starts], offsets[ends - 1] if n else offsets[:0]
    base = np.where(legacy, first_off, bbo[starts])
    last = np.where(legacy, last_row_off, cols["batch_last_offset"][starts])
    # v2 rows must lie inside their batch's offset range; deltas must fit Kafka's int32 fields.
    row_base = np.repeat(base, counts)
    row_last = np.repeat(last, counts)
    outside = np.flatnonzero((offsets < row_base) | (offsets > row_last))
    if len(outside):
        i = int(outside[0])
        raise InvalidRecordsError(f"record offset {offsets[i]} lies outside its batch "
                                  f"[{row_base[i]}, {row_last[i]}]", offset=int(offsets[i]))
    bad_ts = np.flatnonzero(timestamps < NO_TIMESTAMP)
    if len(bad_ts):
        i = int(bad_ts[0])
        raise InvalidRecordsError(f"invalid negative timestamp {timestamps[i]}", offset=int(offsets[i]))

    ts_type = cols["timestamp_type"][starts]
    h = has_h[starts]
    hv = horizon[starts]
    if np.any(h & (hv < 0)):
        i = int(starts[np.flatnonzero(h & (hv < 0))[0]])
        raise InvalidRecordsError(f"invalid negative delete horizon {horizon[i]}", offset=int(offsets[i]))
    # Legacy rows may carry a horizon column only by mistake; v2 is what gets written, so keep it.
    base_ts = np.where(h, hv, timestamps[starts])
    if n:
        row_max = np.maximum(np.maximum.reduceat(timestamps, starts), NO_TIMESTAMP)
    else:
        row_max = timestamps[:0]
    max_ts = np.where(ts_type == _LOG_APPEND_TIME, cols["batch_max_timestamp"][starts], row_max)
    codec = cols["codec"][starts] if codec_override is None else np.full(len(starts), codec_override)
    if np.any((codec < 0) | (codec > max(CODEC_NAMES))):
        i = int(starts[np.flatnonzero((codec < 0) | (codec > max(CODEC_NAMES)))[0]])
        raise InvalidRecordsError(f"unknown compression codec {codec[np.searchsorted(starts, i)]}",
                                  offset=int(offsets[i]))
    return _Plan(
        row_start=starts.astype(np.int64), row_end=ends, base_offset=base.astype(np.int64),
        last_offset=last.astype(np.int64), base_timestamp=base_ts.astype(np.int64),
        max_timestamp=max_ts.astype(np.int64),
        attributes=_attributes(codec, ts_type, cols["transactional"][starts] != 0, cols["control"][starts] != 0, h),
        codec=codec.astype(np.int8), producer_id=cols["producer_id"][starts],
        producer_epoch=cols["producer_epoch"][starts].astype(np.int16),
        base_sequence=cols["base_sequence"][starts].astype(np.int32),
        leader_epoch=cols["partition_leader_epoch"][starts].astype(np.int32),
        has_horizon=h, segment_base_offset=seg[starts], batch_position=cols["batch_position"][starts],
    )


def _plan_empty(table: pa.Table) -> _Plan:
    m = table.num_rows
    col = {name: _ints(table, name, np.int64) for name in _EMPTY_INPUT}
    legacy = np.flatnonzero(col["magic"] < _MAGIC_V2)
    if len(legacy):
        raise InvalidRecordsError("empty batches exist only in magic v2; got magic "
                                  f"{col['magic'][legacy[0]]}", offset=int(col["batch_base_offset"][legacy[0]]))
    no_codec = np.zeros(m, dtype=np.int64)
    no_horizon = np.zeros(m, dtype=np.bool_)
    zero = np.zeros(m, dtype=np.int64)
    return _Plan(
        row_start=zero, row_end=zero.copy(), base_offset=col["batch_base_offset"],
        last_offset=col["batch_last_offset"], base_timestamp=np.full(m, NO_TIMESTAMP, dtype=np.int64),
        max_timestamp=col["batch_max_timestamp"],
        attributes=_attributes(no_codec, col["timestamp_type"], col["transactional"] != 0, col["control"] != 0,
                               no_horizon),
        codec=no_codec.astype(np.int8), producer_id=col["producer_id"],
        producer_epoch=col["producer_epoch"].astype(np.int16),
        base_sequence=col["base_sequence"].astype(np.int32),
        leader_epoch=col["partition_leader_epoch"].astype(np.int32),
        has_horizon=no_horizon, segment_base_offset=col["segment_base_offset"],
        batch_position=col["batch_position"],
    )


def _check_order(plan: _Plan, split_batches: np.ndarray | None = None) -> None:
    """Batches in offset order and within Kafka's limits; ``split_batches`` (batch numbers) start new
    segments, which need not follow the batch before them."""
    bad = np.flatnonzero(plan.last_offset < plan.base_offset)
    if len(bad):
        i = int(bad[0])
        raise InvalidRecordsError(f"batch last offset {plan.last_offset[i]} is below its base offset",
                                  offset=int(plan.base_offset[i]))
    too_far = np.flatnonzero(plan.last_offset - plan.base_offset > _INT32_MAX)
    if len(too_far):
        i = int(too_far[0])
        raise InvalidRecordsError(f"batch spans more than 2^31 offsets (last offset {plan.last_offset[i]})",
                                  offset=int(plan.base_offset[i]))
    follows = plan.base_offset[1:] <= plan.last_offset[:-1]
    if split_batches is not None and len(follows):
        follows[split_batches[split_batches > 0] - 1] = False
    overlap = np.flatnonzero(follows)
    if len(overlap):
        i = int(overlap[0]) + 1
        raise InvalidRecordsError(f"batch with base offset {plan.base_offset[i]} overlaps the previous batch, "
                                  f"which ends at offset {plan.last_offset[i - 1]}", offset=int(plan.base_offset[i]))


# --------------------------------------------------------------------------------------------------
# Verbatim copies
# --------------------------------------------------------------------------------------------------


@dataclass
class _Copies:
    """The batches copied verbatim from a source segment: for each planned batch, which source (an index into
    ``views``; -1 for a batch that is encoded), where it lies there, and its header's timestamps and CRC."""

    views: list[memoryview]
    source: np.ndarray
    start: np.ndarray
    end: np.ndarray
    base_timestamp: np.ndarray
    max_timestamp: np.ndarray
    crc: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        return self.source >= 0


def _copy_sources(plan: _Plan, sources: Mapping[int, bytes | memoryview] | None) -> _Copies:
    """For each planned batch, whether and from where it is copied verbatim (else it is encoded).

    A batch is copied when the header we would write is the header that is there and the bytes there pass their
    CRC: every candidate of a source is judged at once (header fields gathered in one pass, CRCs in one call)."""
    nb = len(plan.base_offset)
    copies = _Copies([], np.full(nb, -1, np.int64), np.zeros(nb, np.int64), np.zeros(nb, np.int64),
                     np.zeros(nb, np.int64), np.zeros(nb, np.int64), np.zeros(nb, np.uint32))
    counts = plan.row_end - plan.row_start
    for seg, source in (sources or {}).items():
        src = memoryview(source).cast("B")
        buf = np.frombuffer(src, np.uint8)
        pos = plan.batch_position
        b = np.flatnonzero((plan.segment_base_offset == int(seg)) & (pos >= 0) & (pos + V2_HEADER_SIZE <= len(src)))
        b = b[buf[pos[b] + V2_MAGIC] == _MAGIC_V2]
        if len(b) == 0:
            continue
        there = v2_headers_at(buf, pos[b])
        same = _same_header(plan, b, counts[b], there, len(src))
        # never propagate a damaged batch: one whose CRC fails is re-encoded from its decoded rows instead
        intact = np.zeros(len(b), np.bool_)
        intact[same] = span_crcs(buf, pos[b[same]] + V2_CRC_START, pos[b[same]] + there.size[same]) == there.crc[same]
        b = b[intact]
        copies.source[b] = len(copies.views)
        copies.start[b] = pos[b]
        copies.end[b] = pos[b] + there.size[intact]
        copies.base_timestamp[b] = there.base_timestamp[intact]
        copies.max_timestamp[b] = there.max_timestamp[intact]
        copies.crc[b] = there.crc[intact]
        copies.views.append(src)
    return copies


def _same_header(plan: _Plan, b: np.ndarray, count: np.ndarray, there: BatchHeaders, src_len: int) -> np.ndarray:
    """Which of batches ``b`` would be written with the header that is at their place in the source (``there``,
    read at ``plan.batch_position[b]``), whole inside it. The max timestamp is compared only for log-append time:
    producers other than Java's may store one that differs from the largest record timestamp."""
    same = ((there.size >= V2_HEADER_SIZE) & (plan.batch_position[b] + there.size <= src_len)
            & (there.base_offset == plan.base_offset[b]) & (there.record_count == count)
            & (there.last_offset == plan.last_offset[b]) & (there.attributes == plan.attributes[b])
            & (there.producer_id == plan.producer_id[b]) & (there.producer_epoch == plan.producer_epoch[b])
            & (there.base_sequence == plan.base_sequence[b]) & (there.partition_leader_epoch == plan.leader_epoch[b]))
    same &= ~plan.has_horizon[b] | (there.base_timestamp == plan.base_timestamp[b])
    same &= ((there.attributes & ATTR_TIMESTAMP_TYPE) == 0) | (there.max_timestamp == plan.max_timestamp[b])
    return same


# --------------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------------


def encode_batches(records: pa.Table | Iterable[pa.RecordBatch], *, empty_batches: pa.Table | None = None,
                   codec: int | str | None = None, sources: Mapping[int, bytes | memoryview] | None = None,
                   payloads: KeptPayloads | None = None, max_batch_bytes: int | None = None) -> EncodedSegment:
    """Encode RECORD_SCHEMA rows (sorted by offset) as RecordBatch v2 bytes.

    ``empty_batches`` (BATCH_SCHEMA rows) are written as header-only batches, merged in by base offset.
    ``codec`` overrides every written batch's compression (None keeps each batch's own). ``sources`` maps a
    ``segment_base_offset`` to that segment's original bytes: a batch whose rows are all present and whose
    header would not change is then copied from there byte for byte. ``payloads``: where the decoder left the
    decompressed payloads of compressed source batches (:class:`segment_io.payloads.KeptPayloads`), which
    values that are references into them are copied from instead of decompressing the payload again.
    ``max_batch_bytes``: the bound a payload decompressed again is held to, the one its decode had (None: the
    process's, :func:`segment_io.compression.max_batch_bytes`).

    Raises :class:`~segment_io.errors.InvalidRecordsError` when the rows cannot form valid batches.
    """
    override = _check_codec(codec)
    table = _as_table(records, _RECORD_INPUT, RECORD_SCHEMA, combine=False)
    _check_refs(table, sources)
    if table.num_rows and table.column(0).num_chunks > 1:
        return _encode_chunkwise(table, empty_batches, override, sources, payloads, max_batch_bytes)
    return _encode_table(table.combine_chunks(), empty_batches, override, sources, payloads=payloads,
                         max_batch_bytes=max_batch_bytes)


def _encode_table(table: pa.Table, empty_batches: pa.Table | None, override: int | None,
                  sources: Mapping[int, bytes | memoryview] | None,
                  split_starts: np.ndarray | None = None, payloads: KeptPayloads | None = None,
                  max_batch_bytes: int | None = None) -> EncodedSegment:
    """Encode a single-chunk table of ``_RECORD_INPUT`` columns (already cast) and its header-only batches.

    ``split_starts`` (ascending row numbers, the first 0) cut the rows into the runs of several segments,
    encoded together: each run's batches are what encoding the run alone gives, and each run starts a batch
    (see :meth:`EncodedSegment.split`). Header-only batches cannot be placed among runs whose offsets
    restart, so they are not taken then."""
    plan = _plan_records(table, override, split_starts)
    split_batches = None
    if split_starts is not None:
        if empty_batches is not None and empty_batches.num_rows:
            raise UsageError("header-only batches cannot be encoded with split rows")
        split_batches = np.searchsorted(plan.row_start, split_starts)
    elif empty_batches is not None and empty_batches.num_rows:
        empties = _plan_empty(_as_table(empty_batches, _EMPTY_INPUT, BATCH_SCHEMA))
        merged = _Plan.concat(plan, empties)
        plan = merged.take(np.argsort(merged.base_offset, kind="stable"))
    _check_order(plan, split_batches)
    copies = _copy_sources(plan, sources)
    is_copy = copies.mask
    to_compress = ~is_copy & (plan.codec != NONE) & (plan.row_end > plan.row_start)
    encoded = _encode_uncompressed(table, plan, ~is_copy, ~is_copy & ~to_compress, sources, payloads,
                                   max_batch_bytes)
    return _assemble(plan, copies, to_compress, encoded)


#: Without the processor's CRC32 instruction (:func:`segment_io.crc.crc_instruction`), batches up to this size get
#: their CRC from a table-driven kernel right after encoding (all in one call); larger ones from the crc32c
#: package, whose hardware-accelerated loop wins once the per-call Python overhead is amortised. With it, every
#: batch's CRC is computed in one call after encoding (:func:`_finish_crcs`).
_KERNEL_CRC_MAX_BYTES = 4096
_NO_BYTES = np.empty(0, np.uint8)


@dataclass
class _Raw:
    """Uncompressed encoding of the batches not copied: one buffer, each batch's place in it, and the CRCs
    the kernel already computed."""

    data: np.ndarray
    position: np.ndarray  # -1 for copied batches
    size: np.ndarray
    crc: np.ndarray
    crc_done: np.ndarray


def _encode_chunkwise(table: pa.Table, empty_batches: pa.Table | None, codec: int | None,
                      sources: Mapping[int, bytes | memoryview] | None,
                      payloads: KeptPayloads | None, max_batch_bytes: int | None) -> EncodedSegment:
    """Encode a multi-chunk table one chunk at a time and lay the parts end to end.

    Combining the chunks first would copy every key and value once more (decoded segments arrive as one
    chunk each). A chunk boundary that splits a batch's rows would change what gets written, so then, and
    when chunks are out of order, the table is combined instead. Header-only batches go with the chunk
    that their base offset precedes (the last chunk takes the rest).
    """
    chunks = [c for c in table.to_batches() if c.num_rows]
    if len(chunks) == 1:
        return encode_batches(pa.Table.from_batches(chunks), empty_batches=empty_batches, codec=codec,
                              sources=sources, payloads=payloads, max_batch_bytes=max_batch_bytes)
    off, base = table.schema.get_field_index("offset"), table.schema.get_field_index("batch_base_offset")
    firsts = [c.column(off)[0].as_py() for c in chunks]
    lasts = [c.column(off)[c.num_rows - 1].as_py() for c in chunks]
    bases_first = [c.column(base)[0].as_py() for c in chunks]
    bases_last = [c.column(base)[c.num_rows - 1].as_py() for c in chunks]
    ordered = all(lasts[i] < firsts[i + 1] for i in range(len(chunks) - 1))
    split_batch = any(bases_last[i] == bases_first[i + 1] for i in range(len(chunks) - 1))
    if not ordered or split_batch:
        return encode_batches(table.combine_chunks(), empty_batches=empty_batches, codec=codec, sources=sources,
                              payloads=payloads, max_batch_bytes=max_batch_bytes)
    empties = empty_batches if empty_batches is not None and empty_batches.num_rows else None
    e_base = empties.column("batch_base_offset").to_numpy() if empties is not None else np.empty(0, np.int64)
    parts: list[EncodedSegment] = []
    for i, chunk in enumerate(chunks):
        part_empties = None
        if empties is not None:
            lo = -np.inf if i == 0 else firsts[i]
            hi = firsts[i + 1] if i + 1 < len(chunks) else np.inf
            mask = (e_base >= lo) & (e_base < hi)
            if mask.any():
                part_empties = empties.filter(pa.array(mask))
        parts.append(encode_batches(pa.Table.from_batches([chunk]), empty_batches=part_empties, codec=codec,
                                    sources=sources, payloads=payloads, max_batch_bytes=max_batch_bytes))
    return _concat_encoded(parts)


def _concat_encoded(parts: list[EncodedSegment]) -> EncodedSegment:
    """Encoded parts laid end to end: buffers chained, header positions shifted, order checked."""
    shift = np.cumsum([0] + [p.size for p in parts[:-1]])
    cols: dict[str, np.ndarray] = {}
    for name in HEADER_ARRAYS:
        arrays = [getattr(p.headers, name) for p in parts]
        if name == "position":
            arrays = [a + off for a, off in zip(arrays, shift)]
        cols[name] = np.concatenate(arrays)
    last = cols["last_offset"]
    base = cols["base_offset"]
    if len(base) > 1 and not np.all(base[1:] > last[:-1]):
        bad = int(np.flatnonzero(base[1:] <= last[:-1])[0]) + 1
        raise InvalidRecordsError(f"batches overlap: batch at offset {int(base[bad])} starts at or before the "
                                  f"previous batch's last offset {int(last[bad - 1])}", offset=int(base[bad]))
    buffers = tuple(b for p in parts for b in p.buffers)
    return EncodedSegment(buffers, BatchHeaders(**cols))  # type: ignore[arg-type]  # every field but truncated_tail


def _encode_uncompressed(table: pa.Table, plan: _Plan, mask: np.ndarray, final: np.ndarray,
                         sources: Mapping[int, bytes | memoryview] | None, payloads: KeptPayloads | None,
                         max_batch_bytes: int | None = None) -> _Raw:
    """Write the batches selected by ``mask`` uncompressed into one buffer. ``final`` marks those that stay
    uncompressed: small ones among them are finished (CRC) by the kernel."""
    idx = np.flatnonzero(mask)
    n = table.num_rows
    offsets = _ints(table, "offset", np.int64)
    timestamps = _ints(table, "timestamp", np.int64)
    key_off, key_data, key_valid = _binary_parts(_column(table, "key"))
    row_start, row_end = plan.row_start[idx], plan.row_end[idx]
    # values that are references are copied once, from the source segments straight into the new batches
    refs: _RefValues | None = None
    if has_value_refs(table.schema):
        assert sources is not None  # _check_refs
        refs = _find_refs(table, _rows_of(row_start, row_end), sources, payloads, max_batch_bytes)
        val_off, val_data, val_valid = refs.offsets, _NO_BYTES, refs.valid
    else:
        val_off, val_data, val_valid = _binary_parts(_column(table, "value"))
    value_at = np.empty(n if refs is not None else 0, np.int64)
    hdr = _header_parts(_column(table, "headers"))
    base_offset, base_ts = plan.base_offset[idx], plan.base_timestamp[idx]

    body_sizes = np.empty(n, dtype=np.int64)
    bodies = np.empty(len(idx), dtype=np.int64)
    kernels.record_body_sizes(row_start, row_end, base_offset, base_ts, offsets, timestamps,
                              key_off, key_valid, val_off, val_valid, hdr[0], hdr[1], hdr[2], hdr[4], hdr[6],
                              body_sizes, bodies)
    too_big = np.flatnonzero(bodies > _INT32_MAX - V2_HEADER_SIZE)
    if len(too_big):
        raise InvalidRecordsError(f"batch would exceed 2 GiB ({bodies[too_big[0]]} bytes of records)",
                                  offset=int(base_offset[too_big[0]]))
    sizes = bodies + V2_HEADER_SIZE
    positions = np.zeros(len(idx), dtype=np.int64)
    if len(idx):
        np.cumsum(sizes[:-1], out=positions[1:])
    crc_here = final[idx] & (sizes <= _KERNEL_CRC_MAX_BYTES) & (not crc_instruction())
    crc = np.zeros(len(idx), dtype=np.int64)
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    kernels.write_batches(out, positions, row_start, row_end, base_offset, plan.last_offset[idx], base_ts,
                          plan.max_timestamp[idx], plan.attributes[idx], plan.producer_id[idx],
                          plan.producer_epoch[idx], plan.base_sequence[idx], plan.leader_epoch[idx], bodies,
                          body_sizes, offsets, timestamps, key_off, key_data, key_valid, val_off, val_data,
                          val_valid, refs is not None, value_at, hdr[0], hdr[1], hdr[2], hdr[3], hdr[4], hdr[5],
                          hdr[6])
    if refs is not None:
        refs.copy_into(value_at, out)
    if crc_here.any():
        kernels.table_crcs(out, positions, sizes, crc_here, kernels.CRC32C_TABLES, crc)
    nb = len(mask)
    raw = _Raw(data=out, position=np.full(nb, -1, dtype=np.int64), size=np.zeros(nb, dtype=np.int64),
               crc=np.zeros(nb, dtype=np.int64), crc_done=np.zeros(nb, dtype=np.bool_))
    raw.position[idx] = positions
    raw.size[idx] = sizes
    raw.crc[idx] = crc
    raw.crc_done[idx] = crc_here
    return raw


def _rows_of(row_start: np.ndarray, row_end: np.ndarray) -> np.ndarray:
    """Every row number of the ranges ``[row_start[i], row_end[i])``, in order."""
    counts = row_end - row_start
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    before = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=before[1:])
    return np.repeat(row_start - before, counts) + np.arange(total, dtype=np.int64)


def _check_refs(table: pa.Table, sources: Mapping[int, bytes | memoryview] | None) -> None:
    if has_value_refs(table.schema) and table.num_rows and not sources:
        raise UsageError("the value column holds references into the source segments "
                         "(segment_io.schema.VALUE_REF_TYPE): pass those segments' bytes as sources")


#: Why a source segment's bytes no longer hold what its rows' references were decoded from: the two causes the
#: encoder cannot tell apart.
_NOT_AS_DECODED = ("the segment's bytes changed while it was read (is something writing the file?), or the bytes "
                   "given for it are not those its references were decoded from")

#: The bytes of a batch's length field, from the batch's first byte.
_LENGTH_FIELD = SIZE_OFFSET + np.arange(4, dtype=np.int64)


@dataclass(frozen=True)
class _PayloadPlan:
    """Compressed v2 batches of one segment, found and checked, their payloads not decompressed yet: for each
    batch, where its payload lies in ``src``, its codec, the most it may inflate to and the room it is first
    decompressed into (:func:`plan_payloads`)."""

    src: memoryview
    starts: np.ndarray
    ends: np.ndarray
    codecs: np.ndarray
    limits: np.ndarray
    capacities: np.ndarray
    segment: int
    record_offsets: np.ndarray  #: per batch, the offset of the first record whose value is copied from it

    def inflate(self, inflater: Inflater, j: int = 0, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The payloads of batches ``[j, k)`` decompressed one after another into ``inflater`` (cleared first):
        where each starts and ends in its :meth:`~Inflater.view`."""
        k = len(self.starts) if k is None else k
        inflater.clear()
        done: list[int] = []
        try:
            inflater.add_all(self.src, self.starts[j:k], self.ends[j:k], self.codecs[j:k], self.limits[j:k],
                             self.capacities[j:k], done)
        except CorruptRecordError as exc:  # the codec's words alone do not say which batch, or that it decoded once
            i = j + len(done)
            position = int(self.starts[i]) - V2_HEADER_SIZE
            raise type(exc)(f"the payload of the batch at byte {position} of segment {self.segment}, which kept "
                            f"values are copied from, does not decompress again ({exc.detail}): {_NOT_AS_DECODED}",
                            position=position, offset=int(self.record_offsets[i]), segment=self.segment) from None
        return np.array([0] + done[:-1], np.int64), np.array(done, np.int64)


def _plan_payloads(src: memoryview, positions: np.ndarray, codecs: np.ndarray, segment: int,
                   record_offsets: np.ndarray, bound: int | None = None) -> _PayloadPlan:
    """The compressed v2 batches at ``positions`` of ``src`` checked (each whole inside it, its payload not
    stating more than ``bound``, the most bytes one payload may inflate to as its decode had it; None: the
    process's) and planned for decompressing as the decoder did. ``record_offsets``: per batch, a record of it
    that an error names."""
    buf = np.frombuffer(src, np.uint8)
    positions = np.asarray(positions, np.int64)
    outside = (positions < 0) | (positions + V2_HEADER_SIZE > len(buf))
    if len(buf) < V2_HEADER_SIZE:  # no batch is inside it: not even a length field to read at byte 0
        outside[:] = True
        length = np.zeros(len(positions), np.int64)
    else:
        length = buf[np.where(outside, 0, positions)[:, None] + _LENGTH_FIELD].view(">i4").reshape(-1).astype(np.int64)
    ends = positions + LOG_OVERHEAD + length
    bad = np.flatnonzero(outside | (ends > len(buf)) | (length < V2_HEADER_SIZE - LOG_OVERHEAD))
    if len(bad):  # the first in the order given, as the batches are read
        pos = int(positions[bad[0]])
        where = f"which holds {len(buf)} bytes" if outside[bad[0]] else "that is not whole there"
        raise CorruptRecordError(f"value references name a batch at byte {pos} of segment {segment}, {where}: "
                                 f"{_NOT_AS_DECODED}", position=pos, offset=int(record_offsets[bad[0]]),
                                 segment=segment)
    starts = positions + V2_HEADER_SIZE
    limits = np.full(len(starts), max_batch_bytes(bound), np.int64)
    codecs = np.asarray(codecs, np.int64)
    at_least, capacity = plan_payloads(buf, starts, ends, codecs, limits)
    over = np.flatnonzero(at_least > limits)
    if len(over):
        raise OversizedBatchError(oversized_detail(int(codecs[over[0]]), int(limits[0]), int(at_least[over[0]])),
                                  position=int(positions[over[0]]), offset=int(record_offsets[over[0]]),
                                  segment=segment)
    return _PayloadPlan(src, starts, ends, codecs, limits, capacity, segment, np.asarray(record_offsets, np.int64))


@dataclass(frozen=True)
class _RefValues:
    """The values that the ``value`` references (VALUE_REF_TYPE) of some rows point at, found and sized
    (:func:`_find_refs`) but not copied yet: ``offsets`` (int32[n+1]; the rows not asked for have empty values)
    and ``valid`` (n) as an Arrow binary column's; ``refs``, each row's reference (the byte of its value's length
    in its payload, and the length where the decoder left it); ``work``, one :class:`_RefBuffer` for every buffer
    the values are in, or :class:`_PayloadRuns` for payloads to decompress as they are copied."""

    offsets: np.ndarray
    valid: np.ndarray
    refs: np.ndarray
    work: list[_RefBuffer | _PayloadRuns]
    #: each row's record offset and the byte of its batch in its segment (to say which value changed)
    record_offsets: np.ndarray
    batch_positions: np.ndarray

    def copy_into(self, dest: np.ndarray, data: np.ndarray) -> None:
        """Each value asked for copied to ``data[dest[r]:]`` (row ``r``), one copy straight from its buffer.
        Raises :class:`CorruptRecordError` when a value is no longer where and what it was when it was sized
        (a segment's bytes changed under the job, or ``sources`` are not the bytes the references came from)."""
        for w in self.work:
            if isinstance(w, _PayloadRuns):
                with reused_inflater() as inflater:
                    for run in w.runs(inflater):
                        self._gather(run, dest, data)
            else:
                self._gather(w, dest, data)

    def _gather(self, w: _RefBuffer, dest: np.ndarray, data: np.ndarray) -> None:
        bad = int(kernels.gather_ref_values(w.buf, self.refs, w.base, w.limit, self.valid, w.rows, self.offsets,
                                            dest, data))
        if bad >= 0:
            r = int(w.rows[bad])
            raise CorruptRecordError(
                f"the value of the record at offset {self.record_offsets[r]} in segment {w.segment} is no "
                f"longer the one read before it was copied: {_NOT_AS_DECODED}", position=int(self.batch_positions[r]),
                offset=int(self.record_offsets[r]), segment=w.segment)


@dataclass(frozen=True)
class _RefBuffer:
    """A buffer values are in (a source segment's bytes, or compressed batches' payloads decompressed one after
    another), the rows whose values are there, and for each of them the payload its reference is relative to:
    ``buf[base[i]:limit[i]]`` for row ``rows[i]``."""

    buf: np.ndarray
    rows: np.ndarray
    base: np.ndarray
    limit: np.ndarray
    segment: int


@dataclass(frozen=True)
class _PayloadRuns:
    """Compressed batches of one segment whose payloads hold the values of ``rows`` (in row order, a batch's rows
    together: batch ``j``'s are ``rows[row_bounds[j]:row_bounds[j + 1]]``), decompressed only as the values are
    copied, :data:`~segment_io.compression.RUN_BYTES` at a time into one buffer: the copy then reads each run
    from the processor's cache, and no buffer of the whole part's payloads is allocated (memory the kernel would
    fault in and clear). Used where the references carry their values' lengths, so that nothing needs the
    payloads before the copy."""

    plan: _PayloadPlan
    rows: np.ndarray
    row_bounds: np.ndarray
    segment: int

    def runs(self, inflater: Inflater) -> Iterator[_RefBuffer]:
        """Each run of batches' payloads decompressed into ``inflater``, with its rows; a run is overwritten by
        the next."""
        reach = np.cumsum(self.plan.capacities)
        j, n = 0, len(reach)
        while j < n:
            before = int(reach[j - 1]) if j else 0
            k = max(j + 1, int(np.searchsorted(reach, before + compression.RUN_BYTES, side="right")))
            starts, ends = self.plan.inflate(inflater, j, k)
            counts = np.diff(self.row_bounds[j:k + 1])
            rows = self.rows[self.row_bounds[j]:self.row_bounds[k]]
            yield _RefBuffer(inflater.view(), rows, np.repeat(starts, counts), np.repeat(ends, counts), self.segment)
            j = k


def _gather_refs(table: pa.Table, rows: np.ndarray,
                 sources: Mapping[int, bytes | memoryview]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int32[n+1], data, validity) of the values that the ``value`` references (VALUE_REF_TYPE) of
    ``rows`` point at in ``sources``: one copy of each, straight from the segment bytes (a compressed batch's
    payload is decompressed again, once for all its rows). Rows not in ``rows`` get empty values."""
    found = _find_refs(table, rows, sources)
    data = np.empty(int(found.offsets[-1]), np.uint8)
    found.copy_into(found.offsets[:-1], data)
    return found.offsets, data, found.valid


def _find_refs(table: pa.Table, rows: np.ndarray, sources: Mapping[int, bytes | memoryview],
               kept: KeptPayloads | None = None, bound: int | None = None) -> _RefValues:
    """The values that the ``value`` references of ``rows`` point at in ``sources`` (a compressed batch's in its
    payload: from ``kept`` when the decoder left it there, else decompressed again within ``bound``, see
    :func:`_plan_payloads`), checked and sized (:class:`_RefValues`). Where every reference carries its value's
    length (the decoder's), the sizes are those and the payloads are decompressed only as the values are copied
    (:class:`_PayloadRuns`); else the values are measured where they lie, each payload decompressed first."""
    arr = _column(table, "value")
    n = len(arr)
    valid = validity(arr)
    refs = _ints(table, "value", np.int64)
    # read-only whether or not a null made _ints copy the column: one compiled gather for both (see
    # segment_io.format.readonly_bytes)
    refs.flags.writeable = False
    seg = _ints(table, "segment_base_offset", np.int64)
    codec = _ints(table, "codec", np.int64)
    bpos = _ints(table, "batch_position", np.int64)
    offsets = _ints(table, "offset", np.int64)
    legacy = rows[_ints(table, "magic", np.int64)[rows] < _MAGIC_V2]
    if len(legacy):
        raise InvalidRecordsError("value references are only made for v2 batches, but the record at offset "
                                  f"{offsets[legacy[0]]} is from a legacy one", offset=int(offsets[legacy[0]]))
    carried = ref_lengths(refs[rows])
    measured = not bool(np.all((carried >= 0) | ~valid[rows]))
    work: list[_RefBuffer | _PayloadRuns] = []
    for s in np.unique(seg[rows]).tolist():
        src = sources.get(s)
        in_seg = rows[seg[rows] == s]
        if src is None:
            raise UsageError(f"value references into segment {s} (record offset {offsets[in_seg[0]]}), whose "
                             "bytes are not among the sources")
        mv = memoryview(src).cast("B") if not isinstance(src, memoryview) or src.format != "B" else src
        plain = in_seg[codec[in_seg] == NONE]
        if len(plain):
            work.append(_RefBuffer(np.frombuffer(mv, np.uint8), plain, np.zeros(len(plain), np.int64),
                                   np.full(len(plain), len(mv), np.int64), s))
        packed = in_seg[codec[in_seg] != NONE]
        if len(packed):
            work += _packed_ref_buffers(mv, packed, bpos, codec, offsets, s, kept, bound, runs=not measured)
    lengths = np.zeros(n, np.int64)
    if not measured:
        lengths[rows] = np.where(valid[rows], carried, 0)
    else:
        for w in work:
            assert isinstance(w, _RefBuffer)  # (payloads are read in runs only where nothing is measured)
            bad = int(kernels.ref_value_lengths(w.buf, refs, w.base, w.limit, valid, w.rows, lengths))
            if bad >= 0:
                r = int(w.rows[bad])
                raise InvalidRecordsError(f"the value reference {refs[r]} of the record at offset {offsets[r]} "
                                          f"does not point at a value in segment {w.segment} (batch at byte "
                                          f"{bpos[r]})", offset=int(offsets[r]))
    ends = np.cumsum(lengths)
    if n and ends[-1] > _INT32_MAX:
        raise InvalidRecordsError("values of one encoder input exceed 2 GiB", offset=int(offsets[0]))
    value_off = np.zeros(n + 1, np.int32)
    value_off[1:] = ends
    return _RefValues(value_off, valid, refs, work, offsets, bpos)


def _packed_ref_buffers(mv: memoryview, packed: np.ndarray, bpos: np.ndarray, codec: np.ndarray,
                        offsets: np.ndarray, segment: int, kept: KeptPayloads | None, bound: int | None = None,
                        runs: bool = False) -> list[_RefBuffer | _PayloadRuns]:
    """The buffers holding the payloads of the compressed batches of rows ``packed`` (in row order, a batch's rows
    together) of segment ``segment``: those the decoder left in ``kept``, and the others decompressed again, in
    one call into one new buffer, or with ``runs`` as they are copied (:class:`_PayloadRuns`)."""
    cuts = np.flatnonzero(bpos[packed][1:] != bpos[packed][:-1]) + 1
    bounds = np.concatenate(([0], cuts, [len(packed)]))
    firsts = packed[bounds[:-1]]
    if kept is not None:
        buffers, which, starts, ends = kept.locate(segment, bpos[firsts])
    else:
        buffers, which = [], np.full(len(firsts), -1, np.int64)
        starts, ends = np.zeros(len(firsts), np.int64), np.zeros(len(firsts), np.int64)
    again = np.flatnonzero(which < 0)
    row_batch = np.repeat(np.arange(len(firsts)), np.diff(bounds))
    out: list[_RefBuffer | _PayloadRuns] = []
    if len(again):
        plan = _plan_payloads(mv, bpos[firsts[again]], codec[firsts[again]], segment, offsets[firsts[again]], bound)
        if runs:
            row_bounds = np.zeros(len(again) + 1, np.int64)
            np.cumsum(np.diff(bounds)[again], out=row_bounds[1:])
            out.append(_PayloadRuns(plan, packed[which[row_batch] < 0], row_bounds, segment))
        else:
            inflater = Inflater()
            starts[again], ends[again] = plan.inflate(inflater)
            which[again] = len(buffers)
            buffers = [*buffers, inflater.view()]
    row_buffer = which[row_batch]
    for j in np.unique(which[which >= 0]).tolist():
        here = row_buffer == j
        b = row_batch[here]
        out.append(_RefBuffer(buffers[j], packed[here], starts[b], ends[b], segment))
    return out


def resolve_value_refs(records: pa.Table, sources: Mapping[int, bytes | memoryview]) -> pa.Table:
    """``records`` with a ``value`` column of bytes: the values its references (VALUE_REF_TYPE) point at in
    ``sources`` copied out, chunk by chunk. A table whose values are bytes is returned as it is."""
    if not has_value_refs(records.schema):
        return records
    _check_refs(records, sources)
    i = records.schema.get_field_index("value")
    chunks = []
    for chunk in records.to_batches():
        part = pa.Table.from_batches([chunk])
        offs, data, valid = _gather_refs(part, np.arange(part.num_rows, dtype=np.int64), sources)
        nulls = part.num_rows - int(np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        values = pa.Array.from_buffers(pa.binary(), part.num_rows, [bitmap, pa.py_buffer(offs), pa.py_buffer(data)],
                                       null_count=nulls)
        chunks.append(chunk.set_column(i, RECORD_SCHEMA.field("value"), values))
    schema = records.schema.set(i, RECORD_SCHEMA.field("value"))
    return pa.Table.from_batches(chunks, schema=schema)


def _finish_crcs(raw: _Raw, final: np.ndarray) -> None:
    """CRCs of the uncompressed batches the encoding kernel left without one (all of them, with the processor's
    CRC32 instruction; else the large ones), in one call."""
    todo = np.flatnonzero(final & ~raw.crc_done)
    if len(todo) == 0:
        return
    crcs = span_crcs(raw.data, raw.position[todo] + V2_CRC_START, raw.position[todo] + raw.size[todo])
    _put_int32s(raw.data, raw.position[todo] + V2_CRC, crcs)  # every CRC field in one scatter
    raw.crc[todo] = crcs


@dataclass
class _Packed:
    """The batches written compressed: for each planned batch, which buffer it is in (an index into ``views``;
    -1 for one that is not compressed), where it lies there, and its CRC."""

    views: list[memoryview]
    source: np.ndarray
    start: np.ndarray
    end: np.ndarray
    crc: np.ndarray


def _compressed_batches(raw: _Raw, plan: _Plan, to_compress: np.ndarray) -> _Packed:
    """Every batch of ``to_compress`` with its records compressed (its header from ``raw`` with the new length
    field and CRC): the batches of one codec one after another in one buffer, compressed in one call
    (:func:`segment_io.compression.compress_all`), their CRCs in one call too."""
    nb = len(to_compress)
    packed = _Packed([], np.full(nb, -1, np.int64), np.zeros(nb, np.int64), np.zeros(nb, np.int64),
                     np.zeros(nb, np.int64))
    for codec in np.unique(plan.codec[to_compress]).tolist():
        todo = np.flatnonzero(to_compress & (plan.codec == codec))
        pos, size = raw.position[todo], raw.size[todo]
        out, at = compress_all(int(codec), raw.data, pos + V2_HEADER_SIZE, pos + size, V2_HEADER_SIZE)
        starts, ends = at[:-1], at[1:]
        big = np.flatnonzero(ends - starts > _INT32_MAX)
        if len(big):
            raise InvalidRecordsError("compressed batch exceeds 2 GiB", offset=int(plan.base_offset[todo[big[0]]]))
        # each header as the raw encoding wrote it, then its length field and CRC for the compressed records
        out[starts[:, None] + np.arange(V2_HEADER_SIZE)] = raw.data[pos[:, None] + np.arange(V2_HEADER_SIZE)]
        _put_int32s(out, starts + SIZE_OFFSET, ends - starts - LOG_OVERHEAD)
        crcs = span_crcs(out, starts + V2_CRC_START, ends)
        _put_int32s(out, starts + V2_CRC, crcs)
        packed.source[todo] = len(packed.views)
        packed.start[todo], packed.end[todo], packed.crc[todo] = starts, ends, crcs
        packed.views.append(memoryview(out))  # type: ignore[arg-type]
    return packed


def _put_int32s(out: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """Each of ``values`` written big-endian as 4 bytes at ``out[at[i]:]``, in one scatter."""
    out[at[:, None] + np.arange(4)] = values.astype(">u4").view(np.uint8).reshape(-1, 4)


def _assemble(plan: _Plan, copies: _Copies, to_compress: np.ndarray, raw: _Raw) -> EncodedSegment:
    """Finish every batch (CRC, compression) and lay them out in order; describe what was written.

    Runs of batches that stay uncompressed are handed out as slices of the one raw buffer, runs of copied batches
    that lie one after the other in their source as slices of it, and runs of compressed batches as slices of
    their buffer; Python visits only the first batch of each run."""
    nb = len(plan.base_offset)
    is_copy = copies.mask
    final = ~is_copy & ~to_compress
    _finish_crcs(raw, final)
    packed = _compressed_batches(raw, plan, to_compress)
    out_size = np.where(is_copy, copies.end - copies.start,
                        np.where(to_compress, packed.end - packed.start, raw.size)).astype(np.int32)
    crcs = np.where(is_copy, copies.crc, np.where(to_compress, packed.crc, raw.crc)).astype(np.uint32)
    base_ts = np.where(is_copy, copies.base_timestamp, plan.base_timestamp)
    max_ts = np.where(is_copy, copies.max_timestamp, plan.max_timestamp)
    raw_mv = memoryview(raw.data)  # type: ignore[arg-type]
    # every batch not in the raw buffer, by the buffer it is in: a source segment's (copied) or a compressed one's
    views = copies.views + packed.views
    source = np.where(is_copy, copies.source, np.where(to_compress, packed.source + len(copies.views), -1))
    start = np.where(is_copy, copies.start, packed.start)
    end = np.where(is_copy, copies.end, packed.end)
    buffers: list[memoryview] = []
    # such a batch that follows the previous one in the same buffer joins its run
    joins = np.zeros(nb, np.bool_)
    joins[1:] = (source[1:] >= 0) & (source[1:] == source[:-1]) & (start[1:] == end[:-1])
    run_ends = np.append(np.flatnonzero(~joins), nb)  # the batch after each run of joined batches
    run_from = 0  # first batch of the current run of uncompressed batches

    def close_run(until: int) -> None:
        if until > run_from:
            first = int(raw.position[run_from])
            last = int(raw.position[until - 1] + raw.size[until - 1])
            buffers.append(raw_mv[first:last])

    for b in np.flatnonzero(~final & ~joins).tolist():
        close_run(b)
        after = int(run_ends[np.searchsorted(run_ends, b, side="right")])
        buffers.append(views[int(source[b])][int(start[b]):int(end[after - 1])])
        run_from = after
    close_run(nb)

    positions = np.zeros(nb, dtype=np.int64)
    if nb:
        np.cumsum(out_size[:-1], dtype=np.int64, out=positions[1:])
    headers = BatchHeaders(
        position=positions, size=out_size, base_offset=plan.base_offset.copy(),
        last_offset=plan.last_offset.copy(), magic=np.full(nb, _MAGIC_V2, dtype=np.int8),
        attributes=plan.attributes.astype(np.int16), base_timestamp=base_ts, max_timestamp=max_ts,
        producer_id=plan.producer_id.astype(np.int64), producer_epoch=plan.producer_epoch.astype(np.int16),
        base_sequence=plan.base_sequence.astype(np.int32),
        partition_leader_epoch=plan.leader_epoch.astype(np.int32),
        record_count=(plan.row_end - plan.row_start).astype(np.int32), crc=crcs,
    )
    return EncodedSegment(buffers=tuple(buffers), headers=headers)


__all__ = ["EncodedSegment", "encode_batches", "resolve_value_refs"]
