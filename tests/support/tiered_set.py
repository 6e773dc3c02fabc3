"""A generated tiered log dir, remote store and ``__remote_log_metadata`` of many partitions, for the tiered audit's
tests and benchmark: the metadata values are Kafka's encoding (:mod:`tests.support.remote_metadata`), written as
real segments (:func:`tests.support.builders.write_log`), one metadata partition per user partition as Kafka
routes them, their events interleaved in each metadata partition as the brokers' copies would interleave them.

Per user partition: ``segments`` finished remote segments of ``SEGMENT_OFFSETS`` offsets each, from offset 0, and
a local tail after them. Some partitions (chosen by number, so each kind recurs across topics and metadata
partitions) carry what the audit finds: a dangling copy with its objects, a segment deleted whose objects stayed,
a delete stalled in DELETE_SEGMENT_STARTED, an event Kafka drops, a finished segment's ``.log`` object missing,
local segments gone below the log end (a gap), a partition whose topic was deleted (delete marker finished).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from segment_io.checkpoint import write_leader_epoch_checkpoint, write_offset_checkpoint
from segment_io.remote_metadata import METADATA_TOPIC
from segment_io.storage import open_storage
from tests.support import remote_metadata as rm
from tests.support.builders import LogBuilder, rec, records_table, write_log

#: offsets of each remote segment
SEGMENT_OFFSETS = 10
#: bytes the metadata records for each remote segment (and its ``.log`` object holds)
SEGMENT_BYTES = 64
STARTED, FINISHED, DELETE_STARTED, DELETE_FINISHED = 0, 1, 2, 3
PARTITION_DELETE_FINISHED = 2
#: the segment metadata's tagged field saying the segment has no transaction index
NO_TXN_INDEX = {0: b"\x01"}
#: what LocalTieredStorage writes for a segment with no transaction index
SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")


@dataclass(frozen=True)
class TieredSet:
    """Where the generated set is, and its shape."""

    log_dir: Path
    remote: Path
    partitions: int
    metadata_partitions: int
    events: int


def kafka_id(*parts: object) -> str:
    """A stable Kafka Uuid (URL-safe base64 of 16 bytes, no padding) from ``parts``."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _events(topic: str, tid: str, p: int, n: int, segments: int) -> list[bytes]:
    """The metadata values of one user partition, in the order its leader wrote them."""
    out: list[bytes] = []
    for s in range(segments):
        seg = kafka_id(topic, p, s)
        start = s * SEGMENT_OFFSETS
        out += [rm.segment_value(topic, tid, p, seg, start, start + SEGMENT_OFFSETS - 1, size=SEGMENT_BYTES,
                                 event_ts=1_000 + s, tagged=NO_TXN_INDEX),
                rm.update_value(topic, tid, p, seg, FINISHED, event_ts=1_001 + s)]
    extra = kafka_id(topic, p, "extra")
    end = segments * SEGMENT_OFFSETS
    if n % 7 == 1:  # a copy that never finished
        out.append(rm.segment_value(topic, tid, p, extra, end, end + 4, size=SEGMENT_BYTES, tagged=NO_TXN_INDEX))
    elif n % 7 == 2:  # a segment deleted (its objects stay behind: an orphan)
        out += [rm.segment_value(topic, tid, p, extra, end, end + 4, size=SEGMENT_BYTES, tagged=NO_TXN_INDEX),
                rm.update_value(topic, tid, p, extra, DELETE_STARTED), rm.update_value(topic, tid, p, extra,
                                                                                       DELETE_FINISHED)]
    elif n % 7 == 3:  # a delete stalled, and an update Kafka drops (back to finished)
        out += [rm.segment_value(topic, tid, p, extra, end, end + 4, size=SEGMENT_BYTES, tagged=NO_TXN_INDEX),
                rm.update_value(topic, tid, p, extra, DELETE_STARTED),
                rm.update_value(topic, tid, p, extra, FINISHED)]
    return out


