"""Recovery: agreement with Kafka's own loader, the no-intent fallback, whole log dirs, bad intents."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from jobs.logdir.commit import RecoveryError, committer_for, partition_work_uri
from jobs.logdir.recover import (
    LEFTOVER_ACTIONS,
    RecoveryReport,
    plan_partition,
    recover_log_dir,
    recover_partition,
)
from segment_io.storage import LocalStorage
from tests.support.broker import cleaner_killed_after_swap, load_partition
from tests.support.commit_scenario import (
    DELETE_STEPS,
    LOCAL_COMMIT_POINT,
    LOCAL_REPLACE_STEPS,
    S3_REPLACE_STEPS,
    Scenario,
    assert_valid_log,
    build_scenario,
    check_delete_outcome,
    check_replace_outcome,
    do_delete,
    do_replace,
    file_bytes,
    live_data,
    name,
    partition_files,
    recover_twice,
    run_to_crash,
    work_files,
)


@pytest.fixture()
def local(tmp_path) -> Scenario:
    return build_scenario(LocalStorage(), str(tmp_path / "kafka-logs"))


@pytest.mark.parametrize("step", LOCAL_REPLACE_STEPS)
def test_a_broker_loading_the_crashed_dir_reaches_the_same_state_as_segjobs(local: Scenario, step: str,
                                                                           tmp_path: Path) -> None:
    run_to_crash(do_replace(local), step)
    broker_copy = tmp_path / "broker" / "orders-3"
    shutil.copytree(local.partition, broker_copy)
    load_partition(broker_copy)
    broker_live = live_data({p.name: p.read_bytes() for p in broker_copy.iterdir()})
    expect_new = LOCAL_REPLACE_STEPS.index(step) >= LOCAL_COMMIT_POINT
    assert broker_live == (local.new_state if expect_new else local.old_state)

    recover_twice(local)
    assert live_data(partition_files(local.storage, local.partition)) == broker_live


@pytest.mark.parametrize("step,expect_new", [
    ("cleaned-to-swap:" + name(0, ".index"), False),  # a half-renamed segment: the swap is aborted
    ("old-to-deleted:" + name(10, ".txnindex"), True),
    ("swap-to-live:" + name(18, ".log"), True),
    ("swap-to-live:" + name(0, ".timeindex"), True),  # a partially renamed segment completes
])
def test_without_its_intent_recovery_follows_kafkas_swap_range_rule(local: Scenario, step: str,
                                                                    expect_new: bool) -> None:
    """A swap left by a broker's own cleaner has no segjobs intent: the range of originals to delete comes
    from the swap logs' offsets, as in Kafka."""
    run_to_crash(do_replace(local), step)
    storage = local.storage
    storage.delete(storage.join(partition_work_uri(storage, local.work, local.partition), "replace.json"))
    report = recover_twice(local)
    files = partition_files(storage, local.partition)
    # Without the intent nobody knows the old .deleted files belonged to a replace: purge takes them later.
    assert live_data(files) == (local.new_state if expect_new else local.old_state)
    assert not any(n.endswith((".swap", ".cleaned")) for n in files)
    # a .log.swap made live on Kafka's rule alone is a warning naming what it replaced (none: an aborted swap)
    made_live = [a for a in report.actions if a.action == "complete-swap" and a.uri.endswith(".log")]
    assert len(report.warnings) == (1 if made_live else 0), report.warnings
    if made_live:
        assert f"{local.partition}: recovery made live {len(made_live)} .swap segment(s) no segjobs run left" \
            in report.warnings[0]


@pytest.mark.parametrize("step", LOCAL_REPLACE_STEPS)
def test_a_swap_its_own_intent_names_is_made_live_without_a_warning(local: Scenario, step: str) -> None:
    run_to_crash(do_replace(local), step)
    assert recover_twice(local).warnings == []


