"""Plan files (issue 9 item 3): ``--dry-run --plan FILE`` writes the plan, ``--apply FILE`` carries out exactly
that plan or, when the log dir changed since, refuses (exit 2) naming the first difference. Through the CLI."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.frame.planfile import (
    PLAN_FORMAT,
    PLAN_VERSION,
    Plan,
    decision_difference,
    first_difference,
    write_plan,
)
from jobs.rules.timeutil import format_instant
from segment_io.layout import segment_file_name
from segment_io.storage import open_storage
from tests.support.retention import NOW, OLD, RECENT, build_partition, deleted, entry, write_checkpoint
from tests.support.retention_first import ORDERS, build_orders, by_name
from tests.support.s3_objects import upload

DAY = 86_400_000
SETTINGS = ("--set", "t:retention.ms=1d")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``segjobs ARGV``; (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def files(log_dir: Path) -> dict[str, bytes]:
    """The bytes of every file of the log dir that a run may change (the broker's .lock aside)."""
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def report_of(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture()
def retained(tmp_path: Path) -> tuple[Path, list[int]]:
    """t-0: two expired segments of five (40 % of the bytes), plus an untouched topic u."""
    log_dir = tmp_path / "logs"
    bases = build_partition(log_dir, "t", 0, [[OLD], [OLD], [RECENT], [RECENT], [RECENT]])
    build_partition(log_dir, "u", 0, [[RECENT], [RECENT]])
    return log_dir, bases


# ---------------------------------------------------------------------------------------------------
# retain
# ---------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_retain_plan_then_apply_executes_the_plan_with_its_now_and_configs(spark, retained, tmp_path, capsys) -> None:
    log_dir, bases = retained
    plan_file = tmp_path / "plan.json"
    before = files(log_dir)
    code, _, _ = cli(capsys, "retain", "--log-dir", str(log_dir), "--now", str(NOW), *SETTINGS, "--dry-run",
                     "--plan", str(plan_file), "--quiet")
    assert code == 0 and files(log_dir) == before
    plan = json.loads(plan_file.read_text())
    assert (plan["format"], plan["version"], plan["command"]) == (PLAN_FORMAT, PLAN_VERSION, "retain")
    assert plan["now_ms"] == NOW and plan["log_dir"] == str(log_dir)
    assert plan["configs"]["t"]["retention.ms"] == DAY and plan["configs"]["u"]["retention.ms"] == 7 * DAY
    log0 = segment_file_name(0)
    assert plan["fingerprint"]["partitions"]["t-0"][log0]["size"] == (log_dir / "t-0" / log0).stat().st_size
    # retention reads the log start entries of the partitions in scope (none are written here)
    assert plan["fingerprint"]["checkpoint_entries"] == {"log-start-offset-checkpoint": {"t-0": None, "u-0": None}}
    assert [d["segment"] for d in plan["decisions"]["t-0"]["retention"]["delete"]] == bases[:2]
    assert plan["decisions"]["u-0"]["retention"]["delete"] == []

    # No --now, no --set: both come from the plan (a run without them would keep everything for 7 days).
    report = tmp_path / "apply.json"
    code, _, _ = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file), "--report",
                     str(report), "--quiet")
    assert code == 0
    applied = report_of(report)
    assert applied["now_ms"] == NOW and not applied["dry_run"]
    assert deleted(entry(applied, "t", 0)) == [(bases[0], "retention.ms"), (bases[1], "retention.ms")]
    assert not (log_dir / "t-0" / log0).exists() and (log_dir / "t-0" / (log0 + ".deleted")).exists()

    # The same plan again: the log dir changed since (by the plan itself), so nothing is done.
    after = files(log_dir)
    code, _, err = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file), "--quiet")
    assert code == 2 and files(log_dir) == after
    assert f"refused, nothing done: t-0: {segment_file_name(0, '.index')} is gone since the plan was made" in err


@pytest.mark.spark
def test_a_plan_made_with_a_relative_log_dir_applies_with_it(spark, retained, tmp_path, capsys, monkeypatch) -> None:
    """The plan records the log dir made absolute; the same relative --log-dir (with or without a trailing slash),
    from the same directory, is the same log dir."""
    log_dir, bases = retained
    monkeypatch.chdir(log_dir.parent)
    code, _, err = cli(capsys, "retain", "--log-dir", log_dir.name, "--now", str(NOW), *SETTINGS, "--dry-run",
                       "--plan", "plan.json", "--quiet")
    assert code == 0, err
    assert json.loads((log_dir.parent / "plan.json").read_text())["log_dir"] == str(log_dir)
    code, _, err = cli(capsys, "retain", "--log-dir", log_dir.name + "/", "--apply", "plan.json", "--quiet")
    assert code == 0, err
    assert not (log_dir / "t-0" / segment_file_name(bases[0])).exists()


