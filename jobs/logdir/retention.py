"""Retention's destructive steps on a log dir, beside the commit protocol that carries out the deletes
(:meth:`jobs.logdir.commit.Committer.delete_segments`, :meth:`~jobs.logdir.commit.Committer.purge_deleted`):
raise ``log-start-offset-checkpoint`` (once for the whole dir, before any segment goes, as Kafka raises the log
start before it removes segments), rename the condemned segments to ``.deleted``, trim the leader-epoch
checkpoint and drop the producer snapshots below the new log start, and unlink the ``.deleted`` files whose
``file.delete.delay.ms`` has passed. In Kafka the log owns these steps (``deleteSegments``); here the log-dir
layer does, and the retention job (:mod:`jobs.engine.retain.driver`) decides what they get.

Every step takes the store's :class:`~jobs.logdir.commit.Committer`, the partition, and the fault hook that a
test uses to stop the run just before the step (``fault(step)``, called with the step names below; the
partition's steps by the hook of that partition, the log-start checkpoint by the hook of the log dir as a
whole). Every step converges: after a crash anywhere, the next run's recovery and retention end where an
uninterrupted run would have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from jobs.logdir.checkpoints import STEP_WRITE_LOG_START, TopicPartition, raise_log_start_checkpoint
from jobs.logdir.commit import Committer, DeleteResult, Fault, PurgeResult
from segment_io.checkpoint import EpochEntry, truncate_epochs_from_start, write_leader_epoch_checkpoint
from segment_io.layout import LEADER_EPOCH_CHECKPOINT, SNAPSHOT_SUFFIX, segment_file_name

#: Fault-hook step names of the steps that follow :func:`jobs.logdir.commit.delete_segments`'s own steps.
STEP_TRIM_LEADER_EPOCHS = "trim-leader-epoch-checkpoint"
STEP_DELETE_SNAPSHOT = "delete-snapshot"  # followed by ":<file name>"
STEP_PURGE = "purge-deleted"


def _step(fault: Fault | None, name: str) -> None:
    if fault is not None:
        fault(name)


def raise_log_start_offsets(committer: Committer, log_dir: str, due: Mapping[TopicPartition, int], *,
                            fault: Fault | None = None
                            ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Retention's first step, once for the whole dir: :func:`jobs.logdir.checkpoints.raise_log_start_checkpoint`
    on the committer's store."""
    return raise_log_start_checkpoint(committer.storage, log_dir, due, fault=fault)


def delete_segments(committer: Committer, partition_uri: str, base_offsets: Sequence[int], *, now_ms: int,
                    fault: Fault | None = None) -> DeleteResult:
    """Rename the segments at ``base_offsets`` to ``.deleted`` (crash-safe: the commit protocol's delete, whose
    steps ``fault`` sees too); their files go at the purge once ``file.delete.delay.ms`` has passed."""
    return committer.delete_segments(partition_uri, list(base_offsets), now_ms=now_ms, fault=fault)


@dataclass(frozen=True)
class FollowedLogStart:
    """What :func:`follow_log_start` changed: whether the leader-epoch checkpoint was trimmed, and the producer
    snapshots it deleted (file names)."""

    leader_epoch_trimmed: bool
    snapshots_deleted: tuple[str, ...]


def follow_log_start(committer: Committer, partition_uri: str, new_start: int, *,
                     leader_epochs: Sequence[EpochEntry], snapshot_offsets: Sequence[int],
                     fault: Fault | None = None) -> FollowedLogStart:
    """Trim the leader-epoch checkpoint (``leader_epochs``, as read) to ``new_start`` (Kafka's
    ``truncateFromStart``) and remove the producer snapshots (at ``snapshot_offsets``) below it. Both checks run
    on every real run, so a run that died between the deletes and here is completed later.

    Snapshots: Kafka's ``deleteSegments`` drops the snapshot at each deleted segment's base (renamed, then
    removed after file.delete.delay.ms), and its loader drops any other one below the log start. Here every
    snapshot below the new start goes at once: they are derived state no record depends on, and the lock
    keeps readers out. The snapshot *at* the new start (the new first segment's) stays, as in Kafka.
    """
    storage = committer.storage
    epochs = list(leader_epochs)
    trimmed = truncate_epochs_from_start(epochs, new_start)
    if trimmed != epochs:
        _step(fault, STEP_TRIM_LEADER_EPOCHS)
        write_leader_epoch_checkpoint(storage, storage.join(partition_uri, LEADER_EPOCH_CHECKPOINT), trimmed)
    deleted = []
    for off in snapshot_offsets:
        if off < new_start:
            name = segment_file_name(off, SNAPSHOT_SUFFIX)
            _step(fault, f"{STEP_DELETE_SNAPSHOT}:{name}")
            storage.delete(storage.join(partition_uri, name))
            deleted.append(name)
    return FollowedLogStart(trimmed != epochs, tuple(deleted))


def purge(committer: Committer, partition_uri: str, *, now_ms: int, file_delete_delay_ms: int,
          fault: Fault | None = None) -> PurgeResult:
    """Unlink the partition's ``.deleted`` segments whose ``file.delete.delay.ms`` has passed (this run's, or
    earlier runs'); ``fault`` is called before, with :data:`STEP_PURGE`."""
    _step(fault, STEP_PURGE)
    return committer.purge_deleted(partition_uri, now_ms=now_ms, file_delete_delay_ms=file_delete_delay_ms)


__all__ = ["STEP_DELETE_SNAPSHOT", "STEP_PURGE", "STEP_TRIM_LEADER_EPOCHS", "STEP_WRITE_LOG_START",
           "FollowedLogStart", "delete_segments", "follow_log_start", "purge", "raise_log_start_offsets"]