def _partition_with_a_foreign_swap(tmp_path: Path) -> tuple[Path, Path]:
    """A log dir whose t-0 has segments 0, 10 and 20 (active), a record each offset, and a ``.swap`` of base 0 no
    segjobs run left, spanning [0, 20) and holding 2 of its 20 records (3 and 19): (log dir, partition dir)."""
    from tests.support.builders import LogBuilder, rec, write_log

    log_dir = tmp_path / "logs"
    part = log_dir / "t-0"
    log = LogBuilder("t", 0, timestamp=1_700_000_000_000)
    for o in range(30):
        if o and o % 10 == 0:
            log.roll()
        log.batch([rec(f"k{o}", f"v{o}")])
    write_log(log.table(), part)
    swapped = LogBuilder("t", 0, timestamp=1_700_000_000_000)
    for o in (3, 19):
        swapped.batch([rec(f"k{o}", f"v{o}", offset=o)])
    write_log(swapped.table(), tmp_path / "swap")
    cleaner_killed_after_swap(part, 0, {".log": (tmp_path / "swap" / name(0, ".log")).read_bytes()})
    return log_dir, part


def test_a_swap_no_segjobs_run_left_is_a_warning_even_quiet_in_the_dry_run_and_the_run(tmp_path: Path,
                                                                                       capsys) -> None:
    """A .swap no intent names deletes the live segments of its offset range when made live (Kafka's loader
    rule: a broker's cleaner killed mid-swap). Records of those segments it does not hold go with them: a person
    must hear of it, from the dry run before and the run itself, --quiet or not."""
    import json

    from jobs.commands.cli import main

    log_dir, part = _partition_with_a_foreign_swap(tmp_path)
    args = ["retain", "--log-dir", str(log_dir), "--set", "t:retention.ms=-1", "--quiet", "--now", "1700000100000"]
    want = (f"{part}: recovery made live 1 .swap segment(s) no segjobs run left (00000000000000000000.log.swap, "
            f"{(part / (name(0, '.log') + '.swap')).stat().st_size} bytes), replacing the 2 live segment(s) of "
            f"offsets [0, 20) (")
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run"]) == 0
    assert f"warning: a real run would do this: {want}" in capsys.readouterr().err
    for dry in (True, False):
        report = tmp_path / f"report-{dry}.json"
        assert main(args + ["--report", str(report)] + (["--dry-run"] if dry else [])) == 0
        err = capsys.readouterr().err
        assert want in err, err
        warnings = json.loads(report.read_text())["warnings"]
        assert len([w for w in warnings if want in w]) == 1
        assert ("a real run's recovery would do this" in err) == dry
    assert sorted(p.name for p in part.glob("*.log")) == [name(0, ".log"), name(20, ".log")]


def test_a_swap_whose_originals_a_broker_already_renamed_to_deleted_says_nothing_live_was_deleted(
        tmp_path: Path, capsys) -> None:
    # A broker's cleaner killed after its old segments became .deleted, before its .swap became live
    # (LocalLog.replaceSegments' order): recovery finishes it, as the broker's loader does, and deletes no live
    # segment. Was: "replacing the 0 live segment(s) ... records ... are gone".
    from jobs.commands.cli import main

    log_dir, part = _partition_with_a_foreign_swap(tmp_path)
    for base in (0, 10):
        for suffix in (".log", ".index", ".timeindex"):
            f = part / name(base, suffix)
            if f.exists():
                f.rename(f"{f}.deleted")
    for dry in (["--dry-run"], []):
        assert main(["recover", "--log-dir", str(log_dir), *dry]) == 0
        err = capsys.readouterr().err
        assert "no live segment of offsets [0, 20) was left to replace" in err and "nothing live was deleted" in err
        assert "are gone" not in err, err
    assert sorted(p.name for p in part.glob("*.log")) == [name(0, ".log"), name(20, ".log")]


