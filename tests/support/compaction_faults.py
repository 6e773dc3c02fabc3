"""The compaction job with its commit interrupted: the partition every fault test compacts, fault hooks that stop
or record the commit's steps, ``segjobs compact`` with a fault seam, and the checks of a partition after recovery."""

from __future__ import annotations

from pathlib import Path

from jobs.commands.cli import build_parser
from jobs.engine.runtime.seams import FaultHook, Seams
from segment_io.errors import SegjobsError
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.replay import comparable, read_segments, replay

T0 = 1_700_000_000_000
NOW = str(T0 + 10 * 86_400_000)
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n'
TOPIC = "t"


class SimulatedFault(SegjobsError):
    """Raised by the fault hook: the commit of one partition stops before the named step."""


class HardCrash(BaseException):
    """Raised by the fault hook to kill the whole run (nothing in segjobs catches it)."""


def build_partition(partition_dir: Path) -> None:
    """Two segments that compact into one (duplicates, an aborted transaction, a tombstone), then the
    active segment."""
    log = LogBuilder(TOPIC, 0, timestamp=T0)
    log.batch([rec("a", "1"), rec("b", "1")])  # 0-1
    log.txn_batch(5, 0, [rec("c", "aborted")])  # 2
    log.abort(5, 0)  # 3
    log.batch([rec("a", "2")])  # 4
    log.roll().batch([rec("b", "2")]).batch([tombstone("a")]).batch([rec("d", "1")])  # 5-7
    log.roll().batch([rec("z", "active")])  # 8
    write_log(log.table(), partition_dir)


def live_logs(files: dict[str, bytes], partition: str) -> list[bytes]:
    """The live .log contents of one partition, by base offset, from a name -> bytes map of the log dir."""
    names = sorted(n for n in files if n.startswith(partition + "/") and n.endswith(".log"))
    return [files[n] for n in names]


def transient(files: dict[str, bytes]) -> list[str]:
    """The leftovers of an unfinished replace (cleaned, swap or deleted files) in a name -> bytes map."""
    return sorted(n for n in files if n.endswith((".cleaned", ".swap", ".deleted")))


def check_partition(files: dict[str, bytes], partition: str, source: list[bytes], reference: list[bytes],
                    *, allow_either: bool) -> str:
    """The partition replays like the source with no duplicate offsets, and its live logs are exactly the
    source's or (``allow_either``) the reference result's. Returns ``"old"`` or ``"new"``."""
    logs = live_logs(files, partition)
    got = replay(read_segments(logs))
    want = replay(read_segments(source))
    assert comparable(got.latest) == comparable(want.latest), partition
    assert len(got.offsets) == len(set(got.offsets)), (partition, "duplicate offsets")
    assert got.offsets == sorted(got.offsets), partition
    if logs == reference:
        return "new"
    assert allow_either and logs == source, (partition, "neither all old nor all new")
    return "old"


def fault_at_every_step(steps: list[str]) -> FaultHook:
    """A hook that stops the replace of partition ``t-i`` at ``steps[i]`` (the barriers of a bin's lockstep
    commit, ``partition`` ``""``, pass)."""

    def fault(partition: str, step: str) -> None:
        if not partition:
            return
        i = int(partition.rsplit("-", 1)[1])
        if i < len(steps) and step == steps[i]:
            raise SimulatedFault(f"simulated crash of {partition} before {step}")

    return fault


def recording(steps: list[str]) -> FaultHook:
    """A hook that records the steps (of every partition) in order."""
    return lambda partition, step: steps.append(step)


def compact_with_fault(argv: list[str], fault: FaultHook) -> int:
    """``segjobs compact ARGV`` with ``fault`` as the run's fault seam (see :mod:`jobs.engine.runtime.seams`)."""
    from jobs.commands import compact

    return compact.run(build_parser().parse_args(["compact", *argv]), seams=Seams(fault=fault))


def differences_but_stamped_markers(clean: dict[str, bytes], got: dict[str, bytes],
                                    partitions: set[str]) -> list[str]:
    """What differs between two snapshots of a log dir (name -> bytes) other than what the next clean of
    ``partitions`` would change: in those partitions' segments, transaction markers gaining their delete horizon
    (and so the offset and time indexes of such a segment, whose later batches moved). A rerun whose killed run
    had completed some partitions' replaces cleans those once more, as Kafka's cleaner does after an interrupted
    clean: that is all it may change. Returns one line per other difference ([] when there is none)."""
    problems = sorted(f"{n}: only in one of the two" for n in set(clean) ^ set(got))
    stamped: set[str] = set()
    for name in sorted(n for n in set(clean) & set(got) if clean[n] != got[n] and n.endswith(".log")):
        if name.split("/", 1)[0] not in partitions:
            problems.append(f"{name}: changed in a partition the killed run had not replaced")
            continue
        before, after = read_segments([clean[name]]), read_segments([got[name]])
        if [b.base_offset for b in before] != [b.base_offset for b in after]:
            problems.append(f"{name}: batches came or went")
            continue
        for b, a in zip(before, after):
            if a.raw != b.raw and not (a.control and b.delete_horizon_ms is None and a.delete_horizon_ms is not None
                                       and a.records == b.records):
                problems.append(f"{name}: the batch at offset {a.base_offset} changed, and not as a stamped marker")
        stamped.add(name[:-len(".log")])
    for name in sorted(n for n in set(clean) & set(got) if clean[n] != got[n] and not n.endswith(".log")):
        if name.rsplit(".", 1)[0] not in stamped:
            problems.append(f"{name}: changed")
    return problems
