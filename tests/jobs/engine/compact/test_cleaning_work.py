"""Work the cleaning task does once, or only when it is needed.

A partition whose dirty segments are small (at most ``cleaning.SINGLE_DECODE_BYTES`` in all) decodes each of them
once: the offset map is built from the full decode the clean then uses, instead of a key-hash decode for the map
and a full one for the clean. It must give the same map, the same staged bytes and the same statistics as the two
decodes, with transactions, aborts, tombstones, headers and compressed batches; when the dirty range starts after
the first segment (or inside a segment); when the map fills; and the bound must hold: one byte over it and the
partition is decoded twice, as before.

A larger dirty range keeps the full decodes of its first segments (mapped) for the clean while they hold at most
``cleaning.HELD_DECODE_BYTES`` of rows and ``cleaning.HELD_DECODE_SEGMENTS`` segments: the same bytes and counts
again, the bounds held, and every mapping the task opens closed by the task however it ends.

The key hashes of a group's output (for the transaction state the first pass leaves) are derived only when a
marker survives somewhere in the partition: every group's then, the last group's never otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jobs.engine.compact.cleaning as cleaning
from jobs.engine.compact.cleaning import compact_partition, write_rows
from jobs.rules.config import TopicConfig
from segment_io.decode import decode_segment_and_headers, hash_keys
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.layout import list_log_dir
from segment_io.storage import LocalStorage, open_storage
from tests.support.cleaning import partition_task, staged_files

T0 = 1_700_000_000_000
NOW = T0 + 9 * 86_400_000
TOPIC = "mixed"


def _source(root: Path) -> Path:
    """Two partitions of about ten 16 KiB segments: transactions (some aborted), tombstones, headers, zstd."""
    log_dir = root / "src"
    generate_log_dir(GenerateSpec(topics=(TOPIC,), partitions=2, records=1500, segment_bytes=16 << 10, codec=4,
                                  tombstone_share=0.05, transactional_share=0.3, aborted_share=0.3, headers=True,
                                  value_bytes=60, start_ms=T0, span_ms=7 * 86_400_000, seed=7), str(log_dir))
    return log_dir


def _checkpoint(source: Path, partition: int, where: str | None) -> int | None:
    """No cleaner checkpoint, one at the third segment's base offset (``segment``) or inside it (``inside``)."""
    if where is None:
        return None
    listing = list_log_dir(LocalStorage(), str(source)).partitions[(TOPIC, partition)]
    return listing.segments[2].base_offset + (0 if where == "segment" else 7)


def _run(source: Path, name: str, partition: int, monkeypatch, *, bound: int, held: int = -1,
         max_keys: int | None = None, checkpoint: int | None = None, config: TopicConfig | None = None,
         ok: bool = True):
    """``compact_partition`` on a copy of ``source`` with ``SINGLE_DECODE_BYTES = bound`` and
    ``HELD_DECODE_BYTES = held`` (by default, -1, nothing held: a range over ``bound`` is decoded twice): its outcome,
    the staged files' bytes, the map it built, how many times each dirty segment was decoded for the map (key hashes),
    how many times each segment was decoded in full, the task and the dirty segments."""
    log_dir = source.parent / name
    shutil.copytree(source, log_dir, copy_function=shutil.copy2)
    maps, key_hash_decodes, full_decodes = [], {}, {}

    def spy(counts, real):
        def call(data, *, path, **kwargs):
            counts[path] = counts.get(path, 0) + 1
            return real(data, path=path, **kwargs)
        return call

    def build_offset_map(*args, **kwargs):
        maps.append(real_build(*args, **kwargs))
        return maps[-1]

    real_build = cleaning.build_offset_map
    real_mapped = cleaning.PartitionCleaner.mapped
    mappings: list[_Mapping] = []

    def mapped(self, base):
        mappings.append(_Mapping(real_mapped(self, base)))  # held here: only an explicit close closes it
        return mappings[-1]

    with monkeypatch.context() as m:
        m.setattr(cleaning.PartitionCleaner, "mapped", mapped)
        m.setattr(cleaning, "SINGLE_DECODE_BYTES", bound)
        m.setattr(cleaning, "HELD_DECODE_BYTES", held)
        if held < 0:  # nothing held at all, the first group's segments neither
            m.setattr(cleaning, "HELD_DECODE_SEGMENTS", 0)
        m.setattr(cleaning, "build_offset_map", build_offset_map)
        m.setattr(cleaning, "decode_key_hashes_bytes", spy(key_hash_decodes, cleaning.decode_key_hashes_bytes))
        m.setattr(cleaning, "decode_segment_and_headers", spy(full_decodes, cleaning.decode_segment_and_headers))
        task = partition_task(log_dir, TOPIC, partition, NOW, max_keys=max_keys, cleaner_checkpoint=checkpoint,
                              config=config)
        out = compact_partition(task)
    assert (out.error is None) == ok, out.error
    # every mapping the task opened is closed by the task (not left to the garbage collector), those the map's pass
    # kept for the clean too
    assert [m for m in mappings if m.open] == []
    staged = staged_files(task, out)
    omap = maps[0] if maps else None  # none when the map.s pass failed
    files = {s.base_offset: s.log.uri for s in task.listing.segments}
    dirty = [files[s.base_offset] for s in task.state.segments if s.next_offset > task.plan.first_dirty_offset
             and s.base_offset < task.plan.first_uncleanable_offset]
    # the segments beyond the round are read for the state the pass leaves (tail_batches): not the map's decodes
    map_decodes = {uri: n for uri, n in key_hash_decodes.items() if uri in dirty}
    return out, staged, omap, map_decodes, full_decodes, task, dirty


