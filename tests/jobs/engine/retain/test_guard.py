"""The delete-fraction limit aimed at mistakes, not at routine Kafka retention (issue 19 item 7), through whole jobs
(tasks in this process).

Routine: a quiet topic whose closed segments all passed retention.ms while other topics are busy; a
``compact,delete`` topic after a long gap (by ``retain`` and by ``compact``'s retention first). Kafka deletes
those, and so does segjobs, whatever the share. Mistakes: a ``--now`` years after the newest record in the log
dir; a ``retention.ms`` typo'd to 7 (ms) against the settings an earlier run applied (or, with none recorded,
Kafka's defaults). Those are refused, and ``inspect`` and ``retain --dry-run`` agree on it.
"""

from __future__ import annotations

from pathlib import Path

from jobs import api
from tests.support.retention import build_partition

DAY = 86_400_000
NOW = 1_700_000_000_000
WEEK = 7 * DAY
SEAMS = api.Seams(runner=api.InProcessTasks())


def retain(log_dir: Path, *overrides: str, now: int = NOW, dry_run: bool = False, **options) -> api.RetainResult:
    return api.retain(log_dir, api.RetainOptions(overrides=("*:retention.ms=7d", *overrides), progress=None,
                                                 dry_run=dry_run, **options), now=now, seams=SEAMS)


def inspect(log_dir: Path, *overrides: str, now: int = NOW) -> api.InspectResult:
    return api.inspect(log_dir, api.InspectOptions(overrides=("*:retention.ms=7d", *overrides), progress=None),
                       now=now, seams=SEAMS)


def busy(log_dir: Path, topic: str = "busy", *, newest: int = NOW - 1000) -> None:
    """A topic written every day of the last week, up to ``newest``."""
    build_partition(log_dir, topic, 0, [[newest - (7 - i) * DAY + 1] for i in range(7)] + [[newest]])


def actions(result: api.RetainResult) -> dict[str, str]:
    return {p.name: p.action for p in result.partitions}


def test_a_quiet_topic_past_retention_is_deleted_while_others_are_busy(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    busy(logs)
    build_partition(logs, "quiet", 0, [[NOW - 60 * DAY]] * 5 + [[NOW - 59 * DAY]])  # 5 of 6 segments expire
    result = retain(logs)
    assert result.exit_code == 0, result.errors
    assert actions(result)["quiet-0"] == "delete" and result.refused_topics == ()
    assert next(p for p in result.partitions if p.name == "quiet-0").segments_deleted == 5


def test_a_compact_delete_topic_after_a_long_gap_is_retained_by_retain_and_by_compact(tmp_path: Path) -> None:
    for job in ("retain", "compact"):
        logs = tmp_path / job / "logs"
        build_partition(logs, "cd", 0, [[NOW - 40 * DAY]] * 4 + [[NOW - DAY], [NOW - 1000]])  # a month's gap
        overrides = ("cd:cleanup.policy=compact,delete",)
        if job == "retain":
            result = retain(logs, *overrides)
            assert result.exit_code == 0 and actions(result)["cd-0"] == "delete", result.errors
        else:
            compacted = api.compact(logs, api.CompactOptions(overrides=("*:retention.ms=7d", *overrides),
                                                             progress=None), now=NOW, seams=SEAMS)
            assert compacted.exit_code == 0, compacted.errors
            [part] = compacted.partitions
            assert part.retention is not None and part.retention.segments_deleted == 4


def test_a_now_years_ahead_of_the_newest_record_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    busy(logs)
    wrong = NOW + 3 * 365 * DAY
    before = sorted(p.name for p in (logs / "busy-0").iterdir())
    result = retain(logs, now=wrong)
    assert result.exit_code == 1 and result.refused_topics == ("busy",)
    [error] = result.errors
    assert error["kind"] == "MaxDeleteFractionExceeded" and "after the newest record in the log dir" in error["detail"]
    assert sorted(p.name for p in (logs / "busy-0").iterdir()) == before
    # the same --now is fine once it is what the user means
    assert retain(logs, now=wrong, max_delete_fraction=1.0).exit_code == 0


def _copied(log_dir: Path, at_ms: int) -> None:
    """Every file of ``log_dir`` last modified at ``at_ms``, as ``cp -r``, a backup or a restore leaves them."""
    import os

    for path in log_dir.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(at_ms * 1_000_000, at_ms * 1_000_000))


