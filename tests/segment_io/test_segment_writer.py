"""write_segments: the segments of several partitions encoded at once, cut into one file each, every file (and
every result field) byte for byte what write_segment writes for that partition's rows alone; input the
encoder rejects raises naming the segment and writes nothing."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io.decode import decode_segment_and_headers
from segment_io.encode import encode_batches
from segment_io.errors import CorruptRecordError, InvalidRecordsError, UsageError
from segment_io.format import BatchHeaders, scan_batches
from segment_io.layout import parse_segment_file
from segment_io.schema import VALUE_REF_TYPE
from segment_io.segment_writer import SegmentSplit, SegmentWriteResult, write_segment, write_segments
from segment_io.storage.base import Storage
from segment_io.storage.local import LocalStorage
from tests.support.builders import LogBuilder, batch_from_spec, rec
from tests.support.corpus import fixture_files

#: (name relative to the output root, row_start, row_end, index_interval_bytes)
Spec = tuple[str, int, int, int]


def _files(storage: Storage, root: str) -> dict[str, bytes]:
    """Every file under ``root`` by its path relative to ``root``."""
    return {f.uri[len(root):]: storage.read(f.uri) for f in storage.list(root, recursive=True)}


def _assert_same_result(got: SegmentWriteResult, want: SegmentWriteResult, together: str, alone: str) -> None:
    assert {k: v.replace(together, alone) for k, v in got.paths.items()} == want.paths
    for name in ("bytes", "batches", "records", "base_offset", "last_offset", "max_timestamp"):
        assert getattr(got, name) == getattr(want, name), name
    for f in dataclasses.fields(BatchHeaders):
        g, w = getattr(got.headers, f.name), getattr(want.headers, f.name)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w), f.name
        else:
            assert g == w, f.name


def assert_same_as_one_at_a_time(records: pa.Table, specs: list[Spec], sources: dict[int, bytes] | None,
                                 root: Path | str, *, durable: bool = False,
                                 storage: Storage | None = None) -> list[SegmentWriteResult]:
    """write_segments of ``specs`` under ``root/together``, write_segment of each slice under ``root/alone``:
    the same files, the same results."""
    storage = storage or LocalStorage()
    together, alone = f"{root}/together/", f"{root}/alone/"
    splits = [SegmentSplit(together + name, a, b, interval) for name, a, b, interval in specs]
    got = write_segments(records, splits, storage=storage, sources=sources, durable=durable)
    assert len(got) == len(specs)
    for (name, a, b, interval), result in zip(specs, got):
        want = write_segment(records.slice(a, b - a), alone + name, storage=storage, sources=sources,
                             index_interval_bytes=interval, durable=durable)
        _assert_same_result(result, want, together, alone)
    written = _files(storage, together)
    assert sorted(written) == sorted(f"{name.rpartition('.log')[0]}{suffix}{name.rpartition('.log')[2]}"
                                     for name, *_ in specs for suffix in (".log", ".index", ".timeindex"))
    assert written == _files(storage, alone)
    if not durable:
        storage.barrier([p for r in got for p in r.paths.values()])
    return got


def _batch_numbers(table: pa.Table) -> np.ndarray:
    """Each row's source batch, numbered from 0 in row order."""
    seg = table["segment_base_offset"].to_numpy()
    bbo = table["batch_base_offset"].to_numpy()
    change = np.ones(len(seg), np.bool_)
    change[1:] = (seg[1:] != seg[:-1]) | (bbo[1:] != bbo[:-1])
    return np.cumsum(change) - 1


# --------------------------------------------------------------------------------------------------
# Random bins: partitions whose offsets overlap, each in segments written as a producer would, decoded (real
# batch positions, values copied or referenced), thinned as a cleaner would (batches kept whole, partly or
# not at all), then cut into one or two output segments each
# --------------------------------------------------------------------------------------------------

_record = st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
                    st.one_of(st.none(), st.binary(max_size=300)),  # None: a tombstone
                    st.lists(st.tuples(st.sampled_from(["h", "trace"]), st.one_of(st.none(), st.binary(max_size=6))),
                             max_size=2))
