"""The compaction job end to end, as users run it: ``segjobs compact`` through ``jobs.commands.cli.main`` on Spark.

One log dir holds a partition per behaviour (built with ``LogBuilder`` and ``generate_log_dir``); a fixed
sequence of runs goes over it, and each test checks one behaviour across the snapshots the runs left:

  R0  --dry-run at T1                          nothing written; predicts R1
  R1  at T1                                    the first clean (horizons stamped at T1 + delete.retention.ms)
  R1b at T1 again                              idempotence: no file changes at all
  R2  --partition tomb-0/txn-0 at T2 < horizon forced, but tombstones must stay
  R3  --partition tomb-0/txn-0/calm-0 at T3    past the horizon: tombstones and settled markers go

Spark runs are the expensive part (about a second each), so there are few of them and the tests share
them. The kafka-python replay (``tests.support.replay``) is the oracle: after every run every partition
must replay to the same key -> (offset, timestamp, value, headers) map as before the first run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.rules.map_capacity import buffer_bytes_for_keys
from segment_io.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.replay import OracleBatch, comparable, read_partition, replay

DAY = 86_400_000
HOUR = 3_600_000
T0 = 1_700_000_000_000  #: when most data was written
T1 = T0 + 10 * DAY  #: first clean
RETENTION = DAY  #: delete.retention.ms
T2 = T1 + HOUR  #: before the horizon T1 + RETENTION
T3 = T1 + 2 * DAY  #: after it

CONFIG = f"""
[defaults]
"cleanup.policy" = "compact"
"delete.retention.ms" = {RETENTION}

[topics.young]
"min.compaction.lag.ms" = "30d"

[topics.lag]
"min.cleanable.dirty.ratio" = 0.9
"max.compaction.lag.ms" = "1d"

