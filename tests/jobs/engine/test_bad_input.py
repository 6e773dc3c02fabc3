"""Bad input never costs data (issue 8): Kafka's own topics, impossible log-start-offset-checkpoint entries,
entries that are not regular files, damage retention can see, garbage checkpoint files and wrong indexes.

Every case runs the real command in-process (``jobs.commands.cli.main`` on the shared Spark session) and compares the
bytes of every file (and what every other entry is) before and after: a partition reported as bad must be
left exactly as it was, with a message naming the partition, the file and the fix, and the exit code must
say so (0 ok, 1 some partition failed, 2 nothing done). The S3 cases run against the moto_server fixture.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.rules.config import KAFKA_TOPICS, ConfigSet
from segment_io.layout import segment_file_name
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.damage import backwards_offsets, shift_first_index_entry
from tests.support.paths import REPO
from tests.support.replay import comparable, read_partition, replay
from tests.support.retention import (
    DAY,
    NOW,
    OLD,
    RECENT,
    build_partition,
    entry,
    run_command,
    write_checkpoint,
)
from tests.support.s3_objects import upload

FAR_FUTURE = 4_102_444_800_000  # 2100-01-01: every record of every fixture is past any retention


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root`` (and its work dir): file bytes, link targets, and what the rest are. Never
    opens a FIFO (reading one would block)."""
    out: dict[str, object] = {}
    for base in (root, Path(f"{root}.segjobs")):
        for dirpath, dirnames, filenames in os.walk(base):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = os.lstat(p)
                rel = str(p.relative_to(root.parent))
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = ("link", os.readlink(p))
                elif stat.S_ISDIR(st.st_mode):
                    out[rel] = "dir"
                elif stat.S_ISFIFO(st.st_mode):
                    out[rel] = "fifo"
                elif name != ".lock":
                    out[rel] = p.read_bytes()
    return out


def run(command: str, log_dir: str | Path, *options: str, now: int = NOW) -> tuple[int, dict | None]:
    """Run ``segjobs <command>`` in-process, progress lines on; returns (exit code, the JSON report)."""
    return run_command(command, log_dir, *options, now=now, quiet=False)


def error_of(report: dict, name: str) -> dict:
    (hit,) = [e for e in report["errors"] if e["partition"] == name]
    return hit


def three_segments(d: Path, topic: str = "t") -> None:
    """Segments 0 and 1 past a 1-day retention at NOW, segment 2 (active) recent."""
    build_partition(d, topic, 0, [[OLD], [OLD], [RECENT]])


# --------------------------------------------------------------------------------------------------
# 1. Kafka's own topics get Kafka's creation configs; the KRaft metadata log is never touched
# --------------------------------------------------------------------------------------------------


def test_kafka_topics_table_matches_kafkas_creation_configs() -> None:
    configs = ConfigSet()
    for topic in ("__consumer_offsets", "__transaction_state"):
        cfg = configs.for_topic(topic)
        assert cfg.policy_text == "compact" and cfg.segment_bytes == 100 * 1024 * 1024
        assert "Kafka's creation config" in configs.layers_for(topic)[0].source_of("cleanup.policy")
    share = configs.for_topic("__share_group_state")
    assert share.policy_text == "delete" and share.retention_ms == -1 and share.retention_bytes == -1
    assert configs.for_topic("__remote_log_metadata").retention_ms == -1
    assert KAFKA_TOPICS["__cluster_metadata"].never_touched.startswith("KRaft metadata log, never touched")
    # [defaults] and globs do not reach those keys; a table naming the topic exactly does
    conf = ConfigSet.from_toml('[defaults]\n"cleanup.policy" = "delete"\n"retention.ms" = 5\n'
                               '[topics."__*"]\n"cleanup.policy" = "delete"\n'
                               '[topics."__transaction_state"]\n"cleanup.policy" = "compact,delete"\n',
                               overrides=["*:segment.bytes=1MiB"])
    offsets = conf.for_topic("__consumer_offsets")
    assert offsets.policy_text == "compact" and offsets.segment_bytes == 100 * 1024 * 1024
    assert offsets.retention_ms == 5  # a key Kafka does not set at creation stays configurable by globs
    assert conf.for_topic("__transaction_state").policy_text == "compact,delete"
    assert len(conf.shadowed("__consumer_offsets")) == 3 and conf.shadowed("orders") == []


