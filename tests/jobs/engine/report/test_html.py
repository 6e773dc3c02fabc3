"""Pictures outside the notebook (issue 18 item 11): ``inspect --html FILE`` and ``history --html FILE`` write a
self-contained HTML page with the charts, named by the JSON output (``html_report``), and a real browser
(headless Chromium) shows the charts: the DOM holds every image with its alt text and caption, each image is a
PNG that is not blank, and the rendered page has the charts' colours where they are drawn."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jobs.commands.cli import main
from jobs.engine.inspect.driver import write_demo_log_dir
from jobs.engine.report.run_report import human_bytes
from tests.support.browser import dump_dom, screenshot
from tests.support.ledger import append_run

#: matplotlib's tab:red, tab:blue and tab:orange (selected, not selected, retention deletes): no other part of the
#: page has these colours, so where they show in a screenshot the charts were rendered.
CHART_COLOURS = [(214, 39, 40), (31, 119, 180), (255, 127, 14)]


class _Figures(HTMLParser):
    """The ``<figure>`` elements of a page: id, the image's alt and src, the caption's text; and every img."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[dict[str, str]] = []
        self.images = 0
        self._caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "figure":
            self.figures.append({"id": a.get("id") or "", "alt": "", "src": "", "caption": ""})
        elif tag == "img":
            self.images += 1
            if self.figures:
                self.figures[-1].update(alt=a.get("alt") or "", src=a.get("src") or "")
        elif tag == "figcaption":
            self._caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption":
            self._caption = False

    def handle_data(self, data: str) -> None:
        if self._caption and self.figures:
            self.figures[-1]["caption"] += data


def _figures(dom: str) -> _Figures:
    parser = _Figures()
    parser.feed(dom)
    return parser


def _png(src: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    return Image.open(io.BytesIO(base64.b64decode(src[len(prefix):]))).convert("RGB")


def _check_rendered(page: Path, tmp_path: Path, expected_ids: list[str]) -> None:
    """What a person would see: the DOM after loading, each image, and the screenshot."""
    figures = _figures(dump_dom(page, tmp_path))
    assert [f["id"] for f in figures.figures] == expected_ids
    for f in figures.figures:
        assert f["alt"] and len(f["caption"].split()) >= 5, f
        image = np.asarray(_png(f["src"]), dtype=float)
        assert image.shape[0] > 150 and image.shape[1] > 300
        assert image.std() > 10, f"{f['id']}: a blank image"
    assert figures.images == len(expected_ids)  # nothing else, and no image loaded from elsewhere
    shot = np.asarray(Image.open(screenshot(page, tmp_path / "page.png")).convert("RGB"), dtype=int)
    chart = np.zeros(shot.shape[:2], dtype=bool)
    for colour in CHART_COLOURS:
        chart |= (np.abs(shot - np.array(colour)).sum(axis=2) < 30)
    assert chart.sum() > 2_000, "no chart colours on the rendered page"
    rows = np.flatnonzero(chart.any(axis=1))
    area = shot[rows.min(): rows.max() + 1]
    assert area.std() > 30, "the chart area of the screenshot is (nearly) uniform"


@pytest.mark.spark
def test_inspect_html_report_shows_the_charts_in_a_browser(spark, tmp_path: Path, capsys) -> None:
    demo = write_demo_log_dir(tmp_path / "demo", records=600)
    page, report = tmp_path / "out" / "inspect.html", tmp_path / "inspect.json"
    argv = ["inspect", "--log-dir", demo.log_dir, "--now", str(demo.now_ms), "--html", str(page),
            "--report", str(report), "--format", "json", "--quiet"]
    argv += [a for o in demo.overrides for a in ("--set", o)]
    capsys.readouterr()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["html_report"] == str(page) and json.loads(report.read_text())["html_report"] == str(page)
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained
    for topic in ("users-changelog", "orders", "clicks"):
        assert f"<td>{topic}</td>" in text  # the per-topic table
    _check_rendered(page, tmp_path, ["dirty-ratio-per-topic", "dirty-ratio-per-partition", "reclaimable-bytes",
                                     "key-cardinality", "segment-ages"])


def _html_table(dom: str, section: str) -> tuple[list[str], dict[str, list[str]]]:
    """The headings and the rows (by their first cell) of the table after ``<h2>section</h2>`` in ``dom``."""
    table = dom.split(f"<h2>{section}</h2>", 1)[1].split("</table>", 1)[0]
    headings = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1]):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        rows[cells[0]] = cells
    return headings, rows


