"""Kafka's defaults for every setting segjobs reads: the one table, in the manner of Kafka's ``ConfigDef``.

Each entry gives the key, its default, its unit, Kafka's type and range (the validator of its ``define``), what it
means, where in Kafka the default is defined, and, where segjobs deliberately departs from Kafka, how. The topic
configuration (:mod:`jobs.rules.config`), the cleaner, the transaction replay, the offset map and the scan take
their defaults from here and nowhere else; the documentation's key table is generated from it
(:func:`markdown_table`, written into docs/configuration.md when the site is built), and
``tests/jobs/rules/test_kafka_defaults.py`` checks that ``conf/topics.toml`` agrees with it.

The values were read from Apache Kafka's sources (trunk at 1eb7644, October 2024): ``LogConfig`` and
``ServerLogConfigs`` for topic configs, ``CleanerConfig`` for the cleaner's broker configs,
``TransactionLogConfig`` for ``producer.id.expiration.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from segment_io.format import LEGACY_MIN_SIZE, LOG_OVERHEAD
from segment_io.units import DAY_MS, format_duration

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

_MIB = 1 << 20

#: Kafka's floor for segment.bytes: one v0 record's overhead (LegacyRecord.RECORD_OVERHEAD_V0).
MIN_SEGMENT_BYTES = LEGACY_MIN_SIZE[0]

#: Where a key belongs: a per-topic config, a broker (server) config segjobs takes as a command-line option or
#: per topic, or a setting of segjobs' own that Kafka does not have.
SCOPE_TOPIC = "topic"
SCOPE_BROKER = "broker"
SCOPE_SEGJOBS = "segjobs"


@dataclass(frozen=True)
class KafkaDefault:
    """One key: its default and how Kafka defines it."""

    key: str
    default: int | float | str
    #: what the number counts: ``ms``, ``bytes``, ``ratio``, or ``-`` for words (a policy, a timestamp type)
    unit: str
    #: the ``ConfigDef.Type`` Kafka declares (INT keys are 32-bit there, so segjobs bounds them the same way)
    kafka_type: str
    #: smallest and largest accepted value (Kafka's validator and type bounds); None where there is none
    lo: int | float | None
    hi: int | float | None
    meaning: str
    #: the Kafka constant that holds the default (``-`` for segjobs' own keys)
    source: str
    scope: str = SCOPE_TOPIC
    #: how segjobs differs from Kafka for this key, if it does
    segjobs_differs: str = ""


_TABLE: tuple[KafkaDefault, ...] = (
    KafkaDefault(
        "cleanup.policy", "delete", "-", "LIST", None, None,
        "delete: segments go by time and size; compact: the latest record of each key is kept; or both",
        "ServerLogConfigs.LOG_CLEANUP_POLICY_DEFAULT"),
    KafkaDefault(
        "delete.retention.ms", DAY_MS, "ms", "LONG", 0, LONG_MAX,
        "how long a tombstone or transaction marker outlives the first clean that saw it (its delete horizon)",
        "LogConfig.DEFAULT_DELETE_RETENTION_MS"),
    KafkaDefault(
        "min.compaction.lag.ms", 0, "ms", "LONG", 0, LONG_MAX,
        "records younger than this are never cleaned",
        "LogConfig.DEFAULT_MIN_COMPACTION_LAG_MS"),
    KafkaDefault(
        "max.compaction.lag.ms", LONG_MAX, "ms", "LONG", 1, LONG_MAX,
        "a log whose dirty records are older than this is cleaned whatever its dirty ratio",
        "LogConfig.DEFAULT_MAX_COMPACTION_LAG_MS"),
    KafkaDefault(
        "min.cleanable.dirty.ratio", 0.5, "ratio", "DOUBLE", 0.0, 1.0,
        "a log is cleaned once its cleanable bytes exceed this share of its clean + cleanable bytes",
        "LogConfig.DEFAULT_MIN_CLEANABLE_DIRTY_RATIO"),
    KafkaDefault(
        "segment.bytes", 1024 * _MIB, "bytes", "INT", MIN_SEGMENT_BYTES, INT_MAX,
        "largest segment a clean writes (segments are grouped under it)",
        "LogConfig.DEFAULT_SEGMENT_BYTES"),
    KafkaDefault(
        "segment.index.bytes", 10 * _MIB, "bytes", "INT", 4, INT_MAX,
        "largest offset or time index a clean writes (also bounds segment groups)",
        "ServerLogConfigs.LOG_INDEX_SIZE_MAX_BYTES_DEFAULT"),
    KafkaDefault(
        "index.interval.bytes", 4096, "bytes", "INT", 0, INT_MAX,
        "bytes between two offset index entries in a rewritten segment",
        "ServerLogConfigs.LOG_INDEX_INTERVAL_BYTES_DEFAULT"),
    KafkaDefault(
        "retention.ms", 7 * DAY_MS, "ms", "LONG", -1, LONG_MAX,
        "a segment whose largest timestamp is older than this is deleted (-1: kept forever)",
        "LogConfig.DEFAULT_RETENTION_MS"),
    KafkaDefault(
        # Kafka defines no validator: any negative value means unlimited
        "retention.bytes", -1, "bytes", "LONG", LONG_MIN, LONG_MAX,
        "oldest segments are deleted while a partition is larger than this (negative: unlimited)",
        "ServerLogConfigs.LOG_RETENTION_BYTES_DEFAULT"),
    KafkaDefault(
        "file.delete.delay.ms", 60_000, "ms", "LONG", 0, LONG_MAX,
        "how long a deleted segment stays as a .deleted file before it is purged",
        "ServerLogConfigs.LOG_DELETE_DELAY_MS_DEFAULT",
        segjobs_differs="a .deleted file is purged by the first run after the delay, not by a timer"),
    KafkaDefault(
        "producer.id.expiration.ms", DAY_MS, "ms", "INT", 1, INT_MAX,
        "a producer whose newest batch is younger than this is active: its last batch is kept",
        "TransactionLogConfig.PRODUCER_ID_EXPIRATION_MS_DEFAULT", scope=SCOPE_BROKER,
        segjobs_differs="a broker config in Kafka; segjobs accepts it per topic too"),
    KafkaDefault(
        "max.message.bytes", _MIB + LOG_OVERHEAD, "bytes", "INT", 0, INT_MAX,
        "largest record batch Kafka accepts; accepted and checked for range, no effect offline",
        "LogConfig.DEFAULT_MAX_MESSAGE_BYTES"),
    KafkaDefault(
        "message.timestamp.type", "CreateTime", "-", "STRING", None, None,
        "CreateTime or LogAppendTime: accepted and checked, no effect offline (batches carry their own type)",
        "ServerLogConfigs.LOG_MESSAGE_TIMESTAMP_TYPE_DEFAULT"),
    KafkaDefault(
        "segjobs.max.delete.fraction", 0.5, "ratio", "DOUBLE", 0.0, 1.0,
        "retention leaves a topic untouched (and the run exits 1) when it would delete more than this share of "
        "the topic's bytes that only the run's --now or settings condemn (see Safety limit); 1.0: no limit",
        "-", scope=SCOPE_SEGJOBS, segjobs_differs="segjobs' own safety limit; Kafka has none"),
    KafkaDefault(
        "log.cleaner.dedupe.buffer.size", 128 * _MIB, "bytes", "LONG", None, None,
        "memory of the offset map: 24-byte slots (a 16-byte key hash, the size of MD5's, and an 8-byte offset)",
        "CleanerConfig.LOG_CLEANER_DEDUPE_BUFFER_SIZE", scope=SCOPE_BROKER,
        segjobs_differs="`compact --dedupe-buffer-bytes`; each Spark task gets all of it, where Kafka divides it "
                        "among log.cleaner.threads"),
    KafkaDefault(
        "log.cleaner.io.buffer.load.factor", 0.9, "ratio", "DOUBLE", None, None,
        "the offset map counts as full when its keys reach this share of its slots",
        "CleanerConfig.LOG_CLEANER_DEDUPE_BUFFER_LOAD_FACTOR", scope=SCOPE_BROKER,
        segjobs_differs="fixed at Kafka's default (Kafka's own tests pass 0.75)"),
)

#: Every key segjobs reads, by name.
KAFKA_DEFAULTS: Mapping[str, KafkaDefault] = MappingProxyType({d.key: d for d in _TABLE})


def default_of(key: str) -> int | float | str:
    """Kafka's default for ``key`` (``KeyError`` for a key not in the table)."""
    return KAFKA_DEFAULTS[key].default


