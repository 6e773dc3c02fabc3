"""The records of ``__remote_log_metadata``: what Kafka's topic-based remote log metadata manager (KIP-405) writes
about each remote segment and each partition being deleted.

Each record's value (its key is null) is one message of Kafka's generated-message format, framed like its
metadata records: an unsigned varint frame version (always 1), an unsigned varint type (``apiKey``), an unsigned
varint message version (always 0), then the message in the "flexible" encoding (compact strings, arrays and
bytes whose lengths are unsigned varints of length + 1, 0 meaning null; 16-byte UUIDs; big-endian integers; a
block of tagged fields closing every struct). Four types exist:

- 0, a remote segment's metadata (:class:`SegmentMetadata`): written when a copy starts (COPY_SEGMENT_STARTED);
- 1, an update of one (:class:`SegmentUpdate`): the copy finished, a delete started or finished;
- 2, a partition delete marker (:class:`PartitionDelete`);
- 3, a segment snapshot (:class:`SegmentSnapshot`): Kafka's snapshot files use it; the topic does not.

Segment and topic ids print as Kafka prints its ``Uuid``: the 16 bytes in URL-safe base64 without padding.
:func:`decode_metadata_value` decodes one value; :func:`read_metadata_partition` every record of a
``__remote_log_metadata-N`` directory, through the project's segment decoder. A malformed value raises
:class:`RemoteMetadataError`, naming the file, the record's offset and the byte of the value that failed.
"""

from __future__ import annotations

import base64
import enum
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from segment_io.errors import CorruptRecordError

if TYPE_CHECKING:
    from segment_io.storage.base import Storage

#: the internal topic of Kafka's default (topic-based) remote log metadata manager
METADATA_TOPIC = "__remote_log_metadata"
#: the frame version of every value Kafka writes (0 was KRaft's 2.8 preview, which this topic never used)
FRAME_VERSION = 1
#: the only version of each message type
MESSAGE_VERSION = 0


class RemoteMetadataError(CorruptRecordError):
    """A ``__remote_log_metadata`` record's value is not a metadata message Kafka writes."""


class SegmentState(enum.IntEnum):
    """A remote segment's state (the byte Kafka writes is the value)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(enum.IntEnum):
    """A partition delete marker's state."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


@dataclass(frozen=True, order=True)
class TopicIdPartition:
    """A user partition as the metadata names it: topic id, topic name (as it was when written), partition."""

    topic_id: str
    partition: int
    topic: str

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} ({self.topic_id})"


@dataclass(frozen=True)
class SegmentMetadata:
    """Type 0: a remote segment as its copy starts (``state`` is COPY_SEGMENT_STARTED when Kafka writes it).
    ``leader_epochs`` maps each leader epoch of the segment to the offset it starts at, in epoch order."""

    partition: TopicIdPartition
    segment_id: str
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]
    size_bytes: int
    custom_metadata: bytes | None
    state: SegmentState
    #: whether the segment has no transaction index (a tagged field since Kafka 4.0; False when absent)
    txn_index_empty: bool = False


@dataclass(frozen=True)
class SegmentUpdate:
    """Type 1: a remote segment moves to ``state``."""

    partition: TopicIdPartition
    segment_id: str
    broker_id: int
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: SegmentState


@dataclass(frozen=True)
class PartitionDelete:
    """Type 2: a partition's remote data is marked for deletion, being deleted or deleted."""

    partition: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: PartitionDeleteState


@dataclass(frozen=True)
class SegmentSnapshot:
    """Type 3: one segment of a metadata snapshot file (no partition: the file is per partition)."""

    segment_id: str
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]
    size_bytes: int
    custom_metadata: bytes | None
    state: SegmentState
    txn_index_empty: bool = False


RemoteLogMetadata = SegmentMetadata | SegmentUpdate | PartitionDelete | SegmentSnapshot


