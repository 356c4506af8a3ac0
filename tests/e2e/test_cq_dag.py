"""The continuous-query DAG under `airflow dags test`: spark-submit maintains Q7 from landed files, GX checks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cq_pipeline_cases import build_case, check_files_run, files_job, land
from cq_reference import EXAMPLES

pytestmark = pytest.mark.slow  # airflow + spark-submit subprocesses

pytest.importorskip("airflow")
pytest.importorskip("great_expectations")

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=900, cwd=REPO)


def test_cq_dag_maintains_and_checks_q7(tmp_path: Path) -> None:
    case = build_case(tmp_path / "tpch", orders=200, seed=5)
    (tmp_path / "q7.sql").write_text(case.sql)
    land(case, tmp_path, files=2)
    cfg = files_job(tmp_path)
    cfg["query"] = {"sql_file": "q7.sql", "ddl_file": str(EXAMPLES / "tpch_schema.sql")}
    del cfg["spark"]  # the master comes from the Airflow connection
    job = tmp_path / "q7-job.yaml"
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    home = tmp_path / "airflow"
    home.mkdir()
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW_CONN_SSBJ_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "SSBJ_PYTHON": sys.executable,
            "SSBJ_CQ_JOBS": str(job),
        }
    )
    res = _airflow(env, "db", "migrate")
    assert res.returncode == 0, res.stderr[-3000:]
    res = _airflow(env, "dags", "test", "ssbj_cq_maintain", "2026-11-01")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    assert "checks passed" in out
    check_files_run(case, tmp_path)
