"""scan_batches: every header column read for v2 batches and legacy messages, mixed in one file; the framing walk
against a plain one."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_io.errors import InvalidLengthError, InvalidMagicError, TruncatedBatchError
from segment_io.format import batch_positions, scan_batches
from tests.support.hypothesis_budget import examples
from tests.support.legacy_messages import legacy_message


def _v2_batch(base: int, *, last_delta: int, count: int, attrs: int, base_ts: int, max_ts: int, pid: int,
              epoch: int, seq: int, leader_epoch: int, crc: int, payload: bytes) -> bytes:
    # baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
    # maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount (Kafka's DefaultRecordBatch layout)
    length = 49 + len(payload)
    return struct.pack(">qiibIhiqqqhii", base, length, leader_epoch, 2, crc, attrs, last_delta, base_ts, max_ts,
                       pid, epoch, seq, count) + payload



@pytest.mark.parametrize("batches", [1, 32, 33, 200])  # read one by one up to format._FEW_BATCHES, then gathered
@pytest.mark.parametrize("legacy", [False, True])
def test_batch_bounds_are_what_the_header_scan_reads(batches: int, legacy: bool) -> None:
    from segment_io.format import batch_bounds

    data = b"".join(_v2_batch(10 * i, last_delta=3, count=4, attrs=0, base_ts=1_000 + i, max_ts=(i * 7919) % 1_000,
                              pid=-1, epoch=-1, seq=-1, leader_epoch=0, crc=0, payload=b"x" * i)
                    for i in range(batches))
    if legacy:  # a legacy message last: read with every header column, its timestamp the largest
        data += legacy_message(1, 10 * batches, b"k", b"v", timestamp=5_000)
    h = scan_batches(data)
    assert batch_bounds(data) == (int(h.base_offset[0]), int(h.last_offset[-1]), int(h.max_timestamp.max()))
    assert batch_bounds(b"") is None
    with pytest.raises(TruncatedBatchError):
        batch_bounds(data[:-1], allow_truncated_tail=False)

def test_every_column_of_mixed_v2_and_legacy_batches() -> None:
    a = _v2_batch(100, last_delta=4, count=5, attrs=0x18, base_ts=1_700_000_000_000, max_ts=1_700_000_000_009,
                  pid=(1 << 40) + 7, epoch=-3, seq=123456, leader_epoch=9, crc=0xFEDCBA98, payload=b"x" * 7)
    v1 = legacy_message(1, 105, b"k", b"v", attributes=0x0A, timestamp=1_650_000_000_123)  # snappy bit + append
    b = _v2_batch(106, last_delta=0, count=0, attrs=0x60, base_ts=-1, max_ts=42, pid=-1, epoch=-1, seq=-1,
                  leader_epoch=-1, crc=1, payload=b"")
    v0 = legacy_message(0, 107, None, b"")  # the shortest message there is, ending the file: read up to its last byte
    data = a + v1 + b + v0
    h = scan_batches(data)
    assert h.truncated_tail == 0
    assert h.position.tolist() == [0, len(a), len(a) + len(v1), len(a) + len(v1) + len(b)]
    assert h.size.tolist() == [len(a), len(v1), len(b), len(v0)]
    assert h.magic.tolist() == [2, 1, 2, 0]
    assert h.base_offset.tolist() == [100, 105, 106, 107]
    assert h.last_offset.tolist() == [104, 105, 106, 107]
    assert h.attributes.tolist() == [0x18, 0x0A, 0x60, 0]
    assert h.base_timestamp.tolist() == [1_700_000_000_000, 1_650_000_000_123, -1, -1]
    assert h.max_timestamp.tolist() == [1_700_000_000_009, 1_650_000_000_123, 42, -1]
    assert h.producer_id.tolist() == [(1 << 40) + 7, -1, -1, -1]
    assert h.producer_epoch.tolist() == [-3, -1, -1, -1]
    assert h.base_sequence.tolist() == [123456, -1, -1, -1]
    assert h.partition_leader_epoch.tolist() == [9, -1, -1, -1]
    assert h.record_count.tolist() == [5, -1, 0, 1]  # a compressed wrapper's count is unknown
    assert h.crc.tolist() == [0xFEDCBA98, struct.unpack(">I", v1[12:16])[0], 1, struct.unpack(">I", v0[12:16])[0]]
    expected_types = {"position": np.int64, "size": np.int32, "base_offset": np.int64, "last_offset": np.int64,
                      "magic": np.int8, "attributes": np.int16, "base_timestamp": np.int64,
                      "max_timestamp": np.int64, "producer_id": np.int64, "producer_epoch": np.int16,
                      "base_sequence": np.int32, "partition_leader_epoch": np.int32, "record_count": np.int32,
                      "crc": np.uint32}
    for name, dtype in expected_types.items():
        column = getattr(h, name)
        assert column.dtype == np.dtype(dtype), name
        assert column.dtype.isnative, name


def test_v2_only_and_empty_scans_keep_the_column_types() -> None:
    batch = _v2_batch(0, last_delta=2, count=3, attrs=0, base_ts=5, max_ts=6, pid=-1, epoch=-1, seq=-1,
                      leader_epoch=0, crc=0, payload=b"abc")
    h = scan_batches(batch * 2 + batch[:20])
    assert h.position.tolist() == [0, len(batch)]
    assert h.truncated_tail == 20
    assert h.size.dtype == np.int32 and h.crc.dtype == np.uint32 and h.magic.tolist() == [2, 2]
    empty = scan_batches(b"")
    assert len(empty) == 0 and empty.base_offset.dtype == np.int64 and empty.crc.dtype == np.uint32


# ---- the framing walk: the compiled walk against a plain one, on bytes that frame and bytes that do not ----


def _reference_walk(data: bytes, start: int) -> tuple[list[int], list[int], int, tuple[str, int] | None]:
    """Kafka's framing rules walked one batch at a time in plain Python: the batch starts and magics, the
    incomplete tail, and the first problem (its kind and batch position)."""
    positions, magics, pos = [], [], start
    while pos < len(data):
        if not any(data[pos:]) and len(data) - pos >= 17 and not (positions and magics[-1] == 2 and _crc_fails(
                data, positions[-1], pos)):
            return positions, magics, len(data) - pos, None  # zeros to the end: a tail (a broker preallocated)
        if len(data) - pos < 17:
            return positions, magics, len(data) - pos, None
        _, size, _, magic = struct.unpack_from(">qiib", data, pos)
        if magic not in (0, 1, 2):
            return positions, magics, 0, ("magic", pos)
        if size < {0: 14, 1: 22, 2: 49}[magic] or size > 1 << 30:
            return positions, magics, 0, ("size", pos)
        if pos + 12 + size > len(data):
            return positions, magics, len(data) - pos, None
        positions.append(pos)
        magics.append(magic)
        pos += 12 + size
    return positions, magics, 0, None


def _crc_fails(data: bytes, batch: int, end: int) -> bool:
    """Whether the v2 batch at ``batch`` has a CRC that does not hold over its bytes up to ``end``."""
    return crc32c.crc32c(data[batch + 21:end]) != struct.unpack_from(">I", data, batch + 17)[0]


def _walks_agree(data: bytes, start: int) -> int:
    """Assert that the walk finds what the plain walk finds (the same batches, or the same first problem at the
    same batch, named with its offset); returns the incomplete tail's length."""
    positions, magics, tail, problem = _reference_walk(data, start)
    try:
        found, found_magics, found_tail = batch_positions(data, start=start)
    except (InvalidMagicError, InvalidLengthError) as exc:
        assert problem is not None
        assert (exc.position, exc.offset, type(exc)) == _expected_error(data, positions, magics, problem), exc
        return 0
    assert problem is None
    assert (found.tolist(), found_magics.tolist(), found_tail) == (positions, magics, tail)
    assert found.dtype == np.int64 and found_magics.dtype == np.int8
    return tail


