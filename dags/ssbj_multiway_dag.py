"""Airflow 3 DAG for multi-way ssbj jobs (a SQL query over a stream and several master tables).

Per job file: an available-now run through spark-submit (``ssbj run --config JOB --run-id``),
the quality suite generated from the job's query (Great Expectations, on the run's rows in
the warehouse), then publish or quarantine, as ``ssbj_enrich`` does for single-table jobs.

Configuration (no secrets here; everything comes from Airflow connections or the environment):

* ``SSBJ_MULTIWAY_JOBS``: multi-way job files (YAML with ``sql`` or ``sql_file``), separated by
  ``:``; default: ``dags/multiway_jobs/*.yaml``.
* connection ``ssbj_spark`` (``AIRFLOW_CONN_SSBJ_SPARK``): the Spark master for spark-submit.
* the connections the job files name (``connection_id`` of the database, sinks and broker).
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
from airflow.sdk import dag, task

HERE = Path(__file__).resolve().parent
SPARK_CONN = "ssbj_spark"
PYTHON = os.environ.get("SSBJ_PYTHON", sys.executable)


def multiway_job_files() -> list[str]:
    """Return the configured multi-way job files."""
    env = os.environ.get("SSBJ_MULTIWAY_JOBS")
    files = env.split(":") if env else sorted(glob.glob(str(HERE / "multiway_jobs" / "*.yaml")))
    return [f for f in files if f]


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

    @task
    def jobs() -> list[str]:
        files = multiway_job_files()
        if not files:
            raise AirflowFailException("no job files: set SSBJ_MULTIWAY_JOBS or put YAML files in dags/multiway_jobs/")
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
        name="ssbj-multiway-enrich",
        env_vars={"PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON},
        conf={"spark.pyspark.python": PYTHON, "spark.ui.enabled": "false"},
    ).expand(application_args=submit_args.expand(config=configs))

    @task(map_index_template="{{ task.op_kwargs['config'] }}")
    def validate(config: str, run_id: str | None = None) -> dict[str, Any]:
        from ssbj.config import MultiWayJobConfig, load_any_config
        from ssbj.pipeline.multiway_quality import check_multiway_run

        cfg = load_any_config(config)
        if not isinstance(cfg, MultiWayJobConfig):
            raise AirflowFailException(f"{config} is not a multi-way job (no sql or sql_file): use ssbj_enrich")
        result = check_multiway_run(cfg, str(run_id))
        print(result.summary())
        return {"config": config, "success": result.success, "failing_rows": result.failing_rows}

    @task
    def publish_or_quarantine(outcome: dict[str, Any], run_id: str | None = None) -> int:
        from ssbj.config import load_any_config
        from ssbj.pipeline.quality import gate_run

        gate = gate_run(load_any_config(outcome["config"]), str(run_id))
        if not gate.published:
            raise AirflowFailException(gate.message)
        print(gate.message)
        return gate.rows

    checked = validate.expand(config=configs)
    enrich >> checked
    publish_or_quarantine.expand(outcome=checked)


ssbj_multiway_enrich()
