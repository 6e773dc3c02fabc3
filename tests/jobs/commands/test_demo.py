"""`make demo` (python -m jobs.commands.demo) succeeds and shows, on the console, every outcome its docstring promises:
compaction selected and skipped with the reason, a partial clean finished the next night, retention deletes
pending purge and their purge a night later; and what the README and the docs quote of its output is what it
prints. It runs on the suite's Spark session, so it costs the demo's work only (about 50 MB)."""

from __future__ import annotations

import json
import re

import pytest

from jobs.commands import demo
from tests.support.paths import REPO

pytestmark = pytest.mark.scenario  # minutes of whole-process runs: `make test-scenarios` runs it, not `make test`

#: a quote of the demo's output: the marker, then a fenced block of lines the demo prints (rows may be left out)
QUOTE = re.compile(r"^<!-- make-demo-output: night (\d) (\w+) -->\n```\n(.*?)^```", flags=re.S | re.M)
#: a line of a quote that stands for printed lines left out at that place
LEFT_OUT = "..."


def quoted_outputs() -> list[tuple[str, int, str, list[str]]]:
    """(page, night, command, quoted lines) of every quote of the demo's output in the README and docs/."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [(str(page.relative_to(REPO)), int(m.group(1)), m.group(2), m.group(3).splitlines())
            for page in pages for m in QUOTE.finditer(page.read_text())]


def run_output(out: str, night: int, command: str) -> list[str]:
    """The lines one run of the demo printed (from its step banner to the next)."""
    start = out.index(f"night {night}: segjobs {command} ")
    section = out[out.index("\n", start) + 1:]
    end = section.find("\n== ")
    return (section if end < 0 else section[:end]).splitlines()


def assert_quote_matches(quoted: list[str], printed: list[str], where: str) -> None:
    """Every line of the quote is a line the run printed, in the same order (blank lines included). A quote with
    ``...`` lines is an excerpt that shows where it leaves lines out: each ``...`` stands for at least one printed
    line, and its other lines follow each other as printed. A quote without one may leave lines out anywhere (the
    text before it says it is trimmed)."""
    marked = LEFT_OUT in quoted
    at = 0
    first = True
    skipped = False  # a `...` since the last quoted line
    for line in quoted:
        if line == LEFT_OUT:
            skipped = True
            continue
        try:
            found = printed.index(line, at)
        except ValueError:
            raise AssertionError(f"{where}: the demo no longer prints {line!r}; it printed:\n"
                                 + "\n".join(printed)) from None
        if skipped and found == at and not first:
            raise AssertionError(f"{where}: the `...` before {line!r} leaves out nothing the demo printed")
        if marked and not skipped and not first and found != at:
            raise AssertionError(f"{where}: the quote leaves out lines before {line!r} without a `...`: "
                                 f"{printed[at:found]}")
        at, first, skipped = found + 1, False, False
    if skipped and at >= len(printed):
        raise AssertionError(f"{where}: the closing `...` leaves out nothing the demo printed")


def test_the_readme_quotes_the_demo() -> None:
    assert any(page == "README.md" for page, *_ in quoted_outputs())


def test_a_stale_quote_is_caught() -> None:
    printed = ["partition  action", "orders-0   compacted", "", "1 of 1 partition(s) selected"]
    assert_quote_matches(["partition  action", "", "1 of 1 partition(s) selected"], printed, "ok")
    with pytest.raises(AssertionError, match="no longer prints"):
        assert_quote_matches(["orders-0   compacted", "", "2 of 2 partition(s) selected"], printed, "stale")


def test_an_excerpts_dots_stand_for_the_lines_it_leaves_out() -> None:
    printed = ["partition  action", "clicks-0   skipped", "clicks-1   skipped", "orders-0   compacted", "",
               "2 of 3 partition(s) selected"]
    excerpt = ["partition  action", "clicks-0   skipped", "...", "orders-0   compacted", "",
               "2 of 3 partition(s) selected"]
    assert_quote_matches(excerpt, printed, "ok")
    with pytest.raises(AssertionError, match="leaves out nothing"):  # a `...` where every line is shown
        assert_quote_matches(["partition  action", "...", "clicks-0   skipped"], printed, "dots for nothing")
    with pytest.raises(AssertionError, match="leaves out nothing"):
        assert_quote_matches(["2 of 3 partition(s) selected", "..."], printed, "trailing dots for nothing")
    with pytest.raises(AssertionError, match=r"without a `\.\.\.`"):  # an excerpt marks every gap, not only some
        assert_quote_matches(["partition  action", "clicks-0   skipped", "...", "orders-0   compacted",
                              "2 of 3 partition(s) selected"], printed, "unmarked gap")


@pytest.mark.slow
def test_the_demo_exits_0_and_shows_every_outcome(spark, tmp_path, capsys) -> None:
    assert demo.main(["--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # one banner per step, numbered in order: generate, compact and retain on each night, verify
    banners = [line.split()[1] for line in out.splitlines() if line.startswith("== ")]
    assert banners == [f"{i}/6" for i in range(1, 7)], banners
    night1, night2 = out.split("night 2:", 1)
    for expected in ("no compact policy (cleanup.policy=delete)", "nothing to clean: bound by active segment",
                     "partial: map full at offset", "deleted segments pending purge until"):
        assert expected in night1, expected
    for expected in ("below min.cleanable.dirty.ratio", "purged"):
        assert expected in night2, expected

    def entries(name: str) -> dict[str, dict]:
        doc = json.loads((tmp_path / name).read_text())
        return {f"{e['topic']}-{e['partition']}": e for e in doc["partitions"]}

    # the changelog's partial clean of night 1 is finished on night 2
    assert entries("night-1-compact-report.json")["users-changelog-0"]["partial"]
    assert not entries("night-2-compact-report.json")["users-changelog-0"]["partial"]
    assert entries("night-1-retain-report.json")["clicks-0"]["action"] == "delete"

    # the README's and the docs' quotes of the summaries are what the demo printed
    for page, night, command, quoted in quoted_outputs():
        assert_quote_matches(quoted, run_output(out, night, command), f"{page} (night {night} {command})")
