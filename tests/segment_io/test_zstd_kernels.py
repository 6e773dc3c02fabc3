"""The compiled libzstd calls: a payload never gets more than its room or its bound, and the frames they write are
python-zstandard's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from segment_io import compression
from segment_io.compression import LZ4, ZSTD
from tests.support.bombs import inflating_payload

kernels = pytest.importorskip("segment_io._zstd_kernels")
pytestmark = pytest.mark.skipif(not kernels.LINKED, reason="libzstd's functions were not found")

TEXT = b"".join(random.Random(9).choice([b'{"k":1,', b'"v":"abc"}', b"\n"]) for _ in range(30_000))
NOISE = random.Random(10).randbytes(100_000)
SENTINEL = 0xA5


def _inflate(payload: bytes, room: int, limit: int = 1 << 30, codec: int = ZSTD) -> tuple[int, int, np.ndarray]:
    """One payload through :func:`inflate_frames` into ``room`` bytes of a buffer that holds a sentinel after that
    room: (payloads done, where the next goes, the buffer)."""
    data = np.frombuffer(payload, np.uint8)
    buf = np.full(room + 4096, SENTINEL, np.uint8)
    ends = np.zeros(1, np.int64)
    done, at = kernels.inflate_frames(data, np.array([0]), np.array([len(payload)]), np.array([codec]),
                                      np.array([room]), np.array([limit]), 0, buf, 0, ends,
                                      kernels.decompression_context())
    return done, at, buf


@pytest.mark.parametrize("payload,original", [
    (compression.compress(ZSTD, TEXT), TEXT),
    (compression.compress(ZSTD, NOISE), NOISE),
    (inflating_payload("zstd-no-content-size", len(TEXT), TEXT), TEXT),
], ids=["compressed", "incompressible", "no content size"])
def test_a_payload_that_needs_more_than_its_room_is_stopped_before_it_writes_past_it(payload: bytes,
                                                                                   original: bytes) -> None:
    done, at, buf = _inflate(payload, len(original))
    assert (done, at) == (1, len(original)) and bytes(buf[:at]) == original
    for room in (len(original) - 1, len(original) // 2, 10):
        done, at, buf = _inflate(payload, room)
        assert (done, at) == (0, 0), room
        assert (buf[room:] == SENTINEL).all(), f"wrote past a room of {room} bytes"


def test_a_payload_within_its_room_but_past_its_bound_is_stopped() -> None:
    payload = compression.compress(ZSTD, TEXT)
    assert _inflate(payload, len(TEXT) + 10, limit=len(TEXT) - 1)[:2] == (0, 0)
    assert _inflate(payload, len(TEXT) + 10, limit=len(TEXT))[:2] == (1, len(TEXT))


def test_only_zstd_payloads_of_one_frame_are_taken() -> None:
    one = compression.compress(ZSTD, TEXT)
    assert _inflate(one, len(TEXT), codec=LZ4)[:2] == (0, 0)
    for other in (one + one, one + b"\0", one[:-3], b"\x50\x2a\x4d\x18\x03\0\0\0xyz" + one, b""):
        assert _inflate(other, 2 * len(TEXT))[:2] == (0, 0)


def test_frames_are_those_of_the_thread_s_python_zstandard_context() -> None:
    payloads = [b"", b"a", TEXT[:1000], NOISE, TEXT, TEXT * 5]
    data = np.frombuffer(b"".join(payloads), np.uint8)
    ends = np.cumsum([len(p) for p in payloads]).astype(np.int64)
    starts, sizes = ends - [len(p) for p in payloads], np.array([len(p) for p in payloads], np.int64)
    bounds = compression._zstd_bounds(sizes)
    out = np.empty(int(bounds.sum()) + 5 * len(payloads), np.uint8)
    at = np.empty(len(payloads) + 1, np.int64)
    written = kernels.deflate_frames(data, starts, sizes, 5, bounds, out, at, kernels.compression_context())
    assert written == at[-1]
    for i, payload in enumerate(payloads):
        assert bytes(out[at[i] + 5:at[i + 1]]) == compression._ZSTD.compressor.compress(payload), i


def test_a_room_past_the_buffer_s_end_is_refused_before_anything_is_written() -> None:
    payload = compression.compress(ZSTD, TEXT)
    whole = np.full(len(TEXT) + 4096, SENTINEL, np.uint8)
    buf = whole[:len(TEXT) - 1]  # the room the payload is given runs a byte past the buffer
    done, at = kernels.inflate_frames(np.frombuffer(payload, np.uint8), np.array([0]), np.array([len(payload)]),
                                      np.array([ZSTD]), np.array([len(TEXT)]), np.array([1 << 30]), 0, buf, 0,
                                      np.zeros(1, np.int64), kernels.decompression_context())
    assert (done, at) == (0, 0) and (whole == SENTINEL).all()


def test_a_frame_whose_room_runs_past_the_output_is_refused() -> None:
    sizes = np.array([1000, len(TEXT)], np.int64)
    data = np.frombuffer(TEXT[:1000] + TEXT, np.uint8)
    bounds = compression._zstd_bounds(sizes)
    first = len(compression.compress(ZSTD, TEXT[:1000]))
    whole = np.full(int(bounds.sum()) + 4096, SENTINEL, np.uint8)
    out = whole[:first + int(bounds[1]) - 1]  # the second frame's room runs a byte past it
    written = kernels.deflate_frames(data, np.array([0, 1000]), sizes, 0, bounds, out, np.empty(3, np.int64),
                                     kernels.compression_context())
    # (libzstd may use all of the first frame's room while it makes it)
    assert written == -2 and (whole[int(bounds[0]):] == SENTINEL).all()
