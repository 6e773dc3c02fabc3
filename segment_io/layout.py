"""Log-dir layout: the one place that knows how Kafka names partition directories and segment files.

``<log dir>/<topic>-<partition>/<20-digit base offset>.<suffix>`` plus per-dir checkpoint files.
Topics may contain dashes and dots, so a partition directory splits at its *last* dash.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable

from segment_io.errors import IrregularEntryError, StorageError
from segment_io.storage.base import KIND_DIRECTORY, KIND_FILE, FileInfo

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

#: What a partition directory's name may be, strictly: a topic Kafka allows (``[a-zA-Z0-9._-]``, 1 to 249
#: characters, not ``.`` or ``..``: Kafka's ``Topic.validate``) and a partition number in ASCII digits without a
#: leading zero, at most 2^31 - 1 (a Java int). Then the name is exactly ``partition_dir_name(topic, partition)``:
#: two directories never name the same partition.
_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>0|[1-9][0-9]{0,9})", re.ASCII)
#: A name that looks like a partition directory's (it ends in ``-`` and digits, Unicode ones included, maybe after
#: a ``+``, which Java's ``Integer.parseInt`` accepts: a broker loads ``users-+3`` as partition 3) whatever its
#: topic, or white space after them (``users-0\n``): what :func:`partition_dir_problem` explains when
#: :data:`_PARTITION_DIR` refuses it. The patterns of this module are used with ``fullmatch``: ``$`` would also
#: match before a final line break, and ``users-0\n`` would name partition users-0 beside the real one.
_PARTITION_LIKE = re.compile(r"(?P<topic>.*)-(?P<sign>\+?)(?P<partition>\d+)(?P<trail>\s*)", re.DOTALL)
_TOPIC_CHAR = re.compile(r"[a-zA-Z0-9._-]", re.ASCII)
MAX_TOPIC_LENGTH = 249
MAX_PARTITION = 2**31 - 1
# Kafka also renames directories of deleted / future partitions: <topic>-<p>.<uuid>-delete / -future
_SEGMENT_FILE = re.compile(r"(?P<base>[0-9]{20})(?P<suffix>\.[a-z]+)(?P<transient>(\.cleaned|\.swap|\.deleted)?)",
                           re.ASCII)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my.topic-with-dash-3"`` -> ``("my.topic-with-dash", 3)``; None for anything else: ``-delete`` and
    ``-future`` directories a broker leaves while moving or deleting a partition, and names that only look like
    a partition's (see :func:`partition_dir_problem`). The one parser of partition names: a log dir's
    directories, ``--partition``, the partitions recovery and the checkpoints name."""
    m = _PARTITION_DIR.fullmatch(name)
    if not m or m.group("topic") in (".", ".."):
        return None
    partition = int(m.group("partition"))
    if partition > MAX_PARTITION:
        return None
    return m.group("topic"), partition


def partition_dir_problem(name: str) -> str | None:
    """Why ``name``, which looks like a partition directory's (``<something>-<digits>``), is not one
    (:func:`parse_partition_dir` refuses it); None when it is one, or does not look like one at all."""
    if parse_partition_dir(name) is not None:
        return None
    m = _PARTITION_LIKE.fullmatch(name)
    if not m:
        return None
    topic, number = m.group("topic"), m.group("partition")
    if m.group("trail"):
        return f"its name ends in white space ({m.group('trail')!r}) after the partition number"
    if not number.isascii():
        return f"its partition number {number!r} is not written in ASCII digits 0-9"
    if int(number) > MAX_PARTITION:  # (before the sign: Java's parseInt refuses it, signed or not)
        return (f"its partition number {number} is above {MAX_PARTITION}, the largest Kafka can hold (a broker "
                f"refuses to load a log dir holding it)")
    if m.group("sign") and topic:
        return (f"its partition number '+{number}' has a sign (a broker reads it as partition {int(number)}, whose "
                f"directory is {topic}-{int(number)})")
    if len(number) > 1 and number.startswith("0"):
        return (f"its partition number {number!r} has a leading zero (partition {int(number)}'s directory is "
                f"{topic}-{int(number)})")
    if not topic:
        return "it has no topic name before the partition number"
    bad = sorted({c for c in topic if not _TOPIC_CHAR.fullmatch(c)})
    if bad:
        shown = " ".join(repr(c) for c in bad[:8]) + (" ..." if len(bad) > 8 else "")
        return f"its topic {topic!r} holds characters Kafka does not allow in a topic name ({shown}; legal: " \
               f"a-z A-Z 0-9 . _ -)"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"its topic is {len(topic)} characters long, above Kafka's limit of {MAX_TOPIC_LENGTH}"
    return f"Kafka does not allow {topic!r} as a topic name"


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


