"""Shared fixtures: the real broker fixtures, one Spark session per run, one moto_server per run; the markers
each test gets from the fixtures it uses; the hypothesis profiles."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support.paths import KAFKA_REAL

try:
    from hypothesis import settings
except ModuleNotFoundError:  # `make airflow-test` runs its module in Airflow's virtualenv: pytest, no hypothesis
    settings = None  # type: ignore[assignment]

# Workers must run the same interpreter as the driver, or they pick up whatever python3 is on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Tests talk to nothing but loopback: Spark would otherwise bind to the first network interface.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# ---------------------------------------------------------------------------------------------------
# Hypothesis: how many examples a property test tries comes from a profile, not from each test. "dev" keeps
# a local run quick; "ci" (what .ci/run selects) tries more. A test that needs another budget scales the
# profile's (``settings.default.max_examples``) and says why.
# ---------------------------------------------------------------------------------------------------

HYPOTHESIS_PROFILE_ENV = "HYPOTHESIS_PROFILE"
# deadline=None: per-example timings on a shared 2-core machine (numba compiling on first use, Spark jobs)
# vary too much for a deadline to mean anything. print_blob: a failure prints what reproduces it.
if settings is not None:
    settings.register_profile("dev", max_examples=30, deadline=None, print_blob=True)
    settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
    settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_ENV) or "dev")

# ---------------------------------------------------------------------------------------------------
# Markers from fixtures: a test that uses one of these fixtures, directly or through another fixture, gets
# the marker, so `-m "not spark and not s3 and not slow"` (make test-fast) skips exactly what needs them.
# ---------------------------------------------------------------------------------------------------

MARKER_OF_FIXTURE = {
    "spark": "spark",  # the shared Spark session
    "s3_endpoint": "s3",  # moto_server, under every S3 fixture
    "java_probe": "slow",  # compiles a Java program and runs it in a JVM of its own
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in MARKER_OF_FIXTURE.items():
            if fixture in used and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if item.get_closest_marker("spark") is not None:
            # Run in parallel (`-n 2 --dist loadgroup`), every test of the Spark session goes to one worker, so
            # that a run still starts one Spark session; the other worker takes the tests that need none.
            item.add_marker(pytest.mark.xdist_group("spark"))


def _spark_running() -> bool:
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _check_spark_is_declared(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _check_spark_is_declared(item, "call"))


def _check_spark_is_declared(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    """Fail a test that starts Spark (through the CLI, say) without using the ``spark`` fixture: unmarked, it
    would run in `make test-fast` and start a JVM there. Spark lives for the whole run, so this catches the
    first such test of a run; `make test-fast`, which runs no test marked spark, catches every one."""
    before = _spark_running()
    result = yield
    if not before and _spark_running() and item.get_closest_marker("spark") is None:
        pytest.fail(f"{item.nodeid} started Spark ({phase}) without the `spark` fixture: add `spark` to its "
                    f"parameters (or to the fixture that needs it) so that it is marked `spark`", pytrace=False)
    return result


# ---------------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_real() -> Path:
    """The directory of real broker-written segments (see its SOURCES.md)."""
    if not KAFKA_REAL.is_dir():
        pytest.fail(f"real Kafka fixtures not found at {KAFKA_REAL}; they are part of the repository")
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


def _require_s3_marker(request: pytest.FixtureRequest) -> None:
    """A test that reaches the moto endpoint through ``request.getfixturevalue`` (a parametrized store, say) is
    not marked from its fixtures: its S3 parameter must carry ``marks=pytest.mark.s3`` itself."""
    if request.node.get_closest_marker("s3") is None:
        pytest.fail(f"{request.node.nodeid} uses the moto S3 endpoint but is not marked `s3`: give its S3 "
                    f"parameter marks=pytest.mark.s3", pytrace=False)


@pytest.fixture()
def s3_bucket(s3_endpoint, request: pytest.FixtureRequest):
    """A fresh, empty bucket on the moto endpoint; returns ``(endpoint, bucket_name)``."""
    _require_s3_marker(request)
    bucket = s3_endpoint.create_bucket(request.node.name)
    return s3_endpoint, bucket


@pytest.fixture()
def s3_env(s3_endpoint, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """The moto endpoint's credentials in the environment, where a job finds them (the endpoint itself comes
    from --s3-endpoint); returns the endpoint."""
    from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY

    _require_s3_marker(request)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return s3_endpoint


@pytest.fixture()
def s3_bucket_env(s3_bucket, s3_env):
    """A fresh bucket (``(endpoint, bucket_name)``, as :func:`s3_bucket`) and the credentials in the
    environment: what a job run through the CLI needs."""
    return s3_bucket


@pytest.fixture()
def no_hang() -> Generator[None, None, None]:
    """Fail, rather than hang, if the test blocks (opening a FIFO a checkpoint or segment was replaced by)."""
    import signal

    def stop(*_: object) -> None:
        raise TimeoutError("blocked for 60 s (reading a FIFO?)")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