@pytest.mark.spark
def test_apply_refuses_a_log_dir_that_changed_and_names_the_first_difference(spark, retained, tmp_path,
                                                                             capsys) -> None:
    log_dir, bases = retained
    plan_file = tmp_path / "plan.json"
    assert cli(capsys, "retain", "--log-dir", str(log_dir), "--now", str(NOW), *SETTINGS, "--dry-run", "--plan",
               str(plan_file), "--quiet")[0] == 0
    active = log_dir / "t-0" / segment_file_name(bases[-1])
    size = active.stat().st_size
    with active.open("ab") as f:  # a broker appended a batch (here: its first bytes) since the plan was made
        f.write(b"\0" * 12)
    before = files(log_dir)
    code, out, err = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file))
    assert code == 2 and files(log_dir) == before
    assert (f"retain: error: --apply {plan_file}: refused, nothing done: t-0: {active.name} changed size {size} "
            f"-> {size + 12} since the plan was made; make a new plan (--dry-run --plan)") in err
    assert "segments" not in out  # no summary: nothing ran

    # A plan whose decisions no longer follow from the log dir (edited, or made by another version) is
    # refused too, before anything is changed.
    active.write_bytes(active.read_bytes()[:size])
    assert cli(capsys, "retain", "--log-dir", str(log_dir), "--now", str(NOW), *SETTINGS, "--dry-run", "--plan",
               str(plan_file), "--quiet")[0] == 0
    doc = json.loads(plan_file.read_text())
    doc["decisions"]["t-0"]["retention"]["delete"].pop()
    plan_file.write_text(json.dumps(doc))
    before = files(log_dir)
    code, _, err = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file), "--quiet")
    assert code == 2 and files(log_dir) == before
    assert "refused, nothing done: the retention decided now differs from the plan: t-0.delete: " in err


def test_apply_on_a_changed_log_dir_is_refused_before_spark_starts(retained, tmp_path, capsys) -> None:
    from jobs import api
    from tests.support.spark import spark_forbidden

    log_dir, bases = retained
    plan_file = tmp_path / "plan.json"
    # the plan of a dry run whose tasks ran in this process (the same planners and tasks as on Spark)
    made = api.retain(log_dir, api.RetainOptions(dry_run=True, plan=str(plan_file), overrides=("t:retention.ms=1d",)),
                      now=NOW, seams=api.Seams(runner=api.InProcessTasks()))
    assert made.exit_code == 0
    run_id = json.loads(plan_file.read_text())["run_id"]
    active = log_dir / "t-0" / segment_file_name(bases[-1])
    size = active.stat().st_size
    with active.open("ab") as f:  # a broker appended since the plan was made
        f.write(b"\0" * 12)
    before = files(log_dir)
    with spark_forbidden():
        code, out, err = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file))
    assert code == 2 and files(log_dir) == before and out == ""
    assert f"refused, nothing done: t-0: {active.name} changed size {size} -> {size + 12} since the plan" in err
    # the run said first which plan it was applying, when and by which run it was made, and what it would do
    (applying,) = [line for line in err.splitlines() if "applying the plan" in line]
    assert applying.startswith(f"segjobs retain: applying the plan {plan_file} (made 20"), applying
    assert f"by run {run_id}; --now {format_instant(NOW)}, 2 partition(s) in scope): retention deletes 2 " \
           f"segment(s), " in applying and applying.endswith(", in 1 partition(s)")


