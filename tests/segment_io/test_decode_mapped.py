"""Decoding a memory-mapped segment gives its pages back as it goes; the rows and headers are those of the bytes."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from segment_io.decode import decode_segment_and_headers, decode_segment_bytes
from segment_io.encode import encode_batches
from segment_io.format import scan_batches
from segment_io.generate import GenerateSpec, synthetic_table
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
