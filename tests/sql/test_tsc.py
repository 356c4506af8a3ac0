"""TSC converts the binary join trees of the TPC-H join queries into multi-way nodes.

The eleven queries of the UMJoin paper's Table 3 (Q2, Q3, Q5, Q7, Q8, Q9, Q10, Q11, Q15,
Q18, Q21; the specification's texts in tests/data/tpch/), plus the pattern rules on small
plans: projections between joins are absorbed, a join on the null-supplying side of a LEFT
JOIN keeps its own node, joins without an equi-join key stay binary, subqueries and views
are converted inside.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ssbj.errors import ConfigError
from ssbj.sql.parse import parse_schema_ddl
from ssbj.sql.plan import Node, build_plan, render, walk
from ssbj.sql.tsc import check_conversion, convert, create_groups

TPCH = Path(__file__).resolve().parents[1] / "data" / "tpch"
SCHEMA = parse_schema_ddl((TPCH / "schema.sql").read_text())

# query -> (binary joins in the plan, inputs of each MultiJoin node after TSC, pre-order)
EXPECTED = {
    "q02": (7, [5, 4]),  # the correlated subquery's 4-way join is its own node
    "q03": (2, [3]),
    "q05": (5, [6]),
    "q07": (5, [6]),  # inside the derived table `shipping`
    "q08": (7, [8]),
    "q09": (5, [6]),
    "q10": (3, [4]),
    "q11": (4, [3, 3]),  # the HAVING subquery's join is converted too
    "q15": (1, [2]),  # supplier with the view revenue0 (the view has no join)
    "q18": (2, [3]),  # the IN subquery has no join
    "q21": (3, [4]),  # EXISTS / NOT EXISTS subqueries have no join
}


def _multijoins(plan: Node) -> list[Node]:
    return [n for n in walk(plan) if n.op == "MultiJoin"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_tpch_query_converts(name: str) -> None:
    plan = build_plan((TPCH / f"{name}.sql").read_text(), SCHEMA)
    before = render(plan)
    converted = convert(plan)
    joins, inputs = EXPECTED[name]
    assert sum(n.op == "Join" for n in walk(plan)) == joins
    assert check_conversion(plan, converted) == [], render(converted)
    assert [len(m.inputs) for m in _multijoins(converted)] == inputs
    assert not any(n.op == "Join" for n in walk(converted))
    assert render(plan) == before  # the input plan is left as it was


def test_all_eleven_convert() -> None:
    converted = []
    for name in sorted(EXPECTED):
        plan = build_plan((TPCH / f"{name}.sql").read_text(), SCHEMA)
        if check_conversion(plan, convert(plan)) == []:
            converted.append(name)
    assert converted == sorted(EXPECTED)


def test_projections_between_joins_are_absorbed() -> None:
    plan = build_plan((TPCH / "q03.sql").read_text(), SCHEMA)
    projects_between = [n for n in walk(plan) if n.op == "Project" and n.inputs[0].op == "Join"]
    assert projects_between, "the plan has projections after its joins"
    groups = {id(g): g for g in create_groups(plan).values()}
    (group,) = groups.values()
    assert [n.op for n in group.members] == ["Join", "Project", "Join"]
    # the projection above the top join feeds the aggregate: it stays, above the MultiJoin
    converted = convert(plan)
    (mj,) = _multijoins(converted)
    assert mj.columns == group.root.columns


def _scan(alias: str, *cols: str) -> Node:
    return Node("Scan", [], tuple(f"{alias}.{c}" for c in cols), f"{alias} AS {alias}")


def _join(kind: str, left: Node, right: Node, key: tuple[str, str]) -> Node:
    return Node("Join", [left, right], left.columns + right.columns, kind=kind, equi=(key,))


def test_left_join_null_supplying_side_keeps_its_own_node() -> None:
    # o LEFT JOIN (c JOIN n): a bushy tree, as a planner builds for a parenthesised join
    cn = _join("inner", _scan("c", "ck", "nk"), _scan("n", "nk"), ("c.nk", "n.nk"))
    plan = _join("left", _scan("o", "ck"), cn, ("o.ck", "c.ck"))
    converted = convert(plan)
    assert check_conversion(plan, converted) == []
    outer, inner = _multijoins(converted)
    assert [m.kind for m in outer.members] == ["left"]
    assert [m.kind for m in inner.members] == ["inner"]
    # the same tree with an inner join on top merges into one node of three inputs
    merged = convert(_join("inner", _scan("o", "ck"), cn, ("o.ck", "c.ck")))
    (mj,) = _multijoins(merged)
    assert len(mj.inputs) == 3


def test_parenthesised_joins_are_refused_in_plans() -> None:
    sql = (
        "SELECT o.o_orderkey FROM orders o LEFT JOIN (customer c JOIN nation n ON c.c_nationkey = n.n_nationkey) "
        "ON o.o_custkey = c.c_custkey"
    )
    with pytest.raises(ConfigError, match="parenthesised joins are not supported"):
        build_plan(sql, SCHEMA)


def test_left_joins_on_the_preserved_side_merge() -> None:
    sql = """
    SELECT o.o_orderkey, c.c_name, n.n_name
    FROM orders o LEFT JOIN customer c ON o.o_custkey = c.c_custkey
      LEFT JOIN nation n ON c.c_nationkey = n.n_nationkey
    """
    plan = build_plan(sql, SCHEMA)
    (mj,) = _multijoins(convert(plan))
    assert [m.kind for m in mj.members] == ["left", "left"]
    assert len(mj.inputs) == 3


def test_joins_without_equi_key_stay_binary() -> None:
    sql = """
    SELECT o.o_orderkey, c.c_name, n.n_name
    FROM orders o, customer c, nation n
    WHERE o.o_custkey < c.c_custkey AND c.c_nationkey = n.n_nationkey
    """
    plan = build_plan(sql, SCHEMA)
    converted = convert(plan)
    assert check_conversion(plan, converted) == []
    binary = [n for n in walk(converted) if n.op == "Join"]
    assert [(n.kind, n.residual) for n in binary] == [("inner", ("o.o_custkey < c.c_custkey",))]
    (mj,) = _multijoins(converted)
    assert len(mj.inputs) == 2


def test_check_conversion_detects_a_lost_join() -> None:
    plan = build_plan((TPCH / "q05.sql").read_text(), SCHEMA)
    converted = convert(plan)
    (mj,) = _multijoins(converted)
    mj.members = mj.members[:-1]
    assert "the join conditions differ" in check_conversion(plan, converted)
    unconverted = check_conversion(plan, plan)
    assert "no MultiJoin node" in unconverted
    assert any(p.startswith("5 convertible binary join(s) left") for p in unconverted)