[topics.calm]
"min.cleanable.dirty.ratio" = 0.9
"""


# --------------------------------------------------------------------------------------------------
# Building the log dir
# --------------------------------------------------------------------------------------------------


def _tomb(log: LogBuilder) -> None:
    log.batch([rec("a", "1"), rec("b", "1"), rec("c", "1")])  # 0-2
    log.batch([tombstone("a"), tombstone("b")])  # 3-4
    log.roll().batch([rec("z", "active")])  # 5


def _txn(log: LogBuilder) -> None:
    log.txn_batch(7, 0, [rec("k1", "a")])  # 0
    log.commit(7, 0)  # 1
    log.txn_batch(8, 0, [rec("k2", "aborted")])  # 2
    log.abort(8, 0)  # 3
    log.batch([rec("k3", "c")])  # 4
    log.txn_batch(7, 0, [rec("k1", "c2")], base_sequence=1)  # 5
    log.commit(7, 0)  # 6
    log.roll().batch([rec("z", "active")])  # 7


def _prod(log: LogBuilder) -> None:
    log.clock = T1 - HOUR  # the producer is active at T1 (producer.id.expiration.ms is one day)
    log.batch([rec("p1", "v1")], pid=9, epoch=3, base_sequence=0)  # 0: superseded, kept as an empty batch
    log.batch([rec("p1", "v2")])  # 1
    log.batch([rec("p2", "x")])  # 2
    log.roll().batch([rec("z", "active")])  # 3


def _keyless(log: LogBuilder) -> None:
    log.batch([rec(None, "x"), rec("k", "1")])  # 0-1
    log.batch([rec(None, "y")])  # 2
    log.batch([rec("k", "2")])  # 3
    log.roll().batch([rec("z", "active")])  # 4


def _young(log: LogBuilder) -> None:
    log.clock = T0 - 60 * DAY
    log.batch([rec("y1", "a")]).batch([rec("y1", "b")])  # 0-1: old, cleanable
    log.roll()
    log.clock = T1 - HOUR
    log.batch([rec("y1", "c")]).batch([rec("y2", "d")])  # 2-3: younger than min.compaction.lag.ms
    log.roll().batch([rec("z", "active")])  # 4


def _clean_then_dirty(log: LogBuilder) -> None:
    """A big clean segment (checkpoint at 20), then a small dirty one: a dirty ratio far below 0.9."""
    log.batch([rec(f"k{i:02d}", "v" * 100) for i in range(20)])  # 0-19
    log.roll().batch([rec("l1", "a")]).batch([rec("l1", "b")])  # 20-21
    log.roll().batch([rec("z", "active")])  # 22


def _reset(log: LogBuilder) -> None:
    log.batch([rec("r", "1")]).batch([rec("r", "2")])  # 0-1
    log.roll().batch([rec("z", "active")])  # 2


BUILT = {"tomb": _tomb, "txn": _txn, "prod": _prod, "keyless": _keyless, "young": _young,
         "lag": _clean_then_dirty, "calm": _clean_then_dirty, "reset": _reset}
CHECKPOINTS = {("lag", 0): 20, ("calm", 0): 20, ("reset", 0): 1000}  # reset: above the log end offset


def build_log_dir(root: Path) -> Path:
    """The behaviour log dir: two generated partitions plus one built partition per behaviour."""
    log_dir = root / "logs"
    generate_log_dir(GenerateSpec(topics=("gen",), partitions=2, records=300, segment_bytes=4096, value_bytes=20,
                                  batch_records=5, superseded_share=0.6, tombstone_share=0.1,
                                  transactional_share=0.3, aborted_share=0.4, start_ms=T0 - 8 * DAY,
                                  span_ms=7 * DAY, headers=True, seed=3), log_dir)
    for topic, build in BUILT.items():
        log = LogBuilder(topic, 0, timestamp=T0)
        build(log)
        write_log(log.table(), log_dir / f"{topic}-0")
    storage = open_storage(str(log_dir))
    write_offset_checkpoint(storage, str(log_dir / "cleaner-offset-checkpoint"), CHECKPOINTS)
    return log_dir


# --------------------------------------------------------------------------------------------------
# Running and observing
# --------------------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """The log dir after a run: every file's bytes, mtime and inode, every partition's batches."""

    files: dict[str, tuple[str, int, int]]
    batches: dict[str, list[OracleBatch]]
    report: dict | None
    rc: int | None
    checkpoint: dict[tuple[str, int], int]

    def entry(self, name: str) -> dict:
        assert self.report is not None
        for e in self.report["partitions"]:
            if f"{e['topic']}-{e['partition']}" == name:
                return e
        raise KeyError(name)

    def records(self, name: str) -> list:
        return [r for b in self.batches[name] for r in b.records]

    def partition_files(self, name: str) -> dict[str, tuple[str, int, int]]:
        return {k: v for k, v in self.files.items() if k.startswith(name + "/")}


def tree(log_dir: Path) -> dict[str, tuple[str, int, int]]:
    """Relative path -> (sha256, mtime_ns, inode) of every file (the broker-compatible .lock aside)."""
    out = {}
    for dirpath, _, names in os.walk(log_dir):
        for n in names:
            p = Path(dirpath) / n
            if n == ".lock":
                continue
            st = p.stat()
            out[str(p.relative_to(log_dir))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_ino)
    return out


def snapshot(log_dir: Path, report: Path | None = None, rc: int | None = None) -> Snapshot:
    parts = sorted(p.name for p in log_dir.iterdir() if p.is_dir())
    cp = read_offset_checkpoint(open_storage(str(log_dir)), str(log_dir / "cleaner-offset-checkpoint"))
    return Snapshot(tree(log_dir), {n: read_partition(log_dir / n) for n in parts},
                    json.loads(report.read_text()) if report else None, rc, cp)


def run_compact(log_dir: Path, config: Path, now: int, report: Path, *extra: str) -> int:
    return main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", str(now),
                 "--report", str(report), "--quiet", *extra])


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict[str, Snapshot]:
    """The run sequence of the module docstring; every snapshot keyed by run name."""
    root = tmp_path_factory.mktemp("compact-job")
    log_dir = build_log_dir(root)
    config = root / "topics.toml"
    config.write_text(CONFIG)
    out = {"source": snapshot(log_dir)}
    force = ["--partition", "tomb-0", "--partition", "txn-0"]
    for name, now, extra in [("R0", T1, ["--dry-run"]), ("R1", T1, []), ("R1b", T1, []), ("R2", T2, force),
                             ("R3", T3, [*force, "--partition", "calm-0"])]:
        report = root / f"{name}.json"
        rc = run_compact(log_dir, config, now, report, *extra)
        out[name] = snapshot(log_dir, report, rc)
    return out


PARTITIONS = ["gen-0", "gen-1"] + [f"{t}-0" for t in BUILT]
AFTER_RUNS = ["R1", "R1b", "R2", "R3"]


# --------------------------------------------------------------------------------------------------
# Invariants of every run
# --------------------------------------------------------------------------------------------------


def test_every_run_succeeds(runs):
    for name in ["R0", *AFTER_RUNS]:
        assert runs[name].rc == 0, (name, runs[name].report["errors"])
        assert runs[name].report["exit_code"] == 0


@pytest.mark.parametrize("run", AFTER_RUNS)
def test_replay_is_unchanged(runs, run):
    """The oracle's key -> latest record map is the same after every run as before the first."""
    for name in PARTITIONS:
        before = replay(runs["source"].batches[name])
        after = replay(runs[run].batches[name])
        assert comparable(after.latest) == comparable(before.latest), (run, name)
        assert len(after.offsets) == len(set(after.offsets)), (run, name, "duplicate offsets")
        assert after.offsets == sorted(after.offsets), (run, name)
        # aborted data may only remain where no clean has been yet: at or above the cleaner checkpoint
        topic, p = name.rsplit("-", 1)
        cleaned_to = runs[run].checkpoint[(topic, int(p))]
        assert all(o >= cleaned_to for o in after.aborted_offsets), (run, name, "aborted data survived")


