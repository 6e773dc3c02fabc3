"""``segjobs <command>``: the console entry point.

Every command lives in its own module with ``configure(parser)`` and ``run(args) -> int``; this file only
routes. ``spark-submit jobs/compact.py`` and ``jobs/retain.py`` run the same commands through :func:`submit_main`.
"""

from __future__ import annotations

import argparse
import atexit
import difflib
import importlib
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn, Sequence

from jobs.commands.args import INTERRUPTED, close_progress, error_line, exit_codes_help
from jobs.engine.runtime.spark_session import (
    allow_early_start,
    separate_stderr_under_spark_submit,
    silence_spark_on_interrupt,
    stop_active_session,
)
from segment_io.errors import SegjobsError

#: command -> (module, one-line help). Order is the order of ``segjobs --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "compact": ("jobs.commands.compact",
                "compact partitions whose cleanup.policy includes compact (Kafka's log cleaner)"),
    "retain": ("jobs.commands.retain",
               "apply retention (retention.ms, retention.bytes, log start offset) and delete segments"),
    "table": ("jobs.commands.table",
              "keep a Delta table of a compacted topic's latest value per key, incrementally and exactly once"),
    "recover": ("jobs.commands.recover", "complete or roll back what an interrupted segjobs run left in a log dir"),
    "inspect": ("jobs.commands.inspect",
                "report per partition: dirty ratio, keys, tombstones, what compaction/retention would reclaim"),
    "tiered": ("jobs.commands.tiered",
               "tiered storage: `tiered audit` reports gaps, missing objects, orphans and overdue remote segments; "
               "`tiered clean-orphans` deletes the orphans the audit proves unreferenced"),
    "dump": ("jobs.commands.dump",
             "print batches and records of segment files, like kafka-dump-log; --verify checks them"),
    "generate": ("jobs.commands.generate", "write a synthetic broker-style log dir (demo, tests, benchmarks)"),
    "config": ("jobs.commands.config",
               "`config import`: write the --config TOML from kafka-configs.sh / kafka-topics.sh --describe output"),
    "history": ("jobs.commands.history",
                "the last runs and the bytes they reclaimed per topic, from a --ledger Delta table"),
    "warm-up": ("jobs.commands.warmup",
                "ahead of the first run: compile and cache the kernels, write segjobs' bytecode (`make venv` runs it)"),
}

EPILOG = exit_codes_help(
    done="success",
    failed="the work ran but something failed or was refused (e.g. a corrupt partition was reported and left "
           "untouched)",
    nothing_done="usage or configuration error: nothing was done",
    interrupted="interrupted (Ctrl-C): the partitions committed before the stop are listed; the next run does the "
                "rest") + """

Every destructive command has --dry-run. Time is always an input: --now EPOCH_MS|ISO8601 (default: now;
a time without a zone is UTC).
Run `segjobs <command> --help` for the options of one command."""


def package_version() -> str:
    """segjobs' version: the installed package's; else, for a source checkout run without installing it (e.g.
    ``spark-submit jobs/compact.py`` with the checkout on the path), its pyproject.toml's; else ``unknown``."""
    from importlib import metadata

    try:
        return metadata.version("segjobs")
    except metadata.PackageNotFoundError:
        pass
    import tomllib

    try:
        with (Path(__file__).resolve().parents[2] / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        project = {}
    if project.get("name") == "segjobs" and project.get("version"):
        return f"{project['version']} (source checkout, not installed)"
    return "unknown (not installed, and no segjobs pyproject.toml beside the code)"


class _VersionAction(argparse.Action):
    """``--version``: print ``segjobs <version>`` on stdout and exit 0. argparse's own ``version`` action needs
    the text when the parser is built; this one looks the version up only when asked (see :func:`package_version`),
    so that every other run's start-up does not pay for reading the package metadata."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        sys.stdout.write(f"segjobs {package_version()}\n")
        parser.exit(0)


class CommandLineParser(argparse.ArgumentParser):
    """argparse's parser (every command's: subcommands' parsers are made of their parent's class), with hints
    where argparse's own error misleads. argparse takes a word that starts with '-' for an option unless it is a
    plain number such as -1, so ``--segment-bytes -1MiB`` fails with only ``expected one argument``; the hint
    says the value was taken for an option and how to give it (``--segment-bytes=-1MiB``). An option typed wrong
    (``--log-dirs``) is named, with the nearest real one, also where argparse speaks only of a required option
    the line lacks.

    Options must be typed whole: argparse's default takes any unambiguous prefix (``--acc`` for
    ``--accept-config-baseline``, ``--dry`` for ``--dry-run``), so a typo could turn on a safety override, and an
    option added later would make a script's prefix ambiguous."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        # the words this parser reads (a subcommand's parser gets the rest of the line), for error()
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        super().error(message + self._dash_value_hint(message) + self._unknown_option_hint(message))

    def _unknown_option_hint(self, message: str) -> str:
        """``(--log-dirs: not an option of this command; did you mean --log-dir?)`` when ``message`` is about a
        required option or words argparse did not recognise, and the line holds a word that looks like an option
        no parser on the command's path knows; else nothing."""
        if not message.startswith(("the following arguments are required", "unrecognized arguments")):
            return ""
        words = getattr(self, "_words", [])
        words = words[:words.index("--")] if "--" in words else words
        known = self._options_along(words)
        typed = dict.fromkeys(w.split("=", 1)[0] for w in words if w.startswith("--"))
        unknown = [w for w in typed if w not in known]
        if not unknown:
            return ""
        named = []
        for word in unknown:
            # a prefix (what argparse once took for the whole option), else the nearest spelling
            near = sorted(o for o in known if o.startswith(word))[:3] or difflib.get_close_matches(
                word, sorted(known), n=1, cutoff=0.7)
            named.append(f"{word}: not an option of this command"
                         + (f"; did you mean {' or '.join(near)}?" if near else ""))
        return f" ({'; '.join(named)})"

    def _options_along(self, words: Sequence[str]) -> set[str]:
        """The option strings of this parser and of each subcommand's parser ``words`` choose below it."""
        known: set[str] = set()
        parser: argparse.ArgumentParser | None = self
        while parser is not None:
            known.update(parser._option_string_actions)
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            chosen = [w for w in words if subs and w in subs[0].choices]
            parser = subs[0].choices[chosen[0]] if chosen else None
            words = words[words.index(chosen[0]) + 1:] if chosen else words
        return known

    def _dash_value_hint(self, message: str) -> str:
        """``'-1MiB' was taken for an option...`` when ``message`` is argparse's missing value of an option
        followed on the line by a word that starts with '-' and a digit; else nothing."""
        missing = re.fullmatch(r"argument (\S+): expected one argument", message)
        if missing is None:
            return ""
        flags = missing.group(1).split("/")
        words = getattr(self, "_words", [])
        for flag, value in zip(words, words[1:]):
            if flag in flags and re.match(r"-\.?\d", value):
                return f" ({value!r} starts with '-' and was taken for an option: give it as {flag}={value})"
        return ""


