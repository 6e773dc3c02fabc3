"""What a compaction on S3 fetches, against each object once: ``segjobs compact`` as users run it, on moto_server.

Issue 34, item 2: read each byte once where Kafka does. A run's report counts its requests and the bytes its GETs
fetched (``store_traffic``, see :mod:`segment_io.storage.traffic`); this section runs ``segjobs compact`` in a new
process, default options, on a log dir uploaded to a local moto_server, and sets those bytes against the floor: the
selected partitions' segments (``.log``) fetched once each. Counts, not timings: they do not depend on the
machine's load (the seconds are printed for reference). The requests the report counts are checked against
moto_server's own request log (``requests_served``).

Data (:mod:`segment_io.generate`): 4 partitions of 60,000 records of 1 KiB values (``--quick``: 12,000), 16 MiB
segments (``--quick``: 4 MiB), every key written twice in random order, 5% of the batches in transactions of
which a fifth abort: about 250 MB (``--quick``: 50 MB). Three runs: the first finds every partition dirty (no
cleaner checkpoint: Kafka's first clean), the second nothing due, the third nothing due either, on the store as a
copy of a running broker's log dir holds it: the active segments' ``.index`` and ``.timeindex`` preallocated to
10 MiB (their entries, then zeros). A fourth run is the first again, on a fresh upload of the data, with
``--strategy external-sort``. A fifth compacts another log dir, every partition dirty: 100 partitions (``--quick``:
20) of 1,000 records of 512-byte values in 64 KiB segments, about 530 KB each, small enough for the run's first scan
to read them in full on the driver (``jobs.engine.compact.selection.SMALL_PARTITION_BYTES``). Then ``segjobs table``
builds a Delta table (on local disk) of the first run's data on a fresh upload, twice: deduped in memory, and on disk
(a ``--latest-buffer-bytes`` the partitions' keys exceed). Its floor is each of the topic's segments fetched once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.baselines import verdict
from benchmarks.s3_planning_bench import PREFIX, _upload

CONFIG_TOML = '[defaults]\n"cleanup.policy" = "compact"\n'
NOW = "2024-01-01T00:00:00Z"
#: issue 34's target: each selected segment fetched once
TARGET_READS = 1.0
#: Kafka's default segment.index.bytes: the size a broker gives an active segment's indexes
PREALLOCATED_INDEX_BYTES = 10 * 1024 * 1024
#: the fifth run: partitions small enough (at most selection.SMALL_PARTITION_BYTES) for the first scan to read them
SMALL_PARTITIONS = 100
SMALL_RECORDS = 1_000


def _served(log: Path, start: int, bucket: str) -> int:
    """The requests on ``bucket`` moto_server logged from byte ``start`` of its log on."""
    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode("utf-8", "replace").splitlines()
    return sum(1 for line in lines if re.search(rf'"[A-Z]+ /{bucket}[/?" ]', line))


def _stages(traffic: dict) -> str:
    """``driver: 10 GETs 1.2 MB; <stage>: ...``: where the bytes were fetched."""
    parts = {"driver": traffic["driver"], **traffic["tasks"]}
    return "; ".join(f"{stage.removeprefix('segjobs compact: ')}: {t['get']} GET(s) {t['get_bytes'] / 1e6:.1f} MB"
                     for stage, t in parts.items())


def _active_segments(logs: Path) -> list[Path]:
    """Each partition's active segment (its last ``.log``; the runs never clean it, so the bucket's is the same)."""
    return [max(d.glob("*.log")) for d in sorted(logs.iterdir()) if d.is_dir() and any(d.glob("*.log"))]


def _active_bytes(logs: Path) -> int:
    return sum(p.stat().st_size for p in _active_segments(logs))


def _preallocate_active_indexes(client, bucket: str, logs: Path) -> None:
    """The active segments' ``.index`` and ``.timeindex`` as a running broker leaves them: their entries, then
    zeros up to ``segment.index.bytes`` (10 MiB), trimmed only when the segment rolls or the broker stops."""
    for log in _active_segments(logs):
        for suffix in (".index", ".timeindex"):
            written = log.with_suffix(suffix).read_bytes()
            client.put_object(Bucket=bucket, Key=f"{PREFIX}/{log.with_suffix(suffix).relative_to(logs).as_posix()}",
                              Body=written + bytes(PREALLOCATED_INDEX_BYTES - len(written)))


def _segjobs(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """``segjobs ARGS`` in a new process, as users run it: the finished process and its seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).parent / "segjobs"), *args], env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"segjobs {args[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    time.sleep(0.5)  # the server writes a request's log line after its answer
    return proc, seconds


