"""The Airflow DAGs of conf/airflow, loaded and run by a real Airflow 3 (``make airflow-test``).

This module runs in Airflow's own virtualenv (.venv-airflow: Airflow and the Apache Spark provider, no
segjobs). The DAG's SparkSubmitOperator tasks call the project's spark-submit (pyspark in .venv) in
``local[2]``, and segjobs runs in that Spark driver. Everything segjobs-side that the test needs (generating
the log dir, the reference runs, reading the Delta ledger) is a subprocess of the project's interpreter.

* ``DagBag`` loads conf/airflow, with its committed settings file, without an import error;
* the factory refuses options the DAG owns and unknown settings, naming them;
* ``dag.test()`` runs the nightly DAG for two successive nights (a backfill of two intervals) on a generated
  log dir: after each night, every file of the log dir and its work dir equals what
  ``python -m jobs retain ...`` then ``python -m jobs compact ...`` at the same ``--now`` make of a copy of
  the same input; the reports are keyed by run and the ledger rows by the interval's end; a rerun of the
  second night changes nothing.

In the main suite (no Airflow installed) the module is skipped with that reason; ``make airflow-test`` sets
SEGJOBS_REQUIRE_AIRFLOW=1, which turns a missing Airflow into an error instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.ops.nights import DEDUPE_BUFFER_BYTES, NIGHTS, TOPICS_TOML, differences, generate, job_args, snapshot

if importlib.util.find_spec("airflow") is None:
    if os.environ.get("SEGJOBS_REQUIRE_AIRFLOW"):
        raise ImportError(f"Apache Airflow is not importable by {sys.executable}, but SEGJOBS_REQUIRE_AIRFLOW is "
                          f"set: run `make airflow-test`, which installs it into .venv-airflow")
    pytest.skip("Apache Airflow is not installed in this environment: `make airflow-test` runs this module in "
                ".venv-airflow", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "conf" / "airflow"
#: The project's interpreter: segjobs, pyspark and its spark-submit live beside it.
PROJECT_PYTHON = Path(os.environ.get("SEGJOBS_PROJECT_PYTHON", REPO / ".venv" / "bin" / "python"))
SPARK_SUBMIT = PROJECT_PYTHON.with_name("spark-submit")
CONN_ID = "spark_segjobs_test"


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    """A fresh Airflow home with its SQLite metadata DB; the environment is set before Airflow is imported,
    since Airflow reads its configuration at import."""
    if "airflow" in sys.modules:
        pytest.fail("airflow was imported before its test configuration was set")
    for path in (PROJECT_PYTHON, SPARK_SUBMIT):
        if not path.exists():
            pytest.fail(f"{path} not found: `make venv` creates the project's .venv (SEGJOBS_PROJECT_PYTHON "
                        f"names another interpreter)")
    home = tmp_path_factory.mktemp("airflow-home")
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        # The Spark connection: its host is the master spark-submit gets.
        f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    })
    os.environ.pop("SEGJOBS_DAG_SETTINGS", None)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                   text=True, timeout=300)
    return home


def _dagbag():
    """The DAGs folder as Airflow 3's DAG processor loads it: a bundle whose root is on sys.path."""
    from airflow.dag_processing.dagbag import BundleDagBag

    return BundleDagBag(dag_folder=str(DAGS), bundle_path=DAGS, bundle_name="dags-folder")


def test_the_dagbag_loads_the_committed_dags_without_import_errors(airflow_home) -> None:
    bag = _dagbag()
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"segjobs_nightly"}
    dag = bag.get_dag("segjobs_nightly")
    assert dag.max_active_runs == 1
    retain, compact = dag.get_task("retain"), dag.get_task("compact")
    assert retain.downstream_task_ids == {"compact"} and not retain.upstream_task_ids  # retention first
    assert retain.application == "/opt/segjobs/jobs/retain.py"
    assert compact.application == "/opt/segjobs/jobs/compact.py"
    for task in (retain, compact):
        args = task.application_args
        assert "data_interval_end" in args[args.index("--now") + 1]
        assert args[args.index("--report") + 1].endswith("/{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}-"
                                                         "{{ ti.try_number }}.json")
        assert task.depends_on_past and task.wait_for_downstream


def _factory():
    """conf/airflow/segjobs_airflow.py, imported as a DAG file imports it."""
    sys.path.insert(0, str(DAGS))
    try:
        import segjobs_airflow
    finally:
        sys.path.remove(str(DAGS))
    return segjobs_airflow


