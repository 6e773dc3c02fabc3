"""``.option("schema", "kafka")``: the rows of Spark's own ``kafka`` batch source, from segments.

The expected schema is transcribed here from Spark's ``KafkaRecordToRowConverter`` (with ``includeHeaders``), and
the expected rows are built record by record in Python from :func:`segment_io.decode.read_segment`, never from
the source's own conversion.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from segment_io.decode import read_segment
from segment_io.spark import FORMAT_NAME, DataSourceOptionError, parse_options, register
from segment_io.spark.filters import (
    FILTER_PUSHDOWN,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from segment_io.spark.schemas import KAFKA, KAFKA_ARROW_SCHEMA
from segment_io.spark.source import PUSHDOWN_IS_PER_SCAN, KafkaSegmentsReader

#: What spark.read.format("kafka").option("includeHeaders", "true") returns (KafkaRecordToRowConverter):
#: every field nullable, as StructField's default.
SPARKS_KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("offset", LongType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("timestampType", IntegerType(), True),
    StructField("headers", ArrayType(StructType([StructField("key", StringType(), True),
                                                 StructField("value", BinaryType(), True)]), True), True),
])

#: Partitions with headers (orders-0, keyed, CreateTime) and without (LogAppendTime monitoring topics).
LOG_DIR = "rjmfernandes-cp7.6-kraft-lz4/data"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
KAFKA_OPTION = {"schema": "kafka"}


def kafka_rows_by_hand(log_dir: Path) -> list[dict]:
    """The rows Spark's kafka source would give for the records of ``log_dir``, one Python dict per record."""
    rows = []
    for log in sorted(log_dir.rglob("*.log")):
        for r in read_segment(str(log), include_control=False).to_pylist():  # consumers never see them
            rows.append({
                "key": r["key"], "value": r["value"], "topic": r["topic"], "partition": r["partition"],
                "offset": r["offset"], "timestamp": EPOCH + dt.timedelta(milliseconds=r["timestamp"]),
                "timestampType": r["timestamp_type"],
                # ConsumerRecord headers as Spark converts them: null when a record has none
                "headers": [{"key": h["key"], "value": h["value"]} for h in r["headers"]] or None,
            })
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r["topic"], r["partition"], r["offset"]))


def make_reader(path: Path, **options: str) -> KafkaSegmentsReader:
    return KafkaSegmentsReader(parse_options({"path": str(path), **KAFKA_OPTION, **options}))


def reader_rows(reader: KafkaSegmentsReader) -> pa.Table:
    batches = [b for split in reader.partitions() for b in reader.read(split)]
    return pa.Table.from_batches(batches, schema=KAFKA_ARROW_SCHEMA)


# --------------------------------------------------------------------------------------------------
# Without Spark
# --------------------------------------------------------------------------------------------------


def test_the_kafka_schema_is_sparks_and_the_default_stays_the_full_one() -> None:
    from segment_io.spark import SPARK_SCHEMA
    from segment_io.spark.source import KafkaSegmentsDataSource

    assert KafkaSegmentsDataSource({"path": "/x", "schema": "kafka"}).schema() == SPARKS_KAFKA_SCHEMA
    assert KafkaSegmentsDataSource({"path": "/x", "SCHEMA": "Kafka"}).schema() == SPARKS_KAFKA_SCHEMA
    assert KafkaSegmentsDataSource({"path": "/x"}).schema() == SPARK_SCHEMA
    assert KafkaSegmentsDataSource({"path": "/x", "schema": "segments"}).schema() == SPARK_SCHEMA
    assert "timestamp_type" in SPARK_SCHEMA.fieldNames()


def test_an_unknown_schema_is_an_option_error_naming_the_choices() -> None:
    with pytest.raises(DataSourceOptionError, match=r"'schema'.*'avro'.*segments, kafka"):
        parse_options({"path": "/x", "schema": "avro"})


@pytest.mark.slow
def test_rows_are_what_sparks_kafka_source_returns(kafka_real: Path) -> None:
    log_dir = kafka_real / LOG_DIR
    got = reader_rows(make_reader(log_dir, maxSplitBytes="65536"))
    assert got.schema.equals(KAFKA_ARROW_SCHEMA)
    rows = sorted_rows(got)
    expected = kafka_rows_by_hand(log_dir)
    assert rows == expected
    # the fixture covers what the conversion must get right
    assert {r["timestampType"] for r in rows} == {0, 1}
    assert any(r["headers"] is None for r in rows) and any(r["headers"] for r in rows)


@given(micros=st.integers(-10**15, 10**15), delta_ms=st.integers(-3, 3))
def test_a_timestamp_filter_on_an_instant_selects_the_same_milliseconds(micros: int, delta_ms: int) -> None:
    """Each comparison with an instant, translated to epoch ms, keeps exactly the records the comparison keeps."""
    instant = EPOCH + dt.timedelta(microseconds=micros)
    record_ms = micros // 1000 + delta_ms
    record_us = record_ms * 1000
    for cls, holds in ((EqualTo, record_us == micros), (GreaterThan, record_us > micros),
                       (GreaterThanOrEqual, record_us >= micros), (LessThan, record_us < micros),
                       (LessThanOrEqual, record_us <= micros)):
        [(_, translated)] = KAFKA.source_filters([cls(("timestamp",), instant)])
        if translated is None:  # only an = between two milliseconds, which no record can satisfy
            assert cls is EqualTo and micros % 1000 and not holds
            continue
        assert type(translated) is cls and translated.attribute == ("timestamp",)
        assert {EqualTo: record_ms == translated.value, GreaterThan: record_ms > translated.value,
                GreaterThanOrEqual: record_ms >= translated.value, LessThan: record_ms < translated.value,
                LessThanOrEqual: record_ms <= translated.value}[cls] == holds


