"""A real Apache Kafka broker for the live tests (``make broker-test``): one KRaft node, broker and controller in
one JVM, on 127.0.0.1, in a temporary directory.

The jars are Kafka's own from Maven Central, resolved with their transitive closure by ``ops/broker/pom.xml``
into the project's ignored ``.cache/kafka-<version>/`` (``make broker-jars``). :func:`unavailable` says why a
broker cannot run here (no Java, no jars); the tests skip with that reason, or fail when
``SEGJOBS_REQUIRE_BROKER=1`` (set by ``make broker-test``, so CI never passes by skipping).

A :class:`Broker` owns one node directory: ``server.properties``, the data log dir (``logs/``, the only thing
segjobs is pointed at), the KRaft metadata log dir (``metadata/``, apart, so no job ever sees it) and the
broker's own output (``broker-<n>.out``, one file per start). :meth:`Broker.running` formats the storage on first
use, starts the JVM, waits until the port answers and always stops it: SIGTERM (Kafka's controlled shutdown),
then SIGKILL after a timeout, and reports whether the shutdown was clean (the ``.kafka_cleanshutdown`` file a
broker writes last).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator, Mapping, NoReturn

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "ops" / "broker" / "pom.xml"
#: the Kafka version the live tests run: the pom's kafka.version (the one place it is written)
KAFKA_VERSION = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
JARS = ROOT / ".cache" / f"kafka-{KAFKA_VERSION}"
#: set to 1 where a missing Java or missing jars must fail the tests instead of skipping them (make broker-test)
REQUIRE_ENV = "SEGJOBS_REQUIRE_BROKER"
#: the file a broker writes into each log dir as the last step of a clean shutdown
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
HEAP = "-Xmx512m"

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = info
"""


class BrokerError(RuntimeError):
    """The broker did not start, or did not stop, as asked; the message quotes the end of its output."""


