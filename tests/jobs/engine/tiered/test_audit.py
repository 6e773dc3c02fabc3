"""``segjobs tiered audit`` on what a real Kafka 4.1.1 broker with LocalTieredStorage wrote
(tests/data/kafka-tiered/SOURCES.md): as it was (nothing to report), then with the damage each finding is about
done to a copy: a remote object removed or cut short, objects no finished segment stands behind, retention
tighter than the broker's, local segments gone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.tiered.audit import audit_json, audit_text
from jobs.rules.tiered_audit import DELETED, UNKNOWN, Gap

FIXTURE = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered" / "kafka-4.1.1"
#: after the broker's last event (its clock: the metadata's event timestamps), before any retention.ms breach
NOW = "2026-11-29T04:05:00Z"
#: the configs the topics were created with (topics.json), as segjobs settings
AS_CREATED = ["*:retention.ms=-1", "expiring:retention.bytes=6000"]
KEPT_ID, EXPIRING_ID, DROPPED_ID = "3hkKp7BATom3_tVt48rN_Q", "mufPLtj8ThiJOAPuyMTv9A", "T4f2qjWBRHiIv0BgUf6gGw"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"  # kept's remote segment 40-59
EXPIRED_ID = "1jMeF4jdRpiVMYxylUc-Mg"  # expiring's segment 0-19, deleted by remote retention


@pytest.fixture
def node(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "node")
    return tmp_path / "node"


def _remote_dir(node: Path, topic: str) -> Path:
    return next((node / "remote" / "kafka-tiered-storage").glob(f"{topic}-0-*"))


def _audit(node: Path, *overrides: str, **kw):  # type: ignore[no-untyped-def]
    return api.tiered_audit(node / "logs", node / "remote", overrides=[*AS_CREATED, *overrides], **{"now": NOW, **kw})


def _by_topic(audit):  # type: ignore[no-untyped-def]
    return {p.topic: p for p in audit.partitions}


def test_what_the_broker_left_has_nothing_to_report() -> None:
    audit = _audit(FIXTURE)
    parts = _by_topic(audit)
    assert sorted(parts) == ["dropped", "expiring", "kept"]
    kept, expiring = parts["kept"], parts["expiring"]
    assert (kept.log_start_offset, kept.log_end, kept.finished.segments, kept.finished.bytes) == (0, 120, 6, 6 * 1461)
    assert (expiring.log_start_offset, expiring.finished.segments) == (20, 5)
    assert not parts["dropped"].in_log_dir and parts["dropped"].finished.segments == 0
    assert (parts["dropped"].deleted.segments, expiring.deleted.segments, kept.deleted.segments) == (4, 1, 0)
    for p in audit.partitions:
        assert (p.gaps, p.missing, p.orphans, p.overdue, p.dropped_events) == ([], [], [], [], 0), p.topic
    assert audit.exit_code == 0 and audit.metadata_events == 41 and audit.unrecognised == []
    # the broker's own expiration task agrees: with its retention.bytes nothing more is due
    assert "summary: 0 gap(s), 0 missing object(s), 0 orphan segment(s) (0 B), 0 overdue segment(s) (0 B)" \
        in audit_text(audit)


def test_a_remote_object_removed_is_missing_and_its_offsets_a_gap(node: Path, capsys) -> None:
    (_remote_dir(node, "kept") / f"{KEPT_40}.log").unlink()
    kept = _by_topic(_audit(node))["kept"]
    assert [(m.start_offset, m.suffix, m.problem) for m in kept.missing] == [(40, ".log", "absent")]
    assert kept.gaps == []  # the metadata still says finished: the offsets are covered, the object is missing
    rc = main(["tiered", "audit", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"), "--now", NOW,
               *[a for s in AS_CREATED for a in ("--set", s)]])
    out = capsys.readouterr().out
    assert rc == 1
    assert "  MISSING: segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59): its .log object is absent" in out
    assert out.rstrip().endswith("DATA LOSS: exit code 1")


def test_a_remote_segment_cut_short_is_missing(node: Path) -> None:
    log = _remote_dir(node, "kept") / f"{KEPT_40}.log"
    log.write_bytes(log.read_bytes()[:1000])
    kept = _by_topic(_audit(node))["kept"]
    assert [(m.start_offset, m.problem) for m in kept.missing] == [(40, "1000 bytes, the metadata says 1461")]


def test_local_segments_gone_below_the_log_end_leave_a_gap(node: Path) -> None:
    # expiring's log start is 20 (checkpoint); say it were 0 while remote begins at 20: offsets 0-19 are lost
    cp = node / "logs" / "log-start-offset-checkpoint"
    cp.write_text(cp.read_text().replace("expiring 0 20", "expiring 0 0"))
    audit = _audit(node)
    assert _by_topic(audit)["expiring"].gaps == [Gap(0, 19)] and audit.exit_code == 1


def test_objects_of_a_deleted_segment_and_of_no_segment_are_orphans(node: Path) -> None:
    expiring = _remote_dir(node, "expiring")
    (expiring / f"00000000000000000000-{EXPIRED_ID}.log").write_bytes(b"x" * 1461)
    (expiring / f"00000000000000000000-{EXPIRED_ID}.index").write_bytes(b"")
    stray = "AAAAAAAAAAAAAAAAAAAAAA"
    (expiring / f"00000000000000000120-{stray}.log").write_bytes(b"y" * 10)
    audit = _audit(node)
    orphans = _by_topic(audit)["expiring"].orphans
    assert [(o.segment_id, o.reason, o.bytes, o.start_offset) for o in orphans] == [
        (EXPIRED_ID, DELETED, 1461, 0), (stray, UNKNOWN, 10, None)]
    assert audit.exit_code == 0  # orphans cost money, they lose no data
    report = audit_json(audit)
    (row,) = [p for p in report["partitions"] if p["topic"] == "expiring"]
    assert [o["bytes"] for o in row["orphans"]] == [1461, 10]


def test_objects_left_behind_by_a_deleted_topic_are_orphans(node: Path) -> None:
    # LocalTieredStorage left the dropped topic's directory empty (git keeps no empty directory); a store that
    # failed to delete leaves objects in it
    pdir = node / "remote" / "kafka-tiered-storage" / f"dropped-0-{DROPPED_ID}"
    pdir.mkdir(exist_ok=True)
    (pdir / "00000000000000000000-a3PLF4A3RhqnauVtYSpdvQ.log").write_bytes(b"z" * 1461)
    dropped = _by_topic(_audit(node))["dropped"]
    assert [(o.reason, o.bytes) for o in dropped.orphans] == [(DELETED, 1461)]


def test_retention_tighter_than_the_brokers_makes_segments_overdue(node: Path) -> None:
    kept = _by_topic(_audit(node, "kept:retention.bytes=5000"))["kept"]
    # 6 x 1461 = 8766 bytes remote, none local: 3766 over 5000, so the two oldest go (a third would overshoot)
    assert [(o.start_offset, o.reason) for o in kept.overdue] == [
        (0, "beyond retention.bytes=5000"), (20, "beyond retention.bytes=5000")]
    late = _by_topic(_audit(node, "kept:retention.ms=1h", now="2026-11-30T00:00:00Z"))["kept"]
    assert len(late.overdue) == 6


def test_files_the_layout_does_not_know_are_reported_and_left_alone(node: Path) -> None:
    (node / "remote" / "kafka-tiered-storage" / "README").write_text("x")
    audit = _audit(node)
    assert [Path(f.uri).name for f in audit.unrecognised] == ["README"]
    assert "1 file(s) under the remote root are no local-tiered-storage object, left alone" in audit_text(audit)


def test_a_log_dir_without_metadata_is_refused(tmp_path: Path, capsys) -> None:
    shutil.copytree(FIXTURE / "logs" / "kept-0", tmp_path / "logs" / "kept-0")
    rc = main(["tiered", "audit", "--log-dir", str(tmp_path / "logs"), "--remote", str(FIXTURE / "remote")])
    assert rc == 2
    assert "no __remote_log_metadata-<n> partition" in capsys.readouterr().err


def test_the_metadata_may_come_from_another_dir_and_names_from_a_topic_ids_file(node: Path, tmp_path: Path) -> None:
    meta = tmp_path / "meta"
    shutil.move(node / "logs" / "__remote_log_metadata-0", meta / "__remote_log_metadata-0")
    shutil.rmtree(node / "logs" / "kept-0")
    audit = _audit(node, metadata_dir=meta, topic_ids={KEPT_ID: "kept-renamed"})
    kept = _by_topic(audit)["kept-renamed"]
    assert not kept.in_log_dir and kept.finished.segments == 6


def test_json_report_on_stdout(capsys) -> None:
    rc = main(["tiered", "audit", "--log-dir", str(FIXTURE / "logs"), "--remote", str(FIXTURE / "remote"),
               "--now", NOW, "--format", "json", *[a for s in AS_CREATED for a in ("--set", s)]])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["exit_code"] == 0 and report["metadata_events"] == 41
    kept = next(p for p in report["partitions"] if p["topic"] == "kept")
    assert kept["remote"]["finished"] == {"segments": 6, "bytes": 8766}
    assert kept["local"] == {"start_offset": 120, "segments": 1, "bytes": 0}


def test_a_damaged_metadata_record_stops_the_audit_naming_file_and_offset(node: Path, capsys) -> None:
    log = node / "logs" / "__remote_log_metadata-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch (offsets 37-40): its CRC no longer matches
    log.write_bytes(bytes(data))
    rc = main(["tiered", "audit", "--log-dir", str(node / "logs"), "--remote", str(node / "remote")])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(log) in err and ", offset 37: CRC-32C mismatch" in err and err.rstrip().endswith("nothing audited")


@pytest.mark.s3
def test_log_dir_and_remote_store_on_s3_read_as_on_disk(s3_bucket_env, node: Path, capsys) -> None:
    endpoint, bucket = s3_bucket_env
    (_remote_dir(node, "kept") / f"{KEPT_40}.log").unlink()
    client = endpoint.client()
    for p in sorted(node.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"node/{p.relative_to(node)}", Body=p.read_bytes())
    on_disk = audit_json(_audit(node))
    rc = main(["tiered", "audit", "--log-dir", f"s3://{bucket}/node/logs", "--remote", f"s3://{bucket}/node/remote",
               "--s3-endpoint", endpoint.endpoint_url, "--now", NOW, "--format", "json",
               *[a for s in AS_CREATED for a in ("--set", s)]])
    on_s3 = json.loads(capsys.readouterr().out)
    assert rc == 1

    def local_view(report):  # type: ignore[no-untyped-def]
        return [{k: v for k, v in p.items() if k != "orphans"} for p in report["partitions"]]

    assert local_view(on_s3) == local_view(on_disk)
    (kept,) = [p for p in on_s3["partitions"] if p["topic"] == "kept"]
    assert [(m["start_offset"], m["problem"]) for m in kept["missing_objects"]] == [(40, "absent")]


def test_remote_segments_of_an_epoch_the_lineage_lost_are_orphans_and_their_offsets_a_gap(node: Path) -> None:
    # what an unclean election leaves: the new leader's lineage has no epoch 2, whose segments 60-119 are remote
    cp = node / "logs" / "kept-0" / "leader-epoch-checkpoint"
    assert cp.read_text() == "0\n2\n0 0\n2 60\n"
    cp.write_text("0\n2\n0 0\n3 60\n")
    kept = _by_topic(_audit(node))["kept"]
    assert [(o.start_offset, o.reason, o.bytes) for o in sorted(kept.orphans, key=lambda o: o.start_offset)] == [
        (start, "finished, outside the leader-epoch lineage: its epoch 2 is not in the lineage", 1461 + 12 + 102 + 13)
        for start in (60, 80, 100)]
    assert kept.gaps == [Gap(60, 119)]


def test_the_html_page_lists_every_finding(node: Path, tmp_path: Path, capsys) -> None:
    (_remote_dir(node, "kept") / f"{KEPT_40}.log").unlink()
    (_remote_dir(node, "expiring") / f"00000000000000000000-{EXPIRED_ID}.log").write_bytes(b"x" * 1461)
    page = tmp_path / "out" / "audit.html"
    rc = main(["tiered", "audit", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"), "--now", NOW,
               "--html", str(page), *[a for s in AS_CREATED for a in ("--set", s)]])
    capsys.readouterr()
    text = page.read_text()
    assert rc == 1 and text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert "<h2>Missing objects (data loss): 1</h2>" in text and "<td class=\"wrap\">absent</td>" in text
    assert "<h2>Orphans: 1</h2>" in text and "segment deleted (DELETE_SEGMENT_FINISHED)" in text
    assert "<h2>Gaps (data loss): 0</h2>" in text and "Data loss: exit code 1." in text


def test_the_guide_quotes_what_the_command_prints(node: Path, capsys, monkeypatch) -> None:
    """docs/guide/tiered.md's example: the fixture with a remote .log removed, a deleted segment's object put back
    and retention.bytes tightened."""
    page = (Path(__file__).resolve().parents[4] / "docs" / "guide" / "tiered.md").read_text()
    block = page.split("```text\n$ segjobs tiered audit --log-dir logs", 1)[1].split("```", 1)[0]
    command, quoted = block.split("\n", 1)
    (_remote_dir(node, "kept") / f"{KEPT_40}.log").unlink()
    (_remote_dir(node, "expiring") / f"00000000000000000000-{EXPIRED_ID}.log").write_bytes(b"x" * 1461)
    monkeypatch.chdir(node)
    args = ["--log-dir", "logs", *[a.strip("'") for a in command.split()]]
    assert main(["tiered", "audit", *args]) == 1
    assert capsys.readouterr().out == quoted


def test_topic_ids_file_and_unsupported_layout_on_the_command_line(node: Path, tmp_path: Path, capsys) -> None:
    shutil.rmtree(node / "logs" / "kept-0")
    ids = tmp_path / "ids.txt"
    ids.write_text(f"# kept lives on other brokers\nkept-elsewhere {KEPT_ID}\n")
    rc = main(["tiered", "audit", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"), "--now", NOW,
               "--topic-ids", str(ids), "--format", "json", *[a for s in AS_CREATED for a in ("--set", s)]])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and "kept-elsewhere" in [p["topic"] for p in report["partitions"]]
    ids.write_text("not a pair\n")
    assert main(["tiered", "audit", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"),
                 "--topic-ids", str(ids)]) == 2
    assert f"{ids}, line 1: not '<topic> <topic id>'" in capsys.readouterr().err
    assert main(["tiered", "audit", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"),
                 "--layout", "gcs"]) == 2
    assert "remote layout 'gcs' is not supported; supported: aiven, local-tiered-storage" in capsys.readouterr().err


def test_finished_segments_of_a_topic_deleted_and_created_again_are_orphans(node: Path) -> None:
    # the log dir's kept is a new topic (another id); the metadata's kept was deleted without its remote delete
    meta = node / "logs" / "kept-0" / "partition.metadata"
    meta.write_text(meta.read_text().replace(KEPT_ID, "AAAAAAAAAAAAAAAAAAAAAA"))
    audit = _audit(node)
    (old,) = [p for p in audit.partitions if p.topic_id == KEPT_ID]
    assert not old.in_log_dir and old.gaps == [] and old.missing == []
    assert sorted((o.start_offset, o.reason) for o in old.orphans) == [
        (start, "finished, of a deleted topic (the log dir's kept is topic id AAAAAAAAAAAAAAAAAAAAAA)")
        for start in range(0, 120, 20)]
    assert sum(o.bytes for o in old.orphans) == sum(f.stat().st_size for f in _remote_dir(node, "kept").iterdir())


def test_a_local_segment_missing_from_the_middle_of_the_local_log_leaves_a_gap(node: Path) -> None:
    from tests.support.builders import records_table, write_log

    pdir = node / "logs" / "kept-0"
    for f in pdir.glob("0000*"):
        f.unlink()
    logs = write_log(records_table([(f"k{i}", "v" * 100) for i in range(600)]), pdir, segment_bytes=16_384)
    bases = [int(p.name[:20]) for p in logs]
    assert len(bases) >= 4 and all((p.with_suffix(".index")).stat().st_size > 0 for p in logs)
    kept = _by_topic(_audit(node))["kept"]
    assert (kept.log_end, kept.gaps) == (600, [])
    assert kept.local is not None and kept.local.next_offsets == (*bases[1:], 600)  # each read from its tail
    logs[2].unlink()
    kept = _by_topic(_audit(node))["kept"]
    assert kept.gaps == [Gap(bases[2], bases[3] - 1)]
