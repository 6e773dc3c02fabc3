"""delta-spark in the test session: where it is installed (`make test-compat`'s delta venv), the one Spark session
of the run loads its jars from Maven through ``spark.jars.packages`` into the project's .cache/ivy (resolved
once, then reused), and turns on Delta's SQL extension and catalog as a cluster with delta-spark does."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

#: Set by `make test-compat` for its delta venv: a missing delta-spark is then an error, not a skip.
REQUIRE_ENV = "SEGJOBS_REQUIRE_DELTA"
#: Spark's Ivy cache for the Delta jars: inside the repository (ignored by git), never a file outside it.
IVY_DIR = Path(__file__).resolve().parents[2] / ".cache" / "ivy"


def delta_spark_installed() -> bool:
    """Whether the Python package of delta-spark is importable here."""
    return importlib.util.find_spec("delta") is not None


def delta_required() -> bool:
    return bool(os.environ.get(REQUIRE_ENV))


def delta_package() -> str:
    """The Maven coordinates of the delta-spark jar for this pyspark and delta-spark: ``io.delta:delta-spark_<Spark
    major.minor>_2.13:<delta-spark version>``, as delta-spark's own ``configure_spark_with_delta_pip`` names it."""
    import pyspark

    spark = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark}_2.13:{importlib.metadata.version('delta-spark')}"


def delta_conf() -> dict[str, str]:
    """Session settings for a Spark with Delta Lake, empty where delta-spark is not installed."""
    if not delta_spark_installed():
        return {}
    return {
        "spark.jars.packages": delta_package(),
        "spark.jars.ivy": str(IVY_DIR),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
