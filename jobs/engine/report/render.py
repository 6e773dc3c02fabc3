"""The text summaries of the compaction and retention jobs: the table (a row per partition, or per topic with the
partitions that need a look below it), the totals line and the footer, rendered from the run's typed outcomes
(:mod:`jobs.engine.report.outcomes`).

The commands print them (:meth:`jobs.api.CompactResult.summary`, :meth:`jobs.api.RetainResult.summary`); the
helpers both use (table layout, notes, footer) are :mod:`jobs.engine.report.run_report`'s."""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

from jobs.engine.report.outcomes import Action, CompactionOutcome, InspectRow, InspectTotals, RetentionOutcome
from jobs.engine.report.run_report import (
    RunReport,
    attention_table,
    count_note,
    human_bytes,
    listed,
    notes_of_problems,
    one_line,
    outcome_totals,
    partitions_note,
    policy_origins,
    purged_totals,
    refused_note,
    render_footer,
    render_table,
    rows_per_partition,
    shared_note,
)
from jobs.rules.timeutil import format_instant
from segment_io.layout import partition_dir_problem

OutcomeT = TypeVar("OutcomeT", CompactionOutcome, RetentionOutcome, InspectRow)


def in_order(outcomes: Sequence[OutcomeT]) -> list[OutcomeT]:
    """By topic, then partition number (orders-2 before orders-10)."""
    return sorted(outcomes, key=lambda o: (o.topic, o.partition))


def per_topic(outcomes: Sequence[OutcomeT]) -> list[tuple[str, list[OutcomeT]]]:
    """Grouped by topic, topics in name order, each topic's partitions in number order."""
    groups: dict[str, list[OutcomeT]] = {}
    for o in in_order(outcomes):
        groups.setdefault(o.topic, []).append(o)
    return sorted(groups.items())


# --------------------------------------------------------------------------------------------------
# retain
# --------------------------------------------------------------------------------------------------


def describe_retention(o: RetentionOutcome, dry_run: bool) -> str:
    """A partition's retention in a few words, for its progress line."""
    if o.action is Action.ERROR:
        return f"ERROR, {o.reason}"
    if o.action is Action.REFUSED:
        return refused_note(o.reason)
    if o.action is Action.NONE:
        return "nothing to delete"
    verb = "would delete" if dry_run else "deleted"
    return (f"{verb} {len(o.deleted)} segment(s), {human_bytes(o.bytes_removed)} "
            f"({', '.join(o.rules)}); log start {o.log_start_offset}")


_RETAIN_COLUMNS = (("partition", "partition"), ("policy", "policy"), ("action", "action"),
                   ("segments", "segments"), ("deleted", "deleted"), ("removed", "removed"), ("rules", "rules"),
                   ("log_start", "log start"), ("note", "note"))


def _problems(o: RetentionOutcome | CompactionOutcome, *, label: str = "") -> list[str]:
    error = o.error_dict() if isinstance(o, RetentionOutcome) else (o.error.to_dict() if o.error else None)
    return notes_of_problems(o.action.value, o.reason, error, o.warnings, label=label)


def purge_notes(o: RetentionOutcome) -> list[str]:
    """The second phase of a retention in words: ``.deleted`` files unlinked now, and segments whose files stay
    until their file.delete.delay.ms has passed (counted in --now time; a later run unlinks them)."""
    notes = []
    purged = o.purged or ()
    if purged:
        notes.append(f"purged {len(purged)} .deleted file{'s' if len(purged) > 1 else ''}, "
                     f"{human_bytes(o.purged_bytes or 0)}")
    pending = o.purge_pending or {}
    if pending:
        due = format_instant(max(pending.values())).replace(".000Z", "Z")
        notes.append(f"{len(pending)} deleted segment{'s' if len(pending) > 1 else ''} pending purge until {due}")
    return notes


