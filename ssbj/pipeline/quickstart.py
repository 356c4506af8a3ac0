"""``ssbj quickstart DIR``: a complete demo job with no external services.

Writes a SQLite master table, a landing directory of JSON-lines order files (skewed
keys, some with no customer, some NULL, a few malformed lines), a SQLite warehouse and
``job.yaml``; ``ssbj run --config DIR/job.yaml`` then enriches the orders.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from ssbj import credentials
from ssbj.config import Database
from ssbj.warehouse import demo_master_table

JOB_TEMPLATE = """\
# ssbj demo job: orders landing as JSON lines, enriched with customers from SQLite.
name: orders-demo
source:
  kind: files
  path: {landing}
  format: jsonl
  max_files_per_trigger: 2
schema:
  order_id: int64
  customer_id: int64
  amount: float64
  placed_at: timestamp
master:
  {master_db}
  table: customer
  key: c_custkey
  columns: [c_name, c_segment, c_balance]
  partition_rows: {partition_rows}
join:
  stream_key: customer_id
  algorithm: ssbj
  type: inner
  memory: 64MiB
  step_rows: 5000
sink:
  kind: database
  {warehouse_db}
  table: orders_enriched
dead_letter:
  kind: database
  {warehouse_db}
  table: orders_dead_letters
trigger:
  mode: available-now
checkpoint: {checkpoint}
quality:
  source_id: order_id
  ranges:
    amount: {{min: 0, max: 500}}
  published_table: orders_published
  quarantine_table: orders_quarantine
spark:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: "2"
    spark.ui.enabled: "false"
"""


def add_command(sub: Any) -> None:
    """Register ``quickstart``."""
    q = sub.add_parser(
        "quickstart",
        help="write a demo job (SQLite master, landing directory, SQLite warehouse) into DIR",
        description="Generate demo data and a job file; then run: ssbj run --config DIR/job.yaml",
    )
    q.add_argument("dir", help="directory to create")
    q.add_argument("--customers", type=int, default=20_000)
    q.add_argument("--orders", type=int, default=200_000)
    q.add_argument("--files", type=int, default=40)
    q.add_argument("--seed", type=int, default=1)
    q.add_argument(
        "--connection-id",
        help="put master data and warehouse in the database of this Airflow connection (AIRFLOW_CONN_<ID>) "
        "instead of SQLite files",
    )
    q.set_defaults(handler=lambda a, _extra: cmd_quickstart(a))


def _customers(rng: np.random.Generator, n: int) -> list[tuple[int, str, str, float]]:
    segments = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
    return [
        (i, f"Customer#{i:09d}", segments[i % 5], round(float(rng.uniform(-999, 9999)), 2)) for i in range(1, n + 1)
    ]


def _load_master(db: Database, rows: list[tuple[int, str, str, float]]) -> None:
    """Create (or replace) the demo ``customer`` table in a database and load ``rows``."""
    engine = credentials.engine(db)  # the engine the job's master scan will use too
    md = sa.MetaData()
    t = demo_master_table(md)
    t.drop(engine, checkfirst=True)
    t.create(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(t), [{"c_custkey": k, "c_name": n, "c_segment": s, "c_balance": b} for k, n, s, b in rows]
        )


def write_demo(
    root: Path, customers: int, orders: int, files: int, seed: int = 1, connection_id: str | None = None
) -> Path:
    """Write the demo data and job file under ``root``; returns the job file.

    With ``connection_id`` the customers go into that Airflow connection's database and the
    job reads and writes there; otherwise into ``master.db`` and ``warehouse.db`` (SQLite).
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    landing = root / "landing"
    landing.mkdir(exist_ok=True)
    master_db = root / "master.db"
    rows = _customers(rng, customers)
    where = (
        {"connection_id": connection_id} if connection_id is not None else {"url": f"sqlite:///{master_db.resolve()}"}
    )
    _load_master(Database.model_validate(where), rows)  # the table from its one model (ssbj.warehouse)
    # Zipf-skewed customer ids; ids above `customers` have no master row
    ranks = rng.zipf(1.3, size=orders)
    keys = (ranks - 1) % int(customers * 1.05) + 1
    per_file = -(-orders // files)
    oid = 0
    for f in range(files):
        lines = []
        for _ in range(min(per_file, orders - oid)):
            key: int | None = int(keys[oid])
            if oid % 997 == 0:
                key = None
            rec = {
                "order_id": oid,
                "customer_id": key,
                "amount": round(float(rng.uniform(1, 500)), 2),
                "placed_at": f"2026-11-{1 + oid % 28:02d}T{oid % 24:02d}:00:00",
            }
            lines.append(json.dumps(rec))
            oid += 1
        lines.insert(len(lines) // 2, '{"order_id": "not-a-number", "customer_id": 5}')
        lines.insert(len(lines) // 3, '{"order_id": 1, "customer_id": 7, "amount": 12.5')
        (landing / f"orders-{f:04d}.jsonl").write_text("\n".join(lines) + "\n")
    job = root / "job.yaml"
    if connection_id is not None:
        master_src = warehouse_src = f"connection_id: {connection_id}"
    else:
        master_src = f"url: sqlite:///{master_db.resolve()}"
        warehouse_src = f"url: sqlite:///{(root / 'warehouse.db').resolve()}"
    job.write_text(
        JOB_TEMPLATE.format(
            landing=landing.resolve(),
            master_db=master_src,
            warehouse_db=warehouse_src,
            checkpoint=(root / "checkpoint").resolve(),
            partition_rows=max(1, customers // 8),
        )
    )
    return job


def cmd_quickstart(args: argparse.Namespace) -> int:
    """Write the demo job and say how to run it."""
    job = write_demo(Path(args.dir), args.customers, args.orders, args.files, args.seed, args.connection_id)
    print(f"wrote {job}; run it with: ssbj run --config {job}")
    return 0