@pytest.mark.parametrize("config", [None, "conf/topics.toml", "star"])
def test_internal_topics_survive_retain_with_default_settings(tmp_path: Path, spark, config) -> None:
    d = tmp_path / "logs"
    # orders.audit: conf/topics.toml names it exactly, and a table naming no topic of the log dir is an error
    for topic in ("__consumer_offsets", "__transaction_state", "__cluster_metadata", "clicks", "orders.audit"):
        three_segments(d, topic)
    before = snapshot(d)
    opts = {None: (), "conf/topics.toml": ("--config", str(REPO / "conf/topics.toml")),
            "star": ("--set", "*:cleanup.policy=delete", "--set", "*:retention.ms=1d")}[config]
    code, report = run("retain", d, *opts, "--max-delete-fraction", "1")  # clicks loses 2/3 of its bytes
    assert code == 0
    after = snapshot(d)
    for topic in ("__consumer_offsets", "__transaction_state", "__cluster_metadata"):
        assert {k: v for k, v in after.items() if f"/{topic}-0" in k} == \
               {k: v for k, v in before.items() if f"/{topic}-0" in k}
        assert entry(report, topic, 0)["action"] == "none"
    assert entry(report, "__consumer_offsets", 0)["policy"] == "compact"
    assert entry(report, "__cluster_metadata", 0)["reason"].startswith("KRaft metadata log, never touched")
    assert entry(report, "clicks", 0)["action"] == "delete"  # a user topic still gets its retention


def test_naming_an_internal_topic_exactly_overrides_kafkas_config_but_never_the_metadata_log(tmp_path: Path,
                                                                                           spark) -> None:
    d = tmp_path / "logs"
    three_segments(d, "__consumer_offsets")
    three_segments(d, "__cluster_metadata")
    meta = snapshot(d / "__cluster_metadata-0")
    # inspect predicts what the jobs below do: nothing for the metadata log, however it is configured
    code, report = run("inspect", d, "--set", "__cluster_metadata:cleanup.policy=compact,delete",
                       "--set", "*:retention.ms=1d", "--set", "__cluster_metadata:min.cleanable.dirty.ratio=0")
    assert code == 0
    e = entry(report, "__cluster_metadata", 0)
    assert (e["compaction_selected"], e["retention_segments_deleted"]) == (False, 0)
    assert e["compaction_reason"].startswith("KRaft metadata log, never touched")
    code, report = run("retain", d, "--set", "__consumer_offsets:cleanup.policy=delete",
                       "--set", "__cluster_metadata:cleanup.policy=delete", "--set", "*:retention.ms=1d",
                       "--max-delete-fraction", "1")
    assert code == 0
    assert [x["base_offset"] for x in entry(report, "__consumer_offsets", 0)["deleted"]] == [0, 1]
    assert snapshot(d / "__cluster_metadata-0") == meta
    # compaction does not touch it either, even when asked by name
    code, report = run("compact", d, "--set", "__cluster_metadata:cleanup.policy=compact",
                       "--partition", "__cluster_metadata-0")
    assert code == 0 and snapshot(d / "__cluster_metadata-0") == meta
    e = entry(report, "__cluster_metadata", 0)
    assert e["action"] == "skipped" and e["reason"].startswith("KRaft metadata log, never touched")


@pytest.mark.parametrize("fixture", ["donaldy-kafka2.7-compacted-offsets/kafka-logs",
                                     "itumelengmogase-ksqldb-txn-state/kafka-data",
                                     "ronem123-kraft3.9-multiseg/kafka-logs",
                                     "rjmfernandes-cp7.6-kraft-lz4/data"])
