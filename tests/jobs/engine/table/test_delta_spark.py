"""``segjobs table`` through delta-spark: its MERGE writer gives the table the deltalake writer gives, and the two
writers continue each other's work (the applied offsets are the same Delta ``txn`` actions for both).

Runs where delta-spark is installed (``make test-compat``'s delta venv, where SEGJOBS_REQUIRE_DELTA makes a
missing delta-spark an error); skipped elsewhere.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs import api
from segment_io.layout import partition_dir_name
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.delta import delta_required, delta_spark_installed
from tests.support.table_oracle import TOPIC, expected_rows, table_rows

if delta_required() and not delta_spark_installed():
    raise ImportError(f"delta-spark is not importable by {sys.executable}, but SEGJOBS_REQUIRE_DELTA is set")
pytestmark = pytest.mark.skipif(not delta_spark_installed(),
                                reason="delta-spark is not installed here: `make test-compat` runs this in its "
                                       "delta venv")


def _night(log_dir: Path, night: int) -> None:
    """The topic as it is after ``night`` nights: each night updates, deletes and aborts some keys."""
    for p in (0, 1):
        log = LogBuilder(topic=TOPIC, partition=p)
        for n in range(night + 1):
            log.batch([rec(f"k{i}", f"n{n}p{p}v{i}") for i in range(n, n + 4)] + [rec(None, "keyless")])
            log.batch([tombstone(f"k{n}")])
            log.txn_batch(9, 0, [rec("k2", "aborted")])
            log.abort(9, 0)
            log.roll()
        shutil.rmtree(log_dir / partition_dir_name(TOPIC, p), ignore_errors=True)
        write_log(log.table(), log_dir / partition_dir_name(TOPIC, p))


def _run(spark, log_dir: Path, table: Path, writer: str, **kw) -> api.TableResult:
    options = api.TableOptions(table=str(table), topic=TOPIC, writer=writer, progress=lambda line: None, **kw)
    return api.table(log_dir, options, spark=spark)


def test_both_writers_give_equal_tables_and_continue_each_other(spark, tmp_path):
    log_dir = tmp_path / "logs"
    writers = {"spark": tmp_path / "by_spark", "deltalake": tmp_path / "by_deltalake", "mixed": tmp_path / "mixed"}
    for night in range(3):
        _night(log_dir, night)
        expected = expected_rows(log_dir, [0, 1])
        counts = {}
        for name, table in writers.items():
            writer = name if name != "mixed" else ("spark" if night % 2 == 0 else "deltalake")
            result = _run(spark, log_dir, table, writer)
            assert result.exit_code == 0 and result.writer == writer, result.partitions
            assert table_rows(table) == expected, (name, night)
            counts[name] = [(p.records_read, p.inserts, p.updates, p.deletes, p.tombstones_without_row,
                             p.applied_after) for p in result.partitions]
        # the Spark path (read and dedupe in Spark, counts by a join) reports what the in-memory path reports
        assert counts["spark"] == counts["deltalake"] == counts["mixed"], counts
        spark_counts = [(p.inserts, p.updates, p.deletes) for p in _run(spark, log_dir, writers["spark"], "spark",
                                                                         dry_run=True).partitions]
        assert spark_counts == [(0, 0, 0)] * 2
    # the applied offsets are the same txn actions, whoever wrote them; Spark reads every table alike
    for table in writers.values():
        dt = DeltaTable(str(table))
        assert [dt.transaction_version(f"segjobs-table:{TOPIC}:{p}") for p in (0, 1)] == \
            [DeltaTable(str(writers["deltalake"])).transaction_version(f"segjobs-table:{TOPIC}:{p}") for p in (0, 1)]
        frame = spark.read.format("delta").load(str(table))
        assert frame.count() == len(expected_rows(log_dir, [0, 1]))
    # nothing new: no version from either writer
    for name in ("spark", "deltalake"):
        again = _run(spark, log_dir, writers[name], name)
        assert again.version_after == again.version_before
