"""The real broker corpus (tests/data/kafka-real) as record-batch files: which files hold batches, and the
zero-record batches of a segment, which the decoder yields no rows for."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # makes pa.compute available

from segment_io.format import scan_batches
from segment_io.schema import BATCH_COLUMNS, BATCH_SCHEMA


def fixture_files(root: Path) -> list[Path]:
    """Every non-empty file of the corpus written in the record-batch format (segments, KRaft snapshots)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".log", ".checkpoint")
                  and p.stat().st_size > 0 and "_supplemental" not in p.parts)


def empty_batches_of(data: bytes) -> pa.Table:
    """The zero-record v2 batches of a segment, as BATCH_SCHEMA rows (the decoder yields no rows for them)."""
    hdr = scan_batches(data)
    rows = [i for i in range(len(hdr)) if hdr.magic[i] == 2 and hdr.record_count[i] == 0]
    attrs = hdr.attributes[rows]
    cols = {
        "batch_base_offset": hdr.base_offset[rows], "batch_last_offset": hdr.last_offset[rows],
        "batch_position": hdr.position[rows], "batch_size": hdr.size[rows],
        "batch_base_timestamp": hdr.base_timestamp[rows], "batch_max_timestamp": hdr.max_timestamp[rows],
        "timestamp_type": ((attrs & 0x08) != 0).astype("int8"), "magic": hdr.magic[rows],
        "codec": hdr.codec[rows], "transactional": hdr.transactional[rows], "control": hdr.control[rows],
        "producer_id": hdr.producer_id[rows], "producer_epoch": hdr.producer_epoch[rows],
        "base_sequence": hdr.base_sequence[rows], "partition_leader_epoch": hdr.partition_leader_epoch[rows],
        "delete_horizon_ms": pa.nulls(len(rows), pa.int64()), "segment_base_offset": [0] * len(rows),
    }
    return pa.table({c: pa.array(cols[c], BATCH_SCHEMA.field(c).type) for c in BATCH_COLUMNS}, schema=BATCH_SCHEMA)
