"""jobs.rules.timeutil: --now's range, the wall-clock note, and retain's warning about data older than any retention
(the warning also through the CLI, on a real run of ``segjobs retain``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.rules.timeutil import (
    LATEST_NOW_MS,
    data_age_warning,
    format_instant,
    parse_instant,
    resolve_now,
)
from segment_io.errors import UsageError
from tests.support.builders import LogBuilder, rec, write_log

DAY = 86_400_000
T0 = 1_700_000_000_000  # 2023-11-14


def test_latest_now_is_2100() -> None:
    assert format_instant(LATEST_NOW_MS) == "2100-01-01T00:00:00.000Z"


@pytest.mark.parametrize("text", ["1969-12-31T23:59:59.999Z", "-1", "2100-01-01T00:00:00.001Z", "2206-11-22",
                                  "4102444800001"])
def test_instants_out_of_range_are_refused_naming_the_option(text) -> None:
    with pytest.raises(UsageError, match="--start"):
        parse_instant(text, option="--start")


@pytest.mark.parametrize(("text", "iso", "ms"), [("20231122", "2023-11-22", 1_700_611_200_000),
                                                ("20231122030000", "2023-11-22T03:00:00Z", 1_700_622_000_000)])
def test_a_run_together_date_is_answered_with_its_iso_form(text, iso, ms) -> None:
    # read as epoch seconds 20231122 is 1970-08-23: the suggestion is the date that was meant, not that
    with pytest.raises(UsageError) as info:
        parse_instant(text)
    assert str(info.value) == f"--now {text!r} looks like the date {iso}: give it as ISO-8601 (--now {iso}) or " \
                              f"epoch milliseconds ({ms})"
    assert parse_instant(iso) == ms


@pytest.mark.parametrize("text", ["20231340", "19691231"])  # no such month; a year out of range
def test_eight_digits_that_are_no_date_still_read_as_seconds(text) -> None:
    with pytest.raises(UsageError, match="looks like epoch seconds"):
        parse_instant(text)


@pytest.mark.parametrize(("text", "message"), [
    # Python reads a week as its Monday's midnight without a word: a week is no instant
    ("2026-W10", "--now: '2026-W10' is an ISO week, and an ISO week is not an instant; give a date such as "
                 "2026-03-02 (the Monday of that week)"),
    ("2026W10", "--now: '2026W10' is an ISO week, and an ISO week is not an instant; give a date such as "
                "2026-03-02 (the Monday of that week)"),
    ("2026-W10-3T03:00:00Z", "--now: '2026-W10-3T03:00:00Z' is an ISO week date; give it as a calendar date: "
                             "--now 2026-03-04T03:00:00Z"),
    ("2026-W54", "--now: '2026-W54' is no ISO week date (2026 has no week 54): give a calendar date such as "
                 "2026-03-02"),
    ("2026-061", "--now: '2026-061' is an ordinal date (day 61 of 2026); give it as a calendar date: --now 2026-03-02"),
    ("2024-366T01:00", "--now: '2024-366T01:00' is an ordinal date (day 366 of 2024); give it as a calendar date: "
                       "--now 2024-12-31T01:00"),
    ("2026-366", "--now: '2026-366' is no ordinal date (2026 has no day 366): give a calendar date such as 2026-03-02"),
    ("2026061", "--now '2026061' looks like the date 2026-03-02: give it as ISO-8601 (--now 2026-03-02) or epoch "
                "milliseconds (1772409600000)"),
])
def test_iso_week_and_ordinal_dates_are_refused_naming_the_calendar_date(text, message) -> None:
    with pytest.raises(UsageError) as info:
        parse_instant(text)
    assert str(info.value) == message


def test_resolve_now() -> None:
    assert resolve_now("2026-11-22T03:00:00Z") == (parse_instant("2026-11-22T03:00:00Z"), None)
    now, note = resolve_now(None)
    assert note == (f"--now not given: acting at {format_instant(now)} ({now}), the wall clock; "
                    f"pass --now {now} to repeat this run's decisions")


def test_data_age_warning() -> None:
    now = T0 + 400 * DAY
    warning = data_age_warning([T0 - DAY, T0, None, -1], [7 * DAY, 30 * DAY], now)
    assert warning is not None
    assert warning.startswith("the newest record in scope is 400d old (2023-11-14T22:13:20.000Z), older than the "
                              "largest retention.ms (30d)")
    assert data_age_warning([T0], [7 * DAY, 30 * DAY], T0 + 30 * DAY) is None  # not older: exactly the retention
    assert data_age_warning([T0], [7 * DAY, -1], now) is None  # one topic keeps everything
    assert data_age_warning([T0], [], now) is None  # no topic with time retention in scope
    assert data_age_warning([None, -1], [7 * DAY], now) is None  # no record timestamps


@pytest.fixture()
def old_log_dir(tmp_path) -> Path:
    """Two partitions whose newest record is from 2023-11-14: long past a 7-day retention at today's date."""
    d = tmp_path / "logs"
    for topic in ("clicks", "orders"):
        log = LogBuilder(topic, 0, timestamp=T0)
        log.batch([rec("k", "v")])
        log.roll().batch([rec("k", "w")])
        write_log(log.table(), d / f"{topic}-0")
    return d


def test_retain_without_now_on_old_data_warns_with_the_data_age(spark, capsys, old_log_dir, tmp_path) -> None:
    report = tmp_path / "r.json"
    common = ["retain", "--log-dir", str(old_log_dir), "--dry-run", "--quiet", "--report", str(report)]

    assert main([*common, "--set", "orders:retention.ms=30d"]) == 0
    err = capsys.readouterr().err
    assert "segjobs retain: --now not given: acting at " in err
    # (the log dir's other topics, which nothing configures, get the warning about Kafka's defaults too)
    [warning] = [line for line in err.splitlines()
                 if line.startswith("segjobs retain: warning: ") and "newest record in scope" in line]
    assert re.search(r"the newest record in scope is \d+d( \d+[a-z]+)? old \(2023-11-14T22:13:", warning), warning
    assert "older than the largest retention.ms (30d)" in warning and "pass --now" in warning
    assert any("newest record in scope" in w for w in json.loads(report.read_text())["warnings"])

    # the same data with --now given: the user chose the instant, nothing to warn about
    assert main([*common, "--now", format_instant(T0 + 400 * DAY)]) == 0
    err = capsys.readouterr().err
    assert "--now not given" not in err and "newest record" not in err

    # a topic with unlimited retention: the largest retention.ms is unlimited, no warning
    assert main([*common, "--set", "orders:retention.ms=-1"]) == 0
    err = capsys.readouterr().err
    assert "--now not given" in err and "newest record" not in err


def test_now_zero_is_not_answered_with_zero_milliseconds() -> None:
    """0 read as seconds is 0 ms: the old 'looks like epoch seconds (e.g. 0)' suggested the same zero."""
    with pytest.raises(UsageError) as info:
        parse_instant("0")
    text = str(info.value)
    assert "(e.g. 0)" not in text and "1970-01-01T00:00:00Z" in text and "ISO-8601" in text
