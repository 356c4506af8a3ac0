"""The shipped DAGs under `airflow dags test`: SQLite Airflow metadata, real MariaDB, Spark local mode.

Set-up creates the warehouse tables from sql/; the enrich DAG runs the job through spark-submit,
checks the run with the quality suite and publishes it; a corrupted delivery is quarantined.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from pipeline_reference import expected_join

from ssbj.pipeline.quickstart import write_demo
from ssbj.testing.airflow import airflow_home, run_airflow
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer

pytestmark = pytest.mark.slow  # spark-submit / ssbj run subprocesses: 20-60 s each

pytest.importorskip("airflow")
pytest.importorskip("great_expectations")

REPO = Path(__file__).resolve().parents[2]


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_airflow(env, *args, cwd=REPO)


@pytest.fixture()
def airflow_env(tmp_path: Path, mariadb: MariaDBServer) -> dict[str, str]:
    env = airflow_home(
        tmp_path / "airflow",
        REPO / "dags",
        {
            "AIRFLOW_CONN_SSBJ_WAREHOUSE": f"mysql://{USER}:{PASSWORD}@127.0.0.1:{mariadb.port}/{DATABASE}",
        },
    )
    return env


def _job(tmp_path: Path, mariadb: MariaDBServer) -> Path:
    """The demo job, with master data and warehouse in MariaDB through the Airflow connection."""
    job = write_demo(tmp_path / "demo", customers=3_000, orders=12_000, files=3, seed=8)
    cfg = yaml.safe_load(job.read_text())  # edited as data: a renamed section fails here, not silently
    for section in ("master", "sink", "dead_letter"):
        assert cfg[section].pop("url").startswith("sqlite:///")
        cfg[section]["connection_id"] = "ssbj_warehouse"
    text = yaml.safe_dump(cfg, sort_keys=False)
    job.write_text(text)
    assert "sqlite" not in text
    return job


def test_setup_enrich_validate_publish_and_quarantine(
    tmp_path: Path, mariadb: MariaDBServer, airflow_env: dict[str, str]
) -> None:
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:
        for t in (
            "orders_enriched",
            "orders_published",
            "orders_quarantine",
            "orders_dead_letters",
            "ssbj_audit",
            "customer",
        ):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
    job = _job(tmp_path, mariadb)
    env = dict(airflow_env, SSBJ_JOBS=str(job))

    res = _airflow(env, "dags", "test", "ssbj_setup", "2026-11-01")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tables = set(sa.inspect(engine).get_table_names())
    assert {"customer", "orders_enriched", "orders_published", "orders_quarantine", "ssbj_audit"} <= tables
    with sqlite3.connect(tmp_path / "demo" / "master.db") as db:
        customers = db.execute("SELECT c_custkey, c_name, c_segment, c_balance FROM customer").fetchall()
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO customer VALUES (:k, :n, :s, :b)"),
            [{"k": k, "n": n, "s": s, "b": b} for k, n, s, b in customers],
        )

    res = _airflow(env, "dags", "test", "ssbj_enrich", "2026-11-01T01:00:00+00:00")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-3000:]
    expected, _, _ = expected_join(tmp_path / "demo" / "landing", tmp_path / "demo" / "master.db")
    with engine.connect() as conn:
        (published,) = conn.execute(sa.text("SELECT COUNT(*) FROM orders_published")).one()
        audit = conn.execute(sa.text("SELECT run_id, status, rows_failing_checks FROM ssbj_audit")).all()
    assert published == sum(expected.values())
    assert [(s, f) for _, s, f in audit] == [("published", 0)]

    bad = [
        json.dumps(
            {"order_id": 900_000 + i, "customer_id": 1 + i, "amount": 12_345.0, "placed_at": "2026-11-03T00:00:00"}
        )
        for i in range(25)
    ]
    (tmp_path / "demo" / "landing" / "orders-corrupt.jsonl").write_text("\n".join(bad) + "\n")
    res = _airflow(env, "dags", "test", "ssbj_enrich", "2026-11-01T02:00:00+00:00")
    out = res.stdout + res.stderr
    assert "rows quarantined in orders_quarantine" in out, out[-5000:]
    with engine.connect() as conn:
        (quarantined,) = conn.execute(sa.text("SELECT COUNT(*) FROM orders_quarantine")).one()
        (published_after,) = conn.execute(sa.text("SELECT COUNT(*) FROM orders_published")).one()
        statuses = sorted(r[0] for r in conn.execute(sa.text("SELECT status FROM ssbj_audit")))
    assert quarantined == 25 and published_after == published
    assert statuses == ["published", "quarantined"]
    engine.dispose()


def _json_lines(stdout: str) -> Any:
    """The JSON document Airflow printed (warnings share stdout)."""
    docs = [line for line in stdout.splitlines() if line.startswith(("[", "{"))]
    assert docs, stdout[-2000:]
    return json.loads(docs[-1])


def test_dags_parse_without_import_errors(airflow_env: dict[str, str]) -> None:
    res = _airflow(airflow_env, "dags", "reserialize")
    assert res.returncode == 0, res.stderr[-2000:]
    res = _airflow(airflow_env, "dags", "list-import-errors", "--output", "json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _json_lines(res.stdout) == []
    res = _airflow(airflow_env, "dags", "list", "--output", "json")
    ids = {d["dag_id"] for d in _json_lines(res.stdout)}
    assert {"ssbj_setup", "ssbj_enrich"} <= ids
