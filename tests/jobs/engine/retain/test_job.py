"""The retention job end to end: `segjobs retain` over real segment files written with the builders.

Each behaviour test names its kafka-behaviours.md item. Expected outcomes are derived here from the files
on disk (sizes from ``os.path.getsize``, timestamps chosen by the test), never from segjobs' own output.
Fault injection runs the job's per-partition function in-process (no Spark needed) so that every step can
be crashed in a second; the rest runs the real command on the shared local[2] session.

The store-agnostic helpers (:mod:`tests.support.retention`) are shared with ``test_retain_s3.py``.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.logdir.lock import work_uri
from segment_io.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from segment_io.layout import segment_file_name
from segment_io.storage import open_storage
from segment_io.storage.base import Storage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.retention import (
    DAY,
    NOW,
    OLD,
    RECENT,
    build_partition,
    check_every_crash_point,
    deleted,
    entry,
    live_logs,
    names,
    retain,
    sizes,
    write_checkpoint,
)

# ---------------------------------------------------------------------------------------------------
# A log dir's whole state
# ---------------------------------------------------------------------------------------------------


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its work location, with contents: a complete picture of the state."""
    out = {}
    for base in (root, Path(work_uri(str(root)))):
        if base.exists():
            for p in sorted(base.rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(root.parent))] = p.read_bytes()
    return out


# ---------------------------------------------------------------------------------------------------
# Behaviours 49-55 through the command
# ---------------------------------------------------------------------------------------------------


def test_49_time_retention_deletes_expired_segments_and_follows_the_log_start(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    bases = build_partition(d, "clicks", 0, [[OLD, OLD + 1], [OLD + 2, OLD + 3], [RECENT - 5], [RECENT]],
                            epochs=[(0, 0), (1, 1), (2, 3), (3, 4)])
    pdir = d / "clicks-0"
    before = sizes(pdir, bases)
    code, report = retain(d, "--set", "clicks:retention.ms=1d", "--set", "clicks:file.delete.delay.ms=60000",
                          "--max-delete-fraction", "1")  # half the segments, more than half the bytes
    assert code == 0
    e = entry(report, "clicks", 0)
    assert e["action"] == "delete"
    assert deleted(e) == [(0, "retention.ms"), (2, "retention.ms")]
    assert [d_["bytes"] for d_ in e["deleted"]] == [before[0], before[2]]
    assert e["bytes_removed"] == before[0] + before[2]
    assert e["bytes_after"] == before[4] + before[5]
    assert (e["segments_before"], e["segments_after"]) == (4, 2)
    storage = open_storage(str(d))
    # phase one only: renamed to .deleted, unlinked by a later run (file.delete.delay.ms)
    assert live_logs(storage, str(pdir)) == [4, 5]
    assert {segment_file_name(b, s + ".deleted") for b in (0, 2) for s in (".log", ".index", ".timeindex")} \
        <= names(storage, str(pdir))
    assert e["purge_pending"] == {"0": NOW + 60_000, "2": NOW + 60_000}
    assert read_offset_checkpoint(storage, str(d / "log-start-offset-checkpoint")) == {("clicks", 0): 4}
    # every entry starts at or below the new start 4; the last one, epoch 3, leads from offset 4
    assert read_leader_epoch_checkpoint(storage, str(pdir / "leader-epoch-checkpoint")) == [(3, 4)]
    snaps = sorted(int(n[:20]) for n in names(storage, str(pdir)) if n.endswith(".snapshot"))
    assert snaps == [4, 5, 6]  # below the new start they go; the one at the new start stays


def test_leader_epoch_trim_is_kafkas_truncate_from_start(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [RECENT], [RECENT]], epochs=[(0, 0), (1, 1), (5, 3)])
    code, _ = retain(d, "--set", "t:retention.ms=1d")
    assert code == 0
    # new start 2: (0,0) and (1,1) start at or below it; epoch 1 was leading at 2, so it restarts there
    assert read_leader_epoch_checkpoint(open_storage(str(d)), str(d / "t-0" / "leader-epoch-checkpoint")) \
        == [(1, 2), (5, 3)]


