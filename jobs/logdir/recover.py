"""Recovery: finish or undo whatever an interrupted replace or delete left in a partition.

Run by ``segjobs recover`` and at the start of every job, under the log dir's lock. Rules, in order:

1. **S3 replace intent** (``replace.json`` on a store without rename): roll forward from the intent alone -
   copy every staged object to its live name, delete the old objects no new one overwrote, remove the
   intent (see :mod:`jobs.logdir.commit`). The run that wrote it may be finishing it at the same time (its
   lease was taken over mid-commit): a staged object that is missing or vanishes is then no error once that
   run has removed the intent (``settled-elsewhere``). Staged objects with no intent left are deleted
   afterwards, except the recent ones (:data:`STAGED_GRACE_MS`) of the run whose lease this one just took
   over (:class:`Fence`): it may still be staging, or about to write its intent; a later run deletes them.
2. **A local replace intent is checked against the files** before it is trusted: every ``.cleaned`` /
   ``.swap`` file must be one of its new files with the size it recorded, and each ``.swap`` log must end
   before the next new segment (or the first live segment after the replaced run). Anything else means the
   partition moved on without segjobs - typically a broker finished this replace on start-up (it knows
   nothing of the intent), appended, and its own cleaner was killed after ``.cleaned -> .swap`` - and the
   intent is discarded unapplied (``discard-intent``): Kafka's rules alone decide, and ``.deleted`` files go
   through the deletion ledger.
3. **Kafka's loader rules** for ``.cleaned`` / ``.swap`` files (what ``LogLoader`` does when a broker
   starts, so a broker and segjobs agree on the outcome): delete every ``.swap`` at or above the lowest
   ``.cleaned`` offset and every ``.cleaned`` file (the replace had not reached its commit point: the old
   segments are untouched); for the remaining swaps, delete the live originals they replace and rename the
   swaps to live names. The originals are the live files whose base offset lies in [lowest swap base,
   highest swap next offset) (Kafka's rule), plus, with a verified intent, its old segments at or above the
   lowest remaining ``.log.swap`` (those past the new segments' last offset, whose records compaction
   dropped). Producer snapshots are kept (a broker rebuilds them; segjobs never needs to drop them).
4. **A verified local replace intent**: once the swaps are live (or its new files are all live already),
   unlink the old segments' ``.deleted`` files; if the replace was aborted instead, put back any old
   ``.deleted`` file whose live name is free (never needed by the protocol, but then no record ever depends
   on luck). Remove the intent.
5. **Delete intent**: roll forward - rename the intent's remaining live segments to ``.deleted``, enter them
   in the deletion ledger at the intent's ``now_ms``, remove the intent.
6. ``.deleted`` segments the ledger does not know are entered at ``now_ms``, so ``file.delete.delay.ms``
   counts from when segjobs first saw them.
7. **Leftovers** no intent refers to are deleted: ``*.segjobs-*.tmp`` files of interrupted writes (in the
   partition dir and its work dir; at log-dir level, in the log dir itself and anywhere in the work dir
   outside the partitions' commit dirs) and every file of the private staging area ``<work>/staging/``, where
   compaction tasks stage new segments before the driver moves one group at a time to its ``.cleaned``
   name (so nothing there is part of a commit yet), and every S3 multipart upload under the work prefix that
   was begun and never completed (a staged object whose writer died: invisible in listings, its parts still
   stored). Staged objects an S3 replace intent refers to are not leftovers: rule 1 rolls them forward first.
   Files a task staged in a partition dir itself (``*.segjobs-staged``: a work dir on another filesystem) go
   with their partition's other staged files; the work location's directories left empty go last, silently
   (only empty ones: :meth:`~jobs.logdir.commit.Committer.remove_empty_dirs`).

A step the store refuses (a rename or delete failing: an immutable file, a read-only mount) stops that
partition only: :func:`recover_log_dir` reports it with the state it is left in (:func:`unfinished_state`) and
what to fix, and goes on with the others; the next recovery takes it up where it stopped. A leftover that cannot
be deleted is harmless where it is: it is noted (``problems``) and blocks nothing.

Every rule only acts on what it finds, so running recovery again changes nothing. No rule deletes the only
copy of a record: ``.cleaned`` and aborted ``.swap`` files are copies of records whose originals are still
live; originals are deleted only while their replacements exist as swaps or staged objects.

A dry run (``segjobs recover --dry-run``) runs these very rules against a :class:`PreviewStorage`, which
reads the store and keeps every change in memory, so it reports exactly the actions a real run would take.
"""

from __future__ import annotations

import builtins  # annotations in PreviewStorage say builtins.list: there, `list` is the listing method
import io
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterable, Iterator

