"""When a transaction marker gets its delete horizon, run by run, with both compaction strategies.

Kafka's cleaner judges a marker by what the pass traverses (``CleanedTransactionMetadata``): an abort marker may
go only when the pass saw no batch of its aborted transaction, a commit marker only when it saw no batch of its
committed one. Only then does ``filterTo`` count it as a marker of an empty transaction and stamp
``deleteHorizonMs = now + delete.retention.ms`` on its batch (attribute bit 0x40, the base timestamp replaced
by the horizon). So the clean that removes a transaction's last data keeps its marker unstamped; the next clean
stamps it; a clean at or past the horizon removes it. Three runs of the job, each checked on the marker batch's
header bytes as written in the segment file. An aborted transaction's ``.txnindex`` entry follows the same rule:
a clean writes it again only when it read a batch of the transaction, so the second run drops it (while the
marker stays until its horizon).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from jobs import api
from jobs.rules.config import ConfigSet
from segment_io.layout import partition_dir_name
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.replay import OracleBatch, read_partition

TOPIC, PARTITION = "t", 0
RETENTION = 3_600_000  #: delete.retention.ms of the topic
T0 = 1_700_000_000_000
#: the producer wrote last at about T0: expired at NOW1 (producer.id.expiration.ms: one day by default), so none
#: of its batches is kept for producer state and a marker is judged only by its transaction
NOW1 = T0 + 3 * 86_400_000
NOW2 = NOW1 + 60_000
#: v2 header: attributes (int16) at byte 21, the base timestamp (int64) at byte 27
ATTRIBUTES_AT, BASE_TIMESTAMP_AT = 21, 27
TRANSACTIONAL, CONTROL, DELETE_HORIZON = 0x10, 0x20, 0x40


def _build(pdir: Path, marker: str) -> None:
    """Segment 0: a transaction of producer 7 whose only data (key ``a``) the first clean removes (aborted, with
    its ``.txnindex`` entry, or committed and superseded by a later ``a``), its marker, a record; segment 1
    (active): one record."""
    log = LogBuilder(TOPIC, PARTITION, timestamp=T0)
    log.txn_batch(7, 0, [rec("a", "in-txn")])  # 0
    if marker == "abort":
        log.abort(7, 0)  # 1
    else:
        log.commit(7, 0)  # 1
    log.batch([rec("a", "later")])  # 2
    log.batch([rec("b", "1")])  # 3
    log.roll().batch([rec("z", "active")])  # 4
    write_log(log.table(), pdir)
    if marker == "abort":  # the broker's index of the aborted transaction: version, pid, first, last, LSO
        (pdir / "00000000000000000000.txnindex").write_bytes(struct.pack(">hqqqq", 0, 7, 0, 1, 2))


def _compact(log_dir: Path, now_ms: int, strategy: str) -> None:
    """One run naming the partition (so it is cleaned whatever its dirty ratio), its tasks in this process."""
    config = ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact", f"{TOPIC}:delete.retention.ms={RETENTION}"])
    options = api.CompactOptions(config=config, partitions=(partition_dir_name(TOPIC, PARTITION),), strategy=strategy,
                                 progress=lambda line: None)
    result = api.compact(log_dir, options, now=now_ms, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0, result.errors


def _marker(pdir: Path) -> OracleBatch | None:
    markers = [b for b in read_partition(pdir) if b.control]
    assert len(markers) <= 1
    return markers[0] if markers else None


def _txn_index(pdir: Path) -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of every entry of the partition's ``.txnindex`` files: 34-byte
    entries (version, producer id, first offset, last offset, last stable offset), read here independently."""
    out = []
    for path in sorted(pdir.glob("*.txnindex")):
        data = path.read_bytes()
        for pos in range(0, len(data), 34):
            _, pid, first, last, _ = struct.unpack_from(">hqqqq", data, pos)
            out.append((pid, first, last))
    return out


def _header(batch: OracleBatch) -> tuple[int, int]:
    """The marker batch's attributes and base timestamp, read from its bytes in the file."""
    (attributes,) = struct.unpack_from(">h", batch.raw, ATTRIBUTES_AT)
    (base_timestamp,) = struct.unpack_from(">q", batch.raw, BASE_TIMESTAMP_AT)
    return attributes, base_timestamp


@pytest.mark.parametrize("strategy", ["memory", "external-sort"])
@pytest.mark.parametrize("marker", ["abort", "commit"])
def test_a_marker_is_stamped_by_the_clean_after_the_one_removing_its_data(tmp_path: Path, strategy: str,
                                                                          marker: str) -> None:
    log_dir = tmp_path / "logs"
    pdir = log_dir / partition_dir_name(TOPIC, PARTITION)
    _build(pdir, marker)
    source = _marker(pdir)
    assert source is not None

    # run 1 removes the transaction's data; this pass saw it, so its marker stays as it was
    _compact(log_dir, NOW1, strategy)
    assert [r.offset for b in read_partition(pdir) for r in b.records] == [1, 2, 3, 4]
    first = _marker(pdir)
    assert first is not None and first.base_offset == 1
    attributes, base_timestamp = _header(first)
    assert attributes == TRANSACTIONAL | CONTROL, f"run 1 stamped the marker: attributes {attributes:#x}"
    assert base_timestamp == source.base_timestamp
    assert first.raw == source.raw
    assert _txn_index(pdir) == ([(7, 0, 1)] if marker == "abort" else [])

    # run 2 sees no data of the transaction: it stamps now + delete.retention.ms, and keeps the marker
    _compact(log_dir, NOW2, strategy)
    second = _marker(pdir)
    assert second is not None and second.base_offset == 1
    attributes, base_timestamp = _header(second)
    assert attributes == TRANSACTIONAL | CONTROL | DELETE_HORIZON
    assert base_timestamp == NOW2 + RETENTION
    assert second.records == first.records  # the control record itself (key, value, timestamp) is unchanged
    assert _txn_index(pdir) == []  # this clean read no batch of the aborted transaction

    # a run before the horizon keeps it as it is; one at the horizon removes it
    _compact(log_dir, NOW2 + RETENTION - 1, strategy)
    after = _marker(pdir)
    assert after is not None and after.raw == second.raw
    _compact(log_dir, NOW2 + RETENTION, strategy)
    assert _marker(pdir) is None
    assert [r.offset for b in read_partition(pdir) for r in b.records] == [2, 3, 4]
