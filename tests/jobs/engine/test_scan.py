"""The partition scan: what retention and compaction learn from a partition's files (no Spark needed).

Timestamps and offsets are chosen here; the index bytes that test the ``.timeindex`` path are packed here
with ``struct`` in Kafka's layout (int64 timestamp, int32 relative offset), independently of segjobs.
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.engine.scan import PartitionError, scan_partition
from segment_io.index import OFFSET_INDEX_ENTRY
from segment_io.layout import list_log_dir, segment_file_name
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, timestamped_segments, write_log
from tests.support.hypothesis_budget import examples

T0 = 1_700_000_000_000


def write(pdir: Path, segments: list[list[int]]) -> list[int]:
    """Segment ``i`` holds one single-record batch per timestamp of ``segments[i]``; returns the bases."""
    table, bases, _ = timestamped_segments(pdir.name.rsplit("-", 1)[0], int(pdir.name.rsplit("-", 1)[1]), segments)
    write_log(table, pdir)
    return bases


def scan(root: Path, topic: str = "t", partition: int = 0, **kw):
    storage = open_storage(str(root))
    listing = list_log_dir(storage, str(root))
    return scan_partition(storage, listing.partition(topic, partition), depth="headers", **kw)


def timeindex(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def test_headers_give_largest_timestamp_sizes_and_offsets(tmp_path: Path) -> None:
    bases = write(tmp_path / "t-0", [[T0 + 5, T0 + 1], [T0 + 2], [T0 + 9, T0 + 3]])
    for f in (tmp_path / "t-0").glob("*.timeindex"):
        f.unlink()
    s = scan(tmp_path)
    assert s.error is None
    segs = s.state.segments
    assert [x.base_offset for x in segs] == bases == [0, 2, 3]
    assert [x.largest_timestamp for x in segs] == [T0 + 5, T0 + 2, T0 + 9]  # the max, not the last
    assert [x.next_offset for x in segs] == [2, 3, 5]
    assert [x.size_bytes for x in segs] == [os.path.getsize(tmp_path / "t-0" / segment_file_name(b)) for b in bases]
    assert s.state.log_end_offset == 5


def test_a_sane_timeindex_is_used_instead_of_reading_the_log(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[T0 + 5, T0 + 6], [T0 + 7]])
    # A valid-looking index that names another (larger) timestamp than the batches read: Kafka would take it, so
    # does the scan (it dates the segment later: retention keeps it longer, nothing is lost).
    (tmp_path / "t-0" / segment_file_name(0, ".timeindex")).write_bytes(timeindex((T0 + 1, 0), (T0 + 9, 1)))
    s = scan(tmp_path)
    assert s.state.segments[0].largest_timestamp == T0 + 9 and s.warnings == []
    # the .log of a closed segment with a sane index is read only from its last .index entry on (here, with
    # no entry, from byte 0) to check that it ends on a whole batch: garbage there is seen, not ignored
    log = tmp_path / "t-0" / segment_file_name(0)
    log.write_bytes(b"\xff" * log.stat().st_size)
    s = scan(tmp_path)
    assert s.state is None and s.error.kind == "InvalidMagicError" and s.error.file == str(log)
    assert s.error.position == 0


@pytest.mark.parametrize("entries", [
    [(T0 + 1, 0)],  # cut short to its first entry (a partial copy of a live log dir)
    [(T0 + 1, 0), (T0 + 3, 1)],  # sane, but older than the batches it would date (another segment's index)
])
def test_a_timeindex_older_than_the_segments_last_batches_gives_way_to_the_headers_with_a_warning(
        tmp_path: Path, entries) -> None:
    # Dating the segment by such an index (as a broker would) lets retention delete records still inside
    # retention.ms: the batches the scan reads anyway (from the last .index entry to the end) show it is stale.
    write(tmp_path / "t-0", [[T0 + 5, T0 + 6], [T0 + 7]])
    ti = tmp_path / "t-0" / segment_file_name(0, ".timeindex")
    ti.write_bytes(timeindex(*entries))
    s = scan(tmp_path)
    assert s.error is None and s.state.segments[0].largest_timestamp == T0 + 6
    assert len(s.warnings) == 1 and s.warnings[0].startswith(f"{ti}: its last entry dates the segment ")
    assert "while its batches hold timestamps up to 2023-11-14T22:13:20.006Z" in s.warnings[0]


def test_a_segment_whose_last_batches_lie_outside_its_offsets_is_refused_though_its_timeindex_is_sane(
        tmp_path: Path) -> None:
    # A segment file overwritten by another's bytes (offsets 0-1 in a file based at 2): its own .timeindex is
    # sane, and the scan reads only its tail; every command must refuse it, as a full header scan does.
    write(tmp_path / "t-0", [[T0 + 5, T0 + 6], [T0 + 7, T0 + 8], [T0 + 9]])
    pdir = tmp_path / "t-0"
    (pdir / segment_file_name(2)).write_bytes((pdir / segment_file_name(0)).read_bytes())
    (pdir / segment_file_name(2, ".timeindex")).write_bytes(timeindex((T0 + 8, 1)))
    s = scan(tmp_path)
    assert s.state is None and s.error.kind == "CorruptRecordError" and s.error.file == str(pdir / segment_file_name(2))
    assert "first batch offset 0 lies below the segment's base offset 2" in s.error.detail


@pytest.mark.parametrize("depth", ["headers", "sizes", "transactions"])
@pytest.mark.parametrize("timeindex_kept", [True, False])
def test_a_segment_whose_batches_reach_the_next_segments_base_is_refused_naming_the_log(
        tmp_path: Path, depth: str, timeindex_kept: bool) -> None:
    # Segment 0 holding its own batches and then segment 2's (a concatenation): the two overlap. Was: accepted at
    # every depth, with at most a warning blaming segment 0's .timeindex, the .log being the file at fault.
    write(tmp_path / "t-0", [[T0 + 5, T0 + 6], [T0 + 7, T0 + 8], [T0 + 9]])
    pdir = tmp_path / "t-0"
    first, second = (pdir / segment_file_name(0)).read_bytes(), (pdir / segment_file_name(2)).read_bytes()
    (pdir / segment_file_name(0)).write_bytes(first + second)
    if not timeindex_kept:
        (pdir / segment_file_name(0, ".timeindex")).unlink()
    storage = open_storage(str(tmp_path))
    s = scan_partition(storage, list_log_dir(storage, str(tmp_path)).partition("t", 0), depth=depth)
    assert s.state is None and s.error.kind == "CorruptRecordError", (s.error, s.warnings)
    assert (s.error.file, s.error.position, s.error.offset) == (str(pdir / segment_file_name(0)), len(first), 2)
    assert "at or past the next segment's base offset 2: the two segments overlap" in s.error.detail
    assert s.warnings == []


@pytest.mark.parametrize("entries", [
    [(T0 + 9, 0), (T0 + 1, 1)],  # timestamps decrease
    [(T0 + 1, 0), (T0 + 1, 1)],  # a repeated timestamp: Kafka only appends strictly greater ones
    [(T0 + 1, 1), (T0 + 2, 0)],  # offsets decrease
    [(-5, 0)],  # negative timestamp
    [(T0 + 1, 0), (T0 + 2, 7)],  # an offset beyond the next segment's base
    [(T0 + 1, -1)],  # below the segment's base
])
def test_an_insane_timeindex_falls_back_to_the_batch_headers(tmp_path: Path, entries) -> None:
    write(tmp_path / "t-0", [[T0 + 50, T0 + 60], [T0 + 70]])
    (tmp_path / "t-0" / segment_file_name(0, ".timeindex")).write_bytes(timeindex(*entries))
    assert scan(tmp_path).state.segments[0].largest_timestamp == T0 + 60


def test_a_timeindex_of_the_wrong_size_or_all_zeros_falls_back_to_the_headers(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[T0 + 50], [T0 + 70]])
    ti = tmp_path / "t-0" / segment_file_name(0, ".timeindex")
    ti.write_bytes(b"\x00" * 13)
    assert scan(tmp_path).state.segments[0].largest_timestamp == T0 + 50
    ti.write_bytes(b"\x00" * 120)  # a preallocated, never-written index
    assert scan(tmp_path).state.segments[0].largest_timestamp == T0 + 50


LARGE = 400  # entries: 4,800 bytes, above TIMEINDEX_WHOLE_READ_BYTES


@pytest.mark.parametrize("how,largest", [
    ("sane", T0 + LARGE),  # dated by its last entry, read with its first: two entries' bytes
    ("middle out of order", T0 + LARGE),  # Kafka's own check compares the ends only, and so does this one
    ("last below first", T0 + 60),  # not an index Kafka would trust: the headers date the segment
    ("last past the next base", T0 + 60),
    ("last not above the one before", T0 + 60),  # a damaged last entry that still exceeds the first
    ("preallocated tail", T0 + LARGE // 2),  # zeros past its last written entry: read whole, that entry dates it
    ("not whole entries", T0 + 60),  # read whole, which refuses it
])
def test_a_large_timeindex_is_read_by_its_first_and_last_entries(tmp_path: Path, how: str, largest: int) -> None:
    from jobs.engine.scan import TIMEINDEX_WHOLE_READ_BYTES

    write(tmp_path / "t-0", [[T0 + 50, T0 + 60], [T0 + 70]])
    entries = [(T0 + i, 0) for i in range(1, LARGE + 1)]
    if how == "middle out of order":
        entries[LARGE // 2] = (T0 - 5, 0)
    elif how == "last below first":
        entries[-1] = (T0, 0)
    elif how == "last past the next base":
        entries[-1] = (T0 + LARGE, 2)
    elif how == "last not above the one before":
        entries[-1] = (T0 + LARGE - 1, 0)
    elif how == "preallocated tail":
        entries = entries[:LARGE // 2] + [(0, 0)] * (LARGE // 2)
    ti = tmp_path / "t-0" / segment_file_name(0, ".timeindex")
    ti.write_bytes(timeindex(*entries) + (b"\x01" * 5 if how == "not whole entries" else b""))
    assert ti.stat().st_size > TIMEINDEX_WHOLE_READ_BYTES
    storage = _Bytes(open_storage(str(tmp_path)))
    s = scan_partition(storage, list_log_dir(storage, str(tmp_path)).partition("t", 0), depth="headers")
    assert s.error is None
    assert s.state.segments[0].largest_timestamp == largest
    read = storage.bytes[str(ti)]
    # the first entry and the last two; the preallocated one's last two, then the whole file; one of a size that is
    # not whole entries, the whole file
    want = {"preallocated tail": 24 + ti.stat().st_size, "not whole entries": ti.stat().st_size}.get(how, 36)
    assert read == want, read


def test_the_active_segment_is_always_read(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[T0 + 1], [T0 + 2, T0 + 8]])
    (tmp_path / "t-0" / segment_file_name(1, ".timeindex")).write_bytes(timeindex((T0 + 1, 0)))
    s = scan(tmp_path)
    assert s.state.segments[-1].largest_timestamp == T0 + 8
    assert s.state.log_end_offset == 3


def test_records_without_timestamps_leave_the_largest_timestamp_unknown(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[-1, -1], [T0]])
    (tmp_path / "t-0" / segment_file_name(0, ".timeindex")).unlink()
    seg = scan(tmp_path).state.segments[0]
    assert seg.largest_timestamp is None
    mtime = int((tmp_path / "t-0" / segment_file_name(0)).stat().st_mtime * 1000)
    assert abs(seg.effective_largest_timestamp - mtime) <= 1  # Kafka's fallback: the file's mtime


def test_log_start_checkpoint_is_raised_to_the_first_segment(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[T0], [T0]])
    assert scan(tmp_path, log_start_checkpoint=None).state.log_start_offset == 0
    assert scan(tmp_path, log_start_checkpoint=1).state.log_start_offset == 1
    (tmp_path / "t-0" / segment_file_name(0)).unlink()
    (tmp_path / "t-0" / segment_file_name(0, ".index")).unlink()
    (tmp_path / "t-0" / segment_file_name(0, ".timeindex")).unlink()
    assert scan(tmp_path, log_start_checkpoint=0).state.log_start_offset == 1


def test_a_corrupt_closed_segment_is_a_located_partition_error(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[T0], [T0], [T0]])
    (tmp_path / "t-0" / segment_file_name(1, ".timeindex")).unlink()
    log = tmp_path / "t-0" / segment_file_name(1)
    data = bytearray(log.read_bytes())
    data[16] = 9  # magic
    log.write_bytes(bytes(data))
    s = scan(tmp_path)
    assert s.state is None and isinstance(s.error, PartitionError)
    assert s.error.kind == "InvalidMagicError"
    assert s.error.file.endswith(segment_file_name(1)) and s.error.position == 0 and s.error.offset == 1


def test_a_truncated_closed_segment_is_an_error_but_a_truncated_active_one_a_warning(tmp_path: Path) -> None:
    write(tmp_path / "t-0", [[T0, T0], [T0, T0]])
    active = tmp_path / "t-0" / segment_file_name(2)
    active.write_bytes(active.read_bytes()[:-10])
    s = scan(tmp_path)
    assert s.error is None and s.state.log_end_offset == 3
    assert len(s.warnings) == 1 and "incomplete batch" in s.warnings[0]
    closed = tmp_path / "t-0" / segment_file_name(0)
    (tmp_path / "t-0" / segment_file_name(0, ".timeindex")).unlink()
    closed.write_bytes(closed.read_bytes()[:-10])
    s = scan(tmp_path)
    assert s.error is not None and s.error.file.endswith(segment_file_name(0))


def test_an_active_segment_ending_in_preallocated_zeros_is_a_warning_not_an_error(tmp_path: Path) -> None:
    # log.preallocate, or a copy of a live broker's dir: the partition is read as a broker's recovery reads it
    write(tmp_path / "t-0", [[T0, T0], [T0, T0]])
    active = tmp_path / "t-0" / segment_file_name(2)
    active.write_bytes(active.read_bytes() + bytes(8192))
    s = scan(tmp_path)
    assert s.error is None and s.state.log_end_offset == 4
    assert len(s.warnings) == 1 and "last 8192 bytes are an incomplete batch (cut short, or zeros" in s.warnings[0]


def test_an_unreadable_file_is_a_partition_error_not_a_crash(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads any file: stand in with a directory where a segment file should be
        write(tmp_path / "t-0", [[T0], [T0]])
        log = tmp_path / "t-0" / segment_file_name(1)
        log.unlink()
        log.mkdir()
        storage = open_storage(str(tmp_path))
        listing = list_log_dir(storage, str(tmp_path))
        from dataclasses import replace

        from segment_io.storage.base import FileInfo

        pl = listing.partition("t", 0)
        fake = replace(pl.segments[0], base_offset=1, log=FileInfo(uri=str(log), size=0, mtime_ms=0))
        pl = replace(pl, segments=(pl.segments[0], fake))
        s = scan_partition(storage, pl, depth="headers")
    else:
        write(tmp_path / "t-0", [[T0], [T0]])
        (tmp_path / "t-0" / segment_file_name(1)).chmod(0)
        s = scan(tmp_path)
    assert s.state is None and s.error is not None and s.error.file.endswith(segment_file_name(1))


def test_transactions_depth_also_reads_producer_state(tmp_path: Path) -> None:
    log = LogBuilder(topic="t", partition=0)
    log.txn_batch(pid=7, epoch=0, records=[rec("a", "1", timestamp=T0)])
    log.roll()
    log.batch([rec("b", "2", timestamp=T0)])
    write_log(log.table(), tmp_path / "t-0")
    storage = open_storage(str(tmp_path))
    pl = list_log_dir(storage, str(tmp_path)).partition("t", 0)
    s = scan_partition(storage, pl, depth="transactions", now_ms=T0)
    assert s.error is None and s.txn is not None
    assert s.state.first_unstable_offset == 0  # the transaction has no marker


def test_leader_epochs_snapshots_and_deleted_files_come_with_the_scan(tmp_path: Path) -> None:
    pdir = tmp_path / "t-0"
    write(pdir, [[T0], [T0]])
    (pdir / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n4 1\n")
    (pdir / segment_file_name(1, ".snapshot")).write_bytes(b"")
    (pdir / segment_file_name(2, ".snapshot")).write_bytes(b"")
    s = scan(tmp_path)
    assert s.leader_epochs == [(0, 0), (4, 1)] and s.leader_epochs_error is None
    assert s.snapshot_offsets == (1, 2) and not s.has_deleted_files
    (pdir / segment_file_name(0, ".log")).rename(pdir / segment_file_name(0, ".log.deleted"))
    assert scan(tmp_path).has_deleted_files


def test_a_corrupt_leader_epoch_checkpoint_blocks_retention_and_leaves_the_partition_untouched(
        tmp_path: Path) -> None:
    from jobs import api

    pdir = tmp_path / "t-0"
    write(pdir, [[T0], [T0]])
    (pdir / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n")  # declares 3 entries, holds 1
    s = scan(tmp_path)
    assert s.leader_epochs is None and s.leader_epochs_error.kind == "CorruptCheckpointError"
    assert s.state is not None  # compaction can still plan; retention must not touch it
    before = sorted(p.name for p in pdir.iterdir())
    result = api.retain(tmp_path, api.RetainOptions(overrides=["*:retention.ms=1"], max_delete_fraction=1.0),
                        now=T0 + 10**12, seams=api.Seams(runner=api.InProcessTasks()))
    (p,) = result.partitions
    assert result.exit_code == 1 and p.action == "error" and p.segments_deleted == 0
    assert p.entry["error"]["file"].endswith("leader-epoch-checkpoint")
    assert sorted(p.name for p in pdir.iterdir()) == before


class _Reads:
    """The reads a scan makes, at the storage boundary (every other call goes to the real store)."""

    def __init__(self, storage) -> None:
        self.storage, self.uris = storage, []

    def __getattr__(self, name):
        return getattr(self.storage, name)

    def read(self, uri):
        self.uris.append(uri)
        return self.storage.read(uri)

    def read_range(self, uri, start, length):
        self.uris.append(uri)
        return self.storage.read_range(uri, start, length)

    def read_mapped(self, uri):
        self.uris.append(uri)
        return self.storage.read_mapped(uri)


class _Bytes(_Reads):
    """:class:`_Reads` that also adds up the bytes each read of a file returned."""

    def __init__(self, storage) -> None:
        super().__init__(storage)
        self.bytes: dict[str, int] = {}

    def _add(self, uri, data):
        self.bytes[uri] = self.bytes.get(uri, 0) + len(data)
        return data

    def read(self, uri):
        return self._add(uri, super().read(uri))

    def read_range(self, uri, start, length):
        return self._add(uri, super().read_range(uri, start, length))

    @contextlib.contextmanager
    def read_mapped(self, uri):
        with super().read_mapped(uri) as data:
            yield self._add(uri, data)


@pytest.mark.parametrize("lso,cco,unread", [
    (None, None, True), (3, 3, True), (0, 1, True),
    (4, None, False),  # a log start past the active segment's base: only its end says whether it is possible
    (None, 4, False),  # a cleaner checkpoint past it: only the log end says whether it is reset
    (-1, None, False),  # a log start below zero: read, and reported
])
def test_a_selection_scan_reads_no_file_of_a_partition_compaction_cannot_select(tmp_path: Path, lso, cco,
                                                                                 unread) -> None:
    from jobs.rules.config import ConfigSet
    from jobs.rules.plan_compact import plan_compaction

    root = tmp_path / "logs"
    log = LogBuilder("t", 0, start_offset=3, timestamp=T0)  # one segment, the active one: offsets 3-7
    for i in range(5):
        log.batch([rec(f"k{i}", "v")])
    write_log(log.table(), root / "t-0")
    (root / "t-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 3\n")
    storage = _Reads(open_storage(str(root)))
    listing = list_log_dir(storage.storage, str(root)).partition("t", 0)
    sizes = scan_partition(storage, listing, depth="sizes", log_start_checkpoint=lso, cleaner_checkpoint=cco)
    assert sizes.active_unread == unread
    assert (storage.uris == []) == unread
    assert sizes.leader_epochs is None and sizes.leader_epochs_error.kind == "NotRead"  # retention never plans on it
    read = scan_partition(open_storage(str(root)), listing, depth="headers", log_start_checkpoint=lso,
                          cleaner_checkpoint=cco)
    assert read.leader_epochs is not None and read.leader_epochs_error is None
    if lso == -1:
        assert sizes.error is not None and sizes.error == read.error
        return
    config = ConfigSet().with_overrides(["t:cleanup.policy=compact"]).for_topic("t")
    for requested in (False, True):  # the same plan as on a full read of the active segment
        plan = plan_compaction(sizes.scanned, config, T0 + 10**9, requested=requested)
        assert plan == plan_compaction(read.scanned, config, T0 + 10**9, requested=requested)
        assert not (unread and plan.selected)  # one it did not read is never selected, even when named


def _read_from_disk() -> int:
    """Bytes this process has read from storage so far (``/proc/self/io``)."""
    for line in open("/proc/self/io"):
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no read_bytes in /proc/self/io")


def _evict(paths: list[Path]) -> None:
    """Drop the files' pages from the page cache (written back first: dirty pages stay)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _cold_reads_are_counted(path: Path) -> bool:
    """Whether this machine shows a read of an evicted file as bytes read from storage (not on tmpfs, say)."""
    if not os.path.exists("/proc/self/io") or not hasattr(os, "posix_fadvise"):
        return False
    _evict([path])
    before = _read_from_disk()
    path.read_bytes()
    return _read_from_disk() - before >= path.stat().st_size * 0.9


