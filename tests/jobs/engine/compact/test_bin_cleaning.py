"""Cleaning a bin's small partitions together (:mod:`jobs.engine.compact.bin_cleaning`) changes nothing: every run with
the together path forced on leaves exactly what the same run with it forced off (one pipeline per partition)
leaves, and reports the same.

Level exercised: :func:`jobs.api.compact` without Spark (``Seams(runner=InProcessTasks())``: the bins are
Spark's, their tasks run in this process), from copies of one source at the same path, so that even the paths
errors name agree. Compared after every run: every file of the log dir (SHA-256, and the last-modified time of
segment files), and the JSON report but for timings and the run's identity (per partition: action, records
and bytes removed, segments after, statistics, new checkpoint, indexes rebuilt, errors with their file,
position and offset; the totals, warnings and exit code).

* The property: random bins of 2-12 partitions over 1-3 topics of different configs, two cleaning rounds (the
  second past some delete horizons, over the first's output plus new segments), each a dry run then a run.
* A bin mixing partitions the together path takes with those it leaves to the per-partition path
  (transactions, legacy messages, more dirty bytes than one decode holds; memory first, one handed over to
  external-sort).
* A corrupt batch in one partition of a bin; wrong offset indexes in two; a dry run.
* The together path did run when forced on (else the above would prove nothing), and never when forced off;
  a partition it leaves alone does not keep the others of its bin from being cleaned together.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from jobs.engine.compact import bin_cleaning
from jobs.engine.compact.cleaning import SINGLE_DECODE_BYTES, PartitionOutcome
from jobs.engine.runtime.tasks import InProcessTasks, stream_bins
from jobs.rules.config import ConfigSet
from jobs.rules.map_capacity import buffer_bytes_for_keys
from segment_io.errors import StorageEnvironmentError
from segment_io.layout import segment_file_name
from tests.support.bin_logs import (
    NOW2,
    BinSpec,
    RunView,
    append,
    assert_same_runs,
    ballast_partition,
    bin_specs,
    compact_in_process,
    compacted,
    fresh_copy,
    keyed_partition,
    legacy_partition,
    log_dir_files,
    observe,
    plain_partition,
    transactional_partition,
    write_source,
)
from tests.support.damage import backwards_offsets, flip_crc, shift_first_index_entry
from tests.support.hypothesis_budget import examples
from tests.support.random_logs import DAY, NOW1

#: TOGETHER_MIN_PARTITIONS forcing the together path on (any two eligible partitions of a bin) and off
ON, OFF = 2, sys.maxsize


@dataclass(frozen=True)
class Step:
    """One run of a comparison: at ``now_ms``, after appending ``append_from``'s segments when given."""

    label: str
    now_ms: int
    dry_run: bool = False
    append_from: Path | None = None


