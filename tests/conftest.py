"""Shared fixtures: the real broker fixtures, one Spark session per run, one moto_server per run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Workers must run the same interpreter as the driver, or they pick up whatever python3 is on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Tests talk to nothing but loopback: Spark would otherwise bind to the first network interface.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

REPO = Path(__file__).resolve().parent.parent
KAFKA_REAL = REPO.parent / "shared" / "fixtures" / "kafka-real"


@pytest.fixture(scope="session")
def kafka_real() -> Path:
    """The directory of real broker-written segments (see its SOURCES.md)."""
    if not KAFKA_REAL.is_dir():
        pytest.fail(f"real Kafka fixtures not found at {KAFKA_REAL}; the suite expects shared/ beside the repo")
    return KAFKA_REAL


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the run (local[2]); created on first use."""
    from tests.support.spark import get_session

    session = get_session()
    yield session
    # stopped at interpreter exit by get_session's atexit hook


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 HTTP endpoint on 127.0.0.1: moto_server in a subprocess, stopped at the end of the run."""
    from tests.support.s3 import MotoServer

    server = MotoServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def s3_bucket(s3_endpoint, request):
    """A fresh, empty bucket on the moto endpoint; returns ``(endpoint, bucket_name)``."""
    bucket = s3_endpoint.create_bucket(request.node.name)
    return s3_endpoint, bucket
