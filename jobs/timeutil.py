"""Parsing of ``--now`` and other instants: the jobs never read the clock inside their logic."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from segment_io.errors import UsageError


def wall_clock_ms() -> int:
    """The current time in epoch milliseconds (used only as the default of ``--now``)."""
    return time.time_ns() // 1_000_000


def parse_instant(text: str | int | None) -> int:
    """Epoch milliseconds from ``"1700000000000"`` or an ISO-8601 string (``2026-11-22``,
    ``2026-11-22T03:00:00Z``, ``2026-11-22T03:00:00+01:00``; a naive time is taken as UTC).
    ``None`` means now."""
    if text is None:
        return wall_clock_ms()
    if isinstance(text, int):
        return text
    s = text.strip()
    if s.lstrip("-").isdigit():
        value = int(s)
        if 0 <= value < 10**11:
            raise UsageError(f"--now {s!r} looks like epoch seconds; segjobs takes epoch milliseconds "
                             f"(e.g. {value * 1000}) or ISO-8601")
        return value
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"cannot read {text!r} as an instant: give epoch milliseconds or ISO-8601 "
                         f"such as 2026-11-22T03:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def format_instant(ms: int | None) -> str:
    """``1700000000000`` -> ``2023-11-14T22:13:20.000Z``; ``-`` for None or negative."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