def test_plan_and_apply_usage_errors_cost_no_spark(retained, tmp_path, capsys) -> None:
    log_dir, _ = retained
    plan_file = tmp_path / "plan.json"
    write_plan(Plan(command="retain", log_dir=str(log_dir), now_ms=NOW, scope={"topics": [], "partitions": []},
                    options={"max_delete_fraction": None}, configs={}, fingerprint={}, decisions={}), str(plan_file))
    base = ("--log-dir", str(log_dir))
    cases = [
        (("retain", *base, "--plan", str(plan_file)), "--plan FILE needs --dry-run"),
        (("retain", *base, "--dry-run", "--plan", str(plan_file), "--apply", str(plan_file)),
         "--plan and --apply exclude each other"),
        (("retain", *base, "--apply", str(plan_file), "--now", str(NOW), *SETTINGS),
         "--apply takes --now, the topic configs, the scope and the options from the plan"),
        (("retain", *base, "--apply", str(plan_file), "--max-delete-fraction", "1"), "drop --max-delete-fraction"),
        (("compact", *base, "--apply", str(plan_file)), "the plan was made by `segjobs retain`, not `segjobs compact`"),
        (("retain", "--log-dir", str(tmp_path), "--apply", str(plan_file)), f"the plan is for --log-dir {log_dir}"),
        (("retain", *base, "--apply", str(tmp_path / "missing.json")), "cannot read the plan"),
    ]
    for argv, message in cases:
        code, out, err = cli(capsys, *argv)
        assert code == 2 and message in err, (argv, err)
        assert out == ""
    plan_file.write_text(json.dumps({"format": PLAN_FORMAT, "version": 99}))
    code, _, err = cli(capsys, "retain", *base, "--apply", str(plan_file))
    assert code == 2 and "plan file version 99" in err


def policy_line(out: str) -> str:
    """The summary's last line: where each topic's cleanup.policy came from."""
    (line,) = [x for x in out.splitlines() if x.startswith("cleanup.policy: ")]
    return line


@pytest.mark.spark
def test_apply_names_the_origins_of_the_settings_the_plan_recorded(spark, retained, tmp_path, capsys) -> None:
    log_dir, bases = retained
    config = tmp_path / "topics.toml"
    config.write_text('[topics."t"]\n"cleanup.policy" = "delete"\n')
    plan_file, planned, applied = tmp_path / "plan.json", tmp_path / "planned.json", tmp_path / "applied.json"
    code, dry_out, _ = cli(capsys, "retain", "--log-dir", str(log_dir), "--now", str(NOW), "--config", str(config),
                           *SETTINGS, "--dry-run", "--plan", str(plan_file), "--report", str(planned), "--quiet")
    assert code == 0
    origins = json.loads(plan_file.read_text())["config_origins"]
    assert origins["t"] == {"cleanup.policy": f'{config} [topics."t"]', "retention.ms": "--set t:retention.ms=1d"}
    assert origins["u"] == {}  # Kafka's defaults are not written down
    assert report_of(planned)["topics"] == {
        "t": {"policy": "delete", "policy_from": f'{config} [topics."t"]'},
        "u": {"policy": "delete", "policy_from": "Kafka's default"}}

    # the applied run says what the dry run said (no --set was given to either for cleanup.policy)
    code, out, _ = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file), "--report",
                       str(applied), "--quiet")
    assert code == 0 and deleted(entry(report_of(applied), "t", 0)) == [(bases[0], "retention.ms"),
                                                                        (bases[1], "retention.ms")]
    assert report_of(applied)["topics"] == report_of(planned)["topics"]
    assert policy_line(out) == policy_line(dry_out) == (f'cleanup.policy: delete from {config} [topics."t"] (t); '
                                                        f"delete from Kafka's default (u)")


@pytest.mark.spark
def test_a_plan_made_before_origins_and_entry_fingerprints_still_applies(spark, retained, tmp_path, capsys) -> None:
    """A plan file of the previous version: no config_origins, and a fingerprint of every partition in scope
    with the SHA-256 of each whole checkpoint file. It applies as it did, and names where its settings came from
    as honestly as it can: from the plan."""
    log_dir, bases = retained
    write_checkpoint(log_dir, "log-start-offset-checkpoint", {("u", 0): 0})
    plan_file, applied = tmp_path / "plan.json", tmp_path / "applied.json"
    assert cli(capsys, "retain", "--log-dir", str(log_dir), "--now", str(NOW), *SETTINGS, "--dry-run", "--plan",
               str(plan_file), "--quiet")[0] == 0
    doc = json.loads(plan_file.read_text())
    del doc["config_origins"]
    checkpoint = (log_dir / "log-start-offset-checkpoint").read_bytes()
    doc["fingerprint"] = {"partitions": doc["fingerprint"]["partitions"],
                          "checkpoints": {"cleaner-offset-checkpoint": None,
                                          "log-start-offset-checkpoint": hashlib.sha256(checkpoint).hexdigest()}}
    plan_file.write_text(json.dumps(doc))
    # such a plan is checked as it was made: the whole file, even an entry of a partition out of its scope
    write_checkpoint(log_dir, "log-start-offset-checkpoint", {("u", 0): 0, ("gone", 0): 5})
    code, _, err = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file), "--quiet")
    assert code == 2 and "log-start-offset-checkpoint changed since the plan was made (sha256 " in err
    (log_dir / "log-start-offset-checkpoint").write_bytes(checkpoint)
    code, out, _ = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(plan_file), "--report",
                       str(applied), "--quiet")
    assert code == 0 and deleted(entry(report_of(applied), "t", 0)) == [(bases[0], "retention.ms"),
                                                                        (bases[1], "retention.ms")]
    unknown = f"the plan {plan_file}, which does not record where each setting came from"
    assert report_of(applied)["topics"] == {"t": {"policy": "delete", "policy_from": unknown},
                                            "u": {"policy": "delete", "policy_from": unknown}}
    assert policy_line(out) == f"cleanup.policy: delete from {unknown} (t, u)"


