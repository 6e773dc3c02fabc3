"""The compaction and retention drivers' commit loops and report entries, run in this process without a Spark
session: the jobs through :mod:`jobs.api` with ``Seams(runner=InProcessTasks())`` (every task still makes the
pickle round trip it would make to an executor) and the fault seam. Real files, the real lock, recovery,
committers and checkpoints; only Spark's scheduling is left out, so each run takes a fraction of a second.

Cases: an error in one partition while the others commit, a lost S3 lease, a dry run against the real run,
and a plan that no longer matches what the run decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import api
from jobs.engine.runtime.seams import FaultHook
from segment_io.errors import StorageError, UsageError
from segment_io.storage import open_storage
from tests.support.job_frame import NOW, build
from tests.support.replay import comparable, latest_records

SETTINGS = ("*:cleanup.policy=compact", "*:segment.bytes=300")
RETAIN_SETTINGS = ("*:retention.ms=1d", "*:file.delete.delay.ms=0")
#: the live segments retention leaves of each partition of build_retention_dir
LEFT = ["00000000000000000001.log", "00000000000000000002.log"]


def in_process(fault: FaultHook | None = None, **seams) -> api.Seams:
    return api.Seams(fault=fault, runner=api.InProcessTasks(), **seams)


def compact(log_dir, fault: FaultHook | None = None, **options) -> api.CompactResult:
    options.setdefault("overrides", SETTINGS)
    return api.compact(log_dir, api.CompactOptions(**options), now=NOW, seams=in_process(fault))


def files(root: Path) -> dict[str, bytes]:
    """Every file of the log dir and its work dir (but the lock, whose holder record changes)."""
    out = {}
    for d in (root, root.parent / (root.name + ".segjobs")):
        if d.exists():
            out.update({str(p.relative_to(root.parent)): p.read_bytes() for p in d.rglob("*")
                        if p.is_file() and p.name not in (".lock", "lock-holder.json")})
    return out


def failing_at(partition: str, step_prefix: str, error: Exception) -> FaultHook:
    def fault(p: str, step: str) -> None:
        if p == partition and step.startswith(step_prefix):
            raise error

    return fault


# --------------------------------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------------------------------


def test_the_job_runs_without_spark(tmp_path: Path) -> None:
    build(tmp_path / "logs" / "t-0")
    runner = api.InProcessTasks()
    result = api.compact(tmp_path / "logs", api.CompactOptions(overrides=SETTINGS), now=NOW,
                         seams=api.Seams(runner=runner))
    assert result.exit_code == 0 and result.completed and result.partitions_compacted == 1
    assert runner.calls == 2  # t-0's scan (in full at once: small, and it may be due) and its compaction task
    assert result.report.spark_startup_s is None


#: What differs between two runs of the same decisions: the run's identity and its timings.
VOLATILE = ("run_id", "started_ms", "finished_ms", "elapsed_s", "spark_startup_s")


def _report_without_spark(run_command, log_dir: Path, out: Path) -> dict:
    """Run ``run_command(log_dir, seams, report=, ledger=)`` as in production (no test runner) with Spark
    forbidden; return its JSON report (volatile fields dropped) after checking its exit code and ledger."""
    from tests.support.spark import spark_forbidden

    with spark_forbidden():
        result = run_command(log_dir, None, report=str(out / "report.json"), ledger=str(out / "ledger"))
    assert result.exit_code == 0 and result.completed
    assert result.report.spark_startup_s is None
    assert list((out / "ledger").rglob("*")), "the ledger was not written"
    return {k: v for k, v in json.loads((out / "report.json").read_text()).items() if k not in VOLATILE}


def test_a_compaction_with_nothing_due_starts_no_spark_and_reports_as_with_tasks(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for p in range(2):
        build(logs / f"t-{p}")
    assert compact(logs).partitions_compacted == 2  # now nothing is due

    def run(log_dir, seams, **options):
        return api.compact(log_dir, api.CompactOptions(overrides=SETTINGS, **options), now=NOW, seams=seams)

    expected_dir = tmp_path / "expected"
    run(logs, in_process(), report=str(expected_dir / "report.json"))
    expected = {k: v for k, v in json.loads((expected_dir / "report.json").read_text()).items() if k not in VOLATILE}
    got = _report_without_spark(run, logs, tmp_path / "got")
    assert got == expected
    assert {e["action"] for e in got["partitions"]} == {"skipped"} and len(got["partitions"]) == 2


def test_an_error_in_one_partitions_commit_leaves_it_untouched_while_the_others_are_compacted(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for p in range(3):
        build(logs / f"t-{p}")
    source = {p: comparable(latest_records(logs / f"t-{p}")) for p in range(3)}
    before = files(logs)
    result = compact(logs, failing_at("t-1", "cleaned-to-swap:", StorageError("simulated", uri="x")))
    assert result.exit_code == 1
    by_name = {p.name: p for p in result.partitions}
    assert by_name["t-1"].action == "error" and "simulated" in (by_name["t-1"].error or "")
    assert by_name["t-1"].entry["new_checkpoint"] is None  # the cleaner checkpoint is not advanced for it
    assert [e["partition"] for e in result.errors] == ["t-1"]
    for name in ("t-0", "t-2"):
        assert by_name[name].action == "compacted" and by_name[name].records_removed > 0
        assert (by_name[name].segments_after or 0) < (by_name[name].segments_before or 0)
    assert result.records_removed == by_name["t-0"].records_removed + by_name["t-2"].records_removed
    checkpoint = (logs / "cleaner-offset-checkpoint").read_text().splitlines()[2:]
    assert sorted(line.split()[1] for line in checkpoint) == ["0", "2"]
    # t-1's own files: its live segments are the old ones (the replace stopped before its commit point)
    assert {k: v for k, v in files(logs).items() if k.startswith("logs/t-1/") and not k.endswith(".cleaned")} == \
        {k: v for k, v in before.items() if k.startswith("logs/t-1/")}
    for p in range(3):
        assert comparable(latest_records(logs / f"t-{p}")) == source[p]
    # the next run recovers t-1 and compacts it
    again = compact(logs)
    assert again.exit_code == 0 and again.recovered_partitions == 1
    assert {p.name: p.action for p in again.partitions}["t-1"] == "compacted"


def test_a_failure_after_the_first_group_is_partly_compacted(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build(logs / "t-0", groups=2)
    seen = []

    def second_intent(p: str, step: str) -> None:
        if step == "write-intent":
            seen.append(step)
            if len(seen) == 2:
                raise StorageError("simulated", uri="x")

    result = compact(logs, second_intent)
    (p,) = result.partitions
    assert result.exit_code == 1 and p.action == "partly compacted"
    assert p.entry["groups_rewritten"] == 1 and p.entry["groups"] == 2
    assert 0 < p.records_removed and p.segments_before is not None and p.segments_after == p.segments_before - 1
    assert not (logs / "cleaner-offset-checkpoint").exists()


def test_a_dry_run_reports_exactly_what_the_real_run_does_and_writes_nothing(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for p in range(2):
        build(logs / f"t-{p}", groups=2)
    before = files(logs)
    dry = compact(logs, dry_run=True)
    assert files(logs) == before and not (tmp_path / "logs.segjobs").exists()
    real = compact(logs)
    assert dry.dry_run and not real.dry_run
    assert [p.action for p in dry.partitions] == ["would compact"] * 2
    assert [p.action for p in real.partitions] == ["compacted"] * 2
    fields = ("records_removed", "bytes_removed", "segments_after", "bytes_after", "new_checkpoint", "cleaned_range",
              "groups_rewritten", "stats")
    for d, r in zip(dry.partitions, real.partitions):
        assert {f: d.entry[f] for f in fields} == {f: r.entry[f] for f in fields}
    assert (dry.records_removed, dry.bytes_removed, dry.segments_removed) == \
        (real.records_removed, real.bytes_removed, real.segments_removed)


def test_a_plan_whose_cleaning_outcome_differs_commits_nothing_of_that_partition(tmp_path: Path) -> None:
    """--apply re-runs the cleaning task; where it decides otherwise than the plan (only a changed segjobs can
    do that; here the plan file is edited) the partition's staged files are discarded and it is an error."""
    logs, plan = tmp_path / "logs", tmp_path / "plan.json"
    for p in range(2):
        build(logs / f"t-{p}")
    assert compact(logs, dry_run=True, plan=str(plan)).exit_code == 0
    doc = json.loads(plan.read_text())
    doc["decisions"]["t-0"]["compaction"]["outcome"]["records_removed"] += 1
    plan.write_text(json.dumps(doc))
    before = files(logs)
    result = api.compact(logs, api.CompactOptions(apply=str(plan)), seams=in_process())
    by_name = {p.name: p for p in result.partitions}
    assert result.exit_code == 1 and result.now_ms == NOW and not result.now_from_wall_clock
    assert by_name["t-0"].action == "error" and "PlanMismatch" in (by_name["t-0"].error or "")
    assert by_name["t-1"].action == "compacted"
    assert {k: v for k, v in files(logs).items() if k.startswith("logs/t-0/")} == \
        {k: v for k, v in before.items() if k.startswith("logs/t-0/")}
    assert not list((tmp_path / "logs.segjobs").rglob("*.log")), "the discarded partition's staged files are gone"


