"""Crash-safe replacement and deletion of segments, on local disk and on S3: the committers.

Every operation here is a sequence of single-file steps ordered so that a crash after any step leaves a
partition that recovery (:mod:`jobs.logdir.recover`) turns into exactly the old set of live segments or exactly the
new one: never a gap in offsets, never an overlap, never the loss of the only copy of a record. Before each
step the optional ``fault(step)`` callback is called with a stable step name; tests raise from it to
simulate a crash at that point.

The records these protocols write (intents, the deletion ledger) and where they live are in
:mod:`jobs.logdir.commit.records`.

Replace on local disk (Kafka's own protocol, ``LocalLog.replaceSegments``; a broker's ``LogLoader`` can
finish or undo it at every instant)
---------------------------------------------------------------------------------------------------
The job writes new segments as ``<base>.<suffix>.cleaned`` in the partition dir (:func:`staged_uri`),
durable (fsynced by ``Storage.open_write``, or by the barrier a cleaning task ends its bin with).

1. ``write-intent``: ``replace.json`` in the work dir (``put_if_absent``).
2. ``cleaned-to-swap:<file>``: rename each new segment's files ``.cleaned`` -> ``.swap``, segments in
   *descending* base order, ``.log`` first within a segment, fsync of the dir after each segment. While
   any ``.cleaned`` file remains, every ``.swap`` file lies at or above the lowest ``.cleaned`` offset, which
   is exactly the set a loader discards: the replace is aborted and the old segments, untouched, are live.
   The per-segment fsync keeps that true across a power cut (renames in one dir may otherwise reach disk
   out of order).
3. ``old-to-deleted:<file>``: rename each old segment's ``.log .index .timeindex .txnindex`` to
   ``.deleted`` (``.snapshot`` files are producer state, not segment data: left alone), fsync. From the
   moment the last ``.cleaned`` became ``.swap`` the new segments are the truth; an old file still live in
   the swap range is an original that recovery deletes.
4. ``swap-to-live:<file>``: rename ``.swap`` -> live names in ascending order (so a remaining ``.swap``
   never lies below a new segment already live), fsync.
5. ``purge-old:<file>``: unlink the old ``.deleted`` files (segjobs holds the log dir's lock, so no reader
   has them open; there is nothing to wait for).
6. ``remove-intent``.

Several partitions in lockstep (:meth:`Committer.replace_lockstep`)
-------------------------------------------------------------------
The compaction job commits the partitions cleaned in one task (a bin) together: every partition takes the same
step (its own files), then one durability barrier (:meth:`Storage.barrier`: an fsync of each directory the step
touched, on a few threads, so the filesystem's journal commits them together) stands for each partition's own
sync, then the next step. The intent is written in the two halves of ``put_if_absent``: its content to a
temporary file, a barrier, then its name (a link), then the step's barrier; so its content is durable before its
name appears, as alone. So each partition passes through exactly the states of a replace of it alone, in
the same order, each durable before the next begins, and recovery sees nothing new (a crash between the halves
leaves a temporary file, as a crash inside ``put_if_absent`` can, which recovery deletes). A partition whose step
fails leaves the lockstep where it stands; a crash stops them all where they stand (each in one of its own
states). Besides each partition's ``fault(step)``, a ``barrier_fault("barrier:<step>")`` is called before each
barrier shared by two or more partitions (``barrier:write-intent`` for the intents' content,
``barrier:intent-entry`` for their names, ``barrier:cleaned-to-swap``, ``barrier:old-to-deleted``,
``barrier:swap-to-live``); the job's fault seam gets it with the partition ``""``.
On S3 there is no barrier (an answered request is durable) and the partitions' requests of one step run on a
few threads.

Replace on S3 (no rename; per-object atomic PUT/COPY, strongly consistent listing, conditional PUT)
--------------------------------------------------------------------------------------------------
The job writes new segment objects under ``<work>/commit/<tp>/staged/<run id>/`` (:func:`staged_uri`), never in
the partition prefix, so nothing a Kafka restore or a reader lists changes before the commit point.

1. ``write-intent``: ``replace.json`` with ``put_if_absent``, after checking every staged object exists; it
   lists old and new files, the staged sizes and the run id. **This PUT is the commit point**: from then on
   recovery rolls forward, using the intent alone (the staged objects stay until the intent is gone).
2. ``copy-new:<name>``: server-side copy of each staged object to its live name, segments in *descending*
   base order. The lowest new segment shares its base with the first old one and overwrites it, so it is
   copied last: until then every old object is intact.
3. ``delete-old:<name>``: delete each old object that no new object overwrote.
4. ``remove-intent``: the commit is finished.
5. ``delete-staged:<name>``: staged objects without an intent are garbage: recovery deletes them too.

What a reader that lists the partition prefix mid-commit sees: during step 2, all old objects except those
already overwritten, plus some new ones - every offset is present at least once (no gap); offsets may be
present twice, and since compaction keeps surviving records byte-identical, the duplicates are equal
records (deduplicate by offset). Between the copies of one segment's ``.log`` and ``.index``, a new log can
be paired with an old index: indexes are hints that a reader must validate. During step 3 the new set plus
a shrinking remainder of old objects is visible (overlap only). A reader that wants the exact set runs
recovery first, or treats a present ``replace.json`` as "this partition is being committed". Recovery:
intent present -> copy every staged object to its live name again (idempotent), delete old objects not
overwritten, remove the intent, delete staged objects; no intent -> delete staged objects. The listing
then shows exactly the new set (or, if the crash came before step 1, exactly the old one). A Kafka restore
must be made from a bucket on which recovery has run.

Two-phase delete (retention)
----------------------------
The segments to delete must be a prefix of the live segments and leave at least one live segment, so a
crash between two segments leaves a shorter deleted prefix: still a valid log.

1. ``write-intent``: ``delete.json`` with the base offsets and ``now_ms``.
2. ``live-to-deleted:<file>``: per segment in ascending order, rename its files to ``.deleted`` (local:
   atomic rename + dir fsync per segment, so a later segment never reaches disk deleted before an earlier
   one; S3: copy + delete, which a ``.deleted`` name beside its live original makes recognisable). A
   broker treats ``.deleted`` files as gone (its loader unlinks them), and so do segjobs' readers.
3. ``record-deleted``: add ``base -> now_ms`` to the deletion ledger.
4. ``remove-intent``.

Recovery rolls an interrupted delete forward from its intent. :func:`purge_deleted` later unlinks
``.deleted`` files once ``now_ms - deleted_at >= file.delete.delay.ms``; a ``.deleted`` file the ledger does
not know (left by a broker, say) is entered with the current ``now_ms``, so its delay starts when segjobs
first sees it, never earlier.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, ClassVar, Iterable, Sequence

from jobs.logdir.commit.records import (
    COMMIT_DIR,
    DELETE_INTENT,
    EXTERNAL_SORT_DIR,
    LOG_SUFFIX,
    PRIVATE_STAGING_DIR,
    REPLACE_INTENT,
    SEGMENT_DATA_SUFFIXES,
    STAGED_DIR,
    STAGING_BESIDE_DIR,
    CommitError,
    DeleteIntent,
    ReplaceIntent,
    SegmentFile,
    deleted_bases,
    in_rename_order,
    list_segment_files,
    live_data_suffixes,
    live_log_bases,
    partition_name,
    partition_work_uri,
    put_intent,
    read_ledger,
    record_deleted,
    write_ledger,
)
from segment_io.errors import CrossDeviceError, PreconditionFailedError, SegjobsError, StorageEnvironmentError
from segment_io.layout import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, segment_file_name
from segment_io.storage.base import FileInfo, Storage
from segment_io.storage.traffic import in_context

_LONG_MAX = 2**63 - 1

Fault = Callable[[str], None]


def staged_uri(storage: Storage, partition_uri: str, work_uri: str, base_offset: int, suffix: str) -> str:
    """Where a job must write a new segment file before :func:`replace_segments` commits it (see
    :meth:`Committer.staged_uri`)."""
    return committer_for(storage, work_uri).staged_uri(partition_uri, base_offset, suffix)


# --------------------------------------------------------------------------------------------------
# Results and requests
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StagedSegment:
    """A new segment the job has written at :func:`staged_uri` for each of ``suffixes`` (``.log`` plus
    whichever of ``.index``, ``.timeindex``, ``.txnindex`` it has)."""

    base_offset: int
    suffixes: tuple[str, ...] = (".log", ".index", ".timeindex")


@dataclass
class ReplaceResult:
    """What :func:`replace_segments` did: the live segments before and after, and the files removed."""

    partition_uri: str
    old_base_offsets: list[int]
    new_base_offsets: list[int]
    installed: list[str] = field(default_factory=list)  #: live URIs of the new segments' files
    removed: list[str] = field(default_factory=list)  #: URIs of old files removed
    steps: list[str] = field(default_factory=list)  #: the step names passed, in order


@dataclass(frozen=True)
class InstallStep:
    """One step of installing a replace on a store without rename (:meth:`CopyCommitter.roll_forward_steps`):
    ``copy-new`` copies the staged ``source`` (of the ``size`` the intent recorded) to ``target``, its live name;
    ``delete-old`` deletes ``target``, an old object no new one overwrote."""

    step: str
    target: str
    base_offset: int
    source: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class ReplaceRequest:
    """One partition's replace in :meth:`Committer.replace_lockstep` (the arguments of
    :meth:`Committer.replace_segments`). With ``promote``, the new segments' files are first brought from where
    a task staged them (:meth:`Committer.promote`, keeping ``mtime_ms``)."""

    partition_uri: str
    old_base_offsets: list[int]
    new_segments: list[StagedSegment]
    fault: Fault | None = None
    promote: bool = False
    mtime_ms: int = 0


#: The order of the remove-intent step among a replace's stages (install steps lie below, clean-up above).
_REMOVE_INTENT = 10


@dataclass
class _Stage:
    """One step of one partition's replace: ``run`` it, then (if ``sync`` names a file or directory, set at the
    latest by ``run``) make it durable before any stage of a later ``order``. Partitions in lockstep run the
    stages of equal order together."""

    order: tuple[int, int]
    name: str
    run: Callable[[], None]
    sync: str | None = None


@dataclass(frozen=True)
class _Replace:
    """A checked replace of one partition: its result (filled as its stages run) and its stages."""

    result: "ReplaceResult"
    stages: list[_Stage]


@dataclass
class DeleteResult:
    """What :func:`delete_segments` renamed to ``.deleted`` (URIs of the new names)."""

    partition_uri: str
    base_offsets: list[int]
    deleted_at_ms: int
    renamed: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


@dataclass
class PurgeResult:
    """What :func:`purge_deleted` unlinked, and which ``.deleted`` segments it keeps (base -> due time)."""

    partition_uri: str
    purged: list[str] = field(default_factory=list)
    kept_until_ms: dict[int, int] = field(default_factory=dict)
    purged_bytes: int = 0  #: total size of the files in ``purged``
# --------------------------------------------------------------------------------------------------
# Replace
# --------------------------------------------------------------------------------------------------


def _call(fault: Fault | None, steps: list[str], step: str) -> None:
    steps.append(step)
    if fault is not None:
        fault(step)



def replace_segments(storage: Storage, partition_uri: str, *, old_base_offsets: list[int],
                     new_segments: list[StagedSegment], work_uri: str,
                     fault: Fault | None = None) -> ReplaceResult:
    """Replace the contiguous run of live segments ``old_base_offsets`` by the staged ``new_segments``,
    crash-safely, with the store's committer (see :meth:`Committer.replace_segments`)."""
    return committer_for(storage, work_uri).replace_segments(partition_uri, old_base_offsets=old_base_offsets,
                                                             new_segments=new_segments, fault=fault)


