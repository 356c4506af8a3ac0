"""Airflow 3 DAG for continuous queries: per job file, a catch-up run of the maintained table, then its checks.

Each run submits ``ssbj run --config <cq job>`` with spark-submit (an ``available-now``
job reads the changes that arrived since the last run and stops; the job's checkpoint makes
every run continue exactly where the last one ended), then runs the Great Expectations suite
of the maintained result table (:mod:`ssbj.pipeline.cq_quality`: group key unique and not
NULL, counts non-negative, as many rows as the engine's answer) and fails the task if a
check fails.

Configuration (no secrets here):

* ``SSBJ_CQ_JOBS``: continuous-query job files (YAML with a ``query`` section), separated by
  ``:``; default: ``dags/cq_jobs/*.yaml``.
* connection ``ssbj_spark`` (``AIRFLOW_CONN_SSBJ_SPARK``): the Spark master for spark-submit.
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


def cq_job_files() -> list[str]:
    """Return the configured continuous-query job files."""
    env = os.environ.get("SSBJ_CQ_JOBS")
    files = env.split(":") if env else sorted(glob.glob(str(HERE / "cq_jobs" / "*.yaml")))
    return [f for f in files if f]


@dag(
    dag_id="ssbj_cq_maintain", schedule="@hourly", catchup=False, max_active_runs=1, tags=["ssbj", "cq"], doc_md=__doc__
)
def ssbj_cq_maintain() -> None:
    """Per job file: maintain (spark-submit ssbj run), then check the result table."""

    @task
    def jobs() -> list[str]:
        files = cq_job_files()
        if not files:
            raise AirflowFailException("no continuous-query job files: set SSBJ_CQ_JOBS or put YAML in dags/cq_jobs/")
        return files

    @task
    def submit_args(config: str) -> list[str]:
        return ["run", "--config", config, "--quiet"]

    configs = jobs()
    import ssbj.cli

    maintain = SparkSubmitOperator.partial(
        task_id="maintain",
        conn_id=SPARK_CONN,
        application=ssbj.cli.__file__,
        name="ssbj-cq",
        env_vars={"PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON},
        conf={"spark.pyspark.python": PYTHON, "spark.ui.enabled": "false"},
    ).expand(application_args=submit_args.expand(config=configs))

    @task(map_index_template="{{ task.op_kwargs['config'] }}")
    def check(config: str) -> dict[str, Any]:
        from ssbj.config_cq import load_cq_config
        from ssbj.pipeline.cq_quality import check_result

        result = check_result(load_cq_config(config))
        print(result.summary())
        if not result.success:
            raise AirflowFailException(result.summary())
        return {"config": config, "checks": len(result.checks)}

    maintain >> check.expand(config=configs)


ssbj_cq_maintain()
