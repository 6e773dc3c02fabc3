"""``segjobs tiered clean-orphans`` on what a real Kafka 4.1.1 broker with LocalTieredStorage wrote
(tests/data/kafka-tiered/SOURCES.md), and on the same segments in Aiven's layout: orphans put into a copy of the
store, then cleaned, dry run, plan and apply; each refusal (a finished segment, an object newer than the metadata,
the mass-delete guard, a held lock, a plan that no longer holds) with the objects it keeps."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.rules.tiered_clean import KEEP_FINISHED
from tests.support.lock_holders import FOREIGN_HOLD_SCRIPT, hold_in_subprocess, release_holder

DATA = Path(__file__).resolve().parents[3] / "data"
FIXTURE = DATA / "kafka-tiered" / "kafka-4.1.1"
KEPT_ID, EXPIRING_ID = "3hkKp7BATom3_tVt48rN_Q", "mufPLtj8ThiJOAPuyMTv9A"
EXPIRED_ID = "1jMeF4jdRpiVMYxylUc-Mg"  # expiring's segment 0-19, deleted by remote retention
STRAY = "AAAAAAAAAAAAAAAAAAAAAA"
#: a day before the broker's events (its metadata's newest is 2026-11-29T04:04:07Z): old enough for any --min-age
OLD = 1_795_824_000  # 2026-11-28T00:00:00Z, epoch seconds


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A copy of the fixture whose remote objects all look a day older than the metadata's newest event, with the
    objects of expiring's deleted segment 0-19 put back and a stray object no metadata names."""
    shutil.copytree(FIXTURE, tmp_path / "node")
    node = tmp_path / "node"
    pdir = _remote_dir(node, "expiring")
    (pdir / f"00000000000000000000-{EXPIRED_ID}.log").write_bytes(b"x" * 1461)
    (pdir / f"00000000000000000000-{EXPIRED_ID}.index").write_bytes(b"i" * 12)
    (pdir / f"00000000000000000140-{STRAY}.log").write_bytes(b"y" * 100)
    _age(node / "remote")
    return node


def _age(root: Path) -> None:
    for f in root.rglob("*"):
        if f.is_file():
            os.utime(f, (OLD, OLD))


def _remote_dir(node: Path, topic: str) -> Path:
    return next((node / "remote" / "kafka-tiered-storage").glob(f"{topic}-0-*"))


def _files(root: Path) -> set[str]:
    return {str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()}


def _clean(node: Path, *extra: str, remote: Path | None = None) -> int:
    return main(["tiered", "clean-orphans", "--log-dir", str(node / "logs"), "--remote",
                 str(remote or node / "remote"), *extra])


ORPHANS = {f"kafka-tiered-storage/expiring-0-{EXPIRING_ID}/00000000000000000000-{EXPIRED_ID}.log",
           f"kafka-tiered-storage/expiring-0-{EXPIRING_ID}/00000000000000000000-{EXPIRED_ID}.index",
           f"kafka-tiered-storage/expiring-0-{EXPIRING_ID}/00000000000000000140-{STRAY}.log"}


