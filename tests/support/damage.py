"""Damage done to a partition's files on purpose, as a disk or a bad copy might: for the tests of what a job
does with them."""

from __future__ import annotations

import struct
from pathlib import Path

from segment_io.format import scan_batches


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
