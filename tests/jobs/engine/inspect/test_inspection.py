"""segjobs inspect: its counts against an independent decode of the records, its predictions against the
compaction and retention dry runs at the same --now, its three formats, an unreadable partition, the
notebook API (dirty_ratios) and the plots; plus the distinct-key counters without Spark."""

from __future__ import annotations

import csv
import html
import importlib.util
import io
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from jobs.api import dirty_ratios
from jobs.commands.cli import main as segjobs
from jobs.engine.inspect.driver import (
    COLUMN_NAMES,
    DemoLogDir,
    write_demo_log_dir,
)
from jobs.engine.report.html import inspect_html
from jobs.rules.cardinality import HyperLogLog, exact_distinct
from segment_io.decode import decode_segment_bytes
from segment_io.format import CONTROL_ABORT
from segment_io.layout import list_log_dir
from segment_io.storage import open_storage

DAY = 86_400_000


# --------------------------------------------------------------------------------------------------
# Distinct-key counters (no Spark)
# --------------------------------------------------------------------------------------------------


def _random_hashes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    h = np.random.default_rng(seed).integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (n, 2), np.int64)
    return h[:, 0].copy(), h[:, 1].copy()


@pytest.mark.parametrize("n", [0, 1, 7, 1_000, 60_000, 300_000])
def test_hyperloglog_estimate_is_within_its_error(n: int) -> None:
    hi, lo = _random_hashes(n, seed=n)
    # every hash three times: duplicates must not count
    hll = HyperLogLog()
    for _ in range(3):
        hll.add(hi, lo)
    assert abs(hll.estimate() - n) <= max(1, 4 * hll.relative_error * n)


def test_hyperloglog_merge_counts_the_union() -> None:
    hi, lo = _random_hashes(50_000, seed=5)
    a, b, whole = HyperLogLog(), HyperLogLog(), HyperLogLog()
    a.add(hi[:30_000], lo[:30_000])
    b.add(hi[20_000:], lo[20_000:])
    whole.add(hi, lo)
    assert np.array_equal(a.merge(b).registers, whole.registers)


def test_hyperloglog_uses_both_hash_halves() -> None:
    # keys differing only in the low half are distinct keys
    hi = np.zeros(1_000, np.int64)
    lo = np.arange(1_000, dtype=np.int64) * 7919 + 1
    hll = HyperLogLog()
    hll.add(hi, lo)
    assert hll.estimate() >= 1


def test_exact_distinct_counts_pairs() -> None:
    hi = np.array([1, 1, 2, 2, 1, 3], np.int64)
    lo = np.array([5, 6, 5, 5, 5, 5], np.int64)
    assert exact_distinct(hi, lo) == 4  # (1,5) (1,6) (2,5) (3,5)
    assert exact_distinct(hi[:0], lo[:0]) == 0


# --------------------------------------------------------------------------------------------------
# An independent account of each partition: full decode, keys compared as bytes, transactions replayed here
# --------------------------------------------------------------------------------------------------


