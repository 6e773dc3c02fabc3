"""The retention job's :mod:`.driver`, and the retention that compaction (compact,delete topics, retention first)
and inspection's predictions share with it."""
