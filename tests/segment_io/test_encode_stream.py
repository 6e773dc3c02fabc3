"""Streamed encoding and writing: the parts laid end to end are the bytes of the whole-segment encoder, for any
part size and any chunking of the input, and a write that fails half-way publishes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io.decode import decode_segment_bytes
from segment_io.encode import encode_batches
from segment_io.encode_stream import HeaderCollector, encoded_size, iter_encoded_parts
from segment_io.errors import CorruptRecordError, InvalidRecordsError, UsageError
from segment_io.format import scan_batches
from segment_io.index import build_offset_and_time_index
from segment_io.schema import RECORD_SCHEMA
from segment_io.segment_writer import write_segment
from tests.support.builders import LogBuilder, batch_from_spec, empty_batch, rec
from tests.support.corpus import empty_batches_of, fixture_files

PART_SIZES = [1, 64, 700, 5_000, 1 << 30]


def streamed(table: pa.Table, **kw) -> tuple[bytes, np.ndarray, int]:
    """Bytes, header positions and number of parts of a streamed encoding."""
    parts = list(iter_encoded_parts(table, **kw))
    collected = HeaderCollector()
    for p in parts:
        collected.add(p)
    data = b"".join(p.to_bytes() for p in parts)
    assert collected.size == len(data)
    return data, collected.headers().position, len(parts)


# --------------------------------------------------------------------------------------------------
# Random logs: built, encoded per segment, decoded (real batch positions), thinned as a cleaner would
# --------------------------------------------------------------------------------------------------

_batch = st.fixed_dictionaries({
    "records": st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=12)),
                                  st.one_of(st.none(), st.binary(max_size=400)),
                                  st.lists(st.tuples(st.sampled_from(["h", "trace"]),
                                                     st.one_of(st.none(), st.binary(max_size=8))), max_size=2)),
                        min_size=1, max_size=6),
    "codec": st.sampled_from([0, 0, 1, 2, 3, 4]),
    "pid": st.sampled_from([-1, 7, 8]),
    "timestamp_type": st.sampled_from([0, 0, 1]),
    "horizon": st.one_of(st.none(), st.integers(0, 10**12)),
    "gap": st.integers(0, 3),
    "roll": st.booleans(),
})


@st.composite
def cleaned_logs(draw) -> tuple[pa.Table, pa.Table | None, dict[int, bytes]]:
    """A thinned log (rows removed at random, batches kept whole or partly), the header-only batches kept for
    some of the batches that lost every row, and every source segment's bytes by base offset."""
    log = LogBuilder(topic="t", partition=1, start_offset=draw(st.integers(0, 10**6)))
    for spec in draw(st.lists(_batch, min_size=1, max_size=25)):
        if spec["roll"]:
            log.roll()
        batch_from_spec(log, spec)
    built = log.table()
    sources: dict[int, bytes] = {}
    tables = []
    for seg in sorted(set(built["segment_base_offset"].to_pylist())):
        rows = built.filter(pa.compute.equal(built["segment_base_offset"], seg))
        data = encode_batches(rows).to_bytes()
        sources[seg] = data
        tables.append(decode_segment_bytes(data, topic="t", partition=1, segment_base_offset=seg))
    decoded = pa.concat_tables(tables)
    keep = np.array(draw(st.lists(st.booleans(), min_size=decoded.num_rows, max_size=decoded.num_rows)),
                    dtype=np.bool_)
    kept = decoded.filter(pa.array(keep))
    # header-only batches for some of the batches that lost all their rows (as the cleaner keeps a producer's last)
    gone = sorted(set(zip(decoded["segment_base_offset"].to_pylist(), decoded["batch_base_offset"].to_pylist(),
                          decoded["batch_last_offset"].to_pylist()))
                  - set(zip(kept["segment_base_offset"].to_pylist(), kept["batch_base_offset"].to_pylist(),
                            kept["batch_last_offset"].to_pylist())))
    chosen = [g for g, take in zip(gone, draw(st.lists(st.booleans(), min_size=len(gone), max_size=len(gone))))
              if take]
    empties = pa.concat_tables([empty_batch(b, last, pid=7, epoch=0, segment_base_offset=seg)
                                for seg, b, last in chosen]) if chosen else None
    # any chunking of the rows, batch boundaries or not
    cuts = sorted(set(draw(st.lists(st.integers(0, kept.num_rows), max_size=4))))
    bounds = [0, *cuts, kept.num_rows]
    pieces = [kept.slice(a, b - a) for a, b in zip(bounds, bounds[1:]) if b > a]
    chunked = pa.Table.from_batches([b for p in pieces for b in p.to_batches()], schema=kept.schema) \
        if pieces else kept
    return chunked, empties, sources


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cleaned_logs(), st.sampled_from(PART_SIZES), st.booleans(), st.sampled_from([None, 0, 3]))
def test_streamed_bytes_equal_the_whole_segment_encoder(log, part_bytes: int, with_sources: bool,
                                                        codec: int | None) -> None:
    table, empties, sources = log
    src = sources if with_sources else None
    whole = encode_batches(table, empty_batches=empties, sources=src, codec=codec)
    data, positions, _ = streamed(table, empty_batches=empties, sources=src, codec=codec, part_bytes=part_bytes)
    assert data == whole.to_bytes()
    assert np.array_equal(positions, whole.headers.position)
    assert encoded_size(table, empty_batches=empties, sources=src, codec=codec, part_bytes=part_bytes) == whole.size