def test_a_header_scan_of_large_batches_reads_their_header_pages_not_every_byte(tmp_path: Path) -> None:
    from jobs.engine.scan import headers_far_apart

    pdir = tmp_path / "t-0"
    log = LogBuilder()
    for i in range(32):  # 160 KiB batches in the closed segment
        log.batch([rec(f"k{i}", os.urandom(160 << 10))])
    log.roll().batch([rec("last", "v")])
    write_log(log.table(), pdir)
    closed = pdir / segment_file_name(0)
    if not _cold_reads_are_counted(closed):
        pytest.skip("this filesystem does not count reads of evicted pages (tmpfs?)")
    storage = open_storage(str(tmp_path))
    listing = list_log_dir(storage, str(tmp_path)).partition("t", 0)
    assert headers_far_apart(listing.segments[0]) and not headers_far_apart(listing.segments[1])
    _evict(sorted(pdir.iterdir()))
    before = _read_from_disk()
    s = scan_partition(storage, listing, depth="transactions")
    assert s.error is None and s.state is not None and s.state.log_end_offset == 33
    # a page or two a batch (and the small files), not the 5 MiB: the kernel's read-around would fetch them all
    assert _read_from_disk() - before < closed.stat().st_size // 4


def test_batches_below_the_read_around_window_keep_it(tmp_path: Path) -> None:
    """Batches below the read-around window (small ones many to a page, or 64 KiB ones) keep read-around: fewer,
    larger requests for their bytes than a request a batch."""
    from jobs.engine.scan import headers_far_apart

    for name, count, value in (("small", 2000, b"v" * 100), ("mid", 40, os.urandom(64 << 10))):
        log = LogBuilder()
        for i in range(count):
            log.batch([rec(f"k{i}", value)])
        log.roll().batch([rec("last", "v")])
        write_log(log.table(), tmp_path / name / "t-0")
        storage = open_storage(str(tmp_path / name))
        listing = list_log_dir(storage, str(tmp_path / name)).partition("t", 0)
        assert not headers_far_apart(listing.segments[0]), name


