"""The oracle and the random logs of the ``segjobs table`` tests: what a ``read_committed`` consumer holds,
replayed over the records kafka-python decodes (no segjobs decoder, transaction logic or latest-per-key kernel),
and hypothesis strategies for partitions with tombstones, keyless records, commits, aborts and open transactions.
Shared by tests/jobs/engine/test_table*.py and tests/segment_io/test_spark_latest.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from hypothesis import strategies as st

from segment_io.layout import partition_dir_name
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.replay import read_partition

TOPIC = "prop"

# --------------------------------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------------------------------


def expected_rows(log_dir: Path, partitions: list[int]) -> dict[tuple[int, bytes], tuple]:
    """(partition, key) -> (value, offset, timestamp, headers) of what a read_committed consumer holds."""
    out: dict[tuple[int, bytes], tuple] = {}
    for p in partitions:
        batches = read_partition(log_dir / partition_dir_name(TOPIC, p))
        outcome: dict[int, str] = {}  # batch index -> "aborted" / "committed" / "open"
        pending: dict[int, list[int]] = {}
        for i, b in enumerate(batches):
            if b.control:
                kind = b.control_type
                for j in pending.pop(b.producer_id, []):
                    outcome[j] = "aborted" if kind == 0 else "committed"
            elif b.transactional:
                pending.setdefault(b.producer_id, []).append(i)
        for idxs in pending.values():
            for j in idxs:
                outcome[j] = "open"
        opens = [batches[j].base_offset for idxs in pending.values() for j in idxs]
        bound = min(opens) if opens else None
        latest: dict[bytes, tuple] = {}
        for i, b in enumerate(batches):
            if b.control or outcome.get(i) == "aborted":
                continue
            for r in b.records:
                if bound is not None and r.offset >= bound:
                    break
                if r.key is None:
                    continue
                if r.value is None:
                    latest.pop(r.key, None)
                else:
                    latest[r.key] = (r.value, r.offset, r.timestamp, tuple(r.headers))
        out.update({(p, k): v for k, v in latest.items()})
    return out


def table_rows(uri: Path) -> dict[tuple[int, bytes], tuple]:
    rows = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    out = {}
    for r in rows:
        assert r["topic"] == TOPIC
        assert (r["partition"], r["key"]) not in out, "a key appears twice"
        out[(r["partition"], r["key"])] = (r["value"], r["offset"], r["timestamp"],
                                           tuple((h["key"], h["value"]) for h in r["headers"]))
    return out


# --------------------------------------------------------------------------------------------------
# Random logs
# --------------------------------------------------------------------------------------------------

KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", None])
RECORD = st.tuples(KEYS, st.one_of(st.none(), st.binary(min_size=1, max_size=6)),
                   st.lists(st.tuples(st.sampled_from(["h", "x"]), st.binary(max_size=3)), max_size=1))
OP = st.one_of(
    st.tuples(st.just("data"), st.lists(RECORD, min_size=1, max_size=3)),
    st.tuples(st.just("txn"), st.integers(1, 3), st.lists(RECORD, min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.integers(1, 3), st.sampled_from(["commit", "abort"])),
    st.tuples(st.just("roll")),
)


def build(ops: list, partition: int) -> pa.Table:
    log = LogBuilder(topic=TOPIC, partition=partition)
    open_txn: set[int] = set()
    for op in ops:
        if op[0] == "data":
            log.batch([rec(k, v, headers=h) if v is not None or k is None else tombstone(k) for k, v, h in op[1]])
        elif op[0] == "txn":
            log.txn_batch(op[1], 0, [rec(k, v, headers=h) if v is not None or k is None else tombstone(k)
                                     for k, v, h in op[2]])
            open_txn.add(op[1])
        elif op[0] == "end" and op[1] in open_txn:
            (log.commit if op[2] == "commit" else log.abort)(op[1], 0)
            open_txn.discard(op[1])
        elif op[0] == "roll" and log.next_offset > log.segment_base_offset:
            log.roll()
    return log.table()


def write_topic(log_dir: Path, logs: dict[int, list]) -> None:
    for p, ops in logs.items():
        d = log_dir / partition_dir_name(TOPIC, p)
        shutil.rmtree(d, ignore_errors=True)
        table = build(ops, p)
        if table.num_rows:
            write_log(table, d)
        else:
            d.mkdir(parents=True)
            (d / "00000000000000000000.log").write_bytes(b"")


LOGS = st.dictionaries(st.integers(0, 2), st.lists(OP, min_size=1, max_size=14), min_size=1, max_size=2)
