"""Reading the run ledger: the last runs and the bytes they reclaimed per topic.

``segjobs compact|retain --ledger URI`` appends one row per partition and run to a Delta table
(:func:`jobs.engine.report.run_report.append_ledger`: run_id, command, log_dir, now_ms, dry_run, finished_ms, topic,
partition, action, reason and the partition's numbers). It is written with the ``deltalake`` package and read here with
it too: no Spark, a local path or an ``s3://`` URI with the same storage options as the jobs.

What a run shows:

* ``partitions``: the rows of the run (one per partition it covered), ``changed``: those that lost bytes;
* ``reclaimed``: the sum of the rows' ``bytes_removed`` (segments deleted by retention, bytes a compaction
  removed, both for a ``compact,delete`` partition of a compact run; in a dry run, what the run would have
  removed);
* ``outcome``: ``ok``, or how many partitions ended in ``error``, ``refused`` (the delete-fraction limit) or
  ``partly compacted``: the rows that make a job exit 1. A run stopped by a lost lease, or whose report could
  not be written, also exited 1 without a failed row: the ledger holds partitions, not exit codes.

Per topic, the bytes reclaimed by the runs shown, dry runs left out (they removed nothing). A topic is one of a log
dir: runs over several log dirs may share a ledger, and two clusters' ``orders`` are two rows, not one sum.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from jobs.engine.report.outcomes import Action
from jobs.engine.report.run_report import delta_storage_options, human_bytes, render_table
from jobs.rules.timeutil import format_instant
from segment_io.errors import UsageError
from segment_io.storage import open_storage

#: Row actions that make a job exit 1 (retain: error, refused; compact: error, partly compacted).
FAILED_ACTIONS = tuple(a.value for a in Action if a.failed)
#: Run-level columns: the same in every row of one run.
RUN_COLUMNS = ("run_id", "command", "log_dir", "now_ms", "dry_run", "finished_ms")
_READ_COLUMNS = [*RUN_COLUMNS, "topic", "action", "bytes_removed", "records_removed"]


@dataclass(frozen=True)
class RunSummary:
    """One run of the ledger."""

    run_id: str
    command: str
    log_dir: str
    now_ms: int
    dry_run: bool
    finished_ms: int
    partitions: int
    changed: int
    bytes_reclaimed: int
    records_removed: int
    #: failed rows by action (``error``, ``refused``, ``partly compacted``); empty when the run went well
    failures: Mapping[str, int] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """``ok``, or the failed partitions by action: ``2 error, 1 refused``."""
        if not self.failures:
            return "ok"
        return ", ".join(f"{n} {action}" for action, n in sorted(self.failures.items()))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failures": dict(self.failures), "outcome": self.outcome,
                "now": format_instant(self.now_ms), "finished": format_instant(self.finished_ms)}


@dataclass(frozen=True)
class TopicReclaimed:
    """The bytes one topic of one log dir got back over the runs shown (real runs only)."""

    topic: str
    #: the log dir of the runs that reclaimed them (the same topic name in another log dir is another row)
    log_dir: str
    runs: int
    bytes_reclaimed: int
    records_removed: int
    #: bytes by command (``compact``, ``retain``)
    by_command: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "by_command": dict(self.by_command)}


@dataclass(frozen=True)
class History:
    """The last runs of a ledger (newest first) and what they reclaimed per topic."""

    ledger: str
    total_runs: int
    runs: Sequence[RunSummary]
    topics: Sequence[TopicReclaimed]
    #: (run_id, topic, bytes_removed) of the runs shown, dry runs included: what the per-run chart stacks
    run_topic_bytes: Sequence[tuple[str, str, int]] = ()

    @property
    def several_log_dirs(self) -> bool:
        """Whether the runs shown cover more than one log dir (the tables then name each row's, the chart each
        topic's)."""
        return len({r.log_dir for r in self.runs}) > 1

    def to_dict(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "total_runs": self.total_runs, "runs": [r.to_dict() for r in self.runs],
                "topics": [t.to_dict() for t in self.topics]}

    def runs_frame(self):
        """The runs as a pandas DataFrame, oldest first (for notebooks and plots)."""
        import pandas as pd

        rows = [r.to_dict() for r in reversed(self.runs)]
        columns = ["run_id", "finished", "command", "now", "dry_run", "outcome", "partitions", "changed",
                   "bytes_reclaimed", "records_removed", "log_dir"]
        return pd.DataFrame(rows, columns=columns)

    def run_topic_frame(self):
        """Bytes removed per run and topic as a pandas DataFrame, runs oldest first: run_id, label, command,
        dry_run, log_dir, topic, series (what the chart stacks: the topic, with its log dir in parentheses when the
        runs cover several), bytes_removed."""
        import pandas as pd

        order = {r.run_id: i for i, r in enumerate(reversed(self.runs))}
        runs = {r.run_id: r for r in self.runs}
        several = self.several_log_dirs
        rows = [{"run_id": run_id, "order": order[run_id],
                 "label": f"{format_instant(runs[run_id].now_ms)[:16]} {runs[run_id].command}"
                          + (" (dry run)" if runs[run_id].dry_run else ""),
                 "command": runs[run_id].command, "dry_run": runs[run_id].dry_run, "log_dir": runs[run_id].log_dir,
                 "topic": topic, "series": f"{topic} ({runs[run_id].log_dir})" if several else topic,
                 "bytes_removed": n}
                for run_id, topic, n in self.run_topic_bytes]
        df = pd.DataFrame(rows, columns=["run_id", "order", "label", "command", "dry_run", "log_dir", "topic",
                                         "series", "bytes_removed"])
        return df.sort_values(["order", "topic"]).drop(columns="order").reset_index(drop=True)


def read_ledger(uri: str, options: Any = None):
    """The ledger's rows (the columns this module reads) as a pyarrow Table. ``UsageError`` naming ``--ledger``
    when there is no ledger at ``uri``; a StorageAccessError when S3 cannot be reached."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    open_storage(uri, options).check_reachable(uri)  # S3: credentials, endpoint, bucket, within seconds
    try:
        table = DeltaTable(uri, storage_options=delta_storage_options(uri, options))
    except TableNotFoundError:
        raise UsageError(f"--ledger {uri}: no Delta table there; a ledger is created by the first `segjobs compact` "
                         f"or `segjobs retain` run given --ledger {uri}") from None
    missing = [c for c in _READ_COLUMNS if c not in table.schema().to_arrow().names]
    if missing:
        raise UsageError(f"--ledger {uri}: a Delta table, but not a segjobs ledger (no column "
                         f"{', '.join(missing)})")
    return table.to_pyarrow_table(columns=list(_READ_COLUMNS))


def summarize(rows, *, last: int = 10, ledger: str = "") -> History:
    """The ``last`` runs of ``rows`` (a pyarrow Table of ledger rows), newest first by finish time, and the bytes
    per topic and log dir of those runs that were not dry runs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if last < 1:
        raise UsageError(f"--last {last}: give a number of runs, 1 or more")
    if rows.num_rows == 0:
        return History(ledger, 0, [], [])
    failed = pc.is_in(rows["action"], value_set=pa.array(FAILED_ACTIONS))
    rows = rows.append_column("failed", pc.cast(failed, pa.int64()))
    rows = rows.append_column("changed", pc.cast(pc.greater(rows["bytes_removed"], 0), pa.int64()))
    per_run = rows.group_by(list(RUN_COLUMNS)).aggregate(
        [("topic", "count"), ("changed", "sum"), ("bytes_removed", "sum"), ("records_removed", "sum")]).to_pylist()
    per_run.sort(key=lambda r: (r["finished_ms"], r["now_ms"], r["run_id"]), reverse=True)
    shown = per_run[:last]
    ids = pa.array([r["run_id"] for r in shown])
    mine = rows.filter(pc.is_in(rows["run_id"], value_set=ids))
    failures: dict[str, dict[str, int]] = {}
    for r in mine.filter(pc.equal(mine["failed"], 1)).group_by(["run_id", "action"]).aggregate(
            [("topic", "count")]).to_pylist():
        failures.setdefault(r["run_id"], {})[r["action"]] = r["topic_count"]
    runs = [RunSummary(r["run_id"], r["command"], r["log_dir"], r["now_ms"], r["dry_run"], r["finished_ms"],
                       r["topic_count"], r["changed_sum"], r["bytes_removed_sum"] or 0, r["records_removed_sum"] or 0,
                       failures.get(r["run_id"], {})) for r in shown]
    by_run_topic = mine.group_by(["run_id", "topic"]).aggregate([("bytes_removed", "sum")]).to_pylist()
    real = mine.filter(pc.invert(mine["dry_run"]))
    topics: dict[tuple[str, str], dict[str, Any]] = {}
    for r in real.group_by(["log_dir", "topic", "command"]).aggregate(
            [("bytes_removed", "sum"), ("records_removed", "sum")]).to_pylist():
        t = topics.setdefault((r["log_dir"], r["topic"]), {"bytes": 0, "records": 0, "by_command": {}})
        t["bytes"] += r["bytes_removed_sum"] or 0
        t["records"] += r["records_removed_sum"] or 0
        t["by_command"][r["command"]] = r["bytes_removed_sum"] or 0
    runs_per_topic = {(r["log_dir"], r["topic"]): r["run_id_count_distinct"] for r in
                      real.group_by(["log_dir", "topic"]).aggregate([("run_id", "count_distinct")]).to_pylist()}
    topic_rows = sorted((TopicReclaimed(name, log_dir, runs_per_topic[log_dir, name], t["bytes"], t["records"],
                                        t["by_command"]) for (log_dir, name), t in topics.items()),
                        key=lambda t: (-t.bytes_reclaimed, t.topic, t.log_dir))
    return History(ledger, len(per_run), runs, topic_rows,
                   [(r["run_id"], r["topic"], r["bytes_removed_sum"] or 0) for r in by_run_topic])


def read_history(uri: str, *, last: int = 10, options: Any = None) -> History:
    """:func:`read_ledger` then :func:`summarize`."""
    return summarize(read_ledger(uri, options), last=last, ledger=uri)


def topics_table(history: History) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The rows and (key, heading) columns of the bytes reclaimed per topic, split by command (``by compact``,
    ``by retain``), with each row's log dir when the runs cover several: the text table's and the HTML report's."""
    commands = sorted({c for t in history.topics for c in t.by_command})
    rows = [{"topic": t.topic, "log_dir": t.log_dir, "runs": t.runs, "reclaimed": human_bytes(t.bytes_reclaimed),
             "records": t.records_removed, **{c: human_bytes(t.by_command.get(c, 0)) for c in commands}}
            for t in history.topics]
    columns = ([("topic", "topic")] + ([("log_dir", "log dir")] if history.several_log_dirs else [])
               + [("runs", "runs"), ("reclaimed", "reclaimed")] + [(c, f"by {c}") for c in commands]
               + [("records", "records removed")])
    return rows, columns


def render(history: History) -> str:
    """The history as two plain-text tables: the runs (newest first), then bytes reclaimed per topic."""
    if not history.runs:
        return f"ledger {history.ledger}: no runs recorded yet\n"
    several_dirs = history.several_log_dirs
    rows = [{"run": r.run_id[:12], "finished": format_instant(r.finished_ms)[:19] + "Z", "command": r.command,
             "now": format_instant(r.now_ms)[:19] + "Z", "dry_run": "yes" if r.dry_run else "no",
             "outcome": r.outcome, "partitions": r.partitions, "changed": r.changed,
             "reclaimed": human_bytes(r.bytes_reclaimed), "log_dir": r.log_dir} for r in history.runs]
    columns = [("run", "run"), ("finished", "finished"), ("command", "command"), ("now", "--now"),
               ("dry_run", "dry run"), ("outcome", "outcome"), ("partitions", "partitions"), ("changed", "changed"),
               ("reclaimed", "reclaimed")] + ([("log_dir", "log dir")] if several_dirs else [])
    lines = [f"last {len(history.runs)} of {history.total_runs} run(s) in {history.ledger}, newest first:",
             render_table(rows, columns), ""]
    if history.topics:
        lines += ["reclaimed per topic by these runs (dry runs left out):", render_table(*topics_table(history))]
    else:
        lines.append("reclaimed per topic: nothing (only dry runs among these runs)")
    return "\n".join(lines) + "\n"

