"""The external-sort strategy (and ``auto``) against the memory strategy with a buffer big enough for one pass.

Level exercised: the whole compaction job (:func:`jobs.api.compact`): without Spark for the property test
(the key pass, bucket reduce and rewrite tasks in this process), and with the shared ``local[2]`` session (the
same stages as Spark tasks, their files in the work dir); the kernels against the in-memory reference
(:func:`jobs.rules.external_sort.superseded_keys`). Each run compacts a copy of the same log dir (file times
included) at the same ``now``; the property is byte equality of every file of the partition and of the cleaner
checkpoint, run after run (the first clean, then past the tombstone horizon).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import api
from jobs.engine.compact import external_sort as es
from jobs.rules.config import ConfigSet
from jobs.rules.external_sort import choose_strategy, superseded_keys
from jobs.rules.map_capacity import buffer_bytes_for_keys, max_keys_for_buffer
from jobs.rules.transactions import AbortedTxns
from segment_io.compression import DEFAULT_MAX_BATCH_BYTES
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, partition_dir_name
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.hypothesis_budget import examples
from tests.support.random_logs import (
    NOW1,
    NOW2,
    PARTITION,
    TOPIC,
    LogSpec,
    build_log,
    log_specs,
    topic_config,
    write_segments,
)

BIG_BUFFER = 1 << 20  #: every test log's keys fit one memory pass
TINY_BUFFER = buffer_bytes_for_keys(2)  #: auto picks external-sort for any partition with 2 dirty records


def compact(log_dir: Path, config: ConfigSet, now_ms: int, strategy: str, buffer: int, *, spark=None,
            dry_run: bool = False) -> dict:
    """One run naming the partition; its report entry."""
    options = api.CompactOptions(config=config, partitions=(partition_dir_name(TOPIC, PARTITION),),
                                 dedupe_buffer_bytes=buffer, strategy=strategy, dry_run=dry_run,
                                 progress=lambda line: None)
    seams = api.Seams(runner=api.InProcessTasks()) if spark is None else api.Seams()
    result = api.compact(log_dir, options, now=now_ms, seams=seams, spark=spark)
    assert result.exit_code == 0, result.errors
    (entry,) = [p.entry for p in result.partitions]
    return entry


def files(log_dir: Path) -> dict[str, bytes]:
    """Every file of the partition and the cleaner checkpoint, by name."""
    pdir = log_dir / partition_dir_name(TOPIC, PARTITION)
    out = {p.name: p.read_bytes() for p in sorted(pdir.iterdir())}
    cp = log_dir / CLEANER_OFFSET_CHECKPOINT
    out[cp.name] = cp.read_bytes() if cp.exists() else b""
    return out


def mtimes(log_dir: Path) -> dict[str, int]:
    pdir = log_dir / partition_dir_name(TOPIC, PARTITION)
    return {p.name: p.stat().st_mtime_ns // 1_000_000 for p in sorted(pdir.iterdir())}


def copies(source: Path, tmp: Path, n: int) -> list[Path]:
    """``n`` copies of log dir ``source`` with the file times kept (the legacy horizon and the new segments'
    times come from them)."""
    out = []
    for i in range(n):
        dst = tmp / f"copy{i}"
        shutil.copytree(source, dst, copy_function=shutil.copy2)
        out.append(dst)
    return out


def assert_same_runs(dirs: list[Path], runs: list[tuple[str, int]], config: ConfigSet, *, spark=None,
                     nows: tuple[int, ...] = (NOW1, NOW2)) -> list[dict]:
    """Compact ``dirs[0]`` with memory and a big buffer, each other dir with the given (strategy, buffer), at
    each of ``nows`` (the first clean, then past its horizon): after every run every dir holds the same bytes,
    and the entries agree."""
    entries = []
    for now in nows:
        reference = compact(dirs[0], config, now, "memory", BIG_BUFFER)
        assert not reference.get("partial")
        expected = files(dirs[0])
        for d, (strategy, buffer) in zip(dirs[1:], runs):
            entry = compact(d, config, now, strategy, buffer, spark=spark)
            got = files(d)
            assert got.keys() == expected.keys(), (strategy, now, sorted(got), sorted(expected))
            for name in expected:
                assert got[name] == expected[name], (strategy, now, name)
            assert mtimes(d) == mtimes(dirs[0]), (strategy, now)
            for k in ("cleaned_range", "partial", "records_removed", "bytes_removed", "groups_rewritten", "stats",
                      "new_checkpoint", "action"):
                assert entry.get(k) == reference.get(k), (strategy, now, k, entry.get(k), reference.get(k))
            entries.append(entry)
    return entries


# --------------------------------------------------------------------------------------------------
# The property (no Spark)
# --------------------------------------------------------------------------------------------------


# Each example compacts three copies of a log dir twice: about a third of the profile's budget.
@settings(max_examples=examples(0.35), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                              HealthCheck.too_slow])
@given(spec=log_specs())
@pytest.mark.slow
def test_external_sort_and_auto_write_the_bytes_of_one_memory_pass(spec: LogSpec,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    # three hash buckets whatever the size: keys of one group spread over several bucket files
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(es, "bucket_count", lambda records, bucket_bytes, parallelism: 3)
        _external_sort_and_auto_write_the_bytes_of_one_memory_pass(spec, tmp_path_factory)


def _external_sort_and_auto_write_the_bytes_of_one_memory_pass(spec: LogSpec,
                                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("ext")
    source = tmp / "source"
    built = build_log(spec)
    runs = [("external-sort", TINY_BUFFER), ("auto", TINY_BUFFER)]
    name = partition_dir_name(TOPIC, PARTITION)
    if spec.split is None:
        write_segments(built, source / name)
        dirs = copies(source, tmp, 3)
    else:
        # an earlier clean of the older segments (each dir with its strategy), then the rest is appended
        split_base = built.roll_bases[spec.split]
        write_segments(built, source / name, stop=split_base)
        source.mkdir(exist_ok=True)
        dirs = copies(source, tmp, 3)
        if (source / name).exists():
            assert_same_runs(dirs, runs, topic_config(spec), nows=(NOW1,))
        appended = tmp / "appended"
        write_segments(built, appended / name, start=split_base)
        for d in dirs:
            for f in (appended / name).iterdir():
                (d / name).mkdir(exist_ok=True)
                shutil.copy2(f, d / name / f.name)
    entries = assert_same_runs(dirs, runs, topic_config(spec))
    for e in entries:
        if e["action"] != "skipped":
            assert e["strategy"] in ("memory", "external-sort") and e["strategy_reason"]
            if e["strategy"] == "external-sort":
                assert e["external_sort"]["buckets"] == 3
    # auto with room for 2 keys: memory when the dirty range holds fewer records; else memory first, handed
    # over to external-sort (with the pieces read) when the map fills
    auto = [e for e in entries[1::2] if e["action"] != "skipped"]
    for e in auto:
        reason = e["strategy_reason"]
        assert ("< 2 keys" in reason) != ("memory first" in reason), e
        assert e["strategy"] == ("external-sort" if "the map filled" in reason else "memory"), e
        if e["strategy"] == "external-sort":
            assert e["external_sort"]["reused_pieces"] >= 1, e


def test_more_keys_than_the_buffer_are_deduplicated_in_one_run(tmp_path: Path) -> None:
    """200 keys written three times over, a buffer for 10 keys: memory needs many partial runs, external-sort
    and auto clean everything in one, with exactly the bytes of one big memory pass."""
    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1 - 3_600_000)
    for round_ in range(3):
        for start in range(0, 200, 20):
            log.batch([rec(f"k{k}", f"v{round_}-{k}") for k in range(start, start + 20)])
        log.roll()
    log.batch([tombstone("k0")])
    log.roll()
    source = tmp_path / "source"
    write_log(log.table(), source / partition_dir_name(TOPIC, PARTITION))
    dirs = copies(source, tmp_path, 4)
    config = ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact", f"{TOPIC}:segment.bytes=4000"])
    small = buffer_bytes_for_keys(10)
    partial = compact(dirs[3], config, NOW1, "memory", small)
    assert partial["partial"], "the small buffer must not hold the partition's keys"
    entries = assert_same_runs(dirs[:3], [("external-sort", small), ("auto", small)], config)
    first = entries[:2]
    assert all(not e["partial"] and e["strategy"] == "external-sort" for e in first), first
    assert first[1]["strategy_reason"].startswith("auto: 600 dirty records >= 10 keys"), first[1]["strategy_reason"]
    assert first[0]["records_removed"] == 400
    assert first[0]["external_sort"]["groups"] > 1 and first[0]["external_sort"]["superseded_keys"] > 0
    # auto: memory first; its map filled inside the first segment (10 keys), so that segment's piece is handed
    # over and only the others are read by the key pass: no segment is read twice
    ext, auto = first[0]["external_sort"], first[1]["external_sort"]
    assert "the map filled with 10 keys" in first[1]["strategy_reason"], first[1]["strategy_reason"]
    assert auto["reused_pieces"] == 1 and auto["key_pieces"] == ext["key_pieces"] - 1, (auto, ext)


def test_many_records_of_few_keys_stay_with_memory(tmp_path: Path) -> None:
    """Records are not keys: 600 records of 20 keys with a map for 50 keys: auto starts with memory (the
    records exceed the map), the map does not fill, so memory cleans it in one pass and the pieces it held
    for a hand-over leave nothing in the work dir."""
    from jobs.logdir.lock import work_uri

    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1 - 3_600_000)
    for round_ in range(30):
        log.batch([rec(f"k{k}", f"v{round_}-{k}") for k in range(20)])
        if round_ % 10 == 9:
            log.roll()
    source = tmp_path / "source"
    write_log(log.table(), source / partition_dir_name(TOPIC, PARTITION))
    dirs = copies(source, tmp_path, 2)
    config = ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact", f"{TOPIC}:segment.bytes=4000"])
    (entry,) = assert_same_runs(dirs, [("auto", buffer_bytes_for_keys(50))], config, nows=(NOW1,))
    assert entry["strategy"] == "memory" and "memory first" in entry["strategy_reason"], entry
    assert "external_sort" not in entry and not entry["partial"] and entry["records_removed"] > 0
    work = Path(work_uri(str(dirs[1]))) / es.WORK_SUBDIR
    assert not work.exists() or [p for p in work.rglob("*") if p.is_file()] == []


def test_a_dry_run_measures_what_memory_measures(tmp_path: Path) -> None:
    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1 - 3_600_000)
    log.batch([rec("a", "1"), rec("b", "1"), rec(None, "x")])
    log.txn_batch(3, 0, [rec("a", "t")])
    log.abort(3, 0)
    log.batch([rec("a", "2"), tombstone("b")])
    log.roll()
    log.batch([rec("c", "1")])  # the active segment
    source = tmp_path / "source"
    write_log(log.table(), source / partition_dir_name(TOPIC, PARTITION))
    a, b = copies(source, tmp_path, 2)
    config = ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact"])
    mem = compact(a, config, NOW1, "memory", BIG_BUFFER, dry_run=True)
    ext = compact(b, config, NOW1, "external-sort", BIG_BUFFER, dry_run=True)
    for k in ("action", "records_removed", "bytes_removed", "stats", "new_checkpoint", "bytes_after"):
        assert ext[k] == mem[k], (k, ext[k], mem[k])
    assert ext["action"] == "would compact" and ext["strategy"] == "external-sort"
    assert files(b) == files(source) | {CLEANER_OFFSET_CHECKPOINT: b""}


# --------------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------------


def test_auto_rule() -> None:
    certain = choose_strategy("auto", dirty_records=9, max_keys=10)
    assert (certain.strategy, certain.memory_first) == ("memory", False)
    for records in (10, None, 10**9):  # records may share keys: the memory task's map finds out
        maybe = choose_strategy("auto", dirty_records=records, max_keys=10)
        assert (maybe.strategy, maybe.memory_first) == ("memory", True), records
    assert not choose_strategy("memory", dirty_records=10**9, max_keys=10).memory_first
    assert choose_strategy("external-sort", dirty_records=1, max_keys=10).strategy == "external-sort"
    assert max_keys_for_buffer(api.CompactOptions().dedupe_buffer_bytes) == 5_033_164


@settings(max_examples=examples(1))
@given(rows=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 3), st.booleans()),
                     max_size=40))
def test_superseded_keys_against_a_dictionary(rows: list[tuple[int, int, int, bool]]) -> None:
    """Row i: (partition, group, key, mappable) at offset i; a key's latest is its last mappable offset."""
    p = np.array([r[0] for r in rows], np.int32)
    g = np.array([r[1] for r in rows], np.int32)
    key = np.array([r[2] for r in rows], np.int64)
    ok = np.array([r[3] for r in rows], bool)
    off = np.arange(len(rows), dtype=np.int64)
    got = superseded_keys(p, g, key * 7, -key, off, ok).to_pylist()
    latest: dict[tuple[int, int], int] = {}
    for i, (pp, _, k, m) in enumerate(rows):
        if m:
            latest[(pp, k)] = i
    expected = sorted({(pp, gg, k * 7, -k, latest[(pp, k)]) for i, (pp, gg, k, _) in enumerate(rows)
                       if latest.get((pp, k), -1) > i})
    assert [(r["p"], r["g"], r["key_hash_hi"], r["key_hash_lo"], r["latest"]) for r in got] == expected


