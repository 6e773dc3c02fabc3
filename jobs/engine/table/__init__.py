"""The table job: its :mod:`.driver` (a compacted topic as a Delta table, incremental and exactly once), the
table's :mod:`.state` in Delta (each partition's applied offset, opening the table), a partition's
:mod:`.changes` before a writer applies them, the on-disk dedupe of partitions whose latest rows may not fit
memory (:mod:`.sort`) and delta-spark's MERGE writer (:mod:`.spark_writer`)."""