from jobs.logdir.commit import (
    COMMIT_DIR,
    DELETE_INTENT,
    DELETED_LEDGER,
    LOG_SUFFIX,
    PRIVATE_STAGING_DIR,
    REPLACE_INTENT,
    STAGED_DIR,
    DeleteIntent,
    RecoveryError,
    ReplaceIntent,
    SegmentFile,
    committer_for,
    deleted_bases,
    list_segment_files,
    live_log_bases,
    partition_name,
    read_delete_intent,
    read_ledger,
    read_replace_intent,
    record_deleted,
)
from jobs.logdir.lock import Lease
from jobs.logdir.lock import work_uri as log_dir_work_uri
from jobs.rules.timeutil import format_instant
from segment_io.errors import NotFoundError, PreconditionFailedError, SegjobsError, StorageAccessError
from segment_io.format import scan_batches
from segment_io.layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    parse_partition_dir,
    parse_segment_file,
    segment_file_name,
)
from segment_io.storage.base import KIND_DIRECTORY, KIND_FILE, FileInfo, PendingUpload, Storage, map_ahead
from segment_io.storage.local import is_temp_file

#: The actions that remove leftovers of interrupted runs (rule 6, and staged objects no intent refers to).
LEFTOVER_ACTIONS = ("delete-staged", "delete-temp", "abort-upload")
#: Another run's staged objects no intent refers to are deleted once they are this old (on the wall clock): a
#: run commits only while it holds the log dir's lease, checked right before each commit, so after a takeover
#: only a run caught between that check and its intent can still name them; minutes cover that and clock skew.
STAGED_GRACE_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class Fence:
    """Runs whose recent stagings recovery must leave alone: the run whose S3 lease the recovering run just took
    over (expired, or broken with ``--break-lease``) may still be at work - its tasks staging, its driver between
    its lease check and its intent - so its staged objects younger than :data:`STAGED_GRACE_MS` on ``wall_ms``
    (the wall clock, as the lease's) stay, and a later recovery deletes them. Nothing is fenced by default."""

    runs: frozenset[str] = frozenset()
    wall_ms: int = 0


def fence_of(lease: Lease | None, wall_ms: int) -> Fence:
    """The fence of a recovery under ``lease``: the run it took the lease over from, if any."""
    took_over = None if lease is None else lease.took_over
    return Fence(frozenset([took_over] if took_over else []), wall_ms)


@dataclass(frozen=True)
class RecoveryAction:
    """One change recovery made. ``action`` is one of: ``copy-new``, ``delete-old``, ``delete-staged``,
    ``delete-temp``, ``abort-upload``, ``drop-swap``, ``drop-cleaned``, ``drop-original``, ``complete-swap``,
    ``purge-replaced``, ``restore-old``, ``finish-delete``, ``record-deleted``, ``remove-intent``,
    ``discard-intent`` (a stale intent, removed without being applied).
    ``size`` is the byte size of a file the action removed, where known."""

    action: str
    uri: str
    detail: str = ""
    size: int | None = None

    def describe(self) -> str:
        """``action uri (detail, N bytes)``: one line of ``segjobs recover``'s output."""
        notes = [n for n in (self.detail, None if self.size is None else f"{self.size} bytes") if n]
        return f"{self.action} {self.uri}" + (f" ({', '.join(notes)})" if notes else "")


@dataclass
class RecoveryReport:
    """Everything recovery did in one partition, or (from :func:`recover_log_dir`'s last report) in the log
    dir and work dir themselves (nothing, when it was clean)."""

    partition_uri: str
    actions: list[RecoveryAction] = field(default_factory=list)
    #: Set when what an interrupted run left in this partition cannot be settled: the partition is left as it
    #: was when recovery stopped (the error says in which state, and what to fix), and no job may touch it.
    error: RecoveryError | None = None
    #: Leftovers that could not be deleted (harmless where they are): the partition is recovered all the same.
    problems: list[str] = field(default_factory=list)
    #: What recovery deliberately left for later (another run's recent stagings).
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    @property
    def leftovers(self) -> list[RecoveryAction]:
        """The actions that removed leftovers of interrupted runs (see :data:`LEFTOVER_ACTIONS`)."""
        return [a for a in self.actions if a.action in LEFTOVER_ACTIONS]

    def add(self, action: str, uri: str, detail: str = "", size: int | None = None) -> None:
        self.actions.append(RecoveryAction(action, uri, detail, size))


def recover_partition(storage: Storage, partition_uri: str, *, work_uri: str, now_ms: int,
                      fence: Fence | None = None) -> RecoveryReport:
    """Complete or roll back the interrupted replace / delete of one partition (rules in the module
    docstring). ``work_uri`` is the log dir's work location; ``fence`` the runs whose recent stagings are left
    alone. Idempotent. Raises
    :class:`~jobs.logdir.commit.RecoveryError` (changing nothing) when an intent is unreadable or names staged
    objects that are gone, and passes on the error of a step that fails (a rename or delete the store
    refuses): then the partition is left where that step stopped, which the next recovery takes up."""
    report = RecoveryReport(partition_uri)
    _recover_steps(storage, partition_uri, work_uri, now_ms, fence or Fence(), report)
    return report


