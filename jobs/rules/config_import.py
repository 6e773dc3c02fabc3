"""Topic configs from a running Kafka cluster: the describe output of Kafka's tools, turned into segjobs' TOML.

Pure functions over text: no Spark, no storage, no argparse (the command is :mod:`jobs.commands.config`).

Two inputs are read, as Kafka's tools print them (line formats from ``ConfigCommand`` and ``TopicCommand``):

``kafka-configs.sh --bootstrap-server ... --describe --all --entity-type topics [--entity-name T]``
    One header per topic, ``All configs for topic T are:`` (``Dynamic configs for topic T are:`` without
    ``--all``: then only the topic's own overrides follow), then one line per config, sorted by name::

      <2 spaces>segment.bytes=536870912 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=536870912, ...}

    The synonyms are the places the value could come from, highest precedence first: the topic's own
    override (``DYNAMIC_TOPIC_CONFIG``), the broker's dynamic settings (``DYNAMIC_BROKER_CONFIG``,
    ``DYNAMIC_DEFAULT_BROKER_CONFIG``), its ``server.properties`` (``STATIC_BROKER_CONFIG``) and the
    built-in default (``DEFAULT_CONFIG``). The first one is where the value comes from; no synonym at all
    means Kafka's built-in default. A sensitive value is printed as ``null``, and so is a config the broker
    does not define (it cannot type it, so it treats it as sensitive).

``kafka-topics.sh --bootstrap-server ... --describe [--topic T]``
    One tab-separated line per topic, ``Topic: T<TAB>TopicId: ...<TAB>PartitionCount: 3<TAB>
    ReplicationFactor: 1<TAB>Configs: cleanup.policy=compact,segment.bytes=1073741824``, followed by one
    indented line per partition (ignored here). ``Configs`` lists every value that is not Kafka's built-in
    default, topic overrides and broker settings alike, without saying which is which.

What is imported, and why:

* Only keys segjobs reads (``cleanup.policy``, the retention and compaction settings, ``segment.bytes``, ...:
  :data:`SPEC_KEYS`). Kafka topic configs without effect offline (``compression.type``,
  ``min.insync.replicas``, ...) are listed as skipped; ``all_keys`` keeps them (the loader accepts them as
  inert). Keys the loader does not know at all (e.g. a vendor's ``confluent.*``) are always skipped, as is a
  value Kafka does not print (``null``: sensitive).
* Every value whose source is not ``DEFAULT_CONFIG``: a broker setting (``log.retention.hours`` in
  ``server.properties``) changes a topic's effective value exactly as a topic override does, so it must carry
  over. Values at Kafka's built-in default are left out (segjobs applies the same defaults), with one
  exception: Kafka lists a topic's synonyms starting from the broker setting named like the topic config
  (``log.retention.ms`` for ``retention.ms``), so a ``log.retention.hours`` or ``log.retention.minutes``
  setting shows no synonym and reads as ``DEFAULT_CONFIG`` while the value is the broker's. A value labelled
  ``DEFAULT_CONFIG`` that differs from Kafka's built-in default is therefore kept, as a broker setting.
* A broker setting that every imported topic without an override of its own shares goes to ``[defaults]``,
  so topics created after the import get it too; otherwise it stays in the topic's table. kafka-topics.sh
  cannot tell the two apart, so from its output every value goes to the topic's table.
* Kafka's own topics (``__consumer_offsets``, ...; :data:`jobs.rules.config.KAFKA_TOPICS`): for a key Kafka creates
  the topic with, segjobs applies its own table of those creation configs; only a topic-level override
  (``DYNAMIC_TOPIC_CONFIG``) replaces it. A broker value there, or one from kafka-topics.sh (source unknown),
  is skipped: segjobs deliberately keeps ``__share_group_state`` free of time and size retention, for one.
* ``cleanup.policy`` empty (Kafka 4.2+: neither delete nor compact, data kept forever) is written as
  ``delete`` with ``retention.ms = -1`` and ``retention.bytes = -1``: what Kafka documents as its equivalent,
  and the same segments kept (only those below the log start offset go, under every policy).

:func:`import_configs` returns an :class:`ImportResult`; its :meth:`~ImportResult.to_toml` is checked by
loading it with :class:`jobs.rules.config.ConfigSet` and resolving every topic back to the values Kafka printed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from jobs.rules.config import IMPORTED_HEADER, INERT_KEYS, KAFKA_TOPICS, ConfigSet, TopicConfig
from segment_io.errors import ConfigError

#: Kafka's ConfigEntry.ConfigSource names that mean "set on the broker", for every topic it hosts.
BROKER_SOURCES = frozenset({"DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG"})
TOPIC_SOURCE = "DYNAMIC_TOPIC_CONFIG"
DEFAULT_SOURCE = "DEFAULT_CONFIG"
#: The source of a kafka-topics.sh value: "not Kafka's built-in default", nothing more.
UNKNOWN_SOURCE = "UNKNOWN"
_ALL_SOURCES = BROKER_SOURCES | {TOPIC_SOURCE, DEFAULT_SOURCE, UNKNOWN_SOURCE, "DYNAMIC_BROKER_LOGGER_CONFIG",
                                 "DYNAMIC_CLIENT_METRICS_CONFIG", "DYNAMIC_GROUP_CONFIG"}

Tool = Literal["kafka-configs", "kafka-topics"]


# --------------------------------------------------------------------------------------------------
# Parsing the tools' output
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One config of one topic as a tool printed it."""

    key: str
    #: the value's text; None when Kafka printed ``null`` (a sensitive value, or none at all)
    value: str | None
    #: where the value comes from: a ConfigSource name, or :data:`UNKNOWN_SOURCE` (kafka-topics.sh)
    source: str
    #: the setting behind it, e.g. ``log.retention.hours=72`` (the first synonym), when the tool says
    origin: str | None
    sensitive: bool
    line: int
    #: the input line, for error messages
    text: str = ""


