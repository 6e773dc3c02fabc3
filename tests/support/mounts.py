"""Real filesystems for environment-fault tests: a small tmpfs (disk full), a read-only bind mount (EROFS).

Mounting needs root (or CAP_SYS_ADMIN); where the kernel refuses, the test is skipped and says why. Every
mount is undone when the block ends, lazily if something still holds it.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


def _umount(path: Path) -> None:
    if _run("umount", str(path)).returncode != 0:
        _run("umount", "-l", str(path))


@contextmanager
def tmpfs(path: Path, size_bytes: int, *, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted at ``path`` (created): its own filesystem, full at that size (or, with
    ``inodes``, once it holds that many files and directories, its root among them: ENOSPC on the next create)."""
    path.mkdir(parents=True, exist_ok=True)
    limit = f",nr_inodes={inodes}" if inodes is not None else ""
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size_bytes}{limit}", "tmpfs", str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'mount failed'}): the test needs root "
                    f"or CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        _umount(path)


@contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` (a directory) made read-only in place by a read-only bind mount of itself: writes, renames and
    deletes in it fail with EROFS, even for root."""
    done = _run("mount", "--bind", str(path), str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here ({done.stderr.strip() or 'mount failed'}): the test needs root or "
                    f"CAP_SYS_ADMIN")
    try:
        ro = _run("mount", "-o", "remount,ro,bind", str(path))
        if ro.returncode != 0:
            pytest.skip(f"cannot remount a bind mount read-only ({ro.stderr.strip()})")
        yield path
    finally:
        _umount(path)


def fill(directory: Path, leave_bytes: int) -> Path:
    """Fill the filesystem of ``directory`` with one file in it, so that about ``leave_bytes`` stay free."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    filler = directory / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler
