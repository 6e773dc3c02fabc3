"""``segjobs table``: a compacted topic as a Delta table, incremental and exactly once (issue 22).

The oracle is written here, over the records kafka-python decodes from the segment files (no segjobs decoder,
transaction logic or latest-per-key kernel): replay every partition in offset order as a ``read_committed``
consumer that stops at the first offset of a transaction without a marker; aborted data and markers are
skipped, keyless records ignored, a tombstone removes its key. The table must hold exactly those rows.

Level: :func:`jobs.api.table` with its partition tasks in this process (``Seams(runner=InProcessTasks())``)
and the embedded ``deltalake`` writer; compaction through :func:`jobs.api.compact`, also in this process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import api
from jobs.rules.config import ConfigSet
from segment_io.checkpoint import write_offset_checkpoint
from segment_io.layout import LOG_START_OFFSET_CHECKPOINT, partition_dir_name
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.hypothesis_budget import examples
from tests.support.paths import REPO
from tests.support.replay import read_partition
from tests.support.table_oracle import LOGS, TOPIC, expected_rows, table_rows, write_topic

RETENTION = 86_400_000  #: delete.retention.ms of the compaction runs
NOW1 = 1_700_000_000_000
NOW2 = NOW1 + RETENTION + 1  #: past every horizon the first clean stamps

def run(log_dir: Path, table: Path, **kw) -> api.TableResult:
    options = api.TableOptions(table=str(table), topic=TOPIC, progress=lambda line: None, **kw)
    return api.table(log_dir, options, seams=api.Seams(runner=api.InProcessTasks()))


def compact(log_dir: Path, partitions: list[int], now_ms: int) -> None:
    config = ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact", f"{TOPIC}:delete.retention.ms={RETENTION}"])
    options = api.CompactOptions(config=config, partitions=tuple(partition_dir_name(TOPIC, p) for p in partitions),
                                 progress=lambda line: None)
    result = api.compact(log_dir, options, now=now_ms, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0, result.errors




# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------


# Each example builds four tables and compacts twice (about 1 s): a third of the profile's examples.
@settings(max_examples=examples(0.3), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
@given(logs=LOGS, cut1=st.floats(0, 1), cut2=st.floats(0, 1))
@pytest.mark.slow
def test_table_is_the_latest_committed_value_per_key(tmp_path_factory, logs, cut1, cut2):
    base = tmp_path_factory.mktemp("table")
    log_dir, full, nightly = base / "logs", base / "full", base / "nightly"
    parts = sorted(logs)
    # three nights: the log as it was at two earlier cuts, then whole
    lo, hi = sorted((cut1, cut2))
    for share in (lo, hi):
        write_topic(log_dir, {p: ops[:int(len(ops) * share)] for p, ops in logs.items()})
        r = run(log_dir, nightly)
        assert r.exit_code == 0, r.partitions
        assert table_rows(nightly) == expected_rows(log_dir, parts)
    write_topic(log_dir, logs)
    r3 = run(log_dir, nightly)
    assert r3.exit_code == 0
    one = run(log_dir, full)
    expected = expected_rows(log_dir, parts)
    assert table_rows(full) == expected
    assert table_rows(nightly) == expected  # three increments == one full build
    # the counts the run reports are the table's changes
    assert one.inserts == len(expected) and one.updates == one.deletes == 0
    # nothing new: no new Delta version
    version = DeltaTable(str(full)).version()
    again = run(log_dir, full)
    assert again.version_after == again.version_before == version == DeltaTable(str(full)).version()
    assert all(p.action == "unchanged" for p in again.partitions)

    # compaction between runs, up to and past the delete horizon: the table stays right, and a table built
    # from the compacted log is the same table
    compact(log_dir, parts, NOW1)
    compact(log_dir, parts, NOW2)
    assert expected_rows(log_dir, parts) == expected
    after = run(log_dir, full)
    assert after.exit_code == 0
    assert table_rows(full) == expected
    fresh = run(log_dir, base / "fresh")
    assert fresh.exit_code == 0
    assert table_rows(base / "fresh") == expected


def _sample_log(log_dir: Path) -> None:
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2"), rec(None, "keyless")])
    log.txn_batch(7, 0, [rec("c", "aborted")])
    log.abort(7, 0)
    log.roll()
    log.batch([tombstone("a"), rec("b", "22", headers=[("h", b"v")])])
    log.txn_batch(8, 0, [rec("d", "4")])
    log.commit(8, 0)
    log.txn_batch(9, 0, [rec("e", "open")])  # undecided: bounds what is applied
    log.batch([rec("f", "after the open transaction")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))


def test_first_build_then_nothing_new(tmp_path):
    _sample_log(tmp_path / "logs")
    dry = run(tmp_path / "logs", tmp_path / "t", dry_run=True)
    assert not (tmp_path / "t").exists()
    (p,) = dry.partitions
    assert (p.action, p.inserts, p.updates, p.deletes, p.tombstones_without_row) == ("would apply", 2, 0, 0, 1)
    first = run(tmp_path / "logs", tmp_path / "t")
    (p,) = first.partitions
    assert (p.action, p.inserts, p.applied_before, p.applied_after) == ("applied", 2, None, 9)
    assert {k: v[0] for k, v in table_rows(tmp_path / "t").items()} == {(0, b"b"): b"22", (0, b"d"): b"4"}
    assert DeltaTable(str(tmp_path / "t")).transaction_version("segjobs-table:prop:0") == 9
    second = run(tmp_path / "logs", tmp_path / "t")
    assert second.version_after == second.version_before == 0


def test_increment_counts_match_dry_run_and_markers_alone_move_the_offset(tmp_path):
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2"), rec("c", "3")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    run(log_dir, tmp_path / "t")
    log.batch([rec("a", "11"), tombstone("b"), tombstone("zz"), rec("d", "4")])
    shutil.rmtree(log_dir)
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    dry = run(log_dir, tmp_path / "t", dry_run=True)
    real = run(log_dir, tmp_path / "t")
    counts = [(p.inserts, p.updates, p.deletes, p.tombstones_without_row)
              for p in (dry.partitions[0], real.partitions[0])]
    assert counts == [(1, 1, 1, 1)] * 2
    assert real.version_after == 1 and dry.version_after == 0
    assert {k[1]: v[0] for k, v in table_rows(tmp_path / "t").items()} == {b"a": b"11", b"c": b"3", b"d": b"4"}
    # an aborted transaction and its marker only: no row changes, but the applied offset moves (one version)
    log.txn_batch(5, 0, [rec("a", "never")])
    log.abort(5, 0)
    shutil.rmtree(log_dir)
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    moved = run(log_dir, tmp_path / "t")
    assert (moved.version_after, moved.partitions[0].applied_after) == (2, log.next_offset)
    assert run(log_dir, tmp_path / "t").version_after == 2


def test_retention_gap_is_an_error_naming_it_and_rebuild_repairs(tmp_path):
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    log.roll()
    log.batch([rec("c", "3")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    run(log_dir, tmp_path / "t", partitions=(0,))
    # more records, then retention deletes the first segment and the new records' start before the table saw them
    log.batch([tombstone("c"), rec("d", "4")])
    log.roll()
    log.batch([rec("e", "5")])
    shutil.rmtree(log_dir)
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    for seg in sorted((log_dir / partition_dir_name(TOPIC, 0)).glob("*"))[:3]:
        if seg.name.startswith("00000000000000000000"):
            seg.unlink()
    storage = open_storage(str(log_dir))
    write_offset_checkpoint(storage, str(log_dir / LOG_START_OFFSET_CHECKPOINT), {(TOPIC, 0): 4})
    refused = run(log_dir, tmp_path / "t")
    (p,) = refused.partitions
    assert refused.exit_code == 1 and p.action == "error"
    assert "prop-0" in p.error and "below 3" in p.error and "starts at 4" in p.error and "--rebuild" in p.error
    assert refused.version_after == 0
    rebuilt = run(log_dir, tmp_path / "t", rebuild=True)
    assert rebuilt.exit_code == 0 and rebuilt.partitions[0].action == "rebuilt"
    # a and b are no longer in the log: their rows go; c's tombstone (offset 3) is gone with retention too
    assert {k[1]: v[0] for k, v in table_rows(tmp_path / "t").items()} == {b"d": b"4", b"e": b"5"}
    assert rebuilt.partitions[0].deletes == 3  # a, b, c
    assert run(log_dir, tmp_path / "t").version_after == rebuilt.version_after


def test_a_table_ahead_of_the_log_is_refused(tmp_path):
    _sample_log(tmp_path / "logs")
    run(tmp_path / "logs", tmp_path / "t")
    shutil.rmtree(tmp_path / "logs")
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "recreated")])
    write_log(log.table(), tmp_path / "logs" / partition_dir_name(TOPIC, 0))
    r = run(tmp_path / "logs", tmp_path / "t")
    assert r.exit_code == 1 and "recreated or truncated" in (r.partitions[0].error or "")


def test_compaction_ahead_of_the_table_is_warned_about(tmp_path):
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    run(log_dir, tmp_path / "t")
    log.batch([rec("a", "2"), rec("b", "1")])
    log.roll()
    log.batch([rec("a", "3")])
    shutil.rmtree(log_dir)
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    compact(log_dir, [0], NOW1)
    r = run(log_dir, tmp_path / "t")
    assert any("compaction cleaned offsets 1..2 before the table applied them" in w for w in r.warnings)
    assert {k[1]: v[0] for k, v in table_rows(tmp_path / "t").items()} == {b"a": b"3", b"b": b"1"}


# --------------------------------------------------------------------------------------------------
# A run killed mid-merge, then rerun
# --------------------------------------------------------------------------------------------------


def _killed_run(log_dir: Path, table: Path, step: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "tests.support.table_crash", step, "--", "table", "--log-dir",
                           str(log_dir), "--topic", TOPIC, "--table", str(table), "--quiet"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode


@pytest.mark.parametrize("step", ["merge:start", "merge:committed"])
@pytest.mark.slow
def test_run_killed_mid_merge_then_rerun_equals_one_clean_run(tmp_path, step):
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    for p in (0, 1):
        write_log(LogBuilder(topic=TOPIC, partition=p).batch([rec("a", "1"), rec("b", "2")]).table(),
                  log_dir / partition_dir_name(TOPIC, p))
    run(log_dir, tmp_path / "t")
    run(log_dir, tmp_path / "clean")
    for p in (0, 1):
        more = LogBuilder(topic=TOPIC, partition=p).batch([rec("a", "1"), rec("b", "2")])
        more.batch([tombstone("a"), rec("c", f"p{p}")])
        shutil.rmtree(log_dir / partition_dir_name(TOPIC, p))
        write_log(more.table(), log_dir / partition_dir_name(TOPIC, p))
    assert _killed_run(log_dir, tmp_path / "t", step) == -signal.SIGKILL
    expected_version = 1 if step == "merge:committed" else 0
    assert DeltaTable(str(tmp_path / "t")).version() == expected_version
    rerun = run(log_dir, tmp_path / "t")
    assert rerun.exit_code == 0
    assert [p.action for p in rerun.partitions] == (["unchanged"] * 2 if step == "merge:committed" else ["applied"] * 2)
    run(log_dir, tmp_path / "clean")
    assert table_rows(tmp_path / "t") == table_rows(tmp_path / "clean") == expected_rows(log_dir, [0, 1])


def test_a_fault_before_the_commit_leaves_the_table_as_it_was(tmp_path):
    _sample_log(tmp_path / "logs")

    def fault(partition: str, step: str) -> None:
        if step == "merge:start":
            raise OSError("disk gone")

    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, progress=lambda line: None)
    r = api.table(tmp_path / "logs", options, seams=api.Seams(runner=api.InProcessTasks(), fault=fault))
    assert r.exit_code == 1 and "disk gone" in (r.partitions[0].error or "")
    assert not (tmp_path / "t").exists() or not DeltaTable.is_deltatable(str(tmp_path / "t"))


# --------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------


def test_cli_runs_and_help_teaches(tmp_path, capsys):
    from jobs.commands.cli import main

    _sample_log(tmp_path / "logs")
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    help_text = capsys.readouterr().out
    for words in ("latest", "exactly once", "--rebuild", "--dry-run", "keyless", "delete.retention.ms"):
        assert words in help_text
    code = main(["table", "--log-dir", str(tmp_path / "logs"), "--topic", TOPIC, "--table", str(tmp_path / "t"),
                 "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and "prop-0" in out and "2 insert(s)" in out
    code = main(["table", "--log-dir", str(tmp_path / "logs"), "--topic", "nope", "--table", str(tmp_path / "t")])
    assert code == 2 and "--topic nope" in capsys.readouterr().err


@pytest.mark.parametrize("name, fix", [("cleaner-offset-checkpoint", "delete the file"),
                                       ("log-start-offset-checkpoint", "restore the file")])
def test_a_garbage_checkpoint_file_stops_the_table_job_with_the_fix_as_it_stops_the_other_jobs(tmp_path, capsys, name,
                                                                                                fix):
    from jobs.commands.cli import main

    _sample_log(tmp_path / "logs")
    (tmp_path / "logs" / name).write_text("0\n1\nt zero 5\n")
    code = main(["table", "--log-dir", str(tmp_path / "logs"), "--topic", TOPIC, "--table", str(tmp_path / "t"),
                 "--quiet"])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.startswith(f"segjobs table: error: {tmp_path / 'logs' / name}, line 3: ")
    assert "nothing was done" in line and f"fix: {fix}" in line
    assert not (tmp_path / "t").exists()


def _refused(capsys, argv: list[str]) -> str:
    """``segjobs table ARGV`` exits 2 with one error line on stderr and nothing on stdout: that line."""
    from jobs.commands.cli import main

    code = main(["table", *argv, "--quiet"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
    return lines[0]


def test_a_log_dir_that_does_not_exist_is_named_as_compact_names_it(tmp_path, capsys):
    # not "--topic prop: no partition of it in ... (there are no topics)": the log dir is what is missing
    missing = tmp_path / "nowhere"
    line = _refused(capsys, ["--log-dir", str(missing), "--topic", TOPIC, "--table", str(tmp_path / "t")])
    assert line == f"segjobs table: error: --log-dir {missing}: no such directory"
    from jobs.commands.cli import main

    assert main(["compact", "--log-dir", str(missing), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"segjobs compact: error: --log-dir {missing}: no such directory"
    # a directory without partition directories: compact's words too, with where they are
    _sample_log(tmp_path / "logs")
    (tmp_path / "empty").mkdir()
    line = _refused(capsys, ["--log-dir", str(tmp_path / "empty"), "--topic", TOPIC, "--table", str(tmp_path / "t")])
    assert line.startswith(f"segjobs table: error: --log-dir {tmp_path / 'empty'}: no partition directories "
                           f"(<topic>-<n>) found; partition directories found under {tmp_path / 'logs'}"), line
    assert not (tmp_path / "t").exists()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_s3_log_dir_whose_endpoint_does_not_answer_is_refused_before_anything(tmp_path, capsys, monkeypatch):
    # exit 2 as compact, retain, inspect and history (it was 1: the listing's error, after the run had begun)
    import time

    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    started = time.monotonic()
    line = _refused(capsys, ["--log-dir", "s3://bucket/kafka/logs", "--topic", TOPIC, "--table", str(tmp_path / "t"),
                             "--s3-endpoint", endpoint, "--s3-region", "us-east-1"])
    assert time.monotonic() - started < 20  # botocore's own retries would take minutes
    assert line.startswith(f"segjobs table: error: --log-dir s3://bucket/kafka/logs: the S3 endpoint {endpoint} did "
                           f"not answer"), line
    assert line.endswith("; nothing was done") and not (tmp_path / "t").exists()


@pytest.mark.s3
def test_an_s3_log_dir_in_a_missing_bucket_or_an_empty_prefix_is_refused_before_anything(s3_bucket_env, tmp_path,
                                                                                         capsys):
    endpoint, bucket = s3_bucket_env
    common = ["--topic", TOPIC, "--table", str(tmp_path / "t"), "--s3-endpoint", endpoint.endpoint_url]
    line = _refused(capsys, ["--log-dir", "s3://no-such-bucket-segjobs/logs", *common])
    assert line.startswith("segjobs table: error: --log-dir s3://no-such-bucket-segjobs/logs: bucket "
                           "'no-such-bucket-segjobs' does not exist"), line
    line = _refused(capsys, ["--log-dir", f"s3://{bucket}/nothing/here", *common])
    assert line == (f"segjobs table: error: --log-dir s3://{bucket}/nothing/here: no partition directories "
                    f"(<topic>-<n>) found")
    assert not (tmp_path / "t").exists()


def test_an_s3_table_that_cannot_be_used_is_refused_before_anything(tmp_path, capsys, monkeypatch):
    """A --table on S3 is checked as a --log-dir is: exit 2 within seconds, naming the option and what is wrong
    (it was exit 1 with delta-rs' own message: an instance-metadata lookup denied, no word of credentials)."""
    import time

    _sample_log(tmp_path / "logs")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "SEGJOBS_S3_ACCESS_KEY_ID",
                 "SEGJOBS_S3_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    common = ["--log-dir", str(tmp_path / "logs"), "--topic", TOPIC, "--table", "s3://bucket/t",
              "--s3-endpoint", endpoint, "--s3-region", "us-east-1"]
    line = _refused(capsys, common)
    assert line.startswith("segjobs table: error: --table s3://bucket/t: no usable AWS credentials"), line
    assert line.endswith("; nothing was done")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    started = time.monotonic()
    line = _refused(capsys, common)
    assert time.monotonic() - started < 20
    assert line.startswith(f"segjobs table: error: --table s3://bucket/t: the S3 endpoint {endpoint} did not "
                           f"answer"), line