@pytest.mark.parametrize("survivors", [
    [1, 3, 13, 29, 35, 41, 49],  # the broker's cleaned segment has another size than segjobs' staged one
    [1, 3, 13, 35, 49],  # the same size: only its offset range gives it away
])
def test_an_intent_left_after_a_broker_finished_the_swap_is_never_applied(local: Scenario, tmp_path: Path,
                                                                           survivors: list[int]) -> None:
    """segjobs dies before old-to-deleted; a broker starts and finishes the swap itself (it knows nothing of
    replace.json), appends, and its own cleaner dies right after .cleaned -> .swap, leaving a swap for base 0
    that covers [0, 50). The stale intent must not decide which originals go: Kafka's range rule does."""
    run_to_crash(do_replace(local), next(s for s in LOCAL_REPLACE_STEPS if s.startswith("old-to-deleted:")))
    partition = Path(local.partition)
    load_partition(partition)  # the broker's start-up: segjobs' new 0 and 18 are live, 10 and 20 gone
    assert live_data(partition_files(local.storage, local.partition)) == local.new_state
    for base, offsets in {40: list(range(40, 50)), 50: list(range(50, 55))}.items():  # the broker appends
        for sfx in (".log", ".index", ".timeindex"):
            (partition / name(base, sfx)).write_bytes(file_bytes(base, sfx, offsets, 3))
    cleaned = {sfx: file_bytes(0, sfx, survivors, 4) for sfx in (".log", ".index", ".timeindex")}
    assert (len(cleaned[".log"]) == len(local.new_state[name(0, ".log")])) == (len(survivors) == 5)
    cleaner_killed_after_swap(partition, 0, cleaned)

    broker = tmp_path / "broker" / partition.name  # what a broker's next start makes of the same dir
    shutil.copytree(partition, broker)
    load_partition(broker)
    expected = live_data({p.name: p.read_bytes() for p in broker.iterdir()})
    assert expected == {**{name(0, s): d for s, d in cleaned.items()},
                        **{name(50, s): file_bytes(50, s, list(range(50, 55)), 3)
                           for s in (".log", ".index", ".timeindex")}}

    report = recover_twice(local)
    live = live_data(partition_files(local.storage, local.partition))
    assert_valid_log(live)
    assert live == expected
    assert [a.action for a in report.actions].count("discard-intent") == 1
    assert work_files(local.storage, local) == set(), "the stale intent is gone"


def test_an_intent_whose_replace_a_broker_finished_and_moved_past_is_removed_unapplied(local: Scenario) -> None:
    """The broker finished the replace, then retention deleted segment 0 (renamed .deleted, not unlinked yet):
    the intent names 0 as its new segment, but it must neither purge that .deleted file now nor restore it."""
    run_to_crash(do_replace(local), next(s for s in LOCAL_REPLACE_STEPS if s.startswith("old-to-deleted:")))
    partition = Path(local.partition)
    load_partition(partition)
    for sfx in (".log", ".index", ".timeindex"):
        (partition / name(0, sfx)).rename(partition / (name(0, sfx) + ".deleted"))
    before = partition_files(local.storage, local.partition)
    recover_twice(local, now_ms=7_000)
    assert partition_files(local.storage, local.partition) == before
    from jobs.logdir.commit import read_ledger
    pwork = partition_work_uri(local.storage, local.work, local.partition)
    assert read_ledger(local.storage, pwork) == {0: 7_000}, "file.delete.delay.ms counts from now, as for a broker's"
    assert work_files(local.storage, local) == {"deleted.json"}


def test_a_log_dir_reached_through_a_symlink_has_one_work_dir(local: Scenario, tmp_path: Path) -> None:
    """The intent of a commit made through the real path is found through a link to the log dir (and the
    other way round): the work dir is named by the log dir's real path, never the path a run was given."""
    run_to_crash(do_replace(local), "swap-to-live:" + name(18, ".log"))
    alias = tmp_path / "alias"
    alias.symlink_to(local.log_dir)
    reports = recover_log_dir(local.storage, str(alias), now_ms=5_000)
    assert [a.action for a in reports[0].actions].count("purge-replaced") == 10  # the intent was found and applied
    check_replace_outcome(local, expect_new=True)
    assert not (tmp_path / "alias.segjobs").exists()


def test_recover_log_dir_visits_every_partition_and_is_idempotent(tmp_path: Path) -> None:
    storage = LocalStorage()
    log_dir = str(tmp_path / "kafka-logs")
    crashed = build_scenario(storage, log_dir)
    run_to_crash(do_replace(crashed), "swap-to-live:" + name(0, ".log"))
    clean_part = Path(log_dir) / "payments-0"
    clean_part.mkdir()
    (clean_part / name(0, ".log")).write_bytes(b"")
    (Path(log_dir) / "recovery-point-offset-checkpoint").write_text("0\n0\n")

    reports = recover_log_dir(storage, log_dir, now_ms=1)
    assert [r.partition_uri.rsplit("/", 1)[-1] for r in reports] == ["orders-3", "payments-0"]
    assert reports[0].changed and not reports[1].changed
    check_replace_outcome(crashed, expect_new=True)
    assert not any(r.changed for r in recover_log_dir(storage, log_dir, now_ms=2))


