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
* ``ssbj_spark`` and ``SSBJ_PYTHON`` as in every ssbj DAG (dags/ssbj_common.py).
"""

from __future__ import annotations

from airflow.sdk import dag
from ssbj_common import enrich_tasks


@dag(dag_id="ssbj_shared_enrich", schedule="@hourly", catchup=False, max_active_runs=1, tags=["ssbj"], doc_md=__doc__)
def ssbj_shared_enrich() -> None:
    """One available-now application for every job file; then per job the checks and publish or quarantine."""
    enrich_tasks(
        jobs_env="SSBJ_SHARED_JOBS",
        jobs_dir="shared_jobs",
        app_name="ssbj-shared-enrich",
        checkpoint_env="SSBJ_SHARED_CHECKPOINT",
    )


ssbj_shared_enrich()