def _recover_partition(storage: Storage, partition_uri: str, work_uri: str, now_ms: int, fence: Fence,
                       report: RecoveryReport) -> None:
    """:func:`recover_partition` into ``report``, which keeps the actions taken before a failure: the step of
    :func:`recover_log_dir` that changes a partition, run in partition order under the lease check."""
    _recover_steps(storage, partition_uri, work_uri, now_ms, fence, report)


def _would_act(storage: Storage, partition_uri: str, work_uri: str, now_ms: int, fence: Fence) -> bool:
    """Whether recovery would change, keep or report anything in the partition: the very rules run against a
    :class:`PreviewStorage` of ``storage``, so reads only (safe to run ahead, on many partitions at once, and
    after the lease is lost). An error other than the store's own counts as "would act": the real step meets it
    in turn and reports it."""
    preview = RecoveryReport(partition_uri)
    try:
        _recover_steps(PreviewStorage(storage), partition_uri, work_uri, now_ms, fence, preview)
    except StorageAccessError:
        raise
    except (SegjobsError, OSError):
        return True
    return bool(preview.actions or preview.problems or preview.notes)


def _recover_steps(storage: Storage, partition_uri: str, work_uri: str, now_ms: int, fence: Fence,
                   report: RecoveryReport) -> None:
    """The rules of the module docstring for one partition, into ``report``."""
    committer = committer_for(storage, work_uri)
    pwork = committer.partition_work_uri(partition_uri)
    replace = read_replace_intent(storage, pwork)
    delete = read_delete_intent(storage, pwork)

    # the staged files of this partition's intent: once it is settled they are garbage, whoever staged them
    settled = set() if replace is None else {(replace.run_id, segment_file_name(b, sfx)) for b, sfx in
                                             replace.new_files()}
    if replace is not None:  # rule 1: a store whose commit point is the intent finishes it from the intent
        replace = committer.roll_forward(partition_uri, replace, report.add)
    stale = None if replace is None else _intent_disagreement(storage, partition_uri, replace)
    outcome = _apply_loader_rules(storage, partition_uri, replace if stale is None else None, report)
    if replace is not None:
        intent_uri = storage.join(pwork, REPLACE_INTENT)
        if stale is not None:
            # The partition moved on without segjobs (a broker finished this replace, then wrote, cleaned or
            # deleted on its own): the intent describes files that are not there any more. It is never applied;
            # Kafka's rules alone decided above, and .deleted files go through the deletion ledger.
            storage.delete(intent_uri)
            report.add("discard-intent", intent_uri, f"stale: {stale}; Kafka's loader rules decided instead")
        else:
            if outcome is not None or _new_segments_live(storage, partition_uri, replace):
                _settle_replaced(storage, partition_uri, replace, aborted=outcome == "aborted", report=report)
            _remove(storage, intent_uri, report)
    for info in committer.leftover_staged(partition_uri):
        run = committer.staging_run(partition_uri, info.uri)
        young = fence.wall_ms - info.mtime_ms < STAGED_GRACE_MS
        if run is not None and run in fence.runs and (run, info.name) not in settled and young:
            # Staged by the run whose lease was just taken over, recently: that run may still be staging, or be
            # caught between its lease check and its intent. Left alone; a later recovery deletes it.
            report.notes.append(f"kept {info.uri}: staged {format_instant(info.mtime_ms)} by run {run}, whose "
                                f"lease this run took over; deleted by a run from "
                                f"{format_instant(info.mtime_ms + STAGED_GRACE_MS)} on")
        else:
            _delete_leftover(storage, info, report, "delete-staged", "staged by a commit that is over or never "
                             "started")
    if delete is not None:
        _finish_delete(storage, partition_uri, pwork, delete, report)
    files = list_segment_files(storage, partition_uri)
    unknown = sorted(deleted_bases(files) - read_ledger(storage, pwork).keys())
    if unknown and record_deleted(storage, pwork, unknown, now_ms):
        report.add("record-deleted", storage.join(pwork, DELETED_LEDGER),
                   f"{len(unknown)} .deleted segment(s) first seen at {now_ms}")
    for info in storage.list(partition_uri) + storage.list(pwork, recursive=True):
        _delete_temp(storage, info, report)


