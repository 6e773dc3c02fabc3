"""segment_io.topic_ids: partition.metadata and --topic-ids files."""

from __future__ import annotations

from pathlib import Path

import pytest

from segment_io.errors import CorruptCheckpointError
from segment_io.storage import open_storage
from segment_io.topic_ids import (
    merge_topic_ids,
    parse_partition_metadata,
    parse_topic_ids_file,
    read_partition_metadata,
)

LOGS = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered" / "kafka-4.1.1" / "logs"


def test_a_real_partition_metadata_file() -> None:
    uri = str(LOGS / "kept-0" / "partition.metadata")
    assert read_partition_metadata(open_storage(uri), uri) == "3hkKp7BATom3_tVt48rN_Q"
    assert read_partition_metadata(open_storage(uri), str(LOGS / "kept-0" / "nothing")) is None


@pytest.mark.parametrize("text, line, detail", [
    ("", 1, "the first line is not 'version: <n>'"),
    ("version: 1\ntopic_id: 3hkKp7BATom3_tVt48rN_Q", 1, "version 1: Kafka writes only version 0"),
    ("version: 0\n", 2, "the second line is not 'topic_id: <22-character id>'"),
    ("version: 0\ntopic_id: short", 2, "the second line"),
])
def test_a_malformed_partition_metadata_is_refused_naming_the_line(text: str, line: int, detail: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=detail) as err:
        parse_partition_metadata(text, path="/l/t-0/partition.metadata")
    assert err.value.line == line and err.value.path == "/l/t-0/partition.metadata"


def test_a_topic_ids_file_takes_pairs_and_kafka_topics_describe_lines() -> None:
    text = ("# ids of topics this broker holds no partition of\n"
            "orders AAAAAAAAAAAAAAAAAAAAAQ\n\n"
            "Topic: clicks\tTopicId: AAAAAAAAAAAAAAAAAAAAAg\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: \n"
            "\tTopic: clicks\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n")
    assert parse_topic_ids_file(text) == {"AAAAAAAAAAAAAAAAAAAAAQ": "orders", "AAAAAAAAAAAAAAAAAAAAAg": "clicks"}


def test_a_topic_ids_file_refuses_what_it_cannot_read_and_two_names_for_one_id() -> None:
    with pytest.raises(CorruptCheckpointError, match="line 2"):
        parse_topic_ids_file("a AAAAAAAAAAAAAAAAAAAAAQ\njust-a-name\n", path="ids.txt")
    with pytest.raises(CorruptCheckpointError, match="topic id AAAAAAAAAAAAAAAAAAAAAQ is already 'a'"):
        parse_topic_ids_file("a AAAAAAAAAAAAAAAAAAAAAQ\nb AAAAAAAAAAAAAAAAAAAAAQ\n", path="ids.txt")


def test_the_first_source_wins_when_two_name_an_id() -> None:
    assert merge_topic_ids({"x": "log-dir"}, {"x": "file", "y": "file"}) == {"x": "log-dir", "y": "file"}
