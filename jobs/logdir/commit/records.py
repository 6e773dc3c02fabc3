"""The on-disk records of segjobs' commits: what recovery (:mod:`jobs.logdir.recover`) reads to finish or undo an
interrupted operation, and the names of the places where they live.

segjobs keeps its own bookkeeping out of the log dir (a broker must be able to load the dir at any instant,
and it only understands its own names there). It lives under the *work location* of the log dir, a sibling
``<log-dir>.segjobs`` directory or prefix, in ``<work>/commit/<topic>-<partition>/``:

* ``replace.json`` - the intent of an unfinished replace (old and new base offsets and the files of each);
  written with ``put_if_absent`` before any live file changes, so two committers of the same partition cannot
  interleave, and removed as the last-but-cleanup step.
* ``delete.json`` - the intent of an unfinished two-phase delete (base offsets and ``now_ms``).
* ``deleted.json`` - the deletion ledger: for every segment renamed to ``.deleted``, the time (``now_ms`` of
  the run that deleted it) from which ``file.delete.delay.ms`` counts. Time is an input of every job,
  never the wall clock, so the ledger, not a file's mtime, carries it; this works the same on S3, where an
  object's last-modified time cannot be set.
* ``staged/<run id>/`` (S3 only) - new segment objects written by a run before the commit, each run in its own
  area (a run whose lease was taken over may still be staging; no two runs ever write the same object).

A partition's own files are read through :func:`list_segment_files`: Kafka's segment names, with the transient
suffixes (``.cleaned``, ``.swap``, ``.deleted``) that tell which step of a protocol a file is at (the protocols
themselves are in :mod:`jobs.logdir.commit.committers`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from segment_io.errors import LocatedError, NotFoundError, PreconditionFailedError
from segment_io.layout import DELETED_SUFFIX, SEGMENT_SUFFIXES, parse_segment_file
from segment_io.storage.base import FileInfo, Storage

#: The files that make up a segment's data. ``.snapshot`` (producer state) is managed separately.
SEGMENT_DATA_SUFFIXES: tuple[str, ...] = tuple(s for s in SEGMENT_SUFFIXES if s != ".snapshot")
LOG_SUFFIX = ".log"

COMMIT_DIR = "commit"
STAGED_DIR = "staged"
#: ``<work>/staging/<tp>/``: where compaction tasks write new segments before the driver commits them one group
#: at a time (see :meth:`~jobs.logdir.commit.committers.Committer.task_stage_uri`). No intent ever refers to it:
#: recovery empties it.
PRIVATE_STAGING_DIR = "staging"
#: ``<partition>/.segjobs-staging/``: where tasks stage new segments for a log dir on another filesystem than its
#: work dir (see :class:`~jobs.logdir.commit.committers.RenameCommitter`). A broker ignores a sub-directory of a
#: partition dir (its loader only looks at files), no intent refers to it, and recovery empties and removes it.
STAGING_BESIDE_DIR = ".segjobs-staging"
#: ``<work>/external-sort/``: the external-sort strategy's work files, one dir per run (``run-<id>``, a dry run's
#: ``dry-<id>``), each removed by its run (see :mod:`jobs.engine.compact.external_sort`); the dir itself goes once
#: empty.
EXTERNAL_SORT_DIR = "external-sort"
REPLACE_INTENT = "replace.json"
DELETE_INTENT = "delete.json"
DELETED_LEDGER = "deleted.json"
_FORMAT_VERSION = 1


class CommitError(LocatedError):
    """A replace or delete cannot be done as asked: the request is inconsistent with the partition's live
    segments, a staged file is missing, or an unfinished operation must be recovered first. ``uri`` names
    the partition (or file) and ``offset`` the base offset concerned, when there is one."""

    def __init__(self, detail: str, *, uri: str | None = None, offset: int | None = None) -> None:
        super().__init__(detail, path=uri, offset=offset)

    @property
    def uri(self) -> str | None:
        """The partition or file concerned (the located ``path``)."""
        return self.path


class RecoveryError(CommitError):
    """What an interrupted operation left cannot be completed or undone safely (an intent names a
    staged object that is gone, an intent file is unreadable). Nothing is changed when this is raised."""


# --------------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------------


def partition_name(partition_uri: str) -> str:
    """``/data/kafka/orders-3`` -> ``orders-3``."""
    return partition_uri.rstrip("/").rsplit("/", 1)[-1]


def partition_work_uri(storage: Storage, work_uri: str, partition_uri: str) -> str:
    """Where segjobs keeps the intents and the deletion ledger of one partition."""
    return storage.join(work_uri, COMMIT_DIR, partition_name(partition_uri))



# --------------------------------------------------------------------------------------------------
# Intents
# --------------------------------------------------------------------------------------------------



@dataclass(frozen=True)
class ReplaceIntent:
    """The durable description of one replace: enough for recovery to finish it with nothing else."""

    partition: str
    old: dict[int, tuple[str, ...]]  #: old base offset -> live data suffixes it had
    new: dict[int, dict[str, int]]  #: new base offset -> suffix -> staged size in bytes
    #: the run that staged the new segments (on S3 their objects live under ``staged/<run id>/``); None in
    #: intents written before runs had their own staging, whose objects lie directly under ``staged/``
    run_id: str | None = None

    def to_json(self) -> bytes:
        doc = {"version": _FORMAT_VERSION, "kind": "replace", "partition": self.partition,
               "old": [[b, list(s)] for b, s in sorted(self.old.items())],
               "new": [[b, s] for b, s in sorted(self.new.items())]}
        if self.run_id is not None:
            doc["run_id"] = self.run_id
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, uri: str) -> "ReplaceIntent":
        try:
            doc = json.loads(data)
            run_id = doc.get("run_id")
            return cls(partition=doc["partition"],
                       old={int(b): tuple(s) for b, s in doc["old"]},
                       new={int(b): {str(k): int(v) for k, v in s.items()} for b, s in doc["new"]},
                       run_id=None if run_id is None else str(run_id))
        except (ValueError, KeyError, TypeError) as e:
            raise RecoveryError(f"unreadable replace intent: {e}", uri=uri) from None

    def new_files(self) -> set[tuple[int, str]]:
        return {(b, s) for b, sfx in self.new.items() for s in sfx}

    def old_files(self) -> set[tuple[int, str]]:
        return {(b, s) for b, sfx in self.old.items() for s in sfx}


@dataclass(frozen=True)
class DeleteIntent:
    """The durable description of one two-phase delete."""

    partition: str
    base_offsets: tuple[int, ...]
    now_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"version": _FORMAT_VERSION, "kind": "delete", "partition": self.partition,
                           "base_offsets": list(self.base_offsets), "now_ms": self.now_ms}).encode()

    @classmethod
    def from_json(cls, data: bytes, uri: str) -> "DeleteIntent":
        try:
            doc = json.loads(data)
            return cls(partition=doc["partition"], base_offsets=tuple(int(b) for b in doc["base_offsets"]),
                       now_ms=int(doc["now_ms"]))
        except (ValueError, KeyError, TypeError) as e:
            raise RecoveryError(f"unreadable delete intent: {e}", uri=uri) from None



# --------------------------------------------------------------------------------------------------
# Partition listing
# --------------------------------------------------------------------------------------------------



@dataclass(frozen=True)
class SegmentFile:
    """One file of a partition whose name Kafka's segment naming explains."""

    info: FileInfo
    base_offset: int
    suffix: str  #: ``.log``, ``.index``, ...
    transient: str  #: ``""`` (live), ``.cleaned``, ``.swap`` or ``.deleted``

    @property
    def uri(self) -> str:
        return self.info.uri

    @property
    def is_data(self) -> bool:
        return self.suffix in SEGMENT_DATA_SUFFIXES


