"""A Spark standalone cluster on 127.0.0.1, from the pyspark installed beside the running interpreter.

A master and N workers run as ``spark-class org.apache.spark.deploy.{master.Master,worker.Worker}``
subprocesses, each in its own process group (executors and their Python workers are its children), so
:meth:`StandaloneCluster.stop` ends everything it started however a test ends.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: What the log lines say once a daemon is ready (Spark's default log4j2 configuration, INFO, on stderr).
MASTER_READY = "I have been elected leader"
WORKER_READY = "Successfully registered with master"


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark (jars, bin/spark-class, python/lib/pyspark.zip)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists():
        raise FileNotFoundError(f"{home}/bin/spark-class not found: pyspark's scripts are missing")
    return home


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; another process could take it before use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def daemon_env(base: dict[str, str], local_dirs: Path) -> dict[str, str]:
    """The environment of the master and workers, and so of executors: loopback only, scratch space under
    ``local_dirs``, and no Python of the test run (no PYSPARK_PYTHON, PYTHONPATH or virtualenv on PATH), so
    an executor finds the project only if the application ships it."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in base.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV", "NUMBA_CACHE_DIR")}
    env["PATH"] = os.pathsep.join(p for p in base.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    # Set, because spark-class would otherwise find it by importing pyspark with the python on PATH.
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_LOCAL_DIRS"] = str(local_dirs)
    # Daemons need little heap; the default (1 GiB each) would crowd the test machine.
    env["SPARK_DAEMON_MEMORY"] = "256m"
    return env


@dataclass
class StandaloneCluster:
    """A running master and its workers; :meth:`start` waits until every worker has registered."""

    root: Path
    master_url: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    @classmethod
    def start(cls, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
              timeout_s: float = 120) -> "StandaloneCluster":
        cluster = cls(root)
        try:
            cluster._start(workers, cores, memory, timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self, workers: int, cores: int, memory: str, timeout_s: float) -> None:
        (self.root / "local").mkdir(parents=True, exist_ok=True)
        env = daemon_env(dict(os.environ), self.root / "local")
        port = free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(free_port())], env)
        self._wait_for(self.logs[0], MASTER_READY, self.procs[0], timeout_s)
        for n in range(workers):
            work = self.root / f"worker-{n}"
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{n}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                        "--webui-port", str(free_port()), "--cores", str(cores),
                                        "--memory", memory, "--work-dir", str(work), self.master_url], env)
        for proc, log in zip(self.procs[1:], self.logs[1:]):
            self._wait_for(log, WORKER_READY, proc, timeout_s)

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            # A new session: the daemon, the executors it launches and their Python workers form one process
            # group that stop() signals as a whole.
            self.procs.append(subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                               cwd=self.root, start_new_session=True))
        self.logs.append(log)

    @staticmethod
    def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            content = log.read_text(errors="replace") if log.exists() else ""
            if text in content:
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{log.stem} exited with code {proc.returncode} before {text!r}:\n"
                                   f"{content[-4000:]}")
            time.sleep(0.5)
        raise TimeoutError(f"{log.stem} did not log {text!r} within {timeout_s:.0f} s:\n"
                           f"{log.read_text(errors='replace')[-4000:]}")

    def executor_logs(self, limit: int = 3000) -> str:
        """The tail of every executor's stderr (for failure messages)."""
        parts = []
        for path in sorted(self.root.glob("worker-*/app-*/*/stderr")):
            parts.append(f"--- {path.relative_to(self.root)}\n{path.read_text(errors='replace')[-limit:]}")
        return "\n".join(parts)

    def stop(self, grace_s: float = 15) -> None:
        """SIGTERM every process group (workers first, so they do not try to reconnect), then SIGKILL what
        is left after ``grace_s``."""
        for proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            # Executors outlive a worker killed by SIGTERM only briefly; SIGKILL the group whatever the
            # daemon's state, so nothing of the cluster survives the test.
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # the group is gone already


def run_in_group(cmd: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a new process group that is killed whole on timeout (spark-submit's JVM and its
    Python driver would otherwise outlive the test)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout_s:.0f} s: {' '.join(cmd)}\n{out[-2000:]}\n{err[-4000:]}") \
            from None
    finally:
        # Also after a normal exit: nothing the submission started may outlive it.
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
