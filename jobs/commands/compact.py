"""Compact partitions whose cleanup.policy includes compact, with Kafka's log-cleaner semantics.

For every partition in scope: the cleanable range is [cleaner checkpoint, first uncleanable offset) where
the first uncleanable offset is the least of the active segment's base, the first offset of an open
transaction, and the first segment younger than min.compaction.lag.ms. A partition is compacted when its
dirty ratio exceeds min.cleanable.dirty.ratio, when max.compaction.lag.ms is exceeded, or when you name it
with --partition/--topic. The latest record of each key survives with its original offset and bytes;
tombstones get a delete horizon (now + delete.retention.ms) on the first clean and go on a later clean whose
--now has passed it; aborted transactional records go; markers go once their transaction's data is gone and
their horizon has passed; each active producer's last batch stays (possibly empty). Segment groups in which
nothing changes are not rewritten. Topics with cleanup.policy=compact,delete get retention FIRST, as a broker's
retention thread (every few minutes) effectively does, and compaction is planned on what it leaves (compacting
first would merge expired segments into one stamped recently, which retention would then keep); the dry run and
`segjobs inspect` predict exactly that. Retention's safety limit (--max-delete-fraction,
--accept-config-baseline) applies: a refused topic is left wholly untouched, compaction included.

The log dir is rewritten in place, crash-safely (Kafka's .cleaned -> .swap -> live protocol on local disk; a
commit intent plus copies on S3); `segjobs recover` (run at the start of every job) finishes or rolls back
an interrupted run; a --dry-run takes no lock and recovers nothing, but plans that recovery and plans on the
files it leaves (see --dry-run). The log dir's .lock (local) or a lease object (S3) keeps brokers and other runs
out.

Kafka's own topics keep the configs Kafka creates them with (__consumer_offsets and __transaction_state are
compact topics) unless the config names them exactly; __cluster_metadata is never touched. A wrong .index or
.timeindex in a segment group being cleaned is rebuilt (the group is rewritten, its batches copied byte for
byte), and the progress lines and the report say so. A partition that cannot be read (bad bytes, an entry
with a segment's name that is not a regular file, an impossible log-start-offset-checkpoint entry) is
reported and left untouched (exit code 1).

examples:
  segjobs compact --log-dir /var/kafka/logs --config conf/topics.toml
  segjobs compact --log-dir s3://bucket/kafka/logs --topic 'orders*' --now 2026-11-22T02:00:00Z --dry-run
  segjobs compact --log-dir /backup/logs --partition users-3 --report /tmp/compact.json
  segjobs compact --log-dir /backup/logs --dry-run --plan /tmp/plan.json     # review, then:
  segjobs compact --log-dir /backup/logs --apply /tmp/plan.json
  spark-submit jobs/compact.py --log-dir s3://bucket/kafka/logs --config conf/topics.toml
"""

from __future__ import annotations

import argparse

from jobs import api
from jobs.commands.args import (
    JOB_INTERRUPTED,
    JOB_NOTHING_DONE,
    add_log_dir_options,
    add_plan_options,
    cli_wording,
    dedupe_buffer_arg,
    exit_codes_help,
    job_options,
    print_result,
    sort_bucket_arg,
    summary_view,
)
from jobs.commands.retain import add_accept_config_baseline_option, add_max_delete_fraction_option
from jobs.engine.frame.options import DEFAULT_DEDUPE_BUFFER_BYTES, MIN_SORT_BUCKET_TEXT, STRATEGIES, CompactOptions
from jobs.engine.runtime.seams import Seams
from jobs.rules.map_capacity import LOAD_FACTOR, max_keys_for_buffer


def configure(p: argparse.ArgumentParser) -> None:
    add_log_dir_options(p, scope_note="; partitions named by --topic or --partition are compacted even when "
                                      "their dirty ratio and max lag would not select them")
    add_max_delete_fraction_option(p)
    add_accept_config_baseline_option(p)
    add_plan_options(p)
    tuning = p.add_argument_group("compaction strategy and memory")
    tuning.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="memory: one task per partition with a bounded offset map (multi-pass when full, like "
                        "Kafka); external-sort: exact in one run for any number of keys: key hashes are "
                        "pre-aggregated into hash buckets in the work dir, each bucket is reduced by its own task "
                        "(memory set by --sort-bucket-bytes) and several tasks rewrite one partition's segment "
                        "groups at once; the output is the same bytes a memory pass with a big enough buffer "
                        "writes; auto (default): memory when a partition's dirty records (an upper bound on its "
                        "keys, from the scan) fit the --dedupe-buffer-bytes map, else memory first, handing the "
                        "partition to external-sort (with what it read) only if the map fills; the summary's note "
                        "says which one each partition used and why")
    tuning.add_argument("--dedupe-buffer-bytes", type=dedupe_buffer_arg, default=DEFAULT_DEDUPE_BUFFER_BYTES,
                   metavar="SIZE",
                   help=f"offset-map memory per task, e.g. 512MiB; 24 bytes a slot, full at {LOAD_FACTOR:g} of the "
                        f"slots, so about {max_keys_for_buffer(1 << 20):,} keys per MiB (default: 128MiB, "
                        f"{max_keys_for_buffer(DEFAULT_DEDUPE_BUFFER_BYTES):,} keys; Kafka's "
                        "log.cleaner.dedupe.buffer.size and log.cleaner.io.buffer.load.factor). A partition with more "
                        "dirty keys is cleaned partially and the report says so; the next run continues")
    tuning.add_argument("--sort-bucket-bytes", type=sort_bucket_arg, default=None, metavar="SIZE",
                   help="external-sort: memory one reduce task may take, e.g. 512MiB. A partition's keys are "
                        "hashed into as many buckets as that needs (about 128 bytes per dirty record), so a task's "
                        "memory does not grow with the key count (default: a quarter of spark.executor.pyspark."
                        "memory, else of spark.executor.memory, 1g by default: 256MiB; between 64MiB and 1GiB); "
                        f"at least {MIN_SORT_BUCKET_TEXT}")
    p.epilog = exit_codes_help(
        done="done: every partition in scope compacted or skipped, the summary says which and why (with --dry-run: "
             "planned, nothing written)",
        failed="the run went on, but something failed or was refused (the summary and report say what): a partition "
               "that could not be read or written, reported and left untouched; a topic the delete-fraction limit "
               "refused; a partition whose --apply outcome differs from its plan; the S3 lease lost to another run; "
               "the report or ledger not written",
        nothing_done=JOB_NOTHING_DONE, interrupted=JOB_INTERRUPTED)


def options_from_args(args: argparse.Namespace) -> CompactOptions:
    """The typed options of parsed ``segjobs compact`` arguments (checked here, before any Spark start or
    scan: a usage error costs nothing)."""
    with cli_wording():
        return CompactOptions(**job_options(args), dedupe_buffer_bytes=args.dedupe_buffer_bytes,
                              strategy=args.strategy, sort_bucket_bytes=args.sort_bucket_bytes)


def run(args: argparse.Namespace, *, seams: Seams | None = None) -> int:
    """Run ``segjobs compact`` with parsed ``args``: print the summary (or the JSON report) on stdout and
    return the exit code. ``seams``: tests only (see :mod:`jobs.engine.runtime.seams`)."""
    result = api.compact(args.log_dir, options_from_args(args), now=args.now, seams=seams)
    print_result(args, result, lambda: result.summary(**summary_view(args)))
    return result.exit_code


if __name__ == "__main__":
    from jobs.commands.cli import submit_main

    submit_main("compact")
