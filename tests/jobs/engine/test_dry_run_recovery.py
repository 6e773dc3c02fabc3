"""What a dry run of ``segjobs compact`` says over a log dir a crashed run left mid-commit.

A real run recovers first (under the lock), then plans; a dry run takes no lock and changes nothing, so it plans
recovery (reads only) and reports it: the partitions that recovery would only delete files in are planned on the
files recovery leaves, exactly as the real run then plans them; those where recovery would make files live under
other names are "pending recovery" and left out of the counts. One log dir holds one partition per commit step,
each interrupted before its step (see :mod:`tests.support.compaction_faults`).
"""

from __future__ import annotations

import json
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
    """A log dir whose partition ``t-i`` was interrupted before the i-th step of its commit."""
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


def test_a_dry_run_plans_on_what_recovery_leaves_and_sets_aside_what_it_cannot(crashed, capsys):
    root, config, log_dir, steps = crashed["root"], crashed["config"], crashed["log_dir"], crashed["steps"]
    work = root / "logs.segjobs"
    before = _tree(log_dir, work)
    assert _compact(log_dir, config, "--dry-run", "--report", str(root / "dry.json")) == 0
    assert _tree(log_dir, work) == before, "a dry run changed files"
    capsys.readouterr()
    assert _compact(log_dir, config, "--report", str(root / "real.json")) == 0
    dry = json.loads((root / "dry.json").read_text())
    real = json.loads((root / "real.json").read_text())

    # every partition was left mid-commit: the dry run says what recovery would do in each, first
    first = {e["partition"]: e for e in dry["recovery_first"] if e["partition"] is not None}
    assert sorted(first) == sorted(f"{TOPIC}-{i}" for i in range(len(steps)))
    assert {e["planned"] for e in first.values()} == {"after recovery", "pending recovery"}
    pending = {n for n, e in first.items() if e["planned"] == "pending recovery"}
    # pending: exactly the partitions whose recovery makes a .swap file live (the swaps passed their commit point)
    assert pending == {n for n, e in first.items() if any(a.startswith("complete-swap ") for a in e["actions"])}
    # before its first .cleaned -> .swap a replace is rolled back; once the swaps are live only deletions remain
    assert first[f"{TOPIC}-0"]["planned"] == "after recovery"
    assert first[f"{TOPIC}-{len(steps) - 1}"]["planned"] == "after recovery"
    for name in pending:
        assert any(w.startswith(f"{name}: pending recovery") and "`segjobs recover`" in w for w in dry["warnings"])

    # the others: exactly the real run's decisions and counts; the pending ones: left out of the counts
    real_by = {f"{e['topic']}-{e['partition']}": e for e in real["partitions"]}
    dry_by = {f"{e['topic']}-{e['partition']}": e for e in dry["partitions"]}
    assert sorted(dry_by) == sorted(set(real_by) - pending)
    for name, entry in dry_by.items():
        want = real_by[name]
        assert _DONE[entry["action"]] == want["action"], name
        assert {k: v for k, v in entry.items() if k not in _RUN_ONLY} == \
            {k: v for k, v in want.items() if k not in _RUN_ONLY}, name
    for total in ("records_removed", "bytes_removed", "selected"):
        assert dry["totals"][total] == sum(real_by[n][total] for n in dry_by), total
    assert dry["totals"]["partitions"] == len(dry_by)


def test_a_dry_run_over_a_clean_log_dir_reports_no_recovery(crashed, tmp_path):
    build_partition(tmp_path / "logs" / f"{TOPIC}-0")
    assert _compact(tmp_path / "logs", crashed["config"], "--dry-run", "--report", str(tmp_path / "r.json")) == 0
    assert "recovery_first" not in json.loads((tmp_path / "r.json").read_text())
