"""CRC-32C of many spans in one call (segment_io.crc): the processor's instruction in three interleaved streams,
and the crc32c package span by span where it is missing, against the crc32c package; and what uses it (a batch
whose CRC is wrong is found, and the encoder writes the same bytes either way)."""

from __future__ import annotations

import crc32c
import numpy as np
import pyarrow as pa
import pytest

from segment_io import _crc_kernels as K
from segment_io import crc
from segment_io.decode import decode_segment_and_headers, decode_segment_bytes
from segment_io.encode import encode_batches
from segment_io.errors import CrcMismatchError
from segment_io.format import V2_CRC, scan_batches
from tests.support.builders import LogBuilder, rec

# every block boundary of the interleaved loop, and around it: whole long and short runs, their remainders
_LENGTHS = sorted({*range(0, 40), 255, 256, 257, 3 * K.SHORT - 1, 3 * K.SHORT, 3 * K.SHORT + 1,
                   3 * K.SHORT + 9, 3 * K.LONG - 1, 3 * K.LONG, 3 * K.LONG + 1, 3 * K.LONG + 3 * K.SHORT + 7,
                   6 * K.LONG + 5, 100_003})

_PATHS = [pytest.param(True, id="instruction", marks=pytest.mark.skipif(
    not K.HARDWARE, reason="this processor (or numba's CPU setting) has no CRC32 instruction")),
          pytest.param(False, id="crc32c package")]