@pytest.mark.s3
def test_an_s3_table_in_a_missing_bucket_is_refused_before_anything(s3_bucket_env, tmp_path, capsys):
    endpoint, _ = s3_bucket_env
    _sample_log(tmp_path / "logs")
    line = _refused(capsys, ["--log-dir", str(tmp_path / "logs"), "--topic", TOPIC, "--table",
                             "s3://no-such-bucket-segjobs/t", "--s3-endpoint", endpoint.endpoint_url])
    assert line.startswith("segjobs table: error: --table s3://no-such-bucket-segjobs/t: bucket "
                           "'no-such-bucket-segjobs' does not exist"), line


def test_readme_sql_runs_against_a_table(tmp_path):
    """The README's query of a table, run as it is (through deltalake's SQL engine) against a real one."""
    import re

    from deltalake import QueryBuilder

    readme = (REPO / "README.md").read_text()
    (query,) = re.findall(r"```sql\n(.*?)```", readme, flags=re.S)
    _sample_log(tmp_path / "logs")
    run(tmp_path / "logs", tmp_path / "t")
    result = pa.table(QueryBuilder().register("orders_latest", DeltaTable(str(tmp_path / "t"))).execute(query)
                      .read_all())
    assert result.to_pylist() == [{"partition": 0, "key": "b", "value": "22", "offset": 6},
                                  {"partition": 0, "key": "d", "value": "4", "offset": 7}]


