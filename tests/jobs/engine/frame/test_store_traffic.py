"""A run's object-store requests in its report and its last lines (``store_traffic``, ``store.traffic``), checked
against the request log of the endpoint that served them: moto_server's own, one line per request."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.compaction_faults import CONFIG, NOW, TOPIC, build_partition
from tests.support.s3 import MotoServer
from tests.support.s3_objects import PREFIX, put_objects

PARTITIONS = 3


def _methods(log: Path, first_line: int, bucket: str) -> Counter[str]:
    """The HTTP methods of the requests on ``bucket`` the server logged from line ``first_line`` on."""
    lines = log.read_text().splitlines()[first_line:]
    return Counter(m.group(1) for line in lines if (m := re.search(rf'"(\w+) /{bucket}[/?" ]', line)))


@pytest.mark.s3
def test_every_request_of_a_compaction_on_s3_is_counted_once(spark, s3_env, tmp_path: Path, capsys) -> None:
    logs = tmp_path / "logs"
    for i in range(PARTITIONS):
        build_partition(logs / f"{TOPIC}-{i}")
    segment_bytes = sum(p.stat().st_size for p in logs.rglob("*.log"))
    (tmp_path / "t.toml").write_text(CONFIG)
    request_log = tmp_path / "requests.log"
    server = MotoServer.start(log_path=str(request_log))  # its own endpoint: no other test's requests in its log
    try:
        bucket = server.create_bucket("traffic")
        put_objects(server, bucket, logs)
        before = len(request_log.read_text().splitlines())
        report = tmp_path / "r.json"
        assert main(["compact", "--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", server.endpoint_url,
                     "--now", NOW, "--config", str(tmp_path / "t.toml"), "--report", str(report)]) == 0
        served = _methods(request_log, before, bucket)
    finally:
        server.stop()
    doc = json.loads(report.read_text())
    traffic = doc["store_traffic"]
    assert [p["action"] for p in doc["partitions"]] == ["compacted"] * PARTITIONS
    # the report is written after the count: the endpoint served it one more PUT (a local file here: none)
    assert traffic["requests"] == sum(served.values()), (traffic, served)
    assert traffic["head"] == served["HEAD"]
    assert traffic["put"] + traffic["copy"] == served["PUT"]  # a server-side copy is a PUT with a source
    assert traffic["delete"] == served["DELETE"]
    # GETs are objects, ranges, listing pages and the pending-upload listing (multipart starts are POSTs)
    assert traffic["get"] + traffic["list"] + traffic["other"] == served["GET"] + served["POST"]
    assert traffic["segment_bytes"] == segment_bytes
    assert traffic["reads_of_segments"] == round(traffic["get_bytes"] / segment_bytes, 3)
    # the parts add up: the driver's, and the cleaning tasks' (Spark tasks, counted in their Python workers)
    parts = [traffic["driver"], *traffic["tasks"].values()]
    assert all(sum(p[k] for p in parts) == traffic[k] for k in traffic["driver"])
    (cleaning,) = [t for stage, t in traffic["tasks"].items() if f"compact {PARTITIONS} partition(s)" in stage]
    assert cleaning["get"] > 0 and cleaning["put"] > 0 and cleaning["get_bytes"] <= segment_bytes
    err = capsys.readouterr().err
    assert (f"object store: {traffic['requests']:,} request(s): {traffic['get']:,} GET(s) fetched "
            f"{traffic['get_bytes'] / 1000:.1f} KB ({traffic['reads_of_segments']:.2f}x the "
            f"{segment_bytes / 1000:.1f} KB of segments in scope)") in err, err


def test_a_run_on_local_disk_reports_no_store_traffic(tmp_path: Path, capsys) -> None:
    logs = tmp_path / "logs"
    build_partition(logs / f"{TOPIC}-0")
    (tmp_path / "t.toml").write_text(CONFIG)
    report = tmp_path / "r.json"
    assert main(["compact", "--log-dir", str(logs), "--now", NOW, "--config", str(tmp_path / "t.toml"),
                 "--report", str(report)]) == 0
    assert json.loads(report.read_text())["store_traffic"] is None
    assert "object store:" not in capsys.readouterr().err
