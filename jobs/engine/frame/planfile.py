"""Plan files: ``--dry-run --plan FILE`` writes down what a run decided; ``--apply FILE`` carries out exactly that.

Like ``terraform plan`` / ``terraform apply``: an operator reviews a big delete (or rewrite) before it happens,
and what happens is what was reviewed, or nothing.

A plan file is one JSON document (``format``: ``segjobs-plan``, ``version``: 1) holding:

* ``command`` (``retain`` or ``compact``), ``log_dir``, ``now_ms``, ``scope`` (the ``--topic`` globs and
  ``--partition`` names), ``options`` (the command's own: ``max_delete_fraction``, and for compact
  ``dedupe_buffer_bytes``);
* ``configs``: every setting of every topic in scope, resolved (Kafka's defaults, the file, ``--set``), and
  ``config_origins``: where each setting came from, as the summary names it (``conf/topics.toml
  [topics."orders"]``, ``--set orders:retention.ms=3d``), per topic and key, Kafka's defaults left out. An
  ``--apply`` run names the same origins in its summary, report and JSON as the dry run that made the plan. A
  plan without ``config_origins`` (made before it was recorded) still applies; its settings are then named as
  coming from the plan, which does not say where they came from;
* ``fingerprint``: what the job reads and changes, so that nothing else makes the plan stale (a ``compact``
  plan made before the night's ``retain`` survives what retention does to delete-only topics). Per partition
  the job reads (``retain``: every partition in scope; ``compact``: those of topics whose policy includes
  compact), every live segment file (``.log``, ``.index``, ``.timeindex``, ``.txnindex``) with its size and its
  mtime (local disk) or ETag and last-modified time (S3); and under ``checkpoint_entries``, per checkpoint file
  the job reads (``retain``: ``log-start-offset-checkpoint``; ``compact``: that and
  ``cleaner-offset-checkpoint``), those partitions' entries (null when absent). Plans made before this
  version hold ``checkpoints`` instead, the SHA-256 of each whole file, and cover every partition in scope:
  they are checked as they were made;
* ``decisions``: per partition, the segments retention deletes (base offset, bytes, rule) and the new log
  start offset, or the refusal of the delete-fraction limit; for compact, whether the partition is
  selected, its cleanable range, where the cleaning pass ends, and every segment group it rewrites (the
  base offsets of the segments it replaces) with the records and bytes that go.

``--apply FILE`` reads the plan, takes the lock, runs recovery, lists the log dir and recomputes the
fingerprint: any difference refuses the run with exit code 2, naming the first one (``orders-0:
00000000000000001000.log changed size 1048576 -> 1049600 since the plan was made``). Otherwise it runs with
the plan's ``--now``, configs, scope and options, re-derives the decisions with the same deterministic
planners (and, for compaction, the same cleaning tasks), and executes them only where they equal the file's:
a plan-level difference (retention deletes, compaction selection or range) refuses the whole run before
anything is changed (exit 2); a difference in what a cleaning task produced (it cannot happen unless the
software changed between plan and apply) leaves that partition uncommitted and is reported (exit 1).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, TypeVar

from jobs.engine.frame.options import ChangeOptions, field_defaults
from jobs.engine.report.outcomes import CleaningDecision, Decision, PartitionDecisions
from jobs.engine.report.run_report import absolute_uri, human_bytes
from jobs.rules.config import KAFKA_DEFAULT_ORIGIN, ConfigSet, TopicConfig
from jobs.rules.plan_compact import COMPACTION_CHECKPOINTS, compaction_reads
from jobs.rules.plan_retain import RETENTION_CHECKPOINTS, retention_reads
from jobs.rules.timeutil import format_instant
from segment_io.errors import SegjobsError, UsageError
from segment_io.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LogDirListing,
)
from segment_io.storage import open_storage
from segment_io.storage.base import Storage
from segment_io.storage.options import StorageOptions

if TYPE_CHECKING:
    from jobs.rules.timeutil import Instant

OptionsT = TypeVar("OptionsT", bound=ChangeOptions)

PLAN_FORMAT = "segjobs-plan"
PLAN_VERSION = 1
#: The checkpoint files a plan made before ``checkpoint_entries`` fingerprinted whole (see :func:`legacy_fingerprint`).
FINGERPRINTED_CHECKPOINTS = (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)
#: Per command, what its decisions read: which partitions (``reads(topic, config)``) and the entries of which
#: offset checkpoint files (for those partitions). A plan fingerprints exactly these.
PLAN_INPUTS: dict[str, tuple[Callable[[str, TopicConfig], bool], tuple[str, ...]]] = {
    "retain": (retention_reads, RETENTION_CHECKPOINTS),
    "compact": (compaction_reads, COMPACTION_CHECKPOINTS),
}


@dataclass
class Plan:
    """A plan file's content (see the module docstring)."""

    command: str
    log_dir: str
    now_ms: int
    scope: dict[str, list[str]]
    options: dict[str, Any]
    configs: dict[str, dict[str, Any]]
    #: what the decisions read (documents, as a plan file holds them, are read into a :class:`Fingerprint`)
    fingerprint: "Fingerprint"
    #: per partition name (documents, as a plan file holds them, are read into :class:`PartitionDecisions`)
    decisions: dict[str, PartitionDecisions]
    run_id: str | None = None
    #: when the plan was made (the wall clock, epoch ms; None in plan files written before it was recorded)
    made_ms: int | None = None
    #: per topic and key, where ``configs``' value came from, Kafka's defaults left out (see
    #: :func:`config_origins`); None in plan files written before it was recorded
    config_origins: dict[str, dict[str, str]] | None = None
    format: str = PLAN_FORMAT
    version: int = PLAN_VERSION

    def __post_init__(self) -> None:
        fingerprint: Any = self.fingerprint
        if not isinstance(fingerprint, Fingerprint):
            self.fingerprint = Fingerprint.from_dict(fingerprint)
        self.decisions = {name: d if isinstance(d, PartitionDecisions) else PartitionDecisions.from_dict(d)
                          for name, d in self.decisions.items()}

    def to_json(self) -> str:
        doc = {"format": self.format, "version": self.version, "command": self.command, "log_dir": self.log_dir,
               "now_ms": self.now_ms, "scope": self.scope, "options": self.options, "configs": self.configs,
               "fingerprint": self.fingerprint.to_dict(),
               "decisions": {name: d.to_dict() for name, d in self.decisions.items()},
               "run_id": self.run_id, "made_ms": self.made_ms, "config_origins": self.config_origins}
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str) -> "Plan":
        """Parse a plan file; :class:`UsageError` naming ``source`` when it is not one this version reads."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--apply {source}: not a plan file (invalid JSON: {exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
            raise UsageError(f"--apply {source}: not a segjobs plan file (write one with --dry-run --plan)")
        if doc.get("version") != PLAN_VERSION:
            raise UsageError(f"--apply {source}: plan file version {doc.get('version')!r}; this segjobs reads "
                             f"version {PLAN_VERSION}: make the plan again with this version")
        try:
            return cls(**doc)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise UsageError(f"--apply {source}: malformed plan file ({exc})") from None


def partition_name(key: tuple[str, int]) -> str:
    return f"{key[0]}-{key[1]}"


# --------------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------------


def load_for_apply(options: OptionsT, command: str, log_dir: str, now: "Instant | None",
                   plan_options: Iterable[str]) -> tuple[OptionsT, "Instant | None", Plan | None]:
    """With ``options.apply``: read the plan and return the options and ``now`` it says (its now, the scope,
    every topic's settings with the origins the plan recorded, the command's ``plan_options``), and the plan.
    Without it: the arguments unchanged and None. An option of ``plan_options`` given with a value other than
    its default and the plan's conflicts with the plan (one the plan does not record has its default there).
    :class:`UsageError` for a plan of another command or log dir, or options that contradict it (the message
    names them as the command line does)."""
    uri = options.apply
    if not uri:
        return options, now, None
    plan = read_plan(uri, options.storage_options())
    if plan.command != command:
        raise UsageError(f"--apply {uri}: the plan was made by `segjobs {plan.command}`, not `segjobs {command}`")
    # The plan names the log dir as the run did (a relative path made absolute), so compare them that way: the
    # same relative --log-dir, from the same directory, is the same log dir.
    if absolute_uri(plan.log_dir).rstrip("/") != absolute_uri(log_dir).rstrip("/"):
        raise UsageError(f"--apply {uri}: the plan is for --log-dir {plan.log_dir}, not {log_dir}")
    given = [name for name, value in (("--now", now), ("--config", options.config), ("--set", options.overrides),
                                      ("--topic", options.topics), ("--partition", options.partitions)) if value]
    defaults = field_defaults(type(options))
    unknown = sorted(set(plan.options) - set(plan_options))
    if unknown:
        raise UsageError(f"--apply {uri}: malformed plan file (options {', '.join(unknown)} are not "
                         f"`segjobs {command}`'s)")
    # an option added after the plan was made is not in it: the plan was made with its default
    planned = {name: plan.options.get(name, defaults[name]) for name in plan_options}
    given += [f"--{name.replace('_', '-')}" for name, value in planned.items()
              if getattr(options, name) not in (defaults[name], value)]
    if given:
        raise UsageError(f"--apply takes --now, the topic configs, the scope and the options from the plan "
                         f"({uri}); drop {', '.join(given)}")
    # Each topic gets exactly the planned settings, named as the plan recorded where they came from.
    unrecorded = ", which does not record where each setting came from" if plan.config_origins is None else ""
    configs = ConfigSet.from_resolved(dict(sorted(plan.configs.items())), plan.config_origins,
                                      source=f"the plan {uri}{unrecorded}")
    applied = replace(options, config=configs, overrides=(), topics=tuple(plan.scope.get("topics", [])),
                      partitions=tuple(plan.scope.get("partitions", [])), **planned)
    return applied, plan.now_ms, plan


def config_origins(configs: ConfigSet, topics: Iterable[str]) -> dict[str, dict[str, str]]:
    """Where each setting of ``topics`` comes from (:meth:`ConfigSet.origin_of`), per topic and key, the keys
    Kafka's defaults give left out (what a plan records, see :attr:`Plan.config_origins`)."""
    out = {}
    for topic in sorted(topics):
        keys = configs.for_topic(topic).to_settings()
        out[topic] = {k: origin for k in keys if (origin := configs.origin_of(topic, k)) != KAFKA_DEFAULT_ORIGIN}
    return out


