"""Crash-safe replace and two-phase delete, on local disk and on S3 (moto_server over HTTP), with a simulated
crash before every step of each store's protocol.

One suite over a ``store`` fixture: the scenario, the crash-then-recover checks and the refusals are the same
on both stores; what differs is written down per store (:data:`REPLACE_STEPS`, :data:`COMMIT_POINT`, where
staged files live), and the tests at the end cover what only one protocol has (S3's rename cut between copy
and delete, a reader's view mid-commit, staged objects gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

from jobs.logdir.commit import (
    CommitError,
    RecoveryError,
    ReplaceRequest,
    ReplaceResult,
    StagedSegment,
    committer_for,
    delete_segments,
    partition_work_uri,
    purge_deleted,
    replace_segments,
    staged_uri,
)
from jobs.logdir.recover import recover_partition
from segment_io.storage import LocalStorage, open_storage
from segment_io.storage.base import Storage
from tests.support.commit_scenario import (
    COMMIT_POINT,
    DELAY_MS,
    DELETE_NOW_MS,
    DELETE_STEPS,
    NEW_OFFSETS,
    NEW_SUFFIXES,
    OLD_OFFSETS,
    OLD_SUFFIXES,
    REPLACE_STEPS,
    S3_REPLACE_STEPS,
    Crash,
    Scenario,
    build_scenario,
    check_delete_outcome,
    check_replace_outcome,
    crash_cases,
    do_delete,
    do_replace,
    live_data,
    name,
    offsets_in,
    partition_files,
    recover_twice,
    run_to_crash,
    staged_segments,
)


@dataclass(frozen=True)
class Store:
    kind: str  #: "local" or "s3": the key of REPLACE_STEPS and COMMIT_POINT
    storage: Storage
    log_dir: str


def _s3_store(s3_bucket) -> Store:
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    return Store("s3", open_storage(log_dir, endpoint.storage_options()), log_dir)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path) -> Store:
    """Each store the commit protocol runs on; S3 is moto_server, reached over HTTP."""
    if request.param == "local":
        return Store("local", LocalStorage(), str(tmp_path / "kafka-logs"))
    return _s3_store(request.getfixturevalue("s3_bucket"))


@pytest.fixture()
def staged(store: Store) -> Scenario:
    """Old segments live, the replacement staged where the store's protocol stages it."""
    return build_scenario(store.storage, store.log_dir)


@pytest.fixture()
def unstaged(store: Store) -> Scenario:
    """The old segments only: what retention sees."""
    return build_scenario(store.storage, store.log_dir, stage=False)


# ---------------------------------------------------------------------------------------------------
# Replace
# ---------------------------------------------------------------------------------------------------


def test_replace_announces_the_protocol_steps_in_order(store: Store, staged: Scenario) -> None:
    assert run_to_crash(do_replace(staged), None) == REPLACE_STEPS[store.kind]
    check_replace_outcome(staged, expect_new=True)


@pytest.mark.parametrize("store,step", crash_cases(REPLACE_STEPS), indirect=["store"])
def test_replace_crash_then_recover_gives_old_or_new_set(store: Store, staged: Scenario, step: str) -> None:
    run_to_crash(do_replace(staged), step)
    report = recover_twice(staged)
    expect_new = REPLACE_STEPS[store.kind].index(step) >= COMMIT_POINT[store.kind]
    check_replace_outcome(staged, expect_new)
    assert report.changed


def test_a_second_replace_is_refused_while_one_is_unfinished(store: Store, staged: Scenario) -> None:
    """The intent is written with put_if_absent: a second committer finds it and is sent to recovery."""
    run_to_crash(do_replace(staged), REPLACE_STEPS[store.kind][1])
    with pytest.raises(CommitError, match="recover"):
        do_replace(staged)(None)
    intent = staged.storage.join(partition_work_uri(staged.storage, staged.work, staged.partition), "replace.json")
    assert staged.storage.exists(intent)


