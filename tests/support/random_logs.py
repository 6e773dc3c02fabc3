"""Random partition logs for property tests of compaction: the hypothesis strategy (:func:`log_specs`), the log a
spec describes, its segment files and the topic config to compact it with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import strategies as st

from jobs.rules.config import ConfigSet
from segment_io.schema import RECORD_SCHEMA
from segment_io.segment_writer import write_segment
from tests.support.builders import LogBuilder, Rec, rec, write_log

TOPIC, PARTITION = "prop", 0
SECOND = 1_000
HOUR = 3_600 * SECOND
DAY = 24 * HOUR
RETENTION = DAY  #: delete.retention.ms
NOW1 = 1_700_000_000_000  #: the first clean
NOW2 = NOW1 + RETENTION + 1  #: past every horizon the first clean stamps


KEYS = [b"a", b"b", b"c", b"d", b"e"]
#: keys twice and None once: about one record in eleven is keyless
RECORD_KEYS = st.sampled_from([*KEYS, *KEYS, None])
#: None is a tombstone (about one in five)
VALUES = st.sampled_from([b"", b"v1", b"value-2", b"x" * 60, None])
HEADERS = st.sampled_from([(), (("h", b"1"),), (("h", None), ("trace", b""))])
#: record timestamp relative to the builder's clock; None takes the clock (which ticks 1 ms per record)
STAMP = st.one_of(st.none(), st.integers(-5 * SECOND, 5 * SECOND))
CODECS = st.sampled_from([0, 0, 1, 2, 3, 4])  # none (twice as likely), gzip, snappy, lz4, zstd
TXN_PIDS = (1, 2, 3)
IDEMPOTENT_PID = 9
#: where the data's clock starts: long expired producers, or producers still active at NOW1 (and not at NOW2)
CLOCK_STARTS = st.sampled_from([NOW1 - 30 * DAY, NOW1 - 2 * HOUR])
TICKS = st.sampled_from([SECOND, HOUR, DAY])


#: (key, value, headers, timestamp relative to the clock or None)
Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int | None]


@dataclass(frozen=True)
class LogSpec:
    """A random partition: the operations applied to a ``LogBuilder``, in order (printed on failure).

    Operations: ``("data", records, codec, timestamp_type, idempotent)``, ``("txn", pid, records, codec)``,
    ``("end", pid, commit, bump_epoch)`` (a COMMIT or ABORT marker for the producer's open transaction,
    optionally written with the producer's next epoch), ``("roll",)``
    and ``("tick", ms)`` (the clock jumps).
    """

    clock: int
    ops: tuple[tuple, ...]
    empty_active: bool  #: end with an empty active segment
    segment_bytes: int  #: the topic's segment.bytes: small values split the cleaned range into several groups
    #: when not None, the partition is first written only below the base of the segment this ``roll`` (by
    #: index among the rolls) starts, and cleaned at NOW1; the rest arrives afterwards as new dirty segments
    split: int | None


records_st = st.lists(st.tuples(RECORD_KEYS, VALUES, HEADERS, STAMP), min_size=1, max_size=4).map(tuple)


@st.composite
def log_specs(draw: st.DrawFn) -> LogSpec:
    """A random partition log; markers only ever close a transaction that is open."""
    open_txns: set[int] = set()
    ops: list[tuple] = []
    for _ in range(draw(st.integers(1, 24))):
        kinds = ["data", "data", "txn", "txn", "roll", "roll", "tick"] + ["end"] * (2 * bool(open_txns))
        kind = draw(st.sampled_from(kinds))
        if kind == "data":
            ops.append(("data", draw(records_st), draw(CODECS), draw(st.sampled_from([0, 0, 1])), draw(st.booleans())))
        elif kind == "txn":
            pid = draw(st.sampled_from(TXN_PIDS))
            open_txns.add(pid)
            ops.append(("txn", pid, draw(records_st), draw(CODECS)))
        elif kind == "end":
            pid = draw(st.sampled_from(sorted(open_txns)))
            open_txns.discard(pid)
            # the last flag: the marker carries the bumped epoch (a coordinator's fencing abort, or any marker of
            # Kafka 4's transactions v2), after which the producer writes in the new epoch from sequence 0
            ops.append(("end", pid, draw(st.booleans()), draw(st.booleans())))
        elif kind == "roll":
            ops.append(("roll",))
        else:
            ops.append(("tick", draw(TICKS)))
    if not any(op[0] in ("data", "txn") for op in ops):
        ops.append(("data", draw(records_st), 0, 0, False))
    rolls = sum(op[0] == "roll" for op in ops)
    split = draw(st.one_of(st.none(), st.integers(0, rolls - 1))) if rolls else None
    return LogSpec(draw(CLOCK_STARTS), tuple(ops), draw(st.booleans()), draw(st.sampled_from([1 << 30, 300])), split)


def _records(records: tuple[Record, ...], clock: int) -> list[Rec]:
    return [rec(k, v, headers=list(h), timestamp=None if s is None else max(0, clock + s)) for k, v, h, s in records]


@dataclass(frozen=True)
class BuiltLog:
    """A spec rendered: every record (RECORD_SCHEMA), where each ``roll`` started a segment, and the base of
    the empty active segment to create (None when the last segment holds batches)."""

    table: pa.Table
    roll_bases: tuple[int, ...]
    empty_tail: int | None


def build_log(spec: LogSpec) -> BuiltLog:
    """Apply ``spec``'s operations to a ``LogBuilder``."""
    log = LogBuilder(TOPIC, PARTITION, timestamp=spec.clock)
    sequences: dict[int, int] = {}
    epochs: dict[int, int] = {}
    rolls: list[int] = []

    def next_sequence(pid: int, n: int) -> int:
        seq = sequences.get(pid, 0)
        sequences[pid] = seq + n
        return seq

    for op in spec.ops:
        if op[0] == "data":
            _, records, codec, ts_type, idempotent = op
            producer = dict(pid=IDEMPOTENT_PID, epoch=0, base_sequence=next_sequence(IDEMPOTENT_PID, len(records))) \
                if idempotent else {}
            log.batch(_records(records, log.clock), codec=codec, timestamp_type=ts_type, **producer)
        elif op[0] == "txn":
            _, pid, records, codec = op
            log.txn_batch(pid, epochs.get(op[1], 0), _records(records, log.clock),
                          base_sequence=next_sequence(pid, len(records)), codec=codec)
        elif op[0] == "end":
            _, pid, commit, bump = op
            epoch = epochs.get(pid, 0) + (1 if bump else 0)
            (log.commit if commit else log.abort)(pid, epoch)
            if bump:
                epochs[pid] = epoch
                sequences[pid] = 0
        elif op[0] == "roll":
            log.roll()
            rolls.append(log.segment_base_offset)
        else:
            log.clock += op[1]
    table = log.table()
    if spec.empty_active:
        log.roll()
    tail = log.segment_base_offset
    return BuiltLog(table, tuple(rolls), None if tail in set(table["segment_base_offset"].to_pylist()) else tail)


def write_segments(built: BuiltLog, partition_dir: Path, *, start: int = 0, stop: int | None = None) -> None:
    """Write the segments of ``built`` whose base offset lies in [start, stop) (all from ``start`` when
    ``stop`` is None) into ``partition_dir``; with no ``stop`` the empty active segment too."""
    bases = pc.field("segment_base_offset")
    keep = bases >= start if stop is None else (bases >= start) & (bases < stop)
    rows = built.table.filter(keep)
    if rows.num_rows:
        write_log(rows, partition_dir)
    if stop is None and built.empty_tail is not None:
        # the builder rolled after its last batch: the active segment exists, empty, as on a broker
        partition_dir.mkdir(parents=True, exist_ok=True)
        write_segment(RECORD_SCHEMA.empty_table(), str(partition_dir / f"{built.empty_tail:020d}.log"))


def topic_config(spec: LogSpec | None = None) -> ConfigSet:
    settings = [f"{TOPIC}:cleanup.policy=compact", f"{TOPIC}:delete.retention.ms={RETENTION}"]
    if spec is not None:
        settings.append(f"{TOPIC}:segment.bytes={spec.segment_bytes}")
    return ConfigSet().with_overrides(settings)
