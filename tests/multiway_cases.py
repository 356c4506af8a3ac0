"""Random inputs for the multi-way tests, the specs, and DuckDB's answer to the same SQL (written by hand)."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from string import Template
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.multiway import JoinEdge, MasterInput, MultiWayJoin, MultiWaySpec, OutputColumn

# the SQL each case states, written by hand from its spec (join kinds and filters substituted)
STAR_SQL = Template("""
    SELECT s.id AS sid, s.ka AS ka, a.x AS ax, b.y AS "by", c.z AS cz, s.v AS v
    FROM s
    $j0 (SELECT * FROM A WHERE $fa) a ON a.k = s.ka
    $j1 B b ON b.k1 = s.kb AND b.k2 = s.tag
    $j2 C c ON c.k = s.kc
    WHERE $fs
""")
CHAIN_SQL = Template("""
    SELECT o.okey AS okey, c.cname AS cname, n.nname AS nname, p.pname AS pname
    FROM o
    $j0 customer c ON c.custkey = o.custkey
    $j1 nation n ON n.nationkey = c.nationkey
    $j2 part p ON p.partkey = o.partkey
""")


def _keys(rng: np.random.Generator, n: int, domain: int, null_frac: float) -> pa.Array:
    v = rng.integers(0, domain, n)
    mask = rng.random(n) < null_frac
    return pa.array(v, pa.int64(), mask=mask)


@dataclass
class Case:
    """Inputs, spec and the SQL that states the same query."""

    spec: MultiWaySpec
    stream: pa.Table
    masters: dict[str, pa.Table]
    sql: str
    extra: dict[str, Any] = field(default_factory=dict)


def star_case(seed: int, kinds: tuple[str, str, str], filters: bool, n_stream: int = 300) -> Case:
    """s joined with a (one key), b (composite key, string part), c (int32 key against int64)."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(3, 12))
    s = pa.table(
        {
            "id": pa.array(np.arange(n_stream), pa.int64()),
            "ka": _keys(rng, n_stream, d, 0.1),
            "kb": _keys(rng, n_stream, d, 0.1),
            "tag": pa.array([f"t{x}" if x % 5 else None for x in rng.integers(0, 4, n_stream)], pa.string()),
            "kc": _keys(rng, n_stream, d + 3, 0.05),
            "v": pa.array(rng.normal(size=n_stream)),
        }
    )
    na, nb, nc = (int(x) for x in rng.integers(0, 40, 3))
    a = pa.table({"k": _keys(rng, na, d, 0.1), "x": pa.array(rng.integers(0, 10, na), pa.int64())})
    b = pa.table(
        {
            "k1": _keys(rng, nb, d, 0.1),
            "k2": pa.array([f"t{x}" if x % 7 else None for x in rng.integers(0, 4, nb)], pa.string()),
            "y": pa.array([f"y{x}" for x in rng.integers(0, 50, nb)], pa.string()),
        }
    )
    c = pa.table({"k": pa.array(rng.integers(0, d, nc), pa.int32()), "z": pa.array(rng.random(nc))})
    fl = {}
    fa = fs = "TRUE"
    if filters:
        fl = {"a": pc.field("x") >= 3, "s": pc.field("v") < 1.0}
        fa, fs = "x >= 3", "s.v < 1.0"
    spec = MultiWaySpec(
        stream="s",
        stream_columns=("id", "ka", "kb", "tag", "kc", "v"),
        masters=(
            MasterInput("a", "A", ("k", "x")),
            MasterInput("b", "B", ("k1", "k2", "y")),
            MasterInput("c", "C", ("k", "z")),
        ),
        edges=(
            JoinEdge("a", "s", ("ka",), ("k",), kinds[0]),  # type: ignore[arg-type]
            JoinEdge("b", "s", ("kb", "tag"), ("k1", "k2"), kinds[1]),  # type: ignore[arg-type]
            JoinEdge("c", "s", ("kc",), ("k",), kinds[2]),  # type: ignore[arg-type]
        ),
        output=(
            OutputColumn("sid", "s", "id"),
            OutputColumn("ka", "s", "ka"),
            OutputColumn("ax", "a", "x"),
            OutputColumn("by", "b", "y"),
            OutputColumn("cz", "c", "z"),
            OutputColumn("v", "s", "v"),
        ),
        filters=fl,
    )
    j = {"inner": "JOIN", "left": "LEFT JOIN"}
    sql = STAR_SQL.substitute(j0=j[kinds[0]], j1=j[kinds[1]], j2=j[kinds[2]], fa=fa, fs=fs)
    return Case(spec, s, {"A": a, "B": b, "C": c}, sql)