def _plan_replace(committer: "Committer", partition_uri: str, files: list[SegmentFile],
                  old_base_offsets: list[int], new_segments: list[StagedSegment]) -> ReplaceIntent:
    """Check the request against the partition and return the intent that describes it."""
    storage = committer.storage
    if not old_base_offsets or not new_segments:
        raise CommitError("a replace needs at least one old and one new segment", uri=partition_uri)
    old = sorted(set(old_base_offsets))
    if len(old) != len(old_base_offsets):
        raise CommitError(f"old base offsets repeat: {old_base_offsets}", uri=partition_uri)
    live = live_log_bases(files)
    missing = [b for b in old if b not in live]
    if missing:
        raise CommitError("not a live segment", uri=partition_uri, offset=missing[0])
    first = live.index(old[0])
    if live[first:first + len(old)] != old:
        raise CommitError(f"old segments {old} are not a contiguous run of the live segments",
                          uri=partition_uri, offset=old[0])
    run_end = live[first + len(old)] if first + len(old) < len(live) else None

    new_bases = [s.base_offset for s in new_segments]
    if sorted(set(new_bases)) != sorted(new_bases):
        raise CommitError(f"new base offsets repeat: {new_bases}", uri=partition_uri)
    new_bases.sort()
    if new_bases[0] != old[0]:
        raise CommitError(f"the first new segment must start at the first old base {old[0]}",
                          uri=partition_uri, offset=new_bases[0])
    if run_end is not None and new_bases[-1] >= run_end:
        raise CommitError(f"new segment lies beyond the replaced run (next live segment is {run_end})",
                          uri=partition_uri, offset=new_bases[-1])
    # Stray .cleaned / .swap files would change which swaps a loader keeps (it discards every swap at or
    # above the lowest .cleaned offset), so none but ours may exist when the commit starts.
    staged_names = {segment_file_name(s.base_offset, x) + CLEANED_SUFFIX for s in new_segments for x in s.suffixes}
    for f in files:
        if f.transient == SWAP_SUFFIX or (f.transient == CLEANED_SUFFIX and f.info.name not in staged_names):
            raise CommitError(f"leftover {f.info.name} from an interrupted operation; run `segjobs recover` "
                              "first", uri=partition_uri, offset=f.base_offset)

    new: dict[int, dict[str, int]] = {}
    staged: dict[int, dict[str, str]] = {}
    for seg in new_segments:
        if LOG_SUFFIX not in seg.suffixes or not set(seg.suffixes) <= set(SEGMENT_DATA_SUFFIXES):
            raise CommitError(f"staged segment needs .log and only segment data suffixes, got {seg.suffixes}",
                              uri=partition_uri, offset=seg.base_offset)
        staged[seg.base_offset] = {sfx: committer.staged_uri(partition_uri, seg.base_offset, sfx)
                                   for sfx in in_rename_order(seg.suffixes)}
    # local disk stages in the partition dir, whose listing (``files``) already has the sizes
    found = _sizes(storage, [u for uris in staged.values() for u in uris.values()],
                   {f.uri: f.info.size for f in files})
    for base, uris in staged.items():
        for uri in uris.values():
            if uri not in found:
                raise CommitError("staged file is missing", uri=uri, offset=base)
        new[base] = {sfx: found[uri] for sfx, uri in uris.items()}
    return ReplaceIntent(partition=partition_name(partition_uri),
                         old={b: live_data_suffixes(files, b) for b in old}, new=new, run_id=committer.run_id)


