"""Sizes and durations with units: the one parser of each for the whole code base.

The topic configuration (``retention.bytes = "1GiB"``, ``retention.ms = "7d"``), every size or duration
command-line option (``--dedupe-buffer-bytes 512MiB``, ``generate --span 36h``) and the data source's size
options (``maxSplitBytes``) all read their values here, so a value means the same thing everywhere.

Sizes: a plain number of bytes, or a number with a binary unit ``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB``
(case-insensitive: ``512mib`` works). Decimal-looking units (``K``, ``KB``, ``M``, ``MB``, ``G``, ``GB``,
``T``, ``TB``) are refused as ambiguous: ``1GB`` is 10^9 bytes to a disk vendor and 2^30 to most of Kafka's
documentation, and a size that silently differs by 7 % is worse than an error.

Durations: a plain number of milliseconds (Kafka's ``*.ms`` unit), or a number with one of ``ms``, ``s``,
``m`` (minutes), ``h``, ``d``, ``w``; case-sensitive, so ``m`` can only mean minutes.

A fractional number is accepted with a unit when the result is a whole number of bytes or milliseconds
(``1.5GiB``, ``0.5s``, ``1.5d``). Only a plain number may be negative (Kafka's ``-1``, "unlimited");
whether a negative value is allowed at all is for the caller's range check.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Mapping

#: One day in milliseconds (the ``d`` unit).
DAY_MS = 86_400_000

SIZE_UNITS: Mapping[str, int] = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
#: decimal-looking size units: refused (see the module docstring)
AMBIGUOUS_SIZE_UNITS: frozenset[str] = frozenset({"k", "kb", "m", "mb", "g", "gb", "t", "tb"})
DURATION_UNITS: Mapping[str, int] = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY_MS,
                                     "w": 7 * DAY_MS}

SIZE_EXAMPLES = "512MiB, 1GiB, 4096"
DURATION_EXAMPLES = "7d, 36h, 500ms"

_NUMBER_WITH_UNIT = re.compile(r"^\s*(?P<number>[+-]?(?:\d[\d_]*)?(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_size(raw: str | int) -> int:
    """Bytes from ``"512MiB"``, ``"1.5GiB"``, ``"4096"`` or an int; ``ValueError`` saying why not."""
    return _parse(raw, "size", SIZE_UNITS, SIZE_EXAMPLES, case_sensitive=False)


def parse_duration(raw: str | int) -> int:
    """Milliseconds from ``"7d"``, ``"36h"``, ``"500ms"``, ``"60000"`` or an int; ``ValueError`` saying why not."""
    return _parse(raw, "duration", DURATION_UNITS, DURATION_EXAMPLES, case_sensitive=True)


def format_duration(ms: int) -> str:
    """A short human reading of a duration: ``90061000`` -> ``1d 1h``, ``45000`` -> ``45s``; largest two units."""
    if ms < 0:
        return "-" + format_duration(-ms)
    parts = []
    rest = ms
    for name, size in (("d", DAY_MS), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if rest >= size:
            parts.append(f"{rest // size}{name}")
            rest %= size
    return " ".join(parts[:2]) if parts else f"{ms}ms"


def _parse(raw: Any, kind: str, units: Mapping[str, int], examples: str, *, case_sensitive: bool) -> int:
    # bool is an int in Python; a TOML `true` for a size is a mistake, not 1
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"expected an integer or a string with a {kind} unit, got {type(raw).__name__} {raw!r} "
                         f"(examples: {examples})")
    if isinstance(raw, int):
        return raw
    cannot = f"cannot read {raw!r} as a {kind}"
    m = _NUMBER_WITH_UNIT.match(raw)
    number_text = m.group("number").replace("_", "") if m else ""
    if not m or number_text.lstrip("+-") in ("", "."):
        raise ValueError(f"{cannot} (examples: {examples})")
    number, unit = Fraction(number_text), m.group("unit")
    if not unit:
        if number.denominator != 1:
            raise ValueError(f"{cannot}: a fraction needs a unit (examples: {examples})")
        return int(number)
    key = unit if case_sensitive else unit.lower()
    factor = units.get(key)
    if factor is None:
        if not case_sensitive and key in AMBIGUOUS_SIZE_UNITS:
            raise ValueError(f"{cannot}: unit {unit!r} is ambiguous (10^3 or 2^10 steps?): use the binary units "
                             f"KiB, MiB, GiB, TiB, or a plain number of bytes")
        raise ValueError(f"{cannot}: unknown unit {unit!r} (units: {', '.join(units)}; examples: {examples})")
    if number < 0:
        raise ValueError(f"{cannot}: only a plain -1 may be negative")
    value = number * factor
    if value.denominator != 1:
        smallest = "byte" if kind == "size" else "millisecond"
        raise ValueError(f"{cannot}: it is not a whole number of {smallest}s")
    return int(value)


__all__ = ["DAY_MS", "parse_size", "parse_duration", "format_duration", "SIZE_UNITS", "DURATION_UNITS",
           "AMBIGUOUS_SIZE_UNITS", "SIZE_EXAMPLES", "DURATION_EXAMPLES"]
