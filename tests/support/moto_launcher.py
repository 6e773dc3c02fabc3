"""moto_server as the suite starts it: moto's own server (``python tests/support/moto_launcher.py -H HOST -p
PORT``, the arguments of ``moto_server``), with one cost taken out of every request.

To route a request, moto asks which of its ~180 service packages a host names, and answers by listing its package
directory and stat-ing every entry, on every request: over a third of the server's CPU time per S3 request
(2.8 against 4.4 ms measured), and the suite sends tens of thousands. The listing never changes while the server
runs, so it is taken once. Nothing else differs: the same WSGI app, routing, S3 backend and request log. If a
moto release no longer has the function, the server runs unchanged."""

from __future__ import annotations

from typing import Iterable


def _list_the_service_packages_once() -> None:
    from moto import backends

    listing = getattr(backends, "list_of_moto_modules", None)
    if listing is None:
        return
    modules = tuple(listing())

    def cached() -> Iterable[str]:
        return modules

    backends.list_of_moto_modules = cached  # type: ignore[assignment]


if __name__ == "__main__":
    _list_the_service_packages_once()
    from moto.server import main

    main()
