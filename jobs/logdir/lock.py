"""Exclusive access to a log dir for one job run, and where a run keeps its own files.

Local log dirs are locked exactly as a Kafka broker locks them: the broker opens ``<log dir>/.lock``
(creating it if absent) and calls Java's ``FileChannel.tryLock()``, which on Linux is an fcntl (POSIX
record) lock over the whole file. We take the same kind of lock with :func:`fcntl.lockf` — ``flock`` locks
live in a separate namespace and would not conflict with a broker — so segjobs refuses a dir a running
broker owns, and a broker refuses to start on a dir segjobs is working on. The ``.lock`` file stays empty
(a broker creates it empty and never reads it; anything of ours in it would be foreign to the log dir):
the holder of a segjobs lock is written to ``<work>/lock-holder.json`` instead, so a refused run can say
whether a segjobs run or something else (a broker) holds the dir. A lock dies with its process, so a local
lock never needs breaking.

Object stores have no locks, so S3 log dirs get a *lease*: a small JSON object created with a conditional
PUT (``If-None-Match: *``). It names its holder and an expiry a short TTL ahead (:data:`DEFAULT_TTL_MS`,
``SEGJOBS_LEASE_TTL``); while the run works, a heartbeat thread renews it every TTL/3 with ``If-Match`` on
its etag. The lease can be taken over (``If-Match`` on the etag it was read with, so two racing takers
cannot both win) when it has expired, when its holder ran on this host and that process is gone, or when
the user names the holder's run id (``segjobs recover --break-lease RUN_ID``); the new lease names the run it was
taken from (``took_over``), which may still be at work. Release deletes it only while the etag is still ours. A
conditional PUT refused only because the client retried one that had applied (its answer lost on the network) is
recognised by reading the lease back: it is still this run's, as written. The lease lives under :func:`work_uri`,
never inside the log dir itself, because a log dir must hold only what a broker understands.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import struct
import threading
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterator

from jobs.rules.timeutil import format_instant
from segment_io.errors import (
    LockHeldError,
    NotFoundError,
    PreconditionFailedError,
    StorageError,
    UsageError,
)
from segment_io.layout import LOCK_FILE
from segment_io.storage import Storage
from segment_io.storage.traffic import in_context
from segment_io.units import parse_duration

log = logging.getLogger(__name__)

#: Suffix of the sibling directory/prefix that holds a log dir's segjobs files (leases, staging, ledgers).
WORK_SUFFIX = ".segjobs"
LEASE_NAME = "lease.json"
#: Beside the work files of a local log dir: who holds its ``.lock`` (never inside the ``.lock`` itself).
HOLDER_NAME = "lock-holder.json"
#: Default lease lifetime. Short, because a run that dies keeps others out until it expires; a running job
#: renews it every third of it (see :meth:`Lease.start_heartbeat`).
DEFAULT_TTL_MS = 2 * 60 * 1000
#: Environment variable that sets the lease TTL (a duration: ``90s``, ``5m``, or milliseconds).
TTL_ENV = "SEGJOBS_LEASE_TTL"
#: A lease shorter than this would expire between two S3 round trips under load.
MIN_TTL_MS = 1000
_LEASE_FORMAT = 1
_ACQUIRE_ATTEMPTS = 5

# POSIX locks belong to the process: a second lockf() in the same process "succeeds", and closing either
# descriptor drops the lock. So the process remembers which dirs it holds and refuses a second acquire.
_HELD_LOCAL: set[str] = set()
_HELD_LOCAL_GUARD = threading.Lock()


class LeaseLost(Exception):
    """The run's lease was taken over (it expired) or could not be renewed before it expired: the run must
    not commit anything more. Deliberately not a :class:`~segment_io.errors.SegjobsError`: the jobs catch
    those per partition and go on with the next one, and this must stop the whole run."""


def work_uri(log_dir_uri: str) -> str:
    """Where segjobs keeps its own files for ``log_dir_uri``: the sibling ``<log dir>.segjobs``.

    ``/data/kafka-logs`` -> ``/data/kafka-logs.segjobs``; ``s3://b/kafka/logs/`` ->
    ``s3://b/kafka/logs.segjobs``. Leases, staging and ledgers all live below it; never inside the log dir.
    A local log dir is named by its real path (symbolic links resolved), so one log dir reached through a
    link has one work dir, whatever name each run gives it: its intents and ledger must never split in two.
    """
    scheme, sep, rest = log_dir_uri.partition("://")
    if not sep:
        rest = log_dir_uri
    if not sep or scheme == "file":
        rest = os.path.realpath(rest) if rest.strip("/") else rest
    rest = rest.rstrip("/")
    # An s3 URI's first component is the bucket: "s3://bucket" is a root just like "/".
    if not rest or (scheme == "s3" and "/" not in rest):
        raise UsageError(f"{log_dir_uri}: a log dir at a filesystem or bucket root has no sibling for segjobs' "
                         f"work files; use a directory or prefix below the root")
    return (f"{scheme}://" if sep else "") + rest + WORK_SUFFIX


def lease_ttl_ms(value: str | int | None = None) -> int:
    """The lease TTL in ms: ``value`` (e.g. a ``--lease-ttl`` option) if given, else ``$SEGJOBS_LEASE_TTL``,
    else :data:`DEFAULT_TTL_MS`. Durations read like topic configs: ``90s``, ``5m``, or plain milliseconds.
    Raises :class:`UsageError` for anything unreadable or shorter than :data:`MIN_TTL_MS`."""
    source = "lease TTL" if value is not None else TTL_ENV
    raw = value if value is not None else os.environ.get(TTL_ENV)
    if raw is None or raw == "":
        return DEFAULT_TTL_MS
    try:
        ttl = parse_duration(raw)
    except ValueError as e:
        raise UsageError(f"{source}={raw!r}: {e}; give a duration such as 90s or 5m") from None
    if ttl < MIN_TTL_MS:
        raise UsageError(f"{source}={raw!r}: a lease TTL must be at least {MIN_TTL_MS} ms")
    return ttl


# ---------------------------------------------------------------------------------------------- holders


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat``: when the process started, in clock ticks since boot."""
    stat = _read_text(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or parentheses.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def process_identity(pid: int) -> str | None:
    """``<boot id>|<pid namespace>|<start ticks>`` of a running process: with the pid, this names one
    process for good (a pid is reused; a pid that started at the same tick of the same boot is not). None
    where ``/proc`` does not tell."""
    boot = _read_text("/proc/sys/kernel/random/boot_id")
    ns, start = _pid_namespace(pid), _start_ticks(pid)
    if boot is None or ns is None or start is None:
        return None
    return f"{boot.strip()}|{ns}|{start}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock or lease: written into the lease object (S3) or ``lock-holder.json`` (local), and
    quoted in every :class:`LockHeldError`."""

    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: :func:`process_identity` of the holder's process when it took the lock (None: not known)
    process: str | None = None

    @classmethod
    def this_process(cls, run_id: str | None = None) -> "Holder":
        """The holder that stands for the calling process."""
        return cls(run_id=run_id or uuid.uuid4().hex, process=process_identity(os.getpid()))

    @classmethod
    def from_dict(cls, d: dict) -> "Holder":
        process = d.get("process")
        return cls(host=str(d["host"]), pid=int(d["pid"]), run_id=str(d["run_id"]),
                   process=None if process is None else str(process))

    def describe(self, since_ms: int | None = None) -> str:
        since = "" if since_ms is None else f" since {format_instant(since_ms)}"
        return f"segjobs run {self.run_id} (pid {self.pid} on host {self.host}{since})"

    def alive(self) -> bool | None:
        """Whether the holder's process still runs: True or False when this host can tell, None when it
        cannot (another host, or another pid namespace on this one)."""
        if self.host != socket.gethostname():
            return None
        if self.process is not None:
            boot, ns, _start = (self.process.split("|") + ["", "", ""])[:3]
            here = process_identity(os.getpid())
            if here is not None:
                here_boot, here_ns, _ = here.split("|")
                if boot != here_boot:
                    return False  # this host has rebooted since: every process of then is gone
                if ns != here_ns:
                    return None  # another container's pids mean nothing here
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it exists, owned by another user
        if self.process is not None:
            start_now = _start_ticks(self.pid)
            if start_now is not None and start_now != self.process.split("|")[-1]:
                return False  # the pid now belongs to a process that started later
        return True


# ---------------------------------------------------------------------------------------------- the lease


@dataclass
class Lease:
    """A held lock. ``uri`` is the ``.lock`` file or the lease object; ``etag`` is None for local locks.

    ``notice`` says whose lease this run took over and why, when it did (callers print it)."""

    log_dir_uri: str
    uri: str
    holder: Holder
    acquired_ms: int
    expires_ms: int | None  #: None for local locks, which last as long as the process holds them
    etag: str | None = None
    ttl_ms: int = DEFAULT_TTL_MS
    notice: str | None = None
    #: the run id of the holder whose lease this one took over (expired, or broken), unless its process is known
    #: to be gone: that run may still be at work for a while (see :class:`jobs.logdir.recover.Fence`); recorded in
    #: the lease object
    took_over: str | None = None
    #: the runs recovery under this lease leaves their recent stagings to: ``took_over`` and the run that one had
    #: taken the lease over from, if any (:func:`fenced_by_takeover`)
    fenced: frozenset[str] = frozenset()
    _storage: Storage | None = field(default=None, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost: str | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def expires(self) -> bool:
        return self.etag is not None and self._storage is not None

    @property
    def lost(self) -> str | None:
        """Why the lease is no longer ours, once the heartbeat or :meth:`check` found out; else None."""
        return self._lost

    def renew(self, now_ms: int, ttl_ms: int | None = None) -> None:
        """Push the expiry to ``now_ms + ttl_ms`` (default: the lease's TTL). Raises :class:`LockHeldError`
        if another run took the lease over meanwhile: the caller must stop writing."""
        if not self.expires:
            return  # a local lock does not expire
        assert self._storage is not None
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        with self._guard:  # the heartbeat and the driver may renew at the same moment
            renewed = LeaseInfo(self.holder, self.acquired_ms, now_ms + ttl, self.took_over)
            record = _lease_record(self.log_dir_uri, renewed)
            try:
                self.etag = self._storage.put_if_match(self.uri, record, self.etag)
            except PreconditionFailedError:
                # A renewal whose answer was lost (the PUT applied, the client's retry then failed its condition)
                # is no takeover: the lease object still names this run, renewed as asked.
                etag = _still_ours(self._storage, self.uri, renewed)
                if etag is None:
                    raise LockHeldError(f"{self.log_dir_uri}: lease {self.uri} was taken over by another run (it "
                                        f"expired at {format_instant(self.expires_ms)}, or was broken with "
                                        f"--break-lease); stop writing") from None
                self.etag = etag
            self.expires_ms = now_ms + ttl

    def check(self, now_ms: int) -> None:
        """Call before each commit: raises :class:`LeaseLost` once the lease is not ours any more. Looks at
        the lease object itself (one HEAD request), so a takeover is seen before the next commit even if the
        heartbeat has not run since; renews right here if the heartbeat has fallen behind (less than a third
        of the TTL left)."""
        if not self.expires:
            return
        assert self._storage is not None
        if self._lost is None:
            with self._guard:  # not while a renewal is changing the etag
                try:
                    etag = self._storage.stat(self.uri).etag
                except NotFoundError:
                    etag = None
                except StorageError:
                    etag = self.etag  # cannot look: the renewal below (or the expiry) decides
                if etag != self.etag:
                    self._lost = (f"{self.log_dir_uri}: lease {self.uri} is no longer this run's: "
                                  + ("it was deleted" if etag is None else _holder_of(self._storage, self.uri)))
        if self._lost is None and self.expires_ms is not None and now_ms >= self.expires_ms - self.ttl_ms // 3:
            self._renew_or_note(now_ms)
        if self._lost is not None:
            raise LeaseLost(self._lost)

    def _renew_or_note(self, now_ms: int) -> None:
        """One renewal; a takeover, or a failure once the lease has expired, marks the lease lost."""
        try:
            self.renew(now_ms)
        except LockHeldError as e:
            self._lost = str(e)
        except StorageError as e:
            if self.expires_ms is not None and now_ms >= self.expires_ms:
                self._lost = (f"{self.log_dir_uri}: lease {self.uri} expired at {format_instant(self.expires_ms)} "
                              f"before it could be renewed ({e}); another run may have taken it")
            else:  # there is time left: the next beat tries again
                log.warning("%s: could not renew lease %s (will retry): %s", self.log_dir_uri, self.uri, e)

    def start_heartbeat(self, clock: Callable[[], int]) -> None:
        """Renew the lease every TTL/3 on ``clock`` (epoch ms) in a daemon thread until :meth:`stop_heartbeat`
        or until the lease is lost. A no-op for local locks."""
        if not self.expires or self._thread is not None:
            return
        interval_s = self.ttl_ms / 3000

        def beat() -> None:
            while not self._stop.wait(interval_s) and self._lost is None:
                self._renew_or_note(clock())

        self._thread = threading.Thread(target=in_context(beat), name=f"segjobs-lease-heartbeat {self.uri}",
                                        daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


@contextmanager
def acquire(
    storage: Storage,
    log_dir_uri: str,
    *,
    now_ms: int,
    ttl_ms: int = DEFAULT_TTL_MS,
    holder: Holder | None = None,
    clock: Callable[[], int] | None = None,
    break_run_id: str | None = None,
) -> Iterator[Lease]:
    """Hold exclusive access to ``log_dir_uri`` for the duration of the ``with`` block.

    Local dirs: the broker-compatible ``.lock``, its holder recorded in ``<work>/lock-holder.json``
    (``ttl_ms``/``clock`` unused: the lock lasts while the process holds it). S3: a lease object under
    :func:`work_uri` expiring at ``now_ms + ttl_ms``, renewed on ``clock`` by a heartbeat thread when
    ``clock`` is given. ``break_run_id`` (S3 only) takes over a live lease, but only the one of that run.
    Raises :class:`LockHeldError` naming the current holder when the dir is taken.
    """
    holder = holder or Holder.this_process()
    local = storage.local_path(log_dir_uri)
    if local is not None:
        if break_run_id is not None:
            raise UsageError(f"{log_dir_uri}: --break-lease is for S3 leases; a local log dir's lock is the "
                             f"kernel's and dies with its process, so there is nothing to break")
        with _local_lock(storage, local, log_dir_uri, holder, now_ms) as lease:
            yield lease
        return
    lease = _take_lease(storage, log_dir_uri, holder, now_ms, ttl_ms, break_run_id)
    if clock is not None:
        lease.start_heartbeat(clock)
    try:
        yield lease
    except BaseException:
        lease.stop_heartbeat()
        _release_lease(lease, quiet=True)
        raise
    lease.stop_heartbeat()
    _release_lease(lease, quiet=False)


# ---------------------------------------------------------------------------------------------- local


def holder_uri(storage: Storage, log_dir_uri: str) -> str:
    """The file that names the segjobs run holding a local log dir's ``.lock``."""
    return storage.join(work_uri(log_dir_uri), HOLDER_NAME)


def _holder_record(holder: Holder, log_dir_uri: str, acquired_ms: int) -> bytes:
    return json.dumps({"format": _LEASE_FORMAT, "log_dir": log_dir_uri, "holder": asdict(holder),
                       "acquired_ms": acquired_ms}, sort_keys=True).encode()


def _local_holder_message(storage: Storage, log_dir_uri: str, lock_path: str) -> str:
    """Who holds the ``.lock`` we were refused: the segjobs run its holder file names, if that run's
    process is still there; otherwise somebody who does not write one."""
    who, segjobs = _local_holder(storage, log_dir_uri, lock_path)
    if segjobs:
        return f"{log_dir_uri}: {lock_path} is held{who}; wait for it to finish or stop it"
    return f"{log_dir_uri}: {lock_path} is held{who}: a running Kafka broker? Stop it or choose another log dir"


def _local_holder(storage: Storage, log_dir_uri: str, lock_path: str, pid: int | None = None) -> tuple[str, bool]:
    """Who holds ``lock_path``, in words to follow "is held" (`` by segjobs run ...``), and whether it is a
    segjobs run: the one its holder file names, if that run's process is still there (or runs where this host
    cannot see it); else a process that is not segjobs (``pid``, where known)."""
    uri = holder_uri(storage, log_dir_uri)
    try:
        doc = json.loads(storage.read(uri))
        holder, since = Holder.from_dict(doc["holder"]), int(doc["acquired_ms"])
    except (StorageError, ValueError, KeyError, TypeError):
        holder, since = None, None
    if holder is not None:
        alive = holder.alive()
        if alive:
            return f" by {holder.describe(since)}", True
        if alive is None:
            return (f", according to {uri}, by {holder.describe(since)}, which runs where this host cannot see "
                    f"it"), True
    return " by a process that is not segjobs" + (f" (pid {pid})" if pid and pid > 0 else ""), False


@contextmanager
def _local_lock(storage: Storage, path: str, log_dir_uri: str, holder: Holder, now_ms: int) -> Iterator[Lease]:
    if not os.path.isdir(path):
        raise UsageError(f"{log_dir_uri}: log dir does not exist or is not a directory")
    lock_path = os.path.join(path, LOCK_FILE)
    key = os.path.realpath(lock_path)
    with _HELD_LOCAL_GUARD:
        if key in _HELD_LOCAL:
            raise LockHeldError(_local_holder_message(storage, log_dir_uri, lock_path))
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
                    raise LockHeldError(_local_holder_message(storage, log_dir_uri, lock_path)) from None
                raise
            try:
                written = _write_holder(storage, log_dir_uri, holder, now_ms)
                try:
                    yield Lease(log_dir_uri=log_dir_uri, uri=lock_path, holder=holder, acquired_ms=now_ms,
                                expires_ms=None)
                finally:
                    if written is not None:
                        _remove_holder(storage, log_dir_uri, created_work_dir=written)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        with _HELD_LOCAL_GUARD:
            _HELD_LOCAL.discard(key)


#: ``struct flock`` as Linux lays it out (short type, short whence, off_t start, off_t len, pid_t pid, padding)
_FLOCK = struct.Struct("@hhqqi4x")


def writer_at_work(storage: Storage, log_dir_uri: str, now_ms: int) -> str | None:
    """Reads only, takes nothing: who holds the log dir's lock (local: a segjobs run, named by its holder file, or a
    process that is not segjobs, a broker most likely) or its S3 lease (unexpired at ``now_ms``, wall clock), in
    words; None when nobody does. For the runs that take no lock (inspect, dry runs): what they read may then be
    caught mid-write."""
    local = storage.local_path(log_dir_uri)
    if local is None:
        try:
            current = read_lease(storage.read(lease_uri(storage, log_dir_uri)))
        except (NotFoundError, StorageError):
            return None
        if current is None or now_ms >= current.expires_ms or current.holder.alive() is False:
            return None
        return f"the lease {lease_uri(storage, log_dir_uri)} is held by {current.describe()}"
    lock_path = os.path.join(local, LOCK_FILE)
    # Closing any descriptor of the file releases this process's own lock on it (POSIX record locks): never probe
    # a lock this process holds or is taking (both go through the guard).
    with _HELD_LOCAL_GUARD:
        if os.path.realpath(lock_path) in _HELD_LOCAL:
            return f"{lock_path} is held by this process"
        try:
            fd = os.open(lock_path, os.O_RDONLY)
        except OSError:
            return None  # no .lock: nobody ever locked it, or it cannot be opened (the lock would say so)
        try:
            found = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)))
        except OSError:
            return None
        finally:
            os.close(fd)
    if found[0] == fcntl.F_UNLCK:
        return None
    who, segjobs = _local_holder(storage, log_dir_uri, lock_path, pid=found[4])
    return f"{lock_path} is held{who}" + ("" if segjobs else " (a running Kafka broker?)")


