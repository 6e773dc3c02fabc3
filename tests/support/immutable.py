"""Files the filesystem refuses to rename or delete (``chattr +i``): how a rename or delete fails mid-commit on a
real system (an immutable attribute, a read-only bind mount, a permission change), without any seam."""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import pytest


def _chattr(flag: str, paths: list[Path]) -> bool:
    if not paths:
        return True
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True)
    return done.returncode == 0


@contextmanager
def immutable(paths: Iterable[Path]) -> Iterator[None]:
    """Make ``paths`` immutable for the ``with`` block (skips the test where ``chattr +i`` is not allowed: it
    needs root and a filesystem that supports it); always made mutable again, so pytest can clean up."""
    files = list(paths)
    if not _chattr("+i", files):
        pytest.skip("chattr +i is not available here (needs root and a filesystem with the immutable attribute)")
    try:
        yield
    finally:
        _chattr("-i", files)


def release(paths: Iterable[Path]) -> None:
    """Make ``paths`` mutable again inside an :func:`immutable` block (the user fixed the cause)."""
    _chattr("-i", list(paths))
