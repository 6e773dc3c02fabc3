"""The README's Python examples run as written, so the documentation of the library cannot rot: the test
extracts the fenced block of the "Library" section that uses ``jobs.api`` and executes it unchanged."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def section(title: str) -> str:
    """The text of the README section ``## title`` (up to the next ``## ``)."""
    text = README.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, f"README has no section '## {title}'"
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_library_section_has_one_api_example() -> None:
    blocks = [b for b in python_blocks(section("Library")) if "from jobs import api" in b]
    assert len(blocks) == 1, "the Library section should show one runnable jobs.api example"
    compile(blocks[0], "README.md", "exec")


@pytest.mark.spark
def test_the_library_example_runs_as_written(spark, tmp_path: Path, monkeypatch, capsys) -> None:
    (code,) = [b for b in python_blocks(section("Library")) if "from jobs import api" in b]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's mkdtemp() lands in the test's dir
    exec(compile(code, "README.md (Library)", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    # what the example prints: each demo partition with its action, the summary table, retention's numbers
    for line in ("users-changelog-0 compacted", "users-changelog-1 compacted", "orders-0 compacted",
                 "clicks-0 skipped"):
        assert line in out, out
    assert "3 of 4 partition(s) selected" in out
    retained = [line for line in out.splitlines() if line.endswith("()")]
    assert retained and int(retained[0].split()[0]) > 0, out  # retention deleted segments, refused nothing
    assert list((tmp_path).glob("*/logs/users-changelog-0/*.log")), "the demo log dir was written to the temp dir"


def clean_environment(home: Path) -> dict[str, str]:
    """What a user's fresh shell has: no PYSPARK_PYTHON, no SPARK_HOME, the venv not activated (its bin is not
    on PATH), java on PATH."""
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def data_source_block() -> str:
    (block,) = [b for b in python_blocks(README.read_text()) if 'format("kafka-segments")' in b and "register" in b]
    return block


@pytest.mark.slow
@pytest.mark.spark
def test_the_data_source_example_runs_in_a_users_own_python(tmp_path: Path) -> None:
    """The README's data-source snippet, typed into the venv's Python in a clean shell (its own Spark session,
    no PYSPARK_PYTHON): the workers import segjobs, and the reads answer. One Spark start-up, in a subprocess."""
    import subprocess
    import sys

    from segment_io.generate import GenerateSpec, generate_log_dir

    log_dir = tmp_path / "logs"
    generated = generate_log_dir(GenerateSpec(topics=("orders",), partitions=2, records=2_000), log_dir)
    script = tmp_path / "snippet.py"
    script.write_text(data_source_block().replace("/var/kafka/logs", str(log_dir))
                      + "\nprint('records', df.count())"
                      + "\nprint('partitions', len(dirty_ratios(spark, " + repr(str(log_dir)) + ").toPandas()))\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=README.parent, env=clean_environment(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "ModuleNotFoundError" not in proc.stderr
    assert proc.stdout.splitlines()[-2:] == [f"records {generated.records}", "partitions 2"], proc.stdout
