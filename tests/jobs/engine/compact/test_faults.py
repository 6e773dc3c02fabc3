"""Fault injection at the job level, on local disk: the compaction job's commit is interrupted at every step
of ``replace_segments``; ``segjobs recover`` and a fresh ``segjobs compact`` then leave every partition
exactly as a run without a fault does, and the kafka-python oracle sees nothing lost or duplicated at
any point after recovery.

To keep this to three job runs, one log dir holds one copy of the same partition per commit step, and the
fault hook (``Seams.fault``, passed to the job by :func:`compact_with_fault`; the driver hands it to the
committer's ``replace_segments``) interrupts partition ``t-i``'s replace at the i-th step, raising a
:class:`SegjobsError` - which the driver treats like any failure of that partition's commit: it stops there,
leaves the files as they are, does not advance that partition's checkpoint, and goes on with the next
partition. One further test kills the whole run (an exception the driver does not catch) to check the lock is
released and no checkpoint is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.runtime.seams import FaultHook
from segment_io.storage.local import temp_name
from tests.support.compaction_faults import (
    CONFIG,
    NOW,
    TOPIC,
    HardCrash,
    build_partition,
    check_partition,
    compact_with_fault,
    fault_at_every_step,
    live_logs,
    recording,
    transient,
)
from tests.support.replay import read_segments

# --------------------------------------------------------------------------------------------------
# Local disk
# --------------------------------------------------------------------------------------------------


def _read_tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file() and p.name != ".lock"}


def _compact(log_dir: Path, config: Path, *extra: str, fault: FaultHook | None = None, strategy: str = "auto") -> int:
    argv = ["--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet", "--strategy", strategy,
            *extra]
    return main(["compact", *argv]) if fault is None else compact_with_fault(argv, fault)


# Every test runs with the default strategy (memory for these small partitions) and with external-sort, whose
# staged groups go through the same commit.
@pytest.fixture(scope="module", params=["auto", "external-sort"])
def reference(spark, tmp_path_factory, request):
    """One partition compacted without a fault: its source logs, result logs and the commit's steps."""
    strategy = request.param
    root = tmp_path_factory.mktemp("faults-ref")
    config = root / "t.toml"
    config.write_text(CONFIG)
    build_partition(root / "logs" / f"{TOPIC}-0")
    source = live_logs(_read_tree(root / "logs"), f"{TOPIC}-0")
    steps: list[str] = []
    assert _compact(root / "logs", config, fault=recording(steps), strategy=strategy) == 0
    result = live_logs(_read_tree(root / "logs"), f"{TOPIC}-0")
    assert result != source and len(result) == 2  # one merged segment plus the active one
    # What a partition whose replace recovery completed becomes on the next run: its checkpoint was not
    # written, so the next run cleans the result once more at the same --now.
    shutil.copytree(root / "logs", root / "again")
    (root / "again" / "cleaner-offset-checkpoint").unlink()
    assert _compact(root / "again", config, strategy=strategy) == 0
    again = live_logs(_read_tree(root / "again"), f"{TOPIC}-0")
    return {"root": root, "config": config, "source": source, "result": result, "again": again, "steps": steps,
            "strategy": strategy}


def test_cleaning_the_result_again_at_the_same_now_stamps_only_the_emptied_transactions_marker(reference):
    # The first clean removes the aborted data and, as Kafka's cleaner does, leaves its abort marker unstamped: the
    # clean after it (here a forced re-clean at the same --now) stamps the marker's delete horizon, nothing else.
    first, again = read_segments(reference["result"]), read_segments(reference["again"])
    assert [b.base_offset for b in again] == [b.base_offset for b in first]
    assert [(b.base_offset, b.control) for a, b in zip(first, again) if a.raw != b.raw] == [(3, True)]
    (marker_before,), (marker_after,) = [b for b in first if b.control], [b for b in again if b.control]
    assert marker_before.delete_horizon_ms is None and marker_after.delete_horizon_ms is not None
    assert marker_after.records == marker_before.records


def test_the_reference_commit_has_every_step_kind(reference):
    kinds = {s.split(":")[0] for s in reference["steps"]}
    assert kinds == {"write-intent", "cleaned-to-swap", "old-to-deleted", "swap-to-live", "purge-old",
                     "remove-intent"}
    # both old segments are replaced: each of their files goes to .deleted
    assert sum(s.startswith("old-to-deleted:00000000000000000000.") for s in reference["steps"]) >= 3
    assert sum(s.startswith("old-to-deleted:00000000000000000005.") for s in reference["steps"]) >= 3


