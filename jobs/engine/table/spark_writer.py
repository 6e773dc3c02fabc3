"""Writing a ``segjobs table`` through delta-spark's MERGE, when the job's Spark session has Delta Lake.

One MERGE per partition, each committing its partition's rows together with its applied offset: delta-spark
records one application transaction per commit (the ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` settings for DML, the ``txnAppId`` / ``txnVersion`` options for a write), so a partition is the
unit of exactly-once here, and a run killed between two partitions leaves the first committed and the second
as it was. The state is the same ``txn`` action ``deltalake`` writes (:mod:`jobs.engine.table.driver`), so either
writer continues what the other began. The merge reads only the partition's files (the table is partitioned
by ``partition`` and the condition names it).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from jobs.engine.report.run_report import Progress
from jobs.engine.runtime.delta_spark import spark_path
from jobs.engine.table.changes import Counts, PartitionChanges
from jobs.engine.table.state import PARTITION_BY, TableConflictError, app_id, open_table
from segment_io.decode import read_segment
from segment_io.latest import SOURCE_COLUMNS, TABLE_SCHEMA, LatestRows, aborted_rows, eligible_rows
from segment_io.storage.base import Storage
from segment_io.storage.options import StorageOptions
from segment_io.transactions import TxnState

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def spark_changes(spark: Any, storage: Storage, topic: str, changes: Sequence[PartitionChanges],
                  max_batch_bytes: int | None) -> tuple[Any, dict[int, int]]:
    """The latest row per key (tombstones included) of every partition's planned range, as a DataFrame that Spark
    computed: one task per segment decodes it and keeps its eligible records (:mod:`segment_io.latest`, the
    partition's aborted transactions shipped with the task), then an aggregation by ``(partition, key)`` keeps the
    highest offset. Spark's shuffle sorts and spills, so no memory bound on keys applies and nothing goes through
    the driver. Persisted (memory, then disk) until the caller unpersists it. Also returns the records read per
    partition."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    plans = {c.partition: (c.plan.start, c.plan.end, c.aborted) for c in changes if c.plan is not None}
    items = [(c.partition, uri, tail) for c in changes if c.plan is not None for uri, tail in c.segments]
    counters = {p: spark.sparkContext.accumulator(0) for p in plans}
    schema = from_arrow_schema(TABLE_SCHEMA)

    def read(batches: Any) -> Any:
        for batch in batches:
            for partition, uri, tail in zip(*(batch.column(i).to_pylist() for i in range(3))):
                start, end, aborted = plans[partition]
                records = read_segment(uri, columns=SOURCE_COLUMNS, storage=storage, topic=topic,
                                       partition=partition, allow_truncated_tail=tail, max_batch_bytes=max_batch_bytes)
                counters[partition].add(records.num_rows)
                # a segment's own latest rows first: the shuffle carries at most one row per key and segment
                latest = LatestRows()
                latest.add(records, eligible_rows(records, aborted=_aborted(records, aborted), start=start, end=end))
                yield from latest.rows().to_batches()

    segments = spark.createDataFrame(items, "partition int, uri string, tail boolean") \
        .repartition(max(1, len(items)))
    rows = segments.mapInArrow(read, schema)
    cols = [c for c in TABLE_SCHEMA.names if c not in ("partition", "key")]
    latest = rows.groupBy("partition", "key").agg(F.max_by(F.struct(*cols), "offset").alias("r")) \
        .select("partition", "key", *[F.col(f"r.{c}").alias(c) for c in cols]).select(*TABLE_SCHEMA.names)
    latest = latest.persist(StorageLevel.MEMORY_AND_DISK)
    latest.count()  # computed once here; the counts and every partition's MERGE read the persisted rows
    return latest, {p: int(a.value) for p, a in counters.items()}


def _aborted(records: Any, aborted: Any) -> Any:
    if aborted is None:
        return None
    empty = TxnState.empty()
    return aborted_rows(records, TxnState(aborted, empty.completed, empty.open_producer_ids,
                                          empty.open_first_offsets, empty.active))


def spark_count_changes(spark: Any, uri: str, latest: Any, changes: Sequence[PartitionChanges]) -> dict[int, Any]:
    """:func:`jobs.engine.table.driver.count_changes` in Spark: the latest rows joined with the table's keys (the small
    per-partition totals are all that reach the driver)."""
    from pyspark.sql import functions as F


    parts = [c.partition for c in changes]
    rebuilt = [c.partition for c in changes if c.plan is not None and c.plan.rebuild]
    out = {p: Counts() for p in parts}
    if open_table(uri) is None:
        for row in latest.groupBy("partition").agg(
                F.sum(F.col("value").isNotNull().cast("long")).alias("live"),
                F.sum(F.col("value").isNull().cast("long")).alias("dead")).collect():
            out[row["partition"]] = Counts(inserts=int(row["live"] or 0), tombstones_without_row=int(row["dead"] or 0))
        return out
    target = spark.read.format("delta").load(spark_path(uri)).where(F.col("partition").isin(parts)) \
        .select("partition", "key").withColumn("_present", F.lit(True))
    joined = latest.select("partition", "key", "value").join(target, ["partition", "key"], "left")
    live, present = F.col("value").isNotNull(), F.col("_present").isNotNull()
    totals = joined.groupBy("partition").agg(
        F.sum((live & ~present).cast("long")).alias("inserts"), F.sum((live & present).cast("long")).alias("updates"),
        F.sum((~live & present).cast("long")).alias("deletes"),
        F.sum((~live & ~present).cast("long")).alias("absent")).collect()
    gone: dict[int, int] = {}
    if rebuilt:
        for row in target.where(F.col("partition").isin(rebuilt)).join(latest.select("partition", "key"),
                                                                       ["partition", "key"], "left_anti") \
                .groupBy("partition").count().collect():
            gone[row["partition"]] = int(row["count"])
    for row in totals:
        p = row["partition"]
        out[p] = Counts(inserts=int(row["inserts"] or 0), updates=int(row["updates"] or 0),
                        deletes=int(row["deletes"] or 0) + gone.get(p, 0),
                        tombstones_without_row=int(row["absent"] or 0))
    for p, n in gone.items():
        if p not in {row["partition"] for row in totals}:
            out[p] = Counts(deletes=n)
    return out


def write_with_spark(spark: Any, uri: str, dt: Any | None, topic: str, changes: Sequence[PartitionChanges],
                     options: StorageOptions | None, latest: Any, *, fault: Callable[[str], None] | None = None,
                     progress: Progress | None = None, written: set[int] | None = None) -> int:
    """Apply each partition's changes (``latest``: :func:`spark_changes`) with a delta-spark MERGE of its own;
    returns the table's new version. ``written`` receives each partition once its commit is in the table.

    Raises :class:`jobs.engine.table.state.TableConflictError` when another writer applied a partition after this run
    read the table: Delta would silently skip a write whose ``txnVersion`` the table already holds, and the run
    would report rows it did not write."""
    from delta.tables import DeltaTable as SparkDeltaTable  # type: ignore[import-not-found]

    path = spark_path(uri)
    exists = dt is not None
    for c in changes:
        if c.plan is None:
            continue
        _check_not_overtaken(uri, options, dt, topic, c)
        source = latest.where(f"partition = {c.partition}")
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
        if written is not None:
            written.add(c.partition)
        if progress is not None:
            progress(f"{c.name}: merged with delta-spark, applied up to offset {c.plan.end}",
                     event="table.partition.merged", partition=c.name)
    if fault:
        fault("merge:committed")
    final = open_table(uri, options)
    return int(final.version()) if final is not None else -1


def _check_not_overtaken(uri: str, options: StorageOptions | None, dt: Any | None, topic: str,
                         change: PartitionChanges) -> None:
    """Raise :class:`TableConflictError` when the table's applied offset of ``change``'s partition is no longer
    the one this run planned from (another run applied it since)."""

    assert change.plan is not None
    now = open_table(uri, options)
    current = now.transaction_version(app_id(topic, change.partition)) if now is not None else None
    if current != change.plan.applied:
        raise TableConflictError(uri, None if dt is None else int(dt.version()),
                                 f"{change.name}'s applied offset is now {current}, this run planned from "
                                 f"{change.plan.applied}")


def _version(spark: Any, path: str) -> int:
    from delta.tables import DeltaTable as SparkDeltaTable

    return int(SparkDeltaTable.forPath(spark, path).history(1).collect()[0]["version"])