@dataclass
class TopicDescription:
    """Every config a tool printed for one topic."""

    topic: str
    tool: Tool
    #: True for ``kafka-configs.sh --describe`` without ``--all``: topic overrides only
    overrides_only: bool
    line: int
    entries: dict[str, Entry] = field(default_factory=dict)


_CONFIGS_HEADER = re.compile(r"^(?P<kind>All|Dynamic|Default) configs for (?P<what>\S+)(?: (?P<name>.*?))? are:\s*$")
_CONFIGS_ENTRY = re.compile(r"^\s+(?P<key>[^=\s]+)=(?P<value>.*?) sensitive=(?P<sensitive>true|false) "
                            r"synonyms=\{(?P<synonyms>.*)\}\s*$")
_SYNONYM_START = re.compile(r"(?:^|, )(?P<source>[A-Z_]+):(?P<name>[^=\s]+)=")
_TOPICS_FIELD = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z ]*?):\s?(?P<value>.*)$")
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_CONFIG_KEY = re.compile(r"^[a-z][a-z0-9._-]*$")


def parse_describe(text: str, *, source: str = "<input>") -> list[TopicDescription]:
    """Parse the output of ``kafka-configs.sh --describe --entity-type topics`` and/or ``kafka-topics.sh
    --describe`` (both may be concatenated). Blank lines and lines starting with ``#`` are ignored; anything
    else a tool does not print is a :class:`~segment_io.errors.ConfigError` naming ``source``, the line
    number and the text."""
    topics: list[TopicDescription] = []
    seen: dict[str, int] = {}
    current: TopicDescription | None = None  # the kafka-configs topic whose entries follow

    def add(description: TopicDescription, text_line: str) -> None:
        if description.topic in seen:
            raise _error(source, description.line, text_line,
                         f"topic {description.topic!r} is described a second time (first on line "
                         f"{seen[description.topic]}): give each topic once")
        seen[description.topic] = description.line
        topics.append(description)

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        header = _CONFIGS_HEADER.match(line)
        if header:
            if header["what"] != "topic" or not header["name"]:
                raise _error(source, number, line,
                             f"this is the describe output of {header['what']} configs; import the topics': "
                             f"kafka-configs.sh --describe --all --entity-type topics")
            topic = _topic_name(header["name"], source, number, line)
            current = TopicDescription(topic, "kafka-configs", overrides_only=header["kind"] == "Dynamic",
                                       line=number)
            add(current, line)
            continue
        if line.startswith("Topic:"):
            current = None
            add(_parse_topics_line(line, source, number), line)
            continue
        if line[0].isspace() and re.match(r"^\s+Topic:\s*\S+\s+Partition:", line):
            current = None  # kafka-topics.sh's per-partition lines: leaders and replicas, no configs
            continue
        entry_match = _CONFIGS_ENTRY.match(line)
        if entry_match:
            if current is None:
                raise _error(source, number, line, "a config line outside any 'All configs for topic T are:' "
                                                   "block")
            entry = _configs_entry(entry_match, current.overrides_only, source, number, line)
            if entry.key in current.entries:
                raise _error(source, number, line, f"{entry.key} is listed twice for topic {current.topic!r} "
                                                   f"(first on line {current.entries[entry.key].line})")
            current.entries[entry.key] = entry
            continue
        raise _error(source, number, line,
                     "not a line of `kafka-configs.sh --describe --entity-type topics` or `kafka-topics.sh "
                     "--describe` output (expected 'All configs for topic T are:', '  key=value sensitive=... "
                     "synonyms={...}' or 'Topic: T<TAB>...<TAB>Configs: k=v,...')")
    if not topics:
        raise ConfigError(f"{source}: no topic found: expected the output of `kafka-configs.sh --describe --all "
                          f"--entity-type topics` or `kafka-topics.sh --describe`")
    return topics