def _write_holder(storage: Storage, log_dir_uri: str, holder: Holder, now_ms: int) -> bool | None:
    """Record the holder (we hold the lock, so nobody else writes it); returns whether the work dir had to
    be created for it, None when it could not be written. Not fatal: then a refused run blames "a process
    that is not segjobs", which is all that is lost."""
    uri = holder_uri(storage, log_dir_uri)
    work = work_uri(log_dir_uri)
    created = not os.path.isdir(storage.local_path(work) or work)
    try:
        storage.makedirs(work)
        storage.write_atomic(uri, _holder_record(holder, log_dir_uri, now_ms))
        return created
    except StorageError as e:
        log.warning("%s: could not record the lock holder in %s: %s", log_dir_uri, uri, e)
        return None


def _remove_holder(storage: Storage, log_dir_uri: str, *, created_work_dir: bool) -> None:
    """Remove the holder file, and the work dir too when it was made only for that file and is empty."""
    storage.delete(holder_uri(storage, log_dir_uri))
    if created_work_dir:
        try:
            os.rmdir(storage.local_path(work_uri(log_dir_uri)) or "")
        except OSError:
            pass  # the run left files there (intents, ledgers): they stay, and so does the dir


# ---------------------------------------------------------------------------------------------- S3 lease


def lease_uri(storage: Storage, log_dir_uri: str) -> str:
    """The lease object of ``log_dir_uri``."""
    return storage.join(work_uri(log_dir_uri), LEASE_NAME)


