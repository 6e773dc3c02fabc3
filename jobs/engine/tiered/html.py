"""The tiered audit as a self-contained HTML page (``segjobs tiered audit --html FILE``), in the style of the
other reports (:mod:`jobs.engine.report.html`): the summary, then one table per finding and one of every
partition. No script, nothing loaded: it can be mailed or served from a bucket as it is."""

from __future__ import annotations

import html
from typing import Any

from jobs.engine.report.html import html_page, html_table
from jobs.engine.report.run_report import human_bytes
from jobs.engine.tiered.audit import TieredAudit
from jobs.rules.timeutil import format_instant


def _partition_rows(audit: TieredAudit) -> list[dict[str, Any]]:
    return [{"partition": f"{p.topic}-{p.partition}", "topic_id": p.topic_id, "in_log_dir": "yes" if p.in_log_dir
             else "no", "log_start": p.log_start_offset, "log_end": p.log_end, "finished": p.finished.segments,
             "finished_bytes": human_bytes(p.finished.bytes), "copy_started": p.dangling.segments,
             "delete_started": p.deleting.segments,
             "local_bytes": None if p.local is None else human_bytes(p.local.local_bytes),
             "findings": ", ".join(f"{n} {what}" for n, what in ((len(p.gaps), "gap(s)"),
                                                                  (len(p.missing), "missing"),
                                                                  (len(p.orphans), "orphan(s)"),
                                                                  (len(p.overdue), "overdue")) if n)}
            for p in audit.partitions]


def tiered_audit_html(audit: TieredAudit) -> str:
    """The page of one audit."""
    parts = [f"<p>{html.escape(audit.log_dir)} with {html.escape(audit.remote)} ({html.escape(audit.layout)}) at "
             f"{format_instant(audit.now_ms)}: {audit.metadata_events} metadata event(s), {len(audit.partitions)} "
             f"partition(s).{' <strong>Data loss: exit code 1.</strong>' if audit.data_loss else ''}</p>"]
    gaps = [{"partition": f"{p.topic}-{p.partition}", "first": g.first, "last": g.last}
            for p in audit.partitions for g in p.gaps]
    missing = [{"partition": f"{p.topic}-{p.partition}", "segment": m.segment_id, "offsets":
                f"{m.start_offset}-{m.end_offset}", "object": m.suffix, "problem": m.problem}
               for p in audit.partitions for m in p.missing]
    orphans = [{"partition": f"{p.topic}-{p.partition}", "segment": o.segment_id, "offsets": "-" if o.start_offset
                is None else f"{o.start_offset}-{o.end_offset}", "objects": len(o.objects), "bytes": o.bytes,
                "reason": o.reason} for p in audit.partitions for o in p.orphans]
    overdue = [{"partition": f"{p.topic}-{p.partition}", "segment": o.segment_id, "offsets":
                f"{o.start_offset}-{o.end_offset}", "bytes": o.size_bytes, "reason": o.reason}
               for p in audit.partitions for o in p.overdue]
    for title, rows, columns in (
            ("Gaps (data loss)", gaps, [("partition", "partition"), ("first", "first offset"),
                                        ("last", "last offset")]),
            ("Missing objects (data loss)", missing, [("partition", "partition"), ("segment", "segment"),
                                                      ("offsets", "offsets"), ("object", "object"),
                                                      ("problem", "problem")]),
            ("Orphans", orphans, [("partition", "partition"), ("segment", "segment"), ("offsets", "offsets"),
                                  ("objects", "objects"), ("bytes", "bytes"), ("reason", "reason")]),
            ("Overdue", overdue, [("partition", "partition"), ("segment", "segment"), ("offsets", "offsets"),
                                  ("bytes", "bytes"), ("reason", "reason")])):
        parts.append(f"<h2>{html.escape(title)}: {len(rows)}</h2>")
        if rows:
            parts.append(html_table(rows, columns, wrap=("reason", "problem")))
    parts += ["<h2>Partitions</h2>", html_table(_partition_rows(audit), [
        ("partition", "partition"), ("topic_id", "topic id"), ("in_log_dir", "in log dir"),
        ("log_start", "log start"), ("log_end", "log end"), ("finished", "finished"),
        ("finished_bytes", "finished bytes"), ("copy_started", "copy started"), ("delete_started", "delete started"),
        ("local_bytes", "local bytes"), ("findings", "findings")])]
    if audit.unrecognised:
        parts += [f"<h2>Files no {html.escape(audit.layout)} object: {len(audit.unrecognised)}</h2>",
                  html_table([{"uri": f.uri, "bytes": f.size} for f in audit.unrecognised],
                         [("uri", "file"), ("bytes", "bytes")])]
    return html_page("segjobs tiered audit", parts)
