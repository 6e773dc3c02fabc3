"""A DAG factory for segjobs: nightly retention, then compaction, of one Kafka log dir, with spark-submit.

Copy this file and ``segjobs_nightly.py`` (with its ``segjobs_nightly.toml``) into your DAGs folder, or call
:func:`segjobs_dag` from a DAG file of your own::

    from segjobs_airflow import segjobs_dag

    dag = segjobs_dag(
        "kafka_archive_nightly",
        log_dir="s3://my-bucket/kafka/logs",
        config="/opt/segjobs/conf/topics.toml",
        segjobs_home="/opt/segjobs",           # where jobs/retain.py and jobs/compact.py are
        conn_id="spark_default",               # an Airflow connection of type spark (its host: the master)
        schedule="0 2 * * *",
        report_dir="s3://my-bucket/segjobs/reports",
        ledger="s3://my-bucket/segjobs/ledger",
    )

Each run has two SparkSubmitOperator tasks, ``retain`` then ``compact``, submitting ``jobs/retain.py`` and
``jobs/compact.py`` with the same arguments:

* ``--now`` is the run's data interval end (ISO-8601 with its offset), never the wall clock: a rerun or a
  backfill of an interval makes that interval's decisions, and a rerun of a finished interval changes nothing.
* ``--report`` (with ``report_dir``) is ``REPORT_DIR/<dag id>/<run id>/<task id>-<try number>.json``: one
  report per task attempt, found from the Airflow run id. ``--ledger`` (with ``ledger``) appends one row per
  partition to one Delta table; each row carries ``now_ms`` (the interval end) and the segjobs ``run_id``
  that the report at that path names.

Retention runs before compaction, as a broker's retention thread (every few minutes) effectively runs before
its cleaner: compacting first would merge expired segments into segments stamped recently, which retention.ms
would then keep. (``compact`` applies retention first to ``compact,delete`` topics by itself, at the same
``--now``, so for those the ``retain`` task has already done it and nothing more happens there.)

Runs must go in order, one at a time: a log dir only moves forward, and a later interval's run followed by an
earlier one is not what running them in order does. Hence ``max_active_runs=1`` and, by default,
``depends_on_past`` with ``wait_for_downstream``: a night waits until the previous night has finished.
Both jobs take the log dir's lock (local) or lease (S3), so they never overlap even if a retry starts while
another attempt is alive; a killed attempt's half-done commit is finished or rolled back by the next one.

With ``tables`` (topic -> Delta table URI), each run first keeps those compacted topics' tables
(``segjobs table``, ``jobs/table.py``: one task per topic, ``table_<topic>``) and only then applies retention and
compaction: the tables read what the night brought before retention deletes segments (a retention gap would
refuse the partition) and before compaction cleans past what the tables applied (they stay exact while they run
at least once every ``delete.retention.ms``; see docs/guide/table.md).

This module needs only Airflow and the apache-airflow-providers-apache-spark provider: segjobs itself runs
under spark-submit (install it where spark-submit runs its driver; see docs/operations/airflow.md).
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Mapping, Sequence

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

#: The instant every task acts at: the end of the run's data interval. A run without one (in Airflow 3, a
#: manual run triggered with no logical date has no data interval in its context) acts at the time it was
#: triggered for.
NOW_TEMPLATE = ("{{ (data_interval_end if data_interval_end is defined and data_interval_end "
                "else dag_run.run_after).isoformat() }}")
#: Where a task's report goes under ``report_dir``: keyed by DAG, run and task attempt.
REPORT_TEMPLATE = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}-{{ ti.try_number }}.json"

#: Options the factory sets itself; passing them in ``extra_args`` / ``compact_args`` / ``retain_args``
#: would give a job two values, so the factory refuses them with the parameter to use instead.
OWNED_OPTIONS = {
    "--log-dir": "use the log_dir parameter",
    "--config": "use the config parameter",
    "--now": "remove it: every run acts at its data interval's end",
    "--report": "use report_dir (reports are then keyed by run)",
    "--ledger": "use the ledger parameter",
    "--master": "remove it: the Spark connection (conn_id) names the master",
}
#: A --set override: TOPIC_GLOB:KEY=VALUE (checked here so a typo is an import error, not a failed night).
SET_PATTERN = re.compile(r"^[^:=]+:[^=]+=.+$")

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "segjobs",
    # A night starts when the previous night has finished (both tasks): see the module docstring.
    "depends_on_past": True,
    "wait_for_downstream": True,
    # A retry reruns the same interval at the same --now; recovery at job start settles what a killed
    # attempt left, so a retry is safe. One retry covers a lost S3 lease or a flaky object store.
    "retries": 1,
    "retry_delay": timedelta(minutes=10),
}


def segjobs_dag(
    dag_id: str,
    *,
    log_dir: str,
    config: str | None = None,
    segjobs_home: str | None = "/opt/segjobs",
    retain_application: str | None = None,
    compact_application: str | None = None,
    tables: Mapping[str, str] | None = None,
    table_application: str | None = None,
    table_args: Sequence[str] = (),
    conn_id: str = "spark_default",
    schedule: Any = "0 2 * * *",
    start_date: datetime | str = "2026-01-01",
    catchup: bool = False,
    report_dir: str | None = None,
    ledger: str | None = None,
    sets: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    retain_args: Sequence[str] = (),
    compact_args: Sequence[str] = (),
    spark_conf: Mapping[str, Any] | None = None,
    properties_file: str | None = None,
    spark_binary: str | None = None,
    env_vars: Mapping[str, str] | None = None,
    spark_submit: Mapping[str, Any] | None = None,
    default_args: Mapping[str, Any] | None = None,
    tags: Sequence[str] = ("kafka", "segjobs"),
    **dag_kwargs: Any,
) -> DAG:
    """A DAG whose runs apply retention, then compaction, to ``log_dir`` at the data interval's end.

    :param dag_id: the DAG's id.
    :param log_dir: the Kafka log dir: a path the Spark driver sees, or ``s3://bucket/prefix``.
    :param config: the topic configuration TOML (``--config``), a path the Spark driver sees.
    :param segjobs_home: the segjobs checkout or install on the spark-submit host; the applications default
        to ``SEGJOBS_HOME/jobs/retain.py`` and ``SEGJOBS_HOME/jobs/compact.py``.
    :param retain_application: / :param compact_application: the spark-submit application of each job
        (overrides ``segjobs_home``; e.g. a path inside an image, or ``local:///...`` on Kubernetes).
    :param tables: compacted topics to keep as Delta tables, ``{topic: table URI}``: a ``table_<topic>`` task per
        topic runs ``jobs/table.py`` before ``retain`` (see the module docstring).
    :param table_application: the spark-submit application of the table tasks (default
        ``SEGJOBS_HOME/jobs/table.py``); :param table_args: more ``segjobs table`` options (``["--s3-endpoint",
        URL]``, ``["--writer", "deltalake"]``).
    :param conn_id: the Airflow connection (type ``spark``) naming the master: ``local[2]``, ``yarn``,
        ``spark://host:7077``, ``k8s://https://...``; its extra may set ``deploy-mode``, ``queue``, ``namespace``.
    :param schedule: / :param start_date: / :param catchup: as for any DAG (``start_date`` may be an
        ISO-8601 string; a date without a zone is UTC).
    :param report_dir: where the JSON reports go (local or ``s3://``), keyed by DAG, run and task attempt.
    :param ledger: a Delta table URI that every run appends one row per partition to.
    :param sets: ``--set TOPIC_GLOB:KEY=VALUE`` overrides for both jobs.
    :param extra_args: more segjobs options for both jobs (e.g. ``["--quiet"]``, ``["--s3-endpoint", URL]``).
    :param retain_args: / :param compact_args: more options for one job (e.g. ``["--dedupe-buffer-bytes",
        "512MiB"]`` for compact, ``["--max-delete-fraction", "0.8"]``).
    :param spark_conf: ``--conf`` settings for both submissions.
    :param properties_file: spark-submit ``--properties-file`` (e.g. segjobs' ``conf/spark-defaults.conf``).
    :param spark_binary: the spark-submit to run (default: ``spark-submit`` on PATH, or the connection's).
    :param env_vars: environment of spark-submit (client mode), e.g. ``PYSPARK_PYTHON``.
    :param spark_submit: any other SparkSubmitOperator arguments (``archives``, ``executor_memory``, ...).
    :param default_args: merged over :data:`DEFAULT_ARGS` (``depends_on_past``, ``retries``, ...).
    :param dag_kwargs: any other DAG argument (``description``, ``max_active_runs``, ``dagrun_timeout``, ...).
    """
    if not isinstance(log_dir, str) or not log_dir.strip():
        raise ValueError(f"segjobs_dag({dag_id!r}): log_dir must be a path or s3:// URI, got {log_dir!r}")
    for name, args in (("extra_args", extra_args), ("retain_args", retain_args), ("compact_args", compact_args),
                       ("table_args", table_args)):
        _check_args(dag_id, name, args)
    for item in sets:
        if not SET_PATTERN.match(item):
            raise ValueError(f"segjobs_dag({dag_id!r}): sets entry {item!r} is not TOPIC_GLOB:KEY=VALUE, "
                             f"e.g. 'orders*:retention.ms=3d'")
    taken = {"task_id", "application", "application_args", "conn_id", "conf", "properties_file", "spark_binary",
             "env_vars", "name"} & set(spark_submit or {})
    if taken:
        raise ValueError(f"segjobs_dag({dag_id!r}): spark_submit sets {', '.join(sorted(taken))}, which the factory "
                         f"sets from its own parameters (conn_id, spark_conf, properties_file, spark_binary, "
                         f"env_vars, *_application, *_args)")
    applications = {
        "retain": retain_application or _application(dag_id, segjobs_home, "retain"),
        "compact": compact_application or _application(dag_id, segjobs_home, "compact"),
    }
    tables = dict(tables or {})
    for topic, uri in tables.items():
        if not re.fullmatch(r"[A-Za-z0-9._-]+", str(topic)) or not isinstance(uri, str) or not uri.strip():
            raise ValueError(f"segjobs_dag({dag_id!r}): tables entry {topic!r}: {uri!r} is not a topic name and a "
                             f"Delta table URI")
    for option in ("--topic", "--table"):
        if any(str(a).split("=", 1)[0] == option for a in table_args):
            raise ValueError(f"segjobs_dag({dag_id!r}): table_args contains {option}, which the DAG sets itself: "
                             f"use the tables parameter")
    if tables:
        applications["table"] = table_application or _application(dag_id, segjobs_home, "table")
    if isinstance(start_date, str):
        start_date = pendulum.parse(start_date, tz="UTC")

    common = ["--log-dir", log_dir, "--now", NOW_TEMPLATE]
    if config:
        common += ["--config", config]
    for item in sets:
        common += ["--set", item]
    if ledger:
        common += ["--ledger", ledger]
    common += list(extra_args)
    per_task = {"retain": list(retain_args), "compact": list(compact_args)}

    dag_kwargs.setdefault("max_active_runs", 1)
    dag_kwargs.setdefault("doc_md", f"segjobs: retention, then compaction, of `{log_dir}` at the data interval's "
                                    f"end (see conf/airflow/segjobs_airflow.py).")
    dag = DAG(dag_id, schedule=schedule, start_date=start_date, catchup=catchup,
              default_args={**DEFAULT_ARGS, **(default_args or {})}, tags=list(tags), **dag_kwargs)
    def submit(task_id: str, application: str, args: list[str]) -> SparkSubmitOperator:
        """One spark-submit task with the DAG's shared Spark settings."""
        return SparkSubmitOperator(
            task_id=task_id,
            application=application,
            application_args=args,
            conn_id=conn_id,
            conf=dict(spark_conf or {}),
            properties_file=properties_file,
            spark_binary=spark_binary,
            env_vars=dict(env_vars) if env_vars else None,
            name=f"{dag_id}.{task_id}",
            **dict(spark_submit or {}),
        )

    with dag:
        tasks = []
        for task_id in ("retain", "compact"):
            args = [*common, *per_task[task_id]]
            if report_dir:
                args += ["--report", f"{report_dir.rstrip('/')}/{REPORT_TEMPLATE}"]
            tasks.append(submit(task_id, applications[task_id], args))
        retain, compact = tasks
        retain >> compact
        for topic, uri in tables.items():
            table = submit(f"table_{topic}", applications["table"],
                           ["--log-dir", log_dir, "--topic", topic, "--table", uri, *table_args])
            table >> retain
    return dag


def dag_from_settings(path: str | os.PathLike[str], dag_id: str) -> DAG:
    """The DAG :func:`segjobs_dag` builds from a TOML file whose keys are its parameters (``dag_id`` may
    be one of them, overriding the argument). Unknown keys are refused, naming the file and the closest
    parameter, so that a typo is an import error in Airflow rather than a setting silently ignored."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the tomli backport reads the same files
        import tomli as tomllib  # type: ignore[no-redef]

    path = Path(path)
    try:
        settings = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"segjobs DAG settings {path} not found: copy conf/airflow/segjobs_nightly.toml "
                                f"there and edit it, or point SEGJOBS_DAG_SETTINGS at yours") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"segjobs DAG settings {path}: not valid TOML: {exc}") from None
    known = [p for p in inspect.signature(segjobs_dag).parameters if p != "dag_kwargs"]
    extra_dag_keys = {"description", "max_active_runs", "max_active_tasks", "dagrun_timeout", "end_date",
                      "is_paused_upon_creation", "doc_md"}
    for key in settings:
        if key not in known and key not in extra_dag_keys:
            close = difflib.get_close_matches(key, known + sorted(extra_dag_keys), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"segjobs DAG settings {path}: unknown key {key!r}{hint}; the keys are the "
                             f"parameters of segjobs_dag in conf/airflow/segjobs_airflow.py")
    if "dagrun_timeout" in settings:
        settings["dagrun_timeout"] = timedelta(seconds=_seconds(path, settings["dagrun_timeout"]))
    settings.setdefault("dag_id", dag_id)
    return segjobs_dag(**settings)


def _application(dag_id: str, home: str | None, job: str) -> str:
    if not home:
        raise ValueError(f"segjobs_dag({dag_id!r}): give segjobs_home (the directory holding jobs/{job}.py) "
                         f"or {job}_application")
    return f"{home.rstrip('/')}/jobs/{job}.py"


def _check_args(dag_id: str, name: str, args: Sequence[str]) -> None:
    if isinstance(args, str):
        raise ValueError(f"segjobs_dag({dag_id!r}): {name} must be a list of arguments, got the string {args!r}")
    for arg in args:
        option = str(arg).split("=", 1)[0]
        if option in OWNED_OPTIONS:
            raise ValueError(f"segjobs_dag({dag_id!r}): {name} contains {option}, which the DAG sets itself: "
                             f"{OWNED_OPTIONS[option]}")


def _seconds(path: Path, value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"segjobs DAG settings {path}: dagrun_timeout is in seconds (a number), got {value!r}")
