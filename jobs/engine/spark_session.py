"""Building the Spark session the jobs and the data source run in: the one place for Spark settings, and for
keeping Spark's own output off the job's stdout."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any, Mapping, TextIO

#: Settings every segjobs session needs. Arrow is the transport for Python data sources and
#: mapInArrow; filter pushdown lets the data source skip segments by offset and time where Spark keeps pushed
#: filters per scan (segment_io.spark.source.PUSHDOWN_IS_PER_SCAN).
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}

#: Settings for a JVM this process launches itself (a local run, the tests; never a spark-submit JVM, which is
#: already running): the driver's JVM only schedules tasks and moves small pickled results, so its start-up
#: dominates what it costs. C1-only JIT (``TieredStopAtLevel=1``) halves the CPU the JVM burns starting Spark
#: (measured: 11.5 -> 5.9 CPU seconds on 2 cores) at no cost visible in segjobs' runs. Override any of them
#: with ``extra_conf``; $SEGJOBS_SPARK_JIT_OPTS replaces the JIT options (empty: the JVM's defaults).
FAST_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
JIT_OPTS_ENV = "SEGJOBS_SPARK_JIT_OPTS"
#: Local runs only: no web UI (a Jetty server, and port probing when several sessions run at once). Turn it
#: on with ``extra_conf={"spark.ui.enabled": "true"}`` or ``--verbose``.
LOCAL_CONF: dict[str, str] = {"spark.ui.enabled": "false"}

#: The log4j2 configuration of segjobs' JVMs (warnings and errors only, on stderr; its levels follow
#: SEGJOBS_SPARK_LOG when set). spark-submit users pass it with --properties-file conf/spark-defaults.conf.
LOG4J2_CONF = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"
#: Environment variable naming the level of Spark's own log lines (INFO, DEBUG, WARN, ERROR, ...).
LOG_LEVEL_ENV = "SEGJOBS_SPARK_LOG"


def spark_log_level(verbose: bool = False) -> str | None:
    """The level asked for Spark's own log lines: INFO with ``--verbose``, else $SEGJOBS_SPARK_LOG, else None
    (the default: warnings and errors only)."""
    if verbose:
        return "INFO"
    return os.environ.get(LOG_LEVEL_ENV, "").strip().upper() or None


def build_session(app_name: str = "segjobs", master: str | None = None,
                  extra_conf: Mapping[str, str] | None = None, *, verbose: bool = False):
    """Get or create a SparkSession with segjobs' settings. ``master`` None keeps what spark-submit set
    (or ``local[*]`` when run directly). Spark's start-up lines are hidden unless ``verbose`` (or
    $SEGJOBS_SPARK_LOG) asks for them: a JVM this call launches reads :data:`LOG4J2_CONF` from its first line."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    effective_master = master or ("local[*]" if not os.environ.get("SPARK_ENV_LOADED") else None)
    if effective_master and effective_master.startswith("local"):
        # A local run needs no network beyond loopback; without this Spark binds to the first interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    level = spark_log_level(verbose)
    if level:
        # The JVM inherits the environment: LOG4J2_CONF's levels read this variable.
        os.environ[LOG_LEVEL_ENV] = level
    local = bool(effective_master and effective_master.startswith("local"))
    conf = {**DEFAULT_CONF, **(LOCAL_CONF if local and not verbose else {}), **(extra_conf or {})}
    jit = os.environ.get(JIT_OPTS_ENV, FAST_START_JAVA_OPTIONS).strip()
    java_opts = " ".join(o for o in (f"-Dlog4j2.configurationFile=file:{LOG4J2_CONF}" if LOG4J2_CONF.is_file()
                                     else "", jit) if o)
    if java_opts:
        # Only a JVM launched by this call sees them; under spark-submit the JVM is already running and
        # --properties-file conf/spark-defaults.conf passes the log4j2 file.
        conf.setdefault("spark.driver.extraJavaOptions", java_opts)
    if jit:
        # spark-submit first runs a short launcher JVM that builds the real command line: it starts faster too
        os.environ.setdefault("SPARK_LAUNCHER_OPTS", jit)
    from pyspark import SparkContext

    builder = SparkSession.builder
    if SparkContext._active_spark_context is not None:
        # A running session takes runtime SQL settings only (and warns on stderr about anything else,
        # its name and master included).
        conf = {k: v for k, v in conf.items() if k.startswith("spark.sql.")}
    else:
        builder = builder.appName(app_name)
        if master:
            builder = builder.master(master)
        elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and not os.environ.get("SPARK_ENV_LOADED"):
            builder = builder.master("local[*]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(level or "WARN")
    return session


class _JvmStderr(io.TextIOBase):
    """A text stream that writes to the JVM's ``System.err``, line by line (``fallback`` when the JVM is gone)."""

    def __init__(self, jvm_err: Any, fallback: TextIO) -> None:
        super().__init__()
        self._err = jvm_err
        self._fallback = fallback
        self._buffer = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._buffer += text
        if "\n" in text:
            self.flush()
        return len(text)

    def flush(self) -> None:
        text, self._buffer = self._buffer, ""
        if not text:
            return
        try:
            self._err.print(text)
            self._err.flush()
        except Exception:  # noqa: BLE001 - the gateway closes at exit; the line must not be lost
            self._fallback.write(text)
            self._fallback.flush()

    def fileno(self) -> int:
        return self._fallback.fileno()

    def isatty(self) -> bool:
        return False


def separate_stderr_under_spark_submit() -> bool:
    """Under ``spark-submit jobs/<command>.py``, send Python's stderr (progress lines, errors, warnings) to the
    JVM's stderr; returns True when it did.

    spark-submit runs the Python script as a child whose stderr it merges into its own stdout, so without
    this the progress lines would be mixed into the summary on stdout. The JVM's own stderr is still the
    caller's stderr: writing there through the Py4J gateway (already running, as spark-submit started it)
    restores the console script's separation. Output written below Python (C libraries) still goes the
    merged way. Outside spark-submit nothing changes.
    """
    if not os.environ.get("PYSPARK_GATEWAY_PORT") or isinstance(sys.stderr, _JvmStderr):
        return False
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's gateway; launches nothing
    jvm = SparkContext._jvm
    if jvm is None:
        return False
    sys.stderr = _JvmStderr(jvm.System.err, sys.__stderr__ or sys.stderr)
    return True


def stop_active_session() -> None:
    """Stop the Spark session this process started, if any: a clean JVM shutdown instead of executors
    killed mid-heartbeat (what spark-submit and the console script do when a command returns)."""
    if "pyspark" not in __import__("sys").modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
