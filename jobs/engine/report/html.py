"""Self-contained HTML reports with the charts, for people who never open the notebook: ``segjobs inspect --html
FILE`` (dirty ratios, reclaimable bytes, key cardinality, segment ages) and ``segjobs history --html FILE`` (bytes
reclaimed per run).

The charts are :mod:`jobs.engine.report.plots`' figures (the notebook's), embedded as base64 PNG ``<img>`` elements with
an ``alt`` text and a ``<figcaption>``; the page has no script and loads nothing, so it can be mailed, attached to
an Airflow task or served from a bucket as it is. The JSON report names the file (``html_report``).
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from typing import Any, Sequence

from jobs.engine.report.ledger import topics_table
from jobs.engine.report.outcomes import InspectRow
from jobs.engine.report.render import inspect_topic_columns, inspect_topic_row, inspect_totals, per_topic
from jobs.engine.report.run_report import RunReport, human_bytes, short_error
from jobs.rules.timeutil import format_instant
from segment_io.storage import open_storage

#: Resolution of the embedded charts (matplotlib's figure sizes are in inches).
DPI = 100

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top;
         white-space: nowrap; }
td:last-child { white-space: normal; min-width: 16em; }
td.wrap { white-space: normal; min-width: 18em; max-width: 36em; }
.scroll { overflow-x: auto; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; margin-top: 0.3em; }
.meta { color: #555; } .problem { color: #a00; }
.alert { font-weight: bold; border-left: 4px solid #a00; background: #fdf0f0; padding: 0.4em 0.8em; }
"""


@dataclass(frozen=True)
class Chart:
    """One figure of a report: a stable ``id`` (the ``<figure>``'s), its alt text and its caption."""

    id: str
    alt: str
    caption: str
    figure: Any  # a matplotlib Figure


def png_data_uri(figure: Any) -> str:
    """``figure`` as a ``data:image/png;base64,...`` URI."""
    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(chart: Chart) -> str:
    return (f'<figure id="{chart.id}"><img src="{png_data_uri(chart.figure)}" alt="{html.escape(chart.alt)}">'
            f"<figcaption>{html.escape(chart.caption)}</figcaption></figure>")


def html_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], *, wrap: Sequence[str] = ()) -> str:
    """An HTML table of ``rows`` (dicts) under ``columns`` ((key, heading) pairs); numbers align right, the cells
    of the ``wrap`` columns wrap (the others stay on one line)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            text = "-" if value is None else str(value)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            kind = ' class="n"' if numeric else ' class="wrap"' if key in wrap else ""
            cells.append(f"<td{kind}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def html_page(title: str, parts: Sequence[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n")


def inspect_charts(rows: Sequence[InspectRow]) -> list[Chart]:
    """The charts of an inspect report's rows (the readable partitions; none when no partition is readable)."""
    from jobs.engine.report import plots  # matplotlib: an optional dependency (segjobs[html])

    # the plots take any table of inspect's columns (a notebook's DataFrame, or these rows' entries)
    readable = [r.to_entry() for r in rows if r.readable]
    if not readable:
        return []
    return [
        Chart("dirty-ratio-per-topic", "Dirty ratio per topic",
              "Dirty ratio per topic: cleanable over clean + cleanable bytes of its partitions (red: compaction at "
              "now selects a partition of it; black tick: min.cleanable.dirty.ratio).",
              plots.dirty_ratio_chart(readable, by="topic")),
        Chart("dirty-ratio-per-partition", "Dirty ratio per partition",
              "Dirty ratio per partition (the dirtiest, and beyond 30 a histogram of every partition).",
              plots.dirty_ratio_chart(readable, by="partition")),
        Chart("reclaimable-bytes", "Reclaimable bytes per topic",
              "What compaction and retention at now would reclaim per topic, beside its size.",
              plots.reclaimable_chart(readable, by="topic")),
        Chart("key-cardinality", "Key cardinality against records",
              "Distinct keys against records, one point per partition: far below the diagonal, keys churn and "
              "compaction pays.", plots.key_cardinality_chart(readable)),
        Chart("segment-ages", "Segment ages per topic",
              "Every segment's age at now (orange: retention deletes it at now; area: size).",
              plots.segment_ages_chart(readable, by="topic")),
    ]


def _refusals(rows: Sequence[InspectRow]) -> list[str]:
    """One line per topic the delete-fraction limit would hold: what retention at now would not do, and why."""
    lines = []
    for topic, topic_rows in per_topic([r for r in rows if r.retention_refused]):
        lines.append(f'<p class="problem alert">{html.escape(topic)} ({len(topic_rows)} partition(s)): retention '
                     f"{html.escape(str(topic_rows[0].retention_refused))}</p>")
    return lines


