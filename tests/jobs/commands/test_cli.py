"""Bad input at the command line: a one-line error and exit code 2 before any work (and before Spark), and
a corrupt partition reported as uncleanable while the others are compacted (exit code 1). Also the
``segjobs recover`` command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.commands.cli import main
from tests.support.bin_logs import RUN_SPECIFIC, log_dir_files
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.replay import comparable, read_partition, replay

NOW = "2026-11-22T03:00:00Z"
REPO = Path(__file__).resolve().parents[3]
COMPACT = '[defaults]\n"cleanup.policy" = "compact"\n'


def _partition(dirpath: Path, topic: str, *, n: int = 3) -> None:
    log = LogBuilder(topic, 0, timestamp=1_700_000_000_000)
    for i in range(n):
        log.batch([rec("k", f"v{i}"), rec(f"u{i}", "x")])
    log.batch([tombstone("u0")])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), dirpath / f"{topic}-0")


@pytest.fixture()
def log_dir(tmp_path) -> Path:
    d = tmp_path / "logs"
    _partition(d, "orders")
    _partition(d, "users")
    return d


@pytest.fixture()
def config(tmp_path) -> Path:
    p = tmp_path / "topics.toml"
    p.write_text(COMPACT)
    return p


def _files(d: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            if n != ".lock":
                p = Path(dirpath) / n
                out[str(p.relative_to(d))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


def _fails_fast(capsys, argv: list[str], expected: str) -> str:
    """Run the CLI; it must exit 2 within a second with exactly one stderr line containing ``expected``."""
    t0 = time.monotonic()
    rc = main(argv)
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert elapsed < 1.0, f"took {elapsed:.2f}s: something slow (Spark?) ran before the check"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"segjobs {argv[0]}: error: ") and expected in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------------------------------
# Usage and configuration errors: exit 2, one line, nothing done
# --------------------------------------------------------------------------------------------------


def test_unknown_partition(capsys, log_dir, config):
    before = _files(log_dir)
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
                         "--partition", "orders-7", "--partition", "users-0"], "orders-7")
    assert _files(log_dir) == before


def test_unknown_topic(capsys, log_dir, config):
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
                         "--topic", "payments*"], "payments*")


def test_malformed_partition_name(capsys, log_dir, config):
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
                         "--partition", "orders"], "TOPIC-N")


def test_scope_error_comes_before_recovery(capsys, log_dir, config):
    """Exit code 2 promises that nothing was done: recovery (which would delete this leftover) must not
    run before the scope is checked."""
    leftover = log_dir / "orders-0" / "00000000000000000000.log.cleaned"
    leftover.write_bytes(b"partial copy")
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
                         "--partition", "nope-0"], "nope-0")
    assert leftover.exists()


def test_missing_config_file(capsys, log_dir, tmp_path):
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(tmp_path / "absent.toml"),
                         "--now", NOW, "--quiet"], "absent.toml")


def test_unreadable_config(capsys, log_dir, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[defaults]\n"cleanup.policy" = \n')
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(bad), "--now", NOW, "--quiet"],
                "bad.toml")


def test_invalid_config_key(capsys, log_dir, tmp_path):
    bad = tmp_path / "typo.toml"
    bad.write_text('[defaults]\n"cleanup.polcy" = "compact"\n')
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(bad), "--now", NOW, "--quiet"],
                "cleanup.polcy")


def test_invalid_config_value(capsys, log_dir, config):
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
                         "--set", "orders:min.cleanable.dirty.ratio=7"], "min.cleanable.dirty.ratio")


def test_missing_log_dir(capsys, tmp_path, config):
    _fails_fast(capsys, ["compact", "--log-dir", str(tmp_path / "nowhere"), "--config", str(config), "--now", NOW,
                         "--quiet"], "nowhere")


def test_log_dir_without_partitions(capsys, tmp_path, config):
    (tmp_path / "empty").mkdir()
    _fails_fast(capsys, ["compact", "--log-dir", str(tmp_path / "empty"), "--config", str(config), "--now", NOW,
                         "--quiet"], "no partition directories")


@pytest.mark.parametrize("now", ["yesterday", "1700000000", "2026-13-45"])
def test_garbage_now(capsys, log_dir, config, now):
    _fails_fast(capsys, ["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", now, "--quiet"],
                repr(now) if now != "1700000000" else "epoch seconds")


def test_dedupe_buffer_too_small(capsys, log_dir, config):
    # refused by argparse, as a size that is not positive: usage and the error line, naming the flag typed
    with pytest.raises(SystemExit) as caught:
        main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
              "--dedupe-buffer-bytes", "10"])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert err.strip().splitlines()[-1].startswith(
        "segjobs compact: error: argument --dedupe-buffer-bytes: must be at least 48 bytes"), err
    assert "dedupe.buffer.size" not in err


# --------------------------------------------------------------------------------------------------
# A corrupt partition: reported with file, position and offset, untouched; the others compacted
# --------------------------------------------------------------------------------------------------


def test_corrupt_partition_is_uncleanable_and_the_others_are_compacted(spark, capsys, log_dir, config, tmp_path):
    seg = log_dir / "orders-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    headers = read_partition(log_dir / "orders-0")
    second = len(headers[0].raw)  # the second batch starts here; its base offset is 2
    data[second + 70] ^= 0xFF  # a byte inside its records: the CRC no longer matches
    seg.write_bytes(bytes(data))
    orders_before = {k: v for k, v in _files(log_dir).items() if k.startswith("orders-0/")}
    users_before = replay(read_partition(log_dir / "users-0"))

    report = tmp_path / "r.json"
    rc = main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW, "--quiet",
               "--report", str(report)])
    assert rc == 1
    out = json.loads(report.read_text())
    assert out["exit_code"] == 1
    [err] = out["errors"]
    assert err["partition"] == "orders-0" and err["file"].endswith("orders-0/00000000000000000000.log")
    assert err["position"] == second and err["offset"] == 2
    entry = {f"{e['topic']}-{e['partition']}": e for e in out["partitions"]}
    assert entry["orders-0"]["action"] == "error"
    assert str(second) in entry["orders-0"]["reason"] and "00000000000000000000.log" in entry["orders-0"]["reason"]
    assert {k: v for k, v in _files(log_dir).items() if k.startswith("orders-0/")} == orders_before
    assert entry["users-0"]["action"] == "compacted" and entry["users-0"]["records_removed"] > 0
    assert comparable(replay(read_partition(log_dir / "users-0")).latest) == comparable(users_before.latest)
    assert "FAILED" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# segjobs recover
# --------------------------------------------------------------------------------------------------


def test_recover_dry_run_lists_leftovers_and_recover_settles_them(capsys, log_dir):
    part = log_dir / "orders-0"
    original = replay(read_partition(part))
    seg = part / "00000000000000000000.log"
    (part / (seg.name + ".cleaned")).write_bytes(seg.read_bytes()[:10])  # an interrupted clean's output
    (part / "00000000000000000000.index.deleted").write_bytes(b"")  # a broker's pending delete
    before = _files(log_dir)

    assert main(["recover", "--log-dir", str(log_dir), "--now", NOW, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "would drop-cleaned " in dry and "00000000000000000000.log.cleaned" in dry
    assert "would record-deleted " in dry and "; 2 action(s)" in dry
    assert "1 .deleted segment(s) first seen at 2026-11-22T03:00:00.000Z" in dry  # an instant, not epoch ms
    assert _files(log_dir) == before

    assert main(["recover", "--log-dir", str(log_dir), "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert "drop-cleaned" in out and "00000000000000000000.log.cleaned" in out
    assert "record-deleted" in out
    assert [line[len("would "):] for line in dry.splitlines()[:-1]] == out.splitlines()[:-1]  # as foretold
    assert not (part / (seg.name + ".cleaned")).exists()
    assert comparable(replay(read_partition(part)).latest) == comparable(original.latest)

    # a second recovery finds nothing to do
    assert main(["recover", "--log-dir", str(log_dir), "--now", NOW]) == 0
    assert "0 action(s)" in capsys.readouterr().out


def test_recover_missing_log_dir(capsys, tmp_path):
    _fails_fast(capsys, ["recover", "--log-dir", str(tmp_path / "nowhere")], "nowhere")


def test_recover_help_says_what_dry_run_does(capsys):
    with pytest.raises(SystemExit):
        main(["recover", "--help"])
    assert "print the actions a real run would take now" in " ".join(capsys.readouterr().out.split())


# --------------------------------------------------------------------------------------------------
# Help texts
# --------------------------------------------------------------------------------------------------


def every_help() -> dict[str, str]:
    """``segjobs --help`` and every (sub)command's ``--help``, by command line (``tiered audit``), as printed."""
    import argparse

    from jobs.commands.cli import build_parser

    helps: dict[str, str] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        helps[" ".join(words)] = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, (*words, name))

    walk(build_parser(), ("segjobs",))
    return helps


