"""compile_sql + the plain reference evaluator equal DuckDB's answer to the same SQL.

Random tables (small key domains: duplicates on both sides, many-to-many, NULL keys and
unmatched keys) and random queries of the supported subset: chains and stars of inner and
left joins written as JOIN ... ON or as comma joins with WHERE equalities, random
single-input filters, ``*`` or aliased columns. Results are compared as multisets.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multiway_reference import evaluate

from ssbj.sql.compile import compile_sql

KEYS = st.one_of(st.none(), st.integers(0, 4))
NAMES = st.one_of(st.none(), st.sampled_from(["ab", "ba", "b", "abc", "x"]))

# every input has a distinct column prefix, so `*` gives distinct output names
COLS = {
    "s": ["s_id", "s_k1", "s_k2", "s_name"],
    "a": ["a_k", "a_k2", "a_x", "a_name"],
    "b": ["b_k", "b_x", "b_name"],
    "c": ["c_k", "c_x", "c_name"],
}
TABLE = {"s": "events", "a": "ta", "b": "tb", "c": "tc"}


def _table(draw: Any, alias: str, max_rows: int) -> pa.Table:
    n = draw(st.integers(0, max_rows))
    data: dict[str, pa.Array] = {}
    for col in COLS[alias]:
        if col == "s_id":
            data[col] = pa.array(range(n), pa.int64())
        elif col.endswith("name"):
            data[col] = pa.array(draw(st.lists(NAMES, min_size=n, max_size=n)), pa.string())
        else:
            data[col] = pa.array(draw(st.lists(KEYS, min_size=n, max_size=n)), pa.int64())
    return pa.table(data)


def _filter(draw: Any, alias: str, depth: int = 0) -> str:
    nums = [c for c in COLS[alias] if not c.endswith("name")]
    col = f"{alias}.{draw(st.sampled_from(nums))}"
    name = f"{alias}.{COLS[alias][-1]}"
    kind = draw(st.sampled_from(["cmp", "in", "between", "null", "like", "not", "or"] if depth < 2 else ["cmp"]))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        return f"{col} {op} {draw(st.integers(0, 4))}"
    if kind == "in":
        vals = draw(st.lists(st.one_of(st.integers(0, 4), st.just("NULL")), min_size=1, max_size=3))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{col} {neg}IN ({', '.join(map(str, vals))})"
    if kind == "between":
        lo, hi = sorted(draw(st.lists(st.integers(0, 4), min_size=2, max_size=2)))
        return f"{col} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {lo} AND {hi}"
    if kind == "null":
        return f"{col} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "like":
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}LIKE '{draw(st.sampled_from(['a%', '%b', '_b%', 'x']))}'"
    if kind == "not":
        return f"NOT ({_filter(draw, alias, depth + 1)})"
    return f"({_filter(draw, alias, depth + 1)} OR {_filter(draw, alias, depth + 1)})"


@st.composite
def case(draw: Any) -> tuple[str, dict[str, pa.Table]]:
    n_masters = draw(st.integers(1, 3))
    masters = ["a", "b", "c"][:n_masters]
    probes = {m: draw(st.sampled_from(["s", *masters[:i]])) for i, m in enumerate(masters)}
    kinds = {m: draw(st.sampled_from(["inner", "left"])) for m in masters}
    # left joins keep the FROM order: all inner joins before the first left one
    order = ["s", *masters]
    any_left = any(k == "left" for k in kinds.values())
    comma = not any_left and draw(st.booleans())
    if comma:
        order = draw(st.permutations(order))
    elif not any_left and draw(st.booleans()):
        # JOIN ... ON with the stream not first: a topological order of the tree from a master
        order = ["a", "s", *masters[1:]] if probes["a"] == "s" else order
    nulled = set()
    parts = [f"{TABLE[order[0]]} {order[0]}"]
    where: list[str] = []
    on_filters: dict[str, list[str]] = {m: [] for m in masters}
    edge_eqs: dict[str, list[str]] = {}
    for alias in masters:
        link = probes[alias]
        key = "s_k2" if link == "s" and draw(st.booleans()) else COLS[link][1]
        edge_eqs[alias] = [f"{alias}.{COLS[alias][0]} = {link}.{key}"]
        if alias == "a" and link == "s" and draw(st.booleans()):
            edge_eqs[alias].append("a.a_k2 = s.s_k2")  # a composite key
    if comma:
        where += [eq for m in masters for eq in edge_eqs[m]]
    for alias in order[1:]:
        # in the JOIN ... ON order that starts with `a`, the stream's ON holds a's edge
        eqs = edge_eqs["a"] if alias == "s" else edge_eqs[alias]
        if comma:
            parts.append(f"{TABLE[alias]} {alias}")
        else:
            kind = kinds.get(alias, "inner")
            if kind == "left":
                nulled.add(alias)
                if draw(st.booleans()):
                    on_filters[alias].append(_filter(draw, alias))
            join = "LEFT JOIN" if kind == "left" else "JOIN"
            parts.append(f"{join} {TABLE[alias]} {alias} ON {' AND '.join(eqs + on_filters.get(alias, []))}")
    for alias in order:
        if alias not in nulled and draw(st.booleans()):
            where.append(_filter(draw, alias))
    if draw(st.booleans()):
        select = "*"
    else:
        cols = draw(
            st.lists(st.sampled_from([(a, c) for a in order for c in COLS[a]]), min_size=1, max_size=5, unique=True)
        )
        select = ", ".join(f"{a}.{c} AS out_{i}" for i, (a, c) in enumerate(cols))
    sep = ", " if comma else "\n  "
    sql = f"SELECT {select}\nFROM {sep.join(parts)}"
    if where:
        sql += "\nWHERE " + " AND ".join(where)
    tables = {TABLE[a]: _table(draw, a, 8 if a != "s" else 12) for a in ["s", *masters]}
    return sql, tables


def _multiset(t: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in t.to_pylist())


def duck(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return con.sql(sql).to_arrow_table()


def _check(c: tuple[str, dict[str, pa.Table]]) -> None:
    sql, tables = c
    schemas = {name: t.schema for name, t in tables.items()}
    spec = compile_sql(sql, schemas, streams={"events"})
    got = evaluate(spec, tables["events"], tables)
    want = duck(sql, tables)
    assert got.column_names == want.column_names, sql
    assert _multiset(got) == _multiset(want), sql


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_compiled_spec_equals_duckdb(c: tuple[str, dict[str, pa.Table]]) -> None:
    _check(c)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_compiled_spec_equals_duckdb_long(c: tuple[str, dict[str, pa.Table]]) -> None:
    _check(c)