def _retain_decision(o: RetentionOutcome) -> str | None:
    """Why a partition lost no segment (None where it lost some, failed or was refused): the same words in a
    dry run and a real run."""
    return o.reason or None if o.action is Action.NONE else None


def _retain_note(o: RetentionOutcome) -> str | None:
    # the decision first, then what only a real run does (purges): a dry run's note is the real run's start
    notes = _problems(o) + [_retain_decision(o) or ""] + purge_notes(o)
    return one_line("; ".join(n for n in notes if n)) or None


def _retain_row(o: RetentionOutcome) -> dict[str, Any]:
    """A partition's row of the summary table."""
    return {"partition": o.name, "policy": o.policy, "action": o.action.value,
            "segments": f"{o.segments_before}->{o.segments_after}" if o.segments_before is not None else None,
            "deleted": len(o.deleted), "removed": human_bytes(o.bytes_removed), "rules": ",".join(o.rules) or None,
            "log_start": o.log_start_offset, "note": _retain_note(o)}


_RETAIN_TOPIC_COLUMNS = (("topic", "topic"), ("policy", "policy"), ("partitions", "partitions"),
                         ("changed", "changed"), ("segments", "segments"), ("deleted", "deleted"),
                         ("removed", "removed"), ("rules", "rules"), ("note", "note"))


def _retain_topic_row(topic: str, outcomes: list[RetentionOutcome]) -> dict[str, Any]:
    """A topic's row of the per-topic summary: its partitions added up; the note says a refusal once, counts
    failed partitions (listed below the table), says why partitions lost nothing (with how many when not all
    did: :func:`~jobs.engine.report.run_report.partitions_note`), then the topic's purges (a real run's)."""
    refused = next((o for o in outcomes if o.action is Action.REFUSED), None)
    failed = sum(1 for o in outcomes if o.action is Action.ERROR)
    pending = sum(len(o.purge_pending or {}) for o in outcomes)
    purged = sum(o.files_purged for o in outcomes)
    notes = [refused_note(refused.reason) if refused else "", count_note(failed, "FAILED (listed below)"),
             partitions_note([_retain_decision(o) for o in outcomes]),
             count_note(purged, "purged .deleted file(s)"), count_note(pending, "deleted segment(s) pending purge")]
    known = [o for o in outcomes if o.segments_before is not None]
    return {"topic": topic, "policy": shared_note(o.policy for o in outcomes) or "mixed",
            "partitions": len(outcomes), "changed": sum(1 for o in outcomes if o.action is Action.DELETE),
            "segments": (f"{sum(o.segments_before or 0 for o in known)}->{sum(o.segments_after or 0 for o in known)}"
                         if known else None),
            "deleted": sum(len(o.deleted) for o in outcomes),
            "removed": human_bytes(sum(o.bytes_removed for o in outcomes)),
            "rules": ",".join(sorted({r for o in outcomes for r in o.rules})) or None,
            "note": one_line("; ".join(n for n in notes if n)) or None}


def render_retain_summary(report: RunReport, *, dry_run: bool, layout: str = "auto", width: int | None = None) -> str:
    """The retain command's stdout: one row per partition, by topic and partition number, with a note saying
    why nothing went, what failed or was refused, and what was purged or is pending; or beyond
    :data:`~jobs.engine.report.run_report.PARTITION_ROWS_MAX` partitions (``layout``) a row per topic and the failed
    partitions below it; then the totals line and the footer (elapsed, MB/s). ``width``: the terminal's, which
    the table fits (notes wrap, never cut)."""
    outcomes = in_order([o for o in report.outcomes if isinstance(o, RetentionOutcome)])
    if rows_per_partition(layout, len(outcomes)):
        body = [render_table([_retain_row(o) for o in outcomes], _RETAIN_COLUMNS, width=width)]
    else:
        body = [render_table([_retain_topic_row(t, os) for t, os in per_topic(outcomes)], _RETAIN_TOPIC_COLUMNS,
                             width=width)]
        body += attention_table([o for o in outcomes if o.action is Action.ERROR or o.warnings], _retain_row,
                                _RETAIN_COLUMNS, width=width)
    t = report.totals
    verb = "would delete" if dry_run else "deleted"
    lines = [*body, "",
             f"{t['partitions']} partition(s); {verb} {t['segments_deleted']} segment(s), "
             f"{human_bytes(t['bytes_removed'])}"
             + purged_totals(t)
             + outcome_totals(t)
             + (f"; {t['warnings']} warning(s)" if t["warnings"] else ""),
             *filter(None, [rejected_dirs_line(report, [o.name for o in outcomes]), recovery_first_line(report)]),
             render_footer(report, t["bytes_in_scope"], "in scope"),
             *filter(None, [policy_origins(report)])]
    return "\n".join(lines)