def recover_log_dir(storage: Storage, log_dir_uri: str, *, now_ms: int, work_uri: str | None = None,
                    check: Callable[[], None] | None = None, fence: Fence | None = None,
                    listed: list[FileInfo] | None = None) -> list[RecoveryReport]:
    """:func:`recover_partition` for every partition of the log dir (those with files, and those with
    segjobs bookkeeping in the work location), then rule 6 for the log dir and the work location
    themselves. ``work_uri`` defaults to the log dir's sibling ``<log-dir>.segjobs``; ``check`` is called
    before each partition that recovery changes (or keeps something in, or reports) and before the log-dir step
    (the caller's lease check: it raises to stop). Whether a partition has anything to settle is found by
    reads only, ahead of the changes: one recursive listing of the log dir and one of the commit dirs clear the
    partitions that show nothing to settle (:func:`clean_in_listing`), and the others are checked by the rules
    themselves, up to ``storage.io_concurrency`` partitions at once. The changes are made one partition at a time
    in name order: the outcome, and a dry run's report, are those of a serial run. One
    report per partition, in name order, followed by one for the log dir (``partition_uri`` is the log dir)
    if that changed anything. A partition whose leftovers cannot be settled safely gets a report with ``error``
    set (and nothing changed in it) while the others are recovered. ``listed``: the log dir's recursive listing
    with irregular entries (what :func:`segment_io.layout.list_log_dir` reads), taken by the caller under the
    lock so that it can use it again when recovery changed nothing; by default recovery lists it."""
    work = work_uri if work_uri is not None else log_dir_work_uri(log_dir_uri)
    if listed is None:
        listed = storage.list(log_dir_uri, recursive=True, irregular=True)
    commit_uri = storage.join(work, COMMIT_DIR)
    commit_listed = storage.list(commit_uri, recursive=True, irregular=True)
    # listings name local files by path, whichever way the log dir was named (a file:// URI, a path)
    listed_root = storage.local_path(log_dir_uri) or log_dir_uri
    commit_root = storage.local_path(commit_uri) or commit_uri
    # the partitions: every directory of the log dir and of the commit dirs (what listing their directories gives)
    names = _dir_names(listed_root, listed) | _dir_names(commit_root, commit_listed)
    fence = fence or Fence()
    partitions = [storage.join(log_dir_uri, n) for n in sorted(n for n in names if parse_partition_dir(n) is not None)]
    reports = []
    # What may run ahead: the reads that decide whether a partition has anything to settle. First one recursive
    # listing of the log dir and one of the commit dirs, which clear most partitions without a request of their
    # own (see clean_in_listing); then, for the others, the read-only check of the rules themselves (up to
    # io_concurrency partitions at once). What stays ordered: every change, partition by partition in name
    # order, each preceded by the lease check, so a lost lease stops recovery before the next partition's first
    # write. A partition with nothing to settle is not written to, so it needs no check. Reads taken ahead stay
    # true: a partition's recovery changes only its own files and commit dir, and the lease keeps other runs out.
    clean = clean_in_listing(listed_root, listed, commit_root, commit_listed)
    checked = map_ahead(lambda uri: _would_act(storage, uri, work, now_ms, fence),
                        [p for p in partitions if partition_name(p) not in clean], storage.io_concurrency)
    for partition_uri in partitions:
        report = RecoveryReport(partition_uri)
        reports.append(report)
        if partition_name(partition_uri) in clean or not next(checked):
            continue
        if check is not None:
            check()
        try:
            _recover_partition(storage, partition_uri, work, now_ms, fence, report)
        except StorageAccessError:
            raise  # the store itself cannot be used (credentials, endpoint): no partition would fare better
        except (SegjobsError, OSError) as exc:
            # One partition that cannot be settled must not hold the others back: it is reported with the state
            # it is in, left as it is (intent and staged files included, for a person to look at), and the jobs
            # leave it alone; the next recovery takes it up where this one stopped.
            report.error = stuck_error(storage, partition_uri, work, exc)
    if check is not None:
        check()
    top = RecoveryReport(log_dir_uri)
    root = listed_root.rstrip("/") + "/"
    for info in listed:  # the log dir's own files: no partition's recovery changed them
        if info.kind == KIND_FILE and info.uri.startswith(root) and "/" not in info.uri[len(root):]:
            _delete_temp(storage, info, top)
    commit_root = storage.join(work, COMMIT_DIR) + "/"
    staging_root = storage.join(work, PRIVATE_STAGING_DIR) + "/"
    for info in storage.list(work, recursive=True):
        if info.uri.startswith(staging_root):
            _delete_leftover(storage, info, top, "delete-staged", "private staging of an interrupted compaction")
        elif not info.uri.startswith(commit_root):  # the partitions' commit dirs had their turn above
            _delete_temp(storage, info, top)
    for upload in storage.list_pending_uploads(work):
        storage.abort_pending_upload(upload)
        top.add("abort-upload", upload.uri, f"an upload begun {format_instant(upload.initiated_ms)} and never "
                f"completed", upload.size)
    # tidying, not a change to report: they hold nothing
    committer_for(storage, work).remove_empty_dirs(storage.join(log_dir_uri, n) for n in sorted(names)
                                                   if parse_partition_dir(n) is not None)
    if top.changed or top.problems:
        reports.append(top)
    return reports


