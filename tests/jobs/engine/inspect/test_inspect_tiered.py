"""``segjobs inspect --remote``: tiered partitions inspected as one log, on what a real Kafka 4.1.1 broker with
LocalTieredStorage wrote (tests/data/kafka-tiered/SOURCES.md: produced.json counts the records produced)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.builders import LogBuilder, rec, write_log

FIXTURE = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered" / "kafka-4.1.1"
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
def test_a_missing_remote_object_or_a_trimmed_remote_segment_makes_its_partition_unreadable(spark, capsys,
                                                                                          tmp_path: Path) -> None:
    node = tmp_path / "node"
    shutil.copytree(FIXTURE, node)
    (next((node / "remote" / "kafka-tiered-storage").glob("kept-0-*")) / f"{KEPT_40}.log").unlink()
    log = LogBuilder("expiring", 0, start_offset=110)
    log.batch([rec("k", f"local-{n}") for n in range(110, 120)])
    write_log(log.table(), node / "logs" / "expiring-0")
    rc, rows = _inspect(capsys, node / "logs", "--remote", str(node / "remote"))
    assert rc == 1
    assert "remote segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59): its segment object" in rows["kept-0"]["error"]
    assert "is absent" in rows["kept-0"]["error"]
    assert ("remote segment VEXvy7ETQFqPxreT1O8Xcg (offsets 100-119, keeping 100-109): the local log starts inside "
            "it") in rows["expiring-0"]["error"]
    assert rows["__remote_log_metadata-0"]["records"] == 41  # the other partitions are inspected
