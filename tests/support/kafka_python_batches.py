"""v2 record batches written by kafka-python (an encoder independent of segjobs): random records, a batch of them,
and a batch with header fields rewritten and its CRC recomputed."""

from __future__ import annotations

import random
import struct

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from segment_io.format import V2_HEADER


def random_records(rng: random.Random, n: int) -> list[tuple[bytes | None, bytes | None, list, int]]:
    """``n`` random (key, value, headers, timestamp) records: null keys and values, empty and long values,
    headers with null values, timestamps that go back a little."""
    out = []
    ts = 1_700_000_000_000 + rng.randrange(1000)
    for _ in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 40))
        # repetitive values: kafka-python leaves a batch uncompressed when compression does not shrink it
        value = None if rng.random() < 0.2 else (rng.randbytes(6) * 400)[:rng.choice([0, 1, 10, 300, 2000])]
        headers = [(f"h{j}-é", None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20)))
                   for j in range(rng.choice([0, 0, 1, 3]))]
        ts += rng.randrange(-5, 50)
        out.append((key, value, headers, ts))
    return out


def v2_batch(codec: int, records, *, base_offset: int, transactional: bool = False, pid: int = -1,
             epoch: int = -1, seq: int = -1, offset_step: int = 1) -> bytes:
    """One v2 batch of ``records`` built by kafka-python, placed at ``base_offset``; record ``i`` gets offset delta
    ``i * offset_step``."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                        batch_size=1 << 24)
    for i, (key, value, headers, ts) in enumerate(records):
        builder.append(i * offset_step, timestamp=ts, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def rewrite_header(batch: bytes, **fields: int) -> bytes:
    """Change v2 header fields and recompute the CRC (fields named in V2_HEADER's order, as below)."""
    names = ("base_offset", "length", "leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
             "base_ts", "max_ts", "pid", "epoch", "seq", "count")
    values = dict(zip(names, V2_HEADER.unpack_from(batch, 0)))
    values.update(fields)
    head = bytearray(V2_HEADER.pack(*(values[n] for n in names)))
    out = bytearray(head + batch[V2_HEADER.size:])
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)
