"""Topic configuration: Kafka names and defaults, TOML layering by glob specificity, --set, validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jobs.rules.config import IMPORTED_HEADER, ConfigSet, TopicConfig, glob_specificity, parse_override
from segment_io.errors import ConfigError
from tests.support.paths import REPO


def load(text: str, *overrides: str) -> ConfigSet:
    return ConfigSet.from_toml(text, source="topics.toml", overrides=overrides)


def error_of(text: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        load(text, *overrides)
    return str(e.value)


# ---- defaults -------------------------------------------------------------------------------------

# Values written down from Kafka's sources (LogConfig, ServerLogConfigs, TransactionLogConfig at the
# commit kafka-behaviours.md cites), not from this implementation.
KAFKA_DEFAULTS = {
    "cleanup_policy": frozenset({"delete"}),
    "delete_retention_ms": 86_400_000,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": 9_223_372_036_854_775_807,
    "min_cleanable_dirty_ratio": 0.5,
    "segment_bytes": 1_073_741_824,
    "segment_index_bytes": 10_485_760,
    "index_interval_bytes": 4096,
    "retention_ms": 604_800_000,
    "retention_bytes": -1,
    "file_delete_delay_ms": 60_000,
    "producer_id_expiration_ms": 86_400_000,
    "max_message_bytes": 1_048_588,
    "message_timestamp_type": "CreateTime",
}


def test_empty_file_gives_kafka_defaults() -> None:
    config = load("").for_topic("anything")
    assert {k: getattr(config, k) for k in KAFKA_DEFAULTS} == KAFKA_DEFAULTS
    assert config.delete and not config.compact


@pytest.mark.parametrize("raw, compact, delete", [
    ('"compact"', True, False),
    ('"delete"', False, True),
    ('"compact,delete"', True, True),
    ('" delete ,  compact "', True, True),
    ('["delete", "compact"]', True, True),
    ('"Compact"', True, False),
])
def test_cleanup_policy_forms(raw: str, compact: bool, delete: bool) -> None:
    config = load(f'[defaults]\n"cleanup.policy" = {raw}').for_topic("t")
    assert (config.compact, config.delete) == (compact, delete)


@pytest.mark.parametrize("raw", ['"compacted"', '""', "[]", "1", '["compact", 2]'])
def test_cleanup_policy_rejects(raw: str) -> None:
    message = error_of(f'[defaults]\n"cleanup.policy" = {raw}')
    assert "topics.toml [defaults]" in message and "cleanup.policy" in message


# ---- value types and units ------------------------------------------------------------------------

@pytest.mark.parametrize("key, raw, expected", [
    ("retention.ms", "7200000", 7_200_000),
    ("retention.ms", '"7200000"', 7_200_000),
    ("retention.ms", '"2h"', 7_200_000),
    ("retention.ms", '"7d"', 7 * 86_400_000),
    ("retention.ms", '"2w"', 14 * 86_400_000),
    ("retention.ms", '"15m"', 900_000),
    ("retention.ms", '"30s"', 30_000),
    ("delete.retention.ms", '"500ms"', 500),
    ("retention.ms", "-1", -1),
    ("retention.bytes", '"512MiB"', 512 * 1024 * 1024),
    ("retention.bytes", '"2gib"', 2 * 1024**3),
    ("retention.bytes", '"64KiB"', 65_536),
    ("segment.bytes", '"100B"', 100),
    ("retention.bytes", "1_000_000", 1_000_000),
    ("min.cleanable.dirty.ratio", "0.25", 0.25),
    ("min.cleanable.dirty.ratio", "1", 1.0),
    ("min.cleanable.dirty.ratio", '"0.75"', 0.75),
])
def test_values_and_units(key: str, raw: str, expected: object) -> None:
    config = load(f'[defaults]\n"{key}" = {raw}').for_topic("t")
    assert getattr(config, key.replace(".", "_")) == expected


@pytest.mark.parametrize("key, raw, words", [
    ("retention.ms", "true", "expected an integer"),
    ("retention.ms", "1.5", "expected an integer"),
    ("retention.ms", '"soon"', "cannot read"),
    ("retention.ms", '"3 fortnights"', "unknown unit 'fortnights'"),
    ("retention.ms", '"3y"', "unknown unit"),
    ("retention.ms", '"-2h"', "only a plain -1"),
    ("retention.bytes", '"1GB"', "ambiguous"),
    ("segment.bytes", "[1]", "expected an integer"),
    ("min.cleanable.dirty.ratio", '"half"', "cannot read"),
    ("min.cleanable.dirty.ratio", "nan", "NaN"),
    ("message.timestamp.type", '"createtime"', "CreateTime"),
])
def test_wrong_types_name_file_table_and_key(key: str, raw: str, words: str) -> None:
    message = error_of(f'[topics."orders"]\n"{key}" = {raw}')
    assert message.startswith(f'topics.toml [topics."orders"]: {key}: ')
    assert words in message


@pytest.mark.parametrize("key, raw, ok", [
    ("min.cleanable.dirty.ratio", "1.01", False),
    ("min.cleanable.dirty.ratio", "-0.1", False),
    ("min.cleanable.dirty.ratio", "0", True),
    # Kafka: segment.bytes >= LegacyRecord.RECORD_OVERHEAD_V0 (14) and fits an int
    ("segment.bytes", "13", False),
    ("segment.bytes", "14", True),
    ("segment.bytes", "2147483648", False),
    ("segment.bytes", "-1", False),
    ("segment.index.bytes", "3", False),
    ("index.interval.bytes", "-1", False),
    ("index.interval.bytes", "0", True),
    ("retention.ms", "-2", False),
    # retention.bytes may be any negative number ("unlimited")
    ("retention.bytes", "-5", True),
    ("delete.retention.ms", "-1", False),
    ("min.compaction.lag.ms", "-1", False),
    ("max.compaction.lag.ms", "0", False),
    ("file.delete.delay.ms", "-1", False),
    ("producer.id.expiration.ms", "0", False),
    ("producer.id.expiration.ms", "2147483648", False),
    ("max.message.bytes", "-1", False),
])
def test_ranges(key: str, raw: str, ok: bool) -> None:
    text = f'[defaults]\n"{key}" = {raw}'
    if ok:
        load(text)
    else:
        message = error_of(text)
        assert key in message and ("minimum" in message or "maximum" in message)


# ---- keys -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, suggestion", [
    ("retention_ms", "retention.ms"),
    ("retension.ms", "retention.ms"),
    ("cleanup.polcy", "cleanup.policy"),
    ("min.cleanable.ratio", "min.cleanable.dirty.ratio"),
])
def test_unknown_key_suggests_closest(key: str, suggestion: str) -> None:
    message = error_of(f'[topics."a*"]\n"{key}" = 1')
    assert f"{key}: unknown key" in message and f"did you mean {suggestion!r}" in message
    assert 'topics.toml [topics."a*"]' in message


def test_unquoted_dotted_key_is_read_as_the_kafka_name() -> None:
    # TOML turns `retention.ms = 5` into {"retention": {"ms": 5}}
    assert load("[defaults]\nretention.ms = 5").for_topic("t").retention_ms == 5


def test_unquoted_dotted_glob_gets_a_quoting_hint() -> None:
    message = error_of('[topics.orders.eu]\n"retention.ms" = 5')
    assert '[topics."orders.eu"]' in message


def test_inert_kafka_keys_are_accepted_and_reported() -> None:
    config = load('[defaults]\n"compression.type" = "zstd"\n"segment.ms" = 1000').for_topic("t")
    assert config.inert_settings == (("compression.type", "zstd"), ("segment.ms", "1000"))


def test_unknown_top_level_table() -> None:
    assert "unknown top-level table(s) topic" in error_of('[topic."x"]\n"retention.ms" = 1')


def test_topics_entry_must_be_a_table() -> None:
    assert 'topics.toml [topics."x"]' in error_of('[topics]\nx = 5')


def test_invalid_glob_characters() -> None:
    assert "cannot have" in error_of('[topics."orders/eu"]\n"retention.ms" = 1')


def test_toml_syntax_error_names_file() -> None:
    message = error_of("[defaults\n")
    assert message.startswith("topics.toml: not valid TOML")


def test_load_reads_the_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[defaults]\n"retention.ms" = "oops"\n')
    with pytest.raises(ConfigError, match=rf"{path} \[defaults\]: retention.ms"):
        ConfigSet.load(path)
    with pytest.raises(ConfigError, match="cannot read"):
        ConfigSet.load(tmp_path / "missing.toml")


# ---- kafka-behaviours 42: min lag > max lag is rejected -------------------------------------------

def test_42_min_lag_above_max_lag_in_one_table() -> None:
    message = error_of('[defaults]\n"min.compaction.lag.ms" = 10\n"max.compaction.lag.ms" = 5')
    assert "min.compaction.lag.ms (10" in message and "max.compaction.lag.ms (5" in message


def test_42_min_lag_equal_to_max_lag_is_allowed() -> None:
    load('[defaults]\n"min.compaction.lag.ms" = 5\n"max.compaction.lag.ms" = 5')


def test_42_min_lag_above_max_lag_across_tables_names_both_at_load() -> None:
    message = error_of('[defaults]\n"max.compaction.lag.ms" = "1h"\n[topics."a*"]\n"min.compaction.lag.ms" = "2h"')
    assert 'topics.toml [topics."a*"]' in message and "topics.toml [defaults]" in message


def test_42_min_lag_above_max_lag_from_two_globs_found_for_the_topic() -> None:
    configs = load('[topics."a*"]\n"min.compaction.lag.ms" = "2h"\n[topics."ab*"]\n"max.compaction.lag.ms" = "1h"')
    configs.for_topic("ax")  # only one glob applies: fine
    with pytest.raises(ConfigError,
                       match=r'min\.compaction\.lag\.ms .*topics\."a\*".*max\.compaction\.lag\.ms .*topics\."ab\*"'):
        configs.for_topic("abc")


def test_42_directly_built_topic_config_is_validated_too() -> None:
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms"):
        TopicConfig(min_compaction_lag_ms=10, max_compaction_lag_ms=5)
    with pytest.raises(ConfigError, match=r"min\.cleanable\.dirty\.ratio"):
        dataclasses.replace(TopicConfig(), min_cleanable_dirty_ratio=2.0)
    with pytest.raises(ConfigError, match=r"cleanup\.policy"):
        TopicConfig(cleanup_policy="compact")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"message\.timestamp\.type"):
        TopicConfig(message_timestamp_type="Now")


# ---- glob precedence --------------------------------------------------------------------------------

LAYERED = """
[defaults]
"cleanup.policy" = "compact"
"retention.ms" = 1000
"delete.retention.ms" = 7

