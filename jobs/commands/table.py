"""Keep a Delta table of a compacted topic: one row per live key, its latest value, read from the log dir (a
local path or an s3:// prefix: a broker's own dir, a backup copy, an archive) with Kafka's semantics, never
through a broker. The table is what a read_committed consumer would hold after reading the whole topic: per key
the record with the highest offset; a key whose latest record is a tombstone is absent; records of aborted
transactions and transaction markers never appear; keyless records are not part of the table (a compacted
topic cannot hold them). Reading stops at each partition's last stable offset: the first offset of a
transaction with no marker yet (it may still abort), else the log end.

Columns: topic, partition, key, value, headers, offset, timestamp, timestamp_type. (topic, partition, offset)
joins a row back to its record in the log (`segjobs dump`). The Delta table is partitioned by `partition`.

Incremental and exactly once: each partition's applied offset (everything below it is in the table) is a Delta
application transaction (txn appId segjobs-table:<topic>:<partition>), committed by the same Delta commit as
the rows. A run applies what was written since, per partition: upserts of keys with a new latest value, deletes
for tombstones. A run killed at any point leaves the table at its last commit, and the next run continues from
there; a run with nothing new writes no table version. Compaction between runs is harmless (it only removes
records a later record of the same key supersedes), provided the table runs at least once every
delete.retention.ms, the time Kafka gives every reader to see a tombstone (a warning says when compaction got
ahead of the table). When retention deleted segments the table had not applied, the partition is refused with an
error naming the gap (exit 1): --rebuild reapplies it from the log start offset and deletes the rows no longer
in the log.

Writers: with --writer auto, delta-spark when the Spark session has Delta Lake: Spark reads the segments and
keeps the latest record per key in a shuffle that spills (any number of keys, nothing through the driver), then
one MERGE per partition; else the embedded deltalake package: each partition's changes in memory (on disk, in
memory bounded by --latest-buffer-bytes, when they may not fit), one commit for the run. A run that another
writer of the table overtook fails without writing anything (exit 1): rerun it. Partitions are scanned in Spark
tasks under spark-submit, in this process otherwise. The log dir is only read: no lock is taken, nothing is
written there, so it is safe beside a running broker or a segjobs compact.

A tiered topic (--remote, the remote store; --remote-layout): each partition is read as one log, its finished
remote segments below the local log (per the log dir's __remote_log_metadata), then its local segments. A partition
whose remote segment cannot be read (its object missing), or that would keep only part of one (the local log starts
inside it), fails alone (exit 1).

examples:
  segjobs table --log-dir /var/kafka/logs --topic orders --table /lake/orders_latest
  segjobs table --log-dir s3://bucket/kafka/logs --topic orders --table s3://lake/orders_latest --dry-run
  segjobs table --log-dir /backup/logs --topic orders --table /lake/orders_latest --rebuild --partition 3
  segjobs table --log-dir /var/kafka/logs --topic clicks --table /lake/clicks_latest --remote /var/kafka/tiered
  spark-submit --packages DELTA_SPARK_PACKAGE \\
      --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
      --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
      jobs/table.py --log-dir s3://bucket/kafka/logs --topic orders --table s3://lake/orders_latest
(`make venv-delta` builds .venv-delta with delta-spark, `pip install 'segjobs[delta]'`, to try this from a clone)
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jobs.commands.args import (
    add_log_format_option,
    add_max_batch_bytes_option,
    add_remote_options,
    add_rows_options,
    add_s3_options,
    cli_wording,
    close_progress,
    exit_codes_help,
    progress_sink,
    remote_options_from_args,
    size_arg,
    storage_options_from_args,
    summary_view,
)
from jobs.engine.runtime.delta_spark import DELTA_SPARK_PACKAGE
from jobs.engine.table.sort import DEFAULT_LATEST_BUFFER_BYTES
from segment_io.errors import UsageError
from segment_io.layout import parse_partition_dir, partition_dir_problem

# the coordinate of Delta's jars is defined once (jobs.engine.runtime.delta_spark); the help quotes it
__doc__ = (__doc__ or "").replace("DELTA_SPARK_PACKAGE", DELTA_SPARK_PACKAGE)

if TYPE_CHECKING:
    from jobs.engine.runtime.seams import Seams


def _partition_arg(text: str) -> tuple[str | None, int]:
    """``--partition``: ``3`` or ``orders-3``, read by the one parser of partition names (ASCII digits, no leading
    zero, at most 2^31 - 1; a topic of Kafka's characters): ``(None, 3)`` or ``("orders", 3)``."""
    parsed = parse_partition_dir(text if "-" in text else f"t-{text}")
    if parsed is None:
        why = partition_dir_problem(text if "-" in text else f"t-{text}")
        if why and "-" not in text:
            why = why.split(" (")[0]  # its remark names a directory: the placeholder topic's
        raise argparse.ArgumentTypeError(f"{text!r}: expected a partition number (3) or TOPIC-N (orders-3)"
                                         + (f": {why}" if why else ""))
    return (parsed[0] if "-" in text else None), parsed[1]


def _partition_numbers(topic: str, given: list[tuple[str | None, int]]) -> tuple[int, ...]:
    """The numbers of ``--partition``; a TOPIC-N of another topic than ``--topic`` is a usage error."""
    for named, number in given:
        if named is not None and named != topic:
            raise UsageError(f"--partition {named}-{number} names a partition of {named}, not of --topic {topic}: "
                             f"give --partition {number} or --partition {topic}-{number}")
    return tuple(number for _, number in given)


def configure(p: argparse.ArgumentParser) -> None:
    """Add ``table``'s options to ``p``."""
    p.add_argument("--log-dir", required=True, metavar="URI", help="Kafka log dir: a local path or s3://bucket/prefix")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="the compacted topic to keep as a table")
    p.add_argument("--table", required=True, metavar="URI",
                   help="the Delta table (local path or s3:// URI); the first run creates it, later runs update it")
    p.add_argument("--partition", action="append", default=[], type=_partition_arg, metavar="N",
                   help="only this partition of the topic, as 3 or orders-3 (repeatable; default: all)")
    p.add_argument("--rebuild", action="store_true",
                   help="reapply the partitions from their log start offset and delete rows no longer in the log: "
                        "the way out of a retention gap (see above); the table stays readable meanwhile")
    p.add_argument("--dry-run", action="store_true",
                   help="write nothing; count exactly what a real run would insert, update and delete per partition")
    p.add_argument("--writer", choices=("auto", "deltalake", "spark"), default="auto",
                   help="auto (default): delta-spark's MERGE when the Spark session has Delta Lake, else deltalake")
    p.add_argument("--latest-buffer-bytes", type=size_arg, default=DEFAULT_LATEST_BUFFER_BYTES, metavar="SIZE",
                   help="deltalake writer: the memory one partition's latest rows may take (default 256MiB). A "
                        "partition whose records to apply may need more (their bytes plus about 400 bytes each) "
                        "is deduped on disk instead: key hashes in hash buckets, then a read that keeps each key's "
                        "latest record, streamed to the merge, in memory bounded by this whatever the key count")
    add_max_batch_bytes_option(p)
    p.add_argument("--master", metavar="URL",
                   help="Spark master, when the partitions should be read by Spark (default: spark-submit's; run "
                        "directly, partitions are read in this process and no Spark starts)")
    add_s3_options(p)
    add_remote_options(p)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr (failures are still shown)")
    p.add_argument("--format", "--output", dest="format", choices=("table", "json"), default="table",
                   help="what stdout gets: table (default), or json: the run's result as one document")
    add_rows_options(p)
    add_log_format_option(p, job=True)
    p.epilog = exit_codes_help(
        done="done: every partition in scope applied, rebuilt or unchanged (nothing new: no table version written); "
             "with --dry-run: counted, nothing written",
        failed="the run went on, but a partition failed and was left as it was in the table (the others applied; "
               "the summary says why): a segment that cannot be read, a retention gap (--rebuild), a table ahead of "
               "the log, with --remote a remote segment that cannot be read; or nothing was written: another writer "
               "committed to the table first (run again), the Delta commit failed, the --table could not be read",
        nothing_done="nothing was done, the table untouched: a usage error, a --log-dir that does not exist, is a "
                     "file or holds no partition directory, an s3:// --log-dir or --table that cannot be used (no "
                     "credentials, an endpoint that does not answer, a missing bucket), a --topic with no partition "
                     "in the log dir, a --partition the topic lacks, a --table that holds another topic, --writer "
                     "spark without Delta Lake in the Spark session, no usable Java for Spark",
        interrupted="interrupted (Ctrl-C): the table is at its last commit, never half-written (deltalake commits "
                    "once for the run; delta-spark once a partition, and the partitions merged before the stop stay "
                    "applied); the next run applies the rest")


def run(args: argparse.Namespace, seams: "Seams | None" = None) -> int:
    """Update the table; 0 when every partition is up to date, 1 when one failed (the others are applied).
    ``seams``: tests only (a fault hook, see tests/support/table_crash.py)."""
    import os

    from jobs import api

    with cli_wording():
        options = api.TableOptions(table=args.table.rstrip("/"), topic=args.topic,
                                   partitions=_partition_numbers(args.topic, args.partition),
                                   rebuild=args.rebuild, dry_run=args.dry_run, writer=args.writer,
                                   max_batch_bytes=args.max_batch_bytes, latest_buffer_bytes=args.latest_buffer_bytes,
                                   storage=storage_options_from_args(args), progress=progress_sink(args),
                                   remote=remote_options_from_args(args))
    spark = None
    if args.master or os.environ.get("SPARK_ENV_LOADED") or args.writer == "spark":
        from jobs.engine.runtime.spark_session import build_session

        spark = build_session(app_name="segjobs-table", master=args.master)
    result = api.table(args.log_dir, options, spark=spark, seams=seams)
    close_progress(args)
    sys.stdout.write(result.to_json() + "\n" if args.format == "json" else result.summary(**summary_view(args)))
    sys.stdout.flush()
    return result.exit_code
