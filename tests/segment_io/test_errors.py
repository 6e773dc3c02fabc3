"""The exception hierarchy: one located message format for every error about a place, exit codes by class."""

from __future__ import annotations

import pytest

from jobs.logdir.commit import CommitError, RecoveryError
from segment_io import errors as E
from segment_io.spark.options import DataSourceOptionError


@pytest.mark.parametrize("error, message", [
    (E.CorruptRecordError("bad crc", path="a/0.log", position=70, offset=2), "a/0.log, byte 70, offset 2: bad crc"),
    (E.CrcMismatchError("bad crc", position=70), "byte 70: bad crc"),
    (E.InvalidRecordsError("out of order", offset=5), "offset 5: out of order"),
    (E.InvalidRecordsError("out of order"), "out of order"),
    (E.CorruptIndexError("not sorted", path="0.index", position=16), "0.index, byte 16: not sorted"),
    (E.CorruptCheckpointError("not a number", path="cp", line=3), "cp, line 3: not a number"),
    (E.NotFoundError("no such file", uri="s3://b/k"), "s3://b/k: no such file"),
    (CommitError("staged file missing", uri="/d/t-0", offset=40), "/d/t-0, offset 40: staged file missing"),
    (RecoveryError("intent unreadable", uri="/d/t-0"), "/d/t-0: intent unreadable"),
])
def test_located_errors_name_the_place_before_the_detail(error: E.LocatedError, message: str) -> None:
    assert isinstance(error, E.LocatedError)
    assert str(error) == message
    assert error.detail == message.rsplit(": ", 1)[-1]


def test_storage_and_commit_errors_name_their_uri() -> None:
    assert E.StorageError("x", uri="s3://b/k").uri == "s3://b/k" == E.StorageError("x", uri="s3://b/k").path
    assert CommitError("x", uri="/d/t-0", offset=1).uri == "/d/t-0"


def test_located_copy_names_the_file_and_shifts_the_position() -> None:
    err = E.CrcMismatchError("bad crc", position=10, offset=3).located(path="s3://b/0.log", offset_shift=100)
    assert type(err) is E.CrcMismatchError and str(err) == "s3://b/0.log, byte 110, offset 3: bad crc"


@pytest.mark.parametrize("error, code", [
    (E.ConfigError("x"), 2), (E.UsageError("x"), 2), (E.LockHeldError("x"), 2),
    (DataSourceOptionError("topics", "x"), 2),
    (E.SegjobsError("x"), 1), (E.CorruptRecordError("x"), 1), (E.StorageError("x"), 1), (CommitError("x"), 1),
])
def test_exit_code_is_an_attribute_of_the_error_class(error: E.SegjobsError, code: int) -> None:
    # 2: nothing was done; 1: the work ran and something failed
    assert error.exit_code == code
