"""``segjobs tiered audit`` as tasks: the metadata partitions replayed one per task, the user partitions audited in
packed tasks, on Spark and on the driver (jobs.engine.tiered.audit_tasks), on a generated set of several hundred
partitions over several metadata partitions (tests.support.tiered_set)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.engine.runtime.tasks import DriverTasks, InProcessTasks, SparkTasks
from jobs.engine.tiered.audit import TieredAuditOptions, audit_json, audit_text, run_audit
from jobs.rules.config import ConfigSet
from jobs.rules.remote_log import replay
from segment_io.errors import CorruptRecordError
from segment_io.remote_metadata import METADATA_TOPIC, read_metadata_partition
from tests.support.tiered_set import TieredSet, generate_tiered_set

#: after every generated event; retention.bytes small enough that some segments are overdue
NOW_MS = 10**12
SETTINGS = ["*:retention.ms=-1", "topic1:retention.bytes=100"]


@pytest.fixture(scope="module")
def tiered_set(tmp_path_factory: pytest.TempPathFactory) -> TieredSet:
    return generate_tiered_set(tmp_path_factory.mktemp("tiered") / "set", topics=3, partitions=100,
                               metadata_partitions=4)


def _options(s: TieredSet, log_dir: Path | None = None) -> TieredAuditOptions:
    return TieredAuditOptions(str(log_dir or s.log_dir), str(s.remote), now_ms=NOW_MS,
                              configs=ConfigSet().with_overrides(SETTINGS))


def test_spark_tasks_and_the_driver_give_the_same_report(spark, tiered_set: TieredSet) -> None:
    on_spark = run_audit(_options(tiered_set), runner=SparkTasks(spark))
    on_driver = run_audit(_options(tiered_set), runner=DriverTasks())
    assert json.dumps(audit_json(on_spark)) == json.dumps(audit_json(on_driver))
    assert audit_text(on_spark) == audit_text(on_driver)
    assert on_spark.exit_code == on_driver.exit_code == 1
    # the set is what it claims: every partition, every event, and every kind of finding
    assert len(on_spark.partitions) == tiered_set.partitions == 300
    assert on_spark.metadata_events == tiered_set.events
    found = {kind: sum(len(getattr(p, kind)) for p in on_spark.partitions)
             for kind in ("gaps", "missing", "orphans", "overdue")}
    assert all(found.values()), found
    assert on_spark.dropped and {o.reason for p in on_spark.partitions for o in p.orphans} >= {
        "copy never finished (COPY_SEGMENT_STARTED)"}


def test_the_report_is_that_of_one_replay_of_all_the_metadata(tiered_set: TieredSet) -> None:
    # the metadata partitions replayed one after the other in one process: what the tasks' states add up to
    uris = sorted(str(p) for p in tiered_set.log_dir.glob(f"{METADATA_TOPIC}-*"))
    together = replay(e for uri in uris for e in read_metadata_partition(uri))
    audit = run_audit(_options(tiered_set), runner=DriverTasks())
    assert audit.state is not None
    assert audit.state.partitions == together.partitions and audit.state.events == together.events
    assert audit.dropped == together.dropped()


def test_thousands_of_partitions_are_not_thousands_of_tasks(tiered_set: TieredSet) -> None:
    runner = InProcessTasks(parallelism=2)
    run_audit(_options(tiered_set), runner=runner)
    # the replay: one stream of the 4 metadata partitions; the audit: 300 partitions packed in a few bins
    assert runner.descriptions == ["segjobs tiered audit: replay 4 metadata partition(s)",
                                   "segjobs tiered audit: audit 300 partition(s)"]
    assert runner.calls <= 4 + 8


def test_a_corrupt_metadata_record_in_a_spark_task_is_refused_as_on_the_driver(spark, tiered_set: TieredSet,
                                                                                tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "logs"
    shutil.copytree(tiered_set.log_dir, copy)
    log = next((copy / f"{METADATA_TOPIC}-1").glob("*.log"))
    data = bytearray(log.read_bytes())
    data[100] ^= 0xFF  # inside the first batch: its CRC no longer holds
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as on_driver:
        run_audit(_options(tiered_set, copy), runner=DriverTasks())
    with pytest.raises(CorruptRecordError) as on_spark:
        run_audit(_options(tiered_set, copy), runner=SparkTasks(spark))
    assert str(on_spark.value) == str(on_driver.value) and str(log) in str(on_spark.value)


def test_a_user_partition_in_two_metadata_partitions_is_replayed_in_sequence(tiered_set: TieredSet,
                                                                             tmp_path: Path) -> None:
    # a metadata partition's copy under another number: its user partitions' events are in two metadata
    # partitions, which the replay then reads as one sequence, as Kafka's cache would
    import shutil

    copy = tmp_path / "logs"
    shutil.copytree(tiered_set.log_dir, copy)
    shutil.copytree(copy / f"{METADATA_TOPIC}-0", copy / f"{METADATA_TOPIC}-9")
    uris = sorted(str(p) for p in copy.glob(f"{METADATA_TOPIC}-*"))
    together = replay(e for uri in uris for e in read_metadata_partition(uri))
    audit = run_audit(_options(tiered_set, copy), runner=DriverTasks())
    assert audit.state is not None and audit.state.partitions == together.partitions
    assert audit.dropped == together.dropped() and len(audit.dropped) > len(
        run_audit(_options(tiered_set), runner=DriverTasks()).dropped)  # every COPY_SEGMENT_STARTED again: dropped


def test_a_small_run_does_its_tasks_on_the_driver(tiered_set: TieredSet) -> None:
    # no runner given: the set is far under the driver-run limit, so no Spark session is asked for (the test
    # has no `spark` fixture: a session started here fails the suite's guard)
    lines: list[str] = []
    run_audit(_options(tiered_set), progress=lines.append)
    assert "auditing 300 partition(s) (on the driver)" in "\n".join(lines)
    assert any("audited 300 partition(s)" in line for line in lines)


def test_the_command_prints_its_progress_on_stderr_unless_quiet(tiered_set: TieredSet, capsys) -> None:
    from jobs.commands.cli import main

    args = ["tiered", "audit", "--log-dir", str(tiered_set.log_dir), "--remote", str(tiered_set.remote),
            "--now", "2001-09-09T01:46:40Z", *[a for s in SETTINGS for a in ("--set", s)], "--format", "json"]
    assert main([*args, "--log-format", "json"]) == 1
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in err.splitlines()]
    assert [e["event"] for e in events if e["event"].endswith((".start", ".done"))] == [
        "tiered.replay.start", "tiered.replay.done", "tiered.audit.start", "tiered.audit.done"]
    assert events[-1]["partitions"] == 300 and json.loads(out)["exit_code"] == 1
    assert main([*args, "--quiet"]) == 1
    assert capsys.readouterr().err == ""
