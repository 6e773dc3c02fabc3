"""The README's and the documentation site's Python examples run as written, so the documentation cannot rot.

Which blocks run (one convention for every page, README.md and docs/**/*.md alike): a fenced ```python block
that uses ``jobs.api`` (``from jobs import api``) makes its own data (``write_demo_log_dir`` in a temp dir) and
is executed unchanged, in the suite's Spark session. Every other ```python block shows the reader's own paths
(``/var/kafka/logs``, ``s3://bucket``) or needs what the suite has not (Airflow, delta-spark on a cluster): it is
compiled, so a syntax error still fails here, but not run. Shell blocks are not run; the quoted ``make demo``
output is checked against the demo's real output by tests/jobs/commands/test_demo.py.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
DATA_SOURCE_PAGE = DOCS / "guide" / "data-source.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
RUNS_MARK = "from jobs import api"


def name_of(page: Path) -> str:
    return str(page.relative_to(REPO))


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def runnable(block: str) -> bool:
    return RUNS_MARK in block


ALL_BLOCKS = [(name_of(page), i, block) for page in PAGES for i, block in enumerate(python_blocks(page.read_text()))]
RUNNABLE = [(page, i) for page, i, block in ALL_BLOCKS if runnable(block)]


def block(page: str, index: int) -> str:
    return python_blocks((REPO / page).read_text())[index]


def heading_anchor(heading: str) -> str:
    """The anchor MkDocs (and GitHub) give a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return re.sub(r"\s+", "-", text)


def test_the_readmes_links_into_the_docs_resolve() -> None:
    # mkdocs build --strict checks the site's own links; the README is outside it, so its links are checked here
    links = re.findall(r"\]\(([^)#]+\.md)(?:#([^)]+))?\)", README.read_text())
    assert len(links) > 10, links
    for path, anchor in links:
        target = REPO / path
        assert target.is_file(), f"README links to {path}, which does not exist"
        if anchor:
            anchors = {heading_anchor(line.lstrip("#")) for line in target.read_text().splitlines()
                       if line.startswith("#")}
            assert anchor in anchors, f"README links to {path}#{anchor}, a heading that does not exist"


def test_the_readmes_quote_of_the_demo_says_it_is_an_excerpt() -> None:
    # the quote shows some of the summary's rows under a footer that counts them all: a reader must not take the
    # rows shown for the whole run (tests/jobs/commands/test_demo.py checks each `...` against the demo's output)
    text = README.read_text()
    quote = re.search(r"([^\n]*\n[^\n]*)\n\n<!-- make-demo-output: [^>]*-->\n```\n(.*?)^```", text, flags=re.S | re.M)
    assert quote, "the README quotes the demo's summary"
    intro, block = quote.group(1), quote.group(2).splitlines()
    rule = next(i for i, line in enumerate(block) if line.startswith("-----"))
    rows = [line for line in block[rule + 1:block.index("", rule)] if line != "..."]
    footer = re.search(r"\d+ of (\d+) partition\(s\)", quote.group(2))
    assert footer, block
    total = int(footer.group(1))
    if len(rows) < total:
        assert "..." in block and "excerpt" in intro and f"{len(rows)} of the {total} rows" in intro, intro


def test_the_newcomers_pages_have_a_runnable_example() -> None:
    # the README and the Library page each show one jobs.api example that runs; the convention cannot go unused
    assert {page for page, _ in RUNNABLE} >= {"README.md", "docs/library.md"}, RUNNABLE


@pytest.mark.parametrize(("page", "index"), [(p, i) for p, i, _ in ALL_BLOCKS], ids=lambda v: str(v))
def test_every_python_block_compiles(page: str, index: int) -> None:
    compile(block(page, index), f"{page} (python block {index + 1})", "exec")


def _library_output(out: str) -> None:
    # what the Library example prints: each demo partition with its action, the summary table, retention's numbers
    for line in ("users-changelog-0 compacted", "users-changelog-1 compacted", "orders-0 compacted",
                 "clicks-0 skipped"):
        assert line in out, out
    assert "3 of 4 partition(s) selected" in out
    retained = [line for line in out.splitlines() if line.endswith("()")]
    assert retained and int(retained[0].split()[0]) > 0, out  # retention deleted segments, refused nothing


