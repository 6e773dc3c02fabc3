"""segment_io.latest.LatestRows: the latest row per key of a partition, fed segment by segment, equals the latest
eligible row per key of all its records (the reference: :func:`segment_io.latest.latest_indices` over everything
at once), and an ``add`` costs time in the rows it is given, not in the rows already held."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_io.hashing import hash_keys
from segment_io.latest import TABLE_SCHEMA, LatestRows, latest_indices
from tests.support.hypothesis_budget import examples


def records(keys: list[bytes | None], values: list[bytes | None], first_offset: int) -> pa.Table:
    n = len(keys)
    cols = {
        "topic": pa.array(["t"] * n, pa.string()), "partition": pa.array([0] * n, pa.int32()),
        "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
        "headers": pa.array([[] for _ in range(n)], TABLE_SCHEMA.field("headers").type),
        "offset": pa.array(np.arange(first_offset, first_offset + n), pa.int64()),
        "timestamp": pa.array([0] * n, TABLE_SCHEMA.field("timestamp").type),
        "timestamp_type": pa.array([0] * n, TABLE_SCHEMA.field("timestamp_type").type),
    }
    return pa.table(cols)


SEGMENTS = st.lists(st.lists(st.tuples(st.integers(0, 40), st.one_of(st.none(), st.binary(max_size=3)),
                                       st.booleans()), max_size=30), max_size=8)


@settings(max_examples=examples(1.0), deadline=None)
@given(segments=SEGMENTS)
def test_fed_by_segments_equals_the_latest_of_everything(segments):
    latest = LatestRows()
    parts, masks = [], []
    offset = 0
    for seg in segments:
        keys = [str(k).encode() for k, _, _ in seg]
        t = records(keys, [v for _, v, _ in seg], offset)
        ok = np.array([e for _, _, e in seg], bool)
        latest.add(t, ok)
        parts.append(t)
        masks.append(ok)
        offset += len(seg)
    whole = pa.concat_tables(parts) if parts else records([], [], 0)
    ok = np.concatenate(masks) if masks else np.zeros(0, bool)
    hi, lo = hash_keys(whole.column("key"))
    want = whole.take(pa.array(latest_indices(hi, lo, whole.column("offset").to_numpy(), ok)))
    got = latest.rows()
    assert got.column("offset").to_pylist() == want.column("offset").to_pylist()
    assert got.column("key").to_pylist() == want.column("key").to_pylist()
    assert got.column("value").to_pylist() == want.column("value").to_pylist()
    ghi, glo = latest.hashes()
    whi, wlo = hash_keys(want.column("key"))
    assert np.array_equal(ghi, whi) and np.array_equal(glo, wlo)
    assert latest.records_read == whole.num_rows and latest.records_eligible == int(ok.sum())


def test_many_updates_of_few_keys_keep_the_last_of_each():
    latest = LatestRows()
    for i in range(50):
        latest.add(records([b"a", b"b"] * 2000, [b"%d" % i] * 4000, i * 4000), np.ones(4000, bool))
    rows = latest.rows()
    assert rows.column("offset").to_pylist() == [199_998, 199_999]


@pytest.mark.slow
def test_an_add_costs_the_rows_it_is_given_not_the_rows_held():
    # What this replaced concatenated and re-sorted every held row at each add. With 400,000 keys held, 200
    # adds of one record each must allocate nothing the size of the held rows (numpy's allocations are traced;
    # one int64 column of the held rows is 3.2 MB): only their own rows are hashed into the table.
    n = 400_000
    full = LatestRows()
    full.add(records([b"key-%d" % i for i in range(n)], [b"v"] * n, 0), np.ones(n, bool))
    full.add(records([b"warm"], [b"v"], n), np.ones(1, bool))  # anything done once per table, first
    tracemalloc.start()
    try:
        for i in range(200):
            full.add(records([b"k%d" % (i % 7)], [b"v"], n + 1 + i), np.ones(1, bool))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    rows = full.rows()
    assert rows.num_rows == n + 8
    assert rows.column("offset").to_pylist()[-7:] == list(range(n + 194, n + 201))


def test_partition_latest_bounds_what_a_batch_may_inflate_to(tmp_path):
    import pytest

    from segment_io.compression import GZIP
    from segment_io.errors import SegjobsError
    from segment_io.latest import partition_latest
    from tests.support.builders import LogBuilder, rec, write_log

    log = LogBuilder(topic="t", partition=0)
    log.batch([rec("a", "x" * 20_000), rec("b", "y" * 20_000)])
    (path,) = [p for p in write_log(log.table(), tmp_path / "t-0", codec=GZIP) if p.suffix == ".log"]
    segments = [(str(path), path.read_bytes())]
    assert partition_latest(segments, topic="t", partition=0).num_rows == 2
    with pytest.raises(SegjobsError, match="4096"):
        partition_latest(segments, topic="t", partition=0, max_batch_bytes=4096)
