"""What a run asks of its object store: requests by kind and the bytes they move, counted where they are made.

An S3 run pays per request and per byte fetched, and how many times it fetches each object is the question of
its cost (a segment read by the scan, again to map its keys and again to clean it costs three GETs of its
bytes). :class:`S3Storage <segment_io.storage.s3.S3Storage>` counts every request it sends into the
:class:`StoreTraffic` of the code that is running: :func:`metered` opens one for a scope (a run on the driver,
one task) and closes it. The count follows the context, not the storage object, so concurrent tasks on one
process's threads keep theirs apart; a thread the scope starts counts into it only when it runs in a copy of the
scope's context (:func:`in_context`), which every pool of this package and of the jobs does.

Local disk is not counted: its reads are page-cache hits or mapped pages, and no request is made.
"""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator, Literal, Mapping, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: The request kinds counted (S3's names): ``get`` (a whole object or a byte range), ``head``, ``list`` (one
#: page), ``put`` (an object, or one part of a multipart upload), ``copy`` (a server-side copy or one part of
#: it), ``delete``, and ``other`` (starting, completing or aborting multipart uploads, listing them).
Kind = Literal["get", "head", "list", "put", "copy", "delete", "other"]


@dataclass
class StoreTraffic:
    """The requests of one scope, by kind, and the bytes GETs fetched and PUTs sent (response and request
    bodies; headers and listings' XML are not counted). Thread-safe: a scope's threads add to one count."""

    get: int = 0
    get_bytes: int = 0
    head: int = 0
    list: int = 0
    put: int = 0
    put_bytes: int = 0
    copy: int = 0
    delete: int = 0
    other: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def requests(self) -> int:
        """Every request, of every kind."""
        return self.get + self.head + self.list + self.put + self.copy + self.delete + self.other

    def add(self, kind: Kind, n_bytes: int = 0, *, requests: int = 1) -> None:
        """``requests`` requests of ``kind`` that moved ``n_bytes`` of body (GET: fetched; PUT: sent)."""
        with self._lock:
            setattr(self, kind, getattr(self, kind) + requests)
            if kind == "get":
                self.get_bytes += n_bytes
            elif kind == "put":
                self.put_bytes += n_bytes

    def merge(self, other: "StoreTraffic | Mapping[str, int]") -> None:
        """Add ``other``'s counts (another scope's, or their :meth:`to_dict`) to these."""
        counts = other.to_dict() if isinstance(other, StoreTraffic) else other
        with self._lock:
            for name in _COUNTS:
                setattr(self, name, getattr(self, name) + int(counts.get(name, 0)))

    def to_dict(self) -> dict[str, int]:
        """The counts by name (``requests`` first: their sum), as the report holds them."""
        with self._lock:
            return {"requests": self.requests, **{name: getattr(self, name) for name in _COUNTS}}

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: Mapping[str, int]) -> None:
        self._lock = threading.Lock()
        for name in _COUNTS:
            setattr(self, name, int(state.get(name, 0)))


_COUNTS = tuple(f.name for f in fields(StoreTraffic) if not f.name.startswith("_"))

_current: contextvars.ContextVar[StoreTraffic | None] = contextvars.ContextVar("segjobs_store_traffic", default=None)


@contextmanager
def metered() -> Iterator[StoreTraffic]:
    """A fresh :class:`StoreTraffic` that counts the requests made in this context until the block ends. A scope
    inside another counts on its own: the outer one does not see the inner one's requests (the caller adds them,
    as a task runner adds its tasks')."""
    traffic = StoreTraffic()
    token = _current.set(traffic)
    try:
        yield traffic
    finally:
        _current.reset(token)


def count(kind: Kind, n_bytes: int = 0, *, requests: int = 1) -> None:
    """Count ``requests`` requests of ``kind`` (``0``: only the bytes of one already counted) into the running
    scope (none: not counted)."""
    traffic = _current.get()
    if traffic is not None:
        traffic.add(kind, n_bytes, requests=requests)


def in_context_iter(items: Iterator[R]) -> Iterator[R]:
    """``items`` advanced in a copy of the caller's context, whichever thread pulls them: a stream that a native
    writer drains on a thread of its own (deltalake's merge) counts its requests into the caller's scope."""
    context = contextvars.copy_context()  # now, in the caller's thread: a generator's body runs at its first pull
    done = object()

    def pulled() -> Iterator[R]:
        while True:
            item = context.run(next, items, done)
            if item is done:
                return
            yield item  # type: ignore[misc]

    return pulled()


def in_context(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` bound to a copy of the caller's context, for another thread to run: its requests count into the
    caller's scope. Each call runs in a copy of its own (a context cannot be entered by two threads at once)."""
    context = contextvars.copy_context()

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return context.copy().run(fn, *args, **kwargs)

    return run
