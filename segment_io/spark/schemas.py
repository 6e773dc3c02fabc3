"""The row schemas the ``kafka-segments`` source returns, chosen by its ``schema`` option.

``segments`` (the default) is :data:`segment_io.schema.RECORD_SCHEMA`: every record and batch field. ``kafka`` is
exactly what Spark's own ``kafka`` batch source returns with ``includeHeaders`` true (its
``KafkaRecordToRowConverter``): the same columns in the same order, the same types, every field nullable, a
record without headers has ``headers`` null (not an empty array), ``timestamp`` is a ``TimestampType`` instant
and ``timestampType`` Kafka's id (-1 none, 0 CreateTime, 1 LogAppendTime). A query written for
``spark.read.format("kafka")`` then runs unchanged on segments.

Reading always decodes into ``RECORD_SCHEMA``; :meth:`RowSchema.rows` turns a decoded table into the chosen
schema column by column, and :meth:`RowSchema.source_filters` turns Spark's filters on the chosen schema into
filters on ``RECORD_SCHEMA`` for the source's pushdown (a timestamp literal becomes epoch milliseconds).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
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

from segment_io.schema import RECORD_SCHEMA

if TYPE_CHECKING:
    from segment_io.spark.bounds import RowBounds

#: Spark's ``kafka`` source schema with headers, field by field as its KafkaRecordToRowConverter declares it.
KAFKA_SPARK_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark requires of a Python data source's record batches for ``schema``: its own
    conversion, as the planner's worker calls it (timestamps in microseconds, UTC)."""
    try:
        return to_arrow_schema(schema, timezone="UTC")  # type: ignore[call-arg, unused-ignore]
    except TypeError:  # pyspark 4.0: no timezone parameter, timestamps are UTC
        return to_arrow_schema(schema)


#: The Arrow batches Spark takes for :data:`KAFKA_SPARK_SCHEMA`.
KAFKA_ARROW_SCHEMA: pa.Schema = spark_arrow_schema(KAFKA_SPARK_SCHEMA)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROS_PER_MS = 1000


@dataclass(frozen=True)
class RowSchema:
    """One choice of the ``schema`` option: what Spark is told, and how decoded records become its rows."""

    name: str
    spark_schema: StructType
    arrow_schema: pa.Schema
    #: A ``RECORD_SCHEMA`` table -> a table of ``arrow_schema``.
    convert: Callable[[pa.Table], pa.Table]
    #: Whether filters on ``timestamp`` carry instants (translated to the records' epoch milliseconds).
    timestamp_filters: bool = False

    def rows(self, table: pa.Table) -> pa.Table:
        """``table`` (of ``RECORD_SCHEMA``) as rows of this schema."""
        return self.convert(table)

    def source_filters(self, filters: list[Any]) -> list[tuple[Any, Any]]:
        """Pair each of Spark's filters with its equivalent on ``RECORD_SCHEMA`` (None: none, Spark applies it).

        Filters on ``topic``, ``partition`` and ``offset`` mean the same in both schemas. A ``timestamp``
        filter of the kafka schema carries an instant (a timezone-aware datetime, microseconds); the records'
        timestamps are whole milliseconds, so ``ts >= t`` holds exactly when ``ts_ms >= ceil(t / 1 ms)``, and
        likewise for the other comparisons. An ``=`` on an instant between two milliseconds matches nothing
        and is left to Spark, as is every filter on a column the two schemas do not share.
        """
        if not self.timestamp_filters:
            return [(f, f) for f in filters]
        return [(f, _millisecond_filter(f)) for f in filters]

    def narrow(self, bounds: "RowBounds", filters: list[Any]) -> tuple["RowBounds", list[Any]]:
        """:meth:`RowBounds.narrowed` for Spark's filters on this schema: the new bounds, and those of
        ``filters`` (the very objects Spark passed) the source does not apply itself."""
        pairs = self.source_filters(filters)
        narrowed, rest = bounds.narrowed([s for _, s in pairs if s is not None])
        unhandled = {id(s) for s in rest}
        return narrowed, [f for f, s in pairs if s is None or id(s) in unhandled]


def _identity(table: pa.Table) -> pa.Table:
    return table


def _to_kafka_rows(table: pa.Table) -> pa.Table:
    """The kafka schema's columns from a ``RECORD_SCHEMA`` table: vectorised, no Python object per record."""
    millis = table.column("timestamp").cast(pa.timestamp("ms", tz="UTC"))
    columns = [
        table.column("key"),
        table.column("value"),
        table.column("topic"),
        table.column("partition"),
        table.column("offset"),
        millis.cast(KAFKA_ARROW_SCHEMA.field("timestamp").type),
        table.column("timestamp_type").cast(pa.int32()),
        _headers_or_null(table.column("headers"), KAFKA_ARROW_SCHEMA.field("headers").type),
    ]
    return pa.Table.from_arrays(columns, schema=KAFKA_ARROW_SCHEMA)


def _headers_or_null(headers: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``headers`` with Spark's nullability, and null where a record has no header (as Spark's source)."""
    chunks = []
    for chunk in headers.cast(target).chunks:
        empty = pc.equal(pc.list_value_length(chunk), 0)
        chunks.append(pa.ListArray.from_arrays(chunk.offsets, chunk.values, type=target, mask=empty))
    return pa.chunked_array(chunks, type=target)


def _millisecond_filter(f: Any) -> Any:
    from segment_io.spark.filters import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual

    if getattr(f, "attribute", None) != ("timestamp",):
        return f  # the same column name means the same thing in both schemas (timestampType is not pushed)
    value = getattr(f, "value", None)
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    micros = (value - _EPOCH) // dt.timedelta(microseconds=1)
    floor_ms, remainder = divmod(micros, _MICROS_PER_MS)
    ceil_ms = floor_ms + (remainder > 0)
    if isinstance(f, EqualTo):
        return EqualTo(f.attribute, floor_ms) if remainder == 0 else None
    if isinstance(f, GreaterThan):  # ts_ms * 1000 > micros
        return GreaterThan(f.attribute, floor_ms)
    if isinstance(f, GreaterThanOrEqual):
        return GreaterThanOrEqual(f.attribute, ceil_ms)
    if isinstance(f, LessThan):
        return LessThan(f.attribute, ceil_ms)
    if isinstance(f, LessThanOrEqual):
        return LessThanOrEqual(f.attribute, floor_ms)
    return None


SEGMENTS = RowSchema("segments", from_arrow_schema(RECORD_SCHEMA), RECORD_SCHEMA, _identity)
KAFKA = RowSchema("kafka", KAFKA_SPARK_SCHEMA, KAFKA_ARROW_SCHEMA, _to_kafka_rows, timestamp_filters=True)

#: The values of the ``schema`` option; the first is the default.
ROW_SCHEMAS: dict[str, RowSchema] = {s.name: s for s in (SEGMENTS, KAFKA)}
DEFAULT_ROW_SCHEMA = SEGMENTS.name