def test_a_real_broker_dir_survives_retain_and_compact_with_default_settings(kafka_real: Path, tmp_path: Path,
                                                                             spark, fixture: str) -> None:
    d = tmp_path / "logs"
    shutil.copytree(kafka_real / fixture, d)
    for p in [d, *d.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    internal = sorted(p for p in d.iterdir() if p.name.startswith("__") and p.is_dir())
    assert internal
    before = {p.name: snapshot(p) for p in internal}
    latest = {p.name: comparable(replay(read_partition(p)).latest) for p in internal
              if not p.name.startswith("__cluster_metadata")}

    code, report = run("retain", d, now=FAR_FUTURE)
    assert code == 0, report["errors"]
    for p in internal:
        assert snapshot(p) == before[p.name], f"retention changed {p.name}"

    code, report = run("compact", d, now=FAR_FUTURE)
    assert code == 0, report["errors"]
    for p in internal:
        if p.name.startswith("__cluster_metadata"):
            assert snapshot(p) == before[p.name]
        else:  # compaction may rewrite them; every key keeps its latest record
            assert comparable(replay(read_partition(p)).latest) == latest[p.name], p.name


# --------------------------------------------------------------------------------------------------
# 2. An impossible log-start-offset-checkpoint entry is corrupt input
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [999_999_999, -5])
@pytest.mark.parametrize("command", ["retain", "compact"])
def test_an_impossible_log_start_entry_leaves_the_partition_untouched(tmp_path: Path, spark, capsys, value,
                                                                     command) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[RECENT], [RECENT], [RECENT]])  # nothing has expired
    three_segments(d, "u")  # u-0 has expired segments: it is retained while t-0 is refused
    write_checkpoint(d, "log-start-offset-checkpoint", {("t", 0): value})
    before = snapshot(d)
    code, report = run(command, d, "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d",
                       "--max-delete-fraction", "1")
    assert code == 1
    err = error_of(report, "t-0")
    assert err["kind"] == "CorruptCheckpointError" and err["file"] == str(d / "log-start-offset-checkpoint")
    assert f"the entry for t-0 is {value}" in err["detail"] and "fix:" in err["detail"]
    assert entry(report, "t", 0)["action"] == "error"  # not a silent "skipped"
    assert {k: v for k, v in snapshot(d).items() if "/t-0" in k} == {k: v for k, v in before.items() if "/t-0" in k}
    if command == "retain":
        assert [x["base_offset"] for x in entry(report, "u", 0)["deleted"]] == [0, 1]
    assert "t-0" in capsys.readouterr().err


def test_an_impossible_log_start_entry_on_s3(s3_bucket, s3_env, tmp_path: Path, spark) -> None:
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    local = tmp_path / "logs"
    three_segments(local)
    write_checkpoint(local, "log-start-offset-checkpoint", {("t", 0): 999_999_999})
    upload(storage, local, log_dir)
    state = {f.uri: storage.read(f.uri) for f in storage.list(log_dir, recursive=True)}
    for command in ("retain", "compact"):
        code, report = run(command, log_dir, "--s3-endpoint", endpoint.endpoint_url,
                           "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d")
        assert code == 1 and error_of(report, "t-0")["kind"] == "CorruptCheckpointError"
        assert "999999999" in error_of(report, "t-0")["detail"]
        assert {f.uri: storage.read(f.uri) for f in storage.list(log_dir, recursive=True)} == state


# --------------------------------------------------------------------------------------------------
# 3. An entry bearing a segment's name that is not a regular file makes the partition unreadable
# --------------------------------------------------------------------------------------------------


