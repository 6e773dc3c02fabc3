"""The typed options of the jobs: what ``segjobs compact|retain|inspect|recover`` take on the command line, as
frozen dataclasses with defaults, checked when they are made.

The command modules (:mod:`jobs.commands`) turn parsed arguments into these; :mod:`jobs.api` takes them; the
engine reads them. Below the command line nothing sees an ``argparse.Namespace``.

The classes share their fields through inheritance, each field defined once::

    RunOptions          storage, progress                      (every run)
    ├── LockingOptions  dry_run, lease_ttl                     (runs that change the log dir under its lock)
    │   └── RecoverOptions  break_lease
    └── JobOptions      config, overrides, topics, partitions, report, ledger, max_batch_bytes,
        │               max_delete_fraction, accept_config_baseline, master, spark_verbose
        │               (the jobs that scan partitions with Spark)
        ├── InspectOptions  exact, html
        └── ChangeOptions(JobOptions, LockingOptions)  plan, apply
            ├── RetainOptions
            └── CompactOptions  dedupe_buffer_bytes, strategy, sort_bucket_bytes

A value the options refuse raises :class:`InvalidOptionUsage` or :class:`InvalidOptionConfig` (a
:class:`~segment_io.errors.UsageError` / :class:`~segment_io.errors.ConfigError`, exit code 2 on the command
line: nothing was done) naming the field, e.g. ``CompactOptions.max_delete_fraction=1.5: ...``.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence

from jobs.engine.report.events import ProgressLine
from jobs.logdir.lock import lease_ttl_ms
from jobs.logdir.tiered import RemoteOptions
from jobs.rules.config import ConfigSet
from jobs.rules.kafka_defaults import DEDUPE_BUFFER_BYTES
from jobs.rules.map_capacity import max_keys_for_buffer
from segment_io.errors import ConfigError, SegjobsError, UsageError
from segment_io.storage.options import StorageOptions

#: Receives every progress line of a run (failures and notices included), already formatted, e.g.
#: ``[compact   1.2s] scanned 8 partition(s)``. The default (None) prints only failures and notices to stderr.
#: The line is a :class:`~jobs.engine.report.events.ProgressLine`: a ``str``, so a function taking text works as it
#: is, whose ``event`` attribute is the structured :class:`~jobs.engine.report.events.ProgressEvent` (level, event
#: name, partition, bytes, seconds, ...); ``line.event.to_json()`` is what ``--log-format json`` prints.
ProgressSink = Callable[[ProgressLine], None]

#: Kafka's ``log.cleaner.dedupe.buffer.size`` default (128 MiB): the offset map's memory per compaction task.
DEFAULT_DEDUPE_BUFFER_BYTES = DEDUPE_BUFFER_BYTES
#: How compaction maps the keys of a partition (see :class:`CompactOptions`).
STRATEGIES = ("auto", "memory", "external-sort")
#: The least memory one reduce task of the external sort may be given (``CompactOptions.sort_bucket_bytes``,
#: ``--sort-bucket-bytes``): 1 MiB.
MIN_SORT_BUCKET_BYTES = 1 << 20
#: ... as the command line writes it
MIN_SORT_BUCKET_TEXT = f"{MIN_SORT_BUCKET_BYTES >> 20}MiB"


class InvalidOption(SegjobsError):
    """An option value refused when the options are made. ``field`` is the dataclass field; the message names
    it as the Python API spells it, :attr:`cli_message` as the command line does (``--dedupe-buffer-bytes``)."""

    def __init__(self, message: str, *, field: str, cli_message: str | None = None) -> None:
        self.field = field
        self.cli_message = cli_message or message
        super().__init__(message)

    def for_cli(self) -> "InvalidOption":
        """This error with the command line's wording (what ``segjobs`` prints)."""
        self.args = (self.cli_message,)
        return self


class InvalidOptionUsage(InvalidOption, UsageError):
    """An option the run cannot work with (exit code 2)."""


class InvalidOptionConfig(InvalidOption, ConfigError):
    """An option that contradicts what Kafka allows (exit code 2)."""


