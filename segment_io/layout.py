"""Log-dir layout: the one place that knows how Kafka names partition directories and segment files.

``<log dir>/<topic>-<partition>/<20-digit base offset>.<suffix>`` plus per-dir checkpoint files.
Topics may contain dashes and dots, so a partition directory splits at its *last* dash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from segment_io.storage.base import FileInfo

if TYPE_CHECKING:
    from segment_io.storage.base import Storage

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
#: Suffixes Kafka appends while replacing or deleting files.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TRANSIENT_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# Kafka also renames directories of deleted / future partitions: <topic>-<p>.<uuid>-delete / -future
_SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})(?P<suffix>\.[a-z]+)(?P<transient>(\.cleaned|\.swap|\.deleted)?)$")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my.topic-with-dash-3"`` -> ``("my.topic-with-dash", 3)``; None for anything else (including
    ``-delete`` and ``-future`` directories a broker leaves while moving or deleting a partition)."""
    m = _PARTITION_DIR.match(name)
    if not m:
        return None
    return m.group("topic"), int(m.group("partition"))


def closest_topics_hint(glob: str, topics: Iterable[str], *, limit: int = 8) -> str:
    """What to tell someone whose topic glob matched none of ``topics``: the closest names
    (``difflib``, wildcards ignored, case-insensitive) or, when none is close, the names there are."""
    import difflib

    names = sorted(set(topics))
    if not names:
        return "there are no topics"
    by_lower = {n.lower(): n for n in names}
    wanted = re.sub(r"\[[^\]]*\]|[*?]", "", glob).lower()
    close = [by_lower[c] for c in difflib.get_close_matches(wanted, list(by_lower), n=3, cutoff=0.6)]
    if close:
        return f"closest: {', '.join(close)}"
    more = f" (and {len(names) - limit} more)" if len(names) > limit else ""
    return f"topics there: {', '.join(names[:limit])}{more}"


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def segment_file_name(base_offset: int, suffix: str = ".log") -> str:
    """``(42, ".index")`` -> ``"00000000000000000042.index"``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:020d}{suffix}"


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """``"00000000000000000042.log.swap"`` -> ``(42, ".log", ".swap")``; None when not a segment file."""
    m = _SEGMENT_FILE.match(name)
    if not m:
        return None
    return int(m.group("base")), m.group("suffix"), m.group("transient") or ""


# --------------------------------------------------------------------------------------------------
# Listing a log dir
# --------------------------------------------------------------------------------------------------

#: Per-log-dir offset checkpoint files, in Kafka's names.
OFFSET_CHECKPOINT_FILES = (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                           REPLICATION_OFFSET_CHECKPOINT)
SNAPSHOT_SUFFIX = ".snapshot"


@dataclass(frozen=True)
class SegmentFiles:
    """The live files of one segment (the ones without a transient suffix); absent files are None."""

    base_offset: int
    log: FileInfo
    index: FileInfo | None = None
    timeindex: FileInfo | None = None
    txnindex: FileInfo | None = None
    #: a producer-state snapshot whose offset equals this segment's base offset, when there is one
    snapshot: FileInfo | None = None


@dataclass(frozen=True)
class TransientFile:
    """A file Kafka renamed while cleaning (``.cleaned``), swapping (``.swap``) or deleting (``.deleted``)."""

    base_offset: int
    suffix: str  #: ``.log``, ``.index``, ...
    transient: str  #: ``.cleaned``, ``.swap`` or ``.deleted``
    info: FileInfo


@dataclass(frozen=True)
class PartitionListing:
    """Everything found in one ``<topic>-<partition>`` directory."""

    topic: str
    partition: int
    uri: str
    segments: tuple[SegmentFiles, ...]  #: sorted by base offset
    #: every producer-state ``.snapshot`` (Kafka keeps them at segment bases and at the log end), by offset
    producer_snapshots: tuple[tuple[int, FileInfo], ...]
    transient: tuple[TransientFile, ...]
    #: segment-named files whose ``.log`` is missing (Kafka's loader deletes such orphans)
    orphans: tuple[tuple[int, str, FileInfo], ...]
    leader_epoch_checkpoint: FileInfo | None
    partition_metadata: FileInfo | None
    #: files segjobs does not know (KRaft ``.checkpoint`` snapshots, ``quorum-state``, temp files, ...)
    unknown: tuple[FileInfo, ...]


@dataclass(frozen=True)
class LogDirListing:
    """A whole log dir: partitions by (topic, partition), the per-dir files, and what is not a partition."""

    root: str
    partitions: dict[tuple[str, int], PartitionListing]
    #: offset checkpoint files present at the top level, by name
    checkpoints: dict[str, FileInfo]
    #: other top-level files (``meta.properties``, ``.lock``, ``bootstrap.checkpoint``, ...)
    top_level_files: tuple[FileInfo, ...]
    #: directories that are not partitions (``-delete``/``-future``/``-stray`` dirs, anything else), by name
    other_dirs: dict[str, tuple[FileInfo, ...]]

    def partition(self, topic: str, partition: int) -> PartitionListing:
        return self.partitions[(topic, partition)]


def _relative_parts(root: str, uri: str) -> list[str] | None:
    prefix = root.rstrip("/") + "/"
    if not uri.startswith(prefix):
        return None
    return uri[len(prefix):].split("/")


def _list_partition(topic: str, partition: int, uri: str, files: list[FileInfo]) -> PartitionListing:
    live: dict[int, dict[str, FileInfo]] = {}
    snapshots: list[tuple[int, FileInfo]] = []
    transient: list[TransientFile] = []
    unknown: list[FileInfo] = []
    epoch_cp = metadata = None
    for f in files:
        name = f.name
        if name == LEADER_EPOCH_CHECKPOINT:
            epoch_cp = f
            continue
        if name == PARTITION_METADATA:
            metadata = f
            continue
        parsed = parse_segment_file(name)
        if parsed is None or parsed[1] not in SEGMENT_SUFFIXES:
            unknown.append(f)
            continue
        base, suffix, trans = parsed
        if trans:
            transient.append(TransientFile(base, suffix, trans, f))
        elif suffix == SNAPSHOT_SUFFIX:
            snapshots.append((base, f))
        else:
            live.setdefault(base, {})[suffix] = f
    snapshot_at = dict(snapshots)
    segments: list[SegmentFiles] = []
    orphans: list[tuple[int, str, FileInfo]] = []
    for base in sorted(live):
        kinds = live[base]
        if ".log" not in kinds:
            orphans.extend((base, suffix, info) for suffix, info in sorted(kinds.items()))
            continue
        segments.append(SegmentFiles(base, kinds[".log"], kinds.get(".index"), kinds.get(".timeindex"),
                                     kinds.get(".txnindex"), snapshot_at.get(base)))
    return PartitionListing(
        topic=topic, partition=partition, uri=uri, segments=tuple(segments),
        producer_snapshots=tuple(sorted(snapshots, key=lambda s: s[0])),
        transient=tuple(sorted(transient, key=lambda t: (t.base_offset, t.suffix, t.transient))),
        orphans=tuple(orphans), leader_epoch_checkpoint=epoch_cp, partition_metadata=metadata,
        unknown=tuple(sorted(unknown, key=lambda f: f.uri)))


def listing_from_files(root: str, files: Iterable[FileInfo], *, dirs: Iterable[str] = ()) -> LogDirListing:
    """Classify the files of a log dir (a recursive listing under ``root``) without touching any store.

    ``dirs`` may name sub-directories (full URIs) so that empty ones appear too. Files nested deeper than
    a partition directory, and directories whose name is not ``<topic>-<partition>``, land in
    ``other_dirs`` under their top-level directory name; nothing is dropped.
    """
    root = root.rstrip("/")
    by_dir: dict[str, list[FileInfo]] = {}
    top: list[FileInfo] = []
    checkpoints: dict[str, FileInfo] = {}
    nested: dict[str, list[FileInfo]] = {}
    for d in dirs:
        parts = _relative_parts(root, d.rstrip("/"))
        if parts and len(parts) == 1:
            by_dir.setdefault(parts[0], [])
    for f in files:
        parts = _relative_parts(root, f.uri)
        if parts is None:
            raise ValueError(f"{f.uri} is not under the log dir {root}")
        if len(parts) == 1:
            if parts[0] in OFFSET_CHECKPOINT_FILES:
                checkpoints[parts[0]] = f
            else:
                top.append(f)
        elif len(parts) == 2:
            by_dir.setdefault(parts[0], []).append(f)
        else:
            nested.setdefault(parts[0], []).append(f)
    partitions: dict[tuple[str, int], PartitionListing] = {}
    other: dict[str, list[FileInfo]] = {}
    for name in sorted(set(by_dir) | set(nested)):
        tp = parse_partition_dir(name)
        if tp is None or name in nested:
            other[name] = by_dir.get(name, []) + nested.get(name, [])
            continue
        partitions[tp] = _list_partition(tp[0], tp[1], f"{root}/{name}", by_dir[name])
    return LogDirListing(
        root=root, partitions=dict(sorted(partitions.items())), checkpoints=checkpoints,
        top_level_files=tuple(sorted(top, key=lambda f: f.uri)),
        other_dirs={k: tuple(sorted(v, key=lambda f: f.uri)) for k, v in other.items()})


def list_log_dir(storage: Storage, root: str) -> LogDirListing:
    """List the log dir at ``root`` through ``storage`` (one recursive listing, plus its sub-directories)."""
    # a local store reports plain paths even when asked about file:// URIs
    root = (storage.local_path(root) or root).rstrip("/")
    return listing_from_files(root, storage.list(root, recursive=True), dirs=storage.list_dirs(root))