class Together:
    """Runs the same steps from the same source with the together path forced off, then on, and compares
    them; a spy on :func:`jobs.engine.compact.bin_cleaning.clean_together` counts the partitions it cleaned in each
    mode."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.on = False
        #: partitions clean_together returned an outcome without error for, by mode
        self.cleaned = {False: 0, True: 0}
        #: the names of those partitions (with the path on)
        self.names: set[str] = set()
        original = bin_cleaning.clean_together

        def spy(*args: Any, **kwargs: Any) -> Any:
            outcomes = original(*args, **kwargs)
            items = outcomes.values() if isinstance(outcomes, dict) else outcomes
            done = [o for o in items if isinstance(o, PartitionOutcome) and o.error is None]
            self.cleaned[self.on] += len(done)
            if self.on:
                self.names.update(f"{o.topic}-{o.partition}" for o in done)
            return outcomes

        monkeypatch.setattr(bin_cleaning, "clean_together", spy)

    def force(self, on: bool) -> None:
        self.on = on
        self.monkeypatch.setattr(bin_cleaning, "TOGETHER_MIN_PARTITIONS", ON if on else OFF)

    def run(self, source: Path, work: Path, config: ConfigSet, steps: list[Step], **options: Any) -> list[RunView]:
        """Every step from a fresh copy of ``source`` at ``work/logs``, off then on, with ``options`` (more
        :class:`jobs.api.CompactOptions`): asserts the two sequences equal step by step and returns the views of
        the runs with the path off."""
        views: dict[bool, list[RunView]] = {}
        for on in (False, True):
            self.force(on)
            log_dir = fresh_copy(source, work)
            views[on] = []
            for step in steps:
                if step.append_from is not None:
                    append(step.append_from, log_dir)
                views[on].append(observe(log_dir, compact_in_process(log_dir, config, step.now_ms,
                                                                     dry_run=step.dry_run, **options)))
        assert self.cleaned[False] == 0, "the together path ran although it was forced off"
        for step, off, on_view in zip(steps, views[False], views[True]):
            assert_same_runs(off, on_view, step.label)
        return views[False]


@pytest.fixture
def together(monkeypatch: pytest.MonkeyPatch) -> Together:
    return Together(monkeypatch)


def compact_config(*topics: str) -> ConfigSet:
    """Compacted topics, due as soon as they hold dirty data."""
    return ConfigSet().with_overrides([s for t in topics for s in compacted(t)])


def entries(view: RunView) -> dict[str, dict[str, Any]]:
    return {f"{e['topic']}-{e['partition']}": e for e in view.report["partitions"]}


def bins(log_dir: Path, names: list[str]) -> list[list[str]]:
    """The bins a run over every partition of ``log_dir`` (``names``, in the run's order) makes: by their bytes."""
    sizes = [sum(f.stat().st_size for f in (log_dir / name).glob("*.log")) for name in names]
    return [[names[i] for i in b] for b in stream_bins(names, sizes, InProcessTasks().parallelism)]


def plain_bin(log_dir: Path, names: list[str], **kw: Any) -> None:
    for i, name in enumerate(names):
        plain_partition(log_dir / name, i, **kw)


# --------------------------------------------------------------------------------------------------
# The property
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_random_bins_clean_together_exactly_as_one_at_a_time(together: Together, tmp_path: Path) -> None:
    # Each example writes a small log dir and compacts it eight times (four steps, both ways): half the budget.
    @settings(max_examples=examples(0.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(spec=bin_specs())
    def check(spec: BinSpec) -> None:
        root = tmp_path / "example"
        shutil.rmtree(root, ignore_errors=True)
        source = write_source(spec, root / "source")
        steps = [Step("round 1, dry run", NOW1, dry_run=True), Step("round 1", NOW1),
                 Step("round 2, dry run", NOW2, dry_run=True, append_from=source.rest), Step("round 2", NOW2)]
        views = together.run(source.first, root / "run", spec.config(), steps)
        for step, view in zip(steps, views):
            assert view.report["exit_code"] == 0, (step.label, view.report["errors"])
        shutil.rmtree(root)

    check()
    assert together.cleaned[True] >= 2, "the together path never cleaned a partition: the property is vacuous"


# --------------------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------------------


def test_the_together_path_cleans_a_bin_of_small_partitions(together: Together, tmp_path: Path) -> None:
    """Forced on, six small plain partitions of two topics (tombstones kept for an hour in one, a week in the
    other) go through clean_together, with the same result."""
    source = tmp_path / "source"
    names = ["left-0", "left-1", "left-2", "right-0", "right-1", "right-2"]
    plain_bin(source, names)
    ballast = ballast_partition(source)
    config = ConfigSet().with_overrides([*compacted("left", "delete.retention.ms=3600000"),
                                         *compacted("right", "delete.retention.ms=604800000"), *compacted("zeta")])
    assert bins(source, [*names, ballast]) == [names, [ballast]]
    (view,) = together.run(source, tmp_path / "run", config, [Step("run", NOW1)])
    plain = [entries(view)[n] for n in names]
    assert {e["action"] for e in plain} == {"compacted"} and all(e["stats"]["horizons_stamped"] for e in plain)
    assert entries(view)[ballast]["selected"] and together.names == set(names)


#: partitions the together path leaves to the per-partition one, between plain ones: two with more dirty bytes
#: than one decode holds (the second the larger: a bin holds at most half the run's bytes, so the first shares one),
#: transactions (commit and abort markers), and with ``legacy`` magic-1 messages
MIXED = ["plain", "big", "plain", "transactions", "legacy", "plain", "plain", "bigger"]


@pytest.mark.parametrize("legacy", [False, True], ids=["without legacy", "with legacy"])
def test_a_bin_mixing_partitions_the_together_path_leaves_alone(together: Together, tmp_path: Path,
                                                                 legacy: bool) -> None:
    """Transactions, legacy messages and more dirty bytes than one decode holds go one at a time, beside
    plain partitions cleaned together in the same bin: the result is the same."""
    source = tmp_path / "source"
    kinds = {f"mixed-{i}": kind for i, kind in enumerate(k for k in MIXED if legacy or k != "legacy")}
    for i, (name, kind) in enumerate(kinds.items()):
        if kind == "plain":
            plain_partition(source / name, i)
        elif kind == "transactions":
            transactional_partition(source / name)
        elif kind == "legacy":
            legacy_partition(source / name, mtime_ms=NOW1 - 2 * DAY)
        else:
            dirty = SINGLE_DECODE_BYTES + (64 << 10) + (SINGLE_DECODE_BYTES // 4) * (kind == "bigger")
            keyed_partition(source / name, -(-dirty // (8 << 10)), keys=50, value_bytes=8 << 10)
    first_bin = bins(source, list(kinds))[0]
    assert {kinds[n] for n in first_bin} == set(kinds.values()) - {"bigger"}, first_bin

    (view,) = together.run(source, tmp_path / "run", compact_config("mixed"), [Step("run", NOW1)])
    assert view.report["exit_code"] == 0, view.report["errors"]
    by_name = entries(view)
    assert {n: e["action"] for n, e in by_name.items()} == {n: "compacted" for n in kinds}
    # each kind is what it claims to be
    of = {kind: by_name[name] for name, kind in kinds.items() if kind != "plain"}
    assert of["big"]["cleanable_bytes"] > SINGLE_DECODE_BYTES and of["bigger"]["cleanable_bytes"] > SINGLE_DECODE_BYTES
    assert of["transactions"]["stats"]["aborted_records_removed"] > 0
    assert not legacy or of["legacy"]["records_removed"] > 0
    # the plain partitions of the bin, whatever it holds besides them
    assert together.names == {name for name, kind in kinds.items() if kind == "plain"}


def test_a_corrupt_batch_fails_its_partition_alone_either_way(together: Together, tmp_path: Path) -> None:
    """One partition of the bin has a batch whose CRC is wrong: the same error (file, position, offset), the
    partition untouched, its neighbours compacted the same way, exit code 1 either way."""
    source = tmp_path / "source"
    names = [f"t-{p}" for p in range(6)]
    plain_bin(source, names)
    broken = source / "t-2" / segment_file_name(0)
    position, offset = flip_crc(broken, 3)
    before = log_dir_files(source / "t-2")
    assert [len(b) for b in bins(source, names) if "t-2" in b] == [3]  # beside two the together path takes

    (view,) = together.run(source, tmp_path / "run", compact_config("t"), [Step("run", NOW1)])
    assert view.report["exit_code"] == 1
    (error,) = view.report["errors"]
    assert (error["partition"], error["kind"]) == ("t-2", "CrcMismatchError"), error
    named = f"{error.get('file')} {error.get('position')} {error.get('offset')} {error['detail']}"
    assert broken.name in named and str(position) in named and str(offset) in named, error
    actions = {n: e["action"] for n, e in entries(view).items()}
    assert actions.pop("t-2") == "error" and set(actions.values()) == {"compacted"}
    assert log_dir_files(tmp_path / "run" / "logs" / "t-2") == before
    assert together.cleaned[True] >= 2


def test_a_segment_whose_offsets_go_backwards_fails_its_partition_alone_and_its_bin_mates_go_together(
        together: Together, tmp_path: Path) -> None:
    """Offsets restart at every segment cleaned together, so their order is judged within each segment: one
    partition whose segment goes back in offsets fails alone, naming its file, byte and offset, and its bin-mates
    are still cleaned together (judged over the joined bytes, every round went one at a time)."""
    source = tmp_path / "source"
    names = [f"t-{p}" for p in range(6)]
    plain_bin(source, names)
    shutil.rmtree(source / "t-2")
    (source / "t-2").mkdir()
    broken, position, offset = backwards_offsets(source / "t-2")
    before = log_dir_files(source / "t-2")
    assert next(len(b) for b in bins(source, names) if "t-2" in b) >= 3

    (view,) = together.run(source, tmp_path / "run", compact_config("t"), [Step("run", NOW1)])
    assert view.report["exit_code"] == 1
    (error,) = view.report["errors"]
    assert (error["partition"], error["kind"]) == ("t-2", "OffsetOrderError"), error
    named = f"{error.get('file')} {error.get('position')} {error.get('offset')} {error['detail']}"
    assert broken.name in named and str(position) in named and str(offset) in named, error
    actions = {n: e["action"] for n, e in entries(view).items()}
    assert actions.pop("t-2") == "error" and set(actions.values()) == {"compacted"}
    assert log_dir_files(tmp_path / "run" / "logs" / "t-2") == before
    assert together.cleaned[True] >= 2


def test_a_wrong_offset_index_is_rebuilt_either_way(together: Together, tmp_path: Path) -> None:
    """Two partitions whose .index points inside a batch, among plain ones (one with records to remove, one
    without, rewritten for its index alone): rewritten with sound indexes and a warning naming each file,
    exactly as one at a time."""
    source = tmp_path / "source"
    names = [f"t-{p}" for p in range(8)]
    calm = "t-4"  # every key once: nothing to remove
    plain_bin(source, [n for n in names if n != calm], value=b"v" * 1000)  # 1 KB values: index entries
    keyed_partition(source / calm, 12, keys=12, value_bytes=1000)
    for name in ("t-3", calm):
        shift_first_index_entry(source / name / segment_file_name(0, ".index"))
    assert all(len(b) > 2 for b in bins(source, names) if "t-3" in b or calm in b)

    (view,) = together.run(source, tmp_path / "run", compact_config("t"), [Step("run", NOW1)])
    assert view.report["exit_code"] == 0, view.report["errors"]
    by_name = entries(view)
    rebuilt = {n: e["indexes_rebuilt"] for n, e in by_name.items() if e["indexes_rebuilt"]}
    assert sorted(rebuilt) == ["t-3", calm], rebuilt
    for name, problems in rebuilt.items():
        assert len(problems) == 1 and segment_file_name(0, ".index") in problems[0], problems
        assert any(name in w and segment_file_name(0, ".index") in w for w in view.report["warnings"])
    assert by_name[calm]["records_removed"] == 0 and by_name[calm]["action"] == "compacted"
    assert together.cleaned[True] >= 2


def test_a_dry_run_reports_the_same_either_way(together: Together, tmp_path: Path) -> None:
    """A dry run: the same report (what each partition would lose), and no file changed."""
    source = tmp_path / "source"
    names = [f"t-{p}" for p in range(6)]
    plain_bin(source, names)
    (view,) = together.run(source, tmp_path / "run", compact_config("t"), [Step("dry run", NOW1, dry_run=True)])
    assert view.files == log_dir_files(source)
    would = [e for e in entries(view).values() if e["action"] == "would compact"]
    assert len(would) == len(names) and all(e["records_removed"] > 0 for e in would)


def test_memory_first_partitions_in_a_bin_go_one_at_a_time(together: Together, tmp_path: Path) -> None:
    """With a map of 30 keys, the plain partitions (fewer dirty records) are cleaned in memory, while two of
    their bins' partitions go memory first (more records than the map holds): one whose keys fit, one handed
    over to external-sort when its map fills. The result is the same either way."""
    source = tmp_path / "source"
    names = [f"t-{p}" for p in range(8)]
    handed_over, fitting = "t-2", "t-5"
    plain_bin(source, [n for n in names if n not in (handed_over, fitting)])
    keyed_partition(source / handed_over, 40, keys=35, value_bytes=1)
    keyed_partition(source / fitting, 40, keys=4, value_bytes=1)
    for b in bins(source, names):  # each shares its bin with two plain partitions
        assert not {handed_over, fitting} & set(b) or len(set(b) - {handed_over, fitting}) >= 2, b

    (view,) = together.run(source, tmp_path / "run", compact_config("t"), [Step("run", NOW1)],
                           dedupe_buffer_bytes=buffer_bytes_for_keys(30))
    assert view.report["exit_code"] == 0, view.report["errors"]
    by_name = entries(view)
    assert {n: e["action"] for n, e in by_name.items()} == {n: "compacted" for n in names}
    assert by_name[fitting]["strategy"] == "memory" and "memory first" in by_name[fitting]["strategy_reason"]
    assert by_name[handed_over]["strategy"] == "external-sort"
    assert "map filled" in by_name[handed_over]["strategy_reason"]
    assert together.cleaned[True] >= 2


def test_a_write_that_fails_half_way_leaves_nothing_and_the_partitions_go_one_at_a_time(
        together: Together, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The together path's encode fails after writing some of its partitions' staged files (the disk filled up
    half-way): what it wrote is deleted, and each partition of the round is then cleaned on its own, so the
    run leaves and reports exactly what one at a time does (here the second attempt succeeds)."""
    source = tmp_path / "source"
    names = [f"t-{p}" for p in range(5)]
    plain_bin(source, names)
    failures: list[list[str]] = []
    unchecked: list[str] = []  # a failed round's files, until the next partition is cleaned on its own
    real = bin_cleaning.write_segments

    def fills_up(records: Any, splits: Any, **kw: Any) -> Any:
        written = real(records, splits[:2], **kw)  # two partitions' files are on disk ...
        failures.append([p for w in written for p in w.paths.values()])
        unchecked.extend(failures[-1])
        raise StorageEnvironmentError("no space left on device", uri=splits[2].uri, errno_name="ENOSPC",
                                      fix="free some space")  # ... when the third does not fit

    left_behind: list[str] = []
    one_at_a_time = bin_cleaning.compact_partition

    def alone(*args: Any, **kw: Any) -> Any:  # by the time a partition is cleaned on its own ...
        left_behind.extend(p for p in unchecked if Path(p).exists())
        unchecked.clear()
        return one_at_a_time(*args, **kw)

    monkeypatch.setattr(bin_cleaning, "write_segments", fills_up)
    monkeypatch.setattr(bin_cleaning, "compact_partition", alone)
    (view,) = together.run(source, tmp_path / "run", compact_config("t"), [Step("run", NOW1)])
    assert view.report["exit_code"] == 0, view.report["errors"]
    assert {e["action"] for e in entries(view).values()} == {"compacted"}
    assert failures and all(len(paths) == 6 for paths in failures)  # .log, .index, .timeindex of two
    assert left_behind == []  # ... the failed round's files are gone
    assert together.cleaned[True] == 0  # every partition of the round went through its own pipeline
