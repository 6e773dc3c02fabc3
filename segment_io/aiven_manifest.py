"""The segment manifest of Aiven's tiered-storage-for-apache-kafka (its ``.rsm-manifest`` object), read with our own
code, and the chunked ``.log`` object it describes turned back into the segment's bytes.

What the plugin writes per remote segment (unencrypted):

- ``.log``: the segment cut into chunks of ``originalChunkSize`` bytes (the last one shorter), each chunk stored
  as it is, or, when the manifest says ``compression``, as one zstd frame of its own (the frame records its
  content size). The chunks follow each other with nothing in between.
- ``.indexes``: the offset index, the time index, the producer snapshot, the leader-epoch checkpoint and, when the
  segment has one, the transaction index, one after the other, uncompressed; the manifest gives each one's
  position and size (size 0: the segment has none).
- ``.rsm-manifest``: one JSON document, ``{"version": "1", "chunkIndex": {...}, "segmentIndexes": {...},
  "compression": <bool>, "encryption": {...} (only when encrypted), "remoteLogSegmentMetadata": {...}}``. The chunk
  index is ``{"type": "fixed", "originalChunkSize", "originalFileSize", "transformedChunkSize",
  "finalTransformedChunkSize"}`` (every stored chunk of one size but the last: uncompressed, or encrypted) or
  ``{"type": "variable", "originalChunkSize", "originalFileSize", "transformedChunks"}`` (compressed), where
  ``transformedChunks`` is base64 of a zstd frame holding the stored chunk sizes packed: a big-endian int32
  count; with one value, that value as an int32; with more, an int32 base, one byte giving the width ``w`` (1 to
  4) and, for every value but the last, ``value - base`` in ``w`` big-endian bytes, then the last value as an
  int32.

Only version ``"1"`` is known; other versions and encrypted segments are refused (:class:`UnsupportedManifest`,
naming the object). A manifest that does not hold together is :class:`CorruptRemoteObject`, naming the object
and, where there is one, the byte position.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import cramjam

from segment_io.errors import LocatedError

#: the manifest versions this module reads
KNOWN_VERSIONS = ("1",)
#: the indexes of the ``.indexes`` object, in the order the plugin writes them, by their manifest names
INDEX_KINDS = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")
#: a packed list of chunk sizes larger than this is not a chunk index (the plugin refuses to write one)
_MAX_PACKED_SIZES = 10 * 1024 * 1024


class CorruptRemoteObject(LocatedError):
    """A remote object is not what its layout says it must be: an unreadable manifest, a chunk that does not
    decompress to its size. Names the object and, where there is one, the byte position."""


class UnsupportedManifest(LocatedError):
    """A manifest of a kind segjobs does not read (an unknown version, an encrypted segment): nothing is read."""

    exit_code = 2


@dataclass(frozen=True)
class Chunk:
    """One chunk of a segment: where its bytes are in the segment and in the stored ``.log`` object."""

    number: int
    original_position: int
    original_size: int
    stored_position: int
    stored_size: int


@dataclass(frozen=True)
class IndexRange:
    """Where one index is in the ``.indexes`` object (size 0: the segment has no such index)."""

    position: int
    size: int


@dataclass(frozen=True)
class SegmentManifest:
    """What a version 1 manifest says of one segment."""

    uri: str
    original_chunk_size: int
    original_size: int  #: the segment's size, as the metadata's segment size
    stored_chunk_sizes: tuple[int, ...]  #: per chunk, its size in the ``.log`` object
    compression: bool
    indexes: dict[str, IndexRange]  #: by the names of :data:`INDEX_KINDS`; a missing transaction index is absent

    @property
    def stored_size(self) -> int:
        """How large the ``.log`` object must be."""
        return sum(self.stored_chunk_sizes)

    @property
    def indexes_size(self) -> int:
        """How large the ``.indexes`` object must be."""
        return max((r.position + r.size for r in self.indexes.values()), default=0)

    def chunks(self) -> Iterator[Chunk]:
        """The chunks in segment order."""
        original = stored = 0
        for number, size in enumerate(self.stored_chunk_sizes):
            length = min(self.original_chunk_size, self.original_size - original)
            yield Chunk(number, original, length, stored, size)
            original += length
            stored += size


def _chunk_count(original_chunk_size: int, original_size: int) -> int:
    return -(-original_size // original_chunk_size)


def unpack_chunk_sizes(packed: bytes, *, uri: str) -> tuple[int, ...]:
    """The stored chunk sizes of a variable chunk index (see the module docstring), from the bytes the zstd frame
    holds."""
    def bad(detail: str, position: int) -> CorruptRemoteObject:
        return CorruptRemoteObject(f"chunk index (transformedChunks): {detail}", path=uri, position=position)

    if len(packed) < 4:
        raise bad("shorter than its count", 0)
    (count,) = struct.unpack_from(">i", packed, 0)
    if count < 0:
        raise bad(f"negative count {count}", 0)
    if count <= 1:
        expected = 4 + 4 * count
        if len(packed) != expected:
            raise bad(f"{len(packed)} bytes, {expected} expected for {count} value(s)", 0)
        return struct.unpack_from(">i", packed, 4) if count else ()
    if len(packed) < 9:
        raise bad("shorter than its base and width", 4)
    base, width = struct.unpack_from(">iB", packed, 4)
    if not 1 <= width <= 4:
        raise bad(f"value width {width}, expected 1 to 4", 8)
    expected = 9 + (count - 1) * width + 4
    if len(packed) != expected:
        raise bad(f"{len(packed)} bytes, {expected} expected for {count} values of {width} byte(s)", 0)
    body = packed[9:9 + (count - 1) * width]
    values = [base + int.from_bytes(body[i:i + width], "big") for i in range(0, len(body), width)]
    values.append(struct.unpack_from(">i", packed, len(packed) - 4)[0])
    return tuple(values)


def _stored_chunk_sizes(index: Any, uri: str, original_chunk_size: int, original_size: int) -> tuple[int, ...]:
    count = _chunk_count(original_chunk_size, original_size)
    kind = index.get("type")
    if kind == "fixed":
        size, final = _int(index, "transformedChunkSize", uri), _int(index, "finalTransformedChunkSize", uri)
        return (size,) * (count - 1) + (final,) if count else ()
    if kind == "variable":
        text = index.get("transformedChunks")
        if not isinstance(text, str):
            raise CorruptRemoteObject("chunkIndex.transformedChunks is not a string", path=uri)
        # the packed sizes of ``count`` chunks take at most 4 bytes each and 13 more: decompressing into a buffer
        # one byte larger keeps a frame that inflates beyond that from taking memory
        out = bytearray(min(13 + 4 * max(count, 1), _MAX_PACKED_SIZES) + 1)
        try:
            n = cramjam.zstd.decompress_into(base64.b64decode(text, validate=True), out)
        except (binascii.Error, cramjam.DecompressionError) as exc:
            raise CorruptRemoteObject(f"chunkIndex.transformedChunks is not base64 of a zstd frame of at most "
                                      f"{len(out) - 1} bytes ({exc})", path=uri) from None
        sizes = unpack_chunk_sizes(bytes(out[:n]), uri=uri)
        if len(sizes) != max(count, 1):
            raise CorruptRemoteObject(f"the chunk index lists {len(sizes)} chunk(s); a segment of {original_size} "
                                      f"bytes in chunks of {original_chunk_size} has {count}", path=uri)
        return sizes if count else ()
    raise CorruptRemoteObject(f"chunkIndex.type {kind!r} is neither 'fixed' nor 'variable'", path=uri)


def _int(doc: Any, key: str, uri: str, *, minimum: int = 0) -> int:
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise CorruptRemoteObject(f"{key} is {value!r}, not an integer of at least {minimum}", path=uri)
    return value


def _indexes(doc: Any, uri: str) -> dict[str, IndexRange]:
    if not isinstance(doc, dict):
        raise CorruptRemoteObject("segmentIndexes is not an object", path=uri)
    out = {}
    for kind in INDEX_KINDS:
        entry = doc.get(kind)
        if entry is None and kind == "transaction":
            continue  # the segment has no transaction index
        if not isinstance(entry, dict):
            raise CorruptRemoteObject(f"segmentIndexes.{kind} is {entry!r}, not an object", path=uri)
        out[kind] = IndexRange(_int(entry, "position", uri), _int(entry, "size", uri))
    return out


def parse_manifest(data: bytes, *, uri: str) -> SegmentManifest:
    """Read a ``.rsm-manifest`` object (``uri`` names it in errors). Refuses encrypted segments and unknown
    versions (:class:`UnsupportedManifest`); :class:`CorruptRemoteObject` for anything else it cannot read."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        position = getattr(exc, "pos", None)
        raise CorruptRemoteObject(f"not a JSON manifest ({exc})", path=uri, position=position) from None
    if not isinstance(doc, dict):
        raise CorruptRemoteObject("not a JSON object", path=uri)
    version = doc.get("version")
    if version not in KNOWN_VERSIONS:
        raise UnsupportedManifest(f"manifest version {version!r} is not supported (segjobs reads version "
                                  f"{', '.join(KNOWN_VERSIONS)} of Aiven's tiered storage)", path=uri)
    if doc.get("encryption") is not None:
        raise UnsupportedManifest("the segment is encrypted (the manifest has 'encryption'); segjobs reads only "
                                  "unencrypted segments of Aiven's tiered storage", path=uri)
    compression = doc.get("compression")
    if not isinstance(compression, bool):
        raise CorruptRemoteObject(f"compression is {compression!r}, not true or false", path=uri)
    index = doc.get("chunkIndex")
    if not isinstance(index, dict):
        raise CorruptRemoteObject("chunkIndex is not an object", path=uri)
    chunk_size = _int(index, "originalChunkSize", uri, minimum=1)
    size = _int(index, "originalFileSize", uri)
    return SegmentManifest(uri, chunk_size, size, _stored_chunk_sizes(index, uri, chunk_size, size), compression,
                           _indexes(doc.get("segmentIndexes"), uri))


