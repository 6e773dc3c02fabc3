"""What every job run does around its work: file times, partial commits, staging across filesystems, the
report and the Delta ledger (locally and on S3), and the S3 lease's timing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.rules.timeutil import wall_clock_ms
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.job_frame import MTIME_MS, NOW, T0, build
from tests.support.replay import comparable, latest_records, read_partition
from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY


def compact(log_dir: Path, *extra: str) -> int:
    return main(["compact", "--log-dir", str(log_dir), "--set", "*:cleanup.policy=compact",
                 "--set", "*:segment.bytes=300", "--now", str(NOW), "--quiet", *extra])


def compact_with_fault(log_dir: Path, fault, **options) -> api.CompactResult:
    """The same run through the API, with a fault hook on the commit steps."""
    return api.compact(log_dir, api.CompactOptions(overrides=("*:cleanup.policy=compact", "*:segment.bytes=300"),
                                                   **options), now=NOW, seams=api.Seams(fault=fault))


def test_compacted_segments_keep_the_mtime_of_the_segments_they_replace(tmp_path: Path, spark) -> None:
    """Kafka sets a cleaned segment's last-modified time to the last replaced segment's: retention of data
    without timestamps and the legacy tombstone horizon count from it, so a rewrite must not reset it."""
    part = tmp_path / "logs" / "t-0"
    build(part)
    before = {p.name for p in part.glob("*.log")}
    assert compact(tmp_path / "logs") == 0
    after = sorted(part.glob("*.log"))
    assert {p.name for p in after} != before, "the group was rewritten"
    for f in part.iterdir():
        if f.suffix in (".log", ".index", ".timeindex"):
            assert f.stat().st_mtime_ns // 1_000_000 == MTIME_MS, f.name


def test_a_commit_failing_midway_is_reported_as_partly_compacted(tmp_path: Path, spark) -> None:
    part = tmp_path / "logs" / "t-0"
    build(part, groups=2)
    source = comparable(latest_records(part))
    calls = []

    def fail_in_second_group(partition: str, step: str) -> None:
        if step == "write-intent":
            calls.append((partition, step))
            if len(calls) == 2:
                raise OSError("disk full (simulated)")

    report = tmp_path / "r.json"
    stopped = compact_with_fault(tmp_path / "logs", fail_in_second_group, report=str(report))
    assert calls == [("t-0", "write-intent")] * 2
    # a non-segjobs error in the commit stops the run, with its report (nothing is hidden: the error and its
    # trace are there) and exit code 1; the partition is consistent
    assert stopped.exit_code == 1 and not stopped.completed
    assert [e["kind"] for e in json.loads(report.read_text())["errors"]] == ["OSError"]
    assert "a segjobs bug" in stopped.errors[0]["detail"]
    assert comparable(latest_records(part)) == source
    # now a segjobs error, which the job reports per partition
    build(tmp_path / "logs2" / "t-0", groups=2)
    calls.clear()

    def storage_error_in_second_group(partition: str, step: str) -> None:
        from segment_io.errors import StorageError

        if step == "write-intent":
            calls.append((partition, step))
            if len(calls) == 2:
                raise StorageError("simulated failure", uri="somewhere")

    result = compact_with_fault(tmp_path / "logs2", storage_error_in_second_group, report=str(report))
    assert result.exit_code == 1 and result.partitions[0].action == "partly compacted"
    entry = json.loads(report.read_text())["partitions"][0]
    assert entry["action"] == "partly compacted"
    assert entry["groups_rewritten"] == 1 and "1 of 2 changed segment group(s)" in entry["reason"]
    assert entry["new_checkpoint"] in (None, entry["previous_checkpoint"]), "checkpoint not advanced"
    assert comparable(latest_records(tmp_path / "logs2" / "t-0")) == comparable(
        latest_records(tmp_path / "logs" / "t-0"))


def test_a_work_dir_on_another_filesystem_has_the_tasks_stage_beside_the_partitions(tmp_path: Path, spark) -> None:
    """Tasks stage new segments in the sibling work dir; when that is a different filesystem (a log dir on its
    own mount) the move into the partition dir could not be a rename, so they stage in the partition's
    .segjobs-staging/ instead, and nothing of it stays."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a filesystem other than the temp dir's")
    work = shm / f"segjobs-test-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        part = tmp_path / "logs" / "t-0"
        build(part)
        source = comparable(latest_records(part))
        (tmp_path / "logs.segjobs").symlink_to(work)
        assert compact(tmp_path / "logs") == 0
        assert comparable(latest_records(part)) == source
        assert not list(part.glob("*.cleaned")) and not list(work.rglob("*.log"))
        assert not (part / ".segjobs-staging").exists()
        assert len(list(part.glob("*.log"))) == 2
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_ledger_gets_one_row_per_partition_and_run(tmp_path: Path, spark) -> None:
    from deltalake import DeltaTable

    for p in (0, 1):
        build(tmp_path / "logs" / f"t-{p}")
    ledger = tmp_path / "ledger"
    assert compact(tmp_path / "logs", "--ledger", str(ledger)) == 0
    assert compact(tmp_path / "logs", "--ledger", str(ledger)) == 0
    rows = DeltaTable(str(ledger)).to_pyarrow_table().to_pylist()
    assert len(rows) == 4 and len({r["run_id"] for r in rows}) == 2
    first = [r for r in rows if r["action"] == "compacted"]
    assert sorted(r["partition"] for r in first) == [0, 1]
    assert all(r["records_removed"] > 0 and r["now_ms"] == NOW for r in first)


