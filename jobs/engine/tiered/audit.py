"""``segjobs tiered audit``: read a broker's remote log metadata, its log dir and its remote store, and report
per partition what is where and what is wrong (:mod:`jobs.rules.tiered_audit` says what each finding means).

Reads only; writes nothing but the report. Steps: (1) every ``__remote_log_metadata-N`` partition of the
metadata dir (the log dir unless told) is decoded and replayed (:func:`jobs.rules.remote_log.replay`); (2) the log
dir gives, per user partition, its topic id (``partition.metadata``; ``--topic-ids`` for topics it lacks), its log
start offset (``log-start-offset-checkpoint``), its leader-epoch lineage (``leader-epoch-checkpoint``) and its local
segments, each with its last offset (read from its tail); (3) the remote store is listed through its
layout; (4) each partition the metadata, the log dir or the store names is audited with the topic's retention
(``--config``/``--set``) at ``now``. A partition of the log dir that no remote segment and no metadata names is
not tiered and is left out. A topic id the metadata names whose topic name the log dir holds under another id
was deleted: its finished segments are orphans.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from jobs.engine.report.run_report import human_bytes, listed
from jobs.logdir.tiered import segment_next_offset
from jobs.rules.config import ConfigSet
from jobs.rules.remote_log import DroppedEvent, RemoteLogState, RemoteSegment, replay
from jobs.rules.tiered_audit import LocalLog, ObjectInfo, PartitionAudit, Retention, audit_partition
from jobs.rules.timeutil import format_instant
from segment_io import layout as logdir_layout
from segment_io.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from segment_io.errors import UsageError
from segment_io.remote_layout import RemoteLayout, RemoteListing, detect_root, layout_named
from segment_io.remote_metadata import METADATA_TOPIC, RemoteLogMetadata, read_metadata_partition
from segment_io.storage import StorageOptions, open_storage
from segment_io.storage.base import FileInfo, Storage, map_ahead
from segment_io.topic_ids import merge_topic_ids, read_partition_metadata

#: how many names a text line lists before "and N more"
_SHOWN = 5


@dataclass(frozen=True)
class TieredAuditOptions:
    """What ``segjobs tiered audit`` reads. ``metadata_dir`` defaults to ``log_dir``; ``topic_ids`` maps topic ids
    to names for topics the log dir has no partition of; ``grace_ms`` is how long past its retention a remote
    segment may still be waiting for the expiration task before it counts as overdue."""

    log_dir: str
    remote: str
    layout: str = "local-tiered-storage"
    metadata_dir: str | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)
    configs: ConfigSet = field(default_factory=ConfigSet)
    now_ms: int = 0
    grace_ms: int = 0
    #: how ``s3://`` URIs are reached (None: from the environment)
    storage_options: StorageOptions | None = None


@dataclass
class TieredAudit:
    """The audit of every tiered partition, and what the run could not place."""

    log_dir: str
    remote: str
    layout: str
    now_ms: int
    metadata_events: int
    partitions: list[PartitionAudit]
    dropped: list[DroppedEvent]
    unrecognised: list[FileInfo]
    #: what the audit was made from: the replayed metadata and the remote listing (what a clean acts on)
    state: RemoteLogState | None = field(default=None, repr=False)
    listing: RemoteListing | None = field(default=None, repr=False)

    @property
    def data_loss(self) -> bool:
        return any(p.data_loss for p in self.partitions)

    @property
    def exit_code(self) -> int:
        """1 when records Kafka should serve cannot be read (a gap or a missing object), else 0."""
        return 1 if self.data_loss else 0


def _local_logs(storage: Storage, log_dir: str) -> tuple[dict[str, tuple[str, int]], dict[tuple[str, int], LocalLog],
                                                         dict[str, str]]:
    """From the log dir: its metadata partitions (uri -> topic, partition), each user partition's local log by
    (topic id, partition), and topic id -> name from ``partition.metadata``."""
    listing = logdir_layout.list_log_dir(storage, log_dir)
    starts = {}
    cp = listing.checkpoints.get(logdir_layout.LOG_START_OFFSET_CHECKPOINT)
    if cp is not None:
        starts = read_offset_checkpoint(storage, cp.uri)
    metadata: dict[str, tuple[str, int]] = {}
    local: dict[tuple[str, int], LocalLog] = {}
    names: dict[str, str] = {}
    for (topic, partition), p in sorted(listing.partitions.items()):
        if topic == METADATA_TOPIC:
            metadata[p.uri] = (topic, partition)
            continue
        topic_id = read_partition_metadata(storage, p.partition_metadata.uri) if p.partition_metadata else None
        if topic_id is None:
            continue  # no id: the metadata cannot name it (Kafka writes partition.metadata for every partition)
        names[topic_id] = topic
        ends = tuple(segment_next_offset(storage, s) for s in p.segments)
        epochs = (read_leader_epoch_checkpoint(storage, p.leader_epoch_checkpoint.uri)
                  if p.leader_epoch_checkpoint else [])
        local[(topic_id, partition)] = LocalLog(starts.get((topic, partition)),
                                                p.segments[0].base_offset if p.segments else None,
                                                ends[-1] if ends else None,
                                                tuple((s.base_offset, s.log.size) for s in p.segments),
                                                tuple((e.epoch, e.start_offset) for e in epochs), ends)
    return metadata, local, names


def _metadata_partitions(storage: Storage, metadata_dir: str, found: dict[str, tuple[str, int]]) -> list[str]:
    if found:
        return sorted(found)
    listing = logdir_layout.list_log_dir(storage, metadata_dir)
    return sorted(p.uri for (t, _), p in listing.partitions.items() if t == METADATA_TOPIC)


def _replay_all(storage: Storage, uris: Sequence[str]) -> RemoteLogState:
    # a user partition's events are all in one metadata partition (Kafka picks it by the partition's hash), so
    # the partitions replay one after the other
    def events() -> Iterator[tuple[int, RemoteLogMetadata]]:
        for uri in uris:
            yield from read_metadata_partition(uri, storage=storage)

    return replay(events())


def _objects(listing: RemoteListing) -> dict[tuple[str, int], dict[str, list[ObjectInfo]]]:
    out: dict[tuple[str, int], dict[str, list[ObjectInfo]]] = defaultdict(lambda: defaultdict(list))
    for obj in listing.objects:
        out[(obj.topic_id, obj.partition)][obj.segment_id].append(ObjectInfo(obj.uri, obj.size, obj.suffix))
    return out


def _layout_problems(layout: RemoteLayout, storage: Storage, state: RemoteLogState,
                     listing: RemoteListing) -> dict[tuple[str, int], dict[str, list[tuple[str, str]]]]:
    """What the layout finds wrong on reading each finished segment's objects (Aiven's: its manifest against the
    metadata and the objects), per partition and segment id; the reads run :attr:`Storage.io_concurrency` at a
    time."""
    by_segment = listing.by_segment()
    work = [(key, seg) for key, part in state.partitions.items() for seg in part.finished()
            if (key[0], key[1], seg.segment_id) in by_segment]

    def check(item: tuple[tuple[str, int], RemoteSegment]) -> list[tuple[str, str]]:
        (topic_id, partition), seg = item
        objects = {o.suffix: o for o in by_segment[(topic_id, partition, seg.segment_id)]}
        return layout.check_segment(storage, objects, seg.size_bytes)

    out: dict[tuple[str, int], dict[str, list[tuple[str, str]]]] = defaultdict(dict)
    for (key, seg), problems in zip(work, map_ahead(check, work, storage.io_concurrency)):
        if problems:
            out[key][seg.segment_id] = problems
    return out


def run_audit(options: TieredAuditOptions) -> TieredAudit:
    """Read everything and audit every tiered partition (see the module docstring)."""
    layout: RemoteLayout = layout_named(options.layout)
    log_store = open_storage(options.log_dir, options.storage_options)
    found, local, log_dir_names = _local_logs(log_store, options.log_dir)
    meta_dir = options.metadata_dir or options.log_dir
    meta_store = log_store if meta_dir == options.log_dir else open_storage(meta_dir, options.storage_options)
    uris = _metadata_partitions(meta_store, meta_dir, found if meta_dir == options.log_dir else {})
    if not uris:
        raise UsageError(f"{meta_dir}: no {METADATA_TOPIC}-<n> partition: give the log dir of a broker that holds "
                         f"the remote log metadata (or --metadata-dir)")
    state = _replay_all(meta_store, uris)
    remote_store = open_storage(options.remote, options.storage_options)
    listing = layout.list(remote_store, detect_root(remote_store, options.remote, layout))
    objects = _objects(listing)
    problems = _layout_problems(layout, remote_store, state, listing)
    names = merge_topic_ids(log_dir_names, options.topic_ids,
                            {tid: p.partition.topic for (tid, _), p in state.partitions.items()},
                            {o.topic_id: o.topic for o in listing.objects})
    keys = set(state.partitions) | set(objects)
    # topic name -> the id the log dir has for it: a metadata topic id of the same name that differs was deleted
    current_ids = {name: tid for tid, name in log_dir_names.items()}
    required = {flag: layout.required_suffixes(flag) for flag in (False, True)}
    audits = []
    for topic_id, partition in sorted(keys, key=lambda k: (names.get(k[0], k[0]), k[1])):
        topic = names.get(topic_id, topic_id)
        cfg = options.configs.for_topic(topic)
        replaced_by = current_ids.get(topic) if current_ids.get(topic, topic_id) != topic_id else None
        audits.append(audit_partition(state.partitions.get((topic_id, partition)), topic=topic, partition=partition,
                                      topic_id=topic_id, local=local.get((topic_id, partition)),
                                      objects=objects.get((topic_id, partition), {}), required=required,
                                      size_suffix=layout.segment_suffix(),
                                      retention=Retention(cfg.retention_ms, cfg.retention_bytes),
                                      now_ms=options.now_ms, grace_ms=options.grace_ms, replaced_by=replaced_by,
                                      problems=problems.get((topic_id, partition))))
    return TieredAudit(options.log_dir, options.remote, layout.name, options.now_ms, state.events, audits,
                       state.dropped(), listing.unrecognised, state, listing)


# --------------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------------


def audit_json(audit: TieredAudit) -> dict[str, Any]:
    """The report as JSON-ready data (``--format json``)."""
    def partition(p: PartitionAudit) -> dict[str, Any]:
        return {
            "topic": p.topic, "partition": p.partition, "topic_id": p.topic_id, "in_log_dir": p.in_log_dir,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end,
            "local": None if p.local is None else {"start_offset": p.local.local_start, "segments": len(
                p.local.segments), "bytes": p.local.local_bytes},
            "remote": {"finished": vars(p.finished), "copy_started": vars(p.dangling),
                       "delete_started": vars(p.deleting), "deleted": vars(p.deleted)},
            "dropped_events": p.dropped_events,
            "gaps": [{"first_offset": g.first, "last_offset": g.last} for g in p.gaps],
            "missing_objects": [vars(m) for m in p.missing],
            "orphans": [{"segment_id": o.segment_id, "reason": o.reason, "start_offset": o.start_offset,
                         "end_offset": o.end_offset, "bytes": o.bytes, "objects": [x.uri for x in o.objects]}
                        for o in p.orphans],
            "overdue": [vars(o) for o in p.overdue],
        }

    return {
        "log_dir": audit.log_dir, "remote": audit.remote, "layout": audit.layout,
        "now": format_instant(audit.now_ms), "metadata_events": audit.metadata_events,
        "data_loss": audit.data_loss, "exit_code": audit.exit_code,
        "partitions": [partition(p) for p in audit.partitions],
        "dropped_events": [vars(d) | {"partition": str(d.partition)} for d in audit.dropped],
        "unrecognised_files": [f.uri for f in audit.unrecognised],
    }


def _partition_lines(p: PartitionAudit) -> list[str]:
    where = "" if p.in_log_dir else " (not in this log dir)"
    span = ("" if p.log_start_offset is None or p.log_end is None
            else f", offsets {p.log_start_offset}-{p.log_end - 1}" if p.log_end > p.log_start_offset
            else f", empty at {p.log_end}")
    local = "" if p.local is None else (f"; local from {p.local.local_start}: {len(p.local.segments)} segment(s), "
                                        f"{human_bytes(p.local.local_bytes)}")
    lines = [f"{p.topic}-{p.partition} [{p.topic_id}]{where}{span}: remote {p.finished.segments} finished "
             f"({human_bytes(p.finished.bytes)}), {p.dangling.segments} copy started, {p.deleting.segments} "
             f"delete started, {p.deleted.segments} deleted{local}"]
    lines += [f"  GAP (data loss): offsets {g.first}-{g.last} are in no finished remote segment and no local "
              f"segment" for g in p.gaps]
    lines += [f"  MISSING: segment {m.segment_id} (offsets {m.start_offset}-{m.end_offset}): its {m.suffix} object "
              f"is {m.problem}" for m in p.missing]
    lines += [f"  orphan: segment {o.segment_id}"
              + (f" (offsets {o.start_offset}-{o.end_offset})" if o.start_offset is not None else "")
              + f": {o.reason}; {len(o.objects)} object(s), {human_bytes(o.bytes)}" for o in p.orphans]
    lines += [f"  overdue: segment {o.segment_id} (offsets {o.start_offset}-{o.end_offset}, "
              f"{human_bytes(o.size_bytes)}): {o.reason}" for o in p.overdue]
    if p.dropped_events:
        lines.append(f"  {p.dropped_events} metadata event(s) Kafka drops (see --format json)")
    return lines


def audit_text(audit: TieredAudit) -> str:
    """The report as text (``--format text``)."""
    lines = [f"tiered audit of {audit.log_dir} with {audit.remote} ({audit.layout}) at "
             f"{format_instant(audit.now_ms)}: {audit.metadata_events} metadata event(s), "
             f"{len(audit.partitions)} partition(s)"]
    for p in audit.partitions:
        lines += _partition_lines(p)
    gaps = sum(len(p.gaps) for p in audit.partitions)
    missing = sum(len(p.missing) for p in audit.partitions)
    orphans = [o for p in audit.partitions for o in p.orphans]
    overdue = [o for p in audit.partitions for o in p.overdue]
    if audit.unrecognised:
        lines.append(f"{len(audit.unrecognised)} file(s) under the remote root are no {audit.layout} object, left "
                     f"alone: {listed([f.uri for f in audit.unrecognised], _SHOWN)}")
    lines.append(f"summary: {gaps} gap(s), {missing} missing object(s), {len(orphans)} orphan segment(s) "
                 f"({human_bytes(sum(o.bytes for o in orphans))}), {len(overdue)} overdue segment(s) "
                 f"({human_bytes(sum(o.size_bytes for o in overdue))})"
                 + ("; DATA LOSS: exit code 1" if audit.data_loss else ""))
    return "\n".join(lines)
