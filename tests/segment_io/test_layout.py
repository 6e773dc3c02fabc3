"""Log-dir naming and listing: pure classification of FileInfo lists, and every fixture broker dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from segment_io.layout import (
    LEADER_EPOCH_CHECKPOINT,
    OFFSET_CHECKPOINT_FILES,
    PARTITION_METADATA,
    list_log_dir,
    listing_from_files,
    parse_partition_dir,
    parse_segment_file,
    partition_dir_name,
    partition_dir_problem,
    segment_file_name,
    unreadable_entry,
)
from segment_io.storage import LocalStorage
from segment_io.storage.base import FileInfo

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "data" / "kafka-real"
BROKER_DIRS = sorted(str(p.parent.relative_to(FIXTURES)) for p in FIXTURES.rglob("meta.properties"))


def fi(uri: str, size: int = 1) -> FileInfo:
    return FileInfo(uri=uri, size=size, mtime_ms=0)


def test_names() -> None:
    assert parse_partition_dir("my.topic-with-dash-3") == ("my.topic-with-dash", 3)
    assert parse_partition_dir("t-0.0123456789abcdef0123456789abcdef-delete") is None
    assert parse_partition_dir("t-0.0123456789abcdef0123456789abcdef-future") is None
    assert parse_segment_file(segment_file_name(42, ".timeindex") + ".swap") == (42, ".timeindex", ".swap")
    assert parse_segment_file("00000000000000007752-0000000001.checkpoint") is None
    # one name per segment file: not a final line break, nor digits of another script
    assert parse_segment_file(segment_file_name(0) + "\n") is None
    assert parse_segment_file("\uff10" + segment_file_name(0)[1:]) is None


def test_pure_listing_classifies_everything() -> None:
    root = "s3://bucket/logs"
    p = f"{root}/my.topic-with-dash-12"
    files = [
        fi(f"{p}/{segment_file_name(100, '.log')}"), fi(f"{p}/{segment_file_name(100, '.index')}"),
        fi(f"{p}/{segment_file_name(100, '.timeindex')}"), fi(f"{p}/{segment_file_name(100, '.snapshot')}"),
        fi(f"{p}/{segment_file_name(7, '.log')}"), fi(f"{p}/{segment_file_name(7, '.txnindex')}"),
        fi(f"{p}/{segment_file_name(20, '.log')}"),
        fi(f"{p}/{segment_file_name(150, '.snapshot')}"),
        fi(f"{p}/{segment_file_name(7, '.log')}.cleaned"), fi(f"{p}/{segment_file_name(20, '.index')}.swap"),
        fi(f"{p}/{segment_file_name(3, '.log')}.deleted"), fi(f"{p}/{segment_file_name(3, '.snapshot')}.deleted"),
        fi(f"{p}/{segment_file_name(99, '.index')}"),  # its .log is gone
        fi(f"{p}/{LEADER_EPOCH_CHECKPOINT}"), fi(f"{p}/{PARTITION_METADATA}"),
        fi(f"{p}/notes.txt"), fi(f"{p}/{segment_file_name(5, '.checkpoint')}"),
        fi(f"{root}/{OFFSET_CHECKPOINT_FILES[0]}"), fi(f"{root}/meta.properties"),
        fi(f"{root}/t-0.0123456789abcdef0123456789abcdef-delete/{segment_file_name(0, '.log')}"),
        fi(f"{root}/tiered/0/{segment_file_name(0, '.log')}"),
        fi(f"{root}/other-1/deeper/x"), fi(f"{root}/other-1/{segment_file_name(0, '.log')}"),
    ]
    listing = listing_from_files(root + "/", reversed(files), dirs=[f"{root}/empty-5", f"{root}/t-9/"])
    assert list(listing.partitions) == [("empty", 5), ("my.topic-with-dash", 12), ("other", 1), ("t", 9)]
    part = listing.partition("my.topic-with-dash", 12)
    assert part.uri == p
    assert [s.base_offset for s in part.segments] == [7, 20, 100]
    s7, _s20, s100 = part.segments
    assert s7.txnindex is not None and s7.index is None and s7.snapshot is None
    assert s100.index.name.endswith(".index") and s100.timeindex is not None and s100.snapshot is not None
    assert [o for o, _ in part.producer_snapshots] == [100, 150]
    assert [(t.base_offset, t.suffix, t.transient) for t in part.transient] == [
        (3, ".log", ".deleted"), (3, ".snapshot", ".deleted"), (7, ".log", ".cleaned"), (20, ".index", ".swap")]
    assert [(b, s) for b, s, _ in part.orphans] == [(99, ".index")]
    assert part.leader_epoch_checkpoint is not None and part.partition_metadata is not None
    assert sorted(f.name for f in part.unknown) == [segment_file_name(5, ".checkpoint"), "notes.txt"]
    assert list(listing.checkpoints) == [OFFSET_CHECKPOINT_FILES[0]]
    assert [f.name for f in listing.top_level_files] == ["meta.properties"]
    assert sorted(listing.other_dirs) == ["t-0.0123456789abcdef0123456789abcdef-delete", "tiered"]
    # a sub-directory of a partition is ignored as Kafka ignores it (listed, with what it holds), unless it
    # bears a segment file's name
    other = listing.partition("other", 1)
    assert [s.base_offset for s in other.segments] == [0] and other.irregular == ()
    assert [(f.uri[len(root):], f.kind) for f in other.unknown] == [("/other-1/deeper", "directory"),
                                                                   ("/other-1/deeper/x", "file")]
    assert listing.partition("empty", 5).segments == ()
    # every file ends up somewhere
    n = (sum(len(p.segments) + len(p.transient) + len(p.orphans) + sum(f.kind == "file" for f in p.unknown)
             + len(p.producer_snapshots)
             + (p.leader_epoch_checkpoint is not None) + (p.partition_metadata is not None)
             for p in listing.partitions.values())
         + sum(s.index is not None or 0 for p in listing.partitions.values() for s in p.segments)
         + sum(s.timeindex is not None or 0 for p in listing.partitions.values() for s in p.segments)
         + sum(s.txnindex is not None or 0 for p in listing.partitions.values() for s in p.segments)
         + len(listing.checkpoints) + len(listing.top_level_files) + sum(map(len, listing.other_dirs.values())))
    assert n == len(files)


def test_files_outside_the_root_are_refused() -> None:
    with pytest.raises(ValueError):
        listing_from_files("/a/logs", [fi("/a/other/x")])


@pytest.mark.parametrize("rel", BROKER_DIRS)
def test_every_fixture_broker_dir_lists_like_a_directory_walk(rel: str) -> None:
    root = str(FIXTURES / rel)
    listing = list_log_dir(LocalStorage(), root)
    # independent walk with os.scandir
    expected_parts: dict[tuple[str, int], set[str]] = {}
    for entry in os.scandir(root):
        if entry.is_dir() and (tp := parse_partition_dir(entry.name)):
            expected_parts[tp] = {e.name for e in os.scandir(entry.path)}
    assert set(listing.partitions) == set(expected_parts)
    assert set(listing.checkpoints) == {n for n in OFFSET_CHECKPOINT_FILES if os.path.exists(f"{root}/{n}")}
    for tp, names in expected_parts.items():
        part = listing.partitions[tp]
        assert part.uri == f"{root}/{tp[0]}-{tp[1]}"
        logs = sorted(n for n in names if n.endswith(".log"))
        assert [segment_file_name(s.base_offset) for s in part.segments] == logs  # sorted by base offset
        seen = {s.log.name for s in part.segments}
        seen |= {f.name for s in part.segments for f in (s.index, s.timeindex, s.txnindex) if f}
        seen |= {f.name for _, f in part.producer_snapshots} | {f.name for f in part.unknown}
        seen |= {t.info.name for t in part.transient} | {f.name for _, _, f in part.orphans}
        seen |= {f.name for f in (part.leader_epoch_checkpoint, part.partition_metadata) if f}
        assert seen == names  # nothing lost, nothing invented
        for s in part.segments:
            for f, suffix in ((s.index, ".index"), (s.timeindex, ".timeindex"), (s.snapshot, ".snapshot")):
                assert (f is not None) == (segment_file_name(s.base_offset, suffix) in names)


def test_fixture_specifics(kafka_real: Path) -> None:
    rjm = list_log_dir(LocalStorage(), str(kafka_real / "rjmfernandes-cp7.6-kraft-lz4/data"))
    meta = rjm.partition("__cluster_metadata", 0)
    assert {f.name for f in meta.unknown} == {"00000000000000007752-0000000001.checkpoint",
                                              "00000000000000014926-0000000001.checkpoint", "quorum-state"}
    assert [o for o, _ in meta.producer_snapshots] == [17027] and meta.segments[0].snapshot is None
    names = {t for t, _ in rjm.partitions}
    assert "_confluent-controlcenter-7-6-0-1-aggregate-topic-partition-store-changelog" in names
    assert {f.name for f in rjm.top_level_files} >= {"meta.properties", "bootstrap.checkpoint"}
    ronem = list_log_dir(LocalStorage(), "file://" + str(kafka_real / "ronem123-kraft3.9-multiseg/kafka-logs"))
    assert [s.base_offset for s in ronem.partition("__consumer_offsets", 31).segments] == [0, 3]
    assert ronem.partition("topic_transactions", 0).segments[0].log.size == 0


def test_entries_that_are_not_regular_files_are_listed_not_dropped(tmp_path: Path) -> None:
    """A segment-named entry that is not a regular file makes the partition unreadable (it must not look like
    an absent segment); other odd entries are ignored as Kafka ignores them."""
    root = tmp_path / "logs"
    p = root / "t-0"
    p.mkdir(parents=True)
    (p / segment_file_name(0)).write_bytes(b"")
    (p / segment_file_name(1)).symlink_to(tmp_path / "nowhere")
    (p / segment_file_name(2)).mkdir()
    os.mkfifo(p / segment_file_name(3, ".index"))
    (p / "backup").mkdir()
    (p / "backup" / "old.log").write_bytes(b"x")
    os.mkfifo(p / "a-pipe")
    (root / "u-0").symlink_to(tmp_path / "gone")  # a partition dir that leads nowhere
    listing = list_log_dir(LocalStorage(), str(root))
    part = listing.partition("t", 0)
    assert [s.base_offset for s in part.segments] == [0]
    assert [(f.name, f.kind) for f in part.irregular] == [
        (segment_file_name(1), "dangling symbolic link"), (segment_file_name(2), "directory"),
        (segment_file_name(3, ".index"), "FIFO (named pipe)")]
    assert [(f.uri[len(str(p)) + 1:], f.kind) for f in part.unknown] == [
        ("a-pipe", "FIFO (named pipe)"), ("backup", "directory"), ("backup/old.log", "file")]
    err = unreadable_entry(part)
    assert err is not None and err.uri == str(p / segment_file_name(1)) and "fix:" in err.detail
    gone = listing.partition("u", 0)
    assert gone.segments == () and "partition directory is a dangling symbolic link" in unreadable_entry(gone).detail


def test_a_link_to_a_device_or_a_fifo_is_called_so_not_dangling(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    p = root / "t-0"
    p.mkdir(parents=True)
    (p / segment_file_name(0)).write_bytes(b"")
    (p / segment_file_name(0, ".timeindex")).symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe")
    (p / segment_file_name(0, ".index")).symlink_to(tmp_path / "pipe")
    part = list_log_dir(LocalStorage(), str(root)).partition("t", 0)
    assert sorted((f.name, f.kind) for f in part.irregular) == [
        (segment_file_name(0, ".index"), f"symbolic link to a FIFO (named pipe) ({tmp_path / 'pipe'})"),
        (segment_file_name(0, ".timeindex"), "symbolic link to a device file (/dev/zero)")]
    err = unreadable_entry(part)
    assert err is not None and "is a symbolic link to a " in err.detail and "dangling" not in err.detail


def test_a_partition_dir_linked_from_outside_the_log_dir_is_marked(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    (root / "inside-0").mkdir(parents=True)
    (tmp_path / "elsewhere-0").mkdir()
    (root / "out-0").symlink_to(tmp_path / "elsewhere-0")
    (root / "in-0").symlink_to(root / "inside-0")
    listing = list_log_dir(LocalStorage(), str(root))
    assert listing.partition("out", 0).outside_log_dir == str(tmp_path / "elsewhere-0")
    assert "outside the log dir" in unreadable_entry(listing.partition("out", 0)).detail
    assert listing.partition("in", 0).outside_log_dir is None and unreadable_entry(listing.partition("in", 0)) is None


def test_s3_style_directories_named_like_segments() -> None:
    """On S3 a "directory" is a folder marker (listed with irregular=True) or only a prefix of other keys."""
    root = "s3://b/logs"
    files = [fi(f"{root}/t-0/{segment_file_name(0)}"),
             FileInfo(f"{root}/t-0/{segment_file_name(1)}", 0, 0, kind="directory"),  # marker ".../1.log/"
             fi(f"{root}/t-0/{segment_file_name(2)}/part-0")]  # a prefix with an object below it
    part = listing_from_files(root, files).partition("t", 0)
    assert [s.base_offset for s in part.segments] == [0]
    assert [f.name for f in part.irregular] == [segment_file_name(1), segment_file_name(2)]
    assert [f.name for f in part.unknown] == ["part-0"]


# ---- log dirs near a wrong --log-dir ---------------------------------------------------------------------------


class _CountingStorage(LocalStorage):
    """Local storage that counts its one-level listings."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    def list_dirs(self, prefix: str) -> list[str]:
        self.listings += 1
        return super().list_dirs(prefix)


