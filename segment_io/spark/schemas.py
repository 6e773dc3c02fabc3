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
from typing import TYPE_CHECKING, Any, Callable, Sequence

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


#: How one column of a row schema is made from a decoded ``RECORD_SCHEMA`` table: the record columns it reads, and
#: the function that makes it (vectorised: no Python object per record).
ColumnMaker = tuple[tuple[str, ...], Callable[[pa.Table], Any]]


@dataclass(frozen=True)
class RowSchema:
    """One choice of the ``schema`` option: what Spark is told, and how decoded records become its rows."""

    name: str
    spark_schema: StructType
    arrow_schema: pa.Schema
    #: Every column of ``arrow_schema`` -> how it is made (:data:`ColumnMaker`).
    makers: dict[str, ColumnMaker]
    #: Whether filters on ``timestamp`` carry instants (translated to the records' epoch milliseconds).
    timestamp_filters: bool = False

    def column_names(self, columns: Sequence[str] | None = None) -> tuple[str, ...]:
        """The columns of the rows: ``columns`` (the ``columns`` option) or, when None, all of them."""
        return tuple(self.arrow_schema.names) if columns is None else tuple(columns)

    def spark_schema_of(self, columns: Sequence[str] | None = None) -> StructType:
        """What Spark is told the rows are: this schema's fields for ``columns`` (None: all), in that order."""
        return StructType([self.spark_schema[name] for name in self.column_names(columns)])

    def record_columns(self, columns: Sequence[str] | None = None) -> tuple[str, ...]:
        """The ``RECORD_SCHEMA`` columns the rows of ``columns`` (None: all) are made of: all that must be
        decoded. Without ``key``, ``value`` and ``headers`` no record's bytes are copied (see
        :func:`segment_io.decode.decode_segment_bytes`)."""
        needed = {source for name in self.column_names(columns) for source in self.makers[name][0]}
        return tuple(name for name in RECORD_SCHEMA.names if name in needed)

    def rows(self, table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
        """``table`` (of ``RECORD_SCHEMA``, or at least its :meth:`record_columns`) as rows of this schema's
        ``columns`` (None: all)."""
        names = self.column_names(columns)
        schema = pa.schema([self.arrow_schema.field(name) for name in names])
        return pa.Table.from_arrays([self.makers[name][1](table) for name in names], schema=schema)

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


def _record_column(name: str) -> ColumnMaker:
    return (name,), lambda table: table.column(name)


def _kafka_timestamp(table: pa.Table) -> Any:
    millis = table.column("timestamp").cast(pa.timestamp("ms", tz="UTC"))
    return millis.cast(KAFKA_ARROW_SCHEMA.field("timestamp").type)


#: The kafka schema's columns from a ``RECORD_SCHEMA`` table.
_KAFKA_MAKERS: dict[str, ColumnMaker] = {
    "key": _record_column("key"),
    "value": _record_column("value"),
    "topic": _record_column("topic"),
    "partition": _record_column("partition"),
    "offset": _record_column("offset"),
    "timestamp": (("timestamp",), _kafka_timestamp),
    "timestampType": (("timestamp_type",), lambda table: table.column("timestamp_type").cast(pa.int32())),
    "headers": (("headers",), lambda table: _headers_or_null(table.column("headers"),
                                                             KAFKA_ARROW_SCHEMA.field("headers").type)),
}


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


SEGMENTS = RowSchema("segments", from_arrow_schema(RECORD_SCHEMA), RECORD_SCHEMA,
                     {name: _record_column(name) for name in RECORD_SCHEMA.names})
KAFKA = RowSchema("kafka", KAFKA_SPARK_SCHEMA, KAFKA_ARROW_SCHEMA, _KAFKA_MAKERS, timestamp_filters=True)

#: The values of the ``schema`` option; the first is the default.
ROW_SCHEMAS: dict[str, RowSchema] = {s.name: s for s in (SEGMENTS, KAFKA)}
DEFAULT_ROW_SCHEMA = SEGMENTS.name
