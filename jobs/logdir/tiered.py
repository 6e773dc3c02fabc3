"""Reading a log dir's tiered partitions as one log each: what :func:`jobs.rules.tiered_read.plan_tiered_log` plans
from, read from the log dir and the remote store.

:func:`read_tiered_plans` replays every ``__remote_log_metadata-N`` partition of the log dir (Kafka's metadata
cache, :func:`jobs.rules.remote_log.replay`), lists the remote store through its layout, and plans each partition
of the log dir from its ``partition.metadata`` (the topic id the metadata names it by), the log dir's
``log-start-offset-checkpoint``, its ``leader-epoch-checkpoint``, its local segments and the local log's end (read
from the last segment's tail). A partition no finished remote segment belongs to is read as its local segments.
Partitions the metadata names that the log dir does not hold (deleted topics, partitions of other brokers) are
not read: their local tail is not here.

Both layouts of :mod:`segment_io.remote_layout` are read (:data:`READABLE_LAYOUTS`): LocalTieredStorage's segment
objects are Kafka's segment files as they are; an Aiven segment (chunked, maybe compressed, its indexes in one
object) is read through a view of :mod:`segment_io.remote_view`, as the segment and index files it was. Readers of
whole segment files (``inspect``, ``table``) read a remote segment the local log starts inside through a view too:
its batches below the local log, the last one cut where it holds offsets on both sides.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Mapping

from jobs.rules.remote_log import RemoteLogState, replay
from jobs.rules.tiered_read import SegmentSource, TieredLogPlan, local_only, plan_tiered_log
from segment_io.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from segment_io.errors import SegjobsError, StorageError, UsageError
from segment_io.format import scan_batches
from segment_io.index import read_offset_index
from segment_io.layout import LOG_START_OFFSET_CHECKPOINT, LogDirListing, PartitionListing, SegmentFiles
from segment_io.remote_layout import (
    AivenLayout,
    LocalTieredStorageLayout,
    RemoteLayout,
    RemoteListing,
    RemoteObject,
    detect_root,
    layout_named,
)
from segment_io.remote_metadata import METADATA_TOPIC, RemoteLogMetadata, read_metadata_partition
from segment_io.remote_view import AIVEN, RemoteSegmentStorage, is_view, parse_view, view_uri
from segment_io.storage import StorageOptions, scheme_of
from segment_io.storage.base import FileInfo, Storage
from segment_io.topic_ids import read_partition_metadata

#: the layouts whose segments the readers read as one log with the local tail
READABLE_LAYOUTS = (LocalTieredStorageLayout.name, AivenLayout.name)
#: the default of ``--remote-layout`` and of the data source's ``remoteLayout``, as ``tiered audit``'s ``--layout``
DEFAULT_REMOTE_LAYOUT = LocalTieredStorageLayout.name


@dataclass(frozen=True)
class RemoteOptions:
    """Where a tiered topic's remote segments are: the remote store's root and its layout."""

    root: str
    layout: str = DEFAULT_REMOTE_LAYOUT

    def __post_init__(self) -> None:
        readable_layout(self.layout)  # a layout that cannot be read is refused before anything is read


class UnreadableRemoteSegment(StorageError):
    """A finished remote segment a tiered partition's read needs cannot be read: its segment object is absent or
    of another size than the metadata records. The message names the segment, its offsets and the object."""


def unreadable_error(plan: TieredLogPlan) -> UnreadableRemoteSegment | None:
    """The error of a plan that cannot be read (naming every unreadable segment), or None."""
    message = plan.error()
    if message is None:
        return None
    return UnreadableRemoteSegment(message)  # the message names each object


def readable_layout(name: str) -> RemoteLayout:
    """The layout called ``name`` when segjobs can read its segments; else a usage error naming the readable
    ones (an unknown name is refused as :func:`segment_io.remote_layout.layout_named` refuses it)."""
    layout = layout_named(name)
    if layout.name not in READABLE_LAYOUTS:
        raise UsageError(f"remote layout {name!r} cannot be read as one log; readable: "
                         f"{', '.join(READABLE_LAYOUTS)}")
    return layout


def segment_next_offset(storage: Storage, segment: SegmentFiles) -> int:
    """One past a local segment's last offset (its base offset when it is empty), from its tail: the batches
    after its offset index's last entry, or the whole segment when the index gives no usable position."""
    log = segment.log
    if log.size == 0:
        return segment.base_offset
    start = 0
    if segment.index is not None and segment.index.size:
        entries = read_offset_index(storage.read(segment.index.uri), path=segment.index.uri)
        start = int(entries.position[-1]) if len(entries) and 0 <= entries.position[-1] < log.size else 0
    headers = scan_batches(storage.read_range(log.uri, start, log.size - start), path=log.uri)
    if len(headers) == 0 and start:
        headers = scan_batches(storage.read(log.uri), path=log.uri)
    return int(headers.last_offset.max()) + 1 if len(headers) else segment.base_offset


