"""--log-dir's usual mistakes (a file, a partition directory, a missing dir, a dir that cannot be written), caught
before any work."""

from __future__ import annotations

import os
from typing import Callable

from jobs.logdir.lock import work_uri
from segment_io.errors import IrregularEntryError, NotWritableError, StorageError, UsageError
from segment_io.layout import (
    META_PROPERTIES,
    LogDirListing,
    log_dirs_near,
    parse_partition_dir,
    parse_segment_file,
    rejected_partition_dir_error,
    rejected_partition_key,
)
from segment_io.storage.base import Storage
from segment_io.storage.local import storage_error, temp_name


def check_log_dir_is_dir(storage: Storage, log_dir: str) -> None:
    """``UsageError`` when ``--log-dir`` names a file (a segment file, most likely) or a missing local dir."""
    if storage.exists(log_dir):
        parent, _, name = log_dir.rpartition("/")
        grand, _, pdir = parent.rpartition("/")
        if parse_segment_file(name) is not None and parse_partition_dir(pdir) is not None:
            raise UsageError(f"--log-dir {log_dir} is a segment file, not a log dir: give the log dir and the "
                             f"partition, --log-dir {grand or '/'} --partition {pdir} "
                             f"(or read the file with `segjobs dump {log_dir}`)")
        raise UsageError(f"--log-dir {log_dir} is a file, not a log dir (a directory of <topic>-<n> partition "
                         f"directories)")
    local = storage.local_path(log_dir)
    if local is not None and not os.path.isdir(local):
        raise UsageError(f"--log-dir {log_dir}: no such directory")


def check_log_dir_writable(storage: Storage, log_dir: str, command: str) -> None:
    """``NotWritableError`` (exit code 2) when a local log dir, or its work dir beside it (or, before its first run,
    the directory it is created in), cannot take a new file: a read-only filesystem, a directory the user may not
    write, an immutable one. Found by creating a file there and removing it, since neither the mode bits nor
    ``os.access`` tell (root passes both on a read-only mount or an immutable directory). ``command``: what the
    run is, for the message. An object store is not probed: its permissions are found by the lease's first write.

    A partition directory is not probed: one that cannot be written fails alone, named, and the others go on."""
    local = storage.local_path(log_dir)
    if local is None:
        return
    work = storage.local_path(work_uri(log_dir)) or ""
    work_at = _nearest_existing_dir(work)
    for what, directory, where, holds in (
            ("the log dir", local, local, "its lock, checkpoint files and segment files"),
            ("the log dir's work dir", work_at, work if work_at == work else f"{work_at} (where the work dir {work} "
             f"is to be created)", "its commit intents and staged segments")):
        failed = _cannot_write(directory)
        if failed is not None:
            step, cause = failed
            raise NotWritableError(f"{what} is not writable: {where}: {step} failed: {cause.detail}; segjobs "
                                   f"{command} writes {holds} there; nothing was done (--dry-run and `segjobs "
                                   f"inspect` write nothing and can run on it as it is)", uri=directory, cause=cause)