@pytest.mark.parametrize("run", AFTER_RUNS)
def test_survivors_are_byte_identical_with_their_sources(runs, run):
    """Every surviving record equals its source record at the same offset (key, value, headers,
    timestamp); every batch keeps its base/last offsets and producer fields; a batch that lost no record
    and gained no horizon is copied byte for byte."""
    for name in PARTITIONS:
        src_batches = {b.base_offset: b for b in runs["source"].batches[name]}
        src_records = {r.offset: r for b in runs["source"].batches[name] for r in b.records}
        for b in runs[run].batches[name]:
            s = src_batches.get(b.base_offset)
            assert s is not None, (run, name, b.base_offset, "batch with a new base offset")
            assert (b.last_offset, b.producer_id, b.producer_epoch, b.base_sequence, b.leader_epoch,
                    b.transactional, b.control, b.attributes & ~0x40) == \
                   (s.last_offset, s.producer_id, s.producer_epoch, s.base_sequence, s.leader_epoch,
                    s.transactional, s.control, s.attributes & ~0x40), (run, name, b.base_offset)
            for r in b.records:
                o = src_records[r.offset]
                assert (r.key, r.value, r.headers, r.timestamp) == (o.key, o.value, o.headers, o.timestamp), \
                    (run, name, r.offset)
            if b.records == s.records and b.attributes == s.attributes:
                assert b.raw == s.raw, (run, name, b.base_offset)


# --------------------------------------------------------------------------------------------------
# Dry run, idempotence, untouched partitions
# --------------------------------------------------------------------------------------------------


def test_dry_run_writes_nothing(runs):
    assert runs["R0"].files == runs["source"].files
    assert all(e["action"] in ("would compact", "skipped") for e in runs["R0"].report["partitions"])


