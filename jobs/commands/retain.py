"""Apply Kafka's retention to a log dir: delete the oldest segments that are past retention.ms, past
retention.bytes, or wholly below the log start offset, the way a broker's retention thread does.

For each partition, oldest segment first, three rules run in Kafka's order, each stopping at the first
segment it keeps: (1) the log start offset (log-start-offset-checkpoint; applies to every policy, compact
included); (2) retention.bytes (policy delete / compact,delete); (3) retention.ms, where a segment's age is
--now minus its largest record timestamp (from its .timeindex when that is sane, else from its batch
headers; the .log file's modification time only when no record has a timestamp). A segment stamped in the
future never expires and holds back every later one: it is reported as a warning. The last (active)
segment is never deleted and a partition always keeps a segment.

Deletes are two-phase and crash-safe: segments are renamed to .deleted (a broker treats them as gone), and
unlinked by a later run once file.delete.delay.ms has passed since (counted in --now time, across runs).
Then the log start offset checkpoint is advanced (one atomic write for the whole dir), leader-epoch-checkpoint
is trimmed to the new start, and producer snapshots below it are removed. The log dir's .lock (local) or lease
(S3) keeps brokers and other segjobs runs out; `segjobs recover` (run at the start of every job) finishes an
interrupted delete. --dry-run writes nothing (no lock, no recovery) and lists every segment that would go,
its bytes and the rule that condemned it; over an unfinished commit it says what a real run's recovery
would do first and plans on the files that leaves (see --dry-run). Kafka's own topics get Kafka's creation
configs (__consumer_offsets and __transaction_state are compact topics) unless the config names them exactly;
the KRaft metadata log (__cluster_metadata) is never touched. A partition with damage the scan sees (a segment
cut short, an entry that is not a regular file, an impossible log-start-offset-checkpoint entry) is reported and
left untouched.

Safety limit, aimed at a wrong --now or --config, not at routine retention: each partition is planned again with
now no later than the newest record in the log dir (records stamped more than an hour after --now, a producer's
wrong clock, left out) and with the retention settings the last real run applied (else Kafka's defaults). A
topic whose time and size rules would delete more than --max-delete-fraction of its bytes (default: the topic's
segjobs.max.delete.fraction, 0.5) that this reference would keep is left untouched and reported, and the run
exits 1. A quiet topic's expired segments, or a topic's after a long gap, are deleted however many; deletes
below the log start offset are never counted.
Before any real run has recorded settings, Kafka's defaults are the reference, so the first run of a config with
shorter retention may be refused: if the config is right, run once with --accept-config-baseline.
Plans: --dry-run --plan FILE writes what the run would do; --apply FILE does exactly that, or refuses (exit 2)
if the log dir changed since.

examples:
  segjobs retain --log-dir /var/kafka/logs --config conf/topics.toml --dry-run
  segjobs retain --log-dir s3://bucket/kafka/logs --set 'clicks*:retention.ms=3d' --now 2026-11-22T00:00:00Z
  segjobs retain --log-dir /backup/logs --topic 'audit-*' --set 'audit-*:retention.bytes=10GiB' \\
      --report /tmp/retain.json
  segjobs retain --log-dir /var/kafka/logs --config conf/topics.toml --accept-config-baseline  # a first run
  segjobs retain --log-dir /backup/logs --dry-run --plan /tmp/plan.json      # review, then:
  segjobs retain --log-dir /backup/logs --apply /tmp/plan.json
  spark-submit jobs/retain.py --log-dir s3://bucket/kafka/logs --config conf/topics.toml
"""

from __future__ import annotations

import argparse

from jobs import api
from jobs.commands.args import (
    JOB_INTERRUPTED,
    JOB_NOTHING_DONE,
    SAFETY_GROUP,
    add_log_dir_options,
    add_plan_options,
    cli_wording,
    exit_codes_help,
    job_options,
    option_group,
    print_result,
    summary_view,
)
from jobs.engine.frame.options import RetainOptions
from jobs.engine.runtime.seams import Seams
from jobs.rules.kafka_defaults import default_of


