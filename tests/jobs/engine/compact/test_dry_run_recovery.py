"""What a dry run of ``segjobs compact`` says over a log dir a crashed run left mid-commit.

A real run recovers first (under the lock), then plans; a dry run takes no lock and changes nothing, so it plans
recovery (reads only), reports it, and plans each partition on the files recovery would leave (read where they are
now): its decisions and counts are then exactly the real run's. With ``--plan`` the partitions where recovery
would rename files are "pending recovery" and left out of the counts (a plan records files by name). One log dir
holds one partition per commit step, each interrupted before its step (see :mod:`tests.support.compaction_faults`);
on S3 the partitions whose intent recovery rolls forward (copying staged objects) are pending.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.runtime.seams import FaultHook
from segment_io.storage import Storage, open_storage
from tests.support.compaction_faults import (
    CONFIG,
    NOW,
    TOPIC,
    build_partition,
    compact_with_fault,
    fault_at_every_step,
    recording,
)
from tests.support.retention import FAULT_CONFIG, Crash, build_fault_dir, fault_steps, run_retain_job, state_of
from tests.support.retention import NOW as RETAIN_NOW
from tests.support.s3_objects import PREFIX, contents, put_objects, replace_all_objects

#: what differs between a dry run's entry and the real run's for the same decisions
_RUN_ONLY = ("action", "task_seconds")
_DONE = {"would compact": "compacted", "would leave unchanged": "unchanged"}


def _tree(*dirs: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for d in dirs for p in d.rglob("*") if p.is_file() and p.name != ".lock"}


def _compact(log_dir: Path, config: Path, *extra: str) -> int:
    return main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet", *extra])


@pytest.fixture(scope="module")
def crashed(spark, tmp_path_factory):
    """A log dir (and its work dir) whose partition ``t-i`` was interrupted before the i-th step of its commit."""
    root = tmp_path_factory.mktemp("dry-recovery")
    config = root / "t.toml"
    config.write_text(CONFIG)
    build_partition(root / "ref" / f"{TOPIC}-0")
    steps: list[str] = []
    base = ["--config", str(config), "--now", NOW, "--quiet"]
    assert compact_with_fault(["--log-dir", str(root / "ref"), *base], recording(steps)) == 0
    log_dir = root / "logs"
    for i in range(len(steps)):
        build_partition(log_dir / f"{TOPIC}-{i}")
    assert compact_with_fault(["--log-dir", str(log_dir), *base], fault_at_every_step(steps)) == 1
    return {"root": root, "config": config, "log_dir": log_dir, "steps": steps}


def _copy(crashed: dict, tmp_path: Path) -> Path:
    """A copy of the crashed log dir and its work dir (file times kept)."""
    shutil.copytree(crashed["log_dir"], tmp_path / "logs")
    shutil.copytree(crashed["root"] / "logs.segjobs", tmp_path / "logs.segjobs")
    return tmp_path / "logs"


def _dry_then_real(log_dir: Path, config: Path, *extra: str) -> tuple[dict, dict]:
    """The reports of a dry run (``extra`` options), which must change no file, then of the real run."""
    work = log_dir.parent / "logs.segjobs"
    before = _tree(log_dir, work)
    assert _compact(log_dir, config, "--dry-run", "--report", str(log_dir.parent / "dry.json"), *extra) == 0
    assert _tree(log_dir, work) == before, "a dry run changed files"
    assert _compact(log_dir, config, "--report", str(log_dir.parent / "real.json")) == 0
    return (json.loads((log_dir.parent / "dry.json").read_text()),
            json.loads((log_dir.parent / "real.json").read_text()))


def _same_decisions(dry: dict, real: dict, names: set[str]) -> None:
    """The dry run's entries are those of ``names``, each exactly the real run's decisions and counts."""
    real_by = {f"{e['topic']}-{e['partition']}": e for e in real["partitions"]}
    dry_by = {f"{e['topic']}-{e['partition']}": e for e in dry["partitions"]}
    assert sorted(dry_by) == sorted(names)
    for name, entry in dry_by.items():
        want = real_by[name]
        assert _DONE[entry["action"]] == want["action"], name
        assert {k: v for k, v in entry.items() if k not in _RUN_ONLY} == \
            {k: v for k, v in want.items() if k not in _RUN_ONLY}, name
    for total in ("records_removed", "bytes_removed", "selected"):
        assert dry["totals"][total] == sum(real_by[n][total] for n in names), total
    assert dry["totals"]["partitions"] == len(names)


def test_a_dry_run_plans_on_the_files_recovery_leaves(crashed, tmp_path, capsys):
    log_dir = _copy(crashed, tmp_path)
    dry, real = _dry_then_real(log_dir, crashed["config"])
    assert (f"recovery first: a real run first settles the unfinished commits of {len(crashed['steps'])} "
            f"partition(s); planned here on the files recovery leaves: ") in capsys.readouterr().out
    names = {f"{TOPIC}-{i}" for i in range(len(crashed["steps"]))}
    # every partition was left mid-commit: the dry run says what recovery would do in each, first
    first = {e["partition"]: e for e in dry["recovery_first"] if e["partition"] is not None}
    assert sorted(first) == sorted(names)
    assert {e["planned"] for e in first.values()} == {"after recovery"}
    # the states cover the loader's rules both ways: a replace rolled back and one completed (swaps made live)
    actions = {a.split(" ")[0] for e in first.values() for a in e["actions"]}
    assert {"drop-cleaned", "drop-swap", "drop-original", "complete-swap", "purge-replaced",
            "remove-intent"} <= actions
    _same_decisions(dry, real, names)
    assert dry["totals"] == {k: v for k, v in real["totals"].items() if k != "recovered_partitions"}


def test_with_plan_partitions_recovery_renames_in_are_pending(crashed, tmp_path, capsys):
    log_dir = _copy(crashed, tmp_path)
    plan = str(tmp_path / "plan.json")
    assert _compact(log_dir, crashed["config"], "--dry-run", "--plan", plan,
                    "--report", str(tmp_path / "dry.json")) == 0
    assert "PENDING RECOVERY, left out of these counts (run `segjobs recover` first" in capsys.readouterr().out
    dry = json.loads((tmp_path / "dry.json").read_text())
    # the plan does not hold the pending partitions: --apply (which recovers first) refuses it, nothing compacted
    assert main(["compact", "--log-dir", str(log_dir), "--quiet", "--apply", plan]) == 2
    assert "the partition is new since the plan was made" in capsys.readouterr().err
    assert _compact(log_dir, crashed["config"], "--report", str(tmp_path / "real.json")) == 0
    real = json.loads((tmp_path / "real.json").read_text())
    first = {e["partition"]: e for e in dry["recovery_first"] if e["partition"] is not None}
    pending = {n for n, e in first.items() if e["planned"] == "pending recovery"}
    # pending: exactly the partitions whose recovery makes a .swap file live (the swaps passed their commit point)
    assert pending == {n for n, e in first.items() if any(a.startswith("complete-swap ") for a in e["actions"])}
    assert pending and len(pending) < len(first)
    for name in pending:
        assert any(w.startswith(f"{name}: pending recovery") and "--apply refuses this plan" in w
                   for w in dry["warnings"])
    _same_decisions(dry, real, set(first) - pending)


def test_a_dry_run_over_a_clean_log_dir_reports_no_recovery(crashed, tmp_path):
    build_partition(tmp_path / "logs" / f"{TOPIC}-0")
    assert _compact(tmp_path / "logs", crashed["config"], "--dry-run", "--report", str(tmp_path / "r.json")) == 0
    assert "recovery_first" not in json.loads((tmp_path / "r.json").read_text())


@pytest.mark.scenario
def test_on_s3_a_rolled_forward_intent_is_pending_and_the_rest_exact(spark, s3_bucket_env, tmp_path):
    endpoint, bucket = s3_bucket_env
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    log_dir = f"s3://{bucket}/{PREFIX}"

    def run(*extra: str, fault: FaultHook | None = None) -> int:
        argv = ["--log-dir", log_dir, "--s3-endpoint", endpoint.endpoint_url, "--now", NOW, "--config", str(config),
                "--quiet", *extra]
        return main(["compact", *argv]) if fault is None else compact_with_fault(argv, fault)

    build_partition(tmp_path / "ref" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "ref")
    steps: list[str] = []
    assert run(fault=recording(steps)) == 0
    for i in range(len(steps)):
        build_partition(tmp_path / "many" / f"{TOPIC}-{i}")
    replace_all_objects(endpoint, bucket, tmp_path / "many")
    assert run(fault=fault_at_every_step(steps)) == 1

    before = contents(endpoint, bucket, "")
    assert run("--dry-run", "--report", str(tmp_path / "dry.json")) == 0
    assert contents(endpoint, bucket, "") == before, "a dry run changed objects"
    assert run("--report", str(tmp_path / "real.json")) == 0
    dry = json.loads((tmp_path / "dry.json").read_text())
    real = json.loads((tmp_path / "real.json").read_text())
    first = {e["partition"]: e for e in dry["recovery_first"] if e["partition"] is not None}
    pending = {n for n, e in first.items() if e["planned"] == "pending recovery"}
    # the intent is the commit point: from it on recovery copies staged objects to their live names
    assert pending == {n for n, e in first.items() if any(a.startswith("copy-new ") for a in e["actions"])}
    assert pending and f"{TOPIC}-0" not in pending
    _same_decisions(dry, real, {f"{TOPIC}-{i}" for i in range(len(steps))} - pending)


def _crash_before(partition: str, i: int) -> FaultHook:
    """A fault hook that kills the run before the i-th step of ``partition``'s commit."""
    seen: list[str] = []

    def crash_at(p: str, step: str) -> None:
        if p == partition:
            seen.append(step)
            if len(seen) == i + 1:
                raise Crash(f"{p}: {step}")

    return crash_at


