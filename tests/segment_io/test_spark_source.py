"""The ``kafka-segments`` data source: options, split planning, pushdown, and reads through Spark.

Expected rows always come from :func:`segment_io.decode.read_segment` on the same files (filtered here with
numpy where a test filters), never from the data source itself. Most checks run the reader's planning and
read path directly (no Spark); a few small Spark reads prove the wiring: schema, registration, pushdown on
and off, splitting, and S3.
"""

from __future__ import annotations

import contextlib
import operator
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyspark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import DataSourceReader

from segment_io.decode import read_segment
from segment_io.errors import CorruptRecordError, NotFoundError
from segment_io.format import scan_batches
from segment_io.schema import RECORD_SCHEMA
from segment_io.spark import (
    FORMAT_NAME,
    SPARK_SCHEMA,
    DataSourceOptionError,
    parse_options,
    read_split,
    register,
)
from segment_io.spark.bounds import RowBounds
from segment_io.spark.filters import (
    FILTER_PUSHDOWN,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
)
from segment_io.spark.planning import SegmentRef, list_segments, plan_splits
from segment_io.spark.source import PUSHDOWN_IS_PER_SCAN, KafkaSegmentsReader, read_splits
from segment_io.storage import LocalStorage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.hypothesis_budget import examples

SORT_KEYS = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

#: A partition with an offset index, 2827 records of many lz4 batches (460 KB): big enough to split.
MONITORING = "rjmfernandes-cp7.6-kraft-lz4/data/_confluent-monitoring-0"
#: A log dir with two-segment partitions, offset gaps and tombstones.
COMPACTED_LOG_DIR = "donaldy-kafka2.7-compacted-offsets/kafka-logs"
#: Legacy magic-1 message sets: no exact base offset in wrapper headers.
MAGIC1_LOG_DIR = "xpxwo100-kafka0.10-magic-v1/tmp/kafka-logs"


def partition_dirs(root: Path) -> list[Path]:
    """Every directory of the fixtures that holds segment files."""
    return sorted({p.parent for p in root.rglob("*.log")})


def expected_rows(dirs: list[Path], *, include_control: bool = False) -> pa.Table:
    """What read_segment returns for every segment in ``dirs``, sorted by topic/partition/offset."""
    tables = [read_segment(str(log), include_control=include_control) for d in dirs for log in sorted(d.glob("*.log"))]
    return pa.concat_tables(tables).sort_by(SORT_KEYS)


def reader_rows(reader: KafkaSegmentsReader) -> pa.Table:
    """Plan and read like Spark does, without Spark."""
    batches = [b for split in reader.partitions() for b in reader.read(split)]
    return pa.Table.from_batches(batches, schema=RECORD_SCHEMA)


def make_reader(path: Path | str, **options: str) -> KafkaSegmentsReader:
    return KafkaSegmentsReader(parse_options({"path": str(path), **options}))


# --------------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option, value", [
    ("batchRows", "0"), ("batchRows", "many"), ("maxSplitBytes", "-5"), ("startingOffset", "1.5"),
    ("verifyCrc", "maybe"), ("includeControl", "2"), ("partitions", "no_partition_number"),
    ("topics", "a,,b"), ("startingOfset", "3"),
])
def test_bad_option_names_the_option(option: str, value: str) -> None:
    with pytest.raises(DataSourceOptionError) as caught:
        parse_options({"path": "/x", option: value})
    # Spark lower-cases option keys before the source sees them, so an unknown one is named that way.
    assert caught.value.option.lower() == option.lower()
    assert repr(caught.value.option) in str(caught.value)


def test_max_split_bytes_takes_a_size_with_units() -> None:
    assert parse_options({"path": "/x", "maxSplitBytes": "64MiB"}).max_split_bytes == 64 << 20
    assert parse_options({"path": "/x", "maxSplitBytes": "32768"}).max_split_bytes == 32768
    with pytest.raises(DataSourceOptionError, match="'maxSplitBytes': cannot read '64MB' as a size: unit 'MB' is"):
        parse_options({"path": "/x", "maxSplitBytes": "64MB"})


