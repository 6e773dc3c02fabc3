"""Property tests of compaction over random partition logs, checked against the kafka-python oracle.

Level exercised: the whole compaction job *without Spark*: each run is :func:`jobs.api.compact` naming the
partition (which forces its compaction), its tasks run in this process (``Seams(runner=InProcessTasks())``):
lock, recovery, listing, the scan with the cleaner checkpoint the previous run left, planning, the cleaning
task, the driver's own commit loop (group by group through the store's committer) and the
``cleaner-offset-checkpoint`` write. Only Spark's scheduling is left out.

The random logs (:mod:`tests.support.random_logs`: ``LogBuilder`` + ``write_log``) have several segments, keys
from a small alphabet, values, tombstones, keyless records, headers, every codec, both timestamp types, idempotent
batches and transactions of up to three producers that commit, abort (interleaved, across segments) or stay open, and
sometimes an empty active segment. The run sequence, with ``H = NOW1 + delete.retention.ms`` the horizon
the first clean stamps:

  run 0  at NOW1         (some logs) the older segments alone, before the rest is appended as new segments
  run 1  at NOW1         the first clean (of the whole log, or of the appended dirty range after run 0)
  run 1b at NOW1         stamps the markers whose transaction run 1 emptied (Kafka's next clean), nothing else
  run 1c at NOW1         changes no byte of the partition
  run 2  at H + 1        tombstones (and settled markers) below the cleaned range's end go
  run 2b at H + 1        stamps the markers whose transaction run 2 emptied, nothing else
  run 2c at H + 1        changes no byte of the partition

Properties (the issue's, plus the exact survivor set they imply):
  (a) after every run the oracle replays the partition to the same key -> latest record map as the source;
      after run 1 even the latest record of each key *including tombstones* is unchanged, and below the
      cleaned range's end exactly the latest non-aborted keyed record of each key survives;
  (b) every surviving record equals its source record at that offset (key, value, headers, timestamp), no
      offset appears twice, every batch keeps its offsets and producer fields, and a batch that lost no
      record and gained no horizon is byte-identical with its source;
  (c) a second run at the same now changes no batch but the markers of transactions the first emptied, which
      it stamps with their delete horizon; a third changes no file of the partition;
  (d) after the horizon, the tombstones below the cleaned range's end are gone and the replay is still the
      source's (the oracle already treats a tombstone as deleting its key); a further run stamps at most the
      markers of transactions that one emptied, and the one after changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from jobs import api
from jobs.logdir.lock import work_uri
from jobs.rules.config import ConfigSet
from jobs.rules.map_capacity import buffer_bytes_for_keys
from segment_io.checkpoint import read_offset_checkpoint
from segment_io.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    partition_dir_name,
)
from segment_io.schema import RECORD_SCHEMA
from segment_io.segment_writer import write_segment
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.hypothesis_budget import examples
from tests.support.random_logs import (
    DAY,
    HOUR,
    NOW1,
    NOW2,
    PARTITION,
    RETENTION,
    TOPIC,
    LogSpec,
    build_log,
    log_specs,
    topic_config,
    write_segments,
)
from tests.support.replay import (
    OracleBatch,
    OracleRecord,
    comparable,
    read_partition,
    replay,
)

DEDUPE_BUFFER_BYTES = 1 << 20  #: far more keys than a test log holds: every pass is complete
#: v2 attribute bits, spelled out here like the oracle does (no constant shared with the code under test)
CODEC_BITS = 0x07
HORIZON_BIT = 0x40


# --------------------------------------------------------------------------------------------------
# One run of the job (without Spark)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """What one run did to the partition: where the cleaned range ends (the cleaner checkpoint it wrote), and
    whether the offset map filled up (a partial pass)."""

    end_offset: int
    map_full: bool


def compact_once(log_dir: Path, config: ConfigSet, now_ms: int, *,
                 dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES, strategy: str = "auto") -> Pass | None:
    """One run of the compaction job at ``now_ms`` naming the partition (so it is compacted whatever its dirty
    ratio), in this process. None when the plan has nothing to clean (e.g. the whole log is the active
    segment)."""
    options = api.CompactOptions(config=config, partitions=(partition_dir_name(TOPIC, PARTITION),),
                                 dedupe_buffer_bytes=dedupe_buffer_bytes, strategy=strategy,
                                 progress=lambda line: None)
    result = api.compact(log_dir, options, now=now_ms, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0, result.errors
    (entry,) = [p.entry for p in result.partitions]
    if not entry["selected"]:
        assert "nothing to clean" in entry["reason"], entry["reason"]
        return None
    end = entry["cleaned_range"][1]
    assert end is not None and entry["new_checkpoint"] == end
    checkpoints = read_offset_checkpoint(open_storage(str(log_dir)), str(log_dir / CLEANER_OFFSET_CHECKPOINT))
    assert checkpoints[(TOPIC, PARTITION)] == end
    return Pass(end, bool(entry["partial"]))


def cleaned_to(outcome: Pass | None) -> int | None:
    """The end of a complete pass's cleaned range (None: nothing was cleaned)."""
    if outcome is None:
        return None
    assert not outcome.map_full, "the offset map filled up although it is sized for every key"
    return outcome.end_offset