def describe_plan(plan: Plan, uri: str) -> str:
    """The line an ``--apply`` run starts with: which plan, made when and by which run, and what it will do
    (from the plan's decisions: the segments retention deletes, the partitions compaction rewrites)."""
    made = f"made {format_instant(plan.made_ms)}" if plan.made_ms is not None else "made at an unrecorded time"
    if plan.run_id:
        made += f" by run {plan.run_id}"
    retention = [d.retention for d in plan.decisions.values() if d.retention is not None]
    deletes = [s for r in retention if not r.refused for s in r.delete]
    refused = sum(1 for r in retention if r.refused)
    compaction = [d for d in plan.decisions.values() if d.compaction is not None and d.compaction.selected]
    changed = [d.cleaning for d in compaction if d.cleaning is not None and d.cleaning.groups]
    parts = []
    if retention:
        parts.append(f"retention deletes {len(deletes)} segment(s), "
                     f"{human_bytes(sum(s.bytes for s in deletes))}, in "
                     f"{sum(1 for r in retention if r.delete and not r.refused)} partition(s)"
                     + (f" ({refused} partition(s) refused by the delete-fraction limit)" if refused else ""))
    if plan.command == "compact":
        parts.append(f"compaction rewrites {len(changed)} of {len(compaction)} selected partition(s), removing "
                     f"{sum(o.records_removed for o in changed)} record(s), "
                     f"{human_bytes(sum(o.bytes_removed for o in changed))}")
    return (f"applying the plan {uri} ({made}; --now {format_instant(plan.now_ms)}, {len(plan.decisions)} "
            f"partition(s) in scope): " + ("; ".join(parts) or "nothing to do"))


