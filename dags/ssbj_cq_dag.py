"""Airflow 3 DAG for continuous queries: per job file, a catch-up run of the maintained table, then its checks.

Each run submits ``ssbj run --config <cq job>`` with spark-submit (an ``available-now``
job reads the changes that arrived since the last run and stops; the job's checkpoint makes
every run continue exactly where the last one ended), then runs the Great Expectations suite
of the maintained result table (:mod:`ssbj.pipeline.cq_quality`: group key unique and not
NULL, counts non-negative, as many rows as the engine's answer) and fails the task if a
check fails (the table is maintained in place: there is no run to publish or quarantine).

Configuration (no secrets here):

* ``SSBJ_CQ_JOBS``: continuous-query job files (YAML with a ``query`` section), separated by
  ``:``; default: ``dags/cq_jobs/*.yaml``.
* ``ssbj_spark`` and ``SSBJ_PYTHON`` as in every ssbj DAG (dags/ssbj_common.py).
"""

from __future__ import annotations

from airflow.sdk import dag
from ssbj_common import enrich_tasks


@dag(
    dag_id="ssbj_cq_maintain", schedule="@hourly", catchup=False, max_active_runs=1, tags=["ssbj", "cq"], doc_md=__doc__
)
def ssbj_cq_maintain() -> None:
    """Per job file: maintain (spark-submit ssbj run), then check the result table."""
    enrich_tasks(jobs_env="SSBJ_CQ_JOBS", jobs_dir="cq_jobs", app_name="ssbj-cq", gate=False)


ssbj_cq_maintain()
