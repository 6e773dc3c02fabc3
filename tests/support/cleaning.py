"""One cleaning round of a whole partition held in memory: the three steps of Kafka's ``Cleaner.doClean``
(replay transactions, build the offset map, clean), composed the way the compaction task composes them, for the
cleaner's rule tests. The Spark task runs the same steps segment group by segment group (jobs.engine.compact.driver).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import numpy as np
import pyarrow as pa

from jobs.rules.cleaner import CleanParams, CleanResult, clean_records, key_hash_table
from jobs.rules.kafka_defaults import DELETE_RETENTION_MS, PRODUCER_ID_EXPIRATION_MS
from jobs.rules.offset_map import OffsetMapResult, build_offset_map
from jobs.rules.transactions import TxnState, derive_txn_state, summarize_batches
from segment_io.decode import hash_keys
from segment_io.schema import BATCH_SCHEMA

if TYPE_CHECKING:
    from jobs.engine.compact.cleaning import CompactTask, PartitionOutcome
    from jobs.rules.config import TopicConfig


@dataclass(frozen=True)
class LogClean:
    """One cleaning round over a whole partition: the new log and the pass's map and transaction state.

    ``result.records``/``result.empty_batches`` hold the whole partition after the round (the uncleaned tail
    included, untouched); ``offset_map.end_offset`` is the next first dirty offset.
    """

    result: CleanResult
    offset_map: OffsetMapResult
    txn_state: TxnState


def clean_log(records: pa.Table, *, now_ms: int, first_dirty_offset: int, first_uncleanable_offset: int,
              max_keys: int, delete_retention_ms: int = DELETE_RETENTION_MS,
              producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
              empty_batches: pa.Table | None = None,
              key_hashes: tuple[np.ndarray, np.ndarray] | None = None,
              legacy_delete_horizon_ms: int = 0,
              segment_last_modified_ms: Mapping[int, int] | None = None) -> LogClean:
    """Map ``[first_dirty_offset, first_uncleanable_offset)``, then clean every source segment whose base offset
    lies below the map's end offset (Kafka's ``logSegments(0, endOffset)``) as one group; later segments are
    returned untouched."""
    empties = empty_batches if empty_batches is not None else BATCH_SCHEMA.empty_table()
    hashes = key_hashes if key_hashes is not None else hash_keys(records.column("key"))
    kh = key_hash_table(records, hashes)
    txn_state = derive_txn_state(summarize_batches([kh], empty_batches=empties), now_ms=now_ms,
                                 producer_id_expiration_ms=producer_id_expiration_ms)
    omap = build_offset_map([kh], start_offset=first_dirty_offset, end_offset=first_uncleanable_offset,
                            aborted=txn_state.aborted, max_keys=max_keys)
    in_round = records.column("segment_base_offset").to_numpy() < omap.end_offset
    e_in_round = empties.column("segment_base_offset").to_numpy() < omap.end_offset
    params = CleanParams(now_ms=now_ms, upper_bound_offset=first_uncleanable_offset,
                         delete_retention_ms=delete_retention_ms, legacy_delete_horizon_ms=legacy_delete_horizon_ms)
    cleaned = clean_records(records.filter(pa.array(in_round)), offset_map=omap, txn_state=txn_state, params=params,
                            empty_batches=empties.filter(pa.array(e_in_round)),
                            key_hashes=(hashes[0][in_round], hashes[1][in_round]),
                            segment_last_modified_ms=segment_last_modified_ms)
    out_records = pa.concat_tables([cleaned.records, records.filter(pa.array(~in_round))])
    out_empty = pa.concat_tables([cleaned.empty_batches, empties.filter(pa.array(~e_in_round))])
    result = CleanResult(records=out_records, empty_batches=out_empty.sort_by("batch_base_offset"),
                         changed=cleaned.changed, rebuilt_batches=cleaned.rebuilt_batches, stats=cleaned.stats)
    return LogClean(result, omap, txn_state)


def partition_task(log_dir: "str | os.PathLike[str]", topic: str, partition: int, now_ms: int, *,
                   config: "TopicConfig | None" = None, max_keys: int | None = None,
                   cleaner_checkpoint: int | None = None) -> "CompactTask":
    """The memory strategy's task for one partition of a local log dir, as the driver would build it (scan, plan
    with the partition requested, the store's committer): for tests that run ``compact_partition`` directly.
    ``config`` defaults to a compacted topic with Kafka's defaults; ``max_keys`` to a map of 1 MiB;
    ``cleaner_checkpoint`` is the partition's cleaner-offset-checkpoint entry (none by default)."""
    from jobs.engine.compact.cleaning import CompactTask
    from jobs.engine.scan import scan_partition
    from jobs.logdir.commit import committer_for
    from jobs.logdir.lock import work_uri
    from jobs.rules.config import TopicConfig
    from jobs.rules.map_capacity import max_keys_for_buffer
    from jobs.rules.plan_compact import plan_compaction
    from segment_io.compression import DEFAULT_MAX_BATCH_BYTES
    from segment_io.layout import list_log_dir
    from segment_io.storage import LocalStorage

    storage = LocalStorage()
    listing = list_log_dir(storage, str(log_dir)).partitions[(topic, partition)]
    scan = scan_partition(storage, listing, now_ms=now_ms, cleaner_checkpoint=cleaner_checkpoint)
    config = config or TopicConfig.from_settings({"cleanup.policy": "compact"})
    plan = plan_compaction(scan.state, config, now_ms, requested=True)
    committer = committer_for(storage, work_uri(str(log_dir)), log_dir=str(log_dir))
    return CompactTask(storage, listing, scan.state, plan, config, scan.txn, now_ms,
                       max_keys if max_keys is not None else max_keys_for_buffer(1 << 20), False, committer,
                       DEFAULT_MAX_BATCH_BYTES)


def staged_files(task: "CompactTask", outcome: "PartitionOutcome") -> dict[str, bytes]:
    """The bytes of every file ``outcome``'s task staged, by file name (wherever the store's committer had the task
    stage each group: see ``Committer.task_stage_uri``)."""
    from segment_io.layout import segment_file_name

    out: dict[str, bytes] = {}
    for g in outcome.groups:
        for sfx in g.staged_suffixes:
            uri = task.committer.task_stage_uri(task.listing.uri, g.old_bases[0], sfx)
            out[segment_file_name(g.old_bases[0], sfx)] = task.storage.read(uri)
    return out
