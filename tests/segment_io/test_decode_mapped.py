"""Decoding a memory-mapped segment gives its pages back as it goes; the rows and headers are those of the bytes."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from segment_io.decode import decode_segment_and_headers, decode_segment_bytes
from segment_io.encode import encode_batches
from segment_io.format import scan_batches
from segment_io.generate import GenerateSpec, synthetic_table
from segment_io.schema import ref_positions
from segment_io.storage.base import release_mapped_pages
from segment_io.storage.local import LocalStorage


def _segment(tmp_path: Path) -> Path:
    table = synthetic_table(GenerateSpec(records=3_000, transactional_share=0.2, headers=True, codec=1), "t", 0)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_batches(table).to_bytes())
    return path


def test_rows_and_headers_of_a_mapped_segment_are_those_of_its_bytes(tmp_path: Path) -> None:
    path = _segment(tmp_path)
    data = path.read_bytes()
    with LocalStorage().read_mapped(str(path)) as mapped:
        assert isinstance(mapped, mmap.mmap)
        table, headers = decode_segment_and_headers(mapped, path=str(path), topic="t", partition=0)
        # released pages read back from the page cache: the mapping still shows the file
        assert bytes(mapped[:]) == data
    assert table.equals(decode_segment_bytes(data, topic="t", partition=0))
    expected = scan_batches(data)
    assert len(headers) == len(expected) > 10
    for name in ("position", "size", "base_offset", "last_offset", "record_count", "crc"):
        assert np.array_equal(getattr(headers, name), getattr(expected, name)), name


def test_release_mapped_pages_takes_whole_pages_and_ignores_what_is_not_a_mapping(tmp_path: Path) -> None:
    path = _segment(tmp_path)
    with LocalStorage().read_mapped(str(path)) as mapped:
        before = bytes(mapped[:])
        release_mapped_pages(mapped, 1, 10)  # no whole page inside: nothing to do, no error
        release_mapped_pages(mapped, mmap.PAGESIZE, 3 * mmap.PAGESIZE + 5)
        release_mapped_pages(mapped)
        assert bytes(mapped[:]) == before
    release_mapped_pages(b"not a mapping")
    release_mapped_pages(mapped)  # closed by now: left alone


def _record_key_length_at(data: bytes) -> int:
    """Where the first record's key length varint lies in a segment of one uncompressed batch whose record has a
    1-byte timestamp delta and offset delta."""
    p = 61
    while data[p] & 0x80:  # the record's length varint
        p += 1
    return p + 4  # its last byte, attributes, timestamp delta, offset delta


def _rewrite_after_the_scan(monkeypatch: pytest.MonkeyPatch, path: Path, at: int, new: bytes) -> None:
    """Make another writer put ``new`` at byte ``at`` of the file ``path`` right after the decode's scan, before its
    second pass reads the (mapped) bytes again. The decode walks a run in two passes where one pass cannot address
    it (``decode_v2._fields_in_two_passes``), as here; in one pass, a batch is filled right after its scan, in the
    same compiled call, where the same checks (the fill kernel's) stand between them."""
    from segment_io import decode_v2
    from tests.support.damage import walk_in_two_passes

    scan = decode_v2._scan
    walk_in_two_passes(monkeypatch)

    def scan_then_rewrite(seg, inp):  # type: ignore[no-untyped-def]
        totals = scan(seg, inp)
        with open(path, "r+b") as other_writer:
            other_writer.seek(at)
            other_writer.write(new)
        return totals

    monkeypatch.setattr(decode_v2, "_scan", scan_then_rewrite)


@pytest.mark.parametrize("columns", [["key"], ["key", "value", "headers"], None], ids=["key", "all", "default"])
def test_a_mapped_segment_whose_bytes_change_between_scan_and_fill_is_an_error_not_a_write_past_a_buffer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: list[str] | None) -> None:
    """The scan sizes the columns from the bytes; if another process rewrites a length in the mapped file before
    the fill walks them again (here 4 -> 63 key bytes, right after the scan), the decode says the bytes changed
    (as a CRC mismatch: the CRC no longer matches either) and writes nothing past its buffers."""
    from segment_io.errors import CorruptRecordError
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder()
    log.batch([rec(b"kkkk", b"v" * 200, headers=[("h", b"x")])])
    data = encode_batches(log.table()).to_bytes()
    at = _record_key_length_at(data)
    assert data[at] == 8  # zig-zag 4
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    _rewrite_after_the_scan(monkeypatch, path, at, b"\x7e")  # zig-zag 63
    with LocalStorage().read_mapped(str(path)) as mapped, pytest.raises(CorruptRecordError) as raised:
        decode_segment_bytes(mapped, path=str(path), columns=columns)
    assert str(path) in str(raised.value) and "byte 0" in str(raised.value)


