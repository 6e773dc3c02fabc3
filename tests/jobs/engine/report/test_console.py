"""What an operator sees: the summary tables of compact and retain (why a partition was skipped, partial
cleans, failures, purges and pending purges, elapsed time and MB/s), ``--format json`` for scripts, and the
checks that fail a run before it starts: unwritable ``--report``/``--ledger`` destinations, and S3 problems
(missing bucket, missing credentials, an endpoint that does not answer) with exit code 2 and a hint.

Everything goes through the CLI (``jobs.commands.cli.main``): exit code, message text, and what goes to stdout
(the result) versus stderr (progress and errors).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.report.run_report import partition_order
from jobs.engine.runtime.spark_session import spark_log_level
from jobs.rules.map_capacity import buffer_bytes_for_keys
from jobs.rules.timeutil import format_instant
from segment_io.layout import segment_file_name
from tests.support.builders import LogBuilder, rec, timestamped_segments, write_log
from tests.support.mounts import tmpfs
from tests.support.paths import REPO
from tests.support.spark import spark_forbidden

DAY = 86_400_000
NOW = 1_763_780_400_000  # 2025-11-22T03:00:00Z
# a run that needed no Spark (nothing due: scans on the driver) has no start-up to name
FOOTER = re.compile(r"^elapsed \d+\.\ds( \(Spark start-up \d+\.\ds(, started early: \d+\.\ds waited)?\))?; .+")


def _files(d: Path) -> dict[str, str]:
    """Every file under ``d`` with a digest of its bytes (``.lock`` aside: taking it is not a change)."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def _keyed(pdir: Path, topic: str, partition: int, keys: int, rounds: int, *, stamp: int = NOW - 2 * DAY) -> None:
    """``rounds`` segments each rewriting the same ``keys`` keys (so compaction halves the log or better),
    then an active segment."""
    log = LogBuilder(topic, partition)
    for r in range(rounds):
        if r:
            log.roll()
        for k in range(keys):
            log.batch([rec(f"key-{k}", f"value-{r}-{k}-" + "x" * 30, timestamp=stamp + r * 1000 + k)])
    log.roll().batch([rec("key-0", "active", timestamp=stamp + 10 * DAY // 10)])
    write_log(log.table(), pdir / f"{topic}-{partition}")


@pytest.fixture()
def compact_dir(tmp_path: Path) -> Path:
    """One partition per outcome the compaction summary must explain."""
    d = tmp_path / "logs"
    _keyed(d, "orders", 2, keys=5, rounds=3)   # compacted
    _keyed(d, "orders", 10, keys=5, rounds=3)  # compacted; sorts after orders-2
    big = LogBuilder("big", 0)                 # 20 keys, each written twice in a row: more than the map holds
    for k in range(20):
        big.batch([rec(f"key-{k}", "old", timestamp=NOW - 2 * DAY), rec(f"key-{k}", "new", timestamp=NOW - 2 * DAY)])
        if k == 9:
            big.roll()
    big.roll().batch([rec("key-0", "active", timestamp=NOW - DAY)])
    write_log(big.table(), d / "big-0")
    _keyed(d, "calm", 0, keys=5, rounds=3)     # cleaned up to offset 10 before: below min.cleanable.dirty.ratio
    _keyed(d, "events", 0, keys=5, rounds=3)   # cleanup.policy=delete: never compacted
    _keyed(d, "broken", 0, keys=5, rounds=3)   # corrupt bytes: FAILED, left untouched
    young = LogBuilder("young", 0)             # only the active segment: nothing to clean
    young.batch([rec("a", "1", timestamp=NOW - DAY), rec("a", "2", timestamp=NOW - DAY)])
    write_log(young.table(), d / "young-0")
    # compact,delete: its first segment is past retention.ms, so retention renames it to .deleted
    table, _, _ = timestamped_segments("audit", 0, [[NOW - 5 * DAY] * 3, [NOW - 1000] * 3, [NOW - 10] * 1])
    write_log(table, d / "audit-0")
    # calm-0: two of its three closed segments are clean; audit-0: only its active segment is dirty
    (d / "cleaner-offset-checkpoint").write_text("0\n2\ncalm 0 10\naudit 0 6\n")
    seg = d / "broken-0" / segment_file_name(0)
    data = bytearray(seg.read_bytes())
    data[75] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    seg.write_bytes(bytes(data))
    return d


COMPACT_SETTINGS = ["--set", "*:cleanup.policy=compact", "--set", "events:cleanup.policy=delete",
                    "--set", "audit:cleanup.policy=compact,delete", "--set", "audit:retention.ms=3d",
                    "--set", "big:min.cleanable.dirty.ratio=0.1",
                    # a map of 15 keys: big-0's 40 keys do not fit (memory: auto would sort them in one run)
                    "--dedupe-buffer-bytes", str(buffer_bytes_for_keys(15)), "--strategy", "memory"]


def _table(out: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(partition -> its row, partitions in printed order, the lines after the table) of a summary."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("partition "))
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    end = lines.index("", header)
    rows = lines[header + 2:end]
    order = [r.split()[0] for r in rows]
    return dict(zip(order, rows)), order, lines[end + 1:]


def _sorted_names(names: list[str]) -> list[str]:
    def key(name: str) -> tuple[str, int]:
        topic, _, n = name.rpartition("-")
        return partition_order({"topic": topic, "partition": int(n)})

    return sorted(names, key=key)


@pytest.mark.spark
def test_compact_summary_explains_every_partition(spark, compact_dir: Path, capsys) -> None:
    capsys.readouterr()
    broken_before = {k: v for k, v in _files(compact_dir).items() if k.startswith("broken-0/")}
    code = main(["compact", "--log-dir", str(compact_dir), "--now", str(NOW), "--quiet", *COMPACT_SETTINGS])
    out, err = capsys.readouterr()
    assert code == 1  # broken-0 failed; the others were done
    rows, order, after = _table(out)
    assert order == _sorted_names(order) and order.index("orders-2") < order.index("orders-10")
    assert len(order) == 8
    assert "compacted" in rows["orders-2"] and "above min.cleanable.dirty.ratio 0.50" in rows["orders-2"]
    assert "skipped" in rows["calm-0"] and "below min.cleanable.dirty.ratio 0.50" in rows["calm-0"]
    assert "no compact policy (cleanup.policy=delete)" in rows["events-0"]
    assert "nothing to clean: bound by active segment" in rows["young-0"]
    # The map holds 15 keys. Kafka checks fullness before every put, even of a key already mapped: the 15th key
    # goes in at offset 28, the pass stops at offset 29 (key 14's second record), and the next run starts there.
    assert "compacted" in rows["big-0"] and "partial: map full at offset 29, next run continues" in rows["big-0"]
    assert "FAILED: CrcMismatchError in 00000000000000000000.log, byte 0, offset 0: " in rows["broken-0"]
    due = format_instant(NOW + 60_000).replace(".000Z", "Z")  # file.delete.delay.ms defaults to 60 s
    assert f"1 deleted segment pending purge until {due}" in rows["audit-0"]
    assert "-1 seg" in rows["audit-0"]
    assert "1 partition(s) FAILED" in after[0]
    assert FOOTER.match(after[1]) and "in the selected partitions" in after[1] and "MB/s" in after[1]
    # stdout is the result only; stderr has the full error even with --quiet, and no progress lines
    assert "[compact" not in out
    assert "broken-0: UNCLEANABLE, left untouched" in err and str(compact_dir / "broken-0") in err
    assert {k: v for k, v in _files(compact_dir).items() if k.startswith("broken-0/")} == broken_before

    # A day later: the partial clean goes on where the map stopped, and audit's .deleted files are purged.
    code = main(["compact", "--log-dir", str(compact_dir), "--now", str(NOW + DAY), "--quiet", *COMPACT_SETTINGS])
    out = capsys.readouterr().out
    rows, _, after = _table(out)
    purged = re.search(r"purged (\d+) \.deleted files, (\d+) B", rows["audit-0"])
    assert purged and int(purged.group(1)) == 3  # .log, .index, .timeindex
    assert "purged 3 .deleted file(s)" in after[0]
    assert not list((compact_dir / "audit-0").glob("*.deleted"))
    assert "compacted" in rows["big-0"] and "partial" not in rows["big-0"]


@pytest.fixture()
def retain_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    for p in (2, 10):
        table, _, _ = timestamped_segments("clicks", p, [[NOW - 5 * DAY] * 2, [NOW - 4 * DAY] * 2, [NOW - 10]])
        write_log(table, d / f"clicks-{p}")
    table, _, _ = timestamped_segments("users", 0, [[NOW - 5 * DAY] * 2, [NOW - 10]])
    write_log(table, d / "users-0")
    return d


# the clicks partitions lose four fifths of their bytes: more than retention's default limit allows
RETAIN_SETTINGS = ["--set", "clicks:retention.ms=1d", "--set", "users:cleanup.policy=compact",
                   "--max-delete-fraction", "1"]


@pytest.mark.spark
def test_retain_summary_shows_deletes_pending_purges_and_purges(spark, retain_dir: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["retain", "--log-dir", str(retain_dir), "--now", str(NOW), *RETAIN_SETTINGS]) == 0
    out, err = capsys.readouterr()
    rows, order, after = _table(out)
    assert order == ["clicks-2", "clicks-10", "users-0"]
    due = format_instant(NOW + 60_000).replace(".000Z", "Z")
    for name in ("clicks-2", "clicks-10"):
        assert "delete" in rows[name] and "retention.ms" in rows[name]
        assert f"2 deleted segments pending purge until {due}" in rows[name]
    assert "cleanup.policy=compact" in rows["users-0"]
    assert after[0].startswith("3 partition(s); deleted 4 segment(s)")
    assert FOOTER.match(after[1]) and "in scope" in after[1]
    assert "[retain" in err and "[retain" not in out

    deleted_bytes = sum(p.stat().st_size for p in (retain_dir / "clicks-2").glob("*.deleted"))
    assert main(["retain", "--log-dir", str(retain_dir), "--now", str(NOW + 3_600_000), *RETAIN_SETTINGS]) == 0
    rows, _, after = _table(capsys.readouterr().out)
    assert f"purged 6 .deleted files, {deleted_bytes} B" in rows["clicks-2"]
    assert "purged 12 .deleted file(s)" in after[0]


# --------------------------------------------------------------------------------------------------
# --format json: the report on stdout, nothing else; absolute paths
# --------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_format_json_prints_the_report_and_nothing_else(spark, retain_dir: Path, tmp_path: Path, capsys,
                                                        monkeypatch) -> None:
    from deltalake import DeltaTable

    monkeypatch.chdir(tmp_path)  # relative --log-dir, --report and --ledger
    capsys.readouterr()
    code = main(["retain", "--log-dir", "logs", "--now", str(NOW), *RETAIN_SETTINGS, "--dry-run",
                 "--output", "json", "--report", "out/r.json", "--ledger", "ledger"])
    out, err = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)  # the whole of stdout is one JSON document
    assert doc == json.loads((tmp_path / "out" / "r.json").read_text())
    assert doc["log_dir"] == str(retain_dir) and os.path.isabs(doc["log_dir"])
    # a run with nothing for Spark can take under the 10 ms elapsed_s resolves to
    assert doc["elapsed_s"] >= 0 and doc["totals"]["segments_deleted"] == 4
    assert "[retain" in err and f"report written to {tmp_path / 'out' / 'r.json'}" in err
    rows = DeltaTable(str(tmp_path / "ledger")).to_pyarrow_table().to_pylist()
    assert {r["log_dir"] for r in rows} == {str(retain_dir)} and len(rows) == 3


# --------------------------------------------------------------------------------------------------
# Pre-flight: destinations and S3, checked before anything is done (exit 2, no Spark)
# --------------------------------------------------------------------------------------------------


def _fails_before_work(capsys, argv: list[str], *expected: str, within_s: float = 15.0) -> str:
    """The CLI exits 2 before any Spark session is built, within ``within_s`` (what a user waits for: an
    unreachable endpoint must not hang), with one stderr line holding ``expected`` and nothing on stdout."""
    capsys.readouterr()
    t0 = time.monotonic()
    with spark_forbidden():
        code = main(argv)
    elapsed = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert code == 2, err
    assert elapsed < within_s, f"took {elapsed:.1f}s"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"segjobs {argv[0]}: error: "), err
    for text in expected:
        assert text in lines[0], lines[0]
    assert out == ""
    return lines[0]


@pytest.mark.parametrize("flag", ["--report", "--ledger"])
def test_an_unwritable_destination_fails_before_the_job(capsys, retain_dir: Path, tmp_path: Path, flag: str) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    before = _files(retain_dir)
    target = blocker / "sub" / "out.json"
    _fails_before_work(capsys, ["retain", "--log-dir", str(retain_dir), "--now", str(NOW), *RETAIN_SETTINGS,
                                flag, str(target)],
                       f"{flag} {target}", f"{blocker} is not a directory", "nothing was done")
    assert _files(retain_dir) == before


def _full_of_inodes(directory: Path) -> None:
    """Fill the inode-limited tmpfs at ``directory`` with empty files until it takes no more."""
    for i in range(1000):
        try:
            (directory / f"file-{i}").touch()
        except OSError:
            return
    pytest.fail("the tmpfs never ran out of inodes")


@pytest.mark.parametrize("flag", ["--report", "--plan", "--html"])
def test_a_destination_that_passes_for_writable_but_takes_no_file_fails_before_the_job(
        capsys, retain_dir: Path, tmp_path: Path, flag: str) -> None:
    # a filesystem out of inodes: the directory's mode, os.access and statvfs's read-only flag all say writable,
    # and only creating the file tells (before the check, the real run ran and its report was lost)
    command, extra = {"--report": ("retain", []), "--plan": ("retain", ["--dry-run"]),
                      "--html": ("inspect", [])}[flag]
    before = _files(retain_dir)
    with tmpfs(tmp_path / "reports", 1 << 20, inodes=8) as reports:
        _full_of_inodes(reports)
        assert os.access(reports, os.W_OK)
        target = reports / "out.json"
        _fails_before_work(capsys, [command, "--log-dir", str(retain_dir), "--now", str(NOW), *RETAIN_SETTINGS,
                                    *extra, flag, str(target)],
                           f"{flag} {target}: creating it failed: No space left on device (ENOSPC)",
                           "nothing was done")
        assert not target.exists()
    assert _files(retain_dir) == before  # nothing retained


def test_a_file_name_too_long_fails_before_the_job_and_leaves_no_directory(capsys, retain_dir: Path,
                                                                          tmp_path: Path) -> None:
    target = tmp_path / "new" / "reports" / ("r" * 300 + ".json")
    before = _files(retain_dir)
    _fails_before_work(capsys, ["retain", "--log-dir", str(retain_dir), "--now", str(NOW), *RETAIN_SETTINGS,
                                "--report", str(target)], "--report", "creating it failed", "File name too long")
    assert _files(retain_dir) == before and not (tmp_path / "new").exists()  # the directories made are gone again


@pytest.mark.spark
def test_a_missing_report_directory_is_created_and_said_once(spark, capsys, retain_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "reports" / "nightly" / "retain.json"
    capsys.readouterr()
    assert main(["retain", "--log-dir", str(retain_dir), "--now", str(NOW), *RETAIN_SETTINGS, "--report",
                 str(target)]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "created the missing directory" in line]
    assert len(said) == 1 and said[0].endswith(f"--report: created the missing directory {target.parent} (and its "
                                               f"missing parents from {tmp_path / 'reports'})"), err
    assert json.loads(target.read_text())["command"] == "retain"


def test_a_report_path_that_is_a_directory_fails_before_the_job(capsys, retain_dir: Path, tmp_path: Path) -> None:
    _fails_before_work(capsys, ["compact", "--log-dir", str(retain_dir), "--now", str(NOW), "--report",
                                str(tmp_path)], "is a directory")


@pytest.fixture()
def moto_env(s3_endpoint, monkeypatch):
    from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)
    for name in ("SEGJOBS_S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return s3_endpoint


@pytest.mark.s3
def test_a_report_to_a_missing_bucket_fails_before_the_job(capsys, moto_env, retain_dir: Path) -> None:
    before = _files(retain_dir)
    _fails_before_work(capsys, ["retain", "--log-dir", str(retain_dir), "--now", str(NOW), *RETAIN_SETTINGS,
                                "--s3-endpoint", moto_env.endpoint_url, "--report", "s3://no-such-bucket/r.json"],
                       "--report s3://no-such-bucket/r.json", "bucket 'no-such-bucket' does not exist",
                       moto_env.endpoint_url, "nothing was done")
    assert _files(retain_dir) == before  # nothing retained, nothing renamed


@pytest.mark.s3
def test_a_log_dir_in_a_missing_bucket_fails_fast(capsys, moto_env) -> None:
    _fails_before_work(capsys, ["compact", "--log-dir", "s3://missing-bucket/kafka/logs", "--now", str(NOW),
                                "--s3-endpoint", moto_env.endpoint_url],
                       "--log-dir s3://missing-bucket/kafka/logs", "bucket 'missing-bucket' does not exist")


@pytest.mark.s3
def test_missing_credentials_fail_fast_with_a_hint(capsys, moto_env, tmp_path: Path, monkeypatch) -> None:
    bucket = moto_env.create_bucket("creds")
    for name in list(os.environ):
        if name.startswith(("AWS_", "SEGJOBS_S3_")):
            monkeypatch.delenv(name)
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _fails_before_work(capsys, ["retain", "--log-dir", f"s3://{bucket}/logs", "--now", str(NOW),
                                "--s3-endpoint", moto_env.endpoint_url, "--s3-region", "us-east-1"],
                       f"--log-dir s3://{bucket}/logs", "no usable AWS credentials", "AWS_ACCESS_KEY_ID",
                       "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE")


@pytest.mark.parametrize("command", ["compact", "recover"])
def test_an_unreachable_endpoint_fails_within_seconds(capsys, monkeypatch, command: str) -> None:
    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    # a generous bound: botocore's defaults (60 s connect timeout, retried) would take minutes
    _fails_before_work(capsys, [command, "--log-dir", "s3://bucket/logs", "--now", str(NOW),
                                "--s3-endpoint", endpoint, "--s3-region", "us-east-1"],
                       f"the S3 endpoint {endpoint} did not answer", "--s3-endpoint", "SEGJOBS_S3_ENDPOINT",
                       within_s=20.0)


# --------------------------------------------------------------------------------------------------
# Spark's own log lines
# --------------------------------------------------------------------------------------------------


def test_spark_log_level_follows_verbose_then_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("SEGJOBS_SPARK_LOG", raising=False)
    assert spark_log_level() is None  # quiet: the log4j2 configuration's warn
    assert spark_log_level(verbose=True) == "INFO"
    monkeypatch.setenv("SEGJOBS_SPARK_LOG", "debug")
    assert spark_log_level() == "DEBUG"
    assert spark_log_level(verbose=True) == "INFO"


def test_every_job_takes_format_verbose_and_output(capsys) -> None:
    for command in ("compact", "retain", "inspect"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "--format" in text and "--output" in text and "--verbose" in text, command


@pytest.mark.scenario
@pytest.mark.slow
def test_spark_submit_prints_the_summary_on_stdout_and_no_spark_info_lines(tmp_path: Path) -> None:
    """The spark-submit line of docs/guide/compact.md: progress on stderr, the summary alone on stdout, no Spark INFO
    lines.

    spark-submit merges the Python process's stderr into its stdout; the job puts it back on the JVM's
    stderr. Typed as a user would in a fresh shell: ``.venv/bin/spark-submit`` with the venv not activated and
    no PYSPARK_PYTHON or SPARK_HOME (spark-submit finds its Spark through the link `make venv` makes, and the
    script re-runs itself in the venv's Python: jobs.submit_python). One light run: local[1], a tiny log dir,
    a dry run."""
    import subprocess
    import sys

    spark_submit = Path(sys.executable).with_name("spark-submit")
    if not spark_submit.exists():
        pytest.fail(f"spark-submit not found beside {sys.executable}: pyspark's scripts are missing")
    d = tmp_path / "logs"
    _keyed(d, "orders", 0, keys=5, rounds=3)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--properties-file", "conf/spark-defaults.conf",
         "--conf", "spark.ui.enabled=false", "jobs/compact.py", "--log-dir", str(d),
         "--set", "*:cleanup.policy=compact", "--now", str(NOW), "--dry-run"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows, order, after = _table(proc.stdout)
    assert order == ["orders-0"] and "would compact" in rows["orders-0"]
    assert FOOTER.match(after[1])
    assert proc.stdout.startswith("partition ")  # nothing before the table ...
    assert "[compact" not in proc.stdout and " INFO " not in proc.stdout  # ... and no progress or log lines in it
    assert "[compact" in proc.stderr and "scanned 1 partition(s)" in proc.stderr
    assert not [line for line in proc.stderr.splitlines() if " INFO " in line], proc.stderr


def test_a_run_stopped_before_its_summary_still_prints_what_it_knows() -> None:
    """A lost lease stops the work before the job's own summary: stdout still lists the partitions reported
    so far, their errors in short, and the elapsed time."""
    from jobs.engine.report.run_report import RunReport, render_stopped_summary

    report = RunReport(command="compact", log_dir="/logs", now_ms=NOW, dry_run=False)
    report.partitions += [
        {"topic": "t", "partition": 10, "action": "compacted"},
        {"topic": "t", "partition": 2, "action": "error",
         "error": {"kind": "StorageError", "detail": "boom", "file": "/logs/t-2/00000000000000000000.log"}},
    ]
    report.errors.append({"kind": "LeaseLost", "detail": "taken over"})
    text = render_stopped_summary(report.finish())
    rows, order, after = _table(text)
    assert order == ["t-2", "t-10"]
    assert "FAILED: StorageError in 00000000000000000000.log: boom" in rows["t-2"]
    assert after[0] == "compact stopped before the end: 1 error(s), on stderr and in the report"
    assert after[1].startswith("elapsed ")