def _truth(log_dir: str, now_ms: int) -> dict[str, dict[str, int | None]]:
    storage = open_storage(log_dir)
    out = {}
    for (topic, partition), pl in list_log_dir(storage, log_dir).partitions.items():
        rows = {k: [] for k in ("offset", "key", "value", "timestamp", "base", "pid", "txn", "control", "horizon")}
        for seg in pl.segments:
            t = decode_segment_bytes(storage.read(seg.log.uri), path=seg.log.uri)
            for name, col in (("offset", "offset"), ("key", "key"), ("value", "value"), ("timestamp", "timestamp"),
                              ("base", "batch_base_offset"), ("pid", "producer_id"), ("txn", "transactional"),
                              ("control", "control"), ("horizon", "delete_horizon_ms")):
                rows[name].extend(t.column(col).to_pylist())
        open_txn: dict[int, list[int]] = defaultdict(list)
        aborted_batches: set[int] = set()
        seen: set[int] = set()
        for i, base in enumerate(rows["base"]):
            if base in seen:
                continue
            seen.add(base)
            pid = rows["pid"][i]
            if rows["control"][i]:
                if int.from_bytes(rows["key"][i][2:4], "big") == CONTROL_ABORT:
                    aborted_batches.update(open_txn[pid])
                open_txn[pid] = []
            elif rows["txn"][i]:
                open_txn[pid].append(base)
        data = [i for i, c in enumerate(rows["control"]) if not c]
        live = [i for i in data if rows["base"][i] not in aborted_batches]
        keyed = [i for i in live if rows["key"][i] is not None]
        tombs = [i for i in keyed if rows["value"][i] is None]
        expired = [i for i in tombs if rows["horizon"][i] is not None and rows["horizon"][i] <= now_ms]
        stamps = [rows["timestamp"][i] for i in data if rows["timestamp"][i] >= 0]
        distinct = len({rows["key"][i] for i in keyed})
        out[f"{topic}-{partition}"] = {
            "records": len(data), "markers": len(rows["control"]) - len(data),
            "keyless_records": len(live) - len(keyed), "distinct_keys": distinct,
            "superseded_records": len(keyed) - distinct, "live_tombstones": len(tombs) - len(expired),
            "expired_tombstones": len(expired), "aborted_records": len(data) - len(live),
            "oldest_timestamp": min(stamps) if stamps else None, "newest_timestamp": max(stamps) if stamps else None,
        }
    return out


EXACT_COUNTS = ("records", "markers", "keyless_records", "aborted_records", "live_tombstones", "expired_tombstones",
                "oldest_timestamp", "newest_timestamp")
PLANNED = ("segments", "bytes", "clean_bytes", "cleanable_bytes", "dirty_ratio", "first_dirty_offset",
           "first_uncleanable_offset", "compaction_selected", "compaction_reason", "retention_segments_deleted",
           "retention_bytes_deleted", "retention_rules", "retention_log_start_offset", "segment_bytes",
           "segment_age_ms")


def _by_name(rows) -> dict[str, dict]:
    return {f"{r['topic']}-{r['partition']}": r for r in rows}


