"""``segjobs inspect --remote``: tiered partitions inspected as one log, on what a real Kafka 4.1.1 broker with
LocalTieredStorage wrote (tests/data/kafka-tiered/SOURCES.md: produced.json counts the records produced)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from segment_io.aiven_manifest import parse_manifest
from tests.support.builders import LogBuilder, rec, write_log

FIXTURE = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered" / "kafka-4.1.1"
#: the same remote segments in Aiven's layout (tests/data/kafka-tiered-aiven/SOURCES.md)
AIVEN = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered-aiven"
NOW = "2026-11-29T04:05:00Z"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"  # kept's remote segment 40-59
#: retention as the topics were created (topics.json)
AS_CREATED = ["--set", "*:retention.ms=-1", "--set", "expiring:retention.bytes=6000"]


def _inspect(capsys, logs: Path, *args: str) -> tuple[int, dict[str, dict]]:  # type: ignore[no-untyped-def]
    rc = main(["inspect", "--log-dir", str(logs), "--now", NOW, "--format", "json", "--quiet", *AS_CREATED, *args])
    report = json.loads(capsys.readouterr().out)
    return rc, {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}


@pytest.mark.spark
def test_tiered_partitions_count_their_remote_records(spark, capsys, tmp_path: Path) -> None:
    produced = json.loads((FIXTURE / "produced.json").read_text())
    rc, rows = _inspect(capsys, FIXTURE / "logs", "--remote", str(FIXTURE / "remote"))
    assert rc == 0
    kept, expiring = rows["kept-0"], rows["expiring-0"]
    assert (kept["records"], kept["segments"], kept["log_start_offset"], kept["log_end_offset"]) == (
        produced["kept"], 7, 0, 120)
    # remote retention deleted expiring's first 20 records (segment 0-19)
    assert (expiring["records"], expiring["segments"], expiring["log_start_offset"]) == (produced["expiring"] - 20,
                                                                                         6, 20)
    assert kept["bytes"] == 6 * 1461 and kept["distinct_keys"] == 7  # six remote segments; keys k0-k6
    # without --remote only the local tails, empty active segments
    rc, local = _inspect(capsys, FIXTURE / "logs")
    assert rc == 0 and (local["kept-0"]["records"], local["kept-0"]["segments"]) == (0, 1)


@pytest.mark.spark
def test_a_missing_remote_object_makes_its_partition_unreadable(spark, capsys, tmp_path: Path) -> None:
    node = tmp_path / "node"
    shutil.copytree(FIXTURE, node)
    (next((node / "remote" / "kafka-tiered-storage").glob("kept-0-*")) / f"{KEPT_40}.log").unlink()
    rc, rows = _inspect(capsys, node / "logs", "--remote", str(node / "remote"))
    assert rc == 1
    assert "remote segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59): its segment object" in rows["kept-0"]["error"]
    assert "is absent" in rows["kept-0"]["error"]
    assert rows["expiring-0"]["error"] is None and rows["__remote_log_metadata-0"]["records"] == 41


def _local_log_from(node: Path, first: int) -> None:
    """expiring-0's local log made to start at ``first``, inside its remote segment 100-119 (one batch)."""
    log = LogBuilder("expiring", 0, start_offset=first)
    log.batch([rec("k", f"local-{n}") for n in range(first, 120)])
    write_log(log.table(), node / "logs" / "expiring-0")


@pytest.mark.spark
@pytest.mark.parametrize("remote", ["local-tiered-storage", "aiven"])
def test_a_local_log_starting_inside_a_remote_segment_is_read_below_it_then_locally(spark, capsys, tmp_path: Path,
                                                                                     remote: str) -> None:
    node = tmp_path / "node"
    shutil.copytree(FIXTURE, node)
    _local_log_from(node, 110)
    args = (["--remote", str(node / "remote")] if remote == "local-tiered-storage"
            else ["--remote", str(AIVEN / "compressed"), "--remote-layout", "aiven"])
    rc, rows = _inspect(capsys, node / "logs", *args)
    expiring = rows["expiring-0"]
    assert rc == 0 and expiring["error"] is None
    # 20-109 from remote (the batch 100-119 cut after 109), 110-119 from the local log: each offset once
    produced = json.loads((FIXTURE / "produced.json").read_text())
    assert (expiring["records"], expiring["log_start_offset"], expiring["log_end_offset"]) == (
        produced["expiring"] - 20, 20, 120)
    assert expiring["segments"] == 7  # remote 20, 40, 60, 80 and 100 (cut after 109); local 110 and 120 (empty)


@pytest.mark.spark
@pytest.mark.parametrize("variant", ["plain", "compressed"])
def test_a_remote_store_in_aiven_s_layout_inspects_as_the_broker_s_own(spark, capsys, variant: str) -> None:
    rc, lts = _inspect(capsys, FIXTURE / "logs", "--remote", str(FIXTURE / "remote"))
    rc_aiven, aiven = _inspect(capsys, FIXTURE / "logs", "--remote", str(AIVEN / variant), "--remote-layout", "aiven")
    assert rc == rc_aiven == 0
    keys = ("records", "segments", "bytes", "distinct_keys", "log_start_offset", "log_end_offset", "error")
    for name in ("kept-0", "expiring-0"):
        assert {k: aiven[name][k] for k in keys} == {k: lts[name][k] for k in keys}
    assert aiven["kept-0"]["records"] == json.loads((FIXTURE / "produced.json").read_text())["kept"]


@pytest.mark.spark
def test_a_corrupt_aiven_chunk_makes_its_partition_unreadable_naming_it_and_the_others_are_inspected(
        spark, capsys, tmp_path: Path) -> None:
    shutil.copytree(AIVEN / "compressed", tmp_path / "aiven")
    log = next((tmp_path / "aiven").glob(f"kept-*/0/{KEPT_40}.log"))
    manifest = parse_manifest(log.with_suffix(".rsm-manifest").read_bytes(), uri="m")
    second = list(manifest.chunks())[1]
    data = bytearray(log.read_bytes())
    data[second.stored_position:second.stored_position + 4] = b"\0\0\0\0"
    log.write_bytes(bytes(data))
    rc, rows = _inspect(capsys, FIXTURE / "logs", "--remote", str(tmp_path / "aiven"), "--remote-layout", "aiven")
    assert rc == 1
    assert f"{log}, byte {second.stored_position}: chunk 1 (segment bytes 512-1023)" in rows["kept-0"]["error"]
    assert rows["expiring-0"]["error"] is None and rows["expiring-0"]["records"] > 0