def _make_irregular(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "dangling symbolic link":
        path.symlink_to(path.parent / "gone" / path.name)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(b"x")
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["dangling symbolic link", "directory", "FIFO (named pipe)"])
def test_a_segment_that_is_not_a_regular_file_leaves_the_partition_untouched(tmp_path: Path, spark, capsys,
                                                                            kind: str) -> None:
    d = tmp_path / "logs"
    three_segments(d)
    three_segments(d, "u")
    bad = d / "t-0" / segment_file_name(1)
    _make_irregular(bad, kind)
    before = snapshot(d)
    for command in ("retain", "compact"):
        code, report = run(command, d, "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d")
        assert code == 1
        err = error_of(report, "t-0")
        assert err["kind"] == "IrregularEntryError" and err["file"] == str(bad)
        assert f"is a {kind}" in err["detail"] and "fix:" in err["detail"]
        assert {k: v for k, v in snapshot(d).items() if "/t-0" in k} == \
               {k: v for k, v in before.items() if "/t-0" in k}
        assert entry(report, "u", 0)["action"] != "error"
    capsys.readouterr()
    assert main(["dump", "--verify", str(d / "t-0")]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: {segment_file_name(1)} is a {kind}" in err and "verify: 1 problem(s)" in err


def test_a_partition_dir_linked_from_outside_the_log_dir_is_refused(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    three_segments(d, "u")
    elsewhere = tmp_path / "other-broker"
    three_segments(elsewhere)
    (d / "t-0").symlink_to(elsewhere / "t-0")
    before = snapshot(elsewhere)
    code, report = run("retain", d, "--set", "*:retention.ms=1d", "--max-delete-fraction", "1")
    assert code == 1
    err = error_of(report, "t-0")
    assert err["kind"] == "IrregularEntryError" and "outside the log dir" in err["detail"]
    assert str(elsewhere / "t-0") in err["detail"] and "fix:" in err["detail"]
    assert snapshot(elsewhere) == before
    assert [x["base_offset"] for x in entry(report, "u", 0)["deleted"]] == [0, 1]


@pytest.mark.parametrize("marker", ["folder marker", "prefix"])
def test_a_segment_that_is_an_s3_directory_leaves_the_partition_untouched(s3_bucket, s3_env,
                                                                         tmp_path: Path, spark, marker) -> None:
    """S3 has no dangling links or FIFOs; what it has is a key named like a segment that is a "directory": a
    zero-byte folder marker ``.../00000000000000000001.log/`` or a prefix with objects below it, in place of
    the segment object. The old listing skipped the marker (and with a prefix, the whole partition) and
    retention went on around the missing segment."""
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    local = tmp_path / "logs"
    three_segments(local)
    upload(storage, local, log_dir)
    seg = f"{log_dir}/t-0/{segment_file_name(1)}"
    storage.delete(seg)
    storage.write_atomic(seg + ("/" if marker == "folder marker" else "/part-0"), b"")
    state = {f.uri: storage.read(f.uri) for f in storage.list(log_dir, recursive=True)}
    for command in ("retain", "compact"):
        code, report = run(command, log_dir, "--s3-endpoint", endpoint.endpoint_url,
                           "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d")
        assert code == 1
        err = error_of(report, "t-0")
        assert err["kind"] == "IrregularEntryError" and err["file"] == seg and "is a directory" in err["detail"]
        assert {f.uri: storage.read(f.uri) for f in storage.list(log_dir, recursive=True)} == state


# --------------------------------------------------------------------------------------------------
# 5. Retention refuses a partition with damage its scan can see
# --------------------------------------------------------------------------------------------------


def _kept_segment_with_index(d: Path) -> Path:
    """t-0: segment 0 expired at NOW; segment 1 recent and big enough for .index entries; segment 2 active."""
    build_partition(d, "t", 0, [[OLD], [RECENT - 5] * 200, [RECENT]])
    seg = d / "t-0" / segment_file_name(1)
    assert (d / "t-0" / segment_file_name(1, ".index")).stat().st_size > 0  # the tail check starts there
    return seg


@pytest.mark.parametrize("damage", ["cut short", "bad length"])
def test_retention_refuses_a_partition_whose_kept_segment_is_damaged(tmp_path: Path, spark, damage: str) -> None:
    d = tmp_path / "logs"
    seg = _kept_segment_with_index(d)
    data = seg.read_bytes()
    batches = read_partition(d / "t-0")
    last = len(data) - len(batches[-2].raw)  # start of the last batch of segment 1
    if damage == "cut short":
        seg.write_bytes(data[:-10])
    else:
        seg.write_bytes(data[:last + 8] + struct.pack(">i", 5) + data[last + 12:])  # below any batch
    before = snapshot(d)
    code, report = run("retain", d, "--set", "*:retention.ms=1d")
    assert code == 1
    err = error_of(report, "t-0")
    assert err["file"] == str(seg) and err["position"] == last
    assert err["kind"] == ("TruncatedBatchError" if damage == "cut short" else "InvalidLengthError")
    assert err["offset"] == batches[-2].base_offset  # the damaged batch's, read from its header
    assert snapshot(d) == before


def test_retention_deletes_only_whole_expired_segments_around_damage_it_cannot_see(tmp_path: Path, spark) -> None:
    """A CRC mismatch inside a kept segment is invisible to retention (it reads batch headers, never record
    bytes): it deletes the expired segment whole and leaves the damaged one byte for byte; compaction, which
    decodes, refuses the partition."""
    d = tmp_path / "logs"
    seg = _kept_segment_with_index(d)
    data = bytearray(seg.read_bytes())
    data[len(read_partition(d / "t-0")[1].raw) + 70] ^= 0xFF  # a record byte of segment 1's second batch
    seg.write_bytes(bytes(data))
    code, report = run("retain", d, "--set", "*:retention.ms=1d")
    assert code == 0 and [x["base_offset"] for x in entry(report, "t", 0)["deleted"]] == [0]
    assert seg.read_bytes() == bytes(data)
    before = snapshot(d)
    code, report = run("compact", d, "--set", "*:cleanup.policy=compact", "--partition", "t-0")
    assert code == 1 and error_of(report, "t-0")["kind"] == "CrcMismatchError" and snapshot(d) == before


@pytest.mark.parametrize("command", ["compact", "retain"])
def test_offsets_going_backwards_inside_a_segment_leave_the_partition_untouched_and_the_others_proceed(
        tmp_path: Path, spark, capsys, command: str) -> None:
    """Batches with valid CRCs whose offsets go back (two copies pasted into one segment): found where the batches
    are read (compaction's decode, retention's header scan), reported like any corrupt input with the file, the
    byte position and the offset; the partition is left byte for byte, the others proceed, exit code 1."""
    d = tmp_path / "logs"
    segment, position, offset = backwards_offsets(d / "t-0", timestamp=OLD)
    three_segments(d, "u")
    before = snapshot(d)
    code, report = run(command, d, "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d",
                       "--max-delete-fraction", "1")
    err = capsys.readouterr().err
    assert code == 1, err
    hit = error_of(report, "t-0")
    assert hit["kind"] == "OffsetOrderError" and "offsets go backwards" in hit["detail"]
    assert (hit["file"], hit["position"], hit["offset"]) == (str(segment), position, offset)
    assert f"{segment}, byte {position}, offset {offset}: offsets go backwards" in err
    assert "clean_records" not in err and "bug" not in err
    after = snapshot(d)
    assert {k: v for k, v in after.items() if k.startswith("logs/t-0")} == \
        {k: v for k, v in before.items() if k.startswith("logs/t-0")}
    # the other partition proceeded: its two expired segments are gone from the live log
    assert f"logs/u-0/{segment_file_name(0)}" in before and f"logs/u-0/{segment_file_name(0)}" not in after


# --------------------------------------------------------------------------------------------------
# 9. A garbage checkpoint file stops the job before anything is done: exit code 2
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fix", [("cleaner-offset-checkpoint", "delete the file"),
                                       ("log-start-offset-checkpoint", "restore the file")])