def _partition_dirs(*dirs: Path) -> None:
    for d in dirs:
        d.mkdir(parents=True)


def test_log_dirs_near_finds_them_below_beside_and_above(tmp_path: Path) -> None:
    from segment_io.layout import log_dirs_near

    root = tmp_path / "data"
    _partition_dirs(root / "kafka" / "broker1" / "orders-0", root / "kafka" / "broker2" / "orders-1",
                    root / "old" / "users-0", root / "kafka" / "broker2" / "nested" / "deeper" / "too-deep-0")
    storage = LocalStorage()
    # two levels below; never inside a partition directory; not three levels down
    assert log_dirs_near(storage, str(root)) == [str(root / "old"), str(root / "kafka" / "broker1"),
                                                 str(root / "kafka" / "broker2")]
    # a sibling that holds them (a typo of the log dir's name; on S3 a prefix that does not exist)
    _partition_dirs(tmp_path / "logs" / "orders-0")
    assert log_dirs_near(storage, str(tmp_path / "logz")) == [str(tmp_path / "logs")]
    # a directory inside a log dir (a topic name given as the log dir): the log dir is its parent
    _partition_dirs(tmp_path / "logs" / "orders")
    assert log_dirs_near(storage, str(tmp_path / "logs" / "orders")) == [str(tmp_path / "logs")]