def test_a_wrong_now_is_refused_on_a_copy_whose_files_bear_the_day_it_was_made(tmp_path: Path) -> None:
    """The newest record is read from records, never from file mtimes: on a copy made long after its data, every
    mtime lies near the wrong --now and let it pass in compact (its selection dates the active segments by the
    listing) and in a retain scoped to some topics (the others were dated by their files). Both deleted most of a
    topic that retain over the whole dir refused at the same --now."""
    wrong = NOW + 3 * 365 * DAY
    logs = tmp_path / "logs"
    busy(logs, "cd")
    busy(logs, "other")
    _copied(logs, wrong - DAY)
    before = sorted(p.name for p in (logs / "cd-0").iterdir())
    overrides = ("*:retention.ms=7d", "cd:cleanup.policy=compact,delete")
    compacted = api.compact(logs, api.CompactOptions(overrides=overrides, progress=None), now=wrong, seams=SEAMS)
    assert compacted.exit_code == 1, compacted.errors
    assert [(e["partition"], e["kind"]) for e in compacted.errors] == [("cd-0", "MaxDeleteFractionExceeded")]
    scoped = retain(logs, "cd:cleanup.policy=compact,delete", now=wrong, topics=("cd",))
    assert scoped.exit_code == 1 and scoped.refused_topics == ("cd",)
    assert "after the newest record in the log dir" in scoped.errors[0]["detail"]
    assert sorted(p.name for p in (logs / "cd-0").iterdir()) == before


def test_a_record_stamped_far_in_the_future_does_not_let_a_wrong_now_pass(tmp_path: Path) -> None:
    """One record of another topic stamped years ahead by a producer's wrong clock is not the log dir's newest:
    taken as it, any --now before it passed for every topic (a --now months late deleted all of busy's closed
    segments). A record less than Kafka's message.timestamp.after.max.ms (an hour) after --now still dates the log
    dir: routine retention at the right --now beside a slightly fast producer is not refused."""
    logs = tmp_path / "logs"
    busy(logs)
    build_partition(logs, "skewed", 0, [[NOW - DAY], [NOW + 5 * 365 * DAY]])
    before = sorted(p.name for p in (logs / "busy-0").iterdir())
    late = retain(logs, now=NOW + 200 * DAY, topics=("busy",))
    assert late.exit_code == 1 and late.refused_topics == ("busy",), late.errors
    assert sorted(p.name for p in (logs / "busy-0").iterdir()) == before
    # the skewed topic read by the scans rather than out of scope
    assert "busy" in retain(logs, now=NOW + 200 * DAY, dry_run=True).refused_topics
    fast = tmp_path / "fast"
    build_partition(fast, "quiet", 0, [[NOW - 10 * DAY]] * 5 + [[NOW - 9 * DAY]])
    build_partition(fast, "fast", 0, [[NOW + 30 * 60_000]])  # the log dir's newest, half an hour ahead
    routine = retain(fast, topics=("quiet",))
    assert routine.exit_code == 0 and routine.refused_topics == (), routine.errors
    assert next(p for p in routine.partitions if p.name == "quiet-0").segments_deleted == 5


def test_a_quiet_topic_in_scope_is_judged_by_the_records_of_the_busy_ones_out_of_it(tmp_path: Path) -> None:
    # the other side of reading records out of scope: they still explain a quiet topic's expired segments, on a
    # copy too (made the day after: the busy topic is read, its records are a day older than its files)
    logs = tmp_path / "logs"
    busy(logs)
    build_partition(logs, "quiet", 0, [[NOW - 60 * DAY]] * 5 + [[NOW - 59 * DAY]])
    _copied(logs, NOW + DAY)
    result = retain(logs, topics=("quiet",))
    assert result.exit_code == 0 and result.refused_topics == (), result.errors
    assert next(p for p in result.partitions if p.name == "quiet-0").segments_deleted == 5


