"""CRC-32C of many spans of one buffer at once: every batch of a segment checked, or every new batch's CRC
computed, in one call (:mod:`segment_io._crc_kernels`, the processor's CRC32 instruction), or span by span with
the ``crc32c`` package where that instruction is not available."""

from __future__ import annotations

import crc32c
import numpy as np

from segment_io import _crc_kernels as K


def crc_instruction() -> bool:
    """Whether this process computes CRCs with the processor's CRC32 instruction (else with the crc32c package)."""
    return K.HARDWARE


def _view(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    return data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)


def span_crcs(data: bytes | bytearray | memoryview | np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The CRC-32C (uint32) of ``data[starts[i]:ends[i]]`` for every ``i``."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if K.HARDWARE:
        out = np.empty(len(starts), np.int64)
        K.span_crcs(_view(data), starts, ends, K.LONG_SHIFT, K.SHORT_SHIFT, out)
        return out.astype(np.uint32)
    mv = _view(data).data
    return np.array([crc32c.crc32c(mv[a:b]) for a, b in zip(starts.tolist(), ends.tolist())], np.uint32)


def first_mismatch(data: bytes | bytearray | memoryview | np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   expected: np.ndarray) -> int:
    """The index of the first span whose CRC-32C is not ``expected`` (its stored CRC), or -1 when all match."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if K.HARDWARE:
        return int(K.first_mismatch(_view(data), starts, ends, np.asarray(expected, np.int64), K.LONG_SHIFT,
                                    K.SHORT_SHIFT))
    mv = _view(data).data
    for i, (a, b, crc) in enumerate(zip(starts.tolist(), ends.tolist(), np.asarray(expected).tolist())):
        if crc32c.crc32c(mv[a:b]) != crc:
            return i
    return -1


def span_crc(data: bytes | bytearray | memoryview | np.ndarray, start: int, end: int) -> int:
    """The CRC-32C of one span (for an error message: the value a stored CRC was compared with)."""
    return int(span_crcs(data, np.array([start]), np.array([end]))[0])
