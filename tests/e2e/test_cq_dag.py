"""The continuous-query DAG under `airflow dags test`: spark-submit maintains Q7 from landed files, GX checks it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from cq_pipeline_cases import build_case, check_files_run, files_job, land
from cq_reference import EXAMPLES

from ssbj.testing.airflow import airflow_home, run_airflow

pytestmark = pytest.mark.slow  # airflow + spark-submit subprocesses

pytest.importorskip("airflow")
pytest.importorskip("great_expectations")

REPO = Path(__file__).resolve().parents[2]


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_airflow(env, *args, cwd=REPO)


def test_cq_dag_maintains_and_checks_q7(tmp_path: Path) -> None:
    case = build_case(tmp_path / "tpch", orders=200, seed=5)
    (tmp_path / "q7.sql").write_text(case.sql)
    land(case, tmp_path, files=2)
    cfg = files_job(tmp_path)
    cfg["query"] = {"sql_file": "q7.sql", "ddl_file": str(EXAMPLES / "tpch_schema.sql")}
    del cfg["spark"]  # the master comes from the Airflow connection
    job = tmp_path / "q7-job.yaml"
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = airflow_home(
        tmp_path / "airflow",
        REPO / "dags",
        {
            "SSBJ_CQ_JOBS": str(job),
        },
    )
    res = _airflow(env, "dags", "test", "ssbj_cq_maintain", "2026-11-01")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    assert "checks passed" in out
    check_files_run(case, tmp_path)
