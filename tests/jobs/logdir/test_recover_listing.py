"""Recovery's first pass: which partitions one listing of the log dir and of the commit dirs clears without a
request of their own (:func:`jobs.logdir.recover.clean_in_listing`), and that it never clears one a crashed run
left anything in: at every crash point of every commit protocol, the listing leaves the partition to the rules
whenever the rules have something to do there."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.logdir.commit import COMMIT_DIR, STAGING_BESIDE_DIR
from jobs.logdir.recover import Fence, clean_in_listing, plan_partition, recover_log_dir
from segment_io.storage import LocalStorage
from segment_io.storage.base import FileInfo
from tests.support.commit_scenario import (
    DELETE_STEPS,
    LOCAL_REPLACE_STEPS,
    TOPIC_PARTITION,
    build_scenario,
    do_delete,
    do_replace,
    run_to_crash,
)

LOG = "s3://b/logs"
COMMIT = "s3://b/logs.segjobs/commit"
CLEAN_FILES = ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
               "00000000000000000042.snapshot", "leader-epoch-checkpoint", "partition.metadata")


def _files(*uris: str) -> list[FileInfo]:
    return [FileInfo(uri, 1, 0) for uri in uris]


def test_only_partitions_whose_listings_show_nothing_to_settle_are_cleared() -> None:
    log = [f"{LOG}/t-0/{n}" for n in CLEAN_FILES] + [
        f"{LOG}/t-1/00000000000000000000.log", f"{LOG}/t-1/00000000000000000000.log.cleaned",
        f"{LOG}/t-2/00000000000000000000.log", f"{LOG}/t-2/00000000000000000000.index.swap",
        f"{LOG}/t-3/00000000000000000010.log", f"{LOG}/t-3/00000000000000000000.log.deleted",
        f"{LOG}/t-4/00000000000000000000.log", f"{LOG}/t-4/00000000000000000000.log.segjobs-0123456789ab.tmp",
        f"{LOG}/t-5/00000000000000000000.log", f"{LOG}/t-5/{STAGING_BESIDE_DIR}/00000000000000000000.log",
        f"{LOG}/t-6/00000000000000000000.log", f"{LOG}/t-6/some-dir/anything",
        *(f"{LOG}/t-{i}/00000000000000000000.log" for i in range(7, 12)),
        f"{LOG}/cleaner-offset-checkpoint", f"{LOG}/cleaner-offset-checkpoint.segjobs-0123456789ab.tmp",
        f"{LOG}/not-a-partition/00000000000000000000.log", f"{LOG}x/t-12/00000000000000000000.log",
    ]
    commit = [f"{COMMIT}/t-7/replace.json", f"{COMMIT}/t-8/delete.json", f"{COMMIT}/t-9/staged/run-1/x.log",
              f"{COMMIT}/t-10/deleted.json", f"{COMMIT}/t-13/deleted.json"]
    clean = clean_in_listing(LOG, _files(*log), COMMIT, _files(*commit))
    # t-0: only Kafka's own files; t-11: a bare segment. Every other partition holds something a rule may act on
    # (or something not understood), and t-13 has nothing in the log dir to be listed by: all left to the rules.
    assert clean == {"t-0", "t-11"}
    assert clean_in_listing(LOG + "/", _files(*log), COMMIT + "/", _files(*commit)) == clean


def _crashed(tmp_path: Path, step: str | None, *, delete: bool):
    scenario = build_scenario(LocalStorage(), str(tmp_path / "kafka-logs"), stage=not delete)
    run_to_crash(do_delete(scenario) if delete else do_replace(scenario), step)
    storage, commit = scenario.storage, scenario.storage.join(scenario.work, COMMIT_DIR)
    clean = clean_in_listing(scenario.log_dir, storage.list(scenario.log_dir, recursive=True), commit,
                             storage.list(commit, recursive=True))
    return scenario, clean


@pytest.mark.parametrize("step,delete", [*((s, False) for s in LOCAL_REPLACE_STEPS), (None, False),
                                         *((s, True) for s in DELETE_STEPS), (None, True)])
def test_the_listing_never_clears_a_partition_a_crashed_commit_left_anything_in(tmp_path: Path, step, delete) -> None:
    scenario, clean = _crashed(tmp_path, step, delete=delete)
    acts = plan_partition(scenario.storage, scenario.partition, work_uri=scenario.work, now_ms=5_000,
                          fence=Fence()).acts
    if acts:  # whatever the rules would do there, the listing leaves the partition to them
        assert TOPIC_PARTITION not in clean
    # every crash point but a delete's very first (before its intent: nothing written yet) leaves something
    assert acts == (step is not None and step != DELETE_STEPS[0] if delete else step is not None)


def test_once_recovered_a_partition_is_cleared_by_the_listing(tmp_path: Path) -> None:
    scenario, _ = _crashed(tmp_path, LOCAL_REPLACE_STEPS[len(LOCAL_REPLACE_STEPS) // 2], delete=False)
    assert any(r.changed for r in recover_log_dir(scenario.storage, scenario.log_dir, now_ms=5_000))
    storage, commit = scenario.storage, scenario.storage.join(scenario.work, COMMIT_DIR)
    clean = clean_in_listing(scenario.log_dir, storage.list(scenario.log_dir, recursive=True), commit,
                             storage.list(commit, recursive=True))
    assert TOPIC_PARTITION in clean
    assert not plan_partition(storage, scenario.partition, work_uri=scenario.work, now_ms=5_000, fence=Fence()).acts


@pytest.mark.parametrize("spelling", ["path", "path/", "file://"])
def test_recovery_finds_every_partition_however_the_log_dir_is_named(tmp_path: Path, spelling: str) -> None:
    scenario, _ = _crashed(tmp_path, LOCAL_REPLACE_STEPS[len(LOCAL_REPLACE_STEPS) // 2], delete=False)
    (Path(scenario.log_dir) / "cleaner-offset-checkpoint.segjobs-0123456789ab.tmp").write_bytes(b"partial")
    log_dir = {"path": scenario.log_dir, "path/": scenario.log_dir + "/", "file://": "file://" + scenario.log_dir}
    reports = recover_log_dir(scenario.storage, log_dir[spelling], now_ms=5_000, work_uri=scenario.work)
    changed = {r.partition_uri.rstrip("/").rsplit("/", 1)[-1]: [a.action for a in r.actions] for r in reports
               if r.changed}
    assert set(changed) == {TOPIC_PARTITION, "kafka-logs"} and changed["kafka-logs"] == ["delete-temp"]
