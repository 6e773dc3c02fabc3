"""How many times a compaction on S3 fetches each object: the cleaning task fetches each segment it cleans once,
its dirty segments included, which its offset map's pass reads first (``segment_io.storage.spool``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs.commands.cli import main
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.storage import spool
from tests.support.s3_objects import PREFIX, put_objects

NOW = "2024-01-01T00:00:00Z"
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n"segment.bytes" = 1048576\n'


@pytest.mark.s3
def test_the_cleaning_task_fetches_each_segment_it_cleans_once(spark, s3_bucket_env, tmp_path: Path) -> None:
    endpoint, bucket = s3_bucket_env
    logs = tmp_path / "logs"
    # about 8 MB of dirty segments: more than the task decodes once and keeps (cleaning.SINGLE_DECODE_BYTES)
    generate_log_dir(GenerateSpec(topics=("orders",), partitions=1, records=8_000, value_bytes=1024,
                                  superseded_share=0.5, segment_bytes=1 << 20, transactional_share=0.05,
                                  aborted_share=0.2),
                     str(logs))
    partition = logs / "orders-0"
    logs_by_base = sorted(partition.glob("*.log"))
    closed = logs_by_base[:-1]  # the active segment is never cleaned
    assert sum(p.stat().st_size for p in closed) > 6 << 20
    (tmp_path / "t.toml").write_text(CONFIG)
    put_objects(endpoint, bucket, logs)
    report = tmp_path / "r.json"
    assert main(["compact", "--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", endpoint.endpoint_url,
                 "--now", NOW, "--config", str(tmp_path / "t.toml"), "--report", str(report), "--quiet"]) == 0
    doc = json.loads(report.read_text())
    (entry,) = doc["partitions"]
    assert entry["action"] == "compacted" and entry["cleaned_range"][0] == 0
    (cleaning,) = [t for stage, t in doc["store_traffic"]["tasks"].items() if "compact 1 partition(s)" in stage]
    # each closed segment's .log once, and the index files its clean checks (.index, .timeindex, .txnindex)
    indexes = [p.with_suffix(s) for p in closed for s in (".index", ".timeindex", ".txnindex")]
    expected = sum(p.stat().st_size for p in closed) + sum(p.stat().st_size for p in indexes if p.exists())
    assert cleaning["get_bytes"] == expected, (cleaning, expected)
    # the task's spool is gone with it (looked for where a Spark task of the session puts its spool)
    names = spark.sparkContext.parallelize([0], 1).map(_spool_root_names).collect()[0]
    assert not [name for name in names if name.startswith(spool.PREFIX)], names


def _spool_root_names(_: object) -> list[str]:
    """In a Spark task: what the directory the task's spool goes in holds."""
    return os.listdir(spool.spool_root())
