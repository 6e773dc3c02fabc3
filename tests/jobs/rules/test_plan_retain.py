"""Retention planning: the log-start, size and time rules of Kafka's UnifiedLog.deleteOldSegments.

Each test names the kafka-behaviours.md item it pins down; expected segments follow by hand from the
rule quoted beside them.
"""

from __future__ import annotations

import dataclasses

import pytest

from jobs.rules.config import TopicConfig
from jobs.rules.model import PartitionState
from jobs.rules.plan_retain import (
    RULE_LOG_START,
    RULE_SIZE,
    RULE_TIME,
    RetentionPlan,
    plan_retention,
)
from jobs.rules.timeutil import format_instant
from tests.support.states import DAY, HOUR, NOW, seg, state, uniform_log


def after(st: PartitionState, plan: RetentionPlan) -> PartitionState:
    """The partition once ``plan`` is carried out: its segments less the deleted ones, the raised log start."""
    gone = set(plan.deleted_bases)
    return dataclasses.replace(st, segments=tuple(s for s in st.segments if s.base_offset not in gone),
                               log_start_offset=plan.new_log_start_offset)


def policy(cleanup: str = "delete", **settings: object) -> TopicConfig:
    return TopicConfig.from_settings({"cleanup.policy": cleanup,
                                      **{k.replace("_", "."): v for k, v in settings.items()}})


def deleted(plan) -> list[tuple[int, str]]:
    return [(d.segment.base_offset, d.rule) for d in plan.deletions]


# ---- 49: by time ---------------------------------------------------------------------------------------

def test_49_segments_older_than_retention_are_deleted() -> None:
    retention = DAY
    segs = [seg(0, ts=NOW - retention - 1), seg(10, ts=NOW - retention - 1), seg(20, ts=NOW - HOUR), seg(30)]
    plan = plan_retention(state(segs), policy(retention_ms=retention), NOW)
    assert deleted(plan) == [(0, RULE_TIME), (10, RULE_TIME)]
    assert plan.new_log_start_offset == 20
    assert plan.bytes_deleted == 200


def test_49_the_age_must_exceed_retention_strictly() -> None:
    segs = [seg(0, ts=NOW - DAY), seg(10, ts=NOW)]
    assert plan_retention(state(segs), policy(retention_ms=DAY), NOW).deletions == ()
    assert deleted(plan_retention(state(segs), policy(retention_ms=DAY - 1), NOW)) == [(0, RULE_TIME)]


def test_49_segment_without_record_timestamps_ages_by_mtime() -> None:
    segs = [seg(0, ts=None, mtime=NOW - 2 * DAY), seg(10, ts=None, mtime=NOW - HOUR), seg(20)]
    plan = plan_retention(state(segs), policy(retention_ms=DAY), NOW)
    assert deleted(plan) == [(0, RULE_TIME)]
    assert "mtime" in plan.deletions[0].detail


def test_49_negative_retention_ms_keeps_everything() -> None:
    segs = uniform_log(4, ts=NOW - 1000 * DAY)
    assert plan_retention(state(segs), policy(retention_ms=-1), NOW).deletions == ()


# ---- 50: oldest-first prefix only ---------------------------------------------------------------------

def test_50_deletion_stops_at_the_first_survivor() -> None:
    old, young = NOW - 10 * DAY, NOW - HOUR
    segs = [seg(0, ts=old), seg(10, ts=young), seg(20, ts=old), seg(30, ts=old), seg(40)]
    plan = plan_retention(state(segs), policy(retention_ms=DAY), NOW)
    assert deleted(plan) == [(0, RULE_TIME)]
    assert plan.new_log_start_offset == 10


# ---- 51: future timestamps block time retention -------------------------------------------------------

def test_51_future_timestamp_blocks_later_segments_and_warns() -> None:
    old = NOW - 10 * DAY
    segs = [seg(0, ts=NOW + HOUR), seg(10, 70, ts=old), seg(20, 80, ts=old), seg(30, ts=NOW)]
    plan = plan_retention(state(segs), policy(retention_ms=DAY), NOW)
    assert plan.deletions == ()
    (warning,) = plan.warnings
    assert "segment 0" in warning and f"{HOUR} ms after now" in warning
    assert "2 later segment(s), 150 bytes" in warning