def test_an_offset_that_changes_between_scan_and_fill_is_an_error_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan checks each record's offset delta against its batch's order and range; if the mapped file's
    delta is rewritten before the second pass reads it (here 0 -> 1, past the batch's only offset), the second
    pass says the bytes changed instead of handing an offset outside its batch to the rewrite."""
    from segment_io.errors import CorruptRecordError
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder()
    log.batch([rec(b"kkkk", b"v" * 200)])
    data = encode_batches(log.table()).to_bytes()
    at = _record_key_length_at(data) - 1  # the offset delta, right before the key's length
    assert data[at] == 0  # zig-zag 0
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    _rewrite_after_the_scan(monkeypatch, path, at, b"\x02")  # zig-zag 1
    with LocalStorage().read_mapped(str(path)) as mapped, pytest.raises(CorruptRecordError) as raised:
        decode_segment_bytes(mapped, path=str(path))
    assert str(path) in str(raised.value) and "byte 0" in str(raised.value)


def _scanned(seg: bytearray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The kernels' view of a segment of one uncompressed batch, scanned: ``(arr, dec, src, rstart, counts)`` and
    the scan's totals."""
    from segment_io import _decode_kernels as K
    from segment_io._crc_kernels import LONG_SHIFT, SHORT_SHIFT

    arr, dec = np.frombuffer(seg, np.uint8), np.zeros(0, np.uint8)
    src, rstart, counts = np.zeros(1, np.uint8), np.array([61]), np.array([1])
    totals, err = np.zeros(6, np.int64), np.zeros(5, np.int64)
    assert K.scan_records(arr, dec, src, rstart, np.array([len(seg)]), counts, np.zeros(1, np.int64), rstart - 40,
                          np.full(1, -1), LONG_SHIFT, SHORT_SHIFT, totals, err)
    return arr, dec, src, rstart, counts, totals


def test_the_key_hash_pass_stops_at_an_offset_the_scan_did_not_see() -> None:
    """The first compaction pass's fill of a batch (``_hash_batch``, right after the batch's scan in the same
    compiled call) checks each offset delta it reads again: one rewritten past its batch's last offset after the
    scan is a change, and no row is written for it."""
    from segment_io import _decode_kernels as K
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder()
    log.batch([rec(b"kkkk", b"v" * 200)])
    seg = bytearray(encode_batches(log.table()).to_bytes())
    arr, dec, src, rstart, counts, _ = _scanned(seg)
    seg[_record_key_length_at(bytes(seg)) - 1] = 2  # the bytes change: offset delta 0 -> 1
    zeros, err = np.zeros(1, np.int64), np.zeros(5, np.int64)
    offsets = np.full(1, -7, np.int64)
    ok, rows = K._hash_batch(arr, dec, src, rstart, counts, zeros, zeros, zeros, zeros, np.zeros(1, np.bool_),
                             np.zeros(1, np.bool_), offsets, np.empty(1, np.int64), np.empty(1, np.int64),
                             np.empty(1, np.int64), np.empty(1, np.bool_), np.empty(1, np.bool_),
                             np.empty(1, np.int16), err, 0, 0)
    assert not ok and rows == 0 and err[0] == K.ERR_CHANGED and offsets[0] == -7


def test_the_fill_stops_at_a_length_the_scan_did_not_see() -> None:
    """The compiled fill checks each length it reads again against what is left of its buffer."""
    from segment_io import _decode_kernels as K
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder()
    log.batch([rec(b"kkkk", b"v" * 200)])
    seg = bytearray(encode_batches(log.table()).to_bytes())
    arr, dec, src, rstart, counts, totals = _scanned(seg)
    err = np.zeros(5, np.int64)
    seg[_record_key_length_at(bytes(seg))] = 0x7E  # the bytes change: key length 4 -> 63
    whole = np.full(4 + 4096, 0xAB, np.uint8)
    k_data = whole[:int(totals[K.TOT_KEY_BYTES])]
    i64, b1, i32, u8 = np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.int32), np.empty(0, np.uint8)
    ok = K.fill_records(arr, dec, src, rstart, counts, np.zeros(1, np.int64), np.zeros(1, np.int64),
                        np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.bool_), True, False, False, False,
                        np.empty(1, np.int64), np.empty(1, np.int64), np.empty(2, np.int32), k_data,
                        np.empty(1, np.bool_), i32, u8, b1, i64, i32, i32, u8, i32, u8, b1, err)
    assert not ok and err[0] == K.ERR_CHANGED and (whole[4:] == 0xAB).all()


