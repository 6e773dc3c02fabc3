"""The offset checkpoint files as the jobs read, update and write them (jobs.logdir.checkpoints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.logdir.checkpoints import (
    STEP_WRITE_LOG_START,
    raise_log_start_checkpoint,
    read_job_checkpoints,
    write_cleaner_checkpoint,
)
from segment_io.checkpoint import read_offset_checkpoint
from segment_io.errors import UsageError
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, list_log_dir
from segment_io.storage import LocalStorage
from tests.support.retention import write_checkpoint


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