@pytest.mark.slow
def test_retain_dry_run_at_every_crash_point_decides_as_the_real_run(tmp_path):
    """Retention's commit (delete intent, renames to .deleted, ledger, purge) crashed before each of its steps:
    the dry run, planned on what recovery leaves (a delete intent rolled forward), decides exactly as the real run
    that recovers first. Tasks run in this process (no Spark)."""

    def local(name: str) -> tuple[Storage, str, None]:
        root = tmp_path / name / "logs"
        root.mkdir(parents=True)
        return open_storage(str(root)), str(root), None

    steps, _ = fault_steps(local, tmp_path)
    actions: set[str] = set()
    for i, step in enumerate(steps["t-0"]):
        storage, log_dir, _ = local(f"crash{i}")
        build_fault_dir(storage, log_dir, tmp_path / f"crash{i}")
        with pytest.raises(Crash):
            run_retain_job(log_dir, None, _crash_before("t-0", i))
        before = state_of(storage, log_dir)
        dry = api.retain(log_dir, api.RetainOptions(config=FAULT_CONFIG, progress=lambda line: None, dry_run=True),
                         now=RETAIN_NOW, seams=api.Seams(runner=api.InProcessTasks()))
        assert state_of(storage, log_dir) == before, step
        real = run_retain_job(log_dir, None)
        assert real.exit_code == 0 and dry.exit_code == 0, step

        def decisions(result: api.RetainResult) -> dict[str, tuple]:
            return {f"{p.topic}-{p.partition}": (p.action, p.segments_deleted, p.bytes_removed, p.log_start_offset,
                                                 p.rules) for p in result.partitions}

        assert decisions(dry) == decisions(real), step
        first = [e for e in dry.report.recovery_first if e["partition"] == "t-0"]
        assert [e["planned"] for e in first] == (["after recovery"] if real.recovered_partitions else []), step
        actions.update(a.split(" ")[0] for e in first for a in e["actions"])
    # the delete intent rolled forward at several points: segments renamed to .deleted, the ledger, the intent
    assert {"finish-delete", "record-deleted", "remove-intent"} <= actions


