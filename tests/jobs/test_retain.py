"""The retention job end to end: `segjobs retain` over real segment files written with the builders.

Each behaviour test names its kafka-behaviours.md item. Expected outcomes are derived here from the files
on disk (sizes from ``os.path.getsize``, timestamps chosen by the test), never from segjobs' own output.
Fault injection runs the job's per-partition function in-process (no Spark needed) so that every step can
be crashed in a second; the rest runs the real command on the shared local[2] session.

The store-agnostic helpers at the top are shared with ``test_retain_s3.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Callable

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.retention import COMMIT_THREADS
from jobs.engine.seams import FaultHook
from jobs.logdir.lock import work_uri
from jobs.logdir.retention import (
    STEP_DELETE_SNAPSHOT,
    STEP_PURGE,
    STEP_TRIM_LEADER_EPOCHS,
    STEP_WRITE_LOG_START,
)
from jobs.rules.config import ConfigSet
from segment_io.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from segment_io.layout import segment_file_name
from segment_io.storage import StorageOptions, open_storage
from segment_io.storage.base import Storage
from tests.support.builders import LogBuilder, rec, timestamped_segments, write_log

DAY = 86_400_000
NOW = 1_700_000_000_000
OLD = NOW - 10 * DAY  # comfortably past a 1-day retention
RECENT = NOW - 1_000


# ---------------------------------------------------------------------------------------------------
# Building log dirs (store-agnostic: built locally, uploaded by the S3 tests)
# ---------------------------------------------------------------------------------------------------


def build_partition(log_dir: Path, topic: str, partition: int, segments: list[list[int]], *,
                    timeindex: bool = True, epochs: list[tuple[int, int]] | None = None,
                    snapshots: bool = True) -> list[int]:
    """Write one partition whose segment ``i`` holds one single-record batch per timestamp in
    ``segments[i]`` (equal-sized records, so equal-sized segments for equal counts). Returns the base
    offsets. With ``snapshots`` an (empty) producer snapshot sits at every segment base and at the log
    end, as a broker leaves them; ``epochs`` becomes the leader-epoch-checkpoint."""
    table, bases, log_end = timestamped_segments(topic, partition, segments)
    pdir = log_dir / f"{topic}-{partition}"
    write_log(table, pdir)
    if not timeindex:
        for f in pdir.glob("*.timeindex"):
            f.unlink()
    if snapshots:
        for off in [*bases, log_end]:
            (pdir / segment_file_name(off, ".snapshot")).write_bytes(b"")
    if epochs is not None:
        text = "0\n" + f"{len(epochs)}\n" + "".join(f"{e} {s}\n" for e, s in epochs)
        (pdir / "leader-epoch-checkpoint").write_text(text)
    return bases


def write_checkpoint(log_dir: Path, name: str, entries: dict[tuple[str, int], int]) -> None:
    text = "0\n" + f"{len(entries)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in entries.items())
    (log_dir / name).write_text(text)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its work location, with contents: a complete picture of the state."""
    out = {}
    for base in (root, Path(work_uri(str(root)))):
        if base.exists():
            for p in sorted(base.rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(root.parent))] = p.read_bytes()
    return out


def names(storage: Storage, partition_uri: str) -> set[str]:
    return {f.name for f in storage.list(partition_uri)}


def live_logs(storage: Storage, partition_uri: str) -> list[int]:
    return sorted(int(n[:20]) for n in names(storage, partition_uri) if n.endswith(".log"))


def sizes(pdir: Path, bases: list[int]) -> dict[int, int]:
    return {b: os.path.getsize(pdir / segment_file_name(b)) for b in bases}


def retain(log_dir: str | Path, *options: str, now: int = NOW, quiet: bool = True) -> tuple[int, dict | None]:
    """Run `segjobs retain` and return (exit code, the JSON report)."""
    return run_command("retain", log_dir, *options, now=now, quiet=quiet)


def run_command(command: str, log_dir: str | Path, *options: str, now: int = NOW,
                quiet: bool = True) -> tuple[int, dict | None]:
    """Run `segjobs <command>` (a job that writes a report) in-process; return (exit code, the JSON report)."""
    report = Path(f"/tmp/{command}-report-{os.getpid()}-{abs(hash((str(log_dir), options, now)))}.json")
    report.unlink(missing_ok=True)
    argv = [command, "--log-dir", str(log_dir), "--now", str(now), "--report", str(report), *options]
    code = main(argv + (["--quiet"] if quiet else []))
    doc = json.loads(report.read_text()) if report.exists() else None
    report.unlink(missing_ok=True)
    return code, doc


def entry(report: dict, topic: str, partition: int) -> dict:
    (hit,) = [e for e in report["partitions"] if e["topic"] == topic and e["partition"] == partition]
    return hit


def deleted(e: dict) -> list[tuple[int, str]]:
    return [(d["base_offset"], d["rule"]) for d in e["deleted"]]


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


class Crash(BaseException):
    """Raised by the fault hook: the process dies before the step runs (a BaseException, as nothing in segjobs
    catches a process's death; an Exception would stop the run with its report instead)."""


FAULT_CONFIG = ConfigSet().with_overrides(["*:retention.ms=1d", "*:file.delete.delay.ms=0"])
#: A store for the crash tests: (storage, log dir URI, the StorageOptions the job needs to reach it).
StoreFactory = Callable[[str], tuple[Storage, str, "StorageOptions | None"]]


