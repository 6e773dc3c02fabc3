"""segment_io.remote_metadata: the records of ``__remote_log_metadata``, read as Kafka reads them.

The fixture partition is what a real Kafka 4.1.1 broker wrote (tests/data/kafka-tiered/SOURCES.md); its
``kafka-metadata.txt`` is Kafka's own reading of the same records (RemoteLogMetadataFormatter), the oracle.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from segment_io.remote_metadata import (
    PartitionDelete,
    PartitionDeleteState,
    RemoteMetadataError,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
    decode_metadata_value,
    read_metadata_partition,
    uuid_bytes,
    uuid_text,
)
from tests.support import remote_metadata as rm

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered" / "kafka-4.1.1"
METADATA = FIXTURE / "logs" / "__remote_log_metadata-0"
TOPIC_ID, SEG = "3hkKp7BATom3_tVt48rN_Q", "6QRGyTw3TG2Bem_F3n_zdw"


def test_every_record_of_a_real_broker_reads_as_kafka_reads_it() -> None:
    ours = list(read_metadata_partition(str(METADATA)))
    kafka = [rm.parse_kafka_line(line) for line in (FIXTURE / "kafka-metadata.txt").read_text().splitlines()]
    assert [o for o, _ in ours] == [o for o, _ in kafka] == list(range(41))
    for (offset, message), (_, fields) in zip(ours, kafka):
        assert rm.kafka_fields(message) == fields, f"offset {offset}"
    states = {m.state for _, m in ours if isinstance(m, (SegmentMetadata, SegmentUpdate))}
    assert states == set(SegmentState)  # the fixture has every segment state
    assert any(len(m.leader_epochs) and m.leader_epochs[0][0] == 2 for _, m in ours if isinstance(m, SegmentMetadata))


def test_uuids_print_as_kafka_prints_them() -> None:
    assert uuid_text(uuid_bytes(TOPIC_ID)) == TOPIC_ID
    assert uuid_text(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"
    with pytest.raises(ValueError, match="not a Kafka Uuid"):
        uuid_bytes("AAAA")


def test_the_three_types_kafka_writes_decode_field_by_field() -> None:
    seg = decode_metadata_value(rm.segment_value("t", TOPIC_ID, 3, SEG, 10, 19, epochs=((1, 10), (4, 15)),
                                                 size=1461, max_ts=7, event_ts=8, broker=2, custom=b"\x01\x02"))
    assert seg == SegmentMetadata(TopicIdPartition(TOPIC_ID, 3, "t"), SEG, 10, 19, 2, 7, 8, ((1, 10), (4, 15)),
                                  1461, b"\x01\x02", SegmentState.COPY_SEGMENT_STARTED, False)
    upd = decode_metadata_value(rm.update_value("t", TOPIC_ID, 3, SEG, 2, event_ts=9))
    assert upd == SegmentUpdate(TopicIdPartition(TOPIC_ID, 3, "t"), SEG, 1, 9, None,
                                SegmentState.DELETE_SEGMENT_STARTED)
    dele = decode_metadata_value(rm.delete_value("t", TOPIC_ID, 3, 1))
    assert dele == PartitionDelete(TopicIdPartition(TOPIC_ID, 3, "t"), 1, 4_000,
                                   PartitionDeleteState.DELETE_PARTITION_STARTED)


def test_tagged_fields_the_txn_index_flag_and_tags_unknown_to_us() -> None:
    flagged = rm.segment_value("t", TOPIC_ID, 0, SEG, 0, 1, tagged={0: b"\x01"})
    assert decode_metadata_value(flagged).txn_index_empty is True  # type: ignore[union-attr]
    # a tag a later Kafka may add is skipped, as Kafka's generated readers skip unknown tags
    later = rm.segment_value("t", TOPIC_ID, 0, SEG, 0, 1, tagged={0: b"\x00", 7: b"future"})
    assert decode_metadata_value(later).txn_index_empty is False  # type: ignore[union-attr]


@pytest.mark.parametrize("value, detail", [
    (rm.frame(0, b"", frame_version=0), "byte 0 of the record's value: frame version 0"),
    (rm.frame(9, b""), "byte 1 of the record's value: message type 9 is none"),
    (rm.frame(1, b"", version=1), "message type 1 version 1: only version 0 exists"),
    (rm.update_value("t", TOPIC_ID, 0, SEG, 1)[:-3], "the value ends inside a varint"),
    (rm.update_value("t", TOPIC_ID, 0, SEG, 1)[:20], "byte 5 of the record.s value: topic id: 16 bytes wanted"),
    (rm.update_value("t", TOPIC_ID, 0, SEG, 1) + b"\x00", "1 bytes after the message"),
    (rm.update_value("t", TOPIC_ID, 0, SEG, 7), "segment state 7 is none of Kafka's"),
    (rm.delete_value("t", TOPIC_ID, 0, 5), "partition delete state 5 is none of Kafka's"),
])
def test_a_malformed_value_is_refused_with_file_offset_and_byte(value: bytes, detail: str) -> None:
    with pytest.raises(RemoteMetadataError, match=detail) as err:
        decode_metadata_value(value, path="/d/__remote_log_metadata-0/00000000000000000000.log", offset=41)
    assert str(err.value).startswith("/d/__remote_log_metadata-0/00000000000000000000.log, offset 41: byte ")


def test_a_damaged_metadata_segment_names_its_file(tmp_path: Path) -> None:
    copy = tmp_path / "__remote_log_metadata-0"
    shutil.copytree(METADATA, copy)
    log = copy / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[200] ^= 0xFF  # inside the first batches: the CRC no longer matches
    log.write_bytes(bytes(data))
    with pytest.raises(Exception, match=str(log)):
        list(read_metadata_partition(str(copy)))
