"""The typed outcomes (jobs.engine.report.outcomes) are the only serialisers of the JSON report's partition entries and
totals and of the ledger's rows: each shape serialises to exactly the entry the jobs wrote before the types
existed (the literals below are entries of real `make demo` runs, key order included), and a real run's JSON
report, ledger rows and api results are all derived from the same outcomes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from jobs import api
from jobs.engine.report.outcomes import (
    REFUSED_KIND,
    Action,
    CleanedRange,
    CompactionOutcome,
    CompactTotals,
    DeletedSegment,
    Refusal,
    RetainTotals,
    RetentionOutcome,
    ledger_rows,
)
from jobs.engine.runtime.tasks import InProcessTasks
from jobs.engine.scan import PartitionError
from tests.support.builders import timestamped_segments, write_log

DETAIL = "largest timestamp 1700509513760 is 268086240 ms old > retention.ms 259200000"
PURGED = tuple(f"{b:020d}.{s}.deleted" for b in (0, 2850) for s in ("index", "log", "timeindex"))

#: night 2 of the demo, `retain`: clicks-0 loses a segment and purges the .deleted files of night 1
RETAINED = {
    "topic": "clicks", "partition": 0, "policy": "delete", "segments_before": 3, "bytes_before": 987238,
    "log_start_offset_before": 14050, "warnings": [], "action": "delete", "reason": "1 segment(s) past retention.ms",
    "segments_after": 2, "bytes_after": 522647, "bytes_removed": 464591, "rules": ["retention.ms"],
    "deleted": [{"base_offset": 14050, "next_offset": 16850, "bytes": 464591, "rule": "retention.ms",
                 "detail": DETAIL, "largest_timestamp": 1700509513760}],
    "log_start_offset": 16850, "kafka_would_roll": False, "renamed": 3, "leader_epoch_trimmed": True,
    "snapshots_deleted": [], "purged": list(PURGED), "purged_bytes": 2336828, "purge_pending": {"14050": 1700777660000},
    "applied": True,
}

#: night 1 of the demo, `compact`: users-changelog-0 cleaned partially (the demo's small offset map)
COMPACTED = {
    "topic": "users-changelog", "partition": 0, "selected": True,
    "reason": "dirty ratio 1.0000 (7736944 cleanable of 7736944 bytes) > min.cleanable.dirty.ratio 0.3; offset map "
              "full: cleaned up to offset 28881, the next run continues (raise --dedupe-buffer-bytes to clean more "
              "per pass)",
    "note": "above min.cleanable.dirty.ratio 0.30", "dirty_ratio": 1.0, "clean_bytes": 0, "cleanable_bytes": 7736944,
    "first_dirty_offset": 0, "first_uncleanable_offset": 36995, "bound_by": "active segment",
    "previous_checkpoint": None, "new_checkpoint": 28881, "segments_before": 9, "bytes_before": 8401274,
    "segments_after": 4, "bytes_after": 4746201, "records_removed": 17718, "bytes_removed": 3655073,
    "action": "compacted", "cleaned_range": [0, 28881], "partial": True, "groups": 2, "groups_rewritten": 2,
    "records_before": 32376, "records_after": 14658,
    "stats": {"records_read": 30826, "records_kept": 14658, "tombstones_removed": 0, "aborted_records_removed": 1550},
    "task_seconds": 0.823, "indexes_rebuilt": [], "warnings": [], "strategy": "memory", "strategy_reason": "requested",
}


def _retained() -> RetentionOutcome:
    return RetentionOutcome(
        "clicks", 0, Action.DELETE, "1 segment(s) past retention.ms", policy="delete", segments_before=3,
        bytes_before=987238, log_start_offset_before=14050, segments_after=2, bytes_after=522647,
        bytes_removed=464591, rules=("retention.ms",),
        deleted=(DeletedSegment(14050, 16850, 464591, "retention.ms", DETAIL, 1700509513760),),
        log_start_offset=16850, kafka_would_roll=False, applied=True, renamed=3, leader_epoch_trimmed=True,
        snapshots_deleted=(), purged=PURGED, purged_bytes=2336828, purge_pending={"14050": 1700777660000})


def _compacted() -> CompactionOutcome:
    e = COMPACTED
    return CompactionOutcome(
        "users-changelog", 0, Action.COMPACTED, str(e["reason"]), selected=True, note=str(e["note"]),
        dirty_ratio=1.0, clean_bytes=0, cleanable_bytes=7736944, first_dirty_offset=0, first_uncleanable_offset=36995,
        bound_by="active segment", previous_checkpoint=None, new_checkpoint=28881, segments_before=9,
        bytes_before=8401274, segments_after=4, bytes_after=4746201, records_removed=17718, bytes_removed=3655073,
        cleaned=CleanedRange((0, 28881), partial=True, groups=2, groups_rewritten=2, records_before=32376,
                             records_after=14658, stats=dict(e["stats"]), task_seconds=0.823, indexes_rebuilt=()),
        strategy="memory", strategy_reason="requested")


def test_a_retention_outcome_serialises_to_the_entry_retain_always_wrote() -> None:
    entry = _retained().to_entry()
    assert entry == RETAINED and list(entry) == list(RETAINED)  # the same keys, in the same order
    # a dry run's entry stops at the plan: no step ran
    planned = replace(_retained(), applied=False, renamed=None, leader_epoch_trimmed=None, snapshots_deleted=None,
                      purged=None, purged_bytes=None, purge_pending=None).to_entry()
    assert list(planned)[-2:] == ["kafka_would_roll", "applied"] and planned["applied"] is False


def test_a_compaction_outcome_serialises_to_the_entry_compact_always_wrote() -> None:
    entry = _compacted().to_entry()
    assert entry == COMPACTED and list(entry) == list(COMPACTED)


def test_unreadable_and_refused_partitions_keep_their_entries() -> None:
    error = PartitionError("CrcMismatchError", "bad crc", "/logs/t-0/00000000000000000000.log", 70, 2)
    unreadable = RetentionOutcome("t", 0, Action.ERROR, f"unreadable: {error}", error=error, readable=False)
    assert unreadable.to_entry() == {
        "topic": "t", "partition": 0, "action": "error", "reason": f"unreadable: {error}", "error": error.to_dict(),
        "segments_before": None, "segments_after": None, "bytes_before": None, "bytes_after": None,
        "bytes_removed": 0, "deleted": [], "warnings": []}
    assert CompactionOutcome("t", 0, Action.ERROR, "unreadable: x", error=error, readable=False).to_entry() == {
        "topic": "t", "partition": 0, "action": "error", "reason": "unreadable: x", "error": error.to_dict()}
    would = _retained().deleted
    refused = replace(_retained(), action=Action.REFUSED, reason="refused: would delete 70.0% of clicks' bytes",
                      applied=False, deleted=(), rules=(), bytes_removed=0, segments_after=3, bytes_after=987238,
                      renamed=None, leader_epoch_trimmed=None, snapshots_deleted=None, purged=None,
                      purged_bytes=None, purge_pending=None, refused=Refusal(would, 0.70004, 0.5))
    entry = refused.to_entry()
    assert list(entry)[-3:] == ["applied", "refused", "error"]
    assert entry["refused"] == {"would_delete": [d.to_dict() for d in would], "fraction": 0.7, "max_fraction": 0.5}
    assert entry["error"] == {"kind": REFUSED_KIND, "detail": refused.reason}


def test_ledger_rows_count_a_compact_runs_retention_step() -> None:
    retained = _retained()
    compacted = replace(_compacted(), retention=retained)
    row = compacted.ledger_row(dry_run=False)
    assert row == {"topic": "users-changelog", "partition": 0, "action": "compacted", "reason": COMPACTED["reason"],
                   "records_before": 32376, "records_after": 14658, "bytes_before": retained.bytes_before,
                   "bytes_after": 4746201, "segments_before": retained.segments_before, "segments_after": 4,
                   "records_removed": 17718, "bytes_removed": 3655073 + retained.bytes_removed}
    # a retention step that was not applied (a failed one) is not counted
    failed = replace(compacted, retention=replace(retained, action=Action.ERROR, applied=False))
    assert failed.ledger_row(dry_run=False)["bytes_removed"] == 3655073
    assert ledger_rows([retained], dry_run=False) == [{
        "topic": "clicks", "partition": 0, "action": "delete", "reason": "1 segment(s) past retention.ms",
        "records_before": 0, "records_after": 0, "bytes_before": 987238, "bytes_after": 522647, "segments_before": 3,
        "segments_after": 2, "records_removed": 0, "bytes_removed": 464591}]


def test_totals_keep_the_reports_keys() -> None:
    retained = _retained()
    errors = [{"partition": "a-0", "kind": REFUSED_KIND}, {"partition": "b-0", "kind": "CrcMismatchError"}]
    assert list(RetainTotals.of([retained], errors, 3).to_dict().items()) == [
        ("partitions", 1), ("segments_deleted", 1), ("bytes_removed", 464591), ("partitions_changed", 1),
        ("errors", 2), ("failed", 1), ("refused", 1), ("warnings", 3), ("files_purged", 6),
        ("bytes_purged", 2336828), ("bytes_in_scope", 987238)]
    assert list(CompactTotals.of([replace(_compacted(), retention=retained)], []).to_dict().items()) == [
        ("partitions", 1), ("selected", 1), ("records_removed", 17718), ("bytes_removed", 3655073 + 464591),
        ("errors", 0), ("failed", 0), ("refused", 0), ("bytes_compacted", 8401274), ("files_purged", 6),
        ("bytes_purged", 2336828)]


def test_a_runs_report_ledger_and_results_come_from_its_outcomes(tmp_path: Path) -> None:
    day = 86_400_000
    now = 1_700_000_000_000 + 10 * day
    logs = tmp_path / "logs"
    # three closed segments 9, 8 and 7 days old, then an active one: retention.ms of 5 days takes the three
    table, _, _ = timestamped_segments("events", 0, [[now - 9 * day], [now - 8 * day], [now - 7 * day], [now]])
    write_log(table, logs / "events-0")
    result = api.retain(logs, api.RetainOptions(overrides=("events:retention.ms=432000000",),
                                                report=str(tmp_path / "report.json")),
                        now=now, seams=api.Seams(runner=InProcessTasks()))
    assert result.ok
    (part,) = result.partitions
    assert isinstance(part.outcome, RetentionOutcome) and part.outcome.action is Action.DELETE
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["partitions"] == [part.entry] == [part.outcome.to_entry()]
    assert list(doc["partitions"][0]) == list(part.outcome.to_entry())
    assert doc["totals"]["segments_deleted"] == part.segments_deleted == len(part.outcome.deleted) == 3
    assert ledger_rows(result.report.outcomes, dry_run=False)[0]["bytes_removed"] == part.bytes_removed > 0
    assert "outcomes" not in doc


def test_plan_file_decisions_serialise_to_the_plan_files_format() -> None:
    """The decision types are the plan file's only serialisers: each shape gives exactly the document the
    demo's plan files hold (night 1, key order included), so plans made before the types still apply."""
    from jobs.engine.report.outcomes import CleaningDecision, CompactionDecision, PlannedDeletion, RetentionDecision

    retained = RetentionDecision(delete=(PlannedDeletion(0, 1022895, "retention.ms"),
                                         PlannedDeletion(3150, 1021687, "retention.ms")), log_start_offset=12600)
    assert json.dumps(retained.to_dict()) == json.dumps(
        {"delete": [{"segment": 0, "bytes": 1022895, "rule": "retention.ms"},
                    {"segment": 3150, "bytes": 1021687, "rule": "retention.ms"}], "log_start_offset": 12600})
    assert RetentionDecision(log_start_offset=0).to_dict() == {"delete": [], "log_start_offset": 0}
    assert RetentionDecision.of(None, refused=False).to_dict() == {"untouched": True}
    assert replace(retained, refused=True).to_dict()["refused"] is True and "refused" not in retained.to_dict()
    assert CompactionDecision(selected=False).to_dict() == {"selected": False}
    assert CompactionDecision(selected=False, held=True).to_dict() == {"selected": False, "held": True}
    selected = CompactionDecision(selected=True, first_dirty_offset=12600, first_uncleanable_offset=28250)
    assert json.dumps(selected.to_dict()) == json.dumps(
        {"selected": True, "first_dirty_offset": 12600, "first_uncleanable_offset": 28250})
    cleaned = CleaningDecision(end_offset=28250, groups=((12600, 15700, 18850, 22000), (25100,)),
                               records_removed=4928, bytes_removed=1591288)
    assert json.dumps(cleaned.to_dict()) == json.dumps(
        {"end_offset": 28250, "groups": [[12600, 15700, 18850, 22000], [25100]], "records_removed": 4928,
         "bytes_removed": 1591288})


def test_an_inspect_row_is_every_column_in_order_and_refuses_a_name_that_is_none() -> None:
    """inspect's row type declares the columns (the CSV header, the JSON entry and the DataFrame schema follow
    it): its entry holds every column in the declared order, None where unknown; a misspelt column is an error,
    never a silently added key."""
    import pytest

    from jobs.engine.inspect.driver import COLUMN_NAMES
    from jobs.engine.report.outcomes import InspectRow

    row = InspectRow.of("users", 3, {"bytes": 10, "records": 2, "compaction_selected": True})
    entry = row.to_entry()
    assert tuple(entry) == COLUMN_NAMES and COLUMN_NAMES[:2] == ("topic", "partition") and COLUMN_NAMES[-1] == "error"
    assert (entry["topic"], entry["partition"], entry["bytes"], entry["dirty_ratio"]) == ("users", 3, 10, None)
    assert row.readable and not InspectRow.of("users", 4, {"error": "unreadable"}).readable
    with pytest.raises(TypeError, match="byets"):
        InspectRow.of("users", 3, {"byets": 10})
