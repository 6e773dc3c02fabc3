"""Run ledgers written directly: one run of made-up partition rows appended to a Delta ledger, for the tests of
``segjobs history`` and its HTML report."""

from __future__ import annotations

from jobs.engine.report.run_report import RunReport, append_ledger

DAY = 86_400_000
T0 = 1_700_000_000_000


def append_run(ledger: str, command: str, night: int, rows: list[tuple[str, int, str, int]], *,
               dry_run: bool = False, options=None, log_dir: str = "/var/kafka/logs") -> RunReport:
    """Append one run over ``log_dir`` to ``ledger``: ``rows`` are (topic, partition, action, bytes_removed)."""
    report = RunReport(command=command, log_dir=log_dir, now_ms=T0 + night * DAY, dry_run=dry_run)
    report.finished_ms = T0 + night * DAY + 60_000 + (1000 if command == "compact" else 0)
    partitions = [{"topic": t, "partition": p, "action": a, "reason": "", "bytes_removed": b,
                   "records_removed": b // 100, "bytes_before": 10_000, "bytes_after": 10_000 - b}
                  for t, p, a, b in rows]
    assert append_ledger(ledger, report, partitions, options) == len(rows)
    return report
