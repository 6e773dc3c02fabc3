"""An independent oracle for compaction tests: kafka-python reads the segments, this module replays them.

Nothing here uses segjobs' decoder, cleaner or transaction logic, so a bug there cannot hide itself. The
replay follows what a ``read_committed`` consumer reading the whole partition from the start ends up
with, keyed by record key:

* records are applied in offset order; a record with a null value (tombstone) removes its key;
* records of a transaction that an ABORT marker of the same producer ends are discarded;
* transactional records with no marker after them (an open transaction, or a committed one whose marker
  compaction has removed) count as live, as a consumer sees them once the LSO passes them;
* control batches (transaction markers) are never data; keyless records are ignored (a compacted topic
  cannot hold them: the cleaner drops them).

A compaction is correct when the replay of the result equals the replay of the source (same key, same
value, same offset, same timestamp and headers: :func:`latest_records`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from kafka.record.memory_records import MemoryRecords

#: v2 attribute bit of KIP-534 (baseTimestamp holds the delete horizon); defined here, not imported,
#: so the oracle shares no constant with the code under test.
DELETE_HORIZON_BIT = 0x40
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


@dataclass(frozen=True)
class OracleRecord:
    """One record as kafka-python reads it, with the batch fields a test needs."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    batch_base_offset: int
    producer_id: int


@dataclass(frozen=True)
class OracleBatch:
    """One batch's header fields and records, as kafka-python reads them."""

    base_offset: int
    last_offset: int
    magic: int
    attributes: int
    base_timestamp: int | None  #: v2 only: the first timestamp, or the delete horizon when the bit is set
    max_timestamp: int | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    leader_epoch: int
    transactional: bool
    control: bool
    records: tuple[OracleRecord, ...]
    raw: bytes = field(repr=False, default=b"")  #: the batch's bytes in the file (v2 only)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def control_type(self) -> int | None:
        """ABORT (0) or COMMIT (1) for an end-transaction marker, else None."""
        if not self.control or not self.records or self.records[0].key is None:
            return None
        return struct.unpack(">hh", self.records[0].key[:4])[1]


def read_batches(data: bytes) -> list[OracleBatch]:
    """Every batch of one ``.log`` file's bytes, with kafka-python validating each v2 CRC."""
    out: list[OracleBatch] = []
    records = MemoryRecords(data)
    pos = 0
    while records.has_next():
        batch = records.next_batch()
        magic = batch.magic
        size = batch.size_in_bytes if magic == 2 else None
        raw = data[pos:pos + size] if size is not None else b""
        if magic == 2:
            if not batch.validate_crc():
                raise AssertionError(f"oracle: CRC mismatch in batch at byte {pos}")
            pos += size
        recs = tuple(
            OracleRecord(r.offset, r.timestamp, r.key, r.value,
                         tuple((k, v) for k, v in (getattr(r, "headers", None) or [])),
                         batch.base_offset if magic == 2 else r.offset,
                         batch.producer_id if magic == 2 else -1)
            for r in batch)
        if magic == 2:
            out.append(OracleBatch(batch.base_offset, batch.last_offset, magic, batch.attributes,
                                   batch.first_timestamp, batch.max_timestamp, batch.producer_id,
                                   batch.producer_epoch, batch.base_sequence, batch.leader_epoch,
                                   batch.is_transactional, batch.is_control_batch, recs, raw))
        else:
            last = recs[-1].offset if recs else batch.base_offset
            out.append(OracleBatch(recs[0].offset if recs else batch.base_offset, last, magic, 0, None, None,
                                   -1, -1, -1, -1, False, False, recs))
    return out


def live_log_files(partition_dir: str | Path) -> list[Path]:
    """The live ``.log`` files of a partition dir (no ``.cleaned``/``.swap``/``.deleted``), by base offset."""
    return sorted(p for p in Path(partition_dir).iterdir() if p.name.endswith(".log") and p.name[:20].isdigit())


def read_partition(partition_dir: str | Path) -> list[OracleBatch]:
    """All batches of a local partition dir, in file (offset) order."""
    return read_segments(p.read_bytes() for p in live_log_files(partition_dir))


def read_segments(segments: Iterable[bytes]) -> list[OracleBatch]:
    """All batches of the given ``.log`` contents, in the order given (pass them by base offset)."""
    return [b for data in segments for b in read_batches(data)]


@dataclass
class Replay:
    """The outcome of replaying a partition."""

    latest: dict[bytes, OracleRecord]  #: key -> the record a consumer ends with (tombstoned keys absent)
    aborted_offsets: set[int]  #: offsets of data records an abort marker discards
    marker_offsets: set[int]  #: offsets of control records
    keyless: int  #: data records without a key (ignored)
    offsets: list[int]  #: every record offset, in order (duplicates would show here)


def replay(batches: list[OracleBatch]) -> Replay:
    """Replay batches into the key -> latest live record map (rules in the module docstring)."""
    fate: dict[int, str] = {}  # batch index -> "aborted" for discarded transactional data
    pending: dict[int, list[int]] = {}
    for i, b in enumerate(batches):
        if b.control:
            kind = b.control_type
            done = pending.pop(b.producer_id, [])
            if kind == CONTROL_ABORT:
                for j in done:
                    fate[j] = "aborted"
        elif b.transactional:
            pending.setdefault(b.producer_id, []).append(i)

    latest: dict[bytes, OracleRecord] = {}
    aborted: set[int] = set()
    markers: set[int] = set()
    keyless = 0
    offsets: list[int] = []
    for i, b in enumerate(batches):
        for r in b.records:
            offsets.append(r.offset)
            if b.control:
                markers.add(r.offset)
            elif fate.get(i) == "aborted":
                aborted.add(r.offset)
            elif r.key is None:
                keyless += 1
            elif r.value is None:
                latest.pop(r.key, None)
            else:
                latest[r.key] = r
    return Replay(latest, aborted, markers, keyless, offsets)


def latest_records(partition_dir: str | Path) -> dict[bytes, OracleRecord]:
    """Key -> latest live record of a local partition dir."""
    return replay(read_partition(partition_dir)).latest


def latest_values(partition_dir: str | Path) -> dict[bytes, bytes]:
    """Key -> latest live value of a local partition dir."""
    return {k: r.value for k, r in latest_records(partition_dir).items()}


def comparable(latest: Mapping[bytes, OracleRecord]) -> dict[bytes, tuple]:
    """What must survive a compaction unchanged for each key: offset, timestamp, value and headers."""
    return {k: (r.offset, r.timestamp, r.value, r.headers) for k, r in latest.items()}


__all__ = ["OracleBatch", "OracleRecord", "Replay", "comparable", "latest_records", "latest_values",
           "live_log_files", "read_batches", "read_partition", "read_segments", "replay"]