[topics."*"]
"retention.ms" = 2000

[topics."orders.*"]
"retention.ms" = 3000
"segment.bytes" = 4096

[topics."orders.eu*"]
"retention.ms" = 4000

[topics."orders.eu"]
"retention.bytes" = 99
"""


@pytest.mark.parametrize("topic, retention_ms, segment_bytes, retention_bytes", [
    ("clicks", 2000, 1 << 30, -1),        # only "*" matches
    ("orders.us", 3000, 4096, -1),        # "orders.*" beats "*"
    ("orders.eu-west", 4000, 4096, -1),   # "orders.eu*" has more literal characters
    ("orders.eu", 4000, 4096, 99),        # exact name beats every glob, and sets only what it names
])
def test_most_specific_glob_wins_per_key(topic: str, retention_ms: int, segment_bytes: int,
                                         retention_bytes: int) -> None:
    config = load(LAYERED).for_topic(topic)
    assert (config.retention_ms, config.segment_bytes, config.retention_bytes) == \
        (retention_ms, segment_bytes, retention_bytes)
    # [defaults] applies below every glob
    assert config.compact and config.delete_retention_ms == 7


def test_exact_name_beats_a_glob_with_more_literal_characters() -> None:
    configs = load('[topics."abcdefgh*"]\n"retention.ms" = 1\n[topics."abcdefgh"]\n"retention.ms" = 2')
    assert configs.for_topic("abcdefgh").retention_ms == 2


def test_specificity_counts_bracket_classes_as_wildcards() -> None:
    assert glob_specificity("orders") == (True, 6)
    assert glob_specificity("ord*") == (False, 3)
    assert glob_specificity("o[rx]d?") == (False, 2)


def test_equal_specificity_tie_names_both_globs() -> None:
    configs = load('[topics."a*"]\n"retention.ms" = 1\n[topics."*b"]\n"retention.ms" = 2')
    assert configs.for_topic("ax").retention_ms == 1
    with pytest.raises(ConfigError) as e:
        configs.for_topic("ab")
    assert '[topics."a*"]' in str(e.value) and '[topics."*b"]' in str(e.value) and "'ab'" in str(e.value)
    with pytest.raises(ConfigError):
        configs.check_topics(["ax", "zz", "ab"])


# ---- --set ------------------------------------------------------------------------------------------

def test_parse_override() -> None:
    o = parse_override("orders.*:retention.ms=7d")
    assert (o.glob, o.key, o.value) == ("orders.*", "retention.ms", 7 * 86_400_000)
    assert parse_override("t:cleanup.policy=compact,delete").value == frozenset({"compact", "delete"})


@pytest.mark.parametrize("text, words", [
    ("retention.ms=5", "TOPIC_GLOB:KEY=VALUE"),
    ("orders:retention.ms", "TOPIC_GLOB:KEY=VALUE"),
    (":retention.ms=5", "TOPIC_GLOB:KEY=VALUE"),
    ("orders:retention.ms=abc", "retention.ms: cannot read"),
    ("orders:retention_ms=5", "did you mean 'retention.ms'"),
    ("ord ers:retention.ms=5", "cannot have"),
])
def test_parse_override_errors_name_the_option(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_override(text)
    assert str(e.value).startswith(f"--set {text}") and words in str(e.value)


def test_overrides_apply_on_top_of_every_table() -> None:
    configs = load(LAYERED, "*:retention.ms=1", "orders.*:retention.ms=2")
    # a --set glob beats even an exact-name table, and among --set the most specific glob wins
    assert configs.for_topic("orders.eu").retention_ms == 2
    assert configs.for_topic("clicks").retention_ms == 1


def test_overrides_of_one_glob_combine_and_the_later_wins() -> None:
    configs = load("", "t:retention.ms=1", "t:retention.bytes=5", "t:retention.ms=3")
    config = configs.for_topic("t")
    assert (config.retention_ms, config.retention_bytes) == (3, 5)


def test_override_tie_between_globs() -> None:
    configs = load("", "a*:retention.ms=1", "*b:retention.ms=2")
    with pytest.raises(ConfigError, match="equal specificity"):
        configs.for_topic("ab")


def test_override_creating_min_above_max_is_rejected_at_load() -> None:
    message = error_of('[defaults]\n"max.compaction.lag.ms" = 100', "*:min.compaction.lag.ms=200")
    assert "--set *:min.compaction.lag.ms=200" in message and "topics.toml [defaults]" in message


# ---- the shipped example ------------------------------------------------------------------------------

def test_shipped_example_loads_and_layers_as_its_comments_say() -> None:
    configs = ConfigSet.load(REPO / "conf" / "topics.toml")
    audit = configs.for_topic("orders.audit")
    assert audit.compact and audit.delete            # from "orders.*"
    assert audit.retention_ms == -1                   # from the exact table
    assert audit.retention_bytes == 50 * 1024**3
    changelog = configs.for_topic("app-store-changelog")
    assert changelog.compact and not changelog.delete and changelog.min_cleanable_dirty_ratio == 0.1
    assert configs.for_topic("unlisted").policy_text == "delete"


def test_segjobs_max_delete_fraction_is_a_ratio_per_topic_and_settings_round_trip() -> None:
    configs = load('[topics.orders]\n"segjobs.max.delete.fraction" = 0.9\n')
    assert configs.for_topic("orders").max_delete_fraction == 0.9
    assert configs.for_topic("other").max_delete_fraction == 0.5
    with pytest.raises(ConfigError, match=r"segjobs\.max\.delete\.fraction: 1\.5 is above the maximum"):
        load('[defaults]\n"segjobs.max.delete.fraction" = 1.5\n')
    cfg = load(LAYERED, "orders.*:cleanup.policy=compact,delete").for_topic("orders.eu")
    assert TopicConfig.from_settings(cfg.to_settings()) == cfg


# ---- entries that name no topic of the log dir; where each topic's policy comes from -----------------------

ENTRIES = '''
[defaults]
"retention.ms" = "3d"
[topics."*-changelog"]
"cleanup.policy" = "compact"
[topics."orders"]
"cleanup.policy" = "compact,delete"
'''


def test_an_exact_table_naming_no_topic_is_an_error_with_the_closest_names() -> None:
    configs = load(ENTRIES + '[topics."ordres"]\n"cleanup.policy" = "compact"\n')
    with pytest.raises(ConfigError) as e:
        configs.check_entries({"orders", "users-changelog", "clicks"}, "/logs")
    message = str(e.value)
    assert message.startswith('topics.toml [topics."ordres"] names no topic of /logs (closest: orders): ')
    assert message.endswith("fix the name or remove the table; nothing was done")
    assert "orders" in str(e.value) and "[topics.\"orders\"]" not in message  # the good table is not blamed


def test_a_set_naming_no_topic_is_an_error_as_a_table_is() -> None:
    # `--set ordres:cleanup.policy=compact` meant for orders would leave it to Kafka's delete policy
    configs = load(ENTRIES, "ordres:cleanup.policy=compact", "users-changelog:retention.ms=1")
    with pytest.raises(ConfigError) as e:
        configs.check_entries({"orders", "users-changelog", "clicks"}, "/logs")
    assert str(e.value) == ("--set ordres:... names no topic of /logs (closest: orders): its settings would apply to "
                            "nothing, and a topic it was meant for would run with [defaults] and Kafka's defaults; "
                            "fix the name or drop the --set; nothing was done")
    both = load(ENTRIES + '[topics."ordres"]\n"cleanup.policy" = "compact"\n', "clickz:retention.ms=1")
    with pytest.raises(ConfigError, match=r"; fix the name or remove the table or drop the \-\-set; nothing was done$"):
        both.check_entries({"orders", "clicks"}, "/logs")


def test_globs_and_kafkas_own_topics_naming_nothing_are_warnings() -> None:
    configs = load(ENTRIES + '[topics."clickz*"]\n"retention.ms" = 1\n[topics."__consumer_offsets"]\n'
                   '"segment.bytes" = "1GiB"\n', "order[x]:retention.ms=1", "__transaction_state:retention.ms=1",
                   "users-changelog:retention.ms=1")
    warnings = configs.check_entries({"orders", "users-changelog", "clicks"}, "/logs")
    assert warnings == [
        'topics.toml [topics."clickz*"] matches no topic of /logs (closest: clicks): it has no effect',
        'topics.toml [topics."__consumer_offsets"] names no topic of /logs (topics there: clicks, orders, '
        'users-changelog): it has no effect',
        "--set order[x]:... matches no topic of /logs (closest: orders): it has no effect",
        "--set __transaction_state:... names no topic of /logs (topics there: clicks, orders, users-changelog): "
        "it has no effect",
    ]
    assert load(ENTRIES).check_entries({"orders", "a-changelog"}, "/logs") == []


def test_an_imported_files_tables_for_topics_elsewhere_in_the_cluster_are_warnings(tmp_path: Path) -> None:
    # `config import` lists every topic of the cluster; one broker's log dir holds some of them
    path = tmp_path / "imported.toml"
    path.write_text(IMPORTED_HEADER + "\n" + ENTRIES + '[topics."payments"]\n"cleanup.policy" = "compact"\n')
    configs = ConfigSet.load(path)
    assert configs.check_entries({"orders", "users-changelog"}, "/logs") == [
        f'{path} (imported from the broker) [topics."payments"] names no topic of /logs (topics there: orders, '
        'users-changelog): it has no effect']


def test_the_origin_of_a_topics_policy_is_the_entry_that_set_it() -> None:
    configs = load(ENTRIES, "clicks:cleanup.policy=compact")
    assert configs.origin_of("orders") == 'topics.toml [topics."orders"]'
    assert configs.origin_of("users-changelog") == 'topics.toml [topics."*-changelog"]'
    assert configs.origin_of("clicks") == "--set clicks:cleanup.policy=compact"
    assert configs.origin_of("payments") == "Kafka's default"
    assert configs.origin_of("payments", "retention.ms") == "topics.toml [defaults]"
    assert configs.origin_of("__consumer_offsets").startswith("Kafka's creation config of __consumer_offsets")
    imported = ConfigSet.from_toml("# segjobs topic configuration, imported from Kafka by `segjobs config import`\n"
                                   + ENTRIES, source="cluster.toml")
    assert imported.origin_of("orders") == 'cluster.toml (imported from the broker) [topics."orders"]'


def test_resolved_settings_keep_the_origins_recorded_with_them() -> None:
    """What --apply runs with: a plan's resolved settings, each named where the dry run said it came from."""
    first = ConfigSet.from_toml(ENTRIES, source="topics.toml", overrides=["orders:retention.ms=3d"])
    settings = {t: first.for_topic(t).to_settings() for t in ("orders", "payments", "__consumer_offsets")}
    origins = {t: {k: first.origin_of(t, k) for k in s if first.origin_of(t, k) != "Kafka's default"}
               for t, s in settings.items()}
    again = ConfigSet.from_resolved(settings, origins, source="the plan p.json").with_overrides([])
    for topic, keys in settings.items():
        assert again.for_topic(topic) == first.for_topic(topic)
        assert {k: again.origin_of(topic, k) for k in keys} == {k: first.origin_of(topic, k) for k in keys}
    assert again.origin_of("orders", "retention.ms") == "--set orders:retention.ms=3d"
    unrecorded = ConfigSet.from_resolved(settings, None, source="the plan p.json, which does not record it")
    assert unrecorded.origin_of("payments") == "the plan p.json, which does not record it"
    assert unrecorded.for_topic("orders") == first.for_topic("orders")


