"""The shared-application DAG under `airflow dags test`: one spark-submit for two jobs, then per job check and publish.

SQLite Airflow metadata, SQLite master and warehouse, Spark local mode: no other service.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml
from multijob_cases import expected, job_config, land, write_masters

from ssbj.testing.airflow import airflow_home, run_airflow

pytestmark = pytest.mark.slow  # airflow db migrate + spark-submit: a minute or more

pytest.importorskip("airflow")
pytest.importorskip("great_expectations")

REPO = Path(__file__).resolve().parents[2]


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_airflow(env, *args, cwd=REPO)


def _job_file(root: Path, name: str) -> Path:
    wh = f"sqlite:///{root / 'wh.db'}"
    cfg = job_config(
        root,
        name,
        sink={"kind": "database", "url": wh, "table": f"{name}_enriched"},
        dead_letter={"kind": "database", "url": wh, "table": f"{name}_dead"},
    ).model_dump(mode="json", by_alias=True)
    cfg["quality"] = {"source_id": "oid" if name == "a" else "cid"}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_shared_dag_runs_two_jobs_in_one_application_and_publishes_each(tmp_path: Path) -> None:
    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(3)]
    clicks = [land(tmp_path, "clicks", f, 100) for f in range(2)]
    files = [_job_file(tmp_path, n) for n in "ac"]
    env = airflow_home(
        tmp_path / "airflow",
        REPO / "dags",
        {
            "SSBJ_SHARED_JOBS": ":".join(str(f) for f in files),
            "SSBJ_SHARED_CHECKPOINT": str(tmp_path / "app"),
        },
    )
    res = _airflow(env, "dags", "test", "ssbj_shared_enrich", "2026-11-01T01:00:00+00:00")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-3000:]
    with sqlite3.connect(tmp_path / "wh.db") as db:
        published = {n: db.execute(f"SELECT COUNT(*) FROM {n}_enriched_published").fetchone()[0] for n in "ac"}  # noqa: S608
        audit = sorted(db.execute("SELECT job, status, rows_failing_checks FROM ssbj_audit").fetchall())
    assert published["a"] == sum(expected(tmp_path, "a", orders)[0].values())
    assert published["c"] == sum(expected(tmp_path, "c", clicks)[0].values())
    assert audit == [("a", "published", 0), ("c", "published", 0)]
