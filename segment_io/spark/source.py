"""The ``kafka-segments`` Spark Python data source: Kafka log segments as rows of ``RECORD_SCHEMA``.

    segment_io.spark.register(spark)
    df = spark.read.format("kafka-segments").option("topics", "orders*").load("s3://bucket/kafka/logs")

Planning (listing, split cutting, pruning, packing small splits into tasks: :mod:`segment_io.spark.packing`)
runs in Spark's planner Python worker; each split is decoded by :func:`segment_io.decode.decode_segment_bytes` in
a task, straight into Arrow record batches, decoding only the columns the ``columns`` option asks for.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from segment_io.errors import CorruptRecordError, SegjobsError
from segment_io.format import BatchHeaders, scan_batches
from segment_io.schema import RECORD_SCHEMA
from segment_io.spark.bounds import RowBounds
from segment_io.spark.filters import BASE_PUSH_FILTERS, Filter
from segment_io.spark.options import ReadOptions, parse_options
from segment_io.spark.packing import PackedSplit, pack_splits
from segment_io.spark.planning import (
    SegmentSplit,
    batch_min_offsets,
    list_segments,
    list_tiered_segments,
    plan_splits,
    tiered_log_dir,
)
from segment_io.spark.schemas import ROW_SCHEMAS, SEGMENTS
from segment_io.storage import Storage, open_storage, scheme_of
from segment_io.storage.base import map_ahead

FORMAT_NAME = "kafka-segments"

#: The Spark schema of the source by default (option ``schema`` ``segments``), derived from the Arrow record schema
#: and nowhere else; :mod:`segment_io.spark.schemas` has the others.
SPARK_SCHEMA: StructType = SEGMENTS.spark_schema

#: The columns :meth:`RowBounds.row_mask` reads.
_FILTER_COLUMNS = ("offset", "timestamp")

#: Whether Spark keeps the read plan made after ``pushFilters`` (the partitions and the pickled reader) with the
#: one scan it was made for. pyspark 4.1 to 4.3 do not: ``PythonScanBuilder.pushFilters`` stores it on the
#: ``PythonDataSourceV2`` instance that every scan of a loaded DataFrame shares, and a scan that pushes nothing
#: (``df.count()`` after ``df.where("offset < 10").count()``) takes the last plan stored there, as do all scans
#: of one query (a union of two filtered views of ``df`` reads the second view twice). Pushed filters would then
#: leak into scans that never asked for them, so the reader takes over none there and Spark applies every
#: filter; the options (``topics``, ``startingOffset``, ...) still skip splits, since they belong to the
#: DataFrame. Spark's main branch keeps the plan in the scan builder (SPARK-58551, for 5.0); the property test
#: of tests/segment_io/test_spark_source.py checks whichever Spark is installed.
PUSHDOWN_IS_PER_SCAN: bool = int(pyspark.__version__.split(".")[0]) >= 5


_F = TypeVar("_F", bound=Callable[..., Any])


#: The modules of Spark's Python workers that plan a data source's read: they create the source (``schema``,
#: ``reader``) and list its partitions.
_PLANNER_WORKERS = ("pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read")


def _in_spark_planner() -> bool:
    """Whether this process is one of Spark's Python workers that plan a data source's read: forked by
    ``pyspark.daemon``, which imports the worker's module, or started as ``python -m`` that module."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return any(name in sys.modules for name in _PLANNER_WORKERS) or getattr(spec, "name", None) in _PLANNER_WORKERS


