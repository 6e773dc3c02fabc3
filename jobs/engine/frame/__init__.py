"""What every job shares: the frame a job runs in (:mod:`.job`: preflight; locked: lock, recover, list, scan,
work; deliver), the jobs' typed :mod:`.options` and plan files (:mod:`.planfile`: ``--dry-run --plan``, ``--apply``)."""