def rejected_dirs_line(report: RunReport, rows: Sequence[str], *, shown: int = 10) -> str | None:
    """The line naming the log dir's directories that look like partitions and are not (``users-01``): each is
    an error of the run (its exit code 1) with no row of its own in the table, so the summary names them here;
    ``rows``: the names the table has rows for. None when there are none."""
    have = set(rows)
    names = sorted({str(e["partition"]) for e in report.errors if e.get("partition") is not None
                    and str(e["partition"]) not in have and partition_dir_problem(str(e["partition"]))})
    if not names:
        return None
    return (f"{len(names)} director{'y' if len(names) == 1 else 'ies'} named like a partition, not one, left "
            f"untouched (why on stderr and in the report's errors): {listed(names, shown)}")


def recovery_first_line(report: RunReport, *, shown: int = 10) -> str | None:
    """A dry run's line about the partitions a crashed run left mid-commit (``report.recovery_first``): a real run
    recovers them first, and the dry run planned them on the files recovery leaves, left them out of its counts
    (pending recovery) or found that recovery would stop in them. None when there were none."""
    entries = [e for e in report.recovery_first if e["partition"] is not None]
    if not entries:
        return None
    by: dict[str, list[str]] = {}
    for e in entries:
        by.setdefault(e["planned"], []).append(e["partition"])

    def names(planned: str) -> str:
        return listed(by[planned], shown)

    line = f"recovery first: a real run first settles the unfinished commits of {len(entries)} partition(s)"
    for planned, what in (("after recovery", "planned here on the files recovery leaves"),
                          ("pending recovery", "PENDING RECOVERY, left out of these counts (run `segjobs recover` "
                                               "first for exact counts)"),
                          ("not recovered", "recovery would stop in (left untouched)")):
        if planned in by:
            line += f"; {what}: {names(planned)}"
    return line


# --------------------------------------------------------------------------------------------------
# compact
# --------------------------------------------------------------------------------------------------


_COMPACT_COLUMNS = (("partition", "partition"), ("action", "action"), ("strategy", "strategy"), ("dirty", "dirty"),
                    ("segments", "segments"), ("bytes", "bytes"), ("records_removed", "records removed"),
                    ("tombstones_removed", "tombstones removed"), ("aborted_removed", "aborted removed"),
                    ("retention", "retention"), ("note", "note"))


_COMPACT_TOPIC_COLUMNS = (("topic", "topic"), ("partitions", "partitions"), ("selected", "selected"),
                          ("compacted", "compacted"), ("segments", "segments"), ("bytes", "bytes"),
                          ("records_removed", "records removed"), ("tombstones_removed", "tombstones removed"),
                          ("aborted_removed", "aborted removed"), ("retention", "retention"), ("note", "note"))