def test_a_topics_option_that_matches_no_topic_is_an_error_naming_the_closest(kafka_real: Path) -> None:
    reader = make_reader(kafka_real / COMPACTED_LOG_DIR, topics="mytopic,myTopic")
    with pytest.raises(DataSourceOptionError) as caught:
        reader.partitions()
    assert caught.value.option == "topics"
    assert "'mytopic' matches no topic" in str(caught.value) and "closest: myTopic" in str(caught.value)
    # a glob that matches is fine, even a topic whose only segment is empty; so is a pushed filter that
    # matches nothing (SQL: zero rows)
    assert reader_rows(make_reader(kafka_real / COMPACTED_LOG_DIR, topics="my*")).num_rows == 0
    assert reader_rows(make_reader(kafka_real / COMPACTED_LOG_DIR, topics="__consumer*")).num_rows > 0
    narrowed = make_reader(kafka_real / COMPACTED_LOG_DIR, topics="__consumer*")
    narrowed.push_filters([EqualTo(("topic",), "nothing-like-it")])
    assert reader_rows(narrowed).num_rows == 0


def test_ending_before_starting_is_rejected() -> None:
    with pytest.raises(DataSourceOptionError, match="endingTimestamp"):
        parse_options({"path": "/x", "startingTimestamp": "10", "endingTimestamp": "9"})


def test_options_are_case_insensitive_and_s3_options_override_only_what_is_given() -> None:
    opts = parse_options({"PATH": "s3://b/logs", "batchrows": "7", "S3.Endpoint": "http://127.0.0.1:1",
                          "s3.region": "eu-west-1"})
    assert opts.batch_rows == 7
    storage = opts.storage_options()
    assert storage is not None and storage.endpoint_url == "http://127.0.0.1:1" and storage.region == "eu-west-1"
    assert parse_options({"path": "/x"}).storage_options() is None


def test_missing_path_is_an_option_error() -> None:
    with pytest.raises(DataSourceOptionError, match="'path'"):
        parse_options({})


# --------------------------------------------------------------------------------------------------
# Listing and splits (no Spark)
# --------------------------------------------------------------------------------------------------


def test_listing_a_log_dir_a_partition_dir_and_a_file_agree(kafka_real: Path) -> None:
    storage = LocalStorage()
    log_dir = kafka_real / COMPACTED_LOG_DIR
    every = list_segments(storage, str(log_dir), RowBounds())
    assert sorted(s.uri for s in every) == sorted(str(p) for p in log_dir.glob("*/*.log"))
    part = list_segments(storage, str(log_dir / "__consumer_offsets-17"), RowBounds())
    assert [(s.topic, s.partition, s.base_offset, s.next_base_offset) for s in part] == [
        ("__consumer_offsets", 17, 0, 1), ("__consumer_offsets", 17, 1, None)]
    single = list_segments(storage, str(log_dir / "__consumer_offsets-17" / "00000000000000000000.log"), RowBounds())
    assert single == part[:1]
    scoped = list_segments(storage, str(log_dir), RowBounds(topic_globs=("my*",)))
    assert {s.topic for s in scoped} == {"myTopic"}
    with pytest.raises(NotFoundError):
        list_segments(storage, str(log_dir / "no-such-dir-0"), RowBounds())


@pytest.mark.parametrize("use_index", [True, False], ids=["cut-at-index-entries", "cut-at-scanned-batches"])
def test_splits_tile_the_segment_and_read_the_same_rows(kafka_real: Path, use_index: bool) -> None:
    storage = LocalStorage()
    opts = parse_options({"path": str(kafka_real), "includeControl": "true"})
    (segment,) = list_segments(storage, str(kafka_real / MONITORING), RowBounds())
    assert segment.index_uri is not None
    if not use_index:
        segment = SegmentRef(**{**segment.__dict__, "index_uri": None})
    splits = plan_splits(storage, segment, 32 * 1024)
    assert len(splits) > 5
    assert splits[0].start == 0 and splits[-1].end == segment.size
    assert all(a.end == b.start for a, b in zip(splits, splits[1:]))
    assert all(s.end - s.start <= 32 * 1024 for s in splits)  # no single batch is larger here
    parts = [read_split(s, opts, RowBounds()) for s in splits]
    expected = read_segment(segment.uri)
    assert pa.concat_tables(parts).equals(expected)
    # The offset bounds each split claims hold for the rows it returned.
    for split, part in zip(splits, parts):
        offsets = part["offset"].to_numpy()
        assert len(offsets) and offsets.min() >= split.min_offset
        assert split.max_offset is None or offsets.max() <= split.max_offset
        assert split.max_timestamp is None or part["timestamp"].to_numpy().max() <= split.max_timestamp