_batch = st.fixed_dictionaries({
    "records": st.lists(_record, min_size=1, max_size=5),
    "codec": st.sampled_from([0, 0, 1, 2, 3, 4]),
    "pid": st.sampled_from([-1, 7]),
    "timestamp_type": st.sampled_from([0, 0, 1]),
    "horizon": st.one_of(st.none(), st.integers(0, 10**12)),
    "gap": st.integers(0, 3),
    "roll": st.booleans(),
    "keep": st.sampled_from(["all", "all", "none", "some"]),
})
_partition = st.fixed_dictionaries({
    "start": st.sampled_from([0, 0, 3, 40]),  # offsets of different partitions overlap and restart
    "batches": st.lists(_batch, min_size=1, max_size=8),
    "outputs": st.integers(1, 2),
})

#: Segment keys of partition p are p << _KEY_SHIFT | base offset: distinct across the bin, as the caller makes them.
_KEY_SHIFT = 40


@st.composite
def bins(draw: st.DrawFn) -> tuple[pa.Table, list[Spec], dict[int, bytes] | None]:
    refs = draw(st.booleans())
    with_sources = refs or draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tables: list[pa.Table] = []
    specs: list[Spec] = []
    sources: dict[int, bytes] = {}
    row = 0
    for p, spec in enumerate(draw(st.lists(_partition, min_size=1, max_size=5))):
        log = LogBuilder("t", p, start_offset=spec["start"])
        keep_modes = []
        for b in spec["batches"]:
            if b["roll"] and log.next_offset > log.segment_base_offset:
                log.roll()
            batch_from_spec(log, b)
            keep_modes.append(b["keep"])
        built = log.table()
        bases = sorted(set(built["segment_base_offset"].to_pylist()))
        decoded = []
        for base in bases:
            data = encode_batches(built.filter(pc.equal(built["segment_base_offset"], base))).to_bytes()
            key = p << _KEY_SHIFT | base
            sources[key] = data
            decoded.append(decode_segment_and_headers(data, topic="t", partition=p, segment_base_offset=key,
                                                      value_refs=refs)[0])
        part = pa.concat_tables(decoded)
        modes = np.array(keep_modes)[_batch_numbers(part)]
        keep = (modes == "all") | ((modes == "some") & (rng.random(part.num_rows) < 0.5))
        part = part.filter(pa.array(keep))
        # the partition's source segments go to one or two output segments, named by their first base offset
        groups = np.array_split(np.array(bases), min(spec["outputs"], len(bases)))
        seg_keys = part["segment_base_offset"].to_numpy() & ((1 << _KEY_SHIFT) - 1)
        for group in groups:
            n = int(np.isin(seg_keys, group).sum())
            if n:
                name = f"t-{p}/{int(group[0]):020d}.log.cleaned"
                specs.append((name, row, row + n, draw(st.sampled_from([0, 1, 100, 4096]))))
                row += n
        tables.append(part)
    records = pa.concat_tables(tables)
    if refs:
        assert records.schema.field("value").type == VALUE_REF_TYPE
    return records, specs, sources if with_sources else None


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(bins())
@pytest.mark.slow
def test_each_segment_is_what_write_segment_writes_alone(case) -> None:
    records, specs, sources = case
    with tempfile.TemporaryDirectory(prefix="write-segments-") as tmp:
        assert_same_as_one_at_a_time(records, specs, sources, Path(tmp))


def test_a_bin_copies_whole_batches_and_re_encodes_partial_ones(tmp_path: Path) -> None:
    """The case the property test is about, made sure of: compressed batches kept whole come verbatim from
    their sources, partly kept ones are encoded anew, in two partitions whose offsets are the same."""
    tables, sources = [], {}
    for p in range(2):
        log = LogBuilder("t", p)
        for i in range(6):
            log.batch([rec(f"k{i}", f"v{i}-{p}" * 20), rec(f"j{i}", None, headers=[("h", b"1")])], codec=i % 4)
        data = encode_batches(log.table()).to_bytes()
        sources[p << _KEY_SHIFT] = data
        table = decode_segment_and_headers(data, partition=p, segment_base_offset=p << _KEY_SHIFT,
                                           value_refs=True)[0]
        tables.append(table.filter(pa.array([i != 3 for i in range(table.num_rows)])))  # batch 1 partly kept
    records = pa.concat_tables(tables)
    n = tables[0].num_rows
    got = assert_same_as_one_at_a_time(records, [("t-0/00000000000000000000.log", 0, n, 0),
                                                 ("t-1/00000000000000000000.log", n, 2 * n, 4096)], sources,
                                       tmp_path, durable=True)
    for p, result in enumerate(got):
        written = Path(result.log_path).read_bytes()
        source = sources[p << _KEY_SHIFT]
        src = scan_batches(source)
        out = result.headers
        for b in range(6):
            mine = written[out.position[b]:out.position[b] + out.size[b]]
            theirs = source[src.position[b]:src.position[b] + src.size[b]]
            assert (mine == theirs) == (b != 1), b


