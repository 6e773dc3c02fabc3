"""The segment being decoded: its bytes, its batch headers and the options that apply to all of its batches,
shared by the two decoding paths (:mod:`segment_io.decode_v2` for RecordBatch v2, :mod:`segment_io.decode_legacy` for
magic 0/1 message sets) and the entry points of :mod:`segment_io.decode`.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from segment_io import compression
from segment_io.errors import CorruptRecordError
from segment_io.format import BatchHeaders, check_offset_order, cut_short_error, readonly_bytes, scan_batches
from segment_io.payloads import KeptPayloads
from segment_io.schema import RECORD_SCHEMA

# iter_/read_segment decode at most this many batch bytes at once, which keeps every binary column of a
# chunk well inside Arrow's int32 offsets (a chunk that still overflows after decompression is split).
# For compressed batches the chunk also bounds the decompressed payloads held at once: small chunks let the
# allocator reuse the same memory for every chunk instead of faulting in fresh pages. A compressed batch
# therefore counts segment_io.decode._COMPRESSED_WEIGHT times its size, giving ~8 MiB chunks of compressed
# batches (measured on 1 KB JSON-like values: 1.7-3x faster than 256 MiB chunks) and 64 MiB ones of uncompressed
# batches (fewer chunks for the encoder and the cleaner downstream; no intermediate buffers to reuse). The
# decompressed payloads held at once are also capped at this size (segment_io.decode_v2._PAYLOAD_BYTES; beyond
# the first batch, itself bounded by compression.max_batch_bytes): a chunk of small batches that inflate a lot
# is decoded in pieces.
CHUNK_BYTES = 64 << 20
HEADERS_TYPE = RECORD_SCHEMA.field("headers").type


@dataclass
class SegmentBytes:
    """One segment's bytes and the options that apply to all of its batches."""

    mv: memoryview
    arr: np.ndarray  # the same bytes as uint8, zero-copy
    hdr: BatchHeaders
    path: str | None
    topic: str
    partition: int
    segment_base_offset: int
    verify_crc: bool
    include_control: bool
    max_batch_bytes: int  # see compression.max_batch_bytes
    #: v2 values as references into the segment's bytes (VALUE_REF_TYPE) instead of copies
    value_refs: bool = False
    #: with ``value_refs``: where the decompressed payloads the references point into are left for the encoder
    payloads: KeptPayloads | None = None

    def error(self, cls: type[CorruptRecordError], detail: str, b: int) -> CorruptRecordError:
        """An exception of ``cls`` located at batch ``b`` (index into ``hdr``)."""
        return cls(detail, path=self.path, position=int(self.hdr.position[b]),
                   offset=int(self.hdr.base_offset[b]))


def as_bytes(data: bytes | bytearray | memoryview | mmap.mmap) -> tuple[memoryview, np.ndarray]:
    """``data`` as a read-only memoryview of bytes (:func:`segment_io.format.readonly_bytes`) and as a uint8 array
    over the same memory (no copy)."""
    mv = readonly_bytes(data)
    return mv, np.frombuffer(mv, dtype=np.uint8)


def open_segment(data: bytes | bytearray | memoryview | mmap.mmap, *, path: str | None, topic: str, partition: int,
          segment_base_offset: int | None, verify_crc: bool, include_control: bool,
          allow_truncated_tail: bool, max_batch_bytes: int | None, check_order: bool = True) -> SegmentBytes:
    """Frame ``data`` (:func:`segment_io.format.scan_batches`) for decoding; the options are those of
    :func:`segment_io.decode.decode_segment_bytes`."""
    limit = compression.max_batch_bytes(max_batch_bytes)
    mv, arr = as_bytes(data)
    hdr = scan_batches(mv, path=path, allow_truncated_tail=True)
    if hdr.truncated_tail and not allow_truncated_tail:
        raise cut_short_error(mv, hdr.truncated_tail, path)
    if check_order:
        check_offset_order(hdr, path)
    if segment_base_offset is None:
        segment_base_offset = int(hdr.base_offset[0]) if len(hdr) else 0
    return SegmentBytes(mv, arr, hdr, path, topic, partition, segment_base_offset, verify_crc, include_control, limit)