def clean_in_listing(log_dir_uri: str, log_files: Iterable[FileInfo], commit_uri: str,
                     commit_files: Iterable[FileInfo]) -> frozenset[str]:
    """The partitions (directory names) that recovery has nothing to settle in, as far as listings alone can
    tell: ``log_files`` is a recursive listing of the log dir (with or without irregular entries),
    ``commit_files`` one of the work location's commit dir (``<work>/commit``). A partition is clean when its
    directory holds only regular files directly in it, none of them a ``.cleaned``, ``.swap`` or ``.deleted``
    segment file or a temporary file of an interrupted write, and its commit dir holds nothing at all (no
    intent, no staged object, no deletion ledger). Then every rule finds nothing: no intent to roll forward, no
    loader rule applies, nothing staged (on local disk staging beside the partition is a sub-directory, which a
    clean partition has none of), no ``.deleted`` segment for the ledger, no temporary file. Anything else, or
    anything not understood, leaves the partition to the rules themselves (:func:`_would_act`): a partition a
    crashed run left anything in is never missed. Pure: a function of the listings."""
    dirty: set[str] = set()
    seen: set[str] = set()
    root = log_dir_uri.rstrip("/") + "/"
    for f in log_files:
        if not f.uri.startswith(root):
            continue
        name, _, rest = f.uri[len(root):].partition("/")
        if not rest:
            if f.kind == KIND_DIRECTORY:
                seen.add(name)  # a partition directory (listed when asked for irregular entries)
            continue  # a file of the log dir itself: the log-dir step deals with those
        seen.add(name)
        parsed = parse_segment_file(rest)
        if f.kind != KIND_FILE or "/" in rest or is_temp_file(rest) or (parsed is not None and parsed[2]):
            dirty.add(name)
    commit_root = commit_uri.rstrip("/") + "/"
    for f in commit_files:
        if f.uri.startswith(commit_root):
            dirty.add(f.uri[len(commit_root):].partition("/")[0])
    return frozenset(n for n in seen - dirty if parse_partition_dir(n) is not None)


def _dir_names(root_uri: str, listed: Iterable[FileInfo]) -> set[str]:
    """The names of the directories directly under ``root_uri`` in its recursive listing ``listed`` (with
    irregular entries): those that hold something, and the empty ones a store with directories reports."""
    root = root_uri.rstrip("/") + "/"
    names = set()
    for f in listed:
        if f.uri.startswith(root):
            name, sep, _ = f.uri[len(root):].partition("/")
            if sep or f.kind == KIND_DIRECTORY:
                names.add(name)
    return names


def unfinished_state(storage: Storage, partition_uri: str, work_uri: str) -> str | None:
    """What an interrupted commit left in the partition, in words (its intents, ``.cleaned`` / ``.swap`` files,
    staged objects, and the ``.deleted`` files beside them), or None when no commit is unfinished there. Reads
    only: for reporting a partition left mid-commit."""
    committer = committer_for(storage, work_uri)
    pwork = committer.partition_work_uri(partition_uri)
    parts = []
    for name, read in ((REPLACE_INTENT, read_replace_intent), (DELETE_INTENT, read_delete_intent)):
        uri = storage.join(pwork, name)
        try:
            intent = read(storage, pwork)
        except RecoveryError:
            parts.append(f"an unreadable intent {uri}")
            continue
        if isinstance(intent, ReplaceIntent):
            parts.append(f"the replace intent {uri} (old segments {sorted(intent.old)} -> new {sorted(intent.new)})")
        elif isinstance(intent, DeleteIntent):
            parts.append(f"the delete intent {uri} (segments {list(intent.base_offsets)})")
    files = list_segment_files(storage, partition_uri)
    transient = {sfx: [f for f in files if f.transient == sfx] for sfx in (CLEANED_SUFFIX, SWAP_SUFFIX)}
    staged = committer.leftover_staged(partition_uri)
    if not parts and not any(transient.values()) and not staged:
        return None
    transient[DELETED_SUFFIX] = [f for f in files if f.transient == DELETED_SUFFIX]
    for sfx, found in transient.items():
        if found:
            parts.append(f"{len(found)} {sfx} file(s) of segment(s) {sorted({f.base_offset for f in found})}")
    if staged:
        parts.append(f"{len(staged)} staged object(s) under {storage.join(pwork, STAGED_DIR)}")
    return "; ".join(parts)


def describe_stuck(storage: Storage, partition_uri: str, work_uri: str,
                   exc: BaseException | str) -> tuple[str, bool]:
    """The report of a partition whose commit or recovery stopped at ``exc``: the cause, the state the partition
    is left in and what to do about it; and whether it is left mid-commit."""
    try:
        state = unfinished_state(storage, partition_uri, work_uri)
    except (SegjobsError, OSError) as e:  # the report must not fail as well: say what is known
        state = f"a state that could not be read ({e})"
    if state is None:
        return f"{exc}; the partition is left with no commit unfinished", False
    return (f"{exc}; the partition is left mid-commit, with {state}; fix the cause and run `segjobs recover`, which "
            f"completes or rolls back what is there (until then no segjobs run changes this partition)", True)