def test_the_factory_refuses_what_the_dag_owns_and_unknown_settings(airflow_home, tmp_path) -> None:
    segjobs_airflow = _factory()
    with pytest.raises(ValueError, match="compact_args contains --now, which the DAG sets itself"):
        segjobs_airflow.segjobs_dag("x", log_dir="/logs", compact_args=["--now", "2026-01-01"])
    with pytest.raises(ValueError, match="sets entry 'orders' is not TOPIC_GLOB:KEY=VALUE"):
        segjobs_airflow.segjobs_dag("x", log_dir="/logs", sets=["orders"])
    settings = tmp_path / "s.toml"
    settings.write_text('log_dir = "/logs"\nledgr = "/ledger"\n')
    with pytest.raises(ValueError, match=r"s\.toml: unknown key 'ledgr' \(did you mean 'ledger'\?\)"):
        segjobs_airflow.dag_from_settings(settings, "x")
    with pytest.raises(FileNotFoundError, match="SEGJOBS_DAG_SETTINGS"):
        segjobs_airflow.dag_from_settings(tmp_path / "absent.toml", "x")


def test_table_tasks_run_before_retention(airflow_home) -> None:
    """With ``tables``, a ``table_<topic>`` task per topic submits jobs/table.py for it, upstream of retain."""
    segjobs_airflow = _factory()
    dag = segjobs_airflow.segjobs_dag("t", log_dir="/logs", segjobs_home="/opt/segjobs",
                                      tables={"orders": "s3://lake/orders_latest"},
                                      table_args=["--writer", "deltalake"])
    table = dag.get_task("table_orders")
    assert table.application == "/opt/segjobs/jobs/table.py"
    assert table.application_args == ["--log-dir", "/logs", "--topic", "orders", "--table", "s3://lake/orders_latest",
                                      "--writer", "deltalake"]
    assert table.downstream_task_ids == {"retain"}
    assert dag.get_task("retain").downstream_task_ids == {"compact"}
    with pytest.raises(ValueError, match="table_args contains --topic, which the DAG sets itself"):
        segjobs_airflow.segjobs_dag("x", log_dir="/logs", tables={"a": "/t"}, table_args=["--topic", "b"])
    with pytest.raises(ValueError, match="tables entry 'a b'"):
        segjobs_airflow.segjobs_dag("x", log_dir="/logs", tables={"a b": "/t"})


