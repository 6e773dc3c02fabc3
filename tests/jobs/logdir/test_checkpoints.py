"""The offset checkpoint files as the jobs read, update and write them (jobs.logdir.checkpoints)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.logdir.checkpoints import (
    STEP_WRITE_LOG_START,
    cleaner_reset_warning,
    raise_log_start_checkpoint,
    read_job_checkpoints,
    write_cleaner_checkpoint,
)
from segment_io.checkpoint import read_offset_checkpoint
from segment_io.errors import UsageError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, list_log_dir
from segment_io.storage import LocalStorage, open_storage
from tests.support.retention import NOW, OLD, RECENT, build_partition, run_command, write_checkpoint
from tests.support.s3_objects import upload


def _log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    (d / "t-0").mkdir(parents=True)
    return d


def test_the_jobs_read_both_checkpoints_and_an_absent_file_is_empty(tmp_path: Path) -> None:
    d = _log_dir(tmp_path)
    write_checkpoint(d, LOG_START_OFFSET_CHECKPOINT, {("t", 0): 4})
    storage = LocalStorage()
    read = read_job_checkpoints(storage, str(d), list_log_dir(storage, str(d)))
    assert read == {CLEANER_OFFSET_CHECKPOINT: {}, LOG_START_OFFSET_CHECKPOINT: {("t", 0): 4}}


@pytest.mark.parametrize("name, fix", [(CLEANER_OFFSET_CHECKPOINT, "delete the file"),
                                       (LOG_START_OFFSET_CHECKPOINT, "restore the file")])
def test_a_malformed_checkpoint_is_a_usage_error_naming_the_file_the_line_and_the_fix(tmp_path: Path, name: str,
                                                                                    fix: str) -> None:
    d = _log_dir(tmp_path)
    (d / name).write_text("0\n1\nt zero 5\n")
    storage = LocalStorage()
    with pytest.raises(UsageError) as info:
        read_job_checkpoints(storage, str(d), list_log_dir(storage, str(d)))
    message = str(info.value)
    assert message.startswith(f"{d / name}, line 3: ") and "nothing was done" in message and f"fix: {fix}" in message


def test_the_cleaner_checkpoint_is_written_whole_in_partition_order(tmp_path: Path) -> None:
    d = _log_dir(tmp_path)
    write_cleaner_checkpoint(LocalStorage(), str(d), {("t", 1): 7, ("a", 0): 3})
    assert (d / CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n2\na 0 3\nt 1 7\n"


def test_log_start_entries_only_rise_and_other_partitions_keep_theirs(tmp_path: Path) -> None:
    d = _log_dir(tmp_path)
    write_checkpoint(d, LOG_START_OFFSET_CHECKPOINT, {("t", 0): 10, ("other", 3): 77})
    steps: list[str] = []
    storage = LocalStorage()
    after, written = raise_log_start_checkpoint(storage, str(d), {("t", 0): 12, ("u", 1): 5}, fault=steps.append)
    assert after == {("t", 0): 12, ("u", 1): 5} and written == {("t", 0): 12, ("u", 1): 5}
    assert steps == [STEP_WRITE_LOG_START]
    assert read_offset_checkpoint(storage, str(d / LOG_START_OFFSET_CHECKPOINT)) == {
        ("other", 3): 77, ("t", 0): 12, ("u", 1): 5}
    # an entry never goes down, and nothing to raise is no write
    steps.clear()
    after, written = raise_log_start_checkpoint(storage, str(d), {("t", 0): 11}, fault=steps.append)
    assert after == {("t", 0): 12} and written == {} and steps == []


# --------------------------------------------------------------------------------------------------
# A checkpoint that is not a regular file: exit 2 before the lock, for every command, never read as absent
# --------------------------------------------------------------------------------------------------

KINDS = ["dangling symbolic link", "directory", "FIFO (named pipe)"]


def _make_irregular(path: Path, kind: str) -> None:
    """``path`` as ``kind``; a dangling link leads where a checkpoint volume is not mounted."""
    path.unlink(missing_ok=True)
    if kind == "dangling symbolic link":
        path.symlink_to(path.parent.parent / "unmounted" / path.name)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_text("0\n0\n")
    else:
        os.mkfifo(path)


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root``'s parent (the log dir and any work dir beside it), never opening a FIFO."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root.parent):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            out[str(p)] = (("link", os.readlink(p)) if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode)
                           else "fifo" if stat.S_ISFIFO(st.st_mode) else p.read_bytes())
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", [CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT])
def test_a_checkpoint_that_is_not_a_regular_file_is_a_usage_error_naming_it(tmp_path: Path, no_hang: None,
                                                                            name: str, kind: str) -> None:
    d = _log_dir(tmp_path)
    _make_irregular(d / name, kind)
    storage = LocalStorage()
    with pytest.raises(UsageError) as info:
        read_job_checkpoints(storage, str(d), list_log_dir(storage, str(d)))
    message = str(info.value)
    assert message.startswith(f"{d / name}: {name} is a {kind}") and "not a regular file" in message
    assert "nothing was done" in message and "fix: make it the regular file again" in message


COMMANDS = [["inspect"], ["compact", "--dry-run"], ["compact"], ["retain", "--dry-run"], ["retain"]]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", [CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT])
def test_every_command_stops_with_exit_2_before_the_lock_and_touches_nothing(tmp_path: Path, capsys, no_hang: None,
                                                                            name: str, kind: str) -> None:
    """The link's target holds another partition's DeleteRecords entry (``orders 1 3000``): read as an empty file,
    the link was replaced by ``retain`` with a file holding only the entries it raised, and that one was lost. A
    directory was taken for an absent file by every command but the real ``retain``, which failed late (exit 1);
    a FIFO made every command hang."""
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [RECENT]])
    write_checkpoint(d, LOG_START_OFFSET_CHECKPOINT, {("t", 0): 0, ("orders", 1): 3000})
    _make_irregular(d / name, kind)
    before = _snapshot(d)
    for command in COMMANDS:
        code = main([*command, "--log-dir", str(d), "--now", str(NOW), "--quiet", "--set", "*:retention.ms=1d",
                     "--set", "*:cleanup.policy=compact,delete"])
        assert code == 2, command
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"segjobs {command[0]}: error: {d / name}: {name} is a {kind}"), line
        assert "nothing was done" in line
        assert _snapshot(d) == before, command  # no byte changed, no work dir or lock made


def test_a_symbolic_link_to_a_regular_checkpoint_is_read_through(tmp_path: Path) -> None:
    d = _log_dir(tmp_path)
    (tmp_path / "volume").mkdir()
    write_checkpoint(tmp_path / "volume", LOG_START_OFFSET_CHECKPOINT, {("orders", 1): 3000})
    (d / LOG_START_OFFSET_CHECKPOINT).symlink_to(tmp_path / "volume" / LOG_START_OFFSET_CHECKPOINT)
    storage = LocalStorage()
    read = read_job_checkpoints(storage, str(d), list_log_dir(storage, str(d)))
    assert read[LOG_START_OFFSET_CHECKPOINT] == {("orders", 1): 3000}


@pytest.mark.s3
@pytest.mark.parametrize("name", [CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT])
def test_an_s3_prefix_named_as_a_checkpoint_is_refused_and_a_checkpoint_object_is_read(s3_bucket, tmp_path: Path,
                                                                                      name: str) -> None:
    """S3 has no links or FIFOs: what it has is a "directory" (keys below ``<name>/``) where the object should be,
    which a read would take for an absent checkpoint."""
    endpoint, bucket = s3_bucket
    log_dir = f"s3://{bucket}/kafka/logs"
    storage = open_storage(log_dir, endpoint.storage_options())
    local = _log_dir(tmp_path)
    build_partition(local, "t", 0, [[OLD], [RECENT]])
    write_checkpoint(local, name, {("t", 0): 1})
    upload(storage, local, log_dir)
    assert read_job_checkpoints(storage, log_dir, list_log_dir(storage, log_dir))[name] == {("t", 0): 1}
    storage.delete(f"{log_dir}/{name}")
    storage.write_atomic(f"{log_dir}/{name}/part-0", b"0\n0\n")
    with pytest.raises(UsageError) as info:
        read_job_checkpoints(storage, log_dir, list_log_dir(storage, log_dir))
    assert str(info.value).startswith(f"{log_dir}/{name}: {name} is a directory, not a regular file")


# --------------------------------------------------------------------------------------------------
# A cleaner checkpoint entry compaction resets is warned of, as Kafka's cleaner warns
# --------------------------------------------------------------------------------------------------


def test_the_cleaner_reset_warning_names_the_partition_the_entry_and_the_reset_offset() -> None:
    def warn(entry: int | None, *, both: bool = False, dry_run: bool = False) -> str | None:
        return cleaner_reset_warning("orders-0", entry, 100, 6000, compact_and_delete=both, dry_run=dry_run)

    assert warn(-1) == ("orders-0: its cleaner-offset-checkpoint entry -1 is negative: it was reset to the log "
                        "start offset 100, as Kafka's cleaner does, and the partition is cleaned again from there")
    assert "entry 99 is below the log start offset 100: it would be reset to the log start offset 100" in \
        str(warn(99, dry_run=True))
    assert "entry 999999 is past the log end offset 6000: it was reset" in str(warn(999_999, both=True))
    # none where there is nothing to reset, nor (as in Kafka) below the log start of a compact,delete topic
    assert [warn(None), warn(100), warn(6000), warn(99, both=True), warn(-1, both=True)] == [None] * 5


@pytest.mark.parametrize("entry", [-1, 999_999])
def test_compact_warns_of_a_cleaner_checkpoint_entry_it_resets(tmp_path: Path, spark, capsys, entry: int) -> None:
    d = tmp_path / "logs"
    build_partition(d, "t", 0, [[OLD], [OLD], [RECENT]])
    write_checkpoint(d, CLEANER_OFFSET_CHECKPOINT, {("t", 0): entry})
    why = "negative" if entry < 0 else "past the log end offset 3"
    for dry_run in (True, False):
        capsys.readouterr()
        code, report = run_command("compact", d, "--set", "*:cleanup.policy=compact",
                                   *(["--dry-run"] if dry_run else []))
        assert code == 0 and report is not None
        note = (f"t-0: its cleaner-offset-checkpoint entry {entry} is {why}: it {'would be' if dry_run else 'was'} "
                f"reset to the log start offset 0")
        assert any(w.startswith(note) for w in report["warnings"]), report["warnings"]
        assert note in capsys.readouterr().err
    # cleaned from the reset (the log start offset) up to the active segment's base offset, 2
    assert read_offset_checkpoint(LocalStorage(), str(d / CLEANER_OFFSET_CHECKPOINT))[("t", 0)] == 2
