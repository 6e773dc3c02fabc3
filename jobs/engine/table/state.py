"""The table's state in Delta: where each partition's applied offset lives (an application transaction per
partition, :func:`app_id`), how the table is opened and its offsets read, and the error of a run another writer
overtook. Both writers (:mod:`jobs.engine.table.driver`'s ``deltalake`` commit and
:mod:`jobs.engine.table.spark_writer`) read and write this same state."""

from __future__ import annotations

from typing import Any, Sequence

from jobs.engine.report.run_report import delta_storage_options
from segment_io.errors import SegjobsError, StorageError
from segment_io.storage.options import StorageOptions

#: The prefix of the Delta application-transaction id that holds a partition's applied offset.
APP_ID_PREFIX = "segjobs-table"
#: The Delta table's partition column: one Kafka partition's rows per directory, so a MERGE of one partition
#: reads and rewrites only that partition's files.
PARTITION_BY = ("partition",)


def app_id(topic: str, partition: int) -> str:
    """The Delta application-transaction id of one partition's applied offset (Kafka topic names hold no ':')."""
    return f"{APP_ID_PREFIX}:{topic}:{partition}"


def open_table(uri: str, options: StorageOptions | None = None) -> Any | None:
    """The ``deltalake.DeltaTable`` at ``uri``, None when there is none yet."""
    from deltalake import DeltaTable  # start-up (~15 ms): loaded by the runs that read or write a table only

    so = delta_storage_options(uri, options)
    try:
        if not DeltaTable.is_deltatable(uri, storage_options=so):
            return None
        return DeltaTable(uri, storage_options=so)
    except OSError as exc:
        raise StorageError(f"cannot read the Delta table: {exc}", uri=uri) from exc


def applied_offsets(dt: Any | None, topic: str, partitions: Sequence[int]) -> dict[int, int | None]:
    """Each partition's applied offset in the table ``dt`` (None: never applied, or no table)."""
    if dt is None:
        return {p: None for p in partitions}
    return {p: dt.transaction_version(app_id(topic, p)) for p in partitions}


class TableConflictError(SegjobsError):
    """Another writer committed to the table between this run's read of it and its commit."""

    def __init__(self, uri: str, read_version: int | None, detail: str) -> None:
        read = "before it existed" if read_version is None else f"at version {read_version}"
        super().__init__(
            f"{uri}: another writer committed to the table after this run read it ({read}; {detail}): nothing of "
            f"this run was written, so no offset is applied twice and no newer row is overwritten; run segjobs "
            f"table again to apply what remains, and run one segjobs table per table at a time")
