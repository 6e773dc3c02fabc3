"""The convergence pass of a group's clean (``PartitionCleaner.clean_group``) is left out only where it cannot
change anything: an output without transactional or control records, without header-only batches and without a
v2 tombstone whose delete horizon has passed at ``now``. A tombstone this pass stamped (``now +
delete.retention.ms``) is due on the next pass only when delete.retention.ms <= 0 (the pass then runs and removes
it; the pass after that is left out); one stamped earlier and not yet due, one Kafka stamps no horizon for
(``now + delete.retention.ms`` overflows) and a legacy (magic 0/1) one, judged by its segment's mtime, stay as
they are. Either way the staged bytes are those of a clean with every pass run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import jobs.engine.compact.cleaning as cleaning
from jobs.engine.compact.cleaning import compact_partition
from jobs.rules.config import TopicConfig
from jobs.rules.kafka_defaults import LONG_MAX
from segment_io.layout import segment_file_name
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.cleaning import partition_task, staged_files

T0 = 1_700_000_000_000
NOW = T0 + 10 * 86_400_000
DAY = 86_400_000


def _build(partition_dir: Path, tombstones: str) -> None:
    """A partition of three segments (the last active) whose first two form one group: ``tombstones`` says what
    the second segment's ``b`` is: a plain value (``none``), a tombstone without a horizon (``fresh``), one whose
    batch was stamped earlier and is due (``stamped-due``) or not yet (``stamped-not-due``); ``legacy``: a
    magic 1 first segment holding a tombstone, v2 records after it."""
    start = 0
    if tombstones == "legacy":
        partition_dir.mkdir(parents=True)
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
        for i, (key, value) in enumerate([(b"a", b"0"), (b"x", None), (b"d", b"0"), (b"a", b"00")]):
            builder.append(i, timestamp=T0 + i, key=key, value=value)
        (partition_dir / segment_file_name(0)).write_bytes(bytes(builder.build()))
        os.utime(partition_dir / segment_file_name(0), ns=(T0 * 10**6, T0 * 10**6))
        start = 4
    log = LogBuilder("t", 0, timestamp=T0, start_offset=start)
    log.batch([rec("a", "1"), rec("b", "1")]).batch([rec("a", "2")])
    log.roll()
    if tombstones in ("none", "legacy"):
        log.batch([rec("b", "2")])
    elif tombstones == "fresh":
        log.batch([tombstone("b")])
    else:
        horizon = NOW - 1 if tombstones == "stamped-due" else NOW + DAY
        log.batch([tombstone("b"), rec("e", "1")], delete_horizon_ms=horizon)
    log.batch([rec("c", "1")])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)


def _clean(log_dir: Path, retention_ms: int, monkeypatch) -> tuple[dict[str, bytes], int, int]:
    """Stage the partition's clean; the staged files' bytes, how many times clean_records ran and how many
    tombstones the output holds."""
    calls = [0]
    real = cleaning.clean_records

    def clean_records(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cleaning, "clean_records", clean_records)
    config = TopicConfig.from_settings({"cleanup.policy": "compact"})
    # set past the config's check, which refuses a negative value (as Kafka's does): the cleaner's rules still
    # define what one does, and _stable must follow them there too
    object.__setattr__(config, "delete_retention_ms", retention_ms)
    task = partition_task(log_dir, "t", 0, NOW, config=config)
    out = compact_partition(task)
    monkeypatch.setattr(cleaning, "clean_records", real)
    assert out.error is None and [g.changed for g in out.groups] == [True]
    staged = staged_files(task, out)
    assert staged
    return staged, calls[0], out.stats["tombstones_kept"]


@pytest.mark.parametrize("tombstones,retention_ms,passes,kept", [
    ("none", DAY, 1, 0),
    ("fresh", DAY, 1, 1),  # stamped now + 1 day: not due at now
    ("fresh", 0, 2, 0),  # stamped now: due at once, the next pass removes it
    ("fresh", -1000, 2, 0),  # stamped before now
    ("fresh", -(NOW + 1), 1, 1),  # now + delete.retention.ms < 0: Kafka writes no horizon, the tombstone stays
    ("fresh", LONG_MAX, 1, 1),  # the sum overflows: no horizon either
    ("stamped-due", DAY, 1, 0),  # removed by the first pass
    ("stamped-due", 0, 1, 0),
    ("stamped-not-due", DAY, 1, 1),
    ("stamped-not-due", 0, 1, 1),  # already stamped: not stamped again
    ("legacy", DAY, 1, 1),
    ("legacy", 0, 1, 1),  # a legacy tombstone is judged by its segment's mtime, the same on every pass
])
def test_the_convergence_pass_runs_only_where_it_may_change_something(tmp_path, monkeypatch, tombstones,
                                                                      retention_ms, passes, kept):
    _build(tmp_path / "logs" / "t-0", tombstones)
    staged, calls, tombstones_kept = _clean(tmp_path / "logs", retention_ms, monkeypatch)
    assert (calls, tombstones_kept) == (passes, kept)
    # the same clean with every convergence pass run gives the same bytes
    monkeypatch.setattr(cleaning, "_stable", lambda result, now_ms: False)
    _build(tmp_path / "every" / "t-0", tombstones)
    every, every_calls, _ = _clean(tmp_path / "every", retention_ms, monkeypatch)
    assert every_calls >= 2 and staged == every
