"""The log dir's offset checkpoint files as the jobs use them, in one place: which ones they read, how a malformed
one is reported (with its fix), and how each is updated and written.

The job frame and the table job read ``cleaner-offset-checkpoint`` and ``log-start-offset-checkpoint``
(:func:`read_job_checkpoints`); compaction writes the first (:func:`write_cleaner_checkpoint`), retention raises the
second (:func:`raise_log_start_checkpoint`). ``recovery-point-offset-checkpoint`` and ``replication-offset-checkpoint``
are the broker's own: no job reads or writes them (``segjobs dump`` shows them, ``segjobs generate`` writes them for
the log dirs it makes). The file format is :mod:`segment_io.checkpoint`'s.
"""

from __future__ import annotations

from typing import Callable, Mapping

from segment_io.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from segment_io.errors import CorruptCheckpointError, IrregularEntryError, UsageError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, LogDirListing
from segment_io.storage.base import KIND_DIRECTORY, FileInfo, Storage

TopicPartition = tuple[str, int]

#: The offset checkpoints the jobs read, by file name.
JOB_CHECKPOINTS = (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)

#: What to do about a malformed per-log-dir checkpoint file. Kafka does not reset one: reading it fails with
#: an IOException and the broker takes the whole log dir offline (CheckpointFileWithFailureHandler.read).
CHECKPOINT_FIXES = {
    CLEANER_OFFSET_CHECKPOINT: "delete the file: compaction then starts again from each partition's log start, "
                               "as Kafka's cleaner does without a checkpoint (extra work, nothing is lost)",
    LOG_START_OFFSET_CHECKPOINT: "restore the file from a replica's log dir, or correct the line named; do not "
                                 "delete it: records below each raised log start would come back into view",
}

#: Fault-hook step name of the one write of ``log-start-offset-checkpoint`` in a retention run.
STEP_WRITE_LOG_START = "write-log-start-offset-checkpoint"


#: What to do about a per-log-dir checkpoint that is not a regular file (a dangling symbolic link, a directory, a
#: FIFO, ...). Kafka cannot read one either (the broker takes the log dir offline).
IRREGULAR_CHECKPOINT_FIXES = {
    CLEANER_OFFSET_CHECKPOINT: "make it the regular file again (mount the volume a dangling link leads to, or "
                               "restore the file), or remove the entry: compaction then starts again from each "
                               "partition's log start (extra work, nothing is lost)",
    LOG_START_OFFSET_CHECKPOINT: "make it the regular file again (mount the volume a dangling link leads to, or "
                                 "restore the file from a replica's log dir); do not remove the entry: records "
                                 "below each raised log start would come back into view",
}


def _listed_entry(storage: Storage, log_dir: str, listing: LogDirListing, name: str) -> FileInfo | None:
    """What the listing found under the checkpoint's name: the file (or irregular entry), a directory (the
    listing files those with the dir's other directories; on S3, keys below ``<name>/``), or None."""
    if name in listing.checkpoints:
        return listing.checkpoints[name]
    if name in listing.other_dirs:
        return FileInfo(storage.join(log_dir, name), 0, 0, kind=KIND_DIRECTORY)
    return None


def read_job_checkpoints(storage: Storage, log_dir: str,
                         listing: LogDirListing) -> dict[str, dict[TopicPartition, int]]:
    """The offset checkpoints the jobs read (:data:`JOB_CHECKPOINTS`, empty when the listing has no such file). A
    malformed file, or an entry under that name that is not a regular file (a dangling symbolic link, a directory,
    a FIFO, ...: refused before it is opened), is a :class:`UsageError` (exit code 2): it is read before the lock
    is taken, so nothing has been done, and the message names the file, the line (or what the entry is) and the
    fix."""
    out = {}
    for name in JOB_CHECKPOINTS:
        listed = _listed_entry(storage, log_dir, listing, name)
        try:
            out[name] = {} if listed is None else \
                read_offset_checkpoint(storage, storage.join(log_dir, name), listed=listed)
        except CorruptCheckpointError as exc:
            raise UsageError(f"{exc}; nothing was done; fix: {CHECKPOINT_FIXES[name]}") from None
        except IrregularEntryError as exc:
            raise UsageError(f"{exc}; nothing was done; fix: {IRREGULAR_CHECKPOINT_FIXES[name]}") from None
    return out


def write_cleaner_checkpoint(storage: Storage, log_dir: str, entries: Mapping[TopicPartition, int]) -> None:
    """Write ``cleaner-offset-checkpoint`` with ``entries`` (the whole file, atomically, in partition order)."""
    write_offset_checkpoint(storage, storage.join(log_dir, CLEANER_OFFSET_CHECKPOINT), dict(sorted(entries.items())))


def cleaner_reset_warning(partition: str, entry: int | None, log_start: int, log_end: int, *,
                          compact_and_delete: bool, dry_run: bool) -> str | None:
    """The warning for a ``cleaner-offset-checkpoint`` entry outside ``[log_start, log_end]``, which compaction
    resets to the log start, as Kafka's cleaner does (``LogCleanerManager.cleanableOffsets`` forces the
    checkpoint's update and logs a warning), or None where Kafka says nothing: no entry, or an entry below the log
    start of a ``compact,delete`` topic, whose retention raises the log start past the cleaner's entry as a
    matter of course."""
    if entry is None or (log_start <= entry <= log_end) or (entry < log_start and compact_and_delete):
        return None
    why = ("negative" if entry < 0 else f"below the log start offset {log_start}" if entry < log_start
           else f"past the log end offset {log_end}")
    return (f"{partition}: its {CLEANER_OFFSET_CHECKPOINT} entry {entry} is {why}: "
            f"{'it would be' if dry_run else 'it was'} reset to the log start offset {log_start}, as Kafka's cleaner "
            f"does, and the partition is cleaned again from there")


def raise_log_start_checkpoint(storage: Storage, log_dir: str, due: Mapping[TopicPartition, int], *,
                            fault: Callable[[str], None] | None = None
                            ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Raise the ``log-start-offset-checkpoint`` entries of ``due`` in ONE atomic write of the file (every
    partition of the dir shares it). Entries only rise; other partitions' entries are kept (the file is re-read,
    not trusted from the start of the run). Returns the file's entries for the keys of ``due`` after the call, and
    the entries written; the file is written only when one of them rises (``fault`` is called before, with
    :data:`STEP_WRITE_LOG_START`)."""
    uri = storage.join(log_dir, LOG_START_OFFSET_CHECKPOINT)
    entries = dict(read_offset_checkpoint(storage, uri))
    changed = {k: v for k, v in due.items() if v > entries.get(k, -1)}
    if changed:
        entries.update(changed)
        if fault is not None:
            fault(STEP_WRITE_LOG_START)
        write_offset_checkpoint(storage, uri, dict(sorted(entries.items())))
    return {k: entries[k] for k in due}, changed


__all__ = ["CHECKPOINT_FIXES", "IRREGULAR_CHECKPOINT_FIXES", "JOB_CHECKPOINTS", "STEP_WRITE_LOG_START",
           "TopicPartition", "cleaner_reset_warning", "raise_log_start_checkpoint", "read_job_checkpoints",
           "write_cleaner_checkpoint"]