def restore_chunk(manifest: SegmentManifest, chunk: Chunk, stored: bytes | memoryview, *, log_uri: str) -> bytes:
    """One chunk's bytes of the segment from its ``stored`` bytes: decompressed when the manifest says so, into a
    buffer of the size the manifest gives (so a chunk cannot inflate beyond it), and checked to fill it."""
    def bad(detail: str) -> CorruptRemoteObject:
        return CorruptRemoteObject(f"chunk {chunk.number} (segment bytes {chunk.original_position}-"
                                   f"{chunk.original_position + chunk.original_size - 1}): {detail}",
                                   path=log_uri, position=chunk.stored_position)

    if len(stored) != chunk.stored_size:
        raise bad(f"{len(stored)} stored bytes, the manifest says {chunk.stored_size}")
    if not manifest.compression:
        if chunk.stored_size != chunk.original_size:
            raise bad(f"stored uncompressed in {chunk.stored_size} bytes, the segment's chunk is "
                      f"{chunk.original_size}")
        return bytes(stored)
    out = bytearray(chunk.original_size + 1)  # one byte more: a frame holding more than the chunk shows
    try:
        n = cramjam.zstd.decompress_into(bytes(stored), out)
    except cramjam.DecompressionError as exc:
        raise bad(f"does not decompress as zstd to {chunk.original_size} bytes ({exc})") from None
    if n != chunk.original_size:
        raise bad(f"decompresses to {n} bytes, the segment's chunk is {chunk.original_size}")
    return bytes(memoryview(out)[:n])  # (a slice of the bytearray would copy the chunk once more)


