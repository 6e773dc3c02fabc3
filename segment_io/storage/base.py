"""The storage interface: one way to reach files under a local path or an ``s3://`` prefix.

Implementations are pickle-safe (they hold configuration, never live clients or file handles), so a
:class:`Storage` can be shipped to Spark executors inside a task closure.
"""

from __future__ import annotations

import builtins  # annotations in the class body say builtins.list: there, `list` is the listing method
import mmap
import os
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Callable, ContextManager, Iterable, Iterator, TypeVar

from segment_io.storage.traffic import in_context

#: Kinds of listed entries (:attr:`FileInfo.kind`). Only regular files hold data; the others are what a
#: listing with ``irregular=True`` reports so that a caller can tell "absent" from "present but unreadable".
KIND_FILE = "file"
KIND_DIRECTORY = "directory"  #: a directory (local), or a "folder" marker / common prefix (S3)
KIND_DANGLING_SYMLINK = "dangling symbolic link"
KIND_FIFO = "FIFO (named pipe)"
KIND_SOCKET = "socket"
KIND_DEVICE = "device file"


@dataclass(frozen=True)
class FileInfo:
    """One file or object found by a listing."""

    uri: str  #: full path or ``s3://bucket/key``
    size: int
    mtime_ms: int  #: last-modified time in epoch milliseconds
    etag: str | None = None  #: object-store version tag (S3 ETag); None on local disk
    #: what the entry is: :data:`KIND_FILE` for a regular file (the only kind a listing returns unless asked
    #: for ``irregular`` entries), else one of the other ``KIND_*`` values
    kind: str = "file"

    @property
    def name(self) -> str:
        """Last path component."""
        return self.uri.rstrip("/").rsplit("/", 1)[-1]


T = TypeVar("T")
R = TypeVar("R")


def map_ahead(fn: Callable[[T], R], items: Iterable[T], concurrency: int) -> Iterator[R]:
    """``fn`` over ``items``, results yielded in the order of ``items``, with at most ``concurrency`` calls in
    flight on a thread pool; 1 runs them one by one in this thread. The caller consumes results in order, and
    calls not yet consumed run at most ``2 * concurrency`` items ahead of it: meant for read-only work (listings,
    header reads, checks) whose results the caller then acts on in order. An exception of ``fn`` is raised when
    its item's turn comes; stopping early (closing the iterator) waits for the calls in flight and drops the
    rest."""
    if concurrency <= 1:
        yield from map(fn, items)
        return
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    window: deque[Future[R]] = deque()
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="segjobs-io")
    task = in_context(fn)  # the calls' store requests count where the caller's do
    try:
        for item in items:
            window.append(pool.submit(task, item))
            if len(window) >= 2 * concurrency:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
    finally:
        for f in window:
            f.cancel()
        pool.shutdown(wait=True)


