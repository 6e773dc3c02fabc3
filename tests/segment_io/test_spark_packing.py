"""The ``kafka-segments`` source over many small segments: splits packed into few tasks, and the ``columns`` option.

Packing must not change what is read: the same rows as reading every segment on its own, with filters, pruning
and pushdown applied per split, locally and on S3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from segment_io.decode import read_segment
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.schema import RECORD_SCHEMA
from segment_io.spark import FORMAT_NAME, DataSourceOptionError, parse_options, register
from segment_io.spark.filters import EqualTo, GreaterThanOrEqual, LessThan
from segment_io.spark.packing import SPLIT_OPEN_COST_BYTES, PackedSplit, pack_splits
from segment_io.spark.planning import SegmentSplit
from segment_io.spark.schemas import KAFKA_ARROW_SCHEMA
from segment_io.spark.source import KafkaSegmentsReader, read_split

SORT_KEYS = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir of two topics in 3 partitions each, every partition rolled into many segments of a few KB: lz4
    batches, tombstones, transactions with markers (control batches) and aborted ones."""
    root = tmp_path_factory.mktemp("small-segments")
    common = dict(partitions=3, records=600, value_bytes=60, batch_records=7, segment_bytes=3000,
                  transactional_share=0.3, aborted_share=0.3, tombstone_share=0.1)
    generate_log_dir(GenerateSpec(topics=("orders",), codec=3, **common), root)
    generate_log_dir(GenerateSpec(topics=("payments",), headers=True, seed=7, **common), root)
    return root


def segment_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.log"))


def expected_rows(root: Path, *, include_control: bool = False) -> pa.Table:
    """Every segment read on its own by read_segment, sorted."""
    tables = [read_segment(str(log), include_control=include_control) for log in segment_files(root)]
    return pa.concat_tables(tables).sort_by(SORT_KEYS)


def make_reader(path: Path | str, **options: str) -> KafkaSegmentsReader:
    return KafkaSegmentsReader(parse_options({"path": str(path), **options}))


def reader_rows(reader: KafkaSegmentsReader, schema: pa.Schema = RECORD_SCHEMA) -> pa.Table:
    """Plan and read like Spark does, without Spark."""
    batches = [b for task in reader.partitions() for b in reader.read(task)]
    return pa.Table.from_batches(batches, schema=schema)


def split(start: int, end: int, uri: str = "/x/t-0/00000000000000000000.log") -> SegmentSplit:
    return SegmentSplit(uri=uri, topic="t", partition=0, segment_base_offset=0, start=start, end=end,
                        segment_size=end, min_offset=None, max_offset=None)


# --------------------------------------------------------------------------------------------------
# Packing (pure)
# --------------------------------------------------------------------------------------------------


def test_pack_splits_keeps_order_puts_every_split_in_one_task_and_respects_the_target() -> None:
    sizes = [10_000, 2_000_000, 500, 40 << 20, 7, 300_000, 90 << 20, 1]
    splits = [split(0, size, f"/x/t-0/{i:020d}.log") for i, size in enumerate(sizes)]
    target = 8 << 20
    packed = pack_splits(splits, target)
    assert [s for task in packed for s in task.splits] == splits
    for task in packed:
        weight = sum(s.end - s.start + SPLIT_OPEN_COST_BYTES for s in task.splits)
        assert weight <= target or len(task.splits) == 1  # only a split larger than the target is over it
    # four small ones together, each large one alone, the rest together
    assert [len(task.splits) for task in packed] == [3, 1, 2, 1, 1]
    assert pack_splits([], target) == []


def test_a_target_below_the_open_cost_packs_nothing() -> None:
    splits = [split(0, 100, f"/x/t-0/{i:020d}.log") for i in range(5)]
    assert [task.splits for task in pack_splits(splits, SPLIT_OPEN_COST_BYTES)] == [(s,) for s in splits]


# --------------------------------------------------------------------------------------------------
# Reading packed splits (no Spark)
# --------------------------------------------------------------------------------------------------


