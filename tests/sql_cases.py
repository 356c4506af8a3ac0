"""Master tables and helpers shared by the SQL adapter tests (tests/adapters)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.retry import RetryPolicy

FAST_RETRY = RetryPolicy(attempts=3, initial_backoff=0.01, max_backoff=0.02)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_master(engine: sa.Engine, n: int, *, name: str | None = None, step: int = 3) -> tuple[str, sa.Table]:
    """``n`` rows with gaps in the primary key (id = 10 + step * i), a skewed join key, a string and a decimal."""
    name = name or unique("master")
    t = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("k", sa.Integer, nullable=True),
        sa.Column("name", sa.String(20)),
        sa.Column("amount", sa.Numeric(12, 2)),
    )
    with engine.begin() as conn:
        t.create(conn)
        if n:
            rows = [
                {
                    "id": 10 + step * i,
                    "k": None if i % 41 == 0 else i % 37,
                    "name": f"name-{i}",
                    "amount": decimal.Decimal(i) / 4,
                }
                for i in range(n)
            ]
            conn.execute(sa.insert(t), rows)
    return name, t


def table_rows(engine: sa.Engine, t: sa.Table, cols: list[str]) -> Counter[tuple[Any, ...]]:
    with engine.connect() as conn:
        return Counter(tuple(r) for r in conn.execute(sa.select(*[t.c[c] for c in cols])))


def all_partitions(scan: SqlMasterScan) -> list[pa.Table]:
    return [scan.read_partition(p) for p in range(scan.num_partitions())]


# a sink batch with every column type the sinks map, NULLs and a long string
OUT = pa.table(
    {
        "sid": pa.array([1, 2, 3, 4], pa.int64()),
        "name": pa.array(["a", None, "c", "d" * 500]),
        "amount": pa.array(
            [decimal.Decimal("1.50"), None, decimal.Decimal("-2.25"), decimal.Decimal(0)], pa.decimal128(9, 2)
        ),
        "score": pa.array([0.5, 1.5, None, 3.0], pa.float64()),
        "day": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 1, 3), dt.date(2024, 1, 4)], pa.date32()),
        "ts": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 456789), None, None, None], pa.timestamp("us")),
        "tz": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC), None, None, None], pa.timestamp("us", "UTC")),
    }
)