def test_49_largest_timestamp_not_last_decides_and_headers_replace_a_missing_timeindex(tmp_path: Path,
                                                                                      spark) -> None:
    d = tmp_path / "logs"
    # segment 0's last record is old but an earlier one is recent: its largest timestamp keeps it
    build_partition(d, "a", 0, [[RECENT, OLD], [OLD], [RECENT]])
    build_partition(d, "b", 0, [[RECENT, OLD], [OLD], [RECENT]], timeindex=False)
    build_partition(d, "c", 0, [[OLD, OLD + 5], [OLD], [RECENT]], timeindex=False)
    code, report = retain(d, "--set", "*:retention.ms=1d", "--max-delete-fraction", "1")
    assert code == 0
    assert deleted(entry(report, "a", 0)) == []
    assert deleted(entry(report, "b", 0)) == []
    assert deleted(entry(report, "c", 0)) == [(0, "retention.ms"), (2, "retention.ms")]
    assert entry(report, "c", 0)["deleted"][0]["largest_timestamp"] == OLD + 5


def test_49_a_timeindex_failing_its_sanity_check_is_replaced_by_the_batch_headers(tmp_path: Path, spark) -> None:
    import struct

    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[RECENT, RECENT + 1], [RECENT], [RECENT]])
    # an index claiming an old largest timestamp, but with decreasing timestamps: not to be trusted
    (d / "t-0" / segment_file_name(0, ".timeindex")).write_bytes(struct.pack(">qiqi", OLD + 9, 0, OLD, 1))
    code, report = retain(d, "--set", "t:retention.ms=1d")
    assert code == 0 and deleted(entry(report, "t", 0)) == []


def test_50_only_an_oldest_first_prefix_goes(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [RECENT], [OLD], [OLD], [RECENT]])
    code, report = retain(d, "--set", "t:retention.ms=1d")
    assert code == 0
    assert deleted(entry(report, "t", 0)) == [(0, "retention.ms")]
    assert live_logs(open_storage(str(d)), str(d / "t-0")) == [1, 2, 3, 4]


def test_51_a_future_timestamp_blocks_deletion_and_is_reported(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[NOW + DAY], [OLD], [OLD], [RECENT]])
    before = tree(d)
    code, report = retain(d, "--set", "t:retention.ms=1d")
    assert code == 0
    e = entry(report, "t", 0)
    assert deleted(e) == [] and e["action"] == "none"
    assert any("after now" in w and "holds back 2" in w for w in e["warnings"])
    assert any(w.startswith("t-0: ") for w in report["warnings"])
    after = tree(d)
    # (the work dir records the retention settings the run applied: what later runs' safety limit compares with)
    assert {k: v for k, v in after.items() if ".lock" not in k and "retention-settings" not in k} == before