def _sizes(storage: Storage, uris: Sequence[str], listed: dict[str, int]) -> dict[str, int]:
    """Sizes of those of ``uris`` that exist: from ``listed`` (uri -> size, a listing of their parent taken
    already), else one listing per parent (``LocalStorage.stat`` would hash whole files, and on S3 a listing is
    one request for many objects)."""
    if all(uri in listed for uri in uris):
        return {uri: listed[uri] for uri in uris}
    by_parent: dict[str, list[str]] = {}
    for uri in uris:
        parent, name = uri.rstrip("/").rsplit("/", 1)
        by_parent.setdefault(parent, []).append(name)
    sizes = {}
    for parent, names in by_parent.items():
        listed = {info.name: info.size for info in storage.list(parent)}
        sizes.update({storage.join(parent, n): listed[n] for n in names if n in listed})
    return sizes


# --------------------------------------------------------------------------------------------------
# Delete and purge
# --------------------------------------------------------------------------------------------------


def delete_segments(storage: Storage, partition_uri: str, base_offsets: list[int], *, now_ms: int,
                    work_uri: str, fault: Fault | None = None) -> DeleteResult:
    """Retention's first phase: rename the live segments ``base_offsets`` to ``.deleted`` and record
    ``now_ms`` as their deletion time in the ledger (see the module docstring).

    ``base_offsets`` must be a prefix of the live segments that leaves at least one live segment (retention
    deletes oldest-first and never empties a partition). Producer snapshots are left alone. Raises
    :class:`CommitError` before changing anything when that does not hold.
    """
    files = list_segment_files(storage, partition_uri)
    bases = sorted(set(base_offsets))
    live = live_log_bases(files)
    if not bases:
        return DeleteResult(partition_uri, [], now_ms)
    if live[:len(bases)] != bases:
        raise CommitError(f"segments to delete {bases} are not a prefix of the live segments",
                          uri=partition_uri, offset=bases[0])
    if len(bases) >= len(live):
        raise CommitError("deleting every live segment would leave the partition empty; roll a new "
                          "segment first", uri=partition_uri, offset=bases[-1])
    pwork = partition_work_uri(storage, work_uri, partition_uri)
    result = DeleteResult(partition_uri, bases, now_ms)
    intent = DeleteIntent(partition_name(partition_uri), tuple(bases), now_ms)
    _call(fault, result.steps, "write-intent")
    intent_uri = put_intent(storage, pwork, DELETE_INTENT, intent.to_json(), partition_uri)
    for base in bases:
        for sfx in live_data_suffixes(files, base):
            name = segment_file_name(base, sfx)
            _call(fault, result.steps, f"live-to-deleted:{name}")
            storage.rename(storage.join(partition_uri, name), storage.join(partition_uri, name + DELETED_SUFFIX))
            result.renamed.append(storage.join(partition_uri, name + DELETED_SUFFIX))
        storage.sync_dir(partition_uri)
    _call(fault, result.steps, "record-deleted")
    record_deleted(storage, pwork, bases, now_ms)
    _call(fault, result.steps, "remove-intent")
    storage.delete(intent_uri)
    return result