def test_records_without_timestamps_date_their_segments_by_mtime_for_the_reference_too(tmp_path: Path) -> None:
    """Records that carry no timestamp (-1: up-converted magic 0) are dated by their segment's mtime, by Kafka's
    retention and so by the reference: a busy topic of them, written a second ago, explains a quiet topic's expired
    segments (reading records only, the reference fell to the quiet topic's 59-day-old ones: both were refused)."""
    import os

    logs = tmp_path / "logs"
    build_partition(logs, "legacy", 0, [[-1]] * 7)
    segments = sorted((logs / "legacy-0").glob("*.log"))
    for i, log in enumerate(segments):  # 6 closed segments 30..10 days old, the active one written just now
        t = NOW - (30 - 4 * i) * DAY if i < len(segments) - 1 else NOW - 1000
        for f in (logs / "legacy-0").glob(log.stem + ".*"):
            os.utime(f, ns=(t * 1_000_000, t * 1_000_000))
    build_partition(logs, "quiet", 0, [[NOW - 60 * DAY]] * 5 + [[NOW - 59 * DAY]])
    for topics in ((), ("quiet",)):
        result = retain(logs, dry_run=True, topics=topics)
        assert result.exit_code == 0 and result.refused_topics == (), result.errors
        assert next(p for p in result.partitions if p.name == "quiet-0").segments_deleted == 5


def test_the_reference_reads_other_partitions_only_until_the_refusal_is_lifted(tmp_path: Path, monkeypatch) -> None:
    """Routine retention of a quiet compact,delete topic on a copy, beside busy single-segment partitions that
    compaction's selection does not date: the limit reads one of them, not all 30, on every nightly run."""
    import jobs.engine.retain.driver as driver

    reads: list[str] = []
    real = driver.newest_record
    monkeypatch.setattr(driver, "newest_record", lambda storage, pl: reads.append(pl.topic) or real(storage, pl))
    logs = tmp_path / "logs"
    for p in range(30):
        build_partition(logs, "busy", p, [[NOW - (7 - i) * DAY + 1 for i in range(7)] + [NOW - 60_000]])
    build_partition(logs, "cd", 0, [[NOW - 40 * DAY]] * 4 + [[NOW - 39 * DAY]])
    _copied(logs, NOW - 1000)
    overrides = ("*:retention.ms=7d", "cd:cleanup.policy=compact,delete")
    result = api.compact(logs, api.CompactOptions(overrides=overrides, progress=None), now=NOW, seams=SEAMS)
    assert result.exit_code == 0, result.errors
    assert next(p for p in result.partitions if p.name == "cd-0").retention.segments_deleted == 4
    assert len(reads) == 1, reads


def test_a_retention_typo_is_refused_against_the_settings_used_before_and_kafkas_defaults(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    busy(logs)
    # no earlier run: judged against Kafka's default retention.ms (7 days)
    first = retain(logs, "*:retention.ms=7", dry_run=True)
    assert first.refused_topics == ("busy",) and "Kafka's default" in first.errors[0]["detail"]
    # a real run with the right setting records it; the typo is then judged against it
    assert retain(logs).exit_code == 0
    typo = retain(logs, "*:retention.ms=7")
    assert typo.exit_code == 1 and typo.refused_topics == ("busy",)
    assert "retention.ms 7ms (was 7d) against the settings a run applied at --now" in typo.errors[0]["detail"]
    # a shorter retention deliberately allowed once is what the next runs are judged against
    assert retain(logs, "*:retention.ms=7", max_delete_fraction=1.0).exit_code == 0
    assert retain(logs, "*:retention.ms=7", now=NOW + 1000).refused_topics == ()


def test_inspect_and_the_retain_dry_run_agree_on_what_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    busy(logs)
    build_partition(logs, "quiet", 0, [[NOW - 60 * DAY]] * 5 + [[NOW - 59 * DAY]])
    for now in (NOW, NOW + 3 * 365 * DAY):
        dry = retain(logs, now=now, dry_run=True)
        seen = inspect(logs, now=now)
        refused_by_inspect = {p.topic for p in seen.partitions if p.row.get("retention_refused")}
        assert refused_by_inspect == set(dry.refused_topics), now
        for p in seen.partitions:
            refused = p.row.get("retention_refused")
            if refused:
                dry_entry = next(e for e in dry.report.partitions if e["topic"] == p.topic)
                assert refused == dry_entry["reason"]