def _expected_error(data: bytes, positions: list[int], magics: list[int],
                    problem: tuple[str, int]) -> tuple[int, int | None, type]:
    """Where the walk's error points, derived by hand: a v2 batch before the problem whose CRC does not hold up to
    where its length says it ends is the damaged one (its length field, which no CRC covers); else the problem's
    own batch, with the offset read there when it follows on from the intact batch before it (by less than 2**31),
    else the offset after that batch, or (first in the walk) the offset read there when it can be one."""
    kind, pos = problem
    kind_error = InvalidMagicError if kind == "magic" else InvalidLengthError
    if not positions:
        offset = struct.unpack_from(">q", data, pos)[0]
        return pos, (offset if offset >= 0 else None), kind_error
    prev = positions[-1]
    base = struct.unpack_from(">q", data, prev)[0]
    if magics[-1] == 2:
        if crc32c.crc32c(data[prev + 21:pos]) != struct.unpack_from(">I", data, prev + 17)[0]:
            return prev, base, InvalidLengthError
        after = base + struct.unpack_from(">i", data, prev + 23)[0] + 1
    else:
        after = base + 1
    read = struct.unpack_from(">q", data, pos)[0]
    return pos, (read if 0 <= read - after < 1 << 31 else after), kind_error


def _frames() -> st.SearchStrategy[tuple[bytes, int]]:
    v2 = st.binary(max_size=12).map(lambda p: _v2_batch(7, last_delta=0, count=1, attrs=0, base_ts=0, max_ts=0,
                                                         pid=-1, epoch=-1, seq=-1, leader_epoch=0, crc=0, payload=p))
    legacy = st.sampled_from([legacy_message(0, 3, None, b""), legacy_message(1, 4, b"k", b"value")])
    garbage = st.binary(min_size=1, max_size=30)
    # a frame whose size field or magic is off: around each magic's bounds, or any value
    sizes = st.sampled_from([-1, 0, 13, 14, 21, 22, 48, 49, 1 << 30, (1 << 30) + 1, (1 << 31) - 1]) | st.integers(
        -(1 << 31), (1 << 31) - 1)
    resized = st.tuples(st.one_of(v2, legacy), sizes).map(lambda f: f[0][:8] + struct.pack(">i", f[1]) + f[0][12:])
    remagicked = st.tuples(st.one_of(v2, legacy), st.integers(0, 255)).map(
        lambda f: f[0][:16] + bytes([f[1]]) + f[0][17:])
    pieces = st.lists(st.one_of(v2, v2, legacy, garbage, resized, remagicked), max_size=12)
    return pieces.flatmap(lambda ps: st.tuples(st.just(b"".join(ps)), st.integers(0, 3)))


