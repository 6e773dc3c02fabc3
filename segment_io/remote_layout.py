"""Where a RemoteStorageManager keeps remote segments: its layout, behind one interface.

A layout says which objects under a root belong to which remote segment (topic id, partition, segment id), which
of a segment's objects must exist for it to be readable and of what size, and how a segment's bytes and indexes
are read back. Two layouts are supported:

- ``local-tiered-storage``, Kafka's own ``LocalTieredStorage`` (the RemoteStorageManager Kafka tests itself with):
  under ``<root>/``, one directory per partition, ``<topic>-<partition>-<topic id>``, holding per segment the
  files ``<start offset, 20 digits>-<segment id><suffix>`` with the suffixes ``.log`` (the segment, as large as
  the metadata's segment size), ``.index``, ``.timeindex``, ``.snapshot`` (producer state),
  ``.leader_epoch_checkpoint`` and, when the segment has one, ``.txnindex``. ``<root>`` is the directory
  LocalTieredStorage makes under its ``dir`` setting (``kafka-tiered-storage``) or that setting itself.
- ``aiven``, Aiven's tiered-storage-for-apache-kafka (its Kafka segment format, unencrypted): under ``<root>/`` (the
  bucket and its ``key.prefix``, or the filesystem backend's root), ``<topic>-<topic id>/<partition>/<start offset,
  20 digits>-<segment id><suffix>`` with the suffixes ``.log`` (the segment in chunks, each zstd-compressed when
  the manifest says so), ``.indexes`` (every index of the segment, one after the other) and ``.rsm-manifest``
  (the JSON manifest saying where everything is: :mod:`segment_io.aiven_manifest`). A finished segment has all
  three.

Any other layout name is refused (:func:`layout_named`), as is a root where the layout finds nothing it knows
and something it does not (:func:`detect_root`). Listing goes through :mod:`segment_io.storage`: a local path or
an ``s3://`` prefix.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Iterator, Mapping

from segment_io.aiven_manifest import CorruptRemoteObject, SegmentManifest, parse_manifest, segment_chunks
from segment_io.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from segment_io.remote_metadata import SegmentMetadata
    from segment_io.storage.base import FileInfo, Storage


@dataclass(frozen=True)
class RemoteObject:
    """One object of a remote segment."""

    uri: str
    size: int
    topic: str  #: as the layout spells it (LocalTieredStorage: the name when the partition was first copied)
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    suffix: str  #: what the object is: ``.log``, ``.index``, ...
    mtime_ms: int = 0  #: last modified, as the listing says (epoch ms)
    etag: str | None = None  #: the object store's version tag (None on local disk)

    @property
    def segment_key(self) -> tuple[str, int, str]:
        return self.topic_id, self.partition, self.segment_id


@dataclass
class RemoteListing:
    """What a layout found under a root: the objects it recognised, per segment, and every other file."""

    root: str
    layout: str
    objects: list[RemoteObject] = field(default_factory=list)
    #: files under the root that are no object of the layout (they are reported, never touched)
    unrecognised: list["FileInfo"] = field(default_factory=list)

    def by_segment(self) -> dict[tuple[str, int, str], list[RemoteObject]]:
        """(topic id, partition, segment id) -> its objects."""
        out: dict[tuple[str, int, str], list[RemoteObject]] = {}
        for obj in self.objects:
            out.setdefault(obj.segment_key, []).append(obj)
        return out


class RemoteLayout(ABC):
    """How one RemoteStorageManager names its objects."""

    name: str
    #: what each object suffix is, for reports
    suffixes: ClassVar[dict[str, str]]

    @abstractmethod
    def parse(self, root: str, info: "FileInfo") -> RemoteObject | None:
        """The object ``info`` is under ``root``, or None when it is none of this layout's."""

    @abstractmethod
    def required_suffixes(self, txn_index_empty: bool) -> tuple[str, ...]:
        """The objects a finished segment must have (``txn_index_empty``: the metadata says it has no
        transaction index)."""

    def segment_suffix(self) -> str | None:
        """The object whose size is the segment's size in the metadata (None: no object's is; the layout's
        :meth:`check_segment` judges the sizes)."""
        return ".log"

    def check_segment(self, storage: "Storage", objects: Mapping[str, RemoteObject],
                      segment_size: int) -> list[tuple[str, str]]:
        """What reading the objects a finished segment has (``objects``, by suffix) shows wrong with them, as
        (suffix, problem in words) pairs; ``segment_size`` is the metadata's. Absent objects and the size of
        :meth:`segment_suffix` are the audit's own checks. By default nothing is read: no problem."""
        return []

    @abstractmethod
    def segment_chunks(self, storage: "Storage", objects: Mapping[str, RemoteObject]) -> Iterator[bytes]:
        """The segment's bytes as Kafka wrote them, in pieces, in order (``objects``: the segment's, by suffix).
        Raises :class:`~segment_io.errors.NotFoundError` for an object it needs that is absent."""

    def read_segment(self, storage: "Storage", objects: Mapping[str, RemoteObject]) -> bytes:
        """The segment's bytes as Kafka wrote them (see :meth:`segment_chunks`)."""
        return b"".join(self.segment_chunks(storage, objects))

    @abstractmethod
    def read_index(self, storage: "Storage", objects: Mapping[str, RemoteObject], kind: str) -> bytes | None:
        """One index of the segment as Kafka wrote it, ``kind`` one of :data:`INDEX_KINDS`; None when the segment
        has none of that kind (a transaction index)."""

    def object_uri(self, root: str, segment: "SegmentMetadata", suffix: str) -> str | None:
        """Where the layout keeps ``segment``'s object ``suffix`` under ``root`` (for messages about an absent
        one); None when the layout cannot say from the metadata alone."""
        return None

    def list(self, storage: "Storage", root: str) -> RemoteListing:
        """Every file under ``root``, recognised or not."""
        listing = RemoteListing(root, self.name)
        for info in storage.list(root, recursive=True):
            obj = self.parse(root, info)
            if obj is None:
                listing.unrecognised.append(info)
            else:
                listing.objects.append(obj)
        return listing