@pytest.mark.s3
def test_report_and_ledger_go_to_s3_through_the_s3_flags(s3_bucket, tmp_path: Path, spark, monkeypatch) -> None:
    from deltalake import DeltaTable

    endpoint, bucket = s3_bucket
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "SEGJOBS_S3_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    build(tmp_path / "logs" / "t-0")
    report, ledger = f"s3://{bucket}/reports/r.json", f"s3://{bucket}/ledger"
    assert compact(tmp_path / "logs", "--report", report, "--ledger", ledger,
                   "--s3-endpoint", endpoint.endpoint_url, "--s3-region", REGION) == 0
    storage = open_storage(report, endpoint.storage_options())
    doc = json.loads(storage.read(report))
    assert doc["partitions"][0]["action"] == "compacted"
    options = {"AWS_ENDPOINT_URL": endpoint.endpoint_url, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    assert DeltaTable(ledger, storage_options=options).to_pyarrow_table().num_rows == 1


@pytest.mark.s3
def test_the_s3_lease_runs_on_the_wall_clock_even_for_a_backfill_in_the_past(s3_bucket, tmp_path: Path, spark,
                                                                             monkeypatch) -> None:
    """--now is when decisions are made, often long ago (a backfill); the lease guards the real time the run
    takes, so it must be taken at the wall clock, not at --now (else it is expired the moment it is taken)."""
    from jobs.logdir.lock import lease_uri

    endpoint, bucket = s3_bucket
    build(tmp_path / "logs" / "t-0")
    log_dir = f"s3://{bucket}/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    for f in (tmp_path / "logs").rglob("*"):
        if f.is_file():
            storage.write_atomic(f"{log_dir}/{f.relative_to(tmp_path / 'logs').as_posix()}", f.read_bytes())
    leases = []

    def look_at_the_lease(partition: str, step: str) -> None:  # while the run holds it, at its first commit
        if not leases:
            leases.append(json.loads(storage.read(lease_uri(storage, log_dir))))

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    before = wall_clock_ms()
    result = compact_with_fault(log_dir, look_at_the_lease, storage=endpoint.storage_options())
    assert result.exit_code == 0 and result.now_ms == NOW
    assert len(leases) == 1 and before <= leases[0]["acquired_ms"] <= wall_clock_ms()
    assert leases[0]["expires_ms"] > leases[0]["acquired_ms"] > NOW
    assert not storage.exists(lease_uri(storage, log_dir)), "released at the end"


def test_a_rewritten_segment_keeps_the_txnindex_entries_of_its_surviving_abort_markers(tmp_path: Path, spark):
    """Kafka's first clean removes aborted data but keeps the abort marker and the transaction's .txnindex entry
    (kafka-behaviours item 14); the entry moves with the marker into the rewritten segment."""
    from segment_io.index import AbortedTxn, encode_txn_index, read_txn_index

    part = tmp_path / "logs" / "t-0"
    log = LogBuilder("t", 0, timestamp=T0)
    log.batch([rec("a", "1")]).batch([rec("a", "2")])  # 0, 1: a duplicate, so the group changes
    log.txn_batch(7, 0, [rec("b", "aborted")])  # 2
    log.abort(7, 0)  # 3: the marker
    log.roll().batch([rec("z", "active")])  # 4
    write_log(log.table(), part)
    entry = AbortedTxn(producer_id=7, first_offset=2, last_offset=3, last_stable_offset=2)
    (part / "00000000000000000000.txnindex").write_bytes(encode_txn_index([entry]))
    assert compact(tmp_path / "logs") == 0
    kept = [(b.base_offset, b.control) for b in read_partition(part)]
    assert (3, True) in kept and all(base != 2 for base, _ in kept), kept  # data gone, marker kept
    assert read_txn_index((part / "00000000000000000000.txnindex").read_bytes()) == [entry]


# ---------------------------------------------------------------------------------------------------
# Config entries against the log dir: a misspelled topic name stops the run before the lock
# ---------------------------------------------------------------------------------------------------


def _expired_topics(d: Path) -> None:
    from tests.support.retention import OLD, RECENT, build_partition

    build_partition(d, "orders", 0, [[OLD], [OLD], [RECENT]])  # retention as a delete topic would take 2 of 3
    build_partition(d, "clicks", 0, [[OLD], [RECENT], [RECENT]])


def _all_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("entry", ["table", "--set"])
def test_a_config_entry_naming_a_misspelled_topic_stops_retain_before_the_lock(tmp_path: Path, capsys,
                                                                              entry: str) -> None:
    from tests.support.retention import NOW
    from tests.support.spark import spark_forbidden

    d = tmp_path / "logs"
    _expired_topics(d)
    config = tmp_path / "topics.toml"
    config.write_text('[topics."ordres"]\n"cleanup.policy" = "compact"\n')  # meant for orders
    given = ["--config", str(config)] if entry == "table" else ["--set", "ordres:cleanup.policy=compact"]
    before = _all_bytes(d)
    capsys.readouterr()
    with spark_forbidden():
        code = main(["retain", "--log-dir", str(d), *given, "--now", str(NOW), "--max-delete-fraction", "1"])
    err = capsys.readouterr().err
    assert code == 2
    named = f'{config} [topics."ordres"]' if entry == "table" else "--set ordres:..."
    assert f"{named} names no topic of {d} (closest: orders)" in err
    assert _all_bytes(d) == before and not (d / ".lock").exists()  # not one byte changed, no lock taken
    assert not (tmp_path / "logs.segjobs").exists()  # nor any work file of segjobs' own


def test_entries_outside_the_scope_are_fine_globs_naming_nothing_warn_and_the_report_says_where_policies_come_from(
        tmp_path: Path) -> None:
    from tests.support.retention import NOW

    d = tmp_path / "logs"
    _expired_topics(d)
    config = tmp_path / "topics.toml"
    config.write_text('[defaults]\n"retention.ms" = "1d"\n[topics."orders"]\n"cleanup.policy" = "compact"\n'
                      '[topics."click-*"]\n"cleanup.policy" = "compact"\n')
    result = api.inspect(d, api.InspectOptions(config=config, topics=("clicks",)), now=NOW,
                         seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0 and [p.name for p in result.partitions] == ["clicks-0"]  # orders: out of scope
    assert result.report.warnings == [f'{config} [topics."click-*"] matches no topic of {d} (closest: clicks): '
                                      f"it has no effect"]
    assert result.report.topics == {"clicks": {"policy": "delete", "policy_from": "Kafka's default"}}
    assert "cleanup.policy: delete from Kafka's default (clicks)" in result.summary("table")
    assert json.loads(result.summary("json"))["topics"]["clicks"]["policy_from"] == "Kafka's default"

    retained = api.retain(d, api.RetainOptions(config=config, dry_run=True, max_delete_fraction=1.0), now=NOW,
                          seams=api.Seams(runner=api.InProcessTasks()))
    assert retained.report.topics["orders"] == {"policy": "compact", "policy_from": f'{config} [topics."orders"]'}
    assert f'cleanup.policy: delete from Kafka\'s default (clicks); compact from {config} [topics."orders"] ' \
           f"(orders)" in retained.summary()


def test_whole_logs_headers_are_read_on_the_driver_only_for_its_own_early_spark_on_this_host_over_local_disk(
        tmp_path: Path, monkeypatch) -> None:
    from jobs.engine.frame.job import _driver_read_threads
    from jobs.engine.runtime.tasks import local_parallelism
    from segment_io.storage.options import StorageOptions

    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    local, started = open_storage(str(tmp_path)), object()  # the session started early: any object here
    assert _driver_read_threads(started, local, str(tmp_path), None) == local_parallelism()
    assert _driver_read_threads(started, local, str(tmp_path), "local[2]") == local_parallelism()
    assert _driver_read_threads(None, local, str(tmp_path), None) == 0  # a session given, or none started early
    assert _driver_read_threads(started, local, str(tmp_path), "spark://master:7077") == 0  # tasks elsewhere
    s3 = open_storage("s3://bucket/logs", StorageOptions(endpoint_url="http://127.0.0.1:1", region="us-east-1"))
    assert _driver_read_threads(started, s3, "s3://bucket/logs", None) == 0  # tasks keep what they fetch
