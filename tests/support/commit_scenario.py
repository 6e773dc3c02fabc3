"""A commit-protocol scenario that runs on any store: the partition, the crash hook, the outcome checks, and
each store's expected step sequence (written from the protocol in ``jobs/logdir/commit/committers.py``'s docstring).

Shared by ``tests/jobs/logdir/commit/test_committers.py`` (the protocol on local disk and S3) and
``tests/jobs/logdir/test_recover.py``.

Segments here are synthetic but well-framed: each ``.log`` is a run of 61-byte v2 batch headers, one batch
per offset, with the producer id carrying a tag that tells the old and new versions apart; index files are
tagged strings. Records are identified by (file bytes, offset), so "nothing lost, nothing duplicated" is a
comparison of file bytes and of offsets parsed here, independently of segjobs' decoder.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

import pytest

from jobs.logdir.commit import (
    StagedSegment,
    delete_segments,
    purge_deleted,
    replace_segments,
    staged_uri,
)
from jobs.logdir.lock import work_uri
from jobs.logdir.recover import RecoveryReport, recover_partition
from segment_io.layout import parse_segment_file
from segment_io.storage.base import Storage

# ---------------------------------------------------------------------------------------------------
# Scenario: a partition with segments 0, 10, 20 (replaced) and 30 (active, untouched); the replacement
# is compacted into 0 and 18. Base 0 is shared by old and new, 10 and 20 disappear, 18 is new.
# ---------------------------------------------------------------------------------------------------

TOPIC_PARTITION = "orders-3"
KAFKA_ORDER = (".log", ".index", ".timeindex", ".txnindex")  # how Kafka renames a segment's files

OLD_OFFSETS = {0: list(range(0, 10)), 10: list(range(10, 20)), 20: list(range(20, 30))}
ACTIVE_OFFSETS = {30: list(range(30, 40))}
OLD_SUFFIXES = {0: (".log", ".index", ".timeindex"), 10: KAFKA_ORDER, 20: (".log", ".index", ".timeindex"),
                30: (".log", ".index", ".timeindex")}
NEW_OFFSETS = {0: [1, 3, 5, 11, 13], 18: [18, 25, 29]}
NEW_SUFFIXES = {0: (".log", ".index", ".timeindex"), 18: KAFKA_ORDER}
SNAPSHOTS = (20, 30)
OLD_TAG, NEW_TAG = 1, 2
DELETE_NOW_MS = 1_000
DELETE_BASES = [0, 10]
DELAY_MS = 60_000

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's RecordBatch v2 header, 61 bytes


class Crash(Exception):
    """What the fault hook raises: the process "dies" before the step runs."""


def log_bytes(offsets: list[int], tag: int) -> bytes:
    """One header-only v2 batch per offset (batchLength 49, lastOffsetDelta 0, producer id = tag)."""
    return b"".join(_V2_HEADER.pack(o, 49, 0, 2, 0, 0, 0, o * 10, o * 10, tag, 0, 0, 0) for o in offsets)


def offsets_in(log: bytes) -> list[int]:
    """Every offset of a ``.log`` built by :func:`log_bytes` (base offset + lastOffsetDelta of each batch)."""
    out, pos = [], 0
    while pos < len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        (last_delta,) = struct.unpack_from(">i", log, pos + 23)
        out.extend(range(base, base + last_delta + 1))
        pos += 12 + length
    return out


def name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def file_bytes(base: int, suffix: str, offsets: list[int], tag: int) -> bytes:
    return log_bytes(offsets, tag) if suffix == ".log" else f"tag{tag}:{name(base, suffix)}".encode()


@dataclass
class Scenario:
    storage: Storage
    log_dir: str
    partition: str
    work: str
    old_state: dict[str, bytes]  #: live data files before the replace (incl. the active segment)
    new_state: dict[str, bytes]  #: live data files after it
    snapshots: dict[str, bytes]


def build_scenario(storage: Storage, log_dir: str, *, stage: bool = True,
                   partition_name: str = TOPIC_PARTITION) -> Scenario:
    """Write the old segments and snapshots live, and (when ``stage``) the new segments where the job
    stages them (of the partition ``partition_name``: several partitions of one log dir may play it)."""
    partition = storage.join(log_dir, partition_name)
    work = work_uri(log_dir)
    storage.makedirs(partition)
    old_state: dict[str, bytes] = {}
    for base, offsets in {**OLD_OFFSETS, **ACTIVE_OFFSETS}.items():
        for sfx in OLD_SUFFIXES[base]:
            old_state[name(base, sfx)] = file_bytes(base, sfx, offsets, OLD_TAG)
    snapshots = {name(b, ".snapshot"): f"snapshot {b}".encode() for b in SNAPSHOTS}
    for n, data in {**old_state, **snapshots}.items():
        storage.write_atomic(storage.join(partition, n), data)
    new_state = {n: d for n, d in old_state.items() if parse_segment_file(n)[0] in ACTIVE_OFFSETS}
    for base, offsets in NEW_OFFSETS.items():
        for sfx in NEW_SUFFIXES[base]:
            data = file_bytes(base, sfx, offsets, NEW_TAG)
            new_state[name(base, sfx)] = data
            if not stage:
                continue
            uri = staged_uri(storage, partition, work, base, sfx)
            storage.makedirs(uri.rsplit("/", 1)[0])
            storage.write_atomic(uri, data)
    return Scenario(storage, log_dir, partition, work, old_state, new_state, snapshots)


def staged_segments() -> list[StagedSegment]:
    return [StagedSegment(b, NEW_SUFFIXES[b]) for b in NEW_OFFSETS]


def partition_files(storage: Storage, partition: str) -> dict[str, bytes]:
    """Every file of the partition, by name."""
    return {i.name: storage.read(i.uri) for i in storage.list(partition)}


def live_data(files: dict[str, bytes]) -> dict[str, bytes]:
    """Live segment data files (no transient suffix, no snapshots)."""
    out = {}
    for n, data in files.items():
        parsed = parse_segment_file(n)
        if parsed and parsed[2] == "" and parsed[1] != ".snapshot":
            out[n] = data
    return out


def with_suffix(files: dict[str, bytes], suffix: str) -> set[str]:
    return {n for n in files if n.endswith(suffix)}


def work_files(storage: Storage, scenario: Scenario) -> set[str]:
    return {i.name for i in storage.list(scenario.work, recursive=True)}


def assert_valid_log(live: dict[str, bytes]) -> None:
    """No overlap and no duplicate: each segment's offsets lie in [base, next base), ascending."""
    bases = sorted(parse_segment_file(n)[0] for n in live if n.endswith(".log"))
    assert bases, "a partition must keep at least one segment"
    seen: list[int] = []
    for i, base in enumerate(bases):
        offsets = offsets_in(live[name(base, ".log")])
        end = bases[i + 1] if i + 1 < len(bases) else float("inf")
        assert all(base <= o < end for o in offsets), f"segment {base} holds offsets outside [{base}, {end})"
        seen.extend(offsets)
    assert seen == sorted(set(seen)), "offsets repeat or go backwards across segments"


