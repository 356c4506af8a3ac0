"""The multi-way operator on TPC-H data (SF 0.01) equals DuckDB: orders -> customer -> nation -> region."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from string import Template

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from multiway_cases import multiset

from ssbj.adapters.lsmstore import LsmStore
from ssbj.bench.datagen import tpchgen_binary
from ssbj.core.arrowtypes import plain_table
from ssbj.core.multiway import JoinEdge, MasterInput, MultiWaySpec, OutputColumn, run_query

TABLES = ("orders", "customer", "nation", "region")


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("tpch")
    cmd = [tpchgen_binary(), "parquet", "-s", "0.01", f"--tables={','.join(TABLES)}", f"--output-dir={out}", "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True)
    return {t: plain_table(pq.read_table(Path(out) / f"{t}.parquet")) for t in TABLES}


def _spec(region_kind: str) -> MultiWaySpec:
    return MultiWaySpec(
        stream="o",
        stream_columns=("o_orderkey", "o_custkey", "o_orderpriority"),
        masters=(
            MasterInput("c", "customer", ("c_custkey", "c_nationkey", "c_mktsegment")),
            MasterInput("n", "nation", ("n_nationkey", "n_regionkey", "n_name")),
            MasterInput("r", "region", ("r_regionkey", "r_name")),
        ),
        edges=(
            JoinEdge("c", "o", ("o_custkey",), ("c_custkey",)),
            JoinEdge("n", "c", ("c_nationkey",), ("n_nationkey",)),
            JoinEdge("r", "n", ("n_regionkey",), ("r_regionkey",), region_kind),  # type: ignore[arg-type]
        ),
        output=(
            OutputColumn("o_orderkey", "o", "o_orderkey"),
            OutputColumn("c_mktsegment", "c", "c_mktsegment"),
            OutputColumn("n_name", "n", "n_name"),
            OutputColumn("r_name", "r", "r_name"),
        ),
        filters={"o": pc.field("o_orderpriority") != "5-LOW", "r": pc.field("r_name") == "ASIA"},
    )


SQL = Template("""
    SELECT o.o_orderkey, c.c_mktsegment, n.n_name, r.r_name
    FROM orders o
    JOIN customer c ON c.c_custkey = o.o_custkey
    JOIN nation n ON n.n_nationkey = c.c_nationkey
    $kind (SELECT * FROM region WHERE r_name = 'ASIA') r ON r.r_regionkey = n.n_regionkey
    WHERE o.o_orderpriority <> '5-LOW'
""")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inner", "left"])
@pytest.mark.parametrize("scanned", [(), ("c",), ("c", "n", "r")])
@pytest.mark.parametrize("store", ["memory", "lsm"])
def test_tpch_chain_equals_duckdb(tpch: dict, kind: str, scanned: tuple[str, ...], store: str) -> None:
    con = duckdb.connect()
    for t in TABLES:
        con.register(t, tpch[t])
    rows = con.execute(SQL.substitute(kind="JOIN" if kind == "inner" else "LEFT JOIN")).fetchall()
    want = Counter(tuple(r) for r in rows)
    orders = tpch["orders"]
    stats: dict = {}
    got = multiset(
        list(
            run_query(
                _spec(kind),
                (orders.slice(i, 1000) for i in range(0, orders.num_rows, 1000)),
                tpch,
                8 << 20,
                stats,
                hold={a: a not in scanned for a in ("c", "n", "r")},
                partition_rows=100,
                store=LsmStore(memtable_bytes=64 << 10, block_cache_bytes=0) if store == "lsm" else None,
            )
        )
    )
    assert got == want and sum(want.values()) > 0
    assert all(stats["masters"][a]["held"] == (a not in scanned) for a in ("c", "n", "r"))
