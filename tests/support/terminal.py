"""A pseudo-terminal for tests of what segjobs prints on a terminal: a pty of a given size whose slave end is a
text stream (``isatty()`` is true, ``os.get_terminal_size`` answers), and whose output a thread collects."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import termios
import threading
from typing import TextIO


class Terminal:
    """``stream``: the terminal's side a program writes to; :meth:`output` what reached the screen (bytes as
    written: the pty's line discipline turns ``\\n`` into ``\\r\\n``). Use as a context manager."""

    def __init__(self, columns: int = 100, rows: int = 40) -> None:
        self._master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.stream: TextIO = open(slave, "w", encoding="utf-8", buffering=1)  # closed by close()
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # the slave end was closed
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    def close(self) -> None:
        self.stream.close()
        self._reader.join(timeout=10)
        os.close(self._master)

    def output(self) -> str:
        """Everything written so far (call after :meth:`close` for all of it), with ``\\r\\n`` as ``\\n``."""
        return b"".join(self._chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
