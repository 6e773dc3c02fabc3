"""Appending the run ledger through Spark's own Delta writer, when the job's Spark session has Delta Lake.

On a cluster that runs delta-spark (its jars on the classpath, e.g. ``--packages io.delta:delta-spark_<Spark
major.minor>_2.13:<version>``), several jobs appending to one ledger are then serialised by Delta's commit
protocol, as any other Spark writer of that table. Everywhere else (no Spark session, a session without Delta,
a filesystem the session cannot write) the ledger is written by the embedded ``deltalake`` package
(:func:`jobs.engine.report.run_report.append_ledger`). Both write the same columns, so either reads what the other
wrote. """

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from segment_io.errors import StorageError

#: The delta-spark release segjobs is tested with (``make test-compat``'s delta venv, conf/compat/delta.txt) and the
#: ``delta`` extra pins (``pip install 'segjobs[delta]'``). Its PyPI successor 4.4.1 has no jars on Maven Central.
DELTA_SPARK_VERSION = "4.4.0"
#: The Spark line that release's jar is built for (delta-spark 4.4.0 admits pyspark 4.0.1 to 4.2.0).
DELTA_SPARK_FOR_SPARK = "4.2"
#: The Maven coordinate of Delta's jars, for ``spark-submit --packages`` or ``spark.jars.packages``: the one
#: coordinate ``segjobs table --help`` and the docs quote (tests/jobs/engine/runtime/test_delta_spark.py checks them).
DELTA_SPARK_PACKAGE = f"io.delta:delta-spark_{DELTA_SPARK_FOR_SPARK}_2.13:{DELTA_SPARK_VERSION}"
#: The session settings that turn Delta Lake on (its SQL extension and catalog), beside its jars.
DELTA_SPARK_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Delta's error when two writers create a table in the same empty directory at once: one commit wins, the other
#: must retry (and then appends to the table the winner created). Appends to an existing table never conflict.
_CONCURRENT_CREATE = ("DELTA_PROTOCOL_CHANGED", "ProtocolChangedException", "DELTA_METADATA_CHANGED")
_ATTEMPTS = 5


def delta_session(uri: str) -> Any | None:
    """The active Spark session when it has Delta Lake and can write ``uri``; None otherwise.

    Never starts Spark: a job that ran without it (retention, a compaction without Spark) keeps ``deltalake``.
    """
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:
        return None
    # The session of this process from any thread (getActiveSession alone is per thread); with a running
    # SparkContext, getOrCreate starts nothing.
    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return None
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "delta", spark._jsparkSession.sessionState().conf())
        if "://" in uri:
            scheme = uri.split("://", 1)[0]
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, spark._jsc.hadoopConfiguration())
    except Exception:  # noqa: BLE001 - Py4J wraps "no such data source / filesystem": then deltalake writes
        return None
    return spark


def spark_path(uri: str) -> str:
    """``uri`` as Spark reads it: a local path as an absolute ``file:`` URI (Spark would resolve a relative one
    against its own working directory), any other URI unchanged."""
    if "://" in uri:
        return uri
    return Path(uri).resolve().as_uri()


def append_with_spark(spark: Any, uri: str, table: Any) -> None:
    """Append ``table`` (a pyarrow Table of ledger rows) to the Delta table at ``uri`` with ``spark``'s Delta writer.

    Retries when another writer created the table at the same moment. Raises :class:`StorageError` naming ``uri``
    when the append fails, as a failed ``deltalake`` write does.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    # One row per partition of one run: a small list, built once per run, written as one file (split over the
    # session's default parallelism it made a file per slice, empty ones among them, on every run)
    frame = spark.createDataFrame(table.to_pylist(), schema=from_arrow_schema(table.schema)).coalesce(1)
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            frame.write.format("delta").mode("append").save(spark_path(uri))
            return
        except Exception as exc:  # noqa: BLE001 - Py4J and pyspark wrap Delta's exceptions; told apart by name
            if attempt < _ATTEMPTS and any(name in str(exc) for name in _CONCURRENT_CREATE):
                time.sleep(0.1 * attempt)
                continue
            raise StorageError(f"Spark's Delta writer could not append the ledger rows: {_java_message(exc)}",
                               uri=uri) from exc


def _java_message(exc: BaseException) -> str:
    """The line that says what went wrong: Py4J puts the Java exception (``: java.io.IOException: ...``) after a
    line of its own (``An error occurred while calling o102.save.``)."""
    lines = [line.strip().lstrip(": ").strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if ("Exception" in line or "Error" in line) and not line.startswith("An error occurred while calling"):
            return line
    return lines[0] if lines else type(exc).__name__
