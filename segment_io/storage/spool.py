"""Objects a task reads twice, fetched once: a task-local copy on the executor's disk (object stores only).

A compaction task reads each dirty segment twice: once to build the offset map, once to clean it. On local disk the
second read is the page cache's; on an object store it is a second GET of the whole object, and a cleaning task's
dirty section is most of what it reads. :class:`TaskSpool` fetches such an object once, streaming it into a file
of the task's own spool directory, and maps that file for every read after: one GET, bounded memory (the pages
are the page cache's, not the task's heap), and both passes see the same bytes even if the object were replaced
between them.

The spool lives under the first of ``SPARK_LOCAL_DIRS`` (the executor's scratch disks, which Spark gives its
Python workers) or the system's temporary directory, in a directory named after the task's process; it is
removed when the task ends, and a later task on the same host removes those of processes that no longer exist (a
worker killed mid-task). It is used only when that disk has the room: the objects' bytes and a margin
(:func:`has_room`); otherwise the task reads twice, as without a spool.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import shutil
import socket
import tempfile
import time
import uuid
from typing import BinaryIO, ContextManager, Iterable, Iterator, Mapping

from segment_io.errors import PreconditionFailedError
from segment_io.storage.base import FileInfo, Storage, map_open

#: What the spool's disk must keep free beyond the objects it would hold, at least (Spark's own scratch files and the
#: host's other tasks share the disk): this, and :data:`FREE_MARGIN_SHARE` of the disk.
FREE_MARGIN_BYTES = 1 << 30
FREE_MARGIN_SHARE = 0.1
#: The spool directories' name prefix (``segjobs-spool-<host>-<pid>-<random>``).
PREFIX = "segjobs-spool-"
#: A spool left by a dead process is removed once it is this old (a host's scratch dir may be shared by
#: containers whose process ids this one cannot see: only its own host's, and only old ones).
STALE_AFTER_S = 600
#: The host spools' name prefix (``segjobs-run-<run id>``), and how old one must be to be swept (a run's spool
#: is written by its scans and read by its cleaning tasks, within the run).
RUN_PREFIX = "segjobs-run-"
RUN_STALE_AFTER_S = 24 * 3600


def spool_root() -> str:
    """Where spools go: the first of ``SPARK_LOCAL_DIRS`` (an executor's scratch disks), else the system's
    temporary directory."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return local or tempfile.gettempdir()


class TaskSpool:
    """Local copies of the listed objects ``files``, each fetched from ``storage`` the first time :meth:`mapped` is
    asked for it, pinned to its listed ETag (an object replaced since: :class:`PreconditionFailedError`).
    :attr:`active` is False (every read goes to the store) on local disk, for nothing to hold, or when the disk
    lacks the room and the spool adopted no copy. Close it (or use it as a context manager) to remove it."""

    def __init__(self, storage: Storage, files: Iterable[FileInfo], *, root: str | None = None,
                 adopted: Mapping[str, str] | None = None) -> None:
        """``adopted``: copies of some of ``files`` already on this host's disk (a scan's, by URI), which the spool
        takes over: they are read from there, without a fetch, and removed with the spool's own copies."""
        self.storage = storage
        #: the objects held: fetched (into :attr:`_files`) when first read, until released
        self._held = {f.uri: f for f in files}
        self.dir: str | None = None
        #: the local copy of each object read from this host's disk, by URI: fetched into :attr:`dir`, or adopted
        self._files: dict[str, str] = {}
        if not self._held or storage.local_path(next(iter(self._held))) is not None:
            self._held = {}
            return
        self._files = {uri: path for uri, path in (adopted or {}).items() if uri in self._held}
        to_fetch = [f for f in self._held.values() if f.uri not in self._files]
        if not to_fetch:
            return
        root = root or spool_root()
        try:
            os.makedirs(root, exist_ok=True)
            sweep_stale(root)
            if has_room(root, sum(f.size for f in to_fetch)):
                self.dir = tempfile.mkdtemp(prefix=f"{PREFIX}{_host()}-{os.getpid()}-", dir=root)
        except OSError:
            pass  # no usable scratch disk: read twice, as without a spool

    @property
    def active(self) -> bool:
        return self.dir is not None or bool(self._files)

    @contextlib.contextmanager
    def mapped(self, uri: str) -> Iterator[bytes | memoryview | mmap.mmap]:
        """``uri``'s bytes, as :meth:`Storage.read_mapped` gives them: from the spool's copy when it holds
        ``uri`` (fetched now the first time), else from the store."""
        file = self._open_copy(uri)
        if file is None and uri in self._held and self.dir is not None:
            path = os.path.join(self.dir, f"{len(self._files)}-{uuid.uuid4().hex[:8]}")
            if download_listed(self.storage, self._held[uri], path):
                self._files[uri] = path
                file = self._open_copy(uri)
            else:  # the scratch disk filled or failed: this object is read from the store each time
                self.release(uri)
        if file is None:
            with self.storage.read_mapped(uri) as data:
                yield data
            return
        with map_open(file) as data:
            yield data

    def _open_copy(self, uri: str) -> BinaryIO | None:
        """The local copy of ``uri`` opened for reading, or None: none kept, or an adopted one that is gone (swept
        by another process, say), which is then fetched as if it had never been there."""
        path = self._files.get(uri)
        if path is None:
            return None
        try:
            return open(path, "rb")
        except OSError:
            del self._files[uri]
            return None

    def release(self, uri: str) -> None:
        """``uri`` will not be read again: its copy goes (a later read goes to the store)."""
        self._held.pop(uri, None)
        path = self._files.pop(uri, None)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def close(self) -> None:
        """Remove the spool and every copy in it, those it adopted included."""
        self._held = {}
        for uri in list(self._files):
            self.release(uri)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "TaskSpool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def download_listed(storage: Storage, f: FileInfo, path: str) -> bool:
    """Download the listed object ``f`` into the new local file ``path``, pinned to its listed ETag and size: True
    when done; False, with nothing left at ``path``, when the local disk failed (full, say). An object replaced
    since it was listed is :class:`PreconditionFailedError`, also with nothing left."""
    try:
        if storage.download(f.uri, path, etag=f.etag) == f.size:
            return True
    except OSError:
        pass
    except PreconditionFailedError:
        raise PreconditionFailedError(f"the object changed after the run listed it (ETag {f.etag}): something else "
                                      f"writes under the log dir while this run holds it", uri=f.uri) from None
    finally:  # a partial or short copy is never left behind
        if not os.path.isfile(path) or os.path.getsize(path) != f.size:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return False


def has_room(directory: str, size: int) -> bool:
    """Whether the disk of ``directory`` can take ``size`` bytes more and keep :data:`FREE_MARGIN_BYTES` and
    :data:`FREE_MARGIN_SHARE` of itself free."""
    usage = shutil.disk_usage(directory)
    return usage.free - size >= max(FREE_MARGIN_BYTES, int(usage.total * FREE_MARGIN_SHARE))


def map_file(path: str) -> ContextManager[bytes | mmap.mmap]:
    """A local file's bytes, memory-mapped (an empty file: ``b""``); nothing may keep a view past the block."""
    return map_open(open(path, "rb"))


class HostSpool:
    """One run's copies of objects on one host, for a later task of the same run on that host: the segments the
    transaction-state scan of a partition fetched, for the partition's cleaning task (on one host, as ``local[N]``
    runs, it then fetches none of them again; on a cluster it finds them when it runs where the scan ran).

    It pickles as its name (``segjobs-run-<run id>``) and the spool root and host of the process that made it (the
    driver's), and lives under :func:`spool_root` of the host that uses it: an executor's scratch dirs, which Spark
    removes with the application. The driver's own scans (a compaction's first scan reads small partitions in full)
    write under the driver's root, which is not where Spark's Python workers on the same host look first (Spark gives
    them a scratch dir of their own in ``SPARK_LOCAL_DIRS``), so a task also looks under the driver's root. A copy is
    named by the object's URI, ETag and size and fetched with its listed ETag as a precondition, so a copy is the
    listed version of the object or is not there; it is written under a temporary name and renamed, so a reader never
    sees half of one. The cleaning task removes its partition's copies when it ends; what is left (a partition the
    scan read but that was not cleaned) goes with the scratch dirs, or is swept once a day old
    (:func:`sweep_stale`)."""

    def __init__(self, run_id: str) -> None:
        self.name = f"{RUN_PREFIX}{run_id}"
        self.origin_root = spool_root()
        self.origin_host = _host()

    @property
    def on_origin_host(self) -> bool:
        """Whether this process runs on the host of the process that made the spool (the driver's)."""
        return _host() == self.origin_host

    @classmethod
    def for_store(cls, run_id: str, storage: Storage, uri: str) -> "HostSpool | None":
        """The spool of run ``run_id`` reading ``uri``: None on local disk, whose page cache keeps what is read."""
        return cls(run_id) if storage.local_path(uri) is None else None

    @property
    def local_root(self) -> str:
        """Where this process writes its copies (:func:`spool_root`, absolute): a process on the same host may look
        there with :meth:`find`'s ``also``."""
        return os.path.abspath(spool_root())

    def _roots(self, also: Iterable[str] = ()) -> list[str]:
        """Where this process writes copies, then where the process that made the spool did, then ``also``."""
        roots: list[str] = []
        for root in (spool_root(), self.origin_root, *also):
            if os.path.abspath(root) not in map(os.path.abspath, roots):
                roots.append(root)
        return roots

    def _paths(self, f: FileInfo, also: Iterable[str] = ()) -> list[str]:
        digest = hashlib.sha1(f"{f.uri}\n{f.etag}\n{f.size}".encode()).hexdigest()
        return [os.path.join(root, self.name, digest) for root in self._roots(also)]

    def find(self, f: FileInfo, *, also: Iterable[str] = ()) -> str | None:
        """The local copy of the listed object ``f``, or None; ``also``: more spool roots to look under (another
        process's :attr:`local_root`, which is where its copies are when it ran on this host)."""
        for path in self._paths(f, also):
            try:
                if os.stat(path).st_size == f.size:
                    return path
            except OSError:
                pass
        return None

    def open(self, f: FileInfo) -> BinaryIO | None:
        """The local copy of ``f`` opened for reading, or None: opened now, so that a copy another attempt of the
        same task removes meanwhile stays readable to this one."""
        for path in self._paths(f):
            try:
                file = open(path, "rb")
            except OSError:
                continue
            if os.fstat(file.fileno()).st_size == f.size:
                return file
            file.close()
        return None

    def mapped(self, f: FileInfo) -> ContextManager[bytes | mmap.mmap] | None:
        """The local copy of ``f`` memory-mapped (opened now, as :meth:`open`), or None."""
        file = self.open(f)
        return map_open(file) if file is not None else None

    def fetch(self, storage: Storage, f: FileInfo) -> str | None:
        """The local copy of ``f``, fetched now (one GET, pinned to its ETag) unless it is there; None when it
        cannot be kept (no ETag to pin it to, no room for it (:func:`has_room`), a disk error): the
        caller then reads from the store."""
        found = self.find(f)
        if found is not None or f.etag is None:
            return found
        path = self._paths(f)[0]
        temp = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        try:
            if not os.path.isdir(os.path.dirname(path)):
                sweep_stale(os.path.dirname(os.path.dirname(path)))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not has_room(os.path.dirname(path), f.size) or not download_listed(storage, f, temp):
                return None
            os.replace(temp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            return None
        return path

    def discard(self, files: Iterable[FileInfo]) -> None:
        """Remove the copies of ``files`` (those there are)."""
        for path in (path for f in files for path in self._paths(f)):
            with contextlib.suppress(OSError):
                os.unlink(path)

    def remove(self, *, also: Iterable[str] = ()) -> None:
        """Remove every copy of the run on this host (the run has ended), under ``also`` too (as :meth:`find`)."""
        for root in self._roots(also):
            shutil.rmtree(os.path.join(root, self.name), ignore_errors=True)


def remove_host_spool(spool: HostSpool) -> None:
    """:meth:`HostSpool.remove` as a task: the driver runs a few at the end of a run, where its tasks ran."""
    spool.remove()


def sweep_stale(root: str) -> None:
    """Remove the spools under ``root`` whose process no longer exists (a Python worker killed mid-task leaves its
    spool behind; Spark does not remove what its workers write under its scratch dirs while the executor runs)."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    mine = f"{PREFIX}{_host()}-"
    for name in names:
        if name.startswith(RUN_PREFIX):  # a run's host spool, left where Spark does not remove scratch dirs
            with contextlib.suppress(OSError):
                if time.time() - os.stat(os.path.join(root, name)).st_mtime > RUN_STALE_AFTER_S:
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            continue
        if not name.startswith(mine):
            continue
        pid = name[len(mine):].split("-", 1)[0]
        path = os.path.join(root, name)
        try:
            old = time.time() - os.stat(path).st_mtime > STALE_AFTER_S
        except OSError:
            continue
        if old and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _host() -> str:
    """This host's name as a file name may hold it."""
    return "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname())[:64] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: it exists
    return True