def _cli(*argv: str) -> None:
    """``python -m jobs ARGV`` with the project's interpreter, as a user types it."""
    env = dict(os.environ, PYSPARK_PYTHON=str(PROJECT_PYTHON), PYSPARK_DRIVER_PYTHON=str(PROJECT_PYTHON),
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([str(PROJECT_PYTHON), "-m", "jobs", *argv, "--master", "local[2]", "--quiet"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (argv, proc.stdout[-3000:], proc.stderr[-5000:])


def _ledger_rows(ledger: Path) -> list[dict]:
    # os._exit after the rows are out: twice in a loaded CI-like run, this reader (not the job, which writes
    # the ledger) aborted in interpreter teardown with "terminate called without an active exception" after
    # printing every row; the teardown is not what the test is about.
    code = ("import json, os, sys, deltalake; t = deltalake.DeltaTable(sys.argv[1]).to_pyarrow_table("
            "columns=['run_id', 'command', 'now_ms', 'topic', 'partition']); print(json.dumps(t.to_pylist()), "
            "flush=True); os._exit(0)")
    proc = subprocess.run([str(PROJECT_PYTHON), "-c", code, str(ledger)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, ("reading the ledger failed", proc.returncode, proc.stderr[-5000:])
    return json.loads(proc.stdout)


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def test_nightly_dag_runs_equal_the_cli_night_after_night(airflow_home, tmp_path, monkeypatch) -> None:
    import pendulum
    from airflow.utils.state import DagRunState

    logs, reference = tmp_path / "logs", tmp_path / "reference" / "logs"
    generate(PROJECT_PYTHON, logs)
    shutil.copytree(logs, reference)
    config = tmp_path / "topics.toml"
    config.write_text(TOPICS_TOML)
    reports, ledger = tmp_path / "reports", tmp_path / "ledger"
    settings = tmp_path / "segjobs_nightly.toml"
    # The same factory settings a user writes, pointed at the project's checkout and spark-submit.
    settings.write_text("\n".join([
        f'log_dir = "{logs}"', f'config = "{config}"', f'segjobs_home = "{REPO}"', f'conn_id = "{CONN_ID}"',
        'start_date = "2023-11-01"', f'report_dir = "{reports}"', f'ledger = "{ledger}"',
        f'spark_binary = "{SPARK_SUBMIT}"',
        # memory: auto would clean night 1's changelog in one external-sort run instead of a partial pass
        f'compact_args = ["--dedupe-buffer-bytes", "{DEDUPE_BUFFER_BYTES}", "--strategy", "memory"]',
        f'properties_file = "{REPO}/conf/spark-defaults.conf"',
        '[spark_conf]',
        f'"spark.driver.extraJavaOptions" = "-Dlog4j2.configurationFile=file:{REPO}/conf/log4j2.properties"',
        '[env_vars]', f'PYSPARK_PYTHON = "{PROJECT_PYTHON}"', f'PYSPARK_DRIVER_PYTHON = "{PROJECT_PYTHON}"',
        'SPARK_LOCAL_IP = "127.0.0.1"', ""]))
    # Set while Airflow runs too: dag.test() parses the DAGs folder again to store the DAG it runs.
    monkeypatch.setenv("SEGJOBS_DAG_SETTINGS", str(settings))
    bag = _dagbag()
    assert bag.import_errors == {}
    dag = bag.get_dag("segjobs_nightly")

    before = snapshot(logs)
    run_ids = {}
    for now in NIGHTS[:2]:
        # dag.test runs the DAG for one logical date; the cron timetable's data interval ends at it.
        run = dag.test(logical_date=pendulum.parse(now))
        assert run.state == DagRunState.SUCCESS, f"night {now}: {run.state}"
        assert run.data_interval_end == pendulum.parse(now)
        run_ids[now] = run.run_id
        for command in ("retain", "compact"):
            _cli(*job_args(command, reference, config, now))
        after = snapshot(logs)
        assert differences(after, snapshot(reference)) == [], f"night {now}: the DAG's run differs from the CLI's"
        assert differences(after, before), f"night {now} changed nothing: the comparison would prove nothing"
        before = after

    # Reports: one per task, under the Airflow run's id, acting at the interval's end.
    segjobs_runs = {}
    for now, run_id in run_ids.items():
        for command in ("retain", "compact"):
            doc = json.loads((reports / "segjobs_nightly" / run_id / f"{command}-1.json").read_text())
            assert (doc["command"], doc["now_ms"], doc["exit_code"]) == (command, _ms(now), 0)
            segjobs_runs[doc["run_id"]] = (command, _ms(now))
    # Ledger: every row carries its interval's end and the segjobs run id its report names.
    rows = _ledger_rows(ledger)
    assert {(r["command"], r["now_ms"]) for r in rows} == set(segjobs_runs.values())
    assert all(segjobs_runs[r["run_id"]] == (r["command"], r["now_ms"]) for r in rows)
    assert len(rows) == 2 * 2 * 6  # nights x jobs x partitions

    # Rerunning the second interval (a cleared run, a retry, a repeated backfill) changes nothing.
    run = dag.test(logical_date=pendulum.parse(NIGHTS[1]))
    assert run.state == DagRunState.SUCCESS
    assert differences(snapshot(logs), before) == []


def test_a_manual_run_without_a_logical_date_acts_at_its_trigger_time(airflow_home, tmp_path, monkeypatch) -> None:
    """In Airflow 3 a manual run may have no logical date, and then no data interval in its template context:
    the DAG's --now falls back to the time the run was triggered for. This test is about the arguments the
    DAG renders, not about Spark: its spark-submit is ``true``, and the rendered arguments are read back from
    Airflow's metadata DB."""
    import pendulum
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.state import DagRunState

    settings = tmp_path / "probe.toml"
    settings.write_text(f'dag_id = "segjobs_probe"\nlog_dir = "{tmp_path}/logs"\nsegjobs_home = "{REPO}"\n'
                        f'conn_id = "{CONN_ID}"\nspark_binary = "true"\nreport_dir = "{tmp_path}/reports"\n')
    monkeypatch.setenv("SEGJOBS_DAG_SETTINGS", str(settings))
    bag = _dagbag()
    assert bag.import_errors == {}
    run = bag.get_dag("segjobs_probe").test(logical_date=None)
    assert run.state == DagRunState.SUCCESS
    assert run.logical_date is None and run.data_interval_end is None
    for ti in run.get_task_instances():
        args = RenderedTaskInstanceFields.get_templated_fields(ti)["application_args"]
        assert pendulum.parse(args[args.index("--now") + 1]) == run.run_after, ti.task_id
        assert args[args.index("--report") + 1] == f"{tmp_path}/reports/segjobs_probe/{run.run_id}/{ti.task_id}-1.json"