def _compact_note(o: CompactionOutcome) -> str | None:
    """Why a partition was (not) compacted, what failed, whether the clean was partial, and what its
    retention (compact,delete topics) purged or left pending, in one line."""
    r = o.retention
    if r is not None and r.action is Action.REFUSED:  # the row's whole news: the limit held the partition, once
        return one_line("; ".join([f"left untouched: {refused_note(r.reason)}"] + purge_notes(r)))
    notes = _problems(o)
    if o.cleaned is not None and o.cleaned.partial:
        notes.append(f"partial: map full at offset {o.cleaned.cleaned_range[1]}, "
                     f"next run continues (external-sort would clean it in one run)")
    if o.strategy == "external-sort":  # why memory was not enough (or not asked for)
        notes.append(f"{o.strategy}: {o.strategy_reason}")
    if r is not None:
        notes += _problems(r, label="retention") + purge_notes(r)
    if o.error is None:
        # why it was skipped is the news of a skipped row; why a compacted one was selected comes last
        notes.insert(0 if not o.selected else len(notes), o.note or "")
    return one_line("; ".join(n for n in notes if n)) or None


def _stat(o: CompactionOutcome, name: str) -> int | str:
    stats = o.cleaned.stats if o.cleaned is not None else {}
    return stats.get(name, "-")


def _compact_row(o: CompactionOutcome) -> dict[str, Any]:
    """A partition's row of the summary table."""
    r = o.retention
    return {
        "partition": o.name, "action": o.action.value, "strategy": o.strategy or "-",
        "dirty": None if o.dirty_ratio is None else f"{o.dirty_ratio:.2f}",  # None: "-"
        "segments": f"{o.segments_before}->{o.segments_after}" if o.readable else "-->-",
        "bytes": (f"{human_bytes(o.bytes_before)} -> {human_bytes(o.bytes_after)}" if o.readable else "- -> -"),
        "records_removed": o.records_removed,
        "tombstones_removed": _stat(o, "tombstones_removed"),
        "aborted_removed": _stat(o, "aborted_records_removed"),
        "retention": (f"-{len(r.deleted)} seg, {human_bytes(r.bytes_removed)}"
                      if r is not None and r.bytes_removed else "-"),
        "note": _compact_note(o),
    }


def _retention_failed(r: RetentionOutcome | None) -> bool:
    """A compact,delete partition whose retention first failed (a refusal is not a failure)."""
    return r is not None and r.error is not None and r.action is not Action.REFUSED


def _compact_decision(o: CompactionOutcome) -> str | None:
    """Why a partition was (not) selected (None for a failed one, or one the delete-fraction limit held: its
    topic's row says that once): the same words in a dry run and a real run."""
    held = o.retention is not None and o.retention.action is Action.REFUSED
    return o.note or None if o.error is None and not held else None


def _compact_topic_row(topic: str, outcomes: list[CompactionOutcome]) -> dict[str, Any]:
    """A topic's row of the per-topic summary: its partitions added up, and in the note what is true of each
    partition it summarises: a refusal once, counts of failed and partial partitions (listed below), the
    strategies' and selections' reasons (with how many partitions when not all share one:
    :func:`~jobs.engine.report.run_report.partitions_note`), then the topic's purges (a real run's), as the retain
    summary counts them."""
    retentions = [o.retention for o in outcomes if o.retention is not None]
    refused = next((r for r in retentions if r.action is Action.REFUSED), None)
    failed = sum(1 for o in outcomes if o.error is not None) + sum(1 for o in outcomes
                                                                    if _retention_failed(o.retention))
    notes = [f"left untouched: {refused_note(refused.reason)}" if refused else "",
             count_note(failed, "FAILED (listed below)"),
             count_note(sum(1 for o in outcomes if o.partial), "partial (listed below)"),
             partitions_note([f"{o.strategy}: {o.strategy_reason}" if o.strategy == "external-sort" else None
                              for o in outcomes]),
             partitions_note([_compact_decision(o) for o in outcomes]),
             count_note(sum(r.files_purged for r in retentions), "purged .deleted file(s)"),
             count_note(sum(len(r.purge_pending or {}) for r in retentions), "deleted segment(s) pending purge")]
    deleted = sum(len(r.deleted) for r in retentions)
    removed = sum(r.bytes_removed for r in retentions) if not refused else 0
    stats = [o.cleaned.stats for o in outcomes if o.cleaned is not None]
    return {
        "topic": topic, "partitions": len(outcomes), "selected": sum(1 for o in outcomes if o.selected),
        "compacted": sum(1 for o in outcomes if o.action.rewrote),
        "segments": f"{sum(o.segments_before for o in outcomes)}->{sum(o.segments_after for o in outcomes)}",
        "bytes": (f"{human_bytes(sum(o.bytes_before for o in outcomes))} -> "
                  f"{human_bytes(sum(o.bytes_after for o in outcomes))}"),
        "records_removed": sum(o.records_removed for o in outcomes),
        "tombstones_removed": sum(s.get("tombstones_removed", 0) for s in stats),
        "aborted_removed": sum(s.get("aborted_records_removed", 0) for s in stats),
        "retention": f"-{deleted} seg, {human_bytes(removed)}" if removed else "-",
        "note": one_line("; ".join(n for n in notes if n)) or None,
    }