def _cli(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = segjobs(list(argv))
    return code, capsys.readouterr().out


def _common(demo: DemoLogDir, now_ms: int) -> list[str]:
    args = ["--log-dir", demo.log_dir, "--now", str(now_ms), "--quiet"]
    for s in demo.overrides:
        args += ["--set", s]
    return args


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> DemoLogDir:
    return write_demo_log_dir(tmp_path_factory.mktemp("inspect"), records=1_500)


@pytest.fixture(scope="module")
def exact_run(spark, demo, tmp_path_factory) -> dict:
    """segjobs inspect --exact --format json --report at the demo's now: (stdout document, report file)."""
    report = tmp_path_factory.mktemp("reports") / "inspect.json"
    code = segjobs(["inspect", *_common(demo, demo.now_ms), "--exact", "--format", "json", "--report", str(report)])
    assert code == 0
    return {"report": json.loads(report.read_text())}


# --------------------------------------------------------------------------------------------------
# Exact run: counts, and predictions against the dry runs
# --------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_exact_counts_match_an_independent_decode(exact_run, demo) -> None:
    rows = _by_name(exact_run["report"]["partitions"])
    truth = _truth(demo.log_dir, demo.now_ms)
    assert set(rows) == set(truth)
    for name, want in truth.items():
        got = {k: rows[name][k] for k in want}
        assert got == want, name
        assert rows[name]["distinct_keys_exact"] is True
    # the demo is meant to exercise every column: make sure it does
    for name in ("users-changelog-0", "users-changelog-1"):
        assert truth[name]["aborted_records"] > 0 and truth[name]["live_tombstones"] > 0, name


@pytest.mark.spark
def test_exact_predictions_match_the_compaction_and_retention_dry_runs(exact_run, demo, capsys, tmp_path) -> None:
    rows = _by_name(exact_run["report"]["partitions"])
    code = segjobs(["compact", *_common(demo, demo.now_ms), "--dry-run", "--report", str(tmp_path / "c.json")])
    assert code == 0
    compaction = _by_name(json.loads((tmp_path / "c.json").read_text())["partitions"])
    code = segjobs(["retain", *_common(demo, demo.now_ms), "--dry-run", "--report", str(tmp_path / "r.json")])
    assert code == 0
    retention = _by_name(json.loads((tmp_path / "r.json").read_text())["partitions"])
    assert set(rows) == set(compaction) == set(retention)

    selected = 0
    for name, r in rows.items():
        c, t = compaction[name], retention[name]
        assert r["compaction_selected"] == c["selected"] and r["compaction_reason"] == c["reason"], name
        assert (None if r["dirty_ratio"] is None else round(r["dirty_ratio"], 4)) == c["dirty_ratio"]
        assert (r["clean_bytes"], r["cleanable_bytes"]) == (c["clean_bytes"], c["cleanable_bytes"])
        assert r["bytes"] == c["bytes_before"] == t["bytes_before"]
        if c["selected"]:
            selected += 1
            assert r["compaction_records_removed"] == c["records_removed"] > 0, name
            assert r["compaction_bytes_removed"] == c["bytes_removed"] > 0, name
        assert r["retention_bytes_deleted"] == t["bytes_removed"], name
        assert r["retention_segments_deleted"] == len(t["deleted"])
        assert r["retention_log_start_offset"] == t["log_start_offset"]
        assert (r["retention_rules"] or "") == ",".join(t["rules"])
    assert selected >= 2  # the changelog partitions (and orders, compact,delete)
    assert rows["clicks-0"]["retention_bytes_deleted"] > 0 and not rows["clicks-0"]["compaction_selected"]
    totals = exact_run["report"]["totals"]
    assert totals["compaction_bytes_removed"] == sum(c["bytes_removed"] for c in compaction.values())
    assert totals["retention_bytes_deleted"] == sum(t["bytes_removed"] for t in retention.values())


# --------------------------------------------------------------------------------------------------
# Default (approximate) run through the notebook API
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def approx_frame(spark, demo):
    return dirty_ratios(spark, demo.log_dir, now=demo.now_ms, overrides=demo.overrides)


@pytest.mark.spark
def test_dirty_ratios_frame_has_one_row_per_partition_and_the_declared_schema(approx_frame, demo) -> None:
    assert tuple(approx_frame.columns) == COLUMN_NAMES
    rows = [r.asDict() for r in approx_frame.collect()]
    assert sorted(f"{r['topic']}-{r['partition']}" for r in rows) == sorted(_truth(demo.log_dir, demo.now_ms))
    assert dict(approx_frame.dtypes)["segment_bytes"] == "array<bigint>"


@pytest.mark.spark
def test_approximate_run_agrees_with_the_exact_one(approx_frame, exact_run, demo) -> None:
    exact = _by_name(exact_run["report"]["partitions"])
    truth = _truth(demo.log_dir, demo.now_ms)
    for r in approx_frame.collect():
        r = r.asDict()
        name = f"{r['topic']}-{r['partition']}"
        e = exact[name]
        assert r["distinct_keys_exact"] is False and r["compaction_measured"] is False
        for k in PLANNED + EXACT_COUNTS:  # the planners and plain counts do not depend on --exact
            assert r[k] == e[k], (name, k)
        # HyperLogLog at precision 14: 0.8 % relative standard error; allow four of them
        want = truth[name]["distinct_keys"]
        assert abs(r["distinct_keys"] - want) <= max(2, 4 * 0.0082 * want), name
        assert r["superseded_records"] + r["distinct_keys"] == e["superseded_records"] + e["distinct_keys"]
        # the estimate works from keyed records minus distinct keys and the average record size: it must land
        # near the dry run's measurement (the generated batches are uniform, so within a few percent)
        if e["compaction_bytes_removed"]:
            assert r["compaction_records_removed"] == pytest.approx(e["compaction_records_removed"], rel=0.05), name
            assert r["compaction_bytes_removed"] == pytest.approx(e["compaction_bytes_removed"], rel=0.15), name


@pytest.mark.spark
def test_plots_draw_every_partition(approx_frame) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from jobs.engine.report import plots

    pdf = plots.as_pandas(approx_frame)  # from Spark once; the charts take pandas as well
    for chart in (plots.dirty_ratio_chart, plots.reclaimable_chart, plots.key_cardinality_chart,
                  plots.segment_ages_chart):
        fig = chart(pdf)
        buf = io.BytesIO()
        FigureCanvasAgg(fig).print_png(buf)
        assert buf.getvalue().startswith(b"\x89PNG"), chart.__name__
        ax = fig.axes[0]
        if chart is plots.dirty_ratio_chart:  # the delete topic (clicks) has no dirty ratio
            assert [t.get_text() for t in ax.get_yticklabels()] == list(plots.compacted(pdf)["name"])
            assert "clicks-0" in list(pdf["name"]) and pdf.set_index("name").loc["clicks-0", "policy"] == "delete"
        elif chart is not plots.key_cardinality_chart:
            assert [t.get_text() for t in ax.get_yticklabels()] == list(pdf["name"]), chart.__name__
    ages = plots.segment_ages_chart(approx_frame).axes[0].collections
    assert sum(len(c.get_offsets()) for c in ages) == int(pdf["segments"].sum())


# --------------------------------------------------------------------------------------------------
# After a real compaction: clean sections, delete horizons, expired tombstones, a forced dry run, CSV
# --------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_after_compaction_expired_tombstones_and_forced_dry_run_agree(spark, demo, tmp_path, capsys) -> None:
    compacted = DemoLogDir(str(tmp_path / "logs"), demo.overrides, demo.now_ms)
    shutil.copytree(demo.log_dir, compacted.log_dir)
    assert segjobs(["compact", *_common(compacted, demo.now_ms)]) == 0
    later = demo.now_ms + 2 * DAY  # past the horizons (now + delete.retention.ms, 1 day) the clean stamped

    code, out = _cli(capsys, "inspect", *_common(compacted, later), "--exact", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == COLUMN_NAMES
    by_name = _by_name(rows)
    truth = _truth(compacted.log_dir, later)
    for name, want in truth.items():
        for k, v in want.items():
            assert by_name[name][k] == ("" if v is None else str(v)), (name, k)
    target = by_name["users-changelog-0"]
    assert int(target["expired_tombstones"]) > 0 and int(target["clean_bytes"]) > 0
    assert target["compaction_selected"] == "False"  # nothing new since the clean: dirty ratio 0
    assert float(target["dirty_ratio"]) == 0.0
    assert len(target["segment_bytes"].split()) == int(target["segments"])

    dry = tmp_path / "forced.json"
    assert segjobs(["compact", *_common(compacted, later), "--dry-run", "--partition", "users-changelog-0",
                    "--report", str(dry)]) == 0
    forced = _by_name(json.loads(dry.read_text())["partitions"])["users-changelog-0"]
    assert forced["stats"]["tombstones_removed"] > 0
    assert int(target["compaction_records_removed"]) == forced["records_removed"]
    assert int(target["compaction_bytes_removed"]) == forced["bytes_removed"]


# --------------------------------------------------------------------------------------------------
# An unreadable partition, and the table format
# --------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_corrupt_partition_is_reported_and_the_others_inspected(spark, demo, tmp_path, capsys) -> None:
    broken = DemoLogDir(str(tmp_path / "logs"), demo.overrides, demo.now_ms)
    shutil.copytree(demo.log_dir, broken.log_dir)
    victim = sorted((Path(broken.log_dir) / "orders-0").glob("*.log"))[0]
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's CRC-covered bytes
    victim.write_bytes(bytes(data))
    report = tmp_path / "r.json"

    capsys.readouterr()
    code = segjobs(["inspect", *_common(broken, demo.now_ms), "--format", "table", "--report", str(report)])
    out, err = capsys.readouterr()
    assert code == 1
    # quiet, and still on stderr: the CRC failure the inspection's decode met, with the file
    assert f"orders-0: UNREADABLE: {victim}" in err and "CrcMismatchError" in err, err
    doc = json.loads(report.read_text())
    rows = _by_name(doc["partitions"])
    assert rows["orders-0"]["error"] and str(victim) in rows["orders-0"]["error"]
    assert rows["orders-0"]["records"] is None
    assert [e["partition"] for e in doc["errors"]] == ["orders-0"]
    assert doc["errors"][0]["file"] == str(victim) and doc["errors"][0]["position"] is not None
    for name, r in rows.items():
        if name != "orders-0":
            assert r["error"] is None and r["records"] > 0, name

    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("partition"))
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    table = lines[header + 2: header + 2 + len(rows)]
    assert [line.split()[0] for line in table] == sorted(rows)
    assert any(line.startswith("orders-0: ERROR") and str(victim) in line for line in lines)
    assert any(line.startswith("users-changelog-0: selected: dirty ratio") for line in lines)
    assert "UNREADABLE" in lines[-3] and lines[-2].startswith("elapsed ")
    assert lines[-1].startswith("cleanup.policy: delete from Kafka's default (clicks); ")
    assert "compact from --set users-changelog:cleanup.policy=compact (users-changelog)" in lines[-1]


@pytest.mark.spark
def test_an_unfinished_swap_is_planned_on_the_files_recovery_leaves_as_the_dry_run_does(exact_run, demo, tmp_path,
                                                                                         capsys) -> None:
    """A segment left as ``.log.swap`` (a crash between the swap's renames): a run that writes first completes the
    swap, so inspect, read-only, counts the segment where recovery puts it and says so, as compact --dry-run does;
    it changes no file."""
    swapped = DemoLogDir(str(tmp_path / "logs"), demo.overrides, demo.now_ms)
    shutil.copytree(demo.log_dir, swapped.log_dir)
    first = sorted((Path(swapped.log_dir) / "orders-0").glob("*.log"))[0]
    first.rename(first.with_name(first.name + ".swap"))
    before = {p: p.read_bytes() for p in Path(swapped.log_dir).rglob("*") if p.is_file()}
    report = tmp_path / "r.json"
    code, _ = _cli(capsys, "inspect", *_common(swapped, demo.now_ms), "--exact", "--report", str(report))
    assert code == 0
    doc = json.loads(report.read_text())
    want = _by_name(exact_run["report"]["partitions"])["orders-0"]
    got = _by_name(doc["partitions"])["orders-0"]
    assert {k: got[k] for k in (*PLANNED, *EXACT_COUNTS)} == {k: want[k] for k in (*PLANNED, *EXACT_COUNTS)}
    [entry] = [e for e in doc["recovery_first"] if e["partition"] == "orders-0"]
    assert entry["planned"] == "after recovery" and entry["actions"]
    assert {p: p.read_bytes() for p in Path(swapped.log_dir).rglob("*") if p.is_file()} == before

    code = segjobs(["compact", *_common(swapped, demo.now_ms), "--dry-run", "--report", str(tmp_path / "c.json")])
    assert code == 0
    dry = _by_name(json.loads((tmp_path / "c.json").read_text())["partitions"])["orders-0"]
    assert (got["bytes"], got["dirty_ratio"] and round(got["dirty_ratio"], 4)) == (dry["bytes_before"],
                                                                                  dry["dirty_ratio"])


@pytest.mark.spark
def test_json_format_prints_one_document(exact_run, demo, capsys) -> None:
    code, out = _cli(capsys, "inspect", *_common(demo, demo.now_ms), "--topic", "clicks", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert [(r["topic"], r["partition"]) for r in doc["partitions"]] == [("clicks", 0)]
    assert doc["command"] == "inspect" and doc["now_ms"] == demo.now_ms and doc["exit_code"] == 0
    # --topic narrows what is shown, not what is predicted
    full = _by_name(exact_run["report"]["partitions"])["clicks-0"]
    assert {k: doc["partitions"][0][k] for k in PLANNED} == {k: full[k] for k in PLANNED}


# --------------------------------------------------------------------------------------------------
# Retention predictions honour the delete-fraction limit (tasks in this process: no Spark)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [None, "1"], ids=["w-refused", "all-accepted"])
def test_inspect_predicts_the_bytes_retain_dry_run_deletes_when_the_limit_refuses_a_topic_and_when_not(
        tmp_path: Path, capsys, limit: str | None) -> None:
    from jobs import api
    from jobs.engine.inspect.driver import render
    from jobs.engine.report.run_report import human_bytes
    from tests.support.retention import DAY, NOW, RECENT, build_partition

    # 3 days old: past the 1-day retention set below, within Kafka's default week, so the limit counts these
    # deletions as this run's config's alone (jobs.rules.plan_retain.delete_guard)
    mid = RECENT - 3 * DAY
    d = tmp_path / "logs"
    build_partition(d, "w", 0, [[mid], [mid], [RECENT]])  # two thirds of w expire: over the default limit (50 %)
    build_partition(d, "u", 0, [[mid], [RECENT], [RECENT]])  # a third of u
    common = dict(overrides=("*:retention.ms=1d",), max_delete_fraction=None if limit is None else float(limit))
    seams = api.Seams(runner=api.InProcessTasks())
    inspected = api.inspect(d, api.InspectOptions(**common), now=NOW, seams=seams)  # type: ignore[arg-type]
    retained = api.retain(d, api.RetainOptions(**common, dry_run=True), now=NOW, seams=seams)  # type: ignore[arg-type]

    rows, entries = _by_name(inspected.report.partitions), _by_name(retained.report.partitions)
    for name, entry in entries.items():
        assert rows[name]["retention_bytes_deleted"] == entry["bytes_removed"], name
        assert rows[name]["retention_segments_deleted"] == len(entry["deleted"]), name
        assert rows[name]["retention_log_start_offset"] == entry["log_start_offset"], name
    freed = retained.report.totals["bytes_removed"]
    assert inspected.report.totals["retention_bytes_deleted"] == freed > 0
    assert f"retention frees {human_bytes(freed)}" in render(inspected.report, "table")
    refused = limit is None
    assert (entries["w-0"]["action"] == "refused") is refused and (retained.exit_code == 1) is refused
    assert (rows["w-0"]["retention_refused"] is not None) is refused
    assert entries["u-0"]["action"] == "delete"


def _column(table: str, heading: str, *, first: str = "partition") -> dict[str, str]:
    """Each row's cell under ``heading`` in a rendered summary table whose first column is ``first`` (rows named
    by their first cell)."""
    lines = table.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith(first))
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[header + 1])]
    names = [lines[header][a:b].strip() for a, b in spans]
    a, b = spans[names.index(heading)]
    out = {}
    for line in lines[header + 2:]:
        if not line.strip():
            break
        out[line[spans[0][0]:spans[0][1]].strip()] = line[a:b].strip()
    return out


