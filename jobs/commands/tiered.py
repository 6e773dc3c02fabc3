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
from typing import Any, Callable

from jobs import api
from jobs.commands.args import (
    INSTANT_FORMS,
    INSTANT_METAVAR,
    add_log_format_option,
    add_plan_options,
    add_s3_options,
    duration_arg,
    exit_codes_help,
    progress_sink,
    storage_options_from_args,
)
from jobs.commands.retain import add_max_delete_fraction_option
from segment_io.errors import (
    ConfigError,
    CorruptCheckpointError,
    CorruptRecordError,
    SegjobsError,
    StorageError,
    UsageError,
)

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
Every finding and what to do about it: docs/guide/tiered.md."""

AUDIT_EXIT_CODES = exit_codes_help(
    done="no data loss found: orphans and overdue segments are findings, not failures; the report written",
    failed="data loss found: a gap or a missing object (the report names them); or a read or write that failed once "
           "the audit had begun (the error names it)",
    nothing_done="nothing was read: a usage error, an unsupported --layout, no __remote_log_metadata partition, a "
                 "malformed metadata record, partition.metadata or --topic-ids file (the error names the file, the "
                 "record's offset and the byte), an S3 --log-dir, --remote or --metadata-dir that cannot be used "
                 "(credentials, endpoint, bucket), an --output or --html that cannot be written (checked before "
                 "reading)",
    interrupted="interrupted (Ctrl-C): the audit only reads: nothing was changed")


CLEAN_HELP = """Delete the remote objects the audit proves unreferenced: the orphans of `segjobs tiered audit`, read
the same way (--log-dir, --remote, --layout, --metadata-dir, --topic-ids). An orphan segment's objects are deleted
only when:

  - its segment is not COPY_SEGMENT_FINISHED in the metadata (a finished segment outside the leader-epoch lineage,
    or of a topic deleted and created again, is never deleted here: Kafka deletes those itself);
  - its newest object and its segment's last metadata event are at least --min-age (default 1h) older than the
    newest event of the metadata read: what is newer, the metadata read cannot judge;
  - its topic passes the mass-delete guard: objects no metadata names may be at most --max-delete-fraction (default:
    the topic's segjobs.max.delete.fraction, 0.5 unless set) of the topic's remote bytes, else the topic's orphans
    are all kept and the topic refused (a missing __remote_log_metadata partition, or another cluster's store,
    looks like that).

A real run holds the log dir's lock (or S3 lease) throughout: a broker or segjobs run holding it refuses the clean.
Each object is deleted only while it is as listed (S3: its ETag; disk: size and mtime). --dry-run reports exactly
what would go (objects and bytes) and deletes nothing; --dry-run --plan FILE writes it down, --apply FILE deletes
exactly that, or nothing if what the audit finds now differs (--apply FILE --dry-run: only check that it would).

See docs/guide/tiered.md#cleaning-orphans."""

CLEAN_EXIT_CODES = exit_codes_help(
    done="done: every orphan the audit proves unreferenced deleted, the others kept and said why (with --dry-run: "
         "what would go reported, and the --plan written; nothing deleted)",
    failed="the run went on, but a topic was refused by the mass-delete guard (its orphans all kept), an object was "
           "left (changed or gone since it was listed, its delete failed) or the lease was lost mid-run (it stopped "
           "before the next delete); or a read or write that failed once the run had begun",
    nothing_done="nothing was deleted: a usage error, the log dir locked by a broker or another run (the holder is "
                 "named), an --apply plan the orphans found now differ from, anything the audit refuses (its exit "
                 "code 2), an S3 store that cannot be used, an --output or --plan that cannot be written (checked "
                 "before reading)",
    interrupted="interrupted (Ctrl-C): the objects deleted before the stop are gone, the others stay (each is "
                "deleted whole or not at all); run it again for the rest")


def _add_reading_options(p: argparse.ArgumentParser) -> None:
    """What the audit reads: the log dir, the metadata, the remote store and its layout, the topics' configs."""
    p.add_argument("--log-dir", required=True, metavar="URI",
                   help="the broker's log dir (local path or s3://bucket/prefix): its partitions, checkpoints "
                        "and, unless --metadata-dir, its __remote_log_metadata partitions")
    p.add_argument("--remote", required=True, metavar="URI",
                   help="the remote store's root (local path or s3://bucket/prefix); for local-tiered-storage "
                        "its dir setting or the kafka-tiered-storage directory in it; for aiven the bucket and "
                        "its key.prefix, or the filesystem backend's root")
    p.add_argument("--layout", default="local-tiered-storage", metavar="NAME",
                   help="how the RemoteStorageManager names its objects: local-tiered-storage (Kafka's "
                        "LocalTieredStorage, the default) or aiven (Aiven's tiered-storage-for-apache-kafka)")
    p.add_argument("--metadata-dir", metavar="URI",
                   help="where the __remote_log_metadata-N partitions are, when not in --log-dir")
    p.add_argument("--topic-ids", metavar="FILE",
                   help="topic names of ids the log dir has no partition of: '<topic> <topic id>' lines, or "
                        "kafka-topics.sh --describe output")
    p.add_argument("--config", metavar="FILE", help="topic configuration TOML: each topic's retention.ms and "
                                                     "retention.bytes (default: Kafka's)")
    p.add_argument("--set", action="append", default=[], metavar="TOPIC_GLOB:KEY=VALUE",
                   help="override one topic config, e.g. 'orders:retention.ms=30d' (repeatable)")
    p.add_argument("--now", metavar=INSTANT_METAVAR,
                   help=f"the instant retention is judged at (default: the wall clock); {INSTANT_FORMS}")
    add_s3_options(p)
    p.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    p.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")


def configure(p: argparse.ArgumentParser) -> None:
    """Add the ``tiered`` subcommands to ``p``."""
    sub = p.add_subparsers(dest="tiered_command", metavar="<subcommand>", required=True)
    audit = sub.add_parser("audit", help="report coverage gaps, missing objects, orphans and overdue remote segments",
                           description=AUDIT_HELP, epilog=AUDIT_EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_reading_options(audit)
    audit.add_argument("--grace", type=duration_arg, default=duration_arg("5m"), metavar="DURATION",
                       help="how long past retention.ms a segment may wait for Kafka's expiration task before it "
                            "counts as overdue (default 5m)")
    audit.add_argument("--html", metavar="FILE", help="also write the report as a self-contained HTML page here "
                                                      "(local path or s3:// URI)")
    audit.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_log_format_option(audit)
    audit.set_defaults(_tiered_run=run_audit)
    clean = sub.add_parser("clean-orphans", help="delete the remote objects the audit proves unreferenced "
                                                 "(--dry-run, --plan/--apply)",
                           description=CLEAN_HELP, epilog=CLEAN_EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_reading_options(clean)
    clean.add_argument("--min-age", type=duration_arg, default=None, metavar="DURATION",
                       help="how much older than the metadata's newest event an orphan must be (its objects and "
                            "its segment's last event) to be deleted (default 1h)")
    add_max_delete_fraction_option(
        clean, help="keep every orphan of a topic (and exit 1) when the objects no metadata names would be more "
                    "than this share of its remote bytes; 1 disables the guard (default: the topic's "
                    "segjobs.max.delete.fraction)")
    clean.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    add_plan_options(clean)
    clean.set_defaults(_tiered_run=run_clean)


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


def _preflight(args: argparse.Namespace, destinations: list[tuple[str, str | None]]) -> None:
    """Before anything is read, as the jobs check: the stores of --log-dir, --remote and --metadata-dir answer
    (S3: credentials, endpoint, bucket, within seconds), and each of ``destinations`` (flag, path or URI; None:
    not given) can be written (:func:`~jobs.engine.frame.job.check_destinations`: a file created and removed at
    once). Raises :class:`ConfigError` naming the option and why (exit code 2: nothing was done)."""
    from jobs.engine.frame.job import check_destinations
    from segment_io.storage import open_storage

    options = storage_options_from_args(args)
    for flag, uri in (("--log-dir", args.log_dir), ("--remote", args.remote), ("--metadata-dir", args.metadata_dir)):
        if uri:
            try:
                open_storage(uri, options).check_reachable(uri)
            except StorageError as exc:
                raise ConfigError(f"{flag} {uri}: {exc.detail}; nothing was done") from None
    check_destinations([(flag, uri) for flag, uri in destinations if uri], options)


def run_audit(args: argparse.Namespace) -> int:
    """``segjobs tiered audit``: the report, and the exit code of :attr:`TieredAudit.exit_code`."""
    from jobs.engine.tiered.audit import audit_json, audit_text

    _preflight(args, [("--output", args.output), ("--html", args.html)])
    try:
        audit = api.tiered_audit(args.log_dir, args.remote, layout=args.layout, metadata_dir=args.metadata_dir,
                                 topic_ids=_topic_ids(args.topic_ids), config=args.config, overrides=args.set,
                                 now=args.now, grace_ms=args.grace, storage_options=storage_options_from_args(args),
                                 progress=progress_sink(args))
    except (CorruptRecordError, CorruptCheckpointError) as exc:
        raise AuditRefused(f"{exc}; nothing audited") from exc
    _write_out(args, lambda: audit_json(audit), lambda: audit_text(audit))
    if args.html:
        from jobs.engine.report.html import write_html
        from jobs.engine.tiered.html import tiered_audit_html

        write_html(args.html, tiered_audit_html(audit), storage_options_from_args(args))
    return audit.exit_code


def run_clean(args: argparse.Namespace) -> int:
    """``segjobs tiered clean-orphans``: the report, and the exit code of :attr:`CleanResult.exit_code`."""
    from jobs.engine.tiered.audit import TieredAuditOptions
    from jobs.engine.tiered.clean import DEFAULT_MIN_AGE_MS, CleanOptions, clean_json, clean_text
    from jobs.engine.tiered.clean import run_clean as run
    from jobs.rules.config import ConfigSet
    from jobs.rules.timeutil import parse_instant

    if args.apply:
        given = [flag for flag, value in (("--now", args.now), ("--min-age", args.min_age),
                                          ("--max-delete-fraction", args.max_delete_fraction), ("--plan", args.plan),
                                          ("--metadata-dir", args.metadata_dir), ("--topic-ids", args.topic_ids))
                 if value is not None]
        if given:
            raise UsageError(f"--apply takes --now, --min-age, --max-delete-fraction, --metadata-dir and --topic-ids "
                             f"from the plan ({args.apply}); drop {', '.join(given)}")
    if args.plan and not args.dry_run:
        raise UsageError("--plan FILE writes the plan of a dry run: add --dry-run (then --apply FILE carries it out)")
    _preflight(args, [("--output", args.output), ("--plan", args.plan)])
    configs = (ConfigSet.load(args.config, overrides=list(args.set)) if args.config
               else ConfigSet().with_overrides(list(args.set)))
    audit = TieredAuditOptions(args.log_dir, args.remote, layout=args.layout, metadata_dir=args.metadata_dir,
                               topic_ids=_topic_ids(args.topic_ids), configs=configs, now_ms=parse_instant(args.now),
                               storage_options=storage_options_from_args(args))
    options = CleanOptions(audit, min_age_ms=DEFAULT_MIN_AGE_MS if args.min_age is None else args.min_age,
                           max_delete_fraction=args.max_delete_fraction, dry_run=args.dry_run, plan_uri=args.plan,
                           apply_uri=args.apply)
    try:
        result = run(options)
    except (CorruptRecordError, CorruptCheckpointError) as exc:
        raise AuditRefused(f"{exc}; nothing deleted") from exc
    _write_out(args, lambda: clean_json(result), lambda: clean_text(result))
    if args.plan:
        sys.stderr.write(f"plan written to {args.plan}; carry it out with --apply {args.plan}\n")
    return result.exit_code


def _write_out(args: argparse.Namespace, as_json: Callable[[], Any], as_text: Callable[[], str]) -> None:
    """The report in ``--format``, to ``--output`` or stdout."""
    text = (json.dumps(as_json(), indent=2) + "\n") if args.format == "json" else as_text() + "\n"
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:  # proven writable before the work: the machine refused it since (a full disk, ...)
            from segment_io.storage.local import storage_error

            raise StorageError(f"the report could not be written: {storage_error(exc, args.output).detail}",
                               uri=args.output) from None
    else:
        sys.stdout.write(text)