@dataclass(frozen=True)
class LeaseInfo:
    """A lease object as read back: its holder, when it was taken and when it expires, and the run its holder
    took it over from (and fences: see :attr:`Lease.took_over`)."""

    holder: Holder
    acquired_ms: int
    expires_ms: int
    took_over: str | None = None

    def describe(self) -> str:
        return f"{self.holder.describe(self.acquired_ms)}, expiring {format_instant(self.expires_ms)}"


def _lease_record(log_dir_uri: str, lease: LeaseInfo) -> bytes:
    doc = {"format": _LEASE_FORMAT, "log_dir": log_dir_uri, "holder": asdict(lease.holder),
           "acquired_ms": lease.acquired_ms, "expires_ms": lease.expires_ms}
    if lease.took_over is not None:
        doc["took_over"] = lease.took_over
    return json.dumps(doc, sort_keys=True).encode()


def read_lease(data: bytes) -> LeaseInfo | None:
    """The lease in ``data``, or None when it cannot be read (then it is never taken over silently)."""
    try:
        doc = json.loads(data)
        took_over = doc.get("took_over")
        return LeaseInfo(Holder.from_dict(doc["holder"]), int(doc["acquired_ms"]), int(doc["expires_ms"]),
                         None if took_over is None else str(took_over))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def fenced_by_takeover(current: LeaseInfo, *, gone: bool) -> frozenset[str]:
    """The runs a run that takes the lease ``current`` over leaves their recent stagings to (see
    :class:`jobs.logdir.recover.Fence`): its holder, unless its process is known to be ``gone``, and the run that
    holder took the lease over from (it may be at work still, as far as anyone can tell: a takeover moments ago)."""
    return frozenset(([] if gone else [current.holder.run_id]) + ([current.took_over] if current.took_over else []))


