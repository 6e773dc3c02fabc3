"""Bounded decompression of every framing segjobs reads: exact round trips, the bound inclusive, concatenated
frames and members, and what the frame headers tell before anything is decompressed."""

from __future__ import annotations

import random
import sys

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


def _codec_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kernels: str, package: str) -> str:
    """The codec's compiled calls (``compression.<kernels>()``), or Python's path where they are missing, by the
    fixture's parameter; the compiled ones must be there on Linux, where ``package``'s wheels export the codec's
    functions (the path every run takes)."""
    if request.param == "python":
        monkeypatch.setattr(compression, kernels, lambda: None)
    elif sys.platform == "linux":
        assert getattr(compression, kernels)() is not None, f"the {package} package's codec functions were not found"
    else:
        pytest.skip(f"the codec's functions are looked for where the {package} package's wheels export them")
    return str(request.param)


@pytest.fixture(params=["compiled", "python"])
def lz4_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """LZ4 frames as Kafka's producers write them through the compiled block calls (:mod:`segment_io._lz4_kernels`),
    and through Python's, one cramjam call a block (where LZ4's functions are not found)."""
    return _codec_path(request, monkeypatch, "_lz4_kernels", "lz4")


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


def test_several_payloads_go_into_one_buffer_back_to_back(lz4_path: str) -> None:
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
def test_compress_all_frames_each_payload_as_compress_does(codec: int, lz4_path: str) -> None:
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
def test_the_lz4_frame_is_java_s_at_any_level(level: int | None, lz4_path: str) -> None:
    data = (b"abcdefghij" * 20_000) + random.Random(3).randbytes(70_000)
    frame = compression.compress(LZ4, data, level=level)
    assert frame[:7] == b"\x04\x22\x4d\x18\x60\x40\x82" and frame[-4:] == bytes(4)
    assert bytes(compression.decompress(LZ4, frame)) == data
    kw = {} if level is None else {"mode": "high_compression", "compression": level}
    assert frame == _java_lz4_frame(data, **kw)


def _no_walk(data: bytes | memoryview, out: np.ndarray) -> int:
    raise AssertionError("the frame walk was not to be needed")


def _lz4_payloads() -> dict[str, tuple[bytes, bytes | None]]:
    """LZ4 payloads by name: (payload, what it decompresses to, None when it does not)."""
    java, noise = compression.compress(LZ4, TEXT), random.Random(7).randbytes(70_000)
    corrupt = bytearray(java)
    corrupt[11:15] = b"\xff\xff\xff\xff"  # the first block's bytes overwritten after its size field
    return {
        "java": (java, TEXT),
        "java-stored": (compression.compress(LZ4, noise), noise),
        "java-empty": (compression.compress(LZ4, b""), b""),
        "content-size": (inflating_payload("lz4-content-size", len(TEXT), TEXT), TEXT),
        "no-content-size": (inflating_payload("lz4-no-content-size", len(TEXT), TEXT), TEXT),
        "linked": (bytes(cramjam.lz4.compress(TEXT)), TEXT),
        "java-twice": (java * 2, TEXT * 2),
        "java-then-a-byte": (java + b"\0", None),
        "java-cut-short": (java[:-5], None),
        "java-corrupt-block": (bytes(corrupt), None),
    }