def require_matplotlib(field: str, cli_flag: str) -> None:
    """Refuse an option that draws charts when matplotlib is not installed (before any work: exit code 2)."""
    if importlib.util.find_spec("matplotlib") is None:
        fix = "install it: pip install 'segjobs[html]' (or matplotlib)"
        raise InvalidOptionUsage(f"{field} draws charts with matplotlib, which is not installed; {fix}",
                                 field=field.rsplit(".", 1)[-1],
                                 cli_message=f"{cli_flag} draws charts with matplotlib, which is not installed; {fix}")


def flag(name: str) -> str:
    """The command-line spelling of an option field: ``dedupe_buffer_bytes`` -> ``--dedupe-buffer-bytes``."""
    return "--" + name.replace("_", "-")


def _strings(value: Any, owner: str, name: str) -> tuple[str, ...]:
    """A sequence of strings as a tuple; one string is one item (not its characters)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    items = tuple(value)
    if not all(isinstance(v, str) for v in items):
        raise InvalidOptionUsage(f"{owner}.{name}={value!r}: expected strings", field=name)
    return items


def _optional_text(value: Any, owner: str, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise InvalidOptionUsage(f"{owner}.{name}={value!r}: expected a path or URI string", field=name)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What every run takes: how to reach the store, and where progress lines go."""

    #: S3 connection settings; None: from the environment (:meth:`StorageOptions.from_env`). Local paths need none.
    storage: StorageOptions | None = None
    #: receives every progress line; None: only failures and notices are printed, on stderr (like ``--quiet``)
    progress: ProgressSink | None = None

    def __post_init__(self) -> None:
        if self.storage is not None and not isinstance(self.storage, StorageOptions):
            raise InvalidOptionUsage(f"{self._owner}.storage={self.storage!r}: expected a StorageOptions",
                                     field="storage")
        if self.progress is not None and not callable(self.progress):
            raise InvalidOptionUsage(f"{self._owner}.progress={self.progress!r}: expected a callable taking one "
                                     f"line of text", field="progress")

    @property
    def _owner(self) -> str:
        return type(self).__name__

    def storage_options(self) -> StorageOptions:
        """The storage settings to use: the given ones, else the environment's."""
        return self.storage if self.storage is not None else StorageOptions.from_env()


@dataclass(frozen=True, kw_only=True)
class LockingOptions(RunOptions):
    """What a run that changes the log dir takes: a dry run, and how long its S3 lease lasts."""

    #: write nothing (and take no lock): report exactly what a real run would do
    dry_run: bool = False
    #: S3: how long the log dir's lease lasts without renewal: ms, or a duration such as "90s" / "5m";
    #: None: $SEGJOBS_LEASE_TTL, else 2 minutes
    lease_ttl: str | int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.dry_run, bool):
            raise InvalidOptionUsage(f"{self._owner}.dry_run={self.dry_run!r}: expected True or False", field="dry_run")
        if self.lease_ttl is not None:
            lease_ttl_ms(str(self.lease_ttl))  # UsageError naming the value, the same wording as --lease-ttl


