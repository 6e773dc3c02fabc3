"""``segjobs tiered clean-orphans``: delete the remote objects the tiered audit proved unreferenced, as
:mod:`jobs.rules.tiered_clean` decides (never a finished segment's, nothing newer than the metadata read allows,
the mass-delete guard per topic).

Steps: (1) with ``--apply FILE``, the plan file is read and its inputs (``now``, the options, the metadata dir, the
topic ids) replace the run's; (2) unless a dry run, the log dir's lock (local disk) or lease (S3) is taken: a
broker or another segjobs run holding it refuses the clean, nothing done; (3) the audit runs
(:func:`jobs.engine.tiered.audit.run_audit`) and its orphans are planned; (4) with ``--apply``, the plan made now
must equal the file's, object by object (URI, size, mtime, ETag), or nothing is done; (5) a dry run reports the
plan (and with ``--plan FILE`` writes it); a real run deletes each object only while it is as it was listed (an
S3 ETag condition, or the size and mtime checked just before on disk), checking the lease before each.

A plan file is a JSON document in the format of the other plan files (``format``: ``segjobs-plan``, ``version``
1) with ``command`` ``tiered clean-orphans``, the inputs above, ``metadata_newest_ms`` and ``deletes``: per
orphan segment, its partition, segment id, reason and objects (URI, size, mtime, ETag).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from jobs.engine.frame.planfile import PLAN_FORMAT, PLAN_VERSION, decision_difference
from jobs.engine.report.run_report import human_bytes
from jobs.engine.tiered.audit import TieredAudit, TieredAuditOptions, run_audit
from jobs.logdir.lock import DEFAULT_TTL_MS, Holder, Lease, LeaseLost, acquire
from jobs.rules.tiered_clean import CleanPlan, OrphanDelete, Stamp, plan_clean
from jobs.rules.timeutil import format_instant, wall_clock_ms
from segment_io.errors import (
    LockHeldError,
    NotFoundError,
    PreconditionFailedError,
    SegjobsError,
    StorageError,
    UsageError,
)
from segment_io.storage import open_storage
from segment_io.storage.base import Storage
from segment_io.units import format_duration

COMMAND = "tiered clean-orphans"
#: how much older than the metadata's newest event an orphan must be (``--min-age``)
DEFAULT_MIN_AGE_MS = 60 * 60 * 1000


@dataclass(frozen=True)
class CleanOptions:
    """What ``segjobs tiered clean-orphans`` reads (``audit``) and how it decides and acts."""

    audit: TieredAuditOptions
    min_age_ms: int = DEFAULT_MIN_AGE_MS
    #: the guard's limit for every topic; None: each topic's ``segjobs.max.delete.fraction``
    max_delete_fraction: float | None = None
    dry_run: bool = False
    #: with ``dry_run``: where to write the plan
    plan_uri: str | None = None
    #: carry out this plan file
    apply_uri: str | None = None
    lease_ttl_ms: int = DEFAULT_TTL_MS


@dataclass
class CleanResult:
    """What a clean decided and did."""

    options: CleanOptions
    plan: CleanPlan
    deleted: list[Stamp] = field(default_factory=list)
    #: objects a real run did not delete, with why: changed or gone since listed, the delete failed
    left: list[tuple[Stamp, str]] = field(default_factory=list)
    #: why the run stopped before it was through (its lease was lost), or None
    stopped: str | None = None

    @property
    def exit_code(self) -> int:
        """1 when a topic was refused, an object left or the run stopped; else 0."""
        return 1 if self.plan.refused or self.left or self.stopped else 0


# --------------------------------------------------------------------------------------------------
# Plan files
# --------------------------------------------------------------------------------------------------


def _deletes_doc(deletes: list[OrphanDelete]) -> list[dict[str, Any]]:
    return [{"topic": d.topic, "partition": d.partition, "topic_id": d.topic_id, "segment_id": d.segment_id,
             "reason": d.reason, "start_offset": d.start_offset, "end_offset": d.end_offset,
             "objects": [{"uri": o.uri, "size": o.size, "mtime_ms": o.mtime_ms, "etag": o.etag} for o in d.objects]}
            for d in deletes]


def plan_document(options: CleanOptions, plan: CleanPlan, *, made_ms: int) -> dict[str, Any]:
    """The plan file of a dry run (see the module docstring)."""
    a = options.audit
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "command": COMMAND, "log_dir": a.log_dir,
            "remote": a.remote, "layout": a.layout, "metadata_dir": a.metadata_dir, "topic_ids": a.topic_ids,
            "now_ms": a.now_ms, "made_ms": made_ms,
            "options": {"min_age_ms": options.min_age_ms, "max_delete_fraction": options.max_delete_fraction},
            "metadata_newest_ms": plan.metadata_newest_ms, "deletes": _deletes_doc(plan.deletes)}


def read_plan_document(storage: Storage, uri: str) -> dict[str, Any]:
    """A clean's plan file; :class:`UsageError` naming it when it is none."""
    try:
        doc = json.loads(storage.read(uri))
    except SegjobsError as exc:
        raise UsageError(f"--apply {uri}: cannot read the plan: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"--apply {uri}: not a plan file (invalid JSON: {exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT or doc.get("version") != PLAN_VERSION:
        raise UsageError(f"--apply {uri}: not a segjobs plan file of version {PLAN_VERSION} (write one with "
                         f"--dry-run --plan)")
    if doc.get("command") != COMMAND:
        raise UsageError(f"--apply {uri}: the plan was made by `segjobs {doc.get('command')}`, not `segjobs "
                         f"{COMMAND}`")
    return doc


def options_from_plan(options: CleanOptions, doc: dict[str, Any], uri: str) -> CleanOptions:
    """``options`` with the plan's inputs; :class:`UsageError` when the plan is for another log dir, store or
    layout."""
    a = options.audit
    for key, given in (("log_dir", a.log_dir), ("remote", a.remote), ("layout", a.layout)):
        if str(doc.get(key, "")).rstrip("/") != given.rstrip("/"):
            raise UsageError(f"--apply {uri}: the plan is for --{key.replace('_', '-')} {doc.get(key)}, not {given}")
    try:
        audit = replace(a, metadata_dir=doc["metadata_dir"], topic_ids=dict(doc["topic_ids"]),
                        now_ms=int(doc["now_ms"]))
        return replace(options, audit=audit, min_age_ms=int(doc["options"]["min_age_ms"]),
                       max_delete_fraction=doc["options"]["max_delete_fraction"], plan_uri=None)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--apply {uri}: malformed plan file ({exc!r})") from None


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def _plan(options: CleanOptions, audit: TieredAudit) -> CleanPlan:
    assert audit.state is not None and audit.listing is not None
    stamps = {o.uri: Stamp(o.uri, o.size, o.mtime_ms, o.etag) for o in audit.listing.objects}
    listed: dict[str, int] = {}
    for o in audit.listing.objects:
        listed[o.topic_id] = listed.get(o.topic_id, 0) + o.size
    configs = options.audit.configs

    def limit(topic: str) -> float:
        f = options.max_delete_fraction
        return f if f is not None else configs.for_topic(topic).max_delete_fraction

    return plan_clean(audit.partitions, audit.state, stamps, listed_bytes=listed, min_age_ms=options.min_age_ms,
                      max_fraction_for=limit)


def _delete_one(storage: Storage, stamp: Stamp) -> str | None:
    """Delete ``stamp``'s object if it is still as listed; why not otherwise (None: deleted)."""
    try:
        if stamp.etag:
            storage.delete_if_match(stamp.uri, stamp.etag)
            return None
        now = storage.stat(stamp.uri)
        if (now.size, now.mtime_ms) != (stamp.size, stamp.mtime_ms):
            return (f"changed since it was listed ({stamp.size} bytes, mtime {format_instant(stamp.mtime_ms)} -> "
                    f"{now.size} bytes, mtime {format_instant(now.mtime_ms)})")
        storage.delete(stamp.uri, missing_ok=False)
        return None
    except PreconditionFailedError as exc:
        return f"changed or gone since it was listed ({exc.detail})"
    except NotFoundError:
        return "gone since it was listed"
    except StorageError as exc:
        return f"the delete failed: {exc.detail}"


def _delete(result: CleanResult, storage: Storage, lease: Lease, clock: Callable[[], int]) -> None:
    for d in result.plan.deletes:
        for stamp in d.objects:
            try:
                lease.check(clock())
            except LeaseLost as exc:
                result.stopped = f"{exc}; stopped before {stamp.uri}"
                return
            why = _delete_one(storage, stamp)
            if why is None:
                result.deleted.append(stamp)
            else:
                result.left.append((stamp, why))


def _keyed(deletes: Any) -> Any:
    """A plan's ``deletes`` keyed by partition and segment, their objects by URI: a difference then names them."""
    if not isinstance(deletes, list):
        return deletes
    try:
        return {f"{d['topic']}-{d['partition']} segment {d['segment_id']}":
                {**d, "objects": {o["uri"]: {k: v for k, v in o.items() if k != "uri"} for o in d["objects"]}}
                for d in deletes}
    except (KeyError, TypeError):
        return deletes


def _check_against(applying: dict[str, Any] | None, uri: str | None, plan: CleanPlan) -> None:
    if applying is None:
        return
    diff = decision_difference(_keyed(applying.get("deletes")), _keyed(_deletes_doc(plan.deletes)), "deletes")
    if diff:
        raise UsageError(f"--apply {uri}: refused, nothing done: the orphans found now differ from the plan: {diff}; "
                         f"make a new plan (--dry-run --plan)")


def run_clean(options: CleanOptions, *, clock: Callable[[], int] = wall_clock_ms) -> CleanResult:
    """Plan the clean of the audit's orphans and, unless a dry run, carry it out under the log dir's lock (see the
    module docstring). Raises :class:`~segment_io.errors.LockHeldError` (a broker or a run holds the log dir) or
    :class:`UsageError` (a plan that is not this run's, or that no longer holds) before anything is deleted."""
    applying = None
    if options.apply_uri:
        applying = read_plan_document(open_storage(options.apply_uri, options.audit.storage_options),
                                      options.apply_uri)
        options = options_from_plan(options, applying, options.apply_uri)
    if options.dry_run:
        planned = CleanResult(options, _plan(options, run_audit(options.audit)))
        _check_against(applying, options.apply_uri, planned.plan)
        if options.plan_uri:
            store = open_storage(options.plan_uri, options.audit.storage_options)
            text = json.dumps(plan_document(options, planned.plan, made_ms=clock()), indent=2) + "\n"
            store.write_atomic(options.plan_uri, text.encode("utf-8"))
        return planned
    log_store = open_storage(options.audit.log_dir, options.audit.storage_options)
    result: CleanResult | None = None
    try:
        with acquire(log_store, options.audit.log_dir, now_ms=clock(), ttl_ms=options.lease_ttl_ms,
                     holder=Holder.this_process(), clock=clock) as lease:
            result = CleanResult(options, _plan(options, run_audit(options.audit)))
            _check_against(applying, options.apply_uri, result.plan)
            _delete(result, open_storage(options.audit.remote, options.audit.storage_options), lease, clock)
    except LockHeldError:
        # a lease lost mid-run cannot be released either: the run's own report (what it deleted, where it stopped)
        # is what the user needs, not the refusal of the release
        if result is None or result.stopped is None:
            raise
    assert result is not None  # the with block ran to its end, or raised
    return result


# --------------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------------


def _bytes(n: int) -> str:
    return f"{n} bytes ({human_bytes(n)})"


def clean_text(result: CleanResult) -> str:
    """The report as text."""
    o, plan = result.options, result.plan
    dry = o.dry_run
    lines = [f"tiered clean-orphans of {o.audit.remote} ({o.audit.layout}) by the metadata of {o.audit.log_dir} "
             f"(newest event {format_instant(plan.metadata_newest_ms)}, --min-age "
             f"{format_duration(o.min_age_ms)})" + (" [dry run]" if dry else "")
             + (f" applying the plan {o.apply_uri}" if o.apply_uri else "")]
    verb = "would delete" if dry else "delete"
    for d in plan.deletes:
        span = f" (offsets {d.start_offset}-{d.end_offset})" if d.start_offset is not None else ""
        lines.append(f"  {verb}: {d.topic}-{d.partition} segment {d.segment_id}{span}: {d.reason}; "
                     f"{len(d.objects)} object(s), {_bytes(d.bytes)}")
    for k in plan.kept:
        lines.append(f"  keep: {k.topic}-{k.partition} segment {k.segment_id}: {k.reason}; {_bytes(k.bytes)}; "
                     f"kept: {k.kept_because}")
    lines += [f"  {r.message()}" for r in plan.refused]
    lines += [f"  left: {stamp.uri}: {why}" for stamp, why in result.left]
    if result.stopped:
        lines.append(f"  STOPPED: {result.stopped}")
    if dry:
        done = f"would delete {plan.delete_objects} object(s) of {len(plan.deletes)} orphan segment(s), " \
               f"{_bytes(plan.delete_bytes)}"
    else:
        done = f"deleted {len(result.deleted)} object(s), {_bytes(sum(s.size for s in result.deleted))}"
    lines.append(f"summary: {done}; kept {len(plan.kept)} orphan segment(s); {len(plan.refused)} topic(s) refused"
                 + (f"; {len(result.left)} object(s) left" if result.left else "")
                 + (f"; exit code {result.exit_code}" if result.exit_code else ""))
    return "\n".join(lines)


def clean_json(result: CleanResult) -> dict[str, Any]:
    """The report as JSON-ready data."""
    plan = result.plan
    return {"command": COMMAND, "dry_run": result.options.dry_run, "remote": result.options.audit.remote,
            "log_dir": result.options.audit.log_dir, "layout": result.options.audit.layout,
            "metadata_newest": format_instant(plan.metadata_newest_ms), "deletes": _deletes_doc(plan.deletes),
            "delete_objects": plan.delete_objects, "delete_bytes": plan.delete_bytes,
            "kept": [vars(k) for k in plan.kept],
            "refused": [vars(r) | {"message": r.message()} for r in plan.refused],
            "deleted": [s.uri for s in result.deleted], "deleted_bytes": sum(s.size for s in result.deleted),
            "left": [{"uri": s.uri, "why": why} for s, why in result.left], "stopped": result.stopped,
            "exit_code": result.exit_code}


__all__ = ["COMMAND", "DEFAULT_MIN_AGE_MS", "CleanOptions", "CleanResult", "clean_json", "clean_text",
           "options_from_plan", "plan_document", "read_plan_document", "run_clean"]
