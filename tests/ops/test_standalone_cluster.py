"""The packaged jobs on a real Spark standalone cluster: a master and two workers on 127.0.0.1, the jobs submitted
with ``--archives dist/segjobs-env.tar.gz#environment`` exactly as the recipe of docs/operations/cluster.md says.

Retention then compaction run on the cluster and, at the same ``--now`` on a copy of the same generated log
dir, in ``local[2]``; every file of the two log dirs must have the same bytes. The cluster's daemons (and so
its executors) have no PYSPARK_PYTHON and no segjobs Python on PATH, and the executors' numba cache must name
the archive's ``segment_io`` and ``jobs/rules`` as the code they compiled: executors that ran anything but the
archive fail this check, a broken archive fails the jobs.

It runs in ``make cluster-test`` (``.ci/run`` calls it), which builds the archive with ``make package`` and
passes its directory in ``SEGJOBS_DIST``; ``make test`` reports it skipped. Packaging (42 s on a quiet machine)
plus this test (7-9 min measured at a load average of 10-15, ~3 CPU-minutes: three daemon JVMs, two
spark-submits, four executors each unpacking the 223 MiB archive, numba compiling per executor) would add a
third to the main suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.ops.spark_standalone import StandaloneCluster, run_in_group

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = "segjobs-env.tar.gz"
START = "2023-11-22T00:00:00Z"
NOW = "2023-11-30T00:00:00Z"
# One topic per policy: retention deletes from clicks, compacts orders, and does both (retention first) to users.
TOPICS_TOML = """\
[defaults]
"cleanup.policy" = "delete"
"retention.ms" = "132h"

[topics."orders"]
"cleanup.policy" = "compact"

