"""Complete or roll back what an interrupted segjobs run (or a broker's cleaner) left in a log dir.

Takes the log dir's lock (the broker's .lock on local disk, the lease object on S3), then, partition by
partition, applies the recovery rules of jobs/recover.py: an S3 replace intent is rolled forward; Kafka's
loader rules settle .cleaned and .swap files (exactly as a broker would on start-up); a local replace
intent is finished or undone; a delete intent is rolled forward; .deleted files are entered in the
deletion ledger; leftovers of interrupted runs no intent refers to (compaction's private staging, S3 staged
objects, *.segjobs-*.tmp files) are deleted. Every action is printed, with the size of each file removed.
Running it again changes nothing. Every job runs the same recovery at its start, so this command is for
inspecting or repairing a log dir by hand.

--dry-run takes no lock and changes nothing: it runs the same rules against an in-memory view of the log
dir and prints the very actions a real run would take now ("would ..." lines).

A dead run's S3 lease: a run on the same host takes over a lease whose process is gone; an expired lease is
taken over by anyone. Otherwise --break-lease RUN_ID takes it over, and only if RUN_ID names its holder
(the refusal message prints it): use it when the holder died on another host.

examples:
  segjobs recover --log-dir /var/kafka/logs
  segjobs recover --log-dir s3://bucket/kafka/logs --s3-endpoint http://127.0.0.1:9000 --dry-run
  segjobs recover --log-dir s3://bucket/kafka/logs --break-lease 3f2a9c...
"""

from __future__ import annotations

import argparse
import sys

from jobs.commands.args import storage_options_from_args
from jobs.logdir.checks import check_log_dir_has_partitions, check_log_dir_is_dir
from jobs.rules.timeutil import format_instant, resolve_now, wall_clock_ms
from segment_io.errors import LockHeldError, UsageError
from segment_io.layout import list_log_dir


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-dir", required=True, metavar="URI", help="Kafka log dir: a local path or s3://bucket/prefix")
    p.add_argument("--now", metavar="EPOCH_MS|ISO8601",
                   help="the instant recorded for .deleted files the deletion ledger does not know yet "
                        "(file.delete.delay.ms counts from it; default: the wall clock)")
    p.add_argument("--dry-run", action="store_true",
                   help="take no lock and change nothing: print the actions a real run would take now")
    p.add_argument("--break-lease", metavar="RUN_ID",
                   help="S3: take over the lease of the run RUN_ID (named when a run is refused), e.g. after it "
                        "died on another host; refused if another run holds the lease")
    p.add_argument("--s3-endpoint", metavar="URL", help="S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
    p.add_argument("--s3-region", metavar="REGION", help="S3 region (default: from the AWS configuration)")


def run(args: argparse.Namespace) -> int:
    """Recover the log dir (or, with --dry-run, print what that would do); returns 0, or 1 when the S3 lease
    was lost on the way (another run took it over)."""
    from jobs.logdir.lock import LeaseLost, acquire, lease_ttl_ms, work_uri
    from jobs.logdir.recover import PreviewStorage, recover_log_dir
    from segment_io.storage import open_storage

    now_ms, now_note = resolve_now(args.now)
    log_dir = args.log_dir.rstrip("/") or "/"
    storage = open_storage(log_dir, storage_options_from_args(args))
    from jobs.engine.frame import preflight

    preflight(storage, log_dir, None, None, None)  # S3 answers (within seconds), or exit code 2
    check_log_dir_is_dir(storage, log_dir)
    # an empty log dir is fine (nothing to recover); a partition directory given as one is a mistake
    check_log_dir_has_partitions(log_dir, list_log_dir(storage, log_dir), scoped=False, required=False)
    if args.dry_run and args.break_lease:
        raise UsageError("--break-lease takes the lease over, which a --dry-run does not do; drop one of them")
    work = work_uri(log_dir)
    lost = None
    if args.dry_run:
        reports = recover_log_dir(PreviewStorage(storage), log_dir, now_ms=now_ms, work_uri=work)
        prefix, suffix = "would ", " [dry run: nothing changed]"
    else:
        if now_note:
            print(f"segjobs recover: {now_note}", file=sys.stderr, flush=True)
        prefix, suffix = "", ""
        reports = None
        try:
            # The lease guards the real time this takes, so it runs on the wall clock, never on --now.
            with acquire(storage, log_dir, now_ms=wall_clock_ms(), ttl_ms=lease_ttl_ms(), clock=wall_clock_ms,
                         break_run_id=args.break_lease) as lease:
                if lease.notice:
                    print(f"segjobs recover: {lease.notice}", file=sys.stderr)
                reports = recover_log_dir(storage, log_dir, now_ms=now_ms, work_uri=work,
                                          check=lambda: lease.check(wall_clock_ms()))
        except LeaseLost as exc:
            # Each partition's recovery is complete or not begun; the next recovery does the rest.
            print(f"segjobs recover: LOST THE LEASE, stopped before the next partition (those before it are "
                  f"recovered; run recover again once the lease is free): {exc}", file=sys.stderr)
            return 1
        except LockHeldError as exc:
            if reports is None:
                raise  # refused: nothing was done
            lost = str(exc)  # taken over after the work was done, found at the release
    failed = [r for r in reports if r.error is not None]
    for r in failed:
        print(f"segjobs recover: {r.partition_uri}: NOT RECOVERED, left as it is: {r.error}", file=sys.stderr)
    changed = [r for r in reports if r.changed]
    for r in changed:
        for a in r.actions:
            print(prefix + a.describe())
    leftovers = [a for r in changed for a in r.leftovers]
    partitions = [r for r in reports if r.partition_uri != log_dir]
    print(f"{'would recover' if args.dry_run else 'recovered'} {sum(r.changed for r in partitions)} of "
          f"{len(partitions)} partition(s) in {log_dir} at {format_instant(now_ms)}; "
          f"{sum(len(r.actions) for r in changed)} action(s); {len(leftovers)} leftover file(s) of interrupted "
          f"runs ({sum(a.size or 0 for a in leftovers)} bytes){suffix}")
    if lost is not None:
        print(f"segjobs recover: LOST THE LEASE: {lost}", file=sys.stderr)
        return 1
    return 1 if failed else 0
