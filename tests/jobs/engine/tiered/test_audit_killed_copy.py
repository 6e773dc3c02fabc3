"""``segjobs tiered audit`` and ``clean-orphans`` on what a real Kafka 4.1.1 broker left when it was killed in the
middle of a copy to remote storage (tests/data/kafka-tiered-killed/SOURCES.md): the started copy is an orphan with
the objects it wrote, covers no offset, and is kept by a clean while nothing in the metadata is newer than it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.rules.tiered_audit import DANGLING_COPY, Gap

FIXTURE = Path(__file__).resolve().parents[3] / "data" / "kafka-tiered-killed" / "kafka-4.1.1"
FACTS = json.loads((FIXTURE / "killed.json").read_text())
KILLED_ID = "S9w4i9RmTyaIM3YIhwYvcw"  # segment 40-59: COPY_SEGMENT_STARTED, then the broker was killed
TOPIC_ID = "woT7KE9xSL6uheaWd4NDOQ"
#: after the broker's last event (2026-11-29T11:07:08.626Z)
NOW = "2026-11-29T12:00:00Z"
AS_CREATED = ["crashed:retention.ms=-1"]
OLD = 1_795_824_000  # 2026-11-28T00:00:00Z, epoch seconds: a day before the broker's events


@pytest.fixture
def node(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "node")
    return tmp_path / "node"


def _killed_objects(root: Path) -> list[Path]:
    return sorted((root / "remote" / "kafka-tiered-storage" / f"crashed-0-{TOPIC_ID}").glob(f"*-{KILLED_ID}.*"))


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def _audit(root: Path) -> tuple[int, str]:
    return _cli("tiered", "audit", "--log-dir", str(root / "logs"), "--remote", str(root / "remote"), "--now", NOW,
                *[a for s in AS_CREATED for a in ("--set", s)])


def test_the_killed_copy_is_an_orphan_with_the_objects_it_wrote_and_nothing_else_is_flagged() -> None:
    audit = api.tiered_audit(FIXTURE / "logs", FIXTURE / "remote", overrides=AS_CREATED, now=NOW)
    [part] = audit.partitions
    objects = _killed_objects(FIXTURE)
    assert [p.name for p in objects] == FACTS["killed_copy"]["objects"]  # .index, .log, .timeindex
    [orphan] = part.orphans
    assert (orphan.segment_id, orphan.reason, orphan.start_offset, orphan.end_offset) == (KILLED_ID, DANGLING_COPY,
                                                                                          40, 59)
    assert [o.uri for o in orphan.objects] == [str(p) for p in objects]
    assert orphan.bytes == sum(p.stat().st_size for p in objects) == 1534
    assert (part.finished.segments, part.dangling.segments) == (2, 1)
    assert (part.gaps, part.missing, part.overdue, part.dropped_events) == ([], [], [], 0)
    assert (part.log_start_offset, part.local and part.local.local_start, part.log_end) == (0, 40, FACTS["produced"])
    assert audit.exit_code == 0 and audit.unrecognised == []
    rc, out = _audit(FIXTURE)
    assert rc == 0
    assert (f"  orphan: segment {KILLED_ID} (offsets 40-59): copy never finished (COPY_SEGMENT_STARTED); 3 object(s), "
            f"1.5 KB") in out
    assert "summary: 0 gap(s), 0 missing object(s), 1 orphan segment(s) (1.5 KB), 0 overdue segment(s) (0 B)" in out


def test_the_killed_copy_covers_no_offset_its_local_segment_gone_is_a_gap(node: Path) -> None:
    # the started copy's .log is whole in the store, yet Kafka never reads a segment that is not finished
    (node / "logs" / "crashed-0" / "00000000000000000040.log").unlink()
    [part] = api.tiered_audit(node / "logs", node / "remote", overrides=AS_CREATED, now=NOW).partitions
    assert part.gaps == [Gap(40, 59)]
    rc, out = _audit(node)
    assert rc == 1 and out.rstrip().endswith("DATA LOSS: exit code 1")


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in (root / "remote").rglob("*") if p.is_file()}


def test_clean_orphans_keeps_the_killed_copy_while_no_later_event_says_it_is_dead(node: Path) -> None:
    # its COPY_SEGMENT_STARTED is the metadata's newest event: from this metadata a dead copy and one in progress
    # look the same. Its objects made a day older than the metadata, so that only the event keeps it
    for f in (node / "remote").rglob("*"):
        if f.is_file():
            os.utime(f, (OLD, OLD))
    before = _files(node)
    clean = ["tiered", "clean-orphans", "--log-dir", str(node / "logs"), "--remote", str(node / "remote"),
             "--now", NOW]
    rc, out = _cli(*clean)
    assert rc == 0, out
    assert f"  keep: crashed-0 segment {KILLED_ID}: {DANGLING_COPY}; 1534 bytes (1.5 KB); kept: " in out
    assert "summary: deleted 0 object(s), 0 bytes (0 B); kept 1 orphan segment(s); 0 topic(s) refused" in out
    assert _files(node) == before
    # told the metadata is the whole story (--min-age 0): the dead attempt's objects go, no finished segment's
    rc, out = _cli(*clean, "--min-age", "0s")
    assert rc == 0, out
    assert "summary: deleted 3 object(s), 1534 bytes (1.5 KB); kept 0 orphan segment(s); 0 topic(s) refused" in out
    assert before - _files(node) == {p.relative_to(FIXTURE) for p in _killed_objects(FIXTURE)}
    rc, out = _audit(node)
    assert rc == 0 and "summary: 0 gap(s), 0 missing object(s), 0 orphan segment(s) (0 B)" in out
