"""Crash-safe replace and two-phase delete on S3 (moto_server over HTTP), crashing before every step.

Same scenario and checks as ``test_commit_local.py``; the S3 protocol's commit point is the intent PUT.
"""

from __future__ import annotations

import pytest

from jobs.logdir.commit import (
    CommitError,
    RecoveryError,
    partition_work_uri,
    staged_uri,
)
from jobs.logdir.recover import recover_partition
from segment_io.storage import open_storage
from tests.jobs.test_commit_local import (
    DELETE_STEPS,
    KAFKA_ORDER,
    NEW_OFFSETS,
    NEW_SUFFIXES,
    OLD_OFFSETS,
    OLD_SUFFIXES,
    Scenario,
    build_scenario,
    check_delete_outcome,
    check_replace_outcome,
    do_delete,
    do_replace,
    live_data,
    name,
    partition_files,
    recover_twice,
    run_to_crash,
)

pytestmark = pytest.mark.s3


def s3_replace_steps() -> list[str]:
    """From the protocol in jobs/commit.py: copy new (descending bases), delete the old objects no new one
    overwrote, remove the intent, delete the staged objects."""
    new_files = {(b, s) for b in NEW_OFFSETS for s in NEW_SUFFIXES[b]}
    old_files = {(b, s) for b in OLD_OFFSETS for s in OLD_SUFFIXES[b]}
    steps = ["write-intent"]
    for base in sorted(NEW_OFFSETS, reverse=True):
        steps += [f"copy-new:{name(base, s)}" for s in KAFKA_ORDER if s in NEW_SUFFIXES[base]]
    steps += [f"delete-old:{name(b, s)}" for b, s in sorted(old_files - new_files)]
    steps += ["remove-intent"]
    steps += [f"delete-staged:{name(b, s)}" for b, s in sorted(new_files)]
    return steps


S3_REPLACE_STEPS = s3_replace_steps()


def _scenario(s3_bucket, *, stage: bool = True) -> Scenario:
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    return build_scenario(open_storage(log_dir, endpoint.storage_options()), log_dir, stage=stage)


@pytest.fixture()
def s3(s3_bucket) -> Scenario:
    return _scenario(s3_bucket)


@pytest.fixture()
def s3_unstaged(s3_bucket) -> Scenario:
    return _scenario(s3_bucket, stage=False)


def test_staged_objects_stay_outside_the_partition_prefix(s3: Scenario) -> None:
    assert live_data(partition_files(s3.storage, s3.partition)) == s3.old_state
    assert not any(n.endswith(".cleaned") for n in partition_files(s3.storage, s3.partition))
    assert staged_uri(s3.storage, s3.partition, s3.work, 0, ".log").startswith(s3.work + "/")


def test_replace_announces_the_protocol_steps_in_order(s3: Scenario) -> None:
    assert run_to_crash(do_replace(s3), None) == S3_REPLACE_STEPS
    check_replace_outcome(s3, expect_new=True)


@pytest.mark.parametrize("step", S3_REPLACE_STEPS)
def test_replace_crash_then_recover_gives_old_or_new_set(s3: Scenario, step: str) -> None:
    run_to_crash(do_replace(s3), step)
    recover_twice(s3)
    check_replace_outcome(s3, expect_new=step != "write-intent")


def test_mid_commit_listing_never_shows_a_gap(s3: Scenario) -> None:
    """What a reader listing the prefix between two steps sees: every old offset is still present at least
    once (possibly twice, with equal bytes), until the old set is fully superseded by the new one."""
    from tests.jobs.test_commit_local import offsets_in

    all_old = {o for offs in OLD_OFFSETS.values() for o in offs}
    new_kept = {o for offs in NEW_OFFSETS.values() for o in offs}
    seen_states = []

    def look(step: str) -> None:
        live = live_data(partition_files(s3.storage, s3.partition))
        present = {o for n, d in live.items() if n.endswith(".log") for o in offsets_in(d)}
        seen_states.append(step)
        assert new_kept <= present or all_old <= present, f"offsets missing before {step}"
        if not all_old <= present:  # old records go only once every new log is live
            assert all(live.get(name(b, ".log")) == s3.new_state[name(b, ".log")] for b in NEW_OFFSETS)

    do_replace(s3)(look)
    assert seen_states == S3_REPLACE_STEPS


def test_recovery_refuses_an_intent_whose_staged_objects_are_gone(s3: Scenario) -> None:
    run_to_crash(do_replace(s3), "copy-new:" + name(0, ".log"))
    s3.storage.delete(staged_uri(s3.storage, s3.partition, s3.work, 18, ".log"))
    before = partition_files(s3.storage, s3.partition)
    with pytest.raises(RecoveryError, match="gone"):
        recover_partition(s3.storage, s3.partition, work_uri=s3.work, now_ms=1)
    assert partition_files(s3.storage, s3.partition) == before


def test_a_second_committer_is_refused_by_the_conditional_intent_put(s3: Scenario) -> None:
    run_to_crash(do_replace(s3), "copy-new:" + name(18, ".log"))
    with pytest.raises(CommitError, match="recover"):
        do_replace(s3)(None)
    intent = s3.storage.join(partition_work_uri(s3.storage, s3.work, s3.partition), "replace.json")
    assert s3.storage.exists(intent)


def test_delete_announces_the_protocol_steps_in_order(s3_unstaged: Scenario) -> None:
    assert run_to_crash(do_delete(s3_unstaged), None) == DELETE_STEPS
    check_delete_outcome(s3_unstaged, expect_deleted=True)


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_delete_crash_then_recover_rolls_forward_and_purge_honours_the_delay(s3_unstaged: Scenario,
                                                                             step: str) -> None:
    run_to_crash(do_delete(s3_unstaged), step)
    recover_twice(s3_unstaged, now_ms=41_000)
    check_delete_outcome(s3_unstaged, expect_deleted=step != "write-intent")


def test_recovery_finishes_a_rename_cut_between_copy_and_delete(s3_unstaged: Scenario) -> None:
    """S3's rename is copy + delete: a crash between them leaves the live object and its .deleted copy."""
    storage, part = s3_unstaged.storage, s3_unstaged.partition
    run_to_crash(do_delete(s3_unstaged), "live-to-deleted:" + name(0, ".index"))
    live_log = storage.join(part, name(0, ".index"))
    storage.copy(live_log, live_log + ".deleted")
    recover_twice(s3_unstaged)
    check_delete_outcome(s3_unstaged, expect_deleted=True)