def test_51_no_warning_for_timestamps_in_the_past() -> None:
    segs = [seg(0, ts=NOW - HOUR), seg(10, ts=NOW - 10 * DAY), seg(20)]
    assert plan_retention(state(segs), policy(retention_ms=DAY), NOW).warnings == ()
    # stamped exactly now: not in the future
    segs = [seg(0, ts=NOW), seg(10, ts=NOW - 10 * DAY), seg(20)]
    assert plan_retention(state(segs), policy(retention_ms=DAY), NOW).warnings == ()


# ---- 52: by size ----------------------------------------------------------------------------------------

def test_52_oldest_go_while_the_excess_covers_them() -> None:
    # 15 records, 5 per segment (100 bytes each), retention of 10 records' bytes: 2 segments remain
    segs = [seg(5 * i, 100, count=5) for i in range(3)]
    plan = plan_retention(state(segs), policy(retention_bytes=200), NOW)
    assert deleted(plan) == [(0, RULE_SIZE)]
    assert plan.new_log_start_offset == 5


def test_52_partial_excess_deletes_nothing_more() -> None:
    # size 400, limit 250: excess 150 covers the first 100-byte segment, not the second
    plan = plan_retention(state(uniform_log(4)), policy(retention_bytes=250), NOW)
    assert deleted(plan) == [(0, RULE_SIZE)]


def test_52_under_the_limit_nothing_goes() -> None:
    segs = [seg(5 * i, 100, count=5) for i in range(3)]
    assert plan_retention(state(segs), policy(retention_bytes=301), NOW).deletions == ()
    assert plan_retention(state(segs), policy(retention_bytes=-1), NOW).deletions == ()


def test_52_uneven_sizes() -> None:
    # size 1000, limit 400: excess 600 -> 500 goes (excess 100), 300 would overshoot: stop
    segs = [seg(0, 500), seg(10, 300), seg(20, 100), seg(30, 100)]
    assert deleted(plan_retention(state(segs), policy(retention_bytes=400), NOW)) == [(0, RULE_SIZE)]


# ---- 53: by log start offset -----------------------------------------------------------------------------

def test_53_segments_wholly_below_log_start_go_even_under_compact_only() -> None:
    segs = uniform_log(5)
    plan = plan_retention(state(segs, log_start=25), policy("compact"), NOW)
    # 0 and 10 lie wholly below 25; 20 straddles it and stays
    assert deleted(plan) == [(0, RULE_LOG_START), (10, RULE_LOG_START)]
    assert plan.new_log_start_offset == 25  # the old log start is higher than the survivor's base


def test_53_a_segment_ending_exactly_at_log_start_goes() -> None:
    plan = plan_retention(state(uniform_log(3), log_start=10), policy("compact"), NOW)
    assert deleted(plan) == [(0, RULE_LOG_START)]


def test_53_log_start_deletion_unblocks_time_retention_and_a_rerun_deletes_nothing() -> None:
    old = NOW - 10 * DAY
    segs = [seg(0, ts=NOW + DAY), seg(10, ts=old), seg(20, ts=old), seg(30)]
    st = state(segs, log_start=10)
    plan = plan_retention(st, policy(retention_ms=DAY), NOW)
    assert deleted(plan) == [(0, RULE_LOG_START), (10, RULE_TIME), (20, RULE_TIME)]
    assert plan.warnings == ()  # the future-stamped segment went by the log start rule
    assert plan_retention(after(st, plan), policy(retention_ms=DAY), NOW).deletions == ()


def test_rules_run_in_kafka_order_each_over_what_is_left() -> None:
    # log start first: 0 and 10 go; the size rule then sees 200 bytes, not 400: 200 - 150 = 50 < 100
    segs = uniform_log(4)
    plan = plan_retention(state(segs, log_start=20), policy(retention_bytes=150), NOW)
    assert deleted(plan) == [(0, RULE_LOG_START), (10, RULE_LOG_START)]
    # size before time: with both breached the first segment is attributed to size
    segs = uniform_log(4, ts=NOW - 10 * DAY)
    plan = plan_retention(state(segs), policy(retention_bytes=300, retention_ms=DAY), NOW)
    assert deleted(plan) == [(0, RULE_SIZE), (10, RULE_TIME), (20, RULE_TIME)]