#: the indexes of a remote segment, as :meth:`RemoteLayout.read_index` names them
INDEX_KINDS = ("offset", "timestamp", "producer_snapshot", "leader_epoch", "transaction")
_UUID = r"[A-Za-z0-9_-]{22}"


def _needed(objects: Mapping[str, RemoteObject], suffix: str) -> RemoteObject:
    obj = objects.get(suffix)
    if obj is None:
        some = next(iter(objects.values()), None)
        where = f"segment {some.segment_id} ({some.topic}-{some.partition})" if some else "the segment"
        raise NotFoundError(f"{where} has no {suffix} object")
    return obj


def _relative(root: str, uri: str) -> str | None:
    base = root.rstrip("/") + "/"
    return uri[len(base):] if uri.startswith(base) else None


class LocalTieredStorageLayout(RemoteLayout):
    """Kafka's ``LocalTieredStorage`` (see the module docstring)."""

    name = "local-tiered-storage"
    suffixes: ClassVar[dict[str, str]] = {".log": "segment", ".index": "offset index", ".timeindex": "time index",
                                          ".snapshot": "producer snapshot",
                                          ".leader_epoch_checkpoint": "leader epochs",
                                          ".txnindex": "transaction index"}
    _DIR = re.compile(rf"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)-(?P<topic_id>{_UUID})")
    _FILE = re.compile(rf"(?P<start>\d{{20}})-(?P<segment_id>{_UUID})(?P<suffix>\.[a-z_]+)")

    _INDEX_SUFFIX: ClassVar[dict[str, str]] = {"offset": ".index", "timestamp": ".timeindex",
                                               "producer_snapshot": ".snapshot",
                                               "leader_epoch": ".leader_epoch_checkpoint", "transaction": ".txnindex"}

    def parse(self, root: str, info: "FileInfo") -> RemoteObject | None:
        rel = _relative(root, info.uri)
        parts = rel.split("/") if rel else []
        if len(parts) != 2:
            return None
        d, f = self._DIR.fullmatch(parts[0]), self._FILE.fullmatch(parts[1])
        if d is None or f is None or f.group("suffix") not in self.suffixes:
            return None
        return RemoteObject(info.uri, info.size, d.group("topic"), d.group("topic_id"), int(d.group("partition")),
                            f.group("segment_id"), int(f.group("start")), f.group("suffix"), info.mtime_ms, info.etag)

    def object_uri(self, root: str, segment: "SegmentMetadata", suffix: str) -> str | None:
        tp = segment.partition
        return (f"{root.rstrip('/')}/{tp.topic}-{tp.partition}-{tp.topic_id}/"
                f"{segment.start_offset:020d}-{segment.segment_id}{suffix}")

    def required_suffixes(self, txn_index_empty: bool) -> tuple[str, ...]:
        # LocalTieredStorage writes every file but the transaction index, which it writes when there is one
        base = (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")
        return base if txn_index_empty else (*base, ".txnindex")

    def segment_chunks(self, storage: "Storage", objects: Mapping[str, RemoteObject]) -> Iterator[bytes]:
        yield storage.read(_needed(objects, ".log").uri)

    def read_index(self, storage: "Storage", objects: Mapping[str, RemoteObject], kind: str) -> bytes | None:
        suffix = self._INDEX_SUFFIX[kind]
        if kind == "transaction" and suffix not in objects:
            return None
        return storage.read(_needed(objects, suffix).uri)


class AivenLayout(RemoteLayout):
    """Aiven's tiered-storage-for-apache-kafka, unencrypted (see the module docstring and
    :mod:`segment_io.aiven_manifest`)."""

    name = "aiven"
    suffixes: ClassVar[dict[str, str]] = {".log": "segment (chunks)", ".indexes": "indexes",
                                          ".rsm-manifest": "manifest"}
    _PATH = re.compile(rf"(?P<topic>[A-Za-z0-9._-]+)-(?P<topic_id>{_UUID})/(?P<partition>\d+)/"
                       rf"(?P<start>\d{{20}})-(?P<segment_id>{_UUID})(?P<suffix>\.[a-z-]+)")
    #: :data:`INDEX_KINDS` as the manifest names them
    _MANIFEST_INDEX: ClassVar[dict[str, str]] = {"offset": "offset", "timestamp": "timestamp",
                                                 "producer_snapshot": "producerSnapshot",
                                                 "leader_epoch": "leaderEpoch", "transaction": "transaction"}

    def parse(self, root: str, info: "FileInfo") -> RemoteObject | None:
        rel = _relative(root, info.uri)
        m = self._PATH.fullmatch(rel) if rel else None
        if m is None or m.group("suffix") not in self.suffixes:
            return None
        return RemoteObject(info.uri, info.size, m.group("topic"), m.group("topic_id"), int(m.group("partition")),
                            m.group("segment_id"), int(m.group("start")), m.group("suffix"), info.mtime_ms, info.etag)

    def required_suffixes(self, txn_index_empty: bool) -> tuple[str, ...]:
        # the transaction index, when there is one, is inside the .indexes object
        return ".log", ".indexes", ".rsm-manifest"

    def object_uri(self, root: str, segment: "SegmentMetadata", suffix: str) -> str | None:
        tp = segment.partition
        return (f"{root.rstrip('/')}/{tp.topic}-{tp.topic_id}/{tp.partition}/"
                f"{segment.start_offset:020d}-{segment.segment_id}{suffix}")

    def segment_suffix(self) -> str | None:
        return None  # a compressed .log is smaller than the segment: the manifest gives its size

    def manifest(self, storage: "Storage", objects: Mapping[str, RemoteObject]) -> SegmentManifest:
        """The segment's manifest, read and parsed (refused when encrypted or of an unknown version)."""
        uri = _needed(objects, ".rsm-manifest").uri
        return parse_manifest(storage.read(uri), uri=uri)

    def check_segment(self, storage: "Storage", objects: Mapping[str, RemoteObject],
                      segment_size: int) -> list[tuple[str, str]]:
        """The manifest read (when present): the segment's size it records against the metadata's, and the
        ``.log`` and ``.indexes`` objects' sizes against the sizes it gives them. An unreadable manifest is a
        problem of the ``.rsm-manifest`` object; an encrypted one or one of an unknown version is refused."""
        if ".rsm-manifest" not in objects:
            return []
        try:
            manifest = self.manifest(storage, objects)
        except CorruptRemoteObject as exc:
            return [(".rsm-manifest", f"unreadable: {exc.detail}")]
        problems = []
        if manifest.original_size != segment_size:
            problems.append((".rsm-manifest", f"of a segment of {manifest.original_size} bytes, the metadata "
                                              f"says {segment_size}"))
        for suffix, expected in ((".log", manifest.stored_size), (".indexes", manifest.indexes_size)):
            obj = objects.get(suffix)
            if obj is not None and obj.size != expected:
                problems.append((suffix, f"{obj.size} bytes, the manifest says {expected}"))
        return problems

    def segment_chunks(self, storage: "Storage", objects: Mapping[str, RemoteObject]) -> Iterator[bytes]:
        manifest = self.manifest(storage, objects)
        yield from segment_chunks(manifest, _needed(objects, ".log").uri, storage.read_range)

    def read_index(self, storage: "Storage", objects: Mapping[str, RemoteObject], kind: str) -> bytes | None:
        manifest = self.manifest(storage, objects)
        where = manifest.indexes.get(self._MANIFEST_INDEX[kind])
        if where is None or (kind == "transaction" and where.size == 0):
            return None
        uri = _needed(objects, ".indexes").uri
        data = storage.read_range(uri, where.position, where.size) if where.size else b""
        if len(data) != where.size:
            raise CorruptRemoteObject(f"the {kind} index ends past the object's end ({len(data)} of {where.size} "
                                      f"bytes)", path=uri, position=where.position)
        return data


#: every supported layout, by name
LAYOUTS: dict[str, RemoteLayout] = {layout.name: layout for layout in (LocalTieredStorageLayout(), AivenLayout())}
#: LocalTieredStorage's directory under its ``dir`` setting
LOCAL_TIERED_STORAGE_DIR = "kafka-tiered-storage"


def layout_named(name: str) -> RemoteLayout:
    """The layout called ``name``; any other is refused, naming the supported ones."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise UsageError(f"remote layout {name!r} is not supported; supported: {', '.join(sorted(LAYOUTS))}") \
            from None


def detect_root(storage: "Storage", root: str, layout: RemoteLayout) -> str:
    """``root`` itself, or its ``kafka-tiered-storage`` directory when ``root`` is LocalTieredStorage's ``dir``
    setting (so either may be given)."""
    if layout.name == LocalTieredStorageLayout.name:
        inner = storage.join(root, LOCAL_TIERED_STORAGE_DIR)
        if any(d.rstrip("/").rsplit("/", 1)[-1] == LOCAL_TIERED_STORAGE_DIR for d in storage.list_dirs(root)):
            return inner
    return root

