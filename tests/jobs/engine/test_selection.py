"""The forecast of whether a compaction run will read partitions in full (and so need Spark), made from the
listing and the checkpoints alone: :func:`jobs.engine.selection.may_read_in_full`."""

from __future__ import annotations

from pathlib import Path

from jobs.engine.selection import may_read_in_full
from jobs.rules.config import ConfigSet
from jobs.rules.scope import parse_scope
from segment_io.layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, list_log_dir
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, write_log


def _partition(log_dir: Path, topic: str, partition: int, closed: int) -> None:
    """``closed`` closed segments of two records each, then an active one (bases 0, 2, 4, ...)."""
    log = LogBuilder(topic, partition)
    for s in range(closed):
        log.batch([rec(f"k{s}", "a"), rec(f"k{s}", "b")]).roll()
    log.batch([rec("k", "active")])
    write_log(log.table(), log_dir / f"{topic}-{partition}")


def _forecast(log_dir: Path, cleaner: dict, policy: str = "compact", topics: tuple[str, ...] = (),
              partitions: tuple[str, ...] = ()) -> bool:
    listing = list_log_dir(open_storage(str(log_dir)), str(log_dir))
    configs = ConfigSet().with_overrides([f"*:cleanup.policy={policy}"])
    checkpoints = {CLEANER_OFFSET_CHECKPOINT: cleaner, LOG_START_OFFSET_CHECKPOINT: {}}
    return may_read_in_full(listing, checkpoints, configs, parse_scope(list(topics), list(partitions)))


def test_clean_partitions_forecast_no_full_read(tmp_path: Path) -> None:
    for p in range(3):
        _partition(tmp_path, "t", p, closed=2)
    clean = {("t", p): 4 for p in range(3)}  # each cleaner checkpoint at its active segment's base
    assert not _forecast(tmp_path, clean)
    # one partition with bytes past its checkpoint, or none at all: it may be due
    assert _forecast(tmp_path, {**clean, ("t", 1): 2})
    assert _forecast(tmp_path, {("t", 0): 4, ("t", 2): 4})


def test_what_is_never_read_in_full_forecasts_nothing(tmp_path: Path) -> None:
    _partition(tmp_path, "t", 0, closed=0)  # the active segment alone
    _partition(tmp_path, "u", 0, closed=2)
    assert not _forecast(tmp_path, {("u", 0): 4})
    assert not _forecast(tmp_path, {}, policy="delete")  # not compacted
    assert not _forecast(tmp_path, {}, topics=("t",))  # the dirty partition is out of scope


def test_compact_delete_and_requested_partitions_are_read_in_full(tmp_path: Path) -> None:
    _partition(tmp_path, "u", 0, closed=2)
    assert _forecast(tmp_path, {("u", 0): 4}, policy="compact,delete")  # retention runs on the full scan
    assert _forecast(tmp_path, {("u", 0): 4}, partitions=("u-0",))  # requested: selected when it has bytes
