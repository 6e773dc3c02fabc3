"""A copy to remote storage interrupted by killing the broker, on a real broker, and the fixture it leaves
(``tests/data/kafka-tiered-killed/``).

One KRaft node with tiered storage on, as :mod:`tests.support.tiered_broker` sets it up (LocalTieredStorage under a
``remote`` directory, the copy task every 500 ms), with one difference: LocalTieredStorage copies through
``segjobs.live.HoldingTransferer`` (``tests/support/java/``, compiled against the broker's jars at run time), which
can hold a copy half-way. The topic :data:`TOPIC` (``local.retention.ms=1``, ``retention.ms=-1``) gets
:data:`FINISHED_FIRST` segments copied normally; then the gate file is created, two more batches roll a segment,
and its copy holds; the broker is SIGKILLed while it waits.

Why the kill lands inside the copy every time, with no timing: Kafka's remote log manager publishes the copy's
COPY_SEGMENT_STARTED event and waits until its metadata manager has consumed it back from
``__remote_log_metadata`` before it calls the storage's ``copyLogSegmentData``; LocalTieredStorage writes the
segment's ``.log``, ``.index`` and ``.timeindex`` (and ``.txnindex`` when there is one) through the transferer,
then its ``.leader_epoch_checkpoint`` from a buffer, then its ``.snapshot``. The transferer holds before the
checkpoint and only then names the held copy (the gate's ``.held`` file), so once that file exists the STARTED
event is in the metadata partition's log, the first objects are in the store, and no COPY_SEGMENT_FINISHED can be
written until the gate goes: the kill is taken while nothing can move.

:func:`retry_copy` then starts the node again on the same directories with the gate gone: the copy task copies
the same segment again under a new segment id (Kafka copies from the end of the finished segments), finishes it,
and local retention deletes the local segment; the node is stopped cleanly. Kafka never deletes the dead attempt's
objects (with ``retention.ms=-1`` its expiration task has no reason to touch the dangling segment).

``python -m tests.support.tiered_kill [OUT]`` writes what an offline audit reads of the node as the kill left it
to ``OUT`` (by default :data:`DEFAULT_OUT`). Nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segment_io.errors import CorruptRecordError
from segment_io.remote_metadata import SegmentMetadata, SegmentState, SegmentUpdate, read_metadata_partition
from tests.support.live_broker import KAFKA_VERSION, ROOT, Broker, compile_java, wait_for
from tests.support.tiered_broker import (
    METADATA_TOPIC,
    REMOTE_ROOT,
    ROLL_MS,
    _create_topics,
    _produce,
    broker_settings,
    fixture_command,
)

TOPIC = "crashed"
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.ms": str(ROLL_MS), "local.retention.ms": "1",
                "retention.ms": "-1"}
#: how many segments are copied before the gate closes (so the audit has finished segments not to flag)
FINISHED_FIRST = 2
JAVA_SOURCES = ROOT / "tests" / "support" / "java"
TRANSFERER = "segjobs.live.HoldingTransferer"
#: the system property naming the transferer's gate file
GATE_PROPERTY = "segjobs.hold.gate"
DEFAULT_OUT = ROOT / "tests" / "data" / "kafka-tiered-killed" / f"kafka-{KAFKA_VERSION}"
#: the suffix LocalTieredStorage writes last: a fileset that has it is a copy whose objects are all written
LAST_OBJECT = ".snapshot"


@dataclass
class KilledCopy:
    """The node as :func:`run_until_killed` leaves it (killed), and the copy it killed."""

    broker: Broker
    remote: Path  #: LocalTieredStorage's root (``.../kafka-tiered-storage``)
    held: Path  #: the object the held copy was about to write (its leader-epoch checkpoint)
    produced: int  #: records produced, offsets 0 to produced - 1

    @property
    def stem(self) -> str:
        """``<start offset, 20 digits>-<segment id>``: the name of the held copy's objects, less the suffix."""
        return self.held.name.split(".", 1)[0]

    @property
    def start_offset(self) -> int:
        return int(self.stem.split("-", 1)[0])

    @property
    def segment_id(self) -> str:
        return self.stem.split("-", 1)[1]

    def objects(self) -> list[Path]:
        """The objects the dead attempt left in the remote store."""
        return sorted(self.held.parent.glob(f"{self.stem}.*"))

    def partition_dir(self) -> Path:
        return self.broker.log_dir / f"{TOPIC}-0"


def complete_copies(remote: Path) -> list[str]:
    """The stems of :data:`TOPIC`'s remote segments whose objects are all written."""
    return sorted(p.name[:-len(LAST_OBJECT)] for p in remote.glob(f"{TOPIC}-0-*/*{LAST_OBJECT}"))


def finished_ids(broker: Broker) -> set[str]:
    """The segment ids with a COPY_SEGMENT_FINISHED event in the node's metadata partition (read while it may be
    written: a batch cut short at the end is not read yet)."""
    with contextlib.suppress(CorruptRecordError, FileNotFoundError):
        return {m.segment_id for _, m in read_metadata_partition(str(broker.log_dir / f"{METADATA_TOPIC}-0"))
                if isinstance(m, SegmentUpdate) and m.state == SegmentState.COPY_SEGMENT_FINISHED}
    return set()