def stuck_error(storage: Storage, partition_uri: str, work_uri: str, exc: BaseException) -> RecoveryError:
    """:func:`describe_stuck` as the error of the partition's recovery report."""
    return RecoveryError(describe_stuck(storage, partition_uri, work_uri, exc)[0])


# --------------------------------------------------------------------------------------------------


def _delete_temp(storage: Storage, info: FileInfo, report: RecoveryReport) -> None:
    """Rule 6 for one listed file: a temporary file of an interrupted segjobs write goes."""
    if is_temp_file(info.name):
        _delete_leftover(storage, info, report, "delete-temp", "temporary file of an interrupted write")


def _delete_leftover(storage: Storage, info: FileInfo, report: RecoveryReport, action: str, why: str) -> None:
    """Delete a leftover nothing refers to. One that cannot be deleted is harmless where it is (no reader
    or commit looks at it), so it is noted in ``report.problems`` and recovery goes on."""
    try:
        storage.delete(info.uri)
    except StorageAccessError:
        raise
    except (SegjobsError, OSError) as exc:
        report.problems.append(f"could not delete the leftover {info.uri} ({why}): {exc}")
        return
    report.add(action, info.uri, why, info.size)


def _remove(storage: Storage, uri: str, report: RecoveryReport) -> None:
    storage.delete(uri)
    report.add("remove-intent", uri)


def _live_name(f: SegmentFile) -> str:
    return f.uri[: -len(f.transient)]


def _next_offset(storage: Storage, log: SegmentFile) -> int:
    """One past the last offset in a segment's log (its base offset when it holds no batch): the end of
    the range a ``.swap`` segment replaces, by Kafka's rule."""
    headers = scan_batches(storage.read(log.uri), path=log.uri)
    return int(headers.last_offset.max()) + 1 if len(headers) else log.base_offset


def _apply_loader_rules(storage: Storage, partition_uri: str, intent: ReplaceIntent | None,
                        report: RecoveryReport) -> str | None:
    """Kafka's ``LogLoader`` handling of ``.cleaned`` / ``.swap`` files. Returns ``"aborted"`` when only
    discarded swaps were found, ``"completed"`` when swaps were made live, None when there were neither."""
    files = list_segment_files(storage, partition_uri)
    cleaned = [f for f in files if f.transient == CLEANED_SUFFIX]
    swaps = [f for f in files if f.transient == SWAP_SUFFIX]
    if not cleaned and not swaps:
        return None
    min_cleaned = min((f.base_offset for f in cleaned), default=None)
    valid: list[SegmentFile] = []
    for f in swaps:
        if min_cleaned is not None and f.base_offset >= min_cleaned:
            storage.delete(f.uri)
            report.add("drop-swap", f.uri, f"at or above the lowest .cleaned offset {min_cleaned}", f.info.size)
        else:
            valid.append(f)
    for f in cleaned:
        storage.delete(f.uri)
        report.add("drop-cleaned", f.uri, size=f.info.size)

    log_swaps = [f for f in valid if f.suffix == LOG_SUFFIX]
    if log_swaps:
        start = min(f.base_offset for f in log_swaps)
        end = max(_next_offset(storage, f) for f in log_swaps)
        live = [f for f in files if f.transient == "" and f.is_data]
        for f in live:
            # Kafka's range rule always holds (no live segment may overlap a swap); a verified intent also names
            # old segments past the swaps' last offset, whose records the new segments dropped.
            if start <= f.base_offset < end:
                why = f"inside the swap range [{start}, {end})"
            elif intent is not None and f.base_offset in intent.old and f.base_offset >= start:
                why = "an old segment of the replace intent"
            else:
                continue
            storage.delete(f.uri)
            report.add("drop-original", f.uri, why, f.info.size)
    for f in sorted(valid, key=lambda f: f.uri):
        storage.rename(f.uri, _live_name(f))
        report.add("complete-swap", _live_name(f))
    storage.sync_dir(partition_uri)
    return "completed" if valid else "aborted"