def list_segment_files(storage: Storage, partition_uri: str) -> list[SegmentFile]:
    """Segment files directly in the partition, in name order; other files (checkpoints, temporaries,
    ``partition.metadata``) are not segment files and are left out."""
    out = []
    for info in storage.list(partition_uri):
        parsed = parse_segment_file(info.name)
        if parsed is not None:
            out.append(SegmentFile(info, *parsed))
    return out


def live_log_bases(files: Iterable[SegmentFile]) -> list[int]:
    """Base offsets of the live segments (those with a live ``.log``), ascending."""
    return sorted({f.base_offset for f in files if f.transient == "" and f.suffix == LOG_SUFFIX})


def live_data_suffixes(files: Iterable[SegmentFile], base: int) -> tuple[str, ...]:
    """The data suffixes the live segment ``base`` has, in :data:`SEGMENT_DATA_SUFFIXES` order."""
    present = {f.suffix for f in files if f.base_offset == base and f.transient == "" and f.is_data}
    return tuple(s for s in SEGMENT_DATA_SUFFIXES if s in present)


def in_rename_order(suffixes: Iterable[str]) -> list[str]:
    """``.log`` first, then the indexes: the order Kafka renames a segment's files in."""
    return sorted(set(suffixes), key=SEGMENT_DATA_SUFFIXES.index)