[topics."users"]
"cleanup.policy" = "compact,delete"
"retention.ms" = "6d"
"""
SUBMIT_TIMEOUT_S = 420
#: The packages whose modules hold numba kernels (compiled with cache=True).
KERNEL_PACKAGES = ("segment_io", "jobs/rules")


# Decided before any fixture starts (the Spark session included).
pytestmark = pytest.mark.skipif(not os.environ.get("SEGJOBS_DIST"),
                                reason="runs in `make cluster-test` (SEGJOBS_DIST names make package's output)")


@pytest.fixture(scope="module")
def dist() -> Path:
    """The directory holding the wheel and the environment archive (``make package``'s output)."""
    given = os.environ["SEGJOBS_DIST"]
    if not (Path(given) / ARCHIVE).is_file():
        pytest.fail(f"SEGJOBS_DIST={given} holds no {ARCHIVE}: run `make package` first")
    return Path(given)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1 GiB each), stopped and their unpacked archives removed afterwards."""
    root = tmp_path / "cluster"
    started = time.monotonic()
    running = StandaloneCluster.start(root, workers=2, cores=1, memory="1g")
    print(f"master and two workers up in {time.monotonic() - started:.0f} s")
    try:
        yield running
    finally:
        started = time.monotonic()
        running.stop()
        stopped = time.monotonic()
        # Each executor unpacks the archive (~640 MB) into its work dir; keep the logs, drop the rest.
        for unpacked in root.glob("worker-*/app-*/*/environment"):
            shutil.rmtree(unpacked, ignore_errors=True)
        shutil.rmtree(root / "local", ignore_errors=True)
        print(f"cluster stopped in {stopped - started:.0f} s, unpacked archives removed in "
              f"{time.monotonic() - stopped:.0f} s")


def file_bytes(log_dir: Path) -> dict[str, bytes]:
    """Every regular file under ``log_dir`` by relative path."""
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*")) if p.is_file()}


OUTCOME_FIELDS = ("action", "records_before", "records_after", "segments_before", "segments_after", "bytes_removed")


def report_outcome(report: Path) -> dict[str, dict]:
    """What a report says was done to each partition (timings left out: they differ between runs)."""
    doc = json.loads(report.read_text())
    return {f"{e['topic']}-{e['partition']}": {k: e.get(k) for k in OUTCOME_FIELDS} for e in doc["partitions"]}


def numba_cache_dir_name(source_dir: Path) -> str:
    """The directory numba's NUMBA_CACHE_DIR locator caches a module's kernels in: the source directory's name
    and the SHA-1 of its absolute path."""
    return f"{source_dir.name}_{hashlib.sha1(str(source_dir).encode()).hexdigest()}"


@pytest.mark.slow
def test_packaged_jobs_on_a_standalone_cluster_write_the_bytes_of_a_local_run(
        tmp_path: Path, dist: Path, spark, cluster: StandaloneCluster) -> None:
    from jobs.commands.cli import main

    source = tmp_path / "source"
    # zstd batches: executors need the archive's cramjam to read and rewrite them, not only numba and pyarrow.
    gen = subprocess.run(
        [sys.executable, "-m", "jobs", "generate", "--out", str(source), "--topics", "orders,users,clicks",
         "--partitions", "2", "--records", "3000", "--segment-bytes", "64KiB", "--superseded", "0.6",
         "--tombstones", "0.05", "--transactional", "0.3", "--aborted", "0.5", "--start", START, "--span", "7d",
         "--codec", "zstd", "--seed", "11", "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    on_cluster, local = tmp_path / "on-cluster", tmp_path / "local"
    shutil.copytree(source, on_cluster)
    shutil.copytree(source, local)
    config = tmp_path / "topics.toml"
    config.write_text(TOPICS_TOML)
    numba_cache = tmp_path / "numba-cache"

    # The driver runs here (client mode) with the project's interpreter. PYSPARK_PYTHON is unset: nothing but
    # spark.pyspark.python tells executors which Python to run (the daemons' PATH has no Python with numba).
    driver_env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    driver_env.update(PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    submit = [
        str(Path(sys.executable).with_name("spark-submit")),
        "--master", cluster.master_url, "--deploy-mode", "client",
        "--properties-file", str(REPO / "conf" / "spark-defaults.conf"),
        "--archives", f"{dist / ARCHIVE}#environment",
        "--conf", "spark.pyspark.python=./environment/bin/python",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.executorEnv.NUMBA_CACHE_DIR={numba_cache}",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
        "--conf",
        f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{REPO / 'conf' / 'log4j2.properties'}",
        "--conf", "spark.ui.enabled=false",
    ]
    timings: dict[str, float] = {}
    for job in ("retain", "compact"):  # retention first, as the nightly schedule runs them
        args = ["--config", str(config), "--now", NOW, "--quiet"]
        started = time.monotonic()
        proc = run_in_group([*submit, str(REPO / "jobs" / f"{job}.py"), "--log-dir", str(on_cluster), *args,
                             "--report", str(tmp_path / f"{job}-cluster.json")],
                            env=driver_env, cwd=tmp_path, timeout_s=SUBMIT_TIMEOUT_S)
        timings[f"{job} on the cluster"] = time.monotonic() - started
        assert proc.returncode == 0, (f"{job} on the cluster: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                                      f"{proc.stderr[-5000:]}\n{cluster.executor_logs()}")
        # The reference: the same job in this process's local[2] session.
        started = time.monotonic()
        rc = main([job, "--log-dir", str(local), *args, "--report", str(tmp_path / f"{job}-local.json")])
        timings[f"{job} in local[2]"] = time.monotonic() - started
        assert rc == 0, f"{job} in local[2]: exit {rc}"
        assert report_outcome(tmp_path / f"{job}-cluster.json") == report_outcome(tmp_path / f"{job}-local.json")
    print("runs: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))

    # The runs did real work: retention deleted segments, compaction rewrote partitions.
    retained = report_outcome(tmp_path / "retain-cluster.json")
    compacted = report_outcome(tmp_path / "compact-cluster.json")
    assert any(e["segments_after"] < e["segments_before"] for e in retained.values()), retained
    assert any(e["action"] == "compacted" for e in compacted.values()), compacted
    assert file_bytes(source) != file_bytes(on_cluster)
    # ... and the cluster wrote exactly what local[2] wrote, file for file.
    cluster_files, local_files = file_bytes(on_cluster), file_bytes(local)
    assert sorted(cluster_files) == sorted(local_files)
    differing = [name for name in cluster_files if cluster_files[name] != local_files[name]]
    assert not differing, differing

    # Retention needed no Spark task (its header scans run on the driver's threads), so it started no application;
    # both workers ran an executor of the compaction's.
    assert json.loads((tmp_path / "retain-cluster.json").read_text())["spark_startup_s"] is None
    assert json.loads((tmp_path / "compact-cluster.json").read_text())["spark_startup_s"] is not None
    for worker in ("worker-0", "worker-1"):
        assert len(list((cluster.root / worker).glob("app-*/*/stderr"))) == 1, worker
    # The executors compiled the numba kernels of the archive's segment_io and jobs.rules (each executor its own
    # unpacked copy), never those of this checkout: the archive is what they ran.
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    unpacked = [Path(os.path.abspath(p)) for p in cluster.root.glob("worker-*/app-*/*/environment")]
    assert unpacked, "no executor unpacked the archive into ./environment"
    from_archive = {numba_cache_dir_name(env / site / pkg) for env in unpacked for pkg in KERNEL_PACKAGES}
    cached = {p.name for p in numba_cache.iterdir()} if numba_cache.is_dir() else set()
    assert cached, f"executors wrote nothing to NUMBA_CACHE_DIR {numba_cache}"
    assert cached <= from_archive, (cached - from_archive, from_archive)
    assert any(name.startswith("segment_io_") for name in cached), cached
