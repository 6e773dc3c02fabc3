"""How the jobs' work runs: the Spark session (:mod:`.spark_session`, its JVM's :mod:`.class_archive`, the Python
workers' :mod:`.worker_daemon`), the compiled :mod:`.kernels`, the task runners (:mod:`.tasks`: Spark's or this
process's), the :mod:`.seams` a test may replace, the garbage :mod:`.collector` during a run and delta-spark's
glue (:mod:`.delta_spark`). It knows no job: the jobs hand it functions and items."""