def _needs_a_look(o: CompactionOutcome) -> bool:
    """A partition a per-topic summary names below its table: failed, partial, or with a warning (a refusal
    is said once on its topic's row)."""
    r = o.retention
    return bool(o.error is not None or o.partial or o.warnings or _retention_failed(r)
                or (r is not None and r.warnings))


def render_compact_summary(report: RunReport, *, dry_run: bool, layout: str = "auto", width: int | None = None) -> str:
    """The compact command's stdout: the table, the totals line and the footer (elapsed, MB/s). The table has a
    row per partition (by topic and partition number), or beyond
    :data:`~jobs.engine.report.run_report.PARTITION_ROWS_MAX` partitions (``layout``: see
    :func:`~jobs.engine.report.run_report.rows_per_partition`) a row per topic, followed by the partitions that need
    a look. ``width``: the terminal's, which the table fits (notes wrap, never cut).
    The summary is the command's output: --quiet only silences progress."""
    outcomes = in_order([o for o in report.outcomes if isinstance(o, CompactionOutcome)])
    if rows_per_partition(layout, len(outcomes)):
        body = [render_table([_compact_row(o) for o in outcomes], _COMPACT_COLUMNS, width=width)]
    else:
        body = [render_table([_compact_topic_row(t, os) for t, os in per_topic(outcomes)], _COMPACT_TOPIC_COLUMNS,
                             width=width)]
        body += attention_table([o for o in outcomes if _needs_a_look(o)], _compact_row, _COMPACT_COLUMNS,
                                width=width)
    t = report.totals
    verb = "would remove" if dry_run else "removed"
    return "\n".join([
        *body, "",
        f"{t['selected']} of {t['partitions']} partition(s) selected; {verb} {t['records_removed']} record(s), "
        f"{human_bytes(t['bytes_removed'])}"
        + purged_totals(t)
        + outcome_totals(t),
        *filter(None, [rejected_dirs_line(report, [o.name for o in outcomes]), recovery_first_line(report)]),
        render_footer(report, t["bytes_compacted"], "in the selected partitions"),
        *filter(None, [policy_origins(report)]),
    ])


# --------------------------------------------------------------------------------------------------
# inspect (the text and HTML reports' per-topic table)
# --------------------------------------------------------------------------------------------------


def inspect_topic_columns(estimated: bool) -> tuple[tuple[str, str], ...]:
    """The columns of inspect's per-topic table (``estimated``: distinct keys and compaction are estimates)."""
    est = " (est.)" if estimated else ""
    return (("topic", "topic"), ("policy", "policy"), ("partitions", "partitions"), ("segments", "segs"),
            ("size", "size"), ("dirty", "dirty"), ("records", "records"), ("keys", f"keys{est}"),
            ("superseded", f"superseded{est}"), ("tombstones", "tombstones live/exp"), ("aborted", "aborted"),
            ("compact", "compact"), ("compaction", f"compaction frees{est}"), ("retention", "retention frees"),
            ("oldest", "oldest"), ("newest", "newest"), ("note", "note"))