def test_52_size_retention_deletes_while_the_excess_covers_a_whole_segment(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    for p in range(3):
        build_partition(d, "s", p, [[RECENT] * 5] * 4)
    sz = sizes(d / "s-0", [0, 5, 10, 15])
    assert len(set(sz.values())) == 1
    one = sz[0]
    total = 4 * one
    # excess exactly 2 segments -> 2 go; one byte less -> only 1; under the limit -> none
    code, report = retain(d, "--set", f"s:retention.bytes={2 * one}", "--partition", "s-0")
    assert code == 0 and deleted(entry(report, "s", 0)) == [(0, "retention.bytes"), (5, "retention.bytes")]
    code, report = retain(d, "--set", f"s:retention.bytes={2 * one + 1}", "--partition", "s-1")
    assert code == 0 and deleted(entry(report, "s", 1)) == [(0, "retention.bytes")]
    code, report = retain(d, "--set", f"s:retention.bytes={total + 1}", "--partition", "s-2")
    assert code == 0 and deleted(entry(report, "s", 2)) == []
    assert [e["partition"] for e in report["partitions"]] == [2]  # --partition scopes the run


def test_53_log_start_offset_deletes_wholly_below_even_under_compact_and_never_lowers(tmp_path: Path,
                                                                                      spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "c", 0, [[RECENT] * 5] * 4)  # bases 0, 5, 10, 15
    write_checkpoint(d, "log-start-offset-checkpoint", {("c", 0): 12, ("other", 3): 77})
    code, report = retain(d, "--set", "c:cleanup.policy=compact")
    # an entry for a partition the dir does not hold is ignored, as Kafka does, with a warning, and kept
    assert code == 0
    [warning] = report["warnings"]
    assert warning.startswith(str(d / "log-start-offset-checkpoint")) and "other-3 is 77" in warning
    e = entry(report, "c", 0)
    assert deleted(e) == [(0, "log-start-offset"), (5, "log-start-offset")]  # 10 straddles 12: stays
    assert e["log_start_offset"] == 12
    storage = open_storage(str(d))
    assert read_offset_checkpoint(storage, str(d / "log-start-offset-checkpoint")) == {("c", 0): 12, ("other", 3): 77}
    code, report = retain(d, "--set", "c:cleanup.policy=compact")
    assert code == 0 and deleted(entry(report, "c", 0)) == []  # a re-run deletes nothing


def test_54_policies(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    for topic in ("compacted", "both", "deleted"):
        build_partition(d, topic, 0, [[OLD], [OLD], [RECENT]])
    code, report = retain(d, "--set", "*:retention.ms=1d", "--set", "compacted:cleanup.policy=compact",
                          "--set", "both:cleanup.policy=compact,delete", "--max-delete-fraction", "1")
    assert code == 0
    assert deleted(entry(report, "compacted", 0)) == []
    assert "only segments below the log start offset" in entry(report, "compacted", 0)["reason"]
    assert deleted(entry(report, "both", 0)) == [(0, "retention.ms"), (1, "retention.ms")]
    assert deleted(entry(report, "deleted", 0)) == [(0, "retention.ms"), (1, "retention.ms")]


def test_55_everything_expired_keeps_the_active_segment_and_an_empty_last_segment(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [OLD]])
    build_partition(d, "e", 0, [[OLD], [OLD]])
    (d / "e-0" / segment_file_name(2)).write_bytes(b"")  # an empty active segment at the log end
    code, report = retain(d, "--set", "*:retention.ms=0", "--max-delete-fraction", "1")
    assert code == 0
    storage = open_storage(str(d))
    t = entry(report, "t", 0)
    assert deleted(t) == [(0, "retention.ms"), (1, "retention.ms")]
    assert t["kafka_would_roll"] and any("Kafka would roll" in w for w in t["warnings"])
    assert live_logs(storage, str(d / "t-0")) == [2]
    assert deleted(entry(report, "e", 0)) == [(0, "retention.ms"), (1, "retention.ms")]
    assert live_logs(storage, str(d / "e-0")) == [2]
    assert not entry(report, "e", 0)["kafka_would_roll"]


# ---------------------------------------------------------------------------------------------------
# Dry run, delay across runs, bad input, reports
# ---------------------------------------------------------------------------------------------------


def test_dry_run_writes_nothing_and_reports_exactly_what_the_real_run_does(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [RECENT], [RECENT]], epochs=[(0, 0), (1, 2)])
    build_partition(d, "u", 1, [[OLD], [RECENT]], timeindex=False)
    before = tree(d)
    code, dry = retain(d, "--set", "*:retention.ms=1d", "--dry-run")
    assert code == 0 and tree(d) == before  # not even a lock file or a work dir
    assert dry["dry_run"] and all(not e["applied"] for e in dry["partitions"])
    code, real = retain(d, "--set", "*:retention.ms=1d")
    assert code == 0
    for key in ("topic", "partition", "action", "deleted", "bytes_removed", "segments_after", "log_start_offset"):
        assert [e[key] for e in dry["partitions"]] == [e[key] for e in real["partitions"]]
    assert dry["totals"]["segments_deleted"] == 3 == real["totals"]["segments_deleted"]