@pytest.mark.slow
def test_history_html_report_shows_the_bytes_reclaimed_per_run_in_a_browser(tmp_path: Path, capsys) -> None:
    ledger = str(tmp_path / "ledger")
    append_run(ledger, "retain", 1, [("clicks", 0, "delete", 4000), ("orders", 0, "none", 0)])
    append_run(ledger, "compact", 1, [("orders", 0, "compacted", 1500), ("users", 0, "compacted", 2500)])
    append_run(ledger, "retain", 2, [("clicks", 0, "delete", 2000), ("orders", 0, "none", 0)])
    page = tmp_path / "history.html"
    capsys.readouterr()
    assert main(["history", "--ledger", ledger, "--html", str(page), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["html_report"] == str(page) and f"HTML report written to {page}" in err
    _check_rendered(page, tmp_path, ["reclaimed-per-run"])
    # the per-topic table has the console's columns, the bytes split by command among them
    capsys.readouterr()
    assert main(["history", "--ledger", ledger]) == 0
    console = capsys.readouterr().out.split("reclaimed per topic by these runs (dry runs left out):\n", 1)[1]
    headings, rows = _html_table(dump_dom(page, tmp_path), "Reclaimed per topic (dry runs left out)")
    assert headings == ["topic", "runs", "reclaimed", "by compact", "by retain", "records removed"]
    assert [line.split() for line in console.splitlines()[2:]] == [
        [c for cell in rows[t] for c in cell.split()] for t in ("clicks", "users", "orders")]
    assert rows["clicks"][3:5] == ["0 B", human_bytes(6000)] and rows["users"][3:5] == [human_bytes(2500), "0 B"]


@pytest.mark.slow
def test_inspect_html_report_puts_a_refused_retention_first_where_a_person_sees_it(tmp_path: Path) -> None:
    """The limit's refusal is the report's most important line: a highlighted line above the charts (red in the
    screenshot, above the first chart), and the per-topic table's note is its second column, wrapping."""
    from jobs import api
    from jobs.engine.report.html import inspect_html
    from tests.support.retention import DAY, NOW, RECENT, build_partition

    mid = RECENT - 3 * DAY  # past the 1-day retention set below, within Kafka's default week
    d = tmp_path / "logs"
    build_partition(d, "w", 0, [[mid], [mid], [RECENT]])  # two thirds of w expire: over the default limit (50 %)
    build_partition(d, "u", 0, [[mid], [RECENT], [RECENT]])
    report = api.inspect(d, api.InspectOptions(overrides=("*:retention.ms=1d",)), now=NOW,
                         seams=api.Seams(runner=api.InProcessTasks())).report
    refused = next(r.retention_refused for r in report.inspected if r.topic == "w")
    assert refused and refused.startswith("refused: would delete 66.7% of w's bytes")
    page = tmp_path / "inspect.html"
    page.write_text(inspect_html(report))
    dom = dump_dom(page, tmp_path)
    alert = re.search(r'<p class="problem alert">(.*?)</p>', dom)
    assert alert and html.unescape(alert.group(1)) == f"w (1 partition(s)): retention {refused}"
    assert dom.index(alert.group(0)) < dom.index("<figure")
    headings, rows = _html_table(dom, "Per topic")
    assert headings[:2] == ["topic", "note"] and rows["w"][1].startswith(f"retention {refused}")
    assert f'<td class="wrap">{html.escape(f"retention {refused}", quote=False)}' in dom
    # what a person sees in a window of a laptop's width: the refusal in red above the first chart
    shot = np.asarray(Image.open(screenshot(page, tmp_path / "page.png", width=1000, height=1500)).convert("RGB"),
                      dtype=int)
    chart = np.zeros(shot.shape[:2], dtype=bool)
    for colour in CHART_COLOURS:
        chart |= (np.abs(shot - np.array(colour)).sum(axis=2) < 30)
    first_chart = int(np.flatnonzero(chart.any(axis=1)).min())
    red_text = (np.abs(shot[:first_chart] - np.array((170, 0, 0))).sum(axis=2) < 60)
    assert red_text.sum() > 300, "no refusal in red above the charts"


def test_an_html_destination_that_cannot_be_written_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    (tmp_path / "taken").mkdir()
    ledger = str(tmp_path / "ledger")  # history reads its ledger first (reading changes nothing), then the check
    append_run(ledger, "retain", 1, [("clicks", 0, "delete", 4000)])
    for argv in (["inspect", "--log-dir", str(tmp_path)], ["history", "--ledger", ledger]):
        capsys.readouterr()
        assert main([*argv, "--html", str(tmp_path / "taken")]) == 2
        out, err = capsys.readouterr()
        assert f"--html {tmp_path / 'taken'}: is a directory" in err and "nothing was done" in err
        assert out == ""


def test_both_commands_document_html(capsys) -> None:
    for command in ("inspect", "history"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--html FILE.html" in text and "html_report" in text
