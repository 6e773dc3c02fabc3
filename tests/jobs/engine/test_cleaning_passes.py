"""The convergence pass of a group's clean (``PartitionCleaner.clean_group``) is left out only where it cannot
change anything: an output without tombstones, transactional or control records and header-only batches. Where
the output has any of them the pass runs (a tombstone's horizon with ``delete.retention.ms`` 0 is due on the very
next pass, which removes it; the pass after that, on an output without tombstones, is left out), and either way
the staged bytes are those of a clean with every pass run."""

from __future__ import annotations

from pathlib import Path

import pytest

import jobs.engine.cleaning as cleaning
from jobs.engine.cleaning import CompactTask, compact_partition
from jobs.engine.scan import scan_partition
from jobs.logdir.commit import committer_for
from jobs.logdir.lock import work_uri
from jobs.rules.config import TopicConfig
from jobs.rules.map_capacity import max_keys_for_buffer
from jobs.rules.plan_compact import plan_compaction
from segment_io.compression import DEFAULT_MAX_BATCH_BYTES
from segment_io.layout import list_log_dir
from segment_io.storage import LocalStorage
from tests.support.builders import LogBuilder, rec, tombstone, write_log

T0 = 1_700_000_000_000
NOW = T0 + 10 * 86_400_000


def _build(partition_dir: Path, *, with_tombstone: bool) -> None:
    log = LogBuilder("t", 0, timestamp=T0)
    log.batch([rec("a", "1"), rec("b", "1")]).batch([rec("a", "2")])
    log.roll().batch([tombstone("b") if with_tombstone else rec("b", "2")]).batch([rec("c", "1")])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)


def _clean(log_dir: Path, retention_ms: int, monkeypatch) -> tuple[dict[str, bytes], int]:
    """Stage the partition's clean; the staged files' bytes and how many times clean_records ran."""
    calls = [0]
    real = cleaning.clean_records

    def clean_records(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cleaning, "clean_records", clean_records)
    storage = LocalStorage()
    listing = list_log_dir(storage, str(log_dir)).partitions[("t", 0)]
    scan = scan_partition(storage, listing, now_ms=NOW)
    config = TopicConfig.from_settings({"cleanup.policy": "compact", "delete.retention.ms": retention_ms})
    plan = plan_compaction(scan.state, config, NOW, requested=True)
    committer = committer_for(storage, work_uri(str(log_dir)), log_dir=str(log_dir))
    out = compact_partition(CompactTask(storage, listing, scan.state, plan, config, scan.txn, NOW,
                                        max_keys_for_buffer(1 << 20), False, committer, DEFAULT_MAX_BATCH_BYTES))
    monkeypatch.setattr(cleaning, "clean_records", real)
    assert out.error is None and [g.changed for g in out.groups] == [True]
    staged = {p.name: p.read_bytes() for p in Path(str(log_dir) + ".segjobs").rglob("*") if p.is_file()}
    assert staged
    return staged, calls[0]


@pytest.mark.parametrize("with_tombstone,retention_ms,passes", [(False, 86_400_000, 1), (True, 86_400_000, 2),
                                                                  (True, 0, 2)])
def test_the_convergence_pass_runs_only_where_it_may_change_something(tmp_path, monkeypatch, with_tombstone,
                                                                      retention_ms, passes):
    _build(tmp_path / "logs" / "t-0", with_tombstone=with_tombstone)
    staged, calls = _clean(tmp_path / "logs", retention_ms, monkeypatch)
    assert calls == passes
    # the same clean with every convergence pass run gives the same bytes
    monkeypatch.setattr(cleaning, "_stable", lambda result: False)
    _build(tmp_path / "every" / "t-0", with_tombstone=with_tombstone)
    every, every_calls = _clean(tmp_path / "every", retention_ms, monkeypatch)
    assert every_calls >= 2 and staged == every
