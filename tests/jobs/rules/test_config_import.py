"""`segjobs config import`: the describe output of kafka-configs.sh and kafka-topics.sh (samples written from
Kafka's ConfigCommand/TopicCommand formats, see tests/data/kafka-describe/README.md) becomes TOML that
segjobs' own loader reads back to the values the broker applies.

The expected values below are the sample cluster's, worked out from what it is (server.properties with
log.retention.hours=72 and log.segment.bytes=536870912, a dynamic default log.cleaner.delete.retention.ms of 12h,
the topics' overrides), not from the importer's output."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.rules.config import ConfigSet
from jobs.rules.config_import import (
    DEFAULT_SOURCE,
    TOPIC_SOURCE,
    UNKNOWN_SOURCE,
    check_round_trip,
    import_configs,
    import_text,
    parse_describe,
)
from segment_io.errors import ConfigError
from tests.support.paths import KAFKA_DESCRIBE, REPO

DATA = KAFKA_DESCRIBE
CONFIGS_ALL = DATA / "kafka-configs-describe-all.txt"
TOPICS = DATA / "kafka-topics-describe.txt"
OVERRIDES = DATA / "kafka-configs-describe-overrides.txt"

HOUR, DAY = 3_600_000, 86_400_000
MIB = 1 << 20
LONG_MAX = 2**63 - 1


def imported(path: Path, **kw) -> ConfigSet:
    """The sample imported, written as TOML and loaded as `segjobs --config` loads a file."""
    return ConfigSet.from_toml(import_text(path.read_text(), source=path.name, **kw).to_toml(), source="out.toml")


def settings(configs: ConfigSet, topic: str) -> dict:
    return configs.for_topic(topic).to_settings()


# ---- parsing ---------------------------------------------------------------------------------------


def test_kafka_configs_describe_all_is_read_entry_by_entry() -> None:
    topics = parse_describe(CONFIGS_ALL.read_text())
    assert [t.topic for t in topics] == ["orders.v1", "__consumer_offsets", "user_events-changelog", "clicks"]
    assert all(t.tool == "kafka-configs" and not t.overrides_only for t in topics)
    assert all(len(t.entries) == 36 for t in topics)  # every topic config of Kafka 3.9, default or not
    orders, offsets, changelog, clicks = topics
    policy = orders.entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.origin) == ("compact,delete", TOPIC_SOURCE,
                                                            "cleanup.policy=compact,delete")
    assert policy.line == 2
    seg = clicks.entries["segment.bytes"]
    assert (seg.value, seg.source, seg.origin) == ("536870912", "STATIC_BROKER_CONFIG", "log.segment.bytes=536870912")
    dr = clicks.entries["delete.retention.ms"]
    assert (dr.source, dr.origin) == ("DYNAMIC_DEFAULT_BROKER_CONFIG", "log.cleaner.delete.retention.ms=43200000")
    # log.retention.hours leaves no synonym: Kafka's own label is DEFAULT_CONFIG
    ret = clicks.entries["retention.ms"]
    assert (ret.value, ret.source, ret.origin) == ("259200000", DEFAULT_SOURCE, None)
    assert clicks.entries["leader.replication.throttled.replicas"].value == ""
    assert changelog.entries["leader.replication.throttled.replicas"].value == "0:1,1:2"
    assert offsets.entries["segment.bytes"].source == TOPIC_SOURCE


def test_kafka_topics_describe_is_read_from_the_configs_column() -> None:
    topics = {t.topic: t for t in parse_describe(TOPICS.read_text())}
    assert sorted(topics) == ["__consumer_offsets", "clicks", "orders.v1", "user_events-changelog"]
    orders = topics["orders.v1"]
    assert orders.tool == "kafka-topics"
    assert {k: e.value for k, e in orders.entries.items()} == {
        "min.insync.replicas": "2", "cleanup.policy": "compact,delete", "segment.bytes": "536870912",
        "retention.ms": "2592000000", "max.message.bytes": "2097152", "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "43200000", "max.compaction.lag.ms": "86400000", "compression.type": "zstd",
        "min.compaction.lag.ms": "3600000"}
    assert {e.source for e in orders.entries.values()} == {UNKNOWN_SOURCE}
    # a value with commas that is not a policy: the throttled replica list
    assert topics["user_events-changelog"].entries["leader.replication.throttled.replicas"].value == "0:1,1:2"
    assert topics["orders.v1"].line == 8


@pytest.mark.parametrize("line", [
    "Topic:legacy.events\tPartitionCount:1\tReplicationFactor:1\tConfigs:retention.ms=1000",  # Kafka 1.x/2.x
    "Topic: legacy.events\tTopicId: AAAAAAAAAAAAAAAAAAAAAA\tPartitionCount: 1\tReplicationFactor: 1\t"
    "Configs: retention.ms=1000\tMarkedForDeletion: true",
])
def test_kafka_topics_line_variants(line: str) -> None:
    (topic,) = parse_describe(line + "\n\tTopic: legacy.events\tPartition: 0\tLeader: none\tReplicas: 1\tIsr: \n")
    assert topic.topic == "legacy.events" and {k: e.value for k, e in topic.entries.items()} == {"retention.ms": "1000"}


@pytest.mark.parametrize("configs", ["Configs: ", "Configs:"])
def test_kafka_topics_line_without_configs(configs: str) -> None:
    (topic,) = parse_describe(f"Topic: t\tTopicId: x\tPartitionCount: 1\tReplicationFactor: 1\t{configs}\n")
    assert topic.entries == {}


def test_sensitive_and_null_values_have_no_value() -> None:
    text = ("All configs for topic t are:\n"
            "  vendor.secret=null sensitive=true synonyms={DYNAMIC_TOPIC_CONFIG:vendor.secret=null}\n"
            "  retention.ms=null sensitive=false synonyms={}\n")
    (topic,) = parse_describe(text)
    secret, ret = topic.entries["vendor.secret"], topic.entries["retention.ms"]
    assert (secret.value, secret.sensitive, secret.source) == (None, True, TOPIC_SOURCE)
    assert (ret.value, ret.sensitive, ret.source) == (None, False, DEFAULT_SOURCE)


def test_a_value_printed_as_null_is_named_as_skipped_whatever_its_source() -> None:
    # with no synonym (read as Kafka's default) it was left out without a word; nobody can tell it is the default
    text = ("All configs for topic t are:\n"
            "  delete.retention.ms=null sensitive=true synonyms={}\n"
            "  retention.ms=null sensitive=true synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=null}\n")
    result = import_configs(parse_describe(text))
    assert sorted((s.key, s.reason) for s in result.skipped) == [
        ("delete.retention.ms", "sensitive: Kafka does not print the value"),
        ("retention.ms", "sensitive: Kafka does not print the value")]
    assert result.topics.get("t", {}) == {}


def test_overrides_only_output_marks_every_value_a_topic_override() -> None:
    topics = {t.topic: t for t in parse_describe(OVERRIDES.read_text())}
    assert topics["audit.log_v2"].entries == {} and topics["audit.log_v2"].overrides_only
    assert topics["payments.eu_west"].entries["retention.ms"].source == TOPIC_SOURCE


def test_both_tools_concatenated() -> None:
    text = OVERRIDES.read_text() + TOPICS.read_text()
    assert len(parse_describe(text)) == 7


@pytest.mark.parametrize("text, line, words", [
    ("All configs for topic t are:\n  retention.ms=1 sensitive=false synonyms={}\nhello world\n", 3,
     "'hello world'"),
    ("  retention.ms=1 sensitive=false synonyms={}\n", 1, "outside any"),
    ("All configs for broker 1 are:\n  log.retention.hours=72 sensitive=false synonyms={}\n", 1,
     "--entity-type topics"),
    ("All configs for topic bad/name are:\n", 1, "not a Kafka topic name"),
    ("All configs for topic t are:\nAll configs for topic t are:\n", 2, "second time (first on line 1)"),
    ("All configs for topic t are:\n  retention.ms=1 sensitive=false synonyms={MADE_UP:log.x=1}\n", 2,
     "unknown config source 'MADE_UP'"),
    ("All configs for topic t are:\n  retention.ms=1 sensitive=false synonyms={retention.ms=1}\n", 2,
     "cannot read the synonyms"),
    ("All configs for topic t are:\n  a.b=1 sensitive=false synonyms={}\n  a.b=2 sensitive=false synonyms={}\n", 3,
     "listed twice"),
    ("Topic: t\tPartitionCount: 1\tConfigs: =x\n", 1, "cannot read the configs"),
    ("Topic: t\tPartitionCount: 1\n", 1, "no 'Configs:' field"),
])
def test_garbage_names_the_line_and_its_text(text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_describe(text, source="in.txt")
    assert f"in.txt line {line}: " in str(e.value) and words in str(e.value)


def test_no_topic_at_all() -> None:
    with pytest.raises(ConfigError, match="no topic found"):
        parse_describe("\n# nothing\n", source="in.txt")


# ---- what is imported ------------------------------------------------------------------------------


def test_describe_all_resolves_to_what_the_broker_applies() -> None:
    configs = imported(CONFIGS_ALL)
    orders = settings(configs, "orders.v1")
    assert orders["cleanup.policy"] == "compact,delete"
    assert (orders["retention.ms"], orders["min.compaction.lag.ms"], orders["max.compaction.lag.ms"]) == \
        (30 * DAY, HOUR, DAY)
    assert (orders["min.cleanable.dirty.ratio"], orders["max.message.bytes"]) == (0.1, 2 * MIB)
    assert (orders["delete.retention.ms"], orders["segment.bytes"]) == (12 * HOUR, 512 * MIB)  # broker settings
    clicks = settings(configs, "clicks")
    # log.retention.hours=72 must carry over although Kafka labels the value DEFAULT_CONFIG
    assert (clicks["cleanup.policy"], clicks["retention.ms"], clicks["segment.bytes"]) == ("delete", 3 * DAY, 512 * MIB)
    changelog = settings(configs, "user_events-changelog")
    assert (changelog["cleanup.policy"], changelog["delete.retention.ms"]) == ("compact", HOUR)
    offsets = settings(configs, "__consumer_offsets")
    assert (offsets["cleanup.policy"], offsets["segment.bytes"], offsets["retention.ms"]) == \
        ("compact", 100 * MIB, 3 * DAY)
    # settings at Kafka's built-in default stay Kafka's defaults
    assert (clicks["index.interval.bytes"], clicks["max.compaction.lag.ms"]) == (4096, LONG_MAX)


def test_broker_settings_every_topic_shares_go_to_defaults() -> None:
    doc = tomllib.loads(import_text(CONFIGS_ALL.read_text()).to_toml())
    assert doc["defaults"] == {"retention.ms": 3 * DAY, "segment.bytes": 512 * MIB, "delete.retention.ms": 12 * HOUR}
    assert doc["topics"]["clicks"] == {}
    assert doc["topics"]["__consumer_offsets"] == {"cleanup.policy": "compact", "segment.bytes": 100 * MIB}
    # so a topic created after the import gets the broker's settings, not Kafka's defaults
    later = settings(ConfigSet.from_mapping(doc), "created-later")
    assert (later["retention.ms"], later["segment.bytes"], later["delete.retention.ms"]) == \
        (3 * DAY, 512 * MIB, 12 * HOUR)


def test_broker_values_that_differ_between_topics_stay_with_each_topic() -> None:
    # two brokers with different server.properties answered for different topics
    text = ("All configs for topic a are:\n"
            "  segment.bytes=536870912 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=536870912}\n"
            "All configs for topic b are:\n"
            "  segment.bytes=268435456 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=268435456}\n"
            "All configs for topic c are:\n"
            "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}\n")
    doc = tomllib.loads(import_text(text).to_toml())
    assert doc["defaults"] == {}
    assert doc["topics"] == {"a": {"segment.bytes": 512 * MIB}, "b": {"segment.bytes": 256 * MIB}, "c": {}}


def test_a_broker_value_is_not_hoisted_over_a_topic_at_kafkas_default() -> None:
    text = ("All configs for topic a are:\n"
            "  retention.ms=259200000 sensitive=false synonyms={}\n"
            "All configs for topic b are:\n"
            "  retention.ms=604800000 sensitive=false synonyms={}\n")
    doc = tomllib.loads(import_text(text).to_toml())
    assert doc["defaults"] == {} and doc["topics"] == {"a": {"retention.ms": 3 * DAY}, "b": {}}


def test_kafka_topics_output_goes_to_each_topic_and_misses_log_retention_hours() -> None:
    result = import_text(TOPICS.read_text())
    configs = ConfigSet.from_toml(result.to_toml())
    assert result.defaults == {}
    orders = settings(configs, "orders.v1")
    assert (orders["cleanup.policy"], orders["retention.ms"], orders["segment.bytes"], orders["delete.retention.ms"]) \
        == ("compact,delete", 30 * DAY, 512 * MIB, 12 * HOUR)
    # kafka-topics.sh lists only values whose source is not DEFAULT_CONFIG: the broker's 3-day retention is not in
    # its output, so Kafka's 7 days apply (the header of the TOML and docs/guide/config-import.md say to use
    # kafka-configs.sh)
    assert settings(configs, "clicks")["retention.ms"] == 7 * DAY
    assert "log.retention.hours" in result.to_toml()
    # __consumer_offsets keeps segjobs' table of Kafka's creation configs (source unknown: maybe a broker value)
    offsets = settings(configs, "__consumer_offsets")
    assert (offsets["cleanup.policy"], offsets["segment.bytes"]) == ("compact", 100 * MIB)
    assert "cleanup.policy" not in tomllib.loads(result.to_toml())["topics"]["__consumer_offsets"]


def test_kafkas_own_topic_keeps_segjobs_creation_config_against_a_broker_value() -> None:
    # __share_group_state: Kafka sets no retention, segjobs keeps it at -1 (docs/configuration.md); a broker's 3
    # days must not reach it, while every other topic gets them through [defaults]
    text = ("All configs for topic __share_group_state are:\n"
            "  retention.ms=259200000 sensitive=false synonyms={}\n"
            "  segment.bytes=104857600 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=104857600}\n"
            "All configs for topic events are:\n"
            "  retention.ms=259200000 sensitive=false synonyms={}\n")
    result = import_text(text)
    configs = ConfigSet.from_toml(result.to_toml())
    assert settings(configs, "__share_group_state")["retention.ms"] == -1
    assert settings(configs, "events")["retention.ms"] == 3 * DAY
    assert [(s.topic, s.key) for s in result.skipped] == [("__share_group_state", "retention.ms")]


def test_overrides_only_import_with_sensitive_and_unknown_keys() -> None:
    result = import_text(OVERRIDES.read_text(), source="overrides.txt")
    text = result.to_toml()
    configs = ConfigSet.from_toml(text)
    payments = settings(configs, "payments.eu_west")
    assert (payments["retention.ms"], payments["retention.bytes"]) == (-1, 50 * (1 << 30))
    assert settings(configs, "metrics-1m")["message.timestamp.type"] == "LogAppendTime"
    assert settings(configs, "audit.log_v2") == settings(configs, "not-imported")  # Kafka's defaults
    doc = tomllib.loads(text)
    assert set(doc["topics"]) == {"payments.eu_west", "audit.log_v2", "metrics-1m"}
    # a value Kafka printed as null is never written, and its key is named as skipped
    assert "=null" not in text and "null" not in str(doc)
    assert "# not imported: confluent.value.schema.validation (" in text
    assert "without --all" in text


def test_all_keys_keeps_the_inert_kafka_configs() -> None:
    configs = imported(CONFIGS_ALL, all_keys=True)
    inert = dict(configs.for_topic("orders.v1").inert_settings)
    assert inert == {"compression.type": "zstd", "min.insync.replicas": "2"}
    assert dict(configs.for_topic("user_events-changelog").inert_settings) == {
        "leader.replication.throttled.replicas": "0:1,1:2", "segment.ms": "3600000"}
    assert "compression.type" not in dict(imported(CONFIGS_ALL).for_topic("orders.v1").inert_settings)


def test_output_is_deterministic_whatever_the_input_order() -> None:
    blocks = CONFIGS_ALL.read_text().split("All configs for topic ")[1:]
    shuffled = "".join("All configs for topic " + b for b in reversed(blocks))
    a, b = import_text(CONFIGS_ALL.read_text(), source="x"), import_text(shuffled, source="x")
    assert a.to_toml() == b.to_toml()
    text = a.to_toml()
    positions = [text.index(f'[topics."{t}"]') for t in sorted(["orders.v1", "__consumer_offsets",
                                                                 "user_events-changelog", "clicks"])]
    assert positions == sorted(positions)


def test_each_value_says_where_it_came_from() -> None:
    text = import_text(CONFIGS_ALL.read_text()).to_toml()
    assert '"segment.bytes" = 536870912  # 512MiB; broker setting log.segment.bytes=536870912 (STATIC_BROKER_CONFIG)' \
        in text
    assert '"retention.ms" = 2592000000  # 30d; topic override' in text
    assert "Values whose source is DEFAULT_CONFIG are left out" in text


def test_empty_cleanup_policy_of_kafka_4_2_becomes_delete_with_unlimited_retention() -> None:
    text = ("All configs for topic archive are:\n"
            "  cleanup.policy= sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=, "
            "DEFAULT_CONFIG:log.cleanup.policy=delete}\n"
            "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}\n")
    archive = settings(ConfigSet.from_toml(import_text(text).to_toml()), "archive")
    assert (archive["cleanup.policy"], archive["retention.ms"], archive["retention.bytes"]) == ("delete", -1, -1)


def test_a_value_segjobs_refuses_names_the_input_line() -> None:
    text = ("All configs for topic t are:\n"
            "  min.cleanable.dirty.ratio=1.5 sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:min.cleanable.dirty.ratio=1.5}\n")
    with pytest.raises(ConfigError) as e:
        import_text(text, source="in.txt")
    assert "in.txt line 2" in str(e.value) and "min.cleanable.dirty.ratio=1.5" in str(e.value)


def test_broker_and_topic_values_that_conflict_are_refused_as_kafka_would() -> None:
    text = ("All configs for topic t are:\n"
            "  max.compaction.lag.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.compaction.lag.ms=1000}\n"
            "  min.compaction.lag.ms=3600000 sensitive=false synonyms={STATIC_BROKER_CONFIG:"
            "log.cleaner.min.compaction.lag.ms=3600000}\n")
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms .* > max\.compaction\.lag\.ms"):
        import_text(text, source="in.txt").to_toml()


def test_the_round_trip_check_catches_a_wrong_file() -> None:
    result = import_text(CONFIGS_ALL.read_text())
    text = result.to_toml().replace('"retention.ms" = 2592000000', '"retention.ms" = 2592000001')
    with pytest.raises(RuntimeError, match=r"orders\.v1.*retention\.ms"):
        check_round_trip(result, text)


# ---- the command -----------------------------------------------------------------------------------


def test_cli_writes_the_file_and_summarises_on_stderr(tmp_path: Path, capsys) -> None:
    out = tmp_path / "topics.toml"
    assert main(["config", "import", "--input", str(CONFIGS_ALL), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert out.read_text() == import_text(CONFIGS_ALL.read_text(), source=str(CONFIGS_ALL)).to_toml()
    assert "4 topic(s)" in captured.err and "3 setting(s) in [defaults]" in captured.err
    assert "compression.type (2 topics)" in captured.err and "--all-keys" in captured.err
    # what the jobs load with --config
    assert ConfigSet.load(out).for_topic("clicks").retention_ms == 3 * DAY
    assert oct(out.stat().st_mode & 0o777) != "0o600"  # not left private like a temporary file


@pytest.mark.slow
def test_cli_reads_stdin_and_writes_stdout() -> None:
    proc = subprocess.run([sys.executable, "-m", "jobs", "config", "import"], stdin=TOPICS.open("rb"),
                          capture_output=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads(proc.stdout.decode())
    assert doc["topics"]["orders.v1"]["cleanup.policy"] == "compact,delete"
    assert b"<stdin>" in proc.stderr and b"kafka-configs.sh --describe --all" in proc.stderr


def test_cli_garbage_exits_2_naming_the_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "describe.txt"
    bad.write_text(CONFIGS_ALL.read_text() + "Error while executing config command\n")
    out = tmp_path / "topics.toml"
    assert main(["config", "import", "--input", str(bad), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad} line 149: " in err and "'Error while executing config command'" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_cli_keeps_an_existing_output_unless_forced(tmp_path: Path, capsys) -> None:
    out = tmp_path / "topics.toml"
    out.write_text("# mine\n")
    assert main(["config", "import", "-i", str(OVERRIDES), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "# mine\n"
    assert main(["config", "import", "-i", str(OVERRIDES), "-o", str(out), "--force", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert "payments.eu_west" in out.read_text()


def test_cli_config_without_a_subcommand(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["config"])
    assert e.value.code == 2 and "required: <subcommand>" in capsys.readouterr().err


def test_cli_missing_input_file(capsys) -> None:
    assert main(["config", "import", "--input", "/nonexistent/describe.txt"]) == 2
    assert "--input /nonexistent/describe.txt: cannot read it" in capsys.readouterr().err


def _refused_output(capsys, output: Path, *extra: str) -> str:
    """``config import --output OUTPUT`` exits 2 with one error line and no traceback: that line."""
    assert main(["config", "import", "-i", str(OVERRIDES), "-o", str(output), "--quiet", *extra]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_cli_output_below_a_file_or_with_a_name_too_long_is_one_error_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes").write_text("mine\n")
    line = _refused_output(capsys, tmp_path / "notes" / "conf" / "topics.toml")
    assert line == f"segjobs config: error: --output {tmp_path / 'notes' / 'conf' / 'topics.toml'}: " \
                   f"{tmp_path / 'notes'} is not a directory"
    # a name the filesystem refuses (was: OSError, a traceback, exit 1)
    long = tmp_path / ("t" * 300 + ".toml")
    line = _refused_output(capsys, long)
    assert line.startswith(f"segjobs config: error: --output {long}: ") and "File name too long" in line, line
    assert line.endswith("; nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_cli_output_the_machine_refuses_is_one_error_line_and_the_file_stays(tmp_path: Path, capsys) -> None:
    # a read-only filesystem (was: OSError from mkstemp, a traceback, exit 1); --force: the old file stays as it was
    from tests.support.mounts import read_only

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "topics.toml").write_text("# mine\n")
    with read_only(conf):
        line = _refused_output(capsys, conf / "topics.toml", "--force")
    assert line == (f"segjobs config: error: --output {conf / 'topics.toml'}: creating a file in {conf} failed: "
                    f"Read-only file system (EROFS): a problem of the machine, not of the data or of segjobs; the "
                    f"filesystem is mounted read-only: remount it read-write (or run on a writable copy); nothing "
                    f"was written")
    assert [p.name for p in conf.iterdir()] == ["topics.toml"] and (conf / "topics.toml").read_text() == "# mine\n"


def test_cli_output_on_a_full_filesystem_leaves_no_temporary_file(tmp_path: Path, capsys) -> None:
    from tests.support.mounts import fill, tmpfs

    with tmpfs(tmp_path / "small", 64 << 10) as small:
        filler = fill(small, 0)
        line = _refused_output(capsys, small / "topics.toml")
        assert line.startswith(f"segjobs config: error: --output {small / 'topics.toml'}: ") and \
            "No space left on device (ENOSPC)" in line and line.endswith("; nothing was written"), line
        assert list(small.iterdir()) == [filler]  # neither the file nor its temporary file