def generate_tiered_set(out: Path, *, topics: int = 4, partitions: int = 50, metadata_partitions: int = 5,
                        segments: int = 2, local_records: int = 5) -> TieredSet:
    """Write ``out/logs`` (a broker's log dir with ``metadata_partitions`` metadata partitions) and ``out/remote``
    (LocalTieredStorage) for ``topics`` topics of ``partitions`` partitions each (see the module docstring)."""
    logs, remote = out / "logs", out / "remote" / "kafka-tiered-storage"
    logs.mkdir(parents=True)
    remote.mkdir(parents=True)
    store = open_storage(str(logs))
    per_meta: list[list[list[bytes]]] = [[] for _ in range(metadata_partitions)]
    starts: dict[tuple[str, int], int] = {}
    n = 0
    for t in range(topics):
        topic = f"topic{t}"
        tid = kafka_id(topic)
        for p in range(partitions):
            n += 1
            events = _events(topic, tid, p, n, segments)
            deleted_topic = n % 11 == 5
            if deleted_topic:
                events.append(rm.delete_value(topic, tid, p, PARTITION_DELETE_FINISHED))
            # Kafka's routing: every event of a user partition goes to one metadata partition
            per_meta[int(hashlib.md5(f"{tid}:{p}".encode()).hexdigest(), 16) % metadata_partitions].append(events)
            _remote_objects(remote, topic, tid, p, n, segments)
            if deleted_topic:
                continue  # its log dir partition is gone with the topic
            pdir = logs / f"{topic}-{p}"
            end = segments * SEGMENT_OFFSETS
            first_local = end + 3 if n % 13 == 4 else end  # local segments gone below the remote end: a gap
            log = LogBuilder(topic, p, start_offset=first_local)
            for i in range(local_records):
                log.batch([rec(f"k{i}", f"v{i}")])
            write_log(log.table(), pdir)
            (pdir / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}\n")
            write_leader_epoch_checkpoint(store, str(pdir / "leader-epoch-checkpoint"), [(0, 0)])
            starts[(topic, p)] = 0
    write_offset_checkpoint(store, str(logs / "log-start-offset-checkpoint"), starts)
    total = 0
    for m, groups in enumerate(per_meta):
        values = _interleaved(groups)
        total += len(values)
        mdir = logs / f"{METADATA_TOPIC}-{m}"
        if values:
            write_log(records_table([(None, v) for v in values]), mdir)
        else:
            mdir.mkdir()
        (mdir / "partition.metadata").write_text(f"version: 0\ntopic_id: {kafka_id('metadata')}\n")
    return TieredSet(logs, out / "remote", topics * partitions, metadata_partitions, total)


def _interleaved(groups: list[list[bytes]]) -> list[bytes]:
    """The partitions' events round robin: each partition's in its own order."""
    out: list[bytes] = []
    longest = max((len(g) for g in groups), default=0)
    for i in range(longest):
        out += [g[i] for g in groups if i < len(g)]
    return out


def _remote_objects(remote: Path, topic: str, tid: str, p: int, n: int, segments: int) -> None:
    pdir = remote / f"{topic}-{p}-{tid}"
    pdir.mkdir()
    names = [(s * SEGMENT_OFFSETS, kafka_id(topic, p, s)) for s in range(segments)]
    if n % 7 in (1, 2, 3):  # the extra segment's objects: a dangling copy's, a deleted one's, a stalled delete's
        names.append((segments * SEGMENT_OFFSETS, kafka_id(topic, p, "extra")))
    for start, seg in names:
        for suffix in SUFFIXES:
            if n % 17 == 6 and suffix == ".log" and start == 0:
                continue  # a finished segment's .log missing: data loss
            (pdir / f"{start:020d}-{seg}{suffix}").write_bytes(b"x" * SEGMENT_BYTES if suffix == ".log" else b"")


__all__ = ["TieredSet", "generate_tiered_set", "kafka_id"]
