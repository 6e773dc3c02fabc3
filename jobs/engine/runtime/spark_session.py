"""Building the Spark session the jobs and the data source run in: the one place for Spark settings, and for
keeping Spark's own output off the job's stdout."""

from __future__ import annotations

import io
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, TextIO

from jobs.engine.runtime.class_archive import java_options
from segment_io.errors import JavaNotFoundError

#: Settings every segjobs session needs. Arrow is the transport for Python data sources and
#: mapInArrow; filter pushdown lets the data source skip segments by offset and time where Spark keeps pushed
#: filters per scan (segment_io.spark.source.PUSHDOWN_IS_PER_SCAN).
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # Python workers forked from a daemon that has imported the hot modules (see jobs.engine.runtime.worker_daemon)
    "spark.python.daemon.module": "jobs.engine.runtime.worker_daemon",
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
LOG4J2_CONF = Path(__file__).resolve().parents[3] / "conf" / "log4j2.properties"
#: Environment variable naming the level of Spark's own log lines (INFO, DEBUG, WARN, ERROR, ...).
LOG_LEVEL_ENV = "SEGJOBS_SPARK_LOG"


def spark_log_level(verbose: bool = False) -> str | None:
    """The level asked for Spark's own log lines: INFO with ``--verbose``, else $SEGJOBS_SPARK_LOG, else None
    (the default: warnings and errors only)."""
    if verbose:
        return "INFO"
    return os.environ.get(LOG_LEVEL_ENV, "").strip().upper() or None


#: How to get a Java Spark can run on: the end of every "no Java" error.
JAVA_FIX = "install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"


def java_problem() -> str | None:
    """Why Spark could not launch its JVM from this process, or None when it can (or needs not: a session or
    spark-submit's JVM is already running). Spark's launcher runs ``$JAVA_HOME/bin/java`` when JAVA_HOME is
    set, else ``java`` from PATH; this looks for the same file, without running it."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None  # under spark-submit: its JVM is running
    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            return None
    java_home = os.environ.get("JAVA_HOME", "").strip()
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return None
        return f"Spark needs Java, and JAVA_HOME={java_home} has no executable bin/java"
    if shutil.which("java") is None:
        return "Spark needs Java, and there is no `java` on PATH (and JAVA_HOME is not set)"
    return None


def check_java() -> None:
    """Raise :class:`~segment_io.errors.JavaNotFoundError` (exit code 2) when Spark could not launch its JVM
    (see :func:`java_problem`): the jobs call it before any work, so a machine without Java costs no lock,
    no recovery and no 30-line gateway traceback."""
    problem = java_problem()
    if problem:
        raise JavaNotFoundError(f"{problem}: {JAVA_FIX}; nothing was done")


def _gateway_exited(exc: BaseException) -> bool:
    """Whether ``exc`` is PySpark's "the Java gateway process exited" (the JVM did not start)."""
    condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        name = condition() if condition else None
    except Exception:  # noqa: BLE001 - an older PySpark exception without the accessor
        name = None
    return name == "JAVA_GATEWAY_EXITED" or "JAVA_GATEWAY_EXITED" in str(exc)


def _session_options(app_name: str, master: str | None, extra_conf: Mapping[str, str] | None, *,
                     verbose: bool) -> tuple[dict[str, str], str | None]:
    """The settings :func:`build_session` gives the session builder (``spark.app.name`` and ``spark.master``
    included when it sets them) and the level of Spark's own log lines; sets the environment the JVM inherits."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    effective_master = master or ("local[*]" if not _master_set_elsewhere() else None)
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
                                     else "", jit, _class_archive_options(conf)) if o)
    if java_opts:
        # Only a JVM launched by this call sees them; under spark-submit the JVM is already running and
        # --properties-file conf/spark-defaults.conf passes the log4j2 file.
        conf.setdefault("spark.driver.extraJavaOptions", java_opts)
    if jit:
        # spark-submit first runs a short launcher JVM that builds the real command line: it starts faster too
        os.environ.setdefault("SPARK_LAUNCHER_OPTS", jit)
    if "pyspark" in sys.modules and sys.modules["pyspark"].SparkContext._active_spark_context is not None:
        # A running session takes runtime SQL settings only (and warns on stderr about anything else,
        # its name and master included).
        return {k: v for k, v in conf.items() if k.startswith("spark.sql.")}, level
    options = {"spark.app.name": app_name}
    if master:
        options["spark.master"] = master
    elif not _master_set_elsewhere():
        options["spark.master"] = "local[*]"
    return {**options, **conf}, level


def _class_archive_options(conf: Mapping[str, str]) -> str:
    """The driver JVM's class-archive options (:mod:`jobs.engine.runtime.class_archive`), for a JVM this process will
    launch with segjobs' own Java options."""
    if "spark.driver.extraJavaOptions" in conf or os.environ.get("PYSPARK_GATEWAY_PORT") or (
            "pyspark" in sys.modules and sys.modules["pyspark"].SparkContext._active_spark_context is not None):
        return ""  # the caller's own options, or a JVM that is already running
    return java_options()


