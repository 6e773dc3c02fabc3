"""Staged segments written around the page cache: the same bytes as ordinary writes whatever the sizes and kinds of
the pieces, O_DIRECT really in use on a filesystem that does it well, ordinary writes where the environment or the
filesystem says no, and errors that stay the storage's errors with nothing left behind."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io.errors import StorageEnvironmentError
from segment_io.segment_writer import write_segment
from segment_io.storage import direct
from segment_io.storage.direct import (
    ALIGN,
    DIRECT_FILESYSTEMS,
    ENV_SWITCH,
    DirectWriter,
    direct_writes_allowed,
    filesystem_type,
    open_new,
)
from segment_io.storage.local import LocalStorage
from tests.support.builders import LogBuilder, rec
from tests.support.hypothesis_budget import examples

#: A small bounce buffer (three blocks) so that a few KiB of pieces cross it many times.
SMALL_BOUNCE = 3 * ALIGN


@pytest.fixture
def direct_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory where direct writes are used (skips where the machine's temporary directory is on a filesystem
    without them: the code under test would write ordinarily there, which the other tests cover)."""
    monkeypatch.delenv(ENV_SWITCH, raising=False)  # a developer's own switch must not skip these tests
    if not direct_writes_allowed() or filesystem_type(str(tmp_path)) not in DIRECT_FILESYSTEMS:
        pytest.skip(f"{tmp_path} is not on a filesystem of DIRECT_FILESYSTEMS, or this is not Linux")
    return tmp_path


def _is_direct(f) -> bool:
    return bool(fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_DIRECT)


def _pieces(sizes: list[int], seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]


