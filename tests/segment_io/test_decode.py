"""Decoder behaviour: corruption reporting, truncation, options, file/URI handling and the public API."""

from __future__ import annotations

import random
import struct

import crc32c
import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segment_io import crc, decode_v2, errors
from segment_io.decode import (
    control_record_type,
    decode_key_hashes_bytes,
    decode_segment_bytes,
    hash_keys,
    iter_segment,
    read_key_hashes,
    read_segment,
    verify_segment_crcs,
)
from segment_io.format import ATTR_CONTROL, ATTR_TRANSACTIONAL, scan_batches
from segment_io.schema import KEY_HASH_SCHEMA, RECORD_SCHEMA, project
from tests.support.damage import assert_located, backwards_offsets
from tests.support.kafka_python_batches import rewrite_header, v2_batch

COUNTS = (7, 1, 60, 5)
BASES = (0, 40, 1000, 5000)


def _records(n: int, seed: int) -> list:
    rng = random.Random(seed)
    return [(b"key-%d" % (i % 5), (rng.randbytes(4) * 20)[: rng.randrange(0, 60)], [], 1_000 + i)
            for i in range(n)]


@pytest.fixture(scope="module")
def batches() -> list[bytes]:
    return [v2_batch(codec, _records(n, i), base_offset=base)
            for i, (n, base, codec) in enumerate(zip(COUNTS, BASES, (0, 1, 0, 0)))]


@pytest.fixture(scope="module")
def segment(batches: list[bytes]) -> bytes:
    return b"".join(batches)


def _positions(batches: list[bytes]) -> list[int]:
    return [sum(len(b) for b in batches[:i]) for i in range(len(batches))]


def _resign(batch: bytearray) -> bytes:
    """Recompute a v2 batch's CRC after editing it, so the decoder gets past the CRC check."""
    return rewrite_header(bytes(batch))


# ---- happy path ------------------------------------------------------------------------------------


def test_decodes_all_records_with_exact_schema(segment: bytes) -> None:
    table = decode_segment_bytes(segment, topic="t", partition=2, path="x.log")
    assert table.schema == RECORD_SCHEMA
    assert table.num_rows == sum(COUNTS)
    offsets = table.column("offset").to_pylist()
    assert offsets == [base + i for n, base in zip(COUNTS, BASES) for i in range(n)]
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert set(table.column("partition").to_pylist()) == {2}
    assert set(table.column("segment_base_offset").to_pylist()) == {0}
    assert table.column("key").to_pylist()[:6] == [b"key-%d" % (i % 5) for i in range(6)]


def test_projection_keeps_requested_order_and_types(segment: bytes) -> None:
    cols = ["value", "batch_position", "topic"]
    table = decode_segment_bytes(segment, columns=cols)
    assert table.schema == project(cols)
    positions = scan_batches(segment).position.tolist()
    assert sorted(set(table.column("batch_position").to_pylist())) == positions


def test_empty_segment_gives_empty_table() -> None:
    assert decode_segment_bytes(b"").schema == RECORD_SCHEMA
    assert decode_segment_bytes(b"").num_rows == 0
    assert decode_key_hashes_bytes(b"").schema == KEY_HASH_SCHEMA


def test_control_batches_can_be_left_out_and_carry_their_type(segment: bytes) -> None:
    commit_key, commit_value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 9)
    marker = v2_batch(0, [(commit_key, commit_value, [], 2_000)], base_offset=6000, transactional=True,
                      pid=3, epoch=0)
    (attrs,) = struct.unpack_from(">h", marker, 21)
    marker = rewrite_header(marker, attributes=attrs | ATTR_CONTROL | ATTR_TRANSACTIONAL)
    data = segment + marker
    full = decode_segment_bytes(data)
    assert full.num_rows == sum(COUNTS) + 1
    assert full.column("control").to_pylist()[-1] is True
    without = decode_segment_bytes(data, include_control=False)
    assert without.num_rows == sum(COUNTS)
    assert not any(without.column("control").to_pylist())
    hashes = decode_key_hashes_bytes(data)
    assert hashes.column("control_type").to_pylist() == [-1] * sum(COUNTS) + [1]
    assert hashes.column("transactional").to_pylist()[-1] is True
    # a control batch left out is still a batch of the segment: its CRC is checked all the same
    with pytest.raises(errors.CrcMismatchError) as info:
        decode_segment_bytes(segment + _flipped_crc(marker), include_control=False)
    assert info.value.offset == 6000


