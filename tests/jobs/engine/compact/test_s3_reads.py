"""How many times a compaction on S3 fetches each object. The transaction-state scan fetches each segment of a
partition that may be due once and leaves a copy on its host (``segment_io.storage.spool.HostSpool``); the cleaning
task reads those copies, and where it runs on another host it fetches each segment it cleans once, its dirty
segments included, which its offset map's pass reads first (``TaskSpool``)."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.engine.runtime.tasks import InProcessTasks
from jobs.rules.offset_map import buffer_bytes_for_keys
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.storage import spool
from tests.support.s3_objects import PREFIX, put_objects

NOW = "2024-01-01T00:00:00Z"
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n"segment.bytes" = 1048576\n'
SCAN, CLEAN = "read the transaction state of 1 partition(s)", "compact 1 partition(s)"


def _partition(tmp_path: Path) -> tuple[Path, list[Path]]:
    """One partition of about 8 MB of dirty segments (more than a task decodes once and keeps:
    cleaning.SINGLE_DECODE_BYTES), every key written twice, some transactions; its log dir and closed segments."""
    logs = tmp_path / "logs"
    generate_log_dir(GenerateSpec(topics=("orders",), partitions=1, records=8_000, value_bytes=1024,
                                  superseded_share=0.5, segment_bytes=1 << 20, transactional_share=0.05,
                                  aborted_share=0.2), str(logs))
    closed = sorted((logs / "orders-0").glob("*.log"))[:-1]  # the active segment is never cleaned
    assert sum(p.stat().st_size for p in closed) > 6 << 20
    (tmp_path / "t.toml").write_text(CONFIG)
    return logs, closed


def _compact_on_s3(endpoint, bucket: str, tmp_path: Path, *options: str) -> dict:  # type: ignore[no-untyped-def]
    """``segjobs compact`` of the log dir in ``bucket`` with ``tmp_path/t.toml``, as a user runs it: its report."""
    report = tmp_path / "r.json"
    assert main(["compact", "--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", endpoint.endpoint_url,
                 "--now", NOW, "--config", str(tmp_path / "t.toml"), "--report", str(report), "--quiet",
                 *options]) == 0
    doc: dict = json.loads(report.read_text())
    return doc


def _stage(traffic: dict, what: str) -> dict:
    (counts,) = [t for stage, t in traffic["tasks"].items() if stage.endswith(what)]
    return counts


def _index_bytes(closed: list[Path]) -> int:
    """The index files of ``closed`` segments: what the clean checks (.index, .timeindex) and reads (.txnindex)."""
    files = [p.with_suffix(s) for p in closed for s in (".index", ".timeindex", ".txnindex")]
    return sum(p.stat().st_size for p in files if p.exists())


@pytest.mark.s3
def test_on_one_host_each_segment_is_fetched_once_by_the_scan_and_cleaned_from_its_copy(spark, s3_bucket_env,
                                                                                        tmp_path: Path) -> None:
    endpoint, bucket = s3_bucket_env
    logs, closed = _partition(tmp_path)
    put_objects(endpoint, bucket, logs)
    doc = _compact_on_s3(endpoint, bucket, tmp_path)
    (entry,) = doc["partitions"]
    assert entry["action"] == "compacted" and entry["cleaned_range"][0] == 0
    traffic = doc["store_traffic"]
    every_log = sum(p.stat().st_size for p in (logs / "orders-0").glob("*.log"))
    epochs = (logs / "orders-0" / "leader-epoch-checkpoint").stat().st_size  # the scan reads it too
    assert _stage(traffic, SCAN)["get_bytes"] == every_log + epochs
    assert _stage(traffic, CLEAN)["get_bytes"] == _index_bytes(closed)  # no .log fetched again
    # the task removed the copies (looked for where a Spark task of the session keeps them)
    left = spark.sparkContext.parallelize([0], 1).map(_host_spool_files).collect()[0]
    assert left == [], left


@pytest.mark.s3
def test_copies_no_cleaning_task_reads_are_removed_when_the_run_ends(spark, s3_bucket_env, tmp_path: Path) -> None:
    """External-sort's tasks (several a segment) leave the scan's copies for one another: they go at the run's
    end."""
    endpoint, bucket = s3_bucket_env
    logs, _ = _partition(tmp_path)
    put_objects(endpoint, bucket, logs)
    doc = _compact_on_s3(endpoint, bucket, tmp_path, "--strategy", "external-sort")
    assert [(p["action"], p["strategy"]) for p in doc["partitions"]] == [("compacted", "external-sort")]
    assert any(stage.endswith("remove the scans' copies of segments") for stage in doc["store_traffic"]["tasks"])
    left = spark.sparkContext.parallelize([0], 1).map(_host_spool_files).collect()[0]
    assert left == [], left


@pytest.mark.s3
@pytest.mark.parametrize(("strategy", "split_bytes"), [
    ("external-sort", None),
    ("external-sort", 256 << 10),
    ("auto", None),  # memory first: its map fills and it hands the partition over, leaving the copies
])
def test_external_sort_reads_the_scan_s_copies_not_the_objects(s3_bucket, tmp_path: Path, monkeypatch,
                                                               strategy: str, split_bytes: int | None) -> None:
    """On the host where the scan ran (every task of a ``local[N]`` run), external-sort's key pass and rewrite read
    the scan's copies: no segment is fetched again. A segment split into pieces (``SPLIT_BYTES``; here 1 MiB segments in
    pieces of 256 KiB) fetched the whole object once per piece before (a broker's 1 GiB segment in 16 pieces: 16
    GiB), each piece decoding only its share."""
    from jobs.engine.compact import external_sort

    if split_bytes is not None:
        monkeypatch.setattr(external_sort, "SPLIT_BYTES", split_bytes)
    endpoint, bucket = s3_bucket
    logs, closed = _partition(tmp_path)
    put_objects(endpoint, bucket, logs)
    result = api.compact(f"s3://{bucket}/{PREFIX}",
                         api.CompactOptions(config=tmp_path / "t.toml", storage=endpoint.storage_options(),
                                            strategy=strategy, dedupe_buffer_bytes=buffer_bytes_for_keys(500)),
                         now=NOW, seams=api.Seams(runner=InProcessTasks()))
    assert result.exit_code == 0 and result.partitions_compacted == 1
    (entry,) = [p.entry for p in result.partitions]
    assert entry["strategy"] == "external-sort", entry
    traffic = result.report.store_traffic
    ((key_pass_stage, key_pass),) = [(s, t) for s, t in traffic["tasks"].items() if "external-sort key pass" in s]
    pieces = int(key_pass_stage.split(" over ")[1].split()[0])  # "... key pass over N piece(s)"
    if strategy == "external-sort":
        split = split_bytes or external_sort.SPLIT_BYTES
        assert pieces == sum(-(-p.stat().st_size // split) for p in closed) >= (len(closed) if split_bytes is None
                                                                                else 4 * len(closed)), pieces
    else:  # the memory task's map pass handed over what it read; the key pass reads the rest
        assert 0 < pieces < len(closed), pieces
        (memory,) = [t for stage, t in traffic["tasks"].items() if stage.endswith(CLEAN)]
        assert memory["get_bytes"] < min(p.stat().st_size for p in closed), memory
    assert key_pass["get_bytes"] == 0, key_pass
    # the rewrite reads the copies too: it fetches its groups' maps from the work dir and the index files, no .log
    (rewrite,) = [t for stage, t in traffic["tasks"].items() if "external-sort rewrite" in stage]
    assert rewrite["get_bytes"] < min(p.stat().st_size for p in closed), rewrite
    every_log = sum(p.stat().st_size for p in (logs / "orders-0").glob("*.log"))
    epochs = (logs / "orders-0" / "leader-epoch-checkpoint").stat().st_size
    assert _stage(traffic, SCAN)["get_bytes"] == every_log + epochs


def _host_spool_files(_: object) -> list[str]:
    """In a Spark task: the files of every run's host spool on this host, and any task spool."""
    root = spool.spool_root()
    return [*glob.glob(os.path.join(root, f"{spool.RUN_PREFIX}*", "*")),
            *glob.glob(os.path.join(root, spool.PREFIX + "*"))]


