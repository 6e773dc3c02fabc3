"""The compact and retain summaries' per-topic rows: a topic row's note is true of every partition it summarises,
and a dry run and a real run of the same decisions give the same notes (the real run adds what only it does)."""

from __future__ import annotations

import re
from pathlib import Path

from jobs import api
from jobs.engine.report.run_report import TOPIC_NOTES_MAX, partitions_note
from tests.support.retention import NOW, OLD, RECENT, build_partition


def _notes(table: str) -> dict[str, str]:
    """Each topic row's note in a per-topic summary table (rows named by their first cell)."""
    lines = table.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("topic"))
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[header + 1])]
    out = {}
    for line in lines[header + 2:]:
        if not line.strip():
            break
        out[line[: spans[0][1]].strip()] = line[spans[-1][0]:].strip()
    return out


def test_a_note_only_some_partitions_have_is_counted_and_never_given_to_the_whole_topic() -> None:
    assert partitions_note(["a", "a", "a"]) == "a"
    assert partitions_note([None, "", None]) == ""
    assert partitions_note(["a", None, "a"]) == "2 of 3 partition(s): a"
    assert partitions_note(["b", "a", "a", None]) == "2 of 4 partition(s): a; 1 of 4 partition(s): b"
    many = [f"note {i}" for i in range(TOPIC_NOTES_MAX + 3)]
    said = partitions_note(many)
    assert said.endswith(f"; 3 of {len(many)} partition(s) other notes (--per-partition)"), said
    assert said.count(" partition(s): ") == TOPIC_NOTES_MAX


def test_retain_topic_rows_say_which_partitions_a_note_is_true_of_in_the_dry_run_and_the_real_run(
        tmp_path: Path) -> None:
    d = tmp_path / "logs"
    for p in (0, 1):  # each loses its old segment
        build_partition(d, "users", p, [[OLD], [RECENT], [RECENT]])
    build_partition(d, "users", 2, [[RECENT], [RECENT], [RECENT]])  # nothing past retention
    options = {"overrides": ("users:retention.ms=1d",)}
    seams = api.Seams(runner=api.InProcessTasks())
    dry = api.retain(d, api.RetainOptions(dry_run=True, **options), now=NOW, seams=seams)
    dry_note = _notes(dry.summary(layout="topic"))["users"]
    # not "no segment past retention", as if all three had none
    assert dry_note == "1 of 3 partition(s): no segment past retention"
    real = api.retain(d, api.RetainOptions(**options), now=NOW, seams=seams)
    assert [len(o.deleted) for o in sorted(real.report.outcomes, key=lambda o: o.partition)] == [1, 1, 0]
    # the same decisions in the same words, then what only the real run did (file.delete.delay.ms keeps them)
    assert _notes(real.summary(layout="topic"))["users"] == f"{dry_note}; 2 deleted segment(s) pending purge"


def test_compact_topic_rows_give_the_dry_run_and_the_real_run_the_same_notes(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    for p in (0, 1):  # compact,delete: retention takes the old segment, then compaction cleans the rest
        build_partition(d, "orders", p, [[OLD], [RECENT], [RECENT], [RECENT]])
    build_partition(d, "users", 0, [[RECENT], [RECENT], [RECENT]])
    build_partition(d, "users", 1, [[RECENT]])  # its only segment is the active one: nothing to clean
    options = {"overrides": ("orders:cleanup.policy=compact,delete", "orders:retention.ms=1d",
                             "users:cleanup.policy=compact")}
    seams = api.Seams(runner=api.InProcessTasks())
    dry = _notes(api.compact(d, api.CompactOptions(dry_run=True, **options), now=NOW, seams=seams)
                 .summary(layout="topic"))
    real = _notes(api.compact(d, api.CompactOptions(**options), now=NOW, seams=seams).summary(layout="topic"))
    assert dry["orders"] == "above min.cleanable.dirty.ratio 0.50"
    assert real["orders"] == f"{dry['orders']}; 2 deleted segment(s) pending purge"
    assert dry["users"] == real["users"] == ("1 of 2 partition(s): above min.cleanable.dirty.ratio 0.50; "
                                             "1 of 2 partition(s): nothing to clean: bound by active segment")


def test_inspect_topic_rows_say_how_many_partitions_a_compaction_note_is_true_of() -> None:
    from jobs.engine.report.outcomes import InspectRow
    from jobs.engine.report.render import inspect_topic_row

    def row(partition: int, note: str) -> InspectRow:
        return InspectRow.of("users", partition, {"policy": "compact", "compaction_note": note, "dirty_ratio": 0.5,
                                                  "clean_bytes": 100, "cleanable_bytes": 100})

    rows = [row(0, "above min.cleanable.dirty.ratio 0.10"), row(1, "nothing to clean: bound by active segment"),
            row(2, "above min.cleanable.dirty.ratio 0.10"), InspectRow.of("users", 3, {"error": "CRC mismatch"})]
    assert inspect_topic_row("users", rows)["note"] == (
        "1 UNREADABLE (listed below); 2 of 4 partition(s): above min.cleanable.dirty.ratio 0.10; "
        "1 of 4 partition(s): nothing to clean: bound by active segment")
    assert inspect_topic_row("users", rows[:1])["note"] == "above min.cleanable.dirty.ratio 0.10"