def test_every_example_line_reads_as_typed() -> None:
    # a lone backslash ending a line of a docstring joins the next line to it, spaces and all: the example shows
    # `... 10GiB'       --report` where a shell continuation was meant (the source needs \\)
    for command, text in every_help().items():
        for line in text.splitlines():
            if line.lstrip().startswith(("segjobs ", "spark-submit ")):
                assert not re.search(r"\S {3,}[^#\s]", line), f"{command} --help: {line!r}"


def test_the_top_level_help_names_every_subcommand() -> None:
    # `tiered clean-orphans` deletes objects: a reader of `segjobs --help` must see it is there, not only `audit`
    helps = every_help()
    top = " ".join(helps["segjobs"].split())
    nested = [command.removeprefix("segjobs ") for command in helps if command.count(" ") == 2]
    assert {"tiered audit", "tiered clean-orphans", "config import"} <= set(nested), nested
    for command in nested:
        assert f"`{command}`" in top, command


#: every --help that ends with the exit codes block: the top level's and every command's that runs
HELPS_WITH_EXIT_CODES = ["segjobs", "segjobs compact", "segjobs retain", "segjobs inspect", "segjobs recover",
                         "segjobs dump", "segjobs table", "segjobs history", "segjobs generate",
                         "segjobs config import", "segjobs warm-up", "segjobs tiered audit",
                         "segjobs tiered clean-orphans"]