def test_interrupted_at_every_step_then_recover_then_compact(reference, tmp_path, capsys):
    steps = reference["steps"]
    log_dir = tmp_path / "logs"
    for i in range(len(steps)):
        build_partition(log_dir / f"{TOPIC}-{i}")

    assert _compact(log_dir, reference["config"], "--report", str(tmp_path / "r.json"),
                    fault=fault_at_every_step(steps), strategy=reference["strategy"]) == 1
    crashed = _read_tree(log_dir)
    assert transient(crashed), "the faults left nothing to recover"

    assert main(["recover", "--log-dir", str(log_dir), "--now", NOW]) == 0
    recovered = _read_tree(log_dir)
    assert transient(recovered) == []
    outcome = {steps[i]: check_partition(recovered, f"{TOPIC}-{i}", reference["source"], reference["result"],
                                         allow_either=True) for i in range(len(steps))}
    # before the first .cleaned became .swap the replace is undone; from the last one on it is completed
    assert outcome["write-intent"] == "old"
    last_cleaned = max(i for i, s in enumerate(steps) if s.startswith("cleaned-to-swap"))
    assert all(outcome[s] == "new" for s in steps[last_cleaned + 1:])
    assert not (tmp_path / "logs.segjobs" / "commit" / f"{TOPIC}-0" / "replace.json").exists()
    capsys.readouterr()

    assert _compact(log_dir, reference["config"], strategy=reference["strategy"]) == 0
    final = _read_tree(log_dir)
    for i in range(len(steps)):
        # rolled back: cleaned afresh, like the reference; completed: the reference cleaned once more
        expected = reference["result"] if outcome[steps[i]] == "old" else reference["again"]
        assert check_partition(final, f"{TOPIC}-{i}", reference["source"], expected,
                               allow_either=False) == "new", steps[i]
    assert transient(final) == []


def test_a_killed_run_releases_the_lock_and_writes_no_checkpoint(reference, tmp_path):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    step = next(s for s in reference["steps"] if s.startswith("old-to-deleted"))

    def kill(partition: str, s: str) -> None:
        if s == step:
            raise HardCrash(s)

    with pytest.raises(HardCrash):
        _compact(log_dir, reference["config"], fault=kill, strategy=reference["strategy"])
    assert not (log_dir / "cleaner-offset-checkpoint").exists()
    assert transient(_read_tree(log_dir))
    # the next run is not locked out; its own recovery completes the replace, then it compacts
    assert _compact(log_dir, reference["config"], strategy=reference["strategy"]) == 0
    files = _read_tree(log_dir)
    assert check_partition(files, f"{TOPIC}-0", reference["source"], reference["again"], allow_either=False) == "new"
    assert (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()[2:] == [f"{TOPIC} 0 8"]


def test_a_late_and_a_killed_attempts_staging_is_swept_at_the_end_of_the_run(reference, tmp_path):
    """On local disk tasks stage in the work dir's private staging under names that are not their run's, and the
    commit renames the accepted attempt's files into the partition. An attempt that outlived its task (on an
    executor taken for lost, or a speculative copy that lost) may stage its copy again after that rename, and a
    killed attempt leaves its temporary file: the run deletes both before it ends, under its lock, as it deletes
    a late attempt's staged objects on S3, and its staging directories go with them."""
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    staging = tmp_path / "logs.segjobs" / "staging" / f"{TOPIC}-0"
    late: list[Path] = []

    def fault(partition: str, step: str) -> None:
        if step.startswith("swap-to-live:") and not late:  # the accepted attempt's files are out of the staging
            name = step.split(":", 1)[1]
            staging.mkdir(parents=True, exist_ok=True)
            late.extend([staging / name, staging / temp_name(name)])
            for path in late:
                path.write_bytes(b"an attempt's copy")

    assert _compact(log_dir, reference["config"], fault=fault, strategy=reference["strategy"]) == 0
    assert late, "no late attempt staged anything"
    files = _read_tree(log_dir)
    assert check_partition(files, f"{TOPIC}-0", reference["source"], reference["result"], allow_either=False) == "new"
    assert not (tmp_path / "logs.segjobs" / "staging").exists()


def test_external_sort_commits_the_bytes_memory_commits(spark, tmp_path):
    """Both strategies stage the same files for the same commit: the results are byte-identical. (The memory
    strategy runs in Spark.)"""
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    results = []
    for strategy in ("memory", "external-sort"):
        build_partition(tmp_path / strategy / f"{TOPIC}-0")
        assert _compact(tmp_path / strategy, config, strategy=strategy, fault=recording([])) == 0
        results.append(live_logs(_read_tree(tmp_path / strategy), f"{TOPIC}-0"))
    assert results[0] == results[1]
