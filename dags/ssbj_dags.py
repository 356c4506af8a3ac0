"""Airflow 3 DAGs for ssbj: set up the warehouse, then enrich -> validate -> publish or quarantine.

Configuration (no secrets here; everything comes from Airflow connections or the environment):

* ``SSBJ_JOBS``: job files (YAML), separated by ``:``; default: ``dags/jobs/*.yaml``.
* connection ``ssbj_warehouse`` (``AIRFLOW_CONN_SSBJ_WAREHOUSE``): the warehouse database the
  set-up DAG creates tables in (job files can name the same connection with ``connection_id``).
* connection ``ssbj_spark`` (``AIRFLOW_CONN_SSBJ_SPARK``): the Spark master for spark-submit,
  e.g. ``{"conn_type": "spark", "host": "local[2]"}`` or ``spark://head:7077``; a job file with
  ``join.placement: executors`` then runs its join sharded in that cluster's executors.
* ``SSBJ_PYTHON``: the Python that has ssbj installed (default: the one running Airflow).
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowFailException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import dag, task

HERE = Path(__file__).resolve().parent
SQL_DIR = HERE.parent / "sql"
WAREHOUSE_CONN = "ssbj_warehouse"
SPARK_CONN = "ssbj_spark"
PYTHON = os.environ.get("SSBJ_PYTHON", sys.executable)


def job_files() -> list[str]:
    """Return the configured job files."""
    env = os.environ.get("SSBJ_JOBS")
    files = env.split(":") if env else sorted(glob.glob(str(HERE / "jobs" / "*.yaml")))
    return [f for f in files if f]


def _dialect() -> str:
    from airflow.sdk import BaseHook

    from ssbj.credentials import dialect_of_conn_type  # the one conn_type map (ssbj imported inside tasks)

    return dialect_of_conn_type(BaseHook.get_connection(WAREHOUSE_CONN).conn_type)


@dag(dag_id="ssbj_setup", schedule=None, catchup=False, tags=["ssbj"], doc_md=__doc__)
def ssbj_setup() -> None:
    """Create the demo warehouse tables from sql/<dialect>/demo.sql (idempotent: IF NOT EXISTS)."""

    @task
    def ddl() -> list[str]:
        from ssbj.warehouse import statements

        stmts = statements((SQL_DIR / _dialect() / "demo.sql").read_text())
        return [
            s.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1).replace(
                "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1
            )
            for s in stmts
        ]

    SQLExecuteQueryOperator(task_id="create_tables", conn_id=WAREHOUSE_CONN, sql=ddl(), split_statements=False)


@dag(dag_id="ssbj_enrich", schedule="@hourly", catchup=False, max_active_runs=1, tags=["ssbj"], doc_md=__doc__)
def ssbj_enrich() -> None:
    """Per job file: an available-now catch-up run, the quality checks, then publish or quarantine."""

    @task
    def jobs() -> list[str]:
        files = job_files()
        if not files:
            raise AirflowFailException("no job files: set SSBJ_JOBS or put YAML files in dags/jobs/")
        return files

    @task
    def submit_args(config: str, run_id: str | None = None) -> list[str]:
        return ["run", "--config", config, "--run-id", str(run_id), "--quiet"]

    configs = jobs()
    import ssbj.cli

    enrich = SparkSubmitOperator.partial(
        task_id="enrich",
        conn_id=SPARK_CONN,
        application=ssbj.cli.__file__,
        name="ssbj-enrich",
        env_vars={"PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON},
        conf={"spark.pyspark.python": PYTHON, "spark.ui.enabled": "false"},
    ).expand(application_args=submit_args.expand(config=configs))

    @task(map_index_template="{{ task.op_kwargs['config'] }}")
    def validate(config: str, run_id: str | None = None) -> dict[str, Any]:
        from ssbj.config import load_config
        from ssbj.pipeline.quality import check_run

        result = check_run(load_config(config), str(run_id))
        print(result.summary())
        return {"config": config, "success": result.success, "failing_rows": result.failing_rows}

    @task
    def publish_or_quarantine(outcome: dict[str, Any], run_id: str | None = None) -> int:
        from ssbj.config import load_config
        from ssbj.pipeline.quality import gate_run

        gate = gate_run(load_config(outcome["config"]), str(run_id))
        if not gate.published:
            raise AirflowFailException(gate.message)
        print(gate.message)
        return gate.rows

    checked = validate.expand(config=configs)
    enrich >> checked
    publish_or_quarantine.expand(outcome=checked)


ssbj_setup()
ssbj_enrich()