def test_dry_run_predicts_the_real_run(runs):
    predicted, real = runs["R0"].report, runs["R1"].report
    fields = ("selected", "records_removed", "bytes_removed", "segments_after", "bytes_after")
    stats = ("tombstones_removed", "aborted_records_removed", "keyless_dropped", "duplicates_removed",
             "markers_removed")
    for p in predicted["partitions"]:
        name = f"{p['topic']}-{p['partition']}"
        r = runs["R1"].entry(name)
        assert {f: p[f] for f in fields} == {f: r[f] for f in fields}, name
        assert {s: (p.get("stats") or {}).get(s) for s in stats} == {s: (r.get("stats") or {}).get(s) for s in stats}
    assert predicted["totals"]["records_removed"] == real["totals"]["records_removed"] > 0
    # and the prediction is what really went: records removed = records before - after, per the oracle
    for name in PARTITIONS:
        gone = len(runs["source"].records(name)) - len(runs["R1"].records(name))
        assert runs["R0"].entry(name)["records_removed"] == gone, name


def test_second_run_with_the_same_now_changes_nothing(runs):
    assert runs["R1b"].files == runs["R1"].files
    assert runs["R1b"].report["totals"]["records_removed"] == 0


def test_unselected_partitions_are_not_rewritten(runs):
    """calm-0 (dirty ratio under the minimum) keeps every file, inode and mtime through R0-R2."""
    for run in ["R0", "R1", "R1b", "R2"]:
        assert runs[run].partition_files("calm-0") == runs["source"].partition_files("calm-0"), run


def test_report_fields(runs):
    e = runs["R1"].entry("tomb-0")
    assert e["action"] == "compacted" and e["selected"] and e["partial"] is False
    assert e["first_dirty_offset"] == 0 and e["first_uncleanable_offset"] == 5 and e["new_checkpoint"] == 5
    assert e["bound_by"] == "active segment"
    # the group is offsets 0-4 (5 is the active segment): a=1 and b=1 are superseded by their tombstones
    assert e["records_before"] == 5 and e["records_after"] == 3 and e["records_removed"] == 2
    assert e["stats"]["duplicates_removed"] == 2 and e["stats"]["tombstones_kept"] == 2
    assert e["bytes_before"] - e["bytes_after"] == e["bytes_removed"] > 0
    on_disk = sum(len(b.raw) for b in runs["R1"].batches["tomb-0"])
    assert e["bytes_after"] == on_disk
    assert e["segments_before"] == e["segments_after"] == 2
    totals = runs["R1"].report["totals"]
    assert totals["partitions"] == len(PARTITIONS) and totals["errors"] == 0
    assert totals["records_removed"] == sum(runs["R1"].entry(n)["records_removed"] for n in PARTITIONS)
    assert runs["R1"].report["now_ms"] == T1 and runs["R0"].report["dry_run"] is True


# --------------------------------------------------------------------------------------------------
# Behaviours
# --------------------------------------------------------------------------------------------------


def _tombstones(s: Snapshot, name: str) -> list:
    return [r for b in s.batches[name] if not b.control for r in b.records if r.value is None]


def test_tombstones_take_two_cleans(runs):
    # R1: kept, and their batch carries the horizon T1 + delete.retention.ms
    kept = [b for b in runs["R1"].batches["tomb-0"] if any(r.value is None for r in b.records)]
    assert [(b.base_offset, b.last_offset, b.delete_horizon_ms) for b in kept] == [(3, 4, T1 + RETENTION)]
    assert [r.key for r in _tombstones(runs["R1"], "tomb-0")] == [b"a", b"b"]
    # the superseded a=1, b=1 are gone; the batch keeps its offsets 0..2 around the survivor c=1
    first = runs["R1"].batches["tomb-0"][0]
    assert (first.base_offset, first.last_offset, [r.key for r in first.records]) == (0, 2, [b"c"])
    # R2 (forced, before the horizon): nothing to do, no file rewritten
    assert runs["R2"].partition_files("tomb-0") == runs["R1"].partition_files("tomb-0")
    assert runs["R2"].entry("tomb-0")["selected"] is True
    # R3 (past the horizon): the tombstones go; the batch stays as an empty header because it ends the
    # cleaning round (Kafka keeps the round's last batch so the next offset is not lost)
    assert _tombstones(runs["R3"], "tomb-0") == []
    assert runs["R3"].entry("tomb-0")["stats"]["tombstones_removed"] == 2
    last_cleaned = [b for b in runs["R3"].batches["tomb-0"] if b.base_offset < 5][-1]
    assert last_cleaned.last_offset == 4


