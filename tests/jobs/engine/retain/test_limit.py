"""The delete-fraction safety limit (issue 9 item 11), through the CLI: a wrong --config or --now must not empty
a topic. Retention (in ``retain``, and in ``compact`` for compact,delete topics) leaves a topic wholly untouched,
reports it and exits 1 when its time and size rules would delete more than ``--max-delete-fraction`` (default:
``segjobs.max.delete.fraction``, 0.5) of its bytes that the reference would keep: the newest record of the log
dir as ``now``, and the settings an earlier run applied (here none: Kafka's defaults, retention.ms 7 days). So
the data here is 3 days old: past the run's 1-day retention, not past Kafka's week
(tests/jobs/engine/retain/test_guard.py has the routine cases the limit lets through)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.retention import (
    NOW,
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
    assert "retention.ms 1d (was 7d) against Kafka's default" in e["reason"]
    assert e["reason"].endswith("max 50%. If the config is right, run again with --accept-config-baseline: its "
                                "settings become the reference later runs are judged against")
    assert [d_["base_offset"] for d_ in e["refused"]["would_delete"]] == [0, 1]
    assert e["deleted"] == [] and e["bytes_removed"] == 0
    assert "w: 1 partition(s) REFUSED: would delete 66.7% of w's bytes" in err
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

    accepted = tmp_path / "accepted" / "logs"
    shutil.copytree(d, accepted)
    code, report = run("compact", d, *opts, "--partition", "cd-0", "--max-delete-fraction", "1")
    assert code == 0
    assert len(by_name(report)["cd-0"]["retention"]["deleted"]) == 2
    # the config accepted as the baseline: compaction's retention first goes ahead too
    code, report = run("compact", accepted, *opts, "--partition", "cd-0", "--accept-config-baseline")
    assert code == 0 and len(by_name(report)["cd-0"]["retention"]["deleted"]) == 2


def refusals(err: str) -> list[str]:
    return [line for line in err.splitlines() if "REFUSED" in line]


@pytest.mark.spark
def test_the_first_real_run_of_a_new_config_is_refused_once_per_topic_and_accepted_once(spark, tmp_path: Path,
                                                                                       capsys) -> None:
    """The first real `retain` of a config shorter than Kafka's default week: no run recorded settings yet, so
    Kafka's defaults are the reference and the limit refuses routine retention. It says so once for the topic, in
    durations, and names the way out: --accept-config-baseline, which a dry run shows, a plan records and its
    --apply carries out; the settings are then recorded, and later runs are judged against them without the
    option. (That the option does not let a wrong --now through: tests/jobs/rules/test_plan_retain.py.)"""
    d = tmp_path / "logs"
    for p in range(3):  # two thirds of each partition past the 1-day retention, within Kafka's default week
        build_partition(d, "w", p, [[MID], [MID], [RECENT]])
    new_config = ("--set", "w:retention.ms=1d")
    before = {p: files(d, f"w-{p}") for p in range(3)}
    recorded = tmp_path / "logs.segjobs" / "retention-settings.json"

    capsys.readouterr()
    code, report = retain(d, *new_config, quiet=False)
    err = capsys.readouterr().err
    assert code == 1 and {p: files(d, f"w-{p}") for p in range(3)} == before
    (line,) = refusals(err)  # once for the topic, not once per partition
    assert "w: 3 partition(s) REFUSED: would delete 66.7% of w's bytes (" in line and " in 3 partition(s), " in line
    assert "retention.ms 1d (was 7d) against Kafka's default" in line and "--accept-config-baseline" in line
    assert str(86_400_000) not in line and str(7 * 86_400_000) not in line
    assert [e["action"] for e in report["partitions"]] == ["refused"] * 3  # the report keeps every partition

    # the dry run shows what the accepting run does, writes nothing and records nothing
    capsys.readouterr()
    code, report = retain(d, *new_config, "--accept-config-baseline", "--dry-run", quiet=False)
    err = capsys.readouterr().err
    assert code == 0 and [len(e["deleted"]) for e in report["partitions"]] == [2, 2, 2]
    assert ("--accept-config-baseline: the settings of 1 topic(s) would be accepted as the safety limit's baseline "
            "and recorded for later runs: w: retention.ms 1d (was 7d) against Kafka's default") in err
    assert {p: files(d, f"w-{p}") for p in range(3)} == before and not recorded.exists()

    # reviewed as a plan, carried out by --apply (which takes the option from the plan)
    plan_file = tmp_path / "plan.json"
    assert main(["retain", "--log-dir", str(d), "--now", str(NOW), *new_config, "--accept-config-baseline",
                 "--dry-run", "--plan", str(plan_file), "--quiet"]) == 0
    assert json.loads(plan_file.read_text())["options"]["accept_config_baseline"] is True
    applied = tmp_path / "applied.json"
    assert main(["retain", "--log-dir", str(d), "--apply", str(plan_file), "--report", str(applied), "--quiet"]) == 0
    assert [len(e["deleted"]) for e in json.loads(applied.read_text())["partitions"]] == [2, 2, 2]
    assert json.loads(recorded.read_text())["topics"]["w"]["retention.ms"] == 86_400_000

    # Later runs are judged against the recorded settings, without the option: a partition added to w since
    # (five of its six segments, most of the topic's bytes, past the day) is routine retention now; the same
    # log dir without that record refuses it.
    build_partition(d, "w", 3, [[MID]] * 5 + [[RECENT]])
    control = tmp_path / "control" / "logs"
    shutil.copytree(d, control)
    code, report = retain(d, *new_config)
    assert code == 0 and len(entry(report, "w", 3)["deleted"]) == 5
    code, report = retain(control, *new_config)
    assert code == 1 and entry(report, "w", 3)["action"] == "refused"


def test_a_fraction_outside_0_to_1_is_a_usage_error(tmp_path: Path, capsys) -> None:
    for value in ("1.5", "-0.1", "half"):
        with pytest.raises(SystemExit) as exc:
            main(["retain", "--log-dir", str(tmp_path), "--max-delete-fraction", value])
        assert exc.value.code == 2
        assert "expected a number in [0, 1]" in capsys.readouterr().err
