"""Complete or roll back what an interrupted segjobs run (or a broker's cleaner) left in a log dir.

Takes the log dir's lock (the broker's .lock on local disk, the lease object on S3), then, partition by
partition, applies the recovery rules of jobs/recover.py: an S3 replace intent is rolled forward; Kafka's
loader rules settle .cleaned and .swap files (exactly as a broker would on start-up); a local replace
intent is finished or undone; a delete intent is rolled forward; .deleted files are entered in the
deletion ledger. Every action is printed. Running it again changes nothing. Every job runs the same
recovery at its start, so this command is for inspecting or repairing a log dir by hand.

--dry-run: recovery has no "plan only" mode, so a dry run does not predict the individual actions; it
lists the leftovers recovery would act on (transient .cleaned/.swap/.deleted files, replace and delete
intents, staged objects) without taking the lock or touching anything.

examples:
  segjobs recover --log-dir /var/kafka/logs
  segjobs recover --log-dir s3://bucket/kafka/logs --s3-endpoint http://127.0.0.1:9000 --dry-run
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from jobs.args import check_log_dir_has_partitions, check_log_dir_is_dir, storage_options_from_args
from jobs.timeutil import format_instant, resolve_now
from segment_io.layout import list_log_dir, parse_partition_dir
from segment_io.storage.base import Storage


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-dir", required=True, metavar="URI", help="Kafka log dir: a local path or s3://bucket/prefix")
    p.add_argument("--now", metavar="EPOCH_MS|ISO8601",
                   help="the instant recorded for .deleted files the deletion ledger does not know yet "
                        "(file.delete.delay.ms counts from it; default: the wall clock)")
    p.add_argument("--dry-run", action="store_true",
                   help="take no lock and change nothing: list the leftovers (transient files, intents, "
                        "staged objects) recovery would act on; the individual actions are not predicted")
    p.add_argument("--s3-endpoint", metavar="URL", help="S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
    p.add_argument("--s3-region", metavar="REGION", help="S3 region (default: from the AWS configuration)")


@dataclass(frozen=True)
class Leftover:
    """Something an interrupted operation left behind: ``kind`` is ``transient`` (a .cleaned, .swap or
    .deleted segment file), ``intent`` (replace.json / delete.json) or ``staged`` (an S3 staged object)."""

    kind: str
    uri: str


def find_leftovers(storage: Storage, log_dir: str, work: str) -> list[Leftover]:
    """The leftovers in every partition of ``log_dir`` and its work location, in name order; reads only."""
    from jobs.commit import COMMIT_DIR, DELETE_INTENT, REPLACE_INTENT, STAGED_DIR, list_segment_files

    names = {d.rstrip("/").rsplit("/", 1)[-1] for d in storage.list_dirs(log_dir)}
    commit_root = storage.join(work, COMMIT_DIR)
    names |= {d.rstrip("/").rsplit("/", 1)[-1] for d in storage.list_dirs(commit_root)}
    out: list[Leftover] = []
    for name in sorted(n for n in names if parse_partition_dir(n) is not None):
        out += [Leftover("transient", f.uri) for f in list_segment_files(storage, storage.join(log_dir, name))
                if f.transient]
        pwork = storage.join(commit_root, name)
        out += [Leftover("intent", storage.join(pwork, n)) for n in (REPLACE_INTENT, DELETE_INTENT)
                if storage.exists(storage.join(pwork, n))]
        out += [Leftover("staged", i.uri) for i in storage.list(storage.join(pwork, STAGED_DIR))]
    return out


def run(args: argparse.Namespace) -> int:
    """Recover the log dir (or, with --dry-run, list its leftovers); returns 0."""
    from jobs.lock import acquire, work_uri
    from jobs.recover import recover_log_dir
    from segment_io.storage import open_storage

    now_ms, now_note = resolve_now(args.now)
    log_dir = args.log_dir.rstrip("/") or "/"
    storage = open_storage(log_dir, storage_options_from_args(args))
    from jobs.jobrun import preflight

    preflight(storage, log_dir, None, None, None)  # S3 answers (within seconds), or exit code 2
    check_log_dir_is_dir(storage, log_dir)
    # an empty log dir is fine (nothing to recover); a partition directory given as one is a mistake
    check_log_dir_has_partitions(log_dir, list_log_dir(storage, log_dir), scoped=False, required=False)
    work = work_uri(log_dir)
    if args.dry_run:
        leftovers = find_leftovers(storage, log_dir, work)
        for lo in leftovers:
            print(f"would recover: {lo.kind} {lo.uri}")
        print(f"{len(leftovers)} leftover(s) found in {log_dir} [dry run: nothing changed]")
        return 0
    if now_note:
        print(f"segjobs recover: {now_note}", file=sys.stderr, flush=True)
    with acquire(storage, log_dir, now_ms=now_ms):
        reports = recover_log_dir(storage, log_dir, now_ms=now_ms, work_uri=work)
    changed = [r for r in reports if r.changed]
    for r in changed:
        for a in r.actions:
            print(f"{a.action} {a.uri}" + (f" ({a.detail})" if a.detail else ""))
    print(f"recovered {len(changed)} of {len(reports)} partition(s) in {log_dir} at {format_instant(now_ms)}"
          f"; {sum(len(r.actions) for r in changed)} action(s)")
    return 0
