"""segjobs on a real Kafka broker's log dir, and Kafka's own cleaner as the oracle (``make broker-test``).

One module-scoped run (:func:`live`) does what a user does, with Apache Kafka's broker (``tests.support.
live_broker``) and librdkafka's clients (confluent-kafka):

1. **Broker A** (its cleaner and retention thread off) gets a compacted topic written by idempotent producers
   with every codec, tombstones and headers, a committed transaction whose only record a later one supersedes,
   a committed and an aborted transaction, and, in the active segment, one more aborted transaction; and a
   delete-policy topic whose older segments hold records stamped (CreateTime) weeks ago. A consumer group
   commits offsets. Every topic rolls a segment per phase (``segment.ms`` against the producers' timestamps).
   A stops; its shutdown must be clean.
2. **Broker B**, a copy of A's node, runs Kafka's own log cleaner (``min.cleanable.dirty.ratio`` tiny) until the
   compacted partition's cleaner checkpoint reaches its active segment, and stops: the oracle's output.
3. ``segjobs retain`` and ``segjobs compact`` (the command line, in a subprocess) run on A's log dir with
   ``--now`` set to the time of B's clean (its delete horizon minus ``delete.retention.ms``).
4. **Broker A** restarts on segjobs' output: no recovery, invalid-data or index line in its log; read_committed
   and read_uncommitted consumers read exactly what Kafka's rules keep (computed here from what was produced,
   not from either cleaner), at the original offsets; the group's committed offsets are intact.
5. **Broker C**, a copy of segjobs' output with the clean-shutdown file removed and every recovery point at 0,
   recovers every segment: nothing truncated, and the indexes it rebuilds are segjobs' own, byte for byte.
6. Kafka's ``DumpLogSegments`` (``--deep-iteration``, ``--index-sanity-check``, ``--verify-index-only``) reports
   nothing on segjobs' files that it does not report on Kafka's cleaner output.

Brokers run one at a time with a 512 MiB heap and are always stopped (``Broker.running``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.live_broker import (
    CLEAN_SHUTDOWN,
    KAFKA_VERSION,
    ROOT,
    Broker,
    batch_differences,
    live_clients,
    rebuilt_codecs,
    run_tool,
    segment_file_differences,
    wait_for,
)
from tests.support.replay import live_log_files, read_partition

pytestmark = pytest.mark.broker

COMPACTED, EVENTS = "compacted", "events"
GROUP = "app"
MINUTE, DAY = 60_000, 86_400_000
DELETE_RETENTION_MS = DAY
RETENTION_MS = 7 * DAY
#: v2 attribute bits, spelled out here (no constant shared with the code under test)
CODEC_BITS, DELETE_HORIZON_BIT = 0x07, 0x40
#: broker settings of every run: retention never runs by itself (the tests run it), the cleaner only where asked
QUIET = {"log.retention.check.interval.ms": str(DAY), "log.initial.task.delay.ms": str(DAY),
         "log.cleaner.enable": "false"}
ORACLE = {**QUIET, "log.cleaner.enable": "true", "log.cleaner.backoff.ms": "200", "log.cleaner.threads": "1",
          "log.cleaner.dedupe.buffer.size": str(16 << 20), "log.cleaner.io.buffer.size": str(1 << 20)}
TOPIC_CONFIGS = {
    COMPACTED: {"cleanup.policy": "compact", "segment.ms": str(MINUTE), "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": str(DELETE_RETENTION_MS)},
    EVENTS: {"cleanup.policy": "delete", "segment.ms": str(MINUTE), "retention.ms": str(RETENTION_MS)},
}
SEGJOBS_CONFIG = f"""\
[topics."{COMPACTED}"]
"cleanup.policy" = "compact"
"min.cleanable.dirty.ratio" = 0.01
"delete.retention.ms" = {DELETE_RETENTION_MS}

