"""Exclusive access to a log dir for one job run, and where a run keeps its own files.

Local log dirs are locked exactly as a Kafka broker locks them: the broker opens ``<log dir>/.lock``
(creating it if absent) and calls Java's ``FileChannel.tryLock()``, which on Linux is an fcntl (POSIX
record) lock over the whole file. We take the same kind of lock with :func:`fcntl.lockf` — ``flock`` locks
live in a separate namespace and would not conflict with a broker — so segjobs refuses a dir a running
broker owns, and a broker refuses to start on a dir segjobs is working on.

Object stores have no locks, so S3 log dirs get a *lease*: a small JSON object created with a conditional
PUT (``If-None-Match: *``). It names its holder and an expiry; an expired lease may be taken over with
``If-Match`` on its etag (two racing takers cannot both win), and release deletes it only while the etag
is still ours. The lease lives under :func:`work_uri`, never inside the log dir itself, because a log dir
must hold only what a broker understands.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import threading
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Iterator

from segment_io.errors import LockHeldError, NotFoundError, PreconditionFailedError, StorageError, UsageError
from segment_io.layout import LOCK_FILE
from segment_io.storage import Storage

log = logging.getLogger(__name__)

#: Suffix of the sibling directory/prefix that holds a log dir's segjobs files (leases, staging, ledgers).
WORK_SUFFIX = ".segjobs"
LEASE_NAME = "lease.json"
#: Default lease lifetime; long runs call :meth:`Lease.renew` between units of work.
DEFAULT_TTL_MS = 60 * 60 * 1000
_LEASE_FORMAT = 1
_ACQUIRE_ATTEMPTS = 5

# POSIX locks belong to the process: a second lockf() in the same process "succeeds", and closing either
# descriptor drops the lock. So the process remembers which dirs it holds and refuses a second acquire.
_HELD_LOCAL: set[str] = set()
_HELD_LOCAL_GUARD = threading.Lock()


def work_uri(log_dir_uri: str) -> str:
    """Where segjobs keeps its own files for ``log_dir_uri``: the sibling ``<log dir>.segjobs``.

    ``/data/kafka-logs`` -> ``/data/kafka-logs.segjobs``; ``s3://b/kafka/logs/`` ->
    ``s3://b/kafka/logs.segjobs``. Leases, staging and ledgers all live below it; never inside the log dir.
    """
    scheme, sep, rest = log_dir_uri.partition("://")
    if not sep:
        rest = log_dir_uri
    rest = rest.rstrip("/")
    # An s3 URI's first component is the bucket: "s3://bucket" is a root just like "/".
    if not rest or (scheme == "s3" and "/" not in rest):
        raise UsageError(f"{log_dir_uri}: a log dir at a filesystem or bucket root has no sibling for segjobs' "
                         f"work files; use a directory or prefix below the root")
    return (f"{scheme}://" if sep else "") + rest + WORK_SUFFIX


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: written into the lease object and quoted in :class:`LockHeldError` messages."""

    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def describe(self) -> str:
        return f"segjobs run {self.run_id} on host {self.host} (pid {self.pid})"


@dataclass
class Lease:
    """A held lock. ``uri`` is the ``.lock`` file or the lease object; ``etag`` is None for local locks."""

    log_dir_uri: str
    uri: str
    holder: Holder
    acquired_ms: int
    expires_ms: int | None  #: None for local locks, which last as long as the process holds them
    etag: str | None = None
    _storage: Storage | None = field(default=None, repr=False)

    def renew(self, now_ms: int, ttl_ms: int = DEFAULT_TTL_MS) -> None:
        """Push the expiry to ``now_ms + ttl_ms``. Raises :class:`LockHeldError` if another run took the
        lease over meanwhile (it had expired): the caller must stop writing."""
        if self.etag is None or self._storage is None:
            return  # a local lock does not expire
        record = _lease_record(self.holder, self.log_dir_uri, self.acquired_ms, now_ms + ttl_ms)
        try:
            self.etag = self._storage.put_if_match(self.uri, record, self.etag)
        except PreconditionFailedError:
            raise LockHeldError(f"{self.log_dir_uri}: lease {self.uri} was taken over by another run after it "
                                f"expired at {_fmt_ms(self.expires_ms)}; stop writing") from None
        self.expires_ms = now_ms + ttl_ms


@contextmanager
def acquire(
    storage: Storage,
    log_dir_uri: str,
    *,
    now_ms: int,
    ttl_ms: int = DEFAULT_TTL_MS,
    holder: Holder | None = None,
) -> Iterator[Lease]:
    """Hold exclusive access to ``log_dir_uri`` for the duration of the ``with`` block.

    Local dirs: the broker-compatible ``.lock`` (``now_ms``/``ttl_ms`` unused: the lock lasts while the
    process holds it). S3: a lease object under :func:`work_uri` expiring at ``now_ms + ttl_ms``.
    Raises :class:`LockHeldError` naming the current holder when the dir is taken.
    """
    holder = holder or Holder()
    local = storage.local_path(log_dir_uri)
    if local is not None:
        with _local_lock(local, log_dir_uri, holder, now_ms) as lease:
            yield lease
        return
    lease = _take_lease(storage, log_dir_uri, holder, now_ms, ttl_ms)
    try:
        yield lease
    except BaseException:
        _release_lease(lease, quiet=True)
        raise
    _release_lease(lease, quiet=False)