def purge_deleted(storage: Storage, partition_uri: str, *, now_ms: int, file_delete_delay_ms: int,
                  work_uri: str) -> PurgeResult:
    """Retention's second phase: unlink ``.deleted`` segment files whose ``file.delete.delay.ms`` has
    passed since they were deleted (per the ledger), across runs.

    A ``.deleted`` segment unknown to the ledger is entered at ``now_ms`` and kept; ledger entries whose
    files are gone (a broker's loader unlinks ``.deleted`` files itself) are dropped.
    """
    if file_delete_delay_ms < 0:
        raise CommitError(f"file.delete.delay.ms must not be negative, got {file_delete_delay_ms}",
                          uri=partition_uri)
    pwork = partition_work_uri(storage, work_uri, partition_uri)
    files = list_segment_files(storage, partition_uri)
    ledger = read_ledger(storage, pwork)
    present = deleted_bases(files)
    result = PurgeResult(partition_uri)
    updated = {b: t for b, t in ledger.items() if b in present}
    for base in sorted(present):
        deleted_at = updated.setdefault(base, now_ms)
        # saturated like Kafka's long arithmetic would need: a due time past 2^63-1 ms is "never"
        due = min(deleted_at + file_delete_delay_ms, _LONG_MAX)
        if now_ms < due:
            result.kept_until_ms[base] = due
            continue
        for f in files:
            if f.base_offset == base and f.transient == DELETED_SUFFIX and f.is_data:
                storage.delete(f.uri)
                result.purged.append(f.uri)
                result.purged_bytes += f.info.size
        del updated[base]
    if updated != ledger:
        write_ledger(storage, pwork, updated)
    return result


