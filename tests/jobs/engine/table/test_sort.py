"""``segjobs table`` with the ``deltalake`` writer on partitions whose latest rows may not fit memory: the
on-disk dedupe (:mod:`jobs.engine.table.sort`, the external-sort key pass and buckets) gives the table the
in-memory dedupe gives, with the same exact counts, and it is the path taken when the range may not fit
``latest_buffer_bytes``.

Level: :func:`jobs.api.table` with its partition tasks in this process and the embedded ``deltalake`` writer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import api
from segment_io.checkpoint import write_offset_checkpoint
from segment_io.latest import LatestRows
from segment_io.layout import LOG_START_OFFSET_CHECKPOINT, partition_dir_name
from segment_io.storage import open_storage
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.hypothesis_budget import examples
from tests.support.table_oracle import LOGS, TOPIC, expected_rows, table_rows, write_topic

#: a bound no range fits: every partition with something to apply is deduped on disk
TINY = 1


def run(log_dir: Path, table: Path, **kw) -> api.TableResult:
    options = api.TableOptions(table=str(table), topic=TOPIC, progress=lambda line: None, **kw)
    return api.table(log_dir, options, seams=api.Seams(runner=api.InProcessTasks()))


def counts(result: api.TableResult) -> list[tuple]:
    return [(p.partition, p.action, p.applied_after, p.inserts, p.updates, p.deletes, p.tombstones_without_row)
            for p in result.partitions]


def both(log_dir: Path, memory: Path, disk: Path, **kw) -> tuple[api.TableResult, api.TableResult]:
    """The same run with the in-memory and the on-disk dedupe: equal tables and equal counts."""
    dry_m, dry_d = run(log_dir, memory, dry_run=True, **kw), run(log_dir, disk, dry_run=True, latest_buffer_bytes=TINY,
                                                                   **kw)
    m, d = run(log_dir, memory, **kw), run(log_dir, disk, latest_buffer_bytes=TINY, **kw)
    assert m.exit_code == d.exit_code == 0, (m.partitions, d.partitions)
    assert counts(d) == counts(m)
    # a dry run counts exactly what the run then does, on either path
    assert [c[3:] for c in counts(dry_d)] == [c[3:] for c in counts(dry_m)] == [c[3:] for c in counts(m)]
    assert {p.dedupe for p in d.partitions if p.records_read} <= {"external-sort"}
    assert {p.dedupe for p in m.partitions} <= {"memory"}
    assert table_rows(disk) == table_rows(memory)
    return m, d


# Each example builds two tables over three nights and a rebuild (about 1 s): a third of the profile's examples.
@settings(max_examples=examples(0.3), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
@given(logs=LOGS, cut1=st.floats(0, 1), cut2=st.floats(0, 1))
@pytest.mark.slow
def test_on_disk_dedupe_gives_the_in_memory_table(tmp_path_factory, monkeypatch, logs, cut1, cut2):
    from jobs.engine.table import sort as table_sort

    # pieces of a few batches: the passes' splitting of a segment is exercised too
    monkeypatch.setattr(table_sort, "PIECE_BYTES", 200)
    base = tmp_path_factory.mktemp("sorted")
    log_dir, memory, disk = base / "logs", base / "memory", base / "disk"
    lo, hi = sorted((cut1, cut2))
    for share in (lo, hi, 1.0):
        write_topic(log_dir, {p: ops[:int(len(ops) * share)] for p, ops in logs.items()})
        both(log_dir, memory, disk)
        assert table_rows(disk) == expected_rows(log_dir, sorted(logs))
    # a rebuild (every key of the table checked against the log) also agrees
    both(log_dir, memory, disk, rebuild=True)
    assert table_rows(disk) == expected_rows(log_dir, sorted(logs))


def _log(log_dir: Path, log: LogBuilder) -> None:
    shutil.rmtree(log_dir, ignore_errors=True)
    write_log(log.table(), log_dir / partition_dir_name(TOPIC, 0))


def test_the_bound_decides_the_path_and_the_on_disk_one_holds_no_latest_rows(tmp_path, monkeypatch):
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2"), rec(None, "keyless")])
    log.txn_batch(7, 0, [rec("c", "aborted")])
    log.abort(7, 0)
    log.roll()
    log.batch([tombstone("a"), rec("b", "22"), rec("e", "5")])
    _log(tmp_path / "logs", log)
    roomy = run(tmp_path / "logs", tmp_path / "roomy")
    assert roomy.partitions[0].dedupe == "memory"

    def no_latest_rows_in_memory(self, records, eligible):
        raise AssertionError("the in-memory dedupe ran for a partition over the bound")

    monkeypatch.setattr(LatestRows, "add", no_latest_rows_in_memory)
    # 9 records of a few bytes each: a bound of 500 bytes is below the range's estimate
    bounded = run(tmp_path / "logs", tmp_path / "bounded", latest_buffer_bytes=500)
    (p,) = bounded.partitions
    assert (p.dedupe, p.action, p.inserts, p.deletes, p.tombstones_without_row) == ("external-sort", "applied", 2, 0,
                                                                                    1)
    assert table_rows(tmp_path / "bounded") == table_rows(tmp_path / "roomy") == expected_rows(tmp_path / "logs", [0])


def test_on_disk_dedupe_starts_at_the_log_start_offset(tmp_path):
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    log.batch([rec("c", "3"), rec("a", "11")])
    _log(tmp_path / "logs", log)
    write_offset_checkpoint(open_storage(str(tmp_path / "logs")), str(tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT),
                            {(TOPIC, 0): 2})
    r = run(tmp_path / "logs", tmp_path / "t", latest_buffer_bytes=TINY)
    assert r.partitions[0].dedupe == "external-sort"
    assert {k[1]: v[:2] for k, v in table_rows(tmp_path / "t").items()} == {b"a": (b"11", 3), b"c": (b"3", 2)}


def test_a_segment_that_lost_a_kept_record_fails_the_partition_naming_it(tmp_path, monkeypatch):
    """The log changed between the key pass and the read (a compaction beside the table): nothing is written,
    the error names the segment and the offset, and a rerun applies the partition."""
    from jobs.engine.table import sort as table_sort

    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    _log(tmp_path / "logs", log)
    real_prepare = table_sort.prepare

    def prepare_then_compact(*args, **kw):
        out = real_prepare(*args, **kw)
        log2 = LogBuilder(topic=TOPIC, partition=0)
        log2.batch([rec("a", "1")])
        _log(tmp_path / "logs", log2)  # b (offset 1) is gone
        return out

    monkeypatch.setattr(table_sort, "prepare", prepare_then_compact)
    r = run(tmp_path / "logs", tmp_path / "t", latest_buffer_bytes=TINY)
    (p,) = r.partitions
    assert r.exit_code == 1 and p.action == "error"
    assert "offset 1" in (p.error or "") and "00000000000000000000.log" in (p.error or "") and "rerun" in p.error
    from deltalake import DeltaTable

    assert not DeltaTable.is_deltatable(str(tmp_path / "t"))  # nothing committed
    monkeypatch.setattr(table_sort, "prepare", real_prepare)
    again = run(tmp_path / "logs", tmp_path / "t", latest_buffer_bytes=TINY)
    assert again.exit_code == 0 and table_rows(tmp_path / "t") == expected_rows(tmp_path / "logs", [0])


def test_option_is_checked():
    with pytest.raises(api.InvalidOptionUsage, match="latest_buffer_bytes"):
        api.TableOptions(table="/t", topic="x", latest_buffer_bytes=0)


def test_the_work_files_go_when_the_run_is_interrupted_during_the_on_disk_dedupe(tmp_path, monkeypatch):
    """An interrupt (Ctrl-C) while partitions are deduped on disk: the work dir (32 bytes a key and segment) is
    removed all the same, never left in $TMPDIR."""
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    log = LogBuilder(topic=TOPIC, partition=0)
    log.batch([rec("a", "1"), rec("b", "2")])
    _log(tmp_path / "logs", log)

    def interrupted(line) -> None:
        if "deduped on disk" in str(line):
            assert list(scratch.iterdir()), "the work dir exists while the dedupe runs"
            raise KeyboardInterrupt

    options = api.TableOptions(table=str(tmp_path / "t"), topic=TOPIC, progress=interrupted, latest_buffer_bytes=TINY)
    with pytest.raises(KeyboardInterrupt):
        api.table(tmp_path / "logs", options, seams=api.Seams(runner=api.InProcessTasks()))
    assert list(scratch.iterdir()) == []


def test_a_partition_whose_log_changed_under_the_read_fails_alone_as_its_dry_run_said(tmp_path, monkeypatch):
    """Two partitions deduped on disk; the log of one changes between the key pass and the read (a record it kept
    is gone): that partition is reported and left as it was, the other is applied, in the dry run as in the run."""
    from jobs.engine.table import sort as table_sort

    def write(drop_b: bool) -> None:
        for p in (0, 1):
            log = LogBuilder(topic=TOPIC, partition=p)
            log.batch([rec("a", f"{p}"), rec("b", f"{p}")] if p == 0 or not drop_b else [rec("a", f"{p}")])
            shutil.rmtree(tmp_path / "logs" / partition_dir_name(TOPIC, p), ignore_errors=True)
            write_log(log.table(), tmp_path / "logs" / partition_dir_name(TOPIC, p))

    write(drop_b=False)
    real_prepare = table_sort.prepare

    def prepare_then_compact(*args, **kw):
        out = real_prepare(*args, **kw)
        if kw["partition"] == 1:
            write(drop_b=True)  # b of partition 1 (offset 1) is gone
        return out

    monkeypatch.setattr(table_sort, "prepare", prepare_then_compact)
    dry = run(tmp_path / "logs", tmp_path / "t", latest_buffer_bytes=TINY, dry_run=True)
    write(drop_b=False)
    real = run(tmp_path / "logs", tmp_path / "t", latest_buffer_bytes=TINY)
    for r in (dry, real):
        assert r.exit_code == 1
        assert [(p.partition, p.action) for p in r.partitions] == [(0, "would apply" if r is dry else "applied"),
                                                                  (1, "error")]
        assert "offset 1" in (r.partitions[1].error or "")
    assert counts(dry)[0][3:] == counts(real)[0][3:] == (2, 0, 0, 0)
    assert {k: v[0] for k, v in table_rows(tmp_path / "t").items()} == {(0, b"a"): b"0", (0, b"b"): b"0"}
