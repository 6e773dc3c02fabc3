"""One process's timing of the ``kafka-segments`` data source, for :mod:`benchmarks.source_bench`'s ``--baseline``
pairs: ``python benchmarks/source_probe.py LOG_DIR REPEAT`` prints one JSON line, the best of ``REPEAT`` runs of each
query in seconds.

It imports nothing from the ``benchmarks`` package and builds a plain ``local[2]`` session (the JVM's default JIT,
as a user's own session), so that the same file measures whichever checkout of ``segment_io`` comes first on
``PYTHONPATH``: the one under test and a baseline, each in a new process, in the same session set-up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable


def _best(action: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - t0)
    return round(best, 3)


def main(log_dir: str, repeat: int) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import segment_io
    from segment_io.spark import register

    spark = SparkSession.builder.master("local[2]").appName("segjobs-source-probe") \
        .config("spark.ui.enabled", "false").getOrCreate()
    register(spark)
    spark.sparkContext.parallelize(range(2), 2).map(abs).collect()  # the Python workers started
    full = spark.read.format("kafka-segments").load(log_dir)
    pruned = spark.read.format("kafka-segments").option("columns", "topic").load(log_dir)
    seconds = {
        "count()": _best(full.count, repeat),
        "count(), columns=topic": _best(pruned.count, repeat),
        "groupBy(topic).count(), columns=topic": _best(lambda: pruned.groupBy("topic").count().collect(), repeat),
        "sum(length(value))": _best(lambda: full.agg(F.sum(F.length("value"))).collect(), repeat),
    }
    spark.stop()
    return {"segment_io": os.path.dirname(os.path.dirname(os.path.abspath(segment_io.__file__))),
            "load": round(os.getloadavg()[0], 1), "seconds": seconds}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))), flush=True)
