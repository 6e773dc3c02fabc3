"""Hints for the usual command-line mistakes, through the CLI: a partition directory or a segment file given
as --log-dir, an unknown --topic or --partition (with the closest names), sizes and durations with units, and
--now out of range. Each one exits 2 within a second (before Spark), with the hint on stderr and nothing on
stdout, and touches no file."""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.commands.cli import build_parser, main
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.spark import spark_forbidden

NOW = "2026-11-22T03:00:00Z"


@pytest.fixture()
def log_dir(tmp_path) -> Path:
    d = tmp_path / "logs"
    for topic, partitions in (("orders", 3), ("users", 1), ("payments-eu", 1)):
        for p in range(partitions):
            log = LogBuilder(topic, p, timestamp=1_700_000_000_000)
            log.batch([rec("k", "v"), rec("k2", "v2")])
            log.roll().batch([rec("z", "active")])
            write_log(log.table(), d / f"{topic}-{p}")
    return d


def _files(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def _usage_error(capsys, argv: list[str]) -> str:
    """Run the CLI: exit 2 before any Spark session is built, nothing on stdout, one line on stderr (returned)."""
    with spark_forbidden():
        rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"segjobs {argv[0]}: error: "), err
    return lines[0]


def _argparse_error(capsys, argv: list[str]) -> str:
    """An option argparse itself refuses: SystemExit(2), usage and the error on stderr, nothing on stdout."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    out, err = capsys.readouterr()
    assert caught.value.code == 2 and out == ""
    return err.strip().splitlines()[-1]


# --------------------------------------------------------------------------------------------------
# --log-dir
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["compact", "retain", "inspect"])
def test_a_partition_dir_given_as_log_dir_names_its_parent_and_the_partition(capsys, log_dir, command) -> None:
    before = _files(log_dir)
    line = _usage_error(capsys, [command, "--log-dir", str(log_dir / "orders-1"), "--now", NOW, "--quiet"])
    assert (f"this looks like a partition; use its parent with --partition orders-1: --log-dir {log_dir} "
            f"--partition orders-1") in line
    assert _files(log_dir) == before


def test_recover_on_a_partition_dir_names_its_parent(capsys, log_dir) -> None:
    before = _files(log_dir)
    line = _usage_error(capsys, ["recover", "--log-dir", str(log_dir / "orders-1"), "--now", NOW])
    assert f"this looks like a partition; use its parent: --log-dir {log_dir}" in line
    assert "--partition" not in line  # recover has no --partition
    assert _files(log_dir) == before


def test_a_dir_of_segment_files_not_named_like_a_partition(capsys, log_dir, tmp_path) -> None:
    loose = tmp_path / "copied-segments"
    loose.mkdir()
    for f in (log_dir / "users-0").iterdir():
        (loose / f.name).write_bytes(f.read_bytes())
    line = _usage_error(capsys, ["retain", "--log-dir", str(loose), "--now", NOW, "--quiet"])
    assert "it holds segment files itself, as a partition directory does" in line


@pytest.mark.parametrize("command", ["compact", "retain", "inspect", "recover"])
def test_a_segment_file_given_as_log_dir(capsys, log_dir, command) -> None:
    seg = log_dir / "orders-2" / "00000000000000000000.log"
    line = _usage_error(capsys, [command, "--log-dir", str(seg), "--now", NOW] + (["--quiet"] * (command != "recover")))
    assert f"--log-dir {seg} is a segment file, not a log dir" in line
    if command != "recover":
        assert f"--log-dir {log_dir} --partition orders-2" in line
    assert f"segjobs dump {seg}" in line


def test_an_empty_log_dir_is_still_refused_without_a_partition_hint(capsys, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    line = _usage_error(capsys, ["retain", "--log-dir", str(tmp_path / "empty"), "--now", NOW, "--quiet"])
    assert "no partition directories" in line and "looks like a partition" not in line


@pytest.mark.parametrize("command", ["compact", "retain", "inspect"])
def test_a_log_dir_above_the_real_one_names_where_the_partitions_are(capsys, log_dir, tmp_path, command) -> None:
    """--log-dir one level too high (the broker's log dirs are below it): the error names the directory that
    holds the partition directories."""
    above = tmp_path / "kafka"
    (above / "broker-a").mkdir(parents=True)
    log_dir.rename(above / "broker-a" / "logs")
    line = _usage_error(capsys, [command, "--log-dir", str(above), "--now", NOW] + ["--quiet"] * (command != "inspect"))
    assert line.endswith(f"--log-dir {above}: no partition directories (<topic>-<n>) found; partition directories "
                         f"found under {above}/broker-a/logs: give the one you mean as the log dir, e.g. --log-dir "
                         f"{above}/broker-a/logs"), line


@pytest.mark.s3
def test_a_wrong_s3_prefix_names_the_prefixes_that_hold_partitions(capsys, log_dir, s3_bucket_env) -> None:
    """On S3: a prefix that does not exist (a typo) and one too high both name the prefixes that hold
    partition directories."""
    from segment_io.storage import open_storage
    from tests.support.s3_objects import upload

    endpoint, bucket = s3_bucket_env
    storage = open_storage(f"s3://{bucket}", endpoint.storage_options())
    upload(storage, log_dir, f"s3://{bucket}/logs/broker1")
    upload(storage, log_dir, f"s3://{bucket}/logs/broker2")
    base = ["retain", "--s3-endpoint", endpoint.endpoint_url, "--now", NOW, "--quiet"]
    line = _usage_error(capsys, [*base, "--log-dir", f"s3://{bucket}/logs"])
    assert line.endswith(f"found under s3://{bucket}/logs/broker1, s3://{bucket}/logs/broker2: give the one you "
                         f"mean as the log dir, e.g. --log-dir s3://{bucket}/logs/broker1"), line
    line = _usage_error(capsys, [*base, "--log-dir", f"s3://{bucket}/logs/broker3"])
    assert f"found under s3://{bucket}/logs/broker1, s3://{bucket}/logs/broker2:" in line


# --------------------------------------------------------------------------------------------------
# --topic, --partition
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("glob, hint", [
    ("order", "order: closest: orders"),
    ("Users", "Users: closest: users"),
    ("payments_eu*", "closest: payments-eu"),
    ("zzz", "zzz: topics there: orders, payments-eu, users"),
])
def test_an_unknown_topic_lists_the_closest_topics(capsys, log_dir, glob, hint) -> None:
    line = _usage_error(capsys, ["retain", "--log-dir", str(log_dir), "--now", NOW, "--quiet", "--topic", glob])
    assert f"--topic matches no topic in the log dir: {glob}" in line and hint in line


def test_an_unknown_partition_says_which_partitions_its_topic_has(capsys, log_dir) -> None:
    line = _usage_error(capsys, ["compact", "--log-dir", str(log_dir), "--now", NOW, "--quiet",
                                 "--partition", "orders-7", "--partition", "user-0"])
    assert "orders-7, user-0" in line
    assert "orders has partitions 0-2" in line and "no topic 'user'; closest: users" in line


# --------------------------------------------------------------------------------------------------
# Sizes and durations with units
# --------------------------------------------------------------------------------------------------


def test_size_options_take_units() -> None:
    parser = build_parser()
    compact = parser.parse_args(["compact", "--log-dir", "x", "--dedupe-buffer-bytes", "512MiB"])
    assert compact.dedupe_buffer_bytes == 512 << 20
    generate = parser.parse_args(["generate", "--out", "x", "--segment-bytes", "4MiB", "--value-bytes", "1KiB",
                                  "--key-bytes", "32", "--span", "36h"])
    assert (generate.segment_bytes, generate.value_bytes, generate.key_bytes, generate.span) == \
        (4 << 20, 1024, 32, 36 * 3_600_000)
    assert parser.parse_args(["dump", "x", "--max-value-bytes", "1KiB"]).max_value_bytes == 1024
    assert parser.parse_args(["dump", "x", "--max-value-bytes", "-1"]).max_value_bytes == -1


def test_a_bad_duration_says_how_to_write_one(capsys, tmp_path) -> None:
    line = _argparse_error(capsys, ["generate", "--out", str(tmp_path / "g"), "--span", "five days"])
    assert line == ("segjobs generate: error: argument --span: cannot read 'five days' as a duration "
                    "(examples: 7d, 36h, 500ms)")
    assert not (tmp_path / "g").exists()


def test_an_ambiguous_size_is_refused_everywhere(capsys, log_dir, tmp_path) -> None:
    line = _argparse_error(capsys, ["compact", "--log-dir", str(log_dir), "--dedupe-buffer-bytes", "1GB"])
    assert "argument --dedupe-buffer-bytes: cannot read '1GB' as a size: unit 'GB' is ambiguous" in line
    line = _argparse_error(capsys, ["generate", "--out", str(tmp_path / "g"), "--segment-bytes", "1GB"])
    assert "unit 'GB' is ambiguous" in line and "KiB, MiB, GiB, TiB" in line
    # the topic configuration reads values with the same parser, and says the same
    line = _usage_error(capsys, ["retain", "--log-dir", str(log_dir), "--now", NOW, "--quiet",
                                 "--set", "orders:retention.bytes=1GB"])
    assert "retention.bytes: cannot read '1GB' as a size: unit 'GB' is ambiguous" in line
    line = _usage_error(capsys, ["retain", "--log-dir", str(log_dir), "--now", NOW, "--quiet",
                                 "--set", "orders:retention.ms=five days"])
    assert "retention.ms: cannot read 'five days' as a duration (examples: 7d, 36h, 500ms)" in line


@pytest.mark.parametrize("option", ["--dedupe-buffer-bytes", "--max-batch-bytes"])
@pytest.mark.parametrize("size", ["-5", "0"])
def test_a_size_that_must_be_positive_is_refused_naming_the_flag(capsys, log_dir, option, size) -> None:
    # the flag the user typed, not the Kafka setting behind it (log.cleaner.dedupe.buffer.size)
    line = _argparse_error(capsys, ["compact", "--log-dir", str(log_dir), option, size])
    assert line == f"segjobs compact: error: argument {option}: must be positive, got {size!r}"


@pytest.mark.parametrize("size", ["10", "47"])
def test_a_dedupe_buffer_too_small_for_one_key_is_refused_naming_the_flag_and_the_least(capsys, log_dir, size) -> None:
    # positive, but its offset map would not hold one key: the flag typed and the least it takes, not the Kafka
    # setting behind it (log.cleaner.dedupe.buffer.size=10 holds 0 slots ...), and before any work
    with spark_forbidden():
        line = _argparse_error(capsys, ["compact", "--log-dir", str(log_dir), "--dedupe-buffer-bytes", size])
    assert line == ("segjobs compact: error: argument --dedupe-buffer-bytes: must be at least 48 bytes, the smallest "
                    f"offset map that holds one key (24 bytes a slot, full at 0.9 of the slots), got {size!r}")


def test_the_least_dedupe_buffer_the_flag_takes_is_the_least_the_options_take() -> None:
    from jobs import api
    from jobs.commands.compact import options_from_args
    from jobs.rules.map_capacity import MIN_BUFFER_BYTES, max_keys_for_buffer
    from segment_io.errors import ConfigError

    assert MIN_BUFFER_BYTES == 48 and max_keys_for_buffer(48) == 1  # two 24-byte slots, full at 0.9 of them
    args = build_parser("compact").parse_args(["compact", "--log-dir", "/nowhere", "--dedupe-buffer-bytes", "48"])
    assert options_from_args(args).dedupe_buffer_bytes == 48
    with pytest.raises(ConfigError, match=r"buffer\.size=47 holds 1 slot of .*one key \(at least 48 bytes\)"):
        api.CompactOptions(dedupe_buffer_bytes=47)


@pytest.mark.parametrize("size", ["1KiB", "1048575"])
def test_a_sort_bucket_below_the_least_is_refused_naming_the_flag_and_the_least(capsys, log_dir, size) -> None:
    # the flag typed and the least it takes, not the options' field (CompactOptions.sort_bucket_bytes=1024: ...),
    # and before any work
    with spark_forbidden():
        line = _argparse_error(capsys, ["compact", "--log-dir", str(log_dir), "--sort-bucket-bytes", size])
    assert line == ("segjobs compact: error: argument --sort-bucket-bytes: must be at least 1MiB (1048576 bytes), "
                    f"the least memory one reduce task of the external sort takes, got {size!r}")


def test_the_least_sort_bucket_the_flag_takes_is_the_least_the_options_take() -> None:
    from jobs import api
    from jobs.commands.compact import options_from_args
    from jobs.engine.frame.options import MIN_SORT_BUCKET_BYTES
    from segment_io.errors import UsageError

    assert MIN_SORT_BUCKET_BYTES == 1 << 20
    args = build_parser("compact").parse_args(["compact", "--log-dir", "/nowhere", "--sort-bucket-bytes", "1MiB"])
    assert options_from_args(args).sort_bucket_bytes == MIN_SORT_BUCKET_BYTES
    with pytest.raises(UsageError) as info:
        api.CompactOptions(sort_bucket_bytes=MIN_SORT_BUCKET_BYTES - 1)
    # the API names its field; the command line's wording, should the options refuse a value, names the flag
    assert str(info.value) == ("CompactOptions.sort_bucket_bytes=1048575: expected a number of bytes, at least "
                               "1048576 (1MiB)")
    assert info.value.cli_message == "--sort-bucket-bytes 1048575: expected a size of at least 1MiB (1048576 bytes)"


def test_generate_refuses_a_segment_size_that_is_not_positive(capsys, tmp_path) -> None:
    line = _argparse_error(capsys, ["generate", "--out", str(tmp_path / "g"), "--segment-bytes=0"])
    assert line == "segjobs generate: error: argument --segment-bytes: must be positive, got '0'"
    assert not (tmp_path / "g").exists()


def test_options_are_typed_whole_and_a_wrong_one_is_named_with_the_nearest(capsys, tmp_path) -> None:
    """argparse took any unambiguous prefix for the whole option: ``--acc`` turned on --accept-config-baseline,
    and a misspelt required option got only "required: --log-dir". Now a prefix is refused like any unknown
    word, nothing is done, and the error names the word and the options it may have meant."""
    logs = tmp_path / "logs"
    line = _argparse_error(capsys, ["retain", "--log-dir", str(logs), "--acc", "--dry-run"])
    assert line == ("segjobs: error: unrecognized arguments: --acc (--acc: not an option of this command; did you "
                    "mean --accept-config-baseline?)")
    line = _argparse_error(capsys, ["compact", "--log-dir", str(logs), "--max"])
    assert line.endswith("(--max: not an option of this command; did you mean --max-batch-bytes or "
                         "--max-delete-fraction?)")
    line = _argparse_error(capsys, ["compact", "--log-dirs", str(logs)])
    assert line == ("segjobs compact: error: the following arguments are required: --log-dir (--log-dirs: not an "
                    "option of this command; did you mean --log-dir?)")
    # a nested command's options (tiered audit), and a word like no option at all
    line = _argparse_error(capsys, ["tiered", "audit", "--log-dir", "x", "--remote", "y", "--graze=5m"])
    assert line.endswith("(--graze: not an option of this command; did you mean --grace?)")
    line = _argparse_error(capsys, ["compact", "--log-dir", str(logs), "--frobnicate"])
    assert line.endswith("unrecognized arguments: --frobnicate (--frobnicate: not an option of this command)")
    assert not logs.exists()


def test_a_value_starting_with_a_dash_is_shown_how_to_give_it(capsys, tmp_path) -> None:
    # argparse reads -1MiB as an option (only a plain number such as -1 may follow as a value) and says only
    # "expected one argument": the hint names the word it took and the spelling that passes it as the value
    out = tmp_path / "g"
    line = _argparse_error(capsys, ["generate", "--out", str(out), "--segment-bytes", "-1MiB"])
    assert line == ("segjobs generate: error: argument --segment-bytes: expected one argument ('-1MiB' starts with "
                    "'-' and was taken for an option: give it as --segment-bytes=-1MiB)")
    # given that way, the value reaches the option's own check
    line = _argparse_error(capsys, ["generate", "--out", str(out), "--segment-bytes=-1MiB"])
    assert line.endswith("argument --segment-bytes: cannot read '-1MiB' as a size: only a plain -1 may be negative")
    # a nested command's parser (tiered audit), an option with two names: the same hint, with the name typed
    line = _argparse_error(capsys, ["tiered", "audit", "--log-dir", "x", "--remote", "y", "--grace", "-5m"])
    assert line.endswith("('-5m' starts with '-' and was taken for an option: give it as --grace=-5m)")
    line = _argparse_error(capsys, ["compact", "--log-dir", "x", "--output", "-1x"])
    assert line.endswith("argument --format/--output: expected one argument ('-1x' starts with '-' and was taken for "
                         "an option: give it as --output=-1x)")
    # a value simply left out gets argparse's message alone
    line = _argparse_error(capsys, ["generate", "--out", str(out), "--segment-bytes"])
    assert line == "segjobs generate: error: argument --segment-bytes: expected one argument"
    line = _argparse_error(capsys, ["generate", "--out", str(out), "--segment-bytes", "--quiet"])
    assert line == "segjobs generate: error: argument --segment-bytes: expected one argument"
    assert not out.exists()


def test_a_config_value_with_units_is_the_value_of_the_option(capsys, tmp_path) -> None:
    """--set takes the same spellings as the options: 512MiB is 512 MiB in both."""
    from jobs.rules.config import ConfigSet

    config = ConfigSet().with_overrides(["t:retention.bytes=512MiB", "t:retention.ms=36h"]).for_topic("t")
    parsed = build_parser().parse_args(["compact", "--log-dir", "x", "--dedupe-buffer-bytes", "512MiB"])
    assert config.retention_bytes == parsed.dedupe_buffer_bytes == 512 << 20
    assert config.retention_ms == build_parser().parse_args(["generate", "--out", "x", "--span", "36h"]).span


# --------------------------------------------------------------------------------------------------
# --now
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("now, words", [
    ("1969-12-31T23:59:59Z", "lies before 1970-01-01T00:00:00Z"),
    ("-1000", "lies before 1970-01-01T00:00:00Z"),
    ("2206-11-22T03:00:00Z", "lies after 2100-01-01T00:00:00Z: a typo?"),
    ("1795305600000000", "looks like epoch microseconds"),
])
@pytest.mark.parametrize("command", ["compact", "retain", "inspect", "recover"])
def test_now_before_1970_or_far_ahead_is_refused(capsys, log_dir, command, now, words) -> None:
    before = _files(log_dir)
    line = _usage_error(capsys, [command, "--log-dir", str(log_dir), f"--now={now}"])
    assert f"--now {now!r}" in line and words in line
    assert _files(log_dir) == before


def test_recover_without_now_prints_the_instant_it_used(capsys, log_dir) -> None:
    assert main(["recover", "--log-dir", str(log_dir)]) == 0
    err = capsys.readouterr().err
    assert "segjobs recover: --now not given: acting at 20" in err and "pass --now " in err
    assert main(["recover", "--log-dir", str(log_dir), "--now", NOW]) == 0
    assert "--now not given" not in capsys.readouterr().err


def test_the_now_bound_is_a_fixed_date(monkeypatch) -> None:
    """The bound reads no clock: the same command line is accepted whatever day it runs."""
    from jobs.rules import timeutil

    monkeypatch.setattr(timeutil, "wall_clock_ms", lambda: pytest.fail("the clock was read"))
    assert timeutil.parse_instant("2100-01-01T00:00:00Z") == timeutil.LATEST_NOW_MS  # the last one accepted
    assert timeutil.parse_instant(str(timeutil.LATEST_NOW_MS)) == timeutil.LATEST_NOW_MS
    assert timeutil.parse_instant("1970-01-01T00:00:00Z") == 0
    assert timeutil.parse_instant("2026-11-22T03:00:00") == timeutil.parse_instant("2026-11-22T03:00:00Z")


# --------------------------------------------------------------------------------------------------
# The parser a run builds imports only its own command
# --------------------------------------------------------------------------------------------------


def test_a_run_parses_with_its_own_command_alone_and_the_same_help() -> None:
    """``main`` configures only the command it runs (the others would import their engines for nothing): the
    top-level help and each command's own help and parse are those of the full parser."""
    from jobs.commands.cli import COMMANDS

    full = build_parser()
    assert build_parser(None, every=False).format_help() == full.format_help()
    argv = ["compact", "--log-dir", "x", "--dedupe-buffer-bytes", "512MiB", "--now", "2026-11-22T03:00:00Z"]
    assert vars(build_parser("compact", every=False).parse_args(argv)) == vars(full.parse_args(argv))
    subparsers = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    for name in COMMANDS:
        alone = next(a for a in build_parser(name, every=False)._actions
                     if isinstance(a, argparse._SubParsersAction))
        assert alone.choices[name].format_help() == subparsers.choices[name].format_help(), name


def test_the_top_level_help_imports_no_command() -> None:
    code = ("import atexit, sys; from jobs.commands.cli import COMMANDS, console_main; "
            "atexit.register(lambda: print(sorted(m for m, _ in COMMANDS.values() if m in sys.modules))); "
            "sys.argv = ['segjobs', '--help']; console_main()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert done.stdout.startswith("usage: segjobs") and done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("given, why", [("01", "leading zero"), ("users-\uff11", "ASCII digits"),
                                        ("users-99999999999", "above 2147483647"), ("+3", None)])
def test_table_partition_is_read_by_the_partition_parser(capsys, tmp_path, given, why) -> None:
    err = _argparse_error(capsys, ["table", "--log-dir", str(tmp_path), "--topic", "users", "--table",
                                   str(tmp_path / "t"), "--partition", given])
    assert f"{given!r}: expected a partition number" in err and (why is None or why in err)


def test_table_partition_of_another_topic_is_refused(capsys, tmp_path) -> None:
    code = main(["table", "--log-dir", str(tmp_path), "--topic", "users", "--table", str(tmp_path / "t"),
                 "--partition", "orders-3"])
    assert code == 2
    assert "--partition orders-3 names a partition of orders, not of --topic users" in capsys.readouterr().err
