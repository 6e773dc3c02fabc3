"""The Arrow schemas segjobs reads segments into: the one place that names and types their columns.

Types are exact on purpose: Spark's Python data source rejects batches whose types differ from the
declared schema, so everything here is ``binary`` (never ``large_binary``), ``string`` (never
``large_string``) and fixed-width integers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: A record header: Kafka header keys are UTF-8 strings, values are raw bytes (null allowed).
HEADER_TYPE = pa.struct([
    pa.field("key", pa.string(), nullable=False),
    pa.field("value", pa.binary(), nullable=True),
])

#: One row per record. Batch-level fields repeat on every record of the batch so that a batch can be
#: re-encoded faithfully from its rows alone.
RECORD_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    # Record timestamp as a reader sees it: for LOG_APPEND_TIME batches the batch max timestamp;
    # -1 for magic 0 (which has no timestamps).
    pa.field("timestamp", pa.int64(), nullable=False),
    # -1 no timestamp (magic 0), 0 CreateTime, 1 LogAppendTime.
    pa.field("timestamp_type", pa.int8(), nullable=False),
    pa.field("key", pa.binary(), nullable=True),
    # A null value is a tombstone.
    pa.field("value", pa.binary(), nullable=True),
    pa.field("headers", pa.list_(pa.field("item", HEADER_TYPE, nullable=False)), nullable=False),
    # ---- batch fields ----
    pa.field("batch_base_offset", pa.int64(), nullable=False),
    pa.field("batch_last_offset", pa.int64(), nullable=False),
    # Byte position of the batch (for legacy compressed messages, of the wrapper) in its segment.
    pa.field("batch_position", pa.int64(), nullable=False),
    # Size of the batch in bytes including the 12-byte offset+length prefix.
    pa.field("batch_size", pa.int32(), nullable=False),
    pa.field("batch_base_timestamp", pa.int64(), nullable=False),
    pa.field("batch_max_timestamp", pa.int64(), nullable=False),
    pa.field("magic", pa.int8(), nullable=False),
    # 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pa.field("codec", pa.int8(), nullable=False),
    pa.field("transactional", pa.bool_(), nullable=False),
    pa.field("control", pa.bool_(), nullable=False),
    # -1 where the batch has none (also for every legacy batch).
    pa.field("producer_id", pa.int64(), nullable=False),
    pa.field("producer_epoch", pa.int16(), nullable=False),
    pa.field("base_sequence", pa.int32(), nullable=False),
    pa.field("partition_leader_epoch", pa.int32(), nullable=False),
    # KIP-534 delete horizon (attribute bit 6); null when the batch has none.
    pa.field("delete_horizon_ms", pa.int64(), nullable=True),
    # Base offset of the segment file the record was read from.
    pa.field("segment_base_offset", pa.int64(), nullable=False),
])

RECORD_COLUMNS: tuple[str, ...] = tuple(RECORD_SCHEMA.names)

#: The type of a ``value`` column that holds references instead of bytes: for each record, where its value's
#: length varint lies in the source segment (a file position for an uncompressed batch, a position in the
#: batch's decompressed payload for a compressed one); null for a tombstone. The cleaning task decodes values
#: this way (no copy of every value, and none again when the kept rows are filtered) and the encoder copies
#: the values it writes from the segment bytes it is given as ``sources``. A reference is only meaningful
#: next to its row's ``segment_base_offset``, ``batch_position`` and ``codec``, which the cleaner keeps as they
#: were read. Never handed to Spark: readers see RECORD_SCHEMA.
#:
#: A reference the decoder made also holds the value's length: with :data:`REF_CARRIES_LENGTH` set, its low
#: :data:`REF_POSITION_BITS` bits are that position and the bits above them the value's length plus one, as the
#: decoder read it (never 0: a flag above a zero length field carries nothing and makes no position smaller);
#: otherwise (a reference made by hand, a position past 4 GiB, a value over 1 GiB), the whole reference is the
#: position and the encoder reads the length from the bytes. With every length known, the encoder
#: lays its batches out without reading a value, and copies each one (checking its length varint again) from
#: payloads decompressed a few MiB at a time.
VALUE_REF_TYPE = pa.int64()
REF_POSITION_BITS = 32
REF_POSITION_MASK = (1 << REF_POSITION_BITS) - 1
REF_CARRIES_LENGTH = 1 << 62
#: The longest value whose length a reference carries (its length plus one fills the 30 bits below the flag).
REF_MAX_LENGTH = (1 << 30) - 2
REF_LENGTH_MASK = (1 << 30) - 1


def _carries_length(refs: np.ndarray) -> np.ndarray:
    return (refs >= 0) & (refs & REF_CARRIES_LENGTH != 0) & ((refs >> REF_POSITION_BITS) & REF_LENGTH_MASK != 0)


def ref_positions(refs: np.ndarray) -> np.ndarray:
    """Where each reference's length varint lies (a negative reference stays as it is: it points nowhere)."""
    return np.where(_carries_length(refs), refs & REF_POSITION_MASK, refs)


def ref_lengths(refs: np.ndarray) -> np.ndarray:
    """Each reference's value length as the decoder read it; -1 where it does not carry one."""
    return np.where(_carries_length(refs), ((refs >> REF_POSITION_BITS) & REF_LENGTH_MASK) - 1, -1)