def test_an_unreadable_intent_stops_recovery_before_any_change(local: Scenario) -> None:
    run_to_crash(do_replace(local), "old-to-deleted:" + name(0, ".log"))
    storage = local.storage
    storage.write_atomic(storage.join(partition_work_uri(storage, local.work, local.partition), "replace.json"),
                         b"{not json")
    before = partition_files(storage, local.partition)
    with pytest.raises(RecoveryError, match="unreadable"):
        recover_partition(storage, local.partition, work_uri=local.work, now_ms=1)
    assert partition_files(storage, local.partition) == before


class _Crash(BaseException):
    """A crash of recovery itself (not an error it handles)."""


class _CrashingStore(LocalStorage):
    """A local store whose recovery dies before its ``at``-th change (a rename, delete, copy or write)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.left = at

    def _change(self, name: str, *args, **kwargs):
        if self.left == 0:
            raise _Crash(name)
        self.left -= 1
        return getattr(LocalStorage, name)(self, *args, **kwargs)

    def rename(self, *a, **k):  # type: ignore[override]
        return self._change("rename", *a, **k)

    def delete(self, *a, **k):  # type: ignore[override]
        return self._change("delete", *a, **k)

    def copy(self, *a, **k):  # type: ignore[override]
        return self._change("copy", *a, **k)

    def write_atomic(self, *a, **k):  # type: ignore[override]
        return self._change("write_atomic", *a, **k)


@pytest.mark.parametrize("step", LOCAL_REPLACE_STEPS + DELETE_STEPS)
@pytest.mark.slow
def test_recovery_killed_at_any_change_is_finished_by_the_next_one(tmp_path: Path, step: str) -> None:
    """A crash of the commit at ``step``, then of its recovery before each of the changes recovery makes in turn:
    the next recovery still leaves exactly the old or exactly the new set (and rolls the delete forward)."""
    replace = step in LOCAL_REPLACE_STEPS
    probe = build_scenario(LocalStorage(), str(tmp_path / "probe"), stage=replace)
    run_to_crash(do_replace(probe) if replace else do_delete(probe), step)
    changes = len([s for s in plan_partition(probe.storage, probe.partition, work_uri=probe.work, now_ms=5_000).steps
                   if s.op != "sync"])
    for at in range(changes):
        scenario = build_scenario(LocalStorage(), str(tmp_path / f"at-{at}"), stage=replace)
        run_to_crash(do_replace(scenario) if replace else do_delete(scenario), step)
        with pytest.raises(_Crash):
            recover_partition(_CrashingStore(at), scenario.partition, work_uri=scenario.work, now_ms=5_000)
        recover_twice(scenario, now_ms=6_000)
        if replace:
            check_replace_outcome(scenario, expect_new=LOCAL_REPLACE_STEPS.index(step) >= LOCAL_COMMIT_POINT)
        else:
            check_delete_outcome(scenario, expect_deleted=step != "write-intent")


# --------------------------------------------------------------------------------------------------
# The dry run: the same rules against a preview of the store
# --------------------------------------------------------------------------------------------------


def _everything(storage, scenario: Scenario) -> dict[str, bytes]:
    return {i.uri: storage.read(i.uri) for root in (scenario.log_dir, scenario.work)
            for i in storage.list(root, recursive=True)}


def _preview_then_recover(scenario: Scenario) -> list:
    """Recover as a dry run, check it changed nothing, then for real; returns the real run's reports."""
    storage = scenario.storage
    before = _everything(storage, scenario)
    preview = recover_log_dir(storage, scenario.log_dir, now_ms=5_000, dry_run=True)
    plan = plan_partition(storage, scenario.partition, work_uri=scenario.work, now_ms=5_000)
    assert _everything(storage, scenario) == before
    real = recover_log_dir(storage, scenario.log_dir, now_ms=5_000)
    assert preview == real
    assert plan.leaves == _partition_files(storage, scenario)  # the plan foresaw the files recovery leaves
    return real


