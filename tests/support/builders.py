"""Builders for records, tombstones, transaction markers and batches as Arrow tables of RECORD_SCHEMA.

They describe *what* a log holds in a few words, so behaviour tests read like Kafka's own:

    log = LogBuilder(topic="t", partition=0)
    log.batch([rec(b"k1", b"v1"), rec(b"k2", b"v2")])
    log.batch([tombstone(b"k1")])
    log.txn_batch(pid=7, epoch=0, records=[rec(b"k3", b"v3")])
    log.abort(pid=7, epoch=0)
    table = log.table()

Offsets are assigned consecutively unless a record names its own (``rec(..., offset=10)``), which makes
gaps as compaction leaves them. Writing segments to disk is done with ``segment_io.write_segment`` on
the resulting table (see ``write_log`` once the encoder exists).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow as pa

from segment_io.format import CONTROL_ABORT, CONTROL_COMMIT
from segment_io.schema import RECORD_SCHEMA


@dataclass
class Rec:
    """One record to be placed in a batch."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    offset: int | None = None


def rec(key: bytes | str | None, value: bytes | str | None, *, timestamp: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (), offset: int | None = None) -> Rec:
    """A data record. ``str`` keys/values are UTF-8 encoded for brevity."""
    k = key.encode() if isinstance(key, str) else key
    v = value.encode() if isinstance(value, str) else value
    return Rec(k, v, timestamp, list(headers), offset)


def tombstone(key: bytes | str, *, timestamp: int | None = None, offset: int | None = None) -> Rec:
    """A delete marker for ``key`` (null value)."""
    return rec(key, None, timestamp=timestamp, offset=offset)


def control_key(kind: int) -> bytes:
    """Key of a control record: version 0, type (0 abort, 1 commit)."""
    return struct.pack(">hh", 0, kind)


def control_value(coordinator_epoch: int = 0) -> bytes:
    """Value of an end-transaction marker: version 0, coordinator epoch."""
    return struct.pack(">hi", 0, coordinator_epoch)


