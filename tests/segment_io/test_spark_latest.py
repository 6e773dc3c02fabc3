"""The ``kafka-segments`` source's ``read`` ``latest`` mode returns the rows ``segjobs table`` keeps: both go
through :mod:`segment_io.latest`, and both are checked against the replay of tests/support/table_oracle.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from jobs import api
from segment_io.spark import DataSourceOptionError, parse_options, register
from tests.support.hypothesis_budget import examples
from tests.support.table_oracle import LOGS, TOPIC, expected_rows, table_rows, write_topic


def latest_frame_rows(spark, log_dir: Path) -> dict[tuple[int, bytes], tuple]:
    frame = spark.read.format("kafka-segments").option("read", "latest").load(str(log_dir))
    out = {}
    for r in frame.collect():
        assert r["topic"] == TOPIC
        out[(r["partition"], bytes(r["key"]))] = (bytes(r["value"]), r["offset"], r["timestamp"],
                                                  tuple((h["key"], None if h["value"] is None else bytes(h["value"]))
                                                        for h in r["headers"]))
    return out


# One Spark read and one table build per example: a fifth of the profile's examples.
@settings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
@given(logs=LOGS)
def test_read_latest_returns_the_table_rows(spark, tmp_path_factory, logs):
    register(spark)
    base = tmp_path_factory.mktemp("latest")
    write_topic(base / "logs", logs)
    result = api.table(base / "logs", api.TableOptions(table=str(base / "t"), topic=TOPIC, writer="deltalake",
                                                       progress=lambda line: None),
                       seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0
    rows = latest_frame_rows(spark, base / "logs")
    assert rows == table_rows(base / "t") == expected_rows(base / "logs", sorted(logs))


def test_read_latest_refuses_record_options():
    with pytest.raises(DataSourceOptionError, match="startingOffset"):
        parse_options({"path": "/x", "read": "latest", "startingOffset": "3"})
    with pytest.raises(DataSourceOptionError, match="'read'"):
        parse_options({"path": "/x", "read": "newest"})


def test_read_latest_starts_at_the_log_start_offset(spark, tmp_path):
    """Records below the log-start-offset-checkpoint's entry are deleted for a consumer, segment or not."""
    from segment_io.checkpoint import write_offset_checkpoint
    from segment_io.layout import LOG_START_OFFSET_CHECKPOINT, partition_dir_name
    from segment_io.storage import open_storage
    from tests.support.builders import LogBuilder, rec, write_log

    register(spark)
    log_dir = tmp_path / "logs"
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    log.batch([rec("c", "3"), rec("a", "11")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))
    write_offset_checkpoint(open_storage(str(log_dir)), str(log_dir / LOG_START_OFFSET_CHECKPOINT), {(TOPIC, 0): 2})
    rows = latest_frame_rows(spark, log_dir)
    assert {k[1]: v[:2] for k, v in rows.items()} == {b"a": (b"11", 3), b"c": (b"3", 2)}
    # the partition dir read alone finds the checkpoint of its log dir too
    rows = latest_frame_rows(spark, log_dir / partition_dir_name(TOPIC, 0))
    assert {k for _, k in rows} == {b"a", b"c"}
