"""segment_io.units: the one size parser and the one duration parser (config, CLI options, data source)."""

from __future__ import annotations

import pytest

from segment_io.units import format_duration, parse_duration, parse_size

DAY = 86_400_000


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), (" 4096 ", 4096), ("100B", 100), ("64KiB", 65_536), ("512MiB", 512 << 20), ("512mib", 512 << 20),
    ("1GiB", 1 << 30), ("2TiB", 2 << 40), ("1.5GiB", 3 << 29), ("0.5KiB", 512), ("1_000_000", 1_000_000),
    ("-1", -1), (4096, 4096), ("512 MiB", 512 << 20),
])
def test_sizes(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("60000", 60_000), ("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("36h", 36 * 3_600_000), ("7d", 7 * DAY),
    ("2w", 14 * DAY), ("1.5d", 36 * 3_600_000), ("0.5s", 500), ("-1", -1), (7 * DAY, 7 * DAY),
])
def test_durations(text, expected) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("parse, text, words", [
    (parse_duration, "five days", "cannot read 'five days' as a duration (examples: 7d, 36h, 500ms)"),
    (parse_duration, "3 fortnights", "unknown unit 'fortnights'"),
    (parse_duration, "7D", "unknown unit 'D'"),  # case-sensitive: "m" can only mean minutes
    (parse_duration, "-2h", "only a plain -1 may be negative"),
    (parse_duration, "1.0001ms", "not a whole number of milliseconds"),
    (parse_duration, "1.5", "a fraction needs a unit"),
    (parse_duration, "", "cannot read '' as a duration"),
    (parse_duration, "h", "cannot read 'h' as a duration"),
    (parse_size, "lots", "cannot read 'lots' as a size (examples: 512MiB, 1GiB, 4096)"),
    (parse_size, "1GB", "unit 'GB' is ambiguous"),
    (parse_size, "512MB", "use the binary units KiB, MiB, GiB, TiB"),
    (parse_size, "4k", "ambiguous"),
    (parse_size, "1.3B", "not a whole number of bytes"),
    (parse_size, "12 parsecs", "unknown unit 'parsecs'"),
    (parse_size, True, "got bool True"),
    (parse_size, 1.5, "got float 1.5"),
])
def test_errors_say_what_was_read_and_how_to_write_it(parse, text, words) -> None:
    with pytest.raises(ValueError) as caught:
        parse(text)
    assert words in str(caught.value)


def test_format_duration() -> None:
    assert format_duration(90_061_000) == "1d 1h"
    assert format_duration(45_000) == "45s"
    assert format_duration(12) == "12ms"
    assert format_duration(400 * DAY + 5 * 3_600_000) == "400d 5h"


def test_config_cli_and_data_source_use_these_parsers() -> None:
    from jobs.commands import args
    from jobs.rules import config
    from segment_io.spark import options

    assert config.parse_size is parse_size and config.parse_duration is parse_duration
    assert args.parse_size is parse_size and args.parse_duration is parse_duration
    assert options.parse_size is parse_size