def test_a_corrupt_partition_is_reported_and_the_others_are_applied(tmp_path):
    _sample_log(tmp_path / "logs")
    bad = tmp_path / "logs" / partition_dir_name(TOPIC, 1)
    bad.mkdir()
    (bad / "00000000000000000000.log").write_bytes(b"\x00" * 8 + b"\x00\x00\x00\x40" + b"garbage" * 20)
    r = run(tmp_path / "logs", tmp_path / "t")
    by_name = {p.name: p for p in r.partitions}
    assert r.exit_code == 1
    assert by_name["prop-1"].action == "error" and "00000000000000000000.log" in (by_name["prop-1"].error or "")
    assert by_name["prop-0"].action == "applied" and by_name["prop-0"].inserts == 2
    assert DeltaTable(str(tmp_path / "t")).transaction_version("segjobs-table:prop:1") is None


def test_a_directory_only_named_like_a_partition_of_the_topic_is_a_warning_and_not_read(tmp_path):
    _sample_log(tmp_path / "logs")
    shutil.copytree(tmp_path / "logs" / partition_dir_name(TOPIC, 0), tmp_path / "logs" / f"{TOPIC}-00")
    lines: list = []
    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, progress=lines.append)
    r = api.table(tmp_path / "logs", options, seams=api.Seams(runner=api.InProcessTasks()))
    assert r.exit_code == 0 and [p.name for p in r.partitions] == ["prop-0"]
    assert len(r.warnings) == 1 and r.warnings[0].startswith("prop-00: NOT A PARTITION, not read into the table: ")
    assert "leading zero" in r.warnings[0]
    assert any("warning: prop-00: NOT A PARTITION" in str(line) for line in lines), lines