@pytest.mark.parametrize("command", ["compact", "retain"])
def test_a_garbage_checkpoint_file_is_exit_code_2_and_nothing_is_done(tmp_path: Path, capsys, name, fix,
                                                                      command) -> None:
    d = tmp_path / "logs"
    three_segments(d)
    (d / name).write_text("0\n1\nt zero 5\n")
    before = snapshot(d)
    code = main([command, "--log-dir", str(d), "--now", str(NOW), "--quiet", "--set", "*:retention.ms=1d"])
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"segjobs {command}: error: {d / name}, line 3: ") and "'zero'" in line
    assert "nothing was done" in line and f"fix: {fix}" in line
    assert snapshot(d) == before


# --------------------------------------------------------------------------------------------------
# 10. Wrong index files are rebuilt by compaction, and it says so
# --------------------------------------------------------------------------------------------------


def _indexed_partition(d: Path, topic: str, *, duplicates: bool) -> Path:
    log = LogBuilder(topic, 0, timestamp=NOW - DAY)
    for i in range(12):  # 1 KB values: the segment gets .index entries
        log.batch([rec(f"k{i % 3 if duplicates else i}", "v" * 1000)])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), d / f"{topic}-0")
    index = d / f"{topic}-0" / segment_file_name(0, ".index")
    shift_first_index_entry(index)
    return index


def test_compaction_rebuilds_a_wrong_index_and_says_so(tmp_path: Path, spark, capsys) -> None:
    d = tmp_path / "logs"
    dup_index = _indexed_partition(d, "dup", duplicates=True)
    calm_index = _indexed_partition(d, "calm", duplicates=False)  # nothing to remove: rewritten for the index
    calm_log = (d / "calm-0" / segment_file_name(0)).read_bytes()
    latest = {t: comparable(replay(read_partition(d / f"{t}-0")).latest) for t in ("dup", "calm")}
    code, report = run("compact", d, "--set", "*:cleanup.policy=compact", "--partition", "dup-0",
                       "--partition", "calm-0")
    assert code == 0
    err = capsys.readouterr().err
    for topic, index in (("dup", dup_index), ("calm", calm_index)):
        [problem] = entry(report, topic, 0)["indexes_rebuilt"]
        assert problem.startswith(str(index))
        assert f"{topic}-0: {problem}: rebuilt it" in err
        assert any(w.startswith(f"{topic}-0: {index}") for w in report["warnings"])
        assert comparable(replay(read_partition(d / f"{topic}-0")).latest) == latest[topic]
        assert main(["dump", "--verify", str(d / f"{topic}-0")]) == 0
    assert (d / "calm-0" / segment_file_name(0)).read_bytes() == calm_log  # batches copied byte for byte
    assert "verify: OK" in capsys.readouterr().err
    code, report = run("compact", d, "--set", "*:cleanup.policy=compact", "--partition", "calm-0")
    assert code == 0 and entry(report, "calm", 0)["action"] == "unchanged"  # nothing left to rebuild


