"""Synthetic ``segjobs inspect`` rows (the shape of :func:`jobs.api.dirty_ratios`), for testing the plots at
any number of partitions without a log dir or Spark.

Sizes follow a log-normal spread across topics (a few huge topics, many small ones, so bytes and records span
several decades as on a real cluster), partitions of one topic vary around the topic's size, and every column
of :data:`jobs.engine.inspect.driver.COLUMNS` is present and consistent with the others (dirty ratio from clean and
cleanable bytes, null for delete-only topics; superseded records from records and distinct keys, selection from the
ratio and the policy).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jobs.engine.inspect.driver import COLUMN_NAMES

DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000


def inspect_rows(partitions: int, *, topics: int | None = None, seed: int = 7, errors: int = 2) -> pd.DataFrame:
    """``partitions`` rows spread over ``topics`` topics (default: about one topic per 20 partitions);
    ``errors`` of them are unreadable (``error`` set, numbers null), as inspect reports them."""
    rng = np.random.default_rng(seed)
    n_topics = topics or max(1, partitions // 20)
    # every topic gets at least one partition; the rest go to topics with weights spanning a decade
    weights = rng.lognormal(0, 1.0, n_topics)
    counts = np.ones(n_topics, int) + rng.multinomial(partitions - n_topics, weights / weights.sum())
    topic_bytes = 10 ** rng.uniform(5, 10.5, n_topics)  # 100 KB .. 30 GB per partition, per topic
    policies = rng.choice(["compact", "delete", "compact,delete"], n_topics, p=[0.5, 0.3, 0.2])
    rows = []
    for t in range(n_topics):
        name = f"{rng.choice(['orders', 'users', 'clicks', 'payments', 'audit', 'events'])}.v{t}"
        for p in range(counts[t]):
            rows.append(_row(rng, name, p, topic_bytes[t] * rng.lognormal(0, 0.5), policies[t]))
    for i in rng.choice(len(rows), size=min(errors, len(rows)), replace=False):
        r = rows[i]
        rows[i] = {"topic": r["topic"], "partition": r["partition"],
                   "error": f"{r['topic']}-{r['partition']}/00000000000000000000.log, byte 70: CRC-32C mismatch"}
    return pd.DataFrame(rows, columns=list(COLUMN_NAMES))


def _row(rng: np.random.Generator, topic: str, partition: int, size: float, policy: str) -> dict:
    segments = max(1, int(size / rng.choice([1 << 20, 64 << 20, 1 << 30])) + 1)
    segments = min(segments, 400)
    seg_bytes = np.full(segments, int(size) // segments, dtype=np.int64)
    total = int(seg_bytes.sum())  # Python ints from here: products of byte counts overflow int64
    clean_share, dirty_share = rng.uniform(0, 0.8), rng.uniform(0, 1)
    clean = int(total * clean_share)
    cleanable = int((total - clean) * dirty_share * 0.9)
    uncleanable = total - clean - cleanable
    dirty = cleanable / (clean + cleanable) if clean + cleanable else 0.0
    record_bytes = int(rng.choice([100, 300, 1000, 2000]))
    records = max(1, total // record_bytes)
    keys = max(1, int(records * 10 ** rng.uniform(-3, 0)))
    superseded = records - keys
    compact = "compact" in policy
    min_ratio = 0.5 if len(topic) % 2 else 0.1
    selected = bool(compact and dirty > min_ratio)
    ages = np.sort(rng.uniform(0.01, 60, segments))[::-1] * DAY_MS
    retention_deleted = int((ages > 30 * DAY_MS).sum()) if "delete" in policy else 0
    retention_deleted = min(retention_deleted, segments - 1)
    return {
        "topic": topic, "partition": partition, "policy": policy, "segments": segments, "bytes": total,
        "clean_bytes": clean, "cleanable_bytes": cleanable, "uncleanable_bytes": uncleanable,
        "dirty_ratio": dirty if compact else None, "min_cleanable_dirty_ratio": min_ratio, "log_start_offset": 0,
        "log_end_offset": records, "first_dirty_offset": 0, "first_uncleanable_offset": records,
        "bound_by": "active segment", "records": records, "markers": 0, "keyless_records": 0,
        "distinct_keys": keys, "distinct_keys_exact": False, "superseded_records": superseded,
        "live_tombstones": int(keys * 0.01), "expired_tombstones": 0, "aborted_records": 0,
        "oldest_timestamp": NOW_MS - int(ages[0]), "newest_timestamp": NOW_MS - int(ages[-1]),
        "compaction_selected": selected, "compaction_reason": "dirty ratio" if selected else "below ratio",
        "compaction_records_removed": superseded if compact else 0,
        "compaction_bytes_removed": int(cleanable * superseded / records) if compact else 0,
        "compaction_measured": False, "compaction_partial": False,
        "retention_segments_deleted": retention_deleted,
        "retention_bytes_deleted": int(seg_bytes[:retention_deleted].sum()),
        "retention_rules": "retention.ms" if retention_deleted else None, "retention_log_start_offset": 0,
        "segment_bytes": seg_bytes.tolist(), "segment_age_ms": ages.astype(np.int64).tolist(), "error": None,
    }