# ---- 54: policy --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cleanup, expected", [
    ("compact", [(0, RULE_LOG_START)]),
    ("delete", [(0, RULE_LOG_START), (10, RULE_SIZE), (20, RULE_TIME)]),
    ("compact,delete", [(0, RULE_LOG_START), (10, RULE_SIZE), (20, RULE_TIME)]),
])
def test_54_compact_only_ignores_time_and_size(cleanup: str, expected) -> None:
    old = NOW - 10 * DAY
    segs = [seg(0, 100, ts=old), seg(10, 500, ts=old), seg(20, 100, ts=old), seg(30, 500, ts=NOW)]
    # after the log start rule: 1100 bytes, limit 600 -> excess 500 takes segment 10 only
    plan = plan_retention(state(segs, log_start=10), policy(cleanup, retention_bytes=600, retention_ms=DAY), NOW)
    assert deleted(plan) == expected


# ---- 55: never zero segments ---------------------------------------------------------------------------------

def test_55_all_expired_keeps_the_last_segment_and_says_kafka_would_roll() -> None:
    segs = uniform_log(3, ts=NOW - 10 * DAY)
    st = state(segs)
    plan = plan_retention(st, policy(retention_ms=DAY), NOW)
    assert deleted(plan) == [(0, RULE_TIME), (10, RULE_TIME)]
    assert plan.kafka_would_roll
    (warning,) = plan.warnings
    assert "last segment 20" in warning and "roll an empty segment at the log end offset 30" in warning
    remaining = after(st, plan)
    assert [s.base_offset for s in remaining.segments] == [20]
    assert remaining.log_end_offset == st.log_end_offset == 30
    assert remaining.log_start_offset == 20


def test_55_size_zero_retention_keeps_the_last_segment() -> None:
    plan = plan_retention(state(uniform_log(3)), policy(retention_bytes=0), NOW)
    assert deleted(plan) == [(0, RULE_SIZE), (10, RULE_SIZE)] and plan.kafka_would_roll


def test_55_an_empty_last_segment_is_never_deleted_and_needs_no_roll() -> None:
    segs = [seg(0, ts=NOW - 10 * DAY), seg(10, 0, mtime=NOW - 10 * DAY)]
    plan = plan_retention(state(segs), policy(retention_ms=DAY), NOW)
    assert deleted(plan) == [(0, RULE_TIME)]
    assert not plan.kafka_would_roll and plan.warnings == ()
    assert plan.new_log_start_offset == 10


def test_empty_partition_plans_nothing() -> None:
    plan = plan_retention(state([], log_start=7), policy(retention_ms=0, retention_bytes=0), NOW)
    assert plan.deletions == () and plan.new_log_start_offset == 7


# ---- the delete-fraction limit (segjobs' own, not Kafka's): aimed at a wrong --now or --config -------------

def guard(states, plans, *, now=NOW, newest=None, used=None, limit=0.5, config=None):
    """:func:`delete_guard` with one config for every topic (``config``, default: each plan's policy of
    ``retention.ms`` 1 day) and ``used`` (default: those same settings, used before)."""
    from jobs.rules.plan_retain import UsedSettings, delete_guard

    cfg = config or policy(retention_ms=DAY)
    return delete_guard(states, plans, now_ms=now, config_for=lambda topic: cfg, max_fraction_for=lambda t: limit,
                        used_for=lambda topic: used or UsedSettings.of(cfg, "run r1"),
                        newest_ms=newest)


