"""The data of the shared-jobs benchmark: two streams, three master tables, the jobs over them.

Two streams of JSON-lines micro-batches (orders, clicks: skewed keys, some without a
master row, some NULL), three master tables written to a SQLite file (customer, product
with repeated keys, supplier), and 5 or 10 binary enrichment jobs (inner and left joins,
filters). Used by :mod:`ssbj.bench.exp_shared` and :mod:`ssbj.bench.exp_shared_pipeline`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ssbj.shared.operator import SharedJobSpec

ORDERS = pa.schema(
    [
        ("o_id", pa.int64()),
        ("o_cust", pa.int64()),
        ("o_prod", pa.int64()),
        ("o_supp", pa.int64()),
        ("o_amount", pa.float64()),
        ("o_status", pa.string()),
        ("o_comment", pa.string()),
    ]
)
CLICKS = pa.schema(
    [
        ("k_id", pa.int64()),
        ("k_cust", pa.int64()),
        ("k_prod", pa.int64()),
        ("k_page", pa.string()),
        ("k_agent", pa.string()),
    ]
)
MASTERS = {
    "customer": ("c_key", ["c_name", "c_segment", "c_nation", "c_address"]),
    "product": ("p_key", ["p_name", "p_brand", "p_price"]),
    "supplier": ("s_key", ["s_name", "s_nation"]),
}


@dataclass(frozen=True)
class Scale:
    """Sizes of one run."""

    customers: int = 100_000
    products: int = 50_000
    suppliers: int = 20_000
    tuples: int = 200_000  # per stream
    batch: int = 10_000  # tuples per micro-batch and per stream (w)
    partition_rows: int = 10_000  # b
    master: str = "sqlite"  # sqlite: read per partition from the SQLite file; arrow: held in memory (ArrowMaster)


def _keys(rng: np.random.Generator, n: int, domain: int) -> pa.Array:
    """Skewed keys (Zipf 1.1 over the domain), 3% without a master row, 2% NULL."""
    k = (rng.zipf(1.1, n) - 1) % domain
    k = np.where(rng.random(n) < 0.03, domain + rng.integers(0, 1000, n), k)
    return pa.array(k, pa.int64(), mask=rng.random(n) < 0.02)


def make_masters(path: Path, s: Scale, seed: int) -> None:
    """Write the three master tables to a SQLite file (product keys repeat: many-to-many)."""
    rng = np.random.default_rng(seed)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute(
        "create table customer (id integer primary key, c_key integer, c_name text, c_segment text,"
        " c_nation integer, c_address text)"
    )
    con.executemany(
        "insert into customer values (?, ?, ?, ?, ?, ?)",
        (
            (
                i,
                i,
                f"Customer#{i:09d}",
                ["AUTO", "BUILD", "HOUSE", "MACH"][i % 4],
                int(rng.integers(25)),
                f"{i} Long Street, Town {i % 977}",
            )
            for i in range(s.customers)
        ),
    )
    # two versions of every 10th product: a stream tuple meets both rows
    pk = np.concatenate([np.arange(s.products), np.arange(0, s.products, 10)])
    con.execute("create table product (id integer primary key, p_key integer, p_name text, p_brand text, p_price real)")
    con.executemany(
        "insert into product values (?, ?, ?, ?, ?)",
        ((i, int(k), f"product {k} v{i}", f"Brand#{k % 55}", float(k % 1000) + 0.5) for i, k in enumerate(pk)),
    )
    con.execute("create table supplier (id integer primary key, s_key integer, s_name text, s_nation integer)")
    con.executemany(
        "insert into supplier values (?, ?, ?, ?)", ((i, i, f"Supplier#{i:06d}", i % 25) for i in range(s.suppliers))
    )
    con.commit()
    con.close()


def make_streams(s: Scale, seed: int) -> dict[str, list[bytes]]:
    """Micro-batches of JSON lines per stream (the payloads a topic would deliver)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[bytes]] = {"orders": [], "clicks": []}
    for start in range(0, s.tuples, s.batch):
        n = min(s.batch, s.tuples - start)
        o = pa.table(
            {
                "o_id": pa.array(np.arange(start, start + n), pa.int64()),
                "o_cust": _keys(rng, n, s.customers),
                "o_prod": _keys(rng, n, s.products),
                "o_supp": _keys(rng, n, s.suppliers),
                "o_amount": pa.array(np.round(rng.random(n) * 1000, 2)),
                "o_status": pa.array(rng.choice(["F", "O", "P"], n)),
                "o_comment": pa.array(
                    [f"deliver carefully, request {i % 9973} pending" for i in range(start, start + n)]
                ),
            }
        )
        c = pa.table(
            {
                "k_id": pa.array(np.arange(start, start + n), pa.int64()),
                "k_cust": _keys(rng, n, s.customers),
                "k_prod": _keys(rng, n, s.products),
                "k_page": pa.array(rng.choice(["home", "search", "item", "cart", "checkout"], n)),
                "k_agent": pa.array(
                    rng.choice(["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0)"], n)
                ),
            }
        )
        out["orders"].append(_jsonl(o))
        out["clicks"].append(_jsonl(c))
    return out