def _holder_of(storage: Storage, uri: str) -> str:
    try:
        current = read_lease(storage.read(uri))
    except StorageError as e:
        return f"it changed, and could not be read back ({e})"
    return "it was taken over by " + (current.describe() if current else "an unreadable lease")


def _still_ours(storage: Storage, uri: str, expected: LeaseInfo) -> str | None:
    """The etag of the lease object ``uri`` when it reads as ``expected`` (this run's lease as it last wrote it),
    else None: after a conditional PUT failed, whether it failed only because the client retried a PUT that had
    applied (its answer lost on the way), which leaves the object as that PUT wrote it. The etag is taken before
    the read: a lease written by anyone after this run's PUT would read as theirs, not as ``expected``."""
    try:
        etag = storage.stat(uri).etag
        current = read_lease(storage.read(uri))
    except StorageError:
        return None
    return etag if current == expected else None


def _take_lease(storage: Storage, log_dir_uri: str, holder: Holder, now_ms: int, ttl_ms: int,
                break_run_id: str | None) -> Lease:
    if ttl_ms <= 0:
        raise UsageError(f"lease ttl must be positive, got {ttl_ms} ms")
    uri = lease_uri(storage, log_dir_uri)
    fresh = LeaseInfo(holder, now_ms, now_ms + ttl_ms)

    def granted(etag: str | None, notice: str | None, took_over: str | None = None,
                fenced: frozenset[str] = frozenset()) -> Lease:
        return Lease(log_dir_uri=log_dir_uri, uri=uri, holder=holder, acquired_ms=now_ms,
                     expires_ms=now_ms + ttl_ms, etag=etag, ttl_ms=ttl_ms, notice=notice, took_over=took_over,
                     fenced=fenced, _storage=storage)

    # A few rounds only to ride out a lease that disappears between our failed create and our read.
    for _ in range(_ACQUIRE_ATTEMPTS):
        try:
            etag = storage.put_if_absent(uri, _lease_record(log_dir_uri, fresh))
        except PreconditionFailedError:
            # taken by someone, or by this very PUT, applied before its answer was lost and the retry refused
            etag = _still_ours(storage, uri, fresh)
        if etag is not None:
            return granted(etag, None if break_run_id is None else
                           f"{log_dir_uri}: no lease to break (none was held); took a fresh one")
        try:
            # stat before read: if the object changes in between, the etag is the older one and the
            # takeover below fails its condition rather than overwriting a lease we did not look at.
            etag = storage.stat(uri).etag
            current = read_lease(storage.read(uri))
        except NotFoundError:
            continue
        if current is None:
            raise LockHeldError(f"{log_dir_uri} is locked by an unreadable lease {uri}; if no segjobs run is "
                                f"working on this log dir, delete that object and run again")
        reason = _takeover_reason(log_dir_uri, uri, current, now_ms, break_run_id)
        # A holder known to be gone can do nothing more; any other (expired, broken) may still be at work.
        gone = current.holder.alive() is False
        taken = replace(fresh, took_over=None if gone else current.holder.run_id)
        try:
            new_etag = storage.put_if_match(uri, _lease_record(log_dir_uri, taken), etag)
        except PreconditionFailedError:
            new_etag = _still_ours(storage, uri, taken)
        if new_etag is None:
            raise LockHeldError(f"{log_dir_uri}: the lease of {current.holder.describe(current.acquired_ms)} was "
                                f"taken over by another run at the same moment; lease object {uri}")
        return granted(new_etag, f"{log_dir_uri}: took over the lease of {current.describe()}: {reason}",
                       taken.took_over, fenced_by_takeover(current, gone=gone))
    raise LockHeldError(f"{log_dir_uri}: the lease {uri} kept changing; another run is contending for it")