def message_first(method: _F) -> _F:
    """Let a user's mistake (a bad option, a ``topics`` glob matching no topic, a path with nothing to read: any
    :class:`~segment_io.errors.SegjobsError`) reach the user as its message, not under a traceback.

    Spark reports an error of the Python worker that plans the read as ``[PYTHON_DATA_SOURCE_ERROR] Failed to
    ...: `` followed by what the worker formatted: by default the whole traceback, the message 800 characters
    further on. The worker formats the message alone when ``SPARK_HIDE_TRACEBACK`` is set (what Spark's
    ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets), read when the exception is reported; the
    planner's worker is destroyed after an error, never reused, so no other error loses its traceback. Errors
    that are not the user's (a bug) keep their traceback."""

    @functools.wraps(method)
    def planned(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except SegjobsError:
            if _in_spark_planner():
                os.environ["SPARK_HIDE_TRACEBACK"] = "1"
            raise

    return planned  # type: ignore[return-value]


class KafkaSegmentsDataSource(DataSource):
    """``spark.read.format("kafka-segments").load(uri)``: see :mod:`segment_io.spark` for the options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    @message_first
    def schema(self) -> StructType:
        # Validating here makes a bad option fail at load(), before any job is planned.
        options = parse_options(self.options)
        if options.read_mode == "latest":
            return LATEST_SPARK_SCHEMA
        return ROW_SCHEMAS[options.row_schema].spark_schema_of(options.columns)

    @message_first
    def reader(self, schema: StructType) -> "KafkaSegmentsReader | LatestReader":
        options = parse_options(self.options)
        if options.read_mode == "latest":
            return LatestReader(options)
        return KafkaSegmentsReader(options)


class _PushFiltersMethod:
    """``reader.pushFilters`` as Spark's planner sees it.

    pyspark refuses to plan a reader that overrides ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is false (it tells overriding apart by the bound
    method's ``__func__``). Skipping pushdown is always safe here (Spark then applies every filter
    itself and the reader only honours the options), so the source must read under either setting:
    this callable reports the base implementation as its ``__func__`` to pass that check, and runs
    the source's own pushdown when Spark calls it (only with the flag on), where
    :data:`PUSHDOWN_IS_PER_SCAN`.
    """

    def __init__(self, reader: "KafkaSegmentsReader") -> None:
        # An instance attribute, so that it is not turned into a bound method on access.
        self.__func__ = BASE_PUSH_FILTERS  # None on pyspark 4.0, which never calls pushFilters
        self.__self__ = reader

    def __call__(self, filters: list[Filter]) -> Iterable[Filter]:
        return self.__self__.push_filters(filters) if PUSHDOWN_IS_PER_SCAN else filters


class _PushFiltersDescriptor:
    def __get__(self, reader: "KafkaSegmentsReader | None", owner: type) -> Any:
        return self if reader is None else _PushFiltersMethod(reader)


class KafkaSegmentsReader(DataSourceReader):
    """Plans splits of the segments a URI names and decodes each split into record batches."""

    pushFilters = _PushFiltersDescriptor()

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.bounds = RowBounds.from_options(options)
        self.row_schema = ROW_SCHEMAS[options.row_schema]

    def push_filters(self, filters: list[Filter]) -> list[Filter]:
        """Take over the filters the row schema's bounds handle (:meth:`RowBounds.narrowed`); return the others to
        Spark. Spark's ``pushFilters`` reaches this only where :data:`PUSHDOWN_IS_PER_SCAN`."""
        self.bounds, rest = self.row_schema.narrow(self.bounds, filters)
        return rest

    @message_first
    def partitions(self) -> Sequence[InputPartition]:
        """One split per segment, more for segments above ``maxSplitBytes``; splits that cannot match
        the options and pushed filters are left out, and the rest packed into tasks of up to ``maxSplitBytes``
        (:func:`~segment_io.spark.packing.pack_splits`)."""
        if self.bounds.is_empty:
            return []
        stores = _Stores(self.options)
        storage = stores.of(self.options.path)
        if self.options.remote is None:
            segments = list_segments(storage, self.options.path, self.bounds)
        else:
            segments = list_tiered_segments(storage, self.options.path, self.bounds, self.options.remote,
                                            self.options.remote_layout, self.options.storage_options())
        splits: list[SegmentSplit] = []
        for segment in segments:
            if not segment.size:
                continue
            if not self.bounds.overlaps_offsets(
                    segment.base_offset, None if segment.next_base_offset is None else segment.next_base_offset - 1):
                continue  # skipped before its index is read or its batches are scanned
            splits.extend(s for s in plan_splits(stores.of(segment.uri), segment, self.options.max_split_bytes)
                          if s.may_match(self.bounds))
        return pack_splits(splits, self.options.max_split_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Decode the splits of one task and yield their matching rows in batches of about ``batchRows`` rows:
        the rows of small segments are gathered until there are that many, so they travel to Spark together."""
        if not isinstance(partition, PackedSplit):
            return  # pyspark plans one placeholder partition when partitions() found nothing to read
        columns = self.options.columns
        batch_rows = self.options.batch_rows
        small = _Gathered(batch_rows)
        for table in read_splits(partition.splits, self.options, self.bounds,
                                 self.row_schema.record_columns(columns)):
            if not table.num_rows:
                continue
            rows = self.row_schema.rows(table, columns)
            if rows.num_rows < batch_rows:
                yield from small.add(rows)
            else:  # a large split's rows go as they are (no copy), after the small ones before it
                yield from small.flush()
                yield from rows.to_batches(max_chunksize=batch_rows)
        yield from small.flush()


class _Gathered:
    """Rows of small splits gathered into record batches of ``batch_rows`` rows (one copy of them)."""

    def __init__(self, batch_rows: int) -> None:
        self.batch_rows = batch_rows
        self.tables: list[pa.Table] = []
        self.rows = 0

    def add(self, table: pa.Table) -> list[pa.RecordBatch]:
        """Take ``table``'s rows; the full batches that makes."""
        self.tables.append(table)
        self.rows += table.num_rows
        if self.rows < self.batch_rows:
            return []
        rows = pa.concat_tables(self.tables).combine_chunks()
        whole = self.rows - self.rows % self.batch_rows
        self.tables, self.rows = [rows.slice(whole)], self.rows - whole
        return rows.slice(0, whole).to_batches(max_chunksize=self.batch_rows)

    def flush(self) -> list[pa.RecordBatch]:
        """The rows taken and not yet in a batch, as one batch (or none)."""
        rows = self.rows
        tables, self.tables, self.rows = self.tables, [], 0
        return pa.concat_tables(tables).combine_chunks().to_batches() if rows else []


def read_splits(splits: Sequence[SegmentSplit], options: ReadOptions, bounds: RowBounds,
                columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
    """:func:`read_split` of each of ``splits`` in order, their bytes fetched a few splits ahead where the store
    answers each request with a round trip (S3: ``io_concurrency`` requests at once), one by one on local disk."""
    if not splits:
        return
    stores = _Stores(options)
    concurrency = max(stores.of(split.uri).io_concurrency for split in splits)
    fetched = map_ahead(lambda split: _fetched_bytes(stores.of(split.uri), split), splits, concurrency)
    for split, data in zip(splits, fetched):
        if data is None:
            yield _decode_mapped(stores.of(split.uri), split, options, bounds, columns)
        else:
            yield decode_split(data, split, options, bounds, columns)


def _fetched_bytes(storage: Storage, split: SegmentSplit) -> bytes | None:
    """The split's bytes; None for a closed segment on local disk, which :func:`_decode_mapped` maps instead: a
    read copies every byte into fresh memory, two thirds of the CPU of a read with ``columns`` ``topic``."""
    if split.closed and storage.local_path(split.uri) is not None:
        return None
    return _split_bytes(storage, split)


def _decode_mapped(storage: Storage, split: SegmentSplit, options: ReadOptions, bounds: RowBounds,
                   columns: Sequence[str] | None) -> pa.Table:
    """:func:`decode_split` of the split's bytes in a memory-mapped file (the decoded table holds copies, nothing
    of the mapping). A file cut short since it was planned maps as long as it is now: its split is decoded from
    what is left, as a read of it would be."""
    with storage.read_mapped(split.uri) as mapped:
        # No view is released explicitly: an error's traceback may still hold one, and its release would
        # then raise in place of the error. Unmapping waits for the last view (see map_open).
        return decode_split(memoryview(mapped)[split.start:split.end], split, options, bounds, columns)


class _Stores:
    """The store of each URI scheme a read meets, opened once: a tiered topic's remote segments may be in
    another store than its log dir (an ``s3://`` remote store beside a local log dir)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.opened: dict[str, Storage] = {}

    def of(self, uri: str) -> Storage:
        scheme = scheme_of(uri)
        if scheme not in self.opened:
            self.opened[scheme] = open_storage(uri, self.options.storage_options())
        return self.opened[scheme]


def read_split(split: SegmentSplit, options: ReadOptions, bounds: RowBounds,
               columns: Sequence[str] | None = None) -> pa.Table:
    """The records of ``split`` that satisfy ``bounds``, as a table of ``RECORD_SCHEMA`` (or of its ``columns``,
    in ``RECORD_SCHEMA``'s order, when given)."""
    storage = open_storage(split.uri, options.storage_options())
    return decode_split(_split_bytes(storage, split), split, options, bounds, columns)


def _split_bytes(storage: Storage, split: SegmentSplit) -> bytes:
    return (storage.read(split.uri) if split.is_whole_segment
            else storage.read_range(split.uri, split.start, split.end - split.start))


def decode_split(data: bytes | memoryview, split: SegmentSplit, options: ReadOptions, bounds: RowBounds,
                 columns: Sequence[str] | None = None) -> pa.Table:
    """:func:`read_split` of the split's bytes ``data``, already read."""
    from segment_io.decode import decode_segment_bytes

    bounds = split.kept(bounds)
    wanted_columns = RECORD_SCHEMA.names if columns is None else list(columns)
    # The row filter reads offsets and timestamps whether or not the rows carry them.
    decoded = [name for name in RECORD_SCHEMA.names
               if name in wanted_columns or (name in _FILTER_COLUMNS and bounds.filters_rows)]
    allow_tail = options.allow_truncated_tail and split.is_segment_tail
    first = 0
    try:
        wanted = _batch_range(data, split, bounds, allow_tail)
        if wanted is None:
            return RECORD_SCHEMA.empty_table()
        first, stop = wanted
        table = decode_segment_bytes(
            memoryview(data)[first:stop], path=split.uri, topic=split.topic, partition=split.partition,
            segment_base_offset=split.segment_base_offset, verify_crc=options.verify_crc,
            include_control=options.include_control, allow_truncated_tail=allow_tail, columns=decoded)
    except CorruptRecordError as err:
        # Positions inside the slice become positions inside the file.
        raise err.located(path=split.uri, offset_shift=split.start + first) from err
    shift = split.start + first
    position = table.schema.get_field_index("batch_position")
    if shift and position >= 0:
        positions = pc.add(table.column(position), pa.scalar(shift, pa.int64()))
        table = table.set_column(position, table.schema.field(position), positions)
    mask = bounds.row_mask(table)
    if mask is not None:
        table = table.filter(mask)
    return table if columns is None else table.select([name for name in decoded if name in wanted_columns])


def _batch_range(data: bytes | memoryview, split: SegmentSplit, bounds: RowBounds,
                 allow_tail: bool) -> tuple[int, int] | None:
    """The byte range of ``data`` worth decoding: from the first to the last batch that may hold a
    matching record; None when no batch may. Batches are scanned only when the split's own bounds do
    not settle it."""
    whole = (0, len(data))
    offsets_settled = ((bounds.offset_min is None
                        or (split.min_offset is not None and split.min_offset >= bounds.offset_min))
                       and (bounds.offset_max is None
                            or (split.max_offset is not None and split.max_offset <= bounds.offset_max)))
    if offsets_settled and bounds.timestamp_min is None:
        return whole
    headers = scan_batches(data, path=split.uri)
    stop_at_end = bool(headers.truncated_tail) and not allow_tail  # the decoder must see, and report, it
    keep = _batches_that_may_match(headers, bounds, split.min_offset)
    if not keep.any():
        return (headers.end, len(data)) if stop_at_end else None
    indices = np.flatnonzero(keep)
    first, last = int(indices[0]), int(indices[-1])
    stop = len(data) if stop_at_end else int(headers.position[last] + headers.size[last])
    return int(headers.position[first]), stop


def _batches_that_may_match(headers: BatchHeaders, bounds: RowBounds, first_floor: int | None) -> np.ndarray:
    keep = np.ones(len(headers), dtype=bool)
    if bounds.offset_min is not None:
        keep &= headers.last_offset >= bounds.offset_min
    if bounds.offset_max is not None:
        keep &= batch_min_offsets(headers, first_floor) <= bounds.offset_max
    if bounds.timestamp_min is not None:
        # Only v2 max timestamps are bounds the broker guarantees; legacy batches are always kept.
        keep &= (headers.magic != 2) | (headers.max_timestamp >= bounds.timestamp_min)
    return keep


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("kafka-segments")`` available in ``spark`` (in a local session whose workers'
    Python nobody chose, they run this interpreter: see :mod:`segment_io.spark.workers`)."""
    from segment_io.spark.workers import use_this_python_for_local_workers

    use_this_python_for_local_workers(spark)
    spark.dataSource.register(KafkaSegmentsDataSource)


# --------------------------------------------------------------------------------------------------
# read=latest: a compacted topic as a table
# --------------------------------------------------------------------------------------------------

def _latest_spark_schema() -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from segment_io.latest import TABLE_SCHEMA

    return from_arrow_schema(TABLE_SCHEMA)


#: The rows of ``read`` ``latest``: :data:`segment_io.latest.TABLE_SCHEMA`, the columns of a ``segjobs table``.
LATEST_SPARK_SCHEMA: StructType = _latest_spark_schema()


class LatestPartition(InputPartition):
    """Every live segment of one Kafka partition, in offset order: read by one task."""

    def __init__(self, topic: str, partition: int, uris: tuple[str, ...], log_start: int = 0) -> None:
        super().__init__((topic, partition))
        self.topic, self.partition, self.uris, self.log_start = topic, partition, uris, log_start


class LatestReader(DataSourceReader):
    """``read`` ``latest``: one task per Kafka partition returns its live keys' latest records, with the
    semantics of ``segjobs table`` (:func:`segment_io.latest.partition_latest`: aborted data, markers and keyless
    records out, from the partition's log start offset up to its last stable offset). The log start offset
    is the log dir's ``log-start-offset-checkpoint`` entry when there is one: records below it are deleted for
    every consumer (DeleteRecords, retention), even while their segment is still on disk."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.bounds = RowBounds.from_options(options)

    @message_first
    def partitions(self) -> Sequence[InputPartition]:
        storage = open_storage(self.options.path, self.options.storage_options())
        by_partition: dict[tuple[str, int], list[str]] = {}
        if self.options.remote is None:
            segments = list_segments(storage, self.options.path, self.bounds)
        else:
            segments = list_tiered_segments(storage, self.options.path, self.bounds, self.options.remote,
                                            self.options.remote_layout, self.options.storage_options(),
                                            whole_segments=True)
        for segment in segments:
            by_partition.setdefault((segment.topic, segment.partition), []).append(segment.uri)
        checkpoints: dict[str, dict[tuple[str, int], int]] = {}
        # a tiered partition's first segments are remote: its log dir is the one the tiered read listed
        log_dir = tiered_log_dir(storage, self.options.path)[0].root if self.options.remote is not None else None
        return [LatestPartition(t, p, tuple(uris), _log_start(storage, t, p, _checkpoint_of(uris[0], log_dir),
                                                              checkpoints))
                for (t, p), uris in sorted(by_partition.items())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from segment_io.latest import partition_latest

        if not isinstance(partition, LatestPartition):
            return
        stores = _Stores(self.options)
        segments = [(uri, stores.of(uri).read(uri)) for uri in partition.uris]
        rows = partition_latest(segments, topic=partition.topic, partition=partition.partition,
                                verify_crc=self.options.verify_crc,
                                allow_truncated_tail=self.options.allow_truncated_tail,
                                log_start=partition.log_start)
        if rows.num_rows:
            yield from rows.to_batches(max_chunksize=self.options.batch_rows)


def _checkpoint_of(segment_uri: str, log_dir: str | None) -> str:
    """The ``log-start-offset-checkpoint`` of ``log_dir``, or when None of the log dir holding ``segment_uri``."""
    from segment_io.layout import LOG_START_OFFSET_CHECKPOINT, log_dir_file

    if log_dir is not None:
        return f"{log_dir.rstrip('/')}/{LOG_START_OFFSET_CHECKPOINT}"
    return log_dir_file(segment_uri.rsplit("/", 1)[0], LOG_START_OFFSET_CHECKPOINT)


def _log_start(storage: Any, topic: str, partition: int, uri: str,
               checkpoints: dict[str, dict[tuple[str, int], int]]) -> int:
    """The partition's entry in the ``log-start-offset-checkpoint`` at ``uri`` (0 when there is none, or the
    segment is not in a partition dir); ``checkpoints`` caches the files read."""
    from segment_io.checkpoint import read_offset_checkpoint

    if not topic or partition < 0:
        return 0
    if uri not in checkpoints:
        checkpoints[uri] = read_offset_checkpoint(storage, uri)
    return max(checkpoints[uri].get((topic, partition), 0), 0)
