"""CRC-32C of many spans in one call (segment_io.crc): the processor's instruction in three interleaved streams,
and the crc32c package span by span where it is missing, against the crc32c package; and what uses it (a batch
whose CRC is wrong is found, and the encoder writes the same bytes either way)."""

from __future__ import annotations

import crc32c
import numpy as np
import pytest

from segment_io import _crc_kernels as K
from segment_io import crc
from segment_io.decode import decode_segment_bytes
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


def _spans(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 8, len(_LENGTHS))  # unaligned starts as well
    return starts, starts + np.array(_LENGTHS)


def test_every_span_s_crc_is_the_crc32c_package_s(instruction: bool) -> None:
    buf = np.random.default_rng(1).integers(0, 256, 110_000, dtype=np.uint8).tobytes()
    starts, ends = _spans(buf)
    expected = [crc32c.crc32c(buf[a:b]) for a, b in zip(starts, ends)]
    got = crc.span_crcs(buf, starts, ends)
    assert got.dtype == np.uint32 and got.tolist() == expected
    assert crc.crc_instruction() is instruction


def test_the_first_span_whose_crc_differs_is_found(instruction: bool) -> None:
    buf = np.random.default_rng(2).integers(0, 256, 110_000, dtype=np.uint8)
    starts, ends = _spans(buf.tobytes())
    stored = crc.span_crcs(buf, starts, ends)
    assert crc.first_mismatch(buf, starts, ends, stored) == -1
    for bad in (0, 17, len(starts) - 1):  # one bit of one span's last byte, where the tail loop reads it
        if ends[bad] > starts[bad]:
            damaged = buf.copy()
            damaged[ends[bad] - 1] ^= 1
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


def test_the_encoder_writes_the_same_bytes_with_either(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = []
    for hardware in (False, True) if K.HARDWARE else (False,):
        monkeypatch.setattr(K, "HARDWARE", hardware)
        outputs.append(_segment(40))
    assert len(set(outputs)) == 1
    headers = scan_batches(outputs[0])
    data = np.frombuffer(outputs[0], np.uint8)
    assert crc.first_mismatch(data, headers.position + 21, headers.position + headers.size, headers.crc) == -1


def test_a_batch_with_a_wrong_crc_is_named_with_both_values(instruction: bool) -> None:
    data = bytearray(_segment(6))
    headers = scan_batches(bytes(data))
    at = int(headers.position[4])
    data[at + headers.size[4] - 1] ^= 0x40  # the last byte of the fifth batch's last value
    with pytest.raises(CrcMismatchError) as info:
        decode_segment_bytes(bytes(data), path="x.log")
    actual = crc32c.crc32c(bytes(data[at + 21:at + headers.size[4]]))
    assert info.value.position == at and info.value.offset == int(headers.base_offset[4])
    assert f"stored {int(headers.crc[4]):#010x}, computed {actual:#010x}" in str(info.value)
    assert int.from_bytes(data[at + V2_CRC:at + V2_CRC + 4], "big") == int(headers.crc[4])