def test_partitions_read_in_spark_tasks(spark, tmp_path):
    """With a session (as under spark-submit), each partition is read by a Spark task: what a task returns
    and the code it runs ship to executors."""
    logs = {0: [("data", [(b"a", b"1", []), (b"b", None, [])]), ("txn", 1, [(b"c", b"x", [])]), ("end", 1, "abort")],
            1: [("data", [(b"a", b"2", [("h", b"v")])]), ("roll",), ("data", [(b"d", b"4", [])])]}
    write_topic(tmp_path / "logs", logs)
    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, writer="deltalake", progress=lambda line: None)
    r = api.table(tmp_path / "logs", options, spark=spark)
    assert r.exit_code == 0, r.partitions
    assert table_rows(tmp_path / "t") == expected_rows(tmp_path / "logs", [0, 1])
    assert r.store_traffic is None and "store_traffic" not in r.to_dict()  # local disk makes no requests


def _upload(tmp_path: Path, s3_bucket) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """The sample log uploaded to the bucket: its URI, and its segments' bytes."""
    _sample_log(tmp_path / "logs")
    log_dir = f"s3://{s3_bucket[1]}/kafka/logs"
    storage = open_storage(log_dir, s3_bucket[0].storage_options())
    for f in sorted((tmp_path / "logs").rglob("*")):
        if f.is_file():
            storage.write_atomic(storage.join(log_dir, *f.relative_to(tmp_path / "logs").parts), f.read_bytes())
    return log_dir, sum(f.stat().st_size for f in (tmp_path / "logs").rglob("*.log"))


