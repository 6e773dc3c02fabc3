"""Local-disk storage: plain paths (or ``file://`` URIs), crash-safe writes, content-hash etags.

Crash safety follows what a Kafka broker does for its checkpoint files: write a temporary file in the same
directory, fsync it, rename it over the target, fsync the directory. A crash therefore leaves the old file
or the new one, plus at worst a stray temporary file whose name :func:`is_temp_file` recognises.

Etags on local disk are content hashes (SHA-256, hex), so :meth:`LocalStorage.stat` reads the whole file;
use :meth:`LocalStorage.list` or :meth:`LocalStorage.exists` where only metadata is needed. Conditional
writes (:meth:`LocalStorage.put_if_match`, :meth:`LocalStorage.delete_if_match`) are atomic against other
segjobs processes: they hold a POSIX record lock on the target while comparing and replacing it.
"""

from __future__ import annotations

import builtins  # annotations in the class body say builtins.list: there, `list` is the listing method
import errno
import fcntl
import hashlib
import mmap
import os
import re
import shutil
import stat
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import BinaryIO, Callable, Iterable, Iterator, TypeVar

from segment_io.errors import (
    CrossDeviceError,
    NotFoundError,
    PreconditionFailedError,
    StorageEnvironmentError,
    StorageError,
)
from segment_io.storage.base import (
    KIND_DANGLING_SYMLINK,
    KIND_DEVICE,
    KIND_DIRECTORY,
    KIND_FIFO,
    KIND_FILE,
    KIND_SOCKET,
    FileInfo,
    Storage,
    map_open,
)
from segment_io.storage.direct import open_new

FILE_SCHEME = "file://"
#: Marker in the names of temporary files; they end in ``.tmp`` like a broker's own, which Kafka ignores.
_TEMP_RE = re.compile(r"\.segjobs-[0-9a-f]{12}\.tmp$")
_HASH_CHUNK = 8 << 20

# POSIX record locks do not exclude threads of the same process, so conditional writes also take this.
_PROCESS_LOCK = threading.Lock()

T = TypeVar("T")


def to_path(uri: str) -> str:
    """``file:///a/b`` -> ``/a/b``; plain paths are returned unchanged."""
    return uri[len(FILE_SCHEME):] if uri.startswith(FILE_SCHEME) else uri


def temp_name(name: str) -> str:
    """A unique temporary sibling name for file ``name``."""
    return f"{name}.segjobs-{uuid.uuid4().hex[:12]}.tmp"


def is_temp_file(name: str) -> bool:
    """True for temporary files left behind by an interrupted :class:`LocalStorage` write."""
    return _TEMP_RE.search(name) is not None


def content_etag(data: bytes) -> str:
    """The etag :class:`LocalStorage` reports for a file holding ``data``."""
    return hashlib.sha256(data).hexdigest()


def _file_etag(fd: int) -> str:
    digest = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, _HASH_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


#: The errors that are the machine's, not the data's nor segjobs': what each means and what fixes it.
_ENVIRONMENT_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "the filesystem is full: free space on it (or give the log dir a bigger disk) and run again",
    errno.EDQUOT: "the user's disk quota on this filesystem is used up: raise the quota or free space, and run again",
    errno.EROFS: "the filesystem is mounted read-only: remount it read-write (or run on a writable copy)",
    errno.EACCES: "the user running segjobs may not write here: fix the owner or mode of the file or directory",
    errno.EPERM: "the operation is not permitted: an immutable or append-only file (lsattr shows 'i' or 'a'; "
                 "chattr -i / -a clears it) or a mount that forbids it",
}