@pytest.mark.slow
def test_pushed_filters_are_translated_and_the_rest_go_back_to_spark_unchanged(kafka_real: Path) -> None:
    log_dir = kafka_real / LOG_DIR
    cut = dt.datetime(2024, 4, 19, 15, 0, 0, 250, tzinfo=dt.UTC)
    cut_ms = (cut - EPOCH) // dt.timedelta(milliseconds=1)
    reader = make_reader(log_dir)
    handled = [GreaterThanOrEqual(("timestamp",), cut), LessThan(("offset",), 16000), EqualTo(("topic",), "orders")]
    unhandled = [IsNotNull(("timestamp",)), EqualTo(("timestampType",), 0),
                 EqualTo(("timestamp",), cut),  # between two milliseconds
                 GreaterThan(("timestamp",), dt.datetime(2024, 4, 19))]  # no timezone: not an instant
    rest = list(reader.push_filters(handled + unhandled))
    assert rest == unhandled and all(a is b for a, b in zip(rest, unhandled))
    assert (reader.bounds.timestamp_min, reader.bounds.offset_max) == (cut_ms + 1, 15999)
    expected = [r for r in kafka_rows_by_hand(log_dir)
                if r["timestamp"] >= cut and r["offset"] < 16000 and r["topic"] == "orders"]
    assert 0 < len(expected) < 16000
    assert sorted_rows(reader_rows(reader)) == expected


# --------------------------------------------------------------------------------------------------
# Through Spark
# --------------------------------------------------------------------------------------------------


def broker_query(df, since: dt.datetime):
    """A query as written for ``spark.read.format("kafka")``: strings from bytes, a timestamp literal, headers."""
    from pyspark.sql import functions as F

    return (df.where((F.col("timestamp") >= F.lit(since)) & (F.col("timestampType") == 0))
              .selectExpr("CAST(key AS STRING) AS key", "value", "topic", "partition",
                          "offset", "timestamp", "size(headers) AS header_count",
                          "transform(headers, h -> h.key) AS header_keys"))


def test_through_spark_a_query_written_for_the_broker_runs_unchanged(spark, kafka_real: Path) -> None:
    register(spark)
    log_dir = kafka_real / LOG_DIR
    # .option("topics", ...) stands where the broker reader has .option("subscribe", ...)
    df = spark.read.format(FORMAT_NAME).option("schema", "kafka").option("topics", "orders").load(str(log_dir))
    assert df.schema == SPARKS_KAFKA_SCHEMA
    since = dt.datetime(2024, 4, 19, 15, 0, tzinfo=dt.UTC)
    got = sorted_rows(broker_query(df, since).toArrow())
    expected = [{"key": r["key"].decode() if r["key"] is not None else None,
                 "value": r["value"],
                 "topic": r["topic"], "partition": r["partition"], "offset": r["offset"], "timestamp": r["timestamp"],
                 # Spark's size() of a null array is -1 (spark.sql.legacy.sizeOfNull, the default)
                 "header_count": len(r["headers"]) if r["headers"] else -1,
                 "header_keys": [h["key"] for h in r["headers"]] if r["headers"] else None}
                for r in kafka_rows_by_hand(log_dir / "orders-0")
                if r["timestamp"] >= since and r["timestampType"] == 0]
    assert len(expected) > 1000 and any(r["header_keys"] for r in expected)
    assert got == expected


def test_through_spark_the_timestamp_literal_is_pushed_down_where_spark_keeps_it_per_scan(spark,
                                                                                        kafka_real: Path) -> None:
    """Where pushdown is per scan, the source takes the comparison with an instant over: Spark's plan keeps no
    filter on its value. Elsewhere (pyspark 4.x: see PUSHDOWN_IS_PER_SCAN) Spark keeps and applies it. The rows
    are the same either way."""
    from pyspark.sql import functions as F

    register(spark)
    df = spark.read.format(FORMAT_NAME).option("schema", "kafka").load(str(kafka_real / LOG_DIR))
    since = dt.datetime(2024, 4, 19, 15, 49, 54, 400_000, tzinfo=dt.UTC)
    recent = df.where(F.col("timestamp") > F.lit(since))
    plan = recent._jdf.queryExecution().executedPlan().toString()
    if FILTER_PUSHDOWN and PUSHDOWN_IS_PER_SCAN:
        assert "Filter isnotnull(timestamp" in plan and "2024-04-19" not in plan, plan
    else:
        assert "2024-04-19" in plan, plan  # taken over by no scan: Spark filters
    got = sorted((r["topic"], r["offset"]) for r in recent.select("topic", "offset").toArrow().to_pylist())
    expected = [(r["topic"], r["offset"]) for r in kafka_rows_by_hand(kafka_real / LOG_DIR) if r["timestamp"] > since]
    assert got == expected and 0 < len(got) < 1000
