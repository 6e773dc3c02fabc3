"""A run that meets an exception while its Spark jobs are in flight ends within seconds, with its report.

Real processes, as a user runs them (``python -m tests.support.stop``, and ``segjobs compact`` itself for the
disk-full case), each with its own Spark session, under a timeout:

* an exception no partition's handling expects, raised at each kind of commit step of the first partition to
  commit while the other partitions' Spark jobs still run: the process exits within seconds with exit code 1,
  the usual report (the stopped run's summary on stdout, the JSON report with the error) and no partition
  damaged (after the next run's recovery every partition replays like its source; the untouched ones are
  byte-identical);
* disk full on a log dir that is a mount point of its own (a small tmpfs): the new segments are staged on that
  filesystem, the partitions that do not fit fail as the machine's fault (``ENOSPC``, with the path and the
  space needed), the others are compacted, and the run ends with its report and exit code 1.

Before, the first case could keep the process alive for minutes after the error (a task thread kept running the
cancelled bin's items one job each, and the interpreter waited for it at exit), and the second gave a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.mounts import fill, tmpfs
from tests.support.paths import REPO
from tests.support.replay import comparable, latest_records

pytestmark = [pytest.mark.scenario, pytest.mark.slow]

T0 = 1_700_000_000_000
NOW = str(T0 + 10 * 86_400_000)
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n'
#: the seconds a process may take to end after the exception (a Spark session's stop is most of it)
BOUND_S = 45
STEP_KINDS = ("write-intent", "cleaned-to-swap:", "old-to-deleted:", "swap-to-live:", "purge-old:", "remove-intent")


def build(partition_dir: Path, records: int) -> None:
    """Two dirty segments that compact (every key twice, some tombstones), then the active segment."""
    log = LogBuilder("t", int(partition_dir.name.rsplit("-", 1)[1]), timestamp=T0)
    value = "v" * 100
    for rnd in range(2):
        for start in range(0, records, 500):
            log.batch([rec(f"k{i}", f"{value}{rnd}") for i in range(start, min(start + 500, records))])
        log.roll()
    log.batch([tombstone("k0")]).roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)


def make_log_dir(logs: Path, sizes: list[int]) -> None:
    for p, n in enumerate(sizes):
        build(logs / f"t-{p}", n)


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def child_env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(REPO))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A small first partition, then larger ones whose tasks are still running when the first one commits."""
    logs = tmp_path_factory.mktemp("stop-source") / "logs"
    make_log_dir(logs, [200, 60_000])
    for p in range(2, 10):  # segment files do not name their partition: copies make more of the same
        shutil.copytree(logs / "t-1", logs / f"t-{p}")
    return logs


@pytest.mark.parametrize("step", STEP_KINDS)
def test_an_exception_at_a_commit_step_with_jobs_in_flight_ends_the_run_within_seconds(tmp_path, source, step):
    logs = tmp_path / "logs"
    shutil.copytree(source, logs)
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.stop", step, "--", "compact", "--log-dir", str(logs), "--config",
         str(config), "--now", NOW, "--master", "local[2]", "--report", str(report), "--strategy", "memory"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600)
    ended = time.time()
    m = re.search(r"stop: raised before (\S+) of (\S+) at ([0-9.]+) with (\d+) task thread", proc.stderr)
    assert m, proc.stderr[-3000:]
    stopped_in, raised_at, active = m.group(2), float(m.group(3)), int(m.group(4))
    print(f"{step}: exited {ended - raised_at:.1f}s after the exception, {active} task thread(s) ran Spark jobs")
    assert active > 0, "no Spark job was in flight: the test proves nothing"
    assert ended - raised_at < BOUND_S, proc.stderr[-3000:]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "stopped before the end" in proc.stdout  # the stopped run's summary
    assert "STOPPED: RuntimeError: injected before" in proc.stderr
    assert not re.search(r"^Traceback", proc.stderr, re.M), proc.stderr[-3000:]  # no stack, only the error line
    doc = json.loads(report.read_text())
    assert any(e["kind"] == "RuntimeError" and "a segjobs bug" in e["detail"] for e in doc["errors"])
    # nothing damaged: recovery settles the partition whose commit stopped, the others are as they were or done
    assert main(["recover", "--log-dir", str(logs), "--now", NOW]) == 0
    untouched = 0
    for part in sorted(p.name for p in source.iterdir() if p.is_dir()):
        assert comparable(latest_records(logs / part)) == comparable(latest_records(source / part)), part
        if part != stopped_in and tree(logs / part) == tree(source / part):
            untouched += 1
    assert untouched > 0, "every partition was committed before the exception: no job was really in flight"


def test_disk_full_on_a_log_dir_that_is_its_own_mount_fails_those_partitions_and_the_run_ends(tmp_path):
    logs = tmp_path / "logs"
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    report = tmp_path / "report.json"
    with tmpfs(logs, 16 << 20):
        make_log_dir(logs, [200, 20_000])  # the small one's new segment fits in what is left, the big one's not
        source = tree(logs)
        small = comparable(latest_records(logs / "t-0"))
        fill(logs, leave_bytes=256 << 10)
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "jobs.commands.cli", "compact", "--log-dir", str(logs), "--config", str(config),
             "--now", NOW, "--master", "local[2]", "--report", str(report)],
            cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600)
        elapsed = time.monotonic() - t0
        print(f"disk full: the run took {elapsed:.1f}s, exit code {proc.returncode}")
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert not re.search(r"^Traceback", proc.stderr, re.M) and "segjobs bug" not in proc.stderr, proc.stderr[-3000:]
        doc = json.loads(report.read_text())
        by_partition = {e["partition"]: e for e in doc["partitions"]}
        assert by_partition[0]["action"] == "compacted"
        assert by_partition[1]["action"] == "error"
        [error] = doc["errors"]
        assert error["kind"] == "StorageEnvironmentError" and "ENOSPC" in error["detail"], error
        assert "bytes needed" in error["detail"] and error["file"].startswith(str(logs / "t-1"))
        assert "t-1" in proc.stdout and "1 partition(s) FAILED" in proc.stdout  # the usual summary
        after = tree(logs)
        assert {k: v for k, v in after.items() if k.startswith("t-1/")} == \
            {k: v for k, v in source.items() if k.startswith("t-1/")}  # the failed partition: byte for byte
        assert comparable(latest_records(logs / "t-0")) == small
        assert not list(logs.rglob(".segjobs-staging")) and not list(logs.rglob("*.cleaned"))
        assert not (Path(str(logs) + ".segjobs") / "staging").exists()