def _intent_disagreement(storage: Storage, partition_uri: str, intent: ReplaceIntent) -> str | None:
    """Why the partition's files are not a state that the local replace ``intent`` can have left, or None
    when they are. A replace leaves its new files as ``.cleaned``, ``.swap`` or live files of exactly the
    sizes the intent recorded, each ``.log`` within the run it replaces; anything else (a ``.swap`` of
    another size, or reaching past the replaced run) was made by someone else, typically a broker that
    finished this replace on start-up and whose own cleaner was interrupted later."""
    files = list_segment_files(storage, partition_uri)
    recorded = {(b, sfx): size for b, sizes in intent.new.items() for sfx, size in sizes.items()}
    swap_logs = []
    for f in files:
        if f.transient not in (CLEANED_SUFFIX, SWAP_SUFFIX):
            continue
        size = recorded.get((f.base_offset, f.suffix))
        if size is None:
            return f"{f.info.name} is not a file of its new segments {sorted(intent.new)}"
        if f.info.size != size:
            return f"{f.info.name} has {f.info.size} bytes, the intent recorded {size}"
        if f.transient == SWAP_SUFFIX and f.suffix == LOG_SUFFIX:
            swap_logs.append(f)
    new_bases = sorted(intent.new)
    # The replaced run ends where the next live segment after it (neither old nor new) begins.
    last_old = max(intent.old, default=new_bases[0] if new_bases else 0)
    later = [b for b in live_log_bases(files) if b > last_old and b not in intent.new]
    run_end = min(later, default=None)
    for f in swap_logs:
        i = new_bases.index(f.base_offset)
        bound = new_bases[i + 1] if i + 1 < len(new_bases) else run_end
        end = _next_offset(storage, f)
        if bound is not None and end > bound:
            return (f"{f.info.name} holds offsets up to {end - 1}, past {bound} where the segment after it "
                    f"begins")
    return None


def _new_segments_live(storage: Storage, partition_uri: str, intent: ReplaceIntent) -> bool:
    """Whether every new file of ``intent`` is live with the size it recorded: the replace went through."""
    live = {(f.base_offset, f.suffix): f.info.size for f in list_segment_files(storage, partition_uri)
            if f.transient == ""}
    return all(live.get((b, sfx)) == size for b, sizes in intent.new.items() for sfx, size in sizes.items())


def _settle_replaced(storage: Storage, partition_uri: str, intent: ReplaceIntent, *, aborted: bool,
                     report: RecoveryReport) -> None:
    """The old segments of a local replace: gone for good once it completed, put back if it aborted."""
    old_files = intent.old_files()
    files = list_segment_files(storage, partition_uri)
    live_names = {f.uri for f in files if f.transient == ""}
    for f in files:
        if f.transient != DELETED_SUFFIX or (f.base_offset, f.suffix) not in old_files:
            continue
        if not aborted:
            storage.delete(f.uri)
            report.add("purge-replaced", f.uri, size=f.info.size)
        elif _live_name(f) not in live_names:
            storage.rename(f.uri, _live_name(f))
            report.add("restore-old", _live_name(f))
    storage.sync_dir(partition_uri)


def _finish_delete(storage: Storage, partition_uri: str, pwork: str, intent: DeleteIntent,
                   report: RecoveryReport) -> None:
    files = list_segment_files(storage, partition_uri)
    targets = set(intent.base_offsets)
    if not [b for b in live_log_bases(files) if b not in targets]:
        raise RecoveryError("finishing the interrupted delete would leave no live segment",
                            uri=partition_uri, offset=max(targets))
    for base in sorted(targets):
        todo = [f for f in files if f.base_offset == base and f.transient == "" and f.is_data]
        for f in todo:
            # On S3 a rename is copy + delete: a .deleted copy may already exist; renaming again is harmless.
            storage.rename(f.uri, f.uri + DELETED_SUFFIX)
            report.add("finish-delete", f.uri + DELETED_SUFFIX)
        if todo:
            storage.sync_dir(partition_uri)
    if record_deleted(storage, pwork, sorted(targets), intent.now_ms):
        report.add("record-deleted", storage.join(pwork, DELETED_LEDGER), f"deleted at {intent.now_ms}")
    _remove(storage, storage.join(pwork, DELETE_INTENT), report)


# --------------------------------------------------------------------------------------------------
# Dry run
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pending:
    """A file a preview created: its bytes, or the file its bytes come from (a rename or copy)."""

    size: int
    data: bytes | None = None
    source: str | None = None
    mtime_ms: int = 0


