"""What the jobs write and print, captured so that two versions of the code can be compared byte for byte.

A refactoring of the engine must not change a single byte users see. ``run`` drives one checkout of segjobs
(``--repo``) through the demo's two nights and around them, each command in a new process: every night a dry run
of retain and of compact writing its plan file (``--plan``), JSON summary and report; night 1's real runs as
given, night 2's through ``--apply`` of those plans; both nights appending to a Delta ledger. Then ``inspect``
(text, JSON, CSV, HTML) and ``history`` (text, JSON, HTML) at a fixed ``--now``, the ledger's rows and a digest of
every file of the log dir. Every run works in the same directory (``--work``), so paths agree between checkouts.

``compare A B`` masks what differs by nature between two runs of the same code (the :data:`MASKS`: wall-clock
instants and durations, the run's random id, the HTML report's generation time, Spark's own log lines) and
diffs the rest, byte for byte, key order included. Nothing else is masked.

``counts`` says how many functions of ``jobs/engine`` are over 80 lines, how many ``.get("`` it holds and how
many imports it makes inside functions: what a refactoring of the engine should bring down.

    python ops/proof/engine_outputs.py run --repo /tmp/base --out /tmp/proof/base
    python ops/proof/engine_outputs.py run --repo . --out /tmp/proof/new
    python ops/proof/engine_outputs.py compare /tmp/proof/base /tmp/proof/new
    python ops/proof/engine_outputs.py counts --repo /tmp/base
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

#: The demo's instants (jobs/commands/demo.py): night 1 one day after the last record, night 2 a day later,
#: inspect and history after both.
START_MS = 1_700_000_000_000
DAY_MS = 86_400_000
NIGHTS = {1: START_MS + 8 * DAY_MS, 2: START_MS + 9 * DAY_MS}
AFTER_MS = START_MS + 10 * DAY_MS
COMPACT_EXTRA = ["--dedupe-buffer-bytes", "300000", "--strategy", "memory"]

#: Each mask: a name, the files it applies to (a suffix of their names) and what it replaces. They are the only
#: differences two runs of the same code may show.
MASKS: list[tuple[str, str, Callable[[str], str]]] = [
    ("a progress event's wall-clock instant", "",
     lambda t: re.sub(r'"ts":\s*"[^"]*"', '"ts": "<masked>"', t)),
    ("when a run started and finished and a plan was made, by the wall clock", "",
     lambda t: re.sub(r'"(started_ms|finished_ms|made_ms)":\s*[0-9]+', r'"\1": "<masked>"', t)),
    ("how long something took, in JSON (keys ending in _s or seconds)", "",
     lambda t: re.sub(r'"(\w*_s|\w*seconds)":\s*[0-9.]+', r'"\1": "<masked>"', t)),
    ("how long something took, in text (0.333s, ETA 4s) and the throughput it gives (735 MB/s)", "",
     lambda t: re.sub(r"(?<![\w.])[0-9]+(\.[0-9]+)?(s|ms)\b", "<t>", re.sub(r"[0-9.]+ [KMGT]?B/s", "<rate>", t))),
    ("a wall-clock instant in text (a plan's, a ledger row's): any instant after the demo's data, which ends in 2023",
     "", lambda t: re.sub(r"20(2[4-9]|[3-9][0-9])-[0-9]{2}-[0-9]{2}T[0-9:]{8}(\.[0-9]+)?Z", "<instant>", t)),
    ("a run's random id (32 hex digits; history shows its first 12)", "",
     lambda t: re.sub(r"(?<![0-9a-f])(?=[0-9]*[a-f])([0-9a-f]{32}|[0-9a-f]{12})(?![0-9a-f])", "<run-id>", t)),
    ("a file's modification time (a plan's fingerprint): each proof writes the log dir anew", "",
     lambda t: re.sub(r'"mtime_ms":\s*[0-9]+', '"mtime_ms": "<masked>"', t)),
]


def run(repo: Path, work: Path, out: Path) -> None:
    """Every command of the proof against ``repo``'s code, each in a new process, its outputs into ``out``."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    config = work / "demo-topics.toml"
    shutil.copyfile(repo / "conf" / "demo-topics.toml", config)
    logs, ledger = work / "logs", work / "ledger"
    step = 0

    def command(name: str, argv: list[str], files: dict[str, Path] | None = None) -> None:
        nonlocal step
        step += 1
        done = subprocess.run([sys.executable, *argv], cwd=repo, env=env, capture_output=True, text=True)
        stem = out / f"{step:02d}-{name}"
        Path(f"{stem}.out").write_text(done.stdout)
        Path(f"{stem}.err").write_text(done.stderr)
        Path(f"{stem}.rc").write_text(f"{done.returncode}\n")
        for suffix, path in (files or {}).items():
            if path.exists():
                shutil.copyfile(path, f"{stem}.{suffix}")
        print(f"{stem.name}: exit {done.returncode}", flush=True)

    command("generate", ["-c", "from pathlib import Path; from jobs.commands.demo import build; "
                               f"build(Path({str(logs)!r}))"])
    for night, now in NIGHTS.items():
        for job, extra in (("retain", []), ("compact", COMPACT_EXTRA)):
            head = ["-m", "jobs", job, "--log-dir", str(logs), "--log-format", "json"]
            base = [*head, "--config", str(config), "--now", str(now), *extra]
            plan, report = work / f"night-{night}-{job}.plan.json", work / f"night-{night}-{job}-report.json"
            command(f"night-{night}-{job}-dry-run", [*base, "--dry-run", "--plan", str(plan), "--report", str(report)],
                    {"plan.json": plan, "report.json": report})
            command(f"night-{night}-{job}-dry-run-json", [*base, "--dry-run", "--format", "json"])
            # --apply takes --now, the configs and the options from the plan
            real = [*head, "--apply", str(plan)] if night == 2 else base
            command(f"night-{night}-{job}", [*real, "--report", str(report), "--ledger", str(ledger)],
                    {"report.json": report})
    at = ["--log-dir", str(logs), "--config", str(config), "--now", str(AFTER_MS), "--log-format", "json"]
    html = work / "inspect.html"
    command("inspect", ["-m", "jobs", "inspect", *at])
    command("inspect-json", ["-m", "jobs", "inspect", *at, "--format", "json"])
    command("inspect-csv", ["-m", "jobs", "inspect", *at, "--format", "csv"])
    command("inspect-exact-html", ["-m", "jobs", "inspect", *at, "--exact", "--html", str(html)], {"html": html})
    html = work / "history.html"
    command("history", ["-m", "jobs", "history", "--ledger", str(ledger)])
    command("history-json", ["-m", "jobs", "history", "--ledger", str(ledger), "--format", "json"])
    command("history-html", ["-m", "jobs", "history", "--ledger", str(ledger), "--html", str(html)], {"html": html})
    command("ledger-rows", ["-c", f"import json, deltalake; rows = deltalake.DeltaTable({str(ledger)!r})"
                                  ".to_pyarrow_table().to_pylist(); "
                                  "rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str)); "
                                  "print(json.dumps(rows, indent=1, default=str))"])
    digests = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(work)}"
               for p in sorted(logs.rglob("*")) if p.is_file()]
    (out / "log-dir.sha256").write_text("\n".join(digests) + "\n")


