"""Airflow 3 DAG for multi-way ssbj jobs (a SQL query over a stream and several master tables).

Per job file: an available-now run through spark-submit (``ssbj run --config JOB --run-id``),
the quality suite generated from the job's query (Great Expectations, on the run's rows in
the warehouse), then publish or quarantine, as ``ssbj_enrich`` does for single-table jobs
(both DAGs take either kind of job file; they differ in where they look for them).

Configuration (no secrets here; everything comes from Airflow connections or the environment):

* ``SSBJ_MULTIWAY_JOBS``: multi-way job files (YAML with ``sql`` or ``sql_file``), separated by
  ``:``; default: ``dags/multiway_jobs/*.yaml``.
* the connections the job files name (``connection_id`` of the database, sinks and broker);
  ``ssbj_spark`` and ``SSBJ_PYTHON`` as in every ssbj DAG (dags/ssbj_common.py).
"""

from __future__ import annotations

from airflow.sdk import dag
from ssbj_common import enrich_tasks


@dag(
    dag_id="ssbj_multiway_enrich",
    schedule="@hourly",
    catchup=False,
    max_active_runs=1,
    tags=["ssbj", "multiway"],
    doc_md=__doc__,
)
def ssbj_multiway_enrich() -> None:
    """Per multi-way job file: an available-now catch-up run, the quality checks, then publish or quarantine."""
    enrich_tasks(jobs_env="SSBJ_MULTIWAY_JOBS", jobs_dir="multiway_jobs", app_name="ssbj-multiway-enrich")


ssbj_multiway_enrich()