# The defaults the rules read directly, named once here for the modules that use them as parameter defaults.
DELETE_RETENTION_MS: int = int(default_of("delete.retention.ms"))
PRODUCER_ID_EXPIRATION_MS: int = int(default_of("producer.id.expiration.ms"))
DEDUPE_BUFFER_BYTES: int = int(default_of("log.cleaner.dedupe.buffer.size"))
DEDUPE_BUFFER_LOAD_FACTOR: float = float(default_of("log.cleaner.io.buffer.load.factor"))


def _show(d: KafkaDefault) -> str:
    """A default as the docs write it: with a unit where one reads better than the raw number."""
    value = d.default
    if isinstance(value, str):
        return value
    if value == LONG_MAX:
        return "unlimited (2^63-1)"
    if d.unit == "ms" and isinstance(value, int) and value > 0:
        return f"{value} ({format_duration(value)})"
    if d.unit == "bytes" and isinstance(value, int) and value >= _MIB and value % _MIB == 0:
        return f"{value} ({value >> 30} GiB)" if value % (1 << 30) == 0 else f"{value} ({value // _MIB} MiB)"
    return str(value)


def markdown_table() -> str:
    """The documentation's table of keys (docs/configuration.md), generated from :data:`KAFKA_DEFAULTS`."""
    lines = ["| key | default | unit | meaning | Kafka's source | segjobs differs |", "|---|---|---|---|---|---|"]
    for d in _TABLE:
        key = f"`{d.key}`" + (" (broker)" if d.scope == SCOPE_BROKER else "")
        source = f"`{d.source}`" if d.source != "-" else "-"
        lines.append(f"| {key} | {_show(d)} | {d.unit} | {d.meaning} | {source} | {d.segjobs_differs or '-'} |")
    return "\n".join(lines)


__all__ = ["DEDUPE_BUFFER_BYTES", "DEDUPE_BUFFER_LOAD_FACTOR", "DELETE_RETENTION_MS", "INT_MAX", "KAFKA_DEFAULTS",
           "KafkaDefault", "LONG_MAX", "LONG_MIN", "MIN_SEGMENT_BYTES", "PRODUCER_ID_EXPIRATION_MS", "SCOPE_BROKER",
           "SCOPE_SEGJOBS", "SCOPE_TOPIC", "default_of", "markdown_table"]
