"""A Spark standalone cluster of several hosts on one machine: every host (the master, each worker, each driver) in
a network namespace of its own, all of them joined by a bridge that lives in one more namespace, the test's own.

The test process stays in the machine's namespace with one leg on the bridge (the first address of the subnet):
moto_server listens there, so the log dirs on S3 are reachable from every host, and the test reads them back over
the same bridge. Nothing else is shared but what a real cluster shares: each worker has its own address, local and
work dirs; a driver reaches the master and executors only over the bridge. A host is cut off by setting its link
down (:meth:`NetnsCluster.cut`), an executor or a Python worker killed by its pid (:meth:`NetnsCluster.executor_pids`,
:meth:`NetnsCluster.python_worker_pids`).

Everything is named ``sj<pid>-...`` (the pid of the test process), so :meth:`NetnsCluster.stop` removes exactly what
this run made, and :func:`sweep_stale` what a run that was killed outright left (its pid is gone).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tests.ops.spark_standalone import MASTER_READY, WORKER_READY, daemon_env, spark_home
from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY, MotoServer

REPO = Path(__file__).resolve().parents[2]
#: The port of the master (every host has its own address, so fixed ports cannot collide).
MASTER_PORT = 7077
#: How fast the cluster notices a lost executor or host. Spark's defaults (a 120 s network timeout, a worker
#: declared dead after 60 s) suit a data centre; here a fault should cost seconds.
FAST_FAILURE_CONF = {
    "spark.network.timeout": "20s",
    "spark.network.timeoutInterval": "5s",
    "spark.executor.heartbeatInterval": "2s",
    "spark.task.maxFailures": "4",
    "spark.python.task.killTimeout": "2s",
}
#: Seconds of silence after which the master declares a worker (a host) lost.
WORKER_TIMEOUT_S = 15
#: Buckets whose staged objects moto writes slowly (each PUT waits SLOW_STAGING_S): a task staging there is still
#: mid-task once its first staged object shows, so a fault aimed at a running task cannot miss it.
SLOW_BUCKETS = "slow-"
SLOW_STAGING_S = 1.0
#: Buckets whose external-sort work files (piece and bucket files, SLOW_SORT_S each) and staged objects
#: (SLOW_STAGING_S) moto writes slowly: a fault aimed at the key pass, the bucket reduce or the rewrite of external
#: sort lands inside a running task.
SLOW_SORT_BUCKETS = "slowsort-"
SLOW_SORT_S = 0.3
#: Buckets whose segments moto serves slowly (each GET of a ``.log`` object waits SLOW_READ_S): a task reading
#: segments (the scan) is still mid-task once its first read shows in moto's request log.
SLOW_SCAN_BUCKETS = "slowscan-"
SLOW_READ_S = 0.1
_NAME_RE = re.compile(r"^sj(\d+)-")


def netns_unavailable() -> str | None:
    """Why this machine cannot host the cluster (None: it can): root, ``ip`` and a network namespace with a bridge
    and a veth pair are needed."""
    if os.geteuid() != 0:
        return "network namespaces need root (the cluster tests run as root in CI)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    probe = f"sj{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "exec", probe, "ip", "link", "add", "name", "br0", "type", "bridge")
        _ip("netns", "exec", probe, "ip", "link", "add", "name", "va", "type", "veth", "peer", "name", "vb")
    except subprocess.CalledProcessError as exc:
        return f"cannot make a network namespace with a bridge and a veth pair: {exc.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _pids_in(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sweep_stale() -> list[str]:
    """Remove the namespaces (and kill their processes) of earlier runs whose test process is gone; returns them."""
    stale = [ns for ns in _namespaces() if (m := _NAME_RE.match(ns)) and not _alive(int(m.group(1)))]
    for ns in stale:
        _kill_all(_pids_in(ns))
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return stale


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 under 10.201.0.0/16 that no address of the machine's namespace lies in (only its leg is there)."""
    used = [ipaddress.ip_interface(a) for a in re.findall(r"inet (\S+)", _ip("-4", "addr"))]
    start = os.getpid() % 250
    for k in range(250):
        net = ipaddress.IPv4Network(f"10.201.{(start + k) % 250}.0/24")
        if not any(i.network.overlaps(net) for i in used):
            return net
    raise RuntimeError("no free /24 under 10.201.0.0/16 for the cluster's bridge")


@dataclass(frozen=True)
class Host:
    """One machine of the cluster: its namespace, its address and (seen from the bridge) its link."""

    name: str
    netns: str
    address: str
    #: the bridge's end of the host's veth pair (in the bridge's namespace): down = the host is cut off
    port: str