def segment_chunks(manifest: SegmentManifest, log_uri: str, read_range: Callable[[str, int, int], bytes], *,
                   read_bytes: int = 8 * 1024 * 1024, chunks: Iterable[Chunk] | None = None) -> Iterator[bytes]:
    """The segment's bytes, chunk by chunk in order, from the ``.log`` object at ``log_uri`` (only ``chunks``,
    consecutive ones of the manifest's, when given); the stored chunks are fetched ``read_bytes`` or so at a time
    (``read_range(uri, start, length)``)."""
    pending: list[Chunk] = []
    pending_bytes = 0

    def flush() -> Iterator[bytes]:
        start = pending[0].stored_position
        data = memoryview(read_range(log_uri, start, sum(c.stored_size for c in pending)))
        for c in pending:
            yield restore_chunk(manifest, c, data[c.stored_position - start:c.stored_position - start + c.stored_size],
                                log_uri=log_uri)
        pending.clear()

    for chunk in manifest.chunks() if chunks is None else chunks:
        pending.append(chunk)
        pending_bytes += chunk.stored_size
        if pending_bytes >= read_bytes:
            yield from flush()
            pending_bytes = 0
    if pending:
        yield from flush()


__all__ = ["INDEX_KINDS", "KNOWN_VERSIONS", "Chunk", "CorruptRemoteObject", "IndexRange", "SegmentManifest",
           "UnsupportedManifest", "parse_manifest", "restore_chunk", "segment_chunks", "unpack_chunk_sizes"]