def read_plan(uri: str, options: StorageOptions | None = None) -> Plan:
    """Read a plan file from a local path or an s3:// URI."""
    try:
        data = open_storage(uri, options).read(uri)
    except SegjobsError as exc:
        raise UsageError(f"--apply {uri}: cannot read the plan: {exc}") from None
    return Plan.from_json(data.decode("utf-8", errors="replace"), source=uri)


def write_plan(plan: Plan, uri: str, options: StorageOptions | None = None) -> None:
    """Write ``plan`` atomically to a local path or an s3:// URI."""
    storage = open_storage(uri, options)
    if storage.local_path(uri) is not None and "/" in uri:
        storage.makedirs(uri.rsplit("/", 1)[0])
    storage.write_atomic(uri, plan.to_json().encode("utf-8"))


# --------------------------------------------------------------------------------------------------
# Fingerprint
# --------------------------------------------------------------------------------------------------


def read_by(command: str, keys: Iterable[tuple[str, int]], configs: ConfigSet) -> list[tuple[str, int]]:
    """The partitions of ``keys`` whose files and checkpoint entries ``command``'s decisions read (see
    :data:`PLAN_INPUTS`), in order."""
    reads = PLAN_INPUTS[command][0]
    return sorted(k for k in keys if reads(k[0], configs.for_topic(k[0])))