def _get_or_create(options: Mapping[str, str], level: str | None) -> Any:
    """``SparkSession.builder`` with ``options``, got or created (a JVM that exits at once is a
    :class:`~segment_io.errors.JavaNotFoundError`), its log level set."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    check_java()
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        if not _gateway_exited(exc):
            raise
        raise _jvm_exited() from None
    session.sparkContext.setLogLevel(level or "WARN")
    return session


def _jvm_exited() -> JavaNotFoundError:
    """Java was found but its JVM exited at once (a broken or too old Java): the same fix as no Java, without
    PySpark's traceback."""
    java = (f"{os.environ['JAVA_HOME'].strip()}/bin/java" if os.environ.get("JAVA_HOME", "").strip()
            else shutil.which("java"))
    return JavaNotFoundError(f"Spark's JVM ({java}) exited before it started (see the lines above): {JAVA_FIX}")


def build_session(app_name: str = "segjobs", master: str | None = None,
                  extra_conf: Mapping[str, str] | None = None, *, verbose: bool = False):
    """Get or create a SparkSession with segjobs' settings. ``master`` None keeps what spark-submit set
    (or ``local[*]`` when run directly). Spark's start-up lines are hidden unless ``verbose`` (or
    $SEGJOBS_SPARK_LOG) asks for them: a JVM this call launches reads :data:`LOG4J2_CONF` from its first line.
    On the command line a JVM this call launches writes through this process (see :class:`EarlySession`), which
    keeps :data:`JVM_NOISE` off the command's stderr."""
    if _EARLY_START_ALLOWED and _early is None and not _jvm_running():
        return EarlySession(app_name, master, extra_conf, verbose=verbose).session()
    options, level = _session_options(app_name, master, extra_conf, verbose=verbose)
    session = _get_or_create(options, level)
    if _QUIET_ON_INTERRUPT:
        _quiet_on_interrupt(session)
    return session


#: Set by the command line (:func:`allow_early_start`): this process may start Spark ahead of need.
_EARLY_START_ALLOWED = False
#: The session :class:`EarlySession` started in this process, if any.
_early: "EarlySession | None" = None


def allow_early_start() -> None:
    """For the command line: a run that will probably need Spark may start it on a background thread while the
    driver locks, recovers and scans (see :class:`EarlySession`). Not for notebooks and other API users, whose
    process outlives the run: a session started for a run that then finds nothing due would be left running."""
    global _EARLY_START_ALLOWED
    _EARLY_START_ALLOWED = True


#: Environment variable: ``0`` starts Spark only when a task first needs it, never ahead of need.
EARLY_START_ENV = "SEGJOBS_SPARK_EARLY_START"


def _master_set_elsewhere() -> bool:
    """Whether something other than segjobs' options sets the master: a Spark environment script, or
    ``$PYSPARK_SUBMIT_ARGS`` (``--master ...`` or ``--conf spark.master=...``)."""
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return bool(os.environ.get("SPARK_ENV_LOADED")) or "--master" in submit_args or "spark.master" in submit_args