def test_small_parts_really_split_the_segment() -> None:
    """The streamed path is exercised: with a small part size a segment becomes many parts, each of whole
    batches, and their headers shifted together equal a scan of the whole output."""
    log = LogBuilder()
    for i in range(200):
        log.batch([rec(f"k{i}", b"v" * 100), rec(f"j{i}", b"w" * 50)])
    table = log.table()
    data, positions, n = streamed(table, part_bytes=1_000)
    assert n > 20
    assert np.array_equal(positions, scan_batches(data).position)
    assert data == encode_batches(table).to_bytes()


def test_part_size_must_be_positive() -> None:
    with pytest.raises(UsageError, match="part_bytes"):
        list(iter_encoded_parts(LogBuilder().batch([rec("k", "v")]).table(), part_bytes=0))


# --------------------------------------------------------------------------------------------------
# Real broker-written segments
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_segments_stream_to_the_same_bytes(kafka_real: Path) -> None:
    files = fixture_files(kafka_real)
    assert len(files) > 40
    for path in files:
        data = path.read_bytes()
        table = decode_segment_bytes(data, path=str(path), segment_base_offset=0)
        if table.num_rows == 0:
            continue
        empties = empty_batches_of(data)
        for sources in (None, {0: data}):
            try:
                whole = encode_batches(table, empty_batches=empties, sources=sources).to_bytes()
            except InvalidRecordsError as exc:  # e.g. legacy sets the v2 encoder cannot lay out the same way
                with pytest.raises(InvalidRecordsError):
                    list(iter_encoded_parts(table, empty_batches=empties, sources=sources,
                                            part_bytes=max(700, len(data) // 8)))
                assert type(exc) is InvalidRecordsError
                continue
            for part_bytes in (max(700, len(data) // 8), 1 << 30):  # several parts; one part
                got, _, _ = streamed(table, empty_batches=empties, sources=sources, part_bytes=part_bytes)
                assert got == whole, f"{path} (part_bytes={part_bytes}, sources={sources is not None})"


# --------------------------------------------------------------------------------------------------
# write_segment: streamed to a staged file, published only when everything succeeded
# --------------------------------------------------------------------------------------------------


def _many_batches(n: int = 300) -> pa.Table:
    log = LogBuilder(start_offset=0)
    for i in range(n):
        log.batch([rec(f"k{i}", os.urandom(200))])
    return log.table()


def test_write_segment_streams_the_same_files(tmp_path: Path) -> None:
    table = _many_batches()
    whole = encode_batches(table)
    result = write_segment(table, str(tmp_path / "00000000000000000000.log"), part_bytes=2_000,
                           index_interval_bytes=1_024)
    assert (tmp_path / "00000000000000000000.log").read_bytes() == whole.to_bytes()
    offset_index, time_index = build_offset_and_time_index(whole.headers, segment_base_offset=0,
                                                           index_interval_bytes=1_024)
    assert (tmp_path / "00000000000000000000.index").read_bytes() == offset_index
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == time_index
    assert (result.bytes, result.batches, result.records, result.last_offset) == (whole.size, 300, 300, 299)
    assert np.array_equal(result.headers.position, whole.headers.position)


def test_invalid_rows_in_a_later_part_leave_no_file(tmp_path: Path) -> None:
    """The first parts are encoded and written to the staged file before the bad row is reached; the staged
    file is discarded and nothing appears under the final name."""
    table = _many_batches()
    offsets = table["offset"].to_numpy().copy()
    offsets[250] = offsets[100]  # goes backwards far into the input
    bad = table.set_column(table.schema.get_field_index("offset"), "offset", pa.array(offsets, pa.int64()))
    parts = iter_encoded_parts(bad, part_bytes=2_000)
    assert next(parts).size > 0  # the failure really comes half-way through
    with pytest.raises(InvalidRecordsError, match="increase"):
        list(parts)
    out = tmp_path / "p"
    with pytest.raises(InvalidRecordsError, match="increase"):
        write_segment(bad, str(out / "00000000000000000000.log.cleaned"), part_bytes=2_000)
    assert [p.name for p in out.iterdir()] == []  # no .log, no temporary file, no index


def test_offsets_that_do_not_fit_the_base_discard_the_written_log(tmp_path: Path) -> None:
    """Every part written, then the index build rejects offsets too far from the file's base offset: the
    staged .log (all of it on disk by then) is removed, not published."""
    log = LogBuilder(start_offset=1 << 32)
    for i in range(50):
        log.batch([rec(f"k{i}", b"v" * 100)])
    with pytest.raises(CorruptRecordError, match="relative to segment base offset"):
        write_segment(log.table(), str(tmp_path / "00000000000000000000.log"), part_bytes=500)
    assert list(tmp_path.iterdir()) == []


def test_empty_input_writes_an_empty_segment(tmp_path: Path) -> None:
    result = write_segment(RECORD_SCHEMA.empty_table(), str(tmp_path / "00000000000000000007.log"), part_bytes=10)
    assert (tmp_path / "00000000000000000007.log").read_bytes() == b""
    assert (result.bytes, result.batches, result.last_offset) == (0, 0, -1)


@pytest.mark.s3
def test_a_failed_streamed_upload_leaves_no_object_and_no_pending_upload(s3_bucket) -> None:
    """Over S3 the parts go up as a multipart upload; a failure after several parts aborts it."""
    from segment_io.storage import S3Storage

    endpoint, bucket = s3_bucket
    storage = S3Storage(endpoint.storage_options(), part_size=5 << 20)
    table = _many_batches(40_000)  # ~9 MB: at least one uploaded part before the failure
    offsets = table["offset"].to_numpy().copy()
    offsets[39_000] = offsets[10]
    bad = table.set_column(table.schema.get_field_index("offset"), "offset", pa.array(offsets, pa.int64()))
    prefix = f"s3://{bucket}/logs/t-0"
    with pytest.raises(InvalidRecordsError, match="increase"):
        write_segment(bad, f"{prefix}/00000000000000000000.log", storage=storage, part_bytes=1 << 20)
    assert storage.list(prefix) == []
    assert storage.list_pending_uploads(prefix) == []
    good = write_segment(table, f"{prefix}/00000000000000000000.log", storage=storage, part_bytes=1 << 20)
    assert storage.read(f"{prefix}/00000000000000000000.log") == encode_batches(table).to_bytes()
    assert good.bytes > 5 << 20


def test_mapped_sources_give_the_same_bytes_as_in_memory_ones(tmp_path: Path) -> None:
    """Verbatim copies from a memory-mapped source whose pages are given back behind every written part."""
    from segment_io.storage.local import LocalStorage

    log = LogBuilder(start_offset=0)
    for i in range(400):
        log.batch([rec(f"k{i}", os.urandom(300)), rec(f"j{i}", os.urandom(100))], codec=i % 3)
    data = encode_batches(log.table()).to_bytes()
    src = tmp_path / "00000000000000000000.log"
    src.write_bytes(data)
    decoded = decode_segment_bytes(data, segment_base_offset=0)
    kept = decoded.filter(pa.array([i % 5 != 0 for i in range(decoded.num_rows)]))  # some batches whole
    expected = encode_batches(kept, sources={0: data}).to_bytes()
    out = tmp_path / "out" / "00000000000000000000.log"
    with LocalStorage().read_mapped(str(src)) as mapped:
        write_segment(kept, str(out), sources={0: mapped}, part_bytes=4_096)
    assert out.read_bytes() == expected


def test_each_sources_pages_are_given_back_once_in_order_as_parts_are_written(tmp_path: Path, monkeypatch) -> None:
    """Behind every part, each source segment gives back the pages before the part's last batch from it: the
    ranges of one segment follow one another (no page released twice) and end at that batch, page-aligned."""
    import mmap

    import segment_io.encode_stream as encode_stream

    released: list[tuple[int, int, int]] = []
    monkeypatch.setattr(encode_stream, "release_mapped_pages",
                        lambda src, start=0, end=None: released.append((len(src), start, end)))
    sources, tables = {}, []
    # two segments (two records a batch) of different sizes, so that their releases can be told apart
    for base, n in ((0, 300), (600, 200)):
        log = LogBuilder(start_offset=base)
        for i in range(n):
            log.batch([rec(f"k{i}", os.urandom(300)), rec(f"j{i}", os.urandom(100))])
        data = encode_batches(log.table()).to_bytes()
        sources[base] = data
        decoded = decode_segment_bytes(data, segment_base_offset=base)
        tables.append(decoded.filter(pa.array([i % 2 == 0 for i in range(decoded.num_rows)])))
    kept = pa.concat_tables(tables)
    parts = list(iter_encoded_parts(kept, sources=sources, part_bytes=8_192))
    assert len(parts) > 10
    last_position = {base: int(pc.max(t.column("batch_position")).as_py()) for base, t in zip(sources, tables)}
    for base, data in sources.items():
        ranges = [(start, end) for size, start, end in released if size == len(data)]
        assert len(ranges) > 3
        assert ranges[0][0] == 0
        assert all(prev_end // mmap.PAGESIZE * mmap.PAGESIZE == start
                   for (_, prev_end), (start, _) in zip(ranges, ranges[1:]))
        assert ranges[-1][1] == last_position[base]