class _Mapping:
    """A segment mapping the task opened (``PartitionCleaner.mapped``), and whether it is still open."""

    def __init__(self, context) -> None:
        self.context, self.open = context, False

    def __enter__(self):
        self.open = True
        return self.context.__enter__()

    def __exit__(self, *exc):
        self.open = False
        return self.context.__exit__(*exc)


def _same_map(a, b, task) -> None:
    assert (a.latest_offset, a.full, a.records_read, a.offset_map.size) == \
        (b.latest_offset, b.full, b.records_read, b.offset_map.size)
    storage = task.storage
    for seg in task.listing.segments:  # every key of the partition: mapped to the same offset, or to none
        records, _ = decode_segment_and_headers(storage.read(seg.log.uri), allow_truncated_tail=True)
        hi, lo = hash_keys(records.column("key"))
        assert np.array_equal(a.offset_map.get(hi, lo), b.offset_map.get(hi, lo))


def _outcome(out):
    return out.stats, [(g.old_bases, g.changed, g.bytes_before, g.bytes_after, g.records_before, g.records_after,
                        g.staged_suffixes, g.mtime_ms, g.corrupt_indexes) for g in out.groups], out.end_offset, \
        out.map_full


HELD = 64 << 20  #: a bound that holds every dirty segment of these partitions


@pytest.mark.parametrize("how", ["small range", "held"])
@pytest.mark.parametrize("checkpoint", [None, "segment", "inside"])
@pytest.mark.parametrize("partition", [0, 1])
def test_one_decode_gives_the_map_bytes_and_counts_of_two(tmp_path, monkeypatch, checkpoint, partition, how):
    # "small range": a dirty range within SINGLE_DECODE_BYTES, read whole; "held": over it, its segments mapped,
    # decoded once and kept for the clean
    source = _source(tmp_path)
    at = _checkpoint(source, partition, checkpoint)
    bounds = {"bound": cleaning.SINGLE_DECODE_BYTES} if how == "small range" else {"bound": -1, "held": HELD}
    once = _run(source, "once", partition, monkeypatch, checkpoint=at, **bounds)
    twice = _run(source, "twice", partition, monkeypatch, bound=-1, checkpoint=at)
    out, staged, omap, key_hash_decodes, full_decodes, task, dirty = once
    assert staged and staged == twice[1]
    assert _outcome(out) == _outcome(twice[0])
    assert out.stats["duplicates_removed"] > 0 and out.stats["aborted_records_removed"] > 0
    _same_map(omap, twice[2], task)
    # once: no key-hash decode of a dirty segment, each decoded in full once; twice: both, for each
    assert key_hash_decodes == {} and all(full_decodes[uri] == 1 for uri in dirty)
    assert twice[3] == {uri: 1 for uri in twice[6]} and all(twice[4][uri] >= 1 for uri in twice[6])
    if checkpoint is not None:  # the dirty range starts after the first segments, which the map reads in no case
        assert task.listing.segments[0].log.uri not in dirty and task.listing.segments[1].log.uri not in dirty
        assert task.listing.segments[0].log.uri in full_decodes  # cleaned, from a decode of its own