[topics."{EVENTS}"]
"cleanup.policy" = "delete"
"retention.ms" = {RETENTION_MS}
"""
#: lines of a broker's log that say it found something to repair in a log dir (Kafka's LogLoader, LogSegment,
#: LogManager messages)
REPAIR = re.compile(r"Recovering unflushed segment|Recovering \d+ logs|since no clean shutdown|interrupted swap"
                    r"|Recovering file|compacted but has not been deleted|orphaned index|rebuilding index"
                    r"|corrupted index|[Ii]nvalid (messages|offset)|Corruption found|Deleting segments as part of"
                    r"|Deleting all segments|stray|CorruptRecord|InvalidRecord")
#: what DumpLogSegments prints for a problem it finds
DUMP_PROBLEM = re.compile(r"[Mm]ismatch|[Cc]orrupt|[Ee]xception|[Ii]nvalid|non-consecutive|out of order|[Ee]rror")


# --------------------------------------------------------------------------------------------------
# What the producers wrote, and what Kafka's rules keep of it
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    """One record as its producer's delivery report confirmed it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    aborted: bool = False

    def seen(self) -> tuple[Any, ...]:
        return (self.offset, self.key, self.value, self.headers, self.timestamp)


@dataclass
class Written:
    """Everything produced, per topic, and the consumer group's commits."""

    records: dict[str, list[Produced]] = field(default_factory=lambda: {COMPACTED: [], EVENTS: []})
    committed: dict[str, int] = field(default_factory=dict)


def compacted_expectation(records: list[Produced], first_uncleanable: int, *, read_committed: bool) -> list[tuple]:
    """Kafka's rules for a first clean of [0, first_uncleanable): below it the latest non-aborted keyed record of
    each key survives (a tombstone too: its horizon is only stamped) and every aborted record goes; from it on
    everything stays, aborted records included, which only a read_committed consumer skips."""
    latest: dict[bytes, int] = {}
    for r in records:
        if r.offset < first_uncleanable and not r.aborted and r.key is not None:
            latest[r.key] = r.offset
    kept = [r for r in records
            if (r.offset >= first_uncleanable and not (read_committed and r.aborted))
            or (r.offset < first_uncleanable and r.key is not None and latest.get(r.key) == r.offset)]
    return [r.seen() for r in kept]


def retention_expectation(records: list[Produced], segment_bases: list[int], now_ms: int) -> list[tuple]:
    """Kafka's time retention: a segment other than the active one goes when its largest timestamp is older than
    now - retention.ms, and only from the log's start (the first segment it keeps stops it)."""
    bounds = segment_bases[1:] + [1 << 62]
    start = segment_bases[0]
    for base, end in zip(segment_bases[:-1], bounds[:-1]):
        stamps = [r.timestamp for r in records if base <= r.offset < end]
        if stamps and max(stamps) < now_ms - RETENTION_MS:
            start = end
        else:
            break
    return [r.seen() for r in records if r.offset >= start]


# --------------------------------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------------------------------


class Producing:
    """Producers of one broker run; each phase is flushed, so it lands as a batch (or a few) of its own."""

    def __init__(self, ck: Any, broker: Broker, written: Written) -> None:
        self.ck, self.broker, self.written = ck, broker, written

    def producer(self, **conf: Any) -> Any:
        return self.ck.Producer({"bootstrap.servers": self.broker.bootstrap, "enable.idempotence": True,
                                 "linger.ms": 100, "acks": "all", **conf})

    def send(self, producer: Any, topic: str, rows: list[tuple[bytes | None, bytes | None, list, int]], *,
             aborted: bool = False) -> None:
        reports: list[Produced] = []
        errors: list[Any] = []

        def reporter(headers: list) -> Callable[[Any, Any], None]:
            # a delivery report carries no headers: the record's are those it was sent with
            def report(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    reports.append(Produced(msg.offset(), msg.key(), msg.value(), tuple(headers), msg.timestamp()[1],
                                            aborted))
            return report

        for key, value, headers, ts in rows:
            producer.produce(topic, key=key, value=value, headers=headers or None, timestamp=ts,
                             on_delivery=reporter(headers))
        assert producer.flush(60) == 0, "records left unsent"
        assert errors == [], errors
        self.written.records[topic].extend(sorted(reports, key=lambda r: r.offset))


def read_all(ck: Any, broker: Broker, topic: str, isolation: str) -> list[tuple]:
    """Every record of partition 0 from its start, as a consumer with this isolation level reads it."""
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{isolation}-{topic}",
                            "isolation.level": isolation, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        out: list[tuple] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append((msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1]))
        raise AssertionError(f"{topic}: no end of partition within 60 s after {len(out)} records")
    finally:
        consumer.close()


