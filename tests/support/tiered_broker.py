"""A real broker with tiered storage on, and the fixtures it leaves (``tests/data/kafka-tiered/``).

:func:`run_tiered` starts one KRaft node (``tests.support.live_broker``) with ``remote.log.storage.system.enable``
and Kafka's own ``LocalTieredStorage`` (the RemoteStorageManager of Kafka's tests, from the kafka-storage test
jar) as its remote store, a directory next to the log dir. librdkafka's producers write three topics whose
segments roll every :data:`ROLL_MS` (the producer waits that long between batches):

- ``kept``: ``local.retention.ms=1``: every sealed segment is copied to the remote store, then deleted locally;
  the broker restarts in the middle, so the partition's leader epoch moves on and the later remote segments carry
  the new epoch;
- ``expiring``: the same, with ``retention.bytes`` a few segments' worth: remote retention deletes the oldest
  remote segments (DELETE_SEGMENT_STARTED, then DELETE_SEGMENT_FINISHED);
- ``dropped``: tiered, then deleted: its remote segments and the partition go (partition delete markers).

It waits until the remote store shows each of these, stops the broker (a clean shutdown) and, with
``python -m tests.support.tiered_broker [OUT]``, copies what an offline audit reads into ``OUT`` (by default
``tests/data/kafka-tiered/kafka-<version>/``): the log dir (the ``__remote_log_metadata`` partition, the user
partitions with ``partition.metadata``, their checkpoints), the remote store's tree, the topic configs and
Kafka's own reading of the metadata records (its RemoteLogMetadataFormatter, through its console consumer), the
oracle the decoder is tested against. Nothing is left running.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tests.support.live_broker import KAFKA_VERSION, ROOT, Broker, run_tool, unavailable, wait_for

KEPT, EXPIRING, DROPPED = "kept", "expiring", "dropped"
METADATA_TOPIC = "__remote_log_metadata"
#: how often a partition's segment rolls (segment.ms); the producer waits a little longer between batches
ROLL_MS = 300
BATCHES, RECORDS_PER_BATCH, VALUE_BYTES = 6, 20, 60
#: the class Kafka's tests use as their remote store (kafka-storage's test jar)
LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
#: Kafka's own reader of the metadata records, for its console consumer
METADATA_FORMATTER = ("org.apache.kafka.server.log.remote.metadata.storage.serialization."
                      "RemoteLogMetadataSerde$RemoteLogMetadataFormatter")
#: the directory LocalTieredStorage makes under its configured ``dir``
REMOTE_ROOT = "kafka-tiered-storage"
DEFAULT_OUT = ROOT / "tests" / "data" / "kafka-tiered" / f"kafka-{KAFKA_VERSION}"
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    KEPT: {"remote.storage.enable": "true", "segment.ms": str(ROLL_MS), "local.retention.ms": "1",
           "retention.ms": "-1"},
    EXPIRING: {"remote.storage.enable": "true", "segment.ms": str(ROLL_MS), "local.retention.ms": "1",
               "retention.ms": "-1", "retention.bytes": "6000"},
    DROPPED: {"remote.storage.enable": "true", "segment.ms": str(ROLL_MS), "local.retention.ms": "1",
              "retention.ms": "-1"},
}


def broker_settings(remote: Path) -> dict[str, str]:
    """``server.properties`` lines that turn tiered storage on, with LocalTieredStorage under ``remote``, and make
    its tasks (copy, expiration, local retention) run every second or so."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
        "rsm.config.dir": str(remote), "rsm.config.delete.on.close": "false",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "500",
        "log.segment.delete.delay.ms": "0", "file.delete.delay.ms": "0",
    }


@dataclass
class TieredRun:
    """What :func:`run_tiered` leaves: the stopped node, its remote store and Kafka's reading of the metadata."""

    broker: Broker
    remote: Path  #: LocalTieredStorage's root (``.../kafka-tiered-storage``)
    kafka_metadata: list[str]  #: one line per ``__remote_log_metadata`` record, RemoteLogMetadataFormatter's
    produced: dict[str, int]  #: records produced per topic


def produced_record(topic: str, n: int) -> tuple[bytes, bytes]:
    """The key and value of the ``n``-th record produced to ``topic`` (one partition, so also its offset)."""
    return f"k{n % 7}".encode(), f"{topic}-{n:06d}".encode().ljust(VALUE_BYTES, b".")


def _producer(ck: Any, broker: Broker) -> Any:
    return ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "enable.idempotence": True})


def _produce(ck: Any, broker: Broker, topic: str, batches: int, first: int) -> int:
    """``batches`` flushed batches, each waiting out :data:`ROLL_MS` first so the next append rolls a segment."""
    producer = _producer(ck, broker)
    n = first
    for _ in range(batches):
        time.sleep(ROLL_MS * 1.5 / 1000)
        for _ in range(RECORDS_PER_BATCH):
            key, value = produced_record(topic, n)
            producer.produce(topic, key=key, value=value)
            n += 1
        assert producer.flush(30) == 0, f"{topic}: records not delivered"
    return n - first


def _remote_segments(remote: Path, topic: str) -> list[Path]:
    return sorted(remote.glob(f"{topic}-0-*/*.log")) if remote.is_dir() else []


def _local_logs(broker: Broker, topic: str) -> list[Path]:
    return sorted((broker.log_dir / f"{topic}-0").glob("*.log"))


def _create_topics(ck: Any, broker: Broker, configs: Mapping[str, Mapping[str, str]]) -> None:
    admin = ck.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([ck.admin.NewTopic(t, 1, 1, config=dict(c)) for t, c in configs.items()],
                                      operation_timeout=30).values():
        future.result()


