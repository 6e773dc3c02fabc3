"""Many small partitions in one compaction run (issue 11): bin-packed tasks, selection from sizes, commits as
tasks finish.

* A run over many small partitions leaves every partition byte for byte as a run over that partition alone.
* A corrupt partition in a bin fails alone: its neighbours are compacted, the exit code says partial failure;
  at the runner, an item that raises or kills its Python worker comes back as its own failure.
* Progress lines come as tasks finish, with a running count, bytes done and an ETA.
* A run in which nothing is due reads no partition's transaction state.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.engine.compact.cleaning import CompactTask
from jobs.engine.runtime.tasks import InProcessTasks, SparkTasks, TaskFailure, stream_bins
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.layout import segment_file_name

SPEC = GenerateSpec(topics=("orders",), partitions=6, records=300, segment_bytes=8 << 10,
                    batch_records=10, superseded_share=0.6, tombstone_share=0.05, seed=7)
TXN_SPEC = GenerateSpec(topics=("txns",), partitions=6, records=300, segment_bytes=8 << 10, batch_records=10,
                        transactional_share=0.4, aborted_share=0.5, seed=8)
#: after every generated timestamp; min.compaction.lag.ms 0, so every closed segment is cleanable
NOW = SPEC.start_ms + SPEC.span_ms + 24 * 3600 * 1000
SETTINGS = ("*:cleanup.policy=compact", "*:delete.retention.ms=1d")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """12 small partitions: orders-0..5 (plain) and txns-0..5 (transactions, half of them aborted)."""
    root = tmp_path_factory.mktemp("many")
    generate_log_dir(SPEC, str(root / "logs"))
    generate_log_dir(TXN_SPEC, str(root / "txns"))
    for d in (root / "txns").iterdir():
        if d.is_dir():
            shutil.move(str(d), root / "logs" / d.name)
    return root / "logs"


def partitions(log_dir: Path) -> list[str]:
    """The partition dirs' names in the jobs' order: by topic, then partition number."""
    names = [p.name for p in log_dir.iterdir() if p.is_dir() and not p.name.endswith(".segjobs")]
    return sorted(names, key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1])))


def partition_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def alone(source: Path, name: str, into: Path) -> Path:
    """A log dir holding only partition ``name`` of ``source`` (with the log dir's checkpoint files)."""
    into.mkdir(parents=True)
    shutil.copytree(source / name, into / name)
    for f in source.iterdir():
        if f.is_file():
            shutil.copy2(f, into / f.name)
    return into


@pytest.mark.spark
def test_many_small_partitions_compact_exactly_as_each_alone(spark, source: Path, tmp_path: Path) -> None:
    together = tmp_path / "together"
    shutil.copytree(source, together)
    result = api.compact(together, api.CompactOptions(overrides=SETTINGS), now=NOW, spark=spark)
    assert result.exit_code == 0, result.errors
    names = partitions(source)
    assert len(names) == 12 and result.partitions_compacted == 12
    assert result.records_removed > 0
    for name in names:
        single = alone(source, name, tmp_path / "alone" / name)
        one = api.compact(single, api.CompactOptions(overrides=SETTINGS), now=NOW,
                          seams=api.Seams(runner=InProcessTasks()))
        assert one.exit_code == 0 and one.partitions_compacted == 1
        assert partition_files(together / name) == partition_files(single / name), name
        assert partition_files(together / name) != partition_files(source / name), name
        cp = (single / "cleaner-offset-checkpoint").read_text().splitlines()[2:]
        assert set(cp) <= set((together / "cleaner-offset-checkpoint").read_text().splitlines()[2:]), name


@pytest.mark.spark
def test_a_corrupt_partition_in_a_bin_fails_alone(spark, tmp_path: Path) -> None:
    # 40 tiny partitions: whatever the session's parallelism, tasks of several consecutive partitions
    logs = tmp_path / "logs"
    generate_log_dir(GenerateSpec(partitions=40, records=100, segment_bytes=2 << 10, batch_records=10, seed=3),
                     str(logs))
    # The cleaning tasks' bins (the tasks come in partition order, sized by their .log bytes): break a partition
    # that shares its task with another.
    names = partitions(logs)
    sizes = [sum(f.stat().st_size for f in (logs / n).glob("*.log")) for n in names]
    shared = [b for b in stream_bins(names, sizes, SparkTasks(spark).parallelism) if len(b) > 1]
    assert shared, "every partition got a task of its own: the test data is too big for the bins"
    victim, neighbours = names[shared[0][0]], [names[i] for i in shared[0][1:]]
    seg = logs / victim / segment_file_name(0)
    data = bytearray(seg.read_bytes())
    data[75] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    seg.write_bytes(bytes(data))
    broken_before = partition_files(logs / victim)
    lines: list[str] = []
    result = api.compact(logs, api.CompactOptions(overrides=SETTINGS, progress=lines.append), now=NOW, spark=spark)
    assert result.exit_code == 1  # some partition failed, the others were done
    assert [e["partition"] for e in result.errors] == [victim] and result.errors[0]["kind"] == "CrcMismatchError"
    actions = {f"{e['topic']}-{e['partition']}": e["action"] for e in result.report.partitions}
    assert actions.pop(victim) == "error"
    assert set(actions.values()) == {"compacted"} and len(actions) == 39 and set(neighbours) <= set(actions)
    assert partition_files(logs / victim) == broken_before
    assert any(line.endswith("]") and f"{victim}: UNCLEANABLE, left untouched" in line for line in lines)


def _raise_or_die(item: int) -> int:
    if item == 2:
        raise ValueError("item 2 is bad")
    if item == 5:
        os._exit(3)  # the Python worker dies with the whole task
    return item * 10


@pytest.mark.spark
def test_the_spark_runner_reports_each_items_failure_on_its_own(spark) -> None:
    runner = SparkTasks(spark)
    got = dict(runner.stream(_raise_or_die, list(range(8)), sizes=[1] * 8))
    assert sorted(got) == list(range(8))
    assert got[2] == TaskFailure("ValueError", "item 2 is bad")
    assert isinstance(got[5], TaskFailure) and got[5].kind == "TaskDied"
    assert {i: v for i, v in got.items() if i not in (2, 5)} == {i: i * 10 for i in (0, 1, 3, 4, 6, 7)}


class _Slow:
    """Each item: mark that it started (a file in ``marks``), then take ``seconds``; item 0 is quick."""

    def __init__(self, marks: str, seconds: float) -> None:
        self.marks, self.seconds = marks, seconds

    def __call__(self, item: int) -> int:
        import time

        Path(self.marks, f"{item}-{time.time_ns()}").touch()
        if item:
            time.sleep(self.seconds)
        return item


@pytest.mark.spark
def test_a_stream_stopped_early_runs_nothing_more_and_leaves_no_thread_to_wait_for(spark, tmp_path: Path) -> None:
    """A run that stops (an error, a lost lease) closes its stream while Spark jobs are in flight: closing returns
    at once, the cancelled bins are not run again item by item, no further job starts, and no thread is left
    that the interpreter would wait for at exit (that once kept a stopped run's process alive for minutes)."""
    import threading
    import time

    marks = tmp_path / "marks"
    marks.mkdir()
    runner = SparkTasks(spark, job_group="segjobs-test-stop")
    sizes = [1] + [100] * 24  # bins of several items each
    assert any(len(b) > 2 for b in stream_bins(list(range(25)), sizes, runner.parallelism))
    stream = runner.stream(_Slow(str(marks), 0.4), list(range(25)), sizes=sizes)
    index, value = next(stream)  # one bin is done, others are running
    assert value == index
    t0 = time.monotonic()
    stream.close()
    assert time.monotonic() - t0 < 2
    time.sleep(2.5)  # the cancellations land, and anything still going would start its next item by now
    started = len(list(marks.iterdir()))
    time.sleep(3)
    assert len(list(marks.iterdir())) == started, "items kept starting after the stream was closed"
    left = [t for t in threading.enumerate() if t.name.startswith("segjobs-tasks") and t.is_alive()]
    assert all(t.daemon for t in left), left


def test_progress_lines_come_as_tasks_finish_with_count_bytes_and_eta(source: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(source, logs)
    runner = InProcessTasks(parallelism=3)  # 12 partitions in 6 bins of 2
    seen: list[tuple[int, str]] = []
    result = api.compact(logs, api.CompactOptions(overrides=SETTINGS, progress=lambda line: seen.append(
        (runner.calls, line))), now=NOW, seams=api.Seams(runner=runner))
    assert result.exit_code == 0
    done = [(calls, line) for calls, line in seen if ": compacted in " in line]
    assert len(done) == 12
    # the first partition's line came while later bins had not run yet
    assert done[0][0] < done[-1][0]
    total = sum(e["bytes_before"] for e in result.report.partitions)
    for k, (_, line) in enumerate(done, 1):
        counts = line[line.rindex("[") + 1:-1].split(", ")
        assert counts[0] == f"{k}/12"
        assert counts[1].endswith(f" of {api_human_bytes(total)}")
        assert k == 1 or counts[2].startswith("ETA ")  # 12 partitions of equal size: 1 of them is 8%
    assert done[-1][1].endswith("ETA 0s]")


def api_human_bytes(n: int) -> str:
    from jobs.engine.report.run_report import human_bytes

    return human_bytes(n)


def test_a_run_with_nothing_due_reads_no_partition_in_full(source: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(source, logs)
    first = api.compact(logs, api.CompactOptions(overrides=SETTINGS), now=NOW,
                        seams=api.Seams(runner=InProcessTasks()))
    assert first.exit_code == 0 and first.partitions_compacted == 12
    runner = InProcessTasks()
    lines: list[str] = []
    again = api.compact(logs, api.CompactOptions(overrides=SETTINGS, progress=lines.append), now=NOW,
                        seams=api.Seams(runner=runner))
    assert again.exit_code == 0 and again.partitions_compacted == 0
    assert runner.calls == 12  # the sizes scan of each partition, nothing else
    assert not any("transaction state" in line for line in lines)
    assert not any(e["selected"] for e in again.report.partitions)


def _double_or_fail(item: int) -> int:
    if item == 2:
        raise ValueError("item 2 is bad")
    return 2 * item


def test_commits_stop_at_the_first_that_raises_and_what_was_settled_is_handed_back() -> None:
    from jobs.engine.compact.streaming import run_and_settle

    prepared: dict[int, object] = {}

    def prepare(i: int, result: object) -> object:
        prepared[i] = result
        return result

    def settle(i: int, result: object) -> object:
        if i == 5:
            raise RuntimeError("the lease was lost")
        return result

    # 10 items in 4 bins ([0, 1, 2], [3, 4, 5], [6, 7, 8], [9]), settled in order: 0 to 4 are settled (2 as
    # its task's failure), 5 raises, and nothing after it is settled
    settled: dict[int, object] = {}
    with pytest.raises(RuntimeError, match="lease"):
        run_and_settle(InProcessTasks(parallelism=2), _double_or_fail, list(range(10)), sizes=[1] * 10,
                       prepare=prepare, settle=settle, settled=settled)
    assert settled == {0: 0, 1: 2, 2: TaskFailure("ValueError", "item 2 is bad"), 3: 6, 4: 8}
    done = run_and_settle(InProcessTasks(parallelism=2), _double_or_fail, list(range(4)), sizes=[1] * 4,
                          prepare=prepare, settle=lambda i, r: r)
    assert done == {0: 0, 1: 2, 2: TaskFailure("ValueError", "item 2 is bad"), 3: 6}


def test_the_cleaning_tasks_of_one_topic_share_one_configuration(source: Path, tmp_path: Path) -> None:
    """A bin's task pickles its partitions' tasks together: one configuration object per topic is pickled once,
    where a copy per partition made every task carry its own."""

    class Recording(InProcessTasks):
        def __init__(self) -> None:
            super().__init__()
            self.bins: list[list] = []

        def stream_bins(self, bin_fn, items, *, sizes=None, description=None):  # type: ignore[no-untyped-def]
            self.bins.append(list(items))
            return super().stream_bins(bin_fn, items, sizes=sizes, description=description)

    logs = tmp_path / "logs"
    shutil.copytree(source, logs)
    runner = Recording()
    result = api.compact(logs, api.CompactOptions(overrides=SETTINGS), now=NOW, seams=api.Seams(runner=runner))
    assert result.exit_code == 0 and result.partitions_compacted == 12
    [tasks] = [items for items in runner.bins if isinstance(items[0], CompactTask)]
    by_topic: dict[str, set[int]] = {}
    for task in tasks:
        by_topic.setdefault(task.plan.topic, set()).add(id(task.config))
    assert {t: len(ids) for t, ids in by_topic.items()} == {"orders": 1, "txns": 1}