def _two_segments(root: Path) -> Path:
    """A partition of a closed segment and an active one of 40 batches of 1 KB (index entries every 4 KiB, the
    default interval); returns the active segment's ``.log``."""
    log = LogBuilder("t", 0, timestamp=T0)
    for i in range(10):
        log.batch([rec(f"k{i}", "v" * 1000)])
    log.roll()
    for i in range(40):
        log.batch([rec(f"k{i}", "v" * 1000), rec(f"j{i}", "w" * 10)])
    write_log(log.table(), root / "t-0")
    return root / "t-0" / segment_file_name(10)


def _damage(active: Path, how: str) -> None:
    index = active.with_suffix(".index")
    entries = bytearray(index.read_bytes())
    if how == "no index":
        index.unlink()
    elif how == "preallocated index":  # a broker's active index before a clean shutdown trims it
        index.write_bytes(bytes(entries) + bytes(8 * 100))
    elif how == "preallocated index, every batch indexed":  # a topic's index.interval.bytes below the default's 4096
        index.write_bytes(_every_batch_entries(active) + bytes(8 * 1000))
    elif how == "preallocated index, nothing written":
        index.write_bytes(bytes(8 * 100))
    elif how == "entry mid-batch":
        position = struct.unpack(">i", entries[-4:])[0]
        index.write_bytes(bytes(entries[:-4]) + struct.pack(">i", position + 7))
    elif how == "entry past the end":  # an offset none of the batches from its position holds
        relative = struct.unpack(">i", entries[-8:-4])[0]
        index.write_bytes(bytes(entries[:-8]) + struct.pack(">i", relative + 1000) + bytes(entries[-4:]))
    elif how == "entry of a later batch":  # a follower's append of several batches: indexed by the last one's
        relative = struct.unpack(">i", entries[-8:-4])[0]
        index.write_bytes(bytes(entries[:-8]) + struct.pack(">i", relative + 2) + bytes(entries[-4:]))
    elif how == "truncated end":
        active.write_bytes(active.read_bytes()[:-10])
    elif how == "garbage past the entry":  # after the last batch, bytes whose length field is negative
        active.write_bytes(active.read_bytes() + struct.pack(">qi", 90, -5) + bytes(40))


