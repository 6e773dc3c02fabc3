"""``segjobs tiered audit --layout aiven``: the broker-written metadata and log dir of
tests/data/kafka-tiered/kafka-4.1.1 with its segments laid out as Aiven's plugin lays them out
(tests/data/kafka-tiered-aiven/SOURCES.md: written by our generator), as they are and with each finding's damage
done to a copy; what the layout does not read is refused naming the object."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.rules.tiered_audit import DELETED, UNKNOWN, Gap

DATA = Path(__file__).resolve().parents[3] / "data"
LOGS = DATA / "kafka-tiered" / "kafka-4.1.1" / "logs"
AIVEN = DATA / "kafka-tiered-aiven"
NOW = "2026-11-29T04:05:00Z"
AS_CREATED = ["*:retention.ms=-1", "expiring:retention.bytes=6000"]
KEPT_ID, EXPIRING_ID = "3hkKp7BATom3_tVt48rN_Q", "mufPLtj8ThiJOAPuyMTv9A"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"
EXPIRED_ID = "1jMeF4jdRpiVMYxylUc-Mg"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    shutil.copytree(AIVEN / "compressed", tmp_path / "remote")
    return tmp_path / "remote"


def _kept(store: Path, suffix: str) -> Path:
    return store / f"kept-{KEPT_ID}" / "0" / f"{KEPT_40}{suffix}"


def _audit(remote: Path, *overrides: str, logs: Path = LOGS, **kw):  # type: ignore[no-untyped-def]
    return api.tiered_audit(logs, remote, layout="aiven", overrides=[*AS_CREATED, *overrides], **{"now": NOW, **kw})


def _by_topic(audit):  # type: ignore[no-untyped-def]
    return {p.topic: p for p in audit.partitions}


def _cli(remote: Path | str, *extra: str, logs: Path = LOGS) -> int:
    return main(["tiered", "audit", "--log-dir", str(logs), "--remote", str(remote), "--layout", "aiven",
                 "--now", NOW, *[a for s in AS_CREATED for a in ("--set", s)], *extra])


@pytest.mark.parametrize("variant", ["compressed", "plain"])
def test_an_intact_store_has_nothing_to_report(variant: str) -> None:
    audit = _audit(AIVEN / variant)
    parts = _by_topic(audit)
    assert (parts["kept"].finished.segments, parts["kept"].finished.bytes) == (6, 6 * 1461)
    for p in audit.partitions:
        assert (p.gaps, p.missing, p.orphans, p.overdue) == ([], [], [], []), p.topic
    assert audit.exit_code == 0 and audit.unrecognised == [] and audit.layout == "aiven"


@pytest.mark.parametrize("suffix", [".log", ".indexes", ".rsm-manifest"])
def test_each_object_of_a_finished_segment_is_required(store: Path, suffix: str, capsys) -> None:
    _kept(store, suffix).unlink()
    kept = _by_topic(_audit(store))["kept"]
    assert [(m.start_offset, m.suffix, m.problem) for m in kept.missing] == [(40, suffix, "absent")]
    assert _cli(store) == 1
    assert f"  MISSING: segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59): its {suffix} object is absent" \
        in capsys.readouterr().out


def test_objects_are_of_the_sizes_the_manifest_gives_and_it_of_the_metadatas(store: Path) -> None:
    log, indexes, manifest = (_kept(store, s) for s in (".log", ".indexes", ".rsm-manifest"))
    stored, index_bytes = log.stat().st_size, indexes.stat().st_size
    log.write_bytes(log.read_bytes()[:-1])
    indexes.write_bytes(indexes.read_bytes() + b"\0")
    doc = json.loads(manifest.read_text())
    doc["chunkIndex"]["originalFileSize"] = 1460  # still three chunks of 512
    manifest.write_text(json.dumps(doc))
    kept = _by_topic(_audit(store))["kept"]
    assert [(m.suffix, m.problem) for m in kept.missing] == [
        (".rsm-manifest", "of a segment of 1460 bytes, the metadata says 1461"),
        (".log", f"{stored - 1} bytes, the manifest says {stored}"),
        (".indexes", f"{index_bytes + 1} bytes, the manifest says {index_bytes}")]
    assert kept.missing[1].uri == str(log)


def test_an_unreadable_manifest_is_missing_data(store: Path) -> None:
    _kept(store, ".rsm-manifest").write_text("{\"version\": \"1\"")
    audit = _audit(store)
    (m,) = _by_topic(audit)["kept"].missing
    assert m.suffix == ".rsm-manifest" and m.problem.startswith("unreadable: not a JSON manifest")
    assert audit.exit_code == 1


@pytest.mark.parametrize(("change", "message"), [
    ({"encryption": {"dataKey": "k:AAAA", "aad": "CgsMDQ=="}}, "the segment is encrypted"),
    ({"version": "7"}, "manifest version '7' is not supported"),
])
def test_what_the_layout_does_not_read_stops_the_audit_naming_the_object(store: Path, change: dict,  # type: ignore[type-arg]
                                                                        message: str, capsys) -> None:
    manifest = _kept(store, ".rsm-manifest")
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | change))
    assert _cli(store) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"{manifest}: {message}" in captured.err


def test_a_log_start_below_the_remote_segments_is_a_gap(store: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(LOGS, logs)
    cp = logs / "log-start-offset-checkpoint"
    cp.write_text(cp.read_text().replace("expiring 0 20", "expiring 0 0"))
    audit = _audit(store, logs=logs)
    assert _by_topic(audit)["expiring"].gaps == [Gap(0, 19)] and audit.exit_code == 1


def test_objects_of_a_deleted_segment_and_of_no_segment_are_orphans(store: Path) -> None:
    pdir = store / f"expiring-{EXPIRING_ID}" / "0"
    for suffix, size in ((".log", 300), (".indexes", 127), (".rsm-manifest", 900)):
        (pdir / f"00000000000000000000-{EXPIRED_ID}{suffix}").write_bytes(b"x" * size)
    stray = "AAAAAAAAAAAAAAAAAAAAAA"
    (pdir / f"00000000000000000120-{stray}.log").write_bytes(b"y" * 10)
    audit = _audit(store)
    assert [(o.segment_id, o.reason, o.bytes, len(o.objects)) for o in _by_topic(audit)["expiring"].orphans] == [
        (EXPIRED_ID, DELETED, 1327, 3), (stray, UNKNOWN, 10, 1)]
    assert audit.exit_code == 0


def test_segments_beyond_retention_are_overdue(store: Path) -> None:
    kept = _by_topic(_audit(store, "kept:retention.bytes=5000"))["kept"]
    assert [(o.start_offset, o.size_bytes) for o in kept.overdue] == [(0, 1461), (20, 1461)]


@pytest.mark.s3
def test_a_store_on_s3_is_audited_and_read_back_as_on_disk(s3_bucket_env, store: Path, capsys) -> None:
    from segment_io.remote_layout import AivenLayout
    from segment_io.storage import StorageOptions, open_storage

    endpoint, bucket = s3_bucket_env
    _kept(store, ".indexes").unlink()
    client = endpoint.client()
    for p in sorted(store.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"tiered/{p.relative_to(store)}", Body=p.read_bytes())
    assert _cli(f"s3://{bucket}/tiered", "--s3-endpoint", endpoint.endpoint_url, "--format", "json") == 1
    on_s3 = json.loads(capsys.readouterr().out)
    (kept,) = [p for p in on_s3["partitions"] if p["topic"] == "kept"]
    assert [(m["start_offset"], m["suffix"], m["problem"]) for m in kept["missing_objects"]] == [
        (40, ".indexes", "absent")]
    root = f"s3://{bucket}/tiered"
    s3 = open_storage(root, StorageOptions(endpoint_url=endpoint.endpoint_url))
    segments = AivenLayout().list(s3, root).by_segment()
    objs = {o.suffix: o for o in segments[(KEPT_ID, 0, "6QRGyTw3TG2Bem_F3n_zdw")]}
    lts = DATA / "kafka-tiered" / "kafka-4.1.1" / "remote" / "kafka-tiered-storage" / f"kept-0-{KEPT_ID}"
    original = (lts / "00000000000000000000-6QRGyTw3TG2Bem_F3n_zdw.log").read_bytes()
    assert AivenLayout().read_segment(s3, objs) == original