def _partition_files(storage, scenario: Scenario) -> frozenset[str]:
    """The files of the scenario's partition dir, its commit dir and its staged files, as they are now."""
    committer = committer_for(storage, scenario.work)
    return frozenset(i.uri for i in storage.list(scenario.partition)
                     + storage.list(committer.partition_work_uri(scenario.partition), recursive=True)
                     + committer.leftover_staged(scenario.partition))


@pytest.mark.parametrize("step", LOCAL_REPLACE_STEPS + DELETE_STEPS)
def test_a_preview_predicts_every_action_of_recovery_locally(tmp_path: Path, step: str) -> None:
    scenario = build_scenario(LocalStorage(), str(tmp_path / "kafka-logs"), stage=step in LOCAL_REPLACE_STEPS)
    run_to_crash(do_replace(scenario) if step in LOCAL_REPLACE_STEPS else do_delete(scenario), step)
    assert any(r.changed for r in _preview_then_recover(scenario))


def _said(r: RecoveryReport) -> tuple:
    """What a report says (an error is compared by its words: exceptions are equal only to themselves)."""
    return r.partition_uri, r.actions, str(r.error), r.problems, r.notes


class _ReadOnly(LocalStorage):
    """A local store that fails every change: what a dry run must never call."""

    def _refuse(self, *args, **kwargs):
        raise AssertionError(f"a dry run changed the store: {args}")

    write_atomic = open_write = put_if_absent = put_if_match = rename = copy = delete = _refuse  # type: ignore
    delete_if_match = makedirs = sync_dir = set_mtime = remove_empty_dir = abort_pending_upload = _refuse  # type: ignore


@pytest.mark.parametrize("step", LOCAL_REPLACE_STEPS + DELETE_STEPS)
def test_a_dry_run_only_reads_and_reports_what_the_real_run_then_does(tmp_path: Path, step: str) -> None:
    scenario = build_scenario(LocalStorage(), str(tmp_path / "kafka-logs"), stage=step in LOCAL_REPLACE_STEPS)
    run_to_crash(do_replace(scenario) if step in LOCAL_REPLACE_STEPS else do_delete(scenario), step)
    plan = recover_log_dir(_ReadOnly(), scenario.log_dir, now_ms=5_000, dry_run=True)
    real = recover_log_dir(scenario.storage, scenario.log_dir, now_ms=5_000)
    assert plan == real


def test_a_plan_stops_where_a_rule_cannot_go_on_after_the_steps_before_it(tmp_path: Path) -> None:
    """An interrupted delete whose deletion ledger cannot be read: the rest of the delete is rolled forward, then
    recovery stops at the ledger, the partition left mid-commit; the dry run says so in the same words."""
    scenario = build_scenario(LocalStorage(), str(tmp_path / "kafka-logs"), stage=False)
    run_to_crash(do_delete(scenario), DELETE_STEPS[3])
    storage = scenario.storage
    storage.write_atomic(storage.join(partition_work_uri(storage, scenario.work, scenario.partition), "deleted.json"),
                         b"not json")
    plan = recover_log_dir(_ReadOnly(), scenario.log_dir, now_ms=5_000, dry_run=True)
    real = recover_log_dir(storage, scenario.log_dir, now_ms=5_000)
    assert [_said(r) for r in plan] == [_said(r) for r in real]
    (report,) = [r for r in real if r.partition_uri == scenario.partition]
    assert [a.action for a in report.actions] == ["finish-delete"] * 5
    assert report.error is not None and "unreadable deletion ledger" in str(report.error)
    assert "left mid-commit, with the delete intent" in str(report.error)


@pytest.mark.s3
def test_a_preview_predicts_every_action_of_recovery_on_s3(s3_bucket) -> None:
    from segment_io.storage import open_storage

    endpoint, bucket = s3_bucket
    # one crash point per kind of state (before the commit point, mid-copy, mid-delete, intent gone, cleanup)
    kinds = ["write-intent", "copy-new:", "delete-old:", "remove-intent", "delete-staged:"]
    steps = [next(s for s in S3_REPLACE_STEPS if s.startswith(k)) for k in kinds]
    for i, step in enumerate(steps):  # one log dir per step: a bucket per step would be slower
        log_dir = f"s3://{bucket}/logs-{i}"
        scenario = build_scenario(open_storage(log_dir, endpoint.storage_options()), log_dir)
        run_to_crash(do_replace(scenario), step)
        assert any(r.changed for r in _preview_then_recover(scenario)), step


