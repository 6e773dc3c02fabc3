"""The one table of Kafka's defaults: the config, the docs and the example config agree with it, and the
cleaner's two broker defaults are Kafka's (CleanerConfig; the topic defaults are pinned in test_config)."""

from __future__ import annotations

import dataclasses

from jobs.rules import config as config_module
from jobs.rules.config import ConfigSet, TopicConfig
from jobs.rules.kafka_defaults import KAFKA_DEFAULTS, SCOPE_BROKER, markdown_table
from tests.support.paths import REPO


def test_cleaner_defaults_are_kafkas() -> None:
    # CleanerConfig.LOG_CLEANER_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024L; LOG_CLEANER_DEDUPE_BUFFER_LOAD_FACTOR = 0.9d
    assert KAFKA_DEFAULTS["log.cleaner.dedupe.buffer.size"].default == 134_217_728
    assert KAFKA_DEFAULTS["log.cleaner.io.buffer.load.factor"].default == 0.9
    assert KAFKA_DEFAULTS["producer.id.expiration.ms"].scope == SCOPE_BROKER


def test_every_config_key_has_its_default_and_bounds_from_the_table() -> None:
    specs = config_module._SPECS
    assert set(specs) <= set(KAFKA_DEFAULTS)
    for field in dataclasses.fields(TopicConfig):
        if field.name == "inert_settings":
            continue
        (key,) = [k for k, spec in specs.items() if spec.attr == field.name]
        expected = KAFKA_DEFAULTS[key].default
        default = field.default
        assert (",".join(sorted(default)) if isinstance(default, frozenset) else default) == expected, key
        assert (specs[key].lo, specs[key].hi) == (KAFKA_DEFAULTS[key].lo, KAFKA_DEFAULTS[key].hi), key


def test_the_docs_table_is_generated_from_the_table() -> None:
    # docs/configuration.md holds a marker, not a copy: the site's build writes markdown_table() in its place
    from ops.mkdocs_hooks import expand

    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert "<!-- generated: kafka-defaults -->" in page
    assert "| `segment.bytes` |" not in page, "a hand-copied key table in docs/configuration.md"
    assert markdown_table() in expand(page)


def test_example_config_states_kafkas_defaults() -> None:
    # conf/topics.toml's [defaults] spells out each default it documents: every value there is Kafka's
    configs = ConfigSet.load(REPO / "conf" / "topics.toml")
    assert configs.defaults.values, "conf/topics.toml has no [defaults]"
    defaults = TopicConfig()
    for key, value in configs.defaults.values.items():
        assert value == getattr(defaults, config_module._SPECS[key].attr), key