def log_dir_file(partition_uri: str, name: str) -> str:
    """The per-log-dir file ``name`` (e.g. ``log-start-offset-checkpoint``) beside partition ``partition_uri``."""
    return f"{partition_uri.rstrip('/').rsplit('/', 1)[0]}/{name}"


def segment_file_name(base_offset: int, suffix: str = ".log") -> str:
    """``(42, ".index")`` -> ``"00000000000000000042.index"``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:020d}{suffix}"


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """``"00000000000000000042.log.swap"`` -> ``(42, ".log", ".swap")``; None when not a segment file."""
    m = _SEGMENT_FILE.fullmatch(name)
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
    #: files segjobs does not know (KRaft ``.checkpoint`` snapshots, ``quorum-state``, temp files, ...), and
    #: sub-directories with what they hold (Kafka ignores both)
    unknown: tuple[FileInfo, ...]
    #: entries that bear the name of a segment file (or of a per-partition file) but are not regular files:
    #: a dangling symbolic link, a directory (on S3 a folder marker or a prefix), a FIFO, ... (``kind`` says
    #: which). The partition cannot be read as it stands: see :func:`unreadable_entry`.
    irregular: tuple[FileInfo, ...] = ()
    #: where the partition directory really is when it is a symbolic link leading outside the log dir
    #: (local disk only; see :func:`unreadable_entry`)
    outside_log_dir: str | None = None


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
    #: those of ``other_dirs`` (and entries that are not directories) named like a partition that are not one
    #: (``Copy of orders-0``, ``users-01``, ``orders-99999999999``): by name, why (:func:`partition_dir_problem`).
    #: A job never reads nor writes them, and reports each as an error (:func:`rejected_partition_dir_error`).
    rejected: dict[str, str] = field(default_factory=dict)

    def partition(self, topic: str, partition: int) -> PartitionListing:
        return self.partitions[(topic, partition)]


def _relative_parts(root: str, uri: str) -> list[str] | None:
    prefix = root.rstrip("/") + "/"
    if not uri.startswith(prefix):
        return None
    return uri[len(prefix):].split("/")


def _is_reserved_name(name: str) -> bool:
    """Whether a partition directory entry called ``name`` must hold data a job reads or rewrites."""
    parsed = parse_segment_file(name)
    return name in (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA) or (
        parsed is not None and parsed[1] in SEGMENT_SUFFIXES)


def _list_partition(topic: str, partition: int, uri: str, files: list[FileInfo]) -> PartitionListing:
    live: dict[int, dict[str, FileInfo]] = {}
    snapshots: list[tuple[int, FileInfo]] = []
    transient: list[TransientFile] = []
    unknown: list[FileInfo] = []
    irregular: list[FileInfo] = []
    epoch_cp = metadata = None
    for f in files:
        name = f.name
        if f.kind != KIND_FILE:
            (irregular if _is_reserved_name(name) else unknown).append(f)
            continue
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
        unknown=tuple(sorted(unknown, key=lambda f: f.uri)), irregular=tuple(sorted(irregular, key=lambda f: f.uri)))


def listing_from_files(root: str, files: Iterable[FileInfo], *, dirs: Iterable[str] = ()) -> LogDirListing:
    """Classify the entries of a log dir (a recursive listing under ``root``) without touching any store.

    ``dirs`` may name sub-directories (full URIs) so that empty ones appear too; a listing taken with
    ``irregular=True`` reports them itself (``FileInfo.kind`` "directory"). Entries nested deeper than a
    partition directory belong to that partition's sub-directory: it is listed in the partition's
    ``unknown`` entries, or in ``irregular`` when it bears a segment file's name, and what it holds in
    ``unknown``. Directories whose name is not ``<topic>-<partition>`` land in ``other_dirs``; a top-level
    entry named like a partition that is not a directory (a dangling symbolic link, ...) is a partition whose
    only entry is irregular. Nothing is dropped.
    """
    root = root.rstrip("/")
    by_dir: dict[str, list[FileInfo]] = {}
    top: list[FileInfo] = []
    checkpoints: dict[str, FileInfo] = {}
    nested: dict[str, list[FileInfo]] = {}
    unreadable_dirs: dict[str, FileInfo] = {}
    for d in dirs:
        parts = _relative_parts(root, d.rstrip("/"))
        if parts and len(parts) == 1:
            by_dir.setdefault(parts[0], [])
    for f in files:
        parts = _relative_parts(root, f.uri)
        if parts is None:
            raise ValueError(f"{f.uri} is not under the log dir {root}")
        if len(parts) == 1:
            if f.kind == KIND_DIRECTORY:
                by_dir.setdefault(parts[0], [])
            elif f.kind != KIND_FILE and (parse_partition_dir(parts[0]) is not None
                                          or partition_dir_problem(parts[0]) is not None):
                unreadable_dirs[parts[0]] = f  # the partition dir itself is unreadable
                by_dir.setdefault(parts[0], [])
            elif parts[0] in OFFSET_CHECKPOINT_FILES:
                checkpoints[parts[0]] = f
            else:
                top.append(f)
        elif len(parts) == 2:
            by_dir.setdefault(parts[0], []).append(f)
        else:
            nested.setdefault(parts[0], []).append(f)
    partitions: dict[tuple[str, int], PartitionListing] = {}
    other: dict[str, list[FileInfo]] = {}
    rejected: dict[str, str] = {}
    for name in sorted(set(by_dir) | set(nested)):
        tp = parse_partition_dir(name)
        if tp is None:
            other[name] = by_dir.get(name, []) + nested.get(name, [])
            problem = partition_dir_problem(name)
            if problem is not None:
                rejected[name] = problem
            continue
        entries = list(by_dir.get(name, []))
        # A sub-directory shows in a recursive listing only through what it holds (always so on S3): add it
        # once as a directory entry, and what it holds as unknown files of the partition.
        seen = {f.name for f in entries if f.kind == KIND_DIRECTORY}
        inner: list[FileInfo] = []
        for f in nested.get(name, []):
            sub = _relative_parts(root, f.uri)[1]  # type: ignore[index]
            if sub not in seen:
                seen.add(sub)
                entries.append(FileInfo(f"{root}/{name}/{sub}", 0, f.mtime_ms, kind=KIND_DIRECTORY))
            inner.append(f)
        listed = _list_partition(tp[0], tp[1], f"{root}/{name}", entries)
        if inner:
            listed = replace(listed, unknown=tuple(sorted((*listed.unknown, *inner), key=lambda f: f.uri)))
        if name in unreadable_dirs:
            listed = replace(listed, irregular=(unreadable_dirs[name], *listed.irregular))
        partitions[tp] = listed
    return LogDirListing(
        root=root, partitions=dict(sorted(partitions.items())), checkpoints=checkpoints,
        top_level_files=tuple(sorted(top, key=lambda f: f.uri)),
        other_dirs={k: tuple(sorted(v, key=lambda f: f.uri)) for k, v in other.items()}, rejected=rejected)


def list_log_dir(storage: Storage, root: str) -> LogDirListing:
    """List the log dir at ``root`` through ``storage``: one recursive listing that also reports entries that
    are not regular files (so that a segment that is there but unreadable is not mistaken for an absent one).
    On local disk, a partition directory that is a symbolic link leading outside the log dir is marked
    (``outside_log_dir``)."""
    # a local store reports plain paths even when asked about file:// URIs
    local = storage.local_path(root)
    root = (local or root).rstrip("/")
    listing = listing_from_files(root, storage.list(root, recursive=True, irregular=True))
    if local is None:
        return listing
    real_root = os.path.realpath(root)
    for key, part in listing.partitions.items():
        if os.path.islink(part.uri):
            real = os.path.realpath(part.uri)
            if os.path.commonpath([real_root, real]) != real_root:
                listing.partitions[key] = replace(part, outside_log_dir=real)
    return listing


def list_log_dir_top(storage: Storage, root: str) -> LogDirListing:
    """The log dir at ``root`` from one listing of its top level only: its partitions by name (without their
    files), its checkpoint and other files, and its other directories (without what they hold). Enough for the
    checks of names (scope, configs, a partition directory given as the log dir) at a fraction of
    :func:`list_log_dir`'s cost on an object store: a request per thousand partitions, not per thousand files."""
    root = (storage.local_path(root) or root).rstrip("/")
    return listing_from_files(root, storage.list(root, irregular=True))


