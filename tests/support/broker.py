"""What a Kafka broker does to a partition dir, for tests that put a broker between two segjobs runs.

Written from Kafka's sources (storage/.../log/LogLoader.java ``load()`` and ``removeTempFilesAndCollectSwapFiles()``,
and ``LocalLog.replaceSegments``), independently of :mod:`jobs.logdir.recover`: the offsets of a ``.log`` are
read here from the v2 batch headers (base offset and lastOffsetDelta of each batch), nothing else.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Mapping

SWAP, CLEANED, DELETED = ".swap", ".cleaned", ".deleted"


def log_offsets(log: bytes) -> list[int]:
    """Every offset of a v2 ``.log`` (each batch's base offset through base offset + lastOffsetDelta)."""
    out, pos = [], 0
    while pos + 12 <= len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        (last_delta,) = struct.unpack_from(">i", log, pos + 23)
        out.extend(range(base, base + last_delta + 1))
        pos += 12 + length
    return out


def _base(p: Path) -> int:
    return int(p.name[:20])


def load_partition(partition: Path) -> None:
    """A broker's ``LogLoader`` on start-up, applied to one partition dir:

    1. unlink ``.deleted`` files; collect ``.cleaned`` and ``.swap`` files;
    2. unlink every ``.swap`` whose base offset is >= the lowest ``.cleaned`` base offset, then every ``.cleaned``
       (an interrupted replace or split before its commit point);
    3. over the ``.log.swap`` files left: lo = lowest base offset, hi = highest next offset (last offset + 1,
       the base offset for an empty log); unlink every other file whose name starts with an offset in [lo, hi)
       (producer snapshots included: a broker rebuilds them);
    4. rename every remaining ``.swap`` file to its name without the suffix.
    """
    cleaned, swaps = [], []
    for p in sorted(partition.iterdir()):
        if p.name.endswith(DELETED):
            p.unlink()
        elif p.name.endswith(CLEANED):
            cleaned.append(p)
        elif p.name.endswith(SWAP):
            swaps.append(p)
    lowest_cleaned = min((_base(p) for p in cleaned), default=math.inf)
    kept = []
    for p in swaps:
        if _base(p) >= lowest_cleaned:
            p.unlink()
        else:
            kept.append(p)
    for p in cleaned:
        p.unlink()
    lo, hi = math.inf, -math.inf
    for p in kept:
        if p.name.endswith(".log" + SWAP):
            offsets = log_offsets(p.read_bytes())
            lo, hi = min(lo, _base(p)), max(hi, offsets[-1] + 1 if offsets else _base(p))
    for p in partition.iterdir():
        if not p.name.endswith(SWAP) and p.name[:20].isdigit() and lo <= _base(p) < hi:
            p.unlink()
    for p in kept:
        p.rename(p.with_name(p.name[: -len(SWAP)]))


def cleaner_killed_after_swap(partition: Path, base: int, files: Mapping[str, bytes]) -> None:
    """A broker's own cleaner killed inside ``LocalLog.replaceSegments`` right after its ``.cleaned`` files
    became ``.swap``: the cleaned segment at ``base`` (``files``: suffix such as ``.log`` -> bytes) is left as
    ``.swap`` files, and every segment it replaces is still live (the rename to ``.deleted`` comes next)."""
    for suffix, data in files.items():
        (partition / f"{base:020d}{suffix}{SWAP}").write_bytes(data)


__all__ = ["cleaner_killed_after_swap", "load_partition", "log_offsets"]
