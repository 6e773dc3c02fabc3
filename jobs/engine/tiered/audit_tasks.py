"""The tiered audit's two stages of tasks, run through the job's :class:`~jobs.engine.runtime.tasks.TaskRunner`
(Spark tasks, or :class:`~jobs.engine.runtime.tasks.DriverTasks` for a small run on the driver).

1. **Replay**, one metadata partition per item: its events decoded and replayed in the task
   (:func:`replay_task`); only the replayed state (per user partition, its segments) comes back, never the
   events. Kafka writes every event of a user partition, its partition delete markers included, to the one
   ``__remote_log_metadata`` partition its topic id and partition hash to, so no user partition's events cross
   two items (:func:`jobs.rules.remote_log.merge_states` puts the states together and says when they would).
2. **Audit**, one user partition per item, items packed into tasks of consecutive partitions
   (:meth:`TaskRunner.stream`): its local segments' tails and leader-epoch checkpoint read, its finished
   segments' objects checked by the layout (Aiven's manifests), and :func:`jobs.rules.tiered_audit.audit_partition`
   (:func:`audit_task`).

A task that meets a file segjobs refuses (a corrupt record or checkpoint, an unsupported manifest) returns the
error as its result (:class:`Refused`): the driver raises it as it is, so the command's exit code and message are
those of a run in one process.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from jobs.logdir.tiered import segment_next_offset
from jobs.rules.remote_log import PartitionReplay, RemoteLogState, RemoteSegment, replay
from jobs.rules.tiered_audit import LocalLog, ObjectInfo, PartitionAudit, Retention, audit_partition
from segment_io.checkpoint import read_leader_epoch_checkpoint
from segment_io.errors import SegjobsError
from segment_io.layout import PartitionListing
from segment_io.remote_layout import RemoteObject, layout_named
from segment_io.remote_metadata import read_metadata_partition
from segment_io.storage.base import Storage, map_ahead


@dataclass(frozen=True)
class Refused:
    """A task's result when it met what segjobs refuses to read: the error, raised again on the driver."""

    error: SegjobsError


@dataclass(frozen=True)
class MetadataItem:
    """One ``__remote_log_metadata-N`` partition to replay."""

    storage: Storage
    uri: str


def replay_task(item: MetadataItem) -> RemoteLogState | Refused:
    """One metadata partition's events, decoded and replayed in the task."""
    try:
        return replay(read_metadata_partition(item.uri, storage=item.storage))
    except SegjobsError as exc:
        return Refused(exc)


def local_log(storage: Storage, listing: PartitionListing, log_start_offset: int | None) -> LocalLog:
    """What a user partition's directory says (:class:`LocalLog`): its segments, each one's last offset read from
    its tail, and its leader-epoch lineage."""
    segments = listing.segments
    ends = tuple(segment_next_offset(storage, s) for s in segments)
    epochs = (read_leader_epoch_checkpoint(storage, listing.leader_epoch_checkpoint.uri)
              if listing.leader_epoch_checkpoint else [])
    return LocalLog(log_start_offset, segments[0].base_offset if segments else None, ends[-1] if ends else None,
                    tuple((s.base_offset, s.log.size) for s in segments),
                    tuple((e.epoch, e.start_offset) for e in epochs), ends)


@dataclass(frozen=True)
class AuditContext:
    """What every partition's audit shares: the stores, the layout and the instant."""

    log_storage: Storage
    remote_storage: Storage
    layout: str
    now_ms: int
    grace_ms: int


@dataclass(frozen=True)
class AuditItem:
    """One user partition to audit (see :func:`jobs.rules.tiered_audit.audit_partition` for the fields)."""

    context: AuditContext
    topic: str
    topic_id: str
    partition: int
    replay: PartitionReplay | None
    #: its directory in the log dir and its log-start-offset checkpoint entry (None: not in the log dir)
    local: PartitionListing | None
    log_start_offset: int | None
    #: its remote objects, by segment id
    objects: Mapping[str, list[RemoteObject]] = field(default_factory=dict)
    retention: Retention = field(default_factory=Retention)
    replaced_by: str | None = None


def audit_task(item: AuditItem) -> PartitionAudit | Refused:
    """One user partition's audit, its local tail and its objects read in the task."""
    try:
        return _audit(item)
    except SegjobsError as exc:
        return Refused(exc)


def _audit(item: AuditItem) -> PartitionAudit:
    ctx = item.context
    layout = layout_named(ctx.layout)
    local = (None if item.local is None
             else local_log(ctx.log_storage, item.local, item.log_start_offset))
    objects = {seg_id: [ObjectInfo(o.uri, o.size, o.suffix) for o in objs] for seg_id, objs in item.objects.items()}
    return audit_partition(item.replay, topic=item.topic, partition=item.partition, topic_id=item.topic_id,
                           local=local, objects=objects,
                           required={flag: layout.required_suffixes(flag) for flag in (False, True)},
                           size_suffix=layout.segment_suffix(), retention=item.retention, now_ms=ctx.now_ms,
                           grace_ms=ctx.grace_ms, replaced_by=item.replaced_by,
                           problems=_layout_problems(item) or None)


def _layout_problems(item: AuditItem) -> dict[str, list[tuple[str, str]]]:
    """What the layout finds wrong on reading each finished segment's objects (Aiven's: its manifest against the
    metadata and the objects), per segment id; the reads run :attr:`Storage.io_concurrency` at a time."""
    if item.replay is None:
        return {}
    layout, storage = layout_named(item.context.layout), item.context.remote_storage
    work = [seg for seg in item.replay.finished() if seg.segment_id in item.objects]

    def check(seg: RemoteSegment) -> list[tuple[str, str]]:
        return layout.check_segment(storage, {o.suffix: o for o in item.objects[seg.segment_id]}, seg.size_bytes)

    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for seg, problems in zip(work, map_ahead(check, work, storage.io_concurrency)):
        if problems:
            out[seg.segment_id] = problems
    return dict(out)


__all__ = ["AuditContext", "AuditItem", "MetadataItem", "Refused", "audit_task", "local_log", "replay_task"]
