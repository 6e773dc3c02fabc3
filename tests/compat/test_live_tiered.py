"""Tiered storage on a real Kafka broker (``make broker-test``): the scenario of ``tests.support.tiered_broker``
(LocalTieredStorage from Kafka's test jars as the remote store; topics copied, expired by remote retention and
deleted), then segjobs on what it left:

- every ``__remote_log_metadata`` record decodes to what Kafka's own RemoteLogMetadataFormatter printed for it
  (the broker running, through its console consumer): Kafka's serde is the oracle, here only;
- ``segjobs tiered audit`` finds no gap, no missing object, no orphan and nothing overdue with the topics'
  own retention: the broker's expiration task left nothing due;
- the fixtures' generator writes the same kind of tree the suite's fixtures are (tests/data/kafka-tiered/);

and a copy interrupted by killing the broker (``tests.support.tiered_kill``: LocalTieredStorage's transfer held
half-way, the broker SIGKILLed while it waits), audited as the kill left it, then after the broker copied the
segment again, and cleaned of the dead attempt's objects.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.rules.tiered_audit import DANGLING_COPY
from segment_io.remote_metadata import read_metadata_partition
from tests.support.live_broker import live_clients, require_javac, running_brokers
from tests.support.remote_metadata import kafka_fields, parse_kafka_line
from tests.support.tiered_broker import (
    EXPIRING,
    KEPT,
    METADATA_TOPIC,
    REMOTE_ROOT,
    TieredRun,
    copy_fixtures,
    produced_record,
    run_tiered,
)
from tests.support.tiered_kill import TOPIC, KilledCopy, copy_fixture, retry_copy, run_until_killed, started_segments

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


# --------------------------------------------------------------------------------------------------
# A copy interrupted by killing the broker
# --------------------------------------------------------------------------------------------------


@dataclass
class Killed:
    """The kill scenario's node, the audit taken as the kill left it, and the retried copy."""

    copy: KilledCopy
    as_killed: Path  #: the fixture of the node as the kill left it (tests.support.tiered_kill.copy_fixture)
    audit_rc: int
    audit: dict[str, Any]  #: segjobs tiered audit --format json of the node as the kill left it
    retried: str  #: the stem of the copy the restarted broker finished


