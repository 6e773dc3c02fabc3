"""The partition the job-frame and driver tests compact: dirty segment groups whose files carry one old mtime."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.builders import LogBuilder, rec, tombstone, write_log

T0 = 1_700_000_000_000
NOW = T0 + 10 * 86_400_000
MTIME_MS = T0 + 5 * 86_400_000  # an old, distinctive last-modified time for the source segments


def build(partition_dir: Path, *, groups: int = 1) -> None:
    """``groups`` pairs of dirty segments (each pair one segment group under segment.bytes=300), then the
    active segment. Every source file gets the mtime MTIME_MS."""
    log = LogBuilder("t", int(partition_dir.name.rsplit("-", 1)[1]), timestamp=T0)
    for g in range(groups):
        if g:
            log.roll()
        log.batch([rec(f"k{g}", "1"), rec(f"j{g}", "1")]).batch([rec(f"k{g}", "2")])
        log.roll().batch([tombstone(f"j{g}")]).batch([rec(f"k{g}", "3")])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)
    for f in partition_dir.iterdir():
        os.utime(f, ns=(MTIME_MS * 1_000_000, MTIME_MS * 1_000_000))