# ---------------------------------------------------------------------------------------------- local


@contextmanager
def _local_lock(path: str, log_dir_uri: str, holder: Holder, now_ms: int) -> Iterator[Lease]:
    if not os.path.isdir(path):
        raise UsageError(f"{log_dir_uri}: log dir does not exist or is not a directory")
    lock_path = os.path.join(path, LOCK_FILE)
    key = os.path.realpath(lock_path)
    busy = LockHeldError(f"{log_dir_uri}: {lock_path} is locked by another process (a running Kafka broker or "
                         f"another segjobs run); stop it or choose another log dir")
    with _HELD_LOCAL_GUARD:
        if key in _HELD_LOCAL:
            raise busy
        _HELD_LOCAL.add(key)
    try:
        # Same open mode as the broker (create, read, write); the file is left in place afterwards, as an
        # empty .lock is what a broker creates anyway, and deleting it would race with a broker opening it.
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                # Whole file (len 0 = to EOF and beyond), exclusive, non-blocking: Java's tryLock().
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    raise busy from None
                raise
            try:
                yield Lease(log_dir_uri=log_dir_uri, uri=lock_path, holder=holder, acquired_ms=now_ms,
                            expires_ms=None)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        with _HELD_LOCAL_GUARD:
            _HELD_LOCAL.discard(key)


# ---------------------------------------------------------------------------------------------- S3 lease


def lease_uri(storage: Storage, log_dir_uri: str) -> str:
    """The lease object of ``log_dir_uri``."""
    return storage.join(work_uri(log_dir_uri), LEASE_NAME)


def _lease_record(holder: Holder, log_dir_uri: str, acquired_ms: int, expires_ms: int) -> bytes:
    return json.dumps({"format": _LEASE_FORMAT, "log_dir": log_dir_uri, "holder": asdict(holder),
                       "acquired_ms": acquired_ms, "expires_ms": expires_ms}, sort_keys=True).encode()


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _take_lease(storage: Storage, log_dir_uri: str, holder: Holder, now_ms: int, ttl_ms: int) -> Lease:
    if ttl_ms <= 0:
        raise UsageError(f"lease ttl must be positive, got {ttl_ms} ms")
    uri = lease_uri(storage, log_dir_uri)
    record = _lease_record(holder, log_dir_uri, now_ms, now_ms + ttl_ms)

    def granted(etag: str | None) -> Lease:
        return Lease(log_dir_uri=log_dir_uri, uri=uri, holder=holder, acquired_ms=now_ms,
                     expires_ms=now_ms + ttl_ms, etag=etag, _storage=storage)

    # A few rounds only to ride out a lease that disappears between our failed create and our read.
    for _ in range(_ACQUIRE_ATTEMPTS):
        try:
            return granted(storage.put_if_absent(uri, record))
        except PreconditionFailedError:
            pass
        try:
            # stat before read: if the object changes in between, the etag is the older one and the
            # takeover below fails its condition rather than overwriting a lease we did not look at.
            etag = storage.stat(uri).etag
            current = storage.read(uri)
        except NotFoundError:
            continue
        who, expires_ms = _describe_lease(current)
        if expires_ms is None or now_ms < expires_ms:
            raise LockHeldError(f"{log_dir_uri} is locked by {who} until {_fmt_ms(expires_ms)} "
                                f"(expires_ms={expires_ms}); lease object {uri}")
        try:
            new_etag = storage.put_if_match(uri, record, etag)
        except PreconditionFailedError:
            raise LockHeldError(f"{log_dir_uri}: the expired lease of {who} was taken over by another run "
                                f"at the same moment; lease object {uri}") from None
        log.warning("%s: took over the lease of %s, which expired at %s", log_dir_uri, who, _fmt_ms(expires_ms))
        return granted(new_etag)
    raise LockHeldError(f"{log_dir_uri}: the lease {uri} kept changing; another run is contending for it")


def _describe_lease(data: bytes) -> tuple[str, int | None]:
    """(who holds it, expiry ms); an unreadable lease never expires, so it is never silently taken over."""
    try:
        doc = json.loads(data)
        h = doc["holder"]
        return Holder(host=str(h["host"]), pid=int(h["pid"]), run_id=str(h["run_id"])).describe(), \
            int(doc["expires_ms"])
    except (ValueError, KeyError, TypeError):
        return "an unreadable lease (delete it by hand if no run is active)", None


def _release_lease(lease: Lease, *, quiet: bool) -> None:
    assert lease._storage is not None and lease.etag is not None
    try:
        lease._storage.delete_if_match(lease.uri, lease.etag)
    except PreconditionFailedError:
        message = (f"{lease.log_dir_uri}: lease {lease.uri} was taken over by another run after it expired at "
                   f"{_fmt_ms(lease.expires_ms)}; that run may have worked on the log dir concurrently")
        if quiet:
            log.error(message)
        else:
            raise LockHeldError(message) from None
    except StorageError as e:
        if not quiet:
            raise
        # The run already failed: report that failure, not this one. The lease then simply expires.
        log.error("%s: could not release lease %s: %s", lease.log_dir_uri, lease.uri, e)
