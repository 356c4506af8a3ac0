"""What the Airflow DAGs run, without Airflow: job lists, spark-submit settings, checks and the gate.

The DAG files (``dags/``) are thin: they wire these functions into tasks. Everything here is
plain Python, so the command lines and the dispatch by job kind are tested without Airflow
or Spark.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ssbj.config import MultiWayJobConfig, load_any_config
from ssbj.config_cq import is_cq_file, load_cq_config
from ssbj.errors import ConfigError
from ssbj.pipeline.cq_quality import check_result
from ssbj.pipeline.multiway_quality import check_multiway_run
from ssbj.pipeline.quality import CheckResult, GateOutcome, check_run, gate_run

JobKind = Literal["single", "multiway", "cq"]


def job_files(env_var: str, default_dir: Path) -> list[str]:
    """Return the job files named by ``env_var`` (``:``-separated), else ``default_dir/*.yaml`` in name order."""
    env = os.environ.get(env_var)
    files = env.split(":") if env else sorted(glob.glob(str(default_dir / "*.yaml")))
    return [f for f in files if f]


def job_kind(config: str | Path) -> JobKind:
    """Which pipeline a job file runs in: a continuous query, a multi-way (SQL) job or a single-table job."""
    if is_cq_file(config):
        return "cq"
    return "multiway" if isinstance(load_any_config(config), MultiWayJobConfig) else "single"


def submit_settings(python: str) -> dict[str, dict[str, str]]:
    """``env_vars`` and ``conf`` for spark-submit: driver and workers run ``python`` (it has ssbj)."""
    return {
        "env_vars": {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python},
        "conf": {"spark.pyspark.python": python, "spark.ui.enabled": "false"},
    }


def run_args(configs: Sequence[str], run_id: str | None = None, checkpoint: str | None = None) -> list[str]:
    """Return the ``ssbj run`` arguments for one job file, or several in one application (``checkpoint`` required)."""
    if not configs:
        raise ConfigError("run_args: no job files")
    if len(configs) > 1 and not checkpoint:
        raise ConfigError("run_args: several job files share one application and need its checkpoint directory")
    args = ["run", "--config", *configs]
    if checkpoint:
        args += ["--checkpoint", checkpoint]
    if run_id is not None:
        args += ["--run-id", run_id]
    return [*args, "--quiet"]


def check_job(config: str | Path, run_id: str | None) -> CheckResult:
    """Run a job's quality suite: a run's rows (single-table, multi-way) or a maintained table (cq)."""
    if is_cq_file(config):
        return check_result(load_cq_config(config))
    if run_id is None:
        raise ConfigError(f"{config}: checking an enrichment run needs its run id")
    cfg = load_any_config(config)
    if isinstance(cfg, MultiWayJobConfig):
        return check_multiway_run(cfg, run_id)
    return check_run(cfg, run_id)


def gate_job(config: str | Path, run_id: str) -> GateOutcome:
    """Publish a checked run's rows, or quarantine them (enrichment jobs; a cq table has no runs)."""
    if is_cq_file(config):
        raise ConfigError(f"{config}: a continuous query's table is maintained in place; it has no run to publish")
    return gate_run(load_any_config(config), run_id)