def test_a_config_that_is_not_utf8_names_the_file_and_the_byte(tmp_path: Path) -> None:
    p = tmp_path / "topics.toml"
    p.write_bytes(b'[topics."clicks"]\n"cleanup.policy" = "delete"\n"retention.ms" = "\xff"\n')
    with pytest.raises(ConfigError) as info:
        ConfigSet.load(p)
    assert str(info.value).startswith(f"{p}: not UTF-8: byte 0xff at byte position 64 (line 3, column 19)")


def test_a_config_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    p = tmp_path / "topics.toml"
    p.write_bytes(b'\xef\xbb\xbf[topics."clicks"]\n"cleanup.policy" = "delete"\n')
    assert ConfigSet.load(p).for_topic("clicks").policy_text == "delete"


@pytest.mark.parametrize("text", ['{"topics": {"clicks": {"cleanup.policy": "delete"}}}', '{"topics": {'])
def test_a_json_config_is_told_it_is_json_and_what_to_give(tmp_path: Path, text: str) -> None:
    p = tmp_path / "topics.json"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        ConfigSet.load(p)
    assert "JSON" in str(info.value) and "[topics." in str(info.value) and str(p) in str(info.value)


@pytest.mark.parametrize("text", [
    "All configs for topic orders are:\n  cleanup.policy=compact sensitive=false synonyms={}\n",
    "Topic: orders\tTopicId: abc\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: cleanup.policy=compact\n",
])
def test_kafkas_describe_output_given_as_config_is_told_how_to_import_it(tmp_path: Path, text: str) -> None:
    # it was a bare "not valid TOML: Expected '=' ..."
    p = tmp_path / "describe.txt"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        ConfigSet.load(p)
    assert f"it is the output of Kafka's kafka-configs.sh or kafka-topics.sh --describe: `segjobs config import " \
           f"--input {p} --output topics.toml`" in str(info.value)