@dataclass(frozen=True, kw_only=True)
class JobOptions(RunOptions):
    """What the scanning jobs (compact, retain, inspect) share: configuration, scope, outputs, limits, Spark."""

    #: topic configuration: a TOML file (see conf/topics.toml) or a ConfigSet; None: Kafka's defaults
    config: str | os.PathLike | ConfigSet | None = None
    #: ``TOPIC_GLOB:KEY=VALUE`` settings on top of ``config`` (the command line's ``--set``)
    overrides: Sequence[str] = ()
    #: only topics matching these globs (default: all)
    topics: Sequence[str] = ()
    #: only these partitions, e.g. ``orders-3``; naming partitions (or topics) forces compaction of them
    partitions: Sequence[str] = ()
    #: write the JSON report here too (local path or s3:// URI)
    report: str | None = None
    #: append one row per partition to this Delta table
    ledger: str | None = None
    #: the most bytes one compressed batch may inflate to; None: $SEGJOBS_MAX_BATCH_BYTES, else 256 MiB
    max_batch_bytes: int | None = None
    #: retention's safety limit for every topic (a share of its bytes, in [0, 1]; 1 disables it); None: each
    #: topic's segjobs.max.delete.fraction
    max_delete_fraction: float | None = None
    #: the safety limit judges this run's retention settings against themselves, not against those the last real
    #: run applied (or Kafka's defaults): a new or deliberately changed config is not refused for being new; a
    #: doubtful ``now`` still is. A real run records the settings as usual, so later runs are judged against them
    accept_config_baseline: bool = False
    #: the Spark master when the run creates its session (None: what spark-submit set, else local[*])
    master: str | None = None
    #: show Spark's own log lines (INFO) on stderr when the run creates its session
    spark_verbose: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        if self.config is not None and not isinstance(self.config, (str, os.PathLike, ConfigSet)):
            raise InvalidOptionUsage(f"{owner}.config={self.config!r}: expected a TOML file path or a ConfigSet",
                                     field="config")
        for name in ("overrides", "topics", "partitions"):
            object.__setattr__(self, name, _strings(getattr(self, name), owner, name))
        for name in ("report", "ledger"):
            object.__setattr__(self, name, _optional_text(getattr(self, name), owner, name))
        mbb = self.max_batch_bytes
        if mbb is not None and (isinstance(mbb, bool) or not isinstance(mbb, int) or mbb <= 0):
            raise InvalidOptionUsage(f"{owner}.max_batch_bytes={mbb!r}: expected a positive number of bytes",
                                     field="max_batch_bytes")
        if not isinstance(self.accept_config_baseline, bool):
            raise InvalidOptionUsage(f"{owner}.accept_config_baseline={self.accept_config_baseline!r}: expected True "
                                     f"or False", field="accept_config_baseline")
        f = self.max_delete_fraction
        if f is not None:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or math.isnan(f) or not 0.0 <= f <= 1.0:
                raise InvalidOptionUsage(f"{owner}.max_delete_fraction={f!r}: expected a number in [0, 1], e.g. 0.5 "
                                         f"(1 disables the limit)", field="max_delete_fraction")
            object.__setattr__(self, "max_delete_fraction", float(f))

    def load_configs(self) -> ConfigSet:
        """The topic configuration: ``config`` with ``overrides`` on top (Kafka's defaults where neither says
        anything). Raises :class:`~segment_io.errors.ConfigError` naming the file and the setting."""
        if isinstance(self.config, ConfigSet):
            return self.config.with_overrides(list(self.overrides))
        if self.config is not None:
            return ConfigSet.load(os.fspath(self.config), overrides=list(self.overrides))
        return ConfigSet().with_overrides(list(self.overrides))


@dataclass(frozen=True, kw_only=True)
class TieredReadOptions(RunOptions):
    """Of the runs that read a tiered topic as one log (``inspect``, ``table``)."""

    #: the remote store of tiered topics: each tiered partition is read as one log, its finished remote
    #: segments below the local log then its local segments (:func:`jobs.logdir.tiered.tiered_listing`)
    remote: RemoteOptions | None = None


@dataclass(frozen=True, kw_only=True)
class InspectOptions(JobOptions, TieredReadOptions):
    """``segjobs inspect``: nothing is written, no lock is taken."""

    #: count distinct keys exactly and measure compaction with a dry run of the compaction task (slower);
    #: False: HyperLogLog estimates
    exact: bool = False
    #: also write a self-contained HTML report with the charts here (local path or s3:// URI); the JSON report
    #: names it (``html_report``). Needs matplotlib (``pip install 'segjobs[html]'``)
    html: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "html", _optional_text(self.html, self._owner, "html"))
        if self.html:
            require_matplotlib(f"{self._owner}.html", flag("html"))


@dataclass(frozen=True, kw_only=True)
class ChangeOptions(JobOptions, LockingOptions):
    """What the jobs that change the log dir (compact, retain) share: plan files."""

    #: with ``dry_run``: also write the plan of the run to this file (local path or s3:// URI) for review
    plan: str | None = None
    #: carry out exactly the plan in this file (its now, topic configs, scope and options)
    apply: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        for name in ("plan", "apply"):
            object.__setattr__(self, name, _optional_text(getattr(self, name), owner, name))
        if self.plan and self.apply:
            raise InvalidOptionUsage(
                f"{owner}.plan and {owner}.apply exclude each other: a dry run with plan= writes a plan, apply= "
                f"carries one out", field="apply",
                cli_message="--plan and --apply exclude each other: --dry-run --plan FILE writes a plan, "
                            "--apply FILE carries one out")
        if self.plan and not self.dry_run:
            raise InvalidOptionUsage(
                f"{owner}.plan needs dry_run=True: a plan is made by a dry run, reviewed, then carried out with "
                f"apply=", field="plan",
                cli_message="--plan FILE needs --dry-run: a plan is made by a dry run, reviewed, then carried out "
                            "with --apply FILE")


