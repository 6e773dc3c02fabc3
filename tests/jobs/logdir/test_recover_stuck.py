"""A rename or delete that the filesystem refuses in the middle of a commit or of its recovery: the partition is
reported with the state it is left in and what to fix, it is left as it is, and every other partition of the
log dir is recovered and worked on (exit code 1 until the cause is fixed; then the next run finishes it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from jobs.logdir.recover import recover_log_dir
from segment_io.errors import StorageError
from segment_io.storage import LocalStorage
from tests.support.commit_scenario import (
    TOPIC_PARTITION,
    build_scenario,
    check_replace_outcome,
    do_replace,
    live_data,
    name,
    partition_files,
    run_to_crash,
)
from tests.support.immutable import immutable, release

T0 = 1_700_000_000_000
NOW = str(T0 + 10 * 86_400_000)
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n'


class RefusingStorage(LocalStorage):
    """Local storage on which renaming or deleting the files named in ``refused`` fails, as an immutable file
    does (the storage seam of recovery; no root needed)."""

    def __init__(self, refused: set[str]) -> None:
        super().__init__()
        self.refused = refused

    def _refuse(self, uri: str, what: str) -> None:
        if uri in self.refused:
            raise StorageError(f"{what} failed: Operation not permitted", uri=uri)

    def rename(self, src: str, dst: str) -> None:
        self._refuse(src, "rename")
        super().rename(src, dst)

    def delete(self, uri: str, *, missing_ok: bool = True) -> None:
        self._refuse(uri, "delete")
        super().delete(uri, missing_ok=missing_ok)


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_partition_whose_recovery_fails_is_reported_in_its_state_and_the_others_are_recovered(tmp_path):
    storage = LocalStorage()
    log_dir = str(tmp_path / "kafka-logs")
    stuck = build_scenario(storage, log_dir)  # orders-3
    run_to_crash(do_replace(stuck), "old-to-deleted:" + name(10, ".log"))
    other_dir = str(tmp_path / "other")
    other = build_scenario(storage, other_dir)
    run_to_crash(do_replace(other), "swap-to-live:" + name(18, ".log"))
    shutil.move(str(Path(other_dir) / TOPIC_PARTITION), str(Path(log_dir) / "orders-4"))
    shutil.move(str(Path(other_dir + ".segjobs") / "commit" / TOPIC_PARTITION),
                str(Path(log_dir + ".segjobs") / "commit" / "orders-4"))
    temp = Path(log_dir) / "orders-4" / (name(30, ".log") + ".segjobs-0123456789ab.tmp")
    temp.write_bytes(b"half a write")
    # segment 10's files cannot be deleted: orders-3's swap cannot complete
    refused = {str(Path(stuck.partition) / name(10, sfx)) for sfx in (".log", ".index", ".timeindex", ".txnindex")}
    refused.add(str(temp))  # nor can orders-4's leftover temporary file go: harmless, noted, recovered all the same
    before = partition_files(storage, stuck.partition)

    reports = recover_log_dir(RefusingStorage(refused), log_dir, now_ms=5_000)
    by_name = {r.partition_uri.rsplit("/", 1)[-1]: r for r in reports}
    assert by_name["orders-3"].error is not None and by_name["orders-4"].error is None
    message = str(by_name["orders-3"].error)
    for part in (name(10, ".index"), "delete failed: Operation not permitted", "left mid-commit",
                 "replace.json", ".swap file(s) of segment(s) [0, 18]", "run `segjobs recover`"):
        assert part in message, (part, message)
    assert partition_files(storage, stuck.partition) == before, "left exactly as it was"
    assert by_name["orders-4"].problems and str(temp) in by_name["orders-4"].problems[0]
    assert temp.exists()
    files = partition_files(storage, str(Path(log_dir) / "orders-4"))
    assert live_data(files) == other.new_state
    assert not [n for n in files if n.endswith((".swap", ".cleaned", ".deleted"))]
    assert not (Path(log_dir + ".segjobs") / "commit" / "orders-4").exists() or \
        not list((Path(log_dir + ".segjobs") / "commit" / "orders-4").iterdir())

    # the cause is fixed: the next recovery completes it
    assert not any(r.error for r in recover_log_dir(storage, log_dir, now_ms=6_000))
    check_replace_outcome(stuck, expect_new=True)


def _build(partition: Path) -> None:
    from tests.support.builders import LogBuilder, rec, write_log

    log = LogBuilder(partition.name.rsplit("-", 1)[0], 0, timestamp=T0)
    for o in range(35):  # segments 0, 10, 20 (cleanable) and 30 (active), keys overwritten throughout
        if o and o % 10 == 0:
            log.roll()
        log.batch([rec(f"k{o % 7}", f"v{o}")])
    write_log(log.table(), partition)


def test_a_rename_refused_mid_commit_leaves_that_partition_mid_commit_and_blocks_no_other(spark, tmp_path, capsys):
    """Segment 10 of a-0 is immutable: run 1 stops a-0 mid-commit and says so (not "left untouched"); run 2
    cannot recover a-0, reports its state and leaves it as it is, and works on b-0; once the cause is fixed, the
    next run recovers and compacts a-0 to exactly what a run without the fault makes."""
    from jobs.commands.cli import main

    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    for root in ("logs", "reference"):
        for t in ("a", "b"):
            _build(tmp_path / root / f"{t}-0")

    def compact(root: str) -> int:
        return main(["compact", "--log-dir", str(tmp_path / root), "--config", str(config), "--now", NOW, "--quiet"])

    assert compact("reference") == 0
    reference = _tree(tmp_path / "reference")
    a0 = tmp_path / "logs" / "a-0"
    capsys.readouterr()
    with immutable(a0 / name(10, sfx) for sfx in (".log", ".index", ".timeindex")):
        assert compact("logs") == 1
        err = capsys.readouterr().err
        assert "a-0: LEFT MID-COMMIT" in err and "left untouched" not in err, err
        assert ".swap file(s) of segment(s) [0]" in err, err
        after_run1 = _tree(tmp_path / "logs")
        assert list(a0.glob("*.swap")) and list((tmp_path / "logs.segjobs").rglob("replace.json"))
        assert {k: v for k, v in after_run1.items() if k.startswith("b-0/")} == \
            {k: v for k, v in reference.items() if k.startswith("b-0/")}, "b-0 compacted as without the fault"

        assert compact("logs") == 1
        out, err = capsys.readouterr()
        assert "b-0" in out and "2 partition(s)" in out, out  # the run went on with the other partition
        assert "a-0: NOT RECOVERED" in err and "Operation not permitted (EPERM)" in err, err
        assert "left mid-commit" in err and "replace.json" in err, err
        after_run2 = _tree(tmp_path / "logs")
        assert {k: v for k, v in after_run2.items() if k.startswith("a-0/")} == \
            {k: v for k, v in after_run1.items() if k.startswith("a-0/")}, "a-0 left exactly as it was"
        assert {k: v for k, v in after_run2.items() if k.startswith("b-0/")} == \
            {k: v for k, v in reference.items() if k.startswith("b-0/")}

        assert main(["recover", "--log-dir", str(tmp_path / "logs"), "--now", NOW]) == 1
        assert "a-0: NOT RECOVERED" in capsys.readouterr().err
        release(a0 / name(10, sfx) for sfx in (".log", ".index", ".timeindex"))
        assert compact("logs") == 0
    final = _tree(tmp_path / "logs")
    assert {k: v for k, v in final.items() if k.startswith("a-0/")} == \
        {k: v for k, v in reference.items() if k.startswith("a-0/")}
    assert not list((tmp_path / "logs.segjobs").rglob("replace.json"))


def test_an_undeletable_leftover_fails_neither_recover_nor_compact_for_the_log_dir(spark, tmp_path, capsys):
    from jobs.commands.cli import main

    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    for root in ("logs", "reference"):
        for t in ("a", "b"):
            _build(tmp_path / root / f"{t}-0")
    temp = tmp_path / "logs" / "a-0" / (name(30, ".log") + ".segjobs-0123456789ab.tmp")
    temp.write_bytes(b"half a write")
    assert main(["compact", "--log-dir", str(tmp_path / "reference"), "--config", str(config), "--now", NOW,
                 "--quiet"]) == 0
    capsys.readouterr()
    with immutable([temp]):
        assert main(["recover", "--log-dir", str(tmp_path / "logs"), "--now", NOW]) == 1
        err = capsys.readouterr().err
        assert f"could not delete the leftover {temp}" in err and "Operation not permitted" in err, err
        assert main(["compact", "--log-dir", str(tmp_path / "logs"), "--config", str(config), "--now", NOW,
                     "--quiet"]) == 0
        assert f"could not delete the leftover {temp}" in capsys.readouterr().err
        got = _tree(tmp_path / "logs")
    assert got.pop(str(temp.relative_to(tmp_path / "logs"))) == b"half a write"
    assert got == _tree(tmp_path / "reference"), "both partitions compacted as without the leftover"