def test_control_record_with_short_key_is_rejected_by_key_hash_pass() -> None:
    marker = v2_batch(0, [(b"\x00", b"", [], 1)], base_offset=9)
    (attrs,) = struct.unpack_from(">h", marker, 21)
    marker = rewrite_header(marker, attributes=attrs | ATTR_CONTROL)
    with pytest.raises(errors.InvalidLengthError) as info:
        decode_key_hashes_bytes(marker, path="m.log")
    assert (info.value.path, info.value.position, info.value.offset) == ("m.log", 0, 9)


@pytest.mark.parametrize("key, error, words", [
    (struct.pack(">hh", -1, 1), errors.CorruptRecordError, "version -1; a negative version is not a control key"),
    (b"\x00\x00\x00", errors.InvalidLengthError, "has 3 bytes; it needs 4"),
])
def test_control_key_rules_are_the_same_for_the_key_hash_pass_and_for_key_bytes(key, error, words) -> None:
    # Kafka's ControlRecordType.parseTypeId: at least 4 bytes, a version >= 0; a newer version reads as 0
    marker = rewrite_header(v2_batch(0, [(key, b"", [], 1)], base_offset=9), attributes=ATTR_CONTROL)
    with pytest.raises(error, match=words) as info:
        decode_key_hashes_bytes(marker, path="m.log")
    assert (info.value.path, info.value.offset) == ("m.log", 9)
    with pytest.raises(ValueError, match=words):
        control_record_type(key)
    assert control_record_type(struct.pack(">hhh", 7, 1, 99)) == 1
    assert control_record_type(struct.pack(">hh", 0, -2)) == -2


def test_header_key_that_is_not_utf8_is_corruption() -> None:
    batch = bytearray(v2_batch(0, [(b"k", b"v", [("hé", b"x")], 1)], base_offset=0))
    at = bytes(batch).index("hé".encode())
    batch[at + 1] = 0xFF  # breaks the two-byte sequence of 'é'
    with pytest.raises(errors.CorruptRecordError, match="UTF-8"):
        decode_segment_bytes(_resign(batch))


# ---- corruption ------------------------------------------------------------------------------------


def test_crc_flip_names_batch(batches: list[bytes]) -> None:
    bad = bytearray(batches[2])
    bad[17] ^= 0x01
    data = b"".join(batches[:2]) + bytes(bad) + batches[3]
    with pytest.raises(errors.CrcMismatchError) as info:
        decode_segment_bytes(data, path="seg.log")
    assert_located(info.value, "seg.log", _positions(batches)[2], BASES[2])
    assert decode_segment_bytes(data, verify_crc=False).num_rows == sum(COUNTS)
    problems = verify_segment_crcs(data, path="seg.log")
    assert [(type(p), p.position) for p in problems] == [(errors.CrcMismatchError, _positions(batches)[2])]


def _flipped_crc(batch: bytes) -> bytes:
    bad = bytearray(batch)
    bad[17] ^= 0x01
    return bytes(bad)


@pytest.mark.parametrize("earlier_problem", ["record count", "payload that does not decompress"])
def test_a_crc_mismatch_is_reported_before_a_problem_in_an_earlier_batch(batches: list[bytes],
                                                                         earlier_problem: str) -> None:
    """The scan checks an uncompressed batch's CRC as it reaches it; a problem met before (in an earlier batch's
    records, or a payload that does not decompress) still gives way to the CRC error, as when every CRC was
    checked first."""
    if earlier_problem == "record count":
        first = 0  # declares one record more than it holds (its CRC fits)
        earlier = rewrite_header(batches[0], count=COUNTS[0] + 1)
    else:
        first = 1  # gzip: its compressed bytes garbled (its CRC fits)
        garbled = bytearray(batches[1])
        garbled[70:90] = bytes(20)
        earlier = _resign(garbled)
    parts = list(batches)
    parts[first] = earlier
    without_crc_problem = b"".join(parts)
    with pytest.raises(errors.CorruptRecordError) as met:
        decode_segment_bytes(without_crc_problem)
    assert not isinstance(met.value, errors.CrcMismatchError) and met.value.offset == BASES[first]
    parts[3] = _flipped_crc(batches[3])
    data = b"".join(parts)
    for decode in (decode_segment_bytes, decode_key_hashes_bytes):
        with pytest.raises(errors.CrcMismatchError) as info:
            decode(data, path="seg.log")
        assert_located(info.value, "seg.log", _positions(batches)[3], BASES[3])