def _files_under(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


@pytest.mark.s3
@pytest.mark.parametrize("dedupe", ["memory", "external-sort"])
def test_log_dir_and_table_on_s3(s3_bucket, tmp_path, dedupe):
    """The log dir and the table both in a bucket (moto_server): the same rows, offsets and no-op rerun, with
    either dedupe (on disk: the segments and the table's keys read from the bucket)."""
    endpoint, bucket = s3_bucket
    storage_options = endpoint.storage_options()
    log_dir, segments = _upload(tmp_path, s3_bucket)
    table = f"s3://{bucket}/lake/prop_latest"
    options = api.TableOptions(table=table, topic=TOPIC, storage=storage_options, progress=lambda line: None,
                               latest_buffer_bytes=1 if dedupe == "external-sort" else 256 << 20)
    lines: list[str] = []
    first = api.table(log_dir, replace(options, progress=lines.append), seams=api.Seams(runner=api.InProcessTasks()))
    assert first.exit_code == 0 and first.partitions[0].inserts == 2 and first.partitions[0].dedupe == dedupe
    # the run's requests to the log dir's bucket, counted as compact counts them: every segment fetched
    traffic = first.store_traffic
    assert traffic is not None and traffic["segment_bytes"] == segments
    assert traffic["get"] == traffic["driver"]["get"] + sum(t["get"] for t in traffic["tasks"].values())
    # the partition's task fetches each segment once, for its scan, and reads the rows from that copy
    assert traffic["tasks"]["segjobs table prop: read partitions"]["get_bytes"] == segments
    # on disk, the driver's dedupe reads them from the copies the task left on this host, for its key pass and for
    # the rows it keeps (which deltalake's merge pulls on a thread of its own), and fetches none
    assert traffic["driver"]["get_bytes"] == 0
    assert first.to_dict()["store_traffic"] == traffic
    assert any("] object store: " in line and "x the" in line for line in lines), lines
    from jobs.engine.report.run_report import delta_storage_options

    dt = DeltaTable(table, storage_options=delta_storage_options(table, storage_options))
    assert sorted(dt.to_pyarrow_table(columns=["key"]).column("key").to_pylist()) == [b"b", b"d"]
    assert dt.transaction_version("segjobs-table:prop:0") == 9
    again = api.table(log_dir, options, seams=api.Seams(runner=api.InProcessTasks()))
    assert again.version_after == again.version_before == 0
    rebuilt = api.table(log_dir, replace(options, rebuild=True), seams=api.Seams(runner=api.InProcessTasks()))
    (p,) = rebuilt.partitions
    assert (p.action, p.inserts, p.updates, p.deletes, p.dedupe) == ("rebuilt", 0, 2, 0, dedupe)
    dt = DeltaTable(table, storage_options=delta_storage_options(table, storage_options))
    assert sorted(dt.to_pyarrow_table(columns=["key"]).column("key").to_pylist()) == [b"b", b"d"]


@pytest.mark.s3
def test_on_s3_without_room_for_copies_every_read_is_fetched_and_counted(s3_bucket, tmp_path, monkeypatch):
    """No scratch room: the task fetches each segment for its scan and again for the rows, and the on-disk dedupe's
    passes fetch theirs, the rows' from the thread deltalake's merge pulls them on: all counted."""
    from segment_io.storage import spool

    monkeypatch.setattr(spool, "FREE_MARGIN_BYTES", 1 << 60)
    endpoint, _ = s3_bucket
    log_dir, segments = _upload(tmp_path, s3_bucket)
    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, storage=endpoint.storage_options(),
                               progress=lambda line: None)
    in_memory = api.table(log_dir, options, seams=api.Seams(runner=api.InProcessTasks())).store_traffic
    assert in_memory is not None
    assert in_memory["tasks"]["segjobs table prop: read partitions"]["get_bytes"] == 2 * segments
    on_disk = api.table(log_dir, replace(options, table=str(tmp_path / "t2"), latest_buffer_bytes=1),
                        seams=api.Seams(runner=api.InProcessTasks())).store_traffic
    assert on_disk is not None
    assert on_disk["tasks"]["segjobs table prop: read partitions"]["get_bytes"] == segments  # the scan alone
    key_pass = segments  # every segment, for its keys; then the segments that hold a kept row, for the rows
    assert on_disk["driver"]["get_bytes"] > key_pass, on_disk["driver"]