def test_rows_of_one_batch_in_two_splits_make_two_batches(tmp_path: Path) -> None:
    """A split starts a batch even when the rows before it carry the same batch columns (and offsets go on
    increasing), as write_segment of each slice does."""
    log = LogBuilder()
    log.batch([rec(f"k{i}", f"v{i}") for i in range(6)])
    records = log.table()
    got = assert_same_as_one_at_a_time(records, [("a/00000000000000000000.log", 0, 2, 0),
                                                 ("b/00000000000000000000.log", 2, 6, 0)], None, tmp_path)
    assert [r.batches for r in got] == [1, 1]
    assert [r.records for r in got] == [2, 4]


def test_rows_outside_every_split_are_not_written(tmp_path: Path) -> None:
    tables = [LogBuilder("t", p).batch([rec("a", "1")]).batch([rec("b", "2")]).table() for p in range(3)]
    records = pa.concat_tables(tables)
    got = assert_same_as_one_at_a_time(records, [("t-0/00000000000000000000.log", 0, 2, 0),
                                                 ("t-2/00000000000000000000.log", 4, 6, 0)], None, tmp_path)
    assert sorted(p.name for p in (tmp_path / "together").iterdir()) == ["t-0", "t-2"]
    assert [r.records for r in got] == [2, 2]


@pytest.mark.s3
def test_a_bin_written_to_s3_equals_each_segment_alone(s3_bucket) -> None:
    from segment_io.storage import S3Storage

    endpoint, bucket = s3_bucket
    tables = []
    for p in range(3):
        log = LogBuilder("t", p, start_offset=5 * p)
        for i in range(20):
            log.batch([rec(f"k{i}", f"v{i}" * 30), rec(f"j{i}", None)], codec=i % 3)
        tables.append(log.table())
    specs = [(f"t-{p}/{5 * p:020d}.log", 40 * p, 40 * p + 40, 100) for p in range(3)]
    got = assert_same_as_one_at_a_time(pa.concat_tables(tables), specs, None, f"s3://{bucket}/logs",
                                       storage=S3Storage(endpoint.storage_options()))
    assert [r.base_offset for r in got] == [0, 5, 10]


def test_no_splits_write_nothing(tmp_path: Path) -> None:
    assert write_segments(LogBuilder().batch([rec("a", "1")]).table(), [], storage=LocalStorage()) == []
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------
# Real broker-written segments, each as a partition of a bin
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_segments_written_together_equal_each_alone(kafka_real: Path) -> None:
    """Every v2 segment of the corpus decoded with value references, a bin of several of them (all rows, and
    about half of them) written together: each file what write_segment writes for that segment alone."""
    cases = []
    for path in fixture_files(kafka_real):
        data = path.read_bytes()
        key = len(cases) << _KEY_SHIFT
        table, headers = decode_segment_and_headers(data, path=str(path), segment_base_offset=key, value_refs=True)
        if table.num_rows and np.all(headers.magic == 2):
            parsed = parse_segment_file(path.name)
            base = parsed[0] if parsed is not None and parsed[1] == ".log" else 0
            cases.append((table, key, data, base))
    assert len(cases) > 30
    for seed in range(2):
        rng = np.random.default_rng(seed)
        for first in range(0, len(cases), 8):
            group = cases[first:first + 8]
            tables, specs, sources, row = [], [], {}, 0
            for i, (table, key, data, base) in enumerate(group):
                if seed:
                    table = table.filter(pa.array(rng.random(table.num_rows) < 0.5))
                if table.num_rows == 0:
                    continue
                tables.append(table)
                sources[key] = data
                specs.append((f"p{i}/{base:020d}.log", row, row + table.num_rows, 4096))
                row += table.num_rows
            with tempfile.TemporaryDirectory(prefix="write-segments-") as tmp:
                assert_same_as_one_at_a_time(pa.concat_tables(tables), specs, sources, Path(tmp))


