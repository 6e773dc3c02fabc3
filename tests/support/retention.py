"""Retention tests' log dirs and runs, on any store: timestamped partitions, checkpoints, ``segjobs retain`` with its
JSON report, and the multi-threaded commit crashed at every step (local disk and S3 alike)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.retain.driver import COMMIT_THREADS
from jobs.engine.runtime.seams import FaultHook
from jobs.logdir.retention import (
    STEP_DELETE_SNAPSHOT,
    STEP_PURGE,
    STEP_TRIM_LEADER_EPOCHS,
    STEP_WRITE_LOG_START,
)
from jobs.rules.config import ConfigSet
from segment_io.layout import segment_file_name
from segment_io.storage import StorageOptions
from segment_io.storage.base import Storage
from tests.support.builders import timestamped_segments, write_log

DAY = 86_400_000
NOW = 1_700_000_000_000
OLD = NOW - 10 * DAY  # comfortably past a 1-day retention
RECENT = NOW - 1_000


def build_partition(log_dir: Path, topic: str, partition: int, segments: list[list[int]], *,
                    timeindex: bool = True, epochs: list[tuple[int, int]] | None = None,
                    snapshots: bool = True) -> list[int]:
    """Write one partition whose segment ``i`` holds one single-record batch per timestamp in
    ``segments[i]`` (equal-sized records, so equal-sized segments for equal counts). Returns the base
    offsets. With ``snapshots`` an (empty) producer snapshot sits at every segment base and at the log
    end, as a broker leaves them; ``epochs`` becomes the leader-epoch-checkpoint."""
    table, bases, log_end = timestamped_segments(topic, partition, segments)
    pdir = log_dir / f"{topic}-{partition}"
    write_log(table, pdir)
    if not timeindex:
        for f in pdir.glob("*.timeindex"):
            f.unlink()
    if snapshots:
        for off in [*bases, log_end]:
            (pdir / segment_file_name(off, ".snapshot")).write_bytes(b"")
    if epochs is not None:
        text = "0\n" + f"{len(epochs)}\n" + "".join(f"{e} {s}\n" for e, s in epochs)
        (pdir / "leader-epoch-checkpoint").write_text(text)
    return bases


def write_checkpoint(log_dir: Path, name: str, entries: dict[tuple[str, int], int]) -> None:
    text = "0\n" + f"{len(entries)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in entries.items())
    (log_dir / name).write_text(text)


def names(storage: Storage, partition_uri: str) -> set[str]:
    return {f.name for f in storage.list(partition_uri)}


def live_logs(storage: Storage, partition_uri: str) -> list[int]:
    return sorted(int(n[:20]) for n in names(storage, partition_uri) if n.endswith(".log"))


def sizes(pdir: Path, bases: list[int]) -> dict[int, int]:
    return {b: os.path.getsize(pdir / segment_file_name(b)) for b in bases}


def retain(log_dir: str | Path, *options: str, now: int = NOW, quiet: bool = True) -> tuple[int, dict | None]:
    """Run `segjobs retain` and return (exit code, the JSON report)."""
    return run_command("retain", log_dir, *options, now=now, quiet=quiet)


def run_command(command: str, log_dir: str | Path, *options: str, now: int = NOW,
                quiet: bool = True) -> tuple[int, dict | None]:
    """Run `segjobs <command>` (a job that writes a report) in-process; return (exit code, the JSON report)."""
    report = Path(f"/tmp/{command}-report-{os.getpid()}-{abs(hash((str(log_dir), options, now)))}.json")
    report.unlink(missing_ok=True)
    argv = [command, "--log-dir", str(log_dir), "--now", str(now), "--report", str(report), *options]
    code = main(argv + (["--quiet"] if quiet else []))
    doc = json.loads(report.read_text()) if report.exists() else None
    report.unlink(missing_ok=True)
    return code, doc


def entry(report: dict, topic: str, partition: int) -> dict:
    (hit,) = [e for e in report["partitions"] if e["topic"] == topic and e["partition"] == partition]
    return hit


def deleted(e: dict) -> list[tuple[int, str]]:
    return [(d["base_offset"], d["rule"]) for d in e["deleted"]]


class Crash(BaseException):
    """Raised by the fault hook: the process dies before the step runs (a BaseException, as nothing in segjobs
    catches a process's death; an Exception would stop the run with its report instead)."""


FAULT_CONFIG = ConfigSet().with_overrides(["*:retention.ms=1d", "*:file.delete.delay.ms=0"])
#: A store for the crash tests: (storage, log dir URI, the StorageOptions the job needs to reach it).
StoreFactory = Callable[[str], tuple[Storage, str, "StorageOptions | None"]]


def build_fault_dir(storage: Storage, log_dir: str, scratch: Path) -> None:
    """Two partitions with deletions (one of them with a leader-epoch file and snapshots), one without."""
    local = scratch / "src"
    build_partition(local, "t", 0, [[OLD], [OLD], [RECENT]], epochs=[(0, 0), (1, 1), (2, 2)])
    build_partition(local, "t", 1, [[OLD], [RECENT]], snapshots=False)
    build_partition(local, "t", 2, [[RECENT], [RECENT]])
    write_checkpoint(local, "log-start-offset-checkpoint", {("t", 2): 0})
    for f in sorted(local.rglob("*")):
        if f.is_file():
            uri = storage.join(log_dir, *f.relative_to(local).parts)
            storage.makedirs(uri.rsplit("/", 1)[0])
            storage.write_atomic(uri, f.read_bytes())


def run_retain_job(log_dir: str, storage_options, fault: FaultHook | None = None) -> api.RetainResult:
    """The retain job through the API, its tasks in this process (no Spark): recovery, list, scan, plan, then
    the real multi-threaded commit (COMMIT_THREADS partitions at once), with ``fault`` as its fault seam."""
    options = api.RetainOptions(config=FAULT_CONFIG, storage=storage_options, progress=lambda line: None)
    return api.retain(log_dir, options, now=NOW, seams=api.Seams(fault=fault, runner=api.InProcessTasks()))


def state_of(storage: Storage, log_dir: str) -> dict[str, bytes]:
    """Every object of the log dir (and nothing of the work dir): what a broker would load."""
    return {f.uri[len(log_dir):]: storage.read(f.uri) for f in storage.list(log_dir, recursive=True)
            if not f.name.endswith(".lock")}


def fault_steps(store: StoreFactory, tmp_path: Path) -> tuple[dict[str, list[str]], dict[str, bytes]]:
    """An uninterrupted run: the steps of each partition (``""``: the log dir's), and the end state. The two
    partitions with deletions wait for each other at their first step: the run fails unless they commit on
    two threads at once."""
    storage, log_dir, options = store("reference")
    build_fault_dir(storage, log_dir, tmp_path / "reference")
    steps: dict[str, list[str]] = {}
    guard = threading.Lock()
    both = threading.Barrier(2, timeout=30)

    def record(partition: str, step: str) -> None:
        with guard:
            steps.setdefault(partition, []).append(step)
        if step == "write-intent" and partition in ("t-0", "t-1"):
            both.wait()  # BrokenBarrierError (the run fails) if the other partition is not committing meanwhile

    result = run_retain_job(log_dir, options, record)
    assert result.exit_code == 0, result.errors
    assert COMMIT_THREADS > 1
    return steps, state_of(storage, log_dir)


def check_every_crash_point(store: StoreFactory, tmp_path: Path,
                            crash: tuple[str, ...] = ("", "t-0", "t-1")) -> None:
    """Retention's multi-threaded commit, crashed at every step of one partition (of those in ``crash``; ``""``
    is the log dir's own step) while the others commit, then recovery and a normal run: the log dir ends
    exactly as after an uninterrupted run."""
    steps, expected = fault_steps(store, tmp_path)
    # the protocol's steps, in order: the log start checkpoint first, for the whole dir (as Kafka raises the log
    # start before removing segments), then per partition the delete (intent, renames, ledger) and its dependants
    assert steps[""] == [STEP_WRITE_LOG_START]
    assert sorted(steps) == ["", "t-0", "t-1"]  # t-2 loses nothing: no destructive step
    for partition in ("t-0", "t-1"):
        assert steps[partition][0] == "write-intent" and steps[partition][-1] == STEP_PURGE
        assert any(s.startswith("live-to-deleted:") for s in steps[partition])
        assert "record-deleted" in steps[partition] and "remove-intent" in steps[partition]
    assert STEP_TRIM_LEADER_EPOCHS in steps["t-0"] and any(s.startswith(STEP_DELETE_SNAPSHOT) for s in steps["t-0"])
    # what the uninterrupted run must have produced, stated independently
    assert sorted(k for k in expected if k.endswith(".log")) == \
        ["/t-0/" + segment_file_name(2), "/t-1/" + segment_file_name(1), "/t-2/" + segment_file_name(0),
         "/t-2/" + segment_file_name(1)]
    assert not any(k.endswith(".deleted") for k in expected)
    assert expected["/log-start-offset-checkpoint"] == b"0\n3\nt 0 2\nt 1 1\nt 2 0\n"
    assert expected["/t-0/leader-epoch-checkpoint"] == b"0\n1\n2 2\n"
    points = [(p, i) for p in sorted(steps) if p in crash for i in range(len(steps[p]))]
    for n, (partition, i) in enumerate(points):
        storage, log_dir, options = store(f"crash{n}")
        build_fault_dir(storage, log_dir, tmp_path / f"crash{n}")
        seen: list[str] = []

        def crash_at(p: str, step: str) -> None:
            if p == partition:  # only this partition's thread calls with p == partition: no lock needed
                seen.append(step)
                if len(seen) == i + 1:
                    raise Crash(f"{p}: {step}")

        with pytest.raises(Crash):
            run_retain_job(log_dir, options, crash_at)
        assert seen == steps[partition][:i + 1], "the steps of a partition keep their order"
        assert run_retain_job(log_dir, options).exit_code == 0  # recovery first, then a normal run
        assert state_of(storage, log_dir) == expected, f"crash of {partition} before step {i} ({steps[partition][i]})"
