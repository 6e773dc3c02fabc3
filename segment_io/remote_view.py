"""Remote segments read as the Kafka segment files they were: a read-only view, under URIs of its own, of what
the readers of segment files (``inspect``, ``table``, ``dump``, the data source) cannot read as it is stored.

- **An Aiven segment** (:class:`~segment_io.remote_layout.AivenLayout`): its ``.log`` object is in chunks,
  compressed or not, and its indexes are one ``.indexes`` object. The view serves the segment's bytes and each
  index as files: a read restores only the chunks it covers, each chunk once, into the one buffer it returns.
- **A remote segment the local log starts inside**, for readers of whole segments: the view serves its batches
  below the local log's first offset, the last one rewritten with only those records when it also holds offsets
  the local log has (so no offset is read twice and none is missing).

A view URI is ``remote-segment://<layout>/<part>/<last offset kept, or ->/<the segment's .log object>``, ``part``
one of :data:`PARTS`. :func:`segment_io.storage.open_storage` opens a :class:`RemoteSegmentStorage` for one; that
store serves every other URI from the store of its scheme, so a job may read all its files through it.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, ContextManager, cast

from segment_io.aiven_manifest import CorruptRemoteObject, SegmentManifest, parse_manifest, segment_chunks
from segment_io.errors import NotFoundError, UsageError
from segment_io.storage.base import FileInfo, Storage

if TYPE_CHECKING:
    from segment_io.storage.options import StorageOptions

VIEW_SCHEME = "remote-segment"
_PREFIX = f"{VIEW_SCHEME}://"
#: the files a view serves: the segment, and its indexes by the names of the Aiven manifest
PARTS = {"log": None, "index": "offset", "timeindex": "timestamp", "txnindex": "transaction"}
#: the layout whose segments need a view to be read (any layout's segment may need one to be cut)
AIVEN = "aiven"


@dataclass(frozen=True)
class SegmentView:
    """What a view URI names: one file of a remote segment, as Kafka wrote it."""

    layout: str
    part: str
    log_uri: str  #: the segment's ``.log`` object in the remote store
    keep_last: int | None = None  #: the segment cut after this offset (None: whole)

    @property
    def uri(self) -> str:
        keep = "-" if self.keep_last is None else str(self.keep_last)
        return f"{_PREFIX}{self.layout}/{self.part}/{keep}/{self.log_uri}"

    def sibling(self, suffix: str) -> str:
        """The segment's object ``suffix`` (``.rsm-manifest``, ``.indexes``) beside its ``.log``."""
        return self.log_uri[: -len(".log")] + suffix


def is_view(uri: str) -> bool:
    """Whether ``uri`` is a view URI."""
    return uri.startswith(_PREFIX)


def parse_view(uri: str) -> SegmentView:
    """The view ``uri`` names; :class:`~segment_io.errors.NotFoundError` when it names none."""
    parts = uri[len(_PREFIX):].split("/", 3) if is_view(uri) else []
    if len(parts) != 4 or parts[1] not in PARTS or not parts[3].endswith(".log") or \
            not (parts[2] == "-" or parts[2].lstrip("-").isdigit()):
        raise NotFoundError("not a remote segment view (remote-segment://<layout>/<part>/<last offset>/<.log>)",
                            uri=uri)
    return SegmentView(parts[0], parts[1], parts[3], None if parts[2] == "-" else int(parts[2]))


def view_uri(layout: str, part: str, log_uri: str, keep_last: int | None = None) -> str:
    """The URI of ``part`` of the remote segment whose ``.log`` object is ``log_uri``."""
    return SegmentView(layout, part, log_uri, keep_last).uri


