"""The task graph every ssbj DAG shares: spark-submit ``ssbj run``, then per job check -> publish or quarantine.

This file defines no DAG; the DAG files call :func:`enrich_tasks` inside their ``@dag``
function. What the tasks run lives in :mod:`ssbj.pipeline.orchestration` (plain Python,
tested without Airflow).

Configuration common to every DAG (no secrets here; everything comes from Airflow
connections or the environment):

* connection ``ssbj_spark`` (``AIRFLOW_CONN_SSBJ_SPARK``): the Spark master for spark-submit,
  e.g. ``{"conn_type": "spark", "host": "local[2]"}`` or ``spark://head:7077``.
* ``SSBJ_PYTHON``: the Python that has ssbj installed (default: the one running Airflow).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowFailException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import task

import ssbj.cli
from ssbj.pipeline.orchestration import check_job, gate_job, job_files, run_args, submit_settings

HERE = Path(__file__).resolve().parent
SPARK_CONN = "ssbj_spark"
PYTHON = os.environ.get("SSBJ_PYTHON", sys.executable)


def enrich_tasks(
    *, jobs_env: str, jobs_dir: str, app_name: str, checkpoint_env: str | None = None, gate: bool = True
) -> None:
    """Add the tasks to the DAG being defined.

    ``checkpoint_env`` set: every job file runs in one application (shared scans) whose
    checkpoint directory that variable names; else one spark-submit per job file. ``gate``:
    publish or quarantine each checked run (enrichment jobs); without it (continuous queries,
    whose table is maintained in place) a failed check fails the task.
    """

    @task
    def jobs() -> list[str]:
        files = job_files(jobs_env, HERE / jobs_dir)
        if not files:
            raise AirflowFailException(f"no job files: set {jobs_env} or put YAML files in dags/{jobs_dir}/")
        return files

    configs = jobs()
    submit = {"conn_id": SPARK_CONN, "application": ssbj.cli.__file__, "name": app_name, **submit_settings(PYTHON)}
    run: Any
    if checkpoint_env is not None:

        @task
        def app_args(configs: list[str], run_id: str | None = None) -> list[str]:
            checkpoint = os.environ.get(checkpoint_env)
            if not checkpoint:
                raise AirflowFailException(f"set {checkpoint_env}: the shared application's checkpoint directory")
            return run_args(configs, str(run_id), checkpoint)

        run = SparkSubmitOperator(task_id="enrich", application_args=app_args(configs), **submit)
    else:

        @task
        def job_args(config: str, run_id: str | None = None) -> list[str]:
            return run_args([config], str(run_id) if gate else None)

        run = SparkSubmitOperator.partial(task_id="enrich", **submit).expand(
            application_args=job_args.expand(config=configs)
        )

    @task(map_index_template="{{ task.op_kwargs['config'] }}")
    def validate(config: str, run_id: str | None = None) -> dict[str, Any]:
        result = check_job(config, str(run_id) if gate else None)
        print(result.summary())
        if not gate and not result.success:
            raise AirflowFailException(result.summary())
        return {"config": config, "success": result.success, "failing_rows": result.failing_rows}

    checked = validate.expand(config=configs)
    run >> checked
    if not gate:
        return

    @task
    def publish_or_quarantine(outcome: dict[str, Any], run_id: str | None = None) -> int:
        outcome_ = gate_job(outcome["config"], str(run_id))
        if not outcome_.published:
            raise AirflowFailException(outcome_.message)
        print(outcome_.message)
        return outcome_.rows

    publish_or_quarantine.expand(outcome=checked)
