"""The README's Python examples run as written, so the documentation of the library cannot rot: the test
extracts the fenced block of the "Library" section that uses ``jobs.api`` and executes it unchanged, and the
notebook block of the "Exploring" section with a demo log dir and its config in place of the example paths."""

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


@pytest.mark.spark
def test_the_notebook_example_runs_with_its_config(spark, tmp_path: Path) -> None:
    """The "Exploring" section's block, on a demo log dir and a config for it in place of /var/kafka/logs and
    conf/topics.toml: dirty_ratios gets the config (without it every topic is Kafka's delete, no dirty ratio)."""
    import ast
    import math

    from jobs.engine.inspection import write_demo_log_dir

    (code,) = [b for b in python_blocks(section("Exploring: inspect, the data source, the notebook"))
               if "dirty_ratios(" in b]
    assert 'config="conf/topics.toml"' in code
    demo = write_demo_log_dir(tmp_path, records=300)
    tables: dict[str, list[str]] = {}
    for override in demo.overrides:  # "orders:retention.ms=7d" -> [topics."orders"] "retention.ms" = "7d"
        topic, setting = override.split(":", 1)
        key, value = setting.split("=", 1)
        tables.setdefault(topic, []).append(f'"{key}" = "{value}"')
    config = tmp_path / "topics.toml"
    config.write_text("".join(f'[topics."{t}"]\n' + "\n".join(lines) + "\n" for t, lines in tables.items()))
    code = code.replace("/var/kafka/logs", demo.log_dir).replace("conf/topics.toml", str(config))
    tree = ast.parse(code)
    *body, last = tree.body
    assert isinstance(last, ast.Expr)  # the dirty_ratios(...).toPandas() line: its value is checked below
    namespace = {"__name__": "readme_example", "spark": spark}
    exec(compile(ast.Module(body, type_ignores=[]), "README.md (Exploring)", "exec"), namespace)
    frame = eval(compile(ast.Expression(last.value), "README.md (Exploring)", "eval"), namespace)
    rows = {f"{r.topic}-{r.partition}": r for r in frame.itertuples()}
    # the config reached inspect: the changelog is compacted and has a dirty ratio, clicks (delete) has none
    assert rows["users-changelog-0"].policy == "compact" and not math.isnan(rows["users-changelog-0"].dirty_ratio)
    assert rows["clicks-0"].policy == "delete" and math.isnan(rows["clicks-0"].dirty_ratio)
