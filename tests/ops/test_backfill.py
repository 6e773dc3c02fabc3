"""Backfills: segjobs runs with successive ``--now`` values over past intervals, one of them killed midway.

Three nights (tests/ops/nights.py) run on two copies of one generated log dir:

* in order, each night once (retain, then compact, at the night's ``--now``): the reference;
* as a backfill that goes wrong: night 1; night 2's compaction killed with SIGKILL in the middle of a
  segment replace (a real process killed at a point the test provokes: tests/support/crash.py), then night 2
  rerun; night 2 rerun once more; night 3, and night 3 rerun.

After every step the backfill's log dir and work dir equal the reference's after the same night, file for
file and byte for byte: the failed interval is completed by its rerun (which cleans the partitions the killed run
had already replaced once more, as Kafka's cleaner does after an interruption: the reference does the same), and
rerunning a finished interval changes nothing. A night whose compaction was partial (its offset map filled) is the
exception docs/operations/backfills.md states: its rerun continues the clean, as the next night would; the last
test shows it.

The runs share the suite's Spark session (``jobs.commands.cli.main`` in this process), except the killed one, which
needs a process of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.ops.nights import NIGHTS, TOPICS_TOML, differences, generate, job_args, snapshot

pytestmark = pytest.mark.scenario  # minutes of whole-process runs: `make test-scenarios` runs it, not `make test`

REPO = Path(__file__).resolve().parents[2]


def _night(log_dir: Path, config: Path, now: str, commands=("retain", "compact"), report: Path | None = None) -> None:
    for command in commands:
        extra = ["--report", str(report.with_name(f"{report.stem}-{command}.json"))] if report else []
        code = main([*job_args(command, log_dir, config, now), "--quiet", *extra])
        assert code == 0, f"{command} at {now} exited {code}"


def _crash(log_dir: Path, config: Path, now: str) -> subprocess.CompletedProcess:
    """``segjobs compact`` of the night in its own process, killed before the first ``swap-to-live`` step of
    the run's second segment replace: the first replace is complete, the second is past the point of no
    return (every new segment is ``.swap``, the old ones ``.deleted``), and no checkpoint was written."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run(
        [sys.executable, "-m", "tests.support.crash", "swap-to-live:", "2", "--",
         *job_args("compact", log_dir, config, now), "--master", "local[2]", "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def nights(spark, tmp_path_factory) -> dict:
    """The generated input, the config, and the reference: snapshots of the log dir after each night run
    once, in order (and a copy of the log dir as night 1 left it)."""
    root = tmp_path_factory.mktemp("backfill")
    source = root / "source"
    generate(sys.executable, source)
    config = root / "topics.toml"
    config.write_text(TOPICS_TOML)
    logs = root / "in-order" / "logs"
    shutil.copytree(source, logs)
    after = [snapshot(logs)]
    for i, now in enumerate(NIGHTS, 1):
        _night(logs, config, now, report=root / f"night-{i}")
        after.append(snapshot(logs))
        assert differences(after[-2], after[-1]), f"night {i} changed nothing: comparing to it would prove nothing"
        if i == 1:
            shutil.copytree(logs.parent, root / "after-night-1")
    reports = {i: {c: json.loads((root / f"night-{i}-{c}.json").read_text()) for c in ("retain", "compact")}
               for i in (1, 2, 3)}
    return {"root": root, "source": source, "config": config, "after": after, "reports": reports}


def _partial(report: dict) -> set[str]:
    return {f"{e['topic']}-{e['partition']}" for e in report["partitions"] if e.get("partial")}


def _compacted(report: dict) -> set[str]:
    return {f"{e['topic']}-{e['partition']}" for e in report["partitions"] if e["action"] == "compacted"}


def test_the_nights_do_what_the_backfill_must_reproduce(nights) -> None:
    """The reference covers what a backfill must get right: a partial compaction continued the next night,
    tombstones removed once their horizon passed, retention deletes and purges every night."""
    r = nights["reports"]
    assert _partial(r[1]["compact"]) == {"users-changelog-0", "users-changelog-1"}
    assert _compacted(r[2]["compact"]) == {"users-changelog-0", "users-changelog-1"}
    assert not _partial(r[2]["compact"]) and not _compacted(r[3]["compact"])
    assert sum((e.get("stats") or {}).get("tombstones_removed") or 0 for e in r[2]["compact"]["partitions"]) > 0
    for i in (1, 2, 3):
        assert r[i]["retain"]["totals"]["segments_deleted"] > 0, i
    assert r[2]["retain"]["totals"]["files_purged"] > 0


@pytest.mark.slow
def test_a_backfill_with_a_killed_night_equals_the_nights_in_order(nights, tmp_path) -> None:
    config, after = nights["config"], nights["after"]
    logs = tmp_path / "logs"
    shutil.copytree(nights["source"], logs)

    _night(logs, config, NIGHTS[0])
    assert differences(snapshot(logs), after[1]) == []

    # Night 2: retention, then a compaction killed in the middle of its second segment replace.
    _night(logs, config, NIGHTS[1], commands=("retain",))
    before_crash = snapshot(logs)
    crashed = _crash(logs, config, NIGHTS[1])
    assert crashed.returncode == -9, ("the compaction was not killed where asked", crashed.returncode,
                                      crashed.stderr[-3000:])
    state = snapshot(logs)
    assert any(p.endswith(".swap") for p in state), "the kill left no replace half-done"
    assert any(p.endswith("/replace.json") for p in state), "the kill left no commit intent"
    assert differences(state, after[1]), "the killed run already equals the finished night"
    # (a broker loading this dir would complete the replace, as segjobs' recovery does)
    touched = sorted({p.split("/")[1] for p in differences(before_crash, state)
                      if p.startswith("LOGS/") and p.count("/") == 2})
    assert touched

    # What the rerun must give: the night run once, then the partitions the killed run had replaced cleaned
    # once more at the same --now (recovery completes their replace and no checkpoint says they are clean, so
    # the rerun cleans them again: the markers of the transactions the killed run emptied get their horizon,
    # as after an interrupted clean of Kafka's). Their records are the night's.
    reference = tmp_path / "reference" / "logs"
    shutil.copytree(nights["root"] / "after-night-1", reference.parent)
    _night(reference, config, NIGHTS[1])
    assert differences(snapshot(reference), after[2]) == []
    forced = [a for p in touched for a in ("--partition", p)]
    assert main([*job_args("compact", reference, config, NIGHTS[1]), "--quiet", *forced]) == 0
    rerun_reference = snapshot(reference)
    assert all(p.split("/")[0] == "LOGS" and p.split("/")[1] in touched
               for p in differences(rerun_reference, after[2]))

    # Its rerun (retain and compact, as the DAG reruns the interval) completes the night.
    _night(logs, config, NIGHTS[1])
    assert differences(snapshot(logs), rerun_reference) == []
    # Rerunning a finished interval changes nothing.
    _night(logs, config, NIGHTS[1])
    assert differences(snapshot(logs), rerun_reference) == []

    # the next night, on both
    _night(reference, config, NIGHTS[2])
    _night(logs, config, NIGHTS[2])
    assert differences(snapshot(logs), snapshot(reference)) == []
    _night(logs, config, NIGHTS[2])
    assert differences(snapshot(logs), snapshot(reference)) == []


def test_rerunning_a_night_whose_compaction_was_partial_continues_it(nights, tmp_path) -> None:
    """Night 1's offset map filled (``partial`` in its report): a rerun at the same ``--now`` finds the
    partitions still dirty beyond the map's end and cleans on, as the next night would have. Its retention
    rerun changes nothing."""
    logs = tmp_path / "logs"
    shutil.copytree(nights["root"] / "after-night-1" / "logs", logs)
    shutil.copytree(nights["root"] / "after-night-1" / "logs.segjobs", tmp_path / "logs.segjobs")
    assert differences(snapshot(logs), nights["after"][1]) == []
    _night(logs, nights["config"], NIGHTS[0], commands=("retain",))
    assert differences(snapshot(logs), nights["after"][1]) == []
    _night(logs, nights["config"], NIGHTS[0], commands=("compact",), report=tmp_path / "rerun")
    rerun = json.loads((tmp_path / "rerun-compact.json").read_text())
    assert _compacted(rerun) == {"users-changelog-0", "users-changelog-1"}
    changed = differences(snapshot(logs), nights["after"][1])
    assert changed and all("users-changelog-" in p or p.endswith("cleaner-offset-checkpoint") for p in changed)
