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
   swaps to live names (ascending bases, ``.log`` first, so a recovery killed midway leaves a state the next one
   settles the same way). The originals are the live files whose base offset lies in [lowest swap base,
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

Recovery is a plan, then its application. :func:`plan_partition` reads what the rules decide from (the listings of
the partition, its commit dir and its staged files, the intents, the deletion ledger, the last offsets of
``.swap`` logs) and turns it into the ordered steps of a :class:`RecoveryPlan`, each rule deciding on the state the
earlier ones leave (a function of the reads, ``now_ms`` and the fence: no store is touched). :func:`apply_plan`
carries the steps out; a dry run (``segjobs recover --dry-run``) reports them, which is exactly what the real run
then reports, as long as no store refuses a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any, Callable, Iterable, Sequence, TypeVar

from jobs.logdir.commit.committers import Committer, committer_for
from jobs.logdir.commit.records import (
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
    deleted_bases,
    list_segment_files,
    live_log_bases,
    partition_name,
    read_delete_intent,
    read_json_or_none,
    read_ledger,
    read_replace_intent,
    write_ledger,
)
from jobs.logdir.lock import Lease, lease_to_take_over
from jobs.logdir.lock import work_uri as log_dir_work_uri
from jobs.rules.timeutil import format_instant
from segment_io.errors import NotFoundError, SegjobsError, StorageAccessError
from segment_io.format import scan_batches
from segment_io.layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    parse_partition_dir,
    parse_segment_file,
    segment_file_name,
)
from segment_io.storage.base import KIND_DIRECTORY, KIND_FILE, FileInfo, PendingUpload, Storage, map_ahead
from segment_io.storage.local import is_temp_file

T = TypeVar("T")