def runs_on_this_host(master: str | None) -> bool:
    """Whether a session this process launches for ``master`` runs its tasks on this host: a ``local`` or
    ``local-cluster`` master, or none given where nothing else sets one (the default, ``local[*]``)."""
    if master is not None:
        return master.startswith("local")
    return not _master_set_elsewhere()


def can_start_early() -> bool:
    """Whether :class:`EarlySession` may be used here: the command line allowed it, $SEGJOBS_SPARK_EARLY_START is
    not ``0``, this process launches the JVM itself (not under spark-submit) and no session or earlier start
    exists."""
    if not _EARLY_START_ALLOWED or _early is not None or os.environ.get(EARLY_START_ENV, "").strip() == "0":
        return False
    return not _jvm_running()


def would_launch_local_jvm(master: str | None) -> bool:
    """Whether a session for this run would be a local one this process launches with its default master: the
    command line allowed starting Spark (:func:`allow_early_start`), no ``master`` was asked for, nothing set one
    (spark-submit, $PYSPARK_SUBMIT_ARGS, a Spark environment script) and no JVM is running here. Only such a run
    may do its tasks on the driver instead (:func:`jobs.engine.runtime.tasks.small_run_on_driver`): one that
    names a master, or runs under spark-submit or in a user's session, gets the Spark it asked for."""
    return _EARLY_START_ALLOWED and master is None and not _jvm_running() and not _master_set_elsewhere()


