"""What every job shares: the frame a job runs in (:mod:`.job`: validate, lock, recover, list, scan, work,
report), the jobs' typed :mod:`.options` and plan files (:mod:`.planfile`: ``--dry-run --plan``, ``--apply``)."""