def masked(path: Path) -> str:
    text = path.read_text(errors="replace")
    for _, suffix, mask in MASKS:
        if path.name.endswith(suffix):
            text = mask(text)
    return text


def compare(a: Path, b: Path) -> int:
    """Diff the masked outputs of two runs; 0 when they agree."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    differ = 0
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.exists() and pb.exists()):
            print(f"only in {a if pa.exists() else b}: {name}")
            differ += 1
            continue
        ta, tb = masked(pa), masked(pb)
        if ta != tb:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(ta.splitlines(keepends=True), tb.splitlines(keepends=True),
                                                       str(pa), str(pb), n=1))
    print(f"{len(names)} files compared, {differ} differ")
    return 1 if differ else 0


def counts(repo: Path) -> str:
    """Functions over 80 lines, ``.get("`` and function-level imports in ``repo``'s jobs/engine."""
    files = sorted((repo / "jobs" / "engine").rglob("*.py"))
    texts = [f.read_text() for f in files]
    functions = [n for t in texts for n in ast.walk(ast.parse(t))
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    long = sum(1 for n in functions if (n.end_lineno or n.lineno) - n.lineno + 1 > 80)
    imports = {id(i) for n in functions for i in ast.walk(n) if isinstance(i, (ast.Import, ast.ImportFrom))}
    gets = sum(t.count('.get("') for t in texts)
    return f"functions over 80 lines: {long}, .get(\" in jobs/engine: {gets}, function-level imports: {len(imports)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run")
    r.add_argument("--repo", type=Path, required=True, help="the checkout whose code runs")
    r.add_argument("--out", type=Path, required=True, help="where the outputs go (replaced)")
    r.add_argument("--work", type=Path, default=Path("/tmp/segjobs-proof-work"),
                   help="the log dir and its files, the same for every checkout compared (replaced)")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    n = sub.add_parser("counts")
    n.add_argument("--repo", type=Path, default=Path("."))
    args = parser.parse_args()
    if args.action == "run":
        run(args.repo.resolve(), args.work, args.out)
        return 0
    if args.action == "counts":
        print(counts(args.repo))
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