def inspect_totals(report: RunReport) -> InspectTotals:
    """The typed totals of an inspect run's report (what its ``totals`` serialise)."""
    if report.inspect_totals is None:
        raise ValueError(f"not the report of an inspect run: {report.command} (run {report.run_id})")
    return report.inspect_totals


def inspect_topic_row(topic: str, rows: Sequence[InspectRow]) -> dict[str, Any]:
    """A topic's row of inspect's per-topic table (``rows``: its partitions' inspect rows): its readable
    partitions added up. ``dirty`` is the topic's bytes
    ratio (cleanable over clean + cleanable bytes of its partitions that have a dirty ratio, as the notebook's
    per-topic chart weighs it: a mean of ratios would let a tiny partition weigh as much as a huge one; None, shown
    "-", for a topic without a compact policy); ``compact`` is how
    many partitions compaction at now selects; the note says a retention refusal once, how many partitions are
    UNREADABLE (listed below), and the partitions' compaction notes (with how many partitions when not all share
    one: :func:`~jobs.engine.report.run_report.partitions_note`)."""
    ok = [r for r in rows if r.readable]
    unreadable = len(rows) - len(ok)
    refused = next((r.retention_refused for r in ok if r.retention_refused), None)
    notes = [f"retention {refused}" if refused else "", count_note(unreadable, "UNREADABLE (listed below)"),
             partitions_note([r.compaction_note for r in rows])]
    if not ok:
        return {"topic": topic, "policy": "UNREADABLE", "partitions": len(rows), "note": one_line("; ".join(notes))}

    def total(column: Callable[[InspectRow], int | None]) -> int:
        return sum(column(r) or 0 for r in ok)

    # a dirty ratio is a compaction measure: only the partitions that have one (a compact policy) weigh in, and a
    # delete-only topic has none ("-", as its partitions' rows)
    compacted = [r for r in ok if r.dirty_ratio is not None]
    cleanable = sum(r.cleanable_bytes or 0 for r in compacted)
    judged = sum(r.clean_bytes or 0 for r in compacted) + cleanable
    oldest = [r.oldest_timestamp for r in ok if r.oldest_timestamp is not None]
    newest = [r.newest_timestamp for r in ok if r.newest_timestamp is not None]
    return {
        "topic": topic, "policy": shared_note(r.policy for r in ok) or "mixed", "partitions": len(rows),
        "segments": total(lambda r: r.segments), "size": human_bytes(total(lambda r: r.bytes)),
        "dirty": f"{cleanable / judged if judged else 0.0:.2f}" if compacted else None,
        "records": total(lambda r: r.records), "keys": total(lambda r: r.distinct_keys),
        "superseded": total(lambda r: r.superseded_records),
        "tombstones": f"{total(lambda r: r.live_tombstones)}/{total(lambda r: r.expired_tombstones)}",
        "aborted": total(lambda r: r.aborted_records),
        "compact": f"{sum(1 for r in ok if r.compaction_selected)}/{len(ok)}",
        "compaction": human_bytes(total(lambda r: r.compaction_bytes_removed if r.compaction_selected else 0)),
        "retention": human_bytes(total(lambda r: r.retention_bytes_deleted)),
        "oldest": format_instant(min(oldest))[:10] if oldest else None,
        "newest": format_instant(max(newest))[:10] if newest else None,
        "note": one_line("; ".join(n for n in notes if n)) or None,
    }


__all__ = ["describe_retention", "per_topic", "in_order", "inspect_topic_columns", "inspect_topic_row",
           "inspect_totals", "purge_notes", "render_compact_summary", "render_retain_summary"]