def test_a_plan_whose_selection_differs_is_refused_before_anything_is_done(tmp_path: Path) -> None:
    logs, plan = tmp_path / "logs", tmp_path / "plan.json"
    build(logs / "t-0")
    compact(logs, dry_run=True, plan=str(plan))
    doc = json.loads(plan.read_text())
    doc["decisions"]["t-0"]["compaction"]["first_dirty_offset"] += 1
    plan.write_text(json.dumps(doc))
    before = files(logs)
    with pytest.raises(UsageError, match="refused, nothing done: the compaction decided now differs"):
        api.compact(logs, api.CompactOptions(apply=str(plan)), seams=in_process())
    assert files(logs) == before


# --------------------------------------------------------------------------------------------------
# Retention
# --------------------------------------------------------------------------------------------------


def build_retention_dir(logs: Path, partitions: int = 3) -> None:
    from tests.support.retention import OLD, RECENT, build_partition

    for p in range(partitions):
        build_partition(logs, "r", p, [[OLD], [RECENT], [RECENT]])  # a third goes: below the delete limit


def retain(log_dir, fault: FaultHook | None = None, **options) -> api.RetainResult:
    from tests.support.retention import NOW as RETAIN_NOW

    options.setdefault("overrides", RETAIN_SETTINGS)
    return api.retain(log_dir, api.RetainOptions(**options), now=RETAIN_NOW, seams=in_process(fault))