@pytest.mark.slow
def test_every_fixture_segment_splits_without_losing_or_repeating_a_batch(kafka_real: Path) -> None:
    storage = LocalStorage()
    opts = parse_options({"path": str(kafka_real), "includeControl": "true"})
    for directory in partition_dirs(kafka_real):
        for segment in list_segments(storage, str(directory), RowBounds()):
            splits = plan_splits(storage, segment, 2048)
            got = pa.concat_tables([read_split(s, opts, RowBounds()) for s in splits])
            assert got.equals(read_segment(segment.uri)), segment.uri


# --------------------------------------------------------------------------------------------------
# Local files: closed segments mapped, each partition's last segment read
# --------------------------------------------------------------------------------------------------


class _RecordedAccess:
    """LocalStorage's reads as the reader makes them: the URIs read into memory (whole or a range) and the
    mappings handed out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read: list[str] = []
        self.mapped: list[tuple[str, object]] = []
        read, read_range, read_mapped = LocalStorage.read, LocalStorage.read_range, LocalStorage.read_mapped
        recorder = self

        def recorded_read(storage: LocalStorage, uri: str) -> bytes:
            recorder.read.append(uri)
            return read(storage, uri)

        def recorded_read_range(storage: LocalStorage, uri: str, start: int, length: int) -> bytes:
            recorder.read.append(uri)
            return read_range(storage, uri, start, length)

        @contextlib.contextmanager
        def recorded_read_mapped(storage: LocalStorage, uri: str):  # type: ignore[no-untyped-def]
            with read_mapped(storage, uri) as data:
                recorder.mapped.append((uri, data))
                yield data

        monkeypatch.setattr(LocalStorage, "read", recorded_read)
        monkeypatch.setattr(LocalStorage, "read_range", recorded_read_range)
        monkeypatch.setattr(LocalStorage, "read_mapped", recorded_read_mapped)


def last_segments(root: Path) -> set[str]:
    """The last segment of every partition under ``root``: the one a broker appends to."""
    return {str(max(d.glob("*.log"))) for d in partition_dirs(root)}


@pytest.mark.parametrize("max_split_bytes", ["128MiB", "100"], ids=["whole-segments", "split-segments"])
def test_closed_segments_are_mapped_and_each_partitions_last_segment_read(
        kafka_real: Path, monkeypatch: pytest.MonkeyPatch, max_split_bytes: str) -> None:
    root = kafka_real / COMPACTED_LOG_DIR
    reader = make_reader(root, includeControl="true", maxSplitBytes=max_split_bytes)
    tasks = reader.partitions()
    expected = expected_rows(partition_dirs(root), include_control=True)
    access = _RecordedAccess(monkeypatch)  # the tasks' reads alone
    got = pa.Table.from_batches([b for t in tasks for b in reader.read(t)], schema=RECORD_SCHEMA).sort_by(SORT_KEYS)
    assert got.equals(expected)
    last = last_segments(root)
    closed = {str(p) for p in root.rglob("*.log") if p.stat().st_size} - last
    assert len(closed) >= 3
    assert {uri for uri, _ in access.mapped} == closed
    assert set(access.read) == {uri for uri in last if Path(uri).stat().st_size}
    # Unmapped once decoded: a table holding a view of the mapping would have kept it open.
    assert all(mapping.closed for _, mapping in access.mapped if not isinstance(mapping, bytes))


@pytest.mark.parametrize("cut", ["at-a-batch", "inside-a-batch"])
def test_a_closed_segment_cut_short_after_planning_reads_as_a_read_of_it_would(kafka_real: Path, tmp_path: Path,
                                                                              cut: str) -> None:
    """The mapping is as long as the file when the task maps it: the rows before the cut, or the error a read of
    the shorter file reports, naming it."""
    root = tmp_path / "logs"
    shutil.copytree(kafka_real / COMPACTED_LOG_DIR, root)
    reader = make_reader(root, includeControl="true")
    tasks = reader.partitions()
    (closed,) = [s for t in tasks for s in t.splits if s.closed and s.uri.endswith("__consumer_offsets-39/"
                                                                                  "00000000000000000000.log")]
    batches = scan_batches(Path(closed.uri).read_bytes())
    assert len(batches) >= 3  # a cut after the first keeps one, one inside the second keeps it short
    second = int(batches.position[1])
    os.truncate(closed.uri, second + (0 if cut == "at-a-batch" else 20))
    read = _outcome(lambda: read_split(closed, reader.options, reader.bounds))  # the read path: no mapping
    mapped = _outcome(lambda: pa.concat_tables(read_splits([closed], reader.options, reader.bounds)))
    assert (mapped if isinstance(mapped, list) else repr(mapped)) == (read if isinstance(read, list) else repr(read))
    if cut == "at-a-batch":
        assert isinstance(read, list) and len(read) == 1  # the first batch's record
    else:
        assert isinstance(read, CorruptRecordError) and closed.uri in str(read)


def _outcome(read):  # type: ignore[no-untyped-def]
    """What ``read()`` returns, or the error it raises (compared by type and message)."""
    try:
        return read().to_pylist()
    except CorruptRecordError as exc:
        return exc


# --------------------------------------------------------------------------------------------------
# Pushdown (no Spark)
# --------------------------------------------------------------------------------------------------


def numpy_filter(table: pa.Table, *, offset: tuple[int, int] | None = None,
                 timestamp: tuple[int, int] | None = None) -> pa.Table:
    """Independent reference filter: inclusive ranges applied with numpy."""
    keep = np.ones(table.num_rows, dtype=bool)
    for column, bounds in (("offset", offset), ("timestamp", timestamp)):
        if bounds is not None:
            values = table[column].to_numpy()
            keep &= (values >= bounds[0]) & (values <= bounds[1])
    return table.filter(pa.array(keep))


def test_push_filters_keeps_what_it_handles_and_returns_the_rest(kafka_real: Path) -> None:
    reader = make_reader(kafka_real / MONITORING)
    handled = [EqualTo(("topic",), "_confluent-monitoring"), In(("partition",), (0, 3)),
               GreaterThanOrEqual(("offset",), 100), LessThan(("timestamp",), 1713540000000)]
    unhandled = [IsNull(("key",)), In(("offset",), (1, 2)), GreaterThan(("offset",), "7"),
                 EqualTo(("value",), b"x")]
    rest = list(reader.push_filters(handled + unhandled))
    assert rest == unhandled and all(a is b for a, b in zip(rest, unhandled))
    assert (reader.bounds.offset_min, reader.bounds.timestamp_max) == (100, 1713540000000 - 1)


@pytest.mark.skipif(not FILTER_PUSHDOWN, reason="pyspark 4.0 has no pushFilters to check")
def test_push_filters_passes_pysparks_check_for_readers_without_pushdown() -> None:
    # pyspark refuses a reader that overrides pushFilters when the flag is off; the source must still read.
    reader = make_reader("/x")
    assert reader.pushFilters.__func__ is DataSourceReader.pushFilters


def test_spark_gets_the_filters_back_untouched_where_it_shares_one_read_plan_between_scans() -> None:
    # pyspark 4.x keeps the plan pushFilters leads to on the data source every scan of a DataFrame shares: the
    # reader must take over nothing there (see PUSHDOWN_IS_PER_SCAN; the Spark property test below shows why).
    reader = make_reader("/x", startingOffset="3")
    filters = [EqualTo(("topic",), "orders"), GreaterThanOrEqual(("offset",), 100)]
    rest = list(reader.pushFilters(filters))
    if PUSHDOWN_IS_PER_SCAN:
        assert rest == [] and reader.bounds.offset_min == 100
    else:
        assert rest == filters and reader.bounds == RowBounds(offset_min=3)


def test_pushdown_prunes_splits_and_returns_exactly_the_matching_rows(kafka_real: Path) -> None:
    directory = kafka_real / MONITORING
    expected = expected_rows([directory])
    unfiltered = make_reader(directory, maxSplitBytes="32768")
    reader = make_reader(directory, maxSplitBytes="32768")
    reader.push_filters([GreaterThan(("offset",), 1000), LessThanOrEqual(("offset",), 1200)])
    assert 0 < len(reader.partitions()) < len(unfiltered.partitions()) / 4
    assert reader_rows(reader).equals(numpy_filter(expected, offset=(1001, 1200)))

    nothing = make_reader(directory)
    nothing.push_filters([EqualTo(("topic",), "other-topic")])
    assert nothing.partitions() == []


def test_offset_bounds_across_segments_and_legacy_batches(kafka_real: Path) -> None:
    for log_dir, offsets in ((COMPACTED_LOG_DIR, (2, 20)), (MAGIC1_LOG_DIR, (3, 40))):
        directory = kafka_real / log_dir
        expected = expected_rows([d for d in partition_dirs(kafka_real) if d.parent == directory])
        reader = make_reader(directory, maxSplitBytes="100")
        reader.push_filters([GreaterThanOrEqual(("offset",), offsets[0]), LessThanOrEqual(("offset",), offsets[1])])
        got = reader_rows(reader).sort_by(SORT_KEYS)
        assert got.num_rows > 0
        assert got.equals(numpy_filter(expected, offset=offsets))


# Each example decodes a real segment and plans splits for it: a quarter of the profile's budget.
@settings(max_examples=examples(0.25))
@given(data=st.data())
def test_random_offset_and_time_ranges_match_a_plain_filter(kafka_real: Path, data: st.DataObject) -> None:
    directory = kafka_real / MONITORING
    table = read_segment(str(next(directory.glob("*.log"))))
    offsets, stamps = table["offset"].to_numpy(), table["timestamp"].to_numpy()
    o = sorted(data.draw(st.lists(st.integers(max(0, int(offsets.min()) - 5), int(offsets.max()) + 5),
                                  min_size=2, max_size=2)))
    t = sorted(data.draw(st.lists(st.integers(int(stamps.min()) - 5, int(stamps.max()) + 5), min_size=2, max_size=2)))
    split_bytes = data.draw(st.sampled_from(["4096", "65536", "134217728"]))
    # Half through options (ending bounds exclusive), half through pushed filters.
    reader = make_reader(directory, maxSplitBytes=split_bytes, startingOffset=str(o[0]), endingTimestamp=str(t[1] + 1))
    reader.push_filters([LessThanOrEqual(("offset",), o[1]), GreaterThanOrEqual(("timestamp",), t[0])])
    assert reader_rows(reader).equals(numpy_filter(table, offset=(o[0], o[1]), timestamp=(t[0], t[1])))


# --------------------------------------------------------------------------------------------------
# Through Spark (few and small: the suite shares two cores)
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sspark(spark):
    register(spark)
    return spark


def spark_rows(df) -> pa.Table:
    """``df.toArrow()`` sorted, checked to have RECORD_SCHEMA's columns and types. pyspark 4.0's toArrow makes the
    elements of the ``headers`` list nullable (Spark's own schema says they are not, and 4.1+ keeps that): the
    one difference allowed, and cast away."""
    table = df.toArrow()
    expected = RECORD_SCHEMA
    if pyspark.__version__.startswith("4.0."):
        headers = RECORD_SCHEMA.field("headers")
        expected = RECORD_SCHEMA.set(RECORD_SCHEMA.get_field_index("headers"),
                                     headers.with_type(pa.list_(headers.type.value_field.with_nullable(True))))
    assert table.schema.equals(expected)
    return table.cast(RECORD_SCHEMA).sort_by(SORT_KEYS)


def test_through_spark_reads_every_fixture_partition_like_read_segment(sspark, kafka_real: Path) -> None:
    dirs = partition_dirs(kafka_real)
    # Loading the log dirs that hold them reads every partition dir with few planning round trips.
    frames = [sspark.read.format(FORMAT_NAME).load(str(d)) for d in sorted({d.parent for d in dirs})]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    got = spark_rows(df)
    expected = expected_rows(dirs)
    assert got.schema.equals(RECORD_SCHEMA)
    assert got.num_rows == expected.num_rows > 50_000
    assert got.equals(expected)


def test_through_spark_split_and_unsplit_reads_agree(sspark, kafka_real: Path) -> None:
    from chispa import assert_df_equality

    path = str(kafka_real / MONITORING)
    whole = sspark.read.format(FORMAT_NAME).load(path)
    split = sspark.read.format(FORMAT_NAME).option("maxSplitBytes", 64 * 1024).option("batchRows", 100).load(path)
    assert split.rdd.getNumPartitions() > 5
    assert_df_equality(split.orderBy("offset"), whole.orderBy("offset"))


def test_through_spark_pushdown_on_and_off_give_the_same_rows(sspark, kafka_real: Path) -> None:
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    path = str(kafka_real / COMPACTED_LOG_DIR)
    conditions = [
        # all pushed: offset range, topic and partition sets, a timestamp bound
        (F.col("offset") >= 2) & (F.col("offset") < 19) & F.col("topic").isin("__consumer_offsets")
        & F.col("partition").isin(17, 28, 39) & (F.col("timestamp") > 0),
        # partly pushed: Spark keeps the OR and the null test, the source takes the offset bound
        ((F.col("partition") == 28) | (F.col("offset") == 18)) & F.col("value").isNull() & (F.col("offset") <= 30),
    ]
    previous = sspark.conf.get(PUSHDOWN_CONF)
    try:
        for condition in conditions:
            results = {}
            for flag in ("true", "false"):
                sspark.conf.set(PUSHDOWN_CONF, flag)
                # Planning happens at the action, so collect under this setting.
                rows = sspark.read.format(FORMAT_NAME).load(path).where(condition).toArrow()
                results[flag] = sspark.createDataFrame(rows.sort_by(SORT_KEYS), schema=SPARK_SCHEMA)
            assert results["false"].count() > 0
            assert_df_equality(results["true"], results["false"])
    finally:
        sspark.conf.set(PUSHDOWN_CONF, previous)


# One query of a sequence: a conjunction of atoms (none: the whole DataFrame), or the union of two such views.
# An atom is (column, operator, value); the operators are those the source can take over (=, <, <=, >, >=, IN on
# the columns it bounds) and some it cannot (IN on offset, null tests), which Spark keeps.
Atom = tuple[str, str, object]
QUERY_TOPICS = ("orders", "users")


def query_atoms(stamps: tuple[int, int]) -> st.SearchStrategy[Atom]:
    compare = st.sampled_from(["=", "<", "<=", ">", ">="])
    return st.one_of(
        st.tuples(st.just("offset"), compare, st.integers(-2, 72)),
        st.tuples(st.just("timestamp"), compare, st.integers(stamps[0] - 2, stamps[1] + 2)),
        st.tuples(st.just("topic"), st.just("="), st.sampled_from(QUERY_TOPICS + ("ghost",))),
        st.tuples(st.just("topic"), st.just("in"), st.lists(st.sampled_from(QUERY_TOPICS + ("ghost",)),
                                                             min_size=1, max_size=2, unique=True).map(tuple)),
        st.tuples(st.just("partition"), st.just("="), st.integers(0, 2)),
        st.tuples(st.just("partition"), st.just("in"), st.lists(st.integers(0, 2), min_size=1, max_size=2,
                                                                unique=True).map(tuple)),
        st.tuples(st.just("offset"), st.just("in"), st.lists(st.integers(0, 70), min_size=1, max_size=3).map(tuple)),
        st.tuples(st.sampled_from(["key", "value"]), st.sampled_from(["null", "not null"]), st.none()),
    )


#: The comparisons of atoms, for Spark columns and numpy arrays alike.
COMPARISONS = {"=": operator.eq, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def spark_condition(atoms: Sequence[Atom]):
    from pyspark.sql import functions as F

    condition = F.lit(True)
    for column, op, value in atoms:
        c = F.col(column)
        if op == "in":
            term = c.isin(*value)  # type: ignore[misc]
        elif op in ("null", "not null"):
            term = c.isNull() if op == "null" else c.isNotNull()
        else:
            term = COMPARISONS[op](c, value)
        condition = condition & term
    return condition


def arrow_mask(table: pa.Table, atoms: Sequence[Atom]) -> np.ndarray:
    """The same conjunction over Arrow rows, with numpy: the independent reference."""
    keep = np.ones(table.num_rows, dtype=bool)
    for column, op, value in atoms:
        if op in ("null", "not null"):
            nulls = table[column].is_null().to_numpy(zero_copy_only=False)
            keep &= nulls if op == "null" else ~nulls
            continue
        values = np.asarray(table[column].to_pylist(), dtype=object if column == "topic" else np.int64)
        if op == "in":
            keep &= np.isin(values, np.asarray(value, dtype=values.dtype))
        else:
            keep &= COMPARISONS[op](values, value)
    return keep


@dataclass(frozen=True)
class QueryLogDir:
    root: Path
    rows: pa.Table = field(repr=False)  #: every row, from read_segment (kept out of hypothesis' failure report)


@pytest.fixture(scope="module")
def query_log_dir(tmp_path_factory: pytest.TempPathFactory) -> QueryLogDir:
    """Two topics of two partitions (the second starting at offset 5), two segments each; and every row."""
    root = tmp_path_factory.mktemp("queries")
    for t, topic in enumerate(QUERY_TOPICS):
        for partition in range(2):
            log = LogBuilder(topic=topic, partition=partition, start_offset=5 * partition,
                             timestamp=1_000_000 + 100 * t + 10 * partition)
            for i in range(21):
                if i == 11:
                    log.roll()
                log.batch([rec(f"k{i % 5}", None if i % 6 == 5 else f"v{i}"), rec(None if i % 4 == 3 else "k", "v")])
            write_log(log.table(), root / f"{topic}-{partition}")
    return QueryLogDir(root, expected_rows(partition_dirs(root)))


QUERY_COLUMNS = ["topic", "partition", "offset"]


@settings(max_examples=examples(0.15))  # each example runs two to five Spark jobs
@given(data=st.data())
def test_through_spark_a_sequence_of_filtered_and_unfiltered_queries_on_one_dataframe_answers_each_one(
        sspark, query_log_dir: QueryLogDir, data: st.DataObject) -> None:
    # The reference is numpy over every row read_segment returns, not the same query with pushdown off: on
    # the same DataFrame that would take the same shared read plan as the query it is meant to check.
    root, rows = query_log_dir.root, query_log_dir.rows
    timestamps = rows["timestamp"].to_numpy()
    stamps = (int(timestamps.min()), int(timestamps.max()))
    view = st.lists(query_atoms(stamps), max_size=3)
    query = st.one_of(view, view, st.tuples(view, view))  # a tuple: the union of two views of the DataFrame
    sequence = data.draw(st.lists(query, min_size=2, max_size=4), label="queries")
    assert sspark.conf.get(PUSHDOWN_CONF) == "true"
    df = sspark.read.format(FORMAT_NAME).load(str(root))
    for q in sequence:
        views = list(q) if isinstance(q, tuple) else [q]
        frame = df.where(spark_condition(views[0]))
        for other in views[1:]:
            frame = frame.unionAll(df.where(spark_condition(other)))
        got = frame.select(*QUERY_COLUMNS).toArrow().sort_by(SORT_KEYS)
        expected = pa.concat_tables(rows.filter(pa.array(arrow_mask(rows, v))) for v in views)
        assert got.to_pylist() == expected.select(QUERY_COLUMNS).sort_by(SORT_KEYS).to_pylist(), q


def test_through_spark_the_issues_sequence_counts_every_row_again_after_a_filter(
        sspark, query_log_dir: QueryLogDir) -> None:
    root, rows = query_log_dir.root, query_log_dir.rows
    df = sspark.read.format(FORMAT_NAME).load(str(root))
    assert df.count() == rows.num_rows
    window = [("topic", "=", "orders"), ("offset", ">=", 10), ("offset", "<", 20)]
    assert df.where("topic = 'orders' AND offset >= 10 AND offset < 20").count() == arrow_mask(rows, window).sum() > 0
    assert df.count() == rows.num_rows
    # two filtered views in one query: each scan reads its own rows
    low, high = df.where("offset < 10"), df.where("offset >= 30")
    assert low.unionAll(high).count() == arrow_mask(rows, [("offset", "<", 10)]).sum() \
        + arrow_mask(rows, [("offset", ">=", 30)]).sum()


def upload(endpoint, bucket: str, source: Path, prefix: str) -> None:
    client = endpoint.client()
    for file in source.rglob("*"):
        if file.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{file.relative_to(source)}", Body=file.read_bytes())


def test_s3_splits_read_by_range_match_the_local_file(kafka_real: Path, s3_bucket) -> None:
    endpoint, bucket = s3_bucket
    upload(endpoint, bucket, kafka_real / MONITORING, "logs/_confluent-monitoring-0")
    creds = endpoint.storage_options()
    reader = make_reader(f"s3://{bucket}/logs", maxSplitBytes="65536", startingOffset="5", **{
        "s3.endpoint": creds.endpoint_url, "s3.region": creds.region,
        "s3.access_key_id": creds.access_key_id, "s3.secret_access_key": creds.secret_access_key})
    splits = [split for packed in reader.partitions() for split in packed.splits]
    assert len(splits) > 3 and all(s.uri.startswith(f"s3://{bucket}/") for s in splits)
    expected = read_segment(str(next((kafka_real / MONITORING).glob("*.log"))), include_control=False)
    assert reader_rows(reader).equals(numpy_filter(expected, offset=(5, 1 << 62)))


def test_through_spark_reads_s3_like_the_local_copy(sspark, kafka_real: Path, s3_bucket) -> None:
    from chispa import assert_df_equality

    endpoint, bucket = s3_bucket
    source = kafka_real / COMPACTED_LOG_DIR
    upload(endpoint, bucket, source, "logs")
    creds = endpoint.storage_options()
    s3 = (sspark.read.format(FORMAT_NAME)
          .option("s3.endpoint", creds.endpoint_url).option("s3.region", creds.region)
          .option("s3.access_key_id", creds.access_key_id).option("s3.secret_access_key", creds.secret_access_key)
          .load(f"s3://{bucket}/logs"))
    local = sspark.read.format(FORMAT_NAME).load(str(source))
    assert_df_equality(s3.orderBy("topic", "partition", "offset"), local.orderBy("topic", "partition", "offset"))
    assert local.count() == expected_rows([d for d in partition_dirs(kafka_real) if d.parent == source]).num_rows


def test_through_spark_a_topics_option_naming_no_topic_fails_instead_of_returning_nothing(sspark, kafka_real: Path,
                                                                                       ) -> None:
    df = sspark.read.format(FORMAT_NAME).option("topics", "consumer_offsets").load(str(kafka_real / COMPACTED_LOG_DIR))
    with pytest.raises(Exception, match="matches no topic") as caught:
        df.count()
    # the first line a user sees is the message, not Spark's wrapper over a traceback of the planner's worker
    first = str(caught.value).splitlines()[0]
    assert "'consumer_offsets' matches no topic" in first and "closest: __consumer_offsets" in first, first
    assert "Traceback" not in str(caught.value)


def test_through_spark_bad_option_fails_with_a_message_naming_it(sspark, kafka_real: Path) -> None:
    with pytest.raises(Exception, match="maxSplitBytes") as caught:
        sspark.read.format(FORMAT_NAME).option("maxSplitBytes", "lots").load(str(kafka_real / MONITORING)).count()
    assert "option 'maxSplitBytes': cannot read 'lots' as a size" in str(caught.value).splitlines()[0]