Action = Callable[[Callable[[str], None] | None], object]  #: a commit call, given the fault hook


def run_to_crash(action: Action, step: str | None) -> list[str]:
    """Run ``action(fault)``, crashing before ``step`` (never when None); returns the steps announced."""
    announced: list[str] = []

    def fault(s: str) -> None:
        announced.append(s)
        if s == step:
            raise Crash(s)

    if step is None:
        action(fault)
    else:
        with pytest.raises(Crash):
            action(fault)
    return announced


def do_replace(scenario: Scenario) -> Action:
    return lambda fault: replace_segments(scenario.storage, scenario.partition, old_base_offsets=sorted(OLD_OFFSETS),
                                          new_segments=staged_segments(), work_uri=scenario.work, fault=fault)


def do_delete(scenario: Scenario) -> Action:
    return lambda fault: delete_segments(scenario.storage, scenario.partition, DELETE_BASES, now_ms=DELETE_NOW_MS,
                                         work_uri=scenario.work, fault=fault)


def recover_twice(scenario: Scenario, now_ms: int = 5_000) -> RecoveryReport:
    """Recover, then check a second recovery does nothing at all; returns the first report."""
    storage = scenario.storage
    first = recover_partition(storage, scenario.partition, work_uri=scenario.work, now_ms=now_ms)
    files, work = partition_files(storage, scenario.partition), work_files(storage, scenario)
    second = recover_partition(storage, scenario.partition, work_uri=scenario.work, now_ms=now_ms + 1)
    assert second.actions == [], f"second recovery acted: {second.actions}"
    assert partition_files(storage, scenario.partition) == files
    assert work_files(storage, scenario) == work
    return first


def check_replace_outcome(scenario: Scenario, expect_new: bool) -> None:
    files = partition_files(scenario.storage, scenario.partition)
    live = live_data(files)
    assert live == (scenario.new_state if expect_new else scenario.old_state)
    assert_valid_log(live)
    assert not with_suffix(files, ".cleaned") and not with_suffix(files, ".swap")
    assert not with_suffix(files, ".deleted")
    assert {n: files[n] for n in scenario.snapshots} == scenario.snapshots, "snapshots must be left alone"
    assert work_files(scenario.storage, scenario) == set(), "no intent or staged object may remain"