def test_the_guard_counts_per_topic_against_what_the_log_start_leaves() -> None:
    old = NOW - 10 * DAY
    states = {
        ("a", 0): state(uniform_log(4, ts=old), topic="a"),  # 3 of 4 segments expire (the last is kept)
        ("a", 1): state(uniform_log(4), topic="a", partition=1),  # nothing expires
        ("b", 0): state(uniform_log(4, ts=old), topic="b", log_start=20),  # log start takes 2, time 1 of 2 left
    }
    plans = {k: plan_retention(s, policy(retention_ms=DAY), NOW) for k, s in states.items()}
    # the newest record is as old as the expired ones: nothing in the log dir explains their deletion
    shares = guard(states, plans, newest=old)
    a, b = shares["a"], shares["b"]
    assert (a.partitions, a.bytes_deleted, a.bytes_judged, a.bytes_unexplained) == (2, 300, 800, 300)
    assert a.fraction == 0.375 and not a.refused
    assert (b.bytes_deleted, b.bytes_judged) == (100, 200) and not b.refused  # 0.5 is allowed, not more
    tight = guard(states, plans, newest=old, limit=0.25)
    assert tight["a"].refused
    message = tight["a"].message()
    assert message.startswith("refused: would delete 37.5% of a's bytes (300 of 800 in 2 partition(s)")
    assert "--now is 10d after the newest record in the log dir" in message and "--max-delete-fraction 1" in message
    assert not guard(states, plans, newest=old, limit=1.0)["a"].refused


def test_the_guard_leaves_a_topic_retention_does_not_touch_at_zero() -> None:
    states = {("c", 0): state(uniform_log(3, ts=NOW - 10 * DAY), topic="c")}
    plans = {k: plan_retention(s, policy("compact", retention_ms=DAY), NOW) for k, s in states.items()}
    (share,) = guard(states, plans, newest=NOW - 10 * DAY, limit=0.0).values()
    assert share.fraction == 0.0 and not share.refused


def _busy(topic: str, *, newest: int, days: int = 7) -> PartitionState:
    """A topic written steadily: one segment a day up to ``newest``, then the active segment."""
    return state([seg(10 * i, ts=newest - (days - i) * DAY) for i in range(days)] + [seg(10 * days, ts=newest)],
                 topic=topic)


def test_routine_retention_is_never_refused_however_much_it_deletes() -> None:
    week = policy(retention_ms=7 * DAY)
    # a quiet topic: every closed segment long past retention.ms, while another topic is busy up to now
    quiet = state(uniform_log(5, ts=NOW - 60 * DAY) + [seg(50, ts=NOW - 59 * DAY)], topic="quiet")
    # a compact,delete topic after a long gap: a month-old run of segments, then new records today
    gap = state(uniform_log(5, ts=NOW - 40 * DAY) + [seg(50, ts=NOW - HOUR)], topic="gap")
    busy = _busy("busy", newest=NOW)
    states = {("quiet", 0): quiet, ("gap", 0): gap, ("busy", 0): busy}
    plans = {k: plan_retention(s, week, NOW) for k, s in states.items()}
    assert plans[("quiet", 0)].bytes_deleted == 500 and plans[("gap", 0)].bytes_deleted == 500
    shares = guard(states, plans, newest=NOW, config=week, limit=0.0)
    assert {t: sh.refused for t, sh in shares.items()} == {"busy": False, "gap": False, "quiet": False}
    assert all(sh.bytes_unexplained == 0 for sh in shares.values())
    # a cluster idle for a day before the run: the day's expiry is not explained by the log dir, but it is a
    # small share of a week's retention, far under the default limit
    later = {("busy", 0): _busy("busy", newest=NOW - HOUR)}
    plan = {("busy", 0): plan_retention(later[("busy", 0)], week, NOW + DAY)}
    share = guard(later, plan, now=NOW + DAY, newest=NOW - HOUR, config=week)["busy"]
    assert share.bytes_unexplained == 200 and share.fraction == 0.25 and not share.refused


def test_a_now_years_beyond_the_newest_record_is_refused() -> None:
    week = policy(retention_ms=7 * DAY)
    states = {("busy", 0): _busy("busy", newest=NOW)}
    wrong_now = NOW + 3 * 365 * DAY
    plans = {k: plan_retention(s, week, wrong_now) for k, s in states.items()}
    share = guard(states, plans, now=wrong_now, newest=NOW, config=week)["busy"]
    assert share.refused and share.bytes_unexplained == share.bytes_deleted == 700
    assert "--now is 1095d after the newest record" in share.message()


