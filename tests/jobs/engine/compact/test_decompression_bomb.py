"""A decompression bomb inside a log dir, as ``segjobs compact`` meets it on Spark: the partition holding it is
reported with file, byte position and offset and left untouched, the others are compacted, exit code 1.

The bomb is a zstd frame that declares 300 MiB of zeros (over the default 256 MiB bound), so the executor
refuses it from the frame header without allocating anything; the unbounded path (inflating until the bound)
is covered by tests/segment_io/test_decompression_bomb.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from segment_io.compression import MAX_BATCH_BYTES_ENV, ZSTD
from tests.support.bombs import inflating_payload, v2_batch_around
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.replay import comparable, read_partition, replay

NOW = "2026-11-22T03:00:00Z"
T0 = 1_700_000_000_000


def _partition(log_dir: Path, topic: str) -> LogBuilder:
    log = LogBuilder(topic, 0, timestamp=T0)
    for i in range(3):
        log.batch([rec("k", f"v{i}"), rec(f"u{i}", "x")])  # offsets 0-5
    return log


def _files(d: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(d)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_bomb_partition_is_reported_and_left_untouched_while_the_others_are_compacted(spark, tmp_path,
                                                                                        monkeypatch) -> None:
    monkeypatch.delenv(MAX_BATCH_BYTES_ENV, raising=False)
    log_dir = tmp_path / "logs"
    users = _partition(log_dir, "users")
    users.batch([tombstone("u0")]).roll().batch([rec("z", "active")])
    write_log(users.table(), log_dir / "users-0")

    # bomb-0: offsets 0-5, then the bomb batch at offset 6 at the end of the first segment, then an active
    # segment from offset 10
    bomb = _partition(log_dir, "bomb")
    bomb.next_offset = 10
    bomb.roll().batch([rec("z", "active")])
    first, _ = write_log(bomb.table(), log_dir / "bomb-0")
    position = first.stat().st_size
    with first.open("ab") as f:
        f.write(v2_batch_around(inflating_payload("zstd-content-size", 300 << 20), codec=ZSTD, count=1,
                                base_offset=6, timestamp=T0 + 100))
    config = tmp_path / "topics.toml"
    config.write_text('[defaults]\n"cleanup.policy" = "compact"\n')
    bomb_before = _files(log_dir / "bomb-0")
    users_before = replay(read_partition(log_dir / "users-0"))

    report = tmp_path / "report.json"
    rc = main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
               "--report", str(report)])

    assert rc == 1
    out = json.loads(report.read_text())
    [err] = out["errors"]
    assert err["partition"] == "bomb-0" and err["file"] == str(first)
    assert (err["position"], err["offset"]) == (position, 6)
    entry = {f"{e['topic']}-{e['partition']}": e for e in out["partitions"]}
    assert entry["bomb-0"]["action"] == "error"
    reason = entry["bomb-0"]["reason"]
    assert "zstd payload's frames declare at least 314572800 bytes" in reason and MAX_BATCH_BYTES_ENV in reason
    assert _files(log_dir / "bomb-0") == bomb_before
    assert entry["users-0"]["action"] == "compacted" and entry["users-0"]["records_removed"] > 0
    assert comparable(replay(read_partition(log_dir / "users-0")).latest) == comparable(users_before.latest)


def _genuine_2mib_batch(tmp_path: Path) -> tuple[Path, Path, Path]:
    """big-0 whose first (closed) segment ends with a genuine gzip batch of 2 MiB at offset 6, and a config
    that compacts every topic: the log dir, that segment and the config file."""
    import gzip

    from segment_io.compression import GZIP
    from tests.support.bombs import records_payload

    log_dir = tmp_path / "logs"
    big = _partition(log_dir, "big")
    big.next_offset = 10
    big.roll().batch([rec("z", "active")])
    first, _ = write_log(big.table(), log_dir / "big-0")
    with first.open("ab") as f:
        f.write(v2_batch_around(gzip.compress(records_payload(2 << 20)), codec=GZIP, count=1,
                                base_offset=6, timestamp=T0 + 100))
    config = tmp_path / "topics.toml"
    config.write_text('[defaults]\n"cleanup.policy" = "compact"\n')
    return log_dir, first, config


def test_max_batch_bytes_reaches_the_decoders_in_spark_tasks(spark, tmp_path, monkeypatch) -> None:
    """A genuine 2 MiB batch passes the default bound and is refused under ``--max-batch-bytes 1MiB``: the
    option travels to the Python workers, not only to the driver."""
    monkeypatch.delenv(MAX_BATCH_BYTES_ENV, raising=False)
    log_dir, first, config = _genuine_2mib_batch(tmp_path)
    before = _files(log_dir / "big-0")

    report = tmp_path / "report.json"
    argv = ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
            "--report", str(report), "--dry-run"]
    assert main([*argv, "--max-batch-bytes", "1MiB"]) == 1
    [err] = json.loads(report.read_text())["errors"]
    assert err["file"] == str(first) and err["offset"] == 6 and "1048576 bytes" in err["detail"]
    assert _files(log_dir / "big-0") == before

    assert main(argv) == 0  # the default bound (256 MiB) lets the genuine batch through
    assert json.loads(report.read_text())["errors"] == []


class _NoEnvironmentTasks(api.InProcessTasks):
    """Tasks in a worker whose environment the driver does not set (a cluster's executors, Spark Connect):
    whatever the driver might hand over as environment is lost on the way."""

    def set_environment(self, env: object) -> None:
        pass


@pytest.mark.parametrize(("command", "strategy"), [("compact", "memory"), ("compact", "external-sort"),
                                                    ("inspect", None)])
def test_the_bound_travels_with_the_tasks_not_in_the_environment(tmp_path, monkeypatch, command, strategy) -> None:
    """``max_batch_bytes`` reaches every task that decodes (the full scan, the key pass, the clean, inspect's
    count) as a parameter: a worker whose environment says nothing about it still refuses a 2 MiB batch under
    a 1 MiB bound, with the file and offset."""
    monkeypatch.delenv(MAX_BATCH_BYTES_ENV, raising=False)
    log_dir, first, config = _genuine_2mib_batch(tmp_path)
    before = _files(log_dir)
    seams = api.Seams(runner=_NoEnvironmentTasks())
    if command == "compact":
        options = api.CompactOptions(config=str(config), max_batch_bytes=1 << 20, dry_run=True, strategy=strategy)
        [error] = api.compact(log_dir, options, now=NOW, seams=seams).errors
    else:
        options = api.InspectOptions(config=str(config), max_batch_bytes=1 << 20, exact=True)
        [error] = api.inspect(log_dir, options, now=NOW, seams=seams).errors
    assert (error["file"], error["offset"]) == (str(first), 6) and "1048576 bytes" in error["detail"]
    assert _files(log_dir) == before


def test_a_malformed_bound_is_a_usage_error_before_anything_is_done(tmp_path, monkeypatch, capsys) -> None:
    log_dir = tmp_path / "logs"
    write_log(_partition(log_dir, "users").table(), log_dir / "users-0")
    before = _files(log_dir)
    with pytest.raises(SystemExit) as usage:  # argparse refuses the option itself
        main(["compact", "--log-dir", str(log_dir), "--max-batch-bytes", "lots"])
    assert usage.value.code == 2
    assert "argument --max-batch-bytes: cannot read 'lots' as a size" in capsys.readouterr().err
    monkeypatch.setenv(MAX_BATCH_BYTES_ENV, "-3")
    assert main(["retain", "--log-dir", str(log_dir)]) == 2
    assert MAX_BATCH_BYTES_ENV in capsys.readouterr().err
    assert _files(log_dir) == before
