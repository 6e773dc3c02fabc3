"""What an operator sees at hundreds of partitions (issue 18 item 10), and the one name of a refused partition
(item 12):

* beyond PARTITION_ROWS_MAX partitions the summaries of compact, retain and inspect have a row per topic, then the
  partitions that need a look; ``--per-partition`` / ``--per-topic`` choose either at any size;
* on a terminal a table fits its width: headings go on two lines, notes wrap or go below their row, never cut;
  piped, every row stays on one line;
* on a terminal the per-partition progress events redraw one status line in place; anywhere else (a file, a pipe,
  ``--log-format json``) each event is exactly one line, as before;
* a partition the delete-fraction limit leaves untouched is REFUSED in every text and counted as ``refused`` in
  the JSON totals, never FAILED.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.report.events import ProgressEvent, ProgressLine, stderr_sink
from jobs.engine.report.run_report import PARTITION_ROWS_MAX, render_table
from segment_io.generate import GenerateSpec, generate_log_dir
from segment_io.layout import segment_file_name
from tests.support.terminal import Terminal

LONG_NOTE = ("left untouched: REFUSED: would delete 60.8% of users-changelog's bytes (783006 of 1287612 in 25 "
             "partition(s), by retention.ms/retention.bytes; max 50%); raise --max-delete-fraction or set "
             "segjobs.max.delete.fraction for the topic")
COLUMNS = (("partition", "partition"), ("action", "action"), ("records_removed", "records removed"),
           ("tombstones_removed", "tombstones removed"), ("note", "note"))
ROWS = [{"partition": f"users-changelog-{i}", "action": "skipped", "records_removed": 0, "tombstones_removed": 12,
         "note": LONG_NOTE if i % 2 else "above min.cleanable.dirty.ratio 0.50"} for i in range(4)]


def _words(text: str) -> list[str]:
    return text.split()


# --------------------------------------------------------------------------------------------------
# Tables and the terminal's width
# --------------------------------------------------------------------------------------------------


def test_a_table_without_a_width_keeps_every_row_on_one_line_whole() -> None:
    text = render_table(ROWS, COLUMNS)
    lines = text.splitlines()
    assert len(lines) == 2 + len(ROWS)
    assert all(LONG_NOTE in line for line in lines[3::2])  # never cut
    assert render_table(ROWS, COLUMNS, width=10_000) == text  # a table that fits is the same with a width


@pytest.mark.parametrize("width", [100, 140])
def test_a_wide_table_fits_the_terminal_and_wraps_notes_without_cutting_them(width: int) -> None:
    text = render_table(ROWS, COLUMNS, width=width)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width
    # two-word headings on two lines
    assert lines[0].split() == ["records", "tombstones"] and lines[1].split()[:3] == ["partition", "action", "removed"]
    # every word of every note is still there, in order, on the row's own lines
    body = "\n".join(lines[3:])
    assert _words(body).count("raise") == 2
    for i, row in enumerate(ROWS):
        start = body.index(row["partition"] + " ")
        end = body.index(ROWS[i + 1]["partition"] + " ") if i + 1 < len(ROWS) else len(body)
        assert " ".join(_words(body[start:end])).endswith(row["note"])


def test_a_narrow_terminal_gets_each_note_below_its_row() -> None:
    text = render_table(ROWS, COLUMNS, width=72)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 72
    assert "note" not in lines[1]  # the note is no column any more
    row_at = [i for i, line in enumerate(lines) if line.startswith("users-changelog-")]
    assert len(row_at) == 4
    for i, at in enumerate(row_at):
        following = lines[at + 1: row_at[i + 1] if i + 1 < len(row_at) else len(lines)]
        assert all(line.startswith("    ") for line in following)
        assert " ".join(_words(" ".join(following))) == ROWS[i]["note"]


# --------------------------------------------------------------------------------------------------
# Progress on a terminal and elsewhere
# --------------------------------------------------------------------------------------------------


def _events() -> list[ProgressLine]:
    def ev(level: str, event: str, message: str, **fields) -> ProgressLine:
        return ProgressLine(ProgressEvent(command="compact", level=level, event=event, message=message, elapsed_s=1.5,
                                          ts_ms=1_700_000_000_000, fields=fields))

    out = [ev("info", "scan.done", "scanned 40 partition(s)", partitions=40)]
    for i in range(40):
        if i == 7:
            out.append(ev("error", "compact.failed", "orders-7: UNCLEANABLE, left untouched: boom",
                          partition="orders-7", done=i + 1, of=40))
        else:
            out.append(ev("info", "compact.partition", f"orders-{i}: compacted in 0.1s [{i + 1}/40, 1 KB of 40 KB]",
                          partition=f"orders-{i}", done=i + 1, of=40))
    out.append(ev("info", "report.written", "report written to /tmp/r.json", uri="/tmp/r.json"))
    return out


def test_progress_off_a_terminal_is_one_line_per_event_exactly_as_before() -> None:
    events = _events()
    for fmt, expected in (("text", [e.event.text() for e in events]), ("json", [e.event.to_json() for e in events])):
        buf = io.StringIO()
        sink = stderr_sink(fmt, stream=buf)
        for e in events:
            sink(e)
        sink.close()
        assert buf.getvalue() == "".join(x + "\n" for x in expected)


def test_progress_on_a_terminal_redraws_one_status_line_in_place() -> None:
    events = _events()
    with Terminal(columns=90) as term:
        sink = stderr_sink("text", stream=term.stream)
        for e in events:
            sink(e)
        sink.close()
    screen = term.output()
    assert "\r" in screen and "\x1b[K" in screen
    lines = screen.split("\n")
    # What stays on the screen, line by line: the scan line, the error above the bar, the completed bar, the
    # report line. 40 partition events drew one line.
    finished = [re.sub(r".*\r", "", line).replace("\x1b[K", "") for line in lines if line]
    assert len(finished) == 4
    assert finished[0] == events[0].event.text()
    assert finished[1] == events[8].event.text()  # the error, whole, not in the bar
    assert finished[2].startswith("[compact    1.5s] " + "\u2588" * 24 + " orders-39: compacted")
    assert finished[3] == events[-1].event.text()
    assert max(len(x) for x in finished[2:3]) < 90
    # the JSON events are never drawn in place, terminal or not
    with Terminal(columns=90) as term:
        sink = stderr_sink("json", stream=term.stream)
        for e in events:
            sink(e)
    assert term.output() == "".join(e.event.to_json() + "\n" for e in events)


def test_on_a_terminal_lines_the_same_but_for_their_partition_are_counted_in_place() -> None:
    def refused(i: int) -> ProgressLine:
        return ProgressLine(ProgressEvent(
            command="compact", level="error", event="retain.refused", elapsed_s=2.0, ts_ms=0,
            message=f"users-changelog-{i}: retention REFUSED: would delete 61.5% of users-changelog's bytes",
            fields={"partition": f"users-changelog-{i}"}))

    lines = [refused(i) for i in range(30)] + [_events()[0]]
    with Terminal(columns=120) as term:
        sink = stderr_sink("text", stream=term.stream)
        for e in lines:
            sink(e)
        sink.close()
    screen = [re.sub(r".*\r", "", line).replace("\x1b[K", "") for line in term.output().split("\n") if line]
    assert screen == [lines[0].event.text(),
                      "    ... the same for 29 more partition(s): users-changelog-1 to users-changelog-29",
                      lines[-1].event.text()]
    buf = io.StringIO()  # off a terminal: every one of them, a line each
    sink = stderr_sink("text", stream=buf)
    for e in lines:
        sink(e)
    assert buf.getvalue().splitlines() == [e.event.text() for e in lines]


# --------------------------------------------------------------------------------------------------
# The commands at scale (Spark)
# --------------------------------------------------------------------------------------------------

TOPICS = {"orders": 24, "users-changelog": 20, "clicks": 16}  # 60 partitions: more than PARTITION_ROWS_MAX
NOW = 1_700_000_000_000 + 8 * 86_400_000
SETTINGS = ["--set", "orders:cleanup.policy=compact", "--set", "users-changelog:cleanup.policy=compact,delete",
            "--set", "users-changelog:retention.ms=3d", "--set", "clicks:retention.ms=5d"]


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    """60 partitions of three topics: ``users-changelog`` (compact,delete) has most of its bytes past retention.ms
    (the delete-fraction limit refuses it); ``orders-5`` is corrupt."""
    assert sum(TOPICS.values()) > PARTITION_ROWS_MAX
    root = tmp_path_factory.mktemp("scale")
    (root / "logs").mkdir()
    for i, (topic, n) in enumerate(TOPICS.items()):
        generate_log_dir(GenerateSpec(topics=(topic,), partitions=n, records=60, segment_bytes=2 << 10,
                                      batch_records=10, superseded_share=0.6, seed=i), root / topic)
        for d in (root / topic).iterdir():
            if d.is_dir():
                shutil.move(str(d), root / "logs" / d.name)
    seg = root / "logs" / "orders-5" / segment_file_name(0)
    data = bytearray(seg.read_bytes())
    data[75] ^= 0xFF
    seg.write_bytes(bytes(data))
    return root / "logs"


def _copy(many: Path, tmp_path: Path) -> Path:
    shutil.copytree(many, tmp_path / "logs")
    return tmp_path / "logs"


def _topic_rows(out: str) -> dict[str, str]:
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("topic "))
    rows = lines[header + 2: lines.index("", header)]
    return {r.split()[0]: r for r in rows}


@pytest.mark.spark
def test_compact_rolls_up_per_topic_at_scale_and_draws_progress_in_place(spark, many: Path, tmp_path: Path,
                                                                         capsys, monkeypatch) -> None:
    d = _copy(many, tmp_path)
    report = tmp_path / "compact.json"
    capsys.readouterr()
    with Terminal(columns=100) as term:
        monkeypatch.setattr(sys, "stderr", term.stream)
        code = main(["compact", "--log-dir", str(d), "--now", str(NOW), "--dry-run", "--report", str(report),
                     *SETTINGS])
        monkeypatch.undo()
    out = capsys.readouterr().out
    assert code == 1
    rows = _topic_rows(out)
    assert list(rows) == ["clicks", "orders", "users-changelog"]
    assert "no compact policy (cleanup.policy=delete)" in rows["clicks"]
    # 24 selected (orders-5 too: its corruption shows when its task reads it), 23 measured
    assert re.match(r"orders\s+24\s+24\s+23\s", rows["orders"]) and "1 FAILED (listed below)" in rows["orders"]
    held = rows["users-changelog"]
    assert "left untouched: REFUSED: would delete" in held and "FAILED" not in held
    # the failed partition is named below, with its error
    after = out[out.index("partitions to look at (1;"):]
    assert "orders-5" in after and "FAILED: CrcMismatchError" in after and "orders-4" not in after
    totals = next(line for line in out.splitlines() if " partition(s) selected;" in line)
    assert "; 20 partition(s) REFUSED by the delete-fraction limit" in totals
    assert "; 1 partition(s) FAILED" in totals
    doc = json.loads(report.read_text())
    assert (doc["totals"]["errors"], doc["totals"]["failed"], doc["totals"]["refused"]) == (21, 1, 20)
    # stderr was a terminal: the 23 partitions drew one status line, the errors (refusals, the failure) are whole
    screen = [re.sub(r".*\r", "", line).replace("\x1b[K", "") for line in term.output().split("\n") if line]
    assert sum("measured in" in line for line in screen) == 1
    # the refusal is said once for its topic, with the number of its partitions
    (refusal,) = [line for line in screen if "REFUSED: would delete" in line]
    assert "users-changelog: 20 partition(s) retention REFUSED: would delete" in refusal
    assert sum("orders-5: UNCLEANABLE" in line for line in screen) == 1
    assert "[24/24," in next(line for line in screen if "measured in" in line)

    # --per-partition: a row each, however many
    code = main(["compact", "--log-dir", str(d), "--now", str(NOW), "--dry-run", "--quiet", "--per-partition",
                 *SETTINGS])
    out = capsys.readouterr().out
    header = next(i for i, line in enumerate(out.splitlines()) if line.startswith("partition "))
    table = out.splitlines()[header + 2: out.splitlines().index("", header)]
    assert len(table) == 60
    refused = [r for r in table if r.startswith("users-changelog-")]
    assert all("left untouched: REFUSED: would delete" in r and "FAILED" not in r for r in refused)


@pytest.mark.spark
def test_retain_and_inspect_roll_up_per_topic_and_off_a_terminal_print_a_line_per_event(spark, many: Path,
                                                                                        capsys) -> None:
    capsys.readouterr()
    code = main(["retain", "--log-dir", str(many), "--now", str(NOW), "--dry-run", *SETTINGS])
    out, err = capsys.readouterr()
    assert code == 1  # the refusal (retain reads batch headers only: orders-5's bad record bytes go unseen)
    rows = _topic_rows(out)
    assert list(rows) == ["clicks", "orders", "users-changelog"]
    assert "REFUSED: would delete" in rows["users-changelog"] and "FAILED" not in out
    assert "only segments below the log start offset go" in rows["orders"]  # what all its partitions' notes say
    assert re.match(r"clicks\s+delete\s+16\s+16\s", rows["clicks"])
    assert "; 20 partition(s) REFUSED by the delete-fraction limit" in out
    # not a terminal: one line per event, the existing format, nothing drawn in place
    assert "\r" not in err and "\x1b" not in err
    assert all(re.match(r"^(\[retain\s+\d+\.\ds\] |segjobs retain: |WARNING)", line) for line in err.splitlines())
    (refusal,) = [line for line in err.splitlines() if " REFUSED: would delete" in line]  # once for the topic
    assert "users-changelog: 20 partition(s) REFUSED: would delete" in refusal

    code = main(["inspect", "--log-dir", str(many), "--now", str(NOW), "--quiet", *SETTINGS])
    out = capsys.readouterr().out
    assert code == 1  # orders-5 is unreadable
    rows = _topic_rows(out)
    assert list(rows) == ["clicks", "orders", "users-changelog"]
    assert re.match(r"orders\s+compact\s+24\s", rows["orders"]) and "1 UNREADABLE (listed below)" in rows["orders"]
    assert "retention refused: would delete" in rows["users-changelog"]
    assert len(out.splitlines()) < 20  # not a line per partition (and a verdict per partition) any more
    assert "orders-5: ERROR" in out
    assert "retention would be REFUSED for 20 partition(s)" in out
    # --per-topic on a handful of partitions; --per-partition on many
    code = main(["inspect", "--log-dir", str(many), "--now", str(NOW), "--quiet", "--topic", "clicks",
                 "--per-partition", *SETTINGS])
    out = capsys.readouterr().out
    assert code == 0 and sum(line.startswith("clicks-") for line in out.splitlines()) == 2 * TOPICS["clicks"]
    code = main(["inspect", "--log-dir", str(many), "--now", str(NOW), "--quiet", "--partition", "clicks-0",
                 "--per-topic", *SETTINGS])
    out = capsys.readouterr().out
    assert code == 0 and list(_topic_rows(out)) == ["clicks"]


def test_every_command_with_a_summary_table_documents_the_row_options(capsys) -> None:
    for command in ("compact", "retain", "inspect"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--per-partition" in text and "--per-topic" in text
        assert f"up to {PARTITION_ROWS_MAX} partitions" in text