def _error(source: str, number: int, line: str, problem: str) -> ConfigError:
    shown = line if len(line) <= 200 else line[:197] + "..."
    return ConfigError(f"{source} line {number}: {problem}: {shown!r}")


def _topic_name(name: str, source: str, number: int, line: str) -> str:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise _error(source, number, line, f"{name!r} is not a Kafka topic name (letters, digits, '.', '_', '-')")
    return name


def _configs_entry(m: re.Match[str], overrides_only: bool, source: str, number: int, line: str) -> Entry:
    key = m["key"]
    if not _CONFIG_KEY.match(key):
        raise _error(source, number, line, f"{key!r} is not a config name")
    value: str | None = None if m["value"] == "null" else m["value"]
    synonyms = list(_SYNONYM_START.finditer(m["synonyms"]))
    if m["synonyms"].strip() and (not synonyms or synonyms[0].start() != 0):
        raise _error(source, number, line, "cannot read the synonyms (expected {SOURCE:name=value, ...})")
    for s in synonyms:
        if s["source"] not in _ALL_SOURCES:
            raise _error(source, number, line, f"unknown config source {s['source']!r}")
    if synonyms:
        first = synonyms[0]
        end = synonyms[1].start() if len(synonyms) > 1 else len(m["synonyms"])
        origin_source, origin = first["source"], f"{first['name']}={m['synonyms'][first.end():end]}"
    elif overrides_only:
        origin_source, origin = TOPIC_SOURCE, None  # every line of "Dynamic configs for topic" is an override
    else:
        origin_source, origin = DEFAULT_SOURCE, None  # no synonym: Kafka's built-in default
    return Entry(key, value, origin_source, origin, m["sensitive"] == "true", number, line)


