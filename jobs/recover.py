"""Recovery: finish or undo whatever an interrupted replace or delete left in a partition.

Run by ``segjobs recover`` and at the start of every job, under the log dir's lock. Rules, in order:

1. **S3 replace intent** (``replace.json`` on a store without rename): roll forward from the intent alone -
   copy every staged object to its live name, delete the old objects no new one overwrote, remove the
   intent (see :mod:`jobs.commit`). Staged objects with no intent left are deleted afterwards.
2. **Kafka's loader rules** for ``.cleaned`` / ``.swap`` files (what ``LogLoader`` does when a broker
   starts, so a broker and segjobs agree on the outcome): delete every ``.swap`` at or above the lowest
   ``.cleaned`` offset and every ``.cleaned`` file (the replace had not reached its commit point: the old
   segments are untouched); for the remaining swaps, delete the live originals they replace and rename the
   swaps to live names. The originals in a swap's range are, with a local replace intent, exactly the
   intent's old segments at or above the lowest remaining ``.log.swap``; without one, Kafka's own rule:
   live files whose base offset lies in [lowest swap base, highest swap next offset). Producer snapshots
   are kept either way (a broker rebuilds them; segjobs never needs to drop them).
3. **Local replace intent**: once the swaps are live, unlink the old segments' ``.deleted`` files; if the
   replace was aborted instead, put back any old ``.deleted`` file whose live name is free (never needed
   by the protocol, but then no record ever depends on luck). Remove the intent.
4. **Delete intent**: roll forward - rename the intent's remaining live segments to ``.deleted``, enter them
   in the deletion ledger at the intent's ``now_ms``, remove the intent.
5. ``.deleted`` segments the ledger does not know are entered at ``now_ms``, so ``file.delete.delay.ms``
   counts from when segjobs first saw them.

Every rule only acts on what it finds, so running recovery again changes nothing. No rule deletes the only
copy of a record: ``.cleaned`` and aborted ``.swap`` files are copies of records whose originals are still
live; originals are deleted only while their replacements exist as swaps or staged objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from segment_io.format import scan_batches
from segment_io.layout import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, parse_partition_dir
from segment_io.storage.base import Storage

from jobs.commit import (
    DELETE_INTENT,
    DELETED_LEDGER,
    REPLACE_INTENT,
    STAGED_DIR,
    COMMIT_DIR,
    LOG_SUFFIX,
    DeleteIntent,
    RecoveryError,
    ReplaceIntent,
    SegmentFile,
    deleted_bases,
    finish_replace_by_copy,
    list_segment_files,
    live_log_bases,
    partition_work_uri,
    read_delete_intent,
    read_ledger,
    read_replace_intent,
    record_deleted,
)
from jobs.lock import work_uri as log_dir_work_uri


@dataclass(frozen=True)
class RecoveryAction:
    """One change recovery made. ``action`` is one of: ``copy-new``, ``delete-old``, ``delete-staged``,
    ``drop-swap``, ``drop-cleaned``, ``drop-original``, ``complete-swap``, ``purge-replaced``,
    ``restore-old``, ``finish-delete``, ``record-deleted``, ``remove-intent``."""

    action: str
    uri: str
    detail: str = ""


@dataclass
class RecoveryReport:
    """Everything recovery did in one partition (nothing, when it was clean)."""

    partition_uri: str
    actions: list[RecoveryAction] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    def add(self, action: str, uri: str, detail: str = "") -> None:
        self.actions.append(RecoveryAction(action, uri, detail))


def recover_partition(storage: Storage, partition_uri: str, *, work_uri: str, now_ms: int) -> RecoveryReport:
    """Complete or roll back the interrupted replace / delete of one partition (rules in the module
    docstring). ``work_uri`` is the log dir's work location. Idempotent. Raises
    :class:`~jobs.commit.RecoveryError` (changing nothing) when an intent is unreadable or names staged
    objects that are gone."""
    report = RecoveryReport(partition_uri)
    pwork = partition_work_uri(storage, work_uri, partition_uri)
    replace = read_replace_intent(storage, pwork)
    delete = read_delete_intent(storage, pwork)

    if replace is not None and not storage.atomic_rename:
        for action, uri in finish_replace_by_copy(storage, partition_uri, work_uri, replace):
            report.add(action, uri)
        _remove(storage, storage.join(pwork, REPLACE_INTENT), report)
        replace = None
    outcome = _apply_loader_rules(storage, partition_uri, replace, report)
    if replace is not None:
        _settle_replaced(storage, partition_uri, replace, aborted=outcome == "aborted", report=report)
        _remove(storage, storage.join(pwork, REPLACE_INTENT), report)
    if not storage.atomic_rename:
        for info in storage.list(storage.join(pwork, STAGED_DIR)):
            storage.delete(info.uri)
            report.add("delete-staged", info.uri)
    if delete is not None:
        _finish_delete(storage, partition_uri, pwork, delete, report)
    files = list_segment_files(storage, partition_uri)
    unknown = sorted(deleted_bases(files) - read_ledger(storage, pwork).keys())
    if unknown and record_deleted(storage, pwork, unknown, now_ms):
        report.add("record-deleted", storage.join(pwork, DELETED_LEDGER),
                   f"{len(unknown)} .deleted segment(s) first seen at {now_ms}")
    return report


def recover_log_dir(storage: Storage, log_dir_uri: str, *, now_ms: int,
                    work_uri: str | None = None) -> list[RecoveryReport]:
    """:func:`recover_partition` for every partition of the log dir (those with files, and those with
    segjobs bookkeeping in the work location). ``work_uri`` defaults to the log dir's sibling
    ``<log-dir>.segjobs``. One report per partition, in name order."""
    work = work_uri if work_uri is not None else log_dir_work_uri(log_dir_uri)
    names = {d.rstrip("/").rsplit("/", 1)[-1] for d in storage.list_dirs(log_dir_uri)}
    names |= {d.rstrip("/").rsplit("/", 1)[-1] for d in storage.list_dirs(storage.join(work, COMMIT_DIR))}
    return [recover_partition(storage, storage.join(log_dir_uri, name), work_uri=work, now_ms=now_ms)
            for name in sorted(n for n in names if parse_partition_dir(n) is not None)]


# --------------------------------------------------------------------------------------------------


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
            report.add("drop-swap", f.uri, f"at or above the lowest .cleaned offset {min_cleaned}")
        else:
            valid.append(f)
    for f in cleaned:
        storage.delete(f.uri)
        report.add("drop-cleaned", f.uri)

    log_swaps = [f for f in valid if f.suffix == LOG_SUFFIX]
    if log_swaps:
        start = min(f.base_offset for f in log_swaps)
        live = [f for f in files if f.transient == "" and f.is_data]
        if intent is not None and {f.base_offset for f in log_swaps} <= intent.new.keys():
            doomed = [f for f in live if f.base_offset in intent.old and f.base_offset >= start]
            why = "an old segment of the replace intent"
        else:
            end = max(_next_offset(storage, f) for f in log_swaps)
            doomed = [f for f in live if start <= f.base_offset < end]
            why = f"inside the swap range [{start}, {end})"
        for f in doomed:
            storage.delete(f.uri)
            report.add("drop-original", f.uri, why)
    for f in sorted(valid, key=lambda f: f.uri):
        storage.rename(f.uri, _live_name(f))
        report.add("complete-swap", _live_name(f))
    storage.sync_dir(partition_uri)
    return "completed" if valid else "aborted"


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
            report.add("purge-replaced", f.uri)
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


__all__ = ["RecoveryAction", "RecoveryReport", "recover_log_dir", "recover_partition"]