def build_parser(only: str | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """The command line's parser. Every command's module is imported for its options, unless ``every`` is False:
    then only the module of ``only`` (the command being run, if any), the others' entries holding their one-line
    help alone, which is all ``segjobs --help`` shows of them (a command's module imports its job's engine:
    most of a run's start-up, which another command need not pay for)."""
    parser = CommandLineParser(
        prog="segjobs",
        description="Compaction and retention for Kafka log segments in local log dirs and S3 prefixes, as Spark jobs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, help="print segjobs' version and exit")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for name, (module_name, help_text) in COMMANDS.items():
        if not every and name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_given[0] if args_given else None, every=False)
    args = parser.parse_args(args_given)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    args._started = time.monotonic()  # the elapsed_s of an error line in --log-format json
    try:
        try:
            return int(args._run(args) or 0)
        finally:
            close_progress(args)
    except SegjobsError as exc:
        # each error class says what it means: 2 "nothing was done" (ConfigError, UsageError, LockHeldError), else 1
        print(error_line(args, f"error: {exc}", kind=type(exc).__name__, exit_code=exc.exit_code), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt as exc:
        # a job says what it committed before the stop (jobs.engine.frame.job.RunInterrupted); Spark is then
        # stopped quietly (see console_main)
        print(error_line(args, str(exc) or "interrupted", event="interrupted", exit_code=INTERRUPTED),
              file=sys.stderr)
        return INTERRUPTED


def console_main() -> None:
    """The ``segjobs`` console script: :func:`main`, then a clean Spark shutdown."""
    silence_spark_on_interrupt()
    allow_early_start()
    code = 1
    try:
        code = main()
    except KeyboardInterrupt:  # a second Ctrl-C, while the first one's message was being written
        code = INTERRUPTED
    finally:
        stop_active_session(quiet=code == INTERRUPTED, exiting=True)
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once the command is done: its report, ledger and summary are written
    and Spark is stopped. What Python would still do is done here (non-daemon threads joined, ``atexit``
    handlers run, stdout and stderr flushed), but not the interpreter's own teardown: freeing every module
    and its C extensions (pyarrow, numba's LLVM, numpy) took 1.5-2 s of a demo run, for nothing the user
    gets."""
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`segjobs ... | head`): nothing more can be said
            pass
    os._exit(code)


def submit_main(command: str) -> None:
    """Entry for ``spark-submit jobs/<command>.py ARGS``: the same arguments as ``segjobs <command>``, and the
    same streams (summary on stdout, progress and errors on stderr; see
    :func:`jobs.engine.runtime.spark_session.separate_stderr_under_spark_submit`)."""
    separate_stderr_under_spark_submit()
    silence_spark_on_interrupt()
    code = 1
    try:
        code = main([command, *sys.argv[1:]])
    except KeyboardInterrupt:  # a second Ctrl-C, while the first one's message was being written
        code = INTERRUPTED
    finally:
        stop_active_session(quiet=code == INTERRUPTED)
    sys.exit(code)


if __name__ == "__main__":
    console_main()