def _html_column(page: str, section: str, heading: str) -> dict[str, str]:
    """Each row's cell under ``heading`` in the HTML table following ``<h2>section</h2>`` (rows named by their
    first cell)."""
    table = page.split(f"<h2>{section}</h2>", 1)[1].split("</table>", 1)[0]
    headings = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    column = headings.index(heading)
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1]):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        out[cells[0]] = cells[column]
    return out


@pytest.mark.slow
def test_a_delete_only_topic_shows_no_dirty_ratio_in_inspect_and_the_compact_summary(tmp_path: Path) -> None:
    from jobs import api
    from tests.support.retention import NOW, RECENT, build_partition

    d = tmp_path / "logs"
    for topic in ("events", "users"):  # never cleaned: a compacted topic's dirty ratio is 1.00
        build_partition(d, topic, 0, [[RECENT, RECENT], [RECENT, RECENT], [RECENT]])
    overrides = ("users:cleanup.policy=compact",)  # events: Kafka's default, delete
    seams = api.Seams(runner=api.InProcessTasks())
    inspected = api.inspect(d, api.InspectOptions(overrides=overrides), now=NOW, seams=seams)
    rows = _by_name(inspected.report.partitions)
    assert rows["events-0"]["dirty_ratio"] is None and rows["users-0"]["dirty_ratio"] == 1.0
    assert _by_name(json.loads(inspected.summary("json"))["partitions"])["events-0"]["dirty_ratio"] is None  # null
    assert {p.name: p.dirty_ratio for p in inspected.partitions} == {"events-0": None, "users-0": 1.0}
    assert _column(inspected.summary("table"), "dirty") == {"events-0": "-", "users-0": "1.00"}
    # the per-topic rows (console and HTML) say the same as the partitions' rows
    assert _column(inspected.summary("table", layout="topic"), "dirty", first="topic") == {"events": "-",
                                                                                           "users": "1.00"}
    if importlib.util.find_spec("matplotlib"):
        assert _html_column(inspect_html(inspected.report), "Per topic", "dirty") == {"events": "-", "users": "1.00"}
    csv_rows = {f"{r['topic']}-{r['partition']}": r for r in csv.DictReader(io.StringIO(inspected.summary("csv")))}
    assert csv_rows["events-0"]["dirty_ratio"] == ""

    compacted = api.compact(d, api.CompactOptions(overrides=overrides, dry_run=True), now=NOW, seams=seams)
    entries = _by_name(compacted.report.partitions)
    assert entries["events-0"]["dirty_ratio"] is None and entries["users-0"]["dirty_ratio"] == 1.0
    assert _column(compacted.summary(), "dirty") == {"events-0": "-", "users-0": "1.00"}