@dataclass(frozen=True, kw_only=True)
class RetainOptions(ChangeOptions):
    """``segjobs retain``."""


@dataclass(frozen=True, kw_only=True)
class CompactOptions(ChangeOptions):
    """``segjobs compact``."""

    #: offset-map memory per task (Kafka's log.cleaner.dedupe.buffer.size); a partition with more dirty keys
    #: than fit is cleaned partially and the next run continues
    dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES
    #: ``memory`` (one task per partition, a bounded offset map, partial when it fills), ``external-sort``
    #: (key hashes in hash buckets, each reduced by its own task; exact in one run for any number of keys,
    #: several tasks per partition) or ``auto`` (memory when the partition's dirty records fit the map, else
    #: memory first, handed over to external-sort if the map fills; see
    #: :func:`jobs.rules.external_sort.choose_strategy`)
    strategy: str = "auto"
    #: external-sort: the memory one bucket's reduce may take (the buckets a partition's keys are hashed into
    #: are as many as that needs, so a task's memory does not grow with the key count); None: a quarter of an
    #: executor's memory (see :func:`jobs.engine.compact.external_sort.default_bucket_bytes`)
    sort_bucket_bytes: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        b = self.sort_bucket_bytes
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < MIN_SORT_BUCKET_BYTES):
            raise InvalidOptionUsage(
                f"{owner}.sort_bucket_bytes={b!r}: expected a number of bytes, at least {MIN_SORT_BUCKET_BYTES} "
                f"({MIN_SORT_BUCKET_TEXT})", field="sort_bucket_bytes",
                cli_message=f"{flag('sort_bucket_bytes')} {b!r}: expected a size of at least {MIN_SORT_BUCKET_TEXT} "
                            f"({MIN_SORT_BUCKET_BYTES} bytes)")
        if self.strategy not in STRATEGIES:
            raise InvalidOptionUsage(f"{owner}.strategy={self.strategy!r}: unknown; choose one of "
                                     f"{', '.join(STRATEGIES)}", field="strategy")
        d = self.dedupe_buffer_bytes
        if isinstance(d, bool) or not isinstance(d, int):
            raise InvalidOptionUsage(f"{owner}.dedupe_buffer_bytes={d!r}: expected a number of bytes",
                                     field="dedupe_buffer_bytes")
        try:
            max_keys_for_buffer(d)
        except ConfigError as exc:
            raise InvalidOptionConfig(f"{owner}.dedupe_buffer_bytes={d}: {exc}", field="dedupe_buffer_bytes",
                                      cli_message=str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class RecoverOptions(LockingOptions):
    """``segjobs recover``."""

    #: S3: take over the lease of this run (named when a run is refused), e.g. after it died on another host
    break_lease: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dry_run and self.break_lease:
            raise InvalidOptionUsage(
                f"{self._owner}.break_lease takes the lease over, which a dry run does not do; drop one of them",
                field="break_lease",
                cli_message="--break-lease takes the lease over, which a --dry-run does not do; drop one of them")


def field_defaults(options_type: type) -> dict[str, Any]:
    """The default of every field of an options class (what "not given" means for it)."""
    return {f.name: f.default for f in fields(options_type)}


__all__ = ["DEFAULT_DEDUPE_BUFFER_BYTES", "STRATEGIES", "ChangeOptions", "CompactOptions", "InspectOptions",
           "InvalidOption", "InvalidOptionConfig", "InvalidOptionUsage", "JobOptions", "LockingOptions",
           "ProgressSink", "RecoverOptions", "RetainOptions", "RunOptions", "TieredReadOptions", "field_defaults",
           "flag"]