class _CleaningElsewhere(InProcessTasks):
    """Tasks in this process, as if each cleaning task ran on another host than the scans: the scans' copies are
    gone when the cleaning starts. Only this run's: the spool root is shared with the other test processes, whose
    runs keep theirs."""

    def stream_bins(self, bin_fn, items, *, sizes=None, description=None):  # type: ignore[no-untyped-def]
        if description is not None and description.endswith(CLEAN):
            spools = {task.host_spool.name: task.host_spool for task in items if task.host_spool is not None}
            assert spools, "no host spool: the scans kept no copies to remove"
            for run in spools.values():
                run.remove()
        return super().stream_bins(bin_fn, items, sizes=sizes, description=description)


@pytest.mark.s3
def test_on_another_host_the_cleaning_task_fetches_each_segment_it_cleans_once(s3_bucket, tmp_path: Path) -> None:
    endpoint, bucket = s3_bucket
    logs, closed = _partition(tmp_path)
    put_objects(endpoint, bucket, logs)
    result = api.compact(f"s3://{bucket}/{PREFIX}", api.CompactOptions(config=tmp_path / "t.toml",
                                                                       storage=endpoint.storage_options()),
                         now=NOW, seams=api.Seams(runner=_CleaningElsewhere()))
    assert result.exit_code == 0 and result.partitions_compacted == 1
    clean = _stage(result.report.store_traffic, CLEAN)
    # each closed segment's .log once, and the index files: the dirty ones kept in the task's spool between the
    # offset map's pass and the clean
    assert clean["get_bytes"] == sum(p.stat().st_size for p in closed) + _index_bytes(closed), clean
    # the task's spool went with it (this process's: the spool root is shared with the other test processes)
    assert not glob.glob(os.path.join(spool.spool_root(), f"{spool.PREFIX}*-{os.getpid()}-*"))