def wait_until_stable(ck: Any, broker: Broker, topic: str) -> None:
    """Until every transaction of ``topic`` has its marker in the log (the last stable offset reaches the high
    watermark): a transaction's coordinator writes its markers after the producer's commit or abort returns,
    and a broker stopped before that writes them itself on its next start, which would give the next broker
    other input than segjobs."""
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"stable-{topic}",
                            "isolation.level": "read_committed"})
    try:
        part = ck.TopicPartition(topic, 0)
        wait_for(lambda: consumer.get_watermark_offsets(part, timeout=10, cached=False)[1]
                  == _high_watermark(ck, broker, topic), f"the markers of {topic}'s transactions")
    finally:
        consumer.close()


def _high_watermark(ck: Any, broker: Broker, topic: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"hw-{topic}",
                            "isolation.level": "read_uncommitted"})
    try:
        return int(consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10, cached=False)[1])
    finally:
        consumer.close()


def committed_offsets(ck: Any, broker: Broker) -> dict[str, int]:
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        parts = consumer.committed([ck.TopicPartition(t, 0) for t in (COMPACTED, EVENTS)], timeout=30)
        return {p.topic: p.offset for p in parts}
    finally:
        consumer.close()


def write_everything(ck: Any, broker: Broker) -> Written:
    """The producers' phases (see the module docstring). Timestamps: the compacted topic's data starts ten days
    back, a minute and more apart per phase (a roll each); markers carry the broker's clock, and the last phase
    is stamped a few minutes ahead (within the broker's one hour) so that it rolls the active segment."""
    admin = ck.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([ck.admin.NewTopic(t, 1, 1, config=c) for t, c in TOPIC_CONFIGS.items()])
    for f in futures.values():
        f.result(60)
    written = Written()
    p = Producing(ck, broker, written)
    wall = int(time.time() * 1000)
    old = wall - 10 * DAY

    def phase(n: int) -> int:
        return old + n * 2 * MINUTE

    def h(*pairs: tuple[str, bytes]) -> list:
        return list(pairs)

    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    plain = {c: p.producer(**{"compression.type": c}) for c in codecs}
    p.send(plain["none"], COMPACTED, [(b"k%d" % i, b"v0-%d" % i, h(("h", b"p0")), phase(0) + i) for i in range(6)])
    pad = b"-compressible" * 20  # librdkafka sends a batch uncompressed when compression does not shrink it
    p.send(plain["gzip"], COMPACTED, [(b"k0", b"v1-0" + pad, h(("h", b"p1")), phase(1)),
                                      (b"k1", b"v1-1" + pad, [], phase(1) + 1),
                                      (b"k6", b"v1-6" + pad, h(("a", b"1"), ("b", b"")), phase(1) + 2),
                                      (b"k2", None, h(("why", b"deleted")), phase(1) + 3),
                                      (b"k7", b"v1-7" + pad, [], phase(1) + 4)])
    p.send(plain["snappy"], COMPACTED, [(b"k3", b"v2-3", [], phase(2)), (b"k6", None, [], phase(2) + 1),
                                        (b"k8", b"x" * 300, h(("h", b"p2")), phase(2) + 2)])
    p.send(plain["lz4"], COMPACTED, [(b"k0", b"v3-0", [], phase(3)), (b"k9", b"v3-9", [], phase(3) + 1),
                                     (b"k10", b"y" * 200, h(("h", b"p3")), phase(3) + 2)])
    p.send(plain["zstd"], COMPACTED, [(b"k4", b"v4-4", [], phase(4)), (b"k11", b"z" * 500, [], phase(4) + 1)])
    tx = p.producer(**{"transactional.id": "tx-compacted", "compression.type": "lz4"})
    tx.init_transactions(60)
    tx.begin_transaction()  # its only record is superseded below: the first clean removes all of its data
    p.send(tx, COMPACTED, [(b"k5", b"tx-superseded", [], phase(5))])
    tx.commit_transaction(60)
    tx.begin_transaction()
    p.send(tx, COMPACTED, [(b"k1", b"tx-committed", h(("tx", b"commit")), phase(5) + 1),
                           (b"k12", b"tx-committed", [], phase(5) + 2)])
    tx.commit_transaction(60)
    tx.begin_transaction()
    p.send(tx, COMPACTED, [(b"k0", b"tx-aborted", [], phase(5) + 3), (b"k13", b"tx-aborted", [], phase(5) + 4)],
           aborted=True)
    tx.abort_transaction(60)
    now = int(time.time() * 1000)
    # supersedes the transaction's only record, and one record of the lz4 and of the zstd batch
    p.send(plain["none"], COMPACTED, [(b"k5", b"v6-5", [], now), (b"k14", None, [], now + 1),
                                      (b"k9", b"v6-9", [], now + 2), (b"k11", b"v6-11", [], now + 3)])
    # the active segment: a record stamped ahead of the broker's clock rolls it; then an aborted transaction
    ahead = int(time.time() * 1000) + 3 * MINUTE
    p.send(plain["gzip"], COMPACTED, [(b"k15", b"active", [], ahead)])
    tx.begin_transaction()
    p.send(tx, COMPACTED, [(b"k15", b"tx-aborted-active", [], ahead + 1)], aborted=True)
    tx.abort_transaction(60)

    # a delete-policy topic: three segments weeks old, two recent ones (the last active)
    for n, (age, codec) in enumerate([(30 * DAY, "none"), (29 * DAY, "gzip"), (28 * DAY, "zstd"),
                                      (2 * 60 * MINUTE, "lz4"), (60 * MINUTE, "none")]):
        stamp = wall - age
        p.send(plain[codec], EVENTS, [(None, b"e%d-%d" % (n, i), [], stamp + i) for i in range(4)])

    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        for commits in ({COMPACTED: 3, EVENTS: 2}, {COMPACTED: 9, EVENTS: 6}):
            consumer.commit(offsets=[ck.TopicPartition(t, 0, o) for t, o in commits.items()], asynchronous=False)
        written.committed = dict(commits)
    finally:
        consumer.close()
    for producer in (*plain.values(), tx):
        producer.flush(30)
    wait_until_stable(ck, broker, COMPACTED)
    return written