@given(_frames())
@settings(max_examples=examples(2.0), deadline=None)  # cheap examples: twice the profile's
def test_the_walk_finds_what_a_plain_walk_finds(case: tuple[bytes, int]) -> None:
    data, start = case
    tail = _walks_agree(data, start)
    if tail:
        with pytest.raises(TruncatedBatchError):
            batch_positions(data, start=start, allow_truncated_tail=False)


def test_a_walk_of_more_batches_than_its_first_guess_finds_them_all() -> None:
    # 26-byte messages: 40 times more batches than the walk's first arrays hold
    message = legacy_message(0, 3, None, b"")
    data = message * (64 * 40 + 3)
    positions, magics, tail = batch_positions(data + message[:5])
    assert positions.tolist() == list(range(0, len(data), len(message)))
    assert magics.tolist() == [0] * (64 * 40 + 3) and tail == 5


@pytest.mark.parametrize("size", [-(1 << 31), -1, 0, 13, 14, 21, 22, 48, 49, 50, 1 << 30, (1 << 30) + 1, (1 << 31) - 1])
@pytest.mark.parametrize("magic", [0, 1, 2, 3, 127, 128, 255])
def test_the_walk_judges_each_magic_and_size_bound_as_a_plain_walk(magic: int, size: int) -> None:
    frame = bytearray(struct.pack(">qiib", 5, size, 0, magic - 256 if magic > 127 else magic) + bytes(60))
    _walks_agree(legacy_message(0, 3, None, b"") + bytes(frame), 0)


