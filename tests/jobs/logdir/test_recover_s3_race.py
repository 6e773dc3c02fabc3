"""S3 recovery racing the run whose lease it takes over (``recover --break-lease``, or an expired lease): that
run's tasks may still be staging, and its driver may be between its lease check and its intent, or finishing
the very commit recovery rolls forward. Recovery must neither delete what that run is about to commit nor fail
because a staged object appears or vanishes under it. On the local S3 endpoint (moto_server)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jobs import api
from jobs.engine.frame.options import RecoverOptions
from jobs.logdir.commit import committer_for, partition_work_uri
from jobs.logdir.lock import Holder, acquire
from jobs.logdir.recover import STAGED_GRACE_MS, Fence, recover_log_dir
from segment_io.storage import S3Storage
from tests.support.commit_scenario import (
    NEW_OFFSETS,
    NEW_SUFFIXES,
    Scenario,
    build_scenario,
    check_replace_outcome,
    file_bytes,
    partition_files,
    staged_segments,
)

pytestmark = pytest.mark.s3

NOW = 1_700_000_000_000
OLD_RUN = "run-old"


def _stage(scenario: Scenario, run_id: str) -> None:
    """What the old run's tasks write: the new segments, in that run's staging area."""
    committer = committer_for(scenario.storage, scenario.work, run_id)
    for base, offsets in NEW_OFFSETS.items():
        for sfx in NEW_SUFFIXES[base]:
            scenario.storage.write_atomic(committer.staged_uri(scenario.partition, base, sfx),
                                          file_bytes(base, sfx, offsets, 2))


def _old_holder(storage: S3Storage, log_dir: str) -> Any:
    """The old run's lease, held from another host (nobody here can tell whether it is alive); keep the
    returned context manager referenced, or its collection releases the lease."""
    held = acquire(storage, log_dir, now_ms=NOW, ttl_ms=60_000,
                   holder=Holder(host="other-host", pid=4242, run_id=OLD_RUN))
    held.__enter__()
    return held


@pytest.fixture()
def scenario(s3_bucket) -> Scenario:
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    return build_scenario(S3Storage(endpoint.storage_options()), log_dir, stage=False)


def test_a_broken_lease_holder_between_its_lease_check_and_its_intent_still_commits_consistently(scenario, s3_bucket):
    """The old run has staged its segments and passed its lease check; `recover --break-lease` runs right then;
    then the old run writes its intent and commits. Its staged objects must still be there."""
    endpoint, _ = s3_bucket
    storage = scenario.storage
    held = _old_holder(storage, scenario.log_dir)  # noqa: F841 - held for the test's duration
    _stage(scenario, OLD_RUN)
    results = []

    def break_lease_now(step: str) -> None:
        if step == "write-intent":  # the old run has checked its lease and its staged files: recovery strikes
            results.append(api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options(),
                                                                       break_lease=OLD_RUN), now=NOW))

    committer_for(storage, scenario.work, OLD_RUN).replace_segments(
        scenario.partition, old_base_offsets=[0, 10, 20], new_segments=staged_segments(), fault=break_lease_now)
    (result,) = results
    assert result.exit_code == 0 and not result.failed
    notes = [n for r in result.reports for n in r.notes]
    assert len(notes) == 7 and all(f"by run {OLD_RUN}, whose lease this run took over" in n for n in notes), notes
    check_replace_outcome(scenario, expect_new=True)  # the old run's commit went through, staged objects removed


def test_another_runs_recent_stagings_are_kept_then_deleted_by_a_later_run(scenario, s3_bucket):
    endpoint, _ = s3_bucket
    storage = scenario.storage
    held = _old_holder(storage, scenario.log_dir)  # noqa: F841 - held for the test's duration
    _stage(scenario, OLD_RUN)
    _stage(scenario, "run-older")  # a run before it, whose lease nobody is taking over now
    before = partition_files(storage, scenario.partition)
    result = api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options(), break_lease=OLD_RUN),
                         now=NOW)
    assert result.exit_code == 0
    staged_root = f"{partition_work_uri(storage, scenario.work, scenario.partition)}/staged/"
    left = {i.uri for i in storage.list(staged_root, recursive=True)}
    assert left and all(u.startswith(staged_root + OLD_RUN + "/") for u in left), left
    deleted = {a.uri for a in result.actions if a.action == "delete-staged"}
    assert deleted and all(u.startswith(staged_root + "run-older/") for u in deleted)
    assert partition_files(storage, scenario.partition) == before

    # Later: a run that took over nobody's lease deletes them; so does one past the grace period.
    # (the objects' times may differ by a second: the fenced run is within the grace of the oldest, the late one
    # past that of the newest)
    mtimes = [i.mtime_ms for i in storage.list(staged_root, recursive=True)]
    fenced = recover_log_dir(storage, scenario.log_dir, now_ms=NOW,
                             fence=Fence(frozenset([OLD_RUN]), min(mtimes) + STAGED_GRACE_MS - 1))
    assert not [a for r in fenced for a in r.actions] and storage.list(staged_root, recursive=True)
    late = recover_log_dir(storage, scenario.log_dir, now_ms=NOW, fence=Fence(frozenset([OLD_RUN]),
                                                                               max(mtimes) + STAGED_GRACE_MS))
    assert {a.uri for r in late for a in r.actions if a.action == "delete-staged"} == left
    assert storage.list(staged_root, recursive=True) == []
    assert partition_files(storage, scenario.partition) == before


class _RacingStorage(S3Storage):
    """S3 storage that, at recovery's first copy, lets the old run finish its commit first: the staged objects
    recovery listed vanish between its listing and its copy."""

    def __init__(self, options, before_first_copy) -> None:
        super().__init__(options)
        self.before_first_copy = before_first_copy

    def copy(self, src: str, dst: str) -> None:
        hook, self.before_first_copy = self.before_first_copy, None
        if hook is not None:
            hook()
        super().copy(src, dst)


def test_staged_objects_vanishing_under_recovery_because_the_old_run_finished_the_commit(scenario, s3_bucket):
    endpoint, _ = s3_bucket
    storage = scenario.storage
    _stage(scenario, OLD_RUN)
    paused, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def pause_mid_copy(step: str) -> None:
        if step.startswith("copy-new:") and not paused.is_set():
            paused.set()
            resume.wait(30)

    def old_run() -> None:
        try:
            committer_for(storage, scenario.work, OLD_RUN).replace_segments(
                scenario.partition, old_base_offsets=[0, 10, 20], new_segments=staged_segments(),
                fault=pause_mid_copy)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=old_run)
    thread.start()
    assert paused.wait(30)  # the old run's intent is written, its copies have begun

    def let_the_old_run_finish() -> None:
        resume.set()
        thread.join(30)

    racing = _RacingStorage(endpoint.storage_options(), let_the_old_run_finish)
    reports = recover_log_dir(racing, scenario.log_dir, now_ms=NOW,
                              fence=Fence(frozenset([OLD_RUN]), NOW))
    assert not errors and not thread.is_alive()
    (report,) = [r for r in reports if r.partition_uri == scenario.partition]
    assert report.error is None, report.error
    assert "settled-elsewhere" in [a.action for a in report.actions]
    check_replace_outcome(scenario, expect_new=True)
    assert not [r for r in recover_log_dir(storage, scenario.log_dir, now_ms=NOW) if r.changed]


def test_a_dry_run_fences_the_run_whose_expired_lease_a_real_run_takes_over(scenario, s3_bucket):
    """The old run's lease expired (the wall clock is past it), its recent stagings still there: a real run takes
    the lease over and keeps them; its dry run, which takes no lease, says the same and deletes nothing."""
    endpoint, _ = s3_bucket
    storage = scenario.storage
    held = _old_holder(storage, scenario.log_dir)  # noqa: F841 - expired long ago on the wall clock
    _stage(scenario, OLD_RUN)
    _stage(scenario, "run-older")  # a run whose lease nobody takes over now: its stagings go
    dry = api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options(), dry_run=True), now=NOW)
    real = api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options()), now=NOW)
    assert real.exit_code == dry.exit_code == 0
    notes = [n for r in real.reports for n in r.notes]
    assert len(notes) == 7 and all(f"by run {OLD_RUN}, whose lease this run took over" in n for n in notes), notes
    assert [(r.partition_uri, r.actions, r.notes) for r in dry.reports] == \
        [(r.partition_uri, r.actions, r.notes) for r in real.reports]


def test_during_a_takeover_a_dry_run_keeps_what_the_run_that_took_over_keeps(scenario, s3_bucket):
    """The old run's lease expired with its recent stagings there; run B took the lease over, and its recovery kept
    them; while B holds the lease a dry run says the same (it fences B and the run B took the lease from, as a run
    taking over from B does), never that it would delete them."""
    from jobs.engine.frame.job import recover_under
    from jobs.engine.runtime.seams import Seams

    endpoint, _ = s3_bucket
    storage = scenario.storage
    held = _old_holder(storage, scenario.log_dir)  # noqa: F841 - expired, its holder on another host
    _stage(scenario, OLD_RUN)
    _stage(scenario, "run-older")  # a run whose lease nobody takes over now: its stagings go
    taking = acquire(storage, scenario.log_dir, now_ms=NOW + 120_000, ttl_ms=60_000,
                     holder=Holder(host="far-host", pid=7, run_id="run-b"))
    lease = taking.__enter__()  # run B, at work (keep the reference, or GC would release the lease)
    assert lease.took_over == OLD_RUN and lease.fenced == {OLD_RUN}
    dry = api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options(), dry_run=True), now=NOW)
    real = recover_under(storage, scenario.log_dir, NOW, lease, Seams())  # B's recovery
    assert dry.exit_code == 0
    assert [(r.partition_uri, r.actions) for r in dry.reports] == [(r.partition_uri, r.actions) for r in real]
    kept = [n for r in real for n in r.notes]
    assert len(kept) == 7 and all(f"by run {OLD_RUN}, whose lease this run took over" in n for n in kept), kept
    said = [n for r in dry.reports for n in r.notes]
    assert len(said) == 7 and all(f"by run {OLD_RUN}, whose lease run run-b took over before this run took it" in n
                                  for n in said), said
    # B dies in turn (on its host: its lease is broken); the run that takes over from it fences both, exactly as
    # a dry run then says
    dry = api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options(), dry_run=True), now=NOW)
    after = api.recover(scenario.log_dir, RecoverOptions(storage=endpoint.storage_options(), break_lease="run-b"),
                        now=NOW)
    assert [(r.partition_uri, r.actions, r.notes) for r in after.reports] == \
        [(r.partition_uri, r.actions, r.notes) for r in dry.reports]
    assert len([n for r in after.reports for n in r.notes]) == 7