def _cli(*args: str) -> tuple[int, str]:
    """``segjobs ARGS``: its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def _audit_cli(log_dir: Path, remote: Path) -> tuple[int, dict[str, Any]]:
    rc, out = _cli("tiered", "audit", "--log-dir", str(log_dir), "--remote", str(remote), "--format", "json",
                   "--set", f"{TOPIC}:retention.ms=-1")
    return rc, json.loads(out)


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Killed]:
    ck = live_clients()
    require_javac()
    root = tmp_path_factory.mktemp("killed")
    copy = run_until_killed(root / "run", ck)
    assert not copy.broker.clean and running_brokers(copy.broker) == []
    rc, report = _audit_cli(copy.broker.log_dir, copy.remote)
    copy_fixture(copy, root / "as-killed")
    retried = retry_copy(copy)
    yield Killed(copy, root / "as-killed", rc, report, retried)


def _only_partition(report: dict[str, Any]) -> dict[str, Any]:
    assert [p["topic"] for p in report["partitions"]] == [TOPIC]
    return report["partitions"][0]


def test_a_copy_killed_half_way_is_a_dangling_start_whose_objects_are_orphans(killed: Killed) -> None:
    copy = killed.copy
    part = _only_partition(killed.audit)
    objects = copy.objects()
    # the transferer held before the leader-epoch checkpoint: the segment and its indexes are there, nothing else
    assert sorted(p.suffix for p in objects) == [".index", ".log", ".timeindex"]
    assert started_segments(copy.broker)[copy.segment_id].start_offset == copy.start_offset
    assert part["orphans"] == [{
        "segment_id": copy.segment_id, "reason": DANGLING_COPY, "start_offset": copy.start_offset,
        "end_offset": started_segments(copy.broker)[copy.segment_id].end_offset,
        "bytes": sum(p.stat().st_size for p in objects), "objects": [str(p) for p in objects]}]
    # the killed copy's segment is still local (local retention deletes only what is copied): no gap
    assert part["local"]["start_offset"] <= copy.start_offset
    assert (part["gaps"], part["missing_objects"], part["overdue"], part["dropped_events"]) == ([], [], [], 0)
    assert part["remote"]["copy_started"]["segments"] == 1 and part["remote"]["finished"]["segments"] >= 2
    assert (part["log_start_offset"], part["log_end_offset"]) == (0, copy.produced)
    assert killed.audit_rc == 0 == killed.audit["exit_code"]  # orphans cost storage; no record is lost


def test_the_fixture_of_what_the_kill_left_audits_as_the_node_did(killed: Killed) -> None:
    # what copy_fixture leaves out (indexes, snapshots) is nothing the audit reads
    copy, fixture = killed.copy, killed.as_killed

    def normalised(report: dict[str, Any], log_dir: Path, remote: Path) -> str:
        text = json.dumps({k: v for k, v in report.items() if k != "now"}, sort_keys=True)
        return text.replace(str(log_dir), "<logs>").replace(str(remote), "<remote>")

    rc, report = _audit_cli(fixture / "logs", fixture / "remote" / REMOTE_ROOT)
    assert rc == killed.audit_rc
    assert normalised(report, fixture / "logs", fixture / "remote" / REMOTE_ROOT) == \
        normalised(killed.audit, copy.broker.log_dir, copy.remote)


def test_the_restarted_broker_copies_the_segment_again_and_leaves_the_dead_attempts_objects(killed: Killed) -> None:
    copy = killed.copy
    rc, report = _audit_cli(copy.broker.log_dir, copy.remote)
    part = _only_partition(report)
    assert [o["segment_id"] for o in part["orphans"]] == [copy.segment_id]
    assert part["orphans"][0]["objects"] == [str(p) for p in copy.objects()]
    assert (part["gaps"], part["missing_objects"], part["overdue"]) == ([], [], [])
    assert rc == 0 and part["remote"]["copy_started"]["segments"] == 1
    assert part["remote"]["finished"]["segments"] > _only_partition(killed.audit)["remote"]["finished"]["segments"]
    # the segment is only remote now (the local one deleted), and reads back as it was produced
    assert part["local"]["start_offset"] > copy.start_offset
    _, out = _cli("dump", "--format", "jsonl", "--remote", str(copy.remote), str(copy.partition_dir()))
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in rows] == \
        [(n, *produced_record(TOPIC, n)) for n in range(copy.produced)]


def test_clean_orphans_removes_the_dead_attempts_objects_and_no_finished_segments(killed: Killed,
                                                                                  tmp_path: Path) -> None:
    copy = killed.copy
    node = tmp_path / "node"  # a copy: the other tests read the node as the broker left it
    shutil.copytree(copy.broker.log_dir, node / "logs")
    shutil.copytree(copy.remote, node / "remote")
    before = {p.relative_to(node / "remote") for p in (node / "remote").rglob("*") if p.is_file()}
    dead = {p.relative_to(copy.remote) for p in copy.objects()}
    args = ["tiered", "clean-orphans", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"),
            "--min-age", "0s"]

    rc, out = _cli(*args, "--dry-run")
    dead_bytes = sum(p.stat().st_size for p in copy.objects())
    assert rc == 0 and f"would delete 3 object(s) of 1 orphan segment(s), {dead_bytes} bytes" in out, out
    assert {p.relative_to(node / "remote") for p in (node / "remote").rglob("*") if p.is_file()} == before
    rc, out = _cli(*args)
    assert rc == 0, out
    after = {p.relative_to(node / "remote") for p in (node / "remote").rglob("*") if p.is_file()}
    assert before - after == dead and after <= before
    assert any(str(p).split("/")[-1].startswith(killed.retried) for p in after)
    rc, report = _audit_cli(node / "logs", node / "remote")
    part = _only_partition(report)
    assert (part["gaps"], part["missing_objects"], part["orphans"], part["overdue"]) == ([], [], [], [])
    assert rc == 0


def test_no_broker_is_left_running(killed: Killed) -> None:
    assert running_brokers(killed.copy.broker) == []
