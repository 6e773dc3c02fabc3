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

from jobs.cli import main
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