def check_delete_outcome(scenario: Scenario, expect_deleted: bool) -> None:
    """After recovery: either nothing was deleted, or exactly DELETE_BASES are .deleted (bytes intact),
    then purge keeps them until DELETE_NOW_MS + DELAY_MS and removes them from then on."""
    storage = scenario.storage
    files = partition_files(storage, scenario.partition)
    assert not with_suffix(files, ".cleaned") and not with_suffix(files, ".swap")
    gone = {name(b, s) for b in DELETE_BASES for s in OLD_SUFFIXES[b]} if expect_deleted else set()
    assert live_data(files) == {n: d for n, d in scenario.old_state.items() if n not in gone}
    assert_valid_log(live_data(files))
    assert {n[: -len(".deleted")]: d for n, d in files.items() if n.endswith(".deleted")} == \
        {n: scenario.old_state[n] for n in gone}
    kept = purge_deleted(storage, scenario.partition, now_ms=DELETE_NOW_MS + DELAY_MS - 1,
                         file_delete_delay_ms=DELAY_MS, work_uri=scenario.work)
    assert kept.purged == []
    assert kept.kept_until_ms == ({b: DELETE_NOW_MS + DELAY_MS for b in DELETE_BASES} if expect_deleted else {})
    purged = purge_deleted(storage, scenario.partition, now_ms=DELETE_NOW_MS + DELAY_MS,
                           file_delete_delay_ms=DELAY_MS, work_uri=scenario.work)
    assert sorted(i.rsplit("/", 1)[-1] for i in purged.purged) == sorted(n + ".deleted" for n in gone)
    assert not with_suffix(partition_files(storage, scenario.partition), ".deleted")
    assert work_files(storage, scenario) == set(), "the ledger empties once everything is purged"


# ---------------------------------------------------------------------------------------------------
# The expected step sequences, written from the protocol in jobs/logdir/commit/committers.py's docstring.
# ---------------------------------------------------------------------------------------------------


def local_replace_steps() -> list[str]:
    steps = ["write-intent"]
    for base in sorted(NEW_OFFSETS, reverse=True):
        steps += [f"cleaned-to-swap:{name(base, s)}" for s in NEW_SUFFIXES[base]]
    for base in sorted(OLD_OFFSETS):
        steps += [f"old-to-deleted:{name(base, s)}" for s in OLD_SUFFIXES[base]]
    for base in sorted(NEW_OFFSETS):
        steps += [f"swap-to-live:{name(base, s)}" for s in NEW_SUFFIXES[base]]
    for base in sorted(OLD_OFFSETS):
        steps += [f"purge-old:{name(base, s)}" for s in OLD_SUFFIXES[base]]
    return steps + ["remove-intent"]


def delete_steps() -> list[str]:
    steps = ["write-intent"]
    for base in DELETE_BASES:
        steps += [f"live-to-deleted:{name(base, s)}" for s in OLD_SUFFIXES[base]]
    return steps + ["record-deleted", "remove-intent"]


LOCAL_REPLACE_STEPS = local_replace_steps()
#: Kafka's commit point: once no .cleaned file is left, a loader completes the swap.
LOCAL_COMMIT_POINT = next(i for i, s in enumerate(LOCAL_REPLACE_STEPS) if s.startswith("old-to-deleted"))
DELETE_STEPS = delete_steps()


def s3_replace_steps() -> list[str]:
    """From the protocol on S3: copy new (descending bases), delete the old objects no new one
    overwrote, remove the intent, delete the staged objects."""
    new_files = {(b, s) for b in NEW_OFFSETS for s in NEW_SUFFIXES[b]}
    old_files = {(b, s) for b in OLD_OFFSETS for s in OLD_SUFFIXES[b]}
    steps = ["write-intent"]
    for base in sorted(NEW_OFFSETS, reverse=True):
        steps += [f"copy-new:{name(base, s)}" for s in KAFKA_ORDER if s in NEW_SUFFIXES[base]]
    steps += [f"delete-old:{name(b, s)}" for b, s in sorted(old_files - new_files)]
    steps += ["remove-intent"]
    steps += [f"delete-staged:{name(b, s)}" for b, s in sorted(new_files)]
    return steps


S3_REPLACE_STEPS = s3_replace_steps()

def crash_cases(steps_of_store: dict[str, list[str]]) -> list:
    """``(store kind, step)`` params for crashing at every step of each store's protocol. On S3 a crash point costs
    seconds of requests to the endpoint, so `make test` crashes at the first and the last step of each kind of
    step there (``copy-new:...`` is of kind ``copy-new``) and leaves the steps between them, which repeat the same
    request on another file, to the heavy scenarios (`make test-scenarios`, marker ``scenario``)."""
    cases = []
    for kind, steps in steps_of_store.items():
        ends = _first_and_last_of_each_kind(steps)
        for i, step in enumerate(steps):
            marks = [pytest.mark.s3] if kind == "s3" else []
            if kind == "s3" and i not in ends:
                marks.append(pytest.mark.scenario)
            cases.append(pytest.param(kind, step, id=f"{kind}-{step}", marks=marks))
    return cases


def _first_and_last_of_each_kind(steps: list[str]) -> set[int]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        kind = step.split(":", 1)[0]
        first.setdefault(kind, i)
        last[kind] = i
    return set(first.values()) | set(last.values())


#: Each store's replace steps, by kind of store.
REPLACE_STEPS = {"local": LOCAL_REPLACE_STEPS, "s3": S3_REPLACE_STEPS}
#: The index of the first step whose crash leaves the new set: on local disk Kafka's (once no ``.cleaned`` file
#: is left, a loader completes the swap), on S3 the intent PUT (from then on recovery rolls forward).
COMMIT_POINT = {"local": LOCAL_COMMIT_POINT, "s3": S3_REPLACE_STEPS.index("write-intent") + 1}