@dataclass
class NetnsCluster:
    """A master, workers and driver hosts, each in its own namespace; :meth:`start` waits for every worker."""

    root: Path
    tag: str = field(default_factory=lambda: f"sj{os.getpid()}")
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    moto: MotoServer | None = None
    subnet: ipaddress.IPv4Network | None = None
    _made: list[str] = field(default_factory=list)
    _root_leg: str = ""

    # ---------------------------------------------------------------- start

    @classmethod
    def start(cls, root: Path, *, workers: int = 3, drivers: int = 2, cores: int = 1, memory: str = "1g",
              timeout_s: float = 120) -> "NetnsCluster":
        cluster = cls(root)
        try:
            cluster._network(["master", *(f"worker-{n}" for n in range(workers)),
                              *(f"driver-{n}" for n in range(drivers))])
            cluster._moto()
            cluster._daemons(workers, cores, memory, timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def bridge_ns(self) -> str:
        return f"{self.tag}-net"

    @property
    def gateway(self) -> str:
        """The test process's address on the bridge (moto_server's)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    @property
    def master_url(self) -> str:
        return f"spark://{self.hosts['master'].address}:{MASTER_PORT}"

    @property
    def workers(self) -> list[str]:
        return sorted(h for h in self.hosts if h.startswith("worker-"))

    def _network(self, names: list[str]) -> None:
        sweep_stale()
        self.subnet = _free_subnet()
        bridge = self.bridge_ns
        _ip("netns", "add", bridge)
        self._made.append(bridge)
        _ip("netns", "exec", bridge, "ip", "link", "add", "br0", "type", "bridge")
        _ip("netns", "exec", bridge, "ip", "link", "set", "br0", "up")
        prefix = self.subnet.prefixlen
        # The test process's leg: a veth pair made here, its far end moved onto the bridge.
        self._root_leg = f"{self.tag}g"[-15:]
        self._veth(self._root_leg, "p-gw", None, f"{self.gateway}/{prefix}")
        for k, name in enumerate(names, start=2):
            ns = f"{self.tag}-{name}"
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            address = str(self.subnet.network_address + k)
            port = f"p-{name}"[:15]
            self._veth(f"{self.tag}v{k}"[-15:], port, ns, f"{address}/{prefix}")
            self.hosts[name] = Host(name, ns, address, port)

    def _veth(self, leg: str, port: str, netns: str | None, cidr: str) -> None:
        """A veth pair: ``leg`` in ``netns`` (None: this namespace) as ``eth0`` with ``cidr``, ``port`` on the
        bridge."""
        _ip("link", "add", leg, "type", "veth", "peer", "name", f"{leg[:-1]}q"[-15:])
        peer = f"{leg[:-1]}q"[-15:]
        _ip("link", "set", peer, "netns", self.bridge_ns)
        _ip("netns", "exec", self.bridge_ns, "ip", "link", "set", peer, "name", port)
        _ip("netns", "exec", self.bridge_ns, "ip", "link", "set", port, "master", "br0", "up")
        if netns is None:
            _ip("addr", "add", cidr, "dev", leg)
            _ip("link", "set", leg, "up")
            return
        _ip("link", "set", leg, "netns", netns)
        _ip("netns", "exec", netns, "ip", "link", "set", leg, "name", "eth0")
        _ip("netns", "exec", netns, "ip", "addr", "add", cidr, "dev", "eth0")
        _ip("netns", "exec", netns, "ip", "link", "set", "eth0", "up")

    def _moto(self) -> None:
        self.moto = MotoServer.start(
            host=self.gateway, log_path=str(self.moto_log),
            slow_puts=",".join(f"{bucket}:{mark}:{seconds}" for bucket, mark, seconds in (
                (SLOW_BUCKETS, "/staged/", SLOW_STAGING_S), (SLOW_SORT_BUCKETS, "/external-sort/", SLOW_SORT_S),
                (SLOW_SORT_BUCKETS, "/staged/", SLOW_STAGING_S))),
            slow_gets=f"{SLOW_SCAN_BUCKETS}:.log:{SLOW_READ_S}")

    @property
    def moto_log(self) -> Path:
        """moto_server's request log: one line per request, the client's address first."""
        return self.root / "moto.log"

    def _daemons(self, workers: int, cores: int, memory: str, timeout_s: float) -> None:
        master = self.hosts["master"]
        env = self._daemon_env(master, self.root / "master")
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", master.address,
                               "--port", str(MASTER_PORT), "--webui-port", "8080"], env)
        self._wait_for("master", MASTER_READY, timeout_s)
        for n in range(workers):
            host = self.hosts[f"worker-{n}"]
            work = self.root / host.name / "work"
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(host.name, ["org.apache.spark.deploy.worker.Worker", "--host", host.address,
                                    "--webui-port", "8081", "--cores", str(cores), "--memory", memory,
                                    "--work-dir", str(work), self.master_url],
                        self._daemon_env(host, self.root / host.name))
        for n in range(workers):
            self._wait_for(f"worker-{n}", WORKER_READY, timeout_s)

    def _daemon_env(self, host: Host, home: Path) -> dict[str, str]:
        (home / "local").mkdir(parents=True, exist_ok=True)
        env = daemon_env(dict(os.environ), home / "local")
        env["SPARK_LOCAL_IP"] = host.address
        env["SPARK_LOG_DIR"] = str(home)
        # The master declares a silent worker dead after this (Spark's default: 60 s); a worker heartbeats every
        # quarter of it, so both sides must know it.
        env["SPARK_DAEMON_JAVA_OPTS"] = f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}"
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            # `ip netns exec` execs the daemon: the pid is the JVM's, its session holds the executors it starts.
            self.procs[name] = subprocess.Popen(
                ["ip", "netns", "exec", self.hosts[name].netns, str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=self.root,
                start_new_session=True)

    def _wait_for(self, name: str, text: str, timeout_s: float) -> None:
        log, proc = self.root / f"{name}.log", self.procs[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            content = log.read_text(errors="replace") if log.exists() else ""
            if text in content:
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode} before {text!r}:\n{content[-4000:]}")
            time.sleep(0.5)
        raise TimeoutError(f"{name} did not log {text!r} within {timeout_s:.0f} s")

    # ---------------------------------------------------------------- drivers

    def submit_command(self, script: Path, args: list[str], *, conf: dict[str, str] | None = None,
                       master: str | None = None) -> list[str]:
        """spark-submit of ``script`` (client mode) to this cluster: executors run this checkout's interpreter and
        code (the packaged archive is the deployment test's concern), 1 core and 1 GiB each. ``master``: another
        master with the same settings (``local[2]``: the same job on the driver's host alone)."""
        settings = {
            "spark.executor.memory": "1g", "spark.executor.cores": "1", "spark.cores.max": str(len(self.workers)),
            "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(REPO),
            "spark.executorEnv.AWS_ACCESS_KEY_ID": ACCESS_KEY, "spark.executorEnv.AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "spark.executorEnv.AWS_DEFAULT_REGION": REGION,
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{REPO / 'conf' / 'log4j2.properties'}",
            **FAST_FAILURE_CONF, **(conf or {}),
        }
        cmd = [str(Path(sys.executable).with_name("spark-submit")), "--master", master or self.master_url,
               "--deploy-mode", "client", "--properties-file", str(REPO / "conf" / "spark-defaults.conf")]
        for key, value in settings.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, str(script), *args]

    def driver_env(self, host: str) -> dict[str, str]:
        """The environment of a driver on ``host``: this checkout first on the path, the S3 credentials."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
        address = self.hosts[host].address
        # The driver tells executors its address, not its host name: the workers' hosts do not resolve it.
        env.update(PYTHONPATH=str(REPO), PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP=address,
                   SPARK_LOCAL_HOSTNAME=address,
                   AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION)
        return env

    def on_host(self, host: str, cmd: list[str]) -> list[str]:
        """``cmd`` run on ``host``: in its network namespace and, as a host of its own, under its own host name
        (a UTS namespace: a lease names its holder's host by it) that the cluster's hosts file resolves."""
        return ["ip", "netns", "exec", self.hosts[host].netns, "unshare", "--uts", "--mount", "sh", "-c",
                'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"', host,
                str(self._hosts_file()), *cmd]

    def _hosts_file(self) -> Path:
        """The cluster's ``/etc/hosts`` (every host by name, as a cluster's DNS would answer), bound over the
        machine's in a host's own mount namespace."""
        path = self.root / "hosts"
        if not path.exists():
            path.write_text("127.0.0.1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in self.hosts.values()))
        return path

    def start_driver(self, host: str, cmd: list[str], log: Path) -> subprocess.Popen:
        """``cmd`` on ``host`` in a session of its own (so its JVM and Python die together), output to ``log``."""
        with open(log, "wb") as out:
            return subprocess.Popen(self.on_host(host, cmd), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.driver_env(host), cwd=self.root,
                                    start_new_session=True)

    def run_driver(self, host: str, cmd: list[str], log: Path, timeout_s: float = 300) -> int:
        """:meth:`start_driver` and wait; every process of its session is killed when it ends or times out."""
        proc = self.start_driver(host, cmd, log)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"driver on {host} timed out after {timeout_s:.0f} s:\n"
                                 f"{log.read_text(errors='replace')[-4000:]}") from None
        finally:
            _kill_group(proc)

    # ---------------------------------------------------------------- faults

    def cut(self, host: str, *, down: bool = True) -> None:
        """Take ``host``'s link to the bridge down (``down=False``: up again): it can reach nobody, nobody it."""
        _ip("netns", "exec", self.bridge_ns, "ip", "link", "set", self.hosts[host].port, "down" if down else "up")

    def reconnect(self, worker: str, timeout_s: float = 120) -> None:
        """Bring a :meth:`cut` worker back and wait until it has registered with the master again and the
        executors it ran while cut off (their application is gone) have ended; those still running then are
        killed, and no socket of the worker's to the object store is left open."""
        log = self.root / f"{worker}.log"
        registered = log.read_text(errors="replace").count(WORKER_READY)
        self.cut(worker, down=False)
        deadline = time.monotonic() + timeout_s
        while log.read_text(errors="replace").count(WORKER_READY) <= registered:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{worker} did not register with the master again within {timeout_s:.0f} s")
            time.sleep(0.5)
        while self.executor_pids(worker) and time.monotonic() < deadline:
            time.sleep(0.5)
        _kill_all(self.executor_pids(worker))
        # A socket its process closed keeps what it had not sent (a staged PUT's body, begun while the link was
        # down), and the kernel sends it now the link is up: the host is back once none is left.
        while self.sockets_to_store(worker) and time.monotonic() < deadline:
            time.sleep(0.5)

    def sockets_to_store(self, host: str) -> list[str]:
        """The TCP sockets ``host`` holds to moto_server, but those in TIME-WAIT (nothing left to send)."""
        assert self.moto is not None
        port = urllib.parse.urlsplit(self.moto.endpoint_url).port
        out = _ip("netns", "exec", self.hosts[host].netns, "ss", "-tanH", "exclude", "time-wait",
                  "dst", f"{self.gateway}:{port}")
        return [line for line in out.splitlines() if line.strip()]

    def executor_pids(self, worker: str) -> list[int]:
        """The executor JVMs running on ``worker`` now."""
        return [p for p in _pids_in(self.hosts[worker].netns) if "CoarseGrainedExecutorBackend" in _cmdline(p)]

    def python_worker_pids(self, worker: str) -> list[int]:
        """The Python workers on ``worker`` now: the children of the Python daemon an executor JVM started
        (whatever its module, ``spark.python.daemon.module``), not the daemon itself."""
        pids = _pids_in(self.hosts[worker].netns)
        executors = set(self.executor_pids(worker))
        daemons = {p for p in pids if _parent(p) in executors and "python" in _cmdline(p)}
        return [p for p in pids if _parent(p) in daemons]

    def executor_logs(self, limit: int = 3000) -> str:
        """The tail of every executor's stderr (for failure messages)."""
        return "\n".join(f"--- {p.relative_to(self.root)}\n{p.read_text(errors='replace')[-limit:]}"
                         for p in sorted(self.root.glob("worker-*/work/app-*/*/stderr")))

    # ---------------------------------------------------------------- stop

    def stop(self, grace_s: float = 10) -> None:
        """Stop the daemons (SIGTERM, then SIGKILL of their sessions), kill whatever still runs in the
        namespaces, stop moto_server and remove the namespaces (the bridge and every veth go with them)."""
        for proc in reversed(list(self.procs.values())):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            _kill_group(proc)
        for ns in self._made:
            _kill_all(_pids_in(ns))
        if self.moto is not None:
            self.moto.stop()
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if self._root_leg:
            subprocess.run(["ip", "link", "del", self._root_leg], capture_output=True)
        self._made.clear()


def leftovers(tag: str) -> list[str]:
    """What of a cluster tagged ``tag`` is still there: namespaces, links, processes in them."""
    found = [ns for ns in _namespaces() if ns.startswith(f"{tag}-")]
    found += [f"pid {p}" for ns in found for p in _pids_in(ns)]
    found += [ln for ln in re.findall(r"^\d+: ([^:@]+)", _ip("link"), re.M) if ln.startswith(tag)]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    _signal_group(proc, signal.SIGKILL)
    proc.wait()