@pytest.mark.parametrize("new_length", [b"\xfe\x7f", b"\xca\x01"], ids=["past-the-end", "one-longer"])
def test_a_value_that_changes_between_its_sizing_and_its_copy_is_an_error_not_a_read_past_the_segment(
        monkeypatch: pytest.MonkeyPatch, new_length: bytes) -> None:
    """The encoder sizes the kept values (by the lengths the decode read), then copies them from a (mapped) source
    segment. If the bytes change in between (the last value's length rewritten to 8,191 bytes, past the segment's
    end, or to one byte longer), it says which record's value changed, in which segment, and reads nothing past
    the segment."""
    from segment_io import encode as encode_module
    from segment_io.errors import CorruptRecordError
    from tests.support.builders import LogBuilder, rec

    log = LogBuilder()
    log.batch([rec(f"k{i}", "v" * 100) for i in range(3)])
    seg = bytearray(encode_batches(log.table()).to_bytes())
    rows, _ = decode_segment_and_headers(seg, segment_base_offset=0, value_refs=True)
    at = int(ref_positions(np.array(rows["value"][2].as_py())))  # where the last record's value length lies
    assert seg[at:at + 2] == b"\xc8\x01"  # zig-zag 100
    kept = rows.filter(np.array([True, False, True]))
    want = encode_batches(kept, sources={0: seg}).to_bytes()
    find_refs = encode_module._find_refs

    def size_then_rewrite(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = find_refs(*args, **kwargs)
        seg[at:at + 2] = new_length
        return found

    monkeypatch.setattr(encode_module, "_find_refs", size_then_rewrite)
    with pytest.raises(CorruptRecordError) as raised:
        encode_batches(kept, sources={0: seg})
    assert raised.value.offset == 2 and raised.value.position == 0
    assert "offset 2 in segment 0" in str(raised.value) and "changed while it was read" in str(raised.value)
    seg[at:at + 2] = b"\xc8\x01"
    monkeypatch.setattr(encode_module, "_find_refs", find_refs)
    assert encode_batches(kept, sources={0: seg}).to_bytes() == want


def test_the_copy_of_values_stops_at_a_length_that_was_not_measured() -> None:
    """The compiled copy reads each value's length again and stops, reading and writing nothing, where it is not
    the length measured or its bytes would pass the payload's limit."""
    from segment_io import _encode_kernels as E

    buf = np.frombuffer(b"\x06abc\x08wxyz\x7e", np.uint8)  # values "abc", "wxyz", then a length of 63
    refs, rows, base = np.array([0, 4, 9]), np.array([0, 1, 2]), np.zeros(3, np.int64)
    valid, limit = np.ones(3, np.bool_), np.full(3, len(buf), np.int64)
    dest = np.array([0, 3, 7])
    data = np.full(7 + 63, 0xAB, np.uint8)
    offsets = np.array([0, 3, 7, 70], np.int32)
    assert E.gather_ref_values(buf, refs, base, limit, valid, rows, offsets, dest, data) == 2
    assert bytes(data[:7]) == b"abcwxyz" and (data[7:] == 0xAB).all()
    offsets = np.array([0, 3, 6, 6], np.int32)  # "wxyz" measured as 3 bytes: its length changed since
    data[:] = 0xAB
    assert E.gather_ref_values(buf, refs, base, limit, valid, rows[:2], offsets, dest, data) == 1
    assert bytes(data[:3]) == b"abc" and (data[3:] == 0xAB).all()
