"""Whole-log tasks packed by bytes (jobs.engine.frame.packed_tasks): results in order, failures per item, progress that
is never silent for long; and segjobs inspect over many small partitions, packed, with its progress lines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jobs import api
from jobs.engine.frame.packed_tasks import StageProgress, failed_scan, read_cost, run_packed
from jobs.engine.runtime.seams import Seams
from jobs.engine.runtime.tasks import InProcessTasks, TaskFailure
from jobs.engine.scan import ScanItem
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.layout import list_log_dir
from segment_io.spark.packing import SPLIT_OPEN_COST_BYTES
from segment_io.storage import LocalStorage

NOW = "2026-11-22T02:00:00Z"


class Lines:
    """A progress callable that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, message: str, **fields: Any) -> None:
        self.lines.append((message, fields))


def square_or_fail(n: int) -> int:
    if n == 13:
        raise ValueError("thirteen")
    return n * n


def test_run_packed_returns_every_result_in_order_packing_small_items_into_few_tasks() -> None:
    items = list(range(40))
    costs = [1000] * 40
    runner = InProcessTasks(parallelism=2)
    lines = Lines()
    got = run_packed(runner, square_or_fail, items, costs, description="squares",
                     progress=StageProgress(lines, "squaring", costs, "test.progress", every_s=60),
                     on_failure=lambda item, failure: -item)
    assert got == [-13 if n == 13 else n * n for n in items]  # the failure stays with its item
    assert runner.calls < 10  # bins of many small items, not a task each
    assert runner.descriptions == ["squares"]
    # the last bin's results always make a line, whatever the interval
    assert lines.lines[-1][0] == "squaring: 40 of 40 partition(s) done, 0.0 of 0.0 MB"
    assert lines.lines[-1][1] == {"event": "test.progress", "done": 40, "of": 40,
                                  "seconds": lines.lines[-1][1]["seconds"]}


#: a task's length: far above the progress interval (0.1 s), so that a busy machine cannot make this test fail
TASK_S = 1.0


def slow(n: int) -> int:
    time.sleep(TASK_S)
    return n


def test_a_stage_whose_results_take_long_says_it_is_still_running() -> None:
    lines = Lines()
    costs = [SPLIT_OPEN_COST_BYTES * 20] * 2  # large: a task each
    got = run_packed(InProcessTasks(), slow, [1, 2], costs, description="slow",
                     progress=StageProgress(lines, "waiting", costs, "test.progress", every_s=0.1),
                     on_failure=lambda item, failure: 0)
    assert got == [1, 2]
    texts = [text for text, _ in lines.lines]
    still = [t for t in texts if "still running after" in t]
    assert still and still[0].startswith("waiting: 0 of 2 partition(s) done")
    assert texts[-1].startswith("waiting: 2 of 2 partition(s) done")
    # never silent for much longer than the interval: no gap of a whole task's length between lines
    stamps = [fields["seconds"] for _, fields in lines.lines]
    assert max(b - a for a, b in zip([0.0, *stamps], stamps)) < 0.9 * TASK_S


def test_a_partition_whose_scan_task_died_is_unreadable_not_lost(tmp_path: Path) -> None:
    generate_log_dir(GenerateSpec(topics=("t",), partitions=1, records=20), tmp_path)
    listing = list_log_dir(LocalStorage(), str(tmp_path)).partitions[("t", 0)]
    item = ScanItem(LocalStorage(), listing, "transactions", None, None, 0, 0, None)
    scan = failed_scan(item, TaskFailure("TaskDied", "Python worker exited unexpectedly"))
    assert (scan.topic, scan.partition, scan.state) == ("t", 0, None)
    assert scan.error is not None and (scan.error.kind, scan.error.detail) == (
        "TaskDied", "Python worker exited unexpectedly")
    assert read_cost(listing) == sum(s.log.size for s in listing.segments) + SPLIT_OPEN_COST_BYTES * len(
        listing.segments)


@pytest.fixture(scope="module")
def many_small_partitions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("many-small")
    generate_log_dir(GenerateSpec(topics=("a", "b"), partitions=30, records=40, segment_bytes=2000,
                                  transactional_share=0.2, aborted_share=0.5), root)
    return root


def test_inspect_packs_many_small_partitions_into_few_tasks_and_reports_progress(many_small_partitions: Path) -> None:
    runner = InProcessTasks(parallelism=2)
    lines: list[Any] = []
    options = api.InspectOptions(exact=True, progress=lines.append)
    result = api.inspect(many_small_partitions, options, now=NOW, seams=Seams(runner=runner))
    assert result.exit_code == 0 and len(result.partitions) == 60
    # one pass of scans and one of inspection tasks: a few bins each, not 60 tasks each
    assert runner.calls <= 12
    events = [line.event.event for line in lines]
    assert events.count("scan.progress") >= 1 and events.count("inspect.progress") >= 1
    last_scan = [str(line) for line in lines if line.event.event == "scan.progress"][-1]
    assert "scanning: 60 of 60 partition(s) done" in last_scan

