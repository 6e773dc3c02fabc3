"""The compiled LZ4 block calls: a payload never gets more than its room, whatever its blocks inflate to."""

from __future__ import annotations

import random

import numpy as np
import pytest

from segment_io import compression
from segment_io.compression import LZ4

kernels = pytest.importorskip("segment_io._lz4_kernels")
pytestmark = pytest.mark.skipif(not kernels.LINKED, reason="LZ4's block functions were not found")

TEXT = b"".join(random.Random(9).choice([b'{"k":1,', b'"v":"abc"}', b"\n"]) for _ in range(30_000))
NOISE = random.Random(10).randbytes(100_000)
SENTINEL = 0xA5


def _inflate(payload: bytes, room: int, limit: int = 1 << 30) -> tuple[int, int, np.ndarray]:
    """One payload through :func:`inflate_frames` into ``room`` bytes of a buffer that holds a sentinel after that
    room: (payloads done, where the next goes, the buffer)."""
    data = np.frombuffer(payload, np.uint8)
    found = compression._lz4_frame_blocks(memoryview(payload), np.array([0]), np.array([len(payload)]),
                                          np.array([LZ4]))
    assert found.count[0], "a frame as Kafka's producers write it"
    buf = np.full(room + 4096, SENTINEL, np.uint8)
    scratch = np.empty(int(found.block_max.max()), np.uint8)
    ends = np.zeros(1, np.int64)
    done, at = kernels.inflate_frames(data, found.first, found.count, found.block_max, found.block_start,
                                      found.block_size, np.array([room]), np.array([limit]), 0, buf, 0, scratch, ends)
    return done, at, buf


@pytest.mark.parametrize("original", [TEXT, NOISE], ids=["compressed blocks", "blocks stored raw"])
def test_a_payload_that_needs_more_than_its_room_is_stopped_before_it_writes_past_it(original: bytes) -> None:
    payload = compression.compress(LZ4, original)
    done, at, buf = _inflate(payload, len(original))
    assert (done, at) == (1, len(original)) and bytes(buf[:at]) == original
    for room in (len(original) - 1, len(original) - 30_000, 10):  # the last block a byte short; mid-block; the first
        done, at, buf = _inflate(payload, room)
        assert (done, at) == (0, 0), room
        assert (buf[room:] == SENTINEL).all(), f"wrote past a room of {room} bytes"


def test_a_payload_within_its_room_but_past_its_bound_is_stopped() -> None:
    payload = compression.compress(LZ4, TEXT)
    assert _inflate(payload, len(TEXT) + 10, limit=len(TEXT) - 1)[:2] == (0, 0)
    assert _inflate(payload, len(TEXT) + 10, limit=len(TEXT))[:2] == (1, len(TEXT))


def test_a_room_past_the_buffer_s_end_is_refused_before_anything_is_written() -> None:
    payload = compression.compress(LZ4, TEXT)
    data = np.frombuffer(payload, np.uint8)
    found = compression._lz4_frame_blocks(memoryview(payload), np.array([0]), np.array([len(payload)]),
                                          np.array([LZ4]))
    whole = np.full(len(TEXT) + 4096, SENTINEL, np.uint8)
    buf = whole[:len(TEXT) - 1]  # the room the payload is given runs a byte past the buffer
    done, at = kernels.inflate_frames(data, found.first, found.count, found.block_max, found.block_start,
                                      found.block_size, np.array([len(TEXT)]), np.array([1 << 30]), 0, buf, 0,
                                      np.empty(int(found.block_max.max()), np.uint8), np.zeros(1, np.int64))
    assert (done, at) == (0, 0) and (whole == SENTINEL).all()
