"""Airflow 3 DAG: several enrichment jobs in one Spark application, then per job validate -> publish.

``ssbj_shared_enrich`` (hourly, no catch-up) submits one application,
``ssbj run --config A B ... --checkpoint DIR --run-id RUN``, that runs every job file on
shared scans and shared stream decoding (docs/shared.md); each job still writes its own
table, dead letters and audit row, so the quality gate then runs per job exactly as in
``ssbj_enrich`` (dags/ssbj_dags.py): ``ssbj check``'s suite, then publish or quarantine.

Configuration (no secrets here):

* ``SSBJ_SHARED_JOBS``: the job files (YAML), separated by ``:``; default ``dags/shared_jobs/*.yaml``.
  Adding or removing a file is picked up by the next run: the application switches at its
  first micro-batch, and removed jobs finish their waiting rows into their own tables.
* ``SSBJ_SHARED_CHECKPOINT``: the application's checkpoint directory (required; keep it
  when the list of jobs changes).
* connection ``ssbj_spark``: the Spark master for spark-submit; ``SSBJ_PYTHON``: the Python with ssbj.
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


def shared_job_files() -> list[str]:
    """Return the job files of the shared application."""
    env = os.environ.get("SSBJ_SHARED_JOBS")
    files = env.split(":") if env else sorted(glob.glob(str(HERE / "shared_jobs" / "*.yaml")))
    return [f for f in files if f]


@dag(dag_id="ssbj_shared_enrich", schedule="@hourly", catchup=False, max_active_runs=1, tags=["ssbj"], doc_md=__doc__)
def ssbj_shared_enrich() -> None:
    """One available-now application for every job file; then per job the checks and publish or quarantine."""

    @task
    def jobs() -> list[str]:
        files = shared_job_files()
        if not files:
            raise AirflowFailException("no job files: set SSBJ_SHARED_JOBS or put YAML files in dags/shared_jobs/")
        return files

    @task
    def submit_args(configs: list[str], run_id: str | None = None) -> list[str]:
        checkpoint = os.environ.get("SSBJ_SHARED_CHECKPOINT")
        if not checkpoint:
            raise AirflowFailException("set SSBJ_SHARED_CHECKPOINT: the shared application's checkpoint directory")
        return ["run", "--config", *configs, "--checkpoint", checkpoint, "--run-id", str(run_id), "--quiet"]

    configs = jobs()
    import ssbj.cli

    enrich = SparkSubmitOperator(
        task_id="enrich",
        conn_id=SPARK_CONN,
        application=ssbj.cli.__file__,
        name="ssbj-shared-enrich",
        env_vars={"PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON},
        conf={"spark.pyspark.python": PYTHON, "spark.ui.enabled": "false"},
        application_args=submit_args(configs),
    )

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


ssbj_shared_enrich()
