"""Kafka record-batch framing: byte layout constants and a batch-level scan of a segment.

This module knows where each header field of a batch sits (RecordBatch v2, and the legacy magic 0/1
message format). Record-level decoding lives in :mod:`segment_io.decode`, encoding in
:mod:`segment_io.encode`; both use the constants below rather than their own copies.

The scan walks batches only (one step per batch, never per record), so it is cheap enough for index
rebuilds, retention's largest-timestamp scans and ``segjobs dump``.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

import numpy as np

from segment_io.errors import (
    CorruptRecordError,
    InvalidLengthError,
    InvalidMagicError,
    OffsetOrderError,
    TruncatedBatchError,
)

# ---- common prefix of every batch / legacy message: offset (int64) + size (int32) ----
LOG_OVERHEAD = 12
SIZE_OFFSET = 8

# ---- RecordBatch v2 header (offsets from the batch start) ----
V2_PARTITION_LEADER_EPOCH = 12
V2_MAGIC = 16
V2_CRC = 17
V2_ATTRIBUTES = 21
V2_LAST_OFFSET_DELTA = 23
V2_BASE_TIMESTAMP = 27
V2_MAX_TIMESTAMP = 35
V2_PRODUCER_ID = 43
V2_PRODUCER_EPOCH = 51
V2_BASE_SEQUENCE = 53
V2_RECORDS_COUNT = 57
V2_HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD: first record starts here
V2_CRC_START = V2_ATTRIBUTES  # CRC-32C covers attributes .. end of batch

#: big-endian: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
#: baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
assert V2_HEADER.size == V2_HEADER_SIZE

# v2 attribute bits
ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

# ---- legacy message (magic 0 / 1) ----
LEGACY_CRC = 12
LEGACY_MAGIC = 16
LEGACY_ATTRIBUTES = 17
LEGACY_TIMESTAMP = 18  # magic 1 only
LEGACY_V0_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
LEGACY_V1_HEADER = struct.Struct(">qiIbbq")  # ... + timestamp
LEGACY_MIN_SIZE = {0: 14, 1: 22}  # message bytes after the size field: crc..key len..value len
LEGACY_CODEC_MASK = 0x07
LEGACY_TIMESTAMP_TYPE = 0x08

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Control record keys: version int16, type int16. Type 0 = ABORT, 1 = COMMIT.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

#: A batch longer than this is treated as corrupt before anything is allocated for it (Kafka's own
#: limit on message.max.bytes is an int; real batches are far below 1 GiB).
MAX_BATCH_SIZE = 1 << 30


@dataclass(frozen=True)
class BatchHeaders:
    """Header fields of every batch of a segment, one numpy array per field, in file order.

    For legacy (magic 0/1) entries a compressed wrapper counts as one batch; its ``base_offset`` is
    the wrapper's offset minus nothing known without decompressing, so ``base_offset`` equals
    ``last_offset`` there (what Kafka's shallow iteration reports for the wrapper offset), and
    ``record_count`` is -1 when unknown.
    """

    position: np.ndarray  # int64, byte position of the batch in the file
    size: np.ndarray  # int32, bytes including the 12-byte prefix
    base_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64
    magic: np.ndarray  # int8
    attributes: np.ndarray  # int16
    base_timestamp: np.ndarray  # int64 (v2; legacy: the message timestamp, -1 for magic 0)
    max_timestamp: np.ndarray  # int64 (v2; legacy: the message timestamp, -1 for magic 0)
    producer_id: np.ndarray  # int64
    producer_epoch: np.ndarray  # int16
    base_sequence: np.ndarray  # int32
    partition_leader_epoch: np.ndarray  # int32
    record_count: np.ndarray  # int32
    crc: np.ndarray  # uint32 (stored CRC)
    #: bytes at the end of the file that do not form a whole batch (0 when the file ends cleanly)
    truncated_tail: int = 0

    def __len__(self) -> int:
        return len(self.position)

    def part(self, start: int, stop: int, position: int) -> "BatchHeaders":
        """Batches ``start:stop`` as the headers of a file that begins at byte ``position`` of this one (the
        headers of one segment among several decoded as one byte string)."""
        cut = {name: getattr(self, name)[start:stop] for name in HEADER_ARRAYS}
        cut["position"] = cut["position"] - position
        return BatchHeaders(**cut)

    @property
    def codec(self) -> np.ndarray:
        """Compression codec of each batch (0-4)."""
        legacy = self.magic < 2
        return np.where(legacy, self.attributes & LEGACY_CODEC_MASK, self.attributes & ATTR_CODEC_MASK).astype(np.int8)

    @property
    def transactional(self) -> np.ndarray:
        return (self.magic == 2) & ((self.attributes & ATTR_TRANSACTIONAL) != 0)

    @property
    def control(self) -> np.ndarray:
        return (self.magic == 2) & ((self.attributes & ATTR_CONTROL) != 0)

    @property
    def has_delete_horizon(self) -> np.ndarray:
        return (self.magic == 2) & ((self.attributes & ATTR_DELETE_HORIZON) != 0)

    @property
    def end(self) -> int:
        """Byte position just after the last whole batch."""
        return int(self.position[-1] + self.size[-1]) if len(self) else 0


_FIELDS = (
    ("position", np.int64), ("size", np.int32), ("base_offset", np.int64), ("last_offset", np.int64),
    ("magic", np.int8), ("attributes", np.int16), ("base_timestamp", np.int64), ("max_timestamp", np.int64),
    ("producer_id", np.int64), ("producer_epoch", np.int16), ("base_sequence", np.int32),
    ("partition_leader_epoch", np.int32), ("record_count", np.int32), ("crc", np.uint32),
)
#: The per-batch arrays of :class:`BatchHeaders` (every field but ``truncated_tail``).
HEADER_ARRAYS = tuple(name for name, _ in _FIELDS)


#: baseOffset, batchLength, partitionLeaderEpoch (v2; legacy: crc), magic: what the walk needs per batch
_PREFIX = struct.Struct(">qiib")
assert _PREFIX.size == LOG_OVERHEAD + 5


def scan_batches(data: bytes | memoryview | mmap.mmap, *, path: str | None = None, allow_truncated_tail: bool = True,
                 start: int = 0) -> BatchHeaders:
    """Read the header of every batch in ``data`` (a whole segment, or its tail from byte ``start``).

    Checks framing only: magic, and that every size field fits the file. CRCs are verified by the
    decoder (or :func:`segment_io.decode.verify_crcs`). An incomplete last batch is reported in
    ``truncated_tail`` when ``allow_truncated_tail`` (the default), else raises
    :class:`TruncatedBatchError`. A size field that is too small or absurd in the middle of the file
    raises :class:`InvalidLengthError`; an unknown magic :class:`InvalidMagicError`.
    """
    mv = readonly_bytes(data)
    positions, magics, truncated = batch_positions(mv, path=path, allow_truncated_tail=allow_truncated_tail,
                                                   start=start)
    return BatchHeaders(**_header_columns(np.frombuffer(mv, dtype=np.uint8), positions, magics),
                        truncated_tail=truncated)


#: Up to this many batches, :func:`batch_bounds` reads their headers one by one (a gather costs more).
_FEW_BATCHES = 32


def batch_bounds(data: bytes | memoryview | mmap.mmap, *, path: str | None = None,
                 allow_truncated_tail: bool = True) -> tuple[int, int, int] | None:
    """The framing walk of :func:`scan_batches` (same checks, same errors) and where the whole batches lie, as
    :func:`scan_batches` reads them: the first batch's base offset, the last batch's last offset and the largest max
    timestamp; None when there is no whole batch. For a caller that judges a segment's tail, a few batches a
    segment, without the cost of every header column."""
    mv = readonly_bytes(data)
    positions, magics, _ = batch_positions(mv, path=path, allow_truncated_tail=allow_truncated_tail)
    if not len(positions):
        return None
    if len(positions) <= _FEW_BATCHES and all(m == 2 for m in magics.tolist()):
        heads = [V2_HEADER.unpack_from(mv, p) for p in positions.tolist()]
        # baseOffset, ..., lastOffsetDelta (7th field), baseTimestamp, maxTimestamp (9th)
        return heads[0][0], heads[-1][0] + heads[-1][6], max(h[8] for h in heads)
    buf = np.frombuffer(mv, dtype=np.uint8)
    if (magics == 2).all():  # three fields of one gather, not every column
        rec = _gather(buf, positions, _V2_SPAN, _V2_RECORD)
        return (int(rec["base_offset"][0]), int(rec["base_offset"][-1]) + int(rec["last_offset_delta"][-1]),
                int(rec["max_timestamp"].max()))
    cols = _header_columns(buf, positions, magics)
    return int(cols["base_offset"][0]), int(cols["last_offset"][-1]), int(cols["max_timestamp"].max())


def readonly_bytes(data: bytes | bytearray | memoryview | mmap.mmap) -> memoryview:
    """``data`` as a read-only memoryview of bytes (no copy). Every reader hands segment bytes to the compiled
    kernels through this: numba compiles a kernel once per argument type, and a writable buffer (a bytearray an
    Aiven segment is assembled in) is another type than bytes or a read-only mapping, whose compiled code the
    warm-up caches. Given writable bytes, each Spark worker compiled its own on its first task."""
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv.toreadonly()


def batch_positions(data: bytes | memoryview | mmap.mmap, *, path: str | None = None, allow_truncated_tail: bool = True,
                    start: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """The framing walk of :func:`scan_batches` alone (same checks, same errors): the start positions (int64) and
    magics (int8) of every whole batch from byte ``start``, and how many bytes of an incomplete last batch follow.
    For callers that only need to know that bytes frame as batches."""
    from segment_io import _decode_kernels as K  # numba: loaded by the first walk, not by importing the format

    mv = readonly_bytes(data)
    n = len(mv)
    buf = np.frombuffer(mv, dtype=np.uint8)
    state = np.zeros(2, np.int64)
    # the walk fills arrays sized from a guess (1 KiB batches) and goes on into larger ones when they fill
    capacity = max(64, (n - start) >> 10)
    found_positions: list[np.ndarray] = []
    found_magics: list[np.ndarray] = []
    pos, code = start, K.WALK_FULL
    while code == K.WALK_FULL:
        positions, magics = np.empty(capacity, np.int64), np.empty(capacity, np.int8)
        count = K.walk_batches(buf, pos, positions, magics, state)
        if 2 * count < capacity:  # the guess was far too large: keep only what was found, not a view of it all
            positions, magics = positions[:count].copy(), magics[:count].copy()
        found_positions.append(positions[:count])
        found_magics.append(magics[:count])
        pos, code = int(state[0]), int(state[1])
        capacity *= 2
    if code in (K.WALK_BAD_MAGIC, K.WALK_BAD_SIZE) and not buf[pos:].any():
        # Nothing but zero bytes from a batch boundary to the end: space a broker preallocated
        # (log.preallocate) or a copy taken while it wrote, not damage. A broker's recovery truncates them as it
        # truncates a batch cut short, and so they are a tail like one. Unless the batch before them is the damage:
        # a length field that sends the walk into the zeros, where its CRC does not hold.
        previous = next((int(p[-1]) for p in reversed(found_positions) if len(p)), None)
        if previous is not None:
            _raise_if_length_damaged(mv, previous, pos, "the bytes from there to the end are all zero", path)
        if not allow_truncated_tail:
            raise zero_tail_error(mv, pos, path, None if previous is None else _next_offset(mv, previous))
        code = K.WALK_SHORT
    elif code in (K.WALK_BAD_MAGIC, K.WALK_BAD_SIZE):
        previous = next((int(p[-1]) for p in reversed(found_positions) if len(p)), None)  # the last whole batch
        base_offset, size, _, magic = _PREFIX.unpack_from(mv, pos)
        if code == K.WALK_BAD_MAGIC:
            problem = f"invalid magic byte {magic} (expected 0, 1 or 2)"
        else:
            min_size = (V2_HEADER_SIZE - LOG_OVERHEAD) if magic == 2 else LEGACY_MIN_SIZE[magic]
            problem = f"batch size {size} is impossible for magic {magic} (must be {min_size} to {MAX_BATCH_SIZE})"
        if previous is not None:
            checked = _raise_if_length_damaged(mv, previous, pos, problem, path)
            # The batch before is whole (and intact, where its CRC was checked): the damage is here, where a batch
            # with a later offset begins. Its own offset field, when it follows on (within a plausible gap), names
            # it; else where it must start.
            after = _next_offset(mv, previous)
            offset = base_offset if 0 <= base_offset - after <= _PLAUSIBLE_GAP else after
            raise (InvalidMagicError if code == K.WALK_BAD_MAGIC else InvalidLengthError)(
                f"{problem}, after the {'intact ' if checked else ''}batch at byte {previous} "
                f"(offset {_first_offset(mv, previous)})", path=path, position=pos, offset=offset)
        offset = base_offset if base_offset >= 0 else None  # a negative offset is the damage, not a place
        raise (InvalidMagicError if code == K.WALK_BAD_MAGIC else InvalidLengthError)(problem, path=path,
                                                                                     position=pos, offset=offset)
    truncated = n - pos if code == K.WALK_SHORT else 0
    if truncated and not allow_truncated_tail:
        raise cut_short_error(mv, truncated, path)
    if len(found_positions) == 1:
        return found_positions[0], found_magics[0], truncated
    return np.concatenate(found_positions), np.concatenate(found_magics), truncated


def zero_tail_error(data: bytes | memoryview | mmap.mmap, pos: int, path: str | None,
                    offset: int | None) -> TruncatedBatchError:
    """The error for a file whose bytes from ``pos`` (where the batch of ``offset`` should begin) to its end are
    all zero, where no incomplete tail is allowed."""
    n = len(data) - pos
    return TruncatedBatchError(f"the last {n} bytes, from byte {pos} to the end, are all zero where a batch should "
                               f"begin (a broker trims a segment to its batches when it rolls it: in a closed segment "
                               f"they are damage, such as a copy padded out or a lost write)", path=path,
                               position=pos, offset=offset)


def cut_short_error(data: bytes | memoryview | mmap.mmap, truncated: int, path: str | None,
                    detail: str | None = None) -> TruncatedBatchError:
    """The error for the last ``truncated`` bytes of ``data``, an incomplete batch: its position, and its base
    offset when its first 8 bytes are there (and can be one). ``detail`` replaces the default wording."""
    pos = len(data) - truncated
    tail = memoryview(data)[pos:]
    if truncated >= 8 and not any(tail[:8]) and not np.frombuffer(tail, np.uint8).any():
        # zeros a broker preallocated, not a batch: there is no offset to read there
        return TruncatedBatchError(f"the last {truncated} bytes are all zero (space a broker preallocated, or a "
                                   f"copy taken while it wrote)", path=path, position=pos, offset=None)
    base = int.from_bytes(tail[:8], "big", signed=True) if truncated >= 8 else -1
    return TruncatedBatchError(detail or f"last batch is cut short: only {truncated} bytes remain at the end of the "
                               f"file", path=path, position=pos, offset=base if base >= 0 else None)


#: The largest gap between one batch's last offset and the next batch's first that an error takes the second's
#: offset field for when that batch is damaged (compaction leaves gaps; a larger one is more likely garbage).
_PLAUSIBLE_GAP = (1 << 31) - 1


def _first_offset(mv: memoryview, position: int) -> int:
    return int(_PREFIX.unpack_from(mv, position)[0])


def _next_offset(mv: memoryview, position: int) -> int:
    """The offset after the batch at ``position`` (v2: from its last offset delta; legacy: its offset), where the
    next batch's records start at the earliest."""
    base, _, _, magic = _PREFIX.unpack_from(mv, position)
    if magic == 2:
        return base + int.from_bytes(mv[position + V2_LAST_OFFSET_DELTA:position + V2_LAST_OFFSET_DELTA + 4],
                                     "big", signed=True) + 1
    return base + 1


def _raise_if_length_damaged(mv: memoryview, previous: int, end: int, problem: str, path: str | None) -> bool:
    """When the walk finds no batch where the v2 batch at ``previous`` says it ends (``end``): if that batch's CRC
    does not hold over the bytes up to there either, its length field (which the CRC does not cover) is the
    likelier damage, so the error names that batch, not the bytes its length points at. Returns whether the CRC
    was checked (and holds): not for a legacy message."""
    base, size, _, magic = _PREFIX.unpack_from(mv, previous)
    if magic != 2:
        return False
    from segment_io.crc import span_crc  # numba: loaded with the walk's kernels, not by importing the format

    stored = int.from_bytes(mv[previous + V2_CRC:previous + V2_CRC + 4], "big")
    if span_crc(mv, previous + V2_CRC_START, end) == stored:
        return True
    raise InvalidLengthError(f"the batch's length field (4 bytes at byte {previous + SIZE_OFFSET}) says {size} "
                             f"bytes, its CRC does not hold over them, and at byte {end}, where it would end, "
                             f"{problem}: its length field is damaged (or the batch and what follows it)",
                             path=path, position=previous, offset=base)


#: The fixed v2 header as numpy reads it: one record per batch over the gathered header bytes, each field at
#: its byte offset, big-endian (the columns of :class:`BatchHeaders` are then one conversion each).
_V2_RECORD = np.dtype({
    "names": ["base_offset", "size", "partition_leader_epoch", "crc", "attributes", "last_offset_delta",
              "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count"],
    "formats": [">i8", ">i4", ">i4", ">u4", ">i2", ">i4", ">i8", ">i8", ">i8", ">i2", ">i4", ">i4"],
    "offsets": [0, SIZE_OFFSET, V2_PARTITION_LEADER_EPOCH, V2_CRC, V2_ATTRIBUTES, V2_LAST_OFFSET_DELTA,
                V2_BASE_TIMESTAMP, V2_MAX_TIMESTAMP, V2_PRODUCER_ID, V2_PRODUCER_EPOCH, V2_BASE_SEQUENCE,
                V2_RECORDS_COUNT],
    "itemsize": V2_HEADER_SIZE,
})
_V2_SPAN = np.arange(V2_HEADER_SIZE, dtype=np.int64)
#: The legacy header up to the magic-1 timestamp. Framing admits no message shorter than these bytes (a magic-0
#: message has at least LEGACY_MIN_SIZE[0] bytes after the size field), so reading them stays inside the
#: data; for magic 0 the bytes where magic 1 keeps its timestamp are read and ignored.
_LEGACY_RECORD = np.dtype({
    "names": ["base_offset", "size", "crc", "attributes", "timestamp"],
    "formats": [">i8", ">i4", ">u4", "i1", ">i8"],
    "offsets": [0, SIZE_OFFSET, LEGACY_CRC, LEGACY_ATTRIBUTES, LEGACY_TIMESTAMP],
    "itemsize": LEGACY_V1_HEADER.size,
})
_LEGACY_SPAN = np.arange(LEGACY_V1_HEADER.size, dtype=np.int64)
assert LOG_OVERHEAD + LEGACY_MIN_SIZE[0] >= LEGACY_V1_HEADER.size


def _gather(buf: np.ndarray, positions: np.ndarray, span: np.ndarray, record: np.dtype) -> np.ndarray:
    """The header bytes at every position in one gather, viewed as one ``record`` per batch (big-endian
    fields read in place; the caller converts each column once)."""
    raw = buf[positions[:, None] + span]
    return raw.view(record).reshape(-1)


def _v2_columns(buf: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
    """Every :class:`BatchHeaders` column of v2 batches at ``positions`` (framing checked)."""
    rec = _gather(buf, positions, _V2_SPAN, _V2_RECORD)
    base = rec["base_offset"].astype(np.int64)
    return {
        "position": positions, "size": rec["size"].astype(np.int32) + np.int32(LOG_OVERHEAD),
        "base_offset": base, "last_offset": base + rec["last_offset_delta"],
        "magic": np.full(len(positions), 2, np.int8), "attributes": rec["attributes"].astype(np.int16),
        "base_timestamp": rec["base_timestamp"].astype(np.int64),
        "max_timestamp": rec["max_timestamp"].astype(np.int64), "producer_id": rec["producer_id"].astype(np.int64),
        "producer_epoch": rec["producer_epoch"].astype(np.int16),
        "base_sequence": rec["base_sequence"].astype(np.int32),
        "partition_leader_epoch": rec["partition_leader_epoch"].astype(np.int32),
        "record_count": rec["record_count"].astype(np.int32), "crc": rec["crc"].astype(np.uint32),
    }


def v2_headers_at(buf: np.ndarray, positions: np.ndarray) -> BatchHeaders:
    """The v2 header fields at ``positions`` of ``buf`` (uint8), read as they are: the caller knows a v2 header
    starts at each and lies inside ``buf``, and judges the fields itself (nothing is checked here)."""
    return BatchHeaders(**_v2_columns(buf, np.asarray(positions, np.int64)), truncated_tail=0)


def _header_columns(buf: np.ndarray, positions: np.ndarray, magics: np.ndarray) -> dict[str, np.ndarray]:
    """Every :class:`BatchHeaders` column for the batches at ``positions`` (framing already checked, so
    each batch's fixed header lies inside ``buf``)."""
    v2 = magics == 2
    if v2.all():  # the common case: one gather, no masked assignment
        return _v2_columns(buf, positions)
    k = len(positions)
    cols = {name: np.empty(k, dtype=dtype) for name, dtype in _FIELDS}
    cols["position"][:] = positions
    cols["magic"][:] = magics
    if v2.any():
        for name, values in _v2_columns(buf, positions[v2]).items():
            cols[name][v2] = values

    legacy = ~v2
    p = positions[legacy]
    rec = _gather(buf, p, _LEGACY_SPAN, _LEGACY_RECORD)
    attrs = rec["attributes"].astype(np.int16)  # a signed byte, as the v0/v1 headers declare it
    cols["base_offset"][legacy] = rec["base_offset"]
    cols["size"][legacy] = rec["size"].astype(np.int32) + np.int32(LOG_OVERHEAD)
    cols["crc"][legacy] = rec["crc"]
    cols["attributes"][legacy] = attrs
    ts = np.where(magics[legacy] == 1, rec["timestamp"].astype(np.int64), NO_TIMESTAMP)
    cols["base_timestamp"][legacy] = ts
    cols["max_timestamp"][legacy] = ts
    cols["last_offset"][legacy] = cols["base_offset"][legacy]
    cols["partition_leader_epoch"][legacy] = NO_PARTITION_LEADER_EPOCH
    cols["producer_id"][legacy] = NO_PRODUCER_ID
    cols["producer_epoch"][legacy] = NO_PRODUCER_EPOCH
    cols["base_sequence"][legacy] = NO_SEQUENCE
    # A compressed wrapper's record count is unknown without decompressing it.
    cols["record_count"][legacy] = np.where((attrs & LEGACY_CODEC_MASK) == 0, 1, -1)
    return cols


def check_offset_order(hdr: BatchHeaders, path: str | None, pieces: np.ndarray | None = None) -> None:
    """Raise :class:`~segment_io.errors.OffsetOrderError` at the first batch of ``hdr`` (one segment's, of
    :func:`scan_batches`; ``path`` names the file) that starts at or below the previous batch's last offset
    (v2 batches and uncompressed legacy messages; a compressed legacy wrapper is not judged by its offset). Checked
    where batches are read (the decoder, the jobs' header scans), not left to whatever consumes the records in
    offset order. ``pieces`` (one number per batch) is for several segments read back to back, whose offsets
    restart at each: the order is judged only between batches of the same piece."""
    if len(hdr) < 2:
        return
    # A compressed legacy wrapper's offset is what its writer set: a broker sets its last inner message's, a client
    # (the bytes of a produce request) often 0; its inner offsets are read, and checked, no further here.
    wrapper = (hdr.magic < 2) & (hdr.codec != 0)
    judged = ~wrapper[1:] & ~wrapper[:-1]
    if pieces is not None:
        judged &= pieces[1:] == pieces[:-1]
    back = np.flatnonzero((hdr.base_offset[1:] <= hdr.last_offset[:-1]) & judged)
    if not len(back):
        return
    b = int(back[0]) + 1
    base, last = int(hdr.base_offset[b]), int(hdr.last_offset[b])
    prev_base, prev_last = int(hdr.base_offset[b - 1]), int(hdr.last_offset[b - 1])
    raise OffsetOrderError(f"offsets go backwards: this batch holds offsets {base}-{last}, but the batch before it "
                           f"(byte {int(hdr.position[b - 1])}) ends at offset {prev_last} "
                           f"(offsets {prev_base}-{prev_last}); a segment's batches hold increasing offsets (Kafka "
                           f"refuses such an append: OffsetsOutOfOrderException), so this file was not written by "
                           f"a broker as it is (a bad copy or concatenation?)",
                           path=path, position=int(hdr.position[b]), offset=base)


__all__ = ["BatchHeaders", "batch_bounds", "check_offset_order", "scan_batches", "CorruptRecordError"]
