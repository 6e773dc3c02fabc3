"""Example Airflow DAG: nightly compaction and retention of a Kafka log archive on S3 with segjobs.

Copy into your DAGs folder and adapt the connection, paths and schedule. Each task is idempotent: re-running
it for the same data interval passes the same --now and changes nothing the first run did not already change.
Both jobs take the archive's lease, so they never overlap even if a run is retried while another is alive.
Retention runs first, then compaction, as in a broker (whose retention thread runs every few minutes): the reverse
order would merge expired segments into segments stamped recently, which retention.ms then keeps. (`compact` also
applies retention first to compact,delete topics by itself.)
"""

from __future__ import annotations

import pendulum
from airflow import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

LOG_DIR = "s3://my-bucket/kafka/logs"
COMMON = [
    "--log-dir", LOG_DIR,
    "--config", "/opt/segjobs/conf/topics.toml",
    # The data interval's end, not the wall clock: a backfill of an old interval reproduces that night's decisions.
    "--now", "{{ data_interval_end.isoformat() }}",
    "--report", "s3://my-bucket/segjobs/reports/{{ ds }}/{{ task.task_id }}.json",
    "--ledger", "s3://my-bucket/segjobs/ledger",
]

with DAG(
    dag_id="segjobs_nightly",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["kafka", "segjobs"],
) as dag:
    compact = SparkSubmitOperator(
        task_id="compact",
        application="/opt/segjobs/jobs/compact.py",
        application_args=COMMON,
        conf={"spark.sql.python.filterPushdown.enabled": "true"},
        properties_file="/opt/segjobs/conf/spark-defaults.conf",
    )
    retain = SparkSubmitOperator(
        task_id="retain",
        application="/opt/segjobs/jobs/retain.py",
        application_args=COMMON,
        properties_file="/opt/segjobs/conf/spark-defaults.conf",
    )
    retain >> compact
