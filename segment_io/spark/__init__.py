"""Kafka log segments as a Spark data source: ``spark.read.format("kafka-segments").load(uri)``.

``uri`` is a log dir, a partition dir or one ``.log`` file, local or ``s3://``. Rows have the columns and
exact types of :data:`segment_io.schema.RECORD_SCHEMA`, or with ``schema`` ``kafka`` those of Spark's own
``kafka`` batch source (:mod:`segment_io.spark.schemas`). Options (all optional; names are case-insensitive):

=====================  =============================================================================
``topics``             comma-separated topic globs (``orders*,payments``); a glob that matches no topic
                       is an error naming the closest topics, not an empty result
``partitions``         comma-separated ``<topic>-<partition>`` names
``startingOffset``     first offset to return (inclusive)
``endingOffset``       offset to stop at (exclusive)
``startingTimestamp``  smallest record timestamp to return, epoch ms (inclusive)
``endingTimestamp``    timestamp to stop at, epoch ms (exclusive)
``includeControl``     also return the records of control batches (default false)
``verifyCrc``          check every batch CRC (default true)
``allowTruncatedTail`` read a segment whose last batch is cut short, without that batch (default false)
``batchRows``          rows per Arrow batch handed to Spark (default 65536)
``maxSplitBytes``      the most one task reads: segments larger than this are read by several tasks,
                       consecutive smaller ones are packed into one task up to it, each weighing its size
                       plus 1 MiB (:mod:`segment_io.spark.packing`); bytes or a binary unit, ``64MiB``
                       (default 128MiB)
``columns``            comma-separated columns of the chosen ``schema``: the rows have only these, in this
                       order, and only what they need is decoded (no record bytes without ``key``, ``value``
                       and ``headers``); Spark does no column pruning for a Python data source
``schema``             ``segments`` (default): every record and batch field; ``kafka``: exactly the columns
                       and types of ``spark.read.format("kafka")`` with ``includeHeaders`` (key, value, topic,
                       partition, offset, timestamp as a TimestampType, timestampType, headers), so a query
                       written for the broker reader runs unchanged on segments
``read``               ``records`` (default): every record; ``latest``: a compacted topic as a table, one row
                       per live key of each partition with the columns of ``segjobs table``
                       (:data:`segment_io.latest.TABLE_SCHEMA`): the latest record per key, aborted data,
                       markers and keyless records left out, up to each partition's last stable offset; the
                       offset, timestamp, ``includeControl`` and ``schema`` options do not apply
``remote``             the remote store of tiered topics (a local path or ``s3://`` URI): each partition of the
                       log dir is read as one log, its finished remote segments (per the log dir's
                       ``__remote_log_metadata``) below the local log, then its local segments, no offset twice
                       (:mod:`jobs.rules.tiered_read`)
``remoteLayout``       how the remote store names its objects: ``local-tiered-storage`` (the default) or
                       ``aiven`` (unencrypted; chunked segments restored through their manifests)
``s3.endpoint``, ``s3.region``, ``s3.access_key_id``, ``s3.secret_access_key``, ``s3.session_token``,
``s3.profile``         S3 settings; unset ones come from the environment (see ``StorageOptions``)
=====================  =============================================================================

Filters on ``topic``/``partition`` (``=``, ``IN``) and on ``offset``/``timestamp`` (``=``, ``<``, ``<=``,
``>``, ``>=``; epoch ms, or with ``schema`` ``kafka`` a timestamp literal) are pushed down when
``spark.sql.python.filterPushdown.enabled`` is true, on a Spark that keeps pushed filters to the scan they were
pushed for (:data:`segment_io.spark.source.PUSHDOWN_IS_PER_SCAN`; pyspark 4.x does not, and Spark applies every
filter there; pyspark 4.0 has no pushdown at all): splits that cannot match are not read. The options above skip
splits on every Spark. The source reads correctly with the setting off too (Spark then filters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from segment_io.spark.options import DataSourceOptionError, ReadOptions, parse_options

if TYPE_CHECKING:
    from segment_io.spark.source import FORMAT_NAME, SPARK_SCHEMA, KafkaSegmentsDataSource, read_split, register

#: The names of the data source itself: imported at their first use, as the source imports pyspark (a few
#: tenths of a second of CPU), which the jobs' driver-side code that imports this package's options and packing
#: (and a run whose tasks run on the driver) never needs.
_OF_THE_SOURCE = frozenset({"FORMAT_NAME", "SPARK_SCHEMA", "KafkaSegmentsDataSource", "read_split", "register"})


def __getattr__(name: str) -> Any:
    if name in _OF_THE_SOURCE:
        from segment_io.spark import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FORMAT_NAME", "SPARK_SCHEMA", "DataSourceOptionError", "KafkaSegmentsDataSource", "ReadOptions",
    "parse_options", "read_split", "register",
]