def _replay(storage: Storage, listing: LogDirListing) -> RemoteLogState:
    uris = sorted(p.uri for (topic, _), p in listing.partitions.items() if topic == METADATA_TOPIC)
    if not uris:
        raise UsageError(f"{listing.root}: no {METADATA_TOPIC}-<n> partition: a tiered topic is read with the log "
                         f"dir of a broker that holds the remote log metadata")

    def events() -> Iterator[tuple[int, RemoteLogMetadata]]:
        for uri in uris:  # a user partition's events are all in one metadata partition
            yield from read_metadata_partition(uri, storage=storage)

    return replay(events())


def _remote_objects(listing: RemoteListing) -> dict[tuple[str, int], dict[str, dict[str, RemoteObject]]]:
    """(topic id, partition) -> segment id -> the segment's objects by suffix."""
    out: dict[tuple[str, int], dict[str, dict[str, RemoteObject]]] = defaultdict(lambda: defaultdict(dict))
    for obj in listing.objects:
        out[(obj.topic_id, obj.partition)][obj.segment_id][obj.suffix] = obj
    return out


class RemoteSegmentFiles(Mapping[str, SegmentFiles]):
    """One partition's remote segments as the segment files the readers read, by segment id (only the segments
    that can be read so: every object the layout needs is there). An Aiven segment's files are views of
    :mod:`segment_io.remote_view`, made when asked for: its manifest is read then (an unreadable one raises,
    naming it)."""

    def __init__(self, objects: Mapping[str, Mapping[str, RemoteObject]], layout: RemoteLayout,
                 views: RemoteSegmentStorage) -> None:
        self._objects, self._layout, self._views = objects, layout, views

    def __getitem__(self, segment_id: str) -> SegmentFiles:
        objects = self._objects[segment_id]
        log = objects.get(".log")
        if log is None:
            raise KeyError(segment_id)
        if self._layout.name != AIVEN:
            def info(suffix: str) -> FileInfo | None:
                obj = objects.get(suffix)
                return FileInfo(obj.uri, obj.size, 0) if obj is not None else None

            return SegmentFiles(log.start_offset, FileInfo(log.uri, log.size, 0), info(".index"),
                                info(".timeindex"), info(".txnindex"))
        if ".rsm-manifest" not in objects or ".indexes" not in objects:
            raise KeyError(segment_id)
        parts = {part: view_uri(AIVEN, part, log.uri) for part in ("log", "index", "timeindex", "txnindex")}
        sizes = {part: self._views.stat(uri).size for part, uri in parts.items() if part != "txnindex"}
        txn = self._views.manifest(parse_view(parts["log"])).indexes.get("transaction")
        return SegmentFiles(log.start_offset, FileInfo(parts["log"], sizes["log"], 0),
                            FileInfo(parts["index"], sizes["index"], 0),
                            FileInfo(parts["timeindex"], sizes["timeindex"], 0),
                            FileInfo(parts["txnindex"], txn.size, 0) if txn is not None and txn.size else None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, segment_id: str, default: SegmentFiles | None = None) -> SegmentFiles | None:  # type: ignore[override]
        try:
            return self[segment_id]
        except KeyError:
            return default


def remote_segment_storage(storage: Storage, root: str, storage_options: StorageOptions | None) -> RemoteSegmentStorage:
    """The store the readers read a tiered topic through: the log dir's ``storage`` (of ``root``'s kind), remote
    segment views, and any other store opened with ``storage_options``."""
    return RemoteSegmentStorage({scheme_of(root): storage}, storage_options)


def read_tiered_plans(storage: Storage, listing: LogDirListing, remote: RemoteOptions,
                      storage_options: StorageOptions | None = None,
                      partitions: Iterable[tuple[str, int]] | None = None,
                      errors: dict[tuple[str, int], SegjobsError] | None = None,
                      views: RemoteSegmentStorage | None = None) -> dict[tuple[str, int], TieredLogPlan]:
    """The read plan of every partition of ``listing`` (of ``partitions`` when given; the metadata partitions
    themselves are no user data and left out), ``storage`` serving the log dir. What one partition's own files
    make impossible (a damaged checkpoint, a local segment that does not end on a batch) is raised, or with
    ``errors`` put there (that partition has no plan) while the others are planned; so is an unreadable Aiven
    manifest. ``views`` serves the plans' view URIs (one is made when not given)."""
    layout = readable_layout(remote.layout)
    state = _replay(storage, listing)
    views = views if views is not None else remote_segment_storage(storage, listing.root, storage_options)
    remote_store = views.store(remote.root)
    root = detect_root(remote_store, remote.root, layout)
    objects = _remote_objects(layout.list(remote_store, root))
    cp = listing.checkpoints.get(LOG_START_OFFSET_CHECKPOINT)
    starts = read_offset_checkpoint(storage, cp.uri) if cp is not None else {}
    wanted = set(partitions) if partitions is not None else None
    plans = {}
    for key, part in sorted(listing.partitions.items()):
        if key[0] == METADATA_TOPIC or (wanted is not None and key not in wanted):
            continue
        try:
            plans[key] = _plan(storage, part, state, objects, views, layout, root, starts.get(key))
        except SegjobsError as exc:
            if errors is None:
                raise
            errors[key] = exc
    return plans


