"""``segjobs table --remote``: a tiered topic's latest value per key, read as one log from what a real Kafka 4.1.1
broker with LocalTieredStorage wrote (tests/data/kafka-tiered/SOURCES.md). The oracle is the records the fixture
generator produced (tests.support.tiered_broker.produced_record: the n-th record of a topic has offset n), the
latest per key computed here. Partition tasks in this process and the embedded deltalake writer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs import api
from jobs.logdir.tiered import RemoteOptions
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.tiered_broker import produced_record

FIXTURE = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered" / "kafka-4.1.1"
#: the same remote segments in Aiven's layout (tests/data/kafka-tiered-aiven/SOURCES.md)
AIVEN = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered-aiven"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"  # kept's remote segment 40-59


def _run(logs: Path, remote: Path | None, table: Path, topic: str, layout: str = "local-tiered-storage"
         ) -> api.TableResult:
    options = api.TableOptions(table=str(table), topic=topic, progress=lambda line: None,
                               remote=RemoteOptions(str(remote), layout) if remote is not None else None)
    return api.table(logs, options, seams=api.Seams(runner=api.InProcessTasks()))


def _rows(table: Path) -> dict[tuple[int, bytes], tuple[bytes, int]]:
    return {(r["partition"], r["key"]): (r["value"], r["offset"])
            for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist()}


def _latest(topic: str, first: int, last: int, partition: int = 0) -> dict[tuple[int, bytes], tuple[bytes, int]]:
    out = {}
    for n in range(first, last + 1):
        key, value = produced_record(topic, n)
        out[(partition, key)] = (value, n)
    return out


def test_a_tiered_topic_s_table_holds_the_latest_produced_value_per_key(tmp_path: Path) -> None:
    kept = _run(FIXTURE / "logs", FIXTURE / "remote", tmp_path / "kept", "kept")
    assert kept.exit_code == 0 and [(p.action, p.applied_after) for p in kept.partitions] == [("applied", 120)]
    assert _rows(tmp_path / "kept") == _latest("kept", 0, 119)
    expiring = _run(FIXTURE / "logs", FIXTURE / "remote", tmp_path / "expiring", "expiring")
    assert expiring.exit_code == 0 and _rows(tmp_path / "expiring") == _latest("expiring", 20, 119)


def test_without_remote_only_the_local_tail_is_read(tmp_path: Path) -> None:
    result = _run(FIXTURE / "logs", None, tmp_path / "t", "kept")
    # the local log is an empty active segment at 120: nothing to apply
    assert result.exit_code == 0 and result.partitions[0].records_read == 0
    assert _rows(tmp_path / "t") == {}


def _with_a_local_partition(tmp_path: Path) -> Path:
    """A copy of the fixture with a second partition of ``kept`` that is only local (same topic id)."""
    node = tmp_path / "node"
    shutil.copytree(FIXTURE, node)
    (node / "logs" / "kept-1").mkdir()
    shutil.copy(node / "logs" / "kept-0" / "partition.metadata", node / "logs" / "kept-1")
    log = LogBuilder("kept", 1)
    log.batch([rec("a", "1"), rec("b", "2")])
    write_log(log.table(), node / "logs" / "kept-1")
    return node


def test_a_missing_remote_object_fails_its_partition_and_the_others_are_applied(tmp_path: Path) -> None:
    node = _with_a_local_partition(tmp_path)
    (next((node / "remote" / "kafka-tiered-storage").glob("kept-0-*")) / f"{KEPT_40}.log").unlink()
    result = _run(node / "logs", node / "remote", tmp_path / "t", "kept")
    assert result.exit_code == 1
    (p0, p1) = result.partitions
    assert p0.action == "error" and "remote segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59)" in (p0.error or "")
    assert "is absent" in (p0.error or "")
    assert (p1.action, p1.applied_after) == ("applied", 2)
    assert _rows(tmp_path / "t") == {(1, b"a"): (b"1", 0), (1, b"b"): (b"2", 1)}


def test_a_partition_whose_leader_epochs_cannot_be_read_fails_alone(tmp_path: Path) -> None:
    # its lineage decides which remote segments are read: without it, nothing is read of the partition
    node = _with_a_local_partition(tmp_path)
    (node / "logs" / "kept-0" / "leader-epoch-checkpoint").write_text("0\n2\nnot an epoch\n")
    result = _run(node / "logs", node / "remote", tmp_path / "t", "kept")
    (p0, p1) = result.partitions
    assert result.exit_code == 1 and p0.action == "error" and "leader-epoch-checkpoint" in (p0.error or "")
    assert (p1.action, p1.applied_after) == ("applied", 2)


@pytest.mark.parametrize("variant", ["plain", "compressed"])
def test_a_tiered_topic_in_aiven_s_layout_s_table_holds_the_latest_produced_value_per_key(tmp_path: Path,
                                                                                         variant: str) -> None:
    kept = _run(FIXTURE / "logs", AIVEN / variant, tmp_path / "kept", "kept", "aiven")
    assert kept.exit_code == 0 and [(p.action, p.applied_after) for p in kept.partitions] == [("applied", 120)]
    assert _rows(tmp_path / "kept") == _latest("kept", 0, 119)


@pytest.mark.parametrize("layout", ["local-tiered-storage", "aiven"])
def test_a_local_log_starting_inside_a_remote_segment_is_read_below_it_then_locally(tmp_path: Path,
                                                                                    layout: str) -> None:
    node = tmp_path / "node"
    shutil.copytree(FIXTURE, node)
    log = LogBuilder("kept", 0, start_offset=105)  # inside kept's remote segment 100-119 (one batch)
    log.batch([rec(produced_record("kept", n)[0].decode(), f"local-{n}") for n in range(105, 120)])
    write_log(log.table(), node / "logs" / "kept-0")
    remote = node / "remote" if layout == "local-tiered-storage" else AIVEN / "compressed"
    result = _run(node / "logs", remote, tmp_path / "t", "kept", layout)
    assert result.exit_code == 0 and [(p.action, p.applied_after) for p in result.partitions] == [("applied", 120)]
    assert result.partitions[0].records_read == 120  # each offset once
    local = {(0, produced_record("kept", n)[0]): (f"local-{n}".encode(), n) for n in range(105, 120)}
    assert _rows(tmp_path / "t") == {**_latest("kept", 0, 104), **local}


def test_a_corrupt_aiven_manifest_fails_its_partition_naming_it_and_the_others_are_applied(tmp_path: Path) -> None:
    node = _with_a_local_partition(tmp_path)
    shutil.copytree(AIVEN / "plain", tmp_path / "aiven")
    manifest = next((tmp_path / "aiven").glob(f"kept-*/0/{KEPT_40}.rsm-manifest"))
    manifest.write_text(manifest.read_text().replace('"version":"1"', '"version":"7"'))
    result = _run(node / "logs", tmp_path / "aiven", tmp_path / "t", "kept", "aiven")
    (p0, p1) = result.partitions
    assert result.exit_code == 1 and p0.action == "error"
    assert f"{manifest}: manifest version '7' is not supported" in (p0.error or "")
    assert (p1.action, p1.applied_after) == ("applied", 2)


def _upload(client, bucket: str, root: Path, prefix: str) -> None:  # type: ignore[no-untyped-def]
    for file in root.rglob("*"):
        if file.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{file.relative_to(root)}", Body=file.read_bytes())


def test_a_log_dir_and_an_aiven_remote_store_on_s3(s3_bucket, tmp_path: Path) -> None:
    endpoint, bucket = s3_bucket
    _upload(endpoint.client(), bucket, FIXTURE / "logs", "logs")
    _upload(endpoint.client(), bucket, AIVEN / "compressed", "aiven")
    options = api.TableOptions(table=str(tmp_path / "t"), topic="expiring", progress=lambda line: None,
                               storage=endpoint.storage_options(),
                               remote=RemoteOptions(f"s3://{bucket}/aiven", "aiven"))
    result = api.table(f"s3://{bucket}/logs", options, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0 and [(p.action, p.applied_after) for p in result.partitions] == [("applied", 120)]
    assert _rows(tmp_path / "t") == _latest("expiring", 20, 119)