class LogBuilder:
    """Accumulates batches for one partition and renders them as a RECORD_SCHEMA table."""

    def __init__(self, topic: str = "t", partition: int = 0, *, start_offset: int = 0,
                 timestamp: int = 1_000_000, segment_base_offset: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.next_offset = start_offset
        self.clock = timestamp
        self.segment_base_offset = start_offset if segment_base_offset is None else segment_base_offset
        self.position = 0
        self._rows: list[dict] = []

    # -- batches ---------------------------------------------------------------------------------

    def batch(self, records: Sequence[Rec], *, pid: int = -1, epoch: int = -1, base_sequence: int = -1,
              transactional: bool = False, control: bool = False, codec: int = 0, leader_epoch: int = 0,
              timestamp_type: int = 0, delete_horizon_ms: int | None = None,
              base_offset: int | None = None, last_offset: int | None = None) -> "LogBuilder":
        """Append one v2 batch holding ``records``. Returns self for chaining."""
        if not records and (base_offset is None or last_offset is None):
            raise ValueError("an empty batch needs explicit base_offset and last_offset")
        offsets = []
        cursor = self.next_offset if base_offset is None else base_offset
        for r in records:
            if r.offset is not None:
                cursor = r.offset
            offsets.append(cursor)
            cursor += 1
        base = base_offset if base_offset is not None else (offsets[0] if offsets else self.next_offset)
        last = last_offset if last_offset is not None else (offsets[-1] if offsets else base)
        stamps = []
        for r in records:
            if r.timestamp is None:
                self.clock += 1
                stamps.append(self.clock)
            else:
                stamps.append(r.timestamp)
        max_ts = max(stamps) if stamps else self.clock
        base_ts = delete_horizon_ms if delete_horizon_ms is not None else (min(stamps) if stamps else self.clock)
        for r, off, ts in zip(records, offsets, stamps):
            self._rows.append({
                "topic": self.topic, "partition": self.partition, "offset": off,
                "timestamp": max_ts if timestamp_type == 1 else ts, "timestamp_type": timestamp_type,
                "key": r.key, "value": r.value,
                "headers": [{"key": hk, "value": hv} for hk, hv in r.headers],
                "batch_base_offset": base, "batch_last_offset": last,
                "batch_position": self.position, "batch_size": 0,
                "batch_base_timestamp": base_ts, "batch_max_timestamp": max_ts,
                "magic": 2, "codec": codec, "transactional": transactional, "control": control,
                "producer_id": pid, "producer_epoch": epoch, "base_sequence": base_sequence,
                "partition_leader_epoch": leader_epoch, "delete_horizon_ms": delete_horizon_ms,
                "segment_base_offset": self.segment_base_offset,
            })
        self.position += 1  # positions are placeholders until the table is encoded
        self.next_offset = max(self.next_offset, last + 1)
        return self

    def txn_batch(self, pid: int, epoch: int, records: Sequence[Rec], *, base_sequence: int = 0,
                  **kw) -> "LogBuilder":
        """A transactional data batch from producer ``pid``."""
        return self.batch(records, pid=pid, epoch=epoch, base_sequence=base_sequence, transactional=True, **kw)

    def marker(self, pid: int, epoch: int, kind: int, *, coordinator_epoch: int = 0,
               timestamp: int | None = None, **kw) -> "LogBuilder":
        """An end-transaction marker batch (control batch with one control record)."""
        r = Rec(control_key(kind), control_value(coordinator_epoch), timestamp)
        return self.batch([r], pid=pid, epoch=epoch, transactional=True, control=True, **kw)

    def commit(self, pid: int, epoch: int, **kw) -> "LogBuilder":
        return self.marker(pid, epoch, CONTROL_COMMIT, **kw)

    def abort(self, pid: int, epoch: int, **kw) -> "LogBuilder":
        return self.marker(pid, epoch, CONTROL_ABORT, **kw)

    def roll(self) -> "LogBuilder":
        """Start a new segment at the next offset (later batches get a new ``segment_base_offset``)."""
        self.segment_base_offset = self.next_offset
        self.position = 0
        return self

    # -- output ----------------------------------------------------------------------------------

    def table(self) -> pa.Table:
        """All batches so far as one RECORD_SCHEMA table."""
        return pa.Table.from_pylist(self._rows, schema=RECORD_SCHEMA)


def batch_from_spec(log: LogBuilder, spec: Mapping[str, Any]) -> None:
    """Append the batch a property test's drawn ``spec`` describes: ``gap`` offsets skipped first, then
    ``records`` (key, value, headers) with its ``codec``, ``pid`` (idempotent when >= 0), ``timestamp_type`` and
    ``horizon`` (the delete horizon, or None)."""
    log.next_offset += spec["gap"]
    pid = spec["pid"]
    log.batch([rec(k, v, headers=h) for k, v, h in spec["records"]], codec=spec["codec"], pid=pid,
              epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
              timestamp_type=spec["timestamp_type"], delete_horizon_ms=spec["horizon"])


def records_table(keys_values: Sequence[tuple[bytes | str | None, bytes | str | None]], **kw) -> pa.Table:
    """Shortcut: one batch per record, consecutive offsets from 0."""
    log = LogBuilder(**kw)
    for k, v in keys_values:
        log.batch([rec(k, v)])
    return log.table()


def empty_batch(base_offset: int, last_offset: int, *, pid: int = -1, epoch: int = -1, base_sequence: int = -1,
                max_timestamp: int = -1, leader_epoch: int = 0, transactional: bool = False,
                control: bool = False, timestamp_type: int = 0, codec: int = 0,
                delete_horizon_ms: int | None = None, segment_base_offset: int = 0,
                position: int = 0) -> pa.Table:
    """One batch of BATCH_SCHEMA to be written with no records (``encode_batches(empty_batches=...)``),
    as the cleaner keeps an active producer's last batch. Concatenate several with ``pa.concat_tables``."""
    from segment_io.schema import BATCH_SCHEMA

    row = {
        "batch_base_offset": base_offset, "batch_last_offset": last_offset, "batch_position": position,
        "batch_size": 0, "batch_base_timestamp": -1, "batch_max_timestamp": max_timestamp,
        "timestamp_type": timestamp_type, "magic": 2, "codec": codec, "transactional": transactional,
        "control": control, "producer_id": pid, "producer_epoch": epoch, "base_sequence": base_sequence,
        "partition_leader_epoch": leader_epoch, "delete_horizon_ms": delete_horizon_ms,
        "segment_base_offset": segment_base_offset,
    }
    return pa.Table.from_pylist([row], schema=BATCH_SCHEMA)


def write_log(table: pa.Table, partition_dir: "str | os.PathLike[str]", *, segment_bytes: int | None = None,
              codec: int | None = None, empty_batches: pa.Table | None = None) -> "list[Path]":
    """Write ``table`` (e.g. ``LogBuilder.table()``) as a partition directory of real segments with their
    ``.index`` and ``.timeindex``: one segment per ``segment_base_offset`` (see ``LogBuilder.roll``), and
    with ``segment_bytes`` a new segment whenever the next batch would push one past that size (like
    Kafka's ``segment.bytes``; a segment always gets at least one batch). ``empty_batches`` (BATCH_SCHEMA,
    see :func:`empty_batch`) go to the segment their ``segment_base_offset`` names. Returns the ``.log``
    paths in offset order. Positions and sizes in the input are placeholders and are ignored.
    """
    import pyarrow.compute as pc

    from segment_io.encode import encode_batches
    from segment_io.layout import segment_file_name
    from segment_io.schema import BATCH_SCHEMA
    from segment_io.segment_writer import write_segment

    directory = Path(partition_dir)
    directory.mkdir(parents=True, exist_ok=True)
    empties = empty_batches if empty_batches is not None else BATCH_SCHEMA.empty_table()
    bases = sorted(set(table["segment_base_offset"].to_pylist()) | set(empties["segment_base_offset"].to_pylist()))
    written: list[Path] = []
    for base in bases:
        rows = table.filter(pc.equal(table["segment_base_offset"], base))
        seg_empties = empties.filter(pc.equal(empties["segment_base_offset"], base))
        chunks: list[tuple[int, int | None]] = [(base, None)]  # (segment base offset, last offset in it)
        if segment_bytes is not None:
            headers = encode_batches(rows, empty_batches=seg_empties, codec=codec).headers
            chunks = []
            start = size = 0
            for i, batch_size in enumerate(headers.size.tolist()):
                if i > start and size + batch_size > segment_bytes:
                    chunks.append((int(headers.base_offset[start]), int(headers.last_offset[i - 1])))
                    start, size = i, 0
                size += batch_size
            chunks.append((int(headers.base_offset[start]), None))
            chunks[0] = (base, chunks[0][1])  # the first piece keeps the segment's own base offset
        for chunk_base, chunk_last in chunks:
            lo = chunk_base
            keep = pc.greater_equal(rows["offset"], lo)
            keep_empty = pc.greater_equal(seg_empties["batch_base_offset"], lo)
            if chunk_last is not None:
                keep = pc.and_(keep, pc.less_equal(rows["offset"], chunk_last))
                keep_empty = pc.and_(keep_empty, pc.less_equal(seg_empties["batch_base_offset"], chunk_last))
            path = directory / segment_file_name(chunk_base)
            write_segment(rows.filter(keep), str(path), empty_batches=seg_empties.filter(keep_empty), codec=codec)
            written.append(path)
    return written


def timestamped_segments(topic: str, partition: int, segments: Sequence[Sequence[int]], *,
                         value: bytes | str = "v" * 20) -> tuple[pa.Table, list[int], int]:
    """A log whose segment ``i`` holds one single-record batch per timestamp in ``segments[i]`` (equal-sized
    records, so equal-sized segments for equal counts), as retention tests need. Returns the table, the
    segments' base offsets and the log end offset."""
    log = LogBuilder(topic=topic, partition=partition)
    bases = []
    for i, stamps in enumerate(segments):
        if i:
            log.roll()
        bases.append(log.next_offset)
        for ts in stamps:
            log.batch([rec(f"k{log.next_offset:05d}", value, timestamp=ts)])
    return log.table(), bases, log.next_offset