def test_first_difference_and_decision_difference_name_what_changed() -> None:
    planned = {"partitions": {"orders-0": {"00000000000000001000.log": {"size": 1048576, "mtime_ms": 5}}},
               "checkpoints": {"log-start-offset-checkpoint": "ab" * 32}}
    assert first_difference(planned, planned) is None
    grown = {**planned, "partitions": {"orders-0": {"00000000000000001000.log": {"size": 1049600, "mtime_ms": 5}}}}
    assert first_difference(planned, grown) == ("orders-0: 00000000000000001000.log changed size 1048576 -> 1049600 "
                                                "since the plan was made")
    etag = {**planned, "partitions": {"orders-0": {"00000000000000001000.log": {"size": 1048576, "mtime_ms": 5,
                                                                                "etag": "e1"}}}}
    assert first_difference(planned, etag) == ("orders-0: 00000000000000001000.log changed ETag None -> e1 since "
                                               "the plan was made")
    assert first_difference(planned, {**planned, "partitions": {}}) == "orders-0: the partition is gone since " \
                                                                        "the plan was made"
    moved = {**planned, "checkpoints": {"log-start-offset-checkpoint": "cd" * 32}}
    assert first_difference(planned, moved) == ("log-start-offset-checkpoint changed since the plan was made "
                                                 "(sha256 abababababab -> cdcdcdcdcdcd)")
    assert decision_difference({"a-0": {"delete": [1]}}, {"a-0": {"delete": [1, 2]}}) == \
        "a-0.delete: [1] in the plan, [1, 2] now"


def test_the_first_difference_is_met_in_partition_name_order_even_for_a_new_partition() -> None:
    stamp = {"size": 10, "mtime_ms": 5}
    planned = {"partitions": {"a-0": {"x.log": stamp}, "c-0": {"x.log": stamp}}, "checkpoint_entries": {}}
    now = {"partitions": {"a-0": {"x.log": stamp}, "b-0": {"x.log": stamp}, "c-0": {"x.log": {**stamp, "size": 11}},
                          "d-0": {}}, "checkpoint_entries": {}}
    assert first_difference(planned, now) == "b-0: the partition is new since the plan was made"
    del now["partitions"]["b-0"]
    assert first_difference(planned, now) == "c-0: x.log changed size 10 -> 11 since the plan was made"
    now["partitions"]["c-0"] = {"x.log": stamp}
    assert first_difference(planned, now) == "d-0: the partition is new since the plan was made"


def _plan_document() -> dict:
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "command": "compact", "log_dir": "/logs", "now_ms": NOW,
            "scope": {"topics": [], "partitions": []}, "options": {}, "configs": {},
            "fingerprint": {"partitions": {"t-0": {"00000000000000000000.log": {"size": 1, "mtime_ms": 2,
                                                                                 "etag": "e"}}},
                            "checkpoint_entries": {"cleaner-offset-checkpoint": {"t-0": None}}},
            "decisions": {"t-0": {"retention": {"delete": [{"segment": 0, "bytes": 1, "rule": "retention.ms"}],
                                                "log_start_offset": 5},
                                  "compaction": {"selected": True, "first_dirty_offset": 5,
                                                 "first_uncleanable_offset": 9,
                                                 "outcome": {"end_offset": 9, "groups": [[5]], "records_removed": 2,
                                                             "bytes_removed": 70}}},
                          "u-0": {"retention": {"untouched": True}, "compaction": {"selected": False, "held": True}}},
            "run_id": "r", "made_ms": 1, "config_origins": {}}


