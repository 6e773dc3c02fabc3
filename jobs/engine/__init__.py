"""The Spark engine, a package per concern, each importing only the ones below it (pyproject's import contract):

* :mod:`jobs.engine.inspect`, :mod:`jobs.engine.table`: the inspect and table jobs;
* :mod:`jobs.engine.compact`: the compaction job (selection, cleaning, bins, the external sort);
* :mod:`jobs.engine.retain`: the retention job, and the retention compact,delete topics and inspect share;
* :mod:`jobs.engine.frame`: the frame every job runs in, its options and plan files;
* :mod:`jobs.engine.report`: events, outcomes, the run report, its summaries, HTML, plots and the ledger;
* :mod:`jobs.engine.runtime`: the Spark session, task runners, kernels, seams and delta-spark's glue;
* :mod:`jobs.engine.scan`: the scan of a partition's files every job starts with (a task, below all of them)."""