def test_a_map_that_fills_gives_the_same_round(tmp_path, monkeypatch):
    source = _source(tmp_path)
    once = _run(source, "once", 0, monkeypatch, bound=cleaning.SINGLE_DECODE_BYTES, max_keys=300)
    twice = _run(source, "twice", 0, monkeypatch, bound=-1, max_keys=300)
    assert once[2].full and once[0].map_full
    assert once[1] and once[1] == twice[1] and _outcome(once[0]) == _outcome(twice[0])
    _same_map(once[2], twice[2], once[5])
    # the segments of the round were decoded once; those beyond it are read for the state the pass leaves
    task = once[5]
    in_round = {f.log.uri for f in task.listing.segments if f.base_offset < once[2].end_offset}
    assert in_round and not in_round & set(once[3]) and all(once[4][uri] == 1 for uri in in_round)


#: groups of one 16 KiB segment each: the first group the clean takes is the first segment alone
ONE_SEGMENT_GROUPS = TopicConfig.from_settings({"cleanup.policy": "compact", "segment.bytes": 20_000})


@pytest.mark.parametrize("limit", ["bytes", "segments"])
def test_held_decodes_stop_at_their_bound_and_the_rest_is_decoded_twice(tmp_path, monkeypatch, limit):
    # each kept decode counted as 1,000 bytes. The first segment is the first group's, kept whatever the bytes; a
    # bound of 3,000 bytes keeps the next three, and the fifth is decoded in full for the map, found over the
    # bound and decoded again by its clean. A bound of 3 segments keeps the first three, and the fourth is known
    # to be over it before its decode: the map's pass takes only its key hashes, as of the rest.
    source = _source(tmp_path)
    monkeypatch.setattr(cleaning._Decoded, "held_bytes", property(lambda self: 1_000))
    monkeypatch.setattr(cleaning, "ROW_BYTES_AT_LEAST", 0)  # no estimate before the decode: the count decides
    if limit == "segments":
        monkeypatch.setattr(cleaning, "HELD_DECODE_SEGMENTS", 3)
    held = _run(source, "held", 0, monkeypatch, bound=-1, held=3_000 if limit == "bytes" else HELD,
                config=ONE_SEGMENT_GROUPS)
    twice = _run(source, "twice", 0, monkeypatch, bound=-1, held=-1, config=ONE_SEGMENT_GROUPS)
    out, staged, _, key_hash_decodes, full_decodes, _, dirty = held
    assert len(dirty) > 6
    assert staged and staged == twice[1] and _outcome(out) == _outcome(twice[0])
    kept = 4 if limit == "bytes" else 3
    assert key_hash_decodes == {uri: 1 for uri in dirty[kept + (limit == "bytes"):]}
    assert [full_decodes[uri] for uri in dirty] == \
        [1] * kept + [2 if limit == "bytes" else 1] + [1] * (len(dirty) - kept - 1)


def test_the_first_group_s_segments_are_kept_beyond_the_bytes_bound(tmp_path, monkeypatch):
    # one group holds every segment (Kafka's default segment.bytes): its clean holds all their rows at once
    # anyway, so the map's pass keeps every decode whatever HELD_DECODE_BYTES says
    source = _source(tmp_path)
    held = _run(source, "held", 0, monkeypatch, bound=-1, held=0)
    twice = _run(source, "twice", 0, monkeypatch, bound=-1, held=-1)
    out, staged, _, key_hash_decodes, full_decodes, task, dirty = held
    assert len(task.plan.groups) == 1 and staged and staged == twice[1] and _outcome(out) == _outcome(twice[0])
    assert key_hash_decodes == {} and all(full_decodes[uri] == 1 for uri in dirty)
    # with one segment a group, only the first is kept: the others go to the map as key hashes
    small = _run(source, "small", 0, monkeypatch, bound=-1, held=0, config=ONE_SEGMENT_GROUPS)
    assert small[3] == {uri: 1 for uri in small[6][1:]}


def test_a_group_of_kept_and_decoded_again_segments_is_cleaned_as_one_decoded_twice(tmp_path, monkeypatch):
    # groups of a few segments; the second group has a kept segment and others the clean decodes, whose key
    # hashes the clean computes beside the kept ones
    source = _source(tmp_path)
    config = TopicConfig.from_settings({"cleanup.policy": "compact", "segment.bytes": 40_000})
    twice = _run(source, "twice", 0, monkeypatch, bound=-1, held=-1, config=config)
    first, second = (len(g) for g in twice[5].plan.groups[:2])
    assert second >= 2
    # every segment of the first group kept, and one more: the second group's first
    monkeypatch.setattr(cleaning, "HELD_DECODE_SEGMENTS", first + 1)
    out, staged, _, key_hash_decodes, full_decodes, _, dirty = _run(source, "held", 0, monkeypatch, bound=-1,
                                                                     held=HELD, config=config)
    assert staged and staged == twice[1] and _outcome(out) == _outcome(twice[0])
    assert key_hash_decodes == {uri: 1 for uri in dirty[first + 1:]} and all(full_decodes[uri] == 1 for uri in dirty)