def uuid_text(raw: bytes) -> str:
    """Kafka's text form of a 16-byte Uuid (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a Uuid in Kafka's text form (the inverse of :func:`uuid_text`)."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return raw


class _Malformed(Exception):
    """Raised by :class:`_Reader` with what failed; :func:`decode_metadata_value` locates it."""

    def __init__(self, detail: str, position: int) -> None:
        super().__init__(detail)
        self.detail, self.position = detail, position


class _Reader:
    """A cursor over one value in the flexible message encoding."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Malformed(f"{what}: {n} bytes wanted, {len(self.data) - self.pos} left", self.pos)
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uvarint(self, what: str) -> int:
        start, value, shift = self.pos, 0, 0
        while True:
            if self.pos >= len(self.data):
                raise _Malformed(f"{what}: the value ends inside a varint", start)
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:  # an unsigned int32 takes at most 5 bytes
                raise _Malformed(f"{what}: a varint longer than 5 bytes", start)

    def int8(self, what: str) -> int:
        return int(struct.unpack(">b", self._take(1, what))[0])

    def int32(self, what: str) -> int:
        return int(struct.unpack(">i", self._take(4, what))[0])

    def int64(self, what: str) -> int:
        return int(struct.unpack(">q", self._take(8, what))[0])

    def uuid(self, what: str) -> str:
        return uuid_text(self._take(16, what))

    def string(self, what: str) -> str:
        n = self.uvarint(what) - 1
        if n < 0:
            raise _Malformed(f"{what}: null, where Kafka always writes a string", self.pos)
        start = self.pos
        try:
            return self._take(n, what).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Malformed(f"{what}: not UTF-8 ({exc.reason})", start) from None

    def nullable_bytes(self, what: str) -> bytes | None:
        n = self.uvarint(what) - 1
        return None if n < 0 else self._take(n, what)

    def array_length(self, what: str) -> int:
        n = self.uvarint(what) - 1
        if n < 0:
            raise _Malformed(f"{what}: a null array, where Kafka always writes one", self.pos)
        return n

    def tagged_fields(self, what: str) -> dict[int, bytes]:
        """The tagged fields closing a struct: tag -> raw bytes (unknown tags are kept, as Kafka keeps them)."""
        out = {}
        for _ in range(self.uvarint(f"{what} tagged-field count")):
            tag = self.uvarint(f"{what} tag")
            out[tag] = self._take(self.uvarint(f"{what} tagged-field size"), f"{what} tagged field {tag}")
        return out


def _topic_id_partition(r: _Reader) -> TopicIdPartition:
    name = r.string("topic name")
    topic_id = r.uuid("topic id")
    partition = r.int32("partition")
    r.tagged_fields("TopicIdPartition")
    return TopicIdPartition(topic_id, partition, name)


def _segment_id(r: _Reader) -> tuple[TopicIdPartition, str]:
    tp = _topic_id_partition(r)
    segment_id = r.uuid("segment id")
    r.tagged_fields("RemoteLogSegmentId")
    return tp, segment_id


def _leader_epochs(r: _Reader) -> tuple[tuple[int, int], ...]:
    out = []
    for _ in range(r.array_length("SegmentLeaderEpochs")):
        epoch, offset = r.int32("leader epoch"), r.int64("leader epoch start offset")
        r.tagged_fields("SegmentLeaderEpochEntry")
        out.append((epoch, offset))
    return tuple(out)


def _segment_state(r: _Reader) -> SegmentState:
    at, value = r.pos, r.int8("segment state")
    try:
        return SegmentState(value)
    except ValueError:
        raise _Malformed(f"segment state {value} is none of Kafka's (0-3)", at) from None


def _txn_index_empty(tags: dict[int, bytes]) -> bool:
    raw = tags.get(0)
    return bool(raw and raw[0])


def _segment_metadata(r: _Reader) -> SegmentMetadata:
    tp, segment_id = _segment_id(r)
    start, end, broker = r.int64("start offset"), r.int64("end offset"), r.int32("broker id")
    max_ts, event_ts = r.int64("max timestamp"), r.int64("event timestamp")
    epochs = _leader_epochs(r)
    size, custom, state = r.int32("segment size"), r.nullable_bytes("custom metadata"), _segment_state(r)
    tags = r.tagged_fields("RemoteLogSegmentMetadataRecord")
    return SegmentMetadata(tp, segment_id, start, end, broker, max_ts, event_ts, epochs, size, custom, state,
                           _txn_index_empty(tags))


