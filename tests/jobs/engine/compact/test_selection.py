"""The forecasts of whether a compaction run will read partitions in full (and so need Spark), made from the
listing and the checkpoints alone: :func:`jobs.engine.compact.selection.may_read_in_full`, and which small partitions
the first scan reads in full at once (:func:`jobs.engine.compact.selection.read_at_first_scan`), with the run that
does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.engine.compact import selection
from jobs.engine.compact.selection import may_read_in_full, read_at_first_scan
from jobs.engine.runtime.tasks import InProcessTasks
from jobs.rules.config import ConfigSet
from jobs.rules.scope import parse_scope
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, list_log_dir
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, write_log


def _partition(log_dir: Path, topic: str, partition: int, closed: int) -> None:
    """``closed`` closed segments of two records each, then an active one (bases 0, 2, 4, ...)."""
    log = LogBuilder(topic, partition)
    for s in range(closed):
        log.batch([rec(f"k{s}", "a"), rec(f"k{s}", "b")]).roll()
    log.batch([rec("k", "active")])
    write_log(log.table(), log_dir / f"{topic}-{partition}")


def _forecast(log_dir: Path, cleaner: dict, policy: str = "compact", topics: tuple[str, ...] = (),
              partitions: tuple[str, ...] = (), *, first: bool = False, settings: tuple[str, ...] = ()) -> bool | set:
    listing = list_log_dir(open_storage(str(log_dir)), str(log_dir))
    configs = ConfigSet().with_overrides([f"*:cleanup.policy={policy}", *settings])
    checkpoints = {CLEANER_OFFSET_CHECKPOINT: cleaner, LOG_START_OFFSET_CHECKPOINT: {}}
    forecast = read_at_first_scan if first else may_read_in_full
    return forecast(listing, checkpoints, configs, parse_scope(list(topics), list(partitions)))


def test_clean_partitions_forecast_no_full_read(tmp_path: Path) -> None:
    for p in range(3):
        _partition(tmp_path, "t", p, closed=2)
    clean = {("t", p): 4 for p in range(3)}  # each cleaner checkpoint at its active segment's base
    assert not _forecast(tmp_path, clean)
    # one partition with bytes past its checkpoint, or none at all: it may be due
    assert _forecast(tmp_path, {**clean, ("t", 1): 2})
    assert _forecast(tmp_path, {("t", 0): 4, ("t", 2): 4})


def test_what_is_never_read_in_full_forecasts_nothing(tmp_path: Path) -> None:
    _partition(tmp_path, "t", 0, closed=0)  # the active segment alone
    _partition(tmp_path, "u", 0, closed=2)
    assert not _forecast(tmp_path, {("u", 0): 4})
    assert not _forecast(tmp_path, {}, policy="delete")  # not compacted
    assert not _forecast(tmp_path, {}, topics=("t",))  # the dirty partition is out of scope


def test_compact_delete_and_requested_partitions_are_read_in_full(tmp_path: Path) -> None:
    _partition(tmp_path, "u", 0, closed=2)
    assert _forecast(tmp_path, {("u", 0): 4}, policy="compact,delete")  # retention runs on the full scan
    assert _forecast(tmp_path, {("u", 0): 4}, partitions=("u-0",))  # requested: selected when it has bytes


# --------------------------------------------------------------------------------------------------
# Small partitions that may be due: read in full by the first scan
# --------------------------------------------------------------------------------------------------


def test_the_first_scan_reads_in_full_the_small_partitions_that_may_be_due(tmp_path: Path, monkeypatch) -> None:
    for p in range(4):
        _partition(tmp_path, "t", p, closed=2)
    # t-0 never cleaned; t-1 dirty past its checkpoint (half its closed bytes); t-2 clean; t-3 a sliver dirty
    cleaner = {("t", 1): 2, ("t", 2): 4, ("t", 3): 2}
    assert _forecast(tmp_path, cleaner, first=True) == {("t", 0), ("t", 1), ("t", 3)}
    # t-3's dirty half is below a min.cleanable.dirty.ratio of 0.9; a finite max.compaction.lag.ms may select it
    assert _forecast(tmp_path, cleaner, first=True, settings=("*:min.cleanable.dirty.ratio=0.9",)) == {("t", 0)}
    assert _forecast(tmp_path, cleaner, first=True, settings=("*:min.cleanable.dirty.ratio=0.9",
                                                              "*:max.compaction.lag.ms=1h")) == {("t", 0), ("t", 1),
                                                                                                  ("t", 3)}
    assert _forecast(tmp_path, cleaner, policy="delete", first=True) == set()
    assert _forecast(tmp_path, cleaner, first=True, partitions=("t-2",)) == {("t", 2)}  # requested
    size = sum(f.stat().st_size for f in (tmp_path / "t-0").glob("*.log"))
    monkeypatch.setattr(selection, "SMALL_PARTITION_BYTES", size - 1)  # none small enough
    assert _forecast(tmp_path, cleaner, first=True) == set()
    monkeypatch.setattr(selection, "SMALL_PARTITION_BYTES", size)
    monkeypatch.setattr(selection, "FIRST_SCAN_BUDGET_BYTES", size * 2)  # room for the first two in order
    assert _forecast(tmp_path, cleaner, first=True) == {("t", 0), ("t", 1)}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    from segment_io.generate import GenerateSpec, generate_log_dir

    root = tmp_path_factory.mktemp("first-scan")
    spec = GenerateSpec(topics=("orders", "txns"), partitions=3, records=400, segment_bytes=4 << 10,
                        batch_records=8, superseded_share=0.5, tombstone_share=0.05, transactional_share=0.3,
                        aborted_share=0.5, seed=11)
    generate_log_dir(spec, str(root / "logs"))
    return root / "logs"


def _files(d: Path) -> dict[str, bytes]:
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(d.rglob("*")) if f.is_file()}


def _entries(report) -> list[dict]:
    """The report's partition entries without the times they took."""
    return [{k: v for k, v in e.items() if "seconds" not in k} for e in report.partitions]


