"""Transaction and producer state of a partition: :mod:`segment_io.transactions` (shared with the
``kafka-segments`` source's ``latest`` read mode), with Kafka's default ``producer.id.expiration.ms``.

Public API: as :mod:`segment_io.transactions`; :func:`derive_txn_state` defaults ``producer_id_expiration_ms``
to Kafka's default (:data:`jobs.rules.kafka_defaults.PRODUCER_ID_EXPIRATION_MS`).
"""

from __future__ import annotations

from jobs.rules.kafka_defaults import PRODUCER_ID_EXPIRATION_MS
from segment_io import transactions as _shared
from segment_io.transactions import (
    AbortedTxns,
    ActiveProducers,
    BatchSummary,
    CompletedTxns,
    TxnState,
    concat_summaries,
    summarize_batches,
    summarize_headers,
)


def derive_txn_state(batches: BatchSummary, *, now_ms: int,
                     producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> TxnState:
    """:func:`segment_io.transactions.derive_txn_state`, a producer expiring after Kafka's default unless told."""
    return _shared.derive_txn_state(batches, now_ms=now_ms, producer_id_expiration_ms=producer_id_expiration_ms)


__all__ = ["AbortedTxns", "ActiveProducers", "BatchSummary", "CompletedTxns", "TxnState", "concat_summaries",
           "derive_txn_state", "summarize_batches", "summarize_headers"]
