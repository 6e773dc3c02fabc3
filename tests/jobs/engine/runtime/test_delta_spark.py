"""The run ledger and delta-spark, for real: Spark's ``delta`` format reads the ledger segjobs writes with
``deltalake``; ``segjobs history`` reads a ledger Spark's Delta writer wrote; a session with Delta Lake appends
through Spark's writer, so runs that append at once are serialised by Delta's commit protocol.

The tests that need delta-spark run where it is installed (``make test-compat``'s delta venv, which sets
SEGJOBS_REQUIRE_DELTA: there a missing delta-spark fails the run); elsewhere they are skipped, and the one test
of the embedded default (``deltalake`` when the session has no Delta) runs instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.report.ledger import read_ledger
from jobs.engine.report.run_report import RunReport, append_ledger
from jobs.engine.runtime.delta_spark import delta_session
from tests.support.delta import delta_required, delta_spark_installed
from tests.support.paths import REPO

NOW = 1_700_000_000_000
DAY = 86_400_000

if delta_required() and not delta_spark_installed():
    raise ImportError(f"delta-spark is not importable by {sys.executable}, but SEGJOBS_REQUIRE_DELTA is set")
needs_delta = pytest.mark.skipif(not delta_spark_installed(),
                                 reason="delta-spark is not installed here: `make test-compat` runs these in its "
                                        "delta venv")


def commit_engines(ledger: Path) -> list[str]:
    """Who wrote each commit of a Delta table, oldest first: Spark's ``engineInfo`` (``Apache-Spark/<v>
    Delta-Lake/<v>``) or delta-rs' ``clientVersion``."""
    engines = []
    for commit in sorted((ledger / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None:
                engines.append(info.get("engineInfo") or info.get("clientVersion") or "?")
    return engines


def retain_dir(root: Path) -> Path:
    """A log dir with one delete-policy partition whose two oldest segments are past retention."""
    from tests.support.builders import LogBuilder, rec, write_log

    log = LogBuilder("events", 0, timestamp=NOW - 10 * DAY)
    log.batch([rec("a", "1")]).roll().batch([rec("b", "2")]).roll()
    log.clock = NOW
    log.batch([rec("c", "3")])
    write_log(log.table(), root / "logs" / "events-0")
    return root / "logs"


def report_rows(n: int, command: str = "compact") -> tuple[RunReport, list[dict]]:
    report = RunReport(command=command, log_dir="/var/kafka/logs", now_ms=NOW, dry_run=False)
    report.finished_ms = NOW + 60_000
    return report, [{"topic": "orders", "partition": p, "action": "compacted", "reason": "", "bytes_removed": 100 * p,
                     "records_removed": p, "bytes_before": 1000, "bytes_after": 1000 - 100 * p} for p in range(n)]


@needs_delta
def test_spark_reads_the_ledger_a_segjobs_job_wrote_with_deltalake(spark, tmp_path: Path) -> None:
    """A retain run in a process of its own (its session has no Delta: ``deltalake`` writes), read back with
    ``spark.read.format("delta")`` under delta-spark."""
    logs, ledger, report = retain_dir(tmp_path), tmp_path / "ledger", tmp_path / "report.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    run = subprocess.run([sys.executable, "-m", "jobs", "retain", "--log-dir", str(logs), "--now", str(NOW),
                          "--set", "events:retention.ms=3d", "--max-delete-fraction", "1", "--ledger", str(ledger),
                          "--report", str(report), "--quiet"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert [e.split("-")[0] for e in commit_engines(ledger)] == ["delta"]  # delta-rs, the embedded writer
    rows = spark.read.format("delta").load(str(ledger)).collect()
    done = json.loads(report.read_text())
    assert [(r.run_id, r.command, r.topic, r.partition, r.action, r.bytes_removed) for r in rows] == \
        [(done["run_id"], "retain", "events", 0, p["action"], p["bytes_removed"]) for p in done["partitions"]]
    assert rows[0].bytes_removed > 0 and rows[0].finished_ms == done["finished_ms"]


@needs_delta
def test_history_reads_a_ledger_spark_wrote_with_delta_spark(spark, tmp_path: Path, capsys) -> None:
    ledger = tmp_path / "ledger"
    assert delta_session(str(ledger)) is spark  # the test session has Delta: append_ledger goes through Spark
    for night, command in ((1, "retain"), (2, "compact")):
        report, rows = report_rows(3, command)
        report.now_ms, report.finished_ms = NOW + night * DAY, NOW + night * DAY + 60_000
        assert append_ledger(str(ledger), report, rows) == 3
    assert all(e.startswith("Apache-Spark/") and "Delta-Lake/" in e for e in commit_engines(ledger))
    # one data file a run, as deltalake writes it (not one a slice of the session's parallelism, empty ones too)
    assert len(list(ledger.glob("*.parquet"))) == 2
    assert main(["history", "--ledger", str(ledger), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["command"], r["partitions"], r["changed"], r["bytes_reclaimed"]) for r in doc["runs"]] == \
        [("compact", 3, 2, 300), ("retain", 3, 2, 300)]
    # and deltalake, the embedded reader, sees the same table
    assert read_ledger(str(ledger)).num_rows == 6


@needs_delta
def test_two_runs_appending_at_once_both_land(spark, tmp_path: Path) -> None:
    """Two runs append to a new ledger at the same moment, then to the table one of them created: Delta's commit
    protocol orders them (the writer that lost the race to create the table retries), and every row lands."""
    ledger = tmp_path / "ledger"
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(report: RunReport, rows: list[dict]) -> None:
        start.wait()
        try:
            append_ledger(str(ledger), report, rows)
        except BaseException as exc:  # reported below, with the other thread's outcome
            errors.append(exc)

    runs = [report_rows(2) for _ in range(4)]
    for pair in (runs[:2], runs[2:]):
        threads = [threading.Thread(target=run, args=run_args) for run_args in pair]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    got = spark.read.format("delta").load(str(ledger)).select("run_id", "partition").collect()
    assert sorted((r.run_id, r.partition) for r in got) == sorted((report.run_id, p) for report, _ in runs
                                                                   for p in range(2))
    engines = commit_engines(ledger)
    assert len(engines) == 4 and all(e.startswith("Apache-Spark/") for e in engines)


@needs_delta
def test_a_failed_spark_append_names_the_ledger(spark, tmp_path: Path) -> None:
    from segment_io.errors import StorageError

    ledger = tmp_path / "not-a-table"
    ledger.mkdir()
    (ledger / "_delta_log").write_text("a file where Delta's log directory should be")
    report, rows = report_rows(1)
    with pytest.raises(StorageError, match=r"not-a-table: Spark's Delta writer could not append") as caught:
        append_ledger(str(ledger), report, rows)
    assert "An error occurred while calling" not in str(caught.value)  # Java's own message, not Py4J's preamble


@pytest.mark.skipif(delta_spark_installed(), reason="this session has Delta Lake")
def test_without_delta_in_the_session_the_embedded_deltalake_writes(spark, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    assert delta_session(str(ledger)) is None
    report, rows = report_rows(2)
    assert append_ledger(str(ledger), report, rows) == 2
    assert [e.split("-")[0] for e in commit_engines(ledger)] == ["delta"]
    assert read_ledger(str(ledger)).num_rows == 2


def test_one_delta_coordinate_everywhere(capsys) -> None:
    """Delta's jars are named once (DELTA_SPARK_PACKAGE): the `delta` extra and the compat venv pin its release,
    and `segjobs table --help`, the docs and the README quote no other coordinate (4.4.1, quoted once, has no jars
    on Maven Central)."""
    import re
    import tomllib

    from jobs.engine.runtime.delta_spark import DELTA_SPARK_FOR_SPARK, DELTA_SPARK_PACKAGE, DELTA_SPARK_VERSION

    coordinate = re.compile(r"io\.delta:delta-spark_[0-9.]+_2\.1[23]:[0-9][0-9.]*[0-9]")
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["delta"]
    assert f"delta-spark=={DELTA_SPARK_VERSION}" in extra
    pyspark_pin = next(r for r in extra if r.startswith("pyspark"))
    assert f"<={DELTA_SPARK_FOR_SPARK}." in pyspark_pin, pyspark_pin
    compat = (REPO / "conf" / "compat" / "delta.txt").read_text()
    assert f"delta-spark=={DELTA_SPARK_VERSION}" in compat.splitlines()
    assert f"pyspark=={DELTA_SPARK_FOR_SPARK}." in compat
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    quoted = {"table --help": capsys.readouterr().out}
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "conf").rglob("*.txt"))]:
        quoted[str(path.relative_to(REPO))] = path.read_text()
    found = {where: set(coordinate.findall(text)) for where, text in quoted.items()}
    assert DELTA_SPARK_PACKAGE in found["table --help"] and DELTA_SPARK_PACKAGE in found["docs/guide/table.md"]
    assert {where: c for where, c in found.items() if c - {DELTA_SPARK_PACKAGE}} == {}