def test_segments_deleted_from_a_topic_nothing_configures_are_a_warning_naming_it(tmp_path: Path, spark,
                                                                                 capsys) -> None:
    """A topic no --config table, [defaults] or --set names gets Kafka's delete policy: what a forgotten --config
    looks like. Its deletions go ahead (Kafka would do the same) with a warning, shown even when quiet, that names
    it and says how to give its configs or acknowledge it."""
    d = tmp_path / "logs"
    build_partition(d, "orders", 0, [[OLD], [RECENT]])
    build_partition(d, "users", 0, [[OLD], [OLD], [RECENT]])
    build_partition(d, "users", 1, [[OLD], [RECENT]])
    build_partition(d, "quiet", 0, [[RECENT]])  # unconfigured but losing nothing: no warning about it
    configured = ("--set", "orders:cleanup.policy=delete", "--set", "orders:retention.ms=3d",
                  "--max-delete-fraction", "1")
    for dry in (True, False):
        capsys.readouterr()
        code, report = retain(d, *configured, *(["--dry-run"] if dry else []))
        err = capsys.readouterr().err
        assert code == 0
        assert deleted(entry(report, "users", 0)) == [(0, "retention.ms"), (1, "retention.ms")]
        [warning] = [w for w in report["warnings"] if "no --config table" in w]
        verb = "would delete" if dry else "deletes"
        assert warning.startswith(f"retention {verb} 3 segment(s) of 1 topic(s) that no --config table, [defaults] "
                                  "or --set configures, by Kafka's defaults (cleanup.policy=delete, retention.ms=7d)"
                                  ": users (3 segment(s))."), warning
        assert "--set 'users:cleanup.policy=delete'" in warning and "orders" not in warning
        assert f"warning: {warning}" in err  # on stderr although the run is quiet

    build_partition(d, "users", 2, [[OLD], [RECENT]])
    capsys.readouterr()
    code, report = retain(d, *configured, "--set", "users:cleanup.policy=delete")  # named: no warning
    assert code == 0 and deleted(entry(report, "users", 2)) == [(0, "retention.ms")]
    assert not [w for w in report["warnings"] if "no --config table" in w]
    assert "no --config table" not in capsys.readouterr().err


def test_deleted_files_are_unlinked_once_file_delete_delay_has_passed_across_runs(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [RECENT]])
    opts = ("--set", "t:retention.ms=1d", "--set", "t:file.delete.delay.ms=60000")
    storage = open_storage(str(d))
    assert retain(d, *opts)[0] == 0
    deleted_names = {n for n in names(storage, str(d / "t-0")) if n.endswith(".deleted")}
    assert deleted_names == {segment_file_name(0, s + ".deleted") for s in (".log", ".index", ".timeindex")}
    code, report = retain(d, *opts, now=NOW + 59_999)
    assert code == 0 and deleted_names <= names(storage, str(d / "t-0"))
    assert entry(report, "t", 0)["purge_pending"] == {"0": NOW + 60_000}
    code, report = retain(d, *opts, now=NOW + 60_000)
    assert code == 0
    assert not {n for n in names(storage, str(d / "t-0")) if n.endswith(".deleted")}
    assert sorted(entry(report, "t", 0)["purged"]) == sorted(deleted_names)


def test_a_corrupt_partition_is_reported_and_left_untouched_while_the_rest_proceed(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    build_partition(d, "good", 0, [[OLD], [RECENT]])
    build_partition(d, "bad", 0, [[OLD], [OLD], [RECENT]], timeindex=False)
    seg = d / "bad-0" / segment_file_name(1)
    data = bytearray(seg.read_bytes())
    data[16] = 7  # magic byte of the first batch
    seg.write_bytes(bytes(data))
    bad_before = {k: v for k, v in tree(d).items() if "/bad-0/" in k}
    code, report = retain(d, "--set", "*:retention.ms=1d")
    assert code == 1
    assert deleted(entry(report, "good", 0)) == [(0, "retention.ms")]
    bad = entry(report, "bad", 0)
    assert bad["action"] == "error" and bad["error"]["file"].endswith(segment_file_name(1))
    assert bad["error"]["position"] == 0 and bad["error"]["offset"] == 1
    assert report["errors"] and report["errors"][0]["partition"] == "bad-0"
    assert {k: v for k, v in tree(d).items() if "/bad-0/" in k} == bad_before


def test_a_malformed_setting_is_rejected_before_spark_starts(tmp_path: Path, capsys) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [RECENT]])
    before = tree(d)
    assert main(["retain", "--log-dir", str(d), "--set", "t:retention.ms=soon", "--quiet"]) == 2
    assert "retention.ms" in capsys.readouterr().err
    assert main(["retain", "--log-dir", str(d), "--now", "yesterday", "--quiet"]) == 2
    assert tree(d) == before


def test_console_shows_progress_and_a_summary_table(tmp_path: Path, spark, capsys) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [RECENT]])
    build_partition(d, "t", 1, [[RECENT], [RECENT]])
    code, _ = retain(d, "--set", "t:retention.ms=1d", quiet=False)
    assert code == 0
    captured = capsys.readouterr()
    err, out = captured.err, captured.out
    assert "[retain" in err and "t-0 deleted 2 segment(s)" in err  # progress: stderr
    table = out[out.index("partition  policy"):].split("\n\n")[0].splitlines()  # the summary: stdout
    rows = [line.split() for line in table[2:]]
    assert [r[0] for r in rows] == ["t-0", "t-1"]  # every partition, by topic and partition number
    assert rows[0][3] == "3->1" and "retention.ms" in rows[0]
    assert rows[1][2] == "none" and table[3].endswith("no segment past retention")  # why nothing happened
    assert "2 partition(s); deleted 2 segment(s)" in out