# --------------------------------------------------------------------------------------------------
# The committers: one commit protocol per store
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Committer:
    """The commit protocol of one store, chosen once per store by :func:`committer_for`: compaction, retention
    and recovery call it and never ask what kind of store they work on.

    Two protocols (the module docstring describes both): :class:`RenameCommitter` for stores with an atomic
    rename (local disk: Kafka's own ``.cleaned`` -> ``.swap`` -> live protocol, which a broker's loader can
    finish or undo), :class:`CopyCommitter` for stores without one (S3: an intent object is the commit point,
    then server-side copies). Retention's two-phase delete and the purge of ``.deleted`` files are the same
    on both. A committer holds only the store and the log dir's work location, so it pickles into Spark tasks.
    """

    storage: Storage
    #: the log dir's work location (:func:`jobs.logdir.lock.work_uri`)
    work_uri: str
    #: the run that commits through this committer (its report's run id): on S3 it names the run's own staging
    #: area, so that no two runs ever write the same staged object (one that lost its lease may still be
    #: staging) and recovery can tell a run's stagings from another's
    run_id: str | None = None
    #: whether a step is durable only once synced (local disk: :meth:`Storage.barrier` after it), rather than
    #: as soon as the store answers (S3)
    syncs: ClassVar[bool] = False

    # ---------------------------------------------------------------- where new segments are written

    def partition_work_uri(self, partition_uri: str) -> str:
        """Where the intents and the deletion ledger of one partition live."""
        return partition_work_uri(self.storage, self.work_uri, partition_uri)

    def staged_uri(self, partition_uri: str, base_offset: int, suffix: str) -> str:
        """Where a new segment file must be when :meth:`replace_segments` starts."""
        raise NotImplementedError

    def task_stage_uri(self, partition_uri: str, base_offset: int, suffix: str) -> str:
        """Where a compaction task writes a new segment file before the driver commits it. On local disk it
        cannot be Kafka's ``.cleaned`` name in the partition dir right away: a broker's loader discards every
        ``.swap`` at or above the lowest ``.cleaned`` offset, so one group's staged files must never sit in the
        partition dir while another group is being swapped in. Tasks therefore stage in the work dir, and
        :meth:`promote` moves one group at a time to its ``.cleaned`` name just before its commit. On S3 the
        protocol's own staging location is already outside the partition prefix."""
        raise NotImplementedError

    def promote(self, partition_uri: str, base_offset: int, suffixes: Iterable[str], mtime_ms: int) -> None:
        """Bring the files a task staged at :meth:`task_stage_uri` to :meth:`staged_uri`, just before their
        commit (``mtime_ms``: the modification time they keep)."""

    def discard(self, partition_uri: str, base_offset: int, suffixes: Iterable[str]) -> None:
        """Delete the files a task staged at :meth:`task_stage_uri` and that will not be committed."""
        for sfx in suffixes:
            self.storage.delete(self.task_stage_uri(partition_uri, base_offset, sfx))

    # ---------------------------------------------------------------- replace

    def replace_segments(self, partition_uri: str, *, old_base_offsets: list[int],
                         new_segments: list[StagedSegment], fault: Fault | None = None) -> ReplaceResult:
        """Replace the contiguous run of live segments ``old_base_offsets`` by the staged ``new_segments``,
        crash-safely (the module docstring has the protocol of each store).

        The new segments must start at the first old base offset and lie before the next live segment after
        the run. Raises :class:`CommitError` (before changing anything) when the request does not fit the
        partition, a staged file is missing, or leftovers of an interrupted operation need
        :func:`jobs.logdir.recover.recover_partition`. ``fault(step)`` is called before every step (tests
        raise from it to simulate a crash there).
        """
        request = ReplaceRequest(partition_uri, old_base_offsets, new_segments, fault)
        replace = self._prepare(request)
        for order in sorted({st.order for st in replace.stages}):
            for stage in replace.stages:
                if stage.order == order:
                    stage.run()
                    if stage.sync is not None:
                        self.storage.barrier([stage.sync])
        return replace.result

    def replace_lockstep(self, requests: Sequence["ReplaceRequest"], *,
                         barrier_fault: Fault | None = None) -> list["ReplaceResult | SegjobsError"]:
        """:meth:`replace_segments` of several partitions at once, in lockstep: every partition takes the same
        step of the protocol (each its own files), then one :meth:`Storage.barrier` makes that step durable for
        all of them, then the next step. Each partition passes through exactly the states a replace of it alone
        passes through, in the same order, each made durable before the next begins; only the syncs are shared
        (one barrier for a bin of partitions instead of one sync per partition and step).

        A request with ``promote`` first has its files moved from where its task staged them (:meth:`promote`).
        A partition whose promotion, check or step raises a :class:`SegjobsError` leaves the lockstep where it
        stands (as a replace of it alone would have stopped there) and the others go on; a failed barrier is the
        failure of every partition it covered. Returns, per request, its :class:`ReplaceResult` or the error that
        stopped it. Anything else raised (a crash) stops them all. ``barrier_fault(step)`` is called before each
        barrier shared by two or more partitions with ``barrier:<step>`` (``barrier:write-intent``,
        ``barrier:cleaned-to-swap``, ...): tests raise from it to crash the run just before a shared sync."""
        outcomes: list[ReplaceResult | SegjobsError | None] = [None] * len(requests)
        live: dict[int, _Replace] = {}
        for i, request in enumerate(requests):
            try:
                if request.promote:
                    for seg in request.new_segments:
                        self.promote(request.partition_uri, seg.base_offset, seg.suffixes, request.mtime_ms)
                live[i] = self._prepare(request)
            except SegjobsError as exc:
                outcomes[i] = exc
        # the stages of each step, in protocol order (one pass over every partition's stages)
        steps: dict[tuple[int, int], dict[int, list[_Stage]]] = {}
        for i, r in live.items():
            for st in r.stages:
                steps.setdefault(st.order, {}).setdefault(i, []).append(st)
        threads = min(self.storage.io_concurrency, len(live))
        # One pool of step threads (stores of round trips) and one of barrier threads for the whole lockstep, not
        # one per step: both end with it, so no thread outlives the call.
        with self.storage.barriers() as barrier, \
                (ThreadPoolExecutor(max_workers=threads, thread_name_prefix="segjobs-commit-step") if threads > 1
                 else nullcontext()) as pool:
            for order in sorted(steps):
                stages = {i: st for i, st in steps[order].items() if i in live}
                failed = self._run_stage(stages, pool)
                for i, error in failed.items():
                    outcomes[i] = error
                    del live[i]
                synced = {i: [st.sync for st in stages[i] if st.sync is not None] for i in stages if i in live}
                synced = {i: uris for i, uris in synced.items() if uris}
                if not synced:
                    continue
                name = next(st.name for i in synced for st in stages[i])
                if barrier_fault is not None and len(synced) > 1:
                    # (over one partition the barrier is that partition's own sync: no state a replace of it alone
                    # does not pass through, so no point of its own)
                    barrier_fault(f"barrier:{name}")
                try:
                    barrier([u for uris in synced.values() for u in uris])
                except SegjobsError as exc:
                    for i in synced:
                        outcomes[i] = exc
                        del live[i]
        for i, r in live.items():
            outcomes[i] = r.result
        return [o for o in outcomes if o is not None]

    def _run_stage(self, stages: dict[int, list["_Stage"]],
                   pool: ThreadPoolExecutor | None = None) -> dict[int, SegjobsError]:
        """Run each partition's stages of one step; the partitions whose step failed, with the error. Stores
        whose requests are round trips (S3) run the partitions' steps on ``pool``'s threads. A crash (any other
        exception) stops the lockstep where it is: raised at once on one thread; on several, no partition
        starts its step after it and it is raised once the steps under way are done."""

        crashed: list[BaseException] = []

        def run(i: int) -> SegjobsError | None:
            if crashed:
                return None  # a crash stops the lockstep: no partition starts its step after it
            try:
                for stage in stages[i]:
                    stage.run()
            except SegjobsError as exc:
                return exc
            except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
                crashed.append(exc)
                if threaded is None:
                    raise
            return None

        keys = [i for i, st in stages.items() if st]
        threaded = pool if len(keys) > 1 else None
        errors = [run(i) for i in keys] if threaded is None else list(threaded.map(in_context(run), keys))
        if crashed:
            raise crashed[0]
        return {i: err for i, err in zip(keys, errors) if err is not None}

    def _prepare(self, request: "ReplaceRequest") -> "_Replace":
        """Check ``request`` against the partition (raises :class:`CommitError` before changing anything) and
        lay out its replace as stages, in protocol order."""
        storage = self.storage
        partition_uri = request.partition_uri
        files = list_segment_files(storage, partition_uri)
        intent = _plan_replace(self, partition_uri, files, request.old_base_offsets, request.new_segments)
        pwork = self.partition_work_uri(partition_uri)
        result = ReplaceResult(partition_uri, sorted(intent.old), sorted(intent.new))
        fault = request.fault
        intent_uri = storage.join(pwork, REPLACE_INTENT)

        def write_intent() -> None:
            _call(fault, result.steps, "write-intent")
            put_intent(storage, pwork, REPLACE_INTENT, intent.to_json(), partition_uri)

        temp: list[str] = []

        def write_intent_data() -> None:
            # local disk: put_if_absent in two halves, so that one barrier syncs the intents of many partitions
            # (their content before their names, as put_if_absent alone does)
            _call(fault, result.steps, "write-intent")
            storage.makedirs(pwork)
            temp.append(storage.write_temp(intent_uri, intent.to_json()))
            intent_stage.sync = temp[0]

        def link_intent() -> None:
            try:
                storage.link_temp(temp[0], intent_uri)
            except PreconditionFailedError:
                raise CommitError(f"an unfinished operation left {intent_uri}; run `segjobs recover` first",
                                  uri=partition_uri) from None

        def remove_intent() -> None:
            _call(fault, result.steps, "remove-intent")
            storage.delete(intent_uri)

        if self.syncs:
            intent_stage = _Stage((0, 0), "write-intent", write_intent_data)
            intents = [intent_stage, _Stage((0, 1), "intent-entry", link_intent, pwork)]
        else:
            intents = [_Stage((0, 0), "write-intent", write_intent)]
        stages = [*intents,
                  *self._install_stages(partition_uri, intent, result, fault),
                  _Stage((_REMOVE_INTENT, 0), "remove-intent", remove_intent),
                  *self._after_commit_stages(partition_uri, intent, result, fault)]
        return _Replace(result, stages)

    def _install_stages(self, partition_uri: str, intent: ReplaceIntent, result: ReplaceResult,
                        fault: Fault | None) -> list["_Stage"]:
        """The steps between writing the intent and removing it (orders between 1 and :data:`_REMOVE_INTENT`)."""
        raise NotImplementedError

    def _after_commit_stages(self, partition_uri: str, intent: ReplaceIntent, result: ReplaceResult,
                             fault: Fault | None) -> list["_Stage"]:
        """The steps after the intent is gone (clean-up nothing depends on; orders above
        :data:`_REMOVE_INTENT`)."""
        return []

    # ---------------------------------------------------------------- delete (the same on every store)

    def delete_segments(self, partition_uri: str, base_offsets: list[int], *, now_ms: int,
                        fault: Fault | None = None) -> DeleteResult:
        """Retention's first phase (:func:`delete_segments`)."""
        return delete_segments(self.storage, partition_uri, base_offsets, now_ms=now_ms, work_uri=self.work_uri,
                               fault=fault)

    def purge_deleted(self, partition_uri: str, *, now_ms: int, file_delete_delay_ms: int) -> PurgeResult:
        """Retention's second phase (:func:`purge_deleted`)."""
        return purge_deleted(self.storage, partition_uri, now_ms=now_ms, file_delete_delay_ms=file_delete_delay_ms,
                             work_uri=self.work_uri)

    # ---------------------------------------------------------------- recovery

    def roll_forward_steps(self, partition_uri: str, intent: ReplaceIntent) -> list[InstallStep] | None:
        """The steps that finish an interrupted replace from its intent alone, in order (recovery plans them), or
        None on a store where the intent is not the commit point (there Kafka's loader rules settle it)."""
        return None

    def leftover_staged(self, partition_uri: str) -> list[FileInfo]:
        """Staged files no intent refers to (any run's): of a commit that is over or never started, or of a run
        still staging (recovery deletes them once they are old enough, see :mod:`jobs.logdir.recover`)."""
        return []

    def staging_run(self, partition_uri: str, uri: str) -> str | None:
        """The run id a staged file of :meth:`leftover_staged` belongs to (None: staged before runs had their
        own staging)."""
        return None

    def sweep_own_staging(self, partition_uris: Iterable[str]) -> list[str]:
        """At the end of a run, under its lock: delete what this run staged for ``partition_uris`` that no intent
        refers to, and return it. A task attempt that outlived its task (a speculative attempt that lost, a retried
        task's first attempt on a lost executor) may stage a copy after the driver committed the winner's and
        deleted it; no commit reads such a copy (on local disk, neither a killed attempt's temporary file)."""
        return []

    def remove_empty_dirs(self, partition_uris: Iterable[str] = ()) -> list[str]:
        """Remove the directories that a run's staging, commits and external sort leave empty:
        ``<work>/staging/<tp>/``, ``<work>/commit/<tp>/``, ``<work>/external-sort/run-<id>/`` and those three
        themselves, and ``<partition>/.segjobs-staging/`` of each of ``partition_uris``; never one that holds
        anything (the store removes only an empty directory, atomically), nor a dry run's ``dry-<id>`` (a dry run
        takes no lock, so one may be at work beside this run). Run under the log dir's lock, at the end of a run
        and by recovery. Returns the directories removed (none on stores without directories)."""
        storage = self.storage
        removed: list[str] = []
        if storage.local_path(self.work_uri) is None:
            return removed  # an object store has no directories: nothing to list for
        for root, runs_only in ((storage.join(self.work_uri, PRIVATE_STAGING_DIR), False),
                                (storage.join(self.work_uri, COMMIT_DIR), False),
                                (storage.join(self.work_uri, EXTERNAL_SORT_DIR), True)):
            removed += [d for d in storage.list_dirs(root) if (not runs_only or _is_real_run_dir(d))
                        and storage.remove_empty_dir(d)]
            if storage.remove_empty_dir(root):
                removed.append(root)
        removed += [d for d in (storage.join(p, STAGING_BESIDE_DIR) for p in partition_uris)
                    if storage.remove_empty_dir(d)]
        return removed