def test_a_map_that_fills_with_kept_decodes_gives_the_same_round(tmp_path, monkeypatch):
    source = _source(tmp_path)
    held = _run(source, "held", 0, monkeypatch, bound=-1, held=HELD, max_keys=300)
    twice = _run(source, "twice", 0, monkeypatch, bound=-1, held=-1, max_keys=300)
    assert held[2].full and held[1] and held[1] == twice[1] and _outcome(held[0]) == _outcome(twice[0])
    _same_map(held[2], twice[2], held[5])


def test_a_task_that_may_hand_over_keeps_no_decode(tmp_path, monkeypatch):
    # memory first: a map that fills hands the partition over to external-sort, and no clean comes for what a
    # map's pass would have kept
    source = _source(tmp_path)
    calls = []
    real = cleaning.PartitionCleaner._decode_whole
    monkeypatch.setattr(cleaning.PartitionCleaner, "_decode_whole",
                        lambda self, base, **kw: calls.append(base) or real(self, base, **kw))
    task = partition_task(source, TOPIC, 0, NOW)
    cleaner = cleaning.PartitionCleaner(task, [])
    with monkeypatch.context() as m:
        m.setattr(cleaning, "SINGLE_DECODE_BYTES", -1)
        omap = cleaner.build_map(_Collector())
    assert omap.records_read > 0 and calls == [] and cleaner.decoded == {}
    cleaner.close()


class _Collector:
    """A hand-over's collector that keeps nothing (see PieceCollector)."""

    def add(self, base_offset, table) -> None:
        pass


def test_a_segment_s_bytes_that_are_not_mapped_count_as_held():
    records, headers = decode_segment_and_headers(b"", value_refs=True)
    hashes = hash_keys(records.column("key"))
    assert cleaning._Decoded(b"x" * 1000, records, headers, hashes).held_bytes == \
        cleaning._Decoded(b"", records, headers, hashes).held_bytes + 1000


def test_a_segment_whose_rows_could_not_fit_is_not_decoded_in_full_by_the_map_s_pass(tmp_path, monkeypatch):
    # the second dirty segment (the first outside the first group): a bound one byte below what its rows hold at
    # the least, and the map's pass takes its key hashes alone (and so of every later one), rather than decoding
    # it to drop it
    source = _source(tmp_path)
    probe = _run(source, "probe", 0, monkeypatch, bound=-1, held=-1, config=ONE_SEGMENT_GROUPS)
    files = {s.base_offset: s.log.uri for s in probe[5].listing.segments}
    second = next(s for s in probe[5].state.segments if files[s.base_offset] == probe[6][1])
    records = second.record_count if second.record_count is not None else second.next_offset - second.base_offset
    _, staged, _, key_hash_decodes, full_decodes, _, dirty = _run(
        source, "under", 0, monkeypatch, bound=-1, held=records * cleaning.ROW_BYTES_AT_LEAST - 1,
        config=ONE_SEGMENT_GROUPS)
    assert staged == probe[1] and key_hash_decodes == {uri: 1 for uri in dirty[1:]}
    assert all(full_decodes[uri] == 1 for uri in dirty)
    at = _run(source, "at", 0, monkeypatch, bound=-1, held=records * cleaning.ROW_BYTES_AT_LEAST,
              config=ONE_SEGMENT_GROUPS)
    second_there = at[6][1]  # the same segment in the "at" run's copy
    assert second_there not in at[3] and at[4][second_there] == 2  # at the estimate: decoded in full, dropped, again


def test_a_decoded_row_holds_at_least_row_bytes_at_least_besides_its_key(tmp_path):
    source = _source(tmp_path)
    for seg in list_log_dir(LocalStorage(), str(source)).partitions[(TOPIC, 0)].segments[:3]:
        records, headers = decode_segment_and_headers(Path(seg.log.uri).read_bytes(), value_refs=True)
        decoded = cleaning._Decoded(b"", records, headers, hash_keys(records.column("key")))
        key_bytes = sum(len(k) for k in records.column("key").to_pylist() if k is not None)
        assert (decoded.held_bytes - key_bytes) / records.num_rows >= cleaning.ROW_BYTES_AT_LEAST