def test_log_dirs_near_is_bounded(tmp_path: Path) -> None:
    from segment_io.layout import NEAR_MAX_LISTINGS, log_dirs_near

    root = tmp_path / "bucket"
    for i in range(60):  # wide: far more directories than listings allowed
        (root / f"d{i:02d}" / "x").mkdir(parents=True)
    _partition_dirs(root / "d00" / "x" / "orders-0")
    storage = _CountingStorage()
    assert log_dirs_near(storage, str(root)) == []  # d00/x is two levels down, but the budget ran out first
    assert storage.listings == NEAR_MAX_LISTINGS
    storage.listings = 0
    assert log_dirs_near(storage, str(root), max_listings=200) == [str(root / "d00" / "x")]
    assert storage.listings == 1 + 60 + 60 + 1  # the root, two levels, the parent


@pytest.mark.parametrize("name, why", [
    ("Copy of orders-0", "holds characters Kafka does not allow in a topic name (' '"),
    ("users-\uff11", "is not written in ASCII digits"),
    ("users-01", "has a leading zero (partition 1's directory is users-1)"),
    ("users-+3", "'+3' has a sign (a broker reads it as partition 3, whose directory is users-3)"),
    ("-+3", "no topic name"),
    ("orders-99999999999", "above 2147483647"),
    ("orders-2147483648", "above 2147483647"),
    ("." + "-0", "Kafka does not allow '.' as a topic name"),
    ("a" * 250 + "-0", "above Kafka's limit of 249"),
    ("-3", "no topic name"),
    ("t-0\n", "ends in white space ('\\n') after the partition number"),  # Python's $ matches before a final \n
    ("users-3 ", "ends in white space (' ')"),
    ("users-+99999999999", "above 2147483647"),  # Java's parseInt refuses it: no partition a broker reads it as
])
def test_names_that_only_look_like_a_partition_are_rejected_with_why(name: str, why: str) -> None:
    assert parse_partition_dir(name) is None
    assert why in (partition_dir_problem(name) or "")
    listing = listing_from_files("/ld", [FileInfo(f"/ld/{name}/{segment_file_name(0)}", 1, 0),
                                         FileInfo(f"/ld/t-0/{segment_file_name(0)}", 1, 0)])
    assert list(listing.partitions) == [("t", 0)] and name in listing.other_dirs
    assert why in listing.rejected[name]


@pytest.mark.parametrize("name", ["t-0", "orders-2147483647", "a" * 249 + "-7", "__consumer_offsets-49", "a.b_c-d-10",
                                  "orders-0.0123456789abcdef0123456789abcdef-delete", "lost+found", "orders"])
def test_names_kafka_gives_are_not_rejected(name: str) -> None:
    assert partition_dir_problem(name) is None


def test_two_directories_never_name_the_same_partition() -> None:
    """Strict parsing makes a partition's name exactly ``partition_dir_name(topic, partition)``."""
    for name in ["t-1", "t-01", "t-\uff11", "t-+1", "t-1 ", "t-1\n", "t-1\r\n", "x-y-0", "x-y-00", "t-2147483647"]:
        tp = parse_partition_dir(name)
        assert tp is None or partition_dir_name(*tp) == name
