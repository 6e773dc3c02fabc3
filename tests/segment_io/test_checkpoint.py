"""Checkpoint files: every broker-written checkpoint in the fixtures, bad input, storage round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from segment_io.checkpoint import (
    EpochEntry,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    render_leader_epoch_checkpoint,
    render_offset_checkpoint,
    truncate_epochs_from_start,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
)
from segment_io.errors import CorruptCheckpointError
from segment_io.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from segment_io.storage import LocalStorage

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "data" / "kafka-real"
OFFSET_CHECKPOINTS = (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                      REPLICATION_OFFSET_CHECKPOINT)


def _fixture_files(names: tuple[str, ...]) -> list[str]:
    return sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.name in names)


@pytest.mark.parametrize("rel", _fixture_files(OFFSET_CHECKPOINTS))
def test_every_fixture_offset_checkpoint_parses_and_renders_back(rel: str) -> None:
    text = (FIXTURES / rel).read_bytes().decode("utf-8")
    entries = parse_offset_checkpoint(text, path=rel)
    if text == "":
        assert entries == {}  # brokers leave empty files; Kafka reads them as no entries
        return
    lines = text.splitlines()
    assert len(entries) == int(lines[1]) == len(lines) - 2
    for line in lines[2:]:
        topic, partition, offset = line.split(" ")
        assert entries[(topic, int(partition))] == int(offset)
    assert render_offset_checkpoint(entries) == text


@pytest.mark.parametrize("rel", _fixture_files((LEADER_EPOCH_CHECKPOINT,)))
def test_every_fixture_leader_epoch_checkpoint_parses_and_renders_back(rel: str) -> None:
    text = (FIXTURES / rel).read_bytes().decode("utf-8")
    entries = parse_leader_epoch_checkpoint(text, path=rel)
    lines = text.splitlines()
    assert [tuple(map(int, line.split(" "))) for line in lines[2:]] == [tuple(e) for e in entries]
    # Kafka's cache keeps epochs in order and start offsets never go back
    assert [e.epoch for e in entries] == sorted({e.epoch for e in entries})
    assert [e.start_offset for e in entries] == sorted(e.start_offset for e in entries)
    assert render_leader_epoch_checkpoint(entries) == text


def test_fixtures_cover_the_interesting_cases() -> None:
    offset_files = _fixture_files(OFFSET_CHECKPOINTS)
    texts = [(FIXTURES / f).read_text() for f in offset_files]
    assert any(t == "" for t in texts) and any(len(t.splitlines()) > 20 for t in texts)
    epochs = [parse_leader_epoch_checkpoint((FIXTURES / f).read_text()) for f in
              _fixture_files((LEADER_EPOCH_CHECKPOINT,))]
    assert any(len(e) >= 3 for e in epochs)


def test_render_format_is_kafkas() -> None:
    entries = {("my.topic-with-dash", 3): 42, ("__consumer_offsets", 0): 0}
    assert render_offset_checkpoint(entries) == "0\n2\nmy.topic-with-dash 3 42\n__consumer_offsets 0 0\n"
    assert render_offset_checkpoint({}) == "0\n0\n"
    assert render_leader_epoch_checkpoint([EpochEntry(0, 0), (3, 450)]) == "0\n2\n0 0\n3 450\n"
    assert render_offset_checkpoint(entries, line_separator="\r\n").split("\r\n")[:2] == ["0", "2"]


def test_reader_accepts_what_javas_readline_accepts() -> None:
    assert parse_offset_checkpoint("0\r\n1\r\nt 0 5\r\n") == {("t", 0): 5}
    assert parse_offset_checkpoint("0\n1\nt\t0  5") == {("t", 0): 5}  # no final newline; any whitespace
    assert parse_offset_checkpoint("") == {}
    assert parse_offset_checkpoint("0\n") == {}  # Kafka: no count line means no entries


@pytest.mark.parametrize("text, line, fragment", [
    ("1\n0\n", 1, "version 1"),
    ("x\n0\n", 1, "not an integer"),
    ("0\n2\nt 0 5\n", 2, "declares 2 entries"),
    ("0\n0\nt 0 5\n", 2, "declares 0 entries"),
    ("0\nz\n", 2, "not an integer"),
    ("0\n2\nt 0 5\nt 1\n", 4, "topic partition offset"),
    ("0\n2\nt 0 5\nt 1 2 3\n", 4, "topic partition offset"),
    ("0\n1\nt x 5\n", 3, "partition"),
    ("0\n1\nt 0 9223372036854775808\n", 3, "out of range"),
    ("0\n2\nt 0 5\nt 0 6\n", 4, "twice"),
    ("0\n2\nt 0 5\n\n", 4, "topic partition offset"),
    ("0\n1\n t 0 5\n", 3, "topic partition offset"),
])
def test_bad_offset_checkpoints_name_file_and_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(CorruptCheckpointError) as e:
        parse_offset_checkpoint(text, path="dir/recovery-point-offset-checkpoint")
    assert e.value.path == "dir/recovery-point-offset-checkpoint"
    assert e.value.line == line
    assert fragment in e.value.detail


@pytest.mark.parametrize("text, line", [("0\n1\n3\n", 3), ("0\n1\n3 x\n", 3), ("0\n1\n3 4 5\n", 3),
                                        ("0\n1\n2147483648 0\n", 3), ("5\n0\n", 1)])
def test_bad_leader_epoch_checkpoints_name_the_line(text: str, line: int) -> None:
    with pytest.raises(CorruptCheckpointError) as e:
        parse_leader_epoch_checkpoint(text, path="p/leader-epoch-checkpoint")
    assert (e.value.path, e.value.line) == ("p/leader-epoch-checkpoint", line)


def test_topic_names_that_cannot_be_written_are_refused() -> None:
    with pytest.raises(ValueError):
        render_offset_checkpoint({("bad topic", 0): 1})


def test_truncate_from_start_rewrites_the_straddling_entry() -> None:
    epochs = [EpochEntry(0, 0), EpochEntry(3, 450), EpochEntry(5, 700)]
    # the new start falls inside epoch 3's range: epochs 0 goes, epoch 3 now starts at the new start
    assert truncate_epochs_from_start(epochs, 500) == [EpochEntry(3, 500), EpochEntry(5, 700)]
    # exactly on an entry's start: that entry is removed and re-added unchanged
    assert truncate_epochs_from_start(epochs, 450) == [EpochEntry(3, 450), EpochEntry(5, 700)]
    # before the first entry's start: nothing changes
    assert truncate_epochs_from_start([EpochEntry(2, 10), EpochEntry(4, 20)], 5) == [(2, 10), (4, 20)]
    # past every entry: only the latest epoch remains, starting at the new start
    assert truncate_epochs_from_start(epochs, 10_000) == [EpochEntry(5, 10_000)]
    assert truncate_epochs_from_start([], 7) == []


def test_storage_round_trips(tmp_path: Path) -> None:
    storage = LocalStorage()
    uri = str(tmp_path / RECOVERY_POINT_CHECKPOINT)
    assert read_offset_checkpoint(storage, uri) == {}  # missing file
    entries = {("a.b-c", 0): 10, ("a.b-c", 1): 20}
    write_offset_checkpoint(storage, uri, entries)
    assert Path(uri).read_text() == "0\n2\na.b-c 0 10\na.b-c 1 20\n"
    assert read_offset_checkpoint(storage, uri) == entries
    epoch_uri = str(tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT)
    assert read_leader_epoch_checkpoint(storage, epoch_uri) == []
    storage.makedirs(str(tmp_path / "t-0"))
    write_leader_epoch_checkpoint(storage, epoch_uri, [(0, 0), (2, 17)])
    assert read_leader_epoch_checkpoint(storage, epoch_uri) == [EpochEntry(0, 0), EpochEntry(2, 17)]
    Path(uri).write_bytes(b"0\n1\n\xff 0 1\n")
    with pytest.raises(CorruptCheckpointError) as e:
        read_offset_checkpoint(storage, uri)
    assert e.value.path == uri