def test_many_small_segments_are_read_by_few_tasks_with_the_same_rows(small_segments: Path) -> None:
    segments = segment_files(small_segments)
    assert len(segments) > 60
    reader = make_reader(small_segments, includeControl="true")
    tasks = reader.partitions()
    assert all(isinstance(t, PackedSplit) for t in tasks)
    assert len(tasks) == 1  # about 60 KB of segments: one task at the default target
    assert [s.uri for t in tasks for s in t.splits] == [str(p) for p in segments]
    assert reader_rows(reader).sort_by(SORT_KEYS).equals(expected_rows(small_segments, include_control=True))
    # A target of a few segments' weight makes several tasks, each of consecutive segments, reading the same.
    several = make_reader(small_segments, maxSplitBytes=str(SPLIT_OPEN_COST_BYTES * 5))
    assert 10 < len(several.partitions()) < len(segments) / 3
    assert reader_rows(several).sort_by(SORT_KEYS).equals(expected_rows(small_segments))


def test_rows_of_small_segments_reach_spark_in_batches_of_batch_rows(small_segments: Path) -> None:
    reader = make_reader(small_segments, batchRows="1000")
    (task,) = reader.partitions()
    sizes = [b.num_rows for b in reader.read(task)]
    # each segment holds a few dozen records: gathered, every batch is full but the last
    assert max(sizes) == 1000 and all(n > 900 for n in sizes[:-1])
    assert sum(sizes) == expected_rows(small_segments).num_rows


def test_filters_and_options_on_packed_splits_return_exactly_the_matching_rows(small_segments: Path) -> None:
    expected = expected_rows(small_segments)
    reader = make_reader(small_segments, topics="pay*", startingTimestamp=str(int(
        np.median(expected["timestamp"].to_numpy()))))
    reader.push_filters([GreaterThanOrEqual(("offset",), 100), LessThan(("offset",), 400),
                         EqualTo(("partition",), 1)])
    got = reader_rows(reader).sort_by(SORT_KEYS)
    ts, offsets = expected["timestamp"].to_numpy(), expected["offset"].to_numpy()
    mask = ((expected["topic"].to_numpy(zero_copy_only=False) == "payments") & (expected["partition"].to_numpy() == 1)
            & (offsets >= 100) & (offsets < 400) & (ts >= int(np.median(ts))))
    assert 0 < got.num_rows < mask.size / 10
    assert got.equals(expected.filter(pa.array(mask)))
    # splits that cannot match are pruned before packing: only one partition's segments are read
    assert {(s.topic, s.partition) for t in reader.partitions() for s in t.splits} == {("payments", 1)}


# --------------------------------------------------------------------------------------------------
# The columns option
# --------------------------------------------------------------------------------------------------


def test_columns_option_is_checked_against_the_schema() -> None:
    assert parse_options({"path": "/x", "columns": " topic, offset"}).columns == ("topic", "offset")
    assert parse_options({"path": "/x"}).columns is None
    for value, detail in (("topic,nope", "'nope' is not a column of schema 'segments'"),
                          ("timestamp_type", "not a column of schema 'kafka'"),
                          ("topic,,offset", "'' is not a column"), ("offset,offset", "'offset' given more than once")):
        schema = {"schema": "kafka"} if value == "timestamp_type" else {}
        with pytest.raises(DataSourceOptionError, match=detail):
            parse_options({"path": "/x", "columns": value, **schema})
    with pytest.raises(DataSourceOptionError, match="'columns': not with read=latest"):
        parse_options({"path": "/x", "columns": "topic", "read": "latest"})


def test_columns_option_returns_those_columns_of_the_same_rows(small_segments: Path) -> None:
    columns = ["partition", "offset", "topic", "key"]
    expected = expected_rows(small_segments).select(columns)
    reader = make_reader(small_segments, columns=",".join(columns), endingOffset="300")
    schema = pa.schema([RECORD_SCHEMA.field(c) for c in columns])
    got = reader_rows(reader, schema).sort_by(SORT_KEYS)
    assert got.equals(expected.filter(pa.compute.less(expected["offset"], 300)))

    kafka = make_reader(small_segments, schema="kafka", columns="timestampType,topic,headers,offset")
    rows = reader_rows(kafka, pa.schema([KAFKA_ARROW_SCHEMA.field(c) for c in
                                         ("timestampType", "topic", "headers", "offset")]))
    full = reader_rows(make_reader(small_segments, schema="kafka"), KAFKA_ARROW_SCHEMA)
    assert rows.equals(full.select(["timestampType", "topic", "headers", "offset"]))


