"""The retention job on S3 (a real HTTP endpoint: moto_server), end to end and with a crash at every step.

Log dirs are built locally with the helpers of :mod:`tests.support.retention` and uploaded object by object.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from segment_io.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from segment_io.layout import segment_file_name
from segment_io.storage import StorageOptions, open_storage
from segment_io.storage.base import Storage
from tests.support.retention import (
    OLD,
    RECENT,
    build_partition,
    check_every_crash_point,
    deleted,
    entry,
    live_logs,
    names,
    retain,
    sizes,
)
from tests.support.s3_objects import upload


def test_retain_on_s3_end_to_end(s3_bucket, s3_env, tmp_path: Path, spark) -> None:
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    local = tmp_path / "logs"
    bases = build_partition(local, "t", 0, [[OLD], [OLD], [RECENT]], epochs=[(0, 0), (3, 1)])
    build_partition(local, "u", 0, [[RECENT], [RECENT]])
    expected_bytes = sizes(local / "t-0", bases)
    upload(storage, local, log_dir)
    opts = ("--s3-endpoint", endpoint.endpoint_url, "--set", "*:retention.ms=1d",
            "--set", "*:file.delete.delay.ms=60000", "--max-delete-fraction", "1")

    code, dry = retain(log_dir, *opts, "--dry-run")
    assert code == 0 and deleted(entry(dry, "t", 0)) == [(0, "retention.ms"), (1, "retention.ms")]
    assert live_logs(storage, f"{log_dir}/t-0") == [0, 1, 2]

    code, report = retain(log_dir, *opts)
    assert code == 0
    e = entry(report, "t", 0)
    assert deleted(e) == deleted(entry(dry, "t", 0))
    assert e["bytes_removed"] == expected_bytes[0] + expected_bytes[1]
    assert live_logs(storage, f"{log_dir}/t-0") == [2]
    assert segment_file_name(0, ".log.deleted") in names(storage, f"{log_dir}/t-0")
    assert read_offset_checkpoint(storage, f"{log_dir}/log-start-offset-checkpoint") == {("t", 0): 2}
    assert read_leader_epoch_checkpoint(storage, f"{log_dir}/t-0/leader-epoch-checkpoint") == [(3, 2)]
    assert deleted(entry(report, "u", 0)) == []
    # the lease is released and the work location holds only segjobs' own bookkeeping
    assert not [f for f in storage.list(log_dir, recursive=True) if "segjobs" in f.name or f.name.endswith(".json")]

    code, report = retain(log_dir, *opts, now=report["now_ms"] + 60_000)
    assert code == 0 and not [n for n in names(storage, f"{log_dir}/t-0") if n.endswith(".deleted")]


@pytest.mark.scenario
def test_a_crash_at_every_step_on_s3_then_recovery_and_a_rerun_ends_as_an_uninterrupted_run(
        s3_bucket, tmp_path: Path) -> None:
    endpoint, bucket = s3_bucket

    def s3(name: str) -> tuple[Storage, str, StorageOptions]:
        log_dir = f"s3://{bucket}/{name}/logs"
        return open_storage(log_dir, endpoint.storage_options()), log_dir, endpoint.storage_options()

    # t-1's steps are of the kinds t-0 has (t-0 also trims leader epochs and deletes snapshots), and every step of
    # both is crashed on local disk: on S3, where each run costs seconds, the log dir's step and t-0's suffice
    check_every_crash_point(s3, tmp_path, crash=("", "t-0"))


def test_a_config_table_naming_a_misspelled_topic_stops_retain_on_s3_before_the_lease(s3_bucket, s3_env,
                                                                                         tmp_path: Path) -> None:
    from tests.support.spark import spark_forbidden

    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/misspelled/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    local = tmp_path / "logs"
    build_partition(local, "orders", 0, [[OLD], [OLD], [RECENT]])
    upload(storage, local, log_dir)
    everything = f"s3://{bucket}/misspelled"  # the log dir and its sibling logs.segjobs (leases, staging)
    before = {f.uri: storage.read(f.uri) for f in storage.list(everything, recursive=True)}
    config = tmp_path / "topics.toml"
    config.write_text('[topics."ordres"]\n"cleanup.policy" = "compact"\n')
    with spark_forbidden():
        code, report = retain(log_dir, "--s3-endpoint", endpoint.endpoint_url, "--config", str(config),
                              "--max-delete-fraction", "1")
    assert code == 2 and report is None
    # not one object changed, added (no lease) or removed
    assert {f.uri: storage.read(f.uri) for f in storage.list(everything, recursive=True)} == before