#: The actions that remove leftovers of interrupted runs (rule 7, and staged objects no intent refers to).
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
    (the wall clock, as the lease's) stay, and a later recovery deletes them; and so may the run that one had
    taken the lease over from. Nothing is fenced by default."""

    runs: frozenset[str] = frozenset()
    wall_ms: int = 0
    #: of ``runs``, the one whose lease the recovering run took over (None: each of them)
    took_over: str | None = None

    def whose(self, run: str) -> str:
        """Why ``run``'s stagings are fenced, in words."""
        if self.took_over is None or run == self.took_over:
            return "whose lease this run took over"
        return f"whose lease run {self.took_over} took over before this run took it"


def fence_of(lease: Lease | None, wall_ms: int) -> Fence:
    """The fence of a recovery under ``lease``: the run it took the lease over from and the run that one had
    taken it from (:attr:`~jobs.logdir.lock.Lease.fenced`), if any."""
    return Fence(wall_ms=wall_ms) if lease is None else Fence(lease.fenced, wall_ms, lease.took_over)


def fence_to_take_over(storage: Storage, log_dir_uri: str, wall_ms: int) -> Fence:
    """Reads only: the fence of a recovery that took the log dir's lease now, as it stands (a dry run's, which
    takes no lease: :func:`~jobs.logdir.lock.lease_to_take_over`)."""
    took_over, runs = lease_to_take_over(storage, log_dir_uri)
    return Fence(runs, wall_ms, took_over)


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
    #: What recovery did that no segjobs run asked for and a person should know of (a broker's ``.swap`` made live
    #: by Kafka's loader rules, live segments deleted for it): said as warnings, even with ``--quiet``.
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    @property
    def leftovers(self) -> list[RecoveryAction]:
        """The actions that removed leftovers of interrupted runs (see :data:`LEFTOVER_ACTIONS`)."""
        return [a for a in self.actions if a.action in LEFTOVER_ACTIONS]

    def add(self, action: str, uri: str, detail: str = "", size: int | None = None) -> None:
        self.actions.append(RecoveryAction(action, uri, detail, size))


#: What an action says about the commit it settles, for :class:`RecoveryTally`: the actions of a replace that went
#: through (its new segments made live, its old ones removed), of one rolled back, and of a delete finished.
_COMPLETING = frozenset({"copy-new", "complete-swap", "drop-original", "delete-old", "purge-replaced"})
_MADE_LIVE = frozenset({"copy-new", "complete-swap"})
_REPLACED = frozenset({"drop-original", "delete-old", "purge-replaced"})
_ROLLING_BACK = frozenset({"drop-cleaned", "drop-swap", "restore-old"})
#: leftover actions -> the tally's (count, bytes) fields
_LEFTOVER_FIELDS = {"delete-staged": ("staged", "staged_bytes"), "delete-temp": ("temps", "temp_bytes"),
                    "abort-upload": ("uploads", "upload_bytes")}


@dataclass
class RecoveryTally:
    """What recovery did in one partition, in counts that sum (a summary of many partitions adds them up per
    topic): the commits it completed or rolled back and the segments they moved, the leftovers it deleted.
    ``partition`` is the partition's name, or ``""`` for the log dir and the work dir themselves."""

    partition: str
    #: replaces completed (rolled forward, or their swaps made live), the new segments they made live and the
    #: old ones they removed
    completed: int = 0
    made_live: int = 0
    replaced: int = 0
    #: replaces rolled back (their ``.cleaned`` / ``.swap`` files dropped), those files, the old segments put back
    rolled_back: int = 0
    dropped: int = 0
    restored: int = 0
    #: retention deletes finished, and the segments they renamed to ``.deleted``
    deletes: int = 0
    deleted: int = 0
    #: partitions whose unknown ``.deleted`` segments were entered in the deletion ledger
    ledgered: int = 0
    #: stale intents removed unapplied; roll-forwards the run that wrote the intent finished itself; intents
    #: removed with nothing else left to do
    discarded: int = 0
    settled_elsewhere: int = 0
    intents: int = 0
    #: leftovers no intent refers to, deleted: staged files, temporary files, unfinished uploads (and their bytes)
    staged: int = 0
    staged_bytes: int = 0
    temps: int = 0
    temp_bytes: int = 0
    uploads: int = 0
    upload_bytes: int = 0

    @property
    def topic(self) -> str:
        parsed = parse_partition_dir(self.partition)
        return "" if parsed is None else parsed[0]

    def __add__(self, other: "RecoveryTally") -> "RecoveryTally":
        """The sum of two tallies (``partition`` is this one's)."""
        return RecoveryTally(self.partition, *(getattr(self, f.name) + getattr(other, f.name)
                                               for f in fields(self) if f.name != "partition"))

    @classmethod
    def of(cls, partition: str, actions: Sequence[RecoveryAction]) -> "RecoveryTally":
        """The tally of ``actions``, all recovery did in one partition."""
        t = cls(partition)
        done = {a.action for a in actions}
        logs = {name: sum(1 for a in actions if a.action in name_set and _is_log(a.uri))
                for name, name_set in (("made_live", _MADE_LIVE), ("replaced", _REPLACED))}
        if done & _COMPLETING:
            t.completed, t.made_live, t.replaced = 1, logs["made_live"], logs["replaced"]
        if done & _ROLLING_BACK and not done & _COMPLETING:
            t.rolled_back = 1
        t.dropped = sum(1 for a in actions if a.action in ("drop-cleaned", "drop-swap"))
        t.restored = sum(1 for a in actions if a.action == "restore-old" and _is_log(a.uri))
        if "finish-delete" in done:
            t.deletes, t.deleted = 1, sum(1 for a in actions if a.action == "finish-delete" and _is_log(a.uri))
        elif "record-deleted" in done:
            t.ledgered = 1
        t.discarded = sum(1 for a in actions if a.action == "discard-intent")
        t.settled_elsewhere = sum(1 for a in actions if a.action == "settled-elsewhere")
        if "remove-intent" in done and not done & (_COMPLETING | _ROLLING_BACK | {"finish-delete"}):
            t.intents = 1
        for a in actions:
            if a.action in _LEFTOVER_FIELDS:
                count, size = _LEFTOVER_FIELDS[a.action]
                setattr(t, count, getattr(t, count) + 1)
                setattr(t, size, getattr(t, size) + (a.size or 0))
        return t


def _is_log(uri: str) -> bool:
    """Whether ``uri`` names a segment's ``.log`` file (live, or under a transient suffix): one segment."""
    parsed = parse_segment_file(uri.rsplit("/", 1)[-1])
    return parsed is not None and parsed[1] == LOG_SUFFIX


def tally_reports(reports: Iterable[RecoveryReport], log_dir_uri: str, work_uri: str) -> list[RecoveryTally]:
    """What :func:`recover_log_dir`'s ``reports`` did, per partition (by topic, then partition number), the log
    dir's own last: the log-dir step's actions on a partition's files in the work location (its private staging,
    its staged uploads) are counted with that partition's, so that every partition a crashed run left something
    of is named. Partitions where recovery did nothing are left out."""
    actions: dict[str, list[RecoveryAction]] = {}
    roots = [work_uri.rstrip("/") + "/" + d + "/" for d in (PRIVATE_STAGING_DIR, COMMIT_DIR)]
    for r in reports:
        if r.partition_uri != log_dir_uri:
            actions.setdefault(partition_name(r.partition_uri), []).extend(r.actions)
            continue
        for a in r.actions:
            owner = next((a.uri[len(root):].split("/", 1)[0] for root in roots if a.uri.startswith(root)), "")
            actions.setdefault(owner if parse_partition_dir(owner) is not None else "", []).append(a)
    tallies = [RecoveryTally.of(name, done) for name, done in actions.items() if done]

    def order(t: RecoveryTally) -> tuple[bool, str, int]:
        parsed = parse_partition_dir(t.partition)
        return (parsed is None, *(parsed or ("", 0)))

    return sorted(tallies, key=order)


def recover_partition(storage: Storage, partition_uri: str, *, work_uri: str, now_ms: int,
                      fence: Fence | None = None) -> RecoveryReport:
    """Complete or roll back the interrupted replace / delete of one partition (rules in the module
    docstring): :func:`plan_partition`, then :func:`apply_plan`. ``work_uri`` is the log dir's work location;
    ``fence`` the runs whose recent stagings are left alone. Idempotent. Raises
    :class:`~jobs.logdir.commit.RecoveryError` (changing nothing) when an intent is unreadable or names staged
    objects that are gone, and passes on the error of a step that fails (a rename or delete the store
    refuses): then the partition is left where that step stopped, which the next recovery takes up."""
    report = RecoveryReport(partition_uri)
    apply_plan(storage, plan_partition(storage, partition_uri, work_uri=work_uri, now_ms=now_ms, fence=fence), report)
    return report


def recover_log_dir(storage: Storage, log_dir_uri: str, *, now_ms: int, work_uri: str | None = None,
                    check: Callable[[], None] | None = None, fence: Fence | None = None,
                    listed: list[FileInfo] | None = None, dry_run: bool = False) -> list[RecoveryReport]:
    """:func:`recover_partition` for every partition of the log dir (those with files, and those with
    segjobs bookkeeping in the work location), then rule 7 for the log dir and the work location
    themselves. ``work_uri`` defaults to the log dir's sibling ``<log-dir>.segjobs``; ``check`` is called
    before each partition that recovery changes (or keeps something in, or reports) and before the log-dir step
    (the caller's lease check: it raises to stop). The plans are made by reads only, ahead of the changes: one
    recursive listing of the log dir and one of the commit dirs clear the partitions that show nothing to settle
    (:func:`clean_in_listing`), and the others are planned (:func:`plan_partition`), up to
    ``storage.io_concurrency`` partitions at once. The plans are applied one partition at a time in name order.
    With ``dry_run`` nothing is applied and the reports are the plans' (what a real run would report). One
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
    # What may run ahead: the reads and the plans made of them. First one recursive listing of the log dir and one
    # of the commit dirs, which clear most partitions without a request of their own (see clean_in_listing); then
    # the others' plans (up to io_concurrency partitions at once). What stays ordered: every change, partition by
    # partition in name order, each preceded by the lease check, so a lost lease stops recovery before the next
    # partition's first write. A partition with nothing to settle is not written to, so it needs no check. Reads
    # taken ahead stay true: a partition's recovery changes only its own files and commit dir, and the lease keeps
    # other runs out.
    clean = clean_in_listing(listed_root, listed, commit_root, commit_listed)
    plans = map_ahead(lambda uri: plan_partition(storage, uri, work_uri=work, now_ms=now_ms, fence=fence),
                      [p for p in partitions if partition_name(p) not in clean], storage.io_concurrency)
    for partition_uri in partitions:
        report = RecoveryReport(partition_uri)
        reports.append(report)
        if partition_name(partition_uri) in clean:
            continue
        plan = next(plans)
        if not plan.acts:
            continue
        if dry_run:
            reports[-1] = plan.dry_report()
            continue
        if check is not None:
            check()
        try:
            apply_plan(storage, plan, report)
        except StorageAccessError:
            raise  # the store itself cannot be used (credentials, endpoint): no partition would fare better
        except (SegjobsError, OSError) as exc:
            # One partition that cannot be settled must not hold the others back: it is reported with the state
            # it is in, left as it is (intent and staged files included, for a person to look at), and the jobs
            # leave it alone; the next recovery takes it up where this one stopped.
            report.error = stuck_error(storage, partition_uri, work, exc)
    if check is not None:
        check()
    top_plan = _plan_log_dir(storage, listed_root, listed, work, log_dir_uri)
    if dry_run:
        top = top_plan.dry_report()
    else:
        top = RecoveryReport(log_dir_uri)
        apply_plan(storage, top_plan, top)
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
    anything not understood, leaves the partition to the rules themselves (:func:`plan_partition`): a partition a
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
    intents: list[tuple[str, ReplaceIntent | DeleteIntent | RecoveryError | None]] = []
    for name, read in ((REPLACE_INTENT, read_replace_intent), (DELETE_INTENT, read_delete_intent)):
        try:
            intents.append((storage.join(pwork, name), read(storage, pwork)))
        except RecoveryError as exc:
            intents.append((storage.join(pwork, name), exc))
    return _state_words(intents, list_segment_files(storage, partition_uri), committer.leftover_staged(partition_uri),
                        storage.join(pwork, STAGED_DIR))


def _state_words(intents: Sequence[tuple[str, ReplaceIntent | DeleteIntent | RecoveryError | None]],
                 files: list[SegmentFile], staged: list[FileInfo], staged_dir: str) -> str | None:
    """:func:`unfinished_state` of what was read: the intents by URI (an error: unreadable; None: absent), the
    partition's segment files and the staged files."""
    parts = []
    for uri, intent in intents:
        if isinstance(intent, RecoveryError):
            parts.append(f"an unreadable intent {uri}")
        elif isinstance(intent, ReplaceIntent):
            parts.append(f"the replace intent {uri} (old segments {sorted(intent.old)} -> new {sorted(intent.new)})")
        elif isinstance(intent, DeleteIntent):
            parts.append(f"the delete intent {uri} (segments {list(intent.base_offsets)})")
    transient = {sfx: [f for f in files if f.transient == sfx] for sfx in (CLEANED_SUFFIX, SWAP_SUFFIX)}
    if not parts and not any(transient.values()) and not staged:
        return None
    transient[DELETED_SUFFIX] = [f for f in files if f.transient == DELETED_SUFFIX]
    for sfx, found in transient.items():
        if found:
            parts.append(f"{len(found)} {sfx} file(s) of segment(s) {sorted({f.base_offset for f in found})}")
    if staged:
        parts.append(f"{len(staged)} staged object(s) under {staged_dir}")
    return "; ".join(parts)


def describe_stuck(storage: Storage, partition_uri: str, work_uri: str,
                   exc: BaseException | str) -> tuple[str, bool]:
    """The report of a partition whose commit or recovery stopped at ``exc``: the cause, the state the partition
    is left in and what to do about it; and whether it is left mid-commit."""
    try:
        state = unfinished_state(storage, partition_uri, work_uri)
    except (SegjobsError, OSError) as e:  # the report must not fail as well: say what is known
        state = f"a state that could not be read ({e})"
    return _stuck_words(exc, state)


def _stuck_words(exc: BaseException | str, state: str | None) -> tuple[str, bool]:
    if state is None:
        return f"{exc}; the partition is left with no commit unfinished", False
    return (f"{exc}; the partition is left mid-commit, with {state}; fix the cause and run `segjobs recover`, which "
            f"completes or rolls back what is there (until then no segjobs run changes this partition)", True)


def stuck_error(storage: Storage, partition_uri: str, work_uri: str, exc: BaseException) -> RecoveryError:
    """:func:`describe_stuck` as the error of the partition's recovery report."""
    return RecoveryError(describe_stuck(storage, partition_uri, work_uri, exc)[0])


# --------------------------------------------------------------------------------------------------
# Plans: what recovery does, decided from what it read
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One change of a :class:`RecoveryPlan`. ``op`` is what is done to ``target``: ``delete``; ``rename`` or
    ``copy`` from ``source``; ``sync`` (a directory's entries reach the disk); ``write-ledger`` (``target`` is the
    partition's commit dir, ``ledger`` the whole deletion ledger to write there); ``abort-upload`` (``upload``); or
    ``report`` (nothing to do: a finding, such as ``settled-elsewhere``). ``action`` is what the report says once
    the step is done (None: nothing, as for a directory sync)."""

    op: str
    target: str
    action: RecoveryAction | None = None
    source: str = ""
    #: removes a leftover nothing refers to: a store that refuses leaves it harmless where it is (a problem noted)
    leftover: bool = False
    #: one of the steps that roll an S3 replace intent forward: skipped once the run that wrote it finished it
    roll_forward: bool = False
    ledger: tuple[tuple[int, int], ...] = ()
    upload: PendingUpload | None = None


@dataclass(frozen=True)
class RecoveryPlan:
    """What recovery does in one partition (or in the log dir and work dir themselves), in order: a pure function
    of what it read there (listings, intents, the deletion ledger, the last offsets of ``.swap`` logs), ``now_ms``
    and the fence, each rule deciding on the state the earlier ones leave. A dry run reports it
    (:meth:`dry_report`); a real run carries it out (:func:`apply_plan`)."""

    partition_uri: str
    steps: tuple[Step, ...] = ()
    #: what recovery deliberately leaves for later (another run's recent stagings)
    notes: tuple[str, ...] = ()
    #: see :attr:`RecoveryReport.warnings`
    warnings: tuple[str, ...] = ()
    #: where the plan stops: something left that cannot be settled. A real run raises it after the steps before it.
    error: Exception | None = None
    #: ``error`` as a dry run reports it, with the state the steps before it leave the partition in
    stuck: RecoveryError | None = None
    #: the S3 replace intent the steps roll forward, and its URI: read again should a staged object vanish
    rolled: ReplaceIntent | None = None
    rolled_uri: str = ""
    #: the files the partition dir, its commit dir and its staging hold once the steps are done, as the plan
    #: foresees them (what the reads found, changed by the steps)
    leaves: frozenset[str] = frozenset()

    @property
    def actions(self) -> list[RecoveryAction]:
        """What the report says the steps did, in order."""
        return [s.action for s in self.steps if s.action is not None]

    @property
    def acts(self) -> bool:
        """Whether recovery changes, keeps or reports anything here: a partition where it does not needs neither
        a lease check nor a write."""
        return bool(self.steps or self.notes or self.error is not None)

    def dry_report(self) -> RecoveryReport:
        """The report of a dry run: exactly what :func:`apply_plan` would report, had no store refused a step."""
        return RecoveryReport(self.partition_uri, self.actions, error=self.stuck, notes=list(self.notes),
                              warnings=list(self.warnings))


@dataclass(frozen=True)
class _Reads:
    """Everything a partition's recovery decides from, read before anything changes."""

    partition_uri: str
    pwork: str
    replace_uri: str
    delete_uri: str
    ledger_uri: str
    staged_dir: str
    replace: ReplaceIntent | None
    delete: DeleteIntent | None
    partition_files: list[FileInfo]  #: the partition dir's own files
    work_files: list[FileInfo]  #: everything in its commit dir
    staged: list[FileInfo]  #: the committer's staged files (:meth:`~jobs.logdir.commit.Committer.leftover_staged`)
    #: the deletion ledger, or why it cannot be read (the rule that needs it stops there)
    ledger: dict[int, int] | Exception
    #: one past the last offset of each ``.log.swap`` file, or why it cannot be read
    swap_ends: dict[str, int | Exception]
    #: the replace intent read again after a staged object it names was found missing (see :func:`_roll_forward`)
    replace_again: ReplaceIntent | Exception | None = None


def _value_or_error(read: Callable[[], T]) -> T | Exception:
    """What ``read`` returns, or the error it raises, kept for the rule that needs it: that rule stops there, after
    the rules before it. The store's own failures (credentials, endpoint) are raised at once."""
    try:
        return read()
    except StorageAccessError:
        raise
    except (SegjobsError, OSError) as exc:
        return exc


def _known(value: T | Exception) -> T:
    if isinstance(value, Exception):
        raise value
    return value


def _read_partition(storage: Storage, committer: Committer, partition_uri: str) -> _Reads:
    """The reads of one partition's recovery, intents first (a staged object missing after the intent was read is
    one its writer has since removed, with the intent)."""
    pwork = committer.partition_work_uri(partition_uri)
    replace = read_replace_intent(storage, pwork)
    delete = read_delete_intent(storage, pwork)
    partition_files = storage.list(partition_uri)
    staged = committer.leftover_staged(partition_uri)
    swap_ends: dict[str, int | Exception] = {}
    for info in partition_files:
        parsed = parse_segment_file(info.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX and parsed[2] == SWAP_SUFFIX:
            swap_ends[info.uri] = _value_or_error(partial(_next_offset, storage, info.uri, parsed[0]))
    replace_uri = storage.join(pwork, REPLACE_INTENT)
    replace_again: ReplaceIntent | Exception | None = replace
    if replace is not None:
        listed = {i.uri for i in staged}
        steps = committer.roll_forward_steps(partition_uri, replace) or []
        if any(s.source is not None and s.source not in listed for s in steps):
            replace_again = _value_or_error(lambda: read_replace_intent(storage, pwork))
    return _Reads(partition_uri, pwork, replace_uri, storage.join(pwork, DELETE_INTENT),
                  storage.join(pwork, DELETED_LEDGER), storage.join(pwork, STAGED_DIR), replace, delete,
                  partition_files, storage.list(pwork, recursive=True), staged,
                  _value_or_error(lambda: read_ledger(storage, pwork)), swap_ends, replace_again)


class _View:
    """One partition as its reads found it, changed by every step planned so far: each rule decides on the state
    the earlier ones leave, as it would on the store."""

    def __init__(self, reads: _Reads) -> None:
        self.reads = reads
        self.partition = {i.uri: i for i in reads.partition_files}
        self.work = {i.uri: i for i in reads.work_files}
        self.staged = {i.uri: i for i in reads.staged}
        self.ledger = reads.ledger
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self.warnings: list[str] = []

    def segment_files(self) -> list[SegmentFile]:
        """What :func:`~jobs.logdir.commit.list_segment_files` would list now."""
        out = []
        for uri in sorted(self.partition):
            parsed = parse_segment_file(self.partition[uri].name)
            if parsed is not None:
                out.append(SegmentFile(self.partition[uri], *parsed))
        return out

    def files(self) -> list[FileInfo]:
        """The partition dir's files, then its commit dir's (both in name order), as they are now."""
        return [self.partition[u] for u in sorted(self.partition)] + [self.work[u] for u in sorted(self.work)]

    def _take(self, uri: str) -> FileInfo | None:
        found = [d.pop(uri) for d in (self.partition, self.work, self.staged) if uri in d]
        return found[0] if found else None

    def add(self, op: str, target: str, action: str | None = None, detail: str = "", size: int | None = None,
            **step: Any) -> None:
        report = None if action is None else RecoveryAction(action, target, detail, size)
        self.steps.append(Step(op, target, report, **step))

    def delete(self, uri: str, action: str, detail: str = "", size: int | None = None, *, leftover: bool = False,
               roll_forward: bool = False) -> None:
        self._take(uri)
        self.add("delete", uri, action, detail, size, leftover=leftover, roll_forward=roll_forward)

    def rename(self, src: str, dst: str, action: str) -> None:
        info = self._take(src)
        if info is not None:
            self.partition[dst] = replace(info, uri=dst)
        self.add("rename", dst, action, source=src)

    def copy(self, src: str, dst: str, action: str, *, roll_forward: bool = False) -> None:
        info = self.staged.get(src) or self.work.get(src) or self.partition.get(src)
        if info is not None:
            self.partition[dst] = replace(info, uri=dst)
        self.add("copy", dst, action, source=src, roll_forward=roll_forward)

    def sync(self) -> None:
        self.add("sync", self.reads.partition_uri)

    def record_deleted(self, bases: Iterable[int], now_ms: int, detail: str) -> None:
        """Enter ``bases`` in the deletion ledger at ``now_ms`` unless already there (an entry keeps its earlier
        time: the delay never restarts)."""
        ledger = _known(self.ledger)
        missing = [b for b in bases if b not in ledger]
        if not missing:
            return
        self.ledger = {**ledger, **{b: now_ms for b in missing}}
        self.work[self.reads.ledger_uri] = FileInfo(self.reads.ledger_uri, 0, 0)
        self.steps.append(Step("write-ledger", self.reads.pwork,
                               RecoveryAction("record-deleted", self.reads.ledger_uri, detail),
                               ledger=tuple(sorted(self.ledger.items()))))

    def leaves(self) -> frozenset[str]:
        return frozenset(self.partition) | frozenset(self.work) | frozenset(self.staged)

    def swap_end(self, f: SegmentFile) -> int:
        return _known(self.reads.swap_ends[f.uri])

    def state(self) -> str | None:
        """:func:`unfinished_state` of the partition as the steps so far leave it."""
        r = self.reads
        intents = [(r.replace_uri, r.replace if r.replace_uri in self.work else None),
                   (r.delete_uri, r.delete if r.delete_uri in self.work else None)]
        return _state_words(intents, self.segment_files(), list(self.staged.values()), r.staged_dir)


def plan_partition(storage: Storage, partition_uri: str, *, work_uri: str, now_ms: int,
                   fence: Fence | None = None) -> RecoveryPlan:
    """Recovery's plan for one partition (the rules of the module docstring): its reads, then the decisions, a
    function of them. Reads only, so it may run ahead, on many partitions at once, and after the lease is lost.
    Raises :class:`~segment_io.errors.StorageAccessError` (the store cannot be used); anything else that stops
    recovery in the partition is the plan's ``error``."""
    committer = committer_for(storage, work_uri)
    try:
        reads = _read_partition(storage, committer, partition_uri)
    except StorageAccessError:
        raise
    except (SegjobsError, OSError) as exc:
        return RecoveryPlan(partition_uri, error=exc, stuck=stuck_error(storage, partition_uri, work_uri, exc))
    view = _View(reads)
    try:
        _plan_rules(view, committer, now_ms, fence or Fence())
    except (SegjobsError, OSError) as exc:
        return RecoveryPlan(partition_uri, tuple(view.steps), tuple(view.notes), tuple(view.warnings), exc,
                            RecoveryError(_stuck_words(exc, view.state())[0]), leaves=view.leaves())
    return RecoveryPlan(partition_uri, tuple(view.steps), tuple(view.notes), tuple(view.warnings),
                        rolled=reads.replace if any(s.roll_forward for s in view.steps) else None,
                        rolled_uri=reads.replace_uri, leaves=view.leaves())


def _plan_rules(view: _View, committer: Committer, now_ms: int, fence: Fence) -> None:
    """The rules of the module docstring for one partition, planned into ``view``."""
    reads = view.reads
    replace = reads.replace
    # the staged files of this partition's intent: once it is settled they are garbage, whoever staged them
    settled = set() if replace is None else {(replace.run_id, segment_file_name(b, sfx)) for b, sfx in
                                             replace.new_files()}
    if replace is not None:  # rule 1: a store whose commit point is the intent finishes it from the intent
        replace = _roll_forward(view, committer, replace)
    stale = None if replace is None else _intent_disagreement(view, replace)
    outcome = _loader_rules(view, replace if stale is None else None)
    if replace is not None:
        if stale is not None:
            # The partition moved on without segjobs (a broker finished this replace, then wrote, cleaned or
            # deleted on its own): the intent describes files that are not there any more. It is never applied;
            # Kafka's rules alone decided above, and .deleted files go through the deletion ledger.
            view.delete(reads.replace_uri, "discard-intent", f"stale: {stale}; Kafka's loader rules decided instead")
        else:
            if outcome is not None or _new_segments_live(view, replace):
                _settle_replaced(view, replace, aborted=outcome == "aborted")
            view.delete(reads.replace_uri, "remove-intent")
    for info in sorted(view.staged.values(), key=lambda i: i.uri):
        run = committer.staging_run(reads.partition_uri, info.uri)
        young = fence.wall_ms - info.mtime_ms < STAGED_GRACE_MS
        if run is not None and run in fence.runs and (run, info.name) not in settled and young:
            # Staged by the run whose lease was just taken over, recently: that run may still be staging, or be
            # caught between its lease check and its intent. Left alone; a later recovery deletes it.
            view.notes.append(f"kept {info.uri}: staged {format_instant(info.mtime_ms)} by run {run}, "
                              f"{fence.whose(run)}; deleted by a run from "
                              f"{format_instant(info.mtime_ms + STAGED_GRACE_MS)} on")
        else:
            view.delete(info.uri, "delete-staged", "staged by a commit that is over or never started", info.size,
                        leftover=True)
    if reads.delete is not None:
        _finish_delete(view, reads.delete)
    unknown = sorted(deleted_bases(view.segment_files()) - _known(view.ledger).keys())
    if unknown:
        view.record_deleted(unknown, now_ms,
                            f"{len(unknown)} .deleted segment(s) first seen at {format_instant(now_ms)}")
    for info in view.files():
        if is_temp_file(info.name):
            view.delete(info.uri, "delete-temp", TEMP_WHY, info.size, leftover=True)


def apply_plan(storage: Storage, plan: RecoveryPlan, report: RecoveryReport) -> None:
    """Carry out ``plan``'s steps in order, each reported once done, then raise the error the plan stops at, if
    any. A leftover the store refuses to delete is noted in ``report.problems`` and the steps go on; any other
    refusal is raised, leaving the partition where that step stopped (the next recovery takes it up there). When
    a staged object vanishes while an S3 replace intent is rolled forward, the run that wrote the intent was
    finishing it at the same time (its lease was taken over mid-commit): once that run has removed the intent the
    rest of the roll-forward is its, and is skipped (``settled-elsewhere``)."""
    settled_elsewhere = False
    report.notes.extend(plan.notes)
    report.warnings.extend(plan.warnings)
    for step in plan.steps:
        if step.roll_forward and settled_elsewhere:
            continue
        try:
            _carry_out(storage, step)
        except StorageAccessError:
            raise  # the store itself cannot be used: no step would fare better
        except NotFoundError as exc:
            if not step.roll_forward:
                _refused(step, exc, report)
                continue
            if plan.rolled is None or not _settled_elsewhere(storage, plan.rolled_uri, plan.rolled):
                raise RecoveryError(f"a staged object of the replace intent vanished while it was copied ({exc})",
                                    uri=plan.rolled_uri) from None
            report.add("settled-elsewhere", plan.rolled_uri)
            settled_elsewhere = True
            continue
        except (SegjobsError, OSError) as exc:
            _refused(step, exc, report)
            continue
        if step.action is not None:
            report.actions.append(step.action)
    if plan.error is not None:
        raise plan.error


def _refused(step: Step, exc: Exception, report: RecoveryReport) -> None:
    """A step the store refused: a leftover stays harmless where it is (noted); anything else stops the plan."""
    if not step.leftover or step.action is None:
        raise exc
    report.problems.append(f"could not delete the leftover {step.target} ({step.action.detail}): {exc}")


def _carry_out(storage: Storage, step: Step) -> None:
    if step.op == "delete":
        storage.delete(step.target)
    elif step.op == "rename":
        storage.rename(step.source, step.target)
    elif step.op == "copy":
        storage.copy(step.source, step.target)
    elif step.op == "sync":
        storage.sync_dir(step.target)
    elif step.op == "write-ledger":
        write_ledger(storage, step.target, dict(step.ledger))
    elif step.op == "abort-upload" and step.upload is not None:
        storage.abort_pending_upload(step.upload)


def _settled_elsewhere(storage: Storage, intent_uri: str, intent: ReplaceIntent) -> bool:
    """Whether the intent is gone or replaced since it was read: then the run that wrote it finished it (and
    removes its staged objects), and there is nothing left to roll forward."""
    current = read_json_or_none(storage, intent_uri)
    return current is None or ReplaceIntent.from_json(current, intent_uri) != intent


# --------------------------------------------------------------------------------------------------
# The rules, planned on a view of the partition
# --------------------------------------------------------------------------------------------------

TEMP_WHY = "temporary file of an interrupted write"


def _live_name(f: SegmentFile) -> str:
    return f.uri[: -len(f.transient)]


def _next_offset(storage: Storage, uri: str, base_offset: int) -> int:
    """One past the last offset in a segment's log (its base offset when it holds no batch): the end of
    the range a ``.swap`` segment replaces, by Kafka's rule."""
    headers = scan_batches(storage.read(uri), path=uri)
    return int(headers.last_offset.max()) + 1 if len(headers) else base_offset


def _roll_forward(view: _View, committer: Committer, intent: ReplaceIntent) -> ReplaceIntent | None:
    """Rule 1: on a store whose commit point is the intent, finish the replace from the intent alone - copy every
    staged object to its live name again (idempotent), delete the old objects no new one overwrote, remove the
    intent; the staged objects stay for the leftover rule. Returns the intent when Kafka's loader rules must still
    settle it (local disk), None when it is settled. Stops (changing nothing) when a staged object is gone or has
    another size than the intent recorded - unless the intent itself is gone since: then the run that wrote it
    finished it (``settled-elsewhere``)."""
    reads = view.reads
    steps = committer.roll_forward_steps(reads.partition_uri, intent)
    if steps is None:
        return intent
    for s in steps:
        if s.source is None:
            continue
        info = view.staged.get(s.source)
        if info is None:
            if _known(reads.replace_again) != intent:
                view.add("report", reads.replace_uri, "settled-elsewhere")
                return None
            raise RecoveryError("the replace intent names a staged object that is gone", uri=s.source,
                                offset=s.base_offset)
        if info.size != s.size:
            raise RecoveryError(f"staged object has {info.size} bytes, the intent recorded {s.size}", uri=s.source,
                                offset=s.base_offset)
    for s in steps:
        if s.source is not None:
            view.copy(s.source, s.target, "copy-new", roll_forward=True)
        else:
            view.delete(s.target, "delete-old", roll_forward=True)
    view.delete(reads.replace_uri, "remove-intent", roll_forward=True)
    return None


def _loader_rules(view: _View, intent: ReplaceIntent | None) -> str | None:
    """Kafka's ``LogLoader`` handling of ``.cleaned`` / ``.swap`` files. Returns ``"aborted"`` when only
    discarded swaps were found, ``"completed"`` when swaps were made live, None when there were neither."""
    files = view.segment_files()
    cleaned = [f for f in files if f.transient == CLEANED_SUFFIX]
    swaps = [f for f in files if f.transient == SWAP_SUFFIX]
    if not cleaned and not swaps:
        return None
    min_cleaned = min((f.base_offset for f in cleaned), default=None)
    valid: list[SegmentFile] = []
    for f in swaps:
        if min_cleaned is not None and f.base_offset >= min_cleaned:
            view.delete(f.uri, "drop-swap", f"at or above the lowest .cleaned offset {min_cleaned}", f.info.size)
        else:
            valid.append(f)
    for f in cleaned:
        view.delete(f.uri, "drop-cleaned", size=f.info.size)

    log_swaps = [f for f in valid if f.suffix == LOG_SUFFIX]
    if log_swaps:
        start = min(f.base_offset for f in log_swaps)
        end = max(view.swap_end(f) for f in log_swaps)
        live = [f for f in files if f.transient == "" and f.is_data]
        replaced = []
        for f in live:
            # Kafka's range rule always holds (no live segment may overlap a swap); a verified intent also names
            # old segments past the swaps' last offset, whose records the new segments dropped.
            if start <= f.base_offset < end:
                why = f"inside the swap range [{start}, {end})"
            elif intent is not None and f.base_offset in intent.old and f.base_offset >= start:
                why = "an old segment of the replace intent"
            else:
                continue
            view.delete(f.uri, "drop-original", why, f.info.size)
            if f.suffix == LOG_SUFFIX:
                replaced.append(f)
        if intent is None:
            view.warnings.append(_foreign_swap_warning(view.reads.partition_uri, log_swaps, replaced, start, end))
    # Ascending bases, ``.log`` first within a segment (Kafka's order, and the commit's): a recovery killed midway
    # never leaves a new index live beside its segment's remaining ``.log.swap``, where the next recovery would take
    # it for an original inside the swap range and delete it.
    for f in sorted(valid, key=lambda f: (f.base_offset, SEGMENT_SUFFIXES.index(f.suffix), f.uri)):
        view.rename(f.uri, _live_name(f), "complete-swap")
    view.sync()
    return "completed" if valid else "aborted"


def _foreign_swap_warning(partition_uri: str, swaps: Sequence[SegmentFile], replaced: Sequence[SegmentFile],
                          start: int, end: int) -> str:
    """What a person must know when recovery makes live a ``.swap`` that no segjobs run left (no intent names it):
    live segments are deleted for it on Kafka's rule alone (a broker's cleaner killed mid-swap; its loader does
    the same on start-up), and a ``.swap`` that came from anything else (a copy, a person) takes records with it."""
    size = sum(f.info.size for f in swaps)
    old = sum(f.info.size for f in replaced)
    made_live = (f"{partition_uri}: recovery made live {len(swaps)} .swap segment(s) no segjobs run left "
                 f"({', '.join(f.info.name for f in swaps)}, {size} bytes)")
    if not replaced:  # a broker's cleaner killed after its old segments became .deleted: nothing live goes
        return (f"{made_live}, as a broker's loader does on start-up; no live segment of offsets [{start}, {end}) "
                f"was left to replace (what a broker's log cleaner killed after renaming its old segments to "
                f".deleted leaves), so nothing live was deleted")
    return (f"{made_live}, replacing the {len(replaced)} live "
            f"segment(s) of offsets [{start}, {end}) ({old} bytes), as a broker's loader does on start-up: what a "
            f"broker's log cleaner killed mid-swap leaves. If the .swap came from anything else (a copy, a person), "
            f"records of those segments it does not hold are gone: `segjobs recover --dry-run` names every file "
            f"before a run changes them")


def _intent_disagreement(view: _View, intent: ReplaceIntent) -> str | None:
    """Why the partition's files are not a state that the local replace ``intent`` can have left, or None
    when they are. A replace leaves its new files as ``.cleaned``, ``.swap`` or live files of exactly the
    sizes the intent recorded, each ``.log`` within the run it replaces; anything else (a ``.swap`` of
    another size, or reaching past the replaced run) was made by someone else, typically a broker that
    finished this replace on start-up and whose own cleaner was interrupted later."""
    files = view.segment_files()
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
        end = view.swap_end(f)
        if bound is not None and end > bound:
            return (f"{f.info.name} holds offsets up to {end - 1}, past {bound} where the segment after it "
                    f"begins")
    return None


def _new_segments_live(view: _View, intent: ReplaceIntent) -> bool:
    """Whether every new file of ``intent`` is live with the size it recorded: the replace went through."""
    live = {(f.base_offset, f.suffix): f.info.size for f in view.segment_files() if f.transient == ""}
    return all(live.get((b, sfx)) == size for b, sizes in intent.new.items() for sfx, size in sizes.items())


def _settle_replaced(view: _View, intent: ReplaceIntent, *, aborted: bool) -> None:
    """The old segments of a local replace: gone for good once it completed, put back if it aborted."""
    old_files = intent.old_files()
    files = view.segment_files()
    live_names = {f.uri for f in files if f.transient == ""}
    for f in files:
        if f.transient != DELETED_SUFFIX or (f.base_offset, f.suffix) not in old_files:
            continue
        if not aborted:
            view.delete(f.uri, "purge-replaced", size=f.info.size)
        elif _live_name(f) not in live_names:
            view.rename(f.uri, _live_name(f), "restore-old")
    view.sync()


def _finish_delete(view: _View, intent: DeleteIntent) -> None:
    files = view.segment_files()
    targets = set(intent.base_offsets)
    if not [b for b in live_log_bases(files) if b not in targets]:
        raise RecoveryError("finishing the interrupted delete would leave no live segment",
                            uri=view.reads.partition_uri, offset=max(targets))
    for base in sorted(targets):
        todo = [f for f in files if f.base_offset == base and f.transient == "" and f.is_data]
        for f in todo:
            # On S3 a rename is copy + delete: a .deleted copy may already exist; renaming again is harmless.
            view.rename(f.uri, f.uri + DELETED_SUFFIX, "finish-delete")
        if todo:
            view.sync()
    view.record_deleted(sorted(targets), intent.now_ms, f"deleted at {format_instant(intent.now_ms)}")
    view.delete(view.reads.delete_uri, "remove-intent")


def _plan_log_dir(storage: Storage, listed_root: str, listed: list[FileInfo], work: str,
                  log_dir_uri: str) -> RecoveryPlan:
    """Rule 7 for the log dir and the work location themselves: the log dir's own temporary files (from
    ``listed``, its recursive listing under ``listed_root``), the private staging area, temporary files of the work
    location outside the partitions' commit dirs, and uploads begun there and never completed."""
    steps = []
    root = listed_root.rstrip("/") + "/"
    for info in listed:  # the log dir's own files: no partition's recovery changed them
        if info.kind == KIND_FILE and info.uri.startswith(root) and "/" not in info.uri[len(root):] \
                and is_temp_file(info.name):
            steps.append(_leftover(info, "delete-temp", TEMP_WHY))
    commit_root = storage.join(work, COMMIT_DIR) + "/"
    staging_root = storage.join(work, PRIVATE_STAGING_DIR) + "/"
    for info in storage.list(work, recursive=True):
        if info.uri.startswith(staging_root):
            steps.append(_leftover(info, "delete-staged", "private staging of an interrupted compaction"))
        elif not info.uri.startswith(commit_root) and is_temp_file(info.name):  # commit dirs: the partitions'
            steps.append(_leftover(info, "delete-temp", TEMP_WHY))
    for upload in storage.list_pending_uploads(work):
        steps.append(Step("abort-upload", upload.uri, RecoveryAction(
            "abort-upload", upload.uri, f"an upload begun {format_instant(upload.initiated_ms)} and never completed",
            upload.size), upload=upload))
    return RecoveryPlan(log_dir_uri, tuple(steps))


def _leftover(info: FileInfo, action: str, why: str) -> Step:
    """Deleting a leftover nothing refers to (one the store refuses to delete is harmless where it is)."""
    return Step("delete", info.uri, RecoveryAction(action, info.uri, why, info.size), leftover=True)


__all__ = ["LEFTOVER_ACTIONS", "Fence", "RecoveryAction", "RecoveryPlan", "RecoveryReport", "RecoveryTally",
           "STAGED_GRACE_MS", "Step", "apply_plan", "clean_in_listing", "fence_of", "fence_to_take_over",
           "plan_partition", "recover_log_dir", "recover_partition", "describe_stuck", "stuck_error", "tally_reports",
           "unfinished_state"]
