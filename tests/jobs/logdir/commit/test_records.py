"""The on-disk records of the commit protocols (jobs.logdir.commit.records): what recovery reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.logdir.commit.records import (
    DELETED_LEDGER,
    CommitError,
    DeleteIntent,
    RecoveryError,
    ReplaceIntent,
    in_rename_order,
    list_segment_files,
    live_data_suffixes,
    live_log_bases,
    put_intent,
    read_delete_intent,
    read_ledger,
    read_replace_intent,
    record_deleted,
)
from segment_io.layout import segment_file_name
from segment_io.storage import LocalStorage


def test_intents_read_back_as_they_were_written(tmp_path: Path) -> None:
    storage, pwork = LocalStorage(), str(tmp_path / "commit" / "t-0")
    replace = ReplaceIntent("t-0", {0: (".log", ".index")}, {0: {".log": 70, ".index": 12}}, run_id="r1")
    delete = DeleteIntent("t-0", (0, 10), now_ms=5)
    assert read_replace_intent(storage, pwork) is None and read_delete_intent(storage, pwork) is None
    put_intent(storage, pwork, "replace.json", replace.to_json(), "/logs/t-0")
    put_intent(storage, pwork, "delete.json", delete.to_json(), "/logs/t-0")
    assert read_replace_intent(storage, pwork) == replace and read_delete_intent(storage, pwork) == delete
    with pytest.raises(CommitError, match="run `segjobs recover` first"):
        put_intent(storage, pwork, "replace.json", replace.to_json(), "/logs/t-0")


def test_an_unreadable_intent_or_ledger_is_a_recovery_error_naming_the_file(tmp_path: Path) -> None:
    storage, pwork = LocalStorage(), tmp_path / "commit" / "t-0"
    pwork.mkdir(parents=True)
    (pwork / "replace.json").write_text('{"partition": "t-0"}')
    (pwork / DELETED_LEDGER).write_text("[]")
    with pytest.raises(RecoveryError, match="unreadable replace intent") as info:
        read_replace_intent(storage, str(pwork))
    assert info.value.uri == str(pwork / "replace.json")
    with pytest.raises(RecoveryError, match="unreadable deletion ledger"):
        read_ledger(storage, str(pwork))


def test_the_ledger_keeps_the_first_deletion_time_and_goes_when_empty(tmp_path: Path) -> None:
    storage, pwork = LocalStorage(), str(tmp_path / "commit" / "t-0")
    assert record_deleted(storage, pwork, [0, 10], now_ms=5)
    assert not record_deleted(storage, pwork, [10], now_ms=9)  # the delay never restarts
    assert record_deleted(storage, pwork, [20], now_ms=9)
    assert read_ledger(storage, pwork) == {0: 5, 10: 5, 20: 9}


def test_the_partition_listing_knows_segment_files_only(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    for name in (segment_file_name(0, ".log"), segment_file_name(0, ".timeindex"), segment_file_name(0, ".index"),
                 segment_file_name(10, ".log") + ".swap", segment_file_name(20, ".log") + ".deleted",
                 segment_file_name(30, ".log"), segment_file_name(30, ".snapshot"), "partition.metadata",
                 "leader-epoch-checkpoint"):
        (part / name).write_bytes(b"")
    files = list_segment_files(LocalStorage(), str(part))
    assert {f.info.name for f in files} == {segment_file_name(0, s) for s in (".log", ".index", ".timeindex")} | {
        segment_file_name(10, ".log") + ".swap", segment_file_name(20, ".log") + ".deleted",
        segment_file_name(30, ".log"), segment_file_name(30, ".snapshot")}
    assert live_log_bases(files) == [0, 30]
    assert live_data_suffixes(files, 0) == (".log", ".index", ".timeindex")  # Kafka's order, not the listing's
    assert in_rename_order([".timeindex", ".log", ".index"]) == [".log", ".index", ".timeindex"]
