"""The multi-way DAG under `airflow dags test`: spark-submit runs the job, GX checks it, then publish or quarantine.

Masters and warehouse in a real MariaDB (through the Airflow connection ``ssbj_warehouse``),
landing files in, Spark local mode; the published rows equal DuckDB's answer to the job's SQL.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
import twostream_data
import yaml
from multiway_pipeline_data import COLUMNS, duckdb_answer, job, load_masters, masters, stream, write_landing

from ssbj.config import load_any_config
from ssbj.testing.airflow import airflow_home, run_airflow
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer

pytestmark = pytest.mark.slow  # spark-submit under Airflow: 30-60 s per DAG run

pytest.importorskip("airflow")
pytest.importorskip("great_expectations")

REPO = Path(__file__).resolve().parents[2]
TABLES = ("orders_3way", "orders_3way_published", "orders_3way_quarantine", "orders_3way_dead", "ssbj_audit")


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_airflow(env, *args, cwd=REPO)


def test_multiway_dag_publishes_a_clean_run_and_quarantines_a_bad_one(tmp_path: Path, mariadb: MariaDBServer) -> None:
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:
        for t in TABLES:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
    tables = masters(seed=12, customers=300)
    load_masters(engine, tables)
    rows, messages, _ = stream(seed=13, n=2_000, customers=300)
    write_landing(tmp_path / "landing", messages, files=2)
    ws = {"connection_id": "ssbj_warehouse"}
    cfg = job(
        tmp_path,
        ws,
        {"kind": "files", "path": str(tmp_path / "landing"), "format": "jsonl"},
        {"kind": "database", **ws, "table": "orders_3way"},
        {"kind": "database", **ws, "table": "orders_3way_dead"},
        quality={"source_id": "o_id", "ranges": {"o_amount": {"min": 0, "max": 25}}},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    load_any_config(path)
    env = airflow_home(
        tmp_path / "airflow",
        REPO / "dags",
        {
            "AIRFLOW_CONN_SSBJ_WAREHOUSE": f"mysql://{USER}:{PASSWORD}@127.0.0.1:{mariadb.port}/{DATABASE}",
            "SSBJ_MULTIWAY_JOBS": str(path),
        },
    )

    res = _airflow(env, "dags", "test", "ssbj_multiway_enrich", "2026-11-01T01:00:00+00:00")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-3000:]
    expected = duckdb_answer(rows, tables)
    with engine.connect() as conn:
        published = Counter(
            tuple(r)
            for r in conn.execute(sa.text(f"SELECT {', '.join(COLUMNS)} FROM orders_3way_published"))  # noqa: S608
        )
        audit = conn.execute(sa.text("SELECT status, rows_failing_checks FROM ssbj_audit")).all()
    assert sum(published.values()) == sum(expected.values()) > 0
    assert published == expected
    assert [tuple(a) for a in audit] == [("published", 0)]

    late = stream(seed=14, n=200, start=90_000, customers=300)[1]
    (tmp_path / "landing" / "late.jsonl").write_bytes(
        b"\n".join(m.replace(b'"o_amount": ', b'"o_amount": 1000') for m in late) + b"\n"
    )
    res = _airflow(env, "dags", "test", "ssbj_multiway_enrich", "2026-11-01T02:00:00+00:00")
    out = res.stdout + res.stderr
    assert "rows quarantined in orders_3way_quarantine" in out, out[-5000:]
    with engine.connect() as conn:
        (quarantined,) = conn.execute(sa.text("SELECT COUNT(*) FROM orders_3way_quarantine")).one()
        statuses = sorted(r[0] for r in conn.execute(sa.text("SELECT status FROM ssbj_audit")))
    assert quarantined > 0 and statuses == ["published", "quarantined"]
    engine.dispose()


def test_multiway_dag_runs_a_two_stream_job(tmp_path: Path, mariadb: MariaDBServer) -> None:
    """The same DAG, parameterised by SSBJ_MULTIWAY_JOBS, runs a job joining two streams in a window."""
    tables_os = ("orders_shipments", "orders_shipments_published", "orders_shipments_dead", "ssbj_audit_os")
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:
        for t in tables_os:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
    customer = masters(seed=15, customers=40)["customer"]
    load_masters(engine, {"customer": customer})
    data = twostream_data.streams(seed=16, files=3, per_file=80)
    dirs = twostream_data.write_landing(tmp_path, data)
    ws = {"connection_id": "ssbj_warehouse"}
    cfg = twostream_data.job(
        tmp_path,
        ws,
        dirs,
        {"kind": "database", **ws, "table": "orders_shipments"},
        {"kind": "database", **ws, "table": "orders_shipments_dead"},
        quality={"audit_table": "ssbj_audit_os"},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    load_any_config(path)
    env = airflow_home(
        tmp_path / "airflow",
        REPO / "dags",
        {
            "AIRFLOW_CONN_SSBJ_WAREHOUSE": f"mysql://{USER}:{PASSWORD}@127.0.0.1:{mariadb.port}/{DATABASE}",
            "SSBJ_MULTIWAY_JOBS": str(path),
        },
    )
    res = _airflow(env, "dags", "test", "ssbj_multiway_enrich", "2026-11-01T01:00:00+00:00")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-3000:]
    expected = twostream_data.duckdb_answer(data, customer, twostream_data.late_ids(data))
    with engine.connect() as conn:
        cols = ", ".join(twostream_data.COLUMNS)
        published = Counter(
            tuple(r)
            for r in conn.execute(sa.text(f"SELECT {cols} FROM orders_shipments_published"))  # noqa: S608
        )
        audit = conn.execute(sa.text("SELECT status, rows_failing_checks FROM ssbj_audit_os")).all()
    assert sum(published.values()) == sum(expected.values()) > 0
    assert published == expected
    assert [tuple(a) for a in audit] == [("published", 0)]
    engine.dispose()
