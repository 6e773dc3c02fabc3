"""The ``kafka-segments`` data source with ``remote``: a tiered topic read as one log, on what a real Kafka 4.1.1
broker with LocalTieredStorage wrote (tests/data/kafka-tiered/SOURCES.md).

The expected rows are the records the fixture generator produced (:func:`tests.support.tiered_broker.produced_record`:
one partition per topic, so the n-th record has offset n), never the data source's own reading; the overlap cases
add local segments built here (tests.support.builders) whose values say which copy a row came from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.logdir.tiered import UnreadableRemoteSegment
from segment_io.aiven_manifest import CorruptRemoteObject
from segment_io.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from segment_io.remote_view import parse_view
from segment_io.schema import RECORD_SCHEMA
from segment_io.spark import FORMAT_NAME, DataSourceOptionError, parse_options, register
from segment_io.spark.source import KafkaSegmentsReader, LatestReader
from segment_io.storage import LocalStorage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.tiered_broker import produced_record

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered" / "kafka-4.1.1"
#: the same remote segments in Aiven's layout (tests/data/kafka-tiered-aiven/SOURCES.md)
AIVEN = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered-aiven"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"  # kept's remote segment 40-59


@pytest.fixture
def node(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "node")
    return tmp_path / "node"


def _reader(logs: Path | str, remote: Path | str | None, **options: str) -> KafkaSegmentsReader:
    given = {"path": str(logs), **({"remote": str(remote)} if remote is not None else {}), **options}
    return KafkaSegmentsReader(parse_options(given))


def _reader_of_s3_remote(s3_bucket, remote: Path, prefix: str, **options: str) -> KafkaSegmentsReader:
    """A reader of the fixture's local log dir whose remote store is ``remote`` uploaded under ``prefix``."""
    endpoint, bucket = s3_bucket
    client = endpoint.client()
    for file in remote.rglob("*"):
        if file.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{file.relative_to(remote)}", Body=file.read_bytes())
    creds = endpoint.storage_options()
    return _reader(FIXTURE / "logs", f"s3://{bucket}/{prefix}", **options,
                   **{"s3.endpoint": creds.endpoint_url, "s3.region": creds.region,
                      "s3.access_key_id": creds.access_key_id, "s3.secret_access_key": creds.secret_access_key})


