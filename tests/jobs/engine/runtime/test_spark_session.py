"""A machine without a usable Java: every command that needs Spark exits 2 before any work, with one line
that says how to get Java, and no PySpark traceback (issue 18 item 4). Run as a user would, in a subprocess
whose PATH and JAVA_HOME have no java."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.engine.compact.selection import may_read_in_full
from jobs.engine.runtime.spark_session import (
    JAVA_FIX,
    LOG4J2_CONF,
    LOG_LEVEL_ENV,
    _session_options,
    java_problem,
    runs_on_this_host,
)
from jobs.engine.runtime.tasks import DRIVER_RUN_ENV
from jobs.rules.config import ConfigSet
from jobs.rules.scope import parse_scope
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, list_log_dir
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.paths import REPO

NOW = "2026-11-22T03:00:00Z"


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    log = LogBuilder("orders", 0, timestamp=1_700_000_000_000)
    log.batch([rec("k", "v1"), rec("k", "v2")])
    log.roll().batch([rec("k", "active")])
    write_log(log.table(), d / "orders-0")
    return d


def test_the_jvms_log4j2_configuration_is_the_repositorys() -> None:
    # found by a path relative to the module: a module moved deeper must not lose it (the JVM would then print
    # Spark's default profile and its warnings on every run's stderr)
    assert LOG4J2_CONF == REPO / "conf" / "log4j2.properties" and LOG4J2_CONF.is_file()


def segjobs(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


#: These runs need Spark: a log dir this small would otherwise be done on the driver, with no JVM at all (see
#: jobs.engine.runtime.tasks.small_run_on_driver, and tests/jobs/commands/test_cli.py for that run without Java).
NEEDS_SPARK = {DRIVER_RUN_ENV: "0"}


def no_java_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment with a PATH holding no java (an empty directory) and no JAVA_HOME, for runs that
    need Spark."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT")}
    env.update(PATH=str(empty), **NEEDS_SPARK, **extra)
    return env


def leftovers(log_dir: Path) -> list[str]:
    """What a run that did anything leaves: the lock file, the work dir beside the log dir."""
    return sorted(p.name for p in [log_dir / ".lock", log_dir.with_name(log_dir.name + ".segjobs")] if p.exists())


@pytest.mark.parametrize("command", [["compact"], ["retain"], ["inspect"], ["compact", "--dry-run"]])
@pytest.mark.slow
def test_no_java_exits_2_before_any_work_with_the_fix(tmp_path: Path, log_dir: Path, command: list[str]) -> None:
    proc = segjobs([command[0], "--log-dir", str(log_dir), "--now", NOW, *command[1:]], no_java_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"segjobs {command[0]}: error: Spark needs Java, and there is no `java` on PATH (and "
                           f"JAVA_HOME is not set): {JAVA_FIX}; nothing was done\n")
    assert "install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME" in proc.stderr
    assert proc.stdout == "" and leftovers(log_dir) == []  # no lock taken, no recovery, no Spark


@pytest.mark.slow
def test_a_java_home_without_java_is_named(tmp_path: Path, log_dir: Path) -> None:
    home = tmp_path / "jdk"
    home.mkdir()
    proc = segjobs(["compact", "--log-dir", str(log_dir), "--now", NOW], no_java_env(tmp_path, JAVA_HOME=str(home)))
    assert proc.returncode == 2
    assert proc.stderr == (f"segjobs compact: error: Spark needs Java, and JAVA_HOME={home} has no executable "
                           f"bin/java: {JAVA_FIX}; nothing was done\n")


@pytest.mark.slow
def test_a_jvm_that_exits_at_once_is_the_same_error_without_a_traceback(tmp_path: Path, log_dir: Path) -> None:
    """A java that is there but does not start (broken, or too old): PySpark's JAVA_GATEWAY_EXITED becomes the
    same one-line error and exit 2 (Airflow does not retry it). No real JVM starts: the fake one exits at once."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'Error: this JVM cannot start' >&2\nexit 1\n")
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    env.update(JAVA_HOME=str(home), PATH="/usr/bin:/bin", **NEEDS_SPARK)
    # inspect: its scans are Spark tasks (a compaction with nothing due, as here, would start no JVM at all)
    proc = segjobs(["inspect", "--log-dir", str(log_dir), "--now", NOW], env)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"segjobs inspect: error: Spark's JVM ({java}) exited before it started (see the lines above): "
                    f"{JAVA_FIX}")
    assert "Traceback" not in proc.stderr and "JAVA_GATEWAY_EXITED" not in proc.stderr