def write_more(ck: Any, broker: Broker, written: Written) -> None:
    """More records onto segjobs' output (broker A restarted on it): updates, a tombstone, a committed
    transaction, then a record stamped ahead that rolls a new active segment."""
    p = Producing(ck, broker, written)
    plain = p.producer(**{"compression.type": "none"})
    now = int(time.time() * 1000)
    p.send(plain, COMPACTED, [(b"k0", b"v7-0", [], now), (b"k3", None, [], now + 1), (b"k16", b"v7-16", [], now + 2)])
    tx = p.producer(**{"transactional.id": "tx-compacted"})
    tx.init_transactions(60)
    tx.begin_transaction()
    p.send(tx, COMPACTED, [(b"k17", b"tx-committed-later", [], now + 3)])
    tx.commit_transaction(60)
    p.send(plain, COMPACTED, [(b"k18", b"active-later", [], int(time.time() * 1000) + 10 * MINUTE)])
    for producer in (plain, tx):
        producer.flush(30)
    wait_until_stable(ck, broker, COMPACTED)


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


@dataclass
class Live:
    written: Written  #: everything produced, the records written onto segjobs' output included
    first: dict[str, list[Produced]]  #: what the first producers wrote
    source: Path  #: A's log dir as the producers left it (a copy)
    kafka: Path  #: B's log dir after Kafka's cleaner
    segjobs: Path  #: A's log dir after segjobs (a copy, before A restarted on it)
    now_ms: int  #: segjobs' --now
    restart_log: str
    reads: dict[tuple[str, str], list[tuple]]
    committed: dict[str, int]
    recovered: Path  #: C's log dir after its forced recovery
    recovery_log: str
    second_source: Path  #: segjobs' output with more records (a copy), before its second clean
    second_kafka: Path  #: that, after Kafka's cleaner (broker D)
    second_segjobs: Path  #: that, after segjobs' second compaction at the time of Kafka's
    second_reads: dict[str, list[tuple]]  #: consumers on D, once its cleaner ran over segjobs' files
    second_log: str  #: D's log
    segjobs_output: str
    timings: dict[str, float]


def _copy_node(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=shutil.copy2, ignore=shutil.ignore_patterns("broker-*.out", ".lock"))


def _partition(log_dir: Path, topic: str) -> Path:
    return log_dir / f"{topic}-0"


def _segment_bases(pdir: Path) -> list[int]:
    return [int(p.name[:20]) for p in live_log_files(pdir)]


def _kafka_horizon(pdir: Path) -> int:
    stamped = {b.base_timestamp for b in read_partition(pdir) if b.attributes & DELETE_HORIZON_BIT}
    assert len(stamped) == 1, f"Kafka's clean stamped {sorted(stamped)}: expected one horizon"
    return stamped.pop()


