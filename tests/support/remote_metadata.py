"""Builders of ``__remote_log_metadata`` record values and of Kafka's own text for them, for the tests.

:func:`segment_value`, :func:`update_value` and :func:`delete_value` write values the way Kafka's generated
messages do (written here from the message definitions, not with the code under test), with knobs to write what
Kafka does not (a wrong frame, extra bytes, unknown tagged fields). :func:`parse_kafka_line` reads one line of
Kafka's ``RemoteLogMetadataFormatter`` (the fixtures' ``kafka-metadata.txt``) into the fields it prints;
:func:`kafka_fields` puts segjobs' decoding of a value in the same terms, so the two compare.
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Any


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def uuid(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def compact_string(s: str) -> bytes:
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def compact_bytes(b: bytes | None) -> bytes:
    return uvarint(0) if b is None else uvarint(len(b) + 1) + b


def tags(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in sorted(fields.items()))


def topic_id_partition(topic: str, topic_id: str, partition: int) -> bytes:
    return compact_string(topic) + uuid(topic_id) + struct.pack(">i", partition) + tags()


def frame(api_key: int, body: bytes, *, frame_version: int = 1, version: int = 0) -> bytes:
    return uvarint(frame_version) + uvarint(api_key) + uvarint(version) + body


def segment_value(topic: str, topic_id: str, partition: int, segment_id: str, start: int, end: int, *,
                  epochs: tuple[tuple[int, int], ...] = ((0, 0),), size: int = 100, max_ts: int = 1_000,
                  event_ts: int = 2_000, broker: int = 1, state: int = 0, custom: bytes | None = None,
                  tagged: dict[int, bytes] | None = None) -> bytes:
    """A type-0 value (a segment's metadata; state 0, COPY_SEGMENT_STARTED, unless told)."""
    body = (topic_id_partition(topic, topic_id, partition) + uuid(segment_id) + tags()
            + struct.pack(">qqiqq", start, end, broker, max_ts, event_ts)
            + uvarint(len(epochs) + 1) + b"".join(struct.pack(">iq", e, o) + tags() for e, o in epochs)
            + struct.pack(">i", size) + compact_bytes(custom) + struct.pack(">b", state) + tags(tagged))
    return frame(0, body)


def update_value(topic: str, topic_id: str, partition: int, segment_id: str, state: int, *, broker: int = 1,
                 event_ts: int = 3_000) -> bytes:
    """A type-1 value: the segment moves to ``state``."""
    body = (topic_id_partition(topic, topic_id, partition) + uuid(segment_id) + tags()
            + struct.pack(">iq", broker, event_ts) + compact_bytes(None) + struct.pack(">b", state) + tags())
    return frame(1, body)


def delete_value(topic: str, topic_id: str, partition: int, state: int, *, broker: int = 1,
                 event_ts: int = 4_000) -> bytes:
    """A type-2 value: a partition delete marker in ``state``."""
    body = topic_id_partition(topic, topic_id, partition) + struct.pack(">iqb", broker, event_ts, state) + tags()
    return frame(2, body)


_ID = r"(?P<topic_id>[\w-]{22}):(?P<topic>.+?)-(?P<partition>\d+), id=(?P<segment_id>[\w-]{22})"
_SEGMENT = re.compile(r"RemoteLogSegmentMetadata\{remoteLogSegmentId=RemoteLogSegmentId\{topicIdPartition=" + _ID
                      + r"\}, startOffset=(?P<start>-?\d+), endOffset=(?P<end>-?\d+), brokerId=(?P<broker>-?\d+), "
                      r"maxTimestampMs=(?P<max_ts>-?\d+), eventTimestampMs=(?P<event_ts>-?\d+), "
                      r"segmentLeaderEpochs=\{(?P<epochs>[^}]*)\}, segmentSizeInBytes=(?P<size>\d+), "
                      r"customMetadata=(?P<custom>[^,]+), state=(?P<state>\w+), txnIdxEmpty=(?P<txn>\w+)\}")
_UPDATE = re.compile(r"RemoteLogSegmentMetadataUpdate\{remoteLogSegmentId=RemoteLogSegmentId\{topicIdPartition="
                     + _ID + r"\}, customMetadata=(?P<custom>[^,]+), state=(?P<state>\w+), "
                     r"eventTimestampMs=(?P<event_ts>-?\d+), brokerId=(?P<broker>-?\d+)\}")
_DELETE = re.compile(r"RemotePartitionDeleteMetadata\{topicPartition=(?P<topic_id>[\w-]{22}):(?P<topic>.+?)-"
                     r"(?P<partition>\d+), state=(?P<state>\w+), eventTimestampMs=(?P<event_ts>-?\d+), "
                     r"brokerId=(?P<broker>-?\d+)\}")


def parse_kafka_line(line: str) -> tuple[int, dict[str, Any]]:
    """``partition: 0, offset: 7, value: RemoteLogSegmentMetadata{...}`` -> (7, the fields Kafka printed, with
    ``kind`` one of segment, update, delete)."""
    m = re.match(r"partition: \d+, offset: (\d+), value: (.*)$", line)
    assert m, f"not a line of RemoteLogMetadataFormatter: {line!r}"
    offset, text = int(m.group(1)), m.group(2)
    for kind, pattern in (("segment", _SEGMENT), ("update", _UPDATE), ("delete", _DELETE)):
        f = pattern.fullmatch(text)
        if f:
            fields: dict[str, Any] = {"kind": kind, **f.groupdict()}
            if "epochs" in fields:
                pairs = [p.split("=") for p in fields["epochs"].split(", ") if p]
                fields["epochs"] = tuple((int(e), int(o)) for e, o in pairs)
            return offset, fields
    raise AssertionError(f"a value this reader does not know: {text!r}")


def kafka_fields(message: object) -> dict[str, object]:
    """segjobs' decoding of a value in the fields and spelling of :func:`parse_kafka_line`."""
    from segment_io.remote_metadata import PartitionDelete, SegmentMetadata, SegmentUpdate

    if isinstance(message, PartitionDelete):
        tp = message.partition
        return {"kind": "delete", "topic_id": tp.topic_id, "topic": tp.topic, "partition": str(tp.partition),
                "state": message.state.name, "event_ts": str(message.event_timestamp_ms),
                "broker": str(message.broker_id)}
    assert isinstance(message, (SegmentMetadata, SegmentUpdate))
    tp = message.partition
    out: dict[str, object] = {"topic_id": tp.topic_id, "topic": tp.topic, "partition": str(tp.partition),
                              "segment_id": message.segment_id, "state": message.state.name,
                              "event_ts": str(message.event_timestamp_ms), "broker": str(message.broker_id),
                              "custom": "Optional.empty" if message.custom_metadata is None else "?"}
    if isinstance(message, SegmentUpdate):
        return {"kind": "update", **out}
    return {"kind": "segment", **out, "start": str(message.start_offset), "end": str(message.end_offset),
            "max_ts": str(message.max_timestamp_ms), "epochs": message.leader_epochs,
            "size": str(message.size_bytes), "txn": str(message.txn_index_empty).lower()}