def test_a_split_segment_reads_the_rows_of_the_whole(tmp_path: Path) -> None:
    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1)
    for i in range(50):
        log.batch([rec(f"k{i % 7}", "v" * (i % 13)), rec(None, "x"), rec(f"j{i}", None)])
    pdir = tmp_path / partition_dir_name(TOPIC, PARTITION)
    write_log(log.table(), pdir)
    (seg,) = sorted(pdir.glob("*.log"))
    storage = open_storage(str(tmp_path))

    def read(split: int, splits: int) -> pa.Table:
        return es.read_key_hashes(es.PieceItem(0, 0, storage, str(seg), split, splits, 10, 120,
                                               AbortedTxns.empty(), 1, str(tmp_path / "piece"),
                                               DEFAULT_MAX_BATCH_BYTES))

    whole = read(0, 1)
    assert whole.num_rows == 150
    for splits in (2, 3, 7, 200):
        parts = pa.concat_tables([read(k, splits) for k in range(splits)])
        assert parts.equals(whole), splits
    rows, counts = es.piece_of(whole, first_dirty_offset=10, first_uncleanable_offset=120,
                               aborted=AbortedTxns.empty(), buckets=1)
    assert counts.tolist() == [len(rows)] == [7 + 50]  # one row per key: k0..k6 and j0..j49