# --------------------------------------------------------------------------------------------------
# Rejected input: an error naming the segment, and no file written for any split
# --------------------------------------------------------------------------------------------------


def _three_partitions() -> pa.Table:
    tables = []
    for p in range(3):
        log = LogBuilder("t", p)
        for i in range(4):
            log.batch([rec(f"k{i}", f"v{i}"), rec(f"j{i}", f"w{i}")])
        tables.append(log.table())
    return pa.concat_tables(tables).combine_chunks()


def _splits(root: Path) -> list[SegmentSplit]:
    return [SegmentSplit(str(root / f"t-{p}" / "00000000000000000000.log.cleaned"), 8 * p, 8 * p + 8, 0)
            for p in range(3)]


def _with_column(table: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def test_offsets_going_back_inside_a_split_raise_naming_it_and_write_nothing(tmp_path: Path) -> None:
    records = _three_partitions()
    assert_same_as_one_at_a_time(records, [(f"t-{p}/00000000000000000000.log", 8 * p, 8 * p + 8, 0)
                                           for p in range(3)], None, tmp_path / "valid")
    offsets = records["offset"].to_numpy().copy()
    offsets[8 + 5] = offsets[8 + 2]  # the second partition goes back
    splits = _splits(tmp_path / "out")
    with pytest.raises(InvalidRecordsError, match="increase strictly") as err:
        write_segments(_with_column(records, "offset", offsets), splits, storage=LocalStorage())
    assert err.value.path == splits[1].uri and str(err.value).startswith(splits[1].uri)
    assert not (tmp_path / "out").exists()


def test_a_batch_column_differing_inside_a_batch_raises_naming_the_split(tmp_path: Path) -> None:
    records = _three_partitions()
    pids = records["producer_id"].to_numpy().copy()
    pids[16 + 1] = 99  # the second row of the third partition's first batch
    splits = _splits(tmp_path / "out")
    with pytest.raises(InvalidRecordsError, match="producer_id") as err:
        write_segments(_with_column(records, "producer_id", pids), splits, storage=LocalStorage())
    assert err.value.path == splits[2].uri
    assert not (tmp_path / "out").exists()


def test_offsets_that_do_not_fit_a_split_base_raise_naming_it_and_write_nothing(tmp_path: Path) -> None:
    """The last split's offsets are more than 2^31 past its file's base offset: its index cannot hold them,
    found before the first split's files are written."""
    records = _three_partitions()
    offsets = records["offset"].to_numpy().copy()
    last_offsets = records["batch_last_offset"].to_numpy().copy()
    bases = records["batch_base_offset"].to_numpy().copy()
    for col in (offsets, last_offsets, bases):
        col[16:] += 1 << 32
    for name, col in (("offset", offsets), ("batch_last_offset", last_offsets), ("batch_base_offset", bases)):
        records = _with_column(records, name, col)
    splits = _splits(tmp_path / "out")
    with pytest.raises(CorruptRecordError, match="relative to segment base offset") as err:
        write_segments(records, splits, storage=LocalStorage())
    assert err.value.path == splits[2].uri
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bounds", [[(0, 8), (4, 16)], [(0, 8), (8, 8)], [(8, 16), (0, 8)], [(16, 25)]])
def test_splits_must_be_ordered_non_empty_ranges_of_the_input(tmp_path: Path, bounds) -> None:
    splits = [SegmentSplit(str(tmp_path / f"{i}" / "00000000000000000000.log"), a, b)
              for i, (a, b) in enumerate(bounds)]
    with pytest.raises(UsageError, match="not a non-empty range"):
        write_segments(_three_partitions(), splits, storage=LocalStorage())
    assert list(tmp_path.iterdir()) == []


def test_a_split_must_name_a_segment_log(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a segment log file name"):
        write_segments(_three_partitions(), [SegmentSplit(str(tmp_path / "x.log"), 0, 8)], storage=LocalStorage())
