"""The inspection job's :mod:`.driver`: per-partition statistics, the planners' predictions, the report rows."""
