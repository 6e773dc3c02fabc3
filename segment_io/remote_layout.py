"""Where a RemoteStorageManager keeps remote segments: its layout, behind one interface.

A layout says which objects under a root belong to which remote segment (topic id, partition, segment id) and
which of a segment's objects must exist for it to be readable. One layout is supported so far:

- ``local-tiered-storage``, Kafka's own ``LocalTieredStorage`` (the RemoteStorageManager Kafka tests itself with):
  under ``<root>/``, one directory per partition, ``<topic>-<partition>-<topic id>``, holding per segment the
  files ``<start offset, 20 digits>-<segment id><suffix>`` with the suffixes ``.log`` (the segment, as large as
  the metadata's segment size), ``.index``, ``.timeindex``, ``.snapshot`` (producer state),
  ``.leader_epoch_checkpoint`` and, when the segment has one, ``.txnindex``. ``<root>`` is the directory
  LocalTieredStorage makes under its ``dir`` setting (``kafka-tiered-storage``) or that setting itself.

Any other layout name is refused (:func:`layout_named`), as is a root where the layout finds nothing it knows
and something it does not (:func:`detect_root`). Listing goes through :mod:`segment_io.storage`: a local path or
an ``s3://`` prefix.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from segment_io.errors import UsageError

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

    def segment_suffix(self) -> str:
        """The object whose size is the segment's size in the metadata."""
        return ".log"

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


_UUID = r"[A-Za-z0-9_-]{22}"


class LocalTieredStorageLayout(RemoteLayout):
    """Kafka's ``LocalTieredStorage`` (see the module docstring)."""

    name = "local-tiered-storage"
    suffixes: ClassVar[dict[str, str]] = {".log": "segment", ".index": "offset index", ".timeindex": "time index",
                                          ".snapshot": "producer snapshot",
                                          ".leader_epoch_checkpoint": "leader epochs",
                                          ".txnindex": "transaction index"}
    _DIR = re.compile(rf"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)-(?P<topic_id>{_UUID})")
    _FILE = re.compile(rf"(?P<start>\d{{20}})-(?P<segment_id>{_UUID})(?P<suffix>\.[a-z_]+)")

    def parse(self, root: str, info: "FileInfo") -> RemoteObject | None:
        rel = info.uri[len(root.rstrip("/")) + 1:] if info.uri.startswith(root.rstrip("/") + "/") else None
        parts = rel.split("/") if rel else []
        if len(parts) != 2:
            return None
        d, f = self._DIR.fullmatch(parts[0]), self._FILE.fullmatch(parts[1])
        if d is None or f is None or f.group("suffix") not in self.suffixes:
            return None
        return RemoteObject(info.uri, info.size, d.group("topic"), d.group("topic_id"), int(d.group("partition")),
                            f.group("segment_id"), int(f.group("start")), f.group("suffix"))

    def object_uri(self, root: str, segment: "SegmentMetadata", suffix: str) -> str | None:
        tp = segment.partition
        return (f"{root.rstrip('/')}/{tp.topic}-{tp.partition}-{tp.topic_id}/"
                f"{segment.start_offset:020d}-{segment.segment_id}{suffix}")

    def required_suffixes(self, txn_index_empty: bool) -> tuple[str, ...]:
        # LocalTieredStorage writes every file but the transaction index, which it writes when there is one
        base = (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")
        return base if txn_index_empty else (*base, ".txnindex")


#: every supported layout, by name
LAYOUTS: dict[str, RemoteLayout] = {layout.name: layout for layout in (LocalTieredStorageLayout(),)}
#: LocalTieredStorage's directory under its ``dir`` setting
LOCAL_TIERED_STORAGE_DIR = "kafka-tiered-storage"


def layout_named(name: str) -> RemoteLayout:
    """The layout called ``name``; any other is refused, naming the supported ones."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise UsageError(f"remote layout {name!r} is not supported; supported: {', '.join(sorted(LAYOUTS))} "
                         "(Aiven's tiered-storage-for-apache-kafka is not supported yet)") from None


def detect_root(storage: "Storage", root: str, layout: RemoteLayout) -> str:
    """``root`` itself, or its ``kafka-tiered-storage`` directory when ``root`` is LocalTieredStorage's ``dir``
    setting (so either may be given)."""
    if layout.name == LocalTieredStorageLayout.name:
        inner = storage.join(root, LOCAL_TIERED_STORAGE_DIR)
        if any(d.rstrip("/").rsplit("/", 1)[-1] == LOCAL_TIERED_STORAGE_DIR for d in storage.list_dirs(root)):
            return inner
    return root