@pytest.mark.scenario
@pytest.mark.s3
def test_on_s3_a_dry_run_predicts_recovery_of_a_delete_at_every_crash_point(s3_bucket) -> None:
    """An S3 delete (a rename there is copy + delete) cut at each step: the dry run says exactly what recovery then
    does, and recovery leaves the delete rolled forward (or, before its intent, not begun)."""
    from segment_io.storage import open_storage

    endpoint, bucket = s3_bucket
    for i, step in enumerate(DELETE_STEPS):  # one log dir per step: a bucket per step would be slower
        log_dir = f"s3://{bucket}/delete-{i}"
        scenario = build_scenario(open_storage(log_dir, endpoint.storage_options()), log_dir, stage=False)
        run_to_crash(do_delete(scenario), step)
        _preview_then_recover(scenario)
        check_delete_outcome(scenario, expect_deleted=step != "write-intent")


# --------------------------------------------------------------------------------------------------
# Leftovers, through the CLI: a dry run prints exactly what the real run then does
# --------------------------------------------------------------------------------------------------

_TEMPS = ("{log}/t-0/00000000000000000008.log.segjobs-0123456789ab.tmp",
          "{log}/cleaner-offset-checkpoint.segjobs-abcdefabcdef.tmp",
          "{work}/commit/t-1/deleted.json.segjobs-aaaaaaaaaaaa.tmp",
          "{work}/lock-holder.json.segjobs-bbbbbbbbbbbb.tmp")
#: a broker's own temporary name: not segjobs', so recovery leaves it alone
_FOREIGN_TEMP = "{log}/t-0/leader-epoch-checkpoint.tmp"


def _actions(out: str) -> tuple[list[str], str]:
    """(action lines, summary line) of ``segjobs recover``'s stdout, the dry run's "would " dropped."""
    lines = [line[len("would "):] if line.startswith("would ") else line for line in out.splitlines()]
    return lines[:-1], lines[-1]