def _jsonl(t: pa.Table) -> bytes:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in t.to_pylist()).encode()


SCHEMAS = {"orders": ORDERS, "clicks": CLICKS}


def decode(stream: str, payload: bytes) -> pa.Table:
    """Decode one micro-batch of JSON lines with the stream's schema."""
    import io

    opts = pj.ParseOptions(explicit_schema=SCHEMAS[stream], unexpected_field_behavior="ignore")
    return pj.read_json(io.BytesIO(payload), parse_options=opts).select(SCHEMAS[stream].names)


@dataclass(frozen=True)
class Job:
    """A job with its filter both as an Arrow expression (the run) and SQL (DuckDB's check)."""

    spec: SharedJobSpec
    where: str | None = None


def jobs(n: int) -> list[Job]:
    """5 or 10 jobs over the two streams and three masters."""
    five = [
        Job(SharedJobSpec("orders_customer", "orders", "customer", "o_cust", "c_key", ("c_name", "c_segment"))),
        Job(SharedJobSpec("orders_product", "orders", "product", "o_prod", "p_key", ("p_name", "p_price"))),
        Job(SharedJobSpec("orders_supplier", "orders", "supplier", "o_supp", "s_key", ("s_name",))),
        Job(SharedJobSpec("clicks_customer", "clicks", "customer", "k_cust", "c_key", ("c_nation",), how="left")),
        Job(SharedJobSpec("clicks_product", "clicks", "product", "k_prod", "p_key", ("p_brand",))),
    ]
    more = [
        Job(
            SharedJobSpec(
                "orders_customer_addr",
                "orders",
                "customer",
                "o_cust",
                "c_key",
                ("c_address",),
                ("o_id", "o_cust", "o_amount"),
                "left",
            )
        ),
        Job(
            SharedJobSpec(
                "orders_big_product",
                "orders",
                "product",
                "o_prod",
                "p_key",
                ("p_brand",),
                filter=pc.field("o_amount") > 500,
            ),
            "o_amount > 500",
        ),
        Job(
            SharedJobSpec(
                "checkout_customer",
                "clicks",
                "customer",
                "k_cust",
                "c_key",
                ("c_name",),
                filter=pc.field("k_page") == "checkout",
            ),
            "k_page = 'checkout'",
        ),
        Job(
            SharedJobSpec(
                "open_orders_nation",
                "orders",
                "customer",
                "o_cust",
                "c_key",
                ("c_nation",),
                ("o_id", "o_status"),
                filter=pc.field("o_status") == "O",
            ),
            "o_status = 'O'",
        ),
        Job(
            SharedJobSpec(
                "clicks_product_price", "clicks", "product", "k_prod", "p_key", ("p_name", "p_price"), how="left"
            )
        ),
    ]
    return (five + more)[:n]
