"""Real broker-written compacted topics (``__consumer_offsets``, ``__transaction_state``, ksqlDB command
topics with committed transactions, Connect offsets, Control Center changelogs in LZ4) copied into one log
dir and compacted by the job, every partition forced: the kafka-python oracle must see the same key ->
latest record map afterwards, and ``segjobs dump --verify`` must accept every rewritten partition.
"""

from __future__ import annotations

import json
import shutil

import pytest

from jobs.commands.cli import main
from tests.support.compacted_fixtures import NOW, PARTITIONS
from tests.support.replay import comparable, read_partition, replay


@pytest.fixture(scope="module")
def compacted(spark, kafka_real, tmp_path_factory):
    root = tmp_path_factory.mktemp("fixtures")
    log_dir = root / "logs"
    for fixture, name in PARTITIONS:
        shutil.copytree(kafka_real / fixture / name, log_dir / name)
        # Roll an empty active segment at the log end, as a broker does: most of these partitions are a
        # single (active, never cleanable) segment otherwise.
        end = max(b.last_offset for b in read_partition(log_dir / name)) + 1
        (log_dir / name / f"{end:020d}.log").write_bytes(b"")
    before = {name: read_partition(log_dir / name) for _, name in PARTITIONS}
    config = root / "t.toml"
    config.write_text('[defaults]\n"cleanup.policy" = "compact"\n')
    report = root / "r.json"
    rc = main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
               "--topic", "*", "--report", str(report)])
    return {"rc": rc, "log_dir": log_dir, "before": before, "report": json.loads(report.read_text())}


def test_every_partition_compacts(compacted):
    assert compacted["rc"] == 0, compacted["report"]["errors"]
    entries = {f"{e['topic']}-{e['partition']}": e for e in compacted["report"]["partitions"]}
    assert set(entries) == {name for _, name in PARTITIONS}
    for name, e in entries.items():
        assert e["action"] in ("compacted", "unchanged"), (name, e["reason"])
    assert sum(e["action"] == "compacted" for e in entries.values()) >= 5
    assert compacted["report"]["totals"]["records_removed"] > 0


@pytest.mark.parametrize("name", [n for _, n in PARTITIONS])
def test_replay_is_unchanged_and_segments_verify(compacted, name, capsys):
    part = compacted["log_dir"] / name
    before, after = replay(compacted["before"][name]), replay(read_partition(part))
    assert comparable(after.latest) == comparable(before.latest)
    assert len(after.offsets) == len(set(after.offsets))
    assert set(after.offsets) <= set(before.offsets)
    removed = len(before.offsets) - len(after.offsets)
    entry = next(e for e in compacted["report"]["partitions"] if f"{e['topic']}-{e['partition']}" == name)
    assert entry["records_removed"] == removed
    if list(part.glob("*.log")):
        assert main(["dump", "--verify", str(part)]) == 0, capsys.readouterr()


def test_survivors_keep_their_source_bytes(compacted):
    """Every surviving record equals the source record at its offset (key, value, headers, timestamp)."""
    for _, name in PARTITIONS:
        src = {r.offset: r for b in compacted["before"][name] for r in b.records}
        for b in read_partition(compacted["log_dir"] / name):
            for r in b.records:
                o = src[r.offset]
                assert (r.key, r.value, r.headers, r.timestamp) == (o.key, o.value, o.headers, o.timestamp), \
                    (name, r.offset)
