"""Topic ids and names: a partition dir's ``partition.metadata`` and a user's ``--topic-ids`` file.

Kafka names a topic by id in the remote log metadata and in its remote store; the log dir ties ids to names
in each partition dir's ``partition.metadata`` (Kafka's ``PartitionMetadataFile``: the line ``version: 0``, then
``topic_id: <id>``). Where the log dir has no partition of a topic (its partitions live on other brokers, or a
copy left them out), a ``--topic-ids`` file says it: one topic a line, ``<topic> <topic id>`` (blank lines and
``#`` comments ignored), or what ``kafka-topics.sh --describe`` prints (its ``Topic: <name> TopicId: <id> ...``
lines; its partition lines are skipped).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping

from segment_io.errors import CorruptCheckpointError, NotFoundError

if TYPE_CHECKING:
    from segment_io.storage.base import Storage

#: the only version of partition.metadata Kafka writes
PARTITION_METADATA_VERSION = 0
_UUID = r"[A-Za-z0-9_-]{22}"
_VERSION_LINE = re.compile(r"version: (\d+)")
_TOPIC_ID_LINE = re.compile(rf"topic_id: ({_UUID})")
_DESCRIBE_LINE = re.compile(rf"\s*Topic:\s*(\S+)\s+TopicId:\s*({_UUID})\b")
_PAIR_LINE = re.compile(rf"\s*(\S+)\s+({_UUID})\s*")


def parse_partition_metadata(text: str, *, path: str | None = None) -> str:
    """The topic id a ``partition.metadata`` file holds."""
    lines = text.splitlines()
    version = _VERSION_LINE.fullmatch(lines[0].strip()) if lines else None
    if version is None:
        raise CorruptCheckpointError("the first line is not 'version: <n>'", path=path, line=1)
    if int(version.group(1)) != PARTITION_METADATA_VERSION:
        raise CorruptCheckpointError(f"version {version.group(1)}: Kafka writes only version "
                                     f"{PARTITION_METADATA_VERSION}", path=path, line=1)
    topic_id = _TOPIC_ID_LINE.fullmatch(lines[1].strip()) if len(lines) > 1 else None
    if topic_id is None:
        raise CorruptCheckpointError("the second line is not 'topic_id: <22-character id>'", path=path, line=2)
    return topic_id.group(1)


def read_partition_metadata(storage: "Storage", uri: str) -> str | None:
    """The topic id of the ``partition.metadata`` at ``uri``; None when there is none."""
    try:
        data = storage.read(uri)
    except NotFoundError:
        return None
    try:
        return parse_partition_metadata(data.decode("utf-8"), path=uri)
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"not UTF-8 text (byte {exc.start})", path=uri) from None


def parse_topic_ids_file(text: str, *, path: str | None = None) -> dict[str, str]:
    """A ``--topic-ids`` file: topic id -> topic name. Two names for one id are refused (naming the line)."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.split("#", 1)[0].strip()
        if not stripped:
            continue
        m = _DESCRIBE_LINE.match(line) or _PAIR_LINE.fullmatch(stripped)
        if m is None and stripped.startswith("Topic:") and "TopicId:" not in stripped:
            continue  # a partition line of kafka-topics.sh --describe
        if m is None:
            raise CorruptCheckpointError("not '<topic> <topic id>' nor a 'Topic: <name> TopicId: <id>' line",
                                         path=path, line=number)
        topic, topic_id = m.group(1), m.group(2)
        if out.get(topic_id, topic) != topic:
            raise CorruptCheckpointError(f"topic id {topic_id} is already {out[topic_id]!r}", path=path,
                                         line=number)
        out[topic_id] = topic
    return out


def merge_topic_ids(*sources: Mapping[str, str]) -> dict[str, str]:
    """Topic id -> name from several sources, the earlier winning where two name one id differently."""
    out: dict[str, str] = {}
    for source in sources:
        for topic_id, topic in source.items():
            out.setdefault(topic_id, topic)
    return out