class PreviewStorage(Storage):
    """A store seen through changes kept in memory: reads and listings come from ``base`` as modified by
    every write, rename, copy and delete made through this object, and ``base`` itself is never changed.
    Recovery run against it (a dry run) takes exactly the decisions, in the same order, that it would take
    against ``base``, because it is the same code looking at the same state."""

    def __init__(self, base: Storage) -> None:
        self.base = base
        self.atomic_rename = base.atomic_rename
        self.io_concurrency = base.io_concurrency
        # recover_log_dir reads through one preview from several threads while it changes it from one
        self._lock = threading.RLock()
        self._new: dict[str, _Pending] = {}
        self._gone: set[str] = set()
        self._aborted: set[PendingUpload] = set()
        self._gone_dirs: set[str] = set()  #: directories removed in this preview

    # ------------------------------------------------------------------ the view

    def _pending(self, uri: str) -> _Pending | None:
        return self._new.get(uri)

    def _visible_in_base(self, uri: str) -> bool:
        return uri not in self._gone and uri not in self._new

    def _data(self, uri: str) -> bytes:
        p = self._pending(uri)
        if p is None:
            if uri in self._gone:
                raise NotFoundError("no such file (removed in this preview)", uri=uri)
            return self.base.read(uri)
        return p.data if p.data is not None else self.base.read(p.source or "")

    def _set(self, uri: str, pending: _Pending) -> None:
        with self._lock:
            self._gone.discard(uri)
            self._new[uri] = pending

    def _info(self, uri: str, p: _Pending) -> FileInfo:
        return FileInfo(uri=uri, size=p.size, mtime_ms=p.mtime_ms, etag=None)

    def join(self, base: str, *parts: str) -> str:
        return self.base.join(base, *parts)

    def local_path(self, uri: str) -> str | None:
        return self.base.local_path(uri)

    def list(self, prefix: str, *, recursive: bool = False, irregular: bool = False) -> list[FileInfo]:
        root = prefix.rstrip("/") + "/"
        listed = self.base.list(prefix, recursive=recursive, irregular=irregular)
        with self._lock:
            out = {i.uri: i for i in listed if self._visible_in_base(i.uri) and i.uri not in self._gone_dirs}
            new = list(self._new.items())
        for uri, p in new:
            if uri.startswith(root) and (recursive or "/" not in uri[len(root):]):
                out[uri] = self._info(uri, p)
        return sorted(out.values(), key=lambda i: i.uri)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        root = prefix.rstrip("/") + "/"
        dirs = set(self.base.list_dirs(prefix))
        with self._lock:
            new = list(self._new)
        dirs |= {root + uri[len(root):].split("/", 1)[0] for uri in new
                 if uri.startswith(root) and "/" in uri[len(root):]}
        return sorted(dirs - self._gone_dirs)

    def stat(self, uri: str) -> FileInfo:
        p = self._pending(uri)
        if p is not None:
            return self._info(uri, p)
        if uri in self._gone:
            raise NotFoundError("no such file (removed in this preview)", uri=uri)
        return self.base.stat(uri)

    def exists(self, uri: str) -> bool:
        if uri in self._new:
            return True
        return uri not in self._gone and self.base.exists(uri)

    def read(self, uri: str) -> bytes:
        return self._data(uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if uri in self._new or uri in self._gone:
            return self._data(uri)[start:start + length]
        return self.base.read_range(uri, start, length)

    # ------------------------------------------------------------------ changes, kept in memory

    def write_atomic(self, uri: str, data: bytes, *, durable: bool = True) -> None:
        self._set(uri, _Pending(len(data), data=bytes(data)))

    @contextmanager
    def open_write(self, uri: str, *, durable: bool = True) -> Iterator[BinaryIO]:
        buf = io.BytesIO()
        yield buf
        self.write_atomic(uri, buf.getvalue())

    def put_if_absent(self, uri: str, data: bytes, *, durable: bool = True) -> str | None:
        if self.exists(uri):
            raise PreconditionFailedError("already exists", uri=uri)
        self.write_atomic(uri, data)
        return None

    def put_if_match(self, uri: str, data: bytes, etag: str | None) -> str | None:
        if etag is None:
            return self.put_if_absent(uri, data)
        if not self.exists(uri):
            raise PreconditionFailedError(f"does not exist (expected etag {etag})", uri=uri)
        self.write_atomic(uri, data)
        return None

    def rename(self, src: str, dst: str) -> None:
        self.copy(src, dst)
        self.delete(src, missing_ok=False)

    def copy(self, src: str, dst: str) -> None:
        info = self.stat(src)
        p = self._pending(src)
        self._set(dst, p if p is not None else _Pending(info.size, source=src, mtime_ms=info.mtime_ms))

    def delete(self, uri: str, *, missing_ok: bool = True) -> None:
        if not missing_ok and not self.exists(uri):
            raise NotFoundError("no such file", uri=uri)
        with self._lock:
            self._new.pop(uri, None)
            self._gone.add(uri)

    def makedirs(self, uri: str) -> None:
        self._gone_dirs.discard(uri)

    def remove_empty_dir(self, uri: str) -> bool:
        path = self.base.local_path(uri)
        if uri in self._gone_dirs or path is None or not os.path.isdir(path) \
                or self.list(uri, recursive=True, irregular=True):
            return False
        self._gone_dirs.add(uri)
        return True

    def sync_dir(self, uri: str) -> None:
        pass

    def list_pending_uploads(self, prefix: str) -> builtins.list[PendingUpload]:
        return [u for u in self.base.list_pending_uploads(prefix) if u not in self._aborted]

    def abort_pending_upload(self, upload: PendingUpload) -> None:
        self._aborted.add(upload)


__all__ = ["LEFTOVER_ACTIONS", "PreviewStorage", "Fence", "RecoveryAction", "RecoveryReport", "STAGED_GRACE_MS",
           "clean_in_listing", "fence_of", "recover_log_dir",
           "recover_partition", "describe_stuck", "stuck_error", "unfinished_state"]