def test_a_partition_recovery_would_stop_in_is_reported_as_the_real_run_reports_it(tmp_path):
    """An unreadable intent: recovery stops there, and the real run leaves the partition untouched (an error);
    the dry run says so too, and plans the other partition as usual. Tasks run in this process (no Spark)."""
    log_dir = tmp_path / "logs"
    for i in range(2):
        build_partition(log_dir / f"{TOPIC}-{i}")
    intent = tmp_path / "logs.segjobs" / "commit" / f"{TOPIC}-0" / "replace.json"
    intent.parent.mkdir(parents=True)
    intent.write_text("{not json")
    (tmp_path / "t.toml").write_text(CONFIG)

    def run(dry_run: bool) -> api.CompactResult:
        options = api.CompactOptions(config=str(tmp_path / "t.toml"), progress=lambda line: None, dry_run=dry_run)
        return api.compact(log_dir, options, now=int(NOW), seams=api.Seams(runner=api.InProcessTasks()))

    before = _tree(log_dir, tmp_path / "logs.segjobs")
    dry = run(True)
    assert _tree(log_dir, tmp_path / "logs.segjobs") == before
    real = run(False)
    assert dry.exit_code == real.exit_code == 1
    assert [(e["partition"], e["planned"]) for e in dry.report.recovery_first] == [(f"{TOPIC}-0", "not recovered")]
    assert {p.partition: p.action for p in dry.partitions} == {0: "error", 1: "would compact"}
    assert {p.partition: p.action for p in real.partitions} == {0: "error", 1: "compacted"}
    assert dry.partitions[1].records_removed == real.partitions[1].records_removed > 0