def test_a_partition_recovery_cannot_settle_is_left_alone_while_the_others_proceed(tmp_path: Path, spark,
                                                                                     capsys) -> None:
    """An interrupted commit whose intent is unreadable: recovery changes nothing in that partition and names
    it, the job leaves it alone (exit 1), and every other partition is recovered and worked on as usual."""
    from jobs.logdir.commit import partition_work_uri
    from jobs.logdir.lock import work_uri

    d = tmp_path / "logs"
    three_segments(d, "a")
    three_segments(d, "b")
    storage = open_storage(str(d))
    intent = Path(partition_work_uri(storage, work_uri(str(d)), str(d / "a-0"))) / "replace.json"
    intent.parent.mkdir(parents=True)
    intent.write_bytes(b"{not json")
    before = snapshot(d / "a-0")

    code, report = run("retain", d, "--max-delete-fraction", "1")
    assert code == 1
    err = capsys.readouterr().err
    assert "a-0: NOT RECOVERED, left as it is" in err and "unreadable replace intent" in err
    assert entry(report, "a", 0)["action"] == "error"
    assert [x["base_offset"] for x in entry(report, "b", 0)["deleted"]] == [0, 1]  # b's retention still ran
    assert snapshot(d / "a-0") == before and intent.read_bytes() == b"{not json"

    assert main(["recover", "--log-dir", str(d)]) == 1
    assert "a-0: NOT RECOVERED, left as it is" in capsys.readouterr().err
    assert snapshot(d / "a-0") == before


@pytest.mark.parametrize("stray, why", [
    ("Copy of t-0", "holds characters Kafka does not allow in a topic name"),
    ("t-\uff10", "is not written in ASCII digits"),
    ("t-00", "has a leading zero"),
    ("t-+0", "has a sign"),
    ("t-99999999999", "above 2147483647"),
])
def test_a_directory_named_almost_like_a_partition_is_reported_and_left_untouched(tmp_path: Path, spark, capsys,
                                                                                  stray: str, why: str) -> None:
    """A copy of a partition under a name no broker gives (a space in its topic, a full-width digit, a leading
    zero, a number past a Java int) is never read nor written, nor named in a checkpoint file: one error naming it
    (on stderr even with --quiet), exit 1; the real partition and the others are worked on."""
    d = tmp_path / "logs"
    three_segments(d)
    three_segments(d, "u")
    shutil.copytree(d / "t-0", d / stray)
    for command in ("retain", "compact", "inspect"):
        before = snapshot(d / stray)
        capsys.readouterr()
        code, report = run_command(command, d, "--set", "*:cleanup.policy=compact,delete", "--set",
                                   "*:retention.ms=1d", "--max-delete-fraction", "1")
        assert code == 1, command
        err = error_of(report, stray)
        assert err["kind"] == "IrregularEntryError" and err["file"] == str(d / stray)
        assert why in err["detail"] and "fix:" in err["detail"]
        out, err = capsys.readouterr()
        assert f"{stray}: NOT A PARTITION, left untouched" in err
        # the summary on stdout names it too, the one reason for its exit code 1 it has no row for
        assert f"1 directory named like a partition, not one, left untouched (why on stderr and in the report's " \
               f"errors): {stray}\n" in out, out
        assert snapshot(d / stray) == before
        assert [e["partition"] for e in report["errors"]] == [stray]
        if command == "retain":
            assert [x["base_offset"] for x in entry(report, "t", 0)["deleted"]] == [0, 1]
    for name in ("cleaner-offset-checkpoint", "log-start-offset-checkpoint"):
        if (d / name).exists():
            assert "Copy" not in (d / name).read_text()
    # a run scoped to another topic does not report it
    code, report = run_command("inspect", d, "--topic", "u")
    assert code == 0 and not report["errors"]
