"""compact,delete topics: retention runs before compaction, and every prediction is what a real run does.

Issue 9 item 1: compacting first merged expired segments into one whose largest timestamp is recent, so retention
then freed nothing while the dry run and ``inspect`` had predicted its deletes. Now ``compact`` runs retention
first (as a broker's retention thread, every few minutes, effectively does) and plans compaction on what it
leaves, in the real run, in the dry run and in ``inspect`` alike.

Item 2: for every policy, the dry run's report equals the real run's (records, bytes, segments, retention) at
the same ``--now``, and ``inspect --exact`` predicts both. Everything runs through the CLI on the suite's Spark
session, on small generated or built log dirs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.layout import segment_file_name
from tests.support.replay import latest_values, read_partition
from tests.support.retention_first import DAY, NOW, ORDERS, build_orders, by_name, run

# ---------------------------------------------------------------------------------------------------
# Item 1: the scenario
# ---------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_compact_delete_runs_retention_first_and_the_dry_run_and_inspect_predict_it(spark, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    pdir = log_dir / "orders-0"
    bases, expected = build_orders(pdir)
    expired = {b: (pdir / segment_file_name(b)).read_bytes() for b in bases[:2]}
    recent_records = sum(len(b.records) for b in read_partition(pdir) if b.base_offset >= bases[2]) - 1

    code, insp = run("inspect", log_dir, *ORDERS, "--exact", "--format", "json")
    assert code == 0
    code, dry = run("compact", log_dir, *ORDERS, "--dry-run")
    assert code == 0
    ledger = tmp_path / "ledger"
    code, real = run("compact", log_dir, *ORDERS, "--ledger", str(ledger))
    assert code == 0

    # Retention deleted the two expired segments and they went whole: their bytes sit in .deleted files,
    # not merged into a segment stamped recently.
    retention = by_name(real)["orders-0"]["retention"]
    assert [(d["base_offset"], d["rule"]) for d in retention["deleted"]] == [(0, "retention.ms"),
                                                                            (bases[1], "retention.ms")]
    assert retention["bytes_removed"] == sum(len(b) for b in expired.values())
    for b, data in expired.items():
        assert not (pdir / segment_file_name(b)).exists()
        assert (pdir / (segment_file_name(b) + ".deleted")).read_bytes() == data
    # Compaction worked on what retention left: each recent key once, with its latest value.
    assert latest_values(pdir) == {**expected, b"active": b"a"}
    live = [r for b in read_partition(pdir) for r in b.records]
    assert len(live) == len(expected) + 1  # and the active segment's record
    assert min(int(p.name[:20]) for p in pdir.glob("*.log")) == bases[2]
    entry = by_name(real)["orders-0"]
    assert entry["records_removed"] == recent_records - len(expected)
    assert entry["new_checkpoint"] == bases[4]

    # The ledger counts both steps, as the summary does, from the partition as it was before retention.
    [ledger_row] = DeltaTable(str(ledger)).to_pyarrow_table().to_pylist()
    assert ledger_row["bytes_removed"] == entry["bytes_removed"] + retention["bytes_removed"] \
        == real["totals"]["bytes_removed"]
    assert (ledger_row["bytes_before"], ledger_row["segments_before"]) == \
           (retention["bytes_before"], retention["segments_before"])

    # The dry run and inspect predicted exactly that.
    predicted = by_name(dry)["orders-0"]
    for key in ("selected", "records_removed", "bytes_removed", "segments_before", "segments_after",
                "bytes_before", "bytes_after", "new_checkpoint"):
        assert predicted[key] == entry[key], key
    for key in ("deleted", "bytes_removed", "log_start_offset", "segments_after"):
        assert predicted["retention"][key] == retention[key], key
    assert dry["totals"]["bytes_removed"] == real["totals"]["bytes_removed"] > retention["bytes_removed"]
    row = by_name(insp)["orders-0"]
    assert row["retention_bytes_deleted"] == retention["bytes_removed"]
    assert row["retention_log_start_offset"] == bases[2]
    assert row["compaction_selected"] is True
    assert (row["compaction_records_removed"], row["compaction_bytes_removed"]) == \
           (entry["records_removed"], entry["bytes_removed"])
    # the cleaner cleans from the raised log start: the clean section starts at the first recent segment
    assert row["first_dirty_offset"] == bases[2] == entry["first_dirty_offset"]

    # A re-run at the same --now changes nothing.
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    code, again = run("compact", log_dir, *ORDERS)
    assert code == 0 and again["totals"]["bytes_removed"] == 0
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before


# ---------------------------------------------------------------------------------------------------
# Item 2: dry run == real run == inspect, for every policy
# ---------------------------------------------------------------------------------------------------

#: Report fields only a real run has (what it did to files), and timings: not predictions.
DID_ONLY = {"applied", "renamed", "purged", "purged_bytes", "purge_pending", "snapshots_deleted",
            "leader_epoch_trimmed", "task_seconds"}
#: A dry run's wording of an action -> the real run's.
WOULD = {"would compact": "compacted", "would leave unchanged": "unchanged"}


def comparable(value: Any) -> Any:
    """A report entry without the real-run-only fields and timings, with dry-run wording made real."""
    if isinstance(value, dict):
        return {k: (WOULD.get(v, v) if k == "action" else comparable(v)) for k, v in value.items()
                if k not in DID_ONLY}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def comparable_totals(totals: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in totals.items()
            if "second" not in k and k not in ("files_purged", "recovered_partitions")}


POLICIES = {
    "delete": {"d": "delete"},
    "compact": {"c": "compact"},
    "compact,delete": {"cd": "compact,delete"},
    "mix": {"d": "delete", "c": "compact", "cd": "compact,delete"},
}


def _generated(root: Path, topics: dict[str, str]) -> tuple[Path, list[str]]:
    """One generated partition per topic (duplicates, tombstones, some aborted transactions; a week of
    timestamps, of which retention.ms=6d at NOW expires about a sixth) and the --set options of its policy."""
    log_dir = root / "logs"
    start = NOW - 8 * DAY
    for i, topic in enumerate(sorted(topics)):
        generate_log_dir(GenerateSpec(topics=(topic,), partitions=1, records=600, segment_bytes=8 << 10,
                                      value_bytes=40, batch_records=10, superseded_share=0.5,
                                      tombstone_share=0.05, transactional_share=0.2, aborted_share=0.3,
                                      start_ms=start, span_ms=7 * DAY, seed=10 + i), log_dir)
    options = []
    for topic, policy in topics.items():
        options += ["--set", f"{topic}:cleanup.policy={policy}", "--set", f"{topic}:retention.ms=6d",
                    "--set", f"{topic}:delete.retention.ms=1d"]
    return log_dir, options


@pytest.mark.spark
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_dry_run_report_equals_the_real_run_and_inspect_predicts_it(spark, tmp_path: Path, policy: str) -> None:
    log_dir, options = _generated(tmp_path / "a", POLICIES[policy])
    copy = tmp_path / "b" / "logs"
    shutil.copytree(log_dir, copy)

    code, insp = run("inspect", log_dir, *options, "--exact", "--format", "json")
    assert code == 0
    reports = {}
    for command, where in (("compact", log_dir), ("retain", copy)):
        code_dry, dry = run(command, where, *options, "--dry-run")
        code_real, real = run(command, where, *options)
        assert code_dry == code_real == 0, (command, real["errors"])
        assert dry["dry_run"] and not real["dry_run"]
        assert [comparable(e) for e in dry["partitions"]] == [comparable(e) for e in real["partitions"]], command
        assert comparable_totals(dry["totals"]) == comparable_totals(real["totals"]), command
        reports[command] = by_name(real)

    compacted, retained = reports["compact"], reports["retain"]
    rows = by_name(insp)
    assert set(rows) == set(compacted) == set(retained)
    for name, row in rows.items():
        c, r = compacted[name], retained[name]
        assert row["compaction_selected"] == c["selected"], name
        if c["selected"]:
            assert (row["compaction_records_removed"], row["compaction_bytes_removed"]) == \
                   (c["records_removed"], c["bytes_removed"]), name
        assert (row["retention_segments_deleted"], row["retention_bytes_deleted"]) == \
               (len(r["deleted"]), r["bytes_removed"]), name
        assert row["retention_log_start_offset"] == r["log_start_offset"], name
        assert row["retention_refused"] is None
        if "retention" in c:  # compact,delete: compact's retention is retain's
            assert comparable(c["retention"]) == comparable(r), name
        # every case exercises what its policy does: retention deletes, compaction removes records
        topic_policy = POLICIES[policy][row["topic"]]
        assert bool(r["deleted"]) == ("delete" in topic_policy), name
        assert (c["records_removed"] > 0) == ("compact" in topic_policy), name
    # and what the real runs left on disk matches what they reported
    for name, c in compacted.items():
        assert sum(os.path.getsize(p) for p in (log_dir / name).glob("*.log")) == c["bytes_after"], name