@settings(max_examples=examples(0.5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.one_of(st.integers(0, 3 * ALIGN), st.integers(0, 4 * SMALL_BOUNCE)), max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_the_file_holds_every_piece_in_order(direct_dir: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int],
                                             seed: int) -> None:
    monkeypatch.setattr(direct, "BOUNCE_BYTES", SMALL_BOUNCE)
    pieces = _pieces(sizes, seed)
    path = direct_dir / f"out-{seed}-{len(sizes)}.log"
    f = open_new(str(path), uncached=True)
    assert isinstance(f, DirectWriter)
    for piece in pieces:
        assert f.write(piece) == len(piece)
    f.flush()
    f.close()
    assert path.read_bytes() == b"".join(pieces)
    path.unlink()


def test_whole_blocks_go_out_directly_and_the_tail_ordinarily(direct_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct, "BOUNCE_BYTES", SMALL_BOUNCE)
    data = _pieces([SMALL_BOUNCE + 100], 1)[0]
    path = direct_dir / "a.log"
    with open_new(str(path), uncached=True) as f:
        f.write(data)
        assert _is_direct(f) and os.fstat(f.fileno()).st_size == SMALL_BOUNCE  # the full buffer, written
        f.flush()
        assert not _is_direct(f) and os.fstat(f.fileno()).st_size == len(data)
        f.write(b"more")  # after a flush the file goes on ordinarily
    assert path.read_bytes() == data + b"more"


def test_pieces_of_every_kind_of_buffer(direct_dir: Path) -> None:
    """What the encoder hands over: bytes, views into a mapped source segment at any position, numpy arrays of
    bytes and of wider integers."""
    source = _pieces([3 * ALIGN], 2)[0]
    mapped = mmap.mmap(-1, len(source))
    mapped[:] = source
    wide = np.arange(1000, dtype=np.int64)
    pieces = [b"head", memoryview(mapped)[5:ALIGN + 17], np.frombuffer(source, np.uint8)[3:], wide,
              memoryview(source)[7:9]]
    path = direct_dir / "b.log"
    with open_new(str(path), uncached=True) as f:
        for piece in pieces:
            f.write(piece)
    expected = b"head" + source[5:ALIGN + 17] + source[3:] + wide.tobytes() + source[7:9]
    assert path.read_bytes() == expected
    del pieces
    mapped.close()  # the writer kept no view of the mapping


def test_a_refused_direct_write_is_made_ordinarily(direct_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem that refuses a direct write (EINVAL, as for a block larger than ALIGN) gets the same bytes by
    ordinary writes, from that point on."""
    monkeypatch.setattr(direct, "BOUNCE_BYTES", SMALL_BOUNCE)
    real, refused = direct._write_some, []

    def refusing(fd: int, data: np.ndarray) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, data)

    monkeypatch.setattr(direct, "_write_some", refusing)
    data = _pieces([5 * SMALL_BOUNCE + 9], 3)[0]
    path = direct_dir / "c.log"
    with open_new(str(path), uncached=True) as f:
        f.write(data[:100])
        f.write(data[100:])
        assert not _is_direct(f)
    assert refused == [SMALL_BOUNCE] and path.read_bytes() == data


def test_a_short_direct_write_off_a_block_boundary_finishes_ordinarily(direct_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct, "BOUNCE_BYTES", SMALL_BOUNCE)
    real = direct._write_some

    def short(fd: int, data: np.ndarray) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT and len(data) > ALIGN:
            return real(fd, data[:ALIGN])  # a whole block, then the caller goes on
        return real(fd, data)

    monkeypatch.setattr(direct, "_write_some", short)
    data = _pieces([4 * SMALL_BOUNCE + 1], 4)[0]
    path = direct_dir / "d.log"
    with open_new(str(path), uncached=True) as f:
        f.write(data)
    assert path.read_bytes() == data


def test_a_direct_open_refused_by_the_filesystem_gives_an_ordinary_file(direct_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.open

    def refusing(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
        return real(path, flags, *args)

    monkeypatch.setattr(direct.os, "open", refusing)
    path = direct_dir / "e.log"
    with open_new(str(path), uncached=True) as f:
        assert not isinstance(f, DirectWriter)
        f.write(b"x" * 10_000)
    assert path.read_bytes() == b"x" * 10_000


@pytest.mark.parametrize("value", ["0", "false", "No", "off"])
def test_the_environment_turns_direct_writes_off(direct_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                 value: str) -> None:
    assert not direct_writes_allowed({ENV_SWITCH: value})
    monkeypatch.setenv(ENV_SWITCH, value)
    with open_new(str(direct_dir / "f.log"), uncached=True) as f:
        assert not isinstance(f, DirectWriter)


def test_only_uncached_outputs_are_written_directly(direct_dir: Path) -> None:
    with open_new(str(direct_dir / "g.log")) as f:
        assert not isinstance(f, DirectWriter)
    with pytest.raises(FileExistsError):  # a new file, as open(path, "xb")
        open_new(str(direct_dir / "g.log"), uncached=True)


def test_filesystem_type_is_statfs_magic(tmp_path: Path) -> None:
    told = subprocess.run(["stat", "-f", "-c", "%t", str(tmp_path)], capture_output=True, text=True, check=True)
    assert filesystem_type(str(tmp_path)) == int(told.stdout.strip(), 16)
    assert filesystem_type(str(tmp_path / "missing" / "dir")) is None


def test_a_full_disk_during_a_direct_write_is_the_storage_error_and_leaves_nothing(
        direct_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct, "BOUNCE_BYTES", SMALL_BOUNCE)

    def full(fd: int, data: np.ndarray) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(direct, "_write_some", full)
    target = direct_dir / "h.log"
    with pytest.raises(StorageEnvironmentError) as err:
        with LocalStorage().open_write(str(target), uncached=True) as f:
            f.write(b"y" * (2 * SMALL_BOUNCE))
    assert err.value.out_of_space and str(target) in str(err.value)
    assert list(direct_dir.iterdir()) == []


def test_a_staged_segment_is_the_same_bytes_either_way(direct_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = LogBuilder()
    for start in range(0, 3000, 100):
        log.batch([rec(f"k{i % 700}", "v" * (i % 900)) for i in range(start, start + 100)])
    table = log.table()
    opened: list[str] = []
    init = DirectWriter.__init__

    def counting(self, fd: int, name: str) -> None:
        opened.append(os.path.basename(name))
        init(self, fd, name)

    monkeypatch.setattr(DirectWriter, "__init__", counting)
    direct_out = write_segment(table, str(direct_dir / "d" / f"{0:020d}.log"))
    assert len(opened) == 1 and f"{0:020d}.log" in opened[0]  # the .log alone: its small indexes are not
    monkeypatch.setenv(ENV_SWITCH, "0")
    plain_out = write_segment(table, str(direct_dir / "p" / f"{0:020d}.log"))
    assert len(opened) == 1 and direct_out.bytes > 8 * ALIGN
    for suffix, path in plain_out.paths.items():
        assert Path(direct_out.paths[suffix]).read_bytes() == Path(path).read_bytes(), suffix