class RemoteSegmentStorage(Storage):
    """Serves view URIs (see the module docstring) and, through the store of their scheme, every other URI.
    ``stores``: stores already open, by scheme (a job's own); others are opened with ``options``."""

    def __init__(self, stores: dict[str, Storage] | None = None, options: "StorageOptions | None" = None) -> None:
        self._stores = dict(stores or {})
        self._options = options
        self._manifests: dict[str, SegmentManifest] = {}
        self._cuts: dict[str, tuple[int, bytes]] = {}  # view of a cut segment -> (bytes kept as they are, tail)
        first = next(iter(self._stores.values()), None)
        if first is not None:
            self.atomic_rename, self.io_concurrency = first.atomic_rename, first.io_concurrency

    def store(self, uri: str) -> Storage:
        """The store of ``uri``'s scheme."""
        from segment_io.storage import open_storage, scheme_of

        scheme = scheme_of(uri)
        if scheme not in self._stores:
            self._stores[scheme] = open_storage(uri, self._options)
        return self._stores[scheme]

    # ---- views ----

    def manifest(self, view: SegmentView) -> SegmentManifest:
        """The Aiven manifest of the segment, read once; its ``.log`` object checked to be as large as it says."""
        uri = view.sibling(".rsm-manifest")
        if uri not in self._manifests:
            store = self.store(uri)
            manifest = parse_manifest(store.read(uri), uri=uri)
            stored = store.stat(view.log_uri).size
            if stored != manifest.stored_size:
                raise CorruptRemoteObject(f"{stored} bytes, its manifest ({uri}) says {manifest.stored_size}",
                                          path=view.log_uri)
            self._manifests[uri] = manifest
        return self._manifests[uri]

    def _segment_size(self, view: SegmentView) -> int:
        if view.layout == AIVEN:
            return self.manifest(view).original_size
        return self.store(view.log_uri).stat(view.log_uri).size

    def _segment_range(self, view: SegmentView, start: int, length: int) -> bytes:
        """Bytes of the whole segment as Kafka wrote it."""
        if view.layout != AIVEN:
            return self.store(view.log_uri).read_range(view.log_uri, start, length)
        manifest = self.manifest(view)
        end = min(start + max(length, 0), manifest.original_size)
        out = bytearray(max(end - start, 0))
        wanted = [c for c in manifest.chunks() if c.original_position < end and
                  c.original_position + c.original_size > start]
        for chunk, data in zip(wanted, segment_chunks(manifest, view.log_uri, self.store(view.log_uri).read_range,
                                                      chunks=wanted)):
            lo, hi = max(start, chunk.original_position), min(end, chunk.original_position + chunk.original_size)
            out[lo - start:hi - start] = memoryview(data)[lo - chunk.original_position:hi - chunk.original_position]
        # a bytearray reads as bytes everywhere the readers use it; bytes(out) would hold the segment twice
        return cast(bytes, out)

    def _cut(self, view: SegmentView) -> tuple[int, bytes]:
        """Where a cut segment's batches stop being kept as they are, and the rewritten batch that follows."""
        if view.uri not in self._cuts:
            from segment_io.format import scan_batches

            assert view.keep_last is not None
            data = self._segment_range(view, 0, self._segment_size(view))
            headers = scan_batches(data, path=view.log_uri)
            kept = [i for i in range(len(headers)) if int(headers.base_offset[i]) <= view.keep_last]
            position, tail = (int(headers.position[kept[-1]] + headers.size[kept[-1]]) if kept else 0), b""
            if kept and int(headers.last_offset[kept[-1]]) > view.keep_last:
                position = int(headers.position[kept[-1]])
                tail = _batch_below(memoryview(data)[position:position + int(headers.size[kept[-1]])],
                                    view.keep_last, view.log_uri, position)
            self._cuts[view.uri] = (position, tail)
        return self._cuts[view.uri]

    def _view_size(self, view: SegmentView) -> int:
        if view.part != "log":
            where = self.manifest(view).indexes.get(cast(str, PARTS[view.part]))
            if where is None or (view.part == "txnindex" and where.size == 0):
                raise NotFoundError("the segment has no transaction index", uri=view.uri)
            return where.size
        if view.keep_last is None:
            return self._segment_size(view)
        position, tail = self._cut(view)
        return position + len(tail)

    def _view_range(self, view: SegmentView, start: int, length: int) -> bytes:
        if view.part != "log":
            where = self.manifest(view).indexes[cast(str, PARTS[view.part])]
            length = max(0, min(length, where.size - start))
            uri = view.sibling(".indexes")
            data = self.store(uri).read_range(uri, where.position + start, length) if length else b""
            if len(data) != length:
                raise CorruptRemoteObject(f"the {view.part} ends past the object's end", path=uri,
                                          position=where.position + start)
            return data
        if view.keep_last is None:
            return self._segment_range(view, start, length)
        position, tail = self._cut(view)
        head = self._segment_range(view, start, min(length, position - start)) if start < position else b""
        lo = max(start - position, 0)
        return head + tail[lo:lo + length - len(head)] if tail and start + length > position else head

    # ---- Storage ----

    def stat(self, uri: str) -> FileInfo:
        if is_view(uri):
            return FileInfo(uri, self._view_size(parse_view(uri)), 0)
        return self.store(uri).stat(uri)

    def read(self, uri: str) -> bytes:
        if is_view(uri):
            view = parse_view(uri)
            return self._view_range(view, 0, self._view_size(view))
        return self.store(uri).read(uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if is_view(uri):
            return self._view_range(parse_view(uri), start, length)
        return self.store(uri).read_range(uri, start, length)

    def local_path(self, uri: str) -> str | None:
        return None if is_view(uri) else self.store(uri).local_path(uri)

    def _writable(self, uri: str) -> Storage:
        if is_view(uri):
            raise UsageError(f"{uri}: a remote segment view is read-only")
        return self.store(uri)

    def join(self, base: str, *parts: str) -> str:
        return self._writable(base).join(base, *parts)

    def list(self, prefix: str, *, recursive: bool = False, irregular: bool = False) -> builtins.list[FileInfo]:
        return self._writable(prefix).list(prefix, recursive=recursive, irregular=irregular)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        return self._writable(prefix).list_dirs(prefix)

    def write_atomic(self, uri: str, data: bytes, *, durable: bool = True) -> None:
        self._writable(uri).write_atomic(uri, data, durable=durable)

    def open_write(self, uri: str, *, durable: bool = True, uncached: bool = False) -> ContextManager[BinaryIO]:
        return self._writable(uri).open_write(uri, durable=durable, uncached=uncached)

    def put_if_absent(self, uri: str, data: bytes, *, durable: bool = True) -> str | None:
        return self._writable(uri).put_if_absent(uri, data, durable=durable)

    def put_if_match(self, uri: str, data: bytes, etag: str | None) -> str | None:
        return self._writable(uri).put_if_match(uri, data, etag)

    def rename(self, src: str, dst: str) -> None:
        self._writable(src).rename(src, dst)

    def copy(self, src: str, dst: str) -> None:
        self._writable(dst).copy(src, dst)

    def delete(self, uri: str, *, missing_ok: bool = True) -> None:
        self._writable(uri).delete(uri, missing_ok=missing_ok)

    def makedirs(self, uri: str) -> None:
        self._writable(uri).makedirs(uri)


def _batch_below(batch: memoryview, keep_last: int, log_uri: str, position: int) -> bytes:
    """A batch holding offsets on both sides of ``keep_last`` rewritten with only its records up to it (its base
    offset, producer and attributes as they were)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from segment_io.decode import decode_segment_bytes
    from segment_io.encode import encode_batches

    records = decode_segment_bytes(batch, path=log_uri)
    kept = records.filter(pc.less_equal(records.column("offset"), keep_last))
    if not kept.num_rows:
        return b""
    # the batch now ends at its last record kept: its header says so, as a batch Kafka wrote with those records
    last = pa.array(np.full(kept.num_rows, pc.max(kept.column("offset")).as_py(), dtype=np.int64))
    kept = kept.set_column(kept.schema.get_field_index("batch_last_offset"), "batch_last_offset", last)
    if kept.column("timestamp_type")[0].as_py() == 0:  # CreateTime: the largest timestamp of its records
        latest = pa.array(np.full(kept.num_rows, pc.max(kept.column("timestamp")).as_py(), dtype=np.int64))
        kept = kept.set_column(kept.schema.get_field_index("batch_max_timestamp"), "batch_max_timestamp", latest)
    try:
        return encode_batches(kept).to_bytes()
    except Exception as exc:  # noqa: BLE001 - whatever the encoder refuses, the batch cannot be cut
        raise CorruptRemoteObject(f"the batch holding offset {keep_last} cannot be cut after it ({exc})",
                                  path=log_uri, position=position) from exc


__all__ = ["PARTS", "VIEW_SCHEME", "RemoteSegmentStorage", "SegmentView", "is_view", "parse_view", "view_uri"]