@pytest.mark.s3
def test_small_partitions_read_by_the_first_scan_are_cleaned_from_its_copies(spark, s3_bucket_env,
                                                                               tmp_path: Path) -> None:
    """Partitions of at most selection.SMALL_PARTITION_BYTES that may be due are read in full by the run's first
    scan, on the driver's threads (no stage of scan tasks). That scan leaves its copies under the driver's spool root,
    where a ``local[N]`` run's cleaning tasks find them (Spark gives its Python workers another scratch dir) rather
    than fetch the segments a second time; the run removes what is left."""
    endpoint, bucket = s3_bucket_env
    logs = tmp_path / "logs"
    generate_log_dir(GenerateSpec(topics=("orders",), partitions=3, records=1_500, value_bytes=400,
                                  superseded_share=0.5, segment_bytes=64 << 10, transactional_share=0.05,
                                  aborted_share=0.2), str(logs))
    (tmp_path / "t.toml").write_text(CONFIG)
    put_objects(endpoint, bucket, logs)
    doc = _compact_on_s3(endpoint, bucket, tmp_path)
    assert [p["action"] for p in doc["partitions"]] == ["compacted"] * 3
    traffic = doc["store_traffic"]
    assert list(traffic["tasks"]) == ["segjobs compact: compact 3 partition(s)"]  # no stage of scan tasks
    closed = [p for d in sorted(logs.glob("orders-*")) for p in sorted(d.glob("*.log"))[:-1]]
    assert _stage(traffic, "compact 3 partition(s)")["get_bytes"] == _index_bytes(closed)  # no .log fetched again
    every_log = sum(p.stat().st_size for p in logs.rglob("*.log"))
    assert traffic["driver"]["get_bytes"] >= every_log  # the first scan fetched every segment, once in all:
    assert traffic["get_bytes"] - _index_bytes(closed) < every_log * 1.01
    # nothing of the run left, where the driver put it or where a Spark task would look
    run_dir = f"{spool.RUN_PREFIX}{doc['run_id']}"
    assert not os.path.exists(os.path.join(spool.spool_root(), run_dir))
    left = spark.sparkContext.parallelize([0], 1).map(_host_spool_files).collect()[0]
    assert not [f for f in left if run_dir in f], left