_SINCE = "since the plan was made"


@dataclass(frozen=True)
class FileStamp:
    """What a plan fingerprints of one live segment file: its size, its mtime (local disk) and its ETag (S3)."""

    size: int | None
    mtime_ms: int | None
    etag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "mtime_ms": self.mtime_ms, **({"etag": self.etag} if self.etag else {})}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "FileStamp":
        return cls(doc.get("size"), doc.get("mtime_ms"), doc.get("etag"))


class Requirement(Protocol):
    """One thing a plan's decisions read from the log dir, as it was when the plan was made."""

    def validate(self, now: "Fingerprint") -> str | None:
        """How the log dir differs from it now (``now``: the fingerprint taken again), in words; None: it holds."""
        ...


@dataclass(frozen=True)
class AssertPartitionFiles:
    """The partition is there with exactly these live segment files, each of the same size, ETag and mtime."""

    partition: str
    files: Mapping[str, FileStamp]

    def validate(self, now: "Fingerprint") -> str | None:
        name, current = self.partition, now.partitions.get(self.partition)
        if current is None:
            return f"{name}: the partition is gone {_SINCE}"
        for file in sorted(set(self.files) | set(current)):
            if file not in current:
                return f"{name}: {file} is gone {_SINCE}"
            if file not in self.files:
                return f"{name}: {file} is new {_SINCE}"
            was, stamp = self.files[file], current[file]
            for attr, word in (("size", "size"), ("etag", "ETag"), ("mtime_ms", "mtime")):
                if getattr(was, attr) != getattr(stamp, attr):
                    return f"{name}: {file} changed {word} {getattr(was, attr)} -> {getattr(stamp, attr)} {_SINCE}"
        return None


@dataclass(frozen=True)
class AssertNoNewPartition:
    """No partition the plan did not read lies between ``after`` and ``before`` in name order (None: unbounded):
    placed between the :class:`AssertPartitionFiles` of a plan, these report a new partition where a comparison of
    every partition in name order meets it."""

    after: str | None
    before: str | None

    def validate(self, now: "Fingerprint") -> str | None:
        for name in sorted(now.partitions):
            if (self.after is None or name > self.after) and (self.before is None or name < self.before):
                return f"{name}: the partition is new {_SINCE}"
        return None


