"""Topic configuration tools. `segjobs config import` turns the describe output of Kafka's tools into the TOML that
--config reads, so nightly runs use each topic's real cleanup.policy, retention and compaction settings:

  kafka-configs.sh --bootstrap-server broker:9092 --describe --all --entity-type topics \\
      | segjobs config import --output conf/topics.toml
  kafka-topics.sh --bootstrap-server broker:9092 --describe > topics.txt
  segjobs config import --input topics.txt --output conf/topics.toml

Prefer kafka-configs.sh with --all: it says where each value comes from, so broker settings (server.properties,
e.g. log.retention.hours) carry over, into [defaults] when every topic shares them. See `segjobs config import
--help` for what is imported and what is left out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from jobs.commands.args import exit_codes_help
from segment_io.errors import NotWritableError, UsageError
from segment_io.storage.local import storage_error

IMPORT_HELP = """Read the output of `kafka-configs.sh --describe [--all] --entity-type topics` and/or `kafka-topics.sh
--describe` (from --input or stdin; both may be concatenated) and write segjobs' topic configuration TOML (to
--output or stdout), checked by loading it as `segjobs compact --config` would.

What is imported:
  - the keys segjobs reads (cleanup.policy, retention.ms, retention.bytes, delete.retention.ms, min/max.compaction.
    lag.ms, min.cleanable.dirty.ratio, segment.bytes, ...); Kafka configs without effect offline (compression.type,
    min.insync.replicas, ...) are listed as skipped, and kept with --all-keys; keys segjobs does not know at all,
    and values Kafka prints as null (sensitive), are always skipped;
  - every value whose source is not DEFAULT_CONFIG: topic overrides and broker settings alike (a
    log.retention.hours in server.properties changes retention.ms as much as an override does). A value labelled
    DEFAULT_CONFIG is kept too when it differs from Kafka's default: Kafka shows a retention.ms set by
    log.retention.hours or log.retention.minutes without its synonym. Broker settings that every imported topic
    shares go to [defaults]; the rest to one [topics."<name>"] table per topic, sorted, each value with a comment
    saying where it came from;
  - Kafka's own topics (__consumer_offsets, ...) keep segjobs' table of the configs Kafka creates them with,
    unless the topic has an override of its own.

