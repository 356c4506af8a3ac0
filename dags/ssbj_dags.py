"""Airflow 3 DAGs for ssbj: set up the warehouse, then enrich -> validate -> publish or quarantine.

Configuration (no secrets here; everything comes from Airflow connections or the environment):

* ``SSBJ_JOBS``: job files (YAML; single-table or multi-way), separated by ``:``; default:
  ``dags/jobs/*.yaml``.
* connection ``ssbj_warehouse`` (``AIRFLOW_CONN_SSBJ_WAREHOUSE``): the warehouse database the
  set-up DAG creates tables in (job files can name the same connection with ``connection_id``).
* connection ``ssbj_spark`` (``AIRFLOW_CONN_SSBJ_SPARK``): the Spark master for spark-submit,
  e.g. ``{"conn_type": "spark", "host": "local[2]"}`` or ``spark://head:7077``; a job file with
  ``join.placement: executors`` then runs its join sharded in that cluster's executors.
* ``SSBJ_PYTHON``: the Python that has ssbj installed (default: the one running Airflow).

The task graph every ssbj DAG shares is in dags/ssbj_common.py.
"""

from __future__ import annotations

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import dag, task
from ssbj_common import HERE, enrich_tasks

SQL_DIR = HERE.parent / "sql"
WAREHOUSE_CONN = "ssbj_warehouse"


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
    enrich_tasks(jobs_env="SSBJ_JOBS", jobs_dir="jobs", app_name="ssbj-enrich")


ssbj_setup()
ssbj_enrich()