def test_quiet_silences_progress_but_not_the_summary(tmp_path: Path, spark, capsys) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [RECENT]])
    code, _ = retain(d, "--set", "t:retention.ms=1d", quiet=True)
    assert code == 0
    captured = capsys.readouterr()
    assert "[retain" not in captured.err
    assert "1 partition(s); deleted 1 segment(s)" in captured.out


# ---------------------------------------------------------------------------------------------------
# Real broker-written fixtures
# ---------------------------------------------------------------------------------------------------


def _copy_writable(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return dst


def test_real_fixture_compact_delete_and_compact_only(kafka_real: Path, tmp_path: Path, spark) -> None:
    src = kafka_real / "donaldy-kafka2.7-compacted-offsets" / "kafka-logs"
    d = _copy_writable(src, tmp_path / "logs")
    before = tree(d)
    # compact only: the broker's (empty) log-start-offset-checkpoint condemns nothing, time does not apply
    code, report = retain(d, "--set", "*:cleanup.policy=compact", "--set", "*:retention.ms=1d")
    assert code == 0 and report["totals"]["segments_deleted"] == 0
    # (besides the lock, only the record of the retention settings applied: see test_51)
    assert {k: v for k, v in tree(d).items() if not k.endswith(".lock") and "retention-settings" not in k} == before
    # Kafka creates __consumer_offsets as a compact topic: only a setting naming it exactly changes that
    code, report = retain(d, "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d",
                          now=1_800_000_000_000)
    assert code == 0 and report["totals"]["segments_deleted"] == 0
    code, report = retain(d, "--set", "*:cleanup.policy=compact,delete", "--set", "*:retention.ms=1d",
                          "--set", "__consumer_offsets:cleanup.policy=compact,delete", now=1_800_000_000_000)
    assert code == 0
    storage = open_storage(str(d))
    for p, second in ((17, 1), (28, 2), (39, 18)):  # the partitions with two segments lose the first
        e = entry(report, "__consumer_offsets", p)
        assert deleted(e) == [(0, "retention.ms")]
        assert e["bytes_removed"] == os.path.getsize(src / f"__consumer_offsets-{p}" / segment_file_name(0))
        pdir = str(d / f"__consumer_offsets-{p}")
        assert live_logs(storage, pdir) == [second]
        assert read_leader_epoch_checkpoint(storage, pdir + "/leader-epoch-checkpoint") == [(0, second)]
        assert segment_file_name(second, ".snapshot") in names(storage, pdir)
    for p in (0, 8, 33):
        assert deleted(entry(report, "__consumer_offsets", p)) == []  # a single segment always stays
    assert deleted(entry(report, "myTopic", 0)) == []
    assert read_offset_checkpoint(storage, str(d / "log-start-offset-checkpoint")) == {
        ("__consumer_offsets", 17): 1, ("__consumer_offsets", 28): 2, ("__consumer_offsets", 39): 18}


def test_real_fixture_time_retention_uses_the_brokers_timeindex(kafka_real: Path, tmp_path: Path, spark) -> None:
    import struct

    src = kafka_real / "ronem123-kraft3.9-multiseg" / "kafka-logs"
    d = _copy_writable(src, tmp_path / "logs")
    timeindex = src / "__consumer_offsets-31" / segment_file_name(0, ".timeindex")
    ts, _ = struct.unpack(">qi", timeindex.read_bytes()[-12:])
    opts = ("--set", "__consumer_offsets:cleanup.policy=delete", "--set", f"*:retention.ms={DAY}",
            "--partition", "__consumer_offsets-31", "--partition", "__cluster_metadata-0")
    code, report = retain(d, *opts, now=ts + DAY)  # age == retention.ms: not past it
    assert code == 0 and deleted(entry(report, "__consumer_offsets", 31)) == []
    code, report = retain(d, *opts, now=ts + DAY + 1)
    assert code == 0 and deleted(entry(report, "__consumer_offsets", 31)) == [(0, "retention.ms")]
    storage = open_storage(str(d))
    assert read_leader_epoch_checkpoint(storage, str(d / "__consumer_offsets-31" / "leader-epoch-checkpoint")) \
        == [(2, 3), (10, 4)]
    meta = entry(report, "__cluster_metadata", 0)
    assert meta["action"] == "none" and "KRaft" in meta["reason"]
    assert live_logs(storage, str(d / "__cluster_metadata-0")) == [1725413]


# ---------------------------------------------------------------------------------------------------
# Fault injection at every step, then recovery and a re-run: same end state as an uninterrupted run
# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_crash_at_every_step_then_recovery_and_a_rerun_ends_as_an_uninterrupted_run(tmp_path: Path) -> None:
    def local(name: str) -> tuple[Storage, str, None]:
        root = tmp_path / name / "logs"
        root.mkdir(parents=True)
        return open_storage(str(root)), str(root), None

    check_every_crash_point(local, tmp_path)


# ---------------------------------------------------------------------------------------------------
# The GDPR flow (docs/guide/retain.md, "The GDPR flow"): tombstone, compaction, delete horizon, purge
# ---------------------------------------------------------------------------------------------------


def _files_containing(pdir: Path, needle: bytes) -> list[str]:
    return sorted(p.name for p in pdir.iterdir() if p.is_file() and needle in p.read_bytes())


def _tombstone_horizons(pdir: Path) -> list[int]:
    """Delete horizons stamped in the batch headers of the live segments."""
    from segment_io.format import scan_batches

    out = []
    for log in sorted(pdir.glob("*.log")):
        h = scan_batches(log.read_bytes())
        out += [int(t) for t, flag in zip(h.base_timestamp, h.has_delete_horizon) if flag]
    return out


def test_gdpr_flow(tmp_path: Path, spark) -> None:
    from tests.support.builders import tombstone

    d = tmp_path / "logs"
    pdir = d / "users-0"
    t = NOW
    log = LogBuilder(topic="users", partition=0)
    log.batch([rec("alice", "alice-secret-1", timestamp=t - 40 * DAY), rec("bob", "bob-1", timestamp=t - 40 * DAY)])
    log.roll().batch([rec("alice", "alice-secret-2", timestamp=t - 2 * DAY), rec("carol", "c", timestamp=t - 2 * DAY)])
    log.roll().batch([tombstone("alice", timestamp=t)])  # step 1: the tombstone, at T
    log.roll().batch([rec("dave", "d", timestamp=t + 3_600_000)])  # the active segment: the tombstone's is rolled
    write_log(log.table(), pdir)
    opts = ("--set", "users:cleanup.policy=compact,delete", "--set", "users:retention.ms=30d",
            "--set", "users:delete.retention.ms=1d", "--set", "users:file.delete.delay.ms=60s")

    def compact(now: int) -> None:
        assert main(["compact", "--log-dir", str(d), "--partition", "users-0", "--now", str(now), "--quiet",
                     *opts]) == 0

    t1 = t + 2 * 3_600_000
    # step 2: retention at T1 condemns the segment whose newest record is 40 days old; its bytes stay in .deleted
    code, report = retain(d, *opts, now=t1)
    assert code == 0 and deleted(entry(report, "users", 0)) == [(0, "retention.ms")]
    assert _files_containing(pdir, b"alice-secret-1") == [segment_file_name(0, ".log.deleted")]
    # step 3: compaction at T1 removes alice's older value; the tombstone stays, horizon T1 + delete.retention.ms
    compact(t1)
    horizon = t1 + DAY
    assert _files_containing(pdir, b"alice-secret-2") == []
    assert _tombstone_horizons(pdir) == [horizon]
    assert _files_containing(pdir, b"alice-secret-1") == [segment_file_name(0, ".log.deleted")]  # delay not over
    # step 4: a clean before the horizon keeps the tombstone (and, 1 day after T1, purges the .deleted files)
    compact(horizon - 1)
    assert _tombstone_horizons(pdir) == [horizon] and _files_containing(pdir, b"alice") != []
    assert _files_containing(pdir, b"alice-secret") == []
    assert not [p for p in pdir.iterdir() if p.name.endswith(".deleted")]
    # ... and one at the horizon drops it: no file of the partition holds the key any more
    compact(horizon)
    assert _files_containing(pdir, b"alice") == []
    assert _files_containing(pdir, b"bob-1") == []  # bob's value went with the expired segment
    assert _files_containing(pdir, b"dave") != [] and _files_containing(pdir, b"carol") != []