# --------------------------------------------------------------------------------------------------
# Observations
# --------------------------------------------------------------------------------------------------


def partition_files(partition_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(partition_dir.iterdir())}


def data_records(batches: list[OracleBatch]) -> list[OracleRecord]:
    return [r for b in batches if not b.control for r in b.records]


def latest_including_tombstones(batches: list[OracleBatch], below: int | None = None) -> dict[bytes, int]:
    """Key -> offset of its last non-aborted keyed data record (tombstones included), optionally only
    among offsets below ``below``."""
    aborted = replay(batches).aborted_offsets
    return {r.key: r.offset for r in data_records(batches)
            if r.key is not None and r.offset not in aborted and (below is None or r.offset < below)}


def check_survivors(source: list[OracleBatch], after: list[OracleBatch], run: str) -> None:
    """Property (b) against the original source."""
    offsets = [r.offset for b in after for r in b.records]
    assert len(offsets) == len(set(offsets)), (run, "an offset appears twice", offsets)
    assert offsets == sorted(offsets), (run, "offsets out of order", offsets)
    src_batches = {b.base_offset: b for b in source}
    src_records = {r.offset: r for b in source for r in b.records}
    for b in after:
        s = src_batches.get(b.base_offset)
        assert s is not None, (run, b.base_offset, "a batch with a base offset no source batch has")
        # the horizon bit may be gained; a batch kept as an empty header is uncompressed (as Kafka writes it)
        ignored = HORIZON_BIT | (CODEC_BITS if not b.records else 0)
        assert (b.last_offset, b.producer_id, b.producer_epoch, b.base_sequence, b.leader_epoch, b.transactional,
                b.control, b.attributes & ~ignored) == \
               (s.last_offset, s.producer_id, s.producer_epoch, s.base_sequence, s.leader_epoch, s.transactional,
                s.control, s.attributes & ~ignored), (run, b.base_offset, "batch fields changed")
        for r in b.records:
            o = src_records.get(r.offset)
            assert o is not None, (run, r.offset, "a record at an offset the source does not have")
            assert (r.key, r.value, r.headers, r.timestamp) == (o.key, o.value, o.headers, o.timestamp), \
                (run, r.offset, "record differs from its source")
        if b.records == s.records and b.attributes == s.attributes:
            assert b.raw == s.raw, (run, b.base_offset, "an untouched batch is not byte-identical")


def check_only_markers_stamped(before: list[OracleBatch], after: list[OracleBatch], horizon: int) -> None:
    """Property (c): every batch is unchanged but for transaction markers that gained ``horizon``."""
    assert [b.base_offset for b in after] == [b.base_offset for b in before], "batches came or went"
    for b, a in zip(before, after):
        if a.raw == b.raw:
            continue
        assert a.control and a.records, (a.base_offset, "a batch other than a marker changed")
        assert b.delete_horizon_ms is None and a.delete_horizon_ms == horizon, (a.base_offset, a.delete_horizon_ms)
        assert a.records == b.records and a.attributes & ~HORIZON_BIT == b.attributes, a.base_offset


def check_replay(source: list[OracleBatch], after: list[OracleBatch], run: str) -> None:
    """Property (a): the consumer's view is unchanged."""
    assert comparable(replay(after).latest) == comparable(replay(source).latest), (run, "replay differs")


