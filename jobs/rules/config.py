"""Topic configuration: Kafka's topic config names and defaults, read from TOML, validated up front.

File format (see ``conf/topics.toml``)::

    [defaults]
    "cleanup.policy" = "compact"

    [topics."orders.*"]
    "retention.ms" = "7d"

    [topics."orders.audit"]
    "cleanup.policy" = ["compact", "delete"]

Keys are Kafka topic config names. Quote them: TOML reads an unquoted ``retention.ms`` as a nested
table, which is accepted too (nested keys are joined with dots), but a glob with dots must be quoted
(``[topics."orders.*"]``), or TOML splits it into nested tables.

Layering, lowest first, for a topic: Kafka's defaults, then ``[defaults]``, then every
``[topics."<glob>"]`` table whose glob matches the topic, least specific first, then every
``--set GLOB:KEY=VALUE`` override whose glob matches, least specific first. So a more specific table
only overrides the keys it sets. Kafka's own topics (:data:`KAFKA_TOPICS`: ``__consumer_offsets``,
``__transaction_state``, ...) get Kafka's creation configs right above Kafka's defaults, and only a table or
override that names such a topic exactly can change a key those configs set.

Specificity of a glob (``fnmatch`` syntax: ``*``, ``?``, ``[...]``, case-sensitive): an exact topic
name (no wildcard) beats every glob; among globs, the one with more literal characters (characters
outside wildcards and bracket classes) is more specific. Two matching globs of equal specificity are
a :class:`~segment_io.errors.ConfigError` naming both, raised when a topic matches both (call
:meth:`ConfigSet.check_topics` with the listed topics before any work starts).

Value types: integers for ``*.ms`` and ``*.bytes`` keys, as TOML integers or strings. Strings may
carry a unit: durations ``500ms``, ``30s``, ``15m``, ``1h``, ``7d``, ``2w``; sizes ``100B``,
``64KiB``, ``512MiB``, ``1GiB``, ``2TiB`` (binary units only: ``GB`` is refused as ambiguous); the one
parser of both is :mod:`segment_io.units`, shared with the command-line options.
``-1`` (where Kafka allows it) means unlimited. ``min.cleanable.dirty.ratio`` is a number in
[0, 1]. ``cleanup.policy`` is ``"delete"``, ``"compact"``, ``"compact,delete"`` (any order, any
spacing, any case) or a TOML list of those words.

Defaults and ranges are Kafka's (``LogConfig``), from the one table :mod:`jobs.rules.kafka_defaults`;
``min.compaction.lag.ms`` must not exceed ``max.compaction.lag.ms`` (Kafka's ``LogConfig.validateValues``).
Every table is validated when the file is loaded, each ``[topics]`` table also merged over ``[defaults]``; the
full merge for a topic is validated again in :meth:`ConfigSet.for_topic`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from jobs.rules.kafka_defaults import KAFKA_DEFAULTS, default_of
from segment_io.errors import ConfigError
from segment_io.layout import closest_topics_hint
from segment_io.units import parse_duration, parse_size

POLICY_COMPACT = "compact"
POLICY_DELETE = "delete"
#: Where a key comes from when no entry of the configuration sets it (see :meth:`ConfigSet.origin_of`).
KAFKA_DEFAULT_ORIGIN = "Kafka's default"
#: The first line of a file ``segjobs config import`` writes: its entries are named as imported from the broker.
IMPORTED_HEADER = "# segjobs topic configuration, imported from Kafka by `segjobs config import`"
#: What the source of an imported file's entries ends with (see :meth:`ConfigSet.load`).
IMPORTED_MARK = " (imported from the broker)"
#: What the source of a ``--set`` option's entries starts with.
SET_MARK = "--set "
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class TopicConfig:
    """The settings of one topic that compaction and retention read (Kafka's defaults as field defaults).

    Attribute names are the Kafka names in snake_case; the defaults are those of
    :data:`jobs.rules.kafka_defaults.KAFKA_DEFAULTS`. Build one with :meth:`ConfigSet.for_topic`, or in
    code with ``TopicConfig.from_settings({"cleanup.policy": "compact"})`` or ``dataclasses.replace``.
    """

    cleanup_policy: frozenset[str] = frozenset(str(default_of("cleanup.policy")).split(","))
    delete_retention_ms: int = int(default_of("delete.retention.ms"))
    min_compaction_lag_ms: int = int(default_of("min.compaction.lag.ms"))
    max_compaction_lag_ms: int = int(default_of("max.compaction.lag.ms"))
    min_cleanable_dirty_ratio: float = float(default_of("min.cleanable.dirty.ratio"))
    segment_bytes: int = int(default_of("segment.bytes"))
    segment_index_bytes: int = int(default_of("segment.index.bytes"))
    index_interval_bytes: int = int(default_of("index.interval.bytes"))
    retention_ms: int = int(default_of("retention.ms"))
    retention_bytes: int = int(default_of("retention.bytes"))
    file_delete_delay_ms: int = int(default_of("file.delete.delay.ms"))
    #: A broker config (transaction coordinator), accepted here per topic for the offline
    #: "is this producer still active" rule.
    producer_id_expiration_ms: int = int(default_of("producer.id.expiration.ms"))
    max_message_bytes: int = int(default_of("max.message.bytes"))
    message_timestamp_type: str = str(default_of("message.timestamp.type"))
    #: segjobs' own safety limit (``segjobs.max.delete.fraction``): retention leaves a topic untouched when
    #: its time and size rules would delete more than this share of the topic's bytes (1.0: no limit).
    max_delete_fraction: float = float(default_of("segjobs.max.delete.fraction"))
    #: Other Kafka topic configs found in the file: accepted so a config exported from Kafka loads,
    #: reported, but without effect offline (``(name, value)`` pairs, sorted).
    inert_settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for key, spec in _SPECS.items():
            problem = spec.check(getattr(self, spec.attr))
            if problem:
                raise ConfigError(f"{key}: {problem}")
        if not isinstance(self.cleanup_policy, frozenset) or not self.cleanup_policy \
                or not self.cleanup_policy <= {POLICY_COMPACT, POLICY_DELETE}:
            raise ConfigError(f"cleanup.policy: expected a non-empty frozenset of 'compact'/'delete', "
                              f"got {self.cleanup_policy!r}")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ConfigError(f"message.timestamp.type: expected one of {', '.join(TIMESTAMP_TYPES)}, "
                              f"got {self.message_timestamp_type!r}")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError(f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                              f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")

    @property
    def compact(self) -> bool:
        """True when ``cleanup.policy`` includes ``compact``."""
        return POLICY_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """True when ``cleanup.policy`` includes ``delete`` (time and size retention apply)."""
        return POLICY_DELETE in self.cleanup_policy

    @property
    def policy_text(self) -> str:
        """``cleanup.policy`` as Kafka prints it: ``compact``, ``delete`` or ``compact,delete``."""
        return ",".join(sorted(self.cleanup_policy))

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], source: str = "<settings>") -> "TopicConfig":
        """Kafka's defaults overlaid with ``settings`` (Kafka names, values as in the TOML file)."""
        layer = _Layer.parse(settings, source=source, glob=None)
        return _merge([layer])

    def to_settings(self) -> dict[str, Any]:
        """Every setting by its key name, as plain JSON/TOML values that :meth:`from_settings` reads back
        into an equal config (inert settings included)."""
        out: dict[str, Any] = {}
        for key, spec in _SPECS.items():
            value = getattr(self, spec.attr)
            out[key] = self.policy_text if key == "cleanup.policy" else value
        out.update(self.inert_settings)
        return out


# --------------------------------------------------------------------------------------------------
# Key definitions: type, range and the TopicConfig attribute of every key segjobs reads
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Spec:
    """How one Kafka key is read and bounded (the bounds of Kafka's ConfigDef for it, from KAFKA_DEFAULTS)."""

    attr: str
    parse: Callable[[Any], Any]
    lo: float | None = None
    hi: float | None = None

    @staticmethod
    def of(key: str, attr: str, parse: Callable[[Any], Any]) -> "_Spec":
        known = KAFKA_DEFAULTS[key]
        return _Spec(attr, parse, known.lo, known.hi)

    def check(self, value: Any) -> str | None:
        if self.lo is not None and value < self.lo:
            return f"{value!r} is below the minimum {self.lo!r}"
        if self.hi is not None and value > self.hi:
            return f"{value!r} is above the maximum {self.hi!r}"
        return None


def _duration(raw: Any) -> int:
    return parse_duration(raw)


def _size(raw: Any) -> int:
    return parse_size(raw)


def _ratio(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(f"expected a number in [0, 1], got {type(raw).__name__} {raw!r}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"cannot read {raw!r} as a number") from None
    if value != value:  # NaN passes every range comparison
        raise ValueError("NaN is not a ratio")
    return value


def _policy(raw: Any) -> frozenset[str]:
    if isinstance(raw, str):
        words = raw.split(",")
    elif isinstance(raw, list) and all(isinstance(w, str) for w in raw):
        words = list(raw)
    else:
        raise ValueError(f"expected \"compact\", \"delete\", \"compact,delete\" or a list of those, got {raw!r}")
    policy = frozenset(w.strip().lower() for w in words if w.strip())
    if not policy:
        raise ValueError("empty cleanup.policy: give compact, delete or both")
    unknown = sorted(policy - {POLICY_COMPACT, POLICY_DELETE})
    if unknown:
        raise ValueError(f"unknown policy {', '.join(map(repr, unknown))} (valid: compact, delete)")
    return policy


def _timestamp_type(raw: Any) -> str:
    if raw not in TIMESTAMP_TYPES:
        raise ValueError(f"expected one of {', '.join(TIMESTAMP_TYPES)}, got {raw!r}")
    return raw


#: Every key that has an effect: the TopicConfig attribute and the parser of each; the bounds are Kafka's
#: (KAFKA_DEFAULTS: INT keys are 32-bit in Kafka; -1 means unlimited for retention.ms, any negative value for
#: retention.bytes).
_SPECS: dict[str, _Spec] = {key: _Spec.of(key, attr, parse) for key, attr, parse in (
    ("cleanup.policy", "cleanup_policy", _policy),
    ("delete.retention.ms", "delete_retention_ms", _duration),
    ("min.compaction.lag.ms", "min_compaction_lag_ms", _duration),
    ("max.compaction.lag.ms", "max_compaction_lag_ms", _duration),
    ("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", _ratio),
    ("segment.bytes", "segment_bytes", _size),
    ("segment.index.bytes", "segment_index_bytes", _size),
    ("index.interval.bytes", "index_interval_bytes", _size),
    ("retention.ms", "retention_ms", _duration),
    ("retention.bytes", "retention_bytes", _size),
    ("file.delete.delay.ms", "file_delete_delay_ms", _duration),
    ("producer.id.expiration.ms", "producer_id_expiration_ms", _duration),
    ("max.message.bytes", "max_message_bytes", _size),
    ("message.timestamp.type", "message_timestamp_type", _timestamp_type),
    # segjobs' own key (no Kafka equivalent): see TopicConfig.max_delete_fraction
    ("segjobs.max.delete.fraction", "max_delete_fraction", _ratio),
)}

#: Kafka topic configs that have no effect offline; accepted so that a config exported from a
#: cluster loads unchanged, and listed in TopicConfig.inert_settings.
INERT_KEYS: frozenset[str] = frozenset({
    "segment.ms", "segment.jitter.ms", "flush.messages", "flush.ms", "unclean.leader.election.enable",
    "min.insync.replicas", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "preallocate", "message.format.version", "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "message.downconversion.enable",
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
    "remote.storage.enable", "local.retention.ms", "local.retention.bytes", "remote.log.copy.disable",
    "remote.log.delete.on.disable",
})

KNOWN_KEYS: frozenset[str] = frozenset(_SPECS) | INERT_KEYS


def default_value(key: str) -> Any:
    """Kafka's default for a key segjobs reads (``ConfigError`` for any other name)."""
    if key not in _SPECS:
        raise ConfigError(f"{key}: {_unknown_key_hint(key)}")
    return TopicConfig.__dataclass_fields__[_SPECS[key].attr].default


def _unknown_key_hint(key: str) -> str:
    candidates = sorted(KNOWN_KEYS)
    dotted = key.replace("_", ".").replace("-", ".").lower()
    if dotted in KNOWN_KEYS:
        return f"unknown key; did you mean {dotted!r}?"
    close = difflib.get_close_matches(dotted, candidates, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if "." in key and not close:
        hint += " (a glob containing dots must be quoted: [topics.\"a.b.*\"])"
    return f"unknown key{hint}"


# --------------------------------------------------------------------------------------------------
# Topics Kafka creates or reserves itself
# --------------------------------------------------------------------------------------------------

_MIB = 1 << 20


@dataclass(frozen=True)
class KafkaTopic:
    """A topic Kafka creates (or reserves) itself: the configs it creates the topic with, where in Kafka they
    come from, and, for a topic segjobs must never change, why."""

    settings: Mapping[str, Any]
    source: str
    never_touched: str | None = None


#: The one table of Kafka's own topics. A topic here gets ``settings`` (Kafka's creation configs) over
#: Kafka's defaults; ``[defaults]`` and glob tables or ``--set`` options cannot change those keys (a ``*``
#: meant for user topics must not turn __consumer_offsets into a delete topic): only a table or ``--set``
#: naming the topic exactly can. A topic with ``never_touched`` is skipped by every job whatever the config.
KAFKA_TOPICS: dict[str, KafkaTopic] = {
    "__consumer_offsets": KafkaTopic(
        {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": 100 * _MIB},
        "GroupCoordinatorService.groupMetadataTopicConfigs(); segment.bytes is the broker's "
        "offsets.topic.segment.bytes, default 100 MiB (GroupCoordinatorConfig)"),
    "__transaction_state": KafkaTopic(
        {"cleanup.policy": "compact", "compression.type": "uncompressed", "segment.bytes": 100 * _MIB,
         "min.insync.replicas": 2, "unclean.leader.election.enable": "false"},
        "TransactionStateManager.transactionTopicConfigs; segment.bytes and min.insync.replicas are the broker's "
        "transaction.state.log.segment.bytes (100 MiB) and transaction.state.log.min.isr (2) (TransactionLogConfig)"),
    "__share_group_state": KafkaTopic(
        # Kafka sets no retention here (the broker's 7 days apply), but a running share coordinator rewrites
        # a snapshot of every idle share partition every 5 minutes (cold-partition snapshots) and trims the
        # topic itself with DeleteRecords, so time never removes live state. Offline nothing rewrites those
        # snapshots: retention by time or size would delete the only state of idle groups. segjobs therefore
        # follows the coordinator's log start offset only.
        {"cleanup.policy": "delete", "compression.type": "producer", "segment.bytes": 100 * _MIB,
         "retention.ms": -1, "retention.bytes": -1},
        "ShareCoordinatorService.shareGroupStateTopicConfigs(); segment.bytes is the broker's "
        "share.coordinator.state.topic.segment.bytes, default 100 MiB (ShareCoordinatorConfig); "
        "retention.ms and retention.bytes -1 are segjobs' own (see docs/configuration.md)"),
    "__remote_log_metadata": KafkaTopic(
        {"cleanup.policy": "delete", "retention.ms": -1, "remote.storage.enable": "false"},
        "TopicBasedRemoteLogMetadataManager.createRemoteLogMetadataTopicRequest(); retention.ms is "
        "remote.log.metadata.topic.retention.ms, default -1 (TopicBasedRemoteLogMetadataManagerConfig)"),
    "__cluster_metadata": KafkaTopic(
        {}, "Topic.CLUSTER_METADATA_TOPIC_NAME: the KRaft metadata log",
        never_touched="KRaft metadata log, never touched: the controller trims it with its own snapshots, and "
                      "removing or rewriting its segments would lose cluster metadata a broker needs to start"),
}


def never_touched(topic: str) -> str | None:
    """Why segjobs must leave ``topic`` alone whatever the configuration says, or None."""
    known = KAFKA_TOPICS.get(topic)
    return known.never_touched if known is not None else None


# --------------------------------------------------------------------------------------------------
# Globs
# --------------------------------------------------------------------------------------------------

_GLOB_CHARS = re.compile(r"^[A-Za-z0-9._\-*?\[\]!]+$")
_WILDCARDS = re.compile(r"\[[^\]]*\]|[*?]")


def validate_glob(glob: str) -> str | None:
    """Why ``glob`` cannot match a Kafka topic name (legal: letters, digits, ``.``, ``_``, ``-``, plus
    wildcards ``*``, ``?``, ``[...]``), or None when it is fine."""
    if not glob:
        return "empty topic glob"
    if not _GLOB_CHARS.match(glob):
        return (f"topic glob {glob!r} contains characters a Kafka topic name cannot have "
                f"(legal: letters, digits, '.', '_', '-'; wildcards '*', '?', '[...]')")
    if glob.count("[") != glob.count("]"):
        return f"topic glob {glob!r} has an unbalanced bracket class"
    return None


def glob_specificity(glob: str) -> tuple[bool, int]:
    """Sort key of a glob, higher is more specific: (exact topic name, number of literal characters)."""
    literal = len(_WILDCARDS.sub("", glob))
    return (_WILDCARDS.search(glob) is None, literal)


def topic_matches(glob: str, topic: str) -> bool:
    """Whether ``topic`` matches ``glob`` (fnmatch syntax, case-sensitive like Kafka topic names)."""
    return fnmatchcase(topic, glob)


# --------------------------------------------------------------------------------------------------
# Layers: one table of the file or the --set overrides of one glob, parsed and typed
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    source: str  # where the values come from, e.g. 'topics.toml [topics."orders.*"]'
    glob: str | None  # None: applies to every topic ([defaults])
    values: Mapping[str, Any]  # typed values by Kafka key (inert keys keep their text)
    key_sources: Mapping[str, str] = field(default_factory=dict)  # per-key source where finer than `source`

    def source_of(self, key: str) -> str:
        return self.key_sources.get(key, self.source)

    @staticmethod
    def parse(settings: Mapping[str, Any], *, source: str, glob: str | None) -> "_Layer":
        values: dict[str, Any] = {}
        for key, raw in _flatten(settings, source):
            if glob is not None and key not in KNOWN_KEYS:
                split = [k for k in KNOWN_KEYS if key.endswith("." + k)]
                if split:
                    whole = f"{glob}.{key[: -len(split[0]) - 1]}"
                    raise ConfigError(f"{source}: {key}: TOML split the topic glob at its dots: quote it "
                                      f"whole, [topics.\"{whole}\"], with {split[0]!r} inside")
            values[key] = _parse_value(key, raw, source)
        return _Layer(source, glob, values)


def _flatten(settings: Mapping[str, Any], source: str, prefix: str = "") -> Iterable[tuple[str, Any]]:
    for k, v in settings.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            # an unquoted dotted TOML key (retention.ms = 1) arrives as nested tables
            yield from _flatten(v, source, key + ".")
        else:
            yield key, v


def _parse_value(key: str, raw: Any, source: str) -> Any:
    spec = _SPECS.get(key)
    if spec is None:
        if key in INERT_KEYS:
            return str(raw)
        raise ConfigError(f"{source}: {key}: {_unknown_key_hint(key)}")
    try:
        value = spec.parse(raw)
    except ValueError as e:
        raise ConfigError(f"{source}: {key}: {e}") from None
    problem = spec.check(value)
    if problem:
        raise ConfigError(f"{source}: {key}: {problem}")
    return value


def _merge(layers: Sequence[_Layer]) -> TopicConfig:
    """TopicConfig from Kafka's defaults overlaid with ``layers`` in order; checks cross-key rules."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for layer in layers:
        for key, value in layer.values.items():
            values[key] = value
            origin[key] = layer.source_of(key)
    lo = values.get("min.compaction.lag.ms", default_value("min.compaction.lag.ms"))
    hi = values.get("max.compaction.lag.ms", default_value("max.compaction.lag.ms"))
    if lo > hi:
        where_lo = origin.get("min.compaction.lag.ms", "Kafka's default")
        where_hi = origin.get("max.compaction.lag.ms", "Kafka's default")
        raise ConfigError(f"min.compaction.lag.ms ({lo}, from {where_lo}) > max.compaction.lag.ms ({hi}, "
                          f"from {where_hi}): Kafka rejects a minimum lag above the maximum")
    kwargs = {_SPECS[k].attr: v for k, v in values.items() if k in _SPECS}
    inert = tuple(sorted((k, v) for k, v in values.items() if k not in _SPECS))
    return TopicConfig(**kwargs, inert_settings=inert)


# --------------------------------------------------------------------------------------------------
# --set overrides
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Override:
    """One ``--set TOPIC_GLOB:KEY=VALUE`` option, parsed and typed."""

    glob: str
    key: str
    value: Any
    text: str


def parse_override(text: str) -> Override:
    """Parse ``TOPIC_GLOB:KEY=VALUE`` (``orders*:retention.ms=7d``); ``ConfigError`` naming the option."""
    source = f"{SET_MARK}{text}"
    glob, colon, rest = text.partition(":")
    key, equals, value = rest.partition("=")
    glob, key, value = glob.strip(), key.strip(), value.strip()
    if not colon or not equals or not glob or not key:
        raise ConfigError(f"{source}: expected TOPIC_GLOB:KEY=VALUE, e.g. 'orders*:retention.ms=7d'")
    problem = validate_glob(glob)
    if problem:
        raise ConfigError(f"{source}: {problem}")
    return Override(glob, key, _parse_value(key, value, source), text)


# --------------------------------------------------------------------------------------------------
# ConfigSet
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigSet:
    """All topic settings of a run: ``[defaults]``, the ``[topics]`` globs and ``--set`` overrides."""

    defaults: _Layer = field(default_factory=lambda: _Layer("[defaults]", None, {}))
    tables: tuple[_Layer, ...] = ()
    overrides: tuple[_Layer, ...] = ()

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, overrides: Sequence[str] = ()) -> "ConfigSet":
        """Read and validate a TOML file, then apply ``--set`` option texts on top."""
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ConfigError(f"{p}: cannot read the topic configuration: {e.strerror or e}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
            raise ConfigError(f"{p}: not UTF-8: byte 0x{raw[e.start]:02x} at byte position {e.start} (line {line}, "
                              f"column {column}) cannot be decoded; the topic configuration is TOML, which must be "
                              f"UTF-8: save the file as UTF-8") from None
        return cls.from_toml(text, source=str(p), overrides=overrides)

    @classmethod
    def from_toml(cls, text: str, *, source: str = "<toml>", overrides: Sequence[str] = ()) -> "ConfigSet":
        """Parse and validate TOML text; ``source`` names it in errors."""
        text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark, as some Windows editors write: not TOML's
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: not valid TOML: {e}{_not_toml_hint(text, source)}") from None
        if text.startswith(IMPORTED_HEADER):  # every entry names where its values came from: the broker
            source += IMPORTED_MARK
        return cls.from_mapping(doc, source=source, overrides=overrides)

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], *, source: str = "<config>",
                     overrides: Sequence[str] = ()) -> "ConfigSet":
        """Validate an already parsed document (``{"defaults": {...}, "topics": {glob: {...}}}``)."""
        extra = sorted(set(doc) - {"defaults", "topics"})
        if extra:
            raise ConfigError(f"{source}: unknown top-level table(s) {', '.join(extra)}: "
                              f"expected [defaults] and [topics.\"<glob>\"]")
        defaults_doc = doc.get("defaults", {})
        topics_doc = doc.get("topics", {})
        if not isinstance(defaults_doc, dict):
            raise ConfigError(f"{source}: [defaults] must be a table")
        if not isinstance(topics_doc, dict):
            raise ConfigError(f"{source}: [topics] must hold tables [topics.\"<glob>\"]")
        defaults = _Layer.parse(defaults_doc, source=f"{source} [defaults]", glob=None)
        tables = []
        for glob, table in topics_doc.items():
            where = f'{source} [topics."{glob}"]'
            if not isinstance(table, dict):
                raise ConfigError(f"{where}: expected a table of topic settings, got {table!r} "
                                  f"(write [topics.\"{glob}\"] with its keys below)")
            problem = validate_glob(glob)
            if problem:
                raise ConfigError(f"{where}: {problem}")
            tables.append(_Layer.parse(table, source=where, glob=glob))
        configs = cls(defaults, tuple(tables))
        configs._validate_layers()
        return configs.with_overrides(overrides)

    @classmethod
    def from_resolved(cls, settings: Mapping[str, Mapping[str, Any]],
                      origins: Mapping[str, Mapping[str, str]] | None, *, source: str) -> "ConfigSet":
        """Every topic of ``settings`` with exactly those settings (as :meth:`TopicConfig.to_settings` writes
        them; a plan file's), named as coming from where ``origins[topic][key]`` says (:data:`KAFKA_DEFAULT_ORIGIN`
        for a key it leaves out), or from ``source`` for every key when ``origins`` is None (not recorded).
        Each topic's settings are one layer naming it exactly, above everything else, itself named ``source``."""
        layers = []
        for topic, values in settings.items():
            layer = _Layer.parse(values, source=source, glob=topic)
            if origins is not None:
                recorded = origins.get(topic, {})
                layer = dataclasses.replace(layer, key_sources={k: recorded.get(k, KAFKA_DEFAULT_ORIGIN)
                                                                for k in layer.values})
            layers.append(layer)
        configs = cls(overrides=tuple(layers))
        configs._validate_layers()
        return configs

    def with_overrides(self, overrides: Sequence[str | Override]) -> "ConfigSet":
        """A copy with ``--set`` overrides added on top (texts are parsed; later options win per key)."""
        # one layer per glob: options naming the same glob never tie with each other
        values: dict[str, dict[str, Any]] = {}
        sources: dict[str, dict[str, str]] = {}
        # a layer keeps its name (one from_resolved made is not a --set)
        names: dict[str, str] = {}
        for layer in self.overrides:
            assert layer.glob is not None
            values[layer.glob] = dict(layer.values)
            sources[layer.glob] = dict(layer.key_sources)
            names[layer.glob] = layer.source
        for item in overrides:
            o = parse_override(item) if isinstance(item, str) else item
            values.setdefault(o.glob, {})[o.key] = o.value
            sources.setdefault(o.glob, {})[o.key] = f"{SET_MARK}{o.text}"
        layers = tuple(_Layer(names.get(glob, f"{SET_MARK}{glob}:..."), glob, values[glob], sources[glob])
                       for glob in values)
        result = dataclasses.replace(self, overrides=layers)
        result._validate_layers()
        return result

    def _validate_layers(self) -> None:
        _merge([self.defaults])
        for layer in (*self.tables, *self.overrides):
            _merge([self.defaults, layer])

    # ---- lookup -------------------------------------------------------------------------------

    def layers_for(self, topic: str) -> list[_Layer]:
        """The layers that apply to ``topic``, lowest precedence first (see the module docstring). For a
        topic of :data:`KAFKA_TOPICS`, Kafka's creation configs come first, and layers that do not name the
        topic exactly lose the keys those configs set."""
        layers = [self.defaults, *_ordered_matches(self.tables, topic), *_ordered_matches(self.overrides, topic)]
        kafka = _kafka_layer(topic)
        if kafka is None:
            return layers
        return [kafka, *(layer if layer.glob == topic else _without(layer, kafka.values) for layer in layers)]

    def shadowed(self, topic: str) -> list[str]:
        """Settings of ``[defaults]`` or globs that do not apply to ``topic`` because Kafka creates it with
        its own value (empty for other topics), in words for a progress line."""
        kafka = _kafka_layer(topic)
        if kafka is None:
            return []
        layers = [self.defaults, *_ordered_matches(self.tables, topic), *_ordered_matches(self.overrides, topic)]
        settings = KAFKA_TOPICS[topic].settings
        return [f"{layer.source_of(k)}: {k} does not apply to {topic}: Kafka creates it with {k}={settings[k]} "
                f"(name the topic exactly to override)"
                for layer in layers if layer.glob != topic for k in layer.values if k in kafka.values]

    def for_topic(self, topic: str) -> TopicConfig:
        """The effective configuration of ``topic``; ``ConfigError`` on a specificity tie or a conflict."""
        return _merge(self.layers_for(topic))

    def check_topics(self, topics: Iterable[str]) -> None:
        """Resolve every topic once, so ties and conflicts surface before any work starts."""
        for topic in topics:
            self.for_topic(topic)

    def origin_of(self, topic: str, key: str = "cleanup.policy") -> str:
        """Which entry gives ``topic`` its ``key``: the last layer of :meth:`layers_for` that sets it
        (``conf/topics.toml [topics."orders"]``, a glob's table, ``[defaults]``, ``--set orders:KEY=VALUE``,
        Kafka's creation config of one of its own topics), else :data:`KAFKA_DEFAULT_ORIGIN`."""
        origin = KAFKA_DEFAULT_ORIGIN
        for layer in self.layers_for(topic):
            if key in layer.values:
                origin = layer.source_of(key)
        return origin

    def has_own_settings(self, topic: str) -> bool:
        """Whether anything but Kafka's defaults sets a key of ``topic``: a table or ``[defaults]`` of the file, a
        ``--set``, Kafka's creation config of one of its own topics, or a plan's record of any of those. A topic
        without is one the run knows nothing about: a forgotten ``--config`` looks just like that."""
        return any(layer.source_of(key) != KAFKA_DEFAULT_ORIGIN
                   for layer in self.layers_for(topic) for key in layer.values)

    def check_entries(self, topics: Collection[str], where: str) -> list[str]:
        """Check that the entries name topics ``where`` (a log dir) holds: ``topics`` are all its topics, whatever
        the run's scope. A ``[topics."<name>"]`` table of the file naming one exact topic that is not there is a
        :class:`ConfigError` naming the closest topics, and so is a ``--set`` naming one exact topic that is not
        there: a misspelled name would otherwise leave the real topic to ``[defaults]`` and Kafka's defaults
        (``delete``), and retention would delete what compaction was meant to keep. Returned as warnings (the
        entry has no effect): a glob that matches no topic, an exact name of one of Kafka's own topics
        (:data:`KAFKA_TOPICS`, reserved: not a typo; a shared configuration names them for the log dirs that hold
        them), and any table of a file written by
        ``segjobs config import`` (it lists every topic of the cluster, while one broker's log dir holds some; its
        names come from the broker, not from a person's typing), and any table when the log dir holds no topic."""
        present = set(topics)
        errors, warnings, remedies = [], [], set()
        for layer in (*self.tables, *self.overrides):
            glob = layer.glob or ""
            if any(topic_matches(glob, t) for t in present):
                continue
            exact = glob_specificity(glob)[0]
            hint = closest_topics_hint(glob, present)
            # A person typed the name: a table of a file they wrote, or a --set (a plan file's layers name the
            # topics its run saw, and config import's name the cluster's).
            typed = (layer in self.tables and IMPORTED_MARK not in layer.source) or layer.source.startswith(SET_MARK)
            # A log dir with no topic at all (a broker's, all of its partitions moved away) has none to misspell.
            if exact and present and typed and glob not in KAFKA_TOPICS:
                errors.append(f"{layer.source} names no topic of {where} ({hint}): its settings would apply to "
                              f"nothing, and a topic it was meant for would run with [defaults] and Kafka's defaults")
                remedies.add("remove the table" if layer in self.tables else "drop the --set")
            else:
                what = "names no topic" if exact else "matches no topic"
                warnings.append(f"{layer.source} {what} of {where} ({hint}): it has no effect")
        if errors:
            raise ConfigError("; ".join(errors) + f"; fix the name or {' or '.join(sorted(remedies, reverse=True))};"
                              " nothing was done")
        return warnings


#: A line of ``kafka-configs.sh --describe`` or ``kafka-topics.sh --describe`` output
_DESCRIBE_LINE = re.compile(r"^(?:(?:All|Dynamic|Default) configs for topic "
                            r"|Topic: \S+\s+(?:TopicId|PartitionCount): )", re.MULTILINE)


def _not_toml_hint(text: str, source: str) -> str:
    """For a topic configuration that is not TOML: when it is JSON (an object), or what Kafka's describe tools
    print, what to give instead."""
    if _DESCRIBE_LINE.search(text):
        return (f"; it is the output of Kafka's kafka-configs.sh or kafka-topics.sh --describe: `segjobs config "
                f"import --input {source} --output topics.toml` turns it into the TOML --config reads")
    if not text.lstrip().startswith("{"):
        return ""
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return "; it looks like JSON: the topic configuration is TOML, e.g. [topics.\"orders\"] then " \
               "\"cleanup.policy\" = \"compact\" on the next line"
    if not isinstance(doc, dict):
        return ""
    return ("; it is JSON: the topic configuration is TOML (the same tables: [defaults], [topics.\"<glob>\"]), "
            "e.g. [topics.\"orders\"] then \"cleanup.policy\" = \"compact\" on the next line")


@functools.cache
def _kafka_layer(topic: str) -> _Layer | None:
    """Kafka's creation configs of ``topic`` as a layer, or None when it is not one of Kafka's own."""
    known = KAFKA_TOPICS.get(topic)
    if known is None or not known.settings:
        return None
    return _Layer.parse(known.settings, source=f"Kafka's creation config of {topic} ({known.source})", glob=topic)


def _without(layer: _Layer, keys: Mapping[str, Any]) -> _Layer:
    kept = {k: v for k, v in layer.values.items() if k not in keys}
    return layer if len(kept) == len(layer.values) else dataclasses.replace(layer, values=kept)


def _ordered_matches(layers: Sequence[_Layer], topic: str) -> list[_Layer]:
    matching = [layer for layer in layers if layer.glob is not None and topic_matches(layer.glob, topic)]
    matching.sort(key=lambda layer: glob_specificity(layer.glob or ""))
    for a, b in zip(matching, matching[1:]):
        if glob_specificity(a.glob or "") == glob_specificity(b.glob or ""):
            raise ConfigError(f"topic {topic!r} matches {a.source} and {b.source} with equal specificity "
                              f"({glob_specificity(a.glob or '')[1]} literal characters): make one more "
                              f"specific or name the topic exactly")
    return matching
