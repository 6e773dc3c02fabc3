"""What the operations tests run night after night: a generated log dir, a topic config and three nights.

Shared by the backfill test (project .venv) and the Airflow test (.venv-airflow, where segjobs is not
installed), so this module imports nothing from segjobs: the log dir is made by the ``segjobs generate`` CLI,
and a log dir is compared file by file.

The data spans four days (2023-11-14T22:13Z to 2023-11-18T22:13Z) and each night does something the next one
builds on:

* night 1: retention deletes old ``clicks`` (delete, 2 days) and ``orders`` (compact,delete, 3 days) segments;
  ``orders`` is compacted after its retention; the offset map of :data:`DEDUPE_BUFFER_BYTES` holds fewer keys
  than a ``users-changelog`` partition has, so its compaction is partial (the report says ``partial``);
* night 2: the changelog's compaction continues and finishes, removing the tombstones whose delete horizon
  (night 1 + delete.retention.ms, 1 day) has passed; retention deletes more ``clicks`` and purges the
  ``.deleted`` files of night 1;
* night 3: retention only (compaction finds nothing dirty).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

#: ``segjobs generate`` arguments (besides --out): 3 topics x 2 partitions, about 3 MB in 52 segments.
GENERATE_ARGS = [
    "--topics", "users-changelog,orders,clicks", "--partitions", "2", "--records", "4000",
    "--segment-bytes", "64KiB", "--value-bytes", "100", "--superseded", "0.7", "--tombstones", "0.05",
    "--transactional", "0.2", "--aborted", "0.25", "--start", "2023-11-14T22:13:20Z", "--span", "4d",
    "--seed", "13", "--quiet",
]

TOPICS_TOML = """\
[defaults]
"cleanup.policy" = "compact"
"min.cleanable.dirty.ratio" = 0.1
"delete.retention.ms" = "1d"

[topics."orders"]
"cleanup.policy" = "compact,delete"
"retention.ms" = "3d"

[topics."clicks"]
"cleanup.policy" = "delete"
"retention.ms" = "2d"
# the first night deletes more than half of clicks, which the default safety limit would refuse
"segjobs.max.delete.fraction" = 0.9
"""

#: 1,250 offset-map slots of 24 bytes, about 1,100 keys per pass at the map's 0.9 load factor: fewer than a
#: changelog partition's dirty keys on night 1, more than what is left of them on night 2.
DEDUPE_BUFFER_BYTES = "30000"

#: The nights' --now: each night's 02:00 UTC (the DAG's schedule), after the data's last record.
NIGHTS = ["2023-11-19T02:00:00+00:00", "2023-11-20T02:00:00+00:00", "2023-11-21T02:00:00+00:00"]


def generate(python: str | Path, out: Path) -> None:
    """Write the log dir into ``out`` with ``segjobs generate`` run by ``python`` (the project's)."""
    subprocess.run([str(python), "-m", "jobs", "generate", "--out", str(out), *GENERATE_ARGS], check=True,
                   capture_output=True, text=True, timeout=300)


def job_args(command: str, log_dir: Path, config: Path, now: str) -> list[str]:
    """A night's ``segjobs retain`` or ``segjobs compact`` arguments, as the DAG passes them."""
    extra = ["--dedupe-buffer-bytes", DEDUPE_BUFFER_BYTES] if command == "compact" else []
    return [command, "--log-dir", str(log_dir), "--config", str(config), "--now", now, *extra]


def snapshot(log_dir: Path) -> dict[str, str]:
    """SHA-256 of every file of the log dir and of its ``.segjobs`` work dir (commit intents, the deletion
    ledger), by path relative to the log dir's parent: everything a later night reads."""
    out = {}
    for root in (log_dir, log_dir.with_name(log_dir.name + ".segjobs")):
        if root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(log_dir.parent)).replace(log_dir.name, "LOGS", 1)] = \
                        hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The paths whose bytes differ between two snapshots, or that only one has."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
