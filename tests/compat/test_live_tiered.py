"""Tiered storage on a real Kafka broker (``make broker-test``): the scenario of ``tests.support.tiered_broker``
(LocalTieredStorage from Kafka's test jars as the remote store; topics copied, expired by remote retention and
deleted), then segjobs on what it left:

- every ``__remote_log_metadata`` record decodes to what Kafka's own RemoteLogMetadataFormatter printed for it
  (the broker running, through its console consumer): Kafka's serde is the oracle, here only;
- ``segjobs tiered audit`` finds no gap, no missing object, no orphan and nothing overdue with the topics'
  own retention: the broker's expiration task left nothing due;
- the fixtures' generator writes the same kind of tree the suite's fixtures are (tests/data/kafka-tiered/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from jobs import api
from segment_io.remote_metadata import read_metadata_partition
from tests.support.live_broker import live_clients
from tests.support.remote_metadata import kafka_fields, parse_kafka_line
from tests.support.tiered_broker import EXPIRING, KEPT, METADATA_TOPIC, TieredRun, copy_fixtures, run_tiered

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TieredRun, Path]]:
    ck = live_clients()
    root = tmp_path_factory.mktemp("tiered")
    run = run_tiered(root / "run", ck)
    out = root / "fixtures"
    copy_fixtures(run, out)
    yield run, out


def test_every_metadata_record_decodes_as_kafkas_own_serde_reads_it(tiered: tuple[TieredRun, Path]) -> None:
    run, _ = tiered
    ours = list(read_metadata_partition(str(run.broker.log_dir / f"{METADATA_TOPIC}-0")))
    kafka = [parse_kafka_line(line) for line in run.kafka_metadata]
    assert [o for o, _ in ours] == [o for o, _ in kafka] and len(ours) >= 20
    for (offset, message), (_, fields) in zip(ours, kafka):
        assert kafka_fields(message) == fields, f"offset {offset}"


def test_the_audit_finds_nothing_wrong_with_what_the_broker_left(tiered: tuple[TieredRun, Path]) -> None:
    run, out = tiered
    configs = json.loads((out / "topics.json").read_text())
    overrides = [f"{t}:{k}={v}" for t, c in configs.items() for k, v in c.items() if k in ("retention.ms",
                                                                                           "retention.bytes")]
    audit = api.tiered_audit(run.broker.log_dir, run.remote, overrides=overrides)
    parts = {p.topic: p for p in audit.partitions}
    for p in audit.partitions:
        assert (p.gaps, p.missing, p.orphans, p.overdue) == ([], [], [], []), p.topic
    assert parts[KEPT].log_start_offset == 0 and parts[KEPT].log_end == run.produced[KEPT]
    assert parts[EXPIRING].log_start_offset and parts[EXPIRING].log_start_offset > 0  # remote retention deleted
    assert audit.exit_code == 0


def test_the_generator_writes_the_tree_the_suites_fixtures_are(tiered: tuple[TieredRun, Path]) -> None:
    _, out = tiered
    fixtures = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered" / "kafka-4.1.1"

    def shape(root: Path) -> set[str]:
        return {p.relative_to(root).parts[0] for p in root.iterdir()} | {
            p.name for p in (root / "logs").iterdir() if not p.name.startswith(METADATA_TOPIC)}

    assert shape(out) == shape(fixtures)
