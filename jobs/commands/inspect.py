"""Report, per partition, how dirty a log dir is and what compaction and retention would reclaim at --now.

Nothing is written to the log dir: no lock is taken and no recovery runs, so inspecting a directory a broker
owns is safe. What an interrupted run left (an unfinished swap, a delete intent) is read as the recovery of a
run that writes would leave it, and named, as a dry run does. For every partition: segments and bytes; the
clean, cleanable and uncleanable bytes and the dirty ratio; data records, transaction markers, keyless records,
distinct keys and superseded records (records a later record of the same key replaces); live tombstones (no
delete horizon yet, or one still in the future) and expired ones (horizon <= --now: a clean at --now removes
them); records of aborted transactions; the oldest and newest record timestamps; whether compaction would
select the partition at --now and why; what it would remove; and what retention would delete at --now, by which
rule.

Predictions come from the planners the jobs use (jobs.rules.plan_compact, jobs.rules.plan_retain) on the same scan, so a
`segjobs compact --dry-run` / `segjobs retain --dry-run` at the same --now agrees with them. Selection is
predicted for a run that names no --topic/--partition (naming a partition forces its compaction); the
compaction numbers say what a compaction at --now would remove whether or not it is selected. For compact,delete
topics compaction is predicted on what retention at --now leaves of the partition, as `segjobs compact` runs it
(retention first); a topic the delete-fraction limit refuses is predicted to be left alone, by retention (it frees
nothing there, as `segjobs retain --dry-run` reports) and by compaction.

Distinct keys are approximate by default (a HyperLogLog sketch of the 128-bit key hashes, about 1 % error,
constant memory) and so are superseded records and the compaction numbers (estimated from the sketch and
the average record size). --exact counts distinct key hashes exactly (exact up to 128-bit hash collisions;
16 bytes of memory per record) and measures compaction by running the compaction task itself as a dry run.

examples:
  segjobs inspect --log-dir /var/kafka/logs
  segjobs inspect --log-dir s3://bucket/kafka/logs --topic 'orders*' --now 2026-11-22T02:00:00Z --exact
  segjobs inspect --log-dir /backup/logs --config conf/topics.toml --format csv > dirty.csv
  segjobs inspect --log-dir /backup/logs --format json --report /tmp/inspect.json
  segjobs inspect --log-dir /var/kafka/logs --html /tmp/inspect.html      # the charts, for a browser
  segjobs inspect --log-dir /var/kafka/logs --per-partition               # every partition's row, however many
  segjobs inspect --log-dir /var/kafka/logs --remote /var/kafka/tiered     # tiered topics: remote segments too

With --remote (the remote store of tiered topics), each tiered partition is inspected as one log: its finished
remote segments below the local log (per the log dir's __remote_log_metadata), then its local segments; its
retention columns then judge the whole log as Kafka's retention does (segjobs retain deletes local segments only).
A partition whose remote segment cannot be read (its object missing) or that keeps only part of one (the local log
starts inside it) is reported unreadable, the others inspected (exit code 1).

In a notebook: jobs.api.dirty_ratios(spark, uri) returns the same rows as a Spark DataFrame.
"""

from __future__ import annotations

import argparse

from jobs import api
from jobs.commands.args import (
    add_log_dir_options,
    add_remote_options,
    cli_wording,
    exit_codes_help,
    job_options,
    print_result,
    remote_options_from_args,
    summary_view,
)
from jobs.commands.retain import add_max_delete_fraction_option
from jobs.engine.frame.options import InspectOptions
from jobs.engine.inspect.driver import FORMATS
from jobs.engine.runtime.seams import Seams
from jobs.rules.kafka_defaults import default_of


def configure(p: argparse.ArgumentParser) -> None:
    """The options of ``segjobs inspect``: the shared job options (no --dry-run: nothing is written) plus
    --exact and --format."""
    add_log_dir_options(p, destructive=False, formats=FORMATS)
    add_max_delete_fraction_option(p, help="predict with this delete-fraction limit, as compact and retain "
                                           "--max-delete-fraction would apply it (default: each topic's "
                                           f"segjobs.max.delete.fraction, "
                                           f"{default_of('segjobs.max.delete.fraction')} unless set)")
    # The shared help says naming a partition forces its compaction; inspect only narrows what it shows.
    # argparse has no public way to reword an added option, hence the walk over its actions.
    for action in p._actions:
        if action.dest == "partition":
            action.help = ("only this partition, e.g. orders-3 (repeatable); selection is still predicted as an "
                           "unforced run would decide it")
    p.add_argument("--html", metavar="FILE.html",
                   help="also write a self-contained HTML report with the charts (dirty ratio per topic and per "
                        "partition, reclaimable bytes, key cardinality, segment ages; PNG images embedded, nothing "
                        "loaded from elsewhere) to FILE (local path or s3:// URI); the JSON report names it "
                        "(html_report). Needs matplotlib: pip install 'segjobs[html]'")
    p.add_argument("--exact", action="store_true",
                   help="count distinct keys exactly and measure compaction with a dry run of the compaction task "
                        "(slower, 16 bytes of memory per record); default: HyperLogLog estimates")
    add_remote_options(p)
    p.epilog = exit_codes_help(
        done="done: every partition in scope inspected",
        failed="a partition could not be read (reported, the others inspected), with --remote also one whose remote "
               "segment's object is missing; or the report, --html page or ledger could not be written at the end",
        nothing_done="nothing was inspected: a usage or configuration error, no usable Java, a --report, --html or "
                     "local --ledger that cannot be written (checked before any work)",
        interrupted="interrupted (Ctrl-C): nothing was changed (inspect never writes to the log dir) and no report "
                    "was written")


def options_from_args(args: argparse.Namespace) -> InspectOptions:
    """The typed options of parsed ``segjobs inspect`` arguments."""
    with cli_wording():
        return InspectOptions(**job_options(args), exact=args.exact, html=args.html,
                              remote=remote_options_from_args(args))


def run(args: argparse.Namespace, *, seams: Seams | None = None) -> int:
    """Run ``segjobs inspect`` with parsed ``args``; returns the exit code (1 when a partition was unreadable)."""
    result = api.inspect(args.log_dir, options_from_args(args), now=args.now, seams=seams)
    print_result(args, result, lambda: result.summary(args.format, **summary_view(args)))
    return result.exit_code
