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
from segment_io.errors import CorruptCheckpointError, UsageError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, LogDirListing
from segment_io.storage.base import Storage

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


def read_job_checkpoints(storage: Storage, log_dir: str,
                         listing: LogDirListing) -> dict[str, dict[TopicPartition, int]]:
    """The offset checkpoints the jobs read (:data:`JOB_CHECKPOINTS`, empty when the listing has no such file). A
    malformed file is a :class:`UsageError` (exit code 2): it is read before the lock is taken, so nothing has been
    done, and the message names the file, the line and the fix."""
    out = {}
    for name in JOB_CHECKPOINTS:
        try:
            out[name] = read_offset_checkpoint(storage, storage.join(log_dir, name)) \
                if name in listing.checkpoints else {}
        except CorruptCheckpointError as exc:
            raise UsageError(f"{exc}; nothing was done; fix: {CHECKPOINT_FIXES[name]}") from None
    return out


def write_cleaner_checkpoint(storage: Storage, log_dir: str, entries: Mapping[TopicPartition, int]) -> None:
    """Write ``cleaner-offset-checkpoint`` with ``entries`` (the whole file, atomically, in partition order)."""
    write_offset_checkpoint(storage, storage.join(log_dir, CLEANER_OFFSET_CHECKPOINT), dict(sorted(entries.items())))


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


__all__ = ["CHECKPOINT_FIXES", "JOB_CHECKPOINTS", "STEP_WRITE_LOG_START", "TopicPartition",
           "raise_log_start_checkpoint", "read_job_checkpoints", "write_cleaner_checkpoint"]