def _rows(reader: KafkaSegmentsReader) -> list[tuple[str, int, int, bytes, bytes]]:
    batches = [b for split in reader.partitions() for b in reader.read(split)]
    table = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
    return list(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value"))))


def _produced(topic: str, first: int, last: int) -> list[tuple[str, int, int, bytes, bytes]]:
    return [(topic, 0, n, *produced_record(topic, n)) for n in range(first, last + 1)]


#: what the broker served of each topic: kept 0-119, expiring from its log start offset 20 (remote retention
#: deleted 0-19) to 119; dropped was deleted
SERVED = _produced("expiring", 20, 119) + _produced("kept", 0, 119)


def test_a_tiered_topic_reads_as_the_records_the_broker_was_given() -> None:
    rows = _rows(_reader(FIXTURE / "logs", FIXTURE / "remote"))
    assert sorted(rows) == SERVED
    assert len({(t, p, o) for t, p, o, _, _ in rows}) == len(rows)  # no offset twice


def test_without_remote_only_the_local_segments_are_read() -> None:
    # the local tails are empty active segments: every record is remote
    assert _rows(_reader(FIXTURE / "logs", None, topics="kept,expiring")) == []


def test_the_remote_root_may_be_localtieredstorage_s_dir_or_its_kafka_tiered_storage_dir() -> None:
    rows = _rows(_reader(FIXTURE / "logs", FIXTURE / "remote" / "kafka-tiered-storage", topics="kept"))
    assert sorted(rows) == _produced("kept", 0, 119)


def test_a_partition_dir_is_read_with_its_log_dir_s_metadata() -> None:
    assert sorted(_rows(_reader(FIXTURE / "logs" / "expiring-0", FIXTURE / "remote"))) == _produced("expiring", 20,
                                                                                                     119)


def test_offset_options_apply_across_remote_and_local_segments() -> None:
    rows = _rows(_reader(FIXTURE / "logs", FIXTURE / "remote", topics="kept", startingOffset="35",
                         endingOffset="65"))
    assert sorted(rows) == _produced("kept", 35, 64)


def _local_segment(partition_dir: Path, topic: str, first: int, last: int) -> None:
    """A local segment holding offsets ``first``-``last`` whose values say they are the local copy."""
    log = LogBuilder(topic, 0, start_offset=first)
    log.batch([rec(produced_record(topic, n)[0], f"local-{n}") for n in range(first, last + 1)])
    write_log(log.table(), partition_dir)


def test_a_remote_segment_overlapping_the_local_tail_gives_only_its_offsets_below_it(node: Path) -> None:
    _local_segment(node / "logs" / "kept-0", "kept", 110, 119)
    rows = sorted(_rows(_reader(node / "logs", node / "remote", topics="kept")))
    assert rows == _produced("kept", 0, 109) + [("kept", 0, n, produced_record("kept", n)[0], f"local-{n}".encode())
                                                 for n in range(110, 120)]


def test_a_remote_segment_the_local_segments_cover_is_not_read(node: Path) -> None:
    _local_segment(node / "logs" / "kept-0", "kept", 100, 119)
    rows = sorted(_rows(_reader(node / "logs", node / "remote", topics="kept")))
    assert [r[2] for r in rows] == list(range(120))
    assert rows[100:] == [("kept", 0, n, produced_record("kept", n)[0], f"local-{n}".encode())
                          for n in range(100, 120)]


def test_a_missing_remote_object_fails_its_partition_naming_the_segment_and_the_others_still_read(node: Path
                                                                                                  ) -> None:
    path = next((node / "remote" / "kafka-tiered-storage").glob("kept-0-*")) / f"{KEPT_40}.log"
    path.unlink()
    with pytest.raises(UnreadableRemoteSegment) as caught:
        _rows(_reader(node / "logs", node / "remote"))
    assert str(caught.value).startswith(f"remote segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59): its segment object "
                                        f"({node / 'remote' / 'kafka-tiered-storage'}/{path.parent.name}/{path.name}) "
                                        f"is absent")
    assert sorted(_rows(_reader(node / "logs", node / "remote", topics="expiring"))) == _produced("expiring", 20, 119)


def test_remote_options_are_checked() -> None:
    with pytest.raises(DataSourceOptionError, match="'remoteLayout': only with remote"):
        parse_options({"path": "/x", "remoteLayout": "local-tiered-storage"})
    with pytest.raises(DataSourceOptionError, match="'remoteLayout': remote layout 'confluent' is not supported"):
        parse_options({"path": "/x", "remote": "/r", "remoteLayout": "confluent"})
    parse_options({"path": "/x", "remote": "/r", "remoteLayout": "aiven"})  # both layouts are read


def _latest(logs: Path, remote: Path, topics: str) -> dict[tuple[str, bytes], tuple[bytes, int]]:
    reader = LatestReader(parse_options({"path": str(logs), "remote": str(remote), "read": "latest",
                                         "topics": topics}))
    rows = [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]
    return {(r["topic"], r["key"]): (r["value"], r["offset"]) for r in rows}


def _latest_produced(topic: str, first: int, last: int) -> dict[tuple[str, bytes], tuple[bytes, int]]:
    out = {}
    for n in range(first, last + 1):
        key, value = produced_record(topic, n)
        out[(topic, key)] = (value, n)
    return out


def test_read_latest_of_a_tiered_topic_is_the_latest_produced_value_per_key() -> None:
    assert _latest(FIXTURE / "logs", FIXTURE / "remote", "kept,expiring") == {
        **_latest_produced("kept", 0, 119), **_latest_produced("expiring", 20, 119)}


def test_read_latest_of_a_tiered_topic_starts_at_the_log_dir_s_log_start_offset(node: Path) -> None:
    checkpoint = node / "logs" / "log-start-offset-checkpoint"
    entries = read_offset_checkpoint(LocalStorage(), str(checkpoint))
    write_offset_checkpoint(LocalStorage(), str(checkpoint), {**entries, ("kept", 0): 115})
    assert _latest(node / "logs", node / "remote", "kept") == _latest_produced("kept", 115, 119)


@pytest.mark.parametrize("layout", ["local-tiered-storage", "aiven"])
def test_read_latest_reads_a_remote_segment_the_local_log_starts_inside_below_it(node: Path, layout: str) -> None:
    _local_segment(node / "logs" / "kept-0", "kept", 110, 119)  # inside kept's remote segment 100-119 (one batch)
    remote = node / "remote" if layout == "local-tiered-storage" else AIVEN / "compressed"
    reader = LatestReader(parse_options({"path": str(node / "logs"), "remote": str(remote), "remoteLayout": layout,
                                         "read": "latest", "topics": "kept"}))
    rows = {(r["topic"], r["key"]): (r["value"], r["offset"])
            for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()}
    local = {("kept", produced_record("kept", n)[0]): (f"local-{n}".encode(), n) for n in range(110, 120)}
    assert rows == {**_latest_produced("kept", 0, 109), **local}


@pytest.fixture
def sspark(spark):  # type: ignore[no-untyped-def]
    register(spark)
    return spark


def test_through_spark_a_tiered_topic_reads_as_one_log(sspark) -> None:
    df = (sspark.read.format(FORMAT_NAME).option("remote", str(FIXTURE / "remote"))
          .option("remoteLayout", "local-tiered-storage").load(str(FIXTURE / "logs")))
    rows = [(r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value))
            for r in df.select("topic", "partition", "offset", "key", "value").collect()]
    assert sorted(rows) == SERVED