def _plan(storage: Storage, part: PartitionListing, state: RemoteLogState,
          objects: dict[tuple[str, int], dict[str, dict[str, RemoteObject]]], views: RemoteSegmentStorage,
          layout: RemoteLayout, root: str, log_start: int | None) -> TieredLogPlan:
    topic_id = read_partition_metadata(storage, part.partition_metadata.uri) if part.partition_metadata else None
    replayed = state.partitions.get((topic_id, part.partition)) if topic_id else None
    finished = replayed.finished() if replayed else []
    if not finished or topic_id is None:
        return local_only(part.segments)
    epochs = (read_leader_epoch_checkpoint(storage, part.leader_epoch_checkpoint.uri)
              if part.leader_epoch_checkpoint else [])
    log_end = segment_next_offset(storage, part.segments[-1]) if part.segments else None
    files = RemoteSegmentFiles(objects.get((topic_id, part.partition), {}), layout, views)
    return plan_tiered_log(finished, part.segments, files, layout=layout,
                           root=root, log_start=log_start, log_end=log_end,
                           epochs=[(e.epoch, e.start_offset) for e in epochs])


@dataclass(frozen=True)
class TieredListing:
    """A log dir's listing with each tiered partition's segments replaced by the segments of its one log (its
    finished remote segments below the local log, then its local segments), the partitions that cannot be read
    so, and the store that reads them all."""

    listing: LogDirListing
    #: the log dir's store, serving the remote segments too (:mod:`segment_io.remote_view`)
    storage: Storage
    #: partition -> why it cannot be read as one log (its listing is left as it was)
    errors: dict[tuple[str, int], SegjobsError] = field(default_factory=dict)
    #: the partitions whose listing now holds remote segments
    tiered: tuple[tuple[str, int], ...] = ()


def whole_segment_files(source: SegmentSource, layout: str, views: RemoteSegmentStorage) -> SegmentFiles:
    """The files of a plan's source as a reader of whole segments reads them: a remote segment the local log
    starts inside is a view of its offsets below the local log (no index: the reader scans its batches)."""
    if not source.trimmed:
        return source.files
    log_uri = parse_view(source.uri).log_uri if is_view(source.uri) else source.uri
    uri = view_uri(layout, "log", log_uri, source.keep_last)
    return SegmentFiles(source.base_offset, FileInfo(uri, views.stat(uri).size, 0))


def tiered_listing(storage: Storage, listing: LogDirListing, remote: RemoteOptions,
                   storage_options: StorageOptions | None = None,
                   partitions: Iterable[tuple[str, int]] | None = None) -> TieredListing:
    """``listing`` as jobs that read whole segment files read a tiered topic: each partition's segments are its
    plan's sources (:func:`read_tiered_plans`), a remote segment the local log starts inside cut below it
    (:func:`whole_segment_files`); read them through the returned listing's ``storage``. A plan that cannot be
    read is an error of its partition. The remote store must be of the log dir's kind (both local, or both
    ``s3://``), read with the same settings."""
    if scheme_of(remote.root) != scheme_of(listing.root):
        raise UsageError(f"--remote {remote.root}: the remote store must be where the log dir is (both local paths, "
                         f"or both s3://) for this command; the data source reads any")
    errors: dict[tuple[str, int], SegjobsError] = {}
    views = remote_segment_storage(storage, listing.root, storage_options)
    plans = read_tiered_plans(storage, listing, remote, storage_options, partitions, errors, views)
    parts = dict(listing.partitions)
    tiered = []
    for key, plan in plans.items():
        error: SegjobsError | None = unreadable_error(plan)
        if error is None and plan.remote_sources:
            try:
                segments = tuple(whole_segment_files(s, remote.layout, views) for s in plan.sources)
            except SegjobsError as exc:
                error = exc
            else:
                parts[key] = replace(parts[key], segments=segments)
                tiered.append(key)
        if error is not None:
            errors[key] = error
    return TieredListing(replace(listing, partitions=parts), views, errors, tuple(tiered))


__all__ = ["DEFAULT_REMOTE_LAYOUT", "READABLE_LAYOUTS", "RemoteOptions", "RemoteSegmentFiles",
           "TieredListing", "UnreadableRemoteSegment", "read_tiered_plans", "readable_layout",
           "remote_segment_storage", "segment_next_offset", "tiered_listing", "unreadable_error",
           "whole_segment_files"]
