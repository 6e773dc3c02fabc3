"""The compaction job as users submit it: ``spark-submit jobs/compact.py`` on a multi-executor cluster.

``local-cluster[2,1,1024]`` starts two real executor JVMs with their own Python workers, so this proves the
job's task code and its arguments (storage, plans, transaction state) ship to executors and back. It runs in
its own process: the rest of the suite shares one local session, which a second master cannot join.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from segment_io.generate import GenerateSpec, generate_log_dir
from tests.support.replay import comparable, latest_records

pytestmark = pytest.mark.scenario  # minutes of whole-process runs: `make test-scenarios` runs it, not `make test`

REPO = Path(__file__).resolve().parents[2]
NOW = "2023-11-30T00:00:00Z"


@pytest.mark.slow
def test_spark_submit_on_a_local_cluster_compacts_like_a_consumer_would_expect(tmp_path: Path) -> None:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    if not spark_submit.exists():
        pytest.fail(f"spark-submit not found beside {sys.executable}: pyspark's scripts are missing")
    log_dir = tmp_path / "logs"
    generate_log_dir(GenerateSpec(topics=("orders", "users"), partitions=2, records=3_000, segment_bytes=64 << 10,
                                  superseded_share=0.6, tombstone_share=0.05, transactional_share=0.3,
                                  aborted_share=0.5, seed=7), log_dir)
    before = {p.name: comparable(latest_records(p)) for p in log_dir.iterdir() if p.is_dir()}
    source_copy = tmp_path / "source"
    shutil.copytree(log_dir, source_copy)
    report = tmp_path / "report.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [str(spark_submit), "--master", "local-cluster[2,1,1024]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.executor.memory=512m", str(REPO / "jobs" / "compact.py"),
         "--log-dir", str(log_dir), "--set", "*:cleanup.policy=compact", "--now", NOW, "--report", str(report),
         "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    doc = json.loads(report.read_text())
    entries = {f"{e['topic']}-{e['partition']}": e for e in doc["partitions"]}
    assert set(entries) == set(before)
    assert all(e["action"] == "compacted" for e in entries.values()), entries
    assert sum(e["records_removed"] for e in entries.values()) > 0
    # What a read_committed consumer replaying each partition ends up with is unchanged (kafka-python oracle).
    after = {p.name: comparable(latest_records(p)) for p in log_dir.iterdir() if p.is_dir()}
    assert after == before
    # The summary table went to stdout even with --quiet.
    assert "compacted" in proc.stdout

    # The external-sort strategy on the same cluster (its key pass, the sort's shuffle and the group rewrites run
    # in the executors' own JVMs and Python workers) writes the very bytes the memory strategy wrote.
    sorted_dir = tmp_path / "sorted"
    shutil.copytree(source_copy, sorted_dir, copy_function=shutil.copy2)
    proc = subprocess.run(
        [str(spark_submit), "--master", "local-cluster[2,1,1024]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.executor.memory=512m", str(REPO / "jobs" / "compact.py"),
         "--log-dir", str(sorted_dir), "--set", "*:cleanup.policy=compact", "--now", NOW, "--report",
         str(tmp_path / "sorted.json"), "--quiet", "--strategy", "external-sort"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    sorted_entries = json.loads((tmp_path / "sorted.json").read_text())["partitions"]
    assert {e["strategy"] for e in sorted_entries} == {"external-sort"}
    assert {e["strategy"] for e in entries.values()} == {"memory"}

    def tree(d: Path) -> dict[str, bytes]:
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
                if p.is_file() and p.name != ".lock"}

    assert tree(sorted_dir) == tree(log_dir)
