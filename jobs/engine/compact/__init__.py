"""The compaction job: its :mod:`.driver` (plan, clean, commit, report), the :mod:`.selection` of what a run reads
in full, the cleaning task (:mod:`.cleaning`), small partitions cleaned together (:mod:`.bin_cleaning`), the
:mod:`.external_sort` strategy and the commits made as tasks finish (:mod:`.streaming`)."""