def _parse_topics_line(line: str, source: str, number: int) -> TopicDescription:
    fields: dict[str, str] = {}
    for part in line.split("\t"):
        if not part.strip():
            continue
        m = _TOPICS_FIELD.match(part)
        if not m:
            raise _error(source, number, line, f"cannot read the field {part!r} (expected 'Name: value')")
        fields[m["name"].strip()] = m["value"].strip()
    if "Configs" not in fields:
        raise _error(source, number, line, "no 'Configs:' field: expected a `kafka-topics.sh --describe` topic line")
    topic = _topic_name(fields.get("Topic", ""), source, number, line)
    description = TopicDescription(topic, "kafka-topics", overrides_only=False, line=number)
    for key, value in _split_configs(fields["Configs"], source, number, line):
        if key in description.entries:
            raise _error(source, number, line, f"{key} is listed twice")
        description.entries[key] = Entry(key, None if value == "null" else value, UNKNOWN_SOURCE, None,
                                         value == "null", number, line)
    return description


def _split_configs(text: str, source: str, number: int, line: str) -> list[tuple[str, str]]:
    """``a=b,c=x,y,d=`` -> [(a, b), (c, "x,y"), (d, "")]: values may hold commas (``cleanup.policy=compact,delete``,
    throttled replica lists), so a piece without ``key=`` continues the previous value."""
    pairs: list[list[str]] = []
    for piece in text.split(","):
        key, eq, value = piece.partition("=")
        if eq and _CONFIG_KEY.match(key):
            pairs.append([key, value])
        elif pairs:
            pairs[-1][1] += "," + piece
        elif piece:
            raise _error(source, number, line, f"cannot read the configs {text!r} (expected key=value,...)")
    return [(k, v) for k, v in pairs]


# --------------------------------------------------------------------------------------------------
# From described configs to segjobs settings
# --------------------------------------------------------------------------------------------------


#: The keys segjobs reads (the rest of jobs.rules.config.KNOWN_KEYS is inert). segjobs.max.delete.fraction is segjobs'
#: own and never in Kafka's output; producer.id.expiration.ms is a broker setting Kafka does not list per topic.
SPEC_KEYS: frozenset[str] = frozenset(TopicConfig().to_settings()) - INERT_KEYS - {"segjobs.max.delete.fraction"}


@dataclass(frozen=True)
class Setting:
    """One value written to the TOML: its typed value and a comment saying where Kafka took it from."""

    key: str
    value: Any
    note: str


@dataclass(frozen=True)
class Skipped:
    """A value the import leaves out, and why."""

    topic: str
    key: str
    value: str | None
    reason: str
    line: int


@dataclass
class ImportResult:
    """The settings to write, by topic, and what was left out."""

    defaults: dict[str, Setting]
    topics: dict[str, dict[str, Setting]]
    skipped: list[Skipped]
    descriptions: list[TopicDescription]
    #: values labelled DEFAULT_CONFIG and equal to Kafka's built-in default, left out
    at_default: int
    source: str

    def to_toml(self) -> str:
        """The configuration as TOML: a commented header, ``[defaults]``, one ``[topics."T"]`` table per topic
        (sorted), each value with a comment naming its source; validated by :func:`check_round_trip`."""
        lines = _header(self)
        lines += ["[defaults]"]
        if not self.defaults:
            lines.append("# none: no broker setting shared by every imported topic (or none in the input)")
        lines += [_toml_line(s) for _, s in sorted(self.defaults.items())]
        skipped_by_topic: dict[str, list[Skipped]] = {}
        for s in self.skipped:
            skipped_by_topic.setdefault(s.topic, []).append(s)
        for topic in sorted(self.topics):
            lines += ["", f'[topics."{topic}"]']
            settings = self.topics[topic]
            if not settings:
                lines.append("# nothing of its own: [defaults] and Kafka's defaults apply")
            lines += [_toml_line(s) for _, s in sorted(settings.items())]
            for s in sorted(skipped_by_topic.get(topic, ()), key=lambda s: s.key):
                lines.append(f"# not imported: {s.key}" + ("" if s.value is None else f"={s.value}")
                             + f" ({s.reason})")
        text = "\n".join(lines) + "\n"
        check_round_trip(self, text)
        return text

    def skipped_summary(self) -> list[str]:
        """What was left out, in a few lines for stderr (one per reason, naming keys and topic counts)."""
        by_reason: dict[str, dict[str, set[str]]] = {}
        for s in self.skipped:
            by_reason.setdefault(s.reason, {}).setdefault(s.key, set()).add(s.topic)
        out = []
        for reason, keys in sorted(by_reason.items()):
            named = ", ".join(f"{k} ({len(t)} topic{'s' if len(t) > 1 else ''})" if len(self.topics) > 1 else k
                              for k, t in sorted(keys.items()))
            out.append(f"skipped, {reason}: {named}")
        if self.at_default:
            out.append(f"left out {self.at_default} value(s) at Kafka's built-in default (segjobs applies the same)")
        return out


