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