def _exit_codes_block(command: str) -> str:
    text = every_help()[command]
    return text[text.index("\nexit codes:\n") + 1:]


@pytest.mark.parametrize("command", HELPS_WITH_EXIT_CODES)
def test_the_help_ends_with_what_each_exit_code_means(command) -> None:
    from jobs.commands.args import EXIT_CODES_PAGE

    block = _exit_codes_block(command)
    # a code in the first 7 columns; a meaning's next lines are indented past them (and may start with a number)
    codes = [line[:7].strip() for line in block.splitlines()[1:] if line[:7].strip().isdigit()]
    assert codes == ["0", "1", "2", "130"], block
    assert EXIT_CODES_PAGE in block
    assert "\n## Exit codes\n" in (REPO / "docs" / "guide" / "commands.md").read_text()  # the page it points to


def test_every_command_that_runs_says_its_exit_codes() -> None:
    # a command added later gets the block too
    helps = every_help()
    runnable = {c for c in helps if c != "segjobs" and not any(other.startswith(c + " ") for other in helps)}
    assert runnable == set(HELPS_WITH_EXIT_CODES) - {"segjobs"}


def test_the_exit_codes_page_lists_the_cases_of_the_commands_that_commit_no_partition() -> None:
    # their --help points to the page for every case: it has a row of them for each (the jobs share the main table)
    page = (REPO / "docs" / "guide" / "commands.md").read_text()
    section = page[page.index("\n## Exit codes\n"):page.index("\n## ", page.index("\n## Exit codes\n") + 1)]
    for command in ("table", "history", "generate", "config import", "warm-up"):
        assert f"\n| `{command}` | " in section, command
    assert "(tiered.md#exit-codes)" in section


@pytest.mark.parametrize(("command", "code", "words"), [
    # what the code says about each command's own cases, not the jobs' words (a partition committed, a lock)
    ("segjobs table", "1", "a retention gap (--rebuild)"),
    ("segjobs table", "1", "another writer committed to the table first (run again)"),
    ("segjobs table", "2", "a --table that holds another topic"),
    ("segjobs table", "130", "the table is at its last commit, never half-written"),
    ("segjobs history", "2", "no Delta table at --ledger or one that is no segjobs ledger"),
    ("segjobs history", "130", "the ledger is only ever read"),
    ("segjobs generate", "2", "with --append, a --partitions other than the topic's"),
    ("segjobs generate", "130", "what was written before the stop stays in --out"),
    ("segjobs config import", "2", "(the error names the line and its text)"),
    ("segjobs config import", "130", "nothing was written (--output is written whole or not at all)"),
    ("segjobs warm-up", "2", "a usage error (an unknown option): nothing was compiled"),
    ("segjobs warm-up", "130", "the kernels compiled before the stop stay cached"),
    ("segjobs tiered audit", "0", "orphans and overdue segments are findings, not failures"),
    ("segjobs tiered audit", "1", "data loss found: a gap or a missing object"),
    ("segjobs tiered audit", "2", "no __remote_log_metadata partition"),
    ("segjobs tiered audit", "130", "the audit only reads: nothing was changed"),
    ("segjobs tiered clean-orphans", "1", "a topic was refused by the mass-delete guard"),
    ("segjobs tiered clean-orphans", "2", "the log dir locked by a broker or another run"),
    ("segjobs tiered clean-orphans", "130", "the objects deleted before the stop are gone, the others stay"),
])
def test_each_commands_exit_codes_say_its_own_cases(command, code, words) -> None:
    meanings: dict[str, str] = {}
    for line in _exit_codes_block(command).splitlines()[1:-1]:
        if line[:7].strip().isdigit():
            code_seen = line[:7].strip()
        meanings[code_seen] = meanings.get(code_seen, "") + " " + line[7:].strip()
    assert words in " ".join(meanings[code].split()), meanings[code]


