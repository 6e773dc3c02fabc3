"""decode(encode(x)) == x for random logs, and write_segment / write_log producing real segment files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io.decode import decode_segment_bytes, read_segment
from segment_io.encode import encode_batches
from segment_io.errors import UsageError
from segment_io.format import scan_batches
from segment_io.index import (
    AbortedTxn,
    build_offset_and_time_index,
    encode_txn_index,
    read_offset_index,
)
from segment_io.schema import RECORD_SCHEMA
from segment_io.segment_writer import write_segment
from tests.support.builders import LogBuilder, empty_batch, rec, tombstone, write_log

TOPIC, PARTITION = "rt", 7
PLACEMENT = ["batch_position", "batch_size", "batch_base_timestamp"]

timestamps = st.one_of(st.just(-1), st.integers(0, 1 << 45))
blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=200, max_size=3000))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)


@st.composite
def logs(draw) -> tuple[pa.Table, pa.Table | None, int]:
    """A random partition log: record batches with gaps, every codec, horizons, both timestamp types, producer
    fields, headers, null keys and values; plus empty batches between them."""
    seg_base = draw(st.integers(0, 1 << 40))
    log = LogBuilder(topic=TOPIC, partition=PARTITION, start_offset=seg_base)
    empties = []
    cursor = seg_base
    for _ in range(draw(st.integers(1, 6))):
        cursor += draw(st.integers(0, 3))  # offsets removed between batches
        span = draw(st.integers(1, 6))
        base, last = cursor, cursor + span - 1
        cursor = last + 1
        pid = draw(st.sampled_from([-1, 0, 12345678901]))
        fields = dict(pid=pid, epoch=-1 if pid < 0 else draw(st.integers(0, 32767)),
                      base_sequence=-1 if pid < 0 else draw(st.integers(0, 1 << 30)),
                      leader_epoch=draw(st.integers(-1, 100)), timestamp_type=draw(st.sampled_from([0, 1])),
                      transactional=pid >= 0 and draw(st.booleans()))
        kept = sorted(draw(st.sets(st.integers(base, last), max_size=span)))
        if not kept:
            empties.append(empty_batch(base, last, pid=pid, epoch=fields["epoch"],
                                       base_sequence=fields["base_sequence"], leader_epoch=fields["leader_epoch"],
                                       timestamp_type=fields["timestamp_type"], transactional=fields["transactional"],
                                       max_timestamp=draw(timestamps), segment_base_offset=seg_base))
            continue
        records = [rec(draw(blobs), draw(blobs), timestamp=draw(timestamps), headers=draw(header_lists), offset=o)
                   for o in kept]
        horizon = draw(st.one_of(st.none(), st.integers(0, 1 << 45)))
        log.batch(records, base_offset=base, last_offset=last, codec=draw(st.integers(0, 4)),
                  delete_horizon_ms=horizon, **fields)
    empty = pa.concat_tables(empties) if empties else None
    return log.table(), empty, seg_base


def decoded(data: bytes, segment_base_offset: int = 0) -> pa.Table:
    return decode_segment_bytes(data, topic=TOPIC, partition=PARTITION, segment_base_offset=segment_base_offset)


def expected_base_timestamps(table: pa.Table) -> list[int]:
    """Kafka's rule: the horizon if set, else the first written record's timestamp (for LOG_APPEND_TIME that
    reads as the batch max timestamp)."""
    out, first = [], {}
    for row in table.select(["batch_base_offset", "timestamp", "delete_horizon_ms"]).to_pylist():
        b = row["batch_base_offset"]
        if b not in first:
            first[b] = row["delete_horizon_ms"] if row["delete_horizon_ms"] is not None else row["timestamp"]
        out.append(first[b])
    return out


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(logs())
@pytest.mark.slow
def test_decode_of_encode_is_identity(log: tuple[pa.Table, pa.Table | None, int]) -> None:
    table, empties, seg = log
    enc = encode_batches(table, empty_batches=empties)
    data = enc.to_bytes()
    back = decoded(data, seg)
    assert back.drop_columns(PLACEMENT).equals(table.drop_columns(PLACEMENT))
    assert back["batch_base_timestamp"].to_pylist() == expected_base_timestamps(table)

    hdr = scan_batches(data)
    assert len(hdr) == len(table["batch_base_offset"].unique()) + (empties.num_rows if empties else 0)
    if empties is not None:
        rows = [i for i in range(len(hdr)) if hdr.record_count[i] == 0]
        assert hdr.base_offset[rows].tolist() == empties["batch_base_offset"].to_pylist()
        assert hdr.last_offset[rows].tolist() == empties["batch_last_offset"].to_pylist()
        assert hdr.max_timestamp[rows].tolist() == empties["batch_max_timestamp"].to_pylist()
        assert hdr.producer_id[rows].tolist() == empties["producer_id"].to_pylist()
        assert hdr.base_sequence[rows].tolist() == empties["base_sequence"].to_pylist()
        assert set(hdr.base_timestamp[rows].tolist()) <= {-1}

    # the positions the decoder reports let the bytes be copied back verbatim
    again = encode_batches(back, empty_batches=empties and _placed(empties, hdr), sources={seg: data})
    assert again.to_bytes() == data


def _placed(empties: pa.Table, hdr) -> pa.Table:
    """``empties`` with their real positions in the encoded bytes."""
    position = {int(b): int(p) for b, p, n in zip(hdr.base_offset, hdr.position, hdr.record_count) if n == 0}
    positions = pa.array([position[b] for b in empties["batch_base_offset"].to_pylist()], pa.int64())
    return empties.set_column(empties.schema.get_field_index("batch_position"), "batch_position", positions)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_every_codec_roundtrips_a_large_batch(codec: int) -> None:
    log = LogBuilder(topic=TOPIC, partition=PARTITION)
    log.batch([rec(f"key-{i}", f"value-{i}-" * (i % 50), headers=[("i", str(i).encode())]) for i in range(3000)],
              codec=codec)
    table = log.table()
    back = decoded(encode_batches(table).to_bytes())
    assert back.drop_columns(PLACEMENT).equals(table.drop_columns(PLACEMENT))


# --------------------------------------------------------------------------------------------------
# write_segment
# --------------------------------------------------------------------------------------------------


def _sample(start: int = 0) -> pa.Table:
    log = LogBuilder(topic=TOPIC, partition=PARTITION, start_offset=start)
    for i in range(50):
        log.batch([rec(f"k{i}", "v" * 300), tombstone(f"k{i - 1}")], pid=3, epoch=0, base_sequence=2 * i)
    return log.table()


def test_write_segment_writes_log_and_kafka_indexes(tmp_path: Path) -> None:
    table = _sample(start=1000)
    path = tmp_path / f"{TOPIC}-{PARTITION}" / "00000000000000001000.log"
    result = write_segment(table, str(path), index_interval_bytes=1024)
    data = path.read_bytes()
    assert result.bytes == len(data)
    assert (result.batches, result.records) == (50, 100)
    assert (result.base_offset, result.last_offset) == (1000, 1099)
    assert result.max_timestamp == max(table["timestamp"].to_pylist())
    offset_index, time_index = build_offset_and_time_index(scan_batches(data), segment_base_offset=1000,
                                                           index_interval_bytes=1024)
    assert (tmp_path / f"{TOPIC}-{PARTITION}" / "00000000000000001000.index").read_bytes() == offset_index
    assert (tmp_path / f"{TOPIC}-{PARTITION}" / "00000000000000001000.timeindex").read_bytes() == time_index
    entries = read_offset_index(offset_index)
    assert len(entries) > 5  # ~800-byte batches, an entry every 1 KiB
    assert ".txnindex" not in result.paths
    back = read_segment(str(path))
    assert back.drop_columns(PLACEMENT).equals(table.drop_columns(PLACEMENT))


def test_write_segment_txn_index_and_transient_suffix(tmp_path: Path) -> None:
    aborted = [AbortedTxn(producer_id=3, first_offset=5, last_offset=9, last_stable_offset=5)]
    path = tmp_path / "00000000000000000000.log.cleaned"
    result = write_segment(_sample(), str(path), aborted_txns=aborted)
    assert sorted(Path(p).name for p in result.paths.values()) == [
        "00000000000000000000.index.cleaned", "00000000000000000000.log.cleaned",
        "00000000000000000000.timeindex.cleaned", "00000000000000000000.txnindex.cleaned"]
    assert (tmp_path / "00000000000000000000.txnindex.cleaned").read_bytes() == encode_txn_index(aborted)
    write_segment(_sample(), str(tmp_path / "00000000000000000000.log"), aborted_txns=[], write_indexes=False)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".cleaned")) == [
        "00000000000000000000.log"]


def test_write_segment_refuses_a_name_without_base_offset(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="segment"):
        write_segment(_sample(), str(tmp_path / "data.log"))
    assert list(tmp_path.iterdir()) == []


def test_write_segment_of_nothing_is_an_empty_segment(tmp_path: Path) -> None:
    result = write_segment(RECORD_SCHEMA.empty_table(), str(tmp_path / "00000000000000000042.log"))
    assert (tmp_path / "00000000000000000042.log").read_bytes() == b""
    assert (tmp_path / "00000000000000000042.index").read_bytes() == b""
    assert (result.base_offset, result.last_offset, result.records) == (42, -1, 0)


@pytest.mark.s3
def test_write_segment_to_s3(s3_bucket) -> None:
    from segment_io.storage import S3Storage

    endpoint, bucket = s3_bucket
    storage = S3Storage(endpoint.storage_options())
    uri = f"s3://{bucket}/logs/{TOPIC}-{PARTITION}/00000000000000000000.log"
    result = write_segment(_sample(), uri, storage=storage)
    assert storage.read(uri) == encode_batches(_sample()).to_bytes()
    assert result.bytes == result.headers.end
    assert storage.exists(uri.replace(".log", ".timeindex"))
    back = read_segment(uri, storage=storage)
    assert back.num_rows == 100 and back["topic"][0].as_py() == TOPIC


# --------------------------------------------------------------------------------------------------
# builders.write_log
# --------------------------------------------------------------------------------------------------


def test_write_log_splits_on_segment_base_offset_and_size(tmp_path: Path) -> None:
    log = LogBuilder(topic=TOPIC, partition=PARTITION)
    for i in range(30):
        log.batch([rec(f"k{i}", "x" * 100)])
    log.roll()
    for i in range(30, 40):
        log.batch([rec(f"k{i}", "y" * 100)])
    table = log.table()
    empty = empty_batch(40, 41, pid=8, epoch=0, base_sequence=3, segment_base_offset=30)
    part = tmp_path / f"{TOPIC}-{PARTITION}"

    paths = write_log(table, part, empty_batches=empty)
    assert [p.name for p in paths] == ["00000000000000000000.log", "00000000000000000030.log"]
    assert scan_batches(paths[1].read_bytes()).record_count.tolist()[-1] == 0

    resized = tmp_path / "resized" / f"{TOPIC}-{PARTITION}"
    paths = write_log(table, resized, segment_bytes=1000, codec=1)
    bases = [int(p.name[:20]) for p in paths]
    assert bases[0] == 0 and 30 in bases and len(paths) > 3
    for p in paths:
        data = p.read_bytes()
        hdr = scan_batches(data)
        assert len(data) <= 1000 or len(hdr) == 1
        assert set(hdr.codec.tolist()) == {1}
        assert p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists()
        assert int(hdr.base_offset[0]) == int(p.name[:20])
    back = pa.concat_tables([read_segment(str(p)) for p in paths])
    keep = [c for c in RECORD_SCHEMA.names if c not in PLACEMENT + ["codec", "segment_base_offset"]]
    assert back.select(keep).equals(table.select(keep))
    assert pc.all(pc.equal(back["codec"], 1)).as_py()