def irregular_entry_error(f: FileInfo, *, partition_dir: bool = False) -> IrregularEntryError:
    """The error for an entry that must hold data but is not a regular file (``f.kind`` says what it is)."""
    what = f"the partition directory is a {f.kind}" if partition_dir else f"{f.name} is a {f.kind}, not a regular file"
    return IrregularEntryError(
        f"{what}: the partition cannot be read (a broker would skip the entry and lose the records it should "
        f"hold); fix: restore the file from a replica or a backup, or remove the entry if the data is really "
        f"gone, then re-run; the partition is left untouched until then", uri=f.uri)


def rejected_partition_dir_error(root: str, name: str, problem: str) -> IrregularEntryError:
    """The error for the directory ``name`` of the log dir ``root`` that looks like a partition's but is not
    one (``problem``: :func:`partition_dir_problem`): it is left untouched, and says so."""
    return IrregularEntryError(
        f"{name!r} is not a partition directory: {problem}; no broker names a partition's directory so (a copy or "
        f"a rename made by hand?); segjobs neither reads nor writes it and leaves it out of the checkpoint files; "
        f"fix: move it out of the log dir, or rename it to the partition it holds, then re-run",
        uri=f"{root.rstrip('/')}/{name}")


def rejected_partition_key(name: str) -> tuple[str, int] | None:
    """The (topic, partition) a rejected directory's name (see :attr:`LogDirListing.rejected`) reads as when its
    digits are taken as they come: what decides whether a run's scope covers it. None when it has no topic."""
    m = _PARTITION_LIKE.fullmatch(name)
    return (m.group("topic"), int(m.group("partition"))) if m and m.group("topic") else None