def test_the_remote_store_may_be_on_s3_beside_a_local_log_dir(s3_bucket) -> None:
    reader = _reader_of_s3_remote(s3_bucket, FIXTURE / "remote", "tiered")
    splits = [split for packed in reader.partitions() for split in packed.splits]
    assert {s.uri.split("://")[0] for s in splits} == {"s3"}  # (the local tails are empty: no split)
    assert sorted(_rows(reader)) == SERVED


@pytest.mark.parametrize("variant", ["plain", "compressed"])
def test_a_tiered_topic_in_aiven_s_layout_reads_as_the_records_the_broker_was_given(variant: str) -> None:
    reader = _reader(FIXTURE / "logs", AIVEN / variant, remoteLayout="aiven")
    splits = [split for packed in reader.partitions() for split in packed.splits]
    assert len(splits) == 11 and all(parse_view(s.uri).layout == "aiven" for s in splits)
    rows = _rows(reader)
    assert sorted(rows) == SERVED and len({(t, p, o) for t, p, o, _, _ in rows}) == len(rows)


def test_an_aiven_segment_overlapping_the_local_tail_gives_only_its_offsets_below_it(node: Path) -> None:
    _local_segment(node / "logs" / "kept-0", "kept", 110, 119)
    rows = sorted(_rows(_reader(node / "logs", AIVEN / "compressed", topics="kept", remoteLayout="aiven")))
    assert rows == _produced("kept", 0, 109) + [("kept", 0, n, produced_record("kept", n)[0], f"local-{n}".encode())
                                                 for n in range(110, 120)]


def test_a_corrupt_aiven_manifest_fails_the_read_naming_it(tmp_path: Path) -> None:
    shutil.copytree(AIVEN / "plain", tmp_path / "plain")
    manifest = next((tmp_path / "plain").glob(f"kept-*/0/{KEPT_40}.rsm-manifest"))
    manifest.write_bytes(manifest.read_bytes()[:40])
    with pytest.raises(CorruptRemoteObject, match=rf"{manifest}, byte \d+: not a JSON manifest"):
        _rows(_reader(FIXTURE / "logs", tmp_path / "plain", remoteLayout="aiven"))
    rows = _rows(_reader(FIXTURE / "logs", tmp_path / "plain", remoteLayout="aiven", topics="expiring"))
    assert sorted(rows) == _produced("expiring", 20, 119)


def test_an_aiven_remote_store_may_be_on_s3_beside_a_local_log_dir(s3_bucket) -> None:
    reader = _reader_of_s3_remote(s3_bucket, AIVEN / "compressed", "aiven", remoteLayout="aiven")
    splits = [split for packed in reader.partitions() for split in packed.splits]
    assert {parse_view(s.uri).log_uri.split("://")[0] for s in splits} == {"s3"}
    assert sorted(_rows(reader)) == SERVED