def test_staged_files_lie_where_each_protocol_puts_them(store: Store, staged: Scenario) -> None:
    """Local disk stages Kafka's way, ``.cleaned`` files in the partition dir; S3 stages outside the partition
    prefix, so that nothing a reader or a Kafka restore lists changes before the commit point."""
    uri = staged_uri(staged.storage, staged.partition, staged.work, 0, ".log")
    files = partition_files(staged.storage, staged.partition)
    if store.kind == "local":
        assert uri == staged.storage.join(staged.partition, name(0, ".log") + ".cleaned")
        assert {n for n in files if n.endswith(".cleaned")} == {
            name(b, s) + ".cleaned" for b in NEW_OFFSETS for s in NEW_SUFFIXES[b]}
    else:
        assert uri.startswith(staged.work + "/")
        assert not any(n.endswith(".cleaned") for n in files)
    assert live_data(files) == staged.old_state


@pytest.mark.parametrize("old,new,why", [
    ([0, 20], [StagedSegment(0, NEW_SUFFIXES[0])], "contiguous"),
    ([0], [StagedSegment(0, NEW_SUFFIXES[0]), StagedSegment(18, NEW_SUFFIXES[18])], "beyond"),
    ([10, 20], [StagedSegment(18, NEW_SUFFIXES[18])], "first new segment"),
    ([0, 10, 20], [StagedSegment(0, (".index",))], ".log"),
    ([0, 10, 20], [StagedSegment(0, NEW_SUFFIXES[0] + (".txnindex",)), StagedSegment(18, NEW_SUFFIXES[18])],
     "staged file is missing"),
    ([5], [StagedSegment(0, NEW_SUFFIXES[0])], "not a live segment"),
])
def test_replace_refuses_requests_that_do_not_fit(staged: Scenario, old, new, why) -> None:
    before = partition_files(staged.storage, staged.partition)
    with pytest.raises(CommitError, match=why):
        replace_segments(staged.storage, staged.partition, old_base_offsets=old, new_segments=new,
                         work_uri=staged.work)
    assert partition_files(staged.storage, staged.partition) == before


@pytest.mark.parametrize("suffix", [".swap", ".cleaned"])
def test_replace_refuses_leftovers_of_an_interrupted_operation(staged: Scenario, suffix: str) -> None:
    """A stray ``.swap`` or ``.cleaned`` file would change which swaps a Kafka loader keeps."""
    storage, part = staged.storage, staged.partition
    storage.write_atomic(storage.join(part, name(30, ".log") + suffix), b"x")
    with pytest.raises(CommitError, match="recover"):
        do_replace(staged)(None)
    assert live_data(partition_files(storage, part)) == staged.old_state


def test_on_local_disk_a_replace_lists_its_partition_once(tmp_path) -> None:
    """The request's check and the staged files' sizes come from one listing of the partition dir, where local
    disk stages (a second listing showed in the driver's profile of many small partitions)."""

    class CountingStorage(LocalStorage):
        def __init__(self) -> None:
            self.listed: list[str] = []

        def list(self, prefix: str, *, recursive: bool = False, irregular: bool = False) -> list:
            self.listed.append(prefix)
            return super().list(prefix, recursive=recursive, irregular=irregular)

    storage = CountingStorage()
    scenario = build_scenario(storage, str(tmp_path / "kafka-logs"))
    storage.listed.clear()
    do_replace(scenario)(None)
    assert storage.listed == [scenario.partition]
    check_replace_outcome(scenario, expect_new=True)


def test_replace_refuses_a_concurrent_intent(staged: Scenario) -> None:
    storage = staged.storage
    pwork = partition_work_uri(storage, staged.work, staged.partition)
    storage.makedirs(pwork)
    storage.write_atomic(storage.join(pwork, "replace.json"), b"{}")
    with pytest.raises(CommitError, match="recover"):
        do_replace(staged)(None)
    assert live_data(partition_files(storage, staged.partition)) == staged.old_state