@pytest.mark.s3
def test_the_first_scan_s_copies_are_removed_when_the_run_fails(s3_bucket, tmp_path: Path, monkeypatch) -> None:
    """The driver's first scan keeps its copies under the system's temporary directory, which Spark does not clean:
    a run that fails after it (here its cleaning stage) still removes them."""
    from jobs.engine.compact import driver

    endpoint, bucket = s3_bucket
    logs = tmp_path / "logs"
    generate_log_dir(GenerateSpec(topics=("orders",), partitions=2, records=500, value_bytes=400,
                                  superseded_share=0.5, segment_bytes=64 << 10), str(logs))
    (tmp_path / "t.toml").write_text(CONFIG)
    put_objects(endpoint, bucket, logs)
    made: list[str] = []
    fetch = spool.HostSpool.fetch

    def recorded_fetch(self, storage, f):  # type: ignore[no-untyped-def]
        path = fetch(self, storage, f)
        made.extend([path] if path else [])
        return path

    def broken(self) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("the cleaning stage failed")

    monkeypatch.setattr(spool.HostSpool, "fetch", recorded_fetch)
    monkeypatch.setattr(driver.CompactionRun, "run_memory", broken)
    result = api.compact(f"s3://{bucket}/{PREFIX}", api.CompactOptions(config=tmp_path / "t.toml",
                                                                       storage=endpoint.storage_options()),
                         now=NOW, seams=api.Seams(runner=InProcessTasks()))
    assert result.exit_code != 0  # the frame reports the stop
    assert made and not [p for p in made if os.path.exists(p)]
    assert not os.path.exists(os.path.dirname(made[0]))


@pytest.mark.s3
def test_a_compact_delete_partition_is_rescanned_after_retention_from_the_scan_s_copies(spark, s3_bucket_env,
                                                                                          tmp_path: Path) -> None:
    """Retention runs first on a ``compact,delete`` partition, and compaction is planned on a scan of what it
    leaves: that scan reads the copies the transaction-state scan left on the host, fetching no segment again."""
    endpoint, bucket = s3_bucket_env
    logs, closed = _partition(tmp_path)
    (tmp_path / "t.toml").write_text('[defaults]\n"cleanup.policy" = "compact,delete"\n"segment.bytes" = 1048576\n'
                                     f'"retention.bytes" = {6 << 20}\n"retention.ms" = -1\n')
    put_objects(endpoint, bucket, logs)
    doc = _compact_on_s3(endpoint, bucket, tmp_path)
    (entry,) = doc["partitions"]
    assert entry["action"] == "compacted" and len(entry["retention"]["deleted"]) >= 1, entry
    traffic = doc["store_traffic"]
    every_log = sum(p.stat().st_size for p in (logs / "orders-0").glob("*.log"))
    epochs = (logs / "orders-0" / "leader-epoch-checkpoint").stat().st_size
    assert _stage(traffic, SCAN)["get_bytes"] == every_log + epochs
    rescan = _stage(traffic, "scan 1 partition(s) as retention leaves them")
    assert rescan["get_bytes"] <= epochs, rescan  # no .log fetched again
    assert _stage(traffic, CLEAN)["get_bytes"] <= _index_bytes(closed)
