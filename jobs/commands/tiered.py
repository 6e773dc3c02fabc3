"""Tiered storage (KIP-405). `segjobs tiered audit` reads a broker's remote log metadata (the __remote_log_metadata
partitions of its log dir), its partitions and its remote store together, and reports per partition what is
remote and local and what is wrong. It reads only.

  segjobs tiered audit --log-dir /var/kafka/logs --remote /var/kafka/tiered --config conf/topics.toml
  segjobs tiered audit --log-dir /backup/logs --remote s3://bucket/tiered --topic-ids ids.txt --format json

See docs/guide/tiered.md for what each finding means and what to do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jobs import api
from jobs.commands.args import add_s3_options, duration_arg, storage_options_from_args
from segment_io.errors import CorruptCheckpointError, CorruptRecordError, SegjobsError, UsageError

AUDIT_HELP = """Replay the broker's remote log metadata (every __remote_log_metadata-N partition of --log-dir, or of
--metadata-dir) as Kafka's metadata cache holds it, list the remote store (--remote, in --layout) and read each
partition's partition.metadata, log-start-offset-checkpoint, leader-epoch-checkpoint and local segments. Per
partition: remote segments and bytes by state (finished, copy started, delete started) and the local tail, and
these findings:

  GAP      offsets from the log start to the log end in no finished remote segment and no local segment: data loss
  MISSING  a finished segment whose object is absent or not of the size the metadata records: data loss
  orphan   objects no finished segment stands behind (a copy that never finished, a delete that stalled, a
           segment or partition deleted, a segment the metadata never names), and finished segments outside the
           partition's leader-epoch lineage (Kafka never serves them), with their bytes
  overdue  finished segments remote retention (retention.ms, retention.bytes from --config/--set, the log start
           offset) should already have deleted, with their bytes

Supported remote layouts: local-tiered-storage (Kafka's LocalTieredStorage) and aiven (Aiven's
tiered-storage-for-apache-kafka, unencrypted, compressed or not: each finished segment's manifest is read and the
objects' sizes checked against it); others, encrypted segments and unknown manifest versions are refused (exit 2).
Exit codes: 0 no data loss found (orphans and overdue segments are reported, not failures), 1 a gap or a missing
object, 2 nothing was read (a usage error, no metadata partition)."""


def configure(p: argparse.ArgumentParser) -> None:
    """Add the ``tiered`` subcommands to ``p``."""
    sub = p.add_subparsers(dest="tiered_command", metavar="<subcommand>", required=True)
    audit = sub.add_parser("audit", help="report coverage gaps, missing objects, orphans and overdue remote segments",
                           description=AUDIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    audit.add_argument("--log-dir", required=True, metavar="URI",
                       help="the broker's log dir (local path or s3://bucket/prefix): its partitions, checkpoints "
                            "and, unless --metadata-dir, its __remote_log_metadata partitions")
    audit.add_argument("--remote", required=True, metavar="URI",
                       help="the remote store's root (local path or s3://bucket/prefix); for local-tiered-storage "
                            "its dir setting or the kafka-tiered-storage directory in it; for aiven the bucket and "
                            "its key.prefix, or the filesystem backend's root")
    audit.add_argument("--layout", default="local-tiered-storage", metavar="NAME",
                       help="how the RemoteStorageManager names its objects: local-tiered-storage (Kafka's "
                            "LocalTieredStorage, the default) or aiven (Aiven's tiered-storage-for-apache-kafka)")
    audit.add_argument("--metadata-dir", metavar="URI",
                       help="where the __remote_log_metadata-N partitions are, when not in --log-dir")
    audit.add_argument("--topic-ids", metavar="FILE",
                       help="topic names of ids the log dir has no partition of: '<topic> <topic id>' lines, or "
                            "kafka-topics.sh --describe output")
    audit.add_argument("--config", metavar="FILE", help="topic configuration TOML: each topic's retention.ms and "
                                                         "retention.bytes (default: Kafka's)")
    audit.add_argument("--set", action="append", default=[], metavar="TOPIC_GLOB:KEY=VALUE",
                       help="override one topic config, e.g. 'orders:retention.ms=30d' (repeatable)")
    audit.add_argument("--now", metavar="EPOCH_MS|ISO8601", help="the instant retention is judged at (default: now)")
    audit.add_argument("--grace", type=duration_arg, default=duration_arg("5m"), metavar="DURATION",
                       help="how long past retention.ms a segment may wait for Kafka's expiration task before it "
                            "counts as overdue (default 5m)")
    add_s3_options(audit)
    audit.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    audit.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")
    audit.add_argument("--html", metavar="FILE", help="also write the report as a self-contained HTML page here "
                                                      "(local path or s3:// URI)")
    audit.set_defaults(_tiered_run=run_audit)


class AuditRefused(SegjobsError):
    """The audit stopped before reading everything (a malformed metadata record or text file): exit code 2, the
    message naming the file, the record's offset or line, and the byte."""

    exit_code = 2


def run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand."""
    return int(args._tiered_run(args))


def _topic_ids(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    from segment_io.topic_ids import parse_topic_ids_file

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--topic-ids {path}: cannot read it: {exc.strerror or exc}") from None
    return parse_topic_ids_file(text, path=path)


def run_audit(args: argparse.Namespace) -> int:
    """``segjobs tiered audit``: the report, and the exit code of :attr:`TieredAudit.exit_code`."""
    from jobs.engine.tiered.audit import audit_json, audit_text

    try:
        audit = api.tiered_audit(args.log_dir, args.remote, layout=args.layout, metadata_dir=args.metadata_dir,
                                 topic_ids=_topic_ids(args.topic_ids), config=args.config, overrides=args.set,
                                 now=args.now, grace_ms=args.grace, storage_options=storage_options_from_args(args))
    except (CorruptRecordError, CorruptCheckpointError) as exc:
        raise AuditRefused(f"{exc}; nothing audited") from exc
    text = (json.dumps(audit_json(audit), indent=2) + "\n") if args.format == "json" else audit_text(audit) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.html:
        from jobs.engine.report.html import write_html
        from jobs.engine.tiered.html import tiered_audit_html

        write_html(args.html, tiered_audit_html(audit), storage_options_from_args(args))
    return audit.exit_code