def test_java_problem_follows_java_home_then_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    if "pyspark" in sys.modules:  # the suite's own session, when one runs, is no answer to this question
        from pyspark import SparkContext

        monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "no `java` on PATH" in (java_problem() or "")
    (tmp_path / "java").write_text("#!/bin/sh\n")
    (tmp_path / "java").chmod(0o755)
    assert java_problem() is None
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))  # JAVA_HOME wins over PATH, as in spark-class
    assert "JAVA_HOME=" in (java_problem() or "")


def _worker_state(_: int) -> tuple[str | None, bool]:
    """In a Python worker: the module its process was started as, and whether pyarrow was imported before."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    return (spec.name if spec else None), "pyarrow" in sys.modules


def test_python_workers_fork_from_the_daemon_that_imported_the_hot_modules(spark) -> None:
    # every worker of a session segjobs builds comes from jobs.engine.runtime.worker_daemon, whose process imported
    # pyarrow, numpy, numba's kernels and the task modules before forking it
    states = spark.sparkContext.parallelize(range(4), 4).map(_worker_state).collect()
    assert states == [("jobs.engine.runtime.worker_daemon", True)] * 4


def _worker_heap(_: int) -> tuple[int, int]:
    """In a Python worker: the objects the garbage collector leaves alone (frozen), and those it tracks."""
    return gc.get_freeze_count(), len(gc.get_objects())


def test_python_workers_do_not_collect_the_preloaded_heap_after_each_task(spark) -> None:
    # PySpark runs gc.collect() after every task of a reused worker: over the daemon's preloaded modules that is
    # a full walk of some 170,000 objects per task, unless the daemon froze them before forking
    heaps = spark.sparkContext.parallelize(range(4), 4).map(_worker_heap).collect()
    # Unfrozen, the count is 0. What a reused worker tracks depends on the tasks it ran before (tens of thousands
    # of objects after the compaction tests), so it is bounded loosely: well under the frozen heap.
    assert all(frozen > 100_000 and tracked < frozen / 3 for frozen, tracked in heaps), heaps


@pytest.mark.slow
def test_the_daemon_preloads_without_starting_blas_threads() -> None:
    code = ("import os; from jobs.engine.runtime.worker_daemon import preload; preload(); import sys; "
            "from jobs.engine.runtime.kernels import _dispatchers, cached_kernels; "
            "loaded = {n: len(d.overloads) for n, d in _dispatchers()}; "
            "print(len(os.listdir('/proc/self/task')), 'jobs.engine.compact.driver' in sys.modules "
            "and 'pandas' in sys.modules, loaded == cached_kernels() and sum(loaded.values()) > 0)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    threads, imported, kernels = out.stdout.split()
    # numpy without its BLAS pool; pyarrow's one thread (its pools are re-created after a fork); the task modules
    # and pandas (which pyarrow imports at a task's first array conversion) imported; every kernel's cached code
    # loaded (the install's warm-up cached them)
    assert imported == "True" and kernels == "True" and int(threads) <= 2


# --------------------------------------------------------------------------------------------------
# Spark started early (jobs.engine.runtime.spark_session.EarlySession): held output, abandoned without a trace
# --------------------------------------------------------------------------------------------------


def _java_home(tmp_path: Path, *, real: bool = False) -> Path:
    """A JAVA_HOME whose java leaves ``ran`` beside it when run, then runs the real java (``real``), else says
    something on both streams and exits at once."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    then = (f'exec {shutil.which("java")} "$@"\n' if real else
            "echo 'fake java: on stdout'\necho 'fake java: cannot start' >&2\nexit 1\n")
    # each java's process id (exec keeps it: the launcher's, then the JVM's) in ``pids``
    java.write_text(f"#!/bin/sh\ntouch {home}/ran\necho $$ >> {home}/pids\n{then}")
    java.chmod(0o755)
    return home


