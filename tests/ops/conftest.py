"""The cluster of network namespaces the jobs' fault tests share (``tests/ops/test_netns_*.py``): started once for
all of them (a start takes a minute or more), removed however they end.

The netns modules are imported inside the fixtures, not here: ``make airflow-test`` collects this directory in
Airflow's own virtualenv, which has neither segjobs' dependencies nor a use for these fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from tests.ops.netns_cluster import NetnsCluster
    from tests.ops.netns_jobs import Jobs


@pytest.fixture(scope="session")
def netns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    """Master, three workers (1 core, 1 GiB each) and two driver hosts; everything removed afterwards, whatever
    the tests did."""
    from tests.ops.netns_cluster import NetnsCluster, leftovers

    root = tmp_path_factory.mktemp("netns-cluster")
    started = time.monotonic()
    running = NetnsCluster.start(root, workers=3, drivers=2, cores=1, memory="1g")
    print(f"cluster of {len(running.hosts)} hosts up in {time.monotonic() - started:.0f} s")
    try:
        yield running
    finally:
        running.stop()
        left = leftovers(running.tag)
        assert not left, f"the cluster left {left}"


@pytest.fixture(scope="session")
def netns_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log dir every test runs its job on: six partitions, superseded keys, transactions, zstd."""
    from tests.ops.netns_jobs import REPO

    out = tmp_path_factory.mktemp("source") / "logs"
    gen = subprocess.run(
        [sys.executable, "-m", "jobs", "generate", "--out", str(out), "--topics", "orders,users,clicks",
         "--partitions", "2", "--records", "20000", "--segment-bytes", "256KiB", "--superseded", "0.7",
         "--tombstones", "0.05", "--transactional", "0.3", "--aborted", "0.5", "--start", "2023-11-22T00:00:00Z",
         "--span", "7d", "--codec", "zstd", "--seed", "35", "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert gen.returncode == 0, gen.stderr
    return out


@pytest.fixture(scope="session")
def netns_jobs(netns_cluster: NetnsCluster, netns_source: Path, tmp_path_factory: pytest.TempPathFactory,
               spark) -> Jobs:
    from tests.ops.netns_jobs import Jobs

    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    return Jobs(netns_cluster, netns_source, tmp_path_factory.mktemp("jobs"))