def test_a_config_typod_to_a_tiny_retention_is_refused_and_one_used_before_is_not() -> None:
    from jobs.rules.plan_retain import UsedSettings

    week, typo = policy(retention_ms=7 * DAY), policy(retention_ms=7)  # "7" meant 7 days
    states = {("busy", 0): _busy("busy", newest=NOW)}
    plans = {k: plan_retention(s, typo, NOW) for k, s in states.items()}
    share = guard(states, plans, newest=NOW, config=typo, used=UsedSettings.of(week, "run r1"))["busy"]
    assert share.refused and "retention.ms 7ms (was 7d) against run r1" in share.message()
    # the same settings applied by an earlier run: nothing doubtful, the run goes ahead
    assert not guard(states, plans, newest=NOW, config=typo, used=UsedSettings.of(typo, "run r1"))["busy"].refused
    # a policy turned to delete on a topic an earlier run knew as compact is doubtful too
    compact = policy("compact")
    share = guard(states, plans, newest=NOW, config=typo, used=UsedSettings.of(compact, "run r1"))["busy"]
    assert share.refused and "cleanup.policy delete (was compact)" in share.message()


def test_the_first_run_of_a_shorter_config_is_refused_in_words_and_accepting_it_lets_it_through() -> None:
    """A config shorter than Kafka's default week, and no earlier run: Kafka's default is the reference. The
    message says the settings as a person writes them, the newest record's instant in ISO, and the one way out
    that fits (accepting the config as the baseline), not lifting the limit, which would also let a wrong --now
    through."""
    from jobs.rules.plan_retain import ACCEPTED_BASELINE, UsedSettings

    week, three_days = policy(retention_ms=7 * DAY), policy(retention_ms=3 * DAY)
    newest = NOW - HOUR  # the run is an hour after the newest record: a doubt, but not what refuses it
    states = {("busy", 0): _busy("busy", newest=newest)}
    plans = {k: plan_retention(s, three_days, NOW) for k, s in states.items()}
    share = guard(states, plans, newest=newest, config=three_days,
                  used=UsedSettings.of(week, "Kafka's default (no earlier run recorded settings for it)"))["busy"]
    assert share.refused and share.accepting_suffices
    message = share.message()
    assert "retention.ms 3d (was 7d) against Kafka's default" in message
    assert message.endswith("max 50%. If the config is right, run again with --accept-config-baseline: its settings "
                            "become the reference later runs are judged against")
    assert "--now is" not in message and "--max-delete-fraction" not in message
    assert str(3 * DAY) not in message and str(7 * DAY) not in message  # no raw milliseconds
    accepted = UsedSettings.of(three_days, ACCEPTED_BASELINE)
    assert not guard(states, plans, newest=newest, config=three_days, used=accepted)["busy"].refused

    # with a --now also far beyond the newest record, accepting the config alone is not enough: both are said
    late = NOW + 30 * DAY
    states = {("busy", 0): _busy("busy", newest=newest, days=3)}
    plans = {k: plan_retention(s, three_days, late) for k, s in states.items()}
    share = guard(states, plans, now=late, newest=newest, config=three_days, used=UsedSettings.of(week, "run r1"))
    both = share["busy"]
    assert both.refused and not both.accepting_suffices
    assert f"--now is 30d 1h after the newest record in the log dir ({format_instant(newest)})" in both.message()
    assert both.message().endswith("If the config is right, run again with --accept-config-baseline (its settings "
                                   "become the reference later runs are judged against); if --now is right too, add "
                                   "--max-delete-fraction 1 (or set segjobs.max.delete.fraction for the topic)")
    assert guard(states, plans, now=late, newest=newest, config=three_days, used=accepted)["busy"].refused


def test_a_share_just_over_the_limit_does_not_read_as_equal_to_it() -> None:
    from jobs.rules.plan_retain import DeleteShare

    share = DeleteShare("t", 1, 5004, 10_000, 0.5, 5004, settings_doubt="retention.ms 3d (was 7d) against run r1")
    assert share.refused and "would delete 50.04% of t's bytes" in share.message()
    assert "would delete 40.0% of" in DeleteShare("t", 1, 4, 10, 0.5, 4, now_doubt="x").message()