def chain_case(seed: int, kinds: tuple[str, str, str], n_stream: int = 300) -> Case:
    """orders -> customer -> nation (a chain) plus orders -> part (a star edge)."""
    rng = np.random.default_rng(seed)
    nc, nn, npart = (int(x) for x in rng.integers(0, 40, 3))
    dcust, dnat = int(rng.integers(3, 15)), int(rng.integers(2, 6))
    o = pa.table(
        {
            "okey": pa.array(np.arange(n_stream), pa.int64()),
            "custkey": _keys(rng, n_stream, dcust, 0.1),
            "partkey": _keys(rng, n_stream, 6, 0.1),
        }
    )
    cust = pa.table(
        {
            "custkey": _keys(rng, nc, dcust, 0.05),
            "nationkey": _keys(rng, nc, dnat, 0.15),
            "cname": pa.array([f"c{i}" for i in range(nc)], pa.string()),
        }
    )
    nation = pa.table(
        {"nationkey": _keys(rng, nn, dnat, 0.05), "nname": pa.array([f"n{i}" for i in range(nn)], pa.large_string())}
    )
    part = pa.table({"partkey": _keys(rng, npart, 6, 0.0), "pname": pa.array([f"p{i}" for i in range(npart)])})
    spec = MultiWaySpec(
        stream="o",
        stream_columns=("okey", "custkey", "partkey"),
        masters=(
            MasterInput("c", "customer", ("custkey", "nationkey", "cname")),
            MasterInput("n", "nation", ("nationkey", "nname")),
            MasterInput("p", "part", ("partkey", "pname")),
        ),
        edges=(
            JoinEdge("c", "o", ("custkey",), ("custkey",), kinds[0]),  # type: ignore[arg-type]
            JoinEdge("n", "c", ("nationkey",), ("nationkey",), kinds[1]),  # type: ignore[arg-type]
            JoinEdge("p", "o", ("partkey",), ("partkey",), kinds[2]),  # type: ignore[arg-type]
        ),
        output=(
            OutputColumn("okey", "o", "okey"),
            OutputColumn("cname", "c", "cname"),
            OutputColumn("nname", "n", "nname"),
            OutputColumn("pname", "p", "pname"),
        ),
    )
    j = {"inner": "JOIN", "left": "LEFT JOIN"}
    sql = CHAIN_SQL.substitute(j0=j[kinds[0]], j1=j[kinds[1]], j2=j[kinds[2]])
    return Case(spec, o, {"customer": cust, "nation": nation, "part": part}, sql)


def duckdb_answer(case: Case) -> Counter[tuple[Any, ...]]:
    """DuckDB's result of the case's SQL, as a multiset of rows."""
    con = duckdb.connect()
    con.register(case.spec.stream, case.stream)
    for name, t in case.masters.items():
        con.register(name, t)
    rows = con.execute(case.sql).fetchall()
    con.close()
    return Counter(tuple(r) for r in rows)


def multiset(tables: list[pa.Table]) -> Counter[tuple[Any, ...]]:
    """Rows of result tables as a multiset."""
    out: Counter[tuple[Any, ...]] = Counter()
    for t in tables:
        cols = [c.to_pylist() for c in t.columns]
        out.update(zip(*cols, strict=True))
    return out


def batches(t: pa.Table, sizes: list[int]) -> Iterator[pa.Table]:
    """``t`` cut in batches of the given sizes (cycled), some possibly empty."""
    pos, i = 0, 0
    while pos < t.num_rows:
        n = sizes[i % len(sizes)]
        yield t.slice(pos, n)
        pos += n
        i += 1


def run_with_restarts(
    case: Case, budget: int, sizes: list[int], restart_at: set[int], **options: Any
) -> tuple[list[pa.Table], MultiWayJoin]:
    """Run the operator; after the steps in ``restart_at`` checkpoint, throw it away and restore."""
    op = MultiWayJoin(case.spec, case.masters, budget, **_ctor(options))
    out: list[pa.Table] = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = DirectoryStore(tmp)
        cid = 0

        def maybe_restart(step: int) -> None:
            nonlocal op, cid
            if step in restart_at:
                cid += 1
                op.checkpoint(ckpt, cid)
                op.store.close()
                op = MultiWayJoin.restore(ckpt, case.spec, case.masters, budget, **_ctor(options))

        step = 0
        for b in batches(case.stream, sizes):
            out.append(op.process(b))
            step += 1
            maybe_restart(step)
        while op.waiting_rows:
            out.append(op.process(pa.table({})))
            step += 1
            maybe_restart(step)
    return out, op


def _ctor(options: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in options.items() if k != "store_factory"}
    if "store_factory" in options:
        out["store"] = options["store_factory"]()
    return out