def check_no_leftovers(log_dir: Path, partition_dir: Path) -> None:
    transient = [p.name for p in partition_dir.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert transient == [], transient
    staged = [p for p in Path(work_uri(str(log_dir))).rglob("*") if p.is_file() and "staging" in p.parts]
    assert staged == [], staged


# --------------------------------------------------------------------------------------------------
# The property
# --------------------------------------------------------------------------------------------------


# Each example writes a log dir and compacts it on disk: 40% of the profile's budget.
@settings(max_examples=examples(0.4), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
@given(spec=log_specs())
@pytest.mark.slow
def test_compaction_properties_over_random_logs(spec: LogSpec, tmp_path_factory: pytest.TempPathFactory) -> None:
    log_dir = tmp_path_factory.mktemp("logs")
    pdir = log_dir / partition_dir_name(TOPIC, PARTITION)
    config = topic_config(spec)
    built = build_log(spec)
    if spec.split is not None:
        # run 0: an earlier clean of the older segments only, at NOW1, before the rest was appended
        split_base = built.roll_bases[spec.split]
        write_segments(built, pdir, stop=split_base)
        if pdir.exists():
            older = read_partition(pdir)
            cleaned_to(compact_once(log_dir, config, NOW1))
            check_no_leftovers(log_dir, pdir)
            check_replay(older, read_partition(pdir), "run 0")
            check_survivors(older, read_partition(pdir), "run 0")
        write_segments(built, pdir, start=split_base)
        source_dir = tmp_path_factory.mktemp("source") / pdir.name  # the whole log, never cleaned
        write_segments(built, source_dir)
        source = read_partition(source_dir)
    else:
        write_segments(built, pdir)
        source = read_partition(pdir)
    source_files = partition_files(pdir)

    # run 1: the first clean
    end = cleaned_to(compact_once(log_dir, config, NOW1))
    after1 = read_partition(pdir)
    check_no_leftovers(log_dir, pdir)
    check_replay(source, after1, "run 1")
    check_survivors(source, after1, "run 1")
    if end is None:
        assert partition_files(pdir) == source_files
        return
    # tombstones are kept on the first clean: the latest record of every key is still there
    assert latest_including_tombstones(after1) == latest_including_tombstones(source)
    # below the cleaned range's end exactly the latest non-aborted keyed record of each key survives
    expected_clean = sorted(latest_including_tombstones(source, below=end).values())
    assert sorted(r.offset for r in data_records(after1) if r.offset < end) == expected_clean
    # the uncleaned rest is not touched
    assert [r for r in data_records(after1) if r.offset >= end] == [r for r in data_records(source) if r.offset >= end]

    # run 1b: (c) the clean after the first may stamp the markers of the transactions the first emptied (Kafka
    # stamps a marker only on a clean that finds none of its data), and change nothing else; run 1c nothing at all
    assert cleaned_to(compact_once(log_dir, config, NOW1)) == end
    check_only_markers_stamped(after1, read_partition(pdir), NOW1 + RETENTION)
    files1b = partition_files(pdir)
    assert cleaned_to(compact_once(log_dir, config, NOW1)) == end
    assert partition_files(pdir) == files1b, "a third run at the same now changed the partition"

    # run 2: (d) past the horizon every tombstone below the cleaned range's end goes, and the replay is still
    # the source's (the oracle's map already lacks every key whose latest record is a tombstone)
    assert cleaned_to(compact_once(log_dir, config, NOW2)) == end
    after2 = read_partition(pdir)
    check_no_leftovers(log_dir, pdir)
    check_replay(source, after2, "run 2")
    check_survivors(source, after2, "run 2")
    tombstones_below = [r.offset for r in data_records(after2) if r.value is None and r.offset < end]
    assert tombstones_below == [], ("tombstones survived their horizon", tombstones_below)
    # ... and nothing else: the latest record of each key is the first clean's, minus those tombstones
    after1_records = {r.offset: r for r in data_records(after1)}
    expected = {k: o for k, o in latest_including_tombstones(after1).items()
                if o >= end or after1_records[o].value is not None}
    assert latest_including_tombstones(after2) == expected

    # run 2b: as after run 1, the next clean may stamp the markers of the transactions run 2 emptied, nothing
    # else; run 2c nothing at all
    assert cleaned_to(compact_once(log_dir, config, NOW2)) == end
    check_only_markers_stamped(after2, read_partition(pdir), NOW2 + RETENTION)
    files2b = partition_files(pdir)
    assert cleaned_to(compact_once(log_dir, config, NOW2)) == end
    assert partition_files(pdir) == files2b, "a further run past the horizon changed the partition"


#: room for 3 keys: most logs need several partial passes
SMALL_DEDUPE_BUFFER_BYTES = buffer_bytes_for_keys(3)


# Each example compacts a log dir several times over (one pass per offset-map fill): a quarter of the budget.
@settings(max_examples=examples(0.25), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                              HealthCheck.too_slow])
@given(spec=log_specs())
def test_partial_passes_with_a_small_offset_map_reach_the_full_clean(
        spec: LogSpec, tmp_path_factory: pytest.TempPathFactory) -> None:
    """With an offset map too small for the dirty keys each run cleans a prefix of the dirty range and the
    next continues from its checkpoint (like Kafka's cleaner): every pass keeps the replay and the survivors'
    bytes, every pass moves the checkpoint forward, and the passes end where one complete clean would have."""
    log_dir = tmp_path_factory.mktemp("logs")
    pdir = log_dir / partition_dir_name(TOPIC, PARTITION)
    write_segments(build_log(spec), pdir)
    source = read_partition(pdir)
    config = topic_config(spec)
    ends: list[int] = []
    for n in range(1, 40):
        # memory explicitly: auto would take external-sort for a partition with more records than the map holds
        outcome = compact_once(log_dir, config, NOW1, dedupe_buffer_bytes=SMALL_DEDUPE_BUFFER_BYTES,
                               strategy="memory")
        if outcome is None:
            return
        after = read_partition(pdir)
        check_replay(source, after, f"pass {n}")
        check_survivors(source, after, f"pass {n}")
        assert outcome.end_offset is not None and (not ends or outcome.end_offset > ends[-1]), \
            ("a pass made no progress", ends, outcome.end_offset)
        ends.append(outcome.end_offset)
        if not outcome.map_full:
            break
    else:
        raise AssertionError(f"partial passes did not finish: checkpoints {ends}")
    end = ends[-1]
    expected_clean = sorted(latest_including_tombstones(source, below=end).values())
    assert sorted(r.offset for r in data_records(after) if r.offset < end) == expected_clean, ends
    assert latest_including_tombstones(after) == latest_including_tombstones(source)


# --------------------------------------------------------------------------------------------------
# Found by these properties (with epoch-bumping markers): a regression test
# --------------------------------------------------------------------------------------------------


def test_an_active_producers_fencing_abort_marker_is_stable_past_its_horizon(tmp_path: Path) -> None:
    """A coordinator's fencing abort carries the bumped epoch, so the producer has no data in its epoch and
    its marker is its last batch (Kafka's isBatchLastRecordOfProducer, case 3). Past the marker's horizon
    the run keeps it as an empty control batch while the producer is active; a run at the same time must
    then change nothing."""
    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1 - 2 * HOUR)
    log.batch([rec("a", "")])  # 0
    log.clock += DAY  # the producer writes last at NOW1 + 22 h: still active at NOW2
    log.txn_batch(1, 0, [rec("a", "")])  # 1: aborted
    log.abort(1, 1)  # 2: the fencing abort, epoch 0 -> 1
    log.batch([rec("a", "")])  # 3
    pdir = tmp_path / "logs" / partition_dir_name(TOPIC, PARTITION)
    write_log(log.table(), pdir)
    write_segment(RECORD_SCHEMA.empty_table(), str(pdir / f"{log.next_offset:020d}.log"))  # empty active segment
    config = topic_config()
    for now in (NOW1, NOW1, NOW2):
        cleaned_to(compact_once(pdir.parent, config, now))
    kept = partition_files(pdir)
    assert [(b.base_offset, b.control, len(b.records)) for b in read_partition(pdir)] == [(2, True, 0), (3, False, 1)]
    cleaned_to(compact_once(pdir.parent, config, NOW2))
    assert partition_files(pdir) == kept