def _every_batch_entries(log: Path) -> bytes:
    """Offset index entries of every batch of ``log`` but its first (the one at position 0 has none), as a broker
    with ``index.interval.bytes`` 0 writes them: more entries than the default interval allows."""
    from segment_io.format import scan_batches

    h = scan_batches(log.read_bytes(), path=str(log))
    base = int(h.base_offset[0])
    return b"".join(struct.pack(">ii", int(h.last_offset[i]) - base, int(h.position[i])) for i in range(1, len(h)))


@pytest.mark.parametrize(("how", "tail_only"), [
    ("intact", True),
    ("truncated end", True),  # a warning, as on a full read
    ("no index", False),
    ("preallocated index", True),  # its last written entry found in one read
    ("preallocated index, every batch indexed", True),  # ... and by halving past the default interval's share
    ("preallocated index, nothing written", False),
    ("entry mid-batch", False),
    ("entry of a later batch", True),
    ("entry past the end", False),
    ("garbage past the entry", False),  # the full read then says where
])
def test_a_selection_scan_reads_the_active_segment_from_its_last_index_entry_on(tmp_path: Path, how: str,
                                                                                tail_only: bool,
                                                                                monkeypatch) -> None:
    """Compaction's selection needs only the active segment's log end offset (Kafka never cleans it): the scan at
    depth sizes reads its batches from its last ``.index`` entry on, where an index can be trusted, and the whole
    segment where not; either way with the log end offset, warnings, errors and plan of a full read."""
    from jobs.engine import scan as scan_module
    from jobs.rules.config import ConfigSet
    from jobs.rules.plan_compact import plan_compaction

    root = tmp_path / "logs"
    active = _two_segments(root)
    _damage(active, how)
    listing = list_log_dir(open_storage(str(root)), str(root)).partition("t", 0)
    storage = _Bytes(open_storage(str(root)))
    sizes = scan_partition(storage, listing, depth="sizes")
    with monkeypatch.context() as m:  # the reference: the same scan reading the whole active segment
        m.setattr(scan_module, "_active_tail", lambda *_: None)
        full = scan_partition(open_storage(str(root)), listing, depth="sizes")
    read = storage.bytes[str(active)]
    if tail_only:
        assert read < active.stat().st_size // 4, (read, active.stat().st_size)
    else:
        assert read >= active.stat().st_size
    assert sizes.error == full.error and sizes.warnings == full.warnings
    assert (full.error is not None) == (how == "garbage past the entry")
    if full.error is not None:
        assert full.error.file == str(active) and full.error.kind == "InvalidLengthError", full.error
        return
    assert sizes.state.log_end_offset == full.state.log_end_offset == (88 if how == "truncated end" else 90)
    config = ConfigSet().with_overrides(["t:cleanup.policy=compact"]).for_topic("t")
    assert plan_compaction(sizes.scanned, config, T0 + 10**9) == plan_compaction(full.scanned, config, T0 + 10**9)


