"""Run the shipped DAGs with `airflow dags test` on the demo data (see scripts/airflow-demo.sh).

A throwaway MariaDB on 127.0.0.1 holds the master data and the warehouse, Airflow keeps its
metadata in SQLite, Spark runs in local mode. Shows set-up, enrichment, validation and publish,
then a corrupted delivery quarantined, and prints the audit table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, launch  # the tests' throwaway server

REPO = Path(__file__).resolve().parent.parent


BIN = Path(sys.executable).parent


def sh(env: dict[str, str], *cmd: str, check: bool = True) -> int:
    """Run a command, streaming its output; return its exit code."""
    print(f"\n$ {' '.join(cmd)}", flush=True)
    code = subprocess.run(cmd, env=env, cwd=REPO, check=False).returncode  # noqa: S603
    if check and code != 0:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}")
    return code


def main() -> int:
    """Set up, run the DAGs twice (clean, then corrupted), report."""
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "airflow-demo").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = launch(work / "mariadb")
    try:
        env = dict(os.environ)
        env.update(
            {
                "AIRFLOW_HOME": str(work / "airflow"),
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW_CONN_SSBJ_WAREHOUSE": f"mysql://{USER}:{PASSWORD}@127.0.0.1:{server.port}/{DATABASE}",
                "AIRFLOW_CONN_SSBJ_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYSPARK_PYTHON": sys.executable,
                "SSBJ_PYTHON": sys.executable,
                "SSBJ_JOBS": str(work / "demo" / "job.yaml"),
            }
        )
        sh(
            env,
            str(BIN / "ssbj"),
            "quickstart",
            str(work / "demo"),
            "--connection-id",
            "ssbj_warehouse",
            "--orders",
            "50000",
            "--files",
            "10",
        )
        sh(env, str(BIN / "airflow"), "db", "migrate")
        sh(env, str(BIN / "airflow"), "dags", "test", "ssbj_setup", "2026-11-01")
        sh(env, str(BIN / "airflow"), "dags", "test", "ssbj_enrich", "2026-11-01T01:00:00+00:00")
        bad = [
            json.dumps(
                {
                    "order_id": 9_000_000 + i,
                    "customer_id": 1 + i,
                    "amount": 12_345.0,
                    "placed_at": "2026-11-03T00:00:00",
                }
            )
            for i in range(25)
        ]
        (work / "demo" / "landing" / "orders-corrupt.jsonl").write_text("\n".join(bad) + "\n")
        code = sh(env, str(BIN / "airflow"), "dags", "test", "ssbj_enrich", "2026-11-01T02:00:00+00:00", check=False)
        print(f"\nsecond run (a corrupted delivery) ended with exit code {code}: its rows were quarantined")
        import sqlalchemy as sa

        engine = sa.create_engine(server.url)
        with engine.connect() as conn:
            print("\nssbj_audit:")
            for row in conn.execute(
                sa.text(
                    "SELECT run_id, status, rows_in, rows_enriched, unmatched, dead_lettered, rows_failing_checks "
                    "FROM ssbj_audit ORDER BY started_at"
                )
            ):
                print("  ", dict(row._mapping))
            for t in ("orders_published", "orders_quarantine"):
                print(f"{t}: {conn.execute(sa.text(f'SELECT COUNT(*) FROM {t}')).scalar()} rows")  # noqa: S608
        engine.dispose()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
