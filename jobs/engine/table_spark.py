"""Writing a ``segjobs table`` through delta-spark's MERGE, when the job's Spark session has Delta Lake.

One MERGE per partition, each committing its partition's rows together with its applied offset: delta-spark
records one application transaction per commit (the ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` settings for DML, the ``txnAppId`` / ``txnVersion`` options for a write), so a partition is the
unit of exactly-once here, and a run killed between two partitions leaves the first committed and the second
as it was. The state is the same ``txn`` action ``deltalake`` writes (:mod:`jobs.engine.table`), so either
writer continues what the other began. The merge reads only the partition's files (the table is partitioned
by ``partition`` and the condition names it).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from jobs.engine.delta_spark import spark_path
from jobs.engine.report import Progress
from jobs.engine.table import PARTITION_BY, PartitionChanges, app_id, open_table
from segment_io.latest import TABLE_SCHEMA
from segment_io.storage.options import StorageOptions

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def write_with_spark(spark: Any, uri: str, dt: Any | None, topic: str, changes: Sequence[PartitionChanges],
                     options: StorageOptions | None, *, fault: Callable[[str], None] | None = None,
                     progress: Progress | None = None) -> int:
    """Apply each partition's changes with a delta-spark MERGE of its own; returns the table's new version."""
    from delta.tables import DeltaTable as SparkDeltaTable  # type: ignore[import-not-found]
    from pyspark.sql.pandas.types import from_arrow_schema

    path = spark_path(uri)
    schema = from_arrow_schema(TABLE_SCHEMA)
    exists = dt is not None
    for c in changes:
        if c.plan is None:
            continue
        rows = c.rows if c.rows is not None else TABLE_SCHEMA.empty_table()
        # The partition's changes (at most one row per key) come from the driver; they are what the merge needs.
        source = spark.createDataFrame(rows, schema=schema)
        txn_id, txn_version = app_id(topic, c.partition), str(c.plan.end)
        if fault:
            fault("merge:start")
        if not exists:
            source.filter("value IS NOT NULL").write.format("delta").mode("append") \
                .partitionBy(*PARTITION_BY).option("txnAppId", txn_id).option("txnVersion", txn_version).save(path)
            exists = True
        else:
            before = _version(spark, path)
            target = SparkDeltaTable.forPath(spark, path)
            values = {name: f"s.`{name}`" for name in TABLE_SCHEMA.names}
            merge = target.alias("t").merge(source.alias("s"),
                                            f"t.partition = {c.partition} AND t.partition = s.partition "
                                            f"AND t.key = s.key") \
                .whenMatchedDelete(condition="s.value IS NULL") \
                .whenMatchedUpdate(condition="s.value IS NOT NULL", set=values) \
                .whenNotMatchedInsert(condition="s.value IS NOT NULL", values=values)
            if c.plan.rebuild:
                merge = merge.whenNotMatchedBySourceDelete(condition=f"t.partition = {c.partition}")
            spark.conf.set(_TXN_APP, txn_id)
            spark.conf.set(_TXN_VERSION, txn_version)
            try:
                merge.execute()
            finally:
                spark.conf.unset(_TXN_APP)
                spark.conf.unset(_TXN_VERSION)
            if _version(spark, path) == before:
                # nothing changed: the applied offset moves in a commit that adds no file
                source.limit(0).write.format("delta").mode("append").option("txnAppId", txn_id) \
                    .option("txnVersion", txn_version).save(path)
        if progress is not None:
            progress(f"{c.name}: merged with delta-spark, applied up to offset {c.plan.end}",
                     event="table.partition.merged", partition=c.name)
    if fault:
        fault("merge:committed")
    final = open_table(uri, options)
    return int(final.version()) if final is not None else -1


def _version(spark: Any, path: str) -> int:
    from delta.tables import DeltaTable as SparkDeltaTable

    return int(SparkDeltaTable.forPath(spark, path).history(1).collect()[0]["version"])