_REASON_INERT = "no effect offline; --all-keys keeps it"
_REASON_UNKNOWN = "not a topic config segjobs knows"
_REASON_SENSITIVE = "sensitive: Kafka does not print the value"
_REASON_NO_VALUE = "Kafka printed no value"
_REASON_KAFKA_TOPIC = ("Kafka's own topic: segjobs keeps the config Kafka creates it with; only a topic override "
                       "(DYNAMIC_TOPIC_CONFIG, from kafka-configs.sh) replaces it")


def import_configs(descriptions: Iterable[TopicDescription], *, all_keys: bool = False,
                   source: str = "<input>") -> ImportResult:
    """Decide, for every described topic and config, what goes to the TOML (see the module docstring).
    Raises :class:`~segment_io.errors.ConfigError` naming the input line of a value segjobs cannot read."""
    descriptions = sorted(descriptions, key=lambda d: d.topic)
    skipped: list[Skipped] = []
    at_default = 0
    # per topic: key -> (typed value, note, broker-level?)
    kept: dict[str, dict[str, tuple[Any, str, bool]]] = {}
    for d in descriptions:
        kept[d.topic] = {}
        creation = KAFKA_TOPICS.get(d.topic)
        for key, e in sorted(d.entries.items()):
            if key not in SPEC_KEYS and not (all_keys and key in INERT_KEYS):
                if e.source == DEFAULT_SOURCE:
                    at_default += 1  # nothing to carry over, whatever the key
                else:
                    skipped.append(Skipped(d.topic, key, e.value, _REASON_UNKNOWN if key not in INERT_KEYS
                                           else _REASON_INERT, e.line))
                continue
            if e.value is None:  # named whatever its source: nobody can tell it is the default
                skipped.append(Skipped(d.topic, key, None, _REASON_SENSITIVE if e.sensitive else _REASON_NO_VALUE,
                                       e.line))
                continue
            typed = _typed(key, e, source)
            if e.source == DEFAULT_SOURCE and (key not in SPEC_KEYS or typed == _typed_default(key)):
                at_default += 1  # (an inert key's default is unknown here, and without effect anyway)
                continue
            if creation is not None and key in creation.settings and e.source != TOPIC_SOURCE:
                skipped.append(Skipped(d.topic, key, e.value, _REASON_KAFKA_TOPIC, e.line))
                continue
            broker = e.source in BROKER_SOURCES or e.source == DEFAULT_SOURCE
            kept[d.topic][key] = (typed, _note(e), broker)
        _empty_policy(kept[d.topic])
    defaults = _hoist(descriptions, kept)
    topics = {t: {k: Setting(k, v, note) for k, (v, note, _) in settings.items()} for t, settings in kept.items()}
    return ImportResult(defaults, topics, skipped, descriptions, at_default, source)


