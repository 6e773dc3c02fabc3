"""One local Spark session for the whole test run."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import Iterator

import pytest

_SESSION = None


def get_session():
    """Create (once) and return a ``local[2]`` SparkSession tuned for small test data."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from jobs.engine.runtime.spark_session import build_session
    from tests.support.delta import delta_conf

    _SESSION = build_session(
        app_name="segjobs-tests",
        master="local[2]",
        extra_conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.ui.enabled": "false",
            "spark.sql.python.filterPushdown.enabled": "true",
            "spark.driver.memory": "2g",
            **delta_conf(),
        },
    )
    atexit.register(_SESSION.stop)
    return _SESSION


@contextlib.contextmanager
def spark_forbidden() -> Iterator[None]:
    """Within the block, building a Spark session fails the test: for checks that must refuse bad input
    before any Spark start-up (a behaviour, asserted without timing it)."""
    from jobs.engine.runtime import spark_session

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Spark session was built before the input was checked")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spark_session, "build_session", refuse)
        yield