def unreadable_entry(listing: PartitionListing) -> StorageError | None:
    """Why a partition must be left untouched as its directory stands, or None: an entry bearing a segment
    file's name that is not a regular file (a broker's loader would skip that segment and delete its index
    files, silently losing its records), or a partition directory that is a symbolic link leading outside
    the log dir (the log dir's lock does not cover it: a broker that owns the directory it leads to may be
    writing there). The error names the entry, what it is and the fix."""
    for f in listing.irregular:
        return irregular_entry_error(f, partition_dir=f.uri == listing.uri)
    if listing.outside_log_dir is not None:
        return IrregularEntryError(
            f"the partition directory is a symbolic link to {listing.outside_log_dir}, outside the log dir: "
            f"the log dir's lock does not cover it, so a broker owning that directory could be writing to it; "
            f"fix: move the partition into the log dir, or run segjobs on the log dir it belongs to; "
            f"the partition is left untouched", uri=listing.uri)
    return None


#: How far :func:`log_dirs_near` looks for the log dir a wrong ``--log-dir`` missed: directories up to this many
#: levels below it, its parent and its parent's other directories (siblings), and no more than
#: :data:`NEAR_MAX_LISTINGS` listings in all (one listing each, on S3 a delimited LIST: never a whole bucket).
NEAR_DEPTH = 2
NEAR_MAX_LISTINGS = 24


def log_dirs_near(storage: "Storage", root: str, *, depth: int = NEAR_DEPTH,
                  max_listings: int = NEAR_MAX_LISTINGS) -> list[str]:
    """Directories (prefixes) near ``root``, which holds no partition directory, that do hold some: first those
    below it (up to ``depth`` levels, breadth first), then its parent, then its siblings; each a log dir the user
    may have meant. Bounded: at most ``max_listings`` listings of one level each; a directory that cannot be
    listed is passed over. Partition directories themselves are not descended into."""
    root = (storage.local_path(root) or root).rstrip("/")
    budget = [max_listings]

    def subdirs(uri: str) -> list[str] | None:
        """``uri``'s sub-directories, or None when the budget is spent."""
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        try:
            return sorted(storage.list_dirs(uri))
        except (StorageError, OSError):
            return []

    def is_partition(uri: str) -> bool:
        return parse_partition_dir(uri.rstrip("/").rpartition("/")[2]) is not None

    found: list[str] = []
    level = [root]
    for distance in range(depth + 1):  # the root's listing, then one per directory at each distance below it
        below: list[str] = []
        for uri in level:
            dirs = subdirs(uri)
            if dirs is None:
                return found
            if any(is_partition(d) for d in dirs):
                if distance > 0:
                    found.append(uri)
                continue
            below += [d for d in dirs if not d.rpartition("/")[2].startswith(".")]
        level = below if distance < depth else []
    parent = root.rpartition("/")[0]
    if not parent or parent.endswith(":/") or parent == root:  # a bucket or the file system's root
        return found
    siblings = subdirs(parent)
    if siblings is None:
        return found
    if any(is_partition(d) for d in siblings):
        return [*found, parent]  # the root is a directory inside the log dir (a topic name, a typo)
    for sibling in siblings:
        if sibling.rstrip("/") == root or sibling.rpartition("/")[2].startswith("."):
            continue
        dirs = subdirs(sibling)
        if dirs is None:
            break
        if any(is_partition(d) for d in dirs):
            found.append(sibling)
    return found
