"""segment_io: read and write Kafka log segments through Arrow. No Spark needed.

Public API (imported lazily so ``import segment_io`` stays cheap on executors)::

    read_segment(path_or_uri, columns=None, ...) -> pyarrow.Table
    iter_segment(path_or_uri, columns=None, ...) -> Iterator[pyarrow.RecordBatch]
    read_key_hashes(path_or_uri, ...) -> pyarrow.Table      # first compaction pass: no values
    write_segment(table_or_batches, path_or_uri, ...) -> SegmentWriteResult
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "read_segment": "segment_io.decode",
    "iter_segment": "segment_io.decode",
    "read_key_hashes": "segment_io.decode",
    "hash_keys": "segment_io.decode",
    "write_segment": "segment_io.segment_writer",
    "encode_batches": "segment_io.encode",
    "RECORD_SCHEMA": "segment_io.schema",
    "KEY_HASH_SCHEMA": "segment_io.schema",
    "BATCH_SCHEMA": "segment_io.schema",
    "SegjobsError": "segment_io.errors",
    "CorruptRecordError": "segment_io.errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'segment_io' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