@dataclass(frozen=True)
class AssertCheckpointEntries:
    """The entries of one offset checkpoint file for the partitions the plan read are as they were (None: the file
    had no entry for the partition)."""

    checkpoint: str
    entries: Mapping[str, int | None]

    def validate(self, now: "Fingerprint") -> str | None:
        current = (now.checkpoint_entries or {}).get(self.checkpoint, {})
        for name in sorted(set(self.entries) | set(current)):
            was, entry = self.entries.get(name), current.get(name)
            if was != entry:
                return (f"{self.checkpoint}: the entry of {name} changed {'none' if was is None else was} -> "
                        f"{'none' if entry is None else entry} {_SINCE}")
        return None


@dataclass(frozen=True)
class AssertCheckpointHash:
    """A whole checkpoint file has the same SHA-256 (None: the file was absent); the fingerprint of plans made
    before :class:`AssertCheckpointEntries`."""

    checkpoint: str
    sha256: str | None

    def validate(self, now: "Fingerprint") -> str | None:
        current = (now.checkpoints or {}).get(self.checkpoint)
        if current != self.sha256:
            was, is_now = (h[:12] if h else "absent" for h in (self.sha256, current))
            return f"{self.checkpoint} changed {_SINCE} (sha256 {was} -> {is_now})"
        return None


@dataclass(frozen=True)
class Fingerprint:
    """What a plan's decisions read from the log dir (see the module docstring): the live segment files of the
    partitions they read, per partition name, and the entries of the checkpoint files they read; or, in plans made
    before entries were recorded, the SHA-256 of each whole checkpoint file (``checkpoints``)."""

    partitions: Mapping[str, Mapping[str, FileStamp]]
    checkpoint_entries: Mapping[str, Mapping[str, int | None]] | None = None
    checkpoints: Mapping[str, str | None] | None = None

    @property
    def legacy(self) -> bool:
        """Made before :class:`AssertCheckpointEntries`: checked as it was made (see :func:`legacy_fingerprint`)."""
        return self.checkpoints is not None

    def requirements(self, now: "Fingerprint") -> list[Requirement]:
        """The requirements of this fingerprint, in the order their differences are reported: the partitions in
        name order (each with its files), then the checkpoint entries, then the whole checkpoint files. A checkpoint
        file only ``now`` has is required to be as it was when absent (no entries, no file)."""
        out: list[Requirement] = []
        names = sorted(self.partitions)
        for after, name in zip([None, *names], names):
            out += [AssertNoNewPartition(after, name), AssertPartitionFiles(name, self.partitions[name])]
        out.append(AssertNoNewPartition(names[-1] if names else None, None))
        entries, current_entries = self.checkpoint_entries or {}, now.checkpoint_entries or {}
        out += [AssertCheckpointEntries(cp, entries.get(cp, {})) for cp in sorted(set(entries) | set(current_entries))]
        hashes, current_hashes = self.checkpoints or {}, now.checkpoints or {}
        out += [AssertCheckpointHash(cp, hashes.get(cp)) for cp in sorted(set(hashes) | set(current_hashes))]
        return out

    def validate(self, now: "Fingerprint") -> str | None:
        """The first requirement ``now`` fails, in words; None when the log dir is as the plan saw it."""
        return next((diff for r in self.requirements(now) if (diff := r.validate(now)) is not None), None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partitions": {name: {file: stamp.to_dict() for file, stamp in files.items()}
                                              for name, files in self.partitions.items()}}
        if self.checkpoint_entries is not None:
            out["checkpoint_entries"] = {cp: dict(e) for cp, e in self.checkpoint_entries.items()}
        if self.checkpoints is not None:
            out["checkpoints"] = dict(self.checkpoints)
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "Fingerprint":
        partitions = {name: {file: FileStamp.from_dict(stamp) for file, stamp in files.items()}
                      for name, files in doc.get("partitions", {}).items()}
        return cls(partitions, doc.get("checkpoint_entries"), doc.get("checkpoints"))