def _nearest_existing(path: str) -> str:
    """``path``, or its nearest ancestor that exists (what a file to be created there would live on)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path`` (its nearest existing
    ancestor), or None when it cannot be told."""
    try:
        st = os.statvfs(_nearest_existing(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def storage_error(exc: OSError, path: str, *, needed_bytes: int | None = None) -> StorageError:
    """The segjobs error for an ``OSError`` on ``path``: :class:`~segment_io.errors.StorageEnvironmentError`
    (naming the path, the errno, the space needed where known and the fix) for the errors that are the
    machine's (disk full, quota, read-only, permissions), :class:`~segment_io.errors.NotFoundError` for a
    missing file, else a plain :class:`~segment_io.errors.StorageError`."""
    where = exc.filename or path
    if exc.errno == errno.ENOENT:
        return NotFoundError("no such file or directory", uri=where)
    if exc.errno == errno.EXDEV:
        return CrossDeviceError(f"{exc.strerror or 'cross-device link'} (EXDEV): a rename cannot cross filesystems",
                                uri=where)
    fix = _ENVIRONMENT_ERRNOS.get(exc.errno or 0)
    if fix is None:
        return StorageError(f"{type(exc).__name__}: {exc.strerror or exc}", uri=where)
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    free = free_bytes(where) if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
    return StorageEnvironmentError(exc.strerror or name, uri=where, errno_name=name, fix=fix,
                                   needed_bytes=needed_bytes, free_bytes=free)


#: Concurrent fsyncs of one :meth:`LocalStorage.barrier`.
_BARRIER_THREADS = 8


def _fsync_path(path: str) -> None:
    """fsync a file or a directory (both open read-only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_quietly(path: str) -> OSError | None:
    try:
        _fsync_path(path)
        return None
    except OSError as exc:
        return exc


def _barrier_pool(paths: int) -> ThreadPoolExecutor:
    """The threads of a barrier (or of a block of them): started as fsyncs need them, at most
    :data:`_BARRIER_THREADS`."""
    return ThreadPoolExecutor(max_workers=min(_BARRIER_THREADS, paths), thread_name_prefix="segjobs-barrier")


def _unique_paths(uris: Iterable[str]) -> list[str]:
    """The local paths of ``uris``, each once, in order."""
    return list(dict.fromkeys(to_path(u) for u in uris))


def _sync_all(paths: list[str], pool: ThreadPoolExecutor | None) -> None:
    """fsync each of ``paths`` (on ``pool``'s threads when there are several); the first failure is raised, naming
    its path, once all are done."""
    if len(paths) <= 1 or pool is None:
        errors = [_fsync_quietly(p) for p in paths]
    else:
        errors = list(pool.map(_fsync_quietly, paths))
    for path, error in zip(paths, errors):
        if error is not None:
            raise storage_error(error, path) from None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_durably(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: a synced temp file renamed over it, then the directory synced (without
    ``durable``: neither synced, see :meth:`LocalStorage.barrier`)."""
    tmp = _write_temp(path, data, durable=durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if durable:
        _fsync_dir(os.path.dirname(path) or ".")


def _write_temp(path: str, data: bytes, *, durable: bool = True) -> str:
    """Write ``data`` (durably unless told otherwise) to a fresh temporary sibling of ``path``; returns the temp
    path."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, temp_name(name))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    return tmp


def _link_new(tmp: str, path: str, uri: str) -> None:
    """Give the written temp file ``tmp`` the name ``path`` unless that name exists (then
    :class:`PreconditionFailedError` naming ``uri``); the temp name goes either way."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise PreconditionFailedError("already exists", uri=uri) from None
    finally:
        _unlink_quietly(tmp)


def _close_quietly(f: BinaryIO) -> None:
    """Close a file whose buffered bytes may no longer fit: the data is being discarded anyway."""
    try:
        f.close()
    except OSError:
        pass


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _info(path: str, st: os.stat_result, etag: str | None = None) -> FileInfo:
    return FileInfo(uri=path, size=st.st_size, mtime_ms=st.st_mtime_ns // 1_000_000, etag=etag)


def path_kind(path: str) -> str | None:
    """What the entry at ``path`` is, without opening it (opening a FIFO blocks): :data:`KIND_FILE` for a regular
    file or a symbolic link to one, another ``KIND_*`` value for anything else (a link whose target is missing, or
    a loop of links, is a dangling symbolic link), None when nothing is there. Raises the segjobs storage error for
    any other failure (a parent directory that cannot be searched, ...), never taking it for an absent entry."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        try:
            os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error(e, path) from None
        return KIND_DANGLING_SYMLINK
    except NotADirectoryError:
        return None  # a parent is a file: nothing can be there
    except OSError as e:
        if e.errno == errno.ELOOP:
            return KIND_DANGLING_SYMLINK
        raise storage_error(e, path) from None
    if stat.S_ISREG(mode):
        return KIND_FILE
    if stat.S_ISDIR(mode):
        return KIND_DIRECTORY
    if os.path.islink(path):
        return _link_kind(path)  # named as a listing names it, with its target
    if stat.S_ISFIFO(mode):
        return KIND_FIFO
    if stat.S_ISSOCK(mode):
        return KIND_SOCKET
    return KIND_DEVICE


def _link_kind(path: str) -> str:
    """What a symbolic link that is neither a file nor a directory leads to: nothing (a dangling link, or a loop),
    or a device, FIFO or socket, named with its target (``symbolic link to a device file (/dev/zero)``)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return KIND_DANGLING_SYMLINK  # a link to a file or directory would have passed is_file/is_dir
    what = KIND_FIFO if stat.S_ISFIFO(mode) else KIND_SOCKET if stat.S_ISSOCK(mode) else KIND_DEVICE
    return f"symbolic link to a {what} ({os.path.realpath(path)})"


def _irregular_info(entry: os.DirEntry) -> FileInfo:
    """A listed entry that is neither a regular file nor a directory (``is_file``/``is_dir`` follow links)."""
    st = entry.stat(follow_symlinks=False)
    if entry.is_symlink():
        kind = _link_kind(entry.path)
    elif stat.S_ISFIFO(st.st_mode):
        kind = KIND_FIFO
    elif stat.S_ISSOCK(st.st_mode):
        kind = KIND_SOCKET
    else:
        kind = KIND_DEVICE
    return FileInfo(uri=entry.path, size=0, mtime_ms=st.st_mtime_ns // 1_000_000, kind=kind)


class LocalStorage(Storage):
    """Files on the local filesystem. Stateless, hence trivially pickle-safe."""

    atomic_rename = True

    # ------------------------------------------------------------------ naming and listing

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(to_path(base), *parts)

    @contextmanager
    def read_mapped(self, uri: str) -> Iterator[bytes | mmap.mmap]:
        path = to_path(uri)
        try:
            f = open(path, "rb")
        except OSError:
            yield self.read(uri)  # let read raise the located, typed error
            return
        with map_open(f) as mapped:
            yield mapped

    def set_mtime(self, uri: str, mtime_ms: int) -> bool:
        os.utime(to_path(uri), ns=(time.time_ns(), mtime_ms * 1_000_000))
        return True

    def local_path(self, uri: str) -> str:
        return to_path(uri)

    def same_filesystem(self, a: str, b: str) -> bool:
        try:
            devices = {os.stat(_nearest_existing(to_path(p))).st_dev for p in (a, b)}
        except OSError:
            return True  # cannot tell: a rename that then crosses filesystems fails with EXDEV, and is handled
        return len(devices) == 1

    def remove_empty_dir(self, uri: str) -> bool:
        path = to_path(uri)
        if not os.path.isdir(path) or os.path.islink(path):
            return False
        try:
            os.rmdir(path)  # refuses a directory that is not empty: nothing but an empty one can go
        except OSError:
            return False  # not empty, or not ours to remove (read-only, permissions): tidying never fails a run
        return True

    def list(self, prefix: str, *, recursive: bool = False, irregular: bool = False) -> list[FileInfo]:
        """Regular files under directory ``prefix`` (plus, with ``irregular``, every other entry: see
        :meth:`Storage.list`), sorted by path; empty when ``prefix`` does not exist (as on S3, where a prefix
        with no objects is indistinguishable from a missing one)."""
        root = to_path(prefix)
        return self._guard(root, lambda: sorted(self._walk(root, recursive, irregular), key=lambda f: f.uri))

    def _walk(self, root: str, recursive: bool, irregular: bool) -> Iterator[FileInfo]:
        try:
            entries = list(os.scandir(root))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            try:
                if entry.is_file():
                    yield _info(entry.path, entry.stat())
                    continue
                if entry.is_dir():
                    if irregular:
                        yield FileInfo(entry.path, 0, entry.stat().st_mtime_ns // 1_000_000, kind=KIND_DIRECTORY)
                    if recursive:
                        yield from self._walk(entry.path, True, irregular)
                elif irregular:
                    yield _irregular_info(entry)
            except FileNotFoundError:
                continue  # removed between scandir and stat: it is simply not there any more

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        root = to_path(prefix)

        def scan() -> list[str]:
            try:
                return sorted(e.path for e in os.scandir(root) if e.is_dir())
            except (FileNotFoundError, NotADirectoryError):
                return []

        return self._guard(root, scan)

    def stat(self, uri: str) -> FileInfo:
        """Size, mtime and content-hash etag (reads the whole file)."""
        path = to_path(uri)

        def do() -> FileInfo:
            fd = os.open(path, os.O_RDONLY)
            try:
                return _info(path, os.fstat(fd), _file_etag(fd))
            finally:
                os.close(fd)

        return self._guard(path, do)

    def exists(self, uri: str) -> bool:
        return os.path.isfile(to_path(uri))

    # ------------------------------------------------------------------ reading

    def read(self, uri: str) -> bytes:
        path = to_path(uri)

        def do() -> bytes:
            with open(path, "rb") as f:
                return f.read()

        return self._guard(path, do)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise StorageError(f"invalid range start={start} length={length}", uri=uri)
        path = to_path(uri)

        def do() -> bytes:
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.pread(fd, length, start)
            finally:
                os.close(fd)

        return self._guard(path, do)

    # ------------------------------------------------------------------ writing

    def write_atomic(self, uri: str, data: bytes, *, durable: bool = True) -> None:
        path = to_path(uri)

        self._guard(path, lambda: _replace_durably(path, data, durable=durable))

    @contextmanager
    def open_write(self, uri: str, *, durable: bool = True, uncached: bool = False) -> Iterator[BinaryIO]:
        path = to_path(uri)
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, temp_name(name))
        f = self._guard(path, lambda: open_new(tmp, uncached=uncached))
        try:
            try:
                yield f
                f.flush()
                if durable:
                    os.fsync(f.fileno())
                f.close()
            except OSError as e:  # a write of the caller's, or the flush: disk full, quota, ...
                raise storage_error(e, path) from None
            self._guard(path, lambda: os.replace(tmp, path))
        except BaseException:
            _close_quietly(f)
            _unlink_quietly(tmp)
            raise
        if durable:
            self._guard(path, lambda: _fsync_dir(directory or "."))

    def put_if_absent(self, uri: str, data: bytes, *, durable: bool = True) -> str:
        """Create ``uri`` with ``data`` unless it exists; returns the content etag.

        The content is written to a temporary file first and then hard-linked into place: ``link`` fails
        if the name exists, and readers never see a partly written file.
        """
        path = to_path(uri)

        def do() -> str:
            _link_new(_write_temp(path, data), path, uri)
            if durable:
                _fsync_dir(os.path.dirname(path) or ".")
            return content_etag(data)

        return self._guard(path, do)

    def write_temp(self, uri: str, data: bytes) -> str:
        path = to_path(uri)
        return self._guard(path, lambda: _write_temp(path, data, durable=False))

    def link_temp(self, temp_uri: str, uri: str) -> None:
        tmp, path = to_path(temp_uri), to_path(uri)
        self._guard(path, lambda: _link_new(tmp, path, uri))

    def put_if_match(self, uri: str, data: bytes, etag: str | None) -> str:
        """Replace ``uri`` only while its content hash is ``etag``; ``etag=None`` means "only if absent".
        Returns the new etag."""
        if etag is None:
            return self.put_if_absent(uri, data)
        path = to_path(uri)

        def replace() -> str:
            _replace_durably(path, data)
            return content_etag(data)

        return self._with_etag_locked(uri, etag, replace)

    def delete_if_match(self, uri: str, etag: str) -> None:
        """Remove ``uri`` only while its content hash is ``etag``."""
        path = to_path(uri)

        def remove() -> None:
            os.unlink(path)
            _fsync_dir(os.path.dirname(path) or ".")

        self._with_etag_locked(uri, etag, remove)

    def _with_etag_locked(self, uri: str, etag: str, action: Callable[[], T]) -> T:
        """Run ``action`` while holding a lock on the file at ``uri`` whose content hash is ``etag``.

        The lock is taken on the inode currently at ``uri``; if a racer replaced the name meanwhile, the
        inode we locked is stale and we look again, so comparisons are always against live content.
        """
        path = to_path(uri)

        def do() -> T:
            with _PROCESS_LOCK:
                while True:
                    try:
                        fd = os.open(path, os.O_RDWR)
                    except FileNotFoundError:
                        raise PreconditionFailedError(f"does not exist (expected etag {etag})",
                                                      uri=uri) from None
                    try:
                        fcntl.lockf(fd, fcntl.LOCK_EX)
                        try:
                            live = os.stat(path)
                        except FileNotFoundError:
                            live = None
                        if live is None or live.st_ino != os.fstat(fd).st_ino:
                            continue  # replaced or removed while we waited: look again
                        current = _file_etag(fd)
                        if current != etag:
                            raise PreconditionFailedError(
                                f"etag is {current}, expected {etag}", uri=uri)
                        return action()
                    finally:
                        os.close(fd)  # closing drops the record lock

        return self._guard(path, do)

    # ------------------------------------------------------------------ moving and removing

    def rename(self, src: str, dst: str) -> None:
        s, d = to_path(src), to_path(dst)
        self._guard(s, lambda: os.replace(s, d))

    def copy(self, src: str, dst: str) -> None:
        s, d = to_path(src), to_path(dst)
        self._guard(s, lambda: shutil.copyfile(s, d))

    def delete(self, uri: str, *, missing_ok: bool = True) -> None:
        path = to_path(uri)
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise NotFoundError("no such file", uri=path) from None
        except OSError as e:
            raise storage_error(e, path) from None

    def makedirs(self, uri: str) -> None:
        path = to_path(uri)
        self._guard(path, lambda: os.makedirs(path, exist_ok=True))

    def sync_dir(self, uri: str) -> None:
        path = to_path(uri)
        self._guard(path, lambda: _fsync_dir(path))

    def barrier(self, uris: Iterable[str]) -> None:
        """An fsync of every file and directory named, a few at a time: ext4's journal commits concurrent
        fsyncs together, so a barrier over a bin's files costs about what one sync did (measured: 64 partitions'
        files and directories in 33-135 ms on 8 threads against 72-200 ms one after another, on this VM's
        ext4).

        Not ``syncfs(2)``, though it measured about the same: it flushes every dirty page of the whole
        filesystem, and on a broker host the log dir's filesystem holds the broker's own unflushed log data
        (Kafka leaves flushing to the page cache), so each barrier would wait for, and force out, gigabytes that
        are none of segjobs' business, stalling the broker's I/O."""
        paths = _unique_paths(uris)
        if len(paths) <= 1:
            _sync_all(paths, None)
            return
        # Threads of this call only: an idle pool kept for the process would hold its exit (the console script
        # joins every non-daemon thread before it exits; see jobs.commands.cli.exit_now).
        with _barrier_pool(len(paths)) as pool:
            _sync_all(paths, pool)

    @contextmanager
    def barriers(self) -> Iterator[Callable[[Iterable[str]], None]]:
        """One pool of fsync threads for the block's barriers (a bin's commit takes five or more in a row: starting
        and joining threads for each showed in the driver's profile), shut down when the block ends, so no thread
        outlives it (see :meth:`barrier`)."""
        with _barrier_pool(_BARRIER_THREADS) as pool:
            yield lambda uris: _sync_all(_unique_paths(uris), pool)

    # ------------------------------------------------------------------ errors

    @staticmethod
    def _guard(path: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` translating OS errors into segjobs storage errors naming ``path``."""
        try:
            return fn()
        except OSError as e:
            raise storage_error(e, path) from None