def _summary_numbers(summary: str) -> list[str]:
    return [w for w in summary.replace("(", " ").split() if w.isdigit()]


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_recover_cleans_and_reports_leftovers_exactly_as_its_dry_run_said(store, spark, tmp_path, capsys,
                                                                          monkeypatch, request):
    from jobs.commands.cli import main
    from tests.support.compaction_faults import CONFIG, NOW, HardCrash, build_partition, compact_with_fault
    from tests.support.s3_objects import PREFIX, contents, put_objects

    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    for p in (0, 1):
        build_partition(tmp_path / "logs" / f"t-{p}")
    if store == "local":
        log, work = str(tmp_path / "logs"), str(tmp_path / "logs.segjobs")
        args = ["--log-dir", log]

        def files() -> dict[str, bytes]:
            return {str(p): p.read_bytes() for d in (tmp_path / "logs", tmp_path / "logs.segjobs")
                    if d.exists() for p in d.rglob("*") if p.is_file()}

        def put(uri: str, data: bytes) -> None:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            Path(uri).write_bytes(data)
        crash_at = "old-to-deleted:"
    else:
        endpoint, bucket = request.getfixturevalue("s3_bucket_env")
        put_objects(endpoint, bucket, tmp_path / "logs")
        log, work = f"s3://{bucket}/{PREFIX}", f"s3://{bucket}/{PREFIX}.segjobs"
        args = ["--log-dir", log, "--s3-endpoint", endpoint.endpoint_url]

        def files() -> dict[str, bytes]:
            return {f"s3://{bucket}/{k}": v for k, v in contents(endpoint, bucket, "").items()}

        def put(uri: str, data: bytes) -> None:
            endpoint.client().put_object(Bucket=bucket, Key=uri[len(f"s3://{bucket}/"):], Body=data)
        crash_at = "copy-new:"

    # a compaction dies in t-0's commit; t-1's new segments were staged and are never committed
    def die(partition: str, step: str) -> None:
        if step.startswith(crash_at):
            raise HardCrash(step)

    with pytest.raises(HardCrash):
        compact_with_fault([*args, "--config", str(config), "--now", NOW, "--quiet"], die)
    temps = [t.format(log=log, work=work) for t in _TEMPS]
    for i, uri in enumerate(temps):
        put(uri, b"x" * (100 + i))
    put(_FOREIGN_TEMP.format(log=log, work=work), b"broker")
    pending = {}  # S3: an upload of a staged object whose writer died (invisible in listings)
    if store == "s3":
        key = f"{PREFIX}.segjobs/commit/t-1/staged/00000000000000000099.log"
        client = endpoint.client()
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"p" * 4321)
        pending = {f"s3://{bucket}/{key}": 4321}
    before = files()
    staged = sorted(u for u in before if "/t-1/" in u and ("/staging/" in u or "/staged/" in u))
    assert staged, sorted(before)

    assert main(["recover", *args, "--now", NOW, "--dry-run"]) == 0
    dry_lines, dry_summary = _actions(capsys.readouterr().out)
    assert files() == before  # a dry run changes nothing
    assert main(["recover", *args, "--now", NOW]) == 0
    lines, summary = _actions(capsys.readouterr().out)
    after = files()

    assert lines and lines == dry_lines
    assert _summary_numbers(summary) == _summary_numbers(dry_summary)
    removed = {line.split()[1]: line for line in lines if line.split()[0] in LEFTOVER_ACTIONS}
    expected = set(temps) | set(staged) | set(pending)
    assert expected <= set(removed), (sorted(expected - set(removed)), lines)
    sizes = {**{u: len(v) for u, v in before.items()}, **pending}
    for uri in expected:  # each named with its size, and gone
        assert removed[uri].endswith(f"{sizes[uri]} bytes)") and uri not in after
    for uri in pending:
        assert removed[uri].startswith(f"abort-upload {uri} (an upload begun ")
    if store == "s3":
        assert not endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads")
    left_bytes = sum(sizes[u] for u in removed if u in sizes)
    assert f"{len(removed)} leftover file(s) of interrupted runs ({left_bytes} bytes)" in summary
    assert after[_FOREIGN_TEMP.format(log=log, work=work)] == b"broker"
    # t-1 was never committed: its files are as they were, byte for byte
    t1 = f"{log}/t-1/"
    assert {u: v for u, v in after.items() if u.startswith(t1)} == {u: v for u, v in before.items() if u.startswith(t1)}
    assert not [u for u in after if "/staging/" in u or "/staged/" in u or u.endswith((".swap", ".cleaned"))]

    # nothing left: both say so
    for extra in (["--dry-run"], []):
        assert main(["recover", *args, "--now", NOW, *extra]) == 0
        lines, summary = _actions(capsys.readouterr().out)
        assert lines == [] and "; 0 action(s); 0 leftover file(s)" in summary, (extra, lines)


# --------------------------------------------------------------------------------------------------
# A broker between two runs (issue: a stale intent made segjobs build overlapping segments)
# --------------------------------------------------------------------------------------------------


def _check_log(partition: Path, truth: dict) -> list[bytes]:
    """No overlap, no duplicate or lost offset, and the same key -> latest map as ``truth``; returns the
    live logs."""
    from tests.support.broker import log_offsets
    from tests.support.replay import comparable, live_log_files, read_segments, replay

    logs = live_log_files(partition)
    bases = [int(p.name[:20]) for p in logs]
    for i, p in enumerate(logs):
        end = bases[i + 1] if i + 1 < len(bases) else math.inf
        assert all(bases[i] <= o < end for o in log_offsets(p.read_bytes())), f"{p.name} overlaps the next segment"
    got = replay(read_segments(p.read_bytes() for p in logs))
    assert got.offsets == sorted(set(got.offsets)), "duplicate offsets"
    assert comparable(got.latest) == truth
    return [p.read_bytes() for p in logs]


