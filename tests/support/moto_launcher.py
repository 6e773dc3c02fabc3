"""moto_server as the suite starts it: moto's own server (``python tests/support/moto_launcher.py -H HOST -p
PORT``, the arguments of ``moto_server``), with one cost taken out of every request.

To route a request, moto asks which of its ~180 service packages a host names, and answers by listing its package
directory and stat-ing every entry, on every request: over a third of the server's CPU time per S3 request
(2.8 against 4.4 ms measured), and the suite sends tens of thousands. The listing never changes while the server
runs, so it is taken once. Nothing else differs: the same WSGI app, routing, S3 backend and request log. If a
moto release no longer has the function, the server runs unchanged.

A fault test may also ask for slow requests: ``SEGJOBS_MOTO_SLOW_PUTS="BUCKET_PREFIX:MARK:SECONDS"`` makes every
PUT into a bucket whose name starts with ``BUCKET_PREFIX``, on a key holding ``MARK``, wait ``SECONDS`` before moto
answers it (several rules: separated by commas; ``SEGJOBS_MOTO_SLOW_GETS``: the same for GETs). A task staging its
outputs there is then surely mid-task for seconds after its first staged object appears, so a kill aimed at it
lands inside the task, not between tasks; a task reading slowly is surely mid-task once its first read shows in
the request log (the other buckets are served at full speed)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

SLOW_PUTS = "SEGJOBS_MOTO_SLOW_PUTS"
SLOW_GETS = "SEGJOBS_MOTO_SLOW_GETS"


def _list_the_service_packages_once() -> None:
    from moto import backends

    listing = getattr(backends, "list_of_moto_modules", None)
    if listing is None:
        return
    modules = tuple(listing())

    def cached() -> Iterable[str]:
        return modules

    backends.list_of_moto_modules = cached  # type: ignore[assignment]


def _rules(text: str) -> list[tuple[str, str, float]]:
    """``BUCKET_PREFIX:MARK:SECONDS[,...]`` as (bucket prefix, mark, seconds)."""
    out = []
    for rule in filter(None, (r.strip() for r in text.split(","))):
        bucket_prefix, mark, seconds = rule.rsplit(":", 2)
        out.append((bucket_prefix, mark, float(seconds)))
    return out


def _slow_requests(rules: dict[str, list[tuple[str, str, float]]]) -> None:
    """Wrap moto's WSGI app so that the requests ``rules`` names (by method) wait (see the module docstring)."""
    import moto.server

    base = moto.server.DomainDispatcherApplication

    class SlowRequests(base):  # type: ignore[misc, valid-type]
        def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            path = environ.get("PATH_INFO", "")
            host_bucket = environ.get("HTTP_HOST", "").split(".", 1)[0]
            bucket = path.lstrip("/").split("/", 1)[0]
            for bucket_prefix, mark, delay in rules.get(environ.get("REQUEST_METHOD", ""), ()):
                if mark in path and (bucket.startswith(bucket_prefix) or host_bucket.startswith(bucket_prefix)):
                    time.sleep(delay)
                    break
            return super().__call__(environ, start_response)

    moto.server.DomainDispatcherApplication = SlowRequests  # type: ignore[misc]


if __name__ == "__main__":
    _list_the_service_packages_once()
    slow = {method: _rules(os.environ.get(name, "")) for method, name in (("PUT", SLOW_PUTS), ("GET", SLOW_GETS))}
    if any(slow.values()):
        _slow_requests(slow)
    from moto.server import main

    main()