def _compact_a_copy(generated: Path, logs: Path, exit_code: int = 0) -> tuple[Path, api.CompactResult, InProcessTasks,
                                                                              list[str]]:
    """``generated`` copied to ``logs`` and compacted in this process at the data's next day: the copy, the result,
    the runner and the progress lines."""
    from segment_io.generate import GenerateSpec

    spec = GenerateSpec()
    shutil.copytree(generated, logs)
    runner = InProcessTasks()
    lines: list[str] = []
    result = api.compact(logs, api.CompactOptions(overrides=("*:cleanup.policy=compact",), progress=lines.append),
                         now=spec.start_ms + spec.span_ms + 24 * 3600 * 1000, seams=api.Seams(runner=runner))
    assert result.exit_code == exit_code, lines
    if exit_code == 0:
        assert result.partitions_compacted == 6
    return logs, result, runner, lines


def _assert_same_outcome(logs_a: Path, result_a: api.CompactResult, logs_b: Path, result_b: api.CompactResult) -> None:
    """Both runs wrote the same bytes and reported the same for every partition."""
    assert _files(logs_a) == _files(logs_b)
    assert json.dumps(_entries(result_a.report), sort_keys=True, default=str) == \
        json.dumps(_entries(result_b.report), sort_keys=True, default=str)


@pytest.mark.slow
def test_a_partition_read_by_the_first_scan_is_compacted_exactly_as_one_read_by_the_stage(
        generated: Path, tmp_path: Path, monkeypatch) -> None:
    runs = {}
    for name, small in (("first", selection.SMALL_PARTITION_BYTES), ("stage", 0)):
        monkeypatch.setattr(selection, "SMALL_PARTITION_BYTES", small)
        runs[name] = _compact_a_copy(generated, tmp_path / name / "logs")
    (first, r1, run1, lines1), (stage, r2, run2, _) = runs["first"], runs["stage"]
    _assert_same_outcome(first, r1, stage, r2)
    # the first run read them all at once, and had no stage to read them again
    assert any("6 small one(s) that may be due with their transaction state" in line for line in lines1)
    assert not any(d and "transaction state" in d for d in run1.descriptions)
    assert any(d and "read the transaction state of 6 partition(s)" in d for d in run2.descriptions)


@pytest.mark.slow
def test_transaction_scans_on_the_driver_threads_compact_exactly_as_the_stage_and_keep_a_failure_to_its_partition(
        generated: Path, tmp_path: Path, monkeypatch) -> None:
    from jobs.engine.frame import job as frame_job
    from jobs.engine.scan import ScanItem

    monkeypatch.setattr(selection, "SMALL_PARTITION_BYTES", 0)  # every partition that may be due is read later
    runs = {}
    for name, threads in (("stage", 0), ("driver", 2)):
        monkeypatch.setattr(frame_job, "_driver_read_threads", lambda *_, n=threads: n)
        runs[name] = _compact_a_copy(generated, tmp_path / name / "logs")
    (stage, r1, run1, _), (driver, r2, run2, lines2) = runs["stage"], runs["driver"]
    _assert_same_outcome(stage, r1, driver, r2)
    assert any(d and "read the transaction state of 6 partition(s)" in d for d in run1.descriptions)
    assert not any(d and "transaction state" in d for d in run2.descriptions)
    assert any("for their transaction state on the driver" in line for line in lines2)

    # a scan that raises on the driver's threads fails its own partition only, as a failed task would
    real_scan = ScanItem.scan

    def scan(item: ScanItem):
        if item.depth == "transactions" and (item.listing.topic, item.listing.partition) == ("orders", 1):
            raise OSError("disk gone")
        return real_scan(item)

    monkeypatch.setattr(ScanItem, "scan", scan)
    monkeypatch.setattr(frame_job, "_driver_read_threads", lambda *_: 2)
    logs, result, _, lines = _compact_a_copy(generated, tmp_path / "failing" / "logs", exit_code=1)
    assert result.partitions_compacted == 5
    assert any("for their transaction state on the driver" in line for line in lines)
    assert any("orders-1: UNREADABLE, left untouched" in line and "the scan on the driver failed" in line
               and "disk gone" in line for line in lines)
    assert _files(logs / "orders-1") == _files(generated / "orders-1")