def _segment_update(r: _Reader) -> SegmentUpdate:
    tp, segment_id = _segment_id(r)
    broker, event_ts = r.int32("broker id"), r.int64("event timestamp")
    custom, state = r.nullable_bytes("custom metadata"), _segment_state(r)
    r.tagged_fields("RemoteLogSegmentMetadataUpdateRecord")
    return SegmentUpdate(tp, segment_id, broker, event_ts, custom, state)


def _partition_delete(r: _Reader) -> PartitionDelete:
    tp = _topic_id_partition(r)
    broker, event_ts = r.int32("broker id"), r.int64("event timestamp")
    at, value = r.pos, r.int8("partition delete state")
    try:
        state = PartitionDeleteState(value)
    except ValueError:
        raise _Malformed(f"partition delete state {value} is none of Kafka's (0-2)", at) from None
    r.tagged_fields("RemotePartitionDeleteMetadataRecord")
    return PartitionDelete(tp, broker, event_ts, state)


def _segment_snapshot(r: _Reader) -> SegmentSnapshot:
    segment_id = r.uuid("segment id")
    start, end, broker = r.int64("start offset"), r.int64("end offset"), r.int32("broker id")
    max_ts, event_ts = r.int64("max timestamp"), r.int64("event timestamp")
    epochs = _leader_epochs(r)
    size, custom, state = r.int32("segment size"), r.nullable_bytes("custom metadata"), _segment_state(r)
    tags = r.tagged_fields("RemoteLogSegmentMetadataSnapshotRecord")
    return SegmentSnapshot(segment_id, start, end, broker, max_ts, event_ts, epochs, size, custom, state,
                           _txn_index_empty(tags))


_MESSAGES: dict[int, Callable[[_Reader], RemoteLogMetadata]] = {
    0: _segment_metadata, 1: _segment_update, 2: _partition_delete, 3: _segment_snapshot}


def decode_metadata_value(value: bytes, *, path: str | None = None, offset: int | None = None) -> RemoteLogMetadata:
    """One record value of ``__remote_log_metadata``. ``path`` and ``offset`` (the record's) only locate errors."""
    r = _Reader(bytes(value))
    try:
        frame = r.uvarint("frame version")
        if frame != FRAME_VERSION:
            raise _Malformed(f"frame version {frame}, where Kafka writes {FRAME_VERSION}", 0)
        api_key = r.uvarint("message type")
        if api_key not in _MESSAGES:
            raise _Malformed(f"message type {api_key} is none of the remote log metadata types (0-3)", 1)
        version = r.uvarint("message version")
        if version != MESSAGE_VERSION:
            raise _Malformed(f"message type {api_key} version {version}: only version {MESSAGE_VERSION} exists",
                             r.pos - 1)
        message = _MESSAGES[api_key](r)
        if r.pos != len(r.data):
            raise _Malformed(f"{len(r.data) - r.pos} bytes after the message", r.pos)
    except _Malformed as exc:
        raise RemoteMetadataError(f"byte {exc.position} of the record's value: {exc.detail}", path=path,
                                  offset=offset) from None
    return message


def read_metadata_partition(partition_uri: str, *, storage: "Storage | None" = None
                            ) -> Iterator[tuple[int, RemoteLogMetadata]]:
    """Every record of one ``__remote_log_metadata-N`` partition directory (local path or ``s3://`` URI), in
    offset order: (offset, message). Its segments are read with the project's decoder (CRCs checked); control
    batches carry no metadata and are skipped."""
    from segment_io import layout
    from segment_io.decode import read_segment
    from segment_io.storage import open_storage

    store = storage if storage is not None else open_storage(partition_uri)
    logs = sorted((f for f in store.list(partition_uri) if (p := layout.parse_segment_file(f.name)) and p[1] == ".log"
                   and not p[2]), key=lambda f: f.name)
    for f in logs:
        table = read_segment(f.uri, ["offset", "value"], storage=store, include_control=False)
        for offset, value in zip(table.column("offset").to_pylist(), table.column("value").to_pylist()):
            if value is None:
                raise RemoteMetadataError("a record with no value, where Kafka always writes a message",
                                          path=f.uri, offset=offset)
            yield offset, decode_metadata_value(value, path=f.uri, offset=offset)