def test_compact_after_a_broker_finished_its_swap_and_its_own_cleaner_died(spark, tmp_path: Path) -> None:
    """segjobs is killed before old-to-deleted; a broker starts (LogLoader finishes the swap; replace.json,
    which it knows nothing of, stays), appends, and its own cleaner is killed after .cleaned -> .swap with a
    swap for base 0 covering [0, 45). The next `segjobs recover` and `segjobs compact` must end with a
    consistent log that replays like the broker's, and keep doing so."""
    from jobs.commands.cli import main
    from tests.support.builders import LogBuilder, rec, write_log
    from tests.support.compaction_faults import CONFIG, NOW, T0, HardCrash, compact_with_fault
    from tests.support.replay import comparable, read_partition, replay

    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    log_dir = tmp_path / "logs"
    part = log_dir / "t-0"
    log = LogBuilder("t", 0, timestamp=T0)
    for o in range(35):  # segments 0, 10, 20 (cleanable) and 30 (active), keys overwritten throughout
        if o and o % 10 == 0:
            log.roll()
        log.batch([rec(f"k{o % 7}", f"v{o}")])
    write_log(log.table(), part)

    def die(partition: str, step: str) -> None:
        if step.startswith("old-to-deleted:"):
            raise HardCrash(step)

    with pytest.raises(HardCrash):
        compact_with_fault(["--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet"], die)
    assert list(part.glob("*.log.swap")) and list((tmp_path / "logs.segjobs").rglob("replace.json"))

    load_partition(part)  # the broker starts: segjobs' compacted segment 0 is live, 10 and 20 are gone
    appended = LogBuilder("t", 0, start_offset=35, timestamp=T0 + 1000)
    for o in range(35, 50):  # the broker rolls 30 and appends segments 35 and 45
        if o == 45:
            appended.roll()
        appended.batch([rec(f"k{o % 7}", f"w{o}")])
    write_log(appended.table(), part)
    truth = comparable(replay(read_partition(part)).latest)

    # The broker's cleaner compacts [0, 45) into one segment at 0 and is killed right after .cleaned -> .swap.
    batches = [b for b in read_partition(part) if b.base_offset < 45]
    last = {r.key: r.offset for b in batches for r in b.records}
    cleaned = LogBuilder("t", 0)
    for b in batches:
        for r in b.records:
            if last[r.key] == r.offset:
                cleaned.batch([rec(r.key, r.value, timestamp=r.timestamp, offset=r.offset)])
    write_log(cleaned.table(), tmp_path / "cleaner")
    cleaner_killed_after_swap(part, 0, {sfx: (tmp_path / "cleaner" / name(0, sfx)).read_bytes()
                                        for sfx in (".log", ".index", ".timeindex")})
    broker = tmp_path / "broker" / "t-0"  # what the broker's next start would make of it
    shutil.copytree(part, broker)
    load_partition(broker)
    kafka_logs = _check_log(broker, truth)

    assert main(["recover", "--log-dir", str(log_dir), "--now", NOW]) == 0
    assert _check_log(part, truth) == kafka_logs
    assert not list((tmp_path / "logs.segjobs").rglob("replace.json"))
    for _ in range(2):  # and later runs keep working on it
        assert main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet"]) == 0
        _check_log(part, truth)


def test_recover_removes_the_empty_work_dirs_and_no_other(tmp_path: Path, capsys) -> None:
    """An external-sort dir a run left empty, and an empty real run's dir in it, go; a crashed run's dir that
    holds files, and a dry run's (which may be at work beside this run: it holds no lock), stay, and so does
    the external-sort dir holding them. Nothing of it is reported: removing an empty dir changes nothing."""
    from jobs.commands.cli import main
    from jobs.logdir.commit import EXTERNAL_SORT_DIR
    from jobs.logdir.lock import work_uri

    log_dir = tmp_path / "logs"
    (log_dir / "orders-0").mkdir(parents=True)
    sort_dir = Path(work_uri(str(log_dir))) / EXTERNAL_SORT_DIR
    (sort_dir / "run-empty").mkdir(parents=True)
    (sort_dir / "dry-beside").mkdir()
    (sort_dir / "run-crashed" / "orders-0").mkdir(parents=True)
    (sort_dir / "run-crashed" / "orders-0" / "piece-0.rows").write_bytes(b"rows")
    assert main(["recover", "--log-dir", str(log_dir)]) == 0
    assert "; 0 action(s); 0 leftover file(s)" in capsys.readouterr().out
    assert sorted(p.name for p in sort_dir.iterdir()) == ["dry-beside", "run-crashed"]
    assert (sort_dir / "run-crashed" / "orders-0" / "piece-0.rows").read_bytes() == b"rows"

    shutil.rmtree(sort_dir / "run-crashed")
    (sort_dir / "dry-beside").rmdir()  # the dry run ended
    assert main(["recover", "--log-dir", str(log_dir)]) == 0
    assert not sort_dir.exists()
