"""Observability: progress events (``--log-format json``, the API's progress sink) and the Spark job group and
descriptions every job gives its Spark jobs.

* text mode prints the lines it always printed; ``--log-format json`` prints one JSON object per line on stderr
  for the same events, with their structured fields, and the two carry the same messages in the same order;
* ``--quiet`` keeps the notices and errors in either format; a command that stops before doing anything says
  so as a JSON error event too;
* a progress sink taking text keeps working, and gets the event on the line;
* the Spark jobs of a run belong to the group ``segjobs-<command>-<run id>`` and carry a description naming the
  stage, as the Spark status store (what the UI and the history server show) records them; the session's own
  group is restored afterwards.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.compact import selection
from jobs.engine.report.events import BASE_KEYS, EVENTS, ProgressEvent, ProgressLine, event_of, stderr_sink
from jobs.engine.report.run_report import Progress
from jobs.engine.runtime.seams import Seams
from jobs.engine.runtime.tasks import InProcessTasks, SparkTasks
from tests.support.builders import LogBuilder, rec, write_log

DAY = 86_400_000
NOW = 1_763_780_400_000  # 2025-11-22T03:00:00Z
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n"min.cleanable.dirty.ratio" = 0.1\n'
TEXT_LINE = re.compile(r"^\[(compact|retain|inspect|recover) +\d+\.\ds\] (.+)$")
SECONDS = re.compile(r"\b\d+(\.\d+)?s\b")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _keyed(log_dir: Path, topic: str, partition: int, *, keys: int = 5, rounds: int = 3) -> None:
    """``rounds`` segments rewriting the same keys (compaction removes most of them), then an active segment."""
    log = LogBuilder(topic, partition)
    for r in range(rounds):
        if r:
            log.roll()
        for k in range(keys):
            log.batch([rec(f"key-{k}", f"value-{r}-{k}", timestamp=NOW - 2 * DAY + r * 1000 + k)])
    log.roll().batch([rec("key-0", "active", timestamp=NOW - DAY)])
    write_log(log.table(), log_dir / f"{topic}-{partition}")


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    _keyed(d, "orders", 0)
    _keyed(d, "orders", 1)
    (tmp_path / "topics.toml").write_text(CONFIG)
    return d


def _args(command: str, log_dir: Path, *extra: str) -> list[str]:
    return [command, "--log-dir", str(log_dir), "--config", str(log_dir.parent / "topics.toml"), "--now", str(NOW),
            *extra]


def _events(stderr: str) -> list[dict]:
    """Every stderr line as JSON: a line that does not parse fails the test (the JVM's own lines aside: the
    shared session is already running, so a run in this process starts none)."""
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------------
# Progress events without Spark
# --------------------------------------------------------------------------------------------------


def test_text_lines_are_unchanged_and_carry_their_event() -> None:
    lines: list[str] = []
    progress = Progress("compact", sink=lines.append)
    progress("scanned 2 partition(s)")  # the call every emitter made before events existed
    progress("orders-0: compacted in 0.5s", event="compact.partition", partition="orders-0", seconds=0.5)
    progress.error("orders-1: UNCLEANABLE, left untouched: boom", event="compact.failed", partition="orders-1")
    progress.notice("--now not given: acting at ...", event="run.now", now_ms=NOW)
    assert [TEXT_LINE.match(line).group(2) if TEXT_LINE.match(line) else line for line in lines] == [
        "scanned 2 partition(s)", "orders-0: compacted in 0.5s", "orders-1: UNCLEANABLE, left untouched: boom",
        "segjobs compact: --now not given: acting at ..."]
    assert all(isinstance(line, ProgressLine) and isinstance(line, str) for line in lines)
    events = [line.event for line in lines]  # type: ignore[attr-defined]
    assert [(e.level, e.event) for e in events] == [("info", "message"), ("info", "compact.partition"),
                                                     ("error", "compact.failed"), ("notice", "run.now")]
    assert events[1].fields == {"partition": "orders-0", "seconds": 0.5} and events[1].partition == "orders-0"
    assert all(e.text() == line for e, line in zip(events, lines))


def test_a_json_event_has_the_base_keys_then_its_fields() -> None:
    event = ProgressEvent(command="retain", level="info", event="retain.partition", message="orders-0: deleted",
                          elapsed_s=1.23456, ts_ms=1_795_500_333_583,
                          fields={"partition": "orders-0", "bytes_removed": 7})
    obj = json.loads(event.to_json())
    assert list(obj) == [*BASE_KEYS, "partition", "bytes_removed"]
    assert obj["ts"] == "2026-11-24T06:05:33.583Z" and obj["elapsed_s"] == 1.235
    assert "\n" not in ProgressEvent(command="x", level="error", event="error", message="two\nlines", elapsed_s=0,
                                     ts_ms=0).to_json()
    with pytest.raises(ValueError, match="field\\(s\\) level would overwrite"):
        ProgressEvent(command="x", level="info", event="e", message="m", elapsed_s=0, ts_ms=0, fields={"level": 1})
    with pytest.raises(ValueError, match="expected one of info, notice, error"):
        ProgressEvent(command="x", level="warn", event="e", message="m", elapsed_s=0, ts_ms=0)


def test_the_json_sink_keeps_notices_and_errors_when_quiet(capsys) -> None:
    progress = Progress("inspect", sink=stderr_sink("json", min_level="notice"))
    progress("silenced")
    progress.notice("shown", event="run.now")
    progress.error("shown too")
    assert [(e["level"], e["message"]) for e in _events(capsys.readouterr().err)] == [("notice", "shown"),
                                                                                      ("error", "shown too")]
    # a plain string handed to a sink (a caller that predates events) is an info event named message
    assert event_of("plain", "compact").event == "message"


def test_a_refused_command_is_a_json_error_event(tmp_path: Path, capsys) -> None:
    code = main(["compact", "--log-dir", str(tmp_path / "missing"), "--now", str(NOW), "--log-format", "json"])
    assert code == 2
    captured = capsys.readouterr()
    [event] = _events(captured.err)
    assert event["level"] == "error" and event["event"] == "failed" and event["exit_code"] == 2
    assert event["command"] == "compact" and "missing" in event["message"] and ISO_UTC.match(event["ts"])
    # text mode: the line it always was
    assert main(["compact", "--log-dir", str(tmp_path / "missing"), "--now", str(NOW)]) == 2
    assert capsys.readouterr().err.startswith("segjobs compact: error: ")


def test_recover_takes_log_format_json(log_dir: Path, capsys) -> None:
    assert main(["recover", "--log-dir", str(log_dir), "--log-format", "json"]) == 0
    captured = capsys.readouterr()
    [event] = _events(captured.err)  # no --now: the wall-clock notice
    assert (event["command"], event["level"], event["event"]) == ("recover", "notice", "run.now")
    assert isinstance(event["now_ms"], int)
    assert "recovered 0 of 2 partition(s)" in captured.out  # the result stays on stdout, as text


def test_every_command_that_prints_progress_explains_log_format(capsys) -> None:
    for command in ("compact", "retain", "inspect", "recover"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--log-format {text,json}" in text and "one JSON object per line" in text, command


def test_jobs_name_their_tasks_without_spark(log_dir: Path, tmp_path: Path, monkeypatch) -> None:
    twin = tmp_path / "twin" / "logs"
    shutil.copytree(log_dir, twin)
    runner = InProcessTasks()
    result = api.compact(log_dir, api.CompactOptions(config=log_dir.parent / "topics.toml"), now=NOW,
                         seams=Seams(runner=runner))
    assert result.ok
    # the two small partitions may be due: the first scan reads them in full (see jobs.engine.compact.selection)
    assert runner.descriptions == ["segjobs compact: scan 2 partition(s) (sizes)",
                                   "segjobs compact: compact 2 partition(s)"]
    monkeypatch.setattr(selection, "SMALL_PARTITION_BYTES", 0)  # none small: the stage reads them
    runner = InProcessTasks()
    result = api.compact(twin, api.CompactOptions(config=log_dir.parent / "topics.toml"), now=NOW,
                         seams=Seams(runner=runner))
    assert result.ok
    assert runner.descriptions == ["segjobs compact: scan 2 partition(s) (sizes)",
                                   "segjobs compact: read the transaction state of 2 partition(s)",
                                   "segjobs compact: compact 2 partition(s)"]


# --------------------------------------------------------------------------------------------------
# The CLI with Spark: text and JSON side by side
# --------------------------------------------------------------------------------------------------


def test_log_format_json_prints_every_event_as_one_json_object(spark, log_dir: Path, tmp_path: Path,
                                                               capsys) -> None:
    twin = tmp_path / "twin" / "logs"
    shutil.copytree(log_dir, twin)
    shutil.copy(log_dir.parent / "topics.toml", twin.parent / "topics.toml")

    assert main(_args("compact", log_dir, "--report", str(tmp_path / "text.json"))) == 0
    text = capsys.readouterr()
    assert main(_args("compact", twin, "--report", str(tmp_path / "r.json"), "--log-format", "json")) == 0
    as_json = capsys.readouterr()

    def summary(out: str, d: Path) -> list[str]:  # stdout without its timing footer; the config named alike
        return [line.replace(str(d.parent / "topics.toml"), "CONFIG").replace(str(d), "LOGS")
                for line in out.splitlines() if not line.startswith("elapsed ")]

    assert summary(as_json.out, twin) == summary(text.out, log_dir)  # --log-format leaves stdout alone
    lines = [line.replace(str(tmp_path / "text.json"), str(tmp_path / "r.json")) for line in text.err.splitlines()
             if line]
    assert all(TEXT_LINE.match(line) for line in lines), lines
    events = _events(as_json.err)
    # the same messages, in the same order (durations aside: two runs)
    assert [SECONDS.sub("Ns", e["message"].replace(str(twin), str(log_dir))) for e in events] == \
        [SECONDS.sub("Ns", TEXT_LINE.match(line).group(2)) for line in lines]  # type: ignore[union-attr]
    for e in events:
        assert list(e)[:len(BASE_KEYS)] == list(BASE_KEYS), e
        assert e["command"] == "compact" and e["level"] == "info" and ISO_UTC.match(e["ts"])
        assert e["event"] in EVENTS, e["event"]
    assert [e["elapsed_s"] for e in events] == sorted(e["elapsed_s"] for e in events)
    names = [e["event"] for e in events]
    assert names[0] == "run.start" and names[-1] == "report.written"
    assert {"scan.start", "scan.done", "compact.selected"} <= set(names)
    compacted = {e["partition"]: e for e in events if e["event"] == "compact.partition"}
    report = json.loads((tmp_path / "r.json").read_text())
    assert events[0]["run_id"] == report["run_id"]
    for entry in report["partitions"]:
        e = compacted[f"{entry['topic']}-{entry['partition']}"]
        removed = (entry["records_removed"], entry["bytes_removed"])
        assert (e["records_removed"], e["bytes_removed"]) == removed and removed != (0, 0)
        assert e["seconds"] >= 0 and e["partial"] is False

    # --quiet: nothing at info level, in either format
    assert main(_args("retain", twin, "--quiet", "--log-format", "json")) == 0
    assert capsys.readouterr().err == ""


def test_the_api_sink_receives_events(spark, log_dir: Path) -> None:
    lines: list[str] = []
    result = api.retain(log_dir, api.RetainOptions(config=log_dir.parent / "topics.toml", progress=lines.append),
                        now=NOW, spark=spark)
    assert result.ok and lines
    events = [event_of(line) for line in lines]
    assert [e.text() for e in events] == lines
    assert {e.command for e in events} == {"retain"}
    assert events[0].event == "run.start" and events[0].fields["run_id"] == result.run_id


# --------------------------------------------------------------------------------------------------
# Spark job groups and descriptions
# --------------------------------------------------------------------------------------------------


def _job_descriptions(spark, group: str, expected: int, timeout_s: float = 30.0) -> list[str]:
    """The descriptions of the group's jobs as Spark's status store records them (the store behind the UI
    and the history server's replay). Listener events arrive asynchronously: wait for ``expected`` jobs."""
    sc = spark.sparkContext
    deadline = time.monotonic() + timeout_s
    while True:
        ids = sorted(sc.statusTracker().getJobIdsForGroup(group))
        if len(ids) >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    store = sc._jsc.sc().statusStore()  # the AppStatusStore statusTracker() itself reads
    out = []
    for job_id in ids:
        data = store.job(job_id)
        assert data.jobGroup().get() == group
        out.append(data.description().get() if data.description().isDefined() else None)
    return out


def test_every_spark_job_of_a_run_is_in_its_group_with_a_description(spark, log_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(selection, "SMALL_PARTITION_BYTES", 0)  # so that a stage reads the partitions in full
    sc = spark.sparkContext
    sc.setJobGroup("a-notebook", "the notebook's own jobs")
    try:
        result = api.compact(log_dir, api.CompactOptions(config=log_dir.parent / "topics.toml"), now=NOW, spark=spark)
        assert result.ok
        # the session's group and description are the caller's again
        assert sc.getLocalProperty("spark.jobGroup.id") == "a-notebook"
        assert sc.getLocalProperty("spark.job.description") == "the notebook's own jobs"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    # the two partitions read in full and compacted, a job per task of a stream (on any parallelism each of
    # the two tiny partitions gets a task of its own: two or more tasks per core); the sizes scan before them
    # runs on the driver, no Spark job
    assert _job_descriptions(spark, f"segjobs-compact-{result.run_id}", 4) == [
        "segjobs compact: read the transaction state of 2 partition(s)"] * 2 + [
        "segjobs compact: compact 2 partition(s)"] * 2

    result = api.inspect(log_dir, api.InspectOptions(config=log_dir.parent / "topics.toml"), now=NOW, spark=spark)
    # inspect's scans and inspection tasks are streams too (jobs.engine.frame.packed_tasks): a job per task
    assert _job_descriptions(spark, f"segjobs-inspect-{result.run_id}", 4) == [
        "segjobs inspect: scan 2 partition(s) (transactions)"] * 2 + ["segjobs inspect: inspect 2 partition(s)"] * 2
    assert sc.getLocalProperty("spark.jobGroup.id") is None


def test_spark_tasks_see_their_job_group_and_description(spark) -> None:
    """What the executors see: the job's local properties, read back inside the tasks."""

    def labels(_: int) -> tuple[str, str]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.getLocalProperty("spark.jobGroup.id"), ctx.getLocalProperty("spark.job.description")

    got = SparkTasks(spark, job_group="segjobs-test-1").map(labels, [1, 2], description="segjobs test: two tasks")
    assert got == [("segjobs-test-1", "segjobs test: two tasks")] * 2
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None
