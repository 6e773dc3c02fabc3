"""A bin's partitions committed in lockstep (``Committer.replace_lockstep``), killed at every point: every step of
every partition of the bin and every barrier the bin's partitions share. After ``segjobs recover`` each segment
group of each partition holds exactly its old or exactly its new segments, nothing is lost or duplicated, and a
rerun leaves each partition byte-identical to one clean run, or, where the crashed run's replace went through, to
that clean cleaned once more at the same time (the rerun's clean is the next one for it: as after Kafka's
cleaner is interrupted, it stamps the markers of the transactions the first emptied).

The log dir: ``t-0`` and ``t-1`` (two segments that compact into one), ``u-0`` (four segments in two groups, so it
takes part in two commit rounds) and ``z-0``, a bigger partition that makes the other three one bin (the stream
packs consecutive partitions by bytes, at least two bins). The runs are in process (no Spark): the commit
protocol is the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs import api
from jobs.engine.runtime.seams import FaultHook
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.compaction_faults import NOW, T0, HardCrash, SimulatedFault, build_partition, transient
from tests.support.replay import comparable, read_segments, replay

CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n\n[topics."u"]\n"segment.bytes" = 460\n'
BIN = ("t-0", "t-1", "u-0")


def _build_two_groups(partition_dir: Path) -> None:
    """Four closed segments in two groups under segment.bytes 460 (310 + 140 bytes, then 140 + 139), each with
    records to remove, then the active segment. The first group's output (about 370 bytes) does not fit with
    the third segment, so a rerun after a crash between the two groups' commits groups them as a clean run did."""
    log = LogBuilder("u", 0, timestamp=T0)
    log.batch([rec("e", "E" * 100), rec("a", "1")]).batch([rec("f", "F" * 60)])  # 0-2
    log.roll().batch([rec("c", "1")]).batch([rec("c", "2")])  # 3-4
    log.roll().batch([rec("a", "3")]).batch([rec("d", "1")])  # 5-6
    log.roll().batch([rec("d", "2")]).batch([tombstone("b")])  # 7-8
    log.roll().batch([rec("z", "active")])  # 9
    write_log(log.table(), partition_dir)


def _build_big(partition_dir: Path) -> None:
    log = LogBuilder("z", 0, timestamp=T0)
    log.batch([rec("a", "x" * 3000), rec("b", "1")]).batch([rec("a", "y" * 3000)])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)


def _source(root: Path) -> Path:
    logs = root / "logs"
    build_partition(logs / "t-0")
    build_partition(logs / "t-1")
    _build_two_groups(logs / "u-0")
    _build_big(logs / "z-0")
    return logs


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def _logs(files: dict[str, bytes], partition: str) -> list[bytes]:
    return [files[n] for n in sorted(files) if n.startswith(partition + "/") and n.endswith(".log")]


def _compact(log_dir: Path, config: Path, fault: FaultHook | None = None) -> api.CompactResult:
    return api.compact(log_dir, api.CompactOptions(config=config, progress=None), now=int(NOW),
                       seams=api.Seams(fault=fault, runner=api.InProcessTasks()))


def _recover(log_dir: Path) -> None:
    assert api.recover(log_dir, now=int(NOW)).exit_code == 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The source log dir, one clean run's result, and the fault points of that run, in order."""
    root = tmp_path_factory.mktemp("lockstep")
    config = root / "t.toml"
    config.write_text(CONFIG)
    source = _source(root)
    shutil.copytree(source, root / "clean")
    points: list[tuple[str, str]] = []
    result = _compact(root / "clean", config, fault=lambda p, s: points.append((p, s)))
    assert result.exit_code == 0, result.errors
    # what a rerun makes of a partition whose replace the crashed run completed: the clean result, cleaned again
    shutil.copytree(root / "clean", root / "again")
    (root / "again" / "cleaner-offset-checkpoint").unlink()
    assert _compact(root / "again", config).exit_code == 0
    return {"root": root, "config": config, "source": _tree(source), "clean": _tree(root / "clean"),
            "again": _tree(root / "again"), "points": points}


def _expected(ref: dict, completed: set[str]) -> dict[str, bytes]:
    """One clean run's files, those of the ``completed`` partitions as cleaned once more."""
    return {n: (ref["again"] if n.split("/")[0] in completed else ref["clean"])[n] for n in ref["clean"]}


def _completed(files: dict[str, bytes], ref: dict) -> set[str]:
    """The partitions whose live logs are the clean run's (their replace went through), but for those whose
    source logs are already the clean run's."""
    return {p for p in (*BIN, "z-0") if _logs(files, p) == _logs(ref["clean"], p) != _logs(ref["source"], p)}


