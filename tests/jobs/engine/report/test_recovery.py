"""What a run says it recovered after an interrupted one: per partition what was completed or rolled back, summed
(never one word per file), per topic beyond a summary's partition rows; ``segjobs recover``'s summary alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.report.recovery import recovered_text
from jobs.engine.report.run_report import human_bytes
from jobs.logdir.commit import PRIVATE_STAGING_DIR
from jobs.logdir.lock import work_uri
from jobs.logdir.recover import recover_log_dir, tally_reports
from jobs.rules.config import ConfigSet
from segment_io.storage import LocalStorage
from tests.support.compaction_faults import NOW, TOPIC, HardCrash, build_partition

CONFIG = ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact"])
STAGED = 90  #: files a crashed compaction left in one partition's private staging


def _crashed_compaction(tmp_path: Path) -> str:
    """Three partitions; a compaction killed in t-0's commit after its commit point (its swaps not yet live),
    t-1's new segments staged and never committed; and 90 more staged files of t-2."""
    for p in range(3):
        build_partition(tmp_path / "logs" / f"{TOPIC}-{p}")
    log_dir = str(tmp_path / "logs")

    def die(partition: str, step: str) -> None:
        if partition == f"{TOPIC}-0" and step.startswith("swap-to-live:"):
            raise HardCrash(step)

    with pytest.raises(HardCrash):
        api.compact(log_dir, api.CompactOptions(config=CONFIG, progress=lambda line: None), now=int(NOW),
                    seams=api.Seams(fault=die, runner=api.InProcessTasks()))
    staging = Path(work_uri(log_dir)) / PRIVATE_STAGING_DIR / f"{TOPIC}-2"
    staging.mkdir(parents=True, exist_ok=True)
    for i in range(STAGED):
        (staging / f"{i:020d}.log").write_bytes(b"s" * 100)
    return log_dir


def _expected(log_dir: str) -> str:
    """What recovery must say of the crashed compaction: t-2's staging holds the 90 files written above and,
    depending on how far its own task got before the crash, the segments it staged itself (counted from the
    files, before recovery)."""
    files = [f for f in (Path(work_uri(log_dir)) / PRIVATE_STAGING_DIR / f"{TOPIC}-2").rglob("*") if f.is_file()]
    assert len(files) >= STAGED
    return (f"{TOPIC}-0 completed a compaction commit (1 segment(s) made live, 2 replaced); "
            f"{TOPIC}-1 discarded uncommitted work (deleted 3 staged file(s), 303 B; what the run committed "
            f"before stays); "
            f"{TOPIC}-2 discarded uncommitted work (deleted {len(files)} staged file(s), "
            f"{human_bytes(sum(f.stat().st_size for f in files))}; what the run committed before stays)")


def test_a_job_says_per_partition_what_recovery_completed_or_rolled_back(tmp_path: Path) -> None:
    log_dir = _crashed_compaction(tmp_path)
    expected = _expected(log_dir)
    lines: list[str] = []
    result = api.retain(log_dir, api.RetainOptions(config=CONFIG, progress=lines.append), now=int(NOW),
                        seams=api.Seams(runner=api.InProcessTasks()))
    said = [str(line).split("] ", 1)[1] for line in lines if "recovered" in str(line)]
    assert said == [f"recovered 3 partition(s): {expected}"], lines
    assert result.recovered_partitions == 3  # t-2 counted too, whose only leftovers were in the work dir


def test_recover_sums_its_actions_per_partition_in_its_summary(tmp_path: Path, capsys) -> None:
    log_dir = _crashed_compaction(tmp_path)
    expected = _expected(log_dir)
    assert main(["recover", "--log-dir", log_dir, "--now", NOW, "--dry-run"]) == 0
    dry = capsys.readouterr().out.splitlines()[-1]
    assert main(["recover", "--log-dir", log_dir, "--now", NOW]) == 0
    real = capsys.readouterr().out.splitlines()[-1]
    assert real.startswith(f"recovered 3 of 3 partition(s) in {log_dir} ") and real.endswith(f": {expected}"), real
    assert dry.startswith("would recover 3 of 3 partition(s)") and dry.endswith(f": {expected} [dry run: nothing "
                                                                                 f"changed]"), dry


def test_beyond_the_partition_rows_recovery_is_summed_per_topic(tmp_path: Path) -> None:
    """60 partitions of two topics, each with a crashed compaction's private staging: one clause per topic."""
    storage = LocalStorage()
    log_dir = tmp_path / "logs"
    for topic, count in (("orders", 40), ("users", 20)):
        for p in range(count):
            (log_dir / f"{topic}-{p}").mkdir(parents=True)
            staging = Path(work_uri(str(log_dir))) / PRIVATE_STAGING_DIR / f"{topic}-{p}"
            staging.mkdir(parents=True)
            for base in (0, 7):
                (staging / f"{base:020d}.log").write_bytes(b"s" * 500)
    reports = recover_log_dir(storage, str(log_dir), now_ms=int(NOW))
    text = recovered_text(tally_reports(reports, str(log_dir), work_uri(str(log_dir))))
    assert text == ("60 partition(s): orders (40 partition(s)) discarded uncommitted work (deleted 80 staged file(s), "
                    "40.0 KB; what the run committed before stays); users (20 partition(s)) discarded uncommitted work "
                    "(deleted 40 staged file(s), 20.0 KB; what the run committed before stays)")


def test_the_python_api_counts_the_partitions_recover_prints(tmp_path: Path) -> None:
    """t-2's only leftovers sit in the work dir's private staging: the API's count names it as the command does."""
    log_dir = _crashed_compaction(tmp_path)
    result = api.recover(log_dir, now=int(NOW))
    assert result.partitions_recovered == 3
    assert [t.partition for t in result.tallies] == [f"{TOPIC}-0", f"{TOPIC}-1", f"{TOPIC}-2"]
