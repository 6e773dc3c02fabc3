"""Legacy (magic 0 and 1) messages packed by hand from Kafka's message format, independently of segjobs."""

from __future__ import annotations

import struct
import zlib


def legacy_message(magic: int, offset: int, key: bytes | None, value: bytes | None, *, attributes: int = 0,
                   timestamp: int = 0) -> bytes:
    """One message of magic 0 or 1 at ``offset``: offset and size prefix, CRC, attributes, timestamp (magic 1)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message
