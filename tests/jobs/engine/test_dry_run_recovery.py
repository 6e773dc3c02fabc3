"""What a dry run of ``segjobs compact`` says over a log dir a crashed run left mid-commit.

A real run recovers first (under the lock), then plans; a dry run takes no lock and changes nothing, so it plans
recovery (reads only), reports it, and plans each partition on the files recovery would leave (read where they are
now): its decisions and counts are then exactly the real run's. With ``--plan`` the partitions where recovery
would rename files are "pending recovery" and left out of the counts (a plan records files by name). One log dir
holds one partition per commit step, each interrupted before its step (see :mod:`tests.support.compaction_faults`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.compaction_faults import (
    CONFIG,
    NOW,
    TOPIC,
    build_partition,
    compact_with_fault,
    fault_at_every_step,
    recording,
)

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


def test_a_dry_run_plans_on_the_files_recovery_leaves(crashed, tmp_path):
    log_dir = _copy(crashed, tmp_path)
    dry, real = _dry_then_real(log_dir, crashed["config"])
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


def test_with_plan_partitions_recovery_renames_in_are_pending(crashed, tmp_path):
    log_dir = _copy(crashed, tmp_path)
    dry, real = _dry_then_real(log_dir, crashed["config"], "--plan", str(tmp_path / "plan.json"))
    first = {e["partition"]: e for e in dry["recovery_first"] if e["partition"] is not None}
    pending = {n for n, e in first.items() if e["planned"] == "pending recovery"}
    # pending: exactly the partitions whose recovery makes a .swap file live (the swaps passed their commit point)
    assert pending == {n for n, e in first.items() if any(a.startswith("complete-swap ") for a in e["actions"])}
    assert pending and len(pending) < len(first)
    for name in pending:
        assert any(w.startswith(f"{name}: pending recovery") and "`segjobs recover`" in w for w in dry["warnings"])
    _same_decisions(dry, real, set(first) - pending)


def test_a_dry_run_over_a_clean_log_dir_reports_no_recovery(crashed, tmp_path):
    build_partition(tmp_path / "logs" / f"{TOPIC}-0")
    assert _compact(tmp_path / "logs", crashed["config"], "--dry-run", "--report", str(tmp_path / "r.json")) == 0
    assert "recovery_first" not in json.loads((tmp_path / "r.json").read_text())