def test_a_split_read_without_value_columns_decodes_no_record_bytes(small_segments: Path) -> None:
    """Without key, value or headers asked for, the split's records are decoded without those columns (the
    decoder then copies no record bytes); the row filter's columns are decoded for it, and left out after."""
    reader = make_reader(small_segments, columns="topic,partition", startingOffset="50")
    (task,) = reader.partitions()
    wanted = reader.row_schema.record_columns(reader.options.columns)
    assert wanted == ("topic", "partition")
    table = read_split(task.splits[0], reader.options, reader.bounds, wanted)
    assert table.column_names == ["topic", "partition"]
    full = read_split(task.splits[0], reader.options, reader.bounds)
    assert table.num_rows == full.num_rows > 0 and full["offset"].to_numpy().min() >= 50


# --------------------------------------------------------------------------------------------------
# Through Spark, locally and on S3
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sspark(spark):
    register(spark)
    return spark


def test_through_spark_count_and_group_by_topic_over_packed_splits(sspark, small_segments: Path) -> None:
    from pyspark.sql import functions as F

    expected = expected_rows(small_segments)
    df = sspark.read.format(FORMAT_NAME).load(str(small_segments))
    assert df.rdd.getNumPartitions() == 1
    assert df.count() == expected.num_rows
    by_topic = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    topics, counts = np.unique(expected["topic"].to_numpy(zero_copy_only=False), return_counts=True)
    assert by_topic == dict(zip(topics.tolist(), counts.tolist()))
    pruned = sspark.read.format(FORMAT_NAME).option("columns", "topic").load(str(small_segments))
    assert pruned.columns == ["topic"]
    assert {r["topic"]: r["count"] for r in pruned.groupBy("topic").count().collect()} == by_topic
    unpacked = (sspark.read.format(FORMAT_NAME).option("maxSplitBytes", "1024").load(str(small_segments))
                .where(F.col("partition") == 2))
    packed = df.where(F.col("partition") == 2)
    assert unpacked.rdd.getNumPartitions() >= len(segment_files(small_segments))
    assert sorted(packed.collect()) == sorted(unpacked.collect())


def upload(endpoint, bucket: str, source: Path, prefix: str) -> None:
    client = endpoint.client()
    for file in source.rglob("*"):
        if file.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{file.relative_to(source)}", Body=file.read_bytes())


def s3_options(endpoint) -> dict[str, str]:
    creds = endpoint.storage_options()
    return {"s3.endpoint": creds.endpoint_url, "s3.region": creds.region,
            "s3.access_key_id": creds.access_key_id, "s3.secret_access_key": creds.secret_access_key}


def test_packed_splits_on_s3_read_the_same_rows_as_the_local_copy(sspark, small_segments: Path, s3_bucket) -> None:
    endpoint, bucket = s3_bucket
    upload(endpoint, bucket, small_segments, "logs")
    options = s3_options(endpoint)
    reader = make_reader(f"s3://{bucket}/logs", **options)
    (task,) = reader.partitions()
    assert len(task.splits) == len(segment_files(small_segments))
    assert reader_rows(reader).sort_by(SORT_KEYS).equals(expected_rows(small_segments))

    df = sspark.read.format(FORMAT_NAME).options(**options, columns="topic,partition,offset",
                                                  startingOffset="20").load(f"s3://{bucket}/logs")
    local = sspark.read.format(FORMAT_NAME).option("columns", "topic,partition,offset").load(str(small_segments))
    assert sorted(df.collect()) == sorted(local.where("offset >= 20").collect())
