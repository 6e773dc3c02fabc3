"""Show the last runs recorded in a ledger and the bytes they reclaimed per topic.

Every `segjobs compact` and `segjobs retain` run given --ledger URI appends one row per partition to that Delta
table. This reads it back (no Spark; a local path or an s3:// URI, with the same S3 options as the jobs):

  segjobs history --ledger /var/lib/segjobs/ledger
  segjobs history --ledger s3://bucket/segjobs/ledger --last 30 --format json
  segjobs history --ledger /var/lib/segjobs/ledger --html /tmp/history.html   # the chart, for a browser

Per run: its id, when it finished, the command, its --now, whether it was a dry run, its outcome (ok, or how many
partitions ended in error / refused / partly compacted: the rows that make a job exit 1), the partitions it
covered, how many lost bytes, and the bytes reclaimed (a dry run: what it would have reclaimed). Then per topic,
the bytes reclaimed by those runs, dry runs left out, split by command (runs over several log dirs: each log dir's
topic on its own row). --html FILE also writes a self-contained HTML page with the chart of the bytes reclaimed per
run (stacked by topic) and both tables.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys

from jobs.commands.args import add_s3_options, cli_wording, exit_codes_help, storage_options_from_args
from jobs.engine.frame.options import require_matplotlib
from jobs.engine.report.ledger import read_history, render
from jobs.engine.report.run_report import absolute_uri
from segment_io.errors import ConfigError, SegjobsError, StorageAccessError


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
    p.add_argument("--html", metavar="FILE.html",
                   help="also write a self-contained HTML report (the bytes reclaimed per run as a chart, stacked by "
                        "topic, and the tables; PNG embedded, nothing loaded from elsewhere) to FILE (local path or "
                        "s3:// URI); --format json names it (html_report). Needs matplotlib: pip install "
                        "'segjobs[html]'")
    add_s3_options(p)
    p.epilog = exit_codes_help(
        done="the runs printed (a ledger with none yet says so), and the --html page, if asked for, written",
        failed="the --html page could not be written at the end (then nothing is printed)",
        nothing_done="nothing was printed or written: a usage error, no Delta table at --ledger or one that is no "
                     "segjobs ledger, a damaged one (a _delta_log commit or data file that cannot be read: the "
                     "error names the table and what is wrong; a damaged input found before any output, as a "
                     "missing one, not a failure while working), S3 that cannot be reached, --html without "
                     "matplotlib or to a FILE that cannot be written (checked before reading)",
        interrupted="interrupted (Ctrl-C): the ledger is only ever read; no --html page is left half-written")


def run(args: argparse.Namespace) -> int:
    """Print the history on stdout; 0, or an error (exit 2) when the ledger cannot be read."""
    uri = absolute_uri(args.ledger.rstrip("/"))
    options = storage_options_from_args(args)
    html_uri = absolute_uri(args.html) if args.html else None
    if html_uri:  # before reading anything: a missing matplotlib is exit code 2
        with cli_wording():
            require_matplotlib("html", "--html")
    try:
        history = read_history(uri, last=args.last, options=options)
    except StorageAccessError as exc:
        raise ConfigError(f"--ledger {uri}: {exc.detail}") from None
    except SegjobsError:
        raise
    except Exception as exc:
        if not _unreadable_table(exc):
            raise
        raise LedgerUnreadable(f"--ledger {uri}: its Delta table cannot be read ({_first_line(exc)}): a damaged "
                               f"_delta_log commit or data file, or a Delta version deltalake does not read; restore "
                               f"what is damaged (or move the table aside: the next run given --ledger starts a new "
                               f"one); nothing was printed") from None
    doc = history.to_dict()
    if html_uri:
        from jobs.engine.frame.job import check_destinations  # start-up: the job frame (~30 ms) for --html only
        from jobs.engine.report.html import history_html, write_html  # start-up: --html only

        # after the ledger is read (reading it changes nothing): an unwritable FILE is exit code 2 with nothing
        # printed, and a ledger that cannot be read leaves no directory the check would have created for FILE
        check_destinations([("--html", html_uri)], options, progress=_said)

        write_html(html_uri, history_html(history), options)
        doc["html_report"] = html_uri
        print(f"segjobs history: HTML report written to {html_uri}", file=sys.stderr)
    if args.format == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render(history))
    sys.stdout.flush()
    return 0


class LedgerUnreadable(SegjobsError):
    """The Delta table at --ledger is there but cannot be read: a commit of its _delta_log that is no JSON, its
    first commit missing, a data file missing or not Parquet, a protocol deltalake does not support. Exit code 2:
    a damaged input found before anything is printed or written, as no table at all is; rerunning cannot help
    until the table is repaired."""

    exit_code = 2


def _said(message: str, **_event: object) -> None:
    """What the --html check did on the way (a missing directory it created), on stderr as the jobs' progress."""
    print(f"segjobs history: {message}", file=sys.stderr)


def _unreadable_table(exc: BaseException) -> bool:
    """Whether ``exc`` is what deltalake or pyarrow raise for a Delta table they cannot read (its log, its data
    files), rather than a bug."""
    import pyarrow as pa
    from deltalake.exceptions import DeltaError

    return isinstance(exc, (DeltaError, pa.ArrowException, OSError))


def _first_line(exc: BaseException) -> str:
    """The error's message without what follows its first line (deltalake appends a Rust backtrace when
    RUST_BACKTRACE is set)."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def write_demo_ledger(out_dir: str, *, nights: int = 3, every_ms: int = 2 * 86_400_000) -> str:
    """A small ledger to look at (the notebook's default): ``nights`` nights, ``every_ms`` apart, of ``retain``
    then ``compact`` on a freshly generated demo log dir in ``out_dir/logs``, each run appending to
    ``out_dir/ledger``, which is returned. Real runs, so they reclaim bytes; the log dir is the demo's own,
    nothing else is touched."""
    from jobs.commands.cli import main as segjobs  # a cycle: the command line imports this command
    from jobs.engine.inspect.driver import write_demo_log_dir  # start-up: the decoders' numba kernels (~0.2 s)

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
