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

from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa

from segment_io.format import CONTROL_ABORT, CONTROL_COMMIT
from segment_io.schema import RECORD_SCHEMA

import struct


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


def records_table(keys_values: Sequence[tuple[bytes | str | None, bytes | str | None]], **kw) -> pa.Table:
    """Shortcut: one batch per record, consecutive offsets from 0."""
    log = LogBuilder(**kw)
    for k, v in keys_values:
        log.batch([rec(k, v)])
    return log.table()