def build_fault_dir(storage: Storage, log_dir: str, scratch: Path) -> None:
    """Two partitions with deletions (one of them with a leader-epoch file and snapshots), one without."""
    local = scratch / "src"
    build_partition(local, "t", 0, [[OLD], [OLD], [RECENT]], epochs=[(0, 0), (1, 1), (2, 2)])
    build_partition(local, "t", 1, [[OLD], [RECENT]], snapshots=False)
    build_partition(local, "t", 2, [[RECENT], [RECENT]])
    write_checkpoint(local, "log-start-offset-checkpoint", {("t", 2): 0})
    for f in sorted(local.rglob("*")):
        if f.is_file():
            uri = storage.join(log_dir, *f.relative_to(local).parts)
            storage.makedirs(uri.rsplit("/", 1)[0])
            storage.write_atomic(uri, f.read_bytes())


def run_retain_job(log_dir: str, storage_options, fault: FaultHook | None = None) -> api.RetainResult:
    """The retain job through the API, its tasks in this process (no Spark): recovery, list, scan, plan, then
    the real multi-threaded commit (COMMIT_THREADS partitions at once), with ``fault`` as its fault seam."""
    options = api.RetainOptions(config=FAULT_CONFIG, storage=storage_options, progress=lambda line: None)
    return api.retain(log_dir, options, now=NOW, seams=api.Seams(fault=fault, runner=api.InProcessTasks()))


def state_of(storage: Storage, log_dir: str) -> dict[str, bytes]:
    """Every object of the log dir (and nothing of the work dir): what a broker would load."""
    return {f.uri[len(log_dir):]: storage.read(f.uri) for f in storage.list(log_dir, recursive=True)
            if not f.name.endswith(".lock")}


def fault_steps(store: StoreFactory, tmp_path: Path) -> tuple[dict[str, list[str]], dict[str, bytes]]:
    """An uninterrupted run: the steps of each partition (``""``: the log dir's), and the end state. The two
    partitions with deletions wait for each other at their first step: the run fails unless they commit on
    two threads at once."""
    storage, log_dir, options = store("reference")
    build_fault_dir(storage, log_dir, tmp_path / "reference")
    steps: dict[str, list[str]] = {}
    guard = threading.Lock()
    both = threading.Barrier(2, timeout=30)

    def record(partition: str, step: str) -> None:
        with guard:
            steps.setdefault(partition, []).append(step)
        if step == "write-intent" and partition in ("t-0", "t-1"):
            both.wait()  # BrokenBarrierError (the run fails) if the other partition is not committing meanwhile

    result = run_retain_job(log_dir, options, record)
    assert result.exit_code == 0, result.errors
    assert COMMIT_THREADS > 1
    return steps, state_of(storage, log_dir)


def check_every_crash_point(store: StoreFactory, tmp_path: Path,
                            crash: tuple[str, ...] = ("", "t-0", "t-1")) -> None:
    """Retention's multi-threaded commit, crashed at every step of one partition (of those in ``crash``; ``""``
    is the log dir's own step) while the others commit, then recovery and a normal run: the log dir ends
    exactly as after an uninterrupted run."""
    steps, expected = fault_steps(store, tmp_path)
    # the protocol's steps, in order: the log start checkpoint first, for the whole dir (as Kafka raises the log
    # start before removing segments), then per partition the delete (intent, renames, ledger) and its dependants
    assert steps[""] == [STEP_WRITE_LOG_START]
    assert sorted(steps) == ["", "t-0", "t-1"]  # t-2 loses nothing: no destructive step
    for partition in ("t-0", "t-1"):
        assert steps[partition][0] == "write-intent" and steps[partition][-1] == STEP_PURGE
        assert any(s.startswith("live-to-deleted:") for s in steps[partition])
        assert "record-deleted" in steps[partition] and "remove-intent" in steps[partition]
    assert STEP_TRIM_LEADER_EPOCHS in steps["t-0"] and any(s.startswith(STEP_DELETE_SNAPSHOT) for s in steps["t-0"])
    # what the uninterrupted run must have produced, stated independently
    assert sorted(k for k in expected if k.endswith(".log")) == \
        ["/t-0/" + segment_file_name(2), "/t-1/" + segment_file_name(1), "/t-2/" + segment_file_name(0),
         "/t-2/" + segment_file_name(1)]
    assert not any(k.endswith(".deleted") for k in expected)
    assert expected["/log-start-offset-checkpoint"] == b"0\n3\nt 0 2\nt 1 1\nt 2 0\n"
    assert expected["/t-0/leader-epoch-checkpoint"] == b"0\n1\n2 2\n"
    points = [(p, i) for p in sorted(steps) if p in crash for i in range(len(steps[p]))]
    for n, (partition, i) in enumerate(points):
        storage, log_dir, options = store(f"crash{n}")
        build_fault_dir(storage, log_dir, tmp_path / f"crash{n}")
        seen: list[str] = []

        def crash_at(p: str, step: str) -> None:
            if p == partition:  # only this partition's thread calls with p == partition: no lock needed
                seen.append(step)
                if len(seen) == i + 1:
                    raise Crash(f"{p}: {step}")

        with pytest.raises(Crash):
            run_retain_job(log_dir, options, crash_at)
        assert seen == steps[partition][:i + 1], "the steps of a partition keep their order"
        assert run_retain_job(log_dir, options).exit_code == 0  # recovery first, then a normal run
        assert state_of(storage, log_dir) == expected, f"crash of {partition} before step {i} ({steps[partition][i]})"


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