def test_on_local_disk_a_staged_segment_left_out_of_the_request_is_a_leftover(tmp_path) -> None:
    """Local staging shares the partition dir with Kafka's own ``.cleaned`` files, so a staged segment the
    request does not name cannot be told from a broker's leftover (on S3 it is just an unused object)."""
    scenario = build_scenario(LocalStorage(), str(tmp_path / "kafka-logs"))
    with pytest.raises(CommitError, match="leftover"):
        replace_segments(scenario.storage, scenario.partition, old_base_offsets=sorted(OLD_OFFSETS),
                         new_segments=[StagedSegment(0, NEW_SUFFIXES[0])], work_uri=scenario.work)


# ---------------------------------------------------------------------------------------------------
# Delete and purge
# ---------------------------------------------------------------------------------------------------


def test_delete_announces_the_protocol_steps_in_order(unstaged: Scenario) -> None:
    assert run_to_crash(do_delete(unstaged), None) == DELETE_STEPS
    check_delete_outcome(unstaged, expect_deleted=True)


@pytest.mark.parametrize("store,step", crash_cases({kind: DELETE_STEPS for kind in REPLACE_STEPS}),
                         indirect=["store"])
def test_delete_crash_then_recover_rolls_forward_and_purge_honours_the_delay(unstaged: Scenario,
                                                                             step: str) -> None:
    run_to_crash(do_delete(unstaged), step)
    recover_twice(unstaged, now_ms=DELETE_NOW_MS + 40_000)  # recovery's own clock must not restart the delay
    check_delete_outcome(unstaged, expect_deleted=step != "write-intent")


def test_purge_starts_the_clock_for_unknown_deleted_files_across_runs(unstaged: Scenario) -> None:
    storage, part, work = unstaged.storage, unstaged.partition, unstaged.work
    storage.rename(storage.join(part, name(0, ".log")), storage.join(part, name(0, ".log") + ".deleted"))
    first = purge_deleted(storage, part, now_ms=7_000, file_delete_delay_ms=DELAY_MS, work_uri=work)
    assert first.purged == [] and first.kept_until_ms == {0: 7_000 + DELAY_MS}
    again = purge_deleted(storage, part, now_ms=7_000 + DELAY_MS - 1, file_delete_delay_ms=DELAY_MS, work_uri=work)
    assert again.purged == []
    done = purge_deleted(storage, part, now_ms=7_000 + DELAY_MS, file_delete_delay_ms=DELAY_MS, work_uri=work)
    assert [u.rsplit("/", 1)[-1] for u in done.purged] == [name(0, ".log") + ".deleted"]


def test_zero_delay_purges_on_the_same_run(unstaged: Scenario) -> None:
    storage, part, work = unstaged.storage, unstaged.partition, unstaged.work
    delete_segments(storage, part, [0], now_ms=10, work_uri=work)
    done = purge_deleted(storage, part, now_ms=10, file_delete_delay_ms=0, work_uri=work)
    assert len(done.purged) == len(OLD_SUFFIXES[0])


@pytest.mark.parametrize("bases,why", [([10], "prefix"), ([0, 10, 20, 30], "empty")])
def test_delete_refuses_non_prefixes_and_emptying_the_partition(unstaged: Scenario, bases, why) -> None:
    with pytest.raises(CommitError, match=why):
        delete_segments(unstaged.storage, unstaged.partition, bases, now_ms=1, work_uri=unstaged.work)
    assert live_data(partition_files(unstaged.storage, unstaged.partition)) == unstaged.old_state


# ---------------------------------------------------------------------------------------------------
# What only the S3 protocol has: no rename (copy + delete), readers that cannot run recovery, staged objects
# that live apart from the partition
# ---------------------------------------------------------------------------------------------------


@pytest.fixture()
def s3_staged(s3_bucket) -> Scenario:
    store = _s3_store(s3_bucket)
    return build_scenario(store.storage, store.log_dir)


@pytest.fixture()
def s3_unstaged(s3_bucket) -> Scenario:
    store = _s3_store(s3_bucket)
    return build_scenario(store.storage, store.log_dir, stage=False)