def _dirty_below_ratio(d: Path) -> None:
    """orders-0: three closed segments, the cleaner checkpoint past the first two: dirty bytes (so the
    forecast expects a full read) but a dirty ratio of about a third, below the 0.9 the runs ask for."""
    log = LogBuilder("orders", 0, timestamp=1_700_000_000_000)
    for s in range(3):
        log.batch([rec(f"k{s}", "v1"), rec(f"k{s}", "v2")]).roll()
    log.batch([rec("k", "active")])
    write_log(log.table(), d / "orders-0")
    (d / "cleaner-offset-checkpoint").write_text("0\n1\norders 0 4\n")


def _early_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT", "SEGJOBS_SPARK_EARLY_START")}
    env.update(PATH="/usr/bin:/bin", **NEEDS_SPARK, **extra)
    return env


@pytest.mark.slow
def test_an_early_start_a_run_did_not_need_is_dropped_without_a_trace(tmp_path: Path) -> None:
    """The forecast expects work (dirty bytes), the selection finds none: the JVM started early is given up,
    and nothing it wrote (here a JVM that cannot start) reaches the run's output or exit code.

    The start runs on a background thread the run never waits for, so a run this short may end before the
    launcher gets as far as java: whether the fake java ran is not asserted (that raced), the forecast the
    command line starts early on is; when java did run, what it said must not show."""
    logs = tmp_path / "logs"
    _dirty_below_ratio(logs)
    listing = list_log_dir(open_storage(str(logs)), str(logs))
    checkpoints = {CLEANER_OFFSET_CHECKPOINT: {("orders", 0): 4}, LOG_START_OFFSET_CHECKPOINT: {}}
    assert may_read_in_full(listing, checkpoints, ConfigSet().with_overrides(["*:cleanup.policy=compact"]),
                            parse_scope([], [])), "the command line would not start Spark early here"
    argv = ["compact", "--log-dir", str(logs), "--now", NOW, "--set",
            "*:cleanup.policy=compact", "--set", "*:min.cleanable.dirty.ratio=0.9"]
    home = _java_home(tmp_path)
    proc = segjobs(argv, _early_env(tmp_path, JAVA_HOME=str(home)))
    assert proc.returncode == 0, proc.stderr
    assert "fake java" not in proc.stdout + proc.stderr
    assert "0 of 1 partition(s) selected" in proc.stdout
    # the same run that never starts Spark early prints the same, and starts no JVM (a java of its own: the
    # abandoned launcher of the run above may still reach its java after that run ended)
    late_home = _java_home(tmp_path / "late")
    late = segjobs(argv, _early_env(tmp_path, JAVA_HOME=str(late_home), SEGJOBS_SPARK_EARLY_START="0"))
    assert late.returncode == 0 and _without_times(late.stdout) == _without_times(proc.stdout)
    assert not (late_home / "ran").exists()


