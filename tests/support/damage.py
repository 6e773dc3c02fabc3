"""Damage done to a partition's files on purpose, as a disk or a bad copy might: for the tests of what a job
does with them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from segment_io.encode import encode_batches
from segment_io.errors import CorruptRecordError
from segment_io.format import scan_batches
from segment_io.layout import segment_file_name
from tests.support.builders import LogBuilder, rec, write_log


def assert_located(exc: CorruptRecordError, path: str, position: int, offset: int) -> None:
    """``exc`` names ``path``, the byte ``position`` and the ``offset``, in its fields and in its message."""
    assert (exc.path, exc.position, exc.offset) == (path, position, offset)
    assert path in str(exc) and f"byte {position}" in str(exc)


def flip_crc(segment: Path, batch: int) -> tuple[int, int]:
    """Break the stored CRC of batch number ``batch`` of ``segment``; returns its byte position and base
    offset (what the error must name)."""
    data = bytearray(segment.read_bytes())
    headers = scan_batches(bytes(data), path=str(segment))
    position = int(headers.position[batch])
    data[position + 17] ^= 0xFF  # the first byte of the CRC (after base offset, length, leader epoch, magic)
    segment.write_bytes(bytes(data))
    return position, int(headers.base_offset[batch])


def shift_first_index_entry(index: Path) -> None:
    """Make the first entry of an offset index point one byte into its batch: Kafka's loader's sanity check
    passes it (entries ascending, within the file), only a check against the batches finds it."""
    raw = bytearray(index.read_bytes())
    assert len(raw) >= 8, f"{index} has no entry to break"
    relative, position = struct.unpack(">ii", raw[:8])
    raw[:8] = struct.pack(">ii", relative, position + 1)
    index.write_bytes(bytes(raw))


def backwards_offsets(partition_dir: Path, *, overlap: bool = False,
                      timestamp: int = 1_700_000_000_000) -> tuple[Path, int, int]:
    """Write a partition (``<topic>-<n>`` of ``partition_dir``'s name) whose first segment's batches, each with
    a valid CRC, go back in offsets: batches at 0-1 and 2-3, then one at 0-1 again (``overlap``: at 3-4, inside
    the batch before it), as two copies pasted into one file would; then the active segment at 5. Returns the
    segment and the byte position and base offset of the batch that goes back (what the error must name)."""
    topic, _, n = partition_dir.name.rpartition("-")
    first = LogBuilder(topic, int(n), timestamp=timestamp)
    first.batch([rec("k1", "1"), rec("k2", "1")]).batch([rec("k1", "2"), rec("k3", "1")])
    again = LogBuilder(topic, int(n), timestamp=timestamp + 100, start_offset=3 if overlap else 0)
    again.batch([rec("k1", "3"), rec("k4", "1")])
    head = b"".join(encode_batches(first.table()).buffers)
    segment = partition_dir / segment_file_name(0)
    active = LogBuilder(topic, int(n), timestamp=timestamp + 200, start_offset=5)
    write_log(active.batch([rec("z", "active")]).table(), partition_dir)
    segment.write_bytes(head + b"".join(encode_batches(again.table()).buffers))
    for suffix in (".index", ".timeindex"):  # empty indexes: a broker's loader rebuilds them, as segjobs does
        (partition_dir / segment_file_name(0, suffix)).write_bytes(b"")
    return segment, len(head), 3 if overlap else 0


def walk_in_two_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the decode walk every run of v2 batches as it walks one that one pass cannot address: a scan of the
    whole run, then its fill (``decode_v2._fields_in_two_passes``), the reference the one-pass walk is held to and
    the walk with a window between a batch's scan and its fill."""
    from segment_io import decode_v2

    monkeypatch.setattr(decode_v2, "_fields_in_one_pass",
                        lambda seg, inp, names, room: decode_v2._fields_in_two_passes(seg, inp, names))
