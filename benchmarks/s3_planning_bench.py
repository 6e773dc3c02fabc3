"""Planning on S3 at scale: a run with nothing due over many small partitions on the local S3 endpoint.

Data: 10,000 partitions (``--quick``: 1,000) of topic ``orders``, each one active segment of 10 records (so no
partition is ever due), generated on local disk and uploaded to a moto_server bucket with bounded parallel PUTs.
Timed, each as the CLI runs it (a child process, Spark start-up included where the command starts Spark):

* ``segjobs recover``: recovery's checks over every partition (nothing to change);
* ``segjobs compact --dry-run``: listing, header scans and planning;
* ``segjobs compact``: what a real run with nothing due costs end to end (recovery, listing, scans, planning).

Target (issue 24): planning a run with nothing due over 10,000 S3 partitions within 30 s. ``SEGJOBS_S3_CONCURRENCY=1``
runs are timed too, for the serial baseline in the same run. moto_server is a single Python process on the same
2 cores, so it is the floor here, not S3: its time per request is reported. The machine load is reported per row.

Each command's row also counts the requests the endpoint served (from moto_server's request log), which does not
depend on the machine's load: all of them per partition (``requests_per_partition``, listing pages included), and
those that name one partition's objects or prefix (``partition_requests_per_partition``: what grows with the
partition count, as opposed to a listing page, which serves a thousand keys), with the kinds of request
(``by_kind``), and its time over the floor measured in the same run (``ratio_to_floor``): one listing of every object
under the prefix with boto3's paginator, which any planner that must know each partition's segments pays.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.baselines import verdict

TARGET_S = 30.0
PREFIX = "kafka-logs"
CONFIG_TOML = '[defaults]\n"cleanup.policy" = "compact"\n'


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _upload(client, bucket: str, root: Path, threads: int = 32) -> int:
    files = [p for p in root.rglob("*") if p.is_file()]

    def put(p: Path) -> None:
        client.put_object(Bucket=bucket, Key=f"{PREFIX}/{p.relative_to(root).as_posix()}", Body=p.read_bytes())

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(put, files):
            pass
    return len(files)


def _request_kind(method: str, path: str) -> str:
    """``LIST`` (a listing page), else the method: GET, HEAD, PUT, DELETE of one object."""
    return "LIST" if method == "GET" and ("list-type=2" in path or "uploads" in path) else method


def _requests(log: Path, start: int, partitions: int) -> dict:
    """The requests moto_server logged from byte ``start`` of its log on, counted (see the module docstring)."""
    import re
    from collections import Counter

    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode("utf-8", "replace").splitlines()
    kinds: Counter[str] = Counter()
    named = 0
    for line in lines:
        m = re.search(r'"([A-Z]+) (\S+) HTTP/', line)
        if not m:
            continue
        kinds[_request_kind(*m.groups())] += 1
        named += bool(re.search(r"(/|%2F)orders-\d+(/|%2F)", m.group(2)))
    total = sum(kinds.values())
    return {"requests": total, "requests_per_partition": round(total / partitions, 2),
            "partition_requests_per_partition": round(named / partitions, 2),
            "by_kind": "/".join(f"{k}:{v}" for k, v in sorted(kinds.items()))}


def _list_everything(client, bucket: str) -> float:
    """Seconds to list every object under the log dir's prefix once, page after page: what any planner that must
    know each partition's segments pays at least (on moto_server a page's cost grows with the keys it returns)."""
    t0 = time.perf_counter()
    for _ in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{PREFIX}/"):
        pass
    return time.perf_counter() - t0


def _cli(args: list[str], endpoint: str, env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "jobs", *args, "--s3-endpoint", endpoint], env=env,
                          capture_output=True, text=True)
    return time.perf_counter() - t0, proc.returncode, proc.stderr[-2000:]


def run(quick: bool = False, data_dir: Path = Path("bench-data"), counts: tuple[int, ...] | None = None,
        serial: bool = True) -> list[dict]:
    from segment_io.generate import GenerateSpec, generate_log_dir
    from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY, MotoServer

    rows: list[dict] = []
    root = data_dir / "s3-planning"
    root.mkdir(parents=True, exist_ok=True)
    log = data_dir / "s3-planning-moto.log"
    log.unlink(missing_ok=True)
    server = MotoServer.start(log_path=str(log))
    try:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION=REGION, PYSPARK_PYTHON=sys.executable)
        for n in counts or ((1000,) if quick else (10_000,)):
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            config = root / "topics.toml"
            config.write_text(CONFIG_TOML)
            t0 = time.perf_counter()
            generate_log_dir(GenerateSpec(partitions=n, records=10, batch_records=10), str(root / "logs"))
            bucket = server.create_bucket("planning")
            objects = _upload(server.client(), bucket, root / "logs")
            rows.append({"bench": f"generate and upload {n} partitions", "objects": objects,
                         "seconds": round(time.perf_counter() - t0, 1), "load": _load()})
            log_dir = ["--log-dir", f"s3://{bucket}/{PREFIX}"]
            t0 = time.perf_counter()
            server.client().list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/{'orders-0'}/")
            request_ms = 1000 * (time.perf_counter() - t0)
            rows.append({"bench": "moto_server: one partition's listing", "ms": round(request_ms, 1)})
            floor_s = _list_everything(server.client(), bucket)
            rows.append({"bench": f"floor: list every object of the {n} partitions once (boto3, one prefix)",
                         "seconds": round(floor_s, 1), "load": _load()})
            settings = ((1, 16) if serial else (16,))
            for concurrency in settings:
                env["SEGJOBS_S3_CONCURRENCY"] = str(concurrency)
                for name, args in (("recover", ["recover", *log_dir]),
                                   ("compact --dry-run", ["compact", *log_dir, "--config", str(config), "--dry-run"]),
                                   ("compact (nothing due)", ["compact", *log_dir, "--config", str(config)])):
                    start = log.stat().st_size
                    seconds, code, err = _cli(args, server.endpoint_url, env)
                    if code != 0:
                        raise RuntimeError(f"segjobs {' '.join(args)} exited {code}: {err}")
                    time.sleep(0.5)  # the server writes a request's log line after its answer
                    row = {"bench": f"{name} over {n} S3 partitions, SEGJOBS_S3_CONCURRENCY={concurrency}",
                           "seconds": round(seconds, 1), "load": _load(), **_requests(log, start, n)}
                    row["ratio_to_floor"] = round(seconds / floor_s, 2)
                    if name.startswith("compact (nothing"):
                        row.update(target=f"<= {TARGET_S:.0f} s at 10,000 partitions",
                                   result=verdict(seconds <= TARGET_S) if n >= 10_000 else "n/a (smaller count)")
                    rows.append(row)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        log.unlink(missing_ok=True)
    return rows


if __name__ == "__main__":  # python -m benchmarks.s3_planning_bench [--quick] [--count N,...] [--no-serial]
    args = sys.argv[1:]
    counts = None
    if "--count" in args:
        counts = tuple(int(c) for c in args[args.index("--count") + 1].split(","))
    for row in run(quick="--quick" in args, counts=counts, serial="--no-serial" not in args):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