@pytest.fixture(params=_PATHS)
def instruction(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(K, "HARDWARE", request.param)
    return request.param


def _spans() -> tuple[np.ndarray, np.ndarray]:
    """One span of each length, one after the other with a gap of 0-7 bytes before each (unaligned starts), the
    first one not empty; they need a buffer of :data:`_SPANS_END` bytes."""
    lengths = np.array(_LENGTHS[1:] + _LENGTHS[:1])  # the empty span last
    gaps = np.random.default_rng(7).integers(0, 8, len(lengths))
    starts = np.cumsum(gaps + np.concatenate([[0], lengths[:-1]]))
    return starts, starts + lengths


_SPANS_END = int(_spans()[1].max())


def test_every_span_s_crc_is_the_crc32c_package_s(instruction: bool) -> None:
    buf = np.random.default_rng(1).integers(0, 256, _SPANS_END, dtype=np.uint8).tobytes()
    starts, ends = _spans()
    expected = [crc32c.crc32c(buf[a:b]) for a, b in zip(starts, ends)]
    got = crc.span_crcs(buf, starts, ends)
    assert got.dtype == np.uint32 and got.tolist() == expected
    assert crc.crc_instruction() is instruction


def test_the_first_span_whose_crc_differs_is_found(instruction: bool) -> None:
    buf = np.random.default_rng(2).integers(0, 256, _SPANS_END, dtype=np.uint8)
    starts, ends = _spans()
    stored = crc.span_crcs(buf, starts, ends)
    assert crc.first_mismatch(buf, starts, ends, stored) == -1
    for bad in (0, 17, len(starts) - 2):  # one bit of the span's last byte (the tail loop's) or its first
        for at in (starts[bad], ends[bad] - 1):
            damaged = buf.copy()
            damaged[at] ^= 1
            assert crc.first_mismatch(damaged, starts, ends, stored) == bad


def test_the_shift_tables_join_crcs_as_appending_bytes_does() -> None:
    # the tables alone, without the instruction: crc(A + B) is crc(A) moved past |B| zero bytes, XOR crc(B)
    rng = np.random.default_rng(3)
    for block, table in ((K.LONG, K.LONG_SHIFT), (K.SHORT, K.SHORT_SHIFT)):
        a, b = rng.bytes(100), rng.bytes(block)
        c = crc32c.crc32c(a)
        moved = int(table[0, c & 255] ^ table[1, (c >> 8) & 255] ^ table[2, (c >> 16) & 255] ^ table[3, c >> 24])
        assert moved ^ crc32c.crc32c(b) == crc32c.crc32c(a + b)


def _segment(batches: int) -> bytes:
    log = LogBuilder()
    for i in range(batches):
        log.batch([rec(f"k{i}-{j}", "v" * (i * 37 % 5000)) for j in range(3)])
    return b"".join(encode_batches(log.table()).buffers)


@pytest.mark.skipif(not K.HARDWARE, reason="this processor (or numba's CPU setting) has no CRC32 instruction")
def test_the_encoder_writes_the_same_bytes_with_either(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = []
    for hardware in (False, True):
        monkeypatch.setattr(K, "HARDWARE", hardware)
        outputs.append(_segment(40))
    assert outputs[0] == outputs[1]
    headers = scan_batches(outputs[0])
    data = np.frombuffer(outputs[0], np.uint8)
    assert crc.first_mismatch(data, headers.position + 21, headers.position + headers.size, headers.crc) == -1


@pytest.mark.skipif(not K.HARDWARE, reason="this processor (or numba's CPU setting) has no CRC32 instruction")
def test_values_copied_from_their_source_get_the_same_crcs_with_either(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values that are references are copied into the new batches after the rest of them: the CRCs follow."""
    source = _segment(40)
    keep = pa.array(np.arange(120) % 3 != 1)  # every batch rewritten, none copied whole
    copied = decode_segment_bytes(source, segment_base_offset=0).filter(keep)
    referenced = decode_segment_and_headers(source, segment_base_offset=0, value_refs=True)[0].filter(keep)
    want = encode_batches(copied).to_bytes()
    for hardware in (False, True):
        monkeypatch.setattr(K, "HARDWARE", hardware)
        assert encode_batches(referenced, sources={0: source}).to_bytes() == want
    headers = scan_batches(want)
    data = np.frombuffer(want, np.uint8)
    assert crc.first_mismatch(data, headers.position + 21, headers.position + headers.size, headers.crc) == -1


def test_a_batch_with_a_wrong_crc_is_named_with_both_values(instruction: bool) -> None:
    data = bytearray(_segment(6))
    headers = scan_batches(bytes(data))
    at = int(headers.position[4])
    data[at + headers.size[4] - 1] ^= 0x40  # the last byte of the fifth batch (its last record's header count)
    with pytest.raises(CrcMismatchError) as info:
        decode_segment_bytes(bytes(data), path="x.log")
    actual = crc32c.crc32c(bytes(data[at + 21:at + headers.size[4]]))
    assert info.value.position == at and info.value.offset == int(headers.base_offset[4])
    assert f"stored {int(headers.crc[4]):#010x}, computed {actual:#010x}" in str(info.value)
    assert int.from_bytes(data[at + V2_CRC:at + V2_CRC + 4], "big") == int(headers.crc[4])


@pytest.mark.parametrize("machine, features, expected", [
    ("x86_64", "+sse4.2,+crc32", True), ("x86_64", "+crc32", True), ("AMD64", "+sse4.2", True),
    ("x86_64", "+sse4.2,-crc32", False), ("x86_64", "-sse4.2,-crc32", False), ("x86_64", "", False),
    ("aarch64", "+sse4.2,+crc32", False)])
def test_the_instruction_is_used_only_where_numba_compiles_for_it(monkeypatch: pytest.MonkeyPatch, machine: str,
                                                                   features: str, expected: bool) -> None:
    # NUMBA_CPU_FEATURES, when set, is what numba compiles for, whatever the host has: LLVM aborts the process if
    # it is asked for the instruction without the feature
    from numba.core import config

    monkeypatch.setattr(K.platform, "machine", lambda: machine)
    monkeypatch.setattr(config, "CPU_FEATURES", features)
    assert K._hardware() is expected


def test_without_a_feature_setting_the_host_s_features_decide_and_an_error_says_no(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from numba.core import codegen, config

    def unknown() -> str:
        raise RuntimeError("no host CPU features")

    monkeypatch.setattr(K.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setattr(codegen, "get_host_cpu_features", lambda: "+sse4.1,+sse4.2,+crc32")
    assert K._hardware() is True
    monkeypatch.setattr(codegen, "get_host_cpu_features", lambda: "+sse4.1,-sse4.2,-crc32")
    assert K._hardware() is False
    monkeypatch.setattr(codegen, "get_host_cpu_features", unknown)
    assert K._hardware() is False
