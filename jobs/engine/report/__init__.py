"""What a run says: progress :mod:`.events`, the typed :mod:`.outcomes` of each partition, the run report and its
JSON (:mod:`.run_report`), the text summaries (:mod:`.render`), recovery's words (:mod:`.recovery`), the HTML pages
(:mod:`.html`) and their :mod:`.plots` (matplotlib, optional), and the Delta :mod:`.ledger` read back."""