def _readme_output(out: str) -> None:
    # the dry run's summary: the partitions a real run would compact, nothing written
    assert "users-changelog-0" in out and "3 of 4 partition(s) selected" in out, out


#: what an example's output must show, beyond running without an error, by page
EXPECTED_OUTPUT: dict[str, Callable[[str], None]] = {"docs/library.md": _library_output,
                                                     "README.md": _readme_output}


@pytest.mark.spark
@pytest.mark.parametrize(("page", "index"), RUNNABLE, ids=lambda v: str(v))
def test_the_example_runs_as_written(spark, tmp_path: Path, monkeypatch, capsys, page: str, index: int) -> None:
    code = block(page, index)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's mkdtemp() lands in the test's dir
    exec(compile(code, f"{page} (python block {index + 1})", "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out
    assert out.strip(), f"{page}: the example printed nothing"
    EXPECTED_OUTPUT.get(page, lambda _: None)(out)
    assert list(tmp_path.glob("*/logs/*-0/*.log")), "the demo log dir was written to the temp dir"


def clean_environment(home: Path) -> dict[str, str]:
    """What a user's fresh shell has: no PYSPARK_PYTHON, no SPARK_HOME, the venv not activated (its bin is not
    on PATH), java on PATH."""
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def data_source_block() -> str:
    blocks = python_blocks(DATA_SOURCE_PAGE.read_text())
    (block,) = [b for b in blocks if 'format("kafka-segments")' in b and "register" in b]
    return block


@pytest.mark.scenario
@pytest.mark.slow
@pytest.mark.spark
def test_the_data_source_example_runs_in_a_users_own_python(tmp_path: Path) -> None:
    """The data-source page's snippet, typed into the venv's Python in a clean shell (its own Spark session,
    no PYSPARK_PYTHON): the workers import segjobs, and the reads answer. One Spark start-up, in a subprocess."""
    import subprocess
    import sys

    from segment_io.generate import GenerateSpec, generate_log_dir

    log_dir = tmp_path / "logs"
    generated = generate_log_dir(GenerateSpec(topics=("orders",), partitions=2, records=2_000), log_dir)
    script = tmp_path / "snippet.py"
    config = tmp_path / "topics.toml"  # the block's conf/topics.toml names topics this log dir does not hold
    config.write_text('[topics."orders"]\n"cleanup.policy" = "compact"\n')
    snippet = data_source_block().replace("/var/kafka/logs", str(log_dir)).replace("conf/topics.toml", str(config))
    script.write_text(snippet
                      + "\nprint('records', df.count())"
                      + "\nprint('partitions', len(dirty_ratios(spark, " + repr(str(log_dir)) + ").toPandas()))\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=README.parent, env=clean_environment(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "ModuleNotFoundError" not in proc.stderr
    assert proc.stdout.splitlines()[-2:] == [f"records {generated.records}", "partitions 2"], proc.stdout


@pytest.mark.spark
def test_the_notebook_example_runs_with_its_config(spark, tmp_path: Path) -> None:
    """The data-source page's block, on a demo log dir and a config for it in place of /var/kafka/logs and
    conf/topics.toml: dirty_ratios gets the config (without it every topic is Kafka's delete, no dirty ratio)."""
    import ast
    import math

    from jobs.engine.inspect.driver import write_demo_log_dir

    (code,) = [b for b in python_blocks(DATA_SOURCE_PAGE.read_text()) if "dirty_ratios(" in b]
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
    exec(compile(ast.Module(body, type_ignores=[]), "docs/guide/data-source.md", "exec"), namespace)
    frame = eval(compile(ast.Expression(last.value), "docs/guide/data-source.md", "eval"), namespace)
    rows = {f"{r.topic}-{r.partition}": r for r in frame.itertuples()}
    # the config reached inspect: the changelog is compacted and has a dirty ratio, clicks (delete) has none
    assert rows["users-changelog-0"].policy == "compact" and not math.isnan(rows["users-changelog-0"].dirty_ratio)
    assert rows["clicks-0"].policy == "delete" and math.isnan(rows["clicks-0"].dirty_ratio)