@pytest.mark.skipif(not crc.crc_instruction(), reason="the scan checks CRCs with the CRC32 instruction only")
def test_the_scan_itself_checks_uncompressed_batches_crcs(batches: list[bytes],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing checking CRCs before the records are read, an uncompressed batch's bad CRC is still the
    error: the scan checks it, and says what it computed."""
    monkeypatch.setattr(decode_v2, "check_v2_crcs", lambda seg, batches: None)
    data = b"".join(batches[:2]) + _flipped_crc(batches[2]) + batches[3]
    for decode in (decode_segment_bytes, decode_key_hashes_bytes):
        with pytest.raises(errors.CrcMismatchError) as info:
            decode(data, path="seg.log")
        assert_located(info.value, "seg.log", _positions(batches)[2], BASES[2])
        start = _positions(batches)[2]
        assert f"computed {crc32c.crc32c(data[start + 21:start + len(batches[2])]):#010x}" in str(info.value)
    assert decode_segment_bytes(data, verify_crc=False).num_rows == sum(COUNTS)


def test_payload_flip_is_crc_error_even_when_truncation_allowed(batches: list[bytes]) -> None:
    bad = bytearray(batches[0])
    bad[70] ^= 0x40
    data = bytes(bad) + b"".join(batches[1:])
    with pytest.raises(errors.CrcMismatchError):
        decode_segment_bytes(data, allow_truncated_tail=True)


def _varint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (its value, where it ends)."""
    z, shift = 0, 0
    while True:
        z |= (data[pos] & 0x7F) << shift
        shift += 7
        pos += 1
        if not data[pos - 1] & 0x80:
            return (z >> 1) ^ -(z & 1), pos


def _offset_delta_at(batch: bytes | bytearray, record: int) -> int:
    """Where record ``record``'s offset delta varint lies in an uncompressed v2 batch (length, attributes, timestamp
    delta, then the offset delta)."""
    pos = 61
    for _ in range(record):
        length, start = _varint(batch, pos)
        pos = start + length
    _, attributes = _varint(batch, pos)
    return _varint(batch, attributes + 1)[1]


@pytest.mark.parametrize(("delta", "why"), [
    (0x02 - 2, "does not rise above the record before it's"),  # record 1 gets delta 0, as record 0 has
    (0x01, "is negative"),  # zigzag 1 is -1
    (0x7E, "lies past the batch's last offset delta 6 (its offsets end at 6)"),  # 63
])
def test_a_record_offset_out_of_its_batchs_order_is_refused_naming_batch_and_record(batches: list[bytes],
                                                                                    delta: int, why: str) -> None:
    """A record offset that does not rise inside its batch, or lies outside the batch's range, with a valid CRC (a
    tool's rewrite, not a broker's) is the segment's error, located, and not one the rewrite's writer meets later
    without a file; the key-hash pass of the map refuses it too."""
    bad = bytearray(batches[0])  # uncompressed: records 0..6 at offsets 0..6
    at = _offset_delta_at(bad, 1)
    assert bad[at] == 0x02  # record 1's delta is 1
    bad[at] = delta
    data = _resign(bad) + b"".join(batches[1:])
    for read in (decode_segment_bytes, decode_key_hashes_bytes):
        with pytest.raises(errors.OffsetOrderError) as info:
            read(data, path="p")
        assert_located(info.value, "p", 0, BASES[0])
        assert why in str(info.value) and "record 1" in str(info.value), info.value


def test_bad_magic(batches: list[bytes]) -> None:
    bad = bytearray(batches[1])
    bad[16] = 7
    data = batches[0] + bytes(bad) + b"".join(batches[2:])
    with pytest.raises(errors.InvalidMagicError) as info:
        decode_segment_bytes(data, path="p")
    assert_located(info.value, "p", _positions(batches)[1], BASES[1])


def test_absurd_varint_in_record(batches: list[bytes]) -> None:
    bad = bytearray(batches[2])
    bad[61:72] = b"\xff" * 11  # first record's length varint never ends
    with pytest.raises(errors.InvalidVarintError) as info:
        decode_segment_bytes(_resign(bad), path="p")
    assert_located(info.value, "p", 0, BASES[2])
    assert "record 0" in info.value.detail


def test_record_length_beyond_batch(batches: list[bytes]) -> None:
    bad = bytearray(batches[2])
    bad[61] = 0x7E  # zig-zag 63, then continues: a length far past the batch end
    bad[62] = 0x7F
    with pytest.raises(errors.InvalidLengthError):
        decode_segment_bytes(_resign(bad))


@pytest.mark.parametrize("delta", [1, -1])
def test_record_count_mismatch(batches: list[bytes], delta: int) -> None:
    bad = rewrite_header(batches[2], count=COUNTS[2] + delta)
    data = batches[0] + batches[1] + bad
    with pytest.raises(errors.RecordCountMismatchError) as info:
        decode_segment_bytes(data, path="p")
    assert_located(info.value, "p", _positions(batches)[2], BASES[2])
    with pytest.raises(errors.RecordCountMismatchError):
        decode_key_hashes_bytes(data)


def test_negative_record_count(batches: list[bytes]) -> None:
    with pytest.raises(errors.RecordCountMismatchError):
        decode_segment_bytes(rewrite_header(batches[0], count=-5))


def test_garbage_compressed_payload(batches: list[bytes]) -> None:
    bad = bytearray(batches[1])  # the gzip batch
    bad[61:] = random.Random(1).randbytes(len(bad) - 61)
    data = batches[0] + _resign(bad)
    with pytest.raises(errors.DecompressionError) as info:
        decode_segment_bytes(data, path="p")
    assert_located(info.value, "p", len(batches[0]), BASES[1])


def test_unknown_codec(batches: list[bytes]) -> None:
    (attrs,) = struct.unpack_from(">h", batches[0], 21)
    with pytest.raises(errors.UnsupportedCodecError):
        decode_segment_bytes(rewrite_header(batches[0], attributes=attrs | 7))


def test_truncated_tail_raises_or_returns_whole_batches(segment: bytes, batches: list[bytes]) -> None:
    cut = segment[: len(segment) - 10]
    with pytest.raises(errors.TruncatedBatchError) as info:
        decode_segment_bytes(cut, path="p")
    assert_located(info.value, "p", _positions(batches)[3], BASES[3])
    table = decode_segment_bytes(cut, allow_truncated_tail=True)
    assert table.num_rows == sum(COUNTS[:3])
    assert decode_key_hashes_bytes(cut, allow_truncated_tail=True).num_rows == sum(COUNTS[:3])
    tiny = segment[: _positions(batches)[3] + 5]  # not even a whole offset field
    assert decode_segment_bytes(tiny, allow_truncated_tail=True).num_rows == sum(COUNTS[:3])


def test_corruption_in_the_middle_is_not_truncation(batches: list[bytes]) -> None:
    bad = rewrite_header(batches[1], count=COUNTS[1] + 1)
    data = batches[0] + bad + batches[2]
    with pytest.raises(errors.RecordCountMismatchError) as info:
        decode_segment_bytes(data, allow_truncated_tail=True)
    assert not isinstance(info.value, errors.TruncatedBatchError)


@pytest.mark.parametrize("overlap", [False, True])
def test_offsets_going_backwards_inside_a_segment_are_corrupt_input_naming_file_byte_and_offset(tmp_path,
                                                                                             overlap) -> None:
    # every batch's CRC is valid: only their order is wrong, which nothing but the order check sees
    segment, position, offset = backwards_offsets(tmp_path / "t-0", overlap=overlap)
    assert verify_segment_crcs(segment.read_bytes(), path=str(segment)) == []
    for read in (read_segment, read_key_hashes, lambda path: list(iter_segment(path))):
        with pytest.raises(errors.OffsetOrderError) as info:
            read(str(segment))
        assert isinstance(info.value, errors.CorruptRecordError)
        assert (info.value.path, info.value.position, info.value.offset) == (str(segment), position, offset)
        assert str(info.value).startswith(f"{segment}, byte {position}, offset {offset}: offsets go backwards")
        assert "(byte 81) ends at offset 3" in str(info.value)


# ---- files, URIs and streaming ----------------------------------------------------------------------


def test_read_segment_names_topic_partition_and_base_from_path(tmp_path, segment: bytes) -> None:
    part = tmp_path / "my.topic-with-dash-3"
    part.mkdir()
    path = part / "00000000000000000000.log"
    path.write_bytes(segment)
    table = read_segment(path)
    assert set(table.column("topic").to_pylist()) == {"my.topic-with-dash"}
    assert set(table.column("partition").to_pylist()) == {3}
    assert read_segment(path, topic="other", partition=9).column("partition")[0].as_py() == 9
    plain = tmp_path / "seg.bin"
    plain.write_bytes(segment[len(v2_batch(0, _records(7, 0), base_offset=0)):])
    anonymous = read_segment(plain)
    assert set(anonymous.column("topic").to_pylist()) == {""}
    assert set(anonymous.column("partition").to_pylist()) == {-1}
    assert set(anonymous.column("segment_base_offset").to_pylist()) == {BASES[1]}
    assert read_key_hashes(path).num_rows == sum(COUNTS)


def test_read_segment_through_a_storage(segment: bytes) -> None:
    class OneFile:
        def read(self, uri: str) -> bytes:
            assert uri == "s3://bucket/logs/t-0/00000000000000000000.log"
            return segment

    table = read_segment("s3://bucket/logs/t-0/00000000000000000000.log", storage=OneFile())  # type: ignore[arg-type]
    assert (table.column("topic")[0].as_py(), table.column("partition")[0].as_py()) == ("t", 0)
    with pytest.raises(errors.CrcMismatchError) as info:
        bad = bytearray(segment)
        bad[20] ^= 1

        class BadFile:
            def read(self, uri: str) -> bytes:
                return bytes(bad)

        read_segment("s3://b/t-0/00000000000000000000.log", storage=BadFile())  # type: ignore[arg-type]
    assert info.value.path == "s3://b/t-0/00000000000000000000.log"


def test_iter_segment_streams_whole_batches(tmp_path, segment: bytes) -> None:
    path = tmp_path / "t-0" / "00000000000000000000.log"
    path.parent.mkdir()
    path.write_bytes(segment)
    chunks = list(iter_segment(path, batch_rows=8, columns=["offset", "batch_base_offset"]))
    assert all(isinstance(c, pa.RecordBatch) for c in chunks)
    assert [c.num_rows for c in chunks] == [8, 60, 5]  # 7+1 fill the first chunk; 60 is never split
    whole = read_segment(path, columns=["offset", "batch_base_offset"])
    assert pa.Table.from_batches(chunks).equals(whole)
    for c in chunks:  # every chunk starts at a Kafka batch boundary
        assert c.column(0)[0].as_py() == c.column(1)[0].as_py()
    assert [c.num_rows for c in iter_segment(path, batch_rows=1_000_000)] == [sum(COUNTS)]


def test_a_local_file_is_mapped_not_read_whole(tmp_path, segment: bytes, monkeypatch) -> None:
    """read_segment, iter_segment and read_key_hashes decode a local file through a mapping: reading it whole
    into fresh memory first cost a third of the time (issue 24). Its pages are the decoder's input, and the
    tables hold copies, so they outlive the mapping; a missing file is a located NotFoundError."""
    import pathlib

    from segment_io.storage.local import LocalStorage

    path = tmp_path / "t-0" / "00000000000000000000.log"
    path.parent.mkdir()
    path.write_bytes(segment)
    expected = decode_segment_bytes(segment, topic="t", partition=0, segment_base_offset=0)
    expected_hashes = decode_key_hashes_bytes(segment)

    def whole(*args, **kwargs):
        raise AssertionError("the file was read whole")

    monkeypatch.setattr(pathlib.Path, "read_bytes", whole)
    monkeypatch.setattr(LocalStorage, "read", whole)
    table = read_segment(path)
    assert table.equals(expected)
    assert pa.Table.from_batches(list(iter_segment(str(path), batch_rows=10))).equals(expected)
    assert read_key_hashes(path).equals(expected_hashes)
    monkeypatch.undo()
    with pytest.raises(errors.NotFoundError) as info:
        read_segment(tmp_path / "t-0" / "00000000000000000099.log")
    assert "00000000000000000099.log" in str(info.value)


def test_offsets_only_projection_does_not_need_key_or_value(segment: bytes) -> None:
    table = decode_segment_bytes(segment, columns=["timestamp"])
    assert table.schema.names == ["timestamp"]
    assert table.column("timestamp").to_pylist()[:3] == [1000, 1001, 1002]
    assert np.all(np.diff(decode_segment_bytes(segment, columns=["offset"]).column(0).to_numpy()) > 0)


# ---- the key hash -----------------------------------------------------------------------------------


@given(st.lists(st.one_of(st.none(), st.binary(max_size=70)), max_size=40))
def test_hash_keys_is_murmur3_x64_128_seed0(keys: list[bytes | None]) -> None:
    hi, lo = hash_keys(pa.array(keys, pa.binary()))
    mask = (1 << 64) - 1
    for key, h, low in zip(keys, hi.tolist(), lo.tolist()):
        if key is None:
            assert (h, low) == (0, 0)
        else:
            assert ((h & mask) << 64) | (low & mask) == mmh3.hash128(key, 0, signed=False)


def test_hash_keys_accepts_sliced_and_chunked_columns() -> None:
    keys = pa.array([b"a", None, b"bb", b"ccc", b""], pa.binary())
    hi, lo = hash_keys(keys)
    chunked = pa.chunked_array([keys.slice(0, 2), keys.slice(2)])
    hi2, lo2 = hash_keys(chunked)
    assert hi.tolist() == hi2.tolist() and lo.tolist() == lo2.tolist()
    shi, slo = hash_keys(keys.slice(2, 2))
    assert shi.tolist() == hi[2:4].tolist() and slo.tolist() == lo[2:4].tolist()
