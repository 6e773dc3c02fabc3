"""Building the Spark session the jobs and the data source run in: the one place for Spark settings."""

from __future__ import annotations

import os
import sys
from typing import Mapping

#: Settings every segjobs session needs. Arrow is the transport for Python data sources and
#: mapInArrow; filter pushdown lets the data source skip segments by offset and time.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}


def build_session(app_name: str = "segjobs", master: str | None = None,
                  extra_conf: Mapping[str, str] | None = None):
    """Get or create a SparkSession with segjobs' settings. ``master`` None keeps what spark-submit set
    (or ``local[*]`` when run directly)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    effective_master = master or ("local[*]" if not os.environ.get("SPARK_ENV_LOADED") else None)
    if effective_master and effective_master.startswith("local"):
        # A local run needs no network beyond loopback; without this Spark binds to the first interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master("local[*]")
    for key, value in {**DEFAULT_CONF, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def stop_active_session() -> None:
    """Stop the Spark session this process started, if any: a clean JVM shutdown instead of executors
    killed mid-heartbeat (what spark-submit and the console script do when a command returns)."""
    if "pyspark" not in __import__("sys").modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