def started_segments(broker: Broker) -> dict[str, SegmentMetadata]:
    """Each segment's COPY_SEGMENT_STARTED event in the node's metadata partition, by segment id."""
    return {m.segment_id: m for _, m in read_metadata_partition(str(broker.log_dir / f"{METADATA_TOPIC}-0"))
            if isinstance(m, SegmentMetadata)}


def run_until_killed(home: Path, ck: Any) -> KilledCopy:
    """Copy :data:`FINISHED_FIRST` segments, hold the next copy, SIGKILL the node (see the module docstring)."""
    classes = compile_java(JAVA_SOURCES, home / "classes")
    remote_dir, gate = home / "remote", home / "hold-copies"
    held_name = Path(f"{gate}.held")
    broker = Broker(home / "node", {**broker_settings(remote_dir), "rsm.config.transferer.class": TRANSFERER},
                    extra_classpath=(classes,), jvm_options=(f"-D{GATE_PROPERTY}={gate}",))
    remote = remote_dir / REMOTE_ROOT
    with broker.running():
        try:
            _create_topics(ck, broker, {TOPIC: TOPIC_CONFIG})
            # each batch rolls the segment before it: FINISHED_FIRST + 1 batches seal FINISHED_FIRST segments
            produced = _produce(ck, broker, TOPIC, FINISHED_FIRST + 1, 0)
            wait_for(lambda: len(complete_copies(remote)) >= FINISHED_FIRST, f"{FINISHED_FIRST} segments copied")
            gate.touch()
            produced += _produce(ck, broker, TOPIC, 2, produced)
            wait_for(held_name.is_file, "a copy held by the transferer", timeout=180)
            broker.kill()
        finally:
            gate.unlink(missing_ok=True)  # where the run failed, a held copy lets go: the stop is not stuck on it
    return KilledCopy(broker, remote, Path(held_name.read_text()), produced)


def retry_copy(killed: KilledCopy) -> str:
    """Start the node again (the gate gone), wait until it has copied the killed copy's segment again (and the
    closed segments after it), finished those copies and deleted the segments locally, and stop it cleanly; the
    new copy's stem."""
    broker = killed.broker

    def retried() -> str | None:
        done = finished_ids(broker)
        return next((s for s in complete_copies(killed.remote) if s.split("-", 1)[1] in done
                     and int(s.split("-", 1)[0]) == killed.start_offset and s != killed.stem), None)

    def settled() -> bool:
        # The killed copy's segment is not the last one to copy: the segments after it are copied next. A stop
        # before they are would cut a copy short and leave a second dangling start. Settled: every segment but
        # the active one copied and deleted locally (local.retention.ms=1), and no copy in flight (none starts
        # after that: no record is produced after the restart).
        if len(list(killed.partition_dir().glob("*.log"))) != 1:
            return False
        with contextlib.suppress(CorruptRecordError, FileNotFoundError):
            return not set(started_segments(broker)) - finished_ids(broker) - {killed.segment_id}
        return False  # read while a batch was being written: look again

    with broker.running():
        wait_for(lambda: retried() is not None and settled(),
                 "the killed copy's segment copied again, every later closed segment copied, and nothing but the "
                 "active segment left locally", timeout=180)
        stem = retried()
    assert broker.clean, f"the stop after the retry was not clean:\n{broker.tail()}"
    assert stem is not None
    return stem


_LOG_DIR_FILES = ("log-start-offset-checkpoint", "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                  "meta.properties")
#: what an offline audit reads of a partition dir: its segments' data, its topic id and leader epochs (the
#: indexes of an active segment are preallocated to megabytes, and are not read)
_PARTITION_FILES = ("*.log", "partition.metadata", "leader-epoch-checkpoint")


def copy_fixture(killed: KilledCopy, out: Path) -> None:
    """What an offline audit reads of the killed node, from ``killed`` into ``out`` (replaced): ``logs/`` (the
    checkpoints the broker had written, the metadata partition and the topic's partition: segments' ``.log``,
    ``partition.metadata``, ``leader-epoch-checkpoint``), ``remote/`` (LocalTieredStorage's tree) and
    ``killed.json`` (the topic's config, the records produced and the killed copy)."""
    if out.exists():
        shutil.rmtree(out)
    logs = out / "logs"
    logs.mkdir(parents=True)
    for name in _LOG_DIR_FILES:
        if (killed.broker.log_dir / name).is_file():
            shutil.copy2(killed.broker.log_dir / name, logs / name)
    for name in (f"{METADATA_TOPIC}-0", f"{TOPIC}-0"):
        (logs / name).mkdir()
        for pattern in _PARTITION_FILES:
            for path in (killed.broker.log_dir / name).glob(pattern):
                shutil.copy2(path, logs / name / path.name)
    shutil.copytree(killed.remote, out / "remote" / REMOTE_ROOT)
    facts = {"topic": TOPIC, "config": TOPIC_CONFIG, "produced": killed.produced,
             "killed_copy": {"segment_id": killed.segment_id, "start_offset": killed.start_offset,
                             "objects": [p.name for p in killed.objects()]}}
    (out / "killed.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    """``python -m tests.support.tiered_kill [OUT]``: run the kill in a temporary dir, write the fixture."""
    return fixture_command(argv, DEFAULT_OUT, "segjobs-tiered-kill-",
                           lambda scratch, ck, out: copy_fixture(run_until_killed(scratch, ck), out))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