def test_a_clean_that_fails_closes_what_the_map_s_pass_kept(tmp_path, monkeypatch):
    # the first group's clean fails: the decodes kept for the later groups are never used, and their mappings close
    source = _source(tmp_path)
    monkeypatch.setattr(cleaning, "clean_records", _failing_clean)
    config = TopicConfig.from_settings({"cleanup.policy": "compact", "segment.bytes": 40_000})  # several groups
    out, staged, _, _, full_decodes, _, dirty = _run(source, "held", 0, monkeypatch, bound=-1, held=HELD,
                                                     config=config, ok=False)
    assert "cleaning failed on purpose" in str(out.error) and staged == {}
    assert all(full_decodes[uri] == 1 for uri in dirty)  # every dirty segment was kept by the map's pass


def test_a_corrupt_segment_in_the_held_range_fails_its_partition_with_its_place_and_closes_its_mapping(tmp_path,
                                                                                                  monkeypatch):
    source = _source(tmp_path)
    listing = list_log_dir(LocalStorage(), str(source)).partitions[(TOPIC, 0)]
    path = Path(listing.segments[3].log.uri)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    path.write_bytes(bytes(data))
    out, staged, *_ = _run(source, "held", 0, monkeypatch, bound=-1, held=HELD, ok=False)
    assert staged == {} and path.name in str(out.error) and "CRC" in str(out.error)


def _failing_clean(*args, **kwargs):
    raise RuntimeError("cleaning failed on purpose")


def test_a_partition_over_the_bound_is_decoded_twice(tmp_path, monkeypatch):
    source = _source(tmp_path)
    at = _run(source, "at", 0, monkeypatch, bound=cleaning.SINGLE_DECODE_BYTES)
    dirty_bytes = sum(s.size_bytes for s in at[5].state.segments
                      if at[5].listing.segments[at[5].state.segments.index(s)].log.uri in at[6])
    exact = _run(source, "exact", 0, monkeypatch, bound=dirty_bytes)
    over = _run(source, "over", 0, monkeypatch, bound=dirty_bytes - 1)
    assert exact[3] == {}  # at the bound: one decode
    assert len(over[3]) == len(over[6]) and all(n == 1 for n in over[3].values())  # one byte over: two
    assert over[1] == exact[1] and _outcome(over[0]) == _outcome(exact[0])


@pytest.mark.parametrize("transactions", [False, True])
def test_a_clean_derives_no_key_hashes_of_its_output(tmp_path, monkeypatch, transactions):
    # markers are judged by the state of the log as scanned (as Kafka judges them by what its pass traverses),
    # so no group's output is hashed again to derive the state a clean leaves
    log_dir = tmp_path / "logs"
    generate_log_dir(GenerateSpec(topics=(TOPIC,), partitions=1, records=1500, segment_bytes=16 << 10,
                                  tombstone_share=0.05, transactional_share=0.3 if transactions else 0.0,
                                  aborted_share=0.3, start_ms=T0, span_ms=7 * 86_400_000, seed=5), str(log_dir))
    calls = []
    real = cleaning.key_hash_table
    monkeypatch.setattr(cleaning, "key_hash_table", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    # groups of two or three segments
    config = TopicConfig.from_settings({"cleanup.policy": "compact", "segment.bytes": 40_000})
    out = compact_partition(partition_task(log_dir, TOPIC, 0, NOW, config=config))
    assert out.error is None and len(out.groups) > 2
    assert calls == []


REPO = Path(__file__).resolve().parents[4]

# --------------------------------------------------------------------------------------------------
# Work files
# --------------------------------------------------------------------------------------------------

_WRITE_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
import numpy as np
from jobs.engine.compact.cleaning import write_rows
from segment_io.storage import open_storage
from segment_io.errors import SegjobsError

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
target = sys.argv[1]
try:
    write_rows(open_storage(target), target, np.arange(10_000, dtype=np.int64))
except SegjobsError as exc:
    print("refused:", exc)
"""


def test_a_work_file_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """A second attempt writing the same work file fails half-way (here: past a file size limit); the first
    attempt's whole file is still what a reader finds, and no temporary file is left."""
    target = tmp_path / "bucket-0"
    first = np.arange(100, dtype=np.int64)
    write_rows(open_storage(str(target)), str(target), first)
    assert np.array_equal(np.fromfile(target, "<i8"), first)
    done = subprocess.run([sys.executable, "-c", _WRITE_UNDER_A_FILE_SIZE_LIMIT, str(target)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0 and "refused:" in done.stdout, done.stdout + done.stderr
    assert np.array_equal(np.fromfile(target, "<i8"), first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bucket-0"]