def test_a_dry_run_counts_exactly_what_goes_and_deletes_nothing(node: Path, capsys) -> None:
    before = _files(node / "remote")
    assert _clean(node, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "[dry run]" in out.splitlines()[0]
    assert f"  would delete: expiring-0 segment {EXPIRED_ID} (offsets 0-19): segment deleted " \
           "(DELETE_SEGMENT_FINISHED); 2 object(s), 1473 bytes (1.5 KB)" in out
    assert f"  would delete: expiring-0 segment {STRAY}: no metadata names this segment; 1 object(s), 100 bytes" in out
    assert out.rstrip().endswith("summary: would delete 3 object(s) of 2 orphan segment(s), 1573 bytes (1.6 KB); "
                                 "kept 0 orphan segment(s); 0 topic(s) refused")
    assert _files(node / "remote") == before


def test_a_clean_deletes_the_orphans_and_nothing_else(node: Path, capsys) -> None:
    before = _files(node / "remote")
    assert _clean(node, "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["deleted_bytes"], len(report["deleted"]), report["exit_code"]) == (1573, 3, 0)
    assert _files(node / "remote") == before - ORPHANS
    audit = api.tiered_audit(node / "logs", node / "remote", overrides=["*:retention.ms=-1"], now="2026-11-29T05:00Z")
    assert [o for p in audit.partitions for o in p.orphans] == [] and audit.exit_code == 0


def test_the_api_cleans_as_the_command_does_a_dry_run_first(node: Path, tmp_path: Path) -> None:
    before = _files(node / "remote")
    plan = tmp_path / "clean.json"
    dry = api.tiered_clean_orphans(node / "logs", node / "remote", dry_run=True, plan=plan)
    assert (sum(len(d.objects) for d in dry.plan.deletes), dry.deleted, dry.exit_code) == (3, [], 0)
    assert _files(node / "remote") == before and plan.is_file()
    done = api.tiered_clean_orphans(node / "logs", node / "remote", apply=plan)
    assert (sorted(Path(s.uri).name for s in done.deleted), done.exit_code) == (
        sorted(Path(o).name for o in ORPHANS), 0)
    assert _files(node / "remote") == before - ORPHANS


def test_a_finished_segment_is_never_deleted_even_outside_the_lineage(node: Path, capsys) -> None:
    # an unclean election's lineage: kept's segments 60-119 (epoch 2) are orphans to the audit, yet finished
    (node / "logs" / "kept-0" / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n3 60\n")
    kept = {f for f in _files(node / "remote") if f"kept-0-{KEPT_ID}" in f}
    assert _clean(node, "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted((k["segment_id"], k["kept_because"]) for k in report["kept"])[0][1] == KEEP_FINISHED
    assert len(report["kept"]) == 3 and len(report["deleted"]) == 3
    assert kept <= _files(node / "remote")


def test_what_is_newer_than_the_metadata_is_kept(node: Path, capsys) -> None:
    young = _remote_dir(node, "expiring") / f"00000000000000000140-{STRAY}.log"
    young.touch()  # written now: long after the metadata's newest event
    assert _clean(node, "--min-age", "0s") == 0
    out = capsys.readouterr().out
    assert f"  keep: expiring-0 segment {STRAY}: no metadata names this segment; 100 bytes (100 B); kept: its " \
           "newest object was written" in out and "after the metadata's newest event" in out
    assert young.exists() and "summary: deleted 2 object(s), 1473 bytes" in out


def test_the_guard_keeps_a_topic_whose_objects_no_metadata_names(node: Path, capsys) -> None:
    # a store of another cluster under kept's name: its objects outweigh what the metadata names
    other = node / "remote" / "kafka-tiered-storage" / f"kept-0-{STRAY}"
    shutil.copytree(_remote_dir(node, "kept"), other)
    _age(other)
    before = _files(node / "remote")
    assert _clean(node) == 1
    out = capsys.readouterr().out
    assert f"refused: 100.0% of the remote bytes of kept [{STRAY}]" in out
    assert "run again with --max-delete-fraction 1" in out
    assert before - _files(node / "remote") == ORPHANS  # expiring's orphans went, kept's stayed
    assert _clean(node, "--max-delete-fraction", "1") == 0
    assert not other.exists() or not any(other.iterdir())


def test_a_lock_held_on_the_log_dir_refuses_the_clean(node: Path, capsys) -> None:
    before = _files(node / "remote")
    holder = hold_in_subprocess(node / "logs", FOREIGN_HOLD_SCRIPT)
    try:
        assert _clean(node) == 2
    finally:
        release_holder(holder)
    assert "error:" in capsys.readouterr().err and _files(node / "remote") == before
    assert _clean(node, "--dry-run") == 0  # a dry run deletes nothing: it needs no lock


def test_a_plan_is_applied_exactly_or_not_at_all(node: Path, tmp_path: Path, capsys) -> None:
    plan = tmp_path / "plan.json"
    assert _clean(node, "--dry-run", "--plan", str(plan)) == 0
    doc = json.loads(plan.read_text())
    assert doc["command"] == "tiered clean-orphans" and len(doc["deletes"]) == 2
    # an orphan object rewritten since the plan: the plan no longer holds
    log = _remote_dir(node, "expiring") / f"00000000000000000000-{EXPIRED_ID}.log"
    log.write_bytes(b"z" * 1000)
    os.utime(log, (OLD, OLD))
    capsys.readouterr()
    assert _clean(node, "--apply", str(plan)) == 2
    err = capsys.readouterr().err
    assert "refused, nothing done: the orphans found now differ from the plan: deletes.expiring-0 segment " \
        f"{EXPIRED_ID}.objects.{log}.size: 1461 in the plan, 1000 now; make a new plan" in err
    assert log.exists()
    assert _clean(node, "--dry-run", "--plan", str(plan)) == 0
    assert _clean(node, "--apply", str(plan)) == 0
    assert _files(node / "remote").isdisjoint(ORPHANS)
    capsys.readouterr()
    assert _clean(node, "--apply", str(plan), "--min-age", "0s") == 2
    assert "drop --min-age" in capsys.readouterr().err
    assert _clean(node, "--apply", str(plan), "--dry-run") == 2  # the plan is carried out: its objects are gone
    assert "refused, nothing done" in capsys.readouterr().err


def test_the_aiven_layout_is_cleaned_alike(tmp_path: Path, capsys) -> None:
    remote = tmp_path / "remote"
    shutil.copytree(DATA / "kafka-tiered-aiven" / "plain", remote)
    pdir = remote / f"expiring-{EXPIRING_ID}" / "0"
    for suffix in (".log", ".indexes", ".rsm-manifest"):
        (pdir / f"00000000000000000000-{EXPIRED_ID}{suffix}").write_bytes(b"x" * 10)
    _age(remote)
    before = _files(remote)
    rc = main(["tiered", "clean-orphans", "--log-dir", str(FIXTURE / "logs"), "--remote", str(remote), "--layout",
               "aiven", "--dry-run"])
    assert rc == 0 and "would delete 3 object(s) of 1 orphan segment(s), 30 bytes" in capsys.readouterr().out
    assert _files(remote) == before


@pytest.mark.s3
def test_on_s3_the_lease_is_taken_and_an_object_goes_only_with_its_etag(s3_bucket_env, node: Path, capsys) -> None:
    from jobs.engine.tiered.clean import _delete_one
    from jobs.rules.tiered_clean import Stamp
    from segment_io.storage import StorageOptions, open_storage

    endpoint, bucket = s3_bucket_env
    client = endpoint.client()
    for p in sorted(node.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"node/{p.relative_to(node)}", Body=p.read_bytes())
    # uploaded now, the objects are newer than the metadata: a clean keeps every one, and says why
    assert main(["tiered", "clean-orphans", "--log-dir", f"s3://{bucket}/node/logs", "--remote",
                 f"s3://{bucket}/node/remote", "--s3-endpoint", endpoint.endpoint_url, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["deleted"] == [] and len(report["kept"]) == 2
    assert all("after the metadata's newest event" in k["kept_because"] for k in report["kept"])
    s3 = open_storage(f"s3://{bucket}/node", StorageOptions(endpoint_url=endpoint.endpoint_url))
    uri = f"s3://{bucket}/node/remote/kafka-tiered-storage/x.log"
    s3.write_atomic(uri, b"one")
    listed = s3.stat(uri)
    s3.write_atomic(uri, b"two")  # rewritten since it was listed
    why = _delete_one(s3, Stamp(uri, listed.size, listed.mtime_ms, listed.etag))
    assert why is not None and why.startswith("changed or gone since it was listed") and s3.exists(uri)
    now = s3.stat(uri)
    assert _delete_one(s3, Stamp(uri, now.size, now.mtime_ms, now.etag)) is None and not s3.exists(uri)


def test_on_disk_an_object_goes_only_while_its_size_and_mtime_are_as_listed(tmp_path: Path) -> None:
    from jobs.engine.tiered.clean import _delete_one
    from jobs.rules.tiered_clean import Stamp
    from segment_io.storage import open_storage

    store = open_storage(str(tmp_path))
    f = tmp_path / "x.log"
    f.write_bytes(b"one")
    listed = store.stat(str(f))
    os.utime(f, (OLD, OLD))  # touched since it was listed
    why = _delete_one(store, Stamp(str(f), listed.size, listed.mtime_ms))
    assert why is not None and why.startswith("changed since it was listed") and f.exists()
    assert _delete_one(store, Stamp(str(f), 3, OLD * 1000)) is None and not f.exists()
    assert _delete_one(store, Stamp(str(f), 3, OLD * 1000)) == "gone since it was listed"


def test_options_that_contradict_a_plan_or_a_dry_run_are_refused(node: Path, tmp_path: Path, capsys) -> None:
    assert _clean(node, "--plan", str(tmp_path / "p.json")) == 2
    assert "--plan FILE writes the plan of a dry run: add --dry-run" in capsys.readouterr().err
    other = tmp_path / "retain-plan.json"
    other.write_text(json.dumps({"format": "segjobs-plan", "version": 1, "command": "retain"}))
    assert _clean(node, "--apply", str(other)) == 2
    assert "the plan was made by `segjobs retain`, not `segjobs tiered clean-orphans`" in capsys.readouterr().err
    assert _clean(node, "--dry-run", "--plan", str(tmp_path / "p.json")) == 0
    capsys.readouterr()
    assert _clean(node, "--apply", str(tmp_path / "p.json"), remote=tmp_path / "elsewhere") == 2
    assert "the plan is for --remote" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists() and len(_files(node / "remote") & ORPHANS) == 3


@pytest.mark.s3
def test_a_clean_whose_lease_was_taken_over_stops_before_the_next_delete(s3_bucket_env) -> None:
    from jobs.engine.tiered.audit import TieredAuditOptions
    from jobs.engine.tiered.clean import CleanOptions, CleanResult, _delete
    from jobs.logdir.lock import acquire, lease_uri
    from jobs.rules.tiered_clean import CleanPlan, OrphanDelete, Stamp
    from jobs.rules.timeutil import wall_clock_ms
    from segment_io.errors import LockHeldError
    from segment_io.storage import StorageOptions, open_storage

    endpoint, bucket = s3_bucket_env
    log_dir = f"s3://{bucket}/logs"
    s3 = open_storage(log_dir, StorageOptions(endpoint_url=endpoint.endpoint_url))
    uris = [f"s3://{bucket}/remote/t-0-{STRAY}/0000000000000000000{i}-{STRAY}.log" for i in range(2)]
    for uri in uris:
        s3.write_atomic(uri, b"orphan")
    stamps = tuple(Stamp(uri, info.size, info.mtime_ms, info.etag) for uri in uris for info in (s3.stat(uri),))
    plan = CleanPlan(0, deletes=[OrphanDelete("t", 0, STRAY, STRAY, "no metadata names this segment", stamps)])
    result = CleanResult(CleanOptions(TieredAuditOptions(log_dir, f"s3://{bucket}/remote")), plan)
    with pytest.raises(LockHeldError, match="was taken over by another run"):  # its release, at the end
        with acquire(s3, log_dir, now_ms=wall_clock_ms()) as lease:
            # another run takes the lease over (as after an expiry): this run must not delete anything more
            s3.write_atomic(lease_uri(s3, log_dir), b'{"taken": "over"}')
            _delete(result, s3, lease, wall_clock_ms)
    assert result.deleted == [] and result.stopped is not None and "stopped before" in result.stopped
    assert result.exit_code == 1 and all(s3.exists(uri) for uri in uris)
