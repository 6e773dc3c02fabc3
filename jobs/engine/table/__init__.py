"""The table job: its :mod:`.driver` (a compacted topic as a Delta table, incremental and exactly once), the
on-disk dedupe of partitions whose latest rows may not fit memory (:mod:`.sort`) and delta-spark's MERGE writer
(:mod:`.spark_writer`)."""