def java() -> str | None:
    """The ``java`` the broker runs on: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def unavailable() -> str | None:
    """Why no broker can run here (None: it can)."""
    if java() is None:
        return "no Java (JAVA_HOME/bin/java or java on PATH): install Java 17 to run the live-broker tests"
    if not (JARS / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        return (f"Kafka {KAFKA_VERSION}'s jars are not in {JARS.relative_to(ROOT)}/: `make broker-jars` resolves "
                f"them from Maven Central (ops/broker/pom.xml)")
    return None


def classpath() -> str:
    return str(JARS / "*")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (what ``StorageTool random-uuid`` prints).

    Drawn again while it starts with ``-``, as Kafka's own ``Uuid.randomUuid`` does: one id in 64 would otherwise
    begin with a dash, and ``StorageTool format -t -Abc...`` reads it as an option and fails."""
    while True:
        text = base64.urlsafe_b64encode(draw()).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def run_tool(main_class: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line tools (a Java main class) with the broker's jars; its output captured."""
    env = {**os.environ, "KAFKA_HEAP_OPTS": HEAP}
    cmd = [java() or "java", HEAP, "-cp", classpath(), f"-Dlog4j2.configurationFile={_log4j2_file()}",
           main_class, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def _log4j2_file() -> Path:
    path = JARS / "segjobs-log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return path


@dataclass
class Broker:
    """One single-node KRaft cluster in ``home``. ``settings`` are extra ``server.properties`` lines (topic
    defaults such as ``log.cleaner.enable``); ports are chosen free on each start."""

    home: Path
    settings: Mapping[str, str] = field(default_factory=dict)
    cluster: str = field(default_factory=cluster_id)
    port: int = 0
    starts: int = 0
    process: subprocess.Popen[bytes] | None = None
    #: the exit status of the last stop (None while running or when it had to be killed)
    returncode: int | None = None
    #: whether the last stop was clean (see :meth:`stop`)
    clean: bool = False
    #: directories or jars put before Kafka's on the broker's classpath (a test's own plugin classes)
    extra_classpath: tuple[Path, ...] = ()
    #: JVM options of the broker (``-Dname=value``: settings for a test's plugin classes)
    jvm_options: tuple[str, ...] = ()

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def metadata_dir(self) -> Path:
        return self.home / "metadata"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def output(self) -> Path:
        """The current (last) start's output."""
        return self.home / f"broker-{self.starts}.out"

    def write_properties(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        self.port, controller = free_port(), free_port()
        props = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir), "metadata.log.dir": str(self.metadata_dir),
            "num.partitions": "1", "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
            "transaction.state.log.num.partitions": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "auto.create.topics.enable": "false",
            **self.settings,
        }
        path = self.home / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def format(self) -> None:
        """Format the node's storage (both dirs) with Kafka's StorageTool, once."""
        props = self.write_properties()
        done = run_tool("kafka.tools.StorageTool", "format", "-t", self.cluster, "-c", str(props))
        if done.returncode != 0:
            raise BrokerError(f"StorageTool format failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def start(self, timeout: float = 90.0) -> None:
        if not (self.metadata_dir / "meta.properties").is_file():
            self.format()
        props = self.write_properties()
        self.starts += 1
        env = {**os.environ, "KAFKA_HEAP_OPTS": HEAP}
        cmd = [java() or "java", HEAP, "-XX:+UseSerialGC", *self.jvm_options,
               "-cp", os.pathsep.join([*map(str, self.extra_classpath), classpath()]),
               f"-Dlog4j2.configurationFile={_log4j2_file()}", "kafka.Kafka", str(props)]
        with open(self.output, "wb") as out:
            # its own process group: a test runner's Ctrl-C reaches pytest, whose teardown stops the broker
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"the broker exited ({self.process.returncode}) while starting:\n{self.tail()}")
            if "started (kafka.server.KafkaRaftServer)" in self.log_text() and _answers(self.port):
                return
            time.sleep(0.3)
        self.stop()
        raise BrokerError(f"the broker did not start within {timeout:.0f} s:\n{self.tail()}")

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout``); True when it shut down cleanly: it exited
        within the timeout and left the clean-shutdown file, the last thing Kafka's shutdown writes, in its log
        dir."""
        proc, self.process = self.process, None
        if proc is None:
            return self.clean
        self.clean = False
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
                self.returncode = None
                return False
        self.returncode = proc.returncode
        self.clean = (self.log_dir / CLEAN_SHUTDOWN).is_file()
        return self.clean

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the broker, as a crash would stop it: nothing of its shutdown runs (no clean-shutdown file, no
        flush); returns once the process is gone."""
        proc, self.process = self.process, None
        self.clean, self.returncode = False, None
        if proc is not None:
            proc.kill()
            proc.wait(timeout)

    @contextlib.contextmanager
    def running(self) -> Iterator["Broker"]:
        """The broker, started; stopped whatever happens (:attr:`clean` then says how: this context manager only
        guarantees that nothing is left running)."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def log_text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.is_file() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def running_brokers(broker: Broker) -> list[int]:
    """The ids of the processes still running ``broker``'s node (a JVM whose command line names its
    ``server.properties``): empty once it is stopped or killed."""
    props = str(broker.home / "server.properties").encode()
    out = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and props in (proc / "cmdline").read_bytes().split(b"\0"):
                out.append(int(proc.name))
    return out


def javac() -> str | None:
    """The Java compiler beside :func:`java` (a JDK's), else the one on PATH."""
    beside = Path(java() or "java").resolve().with_name("javac")
    return str(beside) if beside.is_file() else shutil.which("javac")


def require_javac() -> str:
    """:func:`javac`, for a live test that compiles a plugin class; skipped (or failed, as :func:`live_clients`
    does) where there is none."""
    found = javac()
    if found is None:
        _skip_or_fail("no javac: a JDK (not only a JRE) compiles the live tests' plugin classes (tests/support/java)")
    return found


def compile_java(sources: Path, out: Path) -> Path:
    """Compile the ``.java`` files under ``sources`` against the broker's jars into ``out`` (a classpath
    directory for :attr:`Broker.extra_classpath`); the compiler's output in the error when it fails."""
    compiler = javac()
    if compiler is None:
        raise BrokerError("no javac: a JDK (not only a JRE) compiles the live tests' plugin classes")
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([compiler, "-cp", classpath(), "-d", str(out), *map(str, sorted(sources.rglob("*.java")))],
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise BrokerError(f"javac failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return out


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False



def live_clients() -> ModuleType:
    """confluent_kafka (its admin module loaded) for a live test, once a broker can run here. Where one cannot, or
    the clients are missing, the test is skipped, or failed where the live tests may not be skipped
    (``REQUIRE_ENV=1``, as `make broker-test` sets it)."""
    reason = unavailable()
    if reason:
        _skip_or_fail(reason)
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:
        _skip_or_fail("confluent-kafka is not installed (a dev dependency: pip install -e '.[dev]')")
    return confluent_kafka


def _skip_or_fail(reason: str) -> NoReturn:
    import pytest  # this module also serves the fixture generator's command line

    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the live-broker tests may not be skipped)", pytrace=False)
    pytest.skip(reason)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll ``condition`` every half second until it holds; an AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


__all__ = ["CLEAN_SHUTDOWN", "JARS", "KAFKA_VERSION", "REQUIRE_ENV", "Broker", "BrokerError", "classpath",
           "compile_java", "free_port", "java", "javac", "live_clients", "require_javac", "run_tool",
           "running_brokers", "unavailable", "wait_for"]


# --------------------------------------------------------------------------------------------------
# Comparing segjobs' output with Kafka's cleaner output
# --------------------------------------------------------------------------------------------------

#: codecs whose compressed bytes depend on the compressor's implementation: Kafka compresses with the JVM's zlib
#: (gzip), snappy-java and zstd-jni, segjobs with cramjam's (Rust) libraries and libzstd (python-zstandard); the
#: records are the same. (lz4 and no codec are not among them: there segjobs writes Kafka's bytes.)
LIBRARY_DEPENDENT_CODECS = frozenset({1, 2, 4})  # gzip, snappy, zstd
_CODEC_BITS = 0x07


def batch_differences(ours: Path, kafka: Path) -> list[str]:
    """Where the batches of two partition dirs differ in a way no codec library explains: a batch that is not
    byte-identical must be a gzip, snappy or zstd batch whose header fields and records are all the same (kafka-python
    reads both). Empty when the two are the same cleaner output."""
    from tests.support.replay import read_partition

    def view(b):  # everything but the compressed payload, its CRC and its length
        return (b.base_offset, b.last_offset, b.attributes, b.delete_horizon_ms, b.max_timestamp, b.producer_id,
                b.producer_epoch, b.base_sequence, b.leader_epoch, b.transactional, b.control,
                tuple((r.offset, r.key, r.value, r.headers, r.timestamp) for r in b.records))

    mine, theirs = read_partition(ours), read_partition(kafka)
    out = []
    if [b.base_offset for b in mine] != [b.base_offset for b in theirs]:
        return [f"batches at {[b.base_offset for b in mine]}, Kafka's at {[b.base_offset for b in theirs]}"]
    for a, b in zip(mine, theirs):
        if view(a) != view(b):
            out.append(f"batch {a.base_offset}: {view(a)} != Kafka's {view(b)}")
        elif a.raw != b.raw and a.attributes & _CODEC_BITS not in LIBRARY_DEPENDENT_CODECS:
            out.append(f"batch {a.base_offset} (codec {a.attributes & _CODEC_BITS}): bytes differ from Kafka's")
    return out


def rebuilt_codecs(source: Path, cleaned: Path) -> dict[int, int]:
    """Per codec, how many batches of ``cleaned`` Kafka rebuilt (records dropped or a horizon stamped) from
    ``source``: what a byte comparison of the two cleaners' output covers."""
    from tests.support.replay import read_partition

    before = {b.base_offset: b for b in read_partition(source)}
    out: dict[int, int] = {}
    for b in read_partition(cleaned):
        s = before[b.base_offset]
        if b.records and b.raw != s.raw:
            out[b.attributes & _CODEC_BITS] = out.get(b.attributes & _CODEC_BITS, 0) + 1
    return out


def segment_file_differences(ours: Path, kafka: Path) -> list[str]:
    """The segment files (``.log``, ``.index``, ``.timeindex``) of two partition dirs that differ although every
    batch of their segment is byte-identical, and every ``.txnindex`` that differs; and names only one has."""
    from tests.support.replay import live_log_files, read_batches

    suffixes = (".log", ".index", ".timeindex", ".txnindex")
    mine = {p.name for p in ours.iterdir() if p.suffix in suffixes}
    theirs = {p.name for p in kafka.iterdir() if p.suffix in suffixes}
    out = [f"only in one of them: {sorted(mine ^ theirs)}"] if mine != theirs else []
    for log in live_log_files(kafka):
        stem = log.name[:-4]
        same_batches = [b.raw for b in read_batches((ours / log.name).read_bytes())] == \
            [b.raw for b in read_batches(log.read_bytes())]
        for suffix in (".log", ".index", ".timeindex", ".txnindex") if same_batches else (".txnindex",):
            name = stem + suffix
            if (kafka / name).exists() and (ours / name).exists() \
                    and (kafka / name).read_bytes() != (ours / name).read_bytes():
                out.append(f"{name} differs from Kafka's")
    return out
