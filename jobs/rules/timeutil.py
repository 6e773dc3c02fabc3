"""Parsing of ``--now`` and other instants: the jobs never read the clock inside their logic.

``--now`` is refused before 1970 (Kafka's timestamps are epoch milliseconds; a negative one means "no
timestamp") and after :data:`LATEST_NOW_MS` (2100-01-01T00:00:00Z, the last instant accepted). The upper
bound is a fixed date, not "the wall clock plus a margin": a command line that was accepted once is accepted
again (a backfill re-run must not depend on the day it runs), and the check reads no clock. It catches typos
(``2206`` for ``2026``) and instants in the wrong unit (epoch microseconds land in the year 55,000), either of
which would otherwise make every segment look expired.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, date, datetime
from typing import Callable, Iterable

from segment_io.errors import UsageError
from segment_io.units import format_duration

#: An instant as the jobs take it: epoch milliseconds, an ISO-8601 string, or a datetime (naive = UTC).
Instant = int | str | datetime

#: The last instant ``--now`` may be: 2100-01-01T00:00:00Z.
LATEST_NOW_MS = 4_102_444_800_000


def wall_clock_ms() -> int:
    """The current time in epoch milliseconds (used only as the default of ``--now``)."""
    return time.time_ns() // 1_000_000


def parse_instant(text: Instant | None, *, option: str = "--now") -> int:
    """Epoch milliseconds from ``"1700000000000"`` or an ISO-8601 string (``2026-11-22``,
    ``2026-11-22T03:00:00Z``, ``2026-11-22T03:00:00+01:00``; a naive time is taken as UTC), an int (epoch
    ms) or a datetime (naive: UTC). ``None`` means now. ``UsageError`` (naming ``option``) for anything else,
    and for instants before 1970 or after 2100-01-01T00:00:00Z."""
    if text is None:
        return wall_clock_ms()
    if isinstance(text, datetime):
        aware = text if text.tzinfo else text.replace(tzinfo=UTC)
        return _in_range(int(aware.timestamp() * 1000), aware.isoformat(), option)
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise UsageError(f"{option}: cannot read {text!r} as an instant: give epoch milliseconds, ISO-8601 such "
                         f"as 2026-11-22T03:00:00Z, or a datetime")
    if isinstance(text, int):
        return _in_range(text, str(text), option)
    s = text.strip()
    if s.lstrip("-").isdigit():
        value = int(s)
        compact = _compact_date(s)
        if compact is not None:
            raise UsageError(f"{option} {s!r} looks like the date {compact}: give it as ISO-8601 ({option} "
                             f"{compact}) or epoch milliseconds ({parse_instant(compact, option=option)})")
        if value == 0:
            raise UsageError(f"{option} '0' is the epoch itself (1970-01-01T00:00:00Z), not an instant to run at; "
                             f"give epoch milliseconds (e.g. 1700000000000) or ISO-8601 (e.g. 2023-11-14T22:13:20Z)")
        if 0 <= value < 10**11:
            raise UsageError(f"{option} {s!r} looks like epoch seconds; segjobs takes epoch milliseconds "
                             f"(e.g. {value * 1000}) or ISO-8601")
        if value > LATEST_NOW_MS and 10**11 <= value // 1000 <= LATEST_NOW_MS:
            raise UsageError(f"{option} {s!r} looks like epoch microseconds; segjobs takes epoch milliseconds "
                             f"(e.g. {value // 1000}) or ISO-8601")
        return _in_range(value, s, option)
    _refuse_week_or_ordinal(s, option)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option}: cannot read {text!r} as an instant: give epoch milliseconds or ISO-8601 "
                         f"such as 2026-11-22T03:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return _in_range(int(dt.timestamp() * 1000), s, option)


#: ISO-8601's week dates (``2026-W10``, ``2026W10``, ``2026-W10-1``) and ordinal dates (``2026-061``), with or
#: without a time after them: groups year, week, weekday / year, day of the year.
_WEEK_DATE = re.compile(r"(\d{4})-?W(\d{2})(?:-?([1-7]))?(?=$|T)", re.IGNORECASE)
_ORDINAL_DATE = re.compile(r"(\d{4})-(\d{3})(?=$|T)")


def _refuse_week_or_ordinal(s: str, option: str) -> None:
    """Refuse ISO-8601's week and ordinal dates, naming the calendar date to give instead: Python reads a week
    (``2026-W10``) as its Monday's midnight without a word, and a week is not an instant; an ordinal date is
    one, but a day count is easy to get wrong by one, and the runs echo calendar dates only."""
    week = _WEEK_DATE.match(s)
    if week is not None:
        year, number, day = int(week[1]), int(week[2]), week[3]
        try:
            monday = date.fromisocalendar(year, number, int(day or 1))
        except ValueError:
            raise UsageError(f"{option}: {s!r} is no ISO week date ({year} has no week {number}): give a "
                             f"calendar date such as 2026-03-02") from None
        if day is None:
            raise UsageError(f"{option}: {s!r} is an ISO week, and an ISO week is not an instant; give a date such "
                             f"as {monday.isoformat()} (the Monday of that week)")
        raise UsageError(f"{option}: {s!r} is an ISO week date; give it as a calendar date: "
                         f"{option} {monday.isoformat()}{s[week.end():]}")
    ordinal = _ORDINAL_DATE.match(s)
    if ordinal is not None:
        year, day_of_year = int(ordinal[1]), int(ordinal[2])
        try:
            day = datetime.strptime(f"{year:04d}{day_of_year:03d}", "%Y%j").date()
            if day.year != year:  # strptime takes day 366 of a common year as the next year's first
                raise ValueError(day)
        except ValueError:
            raise UsageError(f"{option}: {s!r} is no ordinal date ({year} has no day {day_of_year}): give a "
                             f"calendar date such as 2026-03-02") from None
        raise UsageError(f"{option}: {s!r} is an ordinal date (day {day_of_year} of {year}); give it as a calendar "
                         f"date: {option} {day.isoformat()}{s[ordinal.end():]}")


def _compact_date(digits: str) -> str | None:
    """``20231122`` -> ``2023-11-22`` (and ``YYYYMMDDHHMMSS`` -> ``...THH:MM:SSZ``, ordinal ``YYYYDDD`` ->
    its calendar date): the ISO-8601 form of a run-together date, or None when ``digits`` is not one. Seven or
    eight digits read as epoch seconds or milliseconds would fall in 1970, and fourteen after 2100: nobody means
    those."""
    formats = {7: "%Y%j", 8: "%Y%m%d", 14: "%Y%m%d%H%M%S"}
    fmt = formats.get(len(digits))
    if fmt is None:
        return None
    try:
        dt = datetime.strptime(digits, fmt).replace(tzinfo=UTC)
    except ValueError:
        return None
    if dt.strftime(fmt) != digits:  # day 366 of a common year: strptime's next year
        return None
    if not 1970 <= dt.year < 2100:
        return None
    return dt.strftime("%Y-%m-%d") if len(digits) < 14 else dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _in_range(ms: int, text: str, option: str) -> int:
    if ms < 0:
        raise UsageError(f"{option} {text!r} lies before 1970-01-01T00:00:00Z: record timestamps are epoch "
                         f"milliseconds, and no instant before 1970 can judge them")
    if ms > LATEST_NOW_MS:
        raise UsageError(f"{option} {text!r} lies after 2100-01-01T00:00:00Z: a typo? An instant that far "
                         f"ahead would make every segment look expired")
    return ms


def resolve_now(text: Instant | None, clock: Callable[[], int] = wall_clock_ms) -> tuple[int, str | None]:
    """``--now`` as epoch ms, and when it was omitted, the note the run prints (the instant ``clock``, the
    wall clock, gave, and how to repeat the run's decisions); None when ``--now`` was given."""
    if text is not None:
        return parse_instant(text), None
    now_ms = clock()
    return now_ms, (f"--now not given: acting at {format_instant(now_ms)} ({now_ms}), the wall clock; "
                    f"pass --now {now_ms} to repeat this run's decisions")


def data_age_warning(largest_timestamps: Iterable[int | None], retention_ms: Iterable[int],
                     now_ms: int) -> str | None:
    """The warning ``retain`` prints when ``--now`` was left to the wall clock and even the newest record
    (the largest of ``largest_timestamps``, the segments' largest timestamps) is older than the largest
    of ``retention_ms`` (the settings of the topics in scope that have time retention). Every segment but
    the active ones is then past retention: right for a live log dir that stopped receiving data, wrong for
    an old copy or backup judged at today's date. None when there is nothing to warn about: no record
    timestamps, no time retention, an unlimited one (-1), or data younger than the largest retention."""
    newest = max((t for t in largest_timestamps if t is not None and t >= 0), default=None)
    retentions = list(retention_ms)
    if newest is None or not retentions or any(r < 0 for r in retentions):
        return None
    largest, age = max(retentions), now_ms - newest
    if age <= largest:
        return None
    return (f"the newest record in scope is {format_duration(age)} old ({format_instant(newest)}), older than "
            f"the largest retention.ms ({format_duration(largest)}), and --now was not given: at the wall clock "
            f"retention deletes every segment it may. If this log dir is a copy or backup, pass --now with the "
            f"instant it was taken")


def format_instant(ms: int | None) -> str:
    """``1700000000000`` -> ``2023-11-14T22:13:20.000Z``; ``-`` for None or negative."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
