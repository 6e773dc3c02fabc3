"""Bounded decompression of every framing segjobs reads: exact round trips, the bound inclusive, concatenated
frames and members, and what the frame headers tell before anything is decompressed."""

from __future__ import annotations

import random

import cramjam
import numpy as np
import pytest

from segment_io import compression
from segment_io.compression import GZIP, LZ4, SNAPPY, ZSTD
from segment_io.errors import DecompressionError, OversizedBatchError
from tests.support.bombs import VARIANTS, inflating_payload

_rng = random.Random(5)
TEXT = b"".join(_rng.choice([b'{"user":"alice",', b'"amount":12,', b'"ok"}', b"\n"]) for _ in range(60_000))


def _cases() -> list[tuple[str, int, bytes, bytes]]:
    """(name, codec, compressed, original)"""
    noise = random.Random(6).randbytes(150_000)
    cases = [(v, codec, inflating_payload(v, len(TEXT), TEXT), TEXT) for v, codec in VARIANTS.items()]
    cases += [
        # Java-style frames of incompressible bytes: stored (raw) LZ4 blocks, uncompressible snappy blocks
        ("lz4-java-stored", LZ4, compression.compress(LZ4, noise), noise),
        ("snappy-xerial-noise", SNAPPY, compression.compress(SNAPPY, noise), noise),
        # linked LZ4 blocks (the frame decoder's path) and frames / members one after another
        ("lz4-linked", LZ4, bytes(cramjam.lz4.compress(TEXT)), TEXT),
        ("lz4-java-twice", LZ4, compression.compress(LZ4, TEXT) * 2, TEXT * 2),
        ("lz4-java-then-linked", LZ4, compression.compress(LZ4, TEXT) + bytes(cramjam.lz4.compress(TEXT)), TEXT * 2),
        ("zstd-twice", ZSTD, inflating_payload("zstd-content-size", len(TEXT), TEXT) * 2, TEXT * 2),
        ("gzip-two-members", GZIP, inflating_payload("gzip", len(TEXT), TEXT) * 2, TEXT * 2),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize("name,codec,data,original", CASES, ids=[c[0] for c in CASES])
def test_decompression_is_exact_and_the_bound_inclusive(name: str, codec: int, data: bytes,
                                                        original: bytes) -> None:
    assert bytes(compression.decompress(codec, data)) == original
    assert bytes(compression.decompress(codec, data, limit=len(original))) == original
    with pytest.raises(OversizedBatchError, match=f"bound of {len(original) - 1} bytes"):
        compression.decompress(codec, data, limit=len(original) - 1)


@pytest.mark.parametrize("name,codec,data,original", CASES, ids=[c[0] for c in CASES])
def test_the_planned_slice_holds_a_genuine_payload_and_declared_sizes_are_exact(name: str, codec: int,
                                                                               data: bytes, original: bytes) -> None:
    buf = np.frombuffer(data, dtype=np.uint8)
    at_least, capacity = compression.plan_payloads(buf, np.array([0]), np.array([len(data)]), np.array([codec]),
                                                   np.array([1 << 30]))
    assert at_least[0] <= len(original)
    if name != "gzip-two-members":  # ISIZE tells the last member's size only: decompressed again, bigger
        assert len(original) <= capacity[0], "decompressed once, into the planned slice"
    if codec == SNAPPY or (name.endswith("-content-size") and "no-" not in name) or name == "zstd-twice":
        assert at_least[0] == len(original)
    if name in ("lz4-java-stored", "lz4-java-twice"):  # no content size: the blocks bound it within a block
        frames = 2 if "twice" in name else 1
        assert capacity[0] - len(original) < frames * (64 << 10)


def test_several_payloads_go_into_one_buffer_back_to_back() -> None:
    payloads = [data for _, _, data, _ in CASES]
    codecs = [codec for _, codec, _, _ in CASES]
    joined = b"".join(payloads)
    starts = np.cumsum([0] + [len(p) for p in payloads[:-1]])
    ends = starts + [len(p) for p in payloads]
    limits = np.full(len(payloads), 1 << 30)
    _, capacity = compression.plan_payloads(np.frombuffer(joined, np.uint8), starts, ends, np.array(codecs), limits)
    inflater = compression.Inflater()
    done: list[int] = []
    inflater.add_all(memoryview(joined), starts.tolist(), ends.tolist(), codecs, limits.tolist(), capacity.tolist(),
                     done)
    assert bytes(inflater.view()) == b"".join(original for _, _, _, original in CASES)
    assert done == np.cumsum([len(original) for _, _, _, original in CASES]).tolist()


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_garbage_is_a_decompression_error(codec: int) -> None:
    garbage = b"\x10" + random.Random(codec).randbytes(3000)  # for raw snappy: a preamble of 16 bytes
    with pytest.raises(DecompressionError, match="does not decompress"):
        compression.decompress(codec, garbage)


def test_a_raw_snappy_preamble_over_the_bound_is_refused_unread() -> None:
    # raw snappy has no header but the length: 4 GiB - 1 declared, then nothing
    with pytest.raises(OversizedBatchError, match="declare at least 4294967295 bytes"):
        compression.decompress(SNAPPY, b"\xff\xff\xff\xff\x0f")


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compress_all_frames_each_payload_as_compress_does(codec: int) -> None:
    """Payloads compressed into one buffer, each after room for a header: every frame is the bytes compress()
    makes of it (empty, tiny, at and across LZ4's 64 KiB blocks, incompressible blocks LZ4 stores raw)."""
    rng = np.random.default_rng(7)
    payloads = []
    for n in (0, 1, 100, 65535, 65536, 65537, 200_000, 3000):
        payloads.append((b"abcdefghij" * (n // 10 + 1))[:n])
        payloads.append(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    # each after a gap of bytes that are not a payload's (a batch header's, in the encoder), of varying length
    gaps = [61 + i % 3 for i in range(len(payloads))]
    data = np.frombuffer(b"".join(b"\xee" * g + p for g, p in zip(gaps, payloads)), np.uint8)
    lengths = np.array([len(p) for p in payloads], np.int64)
    ends = np.cumsum(lengths + gaps)
    starts = ends - lengths
    out, at = compression.compress_all(codec, data, starts, ends, 61)
    assert at[0] == 0 and at[-1] == len(out)
    for i, payload in enumerate(payloads):
        frame = bytes(out[at[i] + 61:at[i + 1]])
        assert frame == compression.compress(codec, payload)
        if codec == LZ4:
            assert frame == _java_lz4_frame(payload)


def _java_lz4_frame(data: bytes, **kw: object) -> bytes:
    """The frame Kafka's Java producer (Lz4BlockOutputStream) writes, built here block by block from cramjam's block
    compressor: its fixed header, 64 KiB independent blocks (stored raw when compressing does not shrink them),
    a zero end mark. ``kw`` goes to the block compressor."""
    parts = [b"\x04\x22\x4d\x18\x60\x40\x82"]
    for start in range(0, len(data), 1 << 16):
        chunk = data[start:start + (1 << 16)]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False, **kw))
        raw = len(block) >= len(chunk)
        parts += [(len(chunk) | 1 << 31 if raw else len(block)).to_bytes(4, "little"), chunk if raw else block]
    return b"".join(parts + [bytes(4)])


@pytest.mark.parametrize("level", [None, 9])
def test_the_lz4_frame_is_java_s_at_any_level(level: int | None) -> None:
    data = (b"abcdefghij" * 20_000) + random.Random(3).randbytes(70_000)
    frame = compression.compress(LZ4, data, level=level)
    assert frame[:7] == b"\x04\x22\x4d\x18\x60\x40\x82" and frame[-4:] == bytes(4)
    assert bytes(compression.decompress(LZ4, frame)) == data
    kw = {} if level is None else {"mode": "high_compression", "compression": level}
    assert frame == _java_lz4_frame(data, **kw)
