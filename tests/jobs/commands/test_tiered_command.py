"""``segjobs tiered audit`` and ``tiered clean-orphans`` on the command line: what they refuse before reading
anything (exit code 2, one error line, no traceback), as the jobs refuse it: a store that does not answer, a
report or plan file that cannot be written. What they find is tested in tests/jobs/engine/tiered/."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.paths import DATA

FIXTURE = DATA / "kafka-tiered" / "kafka-4.1.1"
#: each subcommand, as a run that reads only (clean-orphans: a dry run, which takes no lock)
RUNS = {"audit": ["tiered", "audit", "--quiet"], "clean-orphans": ["tiered", "clean-orphans", "--dry-run"]}


def _refused(capsys, argv: list[str]) -> str:
    """``segjobs ARGV`` exits 2 with one error line on stderr, nothing on stdout and no traceback: that line."""
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", sorted(RUNS))
@pytest.mark.parametrize("flag", ["--log-dir", "--remote"])
def test_an_s3_store_whose_endpoint_does_not_answer_is_refused_before_reading(capsys, monkeypatch, command,
                                                                              flag) -> None:
    # was exit 1 (the listing's error, once the run had begun), where compact, retain, inspect and table say 2
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    stores = {"--log-dir": str(FIXTURE / "logs"), "--remote": str(FIXTURE / "remote")}
    stores[flag] = "s3://bucket/tiered"
    started = time.monotonic()
    line = _refused(capsys, [*RUNS[command], "--log-dir", stores["--log-dir"], "--remote", stores["--remote"],
                             "--s3-endpoint", endpoint, "--s3-region", "us-east-1"])
    assert time.monotonic() - started < 20  # botocore's own retries would take minutes
    assert line.startswith(f"segjobs tiered: error: {flag} s3://bucket/tiered: the S3 endpoint {endpoint} did not "
                           f"answer"), line
    assert line.endswith("; nothing was done"), line


@pytest.mark.parametrize("command, flag", [("audit", "--output"), ("audit", "--html"),
                                           ("clean-orphans", "--output"), ("clean-orphans", "--plan")])
def test_a_report_or_plan_that_cannot_be_written_is_refused_before_reading(tmp_path: Path, capsys, command,
                                                                           flag) -> None:
    # --output below a file was a NotADirectoryError traceback (exit 1) after the whole audit; --plan's failure
    # came after the audit too (exit 1)
    (tmp_path / "notes").write_text("mine\n")
    target = tmp_path / "notes" / "report.out"
    line = _refused(capsys, [*RUNS[command], "--log-dir", str(FIXTURE / "logs"), "--remote", str(FIXTURE / "remote"),
                             flag, str(target)])
    assert line == f"segjobs tiered: error: {flag} {target}: {tmp_path / 'notes'} is not a directory; nothing was done"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_the_report_goes_to_output_its_missing_directory_created_as_for_report(tmp_path: Path, capsys) -> None:
    # (was: a FileNotFoundError traceback after the audit)
    target = tmp_path / "reports" / "audit.txt"
    assert main([*RUNS["audit"], "--log-dir", str(FIXTURE / "logs"), "--remote", str(FIXTURE / "remote"),
                 "--output", str(target)]) == 0
    assert capsys.readouterr().out == "" and "summary: " in target.read_text()