def _typed(key: str, e: Entry, source: str) -> Any:
    """The value as segjobs reads it (an int, a float, a policy string, inert keys as text); a value segjobs
    refuses is an error naming the line, since a file it then rejects would be no import at all."""
    if key not in SPEC_KEYS:
        return e.value
    if key == "cleanup.policy" and e.value is not None and not e.value.strip():
        return ""  # Kafka 4.2+'s empty policy: translated by _empty_policy
    try:
        return TopicConfig.from_settings({key: e.value}, source=f"{source} line {e.line}").to_settings()[key]
    except ConfigError as exc:
        shown = e.text if len(e.text) <= 200 else e.text[:197] + "..."
        raise ConfigError(f"{exc}: {shown!r} (segjobs cannot use this value; fix or delete the line to import the "
                          f"rest)") from None


def _typed_default(key: str) -> Any:
    return TopicConfig().to_settings()[key]


def _note(e: Entry) -> str:
    if e.source == TOPIC_SOURCE:
        return "topic override"
    if e.source == UNKNOWN_SOURCE:
        return "not Kafka's default (kafka-topics.sh: a topic override or a broker setting)"
    if e.source == DEFAULT_SOURCE:
        return "broker setting: labelled DEFAULT_CONFIG, but not Kafka's default (log.retention.hours/minutes?)"
    return f"broker setting {e.origin} ({e.source})" if e.origin else f"broker setting ({e.source})"


def _empty_policy(settings: dict[str, tuple[Any, str, bool]]) -> None:
    policy = settings.get("cleanup.policy")
    if policy is None or policy[0] != "":
        return
    why = "cleanup.policy is empty on the broker (Kafka 4.2+: nothing deleted, nothing compacted)"
    settings["cleanup.policy"] = ("delete", f"{why}; written as delete with unlimited retention, its equivalent",
                                  False)
    for key in ("retention.ms", "retention.bytes"):
        settings[key] = (-1, f"{why}: Kafka ignores retention.* then", False)


def _hoist(descriptions: list[TopicDescription], kept: dict[str, dict[str, tuple[Any, str, bool]]]
           ) -> dict[str, Setting]:
    """Move a broker value of a key to [defaults] when every imported topic that [defaults] would speak for
    shows that same broker value, and drop their copies. [defaults] speaks for a topic unless the topic has a
    value of its own (an override) or is one of Kafka's own topics created with that key. Nothing moves when
    any topic was described without broker values (kafka-topics.sh, or kafka-configs.sh without --all): such a
    topic could have a different value and nothing would show it."""
    defaults: dict[str, Setting] = {}
    if any(d.tool != "kafka-configs" or d.overrides_only for d in descriptions):
        return defaults
    keys = sorted({k for settings in kept.values() for k, (_, _, broker) in settings.items() if broker})
    for key in keys:
        inherit = [d.topic for d in descriptions
                   if not (d.topic in KAFKA_TOPICS and key in KAFKA_TOPICS[d.topic].settings)
                   and not (key in kept[d.topic] and not kept[d.topic][key][2])]
        values = {repr(kept[t][key][0]) if key in kept[t] else None for t in inherit}
        if len(values) != 1 or None in values:
            continue
        value, note, _ = kept[inherit[0]][key]
        defaults[key] = Setting(key, value, note)
        for t in inherit:
            del kept[t][key]
    return defaults


# --------------------------------------------------------------------------------------------------
# TOML
# --------------------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    # JSON string escapes (\", \\, \n, \uXXXX) are valid in TOML basic strings
    return json.dumps(str(value))