@pytest.mark.parametrize("every_batch", [False, True])
def test_a_running_broker_s_preallocated_active_index_is_searched_not_read_whole(tmp_path: Path,
                                                                              every_batch: bool) -> None:
    """A copy of a running broker's log dir holds the active segment's ``.index`` at its preallocated 10 MiB, its
    written entries first and zeros after: the selection finds the last written entry with a few small reads of
    the index (the default interval's share of it, then halving when the entries are denser) and reads the
    segment from there, never the whole index or segment."""
    root = tmp_path / "logs"
    active = _two_segments(root)
    index = active.with_suffix(".index")
    written = _every_batch_entries(active) if every_batch else index.read_bytes()
    index.write_bytes(written + bytes(10 * 1024 * 1024 - len(written)))
    listing = list_log_dir(open_storage(str(root)), str(root)).partition("t", 0)
    storage = _Bytes(open_storage(str(root)))
    sizes = scan_partition(storage, listing, depth="sizes")
    assert sizes.error is None and sizes.state.log_end_offset == 90
    index_reads = storage.uris.count(str(index))
    # the last entry, the default interval's share (about 11 entries of this 42 KB segment), then at most
    # log2(10 MiB / 8) probes of one entry each
    assert storage.bytes[str(index)] <= 8 + 8 * (active.stat().st_size // 4096 + 1) + 8 * 21
    assert (2 < index_reads <= 2 + 21) if every_batch else index_reads == 2, index_reads
    last_position = struct.unpack(">i", written[-4:])[0]
    assert storage.bytes[str(active)] == active.stat().st_size - last_position


class _IndexBytes:
    """A store holding one index file's bytes, which counts its reads (a read past the end comes back short)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, 0

    def read_range(self, uri, start, length):
        self.reads += 1
        return self.data[start:start + length]


@settings(max_examples=examples(1.0), deadline=None)
@given(count=st.integers(1, 5000), data=st.data())
def test_the_last_written_entry_of_a_preallocated_index_is_the_last_above_zero(count: int, data) -> None:
    """Against the plain answer (the last entry with a position): any number of written entries, spaced as a topic's
    interval spaces them (at least 1 byte, often less than the default 4096), and any segment size they fit in."""
    from jobs.engine.scan import _last_written_entry

    written = data.draw(st.integers(0, count - 1), label="written")
    gaps = np.array(data.draw(st.lists(st.integers(1, 9000), min_size=written, max_size=written)), dtype=np.int64)
    positions = np.cumsum(gaps)
    log_bytes = int(positions[-1]) + data.draw(st.integers(1, 10_000)) if written else data.draw(st.integers(0, 10**6))
    entries = np.zeros(count, dtype=OFFSET_INDEX_ENTRY)
    entries["relative_offset"][:written] = np.arange(1, written + 1) * 3
    entries["position"][:written] = positions
    store = _IndexBytes(entries.tobytes())
    got = _last_written_entry(store, "i", count, log_bytes)
    if not written:
        assert got is None
        return
    assert got is not None and got.tolist() == entries[written - 1:written].tolist()
    assert store.reads <= 1 + max(1, count).bit_length()


@pytest.mark.parametrize(("how", "found"), [  # found: the relative offset of the entry found
    ("in order", 8),
    ("older entries past the newer ones, out of order", None),  # a follower's truncation, then fewer appends
    ("a negative position", None),
    ("nothing written", None),
    ("short", None),  # the file shrank since its listing
])
def test_a_preallocated_index_out_of_order_or_short_is_not_searched(how: str, found: int | None) -> None:
    from jobs.engine.scan import _last_written_entry

    entries = np.zeros(1000, dtype=OFFSET_INDEX_ENTRY)
    entries["relative_offset"][:8] = [1, 2, 3, 4, 5, 6, 7, 8]
    entries["position"][:8] = [100, 200, 300, 400, 500, 600, 700, 800]
    if how == "older entries past the newer ones, out of order":
        entries["position"][:3] = [150, 250, 350]  # then the older 4th..8th: positions still rising
        entries["relative_offset"][:3] = [10, 11, 12]  # ... but their offsets below these
    elif how == "a negative position":
        entries["position"][3] = -4
    elif how == "nothing written":
        entries[:] = 0
    data = entries.tobytes()
    if how == "short":
        data = data[:40]
    got = _last_written_entry(_IndexBytes(data), "i", len(entries), 1 << 20)
    if found is None:
        assert got is None
    else:
        assert got is not None and int(got[0]["relative_offset"]) == found


@pytest.mark.parametrize("damaged", [False, True])
def test_halving_a_preallocated_index_stops_at_a_damaged_entry(damaged: bool) -> None:
    """Past the default interval's share (here 3 entries of a 8 KiB segment) the index is halved; an entry met there
    that is neither written nor zeros gives no answer (the caller reads the whole segment)."""
    from jobs.engine.scan import _last_written_entry

    entries = np.zeros(1000, dtype=OFFSET_INDEX_ENTRY)
    entries["relative_offset"][:600] = np.arange(1, 601)
    entries["position"][:600] = np.arange(1, 601) * 10
    if damaged:
        entries["relative_offset"][500], entries["position"][500] = 7, -1  # the first probe: (2 + 999) // 2
    store = _IndexBytes(entries.tobytes())
    got = _last_written_entry(store, "i", len(entries), 8192)
    assert (got is None) if damaged else got.tolist() == [(600, 6000)]
    assert store.reads == (2 if damaged else 1 + 10)  # the head, then log2 of the 997 entries past it


def test_damage_before_the_active_segment_s_last_index_entry_is_left_to_the_scans_that_read_it(tmp_path: Path) -> None:
    """The selection scan does not read the active segment before its last ``.index`` entry (compaction never
    cleans it): damage there is reported by the scans that read it all, the transaction-state scan of a partition
    that may be due, and retention's."""
    root = tmp_path / "logs"
    active = _two_segments(root)
    data = bytearray(active.read_bytes())
    data[8:12] = struct.pack(">i", -5)  # the first batch's length
    active.write_bytes(bytes(data))
    listing = list_log_dir(open_storage(str(root)), str(root)).partition("t", 0)
    sizes = scan_partition(open_storage(str(root)), listing, depth="sizes")
    assert sizes.error is None and sizes.state.log_end_offset == 90
    for depth in ("transactions", "headers"):
        error = scan_partition(open_storage(str(root)), listing, depth=depth).error
        assert error is not None and error.file == str(active) and error.position == 0, (depth, error)


class _RangeReads(_Reads):
    """:class:`_Reads` that also keeps every ranged read, ``(uri, start, length)``."""

    def __init__(self, storage) -> None:
        super().__init__(storage)
        self.ranges: list[tuple[str, int, int]] = []

    def read_range(self, uri, start, length):
        self.ranges.append((uri, start, length))
        return super().read_range(uri, start, length)


@pytest.mark.parametrize("below_base", [False, True])
def test_a_selection_scan_reads_a_closed_segment_s_first_batch_header_alone(tmp_path: Path, monkeypatch,
                                                                           below_base: bool) -> None:
    """``max.compaction.lag.ms`` counts from a closed segment's first batch timestamp, its first batch header's max
    timestamp (Kafka reads that header alone): the 61 bytes of a v2 header, with the full scan's answer and, for a
    first batch below the segment's base offset, its error."""
    from jobs.engine import scan as scan_module

    root = tmp_path / "logs"
    log_builder = LogBuilder(topic="t")
    # the first batch's max timestamp is neither its first record's nor its base timestamp
    log_builder.batch([rec("a", "1", timestamp=T0 + 2), rec("b", "2", timestamp=T0 + 5),
                       rec("c", "3", timestamp=T0 + 3)])
    log_builder.batch([rec("d", "4", timestamp=T0 + 1)])
    log_builder.roll()
    log_builder.batch([rec("e", "5", timestamp=T0 + 7)])
    write_log(log_builder.table(), root / "t-0")
    log = root / "t-0" / segment_file_name(0)
    if below_base:  # the segment's files renamed to a base above its first batch's offset
        for f in (root / "t-0").glob(segment_file_name(0, ".*")):
            f.rename(f.with_name(segment_file_name(1, f.suffix)))
        log = root / "t-0" / segment_file_name(1)
    listing = list_log_dir(open_storage(str(root)), str(root)).partition("t", 0)
    storage = _RangeReads(open_storage(str(root)))
    sizes = scan_partition(storage, listing, depth="sizes")
    with monkeypatch.context() as m:  # the reference: every segment's headers read whole
        m.setattr(scan_module, "_timeindex_largest", lambda *_: None)
        full = scan_partition(open_storage(str(root)), listing, depth="sizes")
    if below_base:
        assert sizes.error == full.error and "below the segment's base offset" in str(sizes.error)
        return
    assert sizes.error is None and full.error is None
    assert sizes.state.segments[0].first_batch_timestamp == full.state.segments[0].first_batch_timestamp == T0 + 5
    assert [r for r in storage.ranges if r[0] == str(log) and r[1] == 0] == [(str(log), 0, 61)]


def test_a_short_read_of_a_first_batch_header_or_a_timeindex_falls_back_to_the_whole_read(tmp_path: Path) -> None:
    """A ranged read that returns fewer bytes than asked (an object replaced since its listing) is never parsed as
    a header or an entry: the scan reads the file whole and answers as from an intact read."""

    class Short(_Reads):
        def read_range(self, uri, start, length):
            return super().read_range(uri, start, length)[:length // 2]

    write(tmp_path / "t-0", [[T0 + 50, T0 + 60], [T0 + 70]])
    ti = tmp_path / "t-0" / segment_file_name(0, ".timeindex")
    ti.write_bytes(timeindex(*[(T0 + i, 0) for i in range(1, LARGE + 1)]))
    listing = list_log_dir(open_storage(str(tmp_path)), str(tmp_path)).partition("t", 0)
    short = scan_partition(Short(open_storage(str(tmp_path))), listing, depth="sizes")
    intact = scan_partition(open_storage(str(tmp_path)), listing, depth="sizes")
    assert short.error is None and intact.error is None
    assert short.state.segments == intact.state.segments
    assert short.state.segments[0].largest_timestamp == T0 + LARGE