def deleted_bases(files: Iterable[SegmentFile]) -> set[int]:
    """Base offsets that have ``.deleted`` segment data files."""
    return {f.base_offset for f in files if f.transient == DELETED_SUFFIX and f.is_data}



# --------------------------------------------------------------------------------------------------
# Reading and writing the records
# --------------------------------------------------------------------------------------------------


def read_json_or_none(storage: Storage, uri: str) -> bytes | None:
    """The bytes of ``uri``, or None when it does not exist."""
    try:
        return storage.read(uri)
    except NotFoundError:
        return None


def read_replace_intent(storage: Storage, pwork: str) -> ReplaceIntent | None:
    uri = storage.join(pwork, REPLACE_INTENT)
    data = read_json_or_none(storage, uri)
    return None if data is None else ReplaceIntent.from_json(data, uri)


def read_delete_intent(storage: Storage, pwork: str) -> DeleteIntent | None:
    uri = storage.join(pwork, DELETE_INTENT)
    data = read_json_or_none(storage, uri)
    return None if data is None else DeleteIntent.from_json(data, uri)


def read_ledger(storage: Storage, pwork: str) -> dict[int, int]:
    """The deletion ledger: base offset of a ``.deleted`` segment -> ``now_ms`` when it was deleted."""
    uri = storage.join(pwork, DELETED_LEDGER)
    data = read_json_or_none(storage, uri)
    if data is None:
        return {}
    try:
        doc = json.loads(data)
        return {int(b): int(t) for b, t in doc["deleted_at_ms"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RecoveryError(f"unreadable deletion ledger: {e}", uri=uri) from None


def write_ledger(storage: Storage, pwork: str, ledger: dict[int, int]) -> None:
    """Replace the deletion ledger (the caller holds the log dir's lock, so a plain atomic write is enough)."""
    uri = storage.join(pwork, DELETED_LEDGER)
    if not ledger:
        storage.delete(uri)
        return
    storage.makedirs(pwork)
    doc = {"version": _FORMAT_VERSION, "deleted_at_ms": {str(b): t for b, t in sorted(ledger.items())}}
    storage.write_atomic(uri, json.dumps(doc, sort_keys=True).encode())




def record_deleted(storage: Storage, pwork: str, bases: Iterable[int], now_ms: int) -> bool:
    """Enter ``bases`` in the deletion ledger at ``now_ms`` unless already there; True if it changed.
    An existing entry keeps its (earlier) time: the delay never restarts."""
    ledger = read_ledger(storage, pwork)
    missing = [b for b in bases if b not in ledger]
    if not missing:
        return False
    for b in missing:
        ledger[b] = now_ms
    write_ledger(storage, pwork, ledger)
    return True


def put_intent(storage: Storage, pwork: str, name: str, data: bytes, partition_uri: str) -> str:
    """Write the intent ``name`` of the partition unless one is there already (then the partition needs recovery
    first: :class:`CommitError`); its URI."""
    storage.makedirs(pwork)
    uri = storage.join(pwork, name)
    try:
        storage.put_if_absent(uri, data)
    except PreconditionFailedError:
        raise CommitError(f"an unfinished operation left {uri}; run `segjobs recover` first",
                          uri=partition_uri) from None
    return uri


__all__ = [
    "COMMIT_DIR", "DELETED_LEDGER", "DELETE_INTENT", "EXTERNAL_SORT_DIR", "LOG_SUFFIX", "PRIVATE_STAGING_DIR",
    "REPLACE_INTENT", "SEGMENT_DATA_SUFFIXES", "STAGED_DIR", "STAGING_BESIDE_DIR", "CommitError", "DeleteIntent",
    "RecoveryError", "ReplaceIntent", "SegmentFile", "deleted_bases", "in_rename_order", "list_segment_files",
    "live_data_suffixes", "live_log_bases", "partition_name", "partition_work_uri", "put_intent", "read_delete_intent",
    "read_json_or_none", "read_ledger", "read_replace_intent", "record_deleted", "write_ledger",
]