@pytest.mark.slow
def test_the_text_and_html_reports_render_from_the_typed_rows_and_totals(tmp_path: Path) -> None:
    """The renderers read the run's typed rows and totals, never the JSON report's dict entries: with those
    entries gone the table, the rollup, the CSV and the HTML page say the same."""
    from jobs import api
    from jobs.engine.inspect.driver import render
    from jobs.engine.report.html import inspect_html
    from tests.support.retention import DAY, NOW, RECENT, build_partition

    pytest.importorskip("matplotlib")
    d = tmp_path / "logs"
    build_partition(d, "w", 0, [[RECENT - 3 * DAY], [RECENT]])
    build_partition(d, "u", 0, [[RECENT], [RECENT]])
    report = api.inspect(d, api.InspectOptions(overrides=("*:retention.ms=1d",)), now=NOW,
                         seams=api.Seams(runner=api.InProcessTasks())).report
    shown = [render(report, "table"), render(report, "table", layout="topic"), render(report, "csv"),
             inspect_html(report)]
    report.partitions.clear()
    report.totals.clear()
    assert [render(report, "table"), render(report, "table", layout="topic"), render(report, "csv"),
            inspect_html(report)] == shown
    assert "w-0" in shown[0] and "retention frees" in shown[0]


def test_the_notebooks_parameters_come_from_the_environment_and_keep_their_defaults_without_it() -> None:
    from jobs.engine.inspect.driver import NOTEBOOK_PARAMETERS, notebook_parameters
    from segment_io.errors import UsageError

    defaults = dict(LOG_DIR=None, NOW=None, TOPICS=None, CONFIG=None, OVERRIDES=[], EXACT=False, LEDGER=None,
                    SPARK_MASTER="local[2]")
    assert list(defaults) == list(NOTEBOOK_PARAMETERS)  # every parameter of the notebook's cell
    assert notebook_parameters({}, **defaults) == tuple(defaults.values())
    assert notebook_parameters({"SEGJOBS_LOG_DIR": "", "LOG_DIR": "/elsewhere"}, **defaults) == tuple(defaults.values())
    env = {"SEGJOBS_LOG_DIR": "s3://bucket/kafka/logs", "SEGJOBS_NOW": "2026-11-22T02:00:00Z",
           "SEGJOBS_TOPICS": "orders* users", "SEGJOBS_OVERRIDES": "'orders:cleanup.policy=compact,delete' "
                                                                   "orders:retention.ms=7d",
           "SEGJOBS_EXACT": "yes", "SEGJOBS_SPARK_MASTER": "local[4]"}
    assert notebook_parameters(env, **defaults) == (
        "s3://bucket/kafka/logs", "2026-11-22T02:00:00Z", ["orders*", "users"], None,
        ["orders:cleanup.policy=compact,delete", "orders:retention.ms=7d"], True, None, "local[4]")
    assert notebook_parameters({"SEGJOBS_EXACT": "0"}, EXACT=True) == (False,)
    with pytest.raises(UsageError, match="SEGJOBS_EXACT='maybe': expected 1 or 0"):
        notebook_parameters({"SEGJOBS_EXACT": "maybe"}, EXACT=False)
    with pytest.raises(UsageError, match="LOGDIR: not a parameter of the notebook"):
        notebook_parameters({}, LOGDIR=None)


