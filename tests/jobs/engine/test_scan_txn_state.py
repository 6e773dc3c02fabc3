"""The scan's transaction and producer state comes from batch headers and the control batches' records alone: it
must equal the state replayed from the first-pass projection of every record of the log (what the scan decoded
before, kept here as the oracle), on random logs with transactions, aborts, epoch bumps, compressed data and
markers and header-only batches, and on every partition of the real corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.engine.scan import empty_batches_from_headers, scan_partition
from jobs.rules.kafka_defaults import PRODUCER_ID_EXPIRATION_MS
from jobs.rules.transactions import TxnState, derive_txn_state, summarize_batches
from segment_io.decode import decode_key_hashes_bytes
from segment_io.format import scan_batches
from segment_io.layout import PartitionListing, list_log_dir
from segment_io.schema import RECORD_SCHEMA
from segment_io.segment_writer import write_segment
from segment_io.storage import open_storage
from tests.support.builders import empty_batch, write_log
from tests.support.hypothesis_budget import examples
from tests.support.random_logs import (
    CODECS,
    IDEMPOTENT_PID,
    NOW1,
    NOW2,
    PARTITION,
    TOPIC,
    TXN_PIDS,
    build_log,
    log_specs,
)


def record_level_txn_state(listing: PartitionListing, now_ms: int) -> TxnState:
    """The oracle: every segment decoded record by record (offsets, key hashes, batch flags, control types), the
    header-only batches added from the headers, replayed."""
    key_tables, empties = [], []
    for i, seg in enumerate(listing.segments):
        data = Path(seg.log.uri.removeprefix("file://")).read_bytes()
        active = i == len(listing.segments) - 1
        key_tables.append(decode_key_hashes_bytes(data, allow_truncated_tail=active))
        empties.append(empty_batches_from_headers(scan_batches(data, allow_truncated_tail=active), seg.base_offset))
    summary = summarize_batches(key_tables, empty_batches=pa.concat_tables(empties) if empties else None)
    return derive_txn_state(summary, now_ms=now_ms, producer_id_expiration_ms=PRODUCER_ID_EXPIRATION_MS)


def assert_same_state(ours: TxnState, oracle: TxnState, where: str) -> None:
    parts = {"aborted": ("producer_id", "first_offset", "last_offset"),
             "completed": ("producer_id", "first_offset", "last_offset", "aborted"),
             "active": ("producer_id", "producer_epoch", "last_data_offset", "last_timestamp")}
    for part, names in parts.items():
        for name in names:
            a, b = getattr(getattr(ours, part), name), getattr(getattr(oracle, part), name)
            assert a.dtype == b.dtype and np.array_equal(a, b), (where, part, name, a, b)
    for name in ("open_producer_ids", "open_first_offsets"):
        assert np.array_equal(getattr(ours, name), getattr(oracle, name)), (where, name)
    assert ours.first_unstable_offset == oracle.first_unstable_offset, where


def scan_and_compare(root: Path, topic: str, partition: int, now_ms: int) -> bool:
    """Scan one partition at depth ``transactions`` and compare it with the oracle; False when it is unreadable
    (the oracle would fail on it too)."""
    storage = open_storage(str(root))
    listing = list_log_dir(storage, str(root)).partition(topic, partition)
    scan = scan_partition(storage, listing, depth="transactions", now_ms=now_ms)
    if scan.error is not None:
        return False
    assert scan.txn is not None and scan.state is not None
    assert_same_state(scan.txn, record_level_txn_state(listing, now_ms), f"{topic}-{partition} at {now_ms}")
    assert scan.state.first_unstable_offset == scan.txn.first_unstable_offset
    return True


#: header-only batches after the log's last offset, as a clean leaves them: (producer id, control, epoch, age in ms)
EMPTY_BATCHES = st.lists(st.tuples(st.sampled_from([*TXN_PIDS, IDEMPOTENT_PID, -1]), st.booleans(),
                                   st.integers(0, 2), st.sampled_from([0, 3_600_000, 30 * 86_400_000])), max_size=3)


def write_partition(spec, marker_codec: int, empties: list[tuple[int, bool, int, int]], pdir: Path) -> None:
    """``spec``'s log (random_logs) with its markers compressed with ``marker_codec`` and ``empties`` appended to
    its last segment (or as its active segment's only batches)."""
    built = build_log(spec)
    table = built.table
    control = pc.field("control")
    table = table.set_column(table.schema.get_field_index("codec"), "codec",
                             pc.if_else(table["control"], pa.scalar(marker_codec, pa.int8()), table["codec"]))
    assert table.filter(control).num_rows == 0 or set(table.filter(control)["codec"].to_pylist()) == {marker_codec}
    segment = built.empty_tail if built.empty_tail is not None else max(table["segment_base_offset"].to_pylist())
    offset = max(table["offset"].to_pylist()) + 1
    rows = []
    for pid, is_control, epoch, age in empties:
        rows.append(empty_batch(offset, offset + 1, pid=pid, epoch=epoch if pid >= 0 else -1,
                                base_sequence=0 if pid >= 0 else -1, max_timestamp=NOW1 - age,
                                transactional=is_control and pid >= 0, control=is_control and pid >= 0,
                                segment_base_offset=segment))
        offset += 2
    write_log(table, pdir, empty_batches=pa.concat_tables(rows) if rows else None)
    if built.empty_tail is not None and not rows:
        write_segment(RECORD_SCHEMA.empty_table(), str(pdir / f"{built.empty_tail:020d}.log"))


@settings(max_examples=examples(1.0), deadline=None)
@given(spec=log_specs(), marker_codec=CODECS, empties=EMPTY_BATCHES)
def test_header_state_equals_record_level_state_on_random_logs(tmp_path_factory: pytest.TempPathFactory, spec,
                                                               marker_codec: int, empties) -> None:
    root = tmp_path_factory.mktemp("log")
    write_partition(spec, marker_codec, empties, root / f"{TOPIC}-{PARTITION}")
    # the clock the data starts at (every producer active), the first clean, and past every horizon
    for now_ms in (spec.clock, NOW1, NOW2, NOW1 + 60 * 86_400_000):
        assert scan_and_compare(root, TOPIC, PARTITION, now_ms)


def test_header_state_equals_record_level_state_on_the_real_corpus(kafka_real: Path) -> None:
    partitions = sorted({p.parent for p in kafka_real.rglob("*.log") if "_supplemental" not in p.parts})
    compared = 0
    for pdir in partitions:
        topic, _, number = pdir.name.rpartition("-")
        # now: the corpus's own time (every producer active) and far later (every idle one expired)
        for now_ms in (1_700_000_000_000, 4_000_000_000_000):
            compared += scan_and_compare(pdir.parent, topic, int(number), now_ms)
    assert len(partitions) >= 40 and compared == 2 * len(partitions), compared  # every one of them readable


@pytest.mark.parametrize("source, topic, completed, active", [
    ("danielowo-ksqldb-kraft-txn/kafka_data", "_confluent-ksql-default__command_topic", 4, 0),
    ("itumelengmogase-ksqldb-txn-state/kafka-data", "_confluent-ksql-default__command_topic", 1, 1),
    ("rjmfernandes-cp7.6-kraft-lz4/data", "_confluent-monitoring", 0, 5),
])
def test_the_corpus_comparison_covers_transactions_and_producers(kafka_real: Path, source: str, topic: str,
                                                                 completed: int, active: int) -> None:
    """The corpus comparison is not vacuous: its transactional and idempotent partitions have the state a
    ``read_committed`` reader of them sees (committed transactions of ksqlDB's command topic, idempotent
    producers of Confluent's monitoring topic, at the corpus's time)."""
    root = kafka_real / source
    storage = open_storage(str(root))
    scan = scan_partition(storage, list_log_dir(storage, str(root)).partition(topic, 0), depth="transactions",
                          now_ms=1_700_000_000_000)
    assert scan.txn is not None
    assert (len(scan.txn.completed), len(scan.txn.aborted), len(scan.txn.active)) == (completed, 0, active)