# --------------------------------------------------------------------------------------------------
# With Spark: the window sort, on generated logs and on every real compacted fixture
# --------------------------------------------------------------------------------------------------


def compact_all(log_dir: Path, config: ConfigSet, now_ms: int, strategy: str, *, spark=None) -> dict[str, dict]:
    """One run forcing every partition; entries by partition name."""
    options = api.CompactOptions(config=config, topics=("*",), strategy=strategy, progress=lambda line: None)
    seams = api.Seams(runner=api.InProcessTasks()) if spark is None else api.Seams()
    result = api.compact(log_dir, options, now=now_ms, seams=seams, spark=spark)
    assert result.exit_code == 0, result.errors
    return {f"{p.entry['topic']}-{p.entry['partition']}": p.entry for p in result.partitions}


def all_files(log_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def assert_spark_matches_memory(source: Path, tmp: Path, config: ConfigSet, nows: list[int], spark) -> dict:
    mem, ext = copies(source, tmp, 2)
    entries: dict = {}
    for now in nows:
        expected = compact_all(mem, config, now, "memory")
        entries = compact_all(ext, config, now, "external-sort", spark=spark)
        assert all_files(ext) == all_files(mem), now
        for name, e in entries.items():
            for k in ("cleaned_range", "records_removed", "bytes_removed", "stats", "action"):
                assert e.get(k) == expected[name].get(k), (name, k)
    return entries


def test_spark_external_sort_on_generated_partitions(spark, tmp_path: Path) -> None:
    """Two partitions with transactions (half aborted), tombstones and several groups; the
    second run is past the horizon the first stamps (tombstones and settled markers go)."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    source = tmp_path / "source"
    generate_log_dir(GenerateSpec(topics=("orders",), partitions=2, records=1_500, segment_bytes=24 << 10,
                                  superseded_share=0.6, tombstone_share=0.05, transactional_share=0.3,
                                  aborted_share=0.5, seed=11), source)
    config = ConfigSet().with_overrides(["*:cleanup.policy=compact", "*:segment.bytes=40000",
                                         "*:delete.retention.ms=1000"])
    start = GenerateSpec().start_ms + GenerateSpec().span_ms
    entries = assert_spark_matches_memory(source, tmp_path, config, [start + 10, start + 10_000], spark)
    first = next(iter(entries.values()))
    assert first["strategy"] == "external-sort" and first["external_sort"]["groups"] > 1, first


def test_spark_external_sort_on_every_real_compacted_fixture(spark, kafka_real: Path, tmp_path: Path) -> None:
    from tests.support.compacted_fixtures import NOW, PARTITIONS
    from tests.support.replay import read_partition

    source = tmp_path / "source"
    for fixture, name in PARTITIONS:
        shutil.copytree(kafka_real / fixture / name, source / name, copy_function=shutil.copy2)
        end = max(b.last_offset for b in read_partition(source / name)) + 1
        (source / name / f"{end:020d}.log").write_bytes(b"")  # an empty active segment, as a broker rolls
    from jobs.rules.timeutil import resolve_now

    now = resolve_now(NOW)[0]
    config = ConfigSet().with_overrides(["*:cleanup.policy=compact"])
    entries = assert_spark_matches_memory(source, tmp_path, config, [now], spark)
    assert {e["action"] for e in entries.values()} <= {"compacted", "unchanged"}, entries
    assert sum(e["records_removed"] for e in entries.values()) > 0


def test_a_corrupt_segment_fails_its_partition_only_and_leaves_no_work_files(tmp_path: Path) -> None:
    """The key pass meets a CRC mismatch the header scan cannot see: that partition is reported with the file
    and left untouched, the other one is compacted, and the work dir keeps no group map (not even a crashed
    run's)."""
    from jobs.logdir.lock import work_uri

    log_dir = tmp_path / "logs"
    for p in (0, 1):
        log = LogBuilder(TOPIC, p, timestamp=NOW1 - 3_600_000)
        log.batch([rec("a", "1"), rec("b", "1")]).batch([rec("a", "2")]).roll().batch([rec("c", "1")])
        write_log(log.table(), log_dir / partition_dir_name(TOPIC, p))
    seg = log_dir / partition_dir_name(TOPIC, 1) / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[75] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    seg.write_bytes(bytes(data))
    before = seg.read_bytes()
    crashed = Path(work_uri(str(log_dir))) / es.WORK_SUBDIR / "run-crashed" / f"{TOPIC}-0" / "group-000000.arrow"
    crashed.parent.mkdir(parents=True)
    crashed.write_bytes(b"a crashed run's group map")
    options = api.CompactOptions(config=ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact"]),
                                 topics=(TOPIC,), strategy="external-sort", progress=lambda line: None)
    result = api.compact(log_dir, options, now=NOW1, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 1
    entries = {p.entry["partition"]: p.entry for p in result.partitions}
    assert entries[0]["action"] == "compacted" and entries[0]["records_removed"] == 1
    assert entries[1]["action"] == "error" and entries[1]["error"]["file"] == str(seg), entries[1]
    assert seg.read_bytes() == before
    leftovers = [p for p in Path(work_uri(str(log_dir))).rglob("*") if es.WORK_SUBDIR in p.parts[:-1]]
    assert leftovers == []


def test_the_summary_says_which_strategy_and_why(tmp_path: Path, capsys) -> None:
    from jobs.commands import compact as compact_command
    from jobs.commands.cli import build_parser

    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1 - 3_600_000)
    for round_ in range(2):
        log.batch([rec(f"k{k}", f"v{round_}") for k in range(30)])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), tmp_path / "logs" / partition_dir_name(TOPIC, PARTITION))
    args = build_parser().parse_args(["compact", "--log-dir", str(tmp_path / "logs"), "--now", str(NOW1), "--quiet",
                                      "--set", f"{TOPIC}:cleanup.policy=compact", "--topic", TOPIC,
                                      "--dedupe-buffer-bytes", str(buffer_bytes_for_keys(10))])
    assert compact_command.run(args, seams=api.Seams(runner=api.InProcessTasks())) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("partition "))
    assert header.split()[:3] == ["partition", "action", "strategy"]
    row = next(line for line in out.splitlines() if line.startswith(f"{TOPIC}-{PARTITION} "))
    assert row.split()[1:3] == ["compacted", "external-sort"], row
    assert "external-sort: auto: 60 dirty records >= 10 keys the map holds" in row, row