def _delete_topic(ck: Any, broker: Broker, topic: str) -> None:
    admin = ck.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result()


#: How long Kafka's console consumer waits for a first or next record before it exits. Its group join and first
#: fetch take seconds on a loaded machine (8 s read nothing at a load of 19).
CONSUMER_IDLE_MS = 20_000


def read_metadata_with_kafka(broker: Broker, *, required: bool = True) -> list[str]:
    """Every record of ``__remote_log_metadata`` as Kafka's own RemoteLogMetadataFormatter prints it (the
    broker running). ``required``: reading nothing is an error (else an empty list, for a condition polled
    until it holds)."""
    done = run_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", broker.bootstrap,
                    "--topic", METADATA_TOPIC, "--from-beginning", "--timeout-ms", str(CONSUMER_IDLE_MS),
                    "--formatter", METADATA_FORMATTER)
    lines = [line for line in done.stdout.splitlines() if line.startswith("partition:")]
    assert lines or not required, f"the console consumer read nothing ({done.returncode}):\n{done.stderr[-3000:]}"
    return lines


def run_tiered(home: Path, ck: Any) -> TieredRun:
    """The scenario of this module's docstring, in ``home``; the broker stopped when it returns."""
    remote_dir = home / "remote"
    broker = Broker(home / "node", broker_settings(remote_dir))
    remote = remote_dir / REMOTE_ROOT
    produced = dict.fromkeys(TOPIC_CONFIGS, 0)
    with broker.running():
        _create_topics(ck, broker, TOPIC_CONFIGS)
        for topic in TOPIC_CONFIGS:
            produced[topic] += _produce(ck, broker, topic, BATCHES // 2, produced[topic])
        wait_for(lambda: all(len(_remote_segments(remote, t)) >= BATCHES // 2 - 1 for t in TOPIC_CONFIGS),
                  "the first segments in remote storage")
    assert broker.clean, f"the first stop was not clean:\n{broker.tail()}"
    with broker.running():
        for topic in (KEPT, EXPIRING):
            produced[topic] += _produce(ck, broker, topic, BATCHES - BATCHES // 2, produced[topic])
        wait_for(lambda: len(_remote_segments(remote, KEPT)) >= BATCHES - 1
                  and len(_local_logs(broker, KEPT)) == 1, f"{KEPT}: sealed segments remote, one local")
        wait_for(lambda: "DELETE_SEGMENT_FINISHED" in " ".join(read_metadata_with_kafka(broker, required=False)),
                  f"{EXPIRING}: remote retention deleting segments", timeout=180)
        _delete_topic(ck, broker, DROPPED)
        wait_for(lambda: not _remote_segments(remote, DROPPED) and not _local_logs(broker, DROPPED),
                  f"{DROPPED}: its remote segments and log gone")
        time.sleep(2)  # the last metadata events of the delete
        kafka_metadata = read_metadata_with_kafka(broker)
    assert broker.clean, f"the last stop was not clean:\n{broker.tail()}"
    return TieredRun(broker, remote, kafka_metadata, produced)


_LOG_DIR_FILES = ("log-start-offset-checkpoint", "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                  "meta.properties")


def copy_fixtures(run: TieredRun, out: Path) -> None:
    """What an offline audit reads, from ``run`` into ``out`` (replaced): ``logs/`` (checkpoints, the metadata
    partition and the user partitions), ``remote/`` (LocalTieredStorage's tree), ``topics.json`` (the configs
    the topics were created with), ``kafka-metadata.txt`` (Kafka's reading of the metadata records) and
    ``produced.json`` (records produced per topic)."""
    if out.exists():
        shutil.rmtree(out)
    logs = out / "logs"
    logs.mkdir(parents=True)
    for name in _LOG_DIR_FILES:
        if (run.broker.log_dir / name).is_file():
            shutil.copy2(run.broker.log_dir / name, logs / name)
    for pdir in sorted(run.broker.log_dir.iterdir()):
        if pdir.is_dir() and (pdir.name.startswith(METADATA_TOPIC) or pdir.name.rsplit("-", 1)[0] in TOPIC_CONFIGS):
            shutil.copytree(pdir, logs / pdir.name)
    shutil.copytree(run.remote, out / "remote" / REMOTE_ROOT)
    (out / "topics.json").write_text(json.dumps(TOPIC_CONFIGS, indent=2, sort_keys=True) + "\n")
    (out / "produced.json").write_text(json.dumps(run.produced, indent=2, sort_keys=True) + "\n")
    (out / "kafka-metadata.txt").write_text("".join(line + "\n" for line in run.kafka_metadata))


def fixture_command(argv: list[str], default_out: Path, scratch_prefix: str,
                    write: Callable[[Path, Any, Path], None]) -> int:
    """The body of a fixture generator's ``main``: ``write(scratch, confluent_kafka, out)`` runs its broker scenario in
    a temporary dir and writes the fixture to ``out`` (the first argument, else ``default_out``); exit 2 (and why)
    where no broker can run here."""
    import tempfile

    reason = unavailable()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    import confluent_kafka as ck
    import confluent_kafka.admin  # (ck.admin)

    out = Path(argv[0]) if argv else default_out
    with tempfile.TemporaryDirectory(prefix=scratch_prefix) as tmp:
        write(Path(tmp), ck, out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: {size:,} bytes")
    return 0


def main(argv: list[str]) -> int:
    """``python -m tests.support.tiered_broker [OUT]``: run the scenario in a temporary dir, write the fixtures."""
    return fixture_command(argv, DEFAULT_OUT, "segjobs-tiered-",
                           lambda scratch, ck, out: copy_fixtures(run_tiered(scratch, ck), out))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