def _readable(key: str, value: Any) -> str | None:
    """``7d`` for 604800000 ms, ``1GiB`` for 1073741824 bytes: the value in the units of conf/topics.toml, when
    one divides it exactly (a comment must not round)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value >= 2**62:
        return None
    if key.endswith(".ms"):
        units = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
    elif key.endswith(".bytes"):
        units = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
    else:
        return None
    return next((f"{value // size}{unit}" for unit, size in units if value % size == 0), None)


def _toml_line(s: Setting) -> str:
    readable = _readable(s.key, s.value)
    return f'"{s.key}" = {_toml_value(s.value)}  # ' + (f"{readable}; " if readable else "") + s.note


def _header(result: ImportResult) -> list[str]:
    tools = sorted({d.tool for d in result.descriptions})
    overrides_only = any(d.overrides_only for d in result.descriptions)
    lines = [
        IMPORTED_HEADER,
        f"# from {result.source}: {len(result.descriptions)} topic(s), the output of "
        + " and ".join({"kafka-configs": "kafka-configs.sh --describe", "kafka-topics": "kafka-topics.sh --describe"}[t]
                       for t in tools) + ".",
        "#",
        "# Every value here comes from the broker: each topic's overrides (DYNAMIC_TOPIC_CONFIG) and the broker's",
        "# own settings (server.properties: STATIC_BROKER_CONFIG; kafka-configs.sh --alter --entity-type brokers:",
        "# DYNAMIC_*_BROKER_CONFIG), since a broker setting such as log.retention.hours changes a topic's value just",
        "# as an override does. Values whose source is DEFAULT_CONFIG are left out: segjobs applies Kafka's same",
        "# built-in defaults. A value labelled DEFAULT_CONFIG that differs from the built-in default is kept as a",
        "# broker setting (Kafka lists no synonym for log.retention.hours/minutes on a topic).",
        "# Broker settings every imported topic shares are in [defaults], so topics created later get them too.",
        "# Only keys segjobs reads are imported; what was left out is listed under each topic.",
    ]
    if "kafka-topics" in tools:
        lines += ["# kafka-topics.sh does not say where a value comes from: its values are in each topic's table.",
                  "# It also omits a retention.ms set by log.retention.hours/minutes (Kafka labels it DEFAULT_CONFIG):",
                  "# kafka-configs.sh --describe --all --entity-type topics shows it."]
    if overrides_only:
        lines += ["# Some topics were described without --all (topic overrides only): broker settings such as",
                  "# log.retention.hours are not in the input. Describe with --all to carry them over."]
    lines += ["# Precedence and value syntax: see conf/topics.toml and docs/configuration.md.", ""]
    return lines


def check_round_trip(result: ImportResult, text: str) -> ConfigSet:
    """Load ``text`` with segjobs' own loader and check that every imported topic resolves to the values Kafka
    printed for the keys segjobs reads (for Kafka's own topics, the keys written for them). A mismatch is a bug
    of the import and says so; a file the loader refuses (e.g. ``min.compaction.lag.ms`` above
    ``max.compaction.lag.ms`` once broker and topic values meet) is a ConfigError."""
    try:
        configs = ConfigSet.from_toml(text, source="the imported configuration")
        configs.check_topics(result.topics)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (the values come from {result.source}; segjobs refuses them as Kafka would)") \
            from None
    for d in result.descriptions:
        resolved = configs.for_topic(d.topic).to_settings()
        own = result.topics[d.topic]
        for key, e in d.entries.items():
            if key not in SPEC_KEYS or e.value is None:
                continue
            if key in own:
                expected = own[key].value
            elif d.topic in KAFKA_TOPICS and key in KAFKA_TOPICS[d.topic].settings:
                continue  # segjobs' table of Kafka's creation configs decides
            elif key in result.defaults:
                expected = result.defaults[key].value
            elif e.source == DEFAULT_SOURCE:
                expected = _typed_default(key)
            else:
                continue  # skipped, with its reason in the file
            if resolved[key] != expected:
                raise RuntimeError(f"segjobs config import bug: topic {d.topic!r} {key} resolves to {resolved[key]!r} "
                                   f"from the written TOML, not {expected!r} (input line {e.line})")
    return configs


def import_text(text: str, *, all_keys: bool = False, source: str = "<input>") -> ImportResult:
    """:func:`parse_describe` then :func:`import_configs`."""
    return import_configs(parse_describe(text, source=source), all_keys=all_keys, source=source)