def _is_real_run_dir(uri: str) -> bool:
    """Whether ``uri`` is a real run's external-sort dir (``run-<id>``): only runs that hold the lock make one."""
    return uri.rstrip("/").rsplit("/", 1)[-1].startswith("run-")


@dataclass(frozen=True)
class RenameCommitter(Committer):
    """Local disk: Kafka's ``LocalLog.replaceSegments`` protocol (``.cleaned`` -> ``.swap`` -> live), which a
    broker's loader can finish or undo at every instant.

    Tasks stage new segments in the work dir (:meth:`task_stage_uri`), and :meth:`promote` renames them to their
    ``.cleaned`` names. When the work dir lies on another filesystem than the log dir (a log dir that is its own
    mount point: the sibling ``<log-dir>.segjobs`` is on the parent's filesystem) that move would be a copy, which
    needs the space twice and can fail half-way; so then (``stage_beside``, set by :func:`committer_for`) tasks
    stage in a sub-directory of the partition dir (:data:`STAGING_BESIDE_DIR`), and every move is a rename. A
    crash leaves such files behind until the next run's recovery deletes them; a broker ignores them meanwhile
    (its loader only looks at the files of a partition dir, never into a sub-directory). Where a rename still
    meets another mount (``EXDEV``: a partition dir that is a bind mount or a mount point of its own),
    :meth:`promote` copies."""

    #: stage in the partition dir (see the class docstring); never set for a work dir on the log dir's filesystem
    stage_beside: bool = False
    syncs: ClassVar[bool] = True

    def staged_uri(self, partition_uri: str, base_offset: int, suffix: str) -> str:
        return self.storage.join(partition_uri, segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)

    def task_stage_uri(self, partition_uri: str, base_offset: int, suffix: str) -> str:
        if self.stage_beside:
            return self.storage.join(partition_uri, STAGING_BESIDE_DIR, segment_file_name(base_offset, suffix))
        return self.storage.join(self.work_uri, PRIVATE_STAGING_DIR, partition_name(partition_uri),
                                 segment_file_name(base_offset, suffix))

    def promote(self, partition_uri: str, base_offset: int, suffixes: Iterable[str], mtime_ms: int) -> None:
        """A crash right after leaves only ``.cleaned`` files, which recovery (and Kafka's loader) deletes."""
        storage = self.storage
        for sfx in suffixes:
            src = self.task_stage_uri(partition_uri, base_offset, sfx)
            dst = self.staged_uri(partition_uri, base_offset, sfx)
            try:
                storage.rename(src, dst)
                continue
            except CrossDeviceError:
                pass
            # Another mount between the staging and the partition dir (a partition dir that is a bind mount or a
            # mount point of its own): no rename reaches it. A .cleaned file cut short by a crash is harmless:
            # Kafka's loader and `segjobs recover` delete it.
            data = storage.read(src)
            try:
                with storage.open_write(dst, uncached=True) as out:
                    out.write(data)
            except StorageEnvironmentError as exc:
                raise (exc.needing(len(data)) if exc.out_of_space else exc) from None
            storage.set_mtime(dst, mtime_ms)
            storage.delete(src)

    def _install_stages(self, partition_uri: str, intent: ReplaceIntent, result: ReplaceResult,
                        fault: Fault | None) -> list["_Stage"]:
        storage = self.storage

        def path(base: int, sfx: str, transient: str = "") -> str:
            return storage.join(partition_uri, segment_file_name(base, sfx) + transient)

        def cleaned_to_swap(base: int) -> None:
            for sfx in in_rename_order(intent.new[base]):
                _call(fault, result.steps, f"cleaned-to-swap:{segment_file_name(base, sfx)}")
                storage.rename(path(base, sfx, CLEANED_SUFFIX), path(base, sfx, SWAP_SUFFIX))

        def old_to_deleted() -> None:
            for base in sorted(intent.old):
                for sfx in intent.old[base]:
                    _call(fault, result.steps, f"old-to-deleted:{segment_file_name(base, sfx)}")
                    storage.rename(path(base, sfx), path(base, sfx, DELETED_SUFFIX))

        def swap_to_live() -> None:
            for base in sorted(intent.new):
                for sfx in in_rename_order(intent.new[base]):
                    _call(fault, result.steps, f"swap-to-live:{segment_file_name(base, sfx)}")
                    storage.rename(path(base, sfx, SWAP_SUFFIX), path(base, sfx))
                    result.installed.append(path(base, sfx))

        def purge_old() -> None:
            for base in sorted(intent.old):
                for sfx in intent.old[base]:
                    _call(fault, result.steps, f"purge-old:{segment_file_name(base, sfx)}")
                    storage.delete(path(base, sfx, DELETED_SUFFIX))
                    result.removed.append(path(base, sfx, DELETED_SUFFIX))

        # one sync per new segment (descending), then one per phase: see the module docstring
        return [*(_Stage((1, k), "cleaned-to-swap", partial(cleaned_to_swap, base), partition_uri)
                  for k, base in enumerate(sorted(intent.new, reverse=True))),
                _Stage((2, 0), "old-to-deleted", old_to_deleted, partition_uri),
                _Stage((3, 0), "swap-to-live", swap_to_live, partition_uri),
                _Stage((4, 0), "purge-old", purge_old)]

    def leftover_staged(self, partition_uri: str) -> list[FileInfo]:
        """Files staged in the partition's :data:`STAGING_BESIDE_DIR` whatever ``stage_beside`` says now (the run
        that staged them may have seen the filesystems otherwise)."""
        return self.storage.list(self.storage.join(partition_uri, STAGING_BESIDE_DIR), recursive=True)

    def sweep_own_staging(self, partition_uris: Iterable[str]) -> list[str]:
        """Everything in the partitions' private staging (``<work>/staging/<tp>/``) and ``.segjobs-staging/``:
        tasks stage there under names that are not the run's, but under the run's lock no other run stages (a dry
        run stages nothing), and no intent refers to a file there (a commit first renames the accepted attempt's
        files into the partition dir), so whatever is left is a late attempt's copy or a killed one's temporary
        file. Recovery deletes the same files, whatever their age."""
        if self.run_id is None:
            return []
        storage = self.storage
        swept = [f.uri for partition_uri in partition_uris
                 for root in (storage.join(self.work_uri, PRIVATE_STAGING_DIR, partition_name(partition_uri)),
                              storage.join(partition_uri, STAGING_BESIDE_DIR))
                 for f in storage.list(root, recursive=True)]
        for uri in swept:
            storage.delete(uri)
        return swept