def _compact_row(name: str, server, log: Path, bucket: str, logs: Path, config: Path, env: dict[str, str],
                 strategy: list[str]) -> dict:
    """``segjobs compact`` in a new process on the log dir in ``bucket`` (``logs`` its local original): its
    requests and fetched bytes against the floor, from its report."""
    report = log.parent / "report.json"
    start = log.stat().st_size
    proc, seconds = _segjobs(["compact", "--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", server.endpoint_url,
                              "--config", str(config), "--now", NOW, "--report", str(report), *strategy], env)
    doc = json.loads(report.read_text())
    traffic = doc["store_traffic"]
    selected = {(p["topic"], p["partition"]) for p in doc["partitions"] if p["selected"]}
    segment_bytes = sum(p.stat().st_size for p in logs.rglob("*.log"))
    floor = sum(p.stat().st_size for p in logs.rglob("*.log")
                if (p.parent.name.rsplit("-", 1)[0], int(p.parent.name.rsplit("-", 1)[1])) in selected)
    row = {"bench": f"segjobs compact on S3, {name}", "seconds": round(seconds, 1),
           "selected": len(selected),
           "strategies": ",".join(sorted({str(p.get("strategy")) for p in doc["partitions"] if p["selected"]})),
           "requests": traffic["requests"],
           "requests_served": _served(log, start, bucket), "get": traffic["get"],
           "get_mb": round(traffic["get_bytes"] / 1e6, 1), "segment_mb": round(segment_bytes / 1e6, 1),
           "floor_mb": round(floor / 1e6, 1),
           "active_segments_mb": round(_active_bytes(logs) / 1e6, 1),
           "reads_of_floor": round(traffic["get_bytes"] / floor, 3) if floor else None,
           "put_mb": round(traffic["put_bytes"] / 1e6, 1), "by_stage": _stages(traffic),
           "line": next((line.split("] ", 1)[1] for line in proc.stderr.splitlines()
                         if "] object store: " in line), None)}
    if floor:
        row.update(target=f"<= {TARGET_READS:.1f}x the floor (each selected segment fetched once)",
                   result=verdict(traffic["get_bytes"] <= TARGET_READS * floor))
    return row


def _table_row(name: str, server, log: Path, bucket: str, logs: Path, env: dict[str, str], table: Path,
               extra: list[str]) -> dict:
    """``segjobs table`` in a new process, building a Delta table (on local disk) of the topic in ``bucket``
    (``logs`` its local original): its requests to the log dir's store and fetched bytes against each segment
    fetched once."""
    topic = next(d.name.rsplit("-", 1)[0] for d in logs.iterdir() if d.is_dir())
    start = log.stat().st_size
    proc, seconds = _segjobs(["table", "--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", server.endpoint_url,
                              "--topic", topic, "--table", str(table), "--format", "json", *extra], env)
    doc = json.loads(proc.stdout)
    traffic = doc["store_traffic"]
    floor = traffic["segment_bytes"]
    return {"bench": f"segjobs table on S3, {name}", "seconds": round(seconds, 1),
            "dedupe": ",".join(sorted({p["dedupe"] for p in doc["partitions"]})),
            "requests": traffic["requests"], "requests_served": _served(log, start, bucket), "get": traffic["get"],
            "get_mb": round(traffic["get_bytes"] / 1e6, 1), "floor_mb": round(floor / 1e6, 1),
            "reads_of_floor": round(traffic["get_bytes"] / floor, 3), "by_stage": _stages(traffic),
            "target": f"<= {TARGET_READS:.1f}x the floor (each segment fetched once)",
            "result": verdict(traffic["get_bytes"] <= TARGET_READS * floor)}


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    from segment_io.generate import GenerateSpec, generate_log_dir
    from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY, MotoServer

    root = data_dir / "s3-reads"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    log = root / "moto.log"
    records, segment = (12_000, 4 << 20) if quick else (60_000, 16 << 20)
    rows: list[dict] = []
    server = MotoServer.start(log_path=str(log))
    try:
        t0 = time.perf_counter()
        generate_log_dir(GenerateSpec(partitions=4, records=records, value_bytes=1024, superseded_share=0.5,
                                      segment_bytes=segment, transactional_share=0.05, aborted_share=0.2),
                         str(root / "logs"))
        segment_bytes = sum(p.stat().st_size for p in (root / "logs").rglob("*.log"))
        bucket = server.create_bucket("reads")
        objects = _upload(server.client(), bucket, root / "logs")
        rows.append({"bench": "generate and upload", "objects": objects, "segment_bytes": segment_bytes,
                     "seconds": round(time.perf_counter() - t0, 1)})
        config = root / "topics.toml"
        config.write_text(CONFIG_TOML)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION=REGION, PYSPARK_PYTHON=sys.executable)
        runs = ("first run: every partition dirty", "second run: nothing due",
                "third run: nothing due, the active indexes preallocated (a copy of a running broker)",
                "first run again on a fresh copy, --strategy external-sort")
        for name in runs:
            strategy: list[str] = []
            if name.startswith("third"):
                _preallocate_active_indexes(server.client(), bucket, root / "logs")
            elif "external-sort" in name:
                bucket = server.create_bucket("reads-external-sort")
                _upload(server.client(), bucket, root / "logs")
                strategy = ["--strategy", "external-sort"]
            rows.append(_compact_row(name, server, log, bucket, root / "logs", config, env, strategy))
        small = root / "small-partitions"
        partitions = SMALL_PARTITIONS // 5 if quick else SMALL_PARTITIONS
        generate_log_dir(GenerateSpec(partitions=partitions, records=SMALL_RECORDS, value_bytes=512,
                                      superseded_share=0.5, segment_bytes=64 << 10, transactional_share=0.05,
                                      aborted_share=0.2), str(small))
        bucket = server.create_bucket("reads-small-partitions")
        _upload(server.client(), bucket, small)
        each = sum(p.stat().st_size for p in small.rglob("*.log")) / partitions
        rows.append(_compact_row(f"{partitions} small partitions ({each / 1e3:.0f} KB each, 64 KiB segments), every "
                                 "one dirty", server, log, bucket, small, config, env, []))
        bucket = server.create_bucket("reads-table")
        _upload(server.client(), bucket, root / "logs")
        rows.append(_table_row("a first build of the first run's topic, deduped in memory", server, log, bucket,
                               root / "logs", env, root / "table-memory", []))
        rows.append(_table_row("the same, deduped on disk (--latest-buffer-bytes 16MiB)", server, log, bucket,
                               root / "logs", env, root / "table-on-disk", ["--latest-buffer-bytes", "16MiB"]))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":  # python -m benchmarks.s3_reads_bench [--quick]
    for row in run(quick="--quick" in sys.argv[1:]):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