def test_the_tiered_page_says_what_the_tiered_helps_say() -> None:
    # docs/guide/tiered.md#exit-codes lists their cases (the exit codes page points there): the same codes
    page = (REPO / "docs" / "guide" / "tiered.md").read_text()
    section = page[page.index("\n## Exit codes\n"):page.index("\n## ", page.index("\n## Exit codes\n") + 1)]
    clean = page[page.index("\nExit codes: `0` done;"):]
    for text in (" ".join(section.split()), " ".join(clean.split())):
        assert all(f"`{code}`" in text for code in (0, 1, 2, 130)), text
        assert "`--output`" in text and "that cannot be written" in text, text
    for command in ("segjobs tiered audit", "segjobs tiered clean-orphans"):
        assert "an --output" in " ".join(_exit_codes_block(command).split())


def test_the_exit_codes_block_wraps_each_meaning_under_its_code() -> None:
    from jobs.commands.args import exit_codes_help

    block = exit_codes_help(done="ok", failed="a " * 80, nothing_done="usage", interrupted="stopped")
    lines = block.splitlines()
    assert lines[:2] == ["exit codes:", "  0    ok"]
    assert lines[2].startswith("  1    a a") and lines[3].startswith("       a a") and max(map(len, lines)) <= 116
    assert lines[-3:-1] == ["  2    usage", "  130  stopped"]