@dataclass(frozen=True)
class CopyCommitter(Committer):
    """S3 (no rename; per-object atomic PUT/COPY, strongly consistent listing, conditional PUT): the intent
    object is the commit point, then server-side copies; recovery rolls forward from the intent alone."""

    def staged_uri(self, partition_uri: str, base_offset: int, suffix: str) -> str:
        return self._staged(partition_uri, self.run_id, base_offset, suffix)

    def _staged(self, partition_uri: str, run_id: str | None, base_offset: int, suffix: str) -> str:
        """``<work>/commit/<tp>/staged/<run id>/<segment file>`` (without a run id: ``staged/<segment file>``)."""
        return self.storage.join(self.partition_work_uri(partition_uri), STAGED_DIR, *([run_id] if run_id else []),
                                 segment_file_name(base_offset, suffix))

    def task_stage_uri(self, partition_uri: str, base_offset: int, suffix: str) -> str:
        return self.staged_uri(partition_uri, base_offset, suffix)

    def _install_stages(self, partition_uri: str, intent: ReplaceIntent, result: ReplaceResult,
                        fault: Fault | None) -> list["_Stage"]:
        steps = self.roll_forward_steps(partition_uri, intent)

        def run(kind: str) -> None:
            for step in steps:
                if step.step != kind:
                    continue
                _call(fault, result.steps, f"{step.step}:{step.target.rsplit('/', 1)[1]}")
                if step.source is not None:
                    self.storage.copy(step.source, step.target)
                    result.installed.append(step.target)
                else:
                    self.storage.delete(step.target)
                    result.removed.append(step.target)

        def copy_new() -> None:
            run("copy-new")

        def delete_old() -> None:
            run("delete-old")

        # each answered request is durable: no syncs
        return [_Stage((1, 0), "copy-new", copy_new), _Stage((2, 0), "delete-old", delete_old)]

    def roll_forward_steps(self, partition_uri: str, intent: ReplaceIntent) -> list[InstallStep]:
        """The copies of the staged objects to their live names, segments in descending base order (the lowest
        new segment overwrites the first old one, so until it is copied every old object is intact), then the
        deletes of the old objects no new one overwrote: the commit's own steps, and what recovery repeats."""
        steps = []
        for base in sorted(intent.new, reverse=True):
            for sfx in in_rename_order(intent.new[base]):
                steps.append(InstallStep("copy-new", self.storage.join(partition_uri, segment_file_name(base, sfx)),
                                         base, self._staged(partition_uri, intent.run_id, base, sfx),
                                         intent.new[base][sfx]))
        for base, sfx in sorted(intent.old_files() - intent.new_files()):
            steps.append(InstallStep("delete-old", self.storage.join(partition_uri, segment_file_name(base, sfx)),
                                     base))
        return steps

    def _after_commit_stages(self, partition_uri: str, intent: ReplaceIntent, result: ReplaceResult,
                             fault: Fault | None) -> list["_Stage"]:
        def delete_staged() -> None:
            for base, sfx in sorted(intent.new_files()):
                _call(fault, result.steps, f"delete-staged:{segment_file_name(base, sfx)}")
                self.storage.delete(self._staged(partition_uri, intent.run_id, base, sfx))

        return [_Stage((_REMOVE_INTENT + 1, 0), "delete-staged", delete_staged)]

    def leftover_staged(self, partition_uri: str) -> list[FileInfo]:
        return self.storage.list(self.storage.join(self.partition_work_uri(partition_uri), STAGED_DIR),
                                 recursive=True)

    def staging_run(self, partition_uri: str, uri: str) -> str | None:
        root = self.storage.join(self.partition_work_uri(partition_uri), STAGED_DIR) + "/"
        rest = uri[len(root):] if uri.startswith(root) else ""
        return rest.split("/", 1)[0] if "/" in rest else None

    def sweep_own_staging(self, partition_uris: Iterable[str]) -> list[str]:
        if self.run_id is None:
            return []
        listed = {f.uri for f in self.storage.list(self.storage.join(self.work_uri, COMMIT_DIR), recursive=True)}
        swept = []
        for partition_uri in partition_uris:
            pwork = self.partition_work_uri(partition_uri)
            if self.storage.join(pwork, REPLACE_INTENT) in listed:
                continue  # a commit under way: its staged objects are recovery's to copy
            root = self.storage.join(pwork, STAGED_DIR, self.run_id) + "/"
            swept += sorted(u for u in listed if u.startswith(root))
        for uri in swept:
            self.storage.delete(uri)
        return swept


def committer_for(storage: Storage, work_uri: str, run_id: str | None = None, *,
                  log_dir: str | None = None) -> Committer:
    """The commit protocol of ``storage``: the one place that asks whether the store can rename atomically.
    ``run_id``: the committing run's id (see :attr:`Committer.run_id`). With ``log_dir`` (a job's driver passes
    it), a local committer stages beside the partitions when the work dir is on another filesystem (see
    :class:`RenameCommitter`)."""
    if not storage.atomic_rename:
        return CopyCommitter(storage, work_uri, run_id)
    beside = log_dir is not None and not storage.same_filesystem(work_uri, log_dir)
    return RenameCommitter(storage, work_uri, run_id, stage_beside=beside)


__all__ = [
    "Committer", "CopyCommitter", "DeleteResult", "Fault", "InstallStep", "PurgeResult", "RenameCommitter",
    "ReplaceRequest", "ReplaceResult", "StagedSegment", "committer_for", "delete_segments", "purge_deleted",
    "replace_segments", "staged_uri",
]