class _TasksInAWorker(api.InProcessTasks):
    """Tasks run as in one of Spark's Python workers, whose scratch dir (``SPARK_LOCAL_DIRS``) is not the driver's;
    ``elsewhere``: on another host than the driver's. ``results``: what the tasks returned."""

    def __init__(self, root: Path, *, elsewhere: bool = False) -> None:
        super().__init__()
        self.root, self.elsewhere = root, elsewhere
        self.results: list = []

    def map(self, fn, items, **kw):  # type: ignore[no-untyped-def]
        from segment_io.storage import spool

        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SPARK_LOCAL_DIRS", str(self.root))
            if self.elsewhere:
                patch.setattr(spool, "_host", lambda: "another-host")
            out = super().map(fn, items, **kw)
        self.results += out
        return out


@pytest.mark.s3
@pytest.mark.parametrize("elsewhere", [False, True], ids=["on the driver's host", "on another host"])
def test_the_dedupe_on_disk_takes_over_the_copies_its_task_left_on_the_driver_s_host(
        s3_bucket, tmp_path, monkeypatch, elsewhere):
    """The task's scan fetches each segment once, under its worker's scratch dir. On the driver's host it leaves
    those copies and names their root; the driver's two passes of the dedupe on disk read them, fetch none, and
    remove them. A task on another host removes its copies, and the driver fetches the segments once for both
    passes."""
    driver_root, worker_root = tmp_path / "driver", tmp_path / "worker"
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(driver_root))
    log_dir, segments = _upload(tmp_path, s3_bucket)
    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, storage=s3_bucket[0].storage_options(),
                               progress=lambda line: None, latest_buffer_bytes=1)
    runner = _TasksInAWorker(worker_root, elsewhere=elsewhere)
    result = api.table(log_dir, options, seams=api.Seams(runner=runner))
    assert result.exit_code == 0 and result.partitions[0].dedupe == "external-sort"
    assert {k: v[0] for k, v in table_rows(tmp_path / "t").items()} == {(0, b"b"): b"22", (0, b"d"): b"4"}
    (task,) = runner.results
    assert task.sort_on_disk and task.copies_root == (None if elsewhere else str(worker_root))
    traffic = result.store_traffic
    assert traffic is not None
    assert traffic["tasks"]["segjobs table prop: read partitions"]["get_bytes"] == segments
    assert traffic["driver"]["get_bytes"] == (segments if elsewhere else 0)
    assert _files_under(driver_root, worker_root) == []


@pytest.mark.s3
def test_copies_left_for_a_dedupe_on_disk_go_when_the_read_fails(s3_bucket, tmp_path, monkeypatch):
    """The partitions' read fails after a task left its copies for the dedupe on disk (another partition's task
    failed the Spark job, say): the run ends with the error, and removes the copies on its host."""
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "scratch"))
    log_dir, _ = _upload(tmp_path, s3_bucket)

    class _FailAfterTasks(api.InProcessTasks):
        def map(self, fn, items, **kw):  # type: ignore[no-untyped-def]
            out = super().map(fn, items, **kw)
            assert any(r.copies_root for r in out) and _files_under(tmp_path / "scratch")  # the copies are there
            raise RuntimeError("a worker died")

    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, storage=s3_bucket[0].storage_options(),
                               progress=lambda line: None, latest_buffer_bytes=1)
    with pytest.raises(RuntimeError, match="a worker died"):
        api.table(log_dir, options, seams=api.Seams(runner=_FailAfterTasks()))
    assert _files_under(tmp_path / "scratch") == []