class Storage(ABC):
    """Files under a root. URIs passed in are absolute (local paths or ``s3://bucket/key``)."""

    #: True where ``rename`` is atomic (local disk); False on object stores (copy + delete).
    atomic_rename: bool = False
    #: How many read-only requests (listings, header reads, recovery's checks) may be in flight at once over
    #: many partitions (see :func:`map_ahead`): 1 on local disk, where a request is a system call; more on
    #: object stores, where each is a round trip (``SEGJOBS_S3_CONCURRENCY``).
    io_concurrency: int = 1

    @abstractmethod
    def join(self, base: str, *parts: str) -> str:
        """Join path components the way this store spells them."""

    @abstractmethod
    def list(self, prefix: str, *, recursive: bool = False, irregular: bool = False) -> list[FileInfo]:
        """Files directly under the directory/prefix ``prefix`` (all below it when ``recursive``).

        Only regular files, unless ``irregular``: then also every other entry found (``FileInfo.kind`` says
        what it is): directories (on S3, "folder" marker objects), dangling symbolic links, FIFOs, sockets
        and device files. A directory is reported whether or not it is empty; with ``recursive`` its
        content follows as usual."""

    @abstractmethod
    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Immediate sub-directories (common prefixes) of ``prefix``, as full URIs without a trailing slash."""

    @abstractmethod
    def stat(self, uri: str) -> FileInfo:
        """Size, mtime and etag of one file; raises :class:`~segment_io.errors.NotFoundError`."""

    def exists(self, uri: str) -> bool:
        from segment_io.errors import NotFoundError

        try:
            self.stat(uri)
            return True
        except NotFoundError:
            return False

    @abstractmethod
    def read(self, uri: str) -> bytes:
        """The whole file (one request on S3)."""

    @abstractmethod
    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the file)."""

    @abstractmethod
    def write_atomic(self, uri: str, data: bytes, *, durable: bool = True) -> None:
        """Replace ``uri`` with ``data`` so a reader sees the old or the new content, never a mix.
        Local: temp file, fsync, rename, fsync the directory. S3: a single PUT. With ``durable=False`` the
        fsyncs are left out: the caller makes the file durable later with :meth:`barrier` (``uri`` and its
        directory), many files at once."""

    @abstractmethod
    def open_write(self, uri: str, *, durable: bool = True, uncached: bool = False) -> ContextManager[BinaryIO]:
        """A writable binary stream for large outputs. Content becomes visible only when the context
        exits without error (local: temp + fsync + rename; S3: multipart upload completed at exit,
        aborted on error). ``durable=False``: as for :meth:`write_atomic`. ``uncached``: the bytes will not be
        read back soon (a staged segment); local storage then writes them around the page cache where the
        filesystem does that well (:mod:`segment_io.storage.direct`), other stores ignore it."""

    @abstractmethod
    def put_if_absent(self, uri: str, data: bytes, *, durable: bool = True) -> str | None:
        """Create ``uri`` only if nothing is there. Raises
        :class:`~segment_io.errors.PreconditionFailedError` if it exists. Returns the new etag (S3).
        The content is durable before the name appears, always; ``durable=False`` leaves out only the fsync
        of the directory entry, which the caller then makes with :meth:`barrier` on the directory."""

    def write_temp(self, uri: str, data: bytes) -> str:
        """The first half of a :meth:`put_if_absent` whose syncs a :meth:`barrier` makes, on stores with an atomic
        rename: ``data`` in a new temporary sibling of ``uri`` (its name one :func:`is_temp_file` recognises),
        not synced. Returns the temporary file's URI, for :meth:`link_temp` once a barrier has made it durable."""
        raise NotImplementedError(f"{type(self).__name__} has no temporary files")

    def link_temp(self, temp_uri: str, uri: str) -> None:
        """The second half: give the (durable) temporary file ``temp_uri`` the name ``uri`` unless something is
        there (:class:`~segment_io.errors.PreconditionFailedError`), and drop the temporary name either way. The
        new entry is durable once a :meth:`barrier` covers ``uri``'s directory."""
        raise NotImplementedError(f"{type(self).__name__} has no temporary files")

    @abstractmethod
    def put_if_match(self, uri: str, data: bytes, etag: str | None) -> str | None:
        """Overwrite ``uri`` only if its current etag is ``etag`` (local: only if it exists and its
        content hash matches ``etag`` as returned by ``stat``). Raises ``PreconditionFailedError``."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``. Atomic on local disk; copy then delete on S3."""

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` (server-side on S3)."""

    @abstractmethod
    def delete(self, uri: str, *, missing_ok: bool = True) -> None:
        """Remove one file."""

    def delete_if_match(self, uri: str, etag: str) -> None:
        """Remove ``uri`` only if its current etag is ``etag``; raises ``PreconditionFailedError``
        otherwise (also when it is gone). Implementations make the check and the removal atomic."""
        from segment_io.errors import NotFoundError, PreconditionFailedError

        # Fallback for wrappers and test doubles: check-then-delete, not atomic.
        try:
            current = self.stat(uri).etag
        except NotFoundError:
            raise PreconditionFailedError(f"does not exist (expected etag {etag})", uri=uri) from None
        if current != etag:
            raise PreconditionFailedError(f"etag is {current}, expected {etag}", uri=uri)
        self.delete(uri)

    @abstractmethod
    def makedirs(self, uri: str) -> None:
        """Create a directory and its parents (a no-op on S3)."""

    def sync_dir(self, uri: str) -> None:  # noqa: B027 - a no-op default: only local disk has dirs to fsync
        """Make renames and creations inside directory ``uri`` durable (fsync on local disk; no-op on S3)."""

    def barrier(self, uris: Iterable[str]) -> None:  # noqa: B027 - a no-op default: nothing buffered to sync
        """Make durable, together, what was written without durability (``durable=False``) and the renames and
        creations since: the content of each file and the entries of each directory in ``uris``. One barrier for
        many files costs far less than a sync per file (local disk: concurrent fsyncs, which the filesystem's
        journal commits together). A no-op where every answered request is already durable (S3)."""

    @contextmanager
    def barriers(self) -> Iterator[Callable[[Iterable[str]], None]]:
        """For many :meth:`barrier` calls in a row (a bin's commit takes one per protocol step): yields the
        barrier to call. Where a barrier syncs on threads, the block keeps them between its barriers (a barrier
        alone starts and stops its own), and none outlives the block."""
        yield self.barrier

    @contextmanager
    def read_mapped(self, uri: str) -> Iterator[bytes | memoryview | mmap.mmap]:
        """A file's bytes without copying them where the store can (a local file is memory-mapped, so a
        header scan touches only the pages it reads); elsewhere the whole object, as :meth:`read`. Only for
        files nothing appends to or truncates while mapped. Nothing may keep a view of the bytes past the
        ``with`` block."""
        yield self.read(uri)

    def download(self, uri: str, path: str, *, etag: str | None = None) -> int:
        """Copy the object ``uri`` into the new local file ``path`` (created, written, not synced: a scratch copy)
        and return its size; an object store streams it, so memory stays bounded. ``etag``: only that version of
        the object (else :class:`~segment_io.errors.PreconditionFailedError`); ignored where files have none."""
        with self.read_mapped(uri) as data, open(path, "xb") as f:
            f.write(data)
            return len(data)

    def set_mtime(self, uri: str, mtime_ms: int) -> bool:
        """Set a file's last-modified time; True when the store can (local disk), False where it cannot (an
        object store's LastModified is the time of the write)."""
        return False

    def local_path(self, uri: str) -> str | None:
        """The local filesystem path for ``uri``, or None for remote stores."""
        return None

    def same_filesystem(self, a: str, b: str) -> bool:
        """Whether a file under ``a`` can be renamed to a name under ``b`` (both on one filesystem; a path that
        does not exist yet counts by its nearest existing ancestor). True on stores without filesystems."""
        return True

    def remove_empty_dir(self, uri: str) -> bool:
        """Remove directory ``uri`` if it is empty (atomically: a directory something was just written into
        stays); True when it was removed, False when it was not there, not empty, or could not be removed (tidying
        never fails). A no-op returning False on stores without directories."""
        return False

    def check_reachable(self, uri: str) -> None:  # noqa: B027 - a no-op default: local disk is always there
        """Fail within seconds, with :class:`~segment_io.errors.StorageAccessError`, when the store behind
        ``uri`` cannot be used at all (S3: no credentials, an endpoint that does not answer, a missing
        bucket). Reads and writes nothing; local disk has nothing to reach."""

    def list_pending_uploads(self, prefix: str) -> builtins.list[PendingUpload]:
        """Uploads begun under directory/prefix ``prefix`` and neither completed nor aborted (an S3
        multipart upload whose writer died): invisible in :meth:`list`, yet their parts are stored (and
        billed). None on stores without such uploads."""
        return []

    def abort_pending_upload(self, upload: "PendingUpload") -> None:
        """Discard a pending upload and its parts."""
        raise NotImplementedError(f"{type(self).__name__} has no pending uploads")


@contextmanager
def map_open(file: BinaryIO) -> Iterator[bytes | mmap.mmap]:
    """The bytes of a local file already open for reading, memory-mapped (an empty file: ``b""``; mmap refuses
    those); the file is closed when the block ends. Nothing may keep a view of the bytes past the block."""
    with file as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield data
        finally:
            try:
                data.close()
            except BufferError:
                pass  # an exception's traceback still holds a view of it: unmapped when collected


def release_mapped_pages(data: object, start: int = 0, end: int | None = None) -> None:
    """Let go of the resident pages of a memory-mapped file (what :meth:`Storage.read_mapped` yields on local
    disk) between byte ``start`` and ``end`` (default: the end) once they have been read: they leave this
    process's RSS and stay in the page cache, so reading them again costs a page fault, not I/O. Only whole
    pages inside the range are released; anything that is not a mapping is left alone."""
    if not isinstance(data, mmap.mmap) or data.closed or not hasattr(mmap, "MADV_DONTNEED"):
        return
    stop = len(data) if end is None else min(end, len(data))
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # page-aligned, rounded up: a page partly outside stays
    last = stop if stop == len(data) else stop // mmap.PAGESIZE * mmap.PAGESIZE
    if last <= first:
        return
    try:
        data.madvise(mmap.MADV_DONTNEED, first, last - first)
    except (OSError, ValueError):
        pass  # advice only: a mapping that cannot take it keeps its pages, nothing else changes


@dataclass(frozen=True)
class PendingUpload:
    """An upload that was begun and never completed: where it was going, its id, and its parts' bytes."""

    uri: str
    upload_id: str
    size: int
    initiated_ms: int
