"""``segjobs tiered audit``: read a broker's remote log metadata, its log dir and its remote store, and report
per partition what is where and what is wrong (:mod:`jobs.rules.tiered_audit` says what each finding means).

Reads only; writes nothing but the report. Steps: (1) the log dir is listed, its log start offsets read
(``log-start-offset-checkpoint``) and each partition's topic id (``partition.metadata``; ``--topic-ids`` for
topics it lacks); (2) every ``__remote_log_metadata-N`` partition of the metadata dir (the log dir unless told) is
decoded and replayed in a task of its own (:func:`jobs.rules.remote_log.replay`, put together by
:func:`jobs.rules.remote_log.merge_states`); (3) the remote store is listed through its layout; (4) each
partition the metadata or the store names is audited in tasks of consecutive partitions, with the topic's
retention (``--config``/``--set``) at ``now``: its leader-epoch lineage (``leader-epoch-checkpoint``) and its
local segments, each with its last offset (read from its tail), read in the task
(:mod:`jobs.engine.tiered.audit_tasks`). The tasks run on the driver for a small run on local disk, else as
Spark tasks. A partition of the log dir that no remote segment and no metadata names is
not tiered and is left out. A topic id the metadata names whose topic name the log dir holds under another id
was deleted: its finished segments are orphans.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator, TypeVar

from jobs.engine.frame.options import ProgressSink
from jobs.engine.report.run_report import Progress, human_bytes, listed
from jobs.engine.runtime.tasks import (
    DriverTasks,
    LazySparkTasks,
    SparkTasks,
    TaskFailure,
    TaskRunner,
    driver_run_max_bytes,
    map_in_driver,
)
from jobs.engine.tiered.audit_tasks import AuditContext, AuditItem, MetadataItem, Refused, audit_task, replay_task
from jobs.rules.config import ConfigSet
from jobs.rules.remote_log import DroppedEvent, RemoteLogState, merge_states, replay
from jobs.rules.tiered_audit import PartitionAudit, Retention
from jobs.rules.timeutil import format_instant
from segment_io import layout as logdir_layout
from segment_io.checkpoint import read_offset_checkpoint
from segment_io.errors import UsageError
from segment_io.layout import PartitionListing
from segment_io.remote_layout import RemoteLayout, RemoteListing, RemoteObject, detect_root, layout_named
from segment_io.remote_metadata import METADATA_TOPIC, RemoteLogMetadata, read_metadata_partition
from segment_io.storage import StorageOptions, open_storage
from segment_io.storage.base import FileInfo, Storage
from segment_io.topic_ids import merge_topic_ids, read_partition_metadata

R = TypeVar("R")

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


@dataclass(frozen=True)
class _LogDir:
    """What the driver reads of the log dir before the tasks: its listing's metadata partitions (uri -> their
    ``.log`` bytes), its user partitions with a topic id, by (topic id, partition), and topic id -> name."""

    metadata: dict[str, int]
    partitions: dict[tuple[str, int], PartitionListing]
    names: dict[str, str]
    log_start_offsets: dict[tuple[str, int], int]


def _read_log_dir(storage: Storage, log_dir: str) -> _LogDir:
    """The log dir's listing, its log-start-offset checkpoint and every partition's ``partition.metadata`` (a
    small file each: read on the driver's threads, as the frame's header scans are)."""
    listing = logdir_layout.list_log_dir(storage, log_dir)
    starts = {}
    cp = listing.checkpoints.get(logdir_layout.LOG_START_OFFSET_CHECKPOINT)
    if cp is not None:
        starts = read_offset_checkpoint(storage, cp.uri)
    metadata = {p.uri: sum(s.log.size for s in p.segments)
                for (topic, _), p in sorted(listing.partitions.items()) if topic == METADATA_TOPIC}
    users = [p for (topic, _), p in sorted(listing.partitions.items()) if topic != METADATA_TOPIC]

    def topic_id(p: PartitionListing) -> str | None:
        return read_partition_metadata(storage, p.partition_metadata.uri) if p.partition_metadata else None

    partitions: dict[tuple[str, int], PartitionListing] = {}
    names: dict[str, str] = {}
    for p, tid in zip(users, map_in_driver(topic_id, users, threads=max(8, storage.io_concurrency))):
        if tid is None:
            continue  # no id: the metadata cannot name it (Kafka writes partition.metadata for every partition)
        names[tid] = p.topic
        partitions[(tid, p.partition)] = p
    return _LogDir(metadata, partitions, names, starts)


def _metadata_partitions(storage: Storage, metadata_dir: str, found: dict[str, int]) -> dict[str, int]:
    if found:
        return found
    listing = logdir_layout.list_log_dir(storage, metadata_dir)
    return {p.uri: sum(s.log.size for s in p.segments)
            for (t, _), p in sorted(listing.partitions.items()) if t == METADATA_TOPIC}


def _results(pairs: Iterator[tuple[int, R | TaskFailure | Refused]], count: int, what: list[str],
             progress: Progress, stage: str, noun: str) -> list[R]:
    """The tasks' results in item order; the first refusal raised as the error it was, a task's failure as an
    error naming its item. ``what`` names each item; a progress line every tenth or so of the items
    (``replayed 2/5 metadata partition(s)``)."""
    out: dict[int, R] = {}
    step = max(1, count // 10)
    for index, result in pairs:
        if isinstance(result, Refused):
            raise result.error
        if isinstance(result, TaskFailure):
            raise RuntimeError(f"{what[index]}: {result.kind}: {result.detail}")
        out[index] = result
        if len(out) % step == 0 and len(out) < count:
            progress(f"{stage} {len(out)}/{count} {noun}", event=f"tiered.{stage}.progress", done=len(out),
                     total=count)
    return [out[i] for i in range(count)]


def _replay_all(runner: TaskRunner, storage: Storage, sizes: dict[str, int], progress: Progress) -> RemoteLogState:
    """Every metadata partition replayed in its own task (see :mod:`jobs.engine.tiered.audit_tasks` for why that
    cut is sound), the states put together on the driver."""
    uris = sorted(sizes)
    items = [MetadataItem(storage, uri) for uri in uris]
    states = _results(runner.stream(replay_task, items, sizes=[sizes[u] for u in uris],
                                    description=f"segjobs tiered audit: replay {len(uris)} metadata partition(s)"),
                      len(items), uris, progress, "replayed", "metadata partition(s)")
    merged = merge_states(states)
    if merged is None:
        # a user partition in two metadata partitions (the topic's partition count changed): one replay of them
        # all, one partition after the other, as Kafka's cache would read them
        progress("a user partition's events are in two metadata partitions: replaying them together",
                 event="tiered.replay.together")

        def events() -> Iterator[tuple[int, RemoteLogMetadata]]:
            for uri in uris:
                yield from read_metadata_partition(uri, storage=storage)

        return replay(events())
    return merged


def _objects(listing: RemoteListing) -> dict[tuple[str, int], dict[str, list[RemoteObject]]]:
    out: dict[tuple[str, int], dict[str, list[RemoteObject]]] = defaultdict(lambda: defaultdict(list))
    for obj in listing.objects:
        out[(obj.topic_id, obj.partition)][obj.segment_id].append(obj)
    return out


def _runner(total_bytes: int, lines: Progress) -> TaskRunner:
    """The tasks' runner: a small run (``total_bytes`` of segments in the log dir and the metadata partitions)
    does them on the driver (:class:`DriverTasks`: no JVM, the same tasks), as compact, retain and inspect do
    (:data:`DRIVER_RUN_MAX_BYTES`, $SEGJOBS_DRIVER_RUN_MAX_BYTES; ``0`` always starts Spark); anything else runs
    Spark tasks in the active session or a new one. Unlike the jobs, an object store's log dir may be small too:
    the audit has listed it whole before it decides, so the sizes cost nothing more."""
    limit = driver_run_max_bytes()
    if limit > 0 and total_bytes <= limit:
        return DriverTasks()
    from jobs.engine.runtime import spark_session

    app_name = "segjobs-tiered-audit"

    def build() -> Any:
        return spark_session.start_session(app_name)

    def started(waited: float, took: float) -> None:
        lines(f"Spark ready in {waited:.2f}s", event="spark.ready", spark_startup_s=round(waited, 2))

    return LazySparkTasks(build, job_group=f"{app_name}-{uuid.uuid4().hex[:12]}", on_start=started)


def run_audit(options: TieredAuditOptions, *, runner: TaskRunner | None = None,
              progress: ProgressSink | None = None) -> TieredAudit:
    """Read everything and audit every tiered partition (see the module docstring). The per-partition work runs
    as tasks of ``runner`` (default: on the driver for a small local run, else Spark tasks; see
    :mod:`jobs.engine.tiered.audit_tasks`); which runner runs them never changes the audit. ``progress`` gets the
    run's progress lines (default: none)."""
    lines = Progress("tiered audit", quiet=progress is None, sink=progress)
    layout: RemoteLayout = layout_named(options.layout)
    log_store = open_storage(options.log_dir, options.storage_options)
    log_dir = _read_log_dir(log_store, options.log_dir)
    meta_dir = options.metadata_dir or options.log_dir
    meta_store = log_store if meta_dir == options.log_dir else open_storage(meta_dir, options.storage_options)
    meta_sizes = _metadata_partitions(meta_store, meta_dir, log_dir.metadata if meta_dir == options.log_dir else {})
    if not meta_sizes:
        raise UsageError(f"{meta_dir}: no {METADATA_TOPIC}-<n> partition: give the log dir of a broker that holds "
                         f"the remote log metadata (or --metadata-dir)")
    if runner is None:
        log_bytes = sum(s.log.size for p in log_dir.partitions.values() for s in p.segments)
        runner = _runner(log_bytes + sum(meta_sizes.values()), lines)
    where = ("on the driver" if isinstance(runner, DriverTasks) else "as Spark tasks" if isinstance(runner, SparkTasks)
             else "as tasks")
    lines(f"replaying {len(meta_sizes)} metadata partition(s) ({where})", event="tiered.replay.start",
             partitions=len(meta_sizes))
    state = _replay_all(runner, meta_store, meta_sizes, lines)
    lines(f"replayed {state.events} metadata event(s) of {len(state.partitions)} partition(s)",
             event="tiered.replay.done", events=state.events, partitions=len(state.partitions))
    remote_store = open_storage(options.remote, options.storage_options)
    listing = layout.list(remote_store, detect_root(remote_store, options.remote, layout))
    lines(f"listed {len(listing.objects)} remote object(s)", event="tiered.listed", objects=len(listing.objects))
    objects = _objects(listing)
    names = merge_topic_ids(log_dir.names, options.topic_ids,
                            {tid: p.partition.topic for (tid, _), p in state.partitions.items()},
                            {o.topic_id: o.topic for o in listing.objects})
    keys = set(state.partitions) | set(objects)
    # topic name -> the id the log dir has for it: a metadata topic id of the same name that differs was deleted
    current_ids = {name: tid for tid, name in log_dir.names.items()}
    context = AuditContext(log_store, remote_store, layout.name, options.now_ms, options.grace_ms)
    items = []
    for topic_id, partition in sorted(keys, key=lambda k: (names.get(k[0], k[0]), k[1])):
        topic = names.get(topic_id, topic_id)
        cfg = options.configs.for_topic(topic)
        replaced_by = current_ids.get(topic) if current_ids.get(topic, topic_id) != topic_id else None
        local = log_dir.partitions.get((topic_id, partition))
        start = None if local is None else log_dir.log_start_offsets.get((local.topic, partition))
        items.append(AuditItem(context, topic, topic_id, partition, state.partitions.get((topic_id, partition)),
                               local, start,
                               dict(objects.get((topic_id, partition), {})),
                               Retention(cfg.retention_ms, cfg.retention_bytes), replaced_by))
    lines(f"auditing {len(items)} partition(s) ({where})", event="tiered.audit.start", partitions=len(items))
    stream = runner.stream(audit_task, items, description=f"segjobs tiered audit: audit {len(items)} partition(s)")
    audits = _results(stream, len(items), [f"{i.topic}-{i.partition}" for i in items], lines, "audited",
                      "partition(s)")
    lines(f"audited {len(audits)} partition(s)", event="tiered.audit.done", partitions=len(audits))
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