def lease_to_take_over(storage: Storage, log_dir_uri: str) -> tuple[str | None, frozenset[str]]:
    """Reads only: the run whose S3 lease a run starting now would take over, and the runs it would fence (what
    :func:`acquire` gives as ``Lease.took_over`` and ``Lease.fenced``), so that a dry run, which takes no lease,
    plans as that run would. The holder of a lease that has not expired counts too (a real run is refused then:
    that holder is at work, and so may be the run it took the lease over from, whose stagings its own recovery
    kept). Nothing on local disk, with no lease or an unreadable one."""
    if storage.local_path(log_dir_uri) is not None:
        return None, frozenset()
    try:
        current = read_lease(storage.read(lease_uri(storage, log_dir_uri)))
    except NotFoundError:
        return None, frozenset()
    if current is None:
        return None, frozenset()
    gone = current.holder.alive() is False
    return None if gone else current.holder.run_id, fenced_by_takeover(current, gone=gone)


def _takeover_reason(log_dir_uri: str, uri: str, current: LeaseInfo, now_ms: int,
                     break_run_id: str | None) -> str:
    """Why the lease ``current`` may be taken over; raises :class:`LockHeldError` naming its holder when it
    may not."""
    who = current.holder.describe(current.acquired_ms)
    if break_run_id is not None:
        if break_run_id != current.holder.run_id:
            raise LockHeldError(f"{log_dir_uri}: --break-lease {break_run_id} does not name the holder: the lease "
                                f"is held by {current.describe()} (expires_ms={current.expires_ms}); lease object "
                                f"{uri}")
        return "broken by --break-lease"
    if now_ms >= current.expires_ms:
        return f"it expired at {format_instant(current.expires_ms)}"
    alive = current.holder.alive()
    if alive is False:
        return f"its process (pid {current.holder.pid} on this host) is gone"
    state = " (its process is still running on this host)" if alive else ""
    raise LockHeldError(
        f"{log_dir_uri} is locked by {who}{state} until {format_instant(current.expires_ms)} "
        f"(expires_ms={current.expires_ms}); lease object {uri}. If that run is dead, wait for the lease to "
        f"expire or break it: segjobs recover --log-dir {log_dir_uri} --break-lease {current.holder.run_id}")


def _release_lease(lease: Lease, *, quiet: bool) -> None:
    assert lease._storage is not None and lease.etag is not None
    try:
        lease._storage.delete_if_match(lease.uri, lease.etag)
    except PreconditionFailedError:
        message = (f"{lease.log_dir_uri}: lease {lease.uri} was taken over by another run (it expired at "
                   f"{format_instant(lease.expires_ms)}, or was broken with --break-lease); that run may have "
                   f"worked on the log dir concurrently")
        if quiet:
            log.error(message)
        else:
            raise LockHeldError(message) from None
    except StorageError as e:
        if not quiet:
            raise
        # The run already failed: report that failure, not this one. The lease then simply expires.
        log.error("%s: could not release lease %s: %s", lease.log_dir_uri, lease.uri, e)