def test_inspect_and_a_dry_run_warn_when_the_log_dir_is_locked_by_a_run_at_work(tmp_path: Path, spark, capsys) -> None:
    """Neither takes the lock: what they read while a job or a broker writes may be caught mid-write (sizes, records
    and dirty ratios of a half-swapped partition), and they say so, on stderr even with --quiet and in the report."""
    import json

    from jobs.commands.cli import main
    from tests.support.lock_holders import hold_in_subprocess, release_holder
    from tests.support.retention import RECENT, build_partition

    logs = tmp_path / "logs"
    build_partition(logs, "t", 0, [[RECENT], [RECENT]])
    proc = hold_in_subprocess(logs)
    try:
        for argv in (["inspect"], ["retain", "--dry-run"]):
            report = tmp_path / f"{argv[0]}.json"
            assert main([*argv, "--log-dir", str(logs), "--quiet", "--report", str(report)]) == 0
            err = capsys.readouterr().err
            said = f"{logs / '.lock'} is held by segjobs run held-run (pid {proc.pid}"
            assert said in err and "may be caught mid-write" in err, err
            assert any(said in w for w in json.loads(report.read_text())["warnings"])
    finally:
        release_holder(proc)
    assert main(["inspect", "--log-dir", str(logs), "--quiet"]) == 0
    assert "mid-write" not in capsys.readouterr().err


def test_inspect_shows_the_runs_warnings_below_its_table(tmp_path: Path, spark, capsys) -> None:
    # an active segment cut short was in the JSON report only: the table says nothing of it, compact and retain
    # show it in their notes
    from jobs.commands.cli import main
    from segment_io.layout import segment_file_name
    from tests.support.retention import RECENT, build_partition

    logs = tmp_path / "logs"
    build_partition(logs, "t", 0, [[RECENT], [RECENT, RECENT]])
    active = logs / "t-0" / segment_file_name(1)
    active.write_bytes(active.read_bytes()[:-10])
    assert main(["inspect", "--log-dir", str(logs), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"warning: {active}: last " in out and "bytes are an incomplete batch" in out, out