def test_on_s3_a_listing_mid_commit_never_shows_a_gap(s3_staged: Scenario) -> None:
    """What a reader listing the prefix between two steps sees: every old offset is still present at least
    once (possibly twice, with equal bytes), until the old set is fully superseded by the new one. (On local
    disk a reader is a broker, whose loader completes or undoes the swap first.)"""
    all_old = {o for offs in OLD_OFFSETS.values() for o in offs}
    new_kept = {o for offs in NEW_OFFSETS.values() for o in offs}
    seen_states = []

    def look(step: str) -> None:
        live = live_data(partition_files(s3_staged.storage, s3_staged.partition))
        present = {o for n, d in live.items() if n.endswith(".log") for o in offsets_in(d)}
        seen_states.append(step)
        assert new_kept <= present or all_old <= present, f"offsets missing before {step}"
        if not all_old <= present:  # old records go only once every new log is live
            assert all(live.get(name(b, ".log")) == s3_staged.new_state[name(b, ".log")] for b in NEW_OFFSETS)

    do_replace(s3_staged)(look)
    assert seen_states == S3_REPLACE_STEPS


def test_on_s3_recovery_refuses_an_intent_whose_staged_objects_are_gone(s3_staged: Scenario) -> None:
    storage = s3_staged.storage
    run_to_crash(do_replace(s3_staged), "copy-new:" + name(0, ".log"))
    storage.delete(staged_uri(storage, s3_staged.partition, s3_staged.work, 18, ".log"))
    before = partition_files(storage, s3_staged.partition)
    with pytest.raises(RecoveryError, match="gone"):
        recover_partition(storage, s3_staged.partition, work_uri=s3_staged.work, now_ms=1)
    assert partition_files(storage, s3_staged.partition) == before


def test_on_s3_recovery_finishes_a_rename_cut_between_copy_and_delete(s3_unstaged: Scenario) -> None:
    """S3's rename is copy + delete: a crash between them leaves the live object and its .deleted copy."""
    storage, part = s3_unstaged.storage, s3_unstaged.partition
    run_to_crash(do_delete(s3_unstaged), "live-to-deleted:" + name(0, ".index"))
    live_index = storage.join(part, name(0, ".index"))
    storage.copy(live_index, live_index + ".deleted")
    recover_twice(s3_unstaged)
    check_delete_outcome(s3_unstaged, expect_deleted=True)


# ---------------------------------------------------------------------------------------------------
# Several partitions in lockstep (Committer.replace_lockstep)
# ---------------------------------------------------------------------------------------------------

LOCKSTEP = ("orders-0", "orders-1", "orders-2")


def _lockstep(store: Store) -> tuple[list[Scenario], Callable[[Callable[[str, str], None]], list]]:
    """Three partitions playing the scenario in one log dir, and their replace in lockstep given a
    ``fault(partition, step)`` hook (``""`` for the barriers)."""
    scenarios = [build_scenario(store.storage, store.log_dir, partition_name=p) for p in LOCKSTEP]
    committer = committer_for(store.storage, scenarios[0].work)

    def run(fault: Callable[[str, str], None]) -> list:
        requests = [ReplaceRequest(s.partition, sorted(OLD_OFFSETS), staged_segments(),
                                   fault=lambda step, p=p: fault(p, step)) for p, s in zip(LOCKSTEP, scenarios)]
        return committer.replace_lockstep(requests, barrier_fault=lambda step: fault("", step))

    return scenarios, run


def _lockstep_points(store: Store) -> list[tuple[str, str]]:
    scenarios, run = _lockstep(store)
    points: list[tuple[str, str]] = []
    results = run(lambda p, step: points.append((p, step)))
    assert all(isinstance(r, ReplaceResult) for r in results)
    for s in scenarios:
        check_replace_outcome(s, expect_new=True)
    return points