# One Spark job per example: a tenth of the profile's examples.
@settings(max_examples=examples(0.1), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
@given(logs=LOGS)
def test_spark_dedupe_equals_the_in_memory_one(spark, tmp_path_factory, logs):
    """The path for topics with more keys than a task's memory (Spark reads every segment and keeps the highest
    offset per key in a shuffle) gives the rows of the in-memory path."""
    from jobs.engine.table.driver import PartitionItem, partition_changes
    from jobs.engine.table.spark_writer import spark_changes
    from segment_io.layout import list_log_dir

    log_dir = tmp_path_factory.mktemp("dedupe") / "logs"
    write_topic(log_dir, logs)
    storage = open_storage(str(log_dir))
    listing = list_log_dir(storage, str(log_dir))
    planned, in_memory, records_read = [], {}, 0
    for p in sorted(logs):
        item = PartitionItem(storage, listing.partition(TOPIC, p), None, None, None, False, None, read_rows=False)
        planned.append(partition_changes(item))
        whole = partition_changes(PartitionItem(*[getattr(item, f) for f in (
            "storage", "listing", "applied", "log_start_checkpoint", "cleaner_checkpoint", "rebuild",
            "max_batch_bytes")]))
        records_read += whole.records_read
        in_memory.update({(p, r["key"]): r for r in whole.rows.to_pylist()})
    frame, read = spark_changes(spark, storage, TOPIC, planned, None)
    try:
        got = {(r["partition"], bytes(r["key"])): r.asDict(recursive=True) for r in frame.collect()}
    finally:
        frame.unpersist()
    for r in got.values():
        r["key"], r["value"] = bytes(r["key"]), None if r["value"] is None else bytes(r["value"])
        r["headers"] = [{"key": h["key"], "value": None if h["value"] is None else bytes(h["value"])}
                        for h in r["headers"]]
    assert got == in_memory
    assert sum(read.values()) == records_read


def _log_start_inside_a_segment(log_dir: Path) -> None:
    """One segment a=1 b=2 c=3 a=11 (offsets 0..3) whose log start offset (DeleteRecords) is 2."""
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    log.batch([rec("c", "3"), rec("a", "11")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    write_offset_checkpoint(open_storage(str(log_dir)), str(log_dir / LOG_START_OFFSET_CHECKPOINT), {(TOPIC, 0): 2})


@pytest.mark.parametrize("dedupe", ["memory", "external-sort"])
def test_records_below_the_log_start_offset_are_not_in_the_table(tmp_path, dedupe):
    """A consumer never sees records below the log start offset, even while their segment is on disk; whichever
    way the partition is deduped."""
    _log_start_inside_a_segment(tmp_path / "logs")
    r = run(tmp_path / "logs", tmp_path / "t", **({"latest_buffer_bytes": 1} if dedupe != "memory" else {}))
    assert r.exit_code == 0 and r.partitions[0].log_start_offset == 2 and r.partitions[0].dedupe == dedupe
    assert {k[1]: v[:2] for k, v in table_rows(tmp_path / "t").items()} == {b"a": (b"11", 3), b"c": (b"3", 2)}


def test_max_batch_bytes_bounds_what_a_batch_may_inflate_to(tmp_path):
    from segment_io.compression import GZIP

    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "x" * 20_000), rec("b", "y" * 20_000)])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0), codec=GZIP)
    bounded = run(log_dir, tmp_path / "t", max_batch_bytes=4096)
    (p,) = bounded.partitions
    assert bounded.exit_code == 1 and p.action == "error" and "4096" in (p.error or ""), p.error
    assert not (tmp_path / "t").exists()
    assert run(log_dir, tmp_path / "t").partitions[0].inserts == 2


@pytest.mark.parametrize("case", ["first build", "merge", "offsets only"])
def test_a_concurrent_run_cannot_apply_twice_or_overwrite_newer_rows(tmp_path, case):
    """Run A reads the log and the table, then, before it commits, run B reads a longer log and commits. A's
    commit was computed from an older table and log: it must fail (nothing written, an error saying what
    happened and what to do) rather than overwrite B's newer rows or move the applied offset back (which would
    apply B's range a second time). "offsets only": A found only an aborted transaction, so its commit adds no
    file, a blind append Delta would otherwise let through."""
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])

    def write() -> None:
        shutil.rmtree(log_dir, ignore_errors=True)
        write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))

    write()
    if case != "first build":
        run(log_dir, tmp_path / "t")
        if case == "merge":
            log.batch([rec("a", "11"), rec("c", "3")])
        else:
            log.txn_batch(5, 0, [rec("a", "never")])
            log.abort(5, 0)
        write()

    def other_run_commits_first(partition: str, step: str) -> None:
        if step == "merge:start":
            log.batch([rec("a", "111"), tombstone("b")])
            write()
            other = run(log_dir, tmp_path / "t")
            assert other.exit_code == 0 and other.partitions[0].applied_after == log.next_offset

    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, progress=lambda line: None)
    late = api.table(log_dir, options, seams=api.Seams(runner=api.InProcessTasks(), fault=other_run_commits_first))
    (p,) = late.partitions
    assert late.exit_code == 1 and p.action == "error"
    assert "another writer committed to the table" in (p.error or "") and "run segjobs table again" in p.error
    dt = DeltaTable(str(tmp_path / "t"))
    assert dt.transaction_version("segjobs-table:prop:0") == log.next_offset
    assert table_rows(tmp_path / "t") == expected_rows(log_dir, [0])  # the newer run's rows stand
    again = run(log_dir, tmp_path / "t")
    assert again.exit_code == 0 and again.version_after == again.version_before == dt.version()


