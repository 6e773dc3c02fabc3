"""The ready nightly segjobs DAG: retention, then compaction, of one Kafka log dir at each night's end.

Its settings are the TOML file ``segjobs_nightly.toml`` beside this file, or the file that the environment
variable ``SEGJOBS_DAG_SETTINGS`` names (set it for the DAG processor and the workers alike). The keys are the
parameters of :func:`segjobs_airflow.segjobs_dag`; edit the example's ``log_dir``, ``config``, ``segjobs_home``
and ``conn_id`` at least. Copy this file, ``segjobs_airflow.py`` and the TOML into your DAGs folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

try:
    from segjobs_airflow import dag_from_settings
except ModuleNotFoundError:
    # Airflow puts the DAGs folder's root on sys.path; in a subfolder of it, the factory beside this file is
    # found through this file's own directory.
    sys.path.append(str(Path(__file__).resolve().parent))
    from segjobs_airflow import dag_from_settings

SETTINGS = os.environ.get("SEGJOBS_DAG_SETTINGS") or str(Path(__file__).with_name("segjobs_nightly.toml"))

dag = dag_from_settings(SETTINGS, dag_id="segjobs_nightly")
