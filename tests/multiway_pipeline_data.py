"""Data and oracle of the multi-way pipeline tests: a stream of orders, three master tables, one SQL query.

The masters join on columns that are not their primary keys (customer has 0-2 rows per
c_custkey, nation 1-2 per n_nationkey): many-to-many edges. Stream keys may be NULL or have
no master row. The oracle is DuckDB running the same SQL over the same rows as Arrow tables
(never the code under test); bad records are counted by the generator, which wrote them.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import sqlalchemy as sa

SQL = """
SELECT o.o_id, o.o_amount, c.c_name, n.n_name, p.p_name AS part
FROM orders o
  JOIN customer c ON c.c_custkey = o.o_custkey
  JOIN nation n ON n.n_nationkey = c.c_nationkey
  LEFT JOIN part p ON p.p_partkey = o.o_partkey AND p.p_size > 3
WHERE o.o_amount >= 2
"""
COLUMNS = ("o_id", "o_amount", "c_name", "n_name", "part")
STREAM_SCHEMA = {"o_id": "int64", "o_custkey": "int64", "o_partkey": "int64", "o_amount": "float64"}

I64 = pa.int64()
CUSTOMER = pa.schema([("c_id", I64), ("c_custkey", I64), ("c_nationkey", I64), ("c_name", pa.string())])
NATION = pa.schema([("n_id", pa.int64()), ("n_nationkey", pa.int64()), ("n_name", pa.string())])
PART = pa.schema([("p_id", pa.int64()), ("p_partkey", pa.int64()), ("p_size", pa.int64()), ("p_name", pa.string())])


@dataclass
class Data:
    """The masters as Arrow tables, the good stream rows, and the raw messages (good and bad)."""

    masters: dict[str, pa.Table]
    rows: list[dict[str, Any]] = field(default_factory=list)
    messages: list[bytes] = field(default_factory=list)
    bad: int = 0


def masters(seed: int, customers: int = 600) -> dict[str, pa.Table]:
    """customer (0-2 rows per c_custkey), nation (1-2 rows per key, one key without rows), part."""
    rng = random.Random(seed)
    cust: list[tuple[Any, ...]] = []
    for k in range(customers):
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            nk = rng.randrange(0, 26)
            cust.append((len(cust) + 1, k, nk, f"cust-{k}-{len(cust)}"))
    pairs = [(k, j) for k in range(25) for j in range(1 + k % 2)]  # nation 25 has no rows
    nat = [(i + 1, k, f"nation-{k}-{j}") for i, (k, j) in enumerate(pairs)]
    part = [(i + 1, i // 2, rng.randrange(1, 8), f"part-{i}") for i in range(200)]
    return {
        "customer": pa.Table.from_pylist([dict(zip(CUSTOMER.names, r, strict=True)) for r in cust], schema=CUSTOMER),
        "nation": pa.Table.from_pylist([dict(zip(NATION.names, r, strict=True)) for r in nat], schema=NATION),
        "part": pa.Table.from_pylist([dict(zip(PART.names, r, strict=True)) for r in part], schema=PART),
    }


def stream(seed: int, n: int, start: int = 0, customers: int = 600) -> tuple[list[dict[str, Any]], list[bytes], int]:
    """n messages (JSON lines): some keys NULL or without master rows, a few malformed records."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    out: list[bytes] = []
    bad = 0
    for i in range(start, start + n):
        if i % 397 == 11:
            out.append(b'{"o_id": 1, "o_custkey": ')  # truncated JSON
            bad += 1
            continue
        if i % 541 == 17:
            out.append(json.dumps({"o_id": i, "o_amount": 3.0}).encode())  # no key field
            bad += 1
            continue
        ck = None if i % 53 == 0 else min(int(rng.paretovariate(0.8)), customers + 50)
        pk = None if i % 31 == 0 else rng.randrange(0, 120)
        r = {"o_id": i, "o_custkey": ck, "o_partkey": pk, "o_amount": float(rng.randrange(0, 100)) / 4}
        rows.append(r)
        out.append(json.dumps(r).encode())
    return rows, out, bad


def load_masters(engine: sa.Engine, tables: dict[str, pa.Table]) -> None:
    """Create the master tables (primary key on the first column) and insert the rows."""
    md = sa.MetaData()
    types = {pa.int64(): sa.BigInteger(), pa.string(): sa.String(40)}
    made = []
    for name, t in tables.items():
        cols = [
            sa.Column(f.name, types[f.type], primary_key=i == 0, autoincrement=False) for i, f in enumerate(t.schema)
        ]
        made.append((sa.Table(name, md, *cols), t))
    with engine.begin() as conn:
        for table, _ in made:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table.name}"))
    md.create_all(engine)
    with engine.begin() as conn:
        for table, t in made:
            conn.execute(sa.insert(table), t.to_pylist())


def duckdb_answer(rows: list[dict[str, Any]], tables: dict[str, pa.Table]) -> Counter[tuple[Any, ...]]:
    """DuckDB's result of :data:`SQL` over the good stream rows and the masters, as a multiset."""
    con = duckdb.connect()
    orders = pa.Table.from_pylist(
        rows, schema=pa.schema([(c, pa.float64() if c == "o_amount" else pa.int64()) for c in STREAM_SCHEMA])
    )
    con.register("orders", orders)
    for name, t in tables.items():
        con.register(name, t)
    got = Counter(tuple(r) for r in con.execute(SQL).fetchall())
    con.close()
    return got


def write_landing(landing: Path, messages: list[bytes], files: int) -> None:
    """Split the messages into ``files`` JSON-lines files, each renamed into place whole."""
    landing.mkdir(parents=True, exist_ok=True)
    per = -(-len(messages) // files)
    for f in range(files):
        part = messages[f * per : (f + 1) * per]
        tmp = landing / f".orders-{f:03d}.tmp"
        tmp.write_bytes(b"\n".join(part) + b"\n")
        tmp.rename(landing / f"orders-{f:03d}.jsonl")


def job(
    tmp: Path,
    database: dict[str, Any],
    source: dict[str, Any],
    sink: dict[str, Any],
    dead_letter: dict[str, Any],
    **over: Any,
) -> dict[str, Any]:
    """A multi-way job file (as data): customer and part scanned, nation held."""
    cfg: dict[str, Any] = {
        "name": "orders-3way",
        "source": source,
        "stream": {"name": "orders", "schema": STREAM_SCHEMA},
        "database": database,
        "masters": {
            "customer": {"mode": "scanned", "partition_rows": 120},
            "nation": {"mode": "held"},
            "part": {"mode": "scanned", "partition_rows": 50},
        },
        "sql": SQL,
        "join": {"memory": "32MiB"},
        "sink": sink,
        "dead_letter": dead_letter,
        "checkpoint": str(tmp / "ck"),
    }
    cfg.update(over)
    return cfg
