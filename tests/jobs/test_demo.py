"""`make demo` (python -m jobs.commands.demo) succeeds and shows, on the console, every outcome its docstring promises:
compaction selected and skipped with the reason, a partial clean finished the next night, retention deletes
pending purge and their purge a night later. It runs on the suite's Spark session, so it costs the demo's
work only (about 50 MB)."""

from __future__ import annotations

import json

import pytest

from jobs.commands import demo


@pytest.mark.slow
def test_the_demo_exits_0_and_shows_every_outcome(spark, tmp_path, capsys) -> None:
    assert demo.main(["--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # one banner per step, numbered in order: generate, compact and retain on each night, verify
    banners = [line.split()[1] for line in out.splitlines() if line.startswith("== ")]
    assert banners == [f"{i}/6" for i in range(1, 7)], banners
    night1, night2 = out.split("night 2:", 1)
    for expected in ("no compact policy (cleanup.policy=delete)", "nothing to clean: bound by active segment",
                     "partial: map full at offset", "deleted segments pending purge until"):
        assert expected in night1, expected
    for expected in ("below min.cleanable.dirty.ratio", "purged"):
        assert expected in night2, expected

    def entries(name: str) -> dict[str, dict]:
        doc = json.loads((tmp_path / name).read_text())
        return {f"{e['topic']}-{e['partition']}": e for e in doc["partitions"]}

    # the changelog's partial clean of night 1 is finished on night 2
    assert entries("night-1-compact-report.json")["users-changelog-0"]["partial"]
    assert not entries("night-2-compact-report.json")["users-changelog-0"]["partial"]
    assert entries("night-1-retain-report.json")["clicks-0"]["action"] == "delete"