def _sealed(batch: bytes) -> bytes:
    """The batch with its CRC-32C computed over attributes .. end, as a producer writes it."""
    return batch[:17] + struct.pack(">I", crc32c.crc32c(batch[21:])) + batch[21:]


def _three_batches() -> list[bytes]:
    return [_sealed(_v2_batch(base, last_delta=4, count=5, attrs=0, base_ts=0, max_ts=0, pid=-1, epoch=-1, seq=-1,
                              leader_epoch=0, crc=0, payload=b"p" * 40)) for base in (1959, 1964, 1969)]


def test_a_damaged_length_field_is_named_at_its_batch_with_its_offset() -> None:
    a, b, c = _three_batches()
    damaged = bytearray(a + b + c)
    damaged[10] ^= 0x01  # the first batch's length, 256 bytes longer: the walk lands inside garbage or the tail
    for allow in (True, False):
        with pytest.raises(InvalidLengthError) as caught:
            batch_positions(bytes(damaged) + bytes(400), path="x.log", allow_truncated_tail=allow)
        e = caught.value
        assert (e.path, e.position, e.offset) == ("x.log", 0, 1959), e
        assert "length field (4 bytes at byte 8)" in str(e) and "its CRC does not hold" in str(e)


def test_a_damaged_batch_after_an_intact_one_is_named_with_the_offset_that_follows_it() -> None:
    a, b, c = _three_batches()
    damaged = bytearray(a + b + c)
    damaged[len(a):len(a) + 17] = bytes(range(200, 217))  # the second batch's offset, length and magic: garbage
    with pytest.raises(InvalidMagicError) as caught:
        batch_positions(bytes(damaged))
    e = caught.value
    assert (e.position, e.offset) == (len(a), 1964), e  # not the garbage's "offset", which is negative
    assert "after the intact batch at byte 0 (offset 1959)" in str(e)


def test_a_cut_short_last_batch_names_its_offset() -> None:
    a, b, c = _three_batches()
    with pytest.raises(TruncatedBatchError) as caught:
        batch_positions(a + b + c[:30], allow_truncated_tail=False)
    assert (caught.value.position, caught.value.offset) == (len(a) + len(b), 1969)
    with pytest.raises(TruncatedBatchError) as caught:
        batch_positions(a + b + c[:5], allow_truncated_tail=False)  # not even its offset is whole
    assert (caught.value.position, caught.value.offset) == (len(a) + len(b), None)


def test_zeros_after_the_last_batch_are_a_tail_like_a_batch_cut_short() -> None:
    """What log.preallocate leaves at the end of an active segment (and a copy taken while a broker wrote): a broker's
    recovery truncates them; so they are an incomplete tail where one is allowed, and named as zeros elsewhere."""
    a, b, c = _three_batches()
    positions, _, tail = batch_positions(a + b + c + bytes(4096))
    assert positions.tolist() == [0, len(a), len(a) + len(b)] and tail == 4096
    assert batch_positions(bytes(4096))[2] == 4096  # a preallocated segment nothing was written to yet
    with pytest.raises(TruncatedBatchError) as caught:
        batch_positions(a + b + bytes(4096), allow_truncated_tail=False)
    assert (caught.value.position, caught.value.offset) == (len(a) + len(b), 1969)
    assert "the last 4096 bytes, from byte" in str(caught.value) and "are all zero" in str(caught.value)
    # zeros followed by anything else are no tail: the damage is named where the batch should begin
    with pytest.raises(InvalidLengthError):
        batch_positions(a + bytes(4096) + b"\x01")