def configure(p: argparse.ArgumentParser) -> None:
    """The options of ``segjobs retain``: every job's (see :func:`jobs.commands.args.add_log_dir_options`), the
    delete-fraction limit, and plan files."""
    add_log_dir_options(p)
    add_max_delete_fraction_option(p)
    add_accept_config_baseline_option(p)
    add_plan_options(p)
    p.epilog = exit_codes_help(
        done="done: every partition in scope had its expired segments deleted, or none to delete (with --dry-run: "
             "planned, nothing written)",
        failed="the run went on, but something failed or was refused (the summary and report say what): a partition "
               "with damage its scan sees, or one that could not be written, reported and left untouched (retention "
               "reads batch headers only: a CRC mismatch inside a batch is not seen; dump --verify finds it); a topic "
               "the delete-fraction limit refused; the S3 lease lost to another run; the report or ledger not written",
        nothing_done=JOB_NOTHING_DONE, interrupted=JOB_INTERRUPTED)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number in [0, 1], e.g. 0.5 (1 disables the limit)")
    return value


def add_max_delete_fraction_option(p: argparse.ArgumentParser, *, help: str | None = None) -> None:
    """``--max-delete-fraction F``: the safety limit of retention (see
    :func:`jobs.engine.retain.driver.refused_topics`)."""
    option_group(p, SAFETY_GROUP).add_argument("--max-delete-fraction", type=_fraction, metavar="F",
                   help=help or "leave a topic untouched (and exit 1) when retention.ms/retention.bytes would "
                                "delete more than this share of its bytes that only this run's inputs condemn: "
                                "segments the same rules would keep at the newest record's time in the log dir and "
                                "with the settings the last run applied (else Kafka's defaults), so a wrong --now or "
                                "--config cannot empty it while routine retention goes through; 1 disables the "
                                "limit (default: the topic's segjobs.max.delete.fraction, "
                                f"{default_of('segjobs.max.delete.fraction')} unless set). Deletes below the log "
                                "start offset do not count")


def add_accept_config_baseline_option(p: argparse.ArgumentParser) -> None:
    """``--accept-config-baseline``: the safety limit judges this run's settings against themselves (see
    :func:`jobs.engine.retain.driver.refused_topics`)."""
    option_group(p, SAFETY_GROUP).add_argument("--accept-config-baseline", action="store_true",
                   help="accept this run's retention settings (cleanup.policy, retention.ms, retention.bytes of every "
                        "topic in scope) as the safety limit's baseline: they are not judged against the settings the "
                        "last real run applied (or, before any run, Kafka's defaults), so the first run of a new "
                        "config, or a deliberate change, is not refused for deleting what the old settings would "
                        "keep. A --now far beyond the newest record is still judged: refused when what it alone "
                        "condemns exceeds the limit. A real run records the settings in "
                        "<log-dir>.segjobs/retention-settings.json, and later runs are judged against "
                        "them without this option; with --dry-run it shows what that run would do; a plan "
                        "(--dry-run --plan) records it and --apply uses it")


def options_from_args(args: argparse.Namespace) -> RetainOptions:
    """The typed options of parsed ``segjobs retain`` arguments."""
    with cli_wording():
        return RetainOptions(**job_options(args))


def run(args: argparse.Namespace, *, seams: Seams | None = None) -> int:
    """Run ``segjobs retain`` with parsed ``args``: print the summary (or the JSON report) on stdout and return
    the exit code. ``seams``: tests only (see :mod:`jobs.engine.runtime.seams`)."""
    result = api.retain(args.log_dir, options_from_args(args), now=args.now, seams=seams)
    print_result(args, result, lambda: result.summary(**summary_view(args)))
    return result.exit_code