def test_retention_an_error_in_one_partition_while_the_others_commit(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_retention_dir(logs)
    result = retain(logs, failing_at("r-1", "live-to-deleted:", StorageError("simulated", uri="x")))
    by_name = {p.name: p for p in result.partitions}
    assert result.exit_code == 1 and [e["partition"] for e in result.errors] == ["r-1"]
    assert by_name["r-1"].action == "error" and "the next run" in by_name["r-1"].entry["reason"]
    for name in ("r-0", "r-2"):
        assert by_name[name].action == "delete" and by_name[name].segments_deleted == 1
        assert sorted(p.name for p in (logs / name).glob("*.log")) == LEFT
    # the log start was raised for every partition first (one write), as Kafka does before deleting
    assert (logs / "log-start-offset-checkpoint").read_text().splitlines()[2:] == ["r 0 1", "r 1 1", "r 2 1"]
    again = retain(logs)
    assert again.exit_code == 0 and again.recovered_partitions == 1
    assert sorted(p.name for p in (logs / "r-1").glob("*.log")) == LEFT
    assert not list(logs.rglob("*.deleted"))


def test_a_retention_with_nothing_due_starts_no_spark_and_reports_as_with_tasks(tmp_path: Path) -> None:
    from tests.support.retention import NOW as RETAIN_NOW

    logs = tmp_path / "logs"
    build_retention_dir(logs)
    assert retain(logs).exit_code == 0  # now nothing is due

    def run(log_dir, seams, **options):
        return api.retain(log_dir, api.RetainOptions(overrides=RETAIN_SETTINGS, **options), now=RETAIN_NOW,
                          seams=seams)

    expected_dir = tmp_path / "expected"
    run(logs, in_process(), report=str(expected_dir / "report.json"))
    expected = {k: v for k, v in json.loads((expected_dir / "report.json").read_text()).items() if k not in VOLATILE}
    assert _report_without_spark(run, logs, tmp_path / "got") == expected


def test_retention_dry_run_equals_the_real_run(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_retention_dir(logs)
    before = files(logs)
    dry = retain(logs, dry_run=True)
    assert files(logs) == before
    real = retain(logs)
    fields = ("action", "deleted", "rules", "log_start_offset", "segments_after", "bytes_removed")
    assert [{f: p.entry[f] for f in fields} for p in dry.partitions] == \
        [{f: p.entry[f] for f in fields} for p in real.partitions]
    assert (dry.segments_deleted, dry.bytes_removed, dry.partitions_changed) == \
        (real.segments_deleted, real.bytes_removed, real.partitions_changed) == (3, real.bytes_removed, 3)


def test_the_clock_seam_is_the_default_now(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_retention_dir(logs, partitions=1)
    from tests.support.retention import NOW as RETAIN_NOW

    result = api.retain(logs, api.RetainOptions(overrides=RETAIN_SETTINGS, dry_run=True),
                        seams=api.Seams(runner=api.InProcessTasks(), clock=lambda: RETAIN_NOW + 1))
    assert result.now_ms == RETAIN_NOW + 1 and result.now_from_wall_clock
    assert result.segments_deleted == 1


# --------------------------------------------------------------------------------------------------
# A lost S3 lease (another run took the log dir over): nothing more is committed
# --------------------------------------------------------------------------------------------------


def _upload(storage, log_dir: str, local: Path) -> None:
    for f in sorted(local.rglob("*")):
        if f.is_file():
            storage.write_atomic(f"{log_dir}/{f.relative_to(local).as_posix()}", f.read_bytes())


def _thief(log_dir: str) -> bytes:
    return json.dumps({"format": 1, "log_dir": log_dir, "acquired_ms": 0, "expires_ms": 4_000_000_000_000,
                       "holder": {"host": "other-host", "pid": 7, "run_id": "thief"}}).encode()


@pytest.mark.s3
def test_compaction_stops_before_its_next_commit_once_the_lease_is_lost(s3_bucket, tmp_path: Path) -> None:
    from jobs.logdir.lock import lease_uri

    endpoint, bucket = s3_bucket
    for p in range(2):
        build(tmp_path / "logs" / f"t-{p}")
    log_dir = f"s3://{bucket}/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    _upload(storage, log_dir, tmp_path / "logs")
    stolen: list[str] = []

    def steal_at_the_first_commit(p: str, step: str) -> None:
        if step == "write-intent" and not stolen:
            stolen.append(p)
            storage.write_atomic(lease_uri(storage, log_dir), _thief(log_dir))

    result = compact(log_dir, steal_at_the_first_commit, storage=endpoint.storage_options())
    assert stolen == ["t-0"] and result.exit_code == 1 and not result.completed
    assert [e["kind"] for e in result.errors] == ["LeaseLost"] and "thief" in result.errors[0]["detail"]
    # t-0's commit, under way when the lease went, finished (each commit is crash-safe on its own); t-1 was not
    # committed, and no cleaner checkpoint was written after the loss
    assert len([f for f in storage.list(f"{log_dir}/t-0") if f.name.endswith(".log")]) == 2
    assert [f.name for f in storage.list(f"{log_dir}/t-1") if f.name.endswith(".log")] == \
        sorted(p.name for p in (tmp_path / "logs" / "t-1").glob("*.log"))
    assert not storage.exists(f"{log_dir}/cleaner-offset-checkpoint")
    assert storage.read(lease_uri(storage, log_dir)) == _thief(log_dir)
    assert "stopped before the end" in result.summary()


@pytest.mark.s3
def test_retention_commits_no_partition_once_the_lease_is_lost(s3_bucket, tmp_path: Path) -> None:
    from jobs.logdir.lock import lease_uri
    from jobs.logdir.retention import STEP_WRITE_LOG_START

    endpoint, bucket = s3_bucket
    build_retention_dir(tmp_path / "logs")
    log_dir = f"s3://{bucket}/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    _upload(storage, log_dir, tmp_path / "logs")

    def steal_before_the_log_start_write(p: str, step: str) -> None:
        if step == STEP_WRITE_LOG_START:
            storage.write_atomic(lease_uri(storage, log_dir), _thief(log_dir))

    result = retain(log_dir, steal_before_the_log_start_write, storage=endpoint.storage_options())
    assert result.exit_code == 1 and not result.completed
    assert [e["kind"] for e in result.errors] == ["LeaseLost"]
    assert not [f for f in storage.list(log_dir, recursive=True) if f.name.endswith(".deleted")]
    for p in range(3):
        assert len([f for f in storage.list(f"{log_dir}/r-{p}") if f.name.endswith(".log")]) == 3


@pytest.mark.s3
def test_the_lease_is_timed_on_the_clock_seam(s3_bucket, tmp_path: Path) -> None:
    from jobs.logdir.lock import lease_uri

    endpoint, bucket = s3_bucket
    build(tmp_path / "logs" / "t-0")
    log_dir = f"s3://{bucket}/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    _upload(storage, log_dir, tmp_path / "logs")
    clock = 4_000_000_000_000  # an instant no wall clock shows
    leases = []

    def look(p: str, step: str) -> None:
        leases.append(json.loads(storage.read(lease_uri(storage, log_dir))))

    result = api.compact(log_dir, api.CompactOptions(overrides=SETTINGS, storage=endpoint.storage_options(),
                                                     lease_ttl="90s"),
                         now=NOW, seams=api.Seams(fault=look, runner=api.InProcessTasks(), clock=lambda: clock))
    assert result.exit_code == 0 and leases
    assert leases[0]["acquired_ms"] == clock and leases[0]["expires_ms"] == clock + 90_000
