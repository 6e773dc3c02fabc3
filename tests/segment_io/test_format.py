"""scan_batches: every header column read for v2 batches and legacy messages, mixed in one file."""

from __future__ import annotations

import struct

import numpy as np

from segment_io.format import scan_batches
from tests.support.legacy_messages import legacy_message


def _v2_batch(base: int, *, last_delta: int, count: int, attrs: int, base_ts: int, max_ts: int, pid: int,
              epoch: int, seq: int, leader_epoch: int, crc: int, payload: bytes) -> bytes:
    # baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
    # maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount (Kafka's DefaultRecordBatch layout)
    length = 49 + len(payload)
    return struct.pack(">qiibIhiqqqhii", base, length, leader_epoch, 2, crc, attrs, last_delta, base_ts, max_ts,
                       pid, epoch, seq, count) + payload


def test_every_column_of_mixed_v2_and_legacy_batches() -> None:
    a = _v2_batch(100, last_delta=4, count=5, attrs=0x18, base_ts=1_700_000_000_000, max_ts=1_700_000_000_009,
                  pid=(1 << 40) + 7, epoch=-3, seq=123456, leader_epoch=9, crc=0xFEDCBA98, payload=b"x" * 7)
    v1 = legacy_message(1, 105, b"k", b"v", attributes=0x0A, timestamp=1_650_000_000_123)  # snappy bit + append
    b = _v2_batch(106, last_delta=0, count=0, attrs=0x60, base_ts=-1, max_ts=42, pid=-1, epoch=-1, seq=-1,
                  leader_epoch=-1, crc=1, payload=b"")
    v0 = legacy_message(0, 107, None, b"")  # the shortest message there is, ending the file: read up to its last byte
    data = a + v1 + b + v0
    h = scan_batches(data)
    assert h.truncated_tail == 0
    assert h.position.tolist() == [0, len(a), len(a) + len(v1), len(a) + len(v1) + len(b)]
    assert h.size.tolist() == [len(a), len(v1), len(b), len(v0)]
    assert h.magic.tolist() == [2, 1, 2, 0]
    assert h.base_offset.tolist() == [100, 105, 106, 107]
    assert h.last_offset.tolist() == [104, 105, 106, 107]
    assert h.attributes.tolist() == [0x18, 0x0A, 0x60, 0]
    assert h.base_timestamp.tolist() == [1_700_000_000_000, 1_650_000_000_123, -1, -1]
    assert h.max_timestamp.tolist() == [1_700_000_000_009, 1_650_000_000_123, 42, -1]
    assert h.producer_id.tolist() == [(1 << 40) + 7, -1, -1, -1]
    assert h.producer_epoch.tolist() == [-3, -1, -1, -1]
    assert h.base_sequence.tolist() == [123456, -1, -1, -1]
    assert h.partition_leader_epoch.tolist() == [9, -1, -1, -1]
    assert h.record_count.tolist() == [5, -1, 0, 1]  # a compressed wrapper's count is unknown
    assert h.crc.tolist() == [0xFEDCBA98, struct.unpack(">I", v1[12:16])[0], 1, struct.unpack(">I", v0[12:16])[0]]
    expected_types = {"position": np.int64, "size": np.int32, "base_offset": np.int64, "last_offset": np.int64,
                      "magic": np.int8, "attributes": np.int16, "base_timestamp": np.int64,
                      "max_timestamp": np.int64, "producer_id": np.int64, "producer_epoch": np.int16,
                      "base_sequence": np.int32, "partition_leader_epoch": np.int32, "record_count": np.int32,
                      "crc": np.uint32}
    for name, dtype in expected_types.items():
        column = getattr(h, name)
        assert column.dtype == np.dtype(dtype), name
        assert column.dtype.isnative, name


def test_v2_only_and_empty_scans_keep_the_column_types() -> None:
    batch = _v2_batch(0, last_delta=2, count=3, attrs=0, base_ts=5, max_ts=6, pid=-1, epoch=-1, seq=-1,
                      leader_epoch=0, crc=0, payload=b"abc")
    h = scan_batches(batch * 2 + batch[:20])
    assert h.position.tolist() == [0, len(batch)]
    assert h.truncated_tail == 20
    assert h.size.dtype == np.int32 and h.crc.dtype == np.uint32 and h.magic.tolist() == [2, 2]
    empty = scan_batches(b"")
    assert len(empty) == 0 and empty.base_offset.dtype == np.int64 and empty.crc.dtype == np.uint32
