"""Reporting for every job: progress lines, the JSON report, the console summary table, the Delta ledger.

A job builds a :class:`RunReport` with one dict per partition (its own keys) and hands it here; nothing
in this module knows compaction or retention semantics.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence, TextIO


class Progress:
    """Progress lines on stderr: ``[compact 12.3s] 3/8 partitions: orders-2 done``. Silent when quiet."""

    def __init__(self, command: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.command = command
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{self.command} {time.monotonic() - self.t0:6.1f}s] {message}", file=self.stream, flush=True)


@dataclass
class RunReport:
    """What one run did (or, with --dry-run, would do)."""

    command: str
    log_dir: str
    now_ms: int
    dry_run: bool
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    finished_ms: int | None = None
    spark_startup_s: float | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exit_code: int = 0

    def finish(self) -> "RunReport":
        self.finished_ms = time.time_ns() // 1_000_000
        self.exit_code = 1 if self.errors else 0
        return self

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False, default=str)


def write_report(report: RunReport, uri: str, options=None) -> None:
    """Write the JSON report atomically to a local path or an s3:// URI (``options``: the run's
    :class:`~segment_io.storage.StorageOptions`, so --s3-endpoint applies here too)."""
    from segment_io.storage import open_storage

    storage = open_storage(uri, options)
    parent = uri.rsplit("/", 1)[0] if "/" in uri else "."
    if storage.local_path(uri) is not None:
        storage.makedirs(parent)
    storage.write_atomic(uri, report.to_json().encode("utf-8"))


def human_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A plain-text table: ``columns`` are (key, heading) pairs; numbers align right."""
    cells = [[h for _, h in columns]]
    for row in rows:
        cells.append(["-" if row.get(k) is None else str(row.get(k)) for k, _ in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    numeric = [all(_numberish(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(columns))]
    lines = []
    for j, r in enumerate(cells):
        parts = [(c.rjust(w) if numeric[i] and j else c.ljust(w)) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _numberish(s: str) -> bool:
    t = s.replace(".", "", 1).replace("-", "", 1).replace("%", "").replace(",", "")
    for unit in (" B", " KB", " MB", " GB", " TB"):
        if t.endswith(unit):
            t = t[: -len(unit)]
    return t.isdigit() or s == "-"


def append_ledger(uri: str, report: RunReport, rows: Iterable[dict[str, Any]], options=None) -> int:
    """Append one row per partition to the Delta table at ``uri`` (created on first use) and return how many.

    Columns: run_id, command, log_dir, now_ms, dry_run, finished_ms, topic, partition, action, reason, and the
    partition's numbers (records/bytes before and after). Written with the ``deltalake`` package, which any
    Delta reader (delta-spark included) can read.
    """
    import pyarrow as pa
    from deltalake import write_deltalake

    numeric = ("records_before", "records_after", "bytes_before", "bytes_after", "segments_before",
               "segments_after", "records_removed", "bytes_removed")
    out = []
    for r in rows:
        out.append({
            "run_id": report.run_id, "command": report.command, "log_dir": report.log_dir, "now_ms": report.now_ms,
            "dry_run": report.dry_run, "finished_ms": report.finished_ms or 0,
            "topic": str(r.get("topic", "")), "partition": int(r.get("partition", -1)),
            "action": str(r.get("action", "")), "reason": str(r.get("reason", "")),
            **{k: int(r.get(k) or 0) for k in numeric},
        })
    if not out:
        return 0
    schema = pa.schema([("run_id", pa.string()), ("command", pa.string()), ("log_dir", pa.string()),
                        ("now_ms", pa.int64()), ("dry_run", pa.bool_()), ("finished_ms", pa.int64()),
                        ("topic", pa.string()), ("partition", pa.int32()), ("action", pa.string()),
                        ("reason", pa.string())] + [(k, pa.int64()) for k in numeric])
    table = pa.Table.from_pylist(out, schema=schema)
    storage_options = None
    if uri.startswith("s3://"):
        from segment_io.storage import StorageOptions

        storage_options = _object_store_options(options or StorageOptions.from_env())
    write_deltalake(uri, table, mode="append", storage_options=storage_options)
    return len(out)


def _object_store_options(options) -> dict[str, str]:
    """StorageOptions in the key names delta-rs' object store takes."""
    out = {}
    for key, value in (("AWS_ENDPOINT_URL", options.endpoint_url), ("AWS_REGION", options.region),
                       ("AWS_ACCESS_KEY_ID", options.access_key_id),
                       ("AWS_SECRET_ACCESS_KEY", options.secret_access_key),
                       ("AWS_SESSION_TOKEN", options.session_token)):
        if value:
            out[key] = value
    if options.endpoint_url and options.endpoint_url.startswith("http://"):
        out["AWS_ALLOW_HTTP"] = "true"
    # delta-rs needs a locking provider or this flag for concurrent writers on S3; the job holds the log
    # dir's lease, and ledger appends are one writer per run.
    out["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return out
