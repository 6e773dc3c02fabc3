"""compact,delete runs through the CLI with their JSON reports: the ``orders`` partition whose oldest segments expire
under a 7-day retention, the settings that make it compact,delete, and report entries by partition name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs.commands.cli import main
from tests.support.builders import LogBuilder, rec, write_log

DAY = 86_400_000
NOW = 1_700_000_000_000
OLD = NOW - 10 * DAY  # past a 7-day retention.ms
RECENT = NOW - DAY


def run(command: str, log_dir: Path, *options: str, now: int = NOW) -> tuple[int, dict[str, Any]]:
    """Run ``segjobs COMMAND`` through the CLI; (exit code, its JSON report)."""
    report = log_dir.parent / f"{command}-{abs(hash(options))}.json"
    report.unlink(missing_ok=True)
    code = main([command, "--log-dir", str(log_dir), "--now", str(now), "--report", str(report), "--quiet",
                 *options])
    doc = json.loads(report.read_text())
    report.unlink()
    return code, doc


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{e['topic']}-{e['partition']}": e for e in report["partitions"]}


def build_orders(pdir: Path) -> tuple[list[int], dict[bytes, bytes]]:
    """orders-0: two expired segments full of duplicates (of each other and of later keys), two recent ones
    with duplicates of their own, and the active segment. Returns the segment bases and the key -> value map
    of the recent segments (what a consumer reading them would end with)."""
    log = LogBuilder("orders", 0, timestamp=OLD)
    bases = [0]
    for round_ in range(2):  # segment 0: keys k00-k09 twice, expired
        log.batch([rec(f"k{j:02d}", f"old-{round_}-{j}" * 8) for j in range(10)])
    bases.append(log.roll().next_offset)
    for round_ in range(2):  # segment 1: the same keys again, still expired
        log.batch([rec(f"k{j:02d}", f"older-{round_}-{j}" * 8) for j in range(10)])
    log.clock = RECENT
    bases.append(log.roll().next_offset)
    for round_ in range(4):  # segment 2: k00-k09 four times, recent
        log.batch([rec(f"k{j:02d}", f"new-{round_}-{j}" * 8) for j in range(10)])
    bases.append(log.roll().next_offset)
    for round_ in range(3):  # segment 3: k05-k14 three times, recent
        log.batch([rec(f"k{j:02d}", f"newer-{round_}-{j}" * 8) for j in range(5, 15)])
    bases.append(log.roll().next_offset)
    log.batch([rec("active", "a")])
    table = log.table()
    write_log(table, pdir)
    kept = table.filter([bases[2] <= o < bases[4] for o in table["offset"].to_pylist()])
    expected = {k: v for k, v in zip(kept["key"].to_pylist(), kept["value"].to_pylist())}
    return bases, expected


ORDERS = ("--set", "orders:cleanup.policy=compact,delete", "--set", "orders:retention.ms=7d")