def _nearest_existing_dir(path: str) -> str:
    """``path`` or, where it does not exist yet, its nearest existing ancestor (where it would be created)."""
    while path and not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def probe_new_file(path: str) -> tuple[str, StorageError] | None:
    """Create the file ``path`` (which must not exist) and remove it again: the real write, not the mode bits
    (which root ignores). None when both worked, else which step failed (``"create"`` or ``"remove"``) and why."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as exc:
        return "create", storage_error(exc, path)
    try:
        os.unlink(path)
    except OSError as exc:  # an append-only directory: files can be created there but not removed
        return "remove", storage_error(exc, path)
    return None


def _cannot_write(directory: str) -> tuple[str, StorageError] | None:
    """What failed (creating or removing a file) in ``directory`` and why, or None when a file can be created and
    removed there. The probe's name is a temporary file's (``*.segjobs-<hex>.tmp``), which recovery removes if
    a crash leaves it."""
    probe = os.path.join(directory, temp_name(".segjobs-probe"))
    failed = probe_new_file(probe)
    if failed is None:
        return None
    step, error = failed
    if step == "create":
        return "creating a file in it", error
    return f"removing a file from it ({probe}, left there)", error


def partition_dir_hint(log_dir: str, listing: LogDirListing, *, scoped: bool = True) -> str | None:
    """When a log dir without partition directories looks like a partition directory itself (it holds
    segment files), what to give instead (``scoped``: the command takes --partition); None otherwise."""
    if listing.partitions or not any(parse_segment_file(f.name) for f in listing.top_level_files):
        return None
    parent, _, name = log_dir.rstrip("/").rpartition("/")
    if parse_partition_dir(name) is not None:
        if not scoped:
            return f"this looks like a partition; use its parent: --log-dir {parent or '/'}"
        return (f"this looks like a partition; use its parent with --partition {name}: "
                f"--log-dir {parent or '/'} --partition {name}")
    return ("it holds segment files itself, as a partition directory does: give the directory that holds the "
            "<topic>-<n> partition directories")


def nearby_log_dirs_hint(storage: Storage, log_dir: str, *, shown: int = 4) -> str | None:
    """For a log dir without partition directories: the directories near it that hold some (below it, its
    parent, its siblings; see :func:`segment_io.layout.log_dirs_near`, a bounded search), as the hint of
    :func:`check_log_dir_has_partitions`; None when there are none."""
    found = log_dirs_near(storage, log_dir)
    if not found:
        return None
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    example = found[0]
    return (f"partition directories found under {', '.join(found[:shown])}{more}: give the one you mean as the log "
            f"dir, e.g. --log-dir {example}")


def holds_broker_files(listing: LogDirListing) -> bool:
    """Whether the log dir's top level holds what a broker writes there (``meta.properties``, or one of its
    checkpoint files): a log dir a broker made, even with no partition in it."""
    return bool(listing.checkpoints) or any(f.name == META_PROPERTIES for f in listing.top_level_files)


def rejected_partition_dirs(listing: LogDirListing,
                            in_scope: Callable[[str, int], bool]) -> list[tuple[str, IrregularEntryError]]:
    """The log dir's directories named like a partition that are not one (``Copy of orders-0``, ``users-01``,
    ``orders-99999999999``: :attr:`~segment_io.layout.LogDirListing.rejected`), each with the error a run reports
    for it (exit 1; the directory left untouched, the other partitions worked on), those ``in_scope`` (a
    scope's ``includes``) says the run covers, taking the name's digits as they come (``users-01`` is in a run of
    ``--partition users-1``)."""
    out = []
    for name, problem in sorted(listing.rejected.items()):
        key = rejected_partition_key(name)
        if key is None or in_scope(*key):
            out.append((name, rejected_partition_dir_error(listing.root, name, problem)))
    return out


def check_log_dir_has_partitions(log_dir: str, listing: LogDirListing, *, scoped: bool = True,
                                 required: bool = True, storage: Storage | None = None) -> None:
    """``UsageError`` when the listing holds no partition directory, with :func:`partition_dir_hint`, else
    (given the ``storage``) :func:`nearby_log_dirs_hint` (``required=False``: only when the log dir looks like
    a partition directory)."""
    if listing.partitions:
        return
    hint = partition_dir_hint(log_dir, listing, scoped=scoped)
    if hint is None and holds_broker_files(listing):
        return  # a broker's log dir that holds no partition now (all moved or deleted): nothing to do, no mistake
    if hint is None and required and storage is not None:
        hint = nearby_log_dirs_hint(storage, log_dir)
    if hint is None and listing.rejected:
        name, problem = next(iter(sorted(listing.rejected.items())))
        hint = f"{name!r} looks like one but is not: {problem}"
    if hint or required:
        raise UsageError(f"--log-dir {log_dir}: no partition directories (<topic>-<n>) found"
                         + (f"; {hint}" if hint else ""))