def with_value_refs(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its ``value`` field (if any) holding references (:data:`VALUE_REF_TYPE`)."""
    i = schema.get_field_index("value")
    return schema if i < 0 else schema.set(i, pa.field("value", VALUE_REF_TYPE, nullable=True))


def has_value_refs(schema: pa.Schema) -> bool:
    """Whether ``schema``'s ``value`` column holds references (:data:`VALUE_REF_TYPE`) rather than bytes."""
    i = schema.get_field_index("value")
    return i >= 0 and schema.field(i).type == VALUE_REF_TYPE

#: What the first compaction pass needs, decoded without materialising keys or values. The key is
#: represented by a 128-bit hash (two int64 halves) so that 24 bytes per key (hash + offset) suffice in
#: the offset map, as in Kafka, with a collision probability that stays negligible at billions of keys.
KEY_HASH_SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("key_hash_hi", pa.int64(), nullable=False),
    pa.field("key_hash_lo", pa.int64(), nullable=False),
    pa.field("key_is_null", pa.bool_(), nullable=False),
    pa.field("value_is_null", pa.bool_(), nullable=False),
    pa.field("timestamp", pa.int64(), nullable=False),
    pa.field("batch_base_offset", pa.int64(), nullable=False),
    pa.field("batch_last_offset", pa.int64(), nullable=False),
    pa.field("transactional", pa.bool_(), nullable=False),
    pa.field("control", pa.bool_(), nullable=False),
    pa.field("producer_id", pa.int64(), nullable=False),
    pa.field("producer_epoch", pa.int16(), nullable=False),
    pa.field("batch_max_timestamp", pa.int64(), nullable=False),
    pa.field("delete_horizon_ms", pa.int64(), nullable=True),
    pa.field("magic", pa.int8(), nullable=False),
    # For records of control batches: the control type from the record key (0 ABORT, 1 COMMIT, other values
    # as found); -1 for data records. Lets the first pass find transaction outcomes without reading values.
    pa.field("control_type", pa.int16(), nullable=False),
])


def project(columns: list[str] | tuple[str, ...] | None) -> pa.Schema:
    """The record schema restricted to ``columns`` (in the given order); all columns when ``None``."""
    if columns is None:
        return RECORD_SCHEMA
    unknown = [c for c in columns if c not in RECORD_SCHEMA.names]
    if unknown:
        from segment_io.errors import UsageError

        raise UsageError(f"unknown record column(s) {unknown}; known: {list(RECORD_SCHEMA.names)}")
    return pa.schema([RECORD_SCHEMA.field(c) for c in columns])

#: The batch-level columns of RECORD_SCHEMA. A table of this schema describes batches that must be written
#: with *no* records (Kafka keeps the last batch of an active producer, and the last batch of a cleaning
#: round, as an empty header): the cleaner returns them beside the surviving records and the encoder merges
#: them in by base offset.
BATCH_COLUMNS: tuple[str, ...] = (
    "batch_base_offset", "batch_last_offset", "batch_position", "batch_size", "batch_base_timestamp",
    "batch_max_timestamp", "timestamp_type", "magic", "codec", "transactional", "control", "producer_id",
    "producer_epoch", "base_sequence", "partition_leader_epoch", "delete_horizon_ms", "segment_base_offset",
)
BATCH_SCHEMA = pa.schema([RECORD_SCHEMA.field(c) for c in BATCH_COLUMNS])


def arrow_array(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """``values`` (a numpy array of a plain numeric or bool dtype) as an Arrow array of ``typ``. pyarrow's typed
    conversion (``pa.array(values, type=typ)``) first looks for pandas datetime types and costs several times
    the untyped one on the small arrays of a small partition; the dtype almost always is ``typ``'s already."""
    arr = pa.array(values)
    return arr if arr.type == typ else arr.cast(typ)


def validity(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Whether each entry of ``arr`` is set, as a numpy bool array. Columns without nulls (or without values)
    are answered from their null count, the others from their validity bitmaps: on the small tables of a small
    partition a compute call costs more than the work."""
    nulls = arr.null_count
    if nulls == 0:
        return np.ones(len(arr), np.bool_)
    if nulls == len(arr):
        return np.zeros(len(arr), np.bool_)
    parts = [_valid_bits(chunk) for chunk in _chunks_of(arr)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def int64_or_zero(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An integer column as int64, nulls read as 0 (see :func:`validity` for why nulls are counted first)."""
    nulls = arr.null_count
    if nulls == len(arr):
        return np.zeros(len(arr), np.int64)
    if nulls == 0:
        return np.asarray(arr.to_numpy(zero_copy_only=False), np.int64)
    parts = [_ints_or_zero(chunk) for chunk in _chunks_of(arr)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunks_of(arr: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]


def _valid_bits(chunk: pa.Array) -> np.ndarray:
    """A chunk's validity bitmap as bools (without a compute call)."""
    n = len(chunk)
    bitmap = chunk.buffers()[0] if chunk.null_count else None
    if bitmap is None:  # no nulls, or (an all-null chunk) no bitmap
        return np.full(n, chunk.null_count == 0, np.bool_)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), count=chunk.offset + n, bitorder="little")
    return bits[chunk.offset:].view(np.bool_)


def _ints_or_zero(chunk: pa.Array) -> np.ndarray:
    """An integer chunk's values as int64, nulls read as 0, from its buffers (without a compute call)."""
    n = len(chunk)
    if chunk.null_count == n:
        return np.zeros(n, np.int64)
    dtype = np.dtype(chunk.type.to_pandas_dtype())
    values = np.frombuffer(chunk.buffers()[1], dtype, count=chunk.offset + n)[chunk.offset:]
    return np.where(_valid_bits(chunk), values, 0).astype(np.int64, copy=False)
