"""A small run's tasks on the driver (:class:`DriverTasks`) behave as a ``local[*]`` session's tasks do, and which
runs are small enough is decided from file sizes alone (:func:`fits_on_driver`)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from jobs.engine.runtime.tasks import (
    DRIVER_RUN_ENV,
    DRIVER_RUN_MAX_BYTES,
    DRIVER_SCAN_THREADS,
    THREADED_HEADER_SCAN_BYTES,
    DriverTasks,
    TaskFailure,
    driver_run_max_bytes,
    driver_scan_threads,
    fits_on_driver,
    map_in_driver,
    stream_bins,
)
from jobs.rules.scope import parse_scope
from segment_io.errors import ConfigError
from segment_io.layout import list_log_dir_top
from segment_io.storage import open_storage
from tests.support.s3_objects import upload


def _doubled_unless_poisoned(items: list[int]) -> list[int]:
    """A bin's task whose worker dies (the exception is not the item's own) when it meets the item 13."""
    if 13 in items:
        raise MemoryError("the Python worker ran out of memory")
    return [2 * i for i in items]


def _appended(item: list[int]) -> list[int]:
    item.append(0)  # a task that changes its input changes its own copy, as on an executor
    return item


def test_streamed_items_are_packed_into_the_bins_of_a_local_session() -> None:
    runner = DriverTasks()
    assert runner.parallelism == len(os.sched_getaffinity(0))  # local[*]'s default parallelism
    items, sizes = list(range(40)), [1 << 20] * 40
    bins = [[i for i, _ in pairs] for pairs in runner.stream_bins(_doubled_unless_poisoned, items, sizes=sizes)]
    assert bins == stream_bins(items, sizes, runner.parallelism) and len(bins) > 1


def test_a_bin_whose_task_dies_is_run_again_item_by_item() -> None:
    runner = DriverTasks(parallelism=1)
    items = [11, 12, 13, 14]
    results = dict(pair for pairs in runner.stream_bins(_doubled_unless_poisoned, items) for pair in pairs)
    assert {i: results[i] for i in (0, 1, 3)} == {0: 22, 1: 24, 3: 28}
    assert results[2] == TaskFailure("TaskDied", "the Python worker ran out of memory")


def test_tasks_get_copies_of_their_items_and_the_driver_copies_of_their_results() -> None:
    item = [1, 2]
    (result,) = DriverTasks().map(_appended, [item])
    assert item == [1, 2] and result == [1, 2, 0]


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DRIVER_RUN_ENV, raising=False)
    assert driver_run_max_bytes() == DRIVER_RUN_MAX_BYTES
    monkeypatch.setenv(DRIVER_RUN_ENV, "1MiB")
    assert driver_run_max_bytes() == 1 << 20
    monkeypatch.setenv(DRIVER_RUN_ENV, "0")
    assert driver_run_max_bytes() == 0
    monkeypatch.setenv(DRIVER_RUN_ENV, "lots")
    with pytest.raises(ConfigError, match=DRIVER_RUN_ENV):
        driver_run_max_bytes()


def _log_dir(root: Path, sizes: dict[str, list[int]]) -> Path:
    for partition, segments in sizes.items():
        (root / partition).mkdir(parents=True)
        for n, size in enumerate(segments):
            (root / partition / f"{n * 100:020d}.log").write_bytes(b"x" * size)
            (root / partition / f"{n * 100:020d}.index").write_bytes(b"i" * 4096)  # not counted: not a segment
    return root


def test_a_log_dir_fits_on_the_driver_by_the_bytes_of_its_segments_in_scope(tmp_path: Path) -> None:
    root = _log_dir(tmp_path / "logs", {"a-0": [300, 200], "a-1": [400], "b-0": [1000]})
    storage = open_storage(str(root))
    top = list_log_dir_top(storage, str(root))
    everything = parse_scope([], [])
    assert fits_on_driver(storage, top, everything, 1900)
    assert not fits_on_driver(storage, top, everything, 1899)  # the index files do not count, every segment does
    assert fits_on_driver(storage, top, parse_scope(["a"], []), 900)
    assert not fits_on_driver(storage, top, parse_scope(["a"], []), 899)
    assert fits_on_driver(storage, top, parse_scope([], ["b-0"]), 1000)


@pytest.mark.s3
def test_an_object_store_log_dir_is_never_taken_as_small(tmp_path: Path, s3_bucket) -> None:
    endpoint, bucket = s3_bucket
    local = _log_dir(tmp_path / "logs", {"a-0": [10]})
    storage = open_storage(f"s3://{bucket}/logs", endpoint.storage_options())
    upload(storage, local, f"s3://{bucket}/logs")
    top = list_log_dir_top(storage, f"s3://{bucket}/logs")
    assert list(top.partitions) == [("a", 0)]
    assert not fits_on_driver(storage, top, parse_scope([], []), 1 << 20)


def _thread_name(_: int) -> str:
    return threading.current_thread().name


def test_local_size_scans_run_in_the_calling_thread() -> None:
    many_small = [10_000] * 2000
    assert driver_scan_threads(1, "sizes", many_small) == 1
    assert driver_scan_threads(1, "sizes", [10 * THREADED_HEADER_SCAN_BYTES] * 8) == 1  # a few small reads each
    assert driver_scan_threads(1, "headers", many_small) == 1
    assert map_in_driver(_thread_name, [1, 2, 3], threads=1) == [threading.current_thread().name] * 3


def test_header_scans_of_large_local_partitions_and_every_scan_on_an_object_store_overlap_on_threads() -> None:
    mean_at_threshold = [THREADED_HEADER_SCAN_BYTES // 2, THREADED_HEADER_SCAN_BYTES * 3 // 2]
    assert driver_scan_threads(1, "headers", mean_at_threshold) == DRIVER_SCAN_THREADS
    assert driver_scan_threads(1, "headers", [THREADED_HEADER_SCAN_BYTES - 1]) == 1
    # most bytes in a few large partitions among many small ones: threaded; a large one among much more: not
    assert driver_scan_threads(1, "headers", [10_000] * 990 + [80 * THREADED_HEADER_SCAN_BYTES] * 10) == \
        DRIVER_SCAN_THREADS
    assert driver_scan_threads(1, "headers", [THREADED_HEADER_SCAN_BYTES // 4] * 10 + [THREADED_HEADER_SCAN_BYTES]) == 1
    assert driver_scan_threads(16, "sizes", [10_000]) == 16
    assert driver_scan_threads(2, "headers", []) == DRIVER_SCAN_THREADS
    names = map_in_driver(_thread_name, list(range(20)), threads=4)
    assert len(names) == 20 and threading.current_thread().name not in names


def test_a_failing_item_of_a_threaded_map_leaves_the_queued_items_unrun() -> None:
    ran: list[int] = []

    def scan(i: int) -> int:
        if i == 0:
            raise KeyboardInterrupt  # what a Ctrl-C raises in the thread waiting for the results
        time.sleep(0.05)
        ran.append(i)
        return i

    with pytest.raises(KeyboardInterrupt):
        map_in_driver(scan, list(range(40)), threads=2)
    time.sleep(0.2)  # the items already running finish
    assert len(ran) < 10