def _java_processes_settle(home: Path, quiet_s: float = 3.0, limit_s: float = 20.0) -> list[int]:
    """The java processes of ``home`` (its ``pids`` file) still running once no new one has appeared for
    ``quiet_s`` and all of them have ended, or when ``limit_s`` is up: a launcher the run left on its way may
    still reach java after the run ended, so the file is read until it is quiet."""
    deadline = time.monotonic() + limit_s
    seen: list[int] = []
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        pids = [int(p) for p in (home / "pids").read_text().split()] if (home / "pids").exists() else []
        if pids != seen:
            seen, quiet_since = pids, time.monotonic()
        alive = [p for p in seen if _running(p)]
        if not alive and time.monotonic() - quiet_since >= quiet_s:
            return []
        time.sleep(0.2)
    return [p for p in seen if _running(p)]


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _without_times(text: str) -> str:
    import re

    return re.sub(r"\d+\.\ds", "_s", text)


@pytest.mark.slow
def test_an_early_start_a_run_needs_shows_what_the_jvm_said_before_the_error(tmp_path: Path) -> None:
    """The forecast and the selection agree (all dirty): the run claims the early start, and what the JVM said
    while it was held back comes out before the error line."""
    _dirty_below_ratio(tmp_path / "logs")
    proc = segjobs(["compact", "--log-dir", str(tmp_path / "logs"), "--now", NOW, "--set", "*:cleanup.policy=compact",
                    "--set", "*:min.cleanable.dirty.ratio=0.1"],
                   _early_env(tmp_path, JAVA_HOME=str(_java_home(tmp_path))))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "fake java: cannot start" in lines[:-1]
    assert lines[-1].startswith("segjobs compact: error: Spark's JVM (") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_real_jvm_started_early_and_not_needed_neither_prints_nor_holds_the_run(tmp_path: Path) -> None:
    """A real JVM: the run with nothing due ends while the JVM is still starting, prints what a run that
    never started one prints, and the JVM's output never reaches the caller's pipes (which would otherwise
    stay open until it exits)."""
    _dirty_below_ratio(tmp_path / "logs")
    argv = ["compact", "--log-dir", str(tmp_path / "logs"), "--now", NOW, "--set",
            "*:cleanup.policy=compact", "--set", "*:min.cleanable.dirty.ratio=0.9"]
    home = _java_home(tmp_path, real=True)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = _early_env(tmp_path, JAVA_HOME=str(home), TMPDIR=str(temp))
    early = segjobs(argv, env)
    # whether java ran before the run ended is a race (see the test above, which asserts the forecast); if it
    # did, the abandoned JVM ends with the run: none outlives it (one that never wrote its connection file
    # would otherwise wait on its gateway thread forever)
    assert _java_processes_settle(home) == [], "a JVM started early outlived the run"
    assert list(temp.iterdir()) == []  # PySpark's directory for the JVM's connection file is not left behind
    late = segjobs(argv, {**env, "SEGJOBS_SPARK_EARLY_START": "0"})
    assert early.returncode == late.returncode == 0, early.stderr
    assert _without_times(early.stdout) == _without_times(late.stdout)
    assert _without_times(early.stderr) == _without_times(late.stderr)
    assert "WARNING" not in early.stderr


def test_a_session_runs_its_tasks_on_this_host_with_a_local_master_or_none_set_anywhere(monkeypatch) -> None:
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", LOG_LEVEL_ENV, "SPARK_LAUNCHER_OPTS"):
        # what building a session's options sets in the environment is put back after the test
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    assert runs_on_this_host(None)  # local[*]
    assert runs_on_this_host("local[2]") and runs_on_this_host("local-cluster[2,1,1024]")
    assert not runs_on_this_host("spark://master:7077") and not runs_on_this_host("yarn")
    for submit_args in ("--conf spark.master=yarn pyspark-shell", "--master yarn pyspark-shell"):
        monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit_args)
        assert not runs_on_this_host(None)
        # and the session keeps that master rather than getting local[*] from segjobs
        assert "spark.master" not in _session_options("segjobs-test", None, None, verbose=False)[0]
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    monkeypatch.setenv("SPARK_ENV_LOADED", "1")  # a Spark environment script may set any master
    assert not runs_on_this_host(None)