def test_in_lockstep_each_partition_takes_its_own_steps_and_a_barrier_follows_each_synced_step(store: Store) -> None:
    points = _lockstep_points(store)
    for p in LOCKSTEP:
        assert [s for q, s in points if q == p] == REPLACE_STEPS[store.kind]
    # step by step: every partition's steps of one kind before any partition's steps of the next
    kinds = [s.split(":")[0] for p, s in points if p]
    assert kinds == sorted(kinds, key=lambda k: [s.split(":")[0] for s in REPLACE_STEPS[store.kind]].index(k))
    barriers = [s for p, s in points if not p]
    if store.kind == "local":  # one per sync of a replace alone (two new segments: two cleaned-to-swap syncs)
        assert barriers == ["barrier:write-intent", "barrier:intent-entry", "barrier:cleaned-to-swap",
                            "barrier:cleaned-to-swap", "barrier:old-to-deleted", "barrier:swap-to-live"]
    else:  # an answered request is durable: nothing to wait for between steps
        assert barriers == []


def _lockstep_cases() -> list:
    """(store kind, index of the point) for every point of a lockstep replace of three partitions. On S3 each point
    costs seconds of requests to the endpoint: `make test` crashes at the first point of each kind of step and at
    the last point (every step of one partition is crashed on S3 by
    test_replace_crash_then_recover_gives_old_or_new_set), and the heavy scenarios (`make test-scenarios`) the rest."""
    cases = []
    for kind in REPLACE_STEPS:
        steps = REPLACE_STEPS[kind]
        n = len(steps) * len(LOCKSTEP) + (6 if kind == "local" else 0)
        # every partition takes a kind of step before any partition takes the next (no barriers on S3)
        kinds = [step.split(":")[0] for step in steps for _ in LOCKSTEP]
        sampled = {kinds.index(k) for k in kinds} | {n - 1}
        for i in range(n):
            marks = []
            if kind == "s3":
                marks.append(pytest.mark.s3)
                if i not in sampled:
                    marks.append(pytest.mark.scenario)
            cases.append(pytest.param(kind, i, id=f"{kind}-{i}", marks=marks))
    return cases


@pytest.mark.parametrize("store,point", _lockstep_cases(), indirect=["store"])
def test_in_lockstep_a_crash_at_any_point_then_recover_gives_each_partition_its_old_or_new_set(
        store: Store, point: int, tmp_path) -> None:
    scenarios, run = _lockstep(store)
    seen: list[tuple[str, str]] = []
    after: list[tuple[str, str]] = []

    def crash(p: str, step: str) -> None:
        if len(seen) == point:
            after.append((p, step))
            raise Crash(f"{p} {step}")
        seen.append((p, step))

    with pytest.raises(Crash):
        run(crash)
    if store.kind == "local":  # (on S3 the other partitions' requests under way when it came are answered)
        assert len(after) == 1, f"steps ran after the crash: {after[1:]}"
    for s in scenarios:
        recover_twice(s)
    for p, s in zip(LOCKSTEP, scenarios):
        # the partition's steps that ran before the crash decide, exactly as for a replace of it alone
        done = sum(1 for q, _ in seen if q == p)
        check_replace_outcome(s, expect_new=done >= COMMIT_POINT[store.kind])


def test_in_lockstep_a_partition_whose_step_fails_stops_there_and_the_others_finish(store: Store) -> None:
    scenarios, run = _lockstep(store)
    failing = REPLACE_STEPS[store.kind][COMMIT_POINT[store.kind] + 1]

    def fail(p: str, step: str) -> None:
        if p == "orders-1" and step == failing:
            raise CommitError("simulated failure", uri=p)

    results = run(fail)
    assert isinstance(results[1], CommitError)
    assert all(isinstance(results[i], ReplaceResult) for i in (0, 2))
    assert partition_files(store.storage, scenarios[1].partition) != scenarios[1].new_state  # left mid-commit
    recover_twice(scenarios[1])
    for s in scenarios:  # (orders-1 was past its commit point: recovery rolled it forward)
        check_replace_outcome(s, expect_new=True)