def test_the_three_partitions_commit_in_lockstep_and_u0_in_two_rounds(reference):
    points = reference["points"]
    partitions = [p for p, _ in points]
    assert set(partitions) == {*BIN, "z-0", ""}
    # every partition writes its intent before any partition's files move, and barriers separate the steps
    first_move = next(i for i, (_, s) in enumerate(points) if s.startswith("cleaned-to-swap"))
    assert {p for p, s in points[:first_move] if s == "write-intent"} == set(BIN)
    assert points[first_move - 2:first_move] == [("", "barrier:write-intent"), ("", "barrier:intent-entry")]
    barriers = [s for p, s in points if p == ""]
    # (the second round is u-0's alone: its own syncs, no shared barrier)
    assert barriers == ["barrier:write-intent", "barrier:intent-entry", "barrier:cleaned-to-swap",
                        "barrier:old-to-deleted", "barrier:swap-to-live"]
    assert sum(1 for p, s in points if p == "u-0" and s == "write-intent") == 2
    # each partition's own steps are those of a replace of it alone, in order
    for p in BIN:
        steps = [s.split(":")[0] for q, s in points if q == p]
        assert steps[0] == "write-intent" and steps[-1] == "remove-intent"


def _check_recovered(files: dict[str, bytes], ref: dict) -> None:
    assert transient(files) == []
    for p in (*BIN, "z-0"):
        logs, old, new = _logs(files, p), _logs(ref["source"], p), _logs(ref["clean"], p)
        got, want = replay(read_segments(logs)), replay(read_segments(old))
        assert comparable(got.latest) == comparable(want.latest), p
        assert len(got.offsets) == len(set(got.offsets)) and got.offsets == sorted(got.offsets), p
        # every live segment is exactly an old one or exactly a new one: no group half-replaced
        assert all(log in old or log in new for log in logs), p
        if p != "u-0":
            assert logs in (old, new), p


@pytest.mark.scenario
def test_killed_at_every_step_of_every_partition_and_at_every_barrier(reference, tmp_path):
    points = [pt for pt in reference["points"] if pt[0] != "z-0"]
    seen: dict[tuple[str, str], int] = {}
    for n, point in enumerate(points):
        occurrence = seen[point] = seen.get(point, 0) + 1
        log_dir = tmp_path / f"run-{n}" / "logs"
        shutil.copytree(reference["root"] / "logs", log_dir)
        count = 0

        def kill(partition: str, step: str, point: tuple[str, str] = point, occurrence: int = occurrence) -> None:
            nonlocal count
            if (partition, step) == point:
                count += 1
                if count == occurrence:
                    raise HardCrash(f"{partition} {step}")

        count = 0
        with pytest.raises(HardCrash):
            _compact(log_dir, reference["config"], fault=kill)
        _recover(log_dir)
        recovered = _tree(log_dir)
        _check_recovered(recovered, reference)
        result = _compact(log_dir, reference["config"])
        assert result.exit_code == 0, (point, result.errors)
        assert _tree(log_dir) == _expected(reference, _completed(recovered, reference)), point
        shutil.rmtree(log_dir.parent)


def test_a_failing_partition_leaves_the_lockstep_and_the_others_commit(reference, tmp_path):
    log_dir = tmp_path / "logs"
    shutil.copytree(reference["root"] / "logs", log_dir)

    def fail(partition: str, step: str) -> None:
        if partition == "t-1" and step.startswith("old-to-deleted"):
            raise SimulatedFault("the disk refused a rename")

    lines: list[str] = []
    result = api.compact(log_dir, api.CompactOptions(config=reference["config"], progress=lines.append),
                         now=int(NOW), seams=api.Seams(fault=fail, runner=api.InProcessTasks()))
    assert result.exit_code == 1
    assert [e["partition"] for e in result.errors] == ["t-1"]
    assert any("t-1: LEFT MID-COMMIT" in line for line in lines), lines
    files = _tree(log_dir)
    for p in ("t-0", "u-0", "z-0"):
        assert _logs(files, p) == _logs(reference["clean"], p), p
    _recover(log_dir)
    completed = _completed(_tree(log_dir), reference)
    assert "t-1" in completed  # recovery completed t-1's replace: it was past its commit point
    assert _compact(log_dir, reference["config"]).exit_code == 0
    # t-0, u-0 and z-0 were done (their cleaner checkpoint written): the rerun cleans t-1 alone, once more
    assert _tree(log_dir) == _expected(reference, {"t-1"})
