"""The v2 record walk: each batch's CRC, scan and fill in one compiled pass (``decode_v2._fields_in_one_pass``),
its binary columns grown as batches need, gives what the scan of a whole run followed by its fill gives
(``_fields_in_two_passes``, sized exactly by the scan): the same columns, the same errors."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_io.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from segment_io.decode import decode_key_hashes_bytes, decode_segment_and_headers, decode_segment_bytes
from segment_io.encode import encode_batches
from segment_io.errors import CorruptRecordError
from tests.support.builders import LogBuilder, rec
from tests.support.damage import walk_in_two_passes


def _segment(batches: list[list], codec: int = NONE) -> bytes:
    log = LogBuilder()
    for records in batches:
        log.batch(records, codec=codec)
    return encode_batches(log.table()).to_bytes()


def _late_growth() -> list[list]:
    """Batches whose keys and headers start small (or absent) and grow along the segment, so the buffers sized
    from the first batches are short again and again."""
    rng = random.Random(7)
    batches = [[rec(b"k%d" % i, b"v" * 30) for i in range(8)]]  # no headers at all
    for b in range(1, 30):
        batches.append([rec(None if i == 3 else rng.randbytes(b * 40), None if i == 5 else rng.randbytes(50),
                            headers=[(f"h{j}" * b, None if j == 1 else rng.randbytes(b * 8)) for j in range(b % 7)])
                        for i in range(6)])
    return batches


@pytest.mark.parametrize("codec", [NONE, LZ4, ZSTD], ids=["none", "lz4", "zstd"])
def test_growing_buffers_give_what_exact_ones_give(monkeypatch: pytest.MonkeyPatch, codec: int) -> None:
    data = _segment(_late_growth(), codec)
    one = decode_segment_bytes(data)
    with monkeypatch.context() as m:
        walk_in_two_passes(m)
        assert decode_segment_bytes(data).equals(one)
    headers = one.column("headers").to_pylist()
    assert headers[0] == [] and max(len(h) for h in headers) == 6 and one.column("key").null_count == 29


def test_value_refs_as_the_cleaner_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys copied, values as references into the segment, headers copied: the compaction task's decode."""
    data = _segment(_late_growth())
    one, hdr = decode_segment_and_headers(data, value_refs=True)
    walk_in_two_passes(monkeypatch)
    two, _ = decode_segment_and_headers(data, value_refs=True)
    assert one.equals(two) and one.num_rows == 8 + 29 * 6 and len(hdr.position) == 30


@given(st.lists(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                                   st.one_of(st.none(), st.binary(max_size=80)),
                                   st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=9))),
                                            max_size=4)),
                         min_size=1, max_size=6), min_size=1, max_size=12),
       st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
       st.lists(st.sampled_from(["key", "value", "headers", "timestamp"]), max_size=3))
@settings(max_examples=60, deadline=None)
def test_any_records_and_columns(batches: list, codec: int, columns: list[str]) -> None:
    data = _segment([[rec(k, v, headers=h) for k, v, h in b] for b in batches], codec)
    cols = ["offset", *dict.fromkeys(columns)]
    with pytest.MonkeyPatch.context() as m:
        walk_in_two_passes(m)
        two = decode_segment_bytes(data, columns=cols)
    one = decode_segment_bytes(data, columns=cols)
    assert one.equals(two)
    if "key" in cols:
        assert one.column("key").to_pylist() == [k for b in batches for k, _, _ in b]
    if "headers" in cols:
        assert one.column("headers").to_pylist() == [[{"key": hk, "value": hv} for hk, hv in h]
                                                     for b in batches for _, _, h in b]


def _damaged_late() -> bytes:
    """The segment of :func:`_late_growth` with a key length in batch 20 made longer than its record, its CRC
    made to match: only the record walk can find it, after the buffers grew."""
    import struct

    import crc32c

    from segment_io.format import scan_batches

    data = bytearray(_segment(_late_growth()))
    hdr = scan_batches(bytes(data))
    pos = int(hdr.position[20])
    # the first record: length varint, attributes, timestamp delta 0, offset delta 0, then the key length
    p = pos + 61
    while data[p] & 0x80:
        p += 1
    p += 1 + 1 + 1 + 1
    data[p] = 0x7E  # key length 63, more than the record holds after it
    end = pos + int(hdr.size[20])
    struct.pack_into(">I", data, pos + 17, crc32c.crc32c(bytes(data[pos + 21:end])))
    return bytes(data)


def test_the_same_error_as_thewalk_in_two_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _damaged_late()
    with pytest.raises(CorruptRecordError) as one:
        decode_segment_bytes(data, path="/x/00000000000000000000.log")
    walk_in_two_passes(monkeypatch)
    with pytest.raises(CorruptRecordError) as two:
        decode_segment_bytes(data, path="/x/00000000000000000000.log")
    assert str(one.value) == str(two.value) and type(one.value) is type(two.value)
    assert "record 0" in str(one.value) and "/x/00000000000000000000.log" in str(one.value)


@pytest.mark.parametrize("decode", [decode_segment_bytes, decode_key_hashes_bytes], ids=["records", "key hashes"])
def test_a_count_past_what_the_bytes_hold_allocates_nothing_for_it(decode) -> None:
    """A batch that declares 2^31 - 1 records in a few bytes: rows are sized by what the bytes can hold (not 16 GB
    of offsets, which an overcommitting kernel would grant untouched, so the peak is read from numpy's traced
    allocations), and the scan names the count."""
    import struct
    import tracemalloc

    import crc32c

    data = bytearray(_segment([[rec(b"k", b"v")]]))
    struct.pack_into(">i", data, 57, 2**31 - 1)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="declares 2147483647 records"):
            decode(bytes(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_the_table_owns_no_more_than_it_shows() -> None:
    """Grown buffers are cut to what was written: a column's data buffer is the size of its bytes, not of the
    room it grew to."""
    data = _segment([[rec(b"k%d" % i, b"x" * 2000) for i in range(20)] for _ in range(10)])
    keys = decode_segment_bytes(data, columns=["key"]).column("key").chunk(0)
    assert keys.buffers()[2].size == sum(len(b"k%d" % i) for i in range(20)) * 10
    assert isinstance(keys, pa.BinaryArray)
