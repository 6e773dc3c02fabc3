"""Log dirs of several small partitions, for the tests that clean a bin's partitions together against one at a
time (tests/jobs/engine/compact/test_bin_cleaning.py): the hypothesis strategy (:func:`bin_specs`), the source a spec
describes (:func:`write_source`), one in-process run of ``compact`` (:func:`compact_in_process`) and what a run
leaves behind (:func:`observe`, :func:`assert_same_runs`).

A source has two parts: ``first/`` is the log dir the first round cleans, ``rest/`` the segments appended to it
before the second round (so that the second round has dirty data and cleans the first round's output again,
past some tombstones' delete horizons)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from jobs import api
from jobs.rules.config import ConfigSet
from segment_io.checkpoint import write_offset_checkpoint
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, partition_dir_name, segment_file_name
from segment_io.storage import LocalStorage
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.legacy_messages import legacy_message
from tests.support.random_logs import (
    CLOCK_STARTS,
    CODECS,
    DAY,
    HOUR,
    NOW1,
    TICKS,
    LogSpec,
    build_log,
    records_st,
    write_segments,
)

#: the second round: past the horizons the first stamps with delete.retention.ms up to a day, not with more
NOW2 = NOW1 + DAY + 1
TOPIC_NAMES = ("alpha", "beta", "gamma")
#: 0 removes a tombstone in the round that stamps it (a second pass over the output); 3 days: not by NOW2
RETENTIONS = st.sampled_from([HOUR, DAY, 3 * DAY, HOUR, DAY, 0])
#: a huge segment.bytes cleans a partition as one segment group; 400 bytes splits it into several
SEGMENT_BYTES = st.sampled_from([1 << 30] * 5 + [400])
#: far below any dirty ratio a partition with new closed segments has: every such partition is due
DIRTY_RATIO = 0.01
#: segment files: their last-modified time is data (retention, legacy tombstones), so runs must agree on it too
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
#: what two runs of the same work legitimately differ in: timings and the run's identity
RUN_SPECIFIC = frozenset({"run_id", "started_ms", "finished_ms", "elapsed_s", "spark_startup_s", "task_seconds",
                          "seconds", "wall_seconds", "eta_s"})


@dataclass(frozen=True)
class TopicSpec:
    name: str
    delete_retention_ms: int
    segment_bytes: int


@dataclass(frozen=True)
class PartitionSpec:
    """One partition: its log (``log.split``, a roll's index: where the second round's segments start; its
    ``segment_bytes`` is unused, the topic's applies) and ``checkpoint``, a roll's index: a
    cleaner-offset-checkpoint entry at that segment's base before the first round (a prefix taken as clean)."""

    topic: str
    partition: int
    log: LogSpec
    checkpoint: int | None


@dataclass(frozen=True)
class BinSpec:
    topics: tuple[TopicSpec, ...]
    partitions: tuple[PartitionSpec, ...]
    #: with :data:`BALLAST` (left out of the spec's fields: its repr would fill a failure's report)
    ballast: bool

    def all_topics(self) -> tuple[TopicSpec, ...]:
        return self.topics + (BALLAST_TOPIC,) * self.ballast

    def all_partitions(self) -> tuple[PartitionSpec, ...]:
        return self.partitions + (BALLAST,) * self.ballast

    def config(self) -> ConfigSet:
        return ConfigSet().with_overrides([s for t in self.all_topics() for s in compacted(
            t.name, f"delete.retention.ms={t.delete_retention_ms}", f"segment.bytes={t.segment_bytes}")])


def compacted(topic: str, *settings: str) -> list[str]:
    """The ``--set`` overrides of a compacted topic due as soon as it holds dirty data, and ``settings``."""
    return [f"{topic}:{s}" for s in ("cleanup.policy=compact", f"min.cleanable.dirty.ratio={DIRTY_RATIO}",
                                     *settings)]


def _ballast() -> LogSpec:
    ops = [("data", ((b"u%d" % i, b"x" * 1000, (), None),), 0, 0, False) for i in range(64)]
    # the first round sees two segments (one to clean: the ballast is due), the second one more
    return LogSpec(NOW1 - 30 * DAY, (*ops, ("roll",), *ops, ("roll",), *ops, ("roll",), *ops[:1]), False, 0, 1)


#: A partition in a topic of its own, ordered after the others, of more bytes than they hold (1 KB values, all
#: kept) in each round: a run's bins hold at most half its bytes, so the other partitions share one bin (rather
#: than falling into bins of one or two as their sizes vary), and this one gets a bin of its own.
BALLAST_TOPIC = TopicSpec("zeta", DAY, 1 << 30)
BALLAST = PartitionSpec(BALLAST_TOPIC.name, 0, _ballast(), None)


@st.composite
def plain_log_specs(draw: st.DrawFn) -> LogSpec:
    """A partition of 1-3 segments without transactions: duplicate keys, tombstones, keyless records, headers,
    every codec, both timestamp types, idempotent batches (of one producer, expired or active at NOW1)."""
    ops: list[tuple] = []
    for segment in range(draw(st.sampled_from([1, 2, 3, 3]))):
        if segment:
            ops.append(("roll",))
        for _ in range(draw(st.integers(1, 4))):
            if draw(st.integers(0, 4)) == 0:
                ops.append(("tick", draw(TICKS)))
            ops.append(("data", draw(records_st), draw(CODECS), draw(st.sampled_from([0, 0, 1])),
                        draw(st.booleans())))
    rolls = sum(op[0] == "roll" for op in ops)
    # mostly a split that leaves both rounds something to clean (one closed segment before it, one after)
    splits = [st.none(), st.integers(0, rolls - 1)] + [st.integers(1, rolls - 1)] * 2 * (rolls > 1)
    split = draw(st.one_of(splits)) if rolls else None
    return LogSpec(draw(CLOCK_STARTS), tuple(ops), draw(st.booleans()), 0, split)


@st.composite
def bin_specs(draw: st.DrawFn) -> BinSpec:
    """2-12 small partitions across 1-3 topics of different configs (and mostly :data:`BALLAST`)."""
    topics = tuple(TopicSpec(name, draw(RETENTIONS), draw(SEGMENT_BYTES))
                   for name in TOPIC_NAMES[:draw(st.integers(1, len(TOPIC_NAMES)))])
    # mostly many: a bin of the run holds about half its partitions, and only a bin of several has a choice
    count = draw(st.one_of(st.integers(max(2, len(topics)), 12), st.integers(8, 12)))
    # every topic gets a partition, the rest go anywhere
    owners = list(range(len(topics))) + draw(st.lists(st.integers(0, len(topics) - 1), min_size=count - len(topics),
                                                      max_size=count - len(topics)))
    partitions = []
    for i, topic in enumerate(topics):
        for p in range(owners.count(i)):
            log = draw(plain_log_specs())
            rolls = sum(op[0] == "roll" for op in log.ops)
            first_rolls = rolls if log.split is None else log.split
            checkpoint = draw(st.one_of(st.none(), st.integers(0, first_rolls - 1))) if first_rolls else None
            partitions.append(PartitionSpec(topic.name, p, log, checkpoint))
    return BinSpec(topics, tuple(partitions), draw(st.sampled_from([True, True, True, False])))


@dataclass(frozen=True)
class Source:
    first: Path  #: the log dir of the first round
    rest: Path  #: partition dirs of the segments appended before the second round


def write_source(spec: BinSpec, root: Path) -> Source:
    """The log dir ``spec`` describes, under ``root``."""
    source = Source(root / "first", root / "rest")
    source.first.mkdir(parents=True)
    source.rest.mkdir(parents=True)
    checkpoints = {}
    for p in spec.all_partitions():
        built = build_log(p.log)
        name = partition_dir_name(p.topic, p.partition)
        if p.log.split is None:
            write_segments(built, source.first / name)
        else:
            base = built.roll_bases[p.log.split]
            write_segments(built, source.first / name, stop=base)
            write_segments(built, source.rest / name, start=base)
        if p.checkpoint is not None:
            checkpoints[(p.topic, p.partition)] = built.roll_bases[p.checkpoint]
    if checkpoints:
        write_offset_checkpoint(LocalStorage(), str(source.first / CLEANER_OFFSET_CHECKPOINT), checkpoints)
    return source


def fresh_copy(log_dir: Path, into: Path) -> Path:
    """``log_dir`` copied to ``into/logs`` (last-modified times kept), with nothing else left in ``into``: every
    run of a comparison works at the same path, so the paths its errors and warnings name agree too."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(log_dir, into / "logs")
    return into / "logs"


def append(rest: Path, log_dir: Path) -> None:
    """The segments of ``rest`` added to ``log_dir``'s partitions (new partitions too)."""
    shutil.copytree(rest, log_dir, dirs_exist_ok=True)


def compact_in_process(log_dir: Path, config: ConfigSet, now_ms: int, *, dry_run: bool = False,
                       **options: Any) -> api.CompactResult:
    """One ``compact`` run over ``log_dir`` at ``now_ms``, its tasks in this process (bins as on Spark);
    ``options``: more :class:`jobs.api.CompactOptions`."""
    options = api.CompactOptions(config=config, dry_run=dry_run, progress=lambda line: None, **options)
    return api.compact(log_dir, options, now=now_ms, seams=api.Seams(runner=api.InProcessTasks()))


@dataclass(frozen=True)
class RunView:
    """What a run left: every file of the log dir (relative path -> SHA-256, and for segment files their
    last-modified time), and its JSON report without what differs from run to run (:data:`RUN_SPECIFIC`)."""

    files: dict[str, tuple[str, int | None]]
    report: dict[str, Any]


def _without_run_specific(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_run_specific(v) for k, v in value.items() if k not in RUN_SPECIFIC}
    if isinstance(value, list):
        return [_without_run_specific(v) for v in value]
    return value


def log_dir_files(log_dir: Path) -> dict[str, tuple[str, int | None]]:
    """Every file below ``log_dir`` but the lock file (its own, whose content is nobody's business)."""
    files = {}
    for path in sorted(log_dir.rglob("*")):
        if path.is_file() and path.name != ".lock":
            mtime = path.stat().st_mtime_ns if path.suffix in SEGMENT_SUFFIXES else None
            files[str(path.relative_to(log_dir))] = (hashlib.sha256(path.read_bytes()).hexdigest(), mtime)
    return files


def observe(log_dir: Path, result: api.CompactResult) -> RunView:
    return RunView(log_dir_files(log_dir), _without_run_specific(json.loads(result.to_json())))


def assert_same_runs(off: RunView, on: RunView, what: str) -> None:
    """Equal runs, or an error that names the first differences (files, then partitions, then the rest)."""
    assert sorted(on.files) == sorted(off.files), (what, "file sets differ",
                                                   sorted(set(on.files) ^ set(off.files)))
    differ = [name for name in off.files if on.files[name] != off.files[name]]
    assert not differ, (what, "files differ (content or last-modified time)", differ)
    on_parts, off_parts = on.report["partitions"], off.report["partitions"]
    assert len(on_parts) == len(off_parts), (what, "partition counts differ")
    for a, b in zip(off_parts, on_parts):
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        assert not keys, (what, f"{a['topic']}-{a['partition']}", {k: (a.get(k), b.get(k)) for k in keys})
    assert on.report == off.report, (what, "reports differ",
                                     sorted(k for k in off.report if off.report[k] != on.report.get(k)))


# --------------------------------------------------------------------------------------------------
# Fixed partitions, for the example tests
# --------------------------------------------------------------------------------------------------


def plain_partition(partition_dir: Path, variant: int, *, value: bytes = b"v") -> None:
    """A small partition the together path can take (``variant`` varies its keys, from five that every
    partition draws on, and codecs): two closed
    segments with duplicates, a tombstone, a keyless record, an idempotent batch and a compressed one, then
    the active segment. ``value`` is every value's stem (1 KB values give the segments index entries)."""
    log = LogBuilder(partition_dir.name.rsplit("-", 1)[0], int(partition_dir.name.rsplit("-", 1)[1]),
                     timestamp=NOW1 - 3 * DAY)
    keys = [f"k{(variant + i) % 5}" for i in range(3 + variant % 3)]  # shared with other variants, in turn
    for i in range(8):
        log.batch([rec(keys[i % len(keys)], value + b"%d" % i)], codec=(variant + i) % 5 if i % 3 == 0 else 0)
    log.batch([rec(keys[0], value + b"p0"), rec(keys[1], value + b"p1")], pid=40 + variant, epoch=0,
              base_sequence=0)
    log.roll()
    log.batch([tombstone(keys[1]), rec(None, b"keyless"), rec(keys[2], value + b"late")])
    log.batch([rec(keys[0], value + b"last")])
    log.roll()
    log.batch([rec(keys[0], b"active")])
    write_log(log.table(), partition_dir)


def transactional_partition(partition_dir: Path) -> None:
    """A partition with a committed and an aborted transaction (markers: not for the together path)."""
    log = LogBuilder(partition_dir.name.rsplit("-", 1)[0], int(partition_dir.name.rsplit("-", 1)[1]),
                     timestamp=NOW1 - 3 * DAY)
    log.batch([rec("a", "1"), rec("b", "1")])
    log.txn_batch(7, 0, [rec("a", "2")])
    log.abort(7, 0)
    log.txn_batch(7, 0, [rec("b", "2")], base_sequence=1)
    log.commit(7, 0)
    log.batch([rec("a", "3")])
    log.roll()
    log.batch([rec("c", "active")])
    write_log(log.table(), partition_dir)


def legacy_partition(partition_dir: Path, mtime_ms: int) -> None:
    """A closed segment of magic-1 messages (duplicates and a tombstone), last modified at ``mtime_ms``, then a
    v2 active segment."""
    messages = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", None), (b"b", b"2"), (b"a", b"3")]
    partition_dir.mkdir(parents=True)
    closed = partition_dir / segment_file_name(0)
    closed.write_bytes(b"".join(legacy_message(1, i, k, v, timestamp=NOW1 - 3 * DAY + i)
                                for i, (k, v) in enumerate(messages)))
    os.utime(closed, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    log = LogBuilder(partition_dir.name.rsplit("-", 1)[0], start_offset=len(messages), timestamp=NOW1 - DAY)
    log.batch([rec("a", "active")])
    write_log(log.table(), partition_dir)


def keyed_partition(partition_dir: Path, records: int, *, keys: int, value_bytes: int) -> None:
    """``records`` single-record batches over ``keys`` keys in turn (values of ``value_bytes`` bytes) in two
    closed segments, then the active segment."""
    log = LogBuilder(partition_dir.name.rsplit("-", 1)[0], int(partition_dir.name.rsplit("-", 1)[1]),
                     timestamp=NOW1 - 3 * DAY)
    for i in range(records):
        if i == records // 2:
            log.roll()
        log.batch([rec(f"k{i % keys}", (b"%08d" % i * value_bytes)[:value_bytes])])
    log.roll()
    log.batch([rec("k0", "active")])
    write_log(log.table(), partition_dir)


def ballast_partition(log_dir: Path) -> str:
    """:data:`BALLAST`'s first round written into ``log_dir`` (whose other partitions hold less): its name."""
    name = partition_dir_name(BALLAST.topic, BALLAST.partition)
    built = build_log(BALLAST.log)
    write_segments(built, log_dir / name, stop=built.roll_bases[BALLAST.log.split])
    return name