@pytest.mark.parametrize(("items", "size", "parallelism", "expected"), [
    (1, 10, 4, 1), (50, 10, 4, 4), (50, 10 * es.SPLIT_BYTES, 2, 10), (5, 100 * es.SPLIT_BYTES, 2, 5)])
def test_task_count(items: int, size: int, parallelism: int, expected: int) -> None:
    assert es.task_count(items, size, parallelism) == expected


@settings(max_examples=examples(1))
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.booleans(), st.booleans()), max_size=60),
       cuts=st.lists(st.integers(0, 60), max_size=6), buckets=st.integers(1, 4))
def test_pieces_and_buckets_give_the_superseded_keys(rows: list[tuple[int, int, bool, bool]], cuts: list[int],
                                                     buckets: int) -> None:
    """Row i: (group, key, mappable, keyed) at offset i, groups ascending; the rows cut into pieces anywhere
    (never across a group), each piece pre-aggregated into buckets, each bucket reduced: together, exactly the
    reference's (group, key, latest) rows, each once."""
    from jobs.rules.external_sort import piece_rows, reduce_bucket

    rows = sorted(rows, key=lambda r: r[0])
    n = len(rows)
    g = np.array([r[0] for r in rows], np.int32)
    key = np.array([r[1] for r in rows], np.int64)
    ok = np.array([r[2] and r[3] for r in rows], bool)
    keyed = np.array([r[3] for r in rows], bool)
    off = np.arange(n, dtype=np.int64)
    hi, lo = key * 7 + 1, -key
    ref = superseded_keys(np.zeros(int(keyed.sum()), np.int32), g[keyed], hi[keyed], lo[keyed], off[keyed],
                          ok[keyed]).to_pylist()
    expected = sorted((r["g"], r["key_hash_hi"], r["key_hash_lo"], r["latest"]) for r in ref)
    bounds = sorted({0, n, *(c for c in cuts if c <= n), *np.flatnonzero(np.diff(g)).__add__(1).tolist()})
    per_bucket: list[list[tuple[np.ndarray, int]]] = [[] for _ in range(buckets)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        piece, counts = piece_rows(hi[a:b], lo[a:b], off[a:b], ok[a:b], keyed[a:b], buckets)
        assert len(piece) == len(np.unique(key[a:b][keyed[a:b]])) == counts.sum()
        at = np.r_[0, np.cumsum(counts)]
        for x in range(buckets):
            per_bucket[x].append((piece[at[x]:at[x + 1]], int(g[a])))
    got = []
    for x in range(buckets):
        bucket_rows = np.concatenate([r for r, _ in per_bucket[x]] or [np.zeros((0, 4), np.int64)])
        groups = np.concatenate([np.full(len(r), gg, np.int32) for r, gg in per_bucket[x]] or [np.zeros(0, np.int32)])
        out, counts = reduce_bucket(bucket_rows, groups, 4)
        got += [(gg, int(r[0]), int(r[1]), int(r[2])) for gg, r in zip(np.repeat(np.arange(4), counts).tolist(), out)]
    assert sorted(got) == expected


def test_bucket_count_bounds_a_reduce_by_the_bucket_bytes() -> None:
    from jobs.rules.external_sort import REDUCE_BYTES_PER_ROW, bucket_count

    assert bucket_count(0, 256 << 20, 2) == 1
    assert bucket_count(1000, 256 << 20, 2) == 1  # small partitions: one bucket, one task
    assert bucket_count(10_000_000, 256 << 20, 2) == 8  # 2.08 GB of reduce memory in 256 MiB buckets
    assert bucket_count(1_000_000, 256 << 20, 2) == 2  # big enough for one bucket per core
    for records in (10**6, 10**8, 2 * 10**8):
        assert records * REDUCE_BYTES_PER_ROW / bucket_count(records, 64 << 20, 2) <= 64 << 20


def test_an_external_sort_run_leaves_no_empty_work_dir(tmp_path: Path) -> None:
    """The run removes its own dir, then (under the lock still) the external-sort dir it leaves empty; a dry run,
    which holds no lock, removes only its own."""
    from jobs.logdir.lock import work_uri

    log_dir = tmp_path / "logs"
    log = LogBuilder(TOPIC, PARTITION, timestamp=NOW1 - 3_600_000)
    log.batch([rec("a", "1"), rec("b", "1")]).batch([rec("a", "2")]).roll().batch([rec("c", "1")])
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, PARTITION))
    sort_dir = Path(work_uri(str(log_dir))) / es.WORK_SUBDIR
    for dry_run in (True, False):
        options = api.CompactOptions(config=ConfigSet().with_overrides([f"{TOPIC}:cleanup.policy=compact"]),
                                     topics=(TOPIC,), strategy="external-sort", dry_run=dry_run,
                                     progress=lambda line: None)
        result = api.compact(log_dir, options, now=NOW1, seams=api.Seams(runner=api.InProcessTasks()))
        (entry,) = [p.entry for p in result.partitions]
        assert result.exit_code == 0 and entry["strategy"] == "external-sort" and entry["records_removed"] == 1
        if dry_run:
            assert sort_dir.is_dir() and list(sort_dir.iterdir()) == []  # no lock held: not its to remove
    assert not sort_dir.exists()
