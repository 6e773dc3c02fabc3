"""Which Python a local Spark session's workers run: the one segjobs is installed in.

A SparkContext fixes its workers' interpreter when it is created: ``$PYSPARK_PYTHON``, else ``python3`` from
PATH. A session a user builds in their own Python (``SparkSession.builder.getOrCreate()`` in
``.venv/bin/python``, a notebook kernel) without that variable gets workers that are some other Python, where
``import segment_io`` fails (``ModuleNotFoundError: No module named 'segment_io'``) once a task or the data
source's planner runs. Workers of a local master run on this machine, so the interpreter running this code is
the right one for them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: The settings by which a user chooses the workers' Python themselves: never overridden.
PYTHON_SETTINGS = ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON")


def use_this_python_for_local_workers(spark: Any) -> bool:
    """Make the Python functions wrapped from now on in ``spark`` (the data source, ``mapInArrow``, RDD
    functions) run in this interpreter, when the session is local and nobody chose its workers' Python
    ($PYSPARK_PYTHON, ``spark.pyspark.python``). Returns True when it changed that. On a cluster the executors'
    Python is the cluster's (see the README's "Running on a Spark cluster"): left alone."""
    sc = spark.sparkContext
    if os.environ.get("PYSPARK_PYTHON") or not str(sc.master).startswith("local"):
        return False
    conf = sc.getConf()
    if any(conf.get(key) for key in PYTHON_SETTINGS) or sc.pythonExec == sys.executable:
        return False
    sc.pythonExec = sys.executable
    return True


__all__ = ["use_this_python_for_local_workers"]
