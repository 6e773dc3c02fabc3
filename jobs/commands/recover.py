"""Complete or roll back what an interrupted segjobs run (or a broker's cleaner) left in a log dir.

Takes the log dir's lock (the broker's .lock on local disk, the lease object on S3), then, partition by
partition, applies the recovery rules of jobs/logdir/recover.py: an S3 replace intent is rolled forward; a
local replace intent is checked against the files and discarded unapplied when they show the partition moved
on (a broker finished the replace and worked on); Kafka's loader rules settle .cleaned and .swap files (exactly
as a broker would on start-up); a local replace intent is finished or undone; a delete intent is rolled
forward; .deleted files are entered in the deletion ledger; leftovers of interrupted runs no intent refers to
(compaction's private staging, S3 staged objects, *.segjobs-*.tmp files) are deleted. Every action is printed,
with the size of each file removed, then a summary that says per partition what was completed or rolled back
(beyond 50 partitions per topic, summed). Running it again changes nothing. Every job runs the same recovery at its
start, so this command is for inspecting or repairing a log dir by hand.

A partition whose recovery cannot finish (a rename or delete the filesystem refuses, an unreadable intent) is
named with the state it is left in and what to fix, left as it is, and the others are recovered; the exit code
is then 1, as when a leftover cannot be deleted (named; it blocks nothing).

--dry-run takes no lock and changes nothing: recovery plans its actions from what it reads (listings, intents,
the deletion ledger) before it applies them, and a dry run prints that plan: the very actions a real run would
take now ("would ..." lines); on S3 it reads the lease (writing nothing) and keeps, as a run taking it over would,
the recent stagings of its holder and of the run that holder took the lease over from.

A dead run's S3 lease: a run on the same host takes over a lease whose process is gone; an expired lease is
taken over by anyone. Otherwise --break-lease RUN_ID takes it over, and only if RUN_ID names its holder
(the refusal message prints it): use it when the holder died on another host. That run (and the one it took the
lease over from, if it did) may still be at work for a moment: their staged objects younger than 10 minutes are
kept (printed as "kept ..."; a later run deletes them), and a commit it is finishing while this one rolls it
forward is no error.

examples:
  segjobs recover --log-dir /var/kafka/logs
  segjobs recover --log-dir s3://bucket/kafka/logs --s3-endpoint http://127.0.0.1:9000 --dry-run
  segjobs recover --log-dir s3://bucket/kafka/logs --break-lease 3f2a9c...
"""

from __future__ import annotations

import argparse

from jobs import api
from jobs.commands.args import (
    INSTANT_FORMS,
    INSTANT_METAVAR,
    add_log_format_option,
    add_s3_options,
    cli_wording,
    exit_codes_help,
    progress_sink,
    storage_options_from_args,
)
from jobs.engine.frame.options import RecoverOptions
from jobs.engine.report.recovery import recovery_details
from jobs.engine.report.run_report import Progress
from jobs.engine.runtime.seams import Seams
from jobs.logdir.commit import partition_name
from jobs.rules.timeutil import format_instant


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-dir", required=True, metavar="URI", help="Kafka log dir: a local path or s3://bucket/prefix")
    p.add_argument("--now", metavar=INSTANT_METAVAR,
                   help="the instant recorded for .deleted files the deletion ledger does not know yet "
                        f"(file.delete.delay.ms counts from it; default: the wall clock); {INSTANT_FORMS}")
    p.add_argument("--dry-run", action="store_true",
                   help="take no lock and change nothing: print the actions a real run would take now")
    p.add_argument("--break-lease", metavar="RUN_ID",
                   help="S3: take over the lease of the run RUN_ID (named when a run is refused), e.g. after it "
                        "died on another host; refused if another run holds the lease")
    add_s3_options(p)
    add_log_format_option(p)
    p.epilog = exit_codes_help(
        done="done: every partition recovered, or had nothing to recover (with --dry-run: planned, nothing changed)",
        failed="a partition whose recovery cannot finish (named with the state it is left in and what to fix; the "
               "others are recovered), a leftover file that cannot be deleted (named; it blocks nothing), or the S3 "
               "lease lost to another run",
        nothing_done="nothing was done: a usage error, the log dir locked by a broker or another run (the holder is "
                     "named), a --break-lease that does not name the lease's holder, S3 that cannot be used, a local "
                     "log dir that cannot be written",
        interrupted="interrupted (Ctrl-C): the actions taken before the stop stand; run recover again, it settles "
                    "whatever is left")


def options_from_args(args: argparse.Namespace) -> RecoverOptions:
    """The typed options of parsed ``segjobs recover`` arguments (its notices go to stderr)."""
    with cli_wording():
        return RecoverOptions(storage=storage_options_from_args(args), progress=progress_sink(args, quiet=False),
                              dry_run=args.dry_run, break_lease=args.break_lease)


def run(args: argparse.Namespace, *, seams: Seams | None = None) -> int:
    """Recover the log dir (or, with --dry-run, print what that would do); returns 0, or 1 when a partition
    could not be settled or the S3 lease was lost on the way (another run took it over)."""
    options = options_from_args(args)
    result = api.recover(args.log_dir, options, now=args.now, seams=seams)
    # the command's own stderr lines: events like the job's notices (text: ``segjobs recover: ...``)
    errors = Progress("recover", sink=options.progress)
    if not result.completed:
        errors.notice(f"LOST THE LEASE, stopped before the next partition (those before it are recovered; run "
                      f"recover again once the lease is free): {result.lease_lost}", event="lease.lost", level="error")
        return result.exit_code
    for r in result.failed:
        errors.notice(f"{r.partition_uri}: NOT RECOVERED, left as it is: {r.error}", event="recovery.failed",
                      level="error", partition=partition_name(r.partition_uri))
    for problem in result.problems:
        errors.notice(problem, event="recovery.leftover", level="error")
    for r in result.reports:
        for note in r.notes:
            errors.notice(note, event="recovery.kept")
        for warning in r.warnings:
            errors.notice(f"warning: {'a real run would do this: ' if result.dry_run else ''}{warning}",
                          event="recovery.foreign", partition=partition_name(r.partition_uri))
    prefix, suffix = ("would ", " [dry run: nothing changed]") if result.dry_run else ("", "")
    for r in result.reports:
        for a in r.actions:
            print(prefix + a.describe())
    leftovers = result.leftovers
    tallies = result.tallies
    # per partition what was completed or rolled back (a partition's private staging counted as its own)
    what = f": {recovery_details(tallies)}" if tallies else ""
    print(f"{'would recover' if result.dry_run else 'recovered'} {result.partitions_recovered} of "
          f"{len(result.partitions)} partition(s) in {result.log_dir} at {format_instant(result.now_ms)}; "
          f"{len(result.actions)} action(s); {len(leftovers)} leftover file(s) of interrupted "
          f"runs ({sum(a.size or 0 for a in leftovers)} bytes){what}{suffix}")
    if result.lease_lost is not None:
        errors.notice(f"LOST THE LEASE: {result.lease_lost}", event="lease.lost", level="error")
    return result.exit_code