kafka-topics.sh output does not say where values come from (every value goes to its topic's table), and it omits
a retention.ms set by log.retention.hours/minutes: prefer kafka-configs.sh --describe --all.
Errors name the input line and its text; exit code 2, nothing written."""


def configure(p: argparse.ArgumentParser) -> None:
    """Add the ``config`` subcommands to ``p``."""
    sub = p.add_subparsers(dest="config_command", metavar="<subcommand>", required=True)
    imp = sub.add_parser("import", help="write topic configuration TOML from kafka-configs.sh / kafka-topics.sh "
                                        "--describe output", description=IMPORT_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_argument("--input", "-i", metavar="FILE", default="-",
                     help="the describe output to read (default: stdin, '-')")
    imp.add_argument("--output", "-o", metavar="FILE", default="-",
                     help="where to write the TOML (default: stdout, '-'); written whole or not at all")
    imp.add_argument("--force", action="store_true", help="replace --output when it exists")
    imp.add_argument("--all-keys", action="store_true",
                     help="also write Kafka topic configs that have no effect offline (compression.type, "
                          "min.insync.replicas, segment.ms, ...); segjobs accepts and ignores them")
    imp.add_argument("--quiet", action="store_true", help="no summary on stderr")
    imp.epilog = exit_codes_help(
        done="the TOML written (to --output, or stdout) and checked by loading it as --config would",
        failed="not used: every error, an --output the machine refuses included, is exit code 2 with nothing "
               "written",
        nothing_done="nothing was written: a usage error, no input (stdin is a terminal), an --input that cannot "
                     "be read or is not text, a line of the describe output that cannot be read or a value segjobs "
                     "refuses (the error names the line and its text), an --output that exists (without --force), "
                     "is a directory, is the --input file or lies in a directory that does not exist or below a "
                     "file, or that the machine refuses to write (a read-only or full filesystem, permissions, a "
                     "name too long: the error names the step and the errno); an existing --output is left as it was",
        interrupted="interrupted (Ctrl-C): nothing was written (--output is written whole or not at all)")
    imp.set_defaults(_config_run=run_import)


def run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand."""
    return int(args._config_run(args))


def run_import(args: argparse.Namespace) -> int:
    """``segjobs config import``: 0 when the TOML was written; a ConfigError/UsageError (exit 2) otherwise."""
    from jobs.rules.config_import import import_text

    text, source = _read_input(args.input)
    output = None if args.output == "-" else Path(args.output)
    if output is not None:
        try:
            _check_output(output, args.input, force=args.force)
        except OSError as exc:  # e.g. a name too long for the filesystem
            raise _not_written(output, "looking it up", exc) from None
    result = import_text(text, all_keys=args.all_keys, source=source)
    toml = result.to_toml()
    if output is None:
        sys.stdout.write(toml)
        sys.stdout.flush()
    else:
        _write_atomic(output, toml)
    if not args.quiet:
        own = sum(1 for settings in result.topics.values() if settings)
        where = "stdout" if output is None else str(output)
        print(f"segjobs config import: {len(result.topics)} topic(s) from {source} ({own} with settings of their "
              f"own, {len(result.defaults)} setting(s) in [defaults]) written to {where}", file=sys.stderr)
        for line in result.skipped_summary():
            print(f"  {line}", file=sys.stderr)
        if any(d.tool == "kafka-topics" for d in result.descriptions):
            print("  note: kafka-topics.sh omits broker settings such as log.retention.hours; "
                  "kafka-configs.sh --describe --all --entity-type topics shows them", file=sys.stderr)
        if any(d.overrides_only for d in result.descriptions):
            print("  note: described without --all: only topic overrides were in the input, no broker settings",
                  file=sys.stderr)
    return 0


def _read_input(name: str) -> tuple[str, str]:
    if name == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no input: pipe the describe output in (kafka-configs.sh --bootstrap-server HOST:9092 "
                             "--describe --all --entity-type topics | segjobs config import) or give --input FILE")
        return sys.stdin.read(), "<stdin>"
    path = Path(name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--input {name}: cannot read it: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8"), str(path)
    except UnicodeDecodeError as exc:
        raise UsageError(f"--input {name}: not text (byte {exc.start} is not UTF-8): expected the output of "
                         f"kafka-configs.sh or kafka-topics.sh --describe") from None


def _check_output(output: Path, input_name: str, *, force: bool) -> None:
    """``UsageError`` for an ``--output`` that is the input, exists (without ``force``), is a directory, or lies
    in a directory that does not exist or below something that is not a directory."""
    if input_name != "-" and output.resolve() == Path(input_name).resolve():
        raise UsageError(f"--output {output} is the --input file: write the TOML elsewhere")
    if output.exists() and not force:
        raise UsageError(f"--output {output} exists: add --force to replace it, or choose another file")
    if output.is_dir():
        raise UsageError(f"--output {output} is a directory: give a file name, e.g. {output}/topics.toml")
    parent = output.parent
    if not parent.is_dir():
        above = parent
        while str(above) not in ("", ".", above.anchor) and not above.exists():
            above = above.parent
        if above.exists() and not above.is_dir():
            raise UsageError(f"--output {output}: {above} is not a directory")
        raise UsageError(f"--output {output}: the directory {parent} does not exist")


def _not_written(path: Path, step: str, exc: OSError) -> NotWritableError:
    """The error (exit code 2) of an ``--output`` the machine refused: the file, the step that failed and why
    (the errno and the fix, as the jobs say it), and that nothing was written."""
    cause = storage_error(exc, str(path))
    return NotWritableError(f"--output {path}: {step} failed: {cause.detail}; nothing was written", uri=str(path),
                            cause=cause)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over: a reader sees the old file or the
    whole new one. A write the machine refuses (a read-only or full filesystem, permissions) leaves no temporary
    file and ``path`` as it was, and is a :class:`NotWritableError` (exit code 2)."""
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise _not_written(path, f"creating a file in {parent}", exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        # mkstemp makes the file private; a config file gets the permissions a plain write would give it
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _not_written(path, "writing it", exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