def test_a_plan_file_reads_back_into_its_types_and_writes_the_same_bytes() -> None:
    text = json.dumps(_plan_document(), indent=2) + "\n"
    plan = Plan.from_json(text, source="p.json")
    assert plan.decisions["t-0"].cleaning is not None and plan.decisions["t-0"].cleaning.groups == ((5,),)
    assert plan.decisions["u-0"].compaction is not None and plan.decisions["u-0"].compaction.held
    assert plan.fingerprint.partitions["t-0"]["00000000000000000000.log"].etag == "e"
    assert plan.to_json() == text


@pytest.mark.parametrize("edit", [
    lambda d: d["retention"]["delete"][0].update(rule="retention.forever"),
    lambda d: d["retention"].update(refused=False),
    lambda d: d["compaction"].update(colour="blue"),
])
def test_decisions_this_version_does_not_write_make_a_malformed_plan_file(tmp_path, edit) -> None:
    from segment_io.errors import UsageError

    doc = _plan_document()
    edit(doc["decisions"]["t-0"])
    with pytest.raises(UsageError, match="malformed plan file"):
        Plan.from_json(json.dumps(doc), source="p.json")


# ---------------------------------------------------------------------------------------------------
# compact (compact,delete: retention and compaction in one plan)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_compact_plan_apply_dry_run_and_apply(spark, tmp_path, capsys) -> None:
    log_dir = tmp_path / "logs"
    bases, _ = build_orders(log_dir / "orders-0")
    plan_file, planned_report = tmp_path / "plan.json", tmp_path / "planned.json"
    code, _, _ = cli(capsys, "compact", "--log-dir", str(log_dir), "--now", str(NOW), *ORDERS, "--dry-run",
                     "--plan", str(plan_file), "--report", str(planned_report), "--quiet")
    assert code == 0
    decisions = json.loads(plan_file.read_text())["decisions"]["orders-0"]
    assert [d["segment"] for d in decisions["retention"]["delete"]] == bases[:2]
    compaction = decisions["compaction"]
    assert compaction["selected"] and compaction["first_dirty_offset"] == bases[2]
    assert compaction["outcome"]["groups"] == [[bases[2], bases[3]]]
    predicted = by_name(report_of(planned_report))["orders-0"]
    assert compaction["outcome"]["records_removed"] == predicted["records_removed"] > 0

    # --apply --dry-run: what apply would do, checked against the plan, nothing written
    before = files(log_dir)
    shown = tmp_path / "shown.json"
    code, _, _ = cli(capsys, "compact", "--log-dir", str(log_dir), "--apply", str(plan_file), "--dry-run",
                     "--report", str(shown), "--quiet")
    assert code == 0 and files(log_dir) == before
    assert by_name(report_of(shown))["orders-0"]["records_removed"] == predicted["records_removed"]

    done = tmp_path / "done.json"
    code, _, _ = cli(capsys, "compact", "--log-dir", str(log_dir), "--apply", str(plan_file), "--report",
                     str(done), "--quiet")
    assert code == 0
    e = by_name(report_of(done))["orders-0"]
    assert (e["action"], e["records_removed"], e["bytes_removed"]) == \
           ("compacted", predicted["records_removed"], predicted["bytes_removed"])
    assert [d["base_offset"] for d in e["retention"]["deleted"]] == bases[:2]
    assert sorted(int(p.name[:20]) for p in (log_dir / "orders-0").glob("*.log")) == [bases[2], bases[4]]


NIGHT = '[topics."orders"]\n"cleanup.policy" = "compact"\n\n[topics."clicks"]\n"retention.ms" = "1d"\n'