def _jvm_running() -> bool:
    """Whether this process has a JVM already: spark-submit's, or one a session was built on."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT")) or (
        "pyspark" in sys.modules and sys.modules["pyspark"].SparkContext._active_spark_context is not None)


#: Lines the driver JVM writes on every start that say nothing to a segjobs user, kept off the command's stderr
#: (where they also broke ``--log-format json``'s one JSON object per line) when the JVM's output passes through
#: this process (:class:`EarlySession`: the command line). Spark's launcher always adds
#: ``--add-modules=jdk.incubator.vector`` and Java announces an incubator module before any logging starts, with
#: no option to turn it off. Exact lines only: any other output of the JVM is shown.
JVM_NOISE: frozenset[bytes] = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})


def _is_jvm_noise(line: bytes) -> bool:
    return line.rstrip(b"\r\n") in JVM_NOISE


class EarlySession:
    """A Spark session :func:`build_session` would build, started now on a background thread, so that the JVM's
    start-up (seconds of it) overlaps the driver's own work: a run that will probably need Spark starts one
    before it takes the lock, recovers and scans. :meth:`session` claims it (waiting for the rest of its start);
    :meth:`abandon` gives it up when the run needed no Spark after all.

    Until claimed, what the JVM writes (its start-up warnings, or why it could not start) is held back, and an
    abandoned session's is dropped: a run with nothing due prints exactly what it printed without the early
    start. Nor does it wait for it: an abandoned JVM is killed at once (see :meth:`abandon`). The JVM's output
    passes through this process, never holding the caller's stdout or stderr itself, so a caller that reads
    them to their end is not kept waiting for a JVM's exit either (which is why the command line builds even a
    session it needs at once this way, claiming it at once)."""

    def __init__(self, app_name: str = "segjobs", master: str | None = None,
                 extra_conf: Mapping[str, str] | None = None, *, verbose: bool = False) -> None:
        global _early
        #: when the start began and when the session was ready (monotonic clock)
        self.began = time.monotonic()
        self.ready_at: float | None = None
        options, level = _session_options(app_name, master, extra_conf, verbose=verbose)
        self._lock = threading.Lock()
        self._held: list[tuple[str, bytes]] = []
        self._claimed = False
        self._abandoned = False
        self._done = threading.Event()
        self._session: Any = None
        self._error: BaseException | None = None
        self._readers: list[threading.Thread] = []
        self._conn_dirs: list[str] = []
        self._procs: list[Any] = []
        self._launching = threading.Lock()
        _early = self
        threading.Thread(target=self._start, args=(options, level), name="segjobs-spark-start", daemon=True).start()

    @property
    def claimed(self) -> bool:
        """Whether :meth:`session` was called."""
        return self._claimed

    def _start(self, options: Mapping[str, str], level: str | None) -> None:
        try:
            check_java()
            from pyspark import SparkConf, SparkContext
            # The JVM's stdout and stderr go through pipes read here, held until the session is claimed.
            pipes = {name: os.pipe() for name in ("stdout", "stderr")}
            for name, (read_end, _) in pipes.items():
                reader = threading.Thread(target=self._forward, args=(name, read_end), daemon=True,
                                          name=f"segjobs-spark-start-{name}")
                reader.start()
                self._readers.append(reader)
            conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
            try:
                # the gateway a session builder would launch with these options, with the output pipes
                gateway = self._launch_gateway(conf, {name: w for name, (_, w) in pipes.items()})
            finally:
                for _, write_end in pipes.values():
                    os.close(write_end)  # the JVM holds its own copies
            SparkContext._ensure_initialized(gateway=gateway)
            self._session = _get_or_create(options, level)
            self.ready_at = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - raised by session(), in the thread that claims it
            if _gateway_exited(exc):
                for reader in self._readers:  # the JVM is gone: what it said is read to its end
                    reader.join(timeout=2)
                exc = _jvm_exited()
            self._error = exc
        finally:
            self._done.set()

    def _forward(self, name: str, read_end: int) -> None:
        with os.fdopen(read_end, "rb") as source:
            for line in source:
                if _is_jvm_noise(line):
                    continue
                with self._lock:
                    if self._abandoned:
                        continue
                    if not self._claimed:
                        self._held.append((name, line))
                        continue
                    _write(name, line)

    def session(self) -> Any:
        """The session, once started (raises what starting it raised); what the JVM wrote so far is written
        out now, and from now on as it comes."""
        self._done.wait()
        with self._lock:
            self._claimed = True
            for name, line in self._held:
                _write(name, line)
            self._held.clear()
        if self._error is not None:
            raise self._error
        if _QUIET_ON_INTERRUPT:
            _quiet_on_interrupt(self._session)
        return self._session

    def _launch_gateway(self, conf: Any, popen_kwargs: dict[str, Any]) -> Any:
        """PySpark's ``launch_gateway``, noting the directory it makes for the JVM's connection file (a process
        that ends while the JVM starts never reaches the call's own clean-up) and the process it starts, so that
        :meth:`abandon` can remove the one and end the other."""
        from pyspark import java_gateway

        made = self._conn_dirs

        class _Tempfile:  # the tempfile module, but for the directories mkdtemp makes
            def __getattr__(self, name: str) -> Any:
                return getattr(tempfile, name)

            def mkdtemp(self, *args: Any, **kwargs: Any) -> str:
                made.append(tempfile.mkdtemp(*args, **kwargs))
                return made[-1]

        def popen(*args: Any, **kwargs: Any) -> subprocess.Popen:
            # Under the launch lock: abandon() waits for a launch under way, so that every process started is
            # one it kills, and none starts after it.
            with self._launching:
                if self._abandoned:
                    raise RuntimeError("the early Spark start was abandoned before its JVM was launched")
                proc = subprocess.Popen(*args, **kwargs)
                self._procs.append(proc)
            return proc

        # a process launches one gateway: these stand-ins are PySpark's names only while it does
        java_gateway.tempfile = _Tempfile()  # type: ignore[assignment]
        java_gateway.Popen = popen  # type: ignore[assignment,misc]
        try:
            return java_gateway.launch_gateway(conf, popen_kwargs=popen_kwargs)
        finally:
            java_gateway.tempfile = tempfile
            java_gateway.Popen = subprocess.Popen  # type: ignore[misc]

    def abandon(self) -> None:
        """The run needs no Spark: drop what the JVM wrote and will write, end the JVM (or the launcher on its
        way to it), and remove the directory of its connection file. Ended, not left to notice the closed pipe to
        its stdin: a JVM that never wrote its connection file never reads that pipe, and its gateway thread would
        keep it alive after this process ended."""
        with self._lock:
            if not self._claimed:
                self._abandoned = True
                self._held.clear()
        if not self._abandoned:
            return
        with self._launching:  # a launch under way ends first; none starts from now on
            procs = list(self._procs)
        for proc in procs:
            proc.kill()  # spark-submit execs its way to the JVM: the process started is the JVM by then
        for conn_dir in self._conn_dirs:
            shutil.rmtree(conn_dir, ignore_errors=True)

    def claimed_session(self) -> Any:
        """The session when claimed and started, else None."""
        return self._session if self._claimed else None


def start_session(app_name: str, master: str | None = None, *, verbose: bool = False) -> Any:
    """A session for a run that needs one now: on the command line started and claimed at once as an
    :class:`EarlySession` (the JVM's output comes through this process, so whoever reads the command's output does
    not wait for the JVM's own exit after the run), else :func:`build_session`."""
    if can_start_early():
        return EarlySession(app_name=app_name, master=master, verbose=verbose).session()
    return build_session(app_name=app_name, master=master, verbose=verbose)


def early_start_seconds(session: Any) -> float | None:
    """How long Spark's start took, from its beginning, when ``session`` is the one :class:`EarlySession` started
    (ahead of need or at need); None for any other session. A run that claims a session started early waits only
    for the rest of its start: this is the time the start itself took."""
    if _early is None or _early.ready_at is None or _early.claimed_session() is not session:
        return None
    return _early.ready_at - _early.began


def _write(name: str, line: bytes) -> None:
    stream = sys.stdout if name == "stdout" else sys.stderr
    try:
        stream.write(line.decode("utf-8", "replace"))
        stream.flush()
    except (OSError, ValueError):  # a closed stream at exit: the JVM's line has nowhere to go
        pass


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


#: Set by the command line (:func:`silence_spark_on_interrupt`): sessions it builds go quiet on Ctrl-C.
_QUIET_ON_INTERRUPT = False


def silence_spark_on_interrupt() -> None:
    """For the command line: from the first Ctrl-C on, Spark's and Py4J's own log lines are silenced in the
    sessions :func:`build_session` makes (the jobs being cancelled make Spark log warnings and stack traces
    that say nothing to the user; the command says what was committed). Not for notebooks, whose sessions
    outlive an interrupted cell."""
    global _QUIET_ON_INTERRUPT
    _QUIET_ON_INTERRUPT = True


def _quiet_on_interrupt(session: Any) -> None:
    """Put a SIGINT handler in front of PySpark's (which cancels the running jobs, then raises
    KeyboardInterrupt) that first silences Spark's logging."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers belong to the main thread
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "segjobs_quiet", False):
        return

    def on_interrupt(signum: int, frame: Any) -> None:
        _silence(session)
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    on_interrupt.segjobs_quiet = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, on_interrupt)


def _silence(session: Any) -> None:
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
    try:
        # every logger, not only the root: conf/log4j2.properties gives org.apache.spark a level of its own
        log4j = session.sparkContext._jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setAllLevels("", log4j.Level.OFF)
    except Exception:  # noqa: BLE001 - the JVM may be going already; stopping is all that is left
        pass


def stop_active_session(*, quiet: bool = False, exiting: bool = False) -> None:
    """Stop the Spark session this process started, if any: a clean JVM shutdown instead of executors
    killed mid-heartbeat (what spark-submit and the console script do when a command returns). ``quiet``
    (after an interrupt): Spark's and Py4J's own log lines are silenced first, since jobs cancelled mid-task
    make Spark log errors and stack traces (a broadcast gone, a task killed) that say nothing to the user.
    ``exiting``: the process ends right after, so the driver's accumulator server is left to end with it
    (stopping it waits up to its half-second poll interval; its thread is a daemon, and the JVM has stopped
    sending to it once the context is stopped)."""
    if _early is not None and not _early.claimed:
        return  # started early for a run that needed no Spark: it ends with the process (see EarlySession)
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    # an early session was built on another thread, and getActiveSession answers for this thread only
    session = (_early.claimed_session() if _early is not None else None) or SparkSession.getActiveSession()
    if session is None:
        return
    if quiet:
        _silence(session)
    if exiting:
        session.sparkContext._accumulatorServer = None
    try:
        session.stop()
    except Exception:  # noqa: BLE001 - a JVM already gone (its gateway closed): nothing left to stop
        if not quiet:
            raise