def inspect_html(report: RunReport) -> str:
    """The HTML report of an inspect run: what was inspected, the totals, then first what needs a person (the
    topics retention would be refused for, the unreadable partitions), the charts, and a table per topic (its note
    second and wrapping, where a narrow window still shows it)."""
    t = inspect_totals(report)
    estimated = not t.exact
    parts = [f'<p class="meta">log dir <code>{html.escape(report.log_dir)}</code> at '
             f"{html.escape(format_instant(report.now_ms))} ({report.now_ms}); run {html.escape(report.run_id)}</p>",
             f"<p>{t.partitions} partition(s), {human_bytes(t.bytes)}; compaction at now selects "
             f"{t.compaction_selected} and frees {human_bytes(t.compaction_bytes_removed)}; "
             f"retention frees {human_bytes(t.retention_bytes_deleted)}"
             + (" (estimates: run with --exact to count and measure)" if estimated else "") + "</p>"]
    parts += _refusals(report.inspected)
    bad = [r for r in report.inspected if not r.readable]
    if bad:
        parts.append("<h2>Unreadable partitions</h2><ul>" + "".join(
            f'<li class="problem">{html.escape(r.topic)}-{r.partition}: {html.escape(short_error(r.error))}'
            f"</li>" for r in bad) + "</ul>")
    charts = inspect_charts(report.inspected)
    if not charts:
        parts.append('<p class="problem">No partition could be read: there is nothing to chart.</p>')
    parts += [_figure(c) for c in charts]
    columns = inspect_topic_columns(estimated)
    columns = (columns[0], *[c for c in columns if c[0] == "note"], *[c for c in columns[1:] if c[0] != "note"])
    parts += ["<h2>Per topic</h2>",
              html_table([inspect_topic_row(topic, rows) for topic, rows in per_topic(report.inspected)], columns,
                     wrap=("note",))]
    return html_page(f"segjobs inspect: {report.log_dir}", parts)


def history_html(history: Any) -> str:
    """The HTML report of a ledger's history (:class:`jobs.engine.report.ledger.History`): the bytes reclaimed per run
    (chart), the runs, and the bytes per topic."""
    from jobs.engine.report import plots  # matplotlib: an optional dependency (segjobs[html])

    parts = [f'<p class="meta">ledger <code>{html.escape(history.ledger)}</code>: the last '
             f"{len(history.runs)} of {history.total_runs} run(s)</p>"]
    if not history.runs:
        parts.append("<p>No runs recorded yet.</p>")
        return html_page("segjobs history", parts)
    dry = " (hatched: dry runs, what they would have reclaimed)" if any(r.dry_run for r in history.runs) else ""
    parts.append(_figure(Chart("reclaimed-per-run", "Bytes reclaimed per run",
                               f"Bytes reclaimed per run, oldest left, stacked by topic{dry}.",
                               plots.reclaimed_per_run_chart(history))))
    runs = [{"run": r.run_id[:12], "finished": format_instant(r.finished_ms), "command": r.command,
             "now": format_instant(r.now_ms), "dry_run": "yes" if r.dry_run else "no", "outcome": r.outcome,
             "partitions": r.partitions, "changed": r.changed, "reclaimed": human_bytes(r.bytes_reclaimed)}
            for r in history.runs]
    parts += ["<h2>Runs, newest first</h2>",
              html_table(runs, [("run", "run"), ("finished", "finished"), ("command", "command"), ("now", "--now"),
                            ("dry_run", "dry run"), ("outcome", "outcome"), ("partitions", "partitions"),
                            ("changed", "changed"), ("reclaimed", "reclaimed")])]
    if history.topics:
        parts += ["<h2>Reclaimed per topic (dry runs left out)</h2>", html_table(*topics_table(history))]
    return html_page(f"segjobs history: {history.ledger}", parts)


def write_html(uri: str, text: str, options: Any = None) -> None:
    """Write an HTML report atomically to a local path or an s3:// URI (as the JSON report is written)."""
    storage = open_storage(uri, options)
    parent = uri.rsplit("/", 1)[0] if "/" in uri else "."
    if storage.local_path(uri) is not None:
        storage.makedirs(parent)
    storage.write_atomic(uri, text.encode("utf-8"))


__all__ = ["Chart", "history_html", "inspect_charts", "inspect_html", "png_data_uri", "write_html"]