@pytest.mark.spark
def test_both_plans_of_a_night_made_before_it_apply_in_order(spark, tmp_path, capsys) -> None:
    """A night reviewed beforehand: the retain plan and the compact plan made first, then `retain --apply` and
    `compact --apply`. Retention deletes from the delete-only topic clicks and raises its log start entry, which
    compaction neither reads nor changes: its plan still applies. A change to what compaction does read still
    makes it stale, named."""
    log_dir = tmp_path / "logs"
    clicks = build_partition(log_dir, "clicks", 0, [[OLD], [OLD], [RECENT], [RECENT], [RECENT]])
    build_orders(log_dir / "orders-0")
    config = tmp_path / "topics.toml"
    config.write_text(NIGHT)
    retain_plan, compact_plan = tmp_path / "retain-plan.json", tmp_path / "compact-plan.json"
    planned = tmp_path / "planned.json"
    for command, plan_file, report in (("retain", retain_plan, None), ("compact", compact_plan, planned)):
        assert cli(capsys, command, "--log-dir", str(log_dir), "--now", str(NOW), "--config", str(config),
                   "--dry-run", "--plan", str(plan_file), "--quiet",
                   *(("--report", str(report)) if report else ()))[0] == 0
    fingerprint = json.loads(compact_plan.read_text())["fingerprint"]
    assert list(fingerprint["partitions"]) == ["orders-0"]
    assert fingerprint["checkpoint_entries"] == {"cleaner-offset-checkpoint": {"orders-0": None},
                                                 "log-start-offset-checkpoint": {"orders-0": None}}
    predicted = by_name(report_of(planned))["orders-0"]
    assert predicted["action"] == "would compact" and predicted["records_removed"] > 0

    # a snapshot of the log dir before the night, for the stale case below
    before_night = tmp_path / "before"
    shutil.copytree(log_dir, before_night)

    retained_report, compacted_report = tmp_path / "retained.json", tmp_path / "compacted.json"
    code, _, err = cli(capsys, "retain", "--log-dir", str(log_dir), "--apply", str(retain_plan), "--report",
                       str(retained_report), "--quiet")
    assert code == 0, err
    assert deleted(entry(report_of(retained_report), "clicks", 0)) == [(clicks[0], "retention.ms"),
                                                                       (clicks[1], "retention.ms")]
    assert "clicks 0 2" in (log_dir / "log-start-offset-checkpoint").read_text()
    code, _, err = cli(capsys, "compact", "--log-dir", str(log_dir), "--apply", str(compact_plan), "--report",
                       str(compacted_report), "--quiet")
    assert code == 0, err
    done = by_name(report_of(compacted_report))["orders-0"]
    assert (done["action"], done["records_removed"], done["bytes_removed"]) == \
           ("compacted", predicted["records_removed"], predicted["bytes_removed"])

    # What compaction reads changed since the plan: refused, nothing done, the difference named.
    for change, named in (
            (lambda d: write_checkpoint(d, "log-start-offset-checkpoint", {("orders", 0): 3}),
             "log-start-offset-checkpoint: the entry of orders-0 changed none -> 3 since the plan was made"),
            (lambda d: write_checkpoint(d, "cleaner-offset-checkpoint", {("orders", 0): 5}),
             "cleaner-offset-checkpoint: the entry of orders-0 changed none -> 5 since the plan was made"),
            (lambda d: append(d / "orders-0" / segment_file_name(0), b"\0" * 12),
             f"orders-0: {segment_file_name(0)} changed size ")):
        again = tmp_path / "again"
        shutil.rmtree(again, ignore_errors=True)
        shutil.copytree(before_night, again)
        change(again)
        doc = json.loads(compact_plan.read_text())
        doc["log_dir"] = str(again)
        moved = tmp_path / "moved-plan.json"
        moved.write_text(json.dumps(doc))
        state = files(again)
        code, _, err = cli(capsys, "compact", "--log-dir", str(again), "--apply", str(moved), "--quiet")
        assert code == 2 and files(again) == state and named in err, err


# ---------------------------------------------------------------------------------------------------
# S3: the fingerprint holds ETags
# ---------------------------------------------------------------------------------------------------


def test_apply_on_s3_refuses_an_object_rewritten_since_the_plan(s3_bucket, s3_env, tmp_path, spark, capsys) -> None:
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    local = tmp_path / "logs"
    bases = build_partition(local, "t", 0, [[OLD], [RECENT], [RECENT]])
    upload(storage, local, log_dir)
    plan_file = tmp_path / "plan.json"
    opts = ("--log-dir", log_dir, "--s3-endpoint", endpoint.endpoint_url, "--quiet")
    assert cli(capsys, "retain", *opts, "--now", str(NOW), *SETTINGS, "--dry-run", "--plan", str(plan_file))[0] == 0
    plan = json.loads(plan_file.read_text())
    name = segment_file_name(bases[1], ".timeindex")
    assert plan["fingerprint"]["partitions"]["t-0"][name]["etag"]
    uri = f"{log_dir}/t-0/{name}"
    storage.write_atomic(uri, storage.read(uri)[:-12])  # the time index lost its last entry
    code, _, err = cli(capsys, "retain", *opts, "--apply", str(plan_file))
    assert code == 2 and f"t-0: {name} changed size" in err
    assert segment_file_name(0) in {f.name for f in storage.list(f"{log_dir}/t-0")}