def _cleaner_checkpoint(log_dir: Path) -> dict[str, int]:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()[2:]
    return {f"{t}-{p}": int(o) for t, p, o in (line.split() for line in lines)}


def _segjobs(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, "-m", "jobs", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"segjobs {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _reset_recovery(log_dir: Path) -> None:
    """What a crash leaves for the next start to find: no clean-shutdown file, every recovery point at 0."""
    (log_dir / CLEAN_SHUTDOWN).unlink()
    path = log_dir / "recovery-point-offset-checkpoint"
    lines = path.read_text().splitlines()
    entries = [" ".join(line.split()[:2] + ["0"]) for line in lines[2:]]
    path.write_text("\n".join(lines[:2] + entries) + "\n")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    ck = live_clients()
    root = tmp_path_factory.mktemp("live")
    timings: dict[str, float] = {}
    t0 = time.monotonic()

    # 1. the producers, on broker A
    a = Broker(root / "a", QUIET)
    with a.running():
        written = write_everything(ck, a)
    assert a.clean, f"A did not shut down cleanly (exit {a.returncode}):\n{a.tail()}"
    timings["produce"] = time.monotonic() - t0
    source = root / "source"
    _copy_node(a.home, source)

    # 2. the oracle: Kafka's cleaner on a copy of the same node
    b_home = root / "b"
    _copy_node(a.home, b_home)
    b = Broker(b_home, ORACLE, cluster=a.cluster)
    active_base = _segment_bases(_partition(a.log_dir, COMPACTED))[-1]
    with b.running():
        wait_for(lambda: _cleaner_checkpoint(b.log_dir).get(f"{COMPACTED}-0", 0) >= active_base,
                  "Kafka's cleaner to reach the active segment")
    assert b.clean, f"B did not shut down cleanly (exit {b.returncode}):\n{b.tail()}"
    timings["kafka cleaner"] = time.monotonic() - t0 - sum(timings.values())

    # 3. segjobs on A's log dir, at the time of Kafka's clean
    now_ms = _kafka_horizon(_partition(b.log_dir, COMPACTED)) - DELETE_RETENTION_MS
    config = root / "topics.toml"
    config.write_text(SEGJOBS_CONFIG)
    common = ["--log-dir", str(a.log_dir), "--config", str(config), "--now", str(now_ms)]
    output = _segjobs("retain", *common, "--max-delete-fraction", "1")
    output += _segjobs("compact", *common, "--topic", COMPACTED)
    after = root / "segjobs"
    _copy_node(a.home, after)
    timings["segjobs"] = time.monotonic() - t0 - sum(timings.values())

    # 4. A restarts on segjobs' output
    with a.running():
        reads = {(t, iso): read_all(ck, a, t, iso) for t in (COMPACTED, EVENTS)
                 for iso in ("read_committed", "read_uncommitted")}
        committed = committed_offsets(ck, a)
        restart_log = a.log_text()
        first = {t: list(rs) for t, rs in written.records.items()}
        write_more(ck, a, written)
    assert a.clean, f"A did not shut down cleanly after the restart (exit {a.returncode}):\n{a.tail()}"
    timings["restart"] = time.monotonic() - t0 - sum(timings.values())

    # 4b. Kafka's own cleaner over segjobs' files and the new records (broker D, a copy), then segjobs' second
    # compaction of the same at the time of D's clean
    second_source = root / "second-source"
    _copy_node(a.home, second_source)
    d = Broker(root / "d", ORACLE, cluster=a.cluster)
    _copy_node(a.home, d.home)
    second_active = _segment_bases(_partition(a.log_dir, COMPACTED))[-1]
    with d.running():
        wait_for(lambda: _cleaner_checkpoint(d.log_dir).get(f"{COMPACTED}-0", 0) >= second_active,
                  "Kafka's cleaner to clean segjobs' output up to the new active segment")
        second_reads = {iso: read_all(ck, d, COMPACTED, iso) for iso in ("read_committed", "read_uncommitted")}
    assert d.clean, f"D did not shut down cleanly (exit {d.returncode}):\n{d.tail()}"
    now2 = max(b.delete_horizon_ms or 0 for b in read_partition(_partition(d.log_dir, COMPACTED))) \
        - DELETE_RETENTION_MS
    output += _segjobs("compact", "--log-dir", str(a.log_dir), "--config", str(config), "--now", str(now2),
                       "--topic", COMPACTED)
    timings["second clean"] = time.monotonic() - t0 - sum(timings.values())

    # 5. a forced recovery of segjobs' output
    c_home = root / "c"
    _copy_node(after, c_home)
    c = Broker(c_home, QUIET, cluster=a.cluster)
    _reset_recovery(c.log_dir)
    with c.running():
        pass
    assert c.clean, f"C did not shut down cleanly after its recovery (exit {c.returncode}):\n{c.tail()}"
    timings["recovery"] = time.monotonic() - t0 - sum(timings.values())
    print(f"live broker (Kafka {KAFKA_VERSION}) stages: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    yield Live(written, first, source / "logs", b.log_dir, after / "logs", now_ms, restart_log, reads, committed,
               c.log_dir, c.log_text(), second_source / "logs", d.log_dir, a.log_dir, second_reads, d.log_text(),
               output, timings)


# --------------------------------------------------------------------------------------------------
# The restart on segjobs' output
# --------------------------------------------------------------------------------------------------


def _data_lines(log: str) -> list[str]:
    """The broker's log lines, less those about its KRaft metadata log (kept apart from the data log dir, and
    replayed on every start whatever segjobs did)."""
    return [line for line in log.splitlines() if "__cluster_metadata" not in line]


def test_the_broker_loads_segjobs_output_without_recovery_or_repair(live: Live) -> None:
    lines = _data_lines(live.restart_log)
    assert any("since clean shutdown file was found" in line for line in lines), "the broker did not skip recovery"
    assert [line for line in lines if REPAIR.search(line)] == []
    # nothing the log layer (kafka.log, org.apache.kafka.storage) warns about, but a deprecated setting of ours
    assert [line for line in lines if re.search(r" (WARN|ERROR) .*\((kafka\.log|org\.apache\.kafka\.storage)", line)
            and "is deprecated" not in line] == []


def test_segjobs_did_compact_and_retain(live: Live) -> None:
    # the scenario means something only if segjobs changed both topics
    assert _segment_bases(_partition(live.segjobs, EVENTS))[0] > _segment_bases(_partition(live.source, EVENTS))[0]
    def count(log_dir: Path) -> int:
        return sum(len(b.records) for b in read_partition(_partition(log_dir, COMPACTED)))

    assert count(live.segjobs) < count(live.source)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_consumers_read_what_kafkas_rules_keep_at_the_original_offsets(live: Live, isolation: str) -> None:
    first_uncleanable = _segment_bases(_partition(live.source, COMPACTED))[-1]
    expected = compacted_expectation(live.first[COMPACTED], first_uncleanable,
                                     read_committed=isolation == "read_committed")
    assert live.reads[(COMPACTED, isolation)] == expected
    # the retained topic: whole segments from the new log start on
    events = live.first[EVENTS]
    assert live.reads[(EVENTS, isolation)] == retention_expectation(
        events, _segment_bases(_partition(live.source, EVENTS)), live.now_ms)


def test_read_committed_and_uncommitted_differ_only_by_the_open_range_aborted_records(live: Live) -> None:
    committed = live.reads[(COMPACTED, "read_committed")]
    uncommitted = live.reads[(COMPACTED, "read_uncommitted")]
    extra = [r for r in uncommitted if r not in committed]
    assert [r[2] for r in extra] == [b"tx-aborted-active"]


def test_consumer_group_offsets_are_intact(live: Live) -> None:
    assert live.committed == live.written.committed


# --------------------------------------------------------------------------------------------------
# The oracle: Kafka's own cleaner on the same input, at the same time
# --------------------------------------------------------------------------------------------------


def test_kafkas_cleaner_keeps_the_same_batches_and_records(live: Live) -> None:
    # offsets, keys, values, headers, timestamps, producer fields, delete horizons; the bytes too but for the
    # compressed payload of a batch Kafka rebuilt with gzip, snappy or zstd (the compressor's library decides those)
    assert batch_differences(_partition(live.segjobs, COMPACTED), _partition(live.kafka, COMPACTED)) == []


def test_the_scenario_makes_kafka_rebuild_batches_of_every_codec(live: Live) -> None:
    rebuilt = rebuilt_codecs(_partition(live.source, COMPACTED), _partition(live.kafka, COMPACTED))
    assert sorted(rebuilt) == [0, 1, 2, 3, 4], rebuilt


def test_kafkas_cleaner_stamps_no_marker_in_the_clean_that_removes_its_data(live: Live) -> None:
    # the transaction whose only record is superseded loses it in this clean: its marker stays, unstamped,
    # in Kafka's output as in segjobs'
    for log_dir in (live.kafka, live.segjobs):
        markers = [b for b in read_partition(_partition(log_dir, COMPACTED)) if b.control and b.records]
        assert markers and all(b.delete_horizon_ms is None for b in markers), log_dir


def test_segment_files_are_kafkas_byte_for_byte_where_their_batches_are(live: Live) -> None:
    # every segment whose batches are all Kafka's bytes is Kafka's file, with its offset and time indexes; the
    # transaction indexes always are (the leader-epoch checkpoint differs: broker B became leader again in a new
    # epoch, which is not the cleaner's doing)
    assert segment_file_differences(_partition(live.segjobs, COMPACTED), _partition(live.kafka, COMPACTED)) == []


# --------------------------------------------------------------------------------------------------
# More records, then Kafka's own cleaner over segjobs' files, and both cleaners' second clean
# --------------------------------------------------------------------------------------------------


def test_kafkas_cleaner_cleans_segjobs_output_again_and_consumers_read_kafkas_rules(live: Live) -> None:
    lines = _data_lines(live.second_log)
    assert [line for line in lines if re.search(r" (WARN|ERROR) .*(LogCleaner|Cleaner|kafka\.log|storage)", line)
            and "is deprecated" not in line] == []
    first_uncleanable = _segment_bases(_partition(live.second_source, COMPACTED))[-1]
    for isolation, read in live.second_reads.items():
        assert read == compacted_expectation(live.written.records[COMPACTED], first_uncleanable,
                                             read_committed=isolation == "read_committed"), isolation


def test_the_second_clean_is_kafkas_and_stamps_the_markers_the_first_left(live: Live) -> None:
    ours, kafka = _partition(live.second_segjobs, COMPACTED), _partition(live.second_kafka, COMPACTED)
    assert batch_differences(ours, kafka) == []
    assert segment_file_differences(ours, kafka) == []
    # the markers whose transactions the first clean emptied, unstamped by it, carry a horizon now
    first = {b.base_offset for b in read_partition(_partition(live.kafka, COMPACTED)) if b.control and b.records
             and not b.delete_horizon_ms}
    emptied = {b.base_offset for b in read_partition(kafka) if b.control and b.delete_horizon_ms}
    assert emptied and emptied <= first


# --------------------------------------------------------------------------------------------------
# Forced recovery and DumpLogSegments
# --------------------------------------------------------------------------------------------------


def test_a_forced_recovery_rebuilds_segjobs_own_indexes(live: Live) -> None:
    assert "since no clean shutdown file was found" in live.recovery_log
    assert "Recovering unflushed segment" in live.recovery_log
    damage = [line for line in live.recovery_log.splitlines()
              if re.search(r"Corruption found|[Ii]nvalid (messages|offset)|Deleting segments as part of", line)]
    assert damage == []
    for topic in (COMPACTED, EVENTS):
        ours, recovered = _partition(live.segjobs, topic), _partition(live.recovered, topic)
        for log in live_log_files(ours):
            assert (recovered / log.name).read_bytes() == log.read_bytes(), f"recovery truncated {log}"
            for suffix in (".index", ".timeindex"):
                name = log.name[:-4] + suffix
                assert (recovered / name).read_bytes() == (ours / name).read_bytes(), name


def _dump(*args: str) -> list[str]:
    done = run_tool("kafka.tools.DumpLogSegments", *args)
    assert done.returncode == 0, done.stderr
    return [re.sub(r"/\S+/", "", line) for line in (done.stdout + done.stderr).splitlines()
            if DUMP_PROBLEM.search(line)]


@pytest.mark.parametrize("options", [["--deep-iteration"], ["--index-sanity-check"], ["--verify-index-only"]],
                         ids=lambda o: o[0])
def test_dump_log_segments_finds_nothing_it_does_not_find_on_kafkas_output(live: Live, options: list[str]) -> None:
    def files(log_dir: Path) -> str:
        pdir = _partition(log_dir, COMPACTED)
        pick = (".log",) if options == ["--deep-iteration"] else (".index", ".timeindex")
        return ",".join(str(p) for p in sorted(pdir.iterdir()) if p.suffix in pick)

    ours = _dump(*options, "--files", files(live.segjobs))
    kafka = _dump(*options, "--files", files(live.kafka))
    assert set(ours) <= set(kafka), sorted(set(ours) - set(kafka))