def fingerprint(command: str, listing: LogDirListing, keys: Iterable[tuple[str, int]], configs: ConfigSet,
                checkpoints: Mapping[str, Mapping[tuple[str, int], int]]) -> Fingerprint:
    """What ``command``'s decisions over the partitions ``keys`` (its scope) depend on in the log dir and may
    change: the live segment files of the partitions it reads (size, mtime, ETag), and their entries of the
    checkpoint files it reads (``checkpoints``: the files' entries as the run read them). See the module
    docstring."""
    read = read_by(command, keys, configs)
    entries = {name: {partition_name(k): checkpoints.get(name, {}).get(k) for k in read}
               for name in PLAN_INPUTS[command][1]}
    return Fingerprint(_segment_files(listing, read), checkpoint_entries=entries)


def legacy_fingerprint(storage: Storage, log_dir: str, listing: LogDirListing,
                       keys: Iterable[tuple[str, int]]) -> Fingerprint:
    """The fingerprint of a plan file made before :func:`fingerprint` covered only what a job reads (its
    ``checkpoints`` hold SHA-256s): the live segment files of every partition of ``keys`` and the bytes of both
    checkpoint files. Such a plan is checked as it was made."""
    checkpoints = {}
    for name in FINGERPRINTED_CHECKPOINTS:
        present = name in listing.checkpoints
        checkpoints[name] = hashlib.sha256(storage.read(storage.join(log_dir, name))).hexdigest() if present else None
    return Fingerprint(_segment_files(listing, sorted(keys)), checkpoints=checkpoints)


def _segment_files(listing: LogDirListing, keys: Iterable[tuple[str, int]]) -> dict[str, dict[str, FileStamp]]:
    partitions: dict[str, dict[str, FileStamp]] = {}
    for key in keys:
        files: dict[str, FileStamp] = {}
        for seg in listing.partitions[key].segments:
            for f in (seg.log, seg.index, seg.timeindex, seg.txnindex):
                if f is not None:
                    files[f.name] = FileStamp(f.size, f.mtime_ms, f.etag or None)
        partitions[partition_name(key)] = files
    return partitions


def first_difference(planned: Fingerprint | Mapping[str, Any], current: Fingerprint | Mapping[str, Any]) -> str | None:
    """The first way the log dir changed between two fingerprints (or their documents), in words; None when they
    are equal (see :meth:`Fingerprint.validate`)."""
    def typed(fp: Fingerprint | Mapping[str, Any]) -> Fingerprint:
        return fp if isinstance(fp, Fingerprint) else Fingerprint.from_dict(fp)

    return typed(planned).validate(typed(current))