def test_lz4_frames_as_producers_write_them_are_inflated_block_by_block_and_others_by_the_frame_walk(
        monkeypatch: pytest.MonkeyPatch, lz4_path: str) -> None:
    payloads = _lz4_payloads()
    joined = b"".join(p for p, _ in payloads.values())
    ends = np.cumsum([len(p) for p, _ in payloads.values()])
    starts = ends - [len(p) for p, _ in payloads.values()]
    found = compression._lz4_frame_blocks(memoryview(joined), starts, ends, np.full(len(payloads), LZ4))
    first, count, block_max, block_size = found.first, found.count, found.block_max, found.block_size
    blocks = dict(zip(payloads, count))
    # one frame ended by its end mark (with or without a content size) is planned; the rest go through the walk
    assert {name for name, n in blocks.items() if n} == {"java", "java-stored", "content-size", "no-content-size",
                                                         "java-corrupt-block"}
    assert blocks["java"] == -(-len(TEXT) // (64 << 10)) and set(block_max) <= {0, 64 << 10}
    stored = block_size[first[1]:first[1] + count[1]]
    assert all(size & compression.LZ4_RAW_BLOCK for size in stored)  # incompressible: kept raw
    assert not compression._lz4_frame_blocks(memoryview(joined), starts, ends,
                                             np.full(len(payloads), ZSTD)).count.any()

    for name, (payload, original) in payloads.items():
        inflater, done = compression.Inflater(), []  # type: ignore[var-annotated]
        _, capacity = compression.plan_payloads(np.frombuffer(payload, np.uint8), np.array([0]),
                                                np.array([len(payload)]), np.array([LZ4]), np.array([1 << 30]))
        add = [memoryview(payload), [0], [len(payload)], [LZ4], [1 << 30], capacity.tolist(), done]
        if original is None:
            with pytest.raises(DecompressionError):
                inflater.add_all(*add)  # type: ignore[arg-type]
            continue
        inflater.add_all(*add)  # type: ignore[arg-type]
        assert bytes(inflater.view()) == original, name
        if blocks[name]:  # and without the frame walk
            with monkeypatch.context() as patched:
                patched.setitem(compression._INTO, LZ4, _no_walk)
                inflater, add[6] = compression.Inflater(), []
                inflater.add_all(*add)  # type: ignore[arg-type]
            assert bytes(inflater.view()) == original, name
        if original:  # the bound is inclusive, and one byte under it is refused
            for limit in (len(original), len(original) - 1):
                inflater = compression.Inflater()
                _, capacity = compression.plan_payloads(np.frombuffer(payload, np.uint8), np.array([0]),
                                                        np.array([len(payload)]), np.array([LZ4]),
                                                        np.array([limit]))
                add[4], add[5], add[6] = [limit], capacity.tolist(), []
                if limit < len(original):
                    with pytest.raises(OversizedBatchError):
                        inflater.add_all(*add)  # type: ignore[arg-type]
                else:  # a slice of exactly the bound: the block path takes the last block through a scratch block
                    with monkeypatch.context() as patched:
                        if blocks[name]:
                            patched.setitem(compression._INTO, LZ4, _no_walk)
                        inflater.add_all(*add)  # type: ignore[arg-type]
                    assert bytes(inflater.view()) == original, name


def _run(payloads: list[tuple[int, bytes]], limit: int = 1 << 30) -> tuple[compression.Inflater, list[int], list]:
    """``payloads`` (codec, bytes) decompressed by one :meth:`Inflater.add_all`: the inflater, where each ended, and
    the exception it raised (or None)."""
    joined = b"".join(p for _, p in payloads)
    ends = np.cumsum([len(p) for _, p in payloads]).astype(np.int64)
    starts = ends - [len(p) for _, p in payloads]
    codecs = np.array([c for c, _ in payloads], np.int64)
    limits = np.full(len(payloads), limit, np.int64)
    _, capacity = compression.plan_payloads(np.frombuffer(joined, np.uint8), starts, ends, codecs, limits)
    inflater, done = compression.Inflater(), []  # type: ignore[var-annotated]
    try:
        inflater.add_all(memoryview(joined), starts, ends, codecs, limits, capacity, done)
    except Exception as exc:  # noqa: BLE001 - returned for the test to judge
        return inflater, done, [exc]
    return inflater, done, []


def test_a_run_of_lz4_frames_stops_at_the_one_that_fails_and_names_it(lz4_path: str) -> None:
    """The compiled call takes a run of frames until one fails or has another framing; Python then decompresses that
    one (or says what is wrong with it, ``len(done)`` being its index) and the run goes on after it."""
    lz4 = _lz4_payloads()
    good = [(LZ4, lz4["java"][0]), (ZSTD, _zstd_payloads()["one frame"]), (LZ4, lz4["java-stored"][0]),
            (LZ4, lz4["linked"][0]), (LZ4, lz4["content-size"][0]), (LZ4, lz4["java-empty"][0]),
            (LZ4, lz4["java-twice"][0]), (LZ4, lz4["java"][0])]
    inflater, done, failed = _run(good)
    originals = [TEXT, TEXT[:20_000], lz4["java-stored"][1], TEXT, TEXT, b"", TEXT * 2, TEXT]
    assert not failed and bytes(inflater.view()) == b"".join(originals)
    assert done == np.cumsum([len(o) for o in originals]).tolist()
    for bad in ("java-corrupt-block", "java-cut-short", "java-then-a-byte"):
        inflater, done, failed = _run([(LZ4, lz4["java"][0])] * 2 + [(LZ4, lz4[bad][0]), (LZ4, lz4["java"][0])])
        assert len(failed) == 1 and isinstance(failed[0], DecompressionError), bad
        assert done == [len(TEXT), 2 * len(TEXT)], bad
    # the bound: a payload past it is refused whichever path inflates it, after the ones before it
    inflater, done, failed = _run([(LZ4, lz4["java-stored"][0]), (LZ4, lz4["java"][0])], limit=len(TEXT) - 1)
    assert len(failed) == 1 and isinstance(failed[0], OversizedBatchError) and done == [len(lz4["java-stored"][1])]


def _zstd_payloads() -> dict[str, bytes]:
    """zstd payloads of every shape a batch may hold, as cramjam's one-shot call reads them."""
    one = bytes(cramjam.zstd.compress(TEXT[:20_000]))
    unsized = inflating_payload("zstd-no-content-size", 20_000, TEXT[:20_000])
    empty_frame = bytes(cramjam.zstd.compress(b""))

    def skippable(length: int, body: bytes) -> bytes:
        return (0x184D2A50).to_bytes(4, "little") + length.to_bytes(4, "little") + body

    return {"one frame": one, "no content size": unsized, "two frames": one + unsized,
            "skippable frame first": skippable(3, b"xyz") + one, "empty skippable frame first": skippable(0, b"") + one,
            "skippable frame stating 4 GiB": skippable(0xFFFFFFFF, b"x"), "bytes after the frame": one + b"\0\1tail",
            "cut short": one[:-7], "empty": b"", "not zstd": b"not a zstd frame at all", "empty frame": empty_frame,
            "empty frame, then a frame": empty_frame + one, "empty frame, then garbage": empty_frame + b"garbage!",
            "an empty frame's header, then garbage": empty_frame[:6] + b"\xff" * 16}


@pytest.mark.parametrize("room", [64, 19_999, 20_000, 1 << 16, (1 << 20) + 1])
@pytest.mark.parametrize("name", sorted(_zstd_payloads()))
def test_zstd_payloads_inflate_into_the_room_as_cramjam_reads_them(name: str, room: int) -> None:
    """This thread's zstd context (the common payload) and cramjam's one-shot call (everything else) give the
    same bytes, or both fail, for every shape and room: exactly full, one byte short, beyond the context's
    limit."""
    data = _zstd_payloads()[name]
    ours, theirs = np.zeros(room, np.uint8), np.zeros(room, np.uint8)

    def outcome(inflate, out: np.ndarray) -> tuple[int, bytes] | tuple[type, str]:  # type: ignore[no-untyped-def]
        try:
            n = int(inflate(data, out))
        except Exception as exc:  # noqa: BLE001 - what cramjam raises (the Inflater reads "output full" off it)
            return type(exc), str(exc)
        return n, bytes(out[:n])

    assert outcome(compression._unzstd_into, ours) == outcome(cramjam.zstd.decompress_into, theirs)


def test_an_ordinary_zstd_payload_goes_through_the_thread_s_context(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(data, out):  # type: ignore[no-untyped-def]
        raise AssertionError("the one-shot call was used")

    monkeypatch.setattr(cramjam.zstd, "decompress_into", refused)
    out = np.zeros(1 << 16, np.uint8)
    for name in ("one frame", "no content size"):
        n = compression._unzstd_into(_zstd_payloads()[name], out)
        assert bytes(out[:n]) == TEXT[:20_000]


@pytest.fixture(params=["compiled", "python"])
def zstd_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """zstd payloads through the compiled calls of libzstd (:mod:`segment_io._zstd_kernels`), and through Python's,
    one python-zstandard call a payload (where libzstd's functions are not found)."""
    return _codec_path(request, monkeypatch, "_zstd_kernels", "zstandard")


def _outcome(payloads: list[tuple[int, bytes]], limit: int = 1 << 30) -> tuple[bytes, list[int], list]:
    """What one :meth:`Inflater.add_all` of ``payloads`` gives: the bytes, where each payload ended, and the type and
    message of what it raised."""
    inflater, done, failed = _run(payloads, limit)
    return bytes(inflater.view()), done, [(type(exc), str(exc)) for exc in failed]


@pytest.mark.parametrize("name", sorted(_zstd_payloads()))
def test_a_run_of_zstd_payloads_gives_the_bytes_or_the_error_of_one_payload_at_a_time(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every shape of zstd payload, between two ordinary ones, within its bound and one byte over it: the compiled
    call gives what Python's path gives (the same bytes, or the same error after the same payloads), and that is
    what cramjam reads."""
    data, one = _zstd_payloads()[name], _zstd_payloads()["one frame"]
    try:
        original: bytes | None = bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError:
        original = None
    for limit in ((1 << 30,) if not original else (len(original), len(original) - 1)):
        payloads = [(ZSTD, one), (ZSTD, data), (ZSTD, one)]  # the ordinary ones hold 20,000 bytes
        in_a_run = _outcome(payloads, limit) if limit >= 20_000 else None
        alone = _outcome([(ZSTD, data)], limit)
        with monkeypatch.context() as patched:
            patched.setattr(compression, "_zstd_kernels", lambda: None)
            assert _outcome([(ZSTD, data)], limit) == alone, (name, limit)
            if in_a_run is not None:
                assert _outcome(payloads, limit) == in_a_run, (name, limit)
        per_payload = alone
        if original is None:
            assert per_payload[2] and per_payload[2][0][0] is DecompressionError, name
        elif limit < len(original):
            assert per_payload[2] and per_payload[2][0][0] is OversizedBatchError, name
        else:
            assert per_payload == (original, [len(original)], []), name


def test_zstd_frames_are_inflated_by_the_compiled_call_without_python_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of ordinary zstd frames (with and without a content size, an LZ4 frame between them) never reaches
    Python's zstd path."""
    if compression._zstd_kernels() is None:
        pytest.skip("libzstd's functions were not found")

    def refused(data, out):  # type: ignore[no-untyped-def]
        raise AssertionError("Python's zstd path was used")

    monkeypatch.setitem(compression._INTO, ZSTD, refused)
    z = _zstd_payloads()
    inflater, done, failed = _run([(ZSTD, z["one frame"]), (ZSTD, z["no content size"]),
                                   (LZ4, compression.compress(LZ4, TEXT)), (ZSTD, z["one frame"])])
    assert not failed and bytes(inflater.view()) == TEXT[:20_000] * 2 + TEXT + TEXT[:20_000]
    assert done == np.cumsum([20_000, 20_000, len(TEXT), 20_000]).tolist()


@pytest.mark.parametrize("codec", [ZSTD, LZ4])
def test_compress_all_writes_each_payload_as_compress_frames_it(codec: int, zstd_path: str, lz4_path: str) -> None:
    """One buffer of frames, each after the room left for a header, each the very frame :func:`compress` makes of
    its payload (empty, tiny, incompressible, several blocks), whichever path made it."""
    payloads = [b"", TEXT[:100], random.Random(8).randbytes(50_000), TEXT[:20_000], TEXT, b"x"]
    data = np.frombuffer(b"".join(payloads), np.uint8)
    ends = np.cumsum([len(p) for p in payloads]).astype(np.int64)
    starts = ends - [len(p) for p in payloads]
    out, at = compression.compress_all(codec, data, starts, ends, 61)
    assert len(at) == len(payloads) + 1 and at[0] == 0 and at[-1] == len(out)
    for i, payload in enumerate(payloads):
        assert bytes(out[at[i] + 61:at[i + 1]]) == compression.compress(codec, payload), i


@pytest.mark.parametrize("level", [None, 1, 3, 9, 25])
def test_zstd_compresses_to_the_bytes_cramjam_does(level: int | None) -> None:
    """The thread's compression context writes the very frames of a one-shot call at the same level (what
    segjobs wrote before it kept contexts), so rewritten zstd batches keep their bytes."""
    for payload in (b"", TEXT[:100], TEXT[:20_000], TEXT, random.Random(7).randbytes(50_000)):
        assert compression.compress(ZSTD, payload, level) == bytes(cramjam.zstd.compress(payload, level=level))


@pytest.mark.parametrize("after", ["zstd", "lz4"])
def test_a_payload_that_inflates_past_its_plan_leaves_room_for_the_compiled_calls_after_it(after: str) -> None:
    """A gzip payload whose last member's ISIZE understates it (1 byte planned, 262,001 inflated) grows the buffer
    to its own needs only; the compiled call for the payload after it must still get a room inside the buffer
    (here it would begin 143 bytes before the buffer's end)."""
    original = (TEXT * 2)[:262_000]
    gzipped = bytes(cramjam.gzip.compress(original)) + bytes(cramjam.gzip.compress(b"x"))
    following = (ZSTD, _zstd_payloads()["one frame"]) if after == "zstd" else (LZ4, compression.compress(LZ4, TEXT))
    inflater, done, failed = _run([(GZIP, gzipped), following])
    expected = TEXT[:20_000] if after == "zstd" else TEXT
    assert not failed and done == [262_001, 262_001 + len(expected)]
    assert bytes(inflater.view()) == original + b"x" + expected


def test_a_thread_reuses_its_inflater_s_buffer_one_use_at_a_time() -> None:
    """The buffer one use leaves behind is the next use's (memory already touched), empty; a use inside another
    gets a buffer of its own (it would overwrite the outer's payloads); one grown past twice RUN_BYTES is let go."""
    payload = compression.compress(LZ4, b"payload " * 1000)
    with compression.reused_inflater() as first:
        first.add(LZ4, payload, 1 << 20, 8000)
        buf = first.view().base
        with compression.reused_inflater() as inner:
            assert inner is not first
    with compression.reused_inflater() as again:
        assert again is first and again.size == 0 and again.capacity_bytes >= 8000
        again.add(LZ4, payload, 1 << 20, 8000)
        assert again.view().base is buf and bytes(again.view()) == b"payload " * 1000
        again.add(LZ4, payload, 3 * compression.RUN_BYTES, 2 * compression.RUN_BYTES + 1)  # grows past the cap
    with compression.reused_inflater() as fresh:
        assert fresh is not first and fresh.capacity_bytes == 0
