"""A loopback TCP proxy in front of a real S3 endpoint (moto_server) that loses answers: a request it is told to
drop is forwarded, applied by the endpoint, and its answer never comes back (the proxy closes the client's
connection when the answer starts). The client sees what a network failure after the request looks like and
retries, as botocore does; a conditional PUT so retried finds its own write and gets 412 Precondition Failed.

HTTP/1.1 without pipelining (botocore's way): on one connection a request is sent only after the previous
answer, so the first bytes the client sends after an answer began are the next request line.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class LossyProxy:
    """``endpoint_url`` forwards to ``upstream_url``; :meth:`drop` arms it to lose the answers of the next
    requests whose method is ``method`` and whose path contains ``path_part``; ``dropped`` lists the request
    lines whose answers it lost."""

    upstream_url: str
    endpoint_url: str = ""
    dropped: list[str] = field(default_factory=list)
    _armed: list[tuple[str, str]] = field(default_factory=list)
    _listener: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sockets: list[socket.socket] = field(default_factory=list)

    def start(self) -> "LossyProxy":
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="lossy-proxy", daemon=True).start()
        return self

    def drop(self, method: str, path_part: str, times: int = 1) -> None:
        """Lose the answers of the next ``times`` requests ``method`` on a path containing ``path_part``."""
        with self._lock:
            self._armed.extend([(method, path_part)] * times)

    def close(self) -> None:
        for s in [self._listener, *self._sockets]:
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass

    def __enter__(self) -> "LossyProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the connections

    def _accept(self) -> None:
        assert self._listener is not None
        upstream = urlsplit(self.upstream_url)
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection((upstream.hostname or "127.0.0.1", upstream.port or 80))
            self._sockets += [client, server]
            _Connection(self, client, server).start()

    def _claims(self, request_line: str) -> bool:
        """Whether the answer to ``request_line`` is to be lost (an armed drop matches it: it is used up)."""
        method, _, rest = request_line.partition(" ")
        path = rest.split(" ", 1)[0]
        with self._lock:
            for i, (m, part) in enumerate(self._armed):
                if m == method and part in path:
                    del self._armed[i]
                    return True
        return False


class _Connection:
    """One client connection and its upstream one, pumped both ways by two threads."""

    def __init__(self, proxy: LossyProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.client, self.server = proxy, client, server
        self.new_request = True  #: the client's next bytes start a request
        self.losing: str | None = None  #: the request line whose answer is to be lost

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._answers, daemon=True).start()

    def _requests(self) -> None:
        while data := _recv(self.client):
            if self.new_request:
                self.new_request = False
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                if self.proxy._claims(line):
                    self.losing = line
            if not _send(self.server, data):
                break
        self._close()

    def _answers(self) -> None:
        while data := _recv(self.server):
            interim = _only_interim(data)
            if self.losing is not None and not interim:
                # the endpoint answered: the request is applied; the client never hears of it
                self.proxy.dropped.append(self.losing)
                break
            if not interim:
                self.new_request = True
            if not _send(self.client, data):
                break
        self._close()

    def _close(self) -> None:
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def _only_interim(data: bytes) -> bool:
    """Whether ``data`` holds only interim answers (``100 Continue``, which a server may send more than once
    before it reads the body): the request is not applied yet."""
    while data.startswith(b"HTTP/1.1 100 ") and b"\r\n\r\n" in data:
        data = data.split(b"\r\n\r\n", 1)[1]
    return data == b""


def _recv(s: socket.socket) -> bytes:
    try:
        return s.recv(65536)
    except OSError:
        return b""


def _send(s: socket.socket, data: bytes) -> bool:
    try:
        s.sendall(data)
        return True
    except OSError:
        return False


__all__ = ["LossyProxy"]