def decision_difference(planned: Any, current: Any, path: str = "") -> str | None:
    """The first difference between two decision documents, as ``path: value in the plan, value now``."""
    if isinstance(planned, dict) and isinstance(current, dict):
        for k in sorted(set(planned) | set(current), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in current:
                return f"{sub}: in the plan, not decided now"
            if k not in planned:
                return f"{sub}: decided now ({current[k]!r}), not in the plan"
            diff = decision_difference(planned[k], current[k], sub)
            if diff:
                return diff
        return None
    if planned != current:
        return f"{path}: {planned!r} in the plan, {current!r} now"
    return None


# --------------------------------------------------------------------------------------------------
# In a job
# --------------------------------------------------------------------------------------------------


@dataclass
class PlanStage:
    """The plan-file side of one job run: the plan being applied (``apply``) or the decisions being collected
    for ``plan``. Runs without plan files (inspect, or neither option) get one that only collects."""

    #: the plan carried out, as :func:`load_for_apply` read it
    applying: Plan | None = None
    #: where it was read from (for messages)
    apply_uri: str | None = None
    #: where to write the plan of this run (a dry run)
    write_uri: str | None = None
    decisions: dict[str, PartitionDecisions] = field(default_factory=dict)

    def check_unchanged(self, storage: Storage, log_dir: str, listing: LogDirListing, keys: Iterable[tuple[str, int]],
                        configs: ConfigSet, checkpoints: Mapping[str, Mapping[tuple[str, int], int]]) -> None:
        """With ``--apply``: refuse (exit 2) when what the plan's decisions read differs from its fingerprint
        (:func:`fingerprint` over the partitions ``keys``, the run's scope, with the run's ``configs`` and
        ``checkpoints``). Call it before anything is changed and before Spark starts (a refusal costs a listing,
        not a session start); the listing it checks is the one the run works from (taken under the lock, after
        recovery)."""
        if self.applying is None:
            return
        planned = self.applying.fingerprint
        if planned.legacy:  # made by an earlier version: checked as it was made
            now = legacy_fingerprint(storage, log_dir, listing, keys)
        else:
            now = fingerprint(self.applying.command, listing, keys, configs, checkpoints)
        diff = planned.validate(now)
        if diff:
            raise UsageError(f"--apply {self.apply_uri}: refused, nothing done: {diff}; make a new plan "
                             f"(--dry-run --plan)")

    def check_decisions(self, decisions: Mapping[str, Decision], part: str) -> None:
        """Record ``decisions`` (per partition name, under ``part``: ``retention`` or ``compaction``) and, with
        ``--apply``, refuse (exit 2) when they differ from the plan's. Call it before anything is changed; what the
        cleaning tasks decide is only known (and checked) later in the run (:meth:`record_cleaning`)."""
        for name, decision in decisions.items():
            self.decisions[name] = self.decisions.get(name, PartitionDecisions()).with_decision(decision)
        if self.applying is None:
            return
        planned = {name: planned.to_dict() for name, d in self.applying.decisions.items()
                   if (planned := getattr(d, part)) is not None}
        diff = decision_difference(planned, {name: d.to_dict() for name, d in decisions.items()})
        if diff:
            raise UsageError(f"--apply {self.apply_uri}: refused, nothing done: the {part} decided now differs "
                             f"from the plan: {diff}")

    def record_cleaning(self, name: str, decided: CleaningDecision) -> str | None:
        """Record what the cleaning task of partition ``name`` decided and, with ``--apply``, how it differs from
        the plan's ``compaction.outcome`` (None: it does not, or the plan has no compaction decision for it)."""
        self.decisions[name] = self.decisions.get(name, PartitionDecisions()).with_decision(decided)
        planned = self.planned(name)
        if planned is None or planned.compaction is None:
            return None
        return decision_difference(None if planned.cleaning is None else planned.cleaning.to_dict(),
                                   decided.to_dict(), "compaction.outcome")

    def planned(self, name: str) -> PartitionDecisions | None:
        """The plan's decisions for partition ``name`` (None without ``--apply`` or when absent)."""
        if self.applying is None:
            return None
        return self.applying.decisions.get(name)

    def write(self, plan: Plan, storage_options: StorageOptions, progress: Callable[..., None]) -> None:
        """With ``--plan FILE`` (a dry run): write ``plan`` (this run's, see
        :meth:`jobs.engine.frame.job.JobContext.write_plan`) with the decisions collected."""
        uri = self.write_uri
        if not uri:
            return
        plan = replace(plan, decisions={k: self.decisions[k] for k in sorted(self.decisions)})
        write_plan(plan, uri, storage_options)
        progress(f"plan written to {uri}; carry it out with --apply {uri}", event="plan.written", uri=uri)


__all__ = ["PLAN_FORMAT", "PLAN_INPUTS", "PLAN_VERSION", "AssertCheckpointEntries", "AssertCheckpointHash",
           "AssertNoNewPartition", "AssertPartitionFiles", "FileStamp", "Fingerprint", "Plan", "PlanStage",
           "Requirement", "config_origins",
           "decision_difference", "describe_plan", "fingerprint", "first_difference", "legacy_fingerprint",
           "load_for_apply", "read_by", "read_plan", "write_plan"]
