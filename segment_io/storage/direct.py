"""New local files written around the page cache (``O_DIRECT``), for large outputs nobody reads back soon.

A cleaning task writes each staged segment once and never reads it again; the broker reads it from disk when it
needs it. Written through the page cache, every byte is first copied by the kernel into new cache pages (on a
virtual machine whose host takes freed memory back, new pages cost as much again to clear), and those pages then
push out pages other processes have cached. Measured on this project's 2-core VM (``segjobs compact`` on
4 GB of 128 MiB segments, whole-machine CPU, three runs each alternating with ordinary writes,
``benchmarks/MEASUREMENTS.md``): the kernel's time fell from 5.3 to 3.0 s and the run from 8.8 to 8.2 s
(medians), same output bytes.

``O_DIRECT`` wants the memory, the file position and the length of each write aligned to the device's block. The
encoder's buffers are neither (verbatim copies are views into source segments at any position), so
:class:`DirectWriter` copies the bytes into an aligned buffer of its own (:data:`BOUNCE_BYTES`, a fraction of
what the kernel's copy costs: it is a plain memcpy into memory that stays mapped) and writes it whole; the last
piece, shorter than a block, is written after the descriptor is switched back to ordinary writes. Durability is
unchanged: the caller still fsyncs (the file's size and the last piece are in the page cache until then).

Only where it pays and is known to work: Linux, a filesystem of :data:`DIRECT_FILESYSTEMS` (a network or FUSE
filesystem may make every direct write a synchronous round trip), and unless the environment says
``SEGJOBS_DIRECT_WRITES=0``. A filesystem that refuses a direct open or write (``EINVAL``: an alignment larger than
:data:`ALIGN`, a mount option) gets ordinary writes of the same bytes from that point on.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import io
import mmap
import os
import sys
from typing import Any, BinaryIO, Mapping

import numpy as np

#: The alignment of every direct write's memory, file position and length: a multiple of every common device
#: block (512 and 4096 bytes). A device that needs more refuses the write with EINVAL, and ordinary writes follow.
ALIGN = 4096
#: The aligned buffer each writer copies into and writes from whole.
BOUNCE_BYTES = 4 << 20
#: Filesystems (``statfs``'s ``f_type``) whose direct writes go straight to a local block device.
DIRECT_FILESYSTEMS: Mapping[int, str] = {0xEF53: "ext2/ext3/ext4", 0x58465342: "xfs"}
#: ``0`` (or ``false``, ``no``, ``off``) in the environment turns direct writes off (Spark executors on other hosts
#: need it in their own environment: ``spark.executorEnv.SEGJOBS_DIRECT_WRITES``).
ENV_SWITCH = "SEGJOBS_DIRECT_WRITES"
_OFF = frozenset({"0", "false", "no", "off"})


def direct_writes_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process may write around the page cache at all: Linux, and not turned off by
    :data:`ENV_SWITCH`."""
    env = os.environ if environ is None else environ
    if env.get(ENV_SWITCH, "").strip().lower() in _OFF:
        return False
    return sys.platform.startswith("linux") and hasattr(os, "O_DIRECT")


def filesystem_type(path: str) -> int | None:
    """``statfs``'s filesystem magic of the filesystem holding ``path``; None when it cannot be told."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux; f_type comes first
        if libc.statfs(os.fsencode(path), buf) != 0:
            return None
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    except (OSError, AttributeError, ValueError):
        return None


def open_new(path: str, *, uncached: bool = False) -> BinaryIO:
    """A new file at ``path`` open for writing (an existing one is refused, as ``open(path, "xb")`` does). With
    ``uncached``, where :func:`direct_writes_allowed` and the directory's filesystem is one of
    :data:`DIRECT_FILESYSTEMS`, a :class:`DirectWriter`; otherwise, or when the filesystem refuses a direct open,
    an ordinary buffered file."""
    if uncached and direct_writes_allowed() and filesystem_type(os.path.dirname(path) or ".") in DIRECT_FILESYSTEMS:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_DIRECT, 0o666)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        else:
            return DirectWriter(fd, path)  # type: ignore[return-value]
    return open(path, "xb")


class DirectWriter(io.RawIOBase):
    """A new file written with ``O_DIRECT`` through an aligned buffer (see the module docstring). Each
    :meth:`write` takes all of its bytes; :meth:`flush` writes what is buffered, and from then on the file is
    written ordinarily (its length is no longer aligned)."""

    def __init__(self, fd: int, name: str) -> None:
        super().__init__()
        self._fd = fd
        self.name = name
        self._direct = True
        self._map: mmap.mmap | None = None
        self._buf: np.ndarray | None = None
        self._used = 0

    # ------------------------------------------------------------------ io.RawIOBase

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        self._check_open()
        return self._fd

    def write(self, data: Any) -> int:
        self._check_open()
        src = np.frombuffer(memoryview(data).cast("B"), np.uint8)
        at = 0
        while at < len(src):
            if not self._direct:  # nothing is buffered then
                self._write_all(src[at:])
                break
            buf = self._bounce()
            take = min(BOUNCE_BYTES - self._used, len(src) - at)
            buf[self._used:self._used + take] = src[at:at + take]
            self._used += take
            at += take
            if self._used == BOUNCE_BYTES:
                self._drain()
        return len(src)

    def flush(self) -> None:
        if self.closed or not self._direct or not self._used:
            return
        self._drain()  # the whole blocks, directly
        if self._used:  # the tail, shorter than a block: ordinary writes from here on
            self._stop_direct()
            self._write_all(self._bounce()[:self._used])
            self._used = 0

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self._used = 0  # what a failed flush left is not written again by the close below
            self._buf = None
            if self._map is not None:
                try:
                    self._map.close()
                except BufferError:  # a view still held (a traceback's frame): unmapped when it goes
                    pass
                self._map = None
            try:
                os.close(self._fd)
            finally:
                super().close()

    # ------------------------------------------------------------------ the buffer and the descriptor

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def _bounce(self) -> np.ndarray:
        if self._buf is None:
            self._map = mmap.mmap(-1, BOUNCE_BYTES)  # anonymous: page-aligned, its pages touched only as filled
            self._buf = np.frombuffer(self._map, np.uint8)
        return self._buf

    def _drain(self) -> None:
        """Write the buffer's whole blocks directly, and move the part block after them to its start. Should the
        filesystem refuse a direct write (EINVAL) or take part of a block, everything buffered is written
        ordinarily instead, and so is the rest of the file."""
        buf = self._bounce()
        whole = self._used - self._used % ALIGN
        done = 0
        while self._direct and done < whole:
            try:
                done += _write_some(self._fd, buf[done:whole])
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._stop_direct()
            else:
                if done % ALIGN:
                    self._stop_direct()
        if not self._direct:
            self._write_all(buf[done:self._used])
            self._used = 0
            return
        rest = self._used - whole
        buf[:rest] = buf[whole:self._used]  # disjoint: rest < ALIGN <= whole
        self._used = rest

    def _stop_direct(self) -> None:
        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        self._direct = False

    def _write_all(self, data: np.ndarray) -> None:
        at = 0
        while at < len(data):
            at += _write_some(self._fd, data[at:])


def _write_some(fd: int, data: np.ndarray) -> int:
    """One ``write`` of ``data`` (at least a byte of it, or an error): how many bytes it took."""
    done = os.write(fd, memoryview(data))  # type: ignore[arg-type]  # numpy arrays are buffers
    if done <= 0 and len(data):
        raise OSError(errno.EIO, f"write took {done} of {len(data)} bytes")
    return done