def test_version_prints_the_packages_version_and_exits_0(capsys) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"segjobs {metadata.version('segjobs')}\n"
    assert "--version" in every_help()["segjobs"]
    # the console script, as a user types it: exit code 0, and no command's module (nor Spark) imported for it
    code = ("import atexit, sys; from jobs.commands.cli import COMMANDS, console_main; "
            "atexit.register(lambda: print(sorted(m for m, _ in COMMANDS.values() if m in sys.modules))); "
            "sys.argv = ['segjobs', '--version']; console_main()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"segjobs {metadata.version('segjobs')}", "[]"]


def test_version_of_a_source_checkout_not_installed_comes_from_pyproject(monkeypatch) -> None:
    import tomllib
    from importlib import metadata

    from jobs.commands.cli import package_version

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert package_version() == f"{declared} (source checkout, not installed)"


def test_every_instant_option_says_a_time_without_a_zone_is_utc() -> None:
    import argparse

    from jobs.commands.args import INSTANT_METAVAR
    from jobs.commands.cli import build_parser

    seen = []

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{command} {name}")
            elif action.metavar == INSTANT_METAVAR:
                seen.append(f"{command} {action.option_strings[0]}")
                assert "a time without a zone is UTC" in (action.help or ""), seen[-1]

    walk(build_parser(), "segjobs")
    assert {"segjobs compact --now", "segjobs recover --now", "segjobs tiered audit --now",
            "segjobs generate --start"} <= set(seen), seen
    assert "a time without a zone is UTC" in " ".join(every_help()["segjobs"].split())


# --------------------------------------------------------------------------------------------------
# Ctrl-C: exit 130, what was committed, no Spark stack
# --------------------------------------------------------------------------------------------------


@pytest.mark.scenario
@pytest.mark.slow
@pytest.mark.spark
def test_ctrl_c_mid_run_lists_the_committed_partitions_and_prints_no_stack(tmp_path) -> None:
    """SIGINT to the process group (what a terminal's Ctrl-C sends) once the first partition is committed:
    exit 130, one line naming every committed partition (and only those changed files), no Spark ERROR/WARN
    lines and no traceback, and no commit left for recovery. One Spark start-up (local[1], a subprocess)."""
    import signal
    import subprocess
    import sys

    from segment_io.generate import GenerateSpec, generate_log_dir

    d = tmp_path / "logs"
    generate_log_dir(GenerateSpec(topics=("a", "b", "c"), partitions=6, records=20_000, seed=7), d)
    before = _files(d)
    env = {k: v for k, v in os.environ.items() if k != "SEGJOBS_SPARK_LOG"}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen([sys.executable, "-m", "jobs", "compact", "--log-dir", str(d), "--set",
                             "*:cleanup.policy=compact", "--now", NOW, "--master", "local[1]"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if ": compacted in " in line:
                os.killpg(proc.pid, signal.SIGINT)
                break
        err = "".join(seen) + proc.stderr.read()
        assert proc.wait(timeout=120) == 130, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = err.splitlines()
    (message,) = [line for line in lines if "interrupted" in line]
    assert message.startswith("segjobs compact: interrupted: committed before the stop: "), message
    assert message.endswith("run the command again to do them (its recovery first completes or rolls back any "
                            "commit the stop cut short; `segjobs recover` does only that)")
    named = sorted(m.split(" (")[0] for m in message.split(" partition(s): ", 1)[1].split("; ")[0].split(", "))
    compacted = sorted(line.split("] ", 1)[1].split(":")[0] for line in lines if ": compacted in " in line)
    assert named == compacted and named, (named, compacted)
    assert len(named) < 18, "the run ended before the interrupt: nothing to test"
    # only the partitions named changed (the others were left as they were) ...
    after = _files(d)
    changed = sorted({k.split("/")[0] for k in set(before) | set(after) if before.get(k) != after.get(k)})
    assert [c for c in changed if "-" in c and not c.endswith("checkpoint")] == named
    # ... the JVM's start-up said nothing either ...
    assert not [line for line in lines if re.search(r"\b(ERROR|WARN|WARNING)\b|Traceback", line)], err
    # ... and no commit is left for recovery: every commit was complete. A cleaning task still running when the stop
    # came may have staged files for a partition it never committed: only those are the next run's to delete (see
    # docs/architecture.md, task attempts), never anything of a partition named as committed
    recover = subprocess.run([sys.executable, "-m", "jobs", "recover", "--log-dir", str(d), "--dry-run"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert recover.returncode == 0 and "compaction commit" not in recover.stdout, recover
    leftovers = re.findall(r"([a-z]-\d+) discarded uncommitted work \(deleted \d+ staged file\(s\)", recover.stdout)
    recovered = re.search(r"would recover (\d+) of 18 partition\(s\)", recover.stdout)
    assert recovered and int(recovered.group(1)) == len(leftovers), recover.stdout
    assert not set(leftovers) & set(named), (leftovers, named)


# --------------------------------------------------------------------------------------------------
# Spark's start-up says nothing on the console script's stderr
# --------------------------------------------------------------------------------------------------


def _console_run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs", *argv], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.scenario
@pytest.mark.slow
@pytest.mark.spark
def test_a_spark_run_from_a_plain_shell_writes_no_jvm_noise_on_stderr(log_dir, config) -> None:
    """A compaction on Spark from a shell that set nothing (no SPARK_LOCAL_IP; this machine's hostname resolves
    to a loopback address): with --log-format json every stderr line is a JSON object, and --quiet leaves
    stderr empty; neither run shows the JVM's incubator-module line or Spark's loopback-hostname warning.
    Two Spark start-ups (local[1], subprocesses)."""
    import shutil

    twin = log_dir.parent / "twin"
    shutil.copytree(log_dir, twin)
    env = {k: v for k, v in os.environ.items() if k not in ("SEGJOBS_SPARK_LOG", "SPARK_LOCAL_IP")}
    env.update(PYSPARK_PYTHON=sys.executable)
    argv = ["compact", "--config", str(config), "--now", NOW, "--master", "local[1]"]
    as_json = _console_run([*argv, "--log-dir", str(log_dir), "--log-format", "json"], env)
    assert as_json.returncode == 0, as_json.stderr
    events = [json.loads(line) for line in as_json.stderr.splitlines()]  # each line one object, nothing else
    # started early (the run will need Spark), while the driver locked, recovered and scanned: the start-up named
    # is what the start took, not only the rest of it the run waited for
    (ready,) = [e for e in events if e["event"] == "spark.ready"]
    assert ready["spark_started_early_s"] > ready["spark_startup_s"], ready
    assert ready["message"] == (f"Spark ready: started early, its start took {ready['spark_started_early_s']}s, "
                                f"{ready['spark_startup_s']}s of it waited for")
    (footer,) = [line for line in as_json.stdout.splitlines() if line.startswith("elapsed ")]
    assert (f"(Spark start-up {ready['spark_started_early_s']:.1f}s, started early: {ready['spark_startup_s']:.1f}s "
            f"waited)") in footer, footer
    # Spark started when a task needs it, not ahead (the other way the console script starts it)
    quiet = _console_run([*argv, "--log-dir", str(twin), "--quiet"], {**env, "SEGJOBS_SPARK_EARLY_START": "0"})
    assert quiet.returncode == 0, quiet.stderr
    assert "2 of 2 partition(s) selected" in quiet.stdout
    assert quiet.stderr == ""
    # started at need: the start-up is what the run waited for
    assert re.search(r"^elapsed \d+\.\ds \(Spark start-up \d+\.\ds\); ", quiet.stdout, re.MULTILINE), quiet.stdout
    for run in (as_json, quiet):
        assert "incubator" not in run.stderr + run.stdout and "loopback" not in run.stderr + run.stdout


# --------------------------------------------------------------------------------------------------
# A small run from the console script: its tasks on the driver, no JVM
# --------------------------------------------------------------------------------------------------


def _without_timings(report: dict, log_dir: Path) -> object:
    """A run's JSON report without what differs from run to run (timings, the run id), its log dir named ``LOGS``."""
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in RUN_SPECIFIC | {"spark_started_early_s"}}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return strip(json.loads(json.dumps(report).replace(str(log_dir), "LOGS")))


@pytest.mark.slow
@pytest.mark.spark
def test_a_small_run_needs_no_jvm_and_writes_what_spark_writes(log_dir, config, tmp_path) -> None:
    """The console script with default options on a small log dir: its tasks run on the driver, with no Java on
    PATH at all; the log dir's bytes, the report and the summary are those of the same run on Spark (forced by
    $SEGJOBS_DRIVER_RUN_MAX_BYTES=0), but for timings. One Spark start-up (local[*], a subprocess)."""
    import shutil

    from jobs.engine.runtime.tasks import DRIVER_RUN_ENV

    twin = tmp_path / "twin"
    shutil.copytree(log_dir, twin)
    no_java = tmp_path / "no-java"
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", DRIVER_RUN_ENV)}
    argv = ["compact", "--config", str(config), "--now", NOW]
    small = _console_run([*argv, "--log-dir", str(log_dir), "--report", str(tmp_path / "small.json")],
                         {**env, "PATH": str(no_java)})
    assert small.returncode == 0, small.stderr
    assert "Spark" not in small.stderr and "(on the driver)" in small.stderr, small.stderr
    on_spark = _console_run([*argv, "--log-dir", str(twin), "--report", str(tmp_path / "spark.json")],
                            {**env, DRIVER_RUN_ENV: "0"})
    assert on_spark.returncode == 0, on_spark.stderr
    assert "Spark ready" in on_spark.stderr, on_spark.stderr
    assert "2 of 2 partition(s) selected" in small.stdout
    assert log_dir_files(log_dir) == log_dir_files(twin)
    reports = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("small", "spark")]
    assert reports[0]["spark_startup_s"] is None and reports[1]["spark_startup_s"] is not None
    assert _without_timings(reports[0], log_dir) == _without_timings(reports[1], twin)
    elapsed = re.compile(r"^elapsed .*$", re.MULTILINE)
    assert elapsed.sub("", small.stdout.replace(str(log_dir), "LOGS")) == elapsed.sub(
        "", on_spark.stdout.replace(str(twin), "LOGS"))


_IMPORTED = ("import atexit, sys; atexit.register(lambda: print(sorted(m for m in ('pyspark', 'pandas') "
             "if m in sys.modules)))")


@pytest.mark.slow
def test_the_command_line_imports_pyspark_and_pandas_only_when_it_needs_them(log_dir, config) -> None:
    """Building the command line (``--help``, a usage error) imports neither pyspark nor pandas; a small run on
    the driver imports no pyspark, and a run with nothing to do no pandas either (pyarrow imports pandas at its
    first conversion of an array, which cleaning makes)."""
    env = {k: v for k, v in os.environ.items() if k != "SEGJOBS_DRIVER_RUN_MAX_BYTES"}

    def imported(code: str) -> str:
        done = subprocess.run([sys.executable, "-c", f"{_IMPORTED}\n{code}"], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    assert imported("from jobs.commands.cli import build_parser; build_parser()") == "[]"
    run = ("import sys; from jobs.commands.cli import console_main; "
           f"sys.argv = ['segjobs', 'compact', '--log-dir', {str(log_dir)!r}, '--config', {str(config)!r}, "
           f"'--now', {NOW!r}, '--quiet']; console_main()")
    assert imported(run) == "['pandas']"  # cleaned on the driver
    assert imported(run) == "[]"  # nothing left to clean


def test_the_interrupt_message_names_what_was_committed() -> None:
    from jobs.engine.frame.job import interrupted_message
    from jobs.engine.report.outcomes import Action, RetentionOutcome
    from jobs.engine.report.run_report import RunReport

    report = RunReport(command="retain", log_dir="/logs", now_ms=0, dry_run=False)
    report.add(RetentionOutcome("t", 10, Action.DELETE, "", applied=True),
               RetentionOutcome("t", 2, Action.DELETE, "", applied=True),
               RetentionOutcome("u", 0, Action.NONE, "", applied=False),
               RetentionOutcome("v", 0, Action.ERROR, "", applied=False))
    message = interrupted_message(report, writes=True, lock_taken=True)
    assert message.startswith("interrupted: committed before the stop: 2 partition(s): t-2 (delete), t-10 (delete); "
                              "the other partitions were left as they were")
    assert "and 1 more" in interrupted_message(report, writes=True, lock_taken=True, shown=1)
    assert interrupted_message(report, writes=True, lock_taken=False) == \
        "interrupted before any work: nothing was changed"
    assert interrupted_message(report, writes=False, lock_taken=False) == \
        "interrupted: nothing was changed (this run writes nothing)"


# --------------------------------------------------------------------------------------------------
# The console script's exit: what Python would still do, without the interpreter's teardown
# --------------------------------------------------------------------------------------------------


def test_exit_now_finishes_threads_atexit_and_output_but_skips_the_interpreters_teardown(tmp_path) -> None:
    import subprocess
    import sys

    marks = tmp_path / "marks"
    code = f"""
import atexit, threading, time
from pathlib import Path
from jobs.commands.cli import exit_now

marks = Path({str(marks)!r})
class Teardown:
    def __del__(self):  # runs in the interpreter's own teardown, which exit_now skips
        marks.joinpath("finalized").touch()
kept = Teardown()
atexit.register(lambda: marks.joinpath("atexit").touch())
threading.Thread(target=lambda: (time.sleep(0.3), marks.joinpath("thread").touch())).start()
print("summary without a newline", end="")
exit_now(3)
"""
    marks.mkdir()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "summary without a newline"
    assert sorted(p.name for p in marks.iterdir()) == ["atexit", "thread"]


@pytest.mark.parametrize("command,groups", [
    ("segjobs compact", ["what to work on", "safety and plans", "output and reports", "Spark, S3 and limits",
                         "compaction strategy and memory"]),
    ("segjobs retain", ["what to work on", "safety and plans", "output and reports", "Spark, S3 and limits"]),
    ("segjobs inspect", ["what to work on", "safety and plans", "output and reports", "Spark, S3 and limits"]),
])
def test_a_jobs_long_help_is_in_sections_by_what_one_looks_for(command: str, groups: list[str]) -> None:
    text = every_help()[command]
    titles = re.findall(r"^([A-Za-z][^\n]*):\n", text[text.index("\noptions:\n"):text.index("\nexit codes:\n")],
                        flags=re.M)
    assert titles == ["options", *groups]

    def section(title: str) -> str:
        start = text.index(f"\n{title}:\n")
        return text[start:text.index("\n\n", start + 1)]

    assert "--log-dir URI" in section("what to work on") and "--now " in section("what to work on")
    assert "--dry-run" in section("safety and plans") or command.endswith("inspect")
    assert "--max-delete-fraction" in section("safety and plans")
    assert "--report FILE.json" in section("output and reports") and "--per-topic" in section("output and reports")
    assert "--s3-endpoint" in section("Spark, S3 and limits") and "--master" in section("Spark, S3 and limits")
