"""The words for what recovery did: per partition, or beyond a summary's partition rows per topic, summed.

Used by the line a job prints after recovering what an interrupted run left, and by ``segjobs recover``'s
summary. The counts are :class:`~jobs.logdir.recover.RecoveryTally`'s; this module only words them.
"""

from __future__ import annotations

from typing import Sequence

from jobs.engine.report.run_report import human_bytes, rows_per_partition
from jobs.logdir.recover import RecoveryTally


def _a(n: int, one: str, many: str) -> str:
    """``a compaction commit`` for one, ``3 compaction commits`` for more."""
    return one if n == 1 else f"{n} {many}"


def _parts(*parts: tuple[int, str]) -> str:
    """``(2 segment(s) made live, 3 replaced)`` of the non-zero counts, or nothing."""
    said = [f"{n} {what}" for n, what in parts if n]
    return f" ({', '.join(said)})" if said else ""


def tally_phrases(t: RecoveryTally) -> list[str]:
    """What ``t`` did, one phrase per kind of change: ``completed a compaction commit (2 segment(s) made live, 3
    replaced)``, ``discarded uncommitted work (deleted 30 staged file(s), 1.2 MB; ...)``, ..."""
    said = []
    if t.completed:
        said.append("completed " + _a(t.completed, "a compaction commit", "compaction commits")
                    + _parts((t.made_live, "segment(s) made live"), (t.replaced, "replaced")))
    if t.rolled_back:
        said.append("rolled back " + _a(t.rolled_back, "a compaction commit", "compaction commits")
                    + _parts((t.dropped, ".cleaned/.swap file(s) dropped"), (t.restored, "segment(s) put back")))
    if t.deletes:
        said.append("completed " + _a(t.deletes, "a retention delete", "retention deletes")
                    + _parts((t.deleted, "segment(s) to .deleted")))
    if t.ledgered:
        said.append("entered .deleted segments in the deletion ledger"
                    + ("" if t.ledgered == 1 else f" of {t.ledgered} partition(s)"))
    if t.discarded:
        said.append("discarded " + _a(t.discarded, "a stale intent", "stale intents") + " unapplied")
    if t.settled_elsewhere:
        said.append("left " + _a(t.settled_elsewhere, "a commit", "commits") + " to the run finishing it")
    if t.intents:
        said.append("removed " + _a(t.intents, "a finished commit's intent", "finished commits' intents"))
    if t.staged:
        # staged files no intent refers to: what an uncommitted compaction leaves (or a finished one on S3)
        staged = f"{t.staged} staged file(s), {human_bytes(t.staged_bytes)}"
        # (not "rolled back": the groups the run committed before it stopped stay, and no record is lost)
        said.append(f"deleted {staged}" if t.completed or t.rolled_back
                    else f"discarded uncommitted work (deleted {staged}; what the run committed before stays)")
    if t.temps:
        said.append(f"deleted {t.temps} temporary file(s) of interrupted writes, {human_bytes(t.temp_bytes)}")
    if t.uploads:
        said.append(f"aborted {t.uploads} unfinished upload(s), {human_bytes(t.upload_bytes)}")
    return said


def _named(name: str, t: RecoveryTally) -> str:
    return f"{name or 'the log dir'} {', '.join(tally_phrases(t))}"


def recovery_details(tallies: Sequence[RecoveryTally], *, layout: str = "auto") -> str:
    """``orders-0 completed a compaction commit (...); users-1 rolled back (...)``: every partition of ``tallies``
    (:func:`~jobs.logdir.recover.tally_reports`) with what recovery did there, or, beyond a summary's partition
    rows (``layout``, as the jobs' summaries), per topic summed; the log dir's own leftovers last."""
    partitions = [t for t in tallies if t.partition]
    if rows_per_partition(layout, len(partitions)):
        said = [_named(t.partition, t) for t in partitions]
    else:
        topics: dict[str, list[RecoveryTally]] = {}
        for t in partitions:
            topics.setdefault(t.topic, []).append(t)
        said = [f"{topic} ({len(ts)} partition(s)) {', '.join(tally_phrases(sum(ts[1:], ts[0])))}"
                for topic, ts in sorted(topics.items())]
    return "; ".join(said + [_named("", t) for t in tallies if not t.partition])


def recovered_text(tallies: Sequence[RecoveryTally], *, layout: str = "auto") -> str:
    """``3 partition(s): orders-0 completed ...``: how many partitions recovery changed something of, and
    :func:`recovery_details`."""
    return f"{sum(1 for t in tallies if t.partition)} partition(s): {recovery_details(tallies, layout=layout)}"


__all__ = ["recovered_text", "recovery_details", "tally_phrases"]
