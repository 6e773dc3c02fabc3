"""``spark-submit jobs/<command>.py`` under a Python without segjobs re-runs in spark-submit's own environment
(jobs.submit_python); the spark-submit run itself is tested in test_console.py."""

from __future__ import annotations

from pathlib import Path

from jobs.submit_python import environment_python


def test_the_python_of_spark_submits_environment_is_found_from_its_spark_home(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    pyspark = venv / "lib" / "python3.11" / "site-packages" / "pyspark"
    pyspark.mkdir(parents=True)
    (venv / "bin").mkdir()
    python = venv / "bin" / "python3.11"
    python.write_text("")
    python.chmod(0o755)
    link = venv / "bin" / "spark-distribution"  # what `make venv` links, and find_spark_home.py returns
    link.symlink_to(pyspark)
    assert environment_python(str(pyspark)) == str(python)
    assert environment_python(str(link)) == str(python)
    assert environment_python(None) is None
    assert environment_python(str(tmp_path / "spark-3.5.0-bin-hadoop3")) is None  # a Spark distribution: no venv
