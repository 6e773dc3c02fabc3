"""jobs.api's typed options: defaults, normalisation, and every refusal names the field (the Python spelling
from the API, the flag from the command line, with the same exit code 2). No Spark: options are checked when
they are made, before any work."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.rules.config import ConfigSet
from jobs.rules.timeutil import parse_instant
from segment_io.errors import ConfigError, UsageError
from segment_io.storage import StorageOptions


def test_options_have_the_command_lines_defaults() -> None:
    o = api.CompactOptions()
    assert (o.dry_run, o.strategy, o.dedupe_buffer_bytes, o.max_delete_fraction, o.plan, o.apply) == \
        (False, "auto", 128 * 1024 * 1024, None, None, None)
    assert (o.config, o.overrides, o.topics, o.partitions, o.report, o.ledger, o.progress) == \
        (None, (), (), (), None, None, None)
    assert api.InspectOptions().exact is False and api.RecoverOptions().break_lease is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.dry_run = True  # type: ignore[misc]


def test_the_option_classes_share_their_fields_instead_of_repeating_them() -> None:
    def own(cls: type) -> set[str]:
        inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base)
                     for f in dataclasses.fields(base)}
        return {f.name for f in dataclasses.fields(cls)} - inherited

    assert own(api.RetainOptions) == set()
    assert own(api.CompactOptions) == {"dedupe_buffer_bytes", "strategy", "sort_bucket_bytes"}
    assert own(api.InspectOptions) == {"exact", "html"}
    assert own(api.RecoverOptions) == {"break_lease"}
    assert "remote" not in own(api.TableOptions)  # TieredReadOptions', as inspect's
    assert issubclass(api.CompactOptions, api.LockingOptions) and issubclass(api.RecoverOptions, api.LockingOptions)
    assert not issubclass(api.InspectOptions, api.LockingOptions)  # inspect has no dry run: it writes nothing


def test_sequences_become_tuples_and_one_string_is_one_item() -> None:
    o = api.RetainOptions(topics="orders*", partitions=["a-1", "b-2"], overrides=iter(["*:retention.ms=1d"]),
                          report=Path("/tmp/r.json"))
    assert (o.topics, o.partitions, o.overrides, o.report) == (("orders*",), ("a-1", "b-2"), ("*:retention.ms=1d",),
                                                             "/tmp/r.json")
    assert api.InspectOptions(topics=None).topics == ()


@pytest.mark.parametrize(("make", "field", "error"), [
    (lambda: api.CompactOptions(strategy="fast"), "strategy", UsageError),
    (lambda: api.CompactOptions(sort_bucket_bytes=1000), "sort_bucket_bytes", UsageError),
    (lambda: api.CompactOptions(dedupe_buffer_bytes=10), "dedupe_buffer_bytes", ConfigError),
    (lambda: api.CompactOptions(dedupe_buffer_bytes="1MiB"), "dedupe_buffer_bytes", UsageError),
    (lambda: api.RetainOptions(max_delete_fraction=1.5), "max_delete_fraction", UsageError),
    (lambda: api.InspectOptions(max_delete_fraction=float("nan")), "max_delete_fraction", UsageError),
    (lambda: api.RetainOptions(max_batch_bytes=0), "max_batch_bytes", UsageError),
    (lambda: api.RetainOptions(accept_config_baseline="yes"), "accept_config_baseline", UsageError),
    (lambda: api.RetainOptions(plan="p.json"), "plan", UsageError),
    (lambda: api.RetainOptions(plan="p.json", apply="a.json", dry_run=True), "apply", UsageError),
    (lambda: api.RecoverOptions(dry_run=True, break_lease="run"), "break_lease", UsageError),
    (lambda: api.RetainOptions(config=42), "config", UsageError),
    (lambda: api.RetainOptions(storage={"endpoint_url": "x"}), "storage", UsageError),
    (lambda: api.RetainOptions(topics=[1]), "topics", UsageError),
    (lambda: api.RetainOptions(progress="stderr"), "progress", UsageError),
])
def test_a_refused_value_names_its_field(make, field, error) -> None:
    with pytest.raises(error) as info:
        make()
    assert isinstance(info.value, api.InvalidOption) and info.value.field == field
    assert f".{field}" in str(info.value), str(info.value)  # e.g. CompactOptions.strategy='fast'


def test_a_bad_lease_ttl_is_refused_with_the_flags_wording() -> None:
    with pytest.raises(UsageError, match="lease TTL='10ms': a lease TTL must be at least"):
        api.RetainOptions(lease_ttl="10ms")
    assert api.RetainOptions(lease_ttl=90_000).lease_ttl == 90_000


def test_a_dedupe_buffer_too_small_names_kafkas_setting_and_the_least_it_takes() -> None:
    # the API names the Kafka setting behind the field; the command line refuses such a --dedupe-buffer-bytes
    # itself, naming the flag (tests/jobs/commands/test_args.py)
    with pytest.raises(ConfigError) as info:
        api.CompactOptions(dedupe_buffer_bytes=10)
    assert str(info.value) == ("CompactOptions.dedupe_buffer_bytes=10: log.cleaner.dedupe.buffer.size=10 holds 0 slots "
                               "of 24 bytes: too small to map even one key (at least 48 bytes)")


@pytest.mark.parametrize("size", [24, 47])
def test_a_dedupe_buffer_of_one_slot_says_one_slot(size) -> None:
    # "holds 1 slot", not "holds 1 slots"
    with pytest.raises(ConfigError) as info:
        api.CompactOptions(dedupe_buffer_bytes=size)
    assert str(info.value) == (f"CompactOptions.dedupe_buffer_bytes={size}: log.cleaner.dedupe.buffer.size={size} "
                               f"holds 1 slot of 24 bytes: too small to map even one key (at least 48 bytes)")


def test_the_command_line_keeps_its_own_wording(tmp_path: Path, capsys) -> None:
    (tmp_path / "logs").mkdir()
    cases = [
        (["--plan", "p.json"], "--plan FILE needs --dry-run"),
    ]
    for extra, wording in cases:
        assert main(["compact", "--log-dir", str(tmp_path / "logs"), *extra]) == 2
        err = capsys.readouterr().err
        assert f"segjobs compact: error: {wording}" in err and "CompactOptions" not in err, err


def test_a_config_set_and_overrides_combine(tmp_path: Path) -> None:
    base = ConfigSet().with_overrides(["*:retention.ms=1d"])
    configs = api.RetainOptions(config=base, overrides=["t:retention.ms=2d"]).load_configs()
    assert configs.for_topic("t").retention_ms == 2 * 86_400_000 and configs.for_topic("u").retention_ms == 86_400_000
    toml = tmp_path / "topics.toml"
    toml.write_text('[defaults]\n"retention.ms" = 5000\n')
    assert api.RetainOptions(config=toml).load_configs().for_topic("t").retention_ms == 5000


def test_now_is_epoch_ms_iso_8601_or_a_datetime() -> None:
    ms = 1_700_000_000_000
    assert parse_instant(ms) == parse_instant(str(ms)) == parse_instant("2023-11-14T22:13:20Z") == ms
    assert parse_instant(datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)) == ms
    assert parse_instant(datetime(2023, 11, 14, 22, 13, 20)) == ms  # naive: UTC
    with pytest.raises(UsageError, match="cannot read"):
        parse_instant(1.5e12)  # type: ignore[arg-type]


def test_the_api_refuses_another_commands_options(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"compact\(\) takes CompactOptions, not RetainOptions"):
        api.compact(tmp_path, api.RetainOptions())  # type: ignore[arg-type]


def test_storage_defaults_to_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    assert api.RetainOptions().storage_options().endpoint_url == "http://127.0.0.1:1"
    given = StorageOptions(endpoint_url="http://127.0.0.1:2")
    assert api.RetainOptions(storage=given).storage_options() is given
