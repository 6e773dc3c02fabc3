"""The live oracle's result, kept as fixtures so that the suite checks it without Java or a broker.

``tests/data/kafka-live/kafka-4.1.1/`` holds one compacted partition written by Apache Kafka 4.1.1's broker with
librdkafka's producers (``source/``: idempotent producers with several codecs, tombstones, headers, a committed
transaction whose only record a later record supersedes, a committed and an aborted transaction, an aborted one
in the active segment) and the same partition after Kafka's own log cleaner (``kafka-cleaner/``), both copied
from a run of ``tests/compat/test_live_broker.py`` (its README says how). segjobs' compaction of ``source/`` at
the time of Kafka's clean (the horizon Kafka stamped minus ``delete.retention.ms``) must write Kafka's batches
and records, with both strategies, byte for byte but for the compressed payload of a batch rebuilt with gzip,
snappy or zstd, and Kafka's files wherever their batches are Kafka's bytes: among them the markers of the transactions
this clean emptied, which Kafka leaves unstamped.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.rules.config import ConfigSet
from tests.support.live_broker import batch_differences, segment_file_differences
from tests.support.replay import read_partition

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "kafka-live" / "kafka-4.1.1"
PARTITION = "compacted-0"
DELETE_RETENTION_MS = 86_400_000
HORIZON_BIT = 0x40


def _kafka_clean_time() -> int:
    horizons = {b.base_timestamp for b in read_partition(FIXTURE / "kafka-cleaner" / PARTITION)
                if b.attributes & HORIZON_BIT}
    assert len(horizons) == 1, horizons
    return horizons.pop() - DELETE_RETENTION_MS


@pytest.mark.parametrize("strategy", ["memory", "external-sort"])
def test_segjobs_compacts_the_live_fixture_into_kafkas_files(tmp_path: Path, strategy: str) -> None:
    log_dir = tmp_path / "logs"
    shutil.copytree(FIXTURE / "source" / PARTITION, log_dir / PARTITION)
    config = ConfigSet().with_overrides(["compacted:cleanup.policy=compact",
                                         f"compacted:delete.retention.ms={DELETE_RETENTION_MS}"])
    options = api.CompactOptions(config=config, partitions=(PARTITION,), strategy=strategy, progress=lambda line: None)
    result = api.compact(log_dir, options, now=_kafka_clean_time(), seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0, result.errors
    kafka = FIXTURE / "kafka-cleaner" / PARTITION
    assert batch_differences(log_dir / PARTITION, kafka) == []
    assert segment_file_differences(log_dir / PARTITION, kafka) == []


def test_kafka_left_the_markers_of_the_transactions_it_emptied_unstamped() -> None:
    # what the byte comparison above relies on, said directly: two transactions lost their data in this clean
    # (one aborted, one committed and superseded), and no marker carries a horizon
    source = read_partition(FIXTURE / "source" / PARTITION)
    kafka = read_partition(FIXTURE / "kafka-cleaner" / PARTITION)
    kept_markers = [b for b in kafka if b.control and b.records]
    assert len(kept_markers) == len([b for b in source if b.control]) == 4
    assert all(not b.attributes & HORIZON_BIT for b in kept_markers)
    data_pids = {b.producer_id for b in kafka if b.transactional and not b.control and b.records}
    assert data_pids  # the committed transaction that kept its data
