"""Show the last runs recorded in a ledger and the bytes they reclaimed per topic.

Every `segjobs compact` and `segjobs retain` run given --ledger URI appends one row per partition to that Delta
table. This reads it back (no Spark; a local path or an s3:// URI, with the same S3 options as the jobs):

  segjobs history --ledger /var/lib/segjobs/ledger
  segjobs history --ledger s3://bucket/segjobs/ledger --last 30 --format json

Per run: its id, when it finished, the command, its --now, whether it was a dry run, its outcome (ok, or how many
partitions ended in error / refused / partly compacted: the rows that make a job exit 1), the partitions it
covered, how many lost bytes, and the bytes reclaimed (a dry run: what it would have reclaimed). Then per topic,
the bytes reclaimed by those runs, dry runs left out, split by command.
"""

from __future__ import annotations

import argparse
import json
import sys

from jobs.commands.args import storage_options_from_args


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of runs, 1 or more")
    return value


def configure(p: argparse.ArgumentParser) -> None:
    """Add ``history``'s options to ``p``."""
    p.add_argument("--ledger", required=True, metavar="URI",
                   help="the Delta table the jobs append to with --ledger (local path or s3://bucket/prefix)")
    p.add_argument("--last", type=_positive, default=10, metavar="N",
                   help="how many runs to show, newest first by finish time (default: 10)")
    p.add_argument("--format", "--output", dest="format", choices=("table", "json"), default="table",
                   help="table (default) or json: {ledger, total_runs, runs: [...], topics: [...]}")
    p.add_argument("--s3-endpoint", metavar="URL", help="S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
    p.add_argument("--s3-region", metavar="REGION", help="S3 region (default: from the AWS configuration)")


def run(args: argparse.Namespace) -> int:
    """Print the history on stdout; 0, or an error (exit 2) when the ledger cannot be read."""
    from jobs.engine.ledger import read_history, render
    from jobs.engine.report import absolute_uri
    from segment_io.errors import ConfigError, StorageAccessError

    uri = absolute_uri(args.ledger.rstrip("/"))
    try:
        history = read_history(uri, last=args.last, options=storage_options_from_args(args))
    except StorageAccessError as exc:
        raise ConfigError(f"--ledger {uri}: {exc.detail}") from None
    if args.format == "json":
        sys.stdout.write(json.dumps(history.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render(history))
    sys.stdout.flush()
    return 0


def write_demo_ledger(out_dir: str, *, nights: int = 3, every_ms: int = 2 * 86_400_000) -> str:
    """A small ledger to look at (the notebook's default): ``nights`` nights, ``every_ms`` apart, of ``retain``
    then ``compact`` on a freshly generated demo log dir in ``out_dir/logs``, each run appending to
    ``out_dir/ledger``, which is returned. Real runs, so they reclaim bytes; the log dir is the demo's own,
    nothing else is touched."""
    import contextlib
    import io
    import os

    from jobs.commands.cli import main as segjobs
    from jobs.engine.inspection import write_demo_log_dir

    demo = write_demo_log_dir(out_dir)
    ledger = os.path.join(out_dir, "ledger")
    for night in range(nights):
        for command in ("retain", "compact"):
            argv = [command, "--log-dir", demo.log_dir, "--now", str(demo.now_ms + night * every_ms),
                    "--ledger", ledger, "--quiet", "--max-delete-fraction", "1"]
            argv += [a for o in demo.overrides for a in ("--set", o)]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = segjobs(argv)
            if code != 0:
                raise RuntimeError(f"segjobs {' '.join(argv)} exited {code}:\n{out.getvalue()}")
    return ledger
