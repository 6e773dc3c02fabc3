"""The delete-fraction safety limit (issue 9 item 11), through the CLI: a wrong --config or --now must not empty
a topic. Retention (in ``retain``, and in ``compact`` for compact,delete topics) leaves a topic wholly untouched,
reports it and exits 1 when its time and size rules would delete more than ``--max-delete-fraction`` (default:
``segjobs.max.delete.fraction``, 0.5) of its bytes that the reference would keep: the newest record of the log
dir as ``now``, and the settings an earlier run applied (here none: Kafka's defaults, retention.ms 7 days). So
the data here is 3 days old: past the run's 1-day retention, not past Kafka's week
(tests/jobs/engine/test_retain_guard.py has the routine cases the limit lets through)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.retention import (
    OLD,
    RECENT,
    build_partition,
    deleted,
    entry,
    retain,
    write_checkpoint,
)
from tests.support.retention_first import by_name, run

MID = RECENT - 3 * 86_400_000  #: past the 1-day retention these tests set, within Kafka's default week


def files(log_dir: Path, partition: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((log_dir / partition).iterdir())}


@pytest.mark.spark
def test_retain_refuses_a_topic_over_the_limit_and_the_others_proceed(spark, tmp_path: Path, capsys) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [RECENT]])  # two thirds of the bytes expired
    build_partition(d, "t", 1, [[RECENT], [RECENT], [RECENT]])  # ... but the topic as a whole: a third
    build_partition(d, "w", 0, [[MID], [MID], [RECENT]])  # two thirds, unexplained by Kafka's default week
    build_partition(d, "u", 0, [[OLD], [RECENT], [RECENT]])  # a third
    # log start offset: an operator's explicit DeleteRecords, not judged by the limit
    build_partition(d, "s", 0, [[RECENT], [RECENT], [RECENT]])
    write_checkpoint(d, "log-start-offset-checkpoint", {("s", 0): 2})
    copy = tmp_path / "copy"
    shutil.copytree(d, copy / "logs")
    untouched = files(d, "w-0")

    capsys.readouterr()
    code, report = retain(d, "--set", "*:retention.ms=1d", quiet=False)
    out, err = capsys.readouterr()
    assert code == 1
    e = entry(report, "w", 0)
    assert e["action"] == "refused" and e["reason"].startswith("refused: would delete 66.7% of w's bytes (")
    assert "retention.ms 86400000 (was 604800000) against Kafka's default" in e["reason"]
    assert e["reason"].endswith("max 50%. If the inputs are right, run again with --max-delete-fraction 1 (or set "
                                "segjobs.max.delete.fraction for the topic)")
    assert [d_["base_offset"] for d_ in e["refused"]["would_delete"]] == [0, 1]
    assert e["deleted"] == [] and e["bytes_removed"] == 0
    assert "w-0 REFUSED: would delete 66.7% of w's bytes" in err
    assert report["errors"] == [{"partition": "w-0", "kind": "MaxDeleteFractionExceeded", "detail": e["reason"]}]
    # one name in every text: REFUSED, never FAILED (kept for real failures); the JSON totals count it apart
    row = next(line for line in out.splitlines() if line.startswith("w-0 "))
    assert "REFUSED: would delete 66.7% of w's bytes" in row
    assert "; 1 partition(s) REFUSED by the delete-fraction limit and left untouched" in out
    assert "FAILED" not in out + err and "MaxDeleteFractionExceeded" not in out + err
    assert (report["totals"]["errors"], report["totals"]["refused"], report["totals"]["failed"]) == (1, 1, 0)
    assert files(d, "w-0") == untouched
    assert deleted(entry(report, "t", 0)) == [(0, "retention.ms"), (1, "retention.ms")]  # a third of topic t
    assert deleted(entry(report, "u", 0)) == [(0, "retention.ms")]
    assert deleted(entry(report, "s", 0)) == [(0, "log-start-offset"), (1, "log-start-offset")]

    # The topic's config allows it ...
    code, report = retain(copy / "logs", "--set", "*:retention.ms=1d", "--set", "w:segjobs.max.delete.fraction=0.7")
    assert code == 0 and deleted(entry(report, "w", 0)) == [(0, "retention.ms"), (1, "retention.ms")]
    # ... or the flag, which decides for every topic when given
    build_partition(copy / "more", "w", 0, [[MID], [MID], [RECENT]])
    code, report = retain(copy / "more", "--set", "*:retention.ms=1d", "--set", "w:segjobs.max.delete.fraction=0.1",
                          "--max-delete-fraction", "1")
    assert code == 0 and len(entry(report, "w", 0)["deleted"]) == 2


@pytest.mark.spark
def test_compact_leaves_a_refused_compact_delete_topic_wholly_untouched(spark, tmp_path: Path, capsys) -> None:
    d = tmp_path / "logs"
    build_partition(d, "cd", 0, [[MID, MID + 1], [MID, MID + 1], [RECENT]])  # 80 % of the bytes expired
    opts = ("--set", "cd:cleanup.policy=compact,delete", "--set", "cd:retention.ms=1d")
    before = files(d, "cd-0")
    code, insp = run("inspect", d, *opts, "--exact", "--format", "json")
    assert code == 0
    row = by_name(insp)["cd-0"]
    assert row["retention_refused"].startswith("refused: would delete 80.0% of cd's bytes")
    assert row["compaction_selected"] is False and row["compaction_bytes_removed"] == 0

    capsys.readouterr()
    code, report = run("compact", d, *opts, "--partition", "cd-0")  # even when asked for by name
    assert code == 1 and files(d, "cd-0") == before
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("cd-0 "))
    assert "left untouched: REFUSED: would delete 80.0% of cd's bytes" in line and line.count("would delete") == 1
    assert "1 partition(s) REFUSED by the delete-fraction limit" in out and "FAILED" not in out
    assert (report["totals"]["refused"], report["totals"]["failed"]) == (1, 0)
    e = by_name(report)["cd-0"]
    assert (e["action"], e["selected"]) == ("skipped", False)
    assert e["reason"] == "left untouched: retention " + row["retention_refused"]
    assert e["retention"]["action"] == "refused"
    assert [x["kind"] for x in report["errors"]] == ["MaxDeleteFractionExceeded"]

    code, report = run("compact", d, *opts, "--partition", "cd-0", "--max-delete-fraction", "1")
    assert code == 0
    assert len(by_name(report)["cd-0"]["retention"]["deleted"]) == 2


def test_a_fraction_outside_0_to_1_is_a_usage_error(tmp_path: Path, capsys) -> None:
    for value in ("1.5", "-0.1", "half"):
        with pytest.raises(SystemExit) as exc:
            main(["retain", "--log-dir", str(tmp_path), "--max-delete-fraction", value])
        assert exc.value.code == 2
        assert "expected a number in [0, 1]" in capsys.readouterr().err
