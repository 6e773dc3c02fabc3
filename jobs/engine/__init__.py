"""The Spark engine: the job frame, scans, the compaction and retention drivers and tasks, inspection,
reports."""