def test_transactions_and_markers(runs):
    def offsets(run: str) -> list[int]:
        return [r.offset for r in runs[run].records("txn-0")]

    def markers(run: str) -> list[int]:
        return [r.offset for b in runs[run].batches["txn-0"] if b.control for r in b.records]

    # R1: the aborted k2 and the superseded k1=a go; every marker stays
    assert offsets("R1") == [1, 3, 4, 5, 6, 7]
    assert markers("R1") == [1, 3, 6]
    assert runs["R1"].entry("txn-0")["stats"]["aborted_records_removed"] == 1
    # R3: the markers whose transactions have no data left are gone; the commit of k1=c2 stays
    assert markers("R3") == [6]
    assert offsets("R3") == [4, 5, 6, 7]


def test_active_producer_keeps_its_last_batch_empty(runs):
    batches = {b.base_offset: b for b in runs["R1"].batches["prod-0"]}
    empty = batches[0]
    assert empty.records == () and (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (9, 3, 0)
    assert empty.last_offset == 0
    assert [r.value for r in runs["R1"].records("prod-0")] == [b"v2", b"x", b"active"]
    assert runs["R1"].entry("prod-0")["stats"]["empty_batches_kept"] >= 1


def test_keyless_records_are_dropped_and_counted(runs):
    assert [r.key for r in runs["source"].records("keyless-0")].count(None) == 2
    assert all(r.key is not None for r in runs["R1"].records("keyless-0"))
    assert runs["R1"].entry("keyless-0")["stats"]["keyless_dropped"] == 2
    # said, not only counted: a topic given the compact policy by mistake loses such records this way
    for run, verb in (("R0", "would be"), ("R1", "were")):
        [warning] = [w for w in runs[run].report["warnings"] if "without a key" in w]
        assert warning.startswith(f"keyless-0: 2 record(s) without a key {verb} removed, as Kafka's cleaner removes "
                                  "them from a compacted topic (cleanup.policy compact from "), warning
        assert warning in runs[run].entry("keyless-0")["warnings"]


def test_min_compaction_lag_leaves_young_segments_alone(runs):
    e = runs["R1"].entry("young-0")
    assert e["first_uncleanable_offset"] == 2 and "lag" in e["bound_by"]
    young = {k: v for k, v in runs["source"].partition_files("young-0").items() if "00000000000000000002." in k}
    assert young and all(runs["R1"].files[k] == v for k, v in young.items())
    # the old segment was cleaned against its own range only: y1=b (offset 1) survives, although y1=c
    # in the young segment supersedes it
    assert [r.offset for r in runs["R1"].records("young-0")] == [1, 2, 3, 4]


def test_max_compaction_lag_forces_a_clean_below_the_ratio(runs):
    lag, calm = runs["R1"].entry("lag-0"), runs["R1"].entry("calm-0")
    assert lag["dirty_ratio"] == calm["dirty_ratio"] < 0.9
    assert lag["selected"] and "max.compaction.lag.ms" in lag["reason"]
    assert not calm["selected"] and "min.cleanable.dirty.ratio" in calm["reason"]
    assert 20 not in [r.offset for r in runs["R1"].records("lag-0")]
    assert 20 in [r.offset for r in runs["R1"].records("calm-0")]


def test_explicit_partition_forces_a_clean(runs):
    e = runs["R3"].entry("calm-0")
    assert e["selected"] and "explicitly requested" in e["reason"]
    assert 20 not in [r.offset for r in runs["R3"].records("calm-0")]
    # a forced run covers only what it names
    assert {f"{p['topic']}-{p['partition']}" for p in runs["R3"].report["partitions"]} == {"tomb-0", "txn-0", "calm-0"}


def test_checkpoint_above_the_log_end_is_reset(runs):
    e = runs["R1"].entry("reset-0")
    assert e["previous_checkpoint"] == 1000 and e["first_dirty_offset"] == 0 and e["selected"]
    assert [r.offset for r in runs["R1"].records("reset-0")] == [1, 2]


def test_cleaner_checkpoint_file(runs):
    """R1 writes each compacted partition's first uncleanable offset, resets reset-0's out-of-range entry,
    and leaves the unselected calm-0 at its old value."""
    cp = runs["R1"].checkpoint
    assert cp[("reset", 0)] == 2 and cp[("tomb", 0)] == 5 and cp[("young", 0)] == 2 and cp[("lag", 0)] == 22
    assert cp[("calm", 0)] == 20
    assert {k: v for k, v in cp.items() if k[0] == "gen"} == {
        ("gen", p): runs["R1"].entry(f"gen-{p}")["first_uncleanable_offset"] for p in (0, 1)}
    assert runs["source"].checkpoint == CHECKPOINTS and runs["R0"].checkpoint == CHECKPOINTS


# --------------------------------------------------------------------------------------------------
# Partial cleans (a small offset map) continue run after run to the same result as one full clean
# --------------------------------------------------------------------------------------------------


def test_partial_clean_continues_to_a_full_clean(spark, tmp_path):
    log = LogBuilder("big", 0, timestamp=T0)
    for round_ in range(2):
        for seg in range(3):
            for i in range(4):
                log.batch([rec(f"k{seg * 4 + i:02d}", f"v{round_}")])
            log.roll()
    log.batch([rec("z", "active")])
    partial, full = tmp_path / "partial", tmp_path / "full"
    write_log(log.table(), partial / "big-0")
    shutil.copytree(partial, full)
    config = tmp_path / "t.toml"
    # a low minimum ratio: after a partial pass the remaining dirty ratio may be small, and this test is
    # about continuation, not selection
    config.write_text('[defaults]\n"cleanup.policy" = "compact"\n"min.cleanable.dirty.ratio" = 0.01\n')
    source = replay(read_partition(partial / "big-0"))

    reports = []
    for i in range(6):
        rc = run_compact(partial, config, T1, tmp_path / f"p{i}.json", "--dedupe-buffer-bytes",
                         str(buffer_bytes_for_keys(6)), "--strategy", "memory")
        assert rc == 0
        e = json.loads((tmp_path / f"p{i}.json").read_text())["partitions"][0]
        reports.append(e)
        assert comparable(replay(read_partition(partial / "big-0")).latest) == comparable(source.latest)
        if not e["partial"]:
            break
    assert reports[0]["partial"] is True and "offset map full" in reports[0]["reason"]
    assert len(reports) >= 2 and reports[-1]["partial"] is False
    cps = [r["new_checkpoint"] for r in reports]
    assert cps == sorted(cps) and len(set(cps)) == len(cps)  # every pass moved the checkpoint forward
    assert reports[0]["new_checkpoint"] == reports[0]["cleaned_range"][1] < 24
    on_disk = read_offset_checkpoint(open_storage(str(partial)), str(partial / "cleaner-offset-checkpoint"))
    assert on_disk == {("big", 0): reports[-1]["new_checkpoint"]} == {("big", 0): 24}

    assert run_compact(full, config, T1, tmp_path / "full.json") == 0
    assert json.loads((tmp_path / "full.json").read_text())["partitions"][0]["partial"] is False

    def rows(d: Path) -> list:
        return [(r.offset, r.key, r.value) for b in read_partition(d / "big-0") for r in b.records]

    assert rows(partial) == rows(full)
    assert [r[0] for r in rows(full)] == list(range(12, 25))