@pytest.mark.parametrize("case", ["first build", "merge"])
def test_a_run_overtaken_by_one_applying_the_same_range_reports_nothing_written(tmp_path, case):
    """Two runs of the same log at once: the other run commits exactly the offsets this run was about to commit.
    The table is right either way, but this run wrote nothing: it must say so (exit 1, no insert, update or
    delete counted, the partition an error saying another writer committed) rather than report the other run's
    rows as its own."""
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    if case == "merge":
        run(log_dir, tmp_path / "t")
        shutil.rmtree(log_dir)
        log.batch([rec("a", "11"), rec("c", "3"), tombstone("b")])
        write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))

    def same_log_committed_first(partition: str, step: str) -> None:
        if step == "merge:start":
            assert run(log_dir, tmp_path / "t").exit_code == 0

    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, progress=lambda line: None)
    late = api.table(log_dir, options, seams=api.Seams(runner=api.InProcessTasks(), fault=same_log_committed_first))
    (p,) = late.partitions
    assert late.exit_code == 1 and p.action == "error", p
    assert "another writer committed to the table" in (p.error or "")
    assert (p.inserts, p.updates, p.deletes, p.applied_after) == (0, 0, 0, p.applied_before)
    assert (late.inserts, late.updates, late.deletes) == (0, 0, 0)
    assert late.version_after == late.version_before
    assert "wrote 0 insert(s), 0 update(s), 0 delete(s)" in late.summary()
    assert table_rows(tmp_path / "t") == expected_rows(log_dir, [0])


def test_max_batch_bytes_reaches_the_scan_of_the_transaction_markers(tmp_path):
    """With nothing new to apply, a run only scans: the bound still applies to the compressed markers it
    decodes there (the scan's transaction state), so a bound below a marker's size refuses the partition."""
    from segment_io.compression import GZIP

    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.txn_batch(7, 0, [rec("a", "1")])
    log.commit(7, 0)
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0), codec=GZIP)
    assert run(log_dir, tmp_path / "t").partitions[0].inserts == 1
    bounded = run(log_dir, tmp_path / "t", max_batch_bytes=4)
    (p,) = bounded.partitions
    assert bounded.exit_code == 1 and p.action == "error" and "4 bytes" in (p.error or ""), p.error


def test_beyond_fifty_partitions_the_summary_has_a_row_for_the_topic_as_every_command(tmp_path):
    """Above PARTITION_ROWS_MAX partitions the summary switches to a row per topic (the failed partitions below
    it), as retain, compact and inspect do; --per-partition still lists every partition."""
    from jobs.engine.report.run_report import PARTITION_ROWS_MAX

    log_dir = tmp_path / "logs"
    count = PARTITION_ROWS_MAX + 1
    for p in range(count):
        log = LogBuilder(topic=TOPIC, partition=p)
        log.batch([rec("a", str(p)), rec("b", "2")])
        write_log(log.table(), log_dir / partition_dir_name(TOPIC, p))
    r = run(log_dir, tmp_path / "t")
    assert r.exit_code == 0 and len(r.partitions) == count
    lines = r.summary().splitlines()
    assert not any(line.startswith(f"{TOPIC}-") for line in lines), lines
    (row,) = [line for line in lines if line.startswith(f"{TOPIC} ")]
    # topic, partitions, "applied N", records read, inserts, updates, deletes
    assert row.split() == [TOPIC, str(count), "applied", str(count), str(2 * count), str(2 * count), "0", "0"]
    per_partition = r.summary(layout="partition").splitlines()
    assert sum(line.startswith(f"{TOPIC}-") for line in per_partition) == count
    few = replace(r, partitions=r.partitions[:PARTITION_ROWS_MAX])
    assert sum(line.startswith(f"{TOPIC}-") for line in few.summary().splitlines()) == PARTITION_ROWS_MAX


def test_the_table_picks_up_exactly_the_records_generate_appends(tmp_path):
    """The guide's incremental story with the project's tools: generate a topic, build the table, append a
    night's records with `segjobs generate --append`, run the table again: it applies exactly the appended
    offsets, and holds what a consumer of the whole log holds."""
    from jobs.commands.cli import main

    log_dir = tmp_path / "logs"
    common = ["--topics", TOPIC, "--segment-bytes", "16KiB", "--transactional", "0.2", "--aborted", "0.5",
              "--tombstones", "0.05", "--config-out", "none", "--quiet"]
    assert main(["generate", "--out", str(log_dir), "--partitions", "2", "--records", "2000", *common]) == 0
    first = run(log_dir, tmp_path / "t")
    ends = {p.partition: p.applied_after for p in first.partitions}
    assert main(["generate", "--out", str(log_dir), "--append", "--records", "700", *common]) == 0
    second = run(log_dir, tmp_path / "t")
    assert second.exit_code == 0
    for p in second.partitions:
        appended = sum(len(b.records) for b in read_partition(log_dir / partition_dir_name(TOPIC, p.partition))
                       if b.base_offset >= ends[p.partition])
        assert (p.action, p.applied_before) == ("applied", ends[p.partition])
        assert p.applied_after == p.log_end_offset == ends[p.partition] + appended
        assert p.records_read == appended  # only the new segments were read
        assert p.updates > 0  # the appended records update keys the first ones wrote
    assert table_rows(tmp_path / "t") == expected_rows(log_dir, [0, 1])
