"""Checkpoint files: every broker-written checkpoint in the fixtures, bad input, storage round trips."""

from __future__ import annotations

import os
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
from segment_io.errors import CorruptCheckpointError, IrregularEntryError
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
    ("0\n2\nt 0 5\n\n", 4, "the line is blank"),
    ("0\n1\nt 0 5\n\n", 4, "the line is blank"),  # was: "header declares 1 entries but the file holds 2" (line 2)
    ("0\n1\nt 0 5\n \t\n", 4, "the line is blank"),
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


# --------------------------------------------------------------------------------------------------
# Kafka's reader, exactly: whitespace, NUL bytes, negative epochs, and how much of a bad line is quoted
# --------------------------------------------------------------------------------------------------


def test_entry_lines_split_as_kafkas_whitespace_pattern_does() -> None:
    """Kafka splits with Java's ``Pattern.split("\\s+")``: trailing empty fields are dropped (a trailing space or
    tab is fine), a leading one is kept (a line starting with whitespace has one field too many), and Java's
    ``\\s`` is ASCII whitespace only: a no-break space or \\x1c stays inside a field."""
    assert parse_offset_checkpoint("0\n1\nclicks 0 1000 \n") == {("clicks", 0): 1000}
    assert parse_offset_checkpoint("0\n1\nclicks\t0\x0b1000\f\t\n") == {("clicks", 0): 1000}
    assert parse_leader_epoch_checkpoint("0\n1\n3 40  \n") == [EpochEntry(3, 40)]
    for line in (" clicks 0 1000", "clicks\xa00 1000", "clicks\x1c0 1000", "clicks 0 1000\u2003"):
        with pytest.raises(CorruptCheckpointError):
            parse_offset_checkpoint(f"0\n1\n{line}\n")


@pytest.mark.parametrize("text", ["0\n1\n-1 5\n", "0\n2\n-1 -5\n0 0\n", "0\n1\n0 -5\n"])
def test_a_negative_leader_epoch_entry_is_refused_as_kafkas_epoch_cache_refuses_it(text: str) -> None:
    with pytest.raises(CorruptCheckpointError) as e:
        parse_leader_epoch_checkpoint(text, path="p/leader-epoch-checkpoint")
    assert e.value.line == 3 and "negative" in e.value.detail and "loads the partition" in e.value.detail


def test_a_zero_filled_checkpoint_is_named_as_such_not_quoted() -> None:
    with pytest.raises(CorruptCheckpointError) as e:
        parse_offset_checkpoint("\x00" * 16384, path="d/log-start-offset-checkpoint")
    assert str(e.value) == ("d/log-start-offset-checkpoint, line 1: the whole file is 16384 NUL bytes: a file a "
                            "crash left preallocated or zero-filled, not one a broker finished writing")


def test_trailing_nul_bytes_are_named_with_where_they_start() -> None:
    text = "0\n2\nclicks 0 5\nclicks 1 7\n" + "\x00" * 100
    with pytest.raises(CorruptCheckpointError) as e:
        parse_offset_checkpoint(text, path="d/log-start-offset-checkpoint")
    assert e.value.line == 5 and "the file ends with 100 NUL bytes, from byte 26 on" in e.value.detail
    assert "entries" not in e.value.detail
    with pytest.raises(CorruptCheckpointError) as e:
        parse_leader_epoch_checkpoint("0\r\n1\r\n0 0\r\n" + "\x00" * 20 + "1 1\n")
    assert e.value.line == 4 and "holds 20 NUL byte(s), the first at byte 11" in e.value.detail


def test_a_long_bad_line_is_quoted_in_part_with_its_length() -> None:
    junk = "\x01" * 5000
    with pytest.raises(CorruptCheckpointError) as e:
        parse_offset_checkpoint(f"0\n1\nt 0 {junk}\n")
    message = str(e.value)
    assert len(message) < 500 and "offset " in message and "… (5000 bytes)" in message and "\\x01" in message
    with pytest.raises(CorruptCheckpointError) as e:
        parse_offset_checkpoint(f"{junk}\n")
    assert len(str(e.value)) < 500 and "… (5000 bytes)" in str(e.value)


# --------------------------------------------------------------------------------------------------
# A checkpoint that is not a regular file is refused before it is opened
# --------------------------------------------------------------------------------------------------


def _make(path: Path, kind: str) -> None:
    if kind == "dangling symbolic link":
        path.symlink_to(path.parent / "unmounted-volume" / path.name)
    elif kind == "directory":
        path.mkdir()
    elif kind == "FIFO (named pipe)":
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["dangling symbolic link", "directory", "FIFO (named pipe)"])
@pytest.mark.parametrize("name", [LOG_START_OFFSET_CHECKPOINT, LEADER_EPOCH_CHECKPOINT])
def test_a_checkpoint_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path: Path, no_hang: None,
                                                                                 kind: str, name: str) -> None:
    path = tmp_path / name
    _make(path, kind)
    read = read_leader_epoch_checkpoint if name == LEADER_EPOCH_CHECKPOINT else read_offset_checkpoint
    with pytest.raises(IrregularEntryError) as e:
        read(LocalStorage(), str(path))
    assert e.value.uri == str(path) and e.value.detail.startswith(f"{name} is a {kind}")
    assert "not a regular file: it was not opened" in e.value.detail
    if kind == "dangling symbolic link":
        assert f"(to {tmp_path / 'unmounted-volume' / name}, which does not exist" in e.value.detail
    assert os.path.lexists(path)


def test_a_symbolic_link_to_a_checkpoint_file_is_read_through(tmp_path: Path) -> None:
    (tmp_path / "volume").mkdir()
    (tmp_path / "volume" / LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\norders 1 3000\n")
    (tmp_path / LOG_START_OFFSET_CHECKPOINT).symlink_to(tmp_path / "volume" / LOG_START_OFFSET_CHECKPOINT)
    read = read_offset_checkpoint(LocalStorage(), str(tmp_path / LOG_START_OFFSET_CHECKPOINT))
    assert read == {("orders", 1): 3000}
