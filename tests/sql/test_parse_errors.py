"""Unsupported SQL gets a ConfigError naming the construct and its line; the subset parses."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ssbj.errors import ConfigError
from ssbj.sql.compile import compile_sql
from ssbj.sql.logical import parse_query

SCHEMAS = {
    "orders": pa.schema([("o_orderkey", pa.int64()), ("o_custkey", pa.int64()), ("o_date", pa.date32())]),
    "customer": pa.schema([("c_custkey", pa.int64()), ("c_nationkey", pa.int64()), ("c_name", pa.string())]),
    "nation": pa.schema([("n_nationkey", pa.int64()), ("n_name", pa.string()), ("n_regionkey", pa.int64())]),
    "region": pa.schema([("r_regionkey", pa.int64()), ("r_name", pa.string())]),
}

BAD = [
    (
        "SELECT o_orderkey\nFROM orders\nWHERE o_custkey IN (SELECT c_custkey FROM customer)",
        "line 3: subquery in WHERE",
    ),
    ("SELECT o_orderkey FROM orders\nWHERE EXISTS (SELECT 1 FROM customer)", "line 2: subquery in WHERE"),
    ("SELECT count(*) FROM orders", "aggregate COUNT(*) in the SELECT list"),
    ("SELECT o_custkey FROM orders\nGROUP BY o_custkey", "line 2: GROUP BY is not supported"),
    ("SELECT o_orderkey FROM orders ORDER BY o_orderkey", "ORDER BY is not supported"),
    ("SELECT o_orderkey FROM orders LIMIT 3", "LIMIT is not supported"),
    ("SELECT DISTINCT o_orderkey FROM orders", "SELECT DISTINCT is not supported"),
    ("SELECT o_orderkey FROM orders UNION SELECT c_custkey FROM customer", "UNION is not supported"),
    ("SELECT row_number() OVER () AS r FROM orders", "window function in the SELECT list"),
    ("SELECT * FROM orders o, customer c\nWHERE o.o_custkey < c.c_custkey", "line 2: non-equi join predicate"),
    (
        "SELECT * FROM orders o, customer c\nWHERE o.o_custkey = c.c_custkey OR o.o_orderkey = c.c_nationkey",
        "line 2: OR across inputs",
    ),
    ("SELECT * FROM orders o RIGHT JOIN customer c ON o.o_custkey = c.c_custkey", "RIGHT JOIN of 'c'"),
    ("SELECT * FROM orders o FULL JOIN customer c ON o.o_custkey = c.c_custkey", "FULL JOIN of 'c'"),
    ("SELECT * FROM orders o JOIN customer c USING (c_custkey)", "USING"),
    ("SELECT * FROM orders o, (SELECT * FROM customer) c", "subquery in FROM"),
    ("SELECT o_orderkey + 1 AS k FROM orders", "expression o_orderkey + 1 in the SELECT list"),
    (
        "SELECT * FROM orders o WHERE o.o_custkey * o.o_orderkey > 3",
        "expression in a filter is not supported: o.o_custkey * o.o_orderkey",
    ),
    ("SELECT * FROM lineitem", "unknown input 'lineitem'"),
    ("SELECT nope FROM orders", "unknown column 'nope'"),
    ("SELECT * FROM orders o, customer c WHERE o.o_custkey = c.c_custkey AND o.x = 1", "column 'x' not found in 'o'"),
    (
        "SELECT * FROM orders o LEFT JOIN customer c ON o.o_custkey = c.c_custkey\nWHERE c.c_name = 'x'",
        "line 2: WHERE predicate on c, the null-supplying side",
    ),
    (
        "SELECT * FROM orders o LEFT JOIN customer c ON o.o_custkey = c.c_custkey AND o.o_orderkey > 3",
        "ON predicate on the preserved side of LEFT JOIN 'c'",
    ),
    ("SELECT o_orderkey FROM orders WHERE", "SQL syntax error"),
    ("CREATE VIEW v AS SELECT * FROM orders; SELECT * FROM v", "CREATE VIEW is not supported"),
    ("WITH x AS (SELECT * FROM orders) SELECT * FROM orders", "WITH (common table expression) is not supported"),
    ("SELECT * FROM orders o, orders o", "alias(es) used twice: o"),
    ("SELECT * FROM orders o JOIN orders o2 ON o.o_orderkey = o2.o_orderkey", "output column name(s)"),
]


@pytest.mark.parametrize(("sql", "message"), BAD)
def test_unsupported_sql_names_the_construct(sql: str, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        compile_sql(sql, SCHEMAS, streams={"orders"})
    assert message in str(err.value), str(err.value)


STAR_SCHEMAS = {
    "orders": SCHEMAS["orders"],
    "customer": SCHEMAS["customer"],
    "nation": SCHEMAS["nation"],
    "region": SCHEMAS["region"],
}

COMPILE_BAD = [
    ("SELECT c.c_name FROM customer c", "orders", "no stream among the inputs"),
    (
        "SELECT o.o_orderkey FROM orders o, customer c WHERE o.o_custkey = c.c_custkey",
        ("orders", "customer"),
        "exactly one band predicate",
    ),
    ("SELECT o.o_orderkey FROM orders o, customer c", "orders", "cross join"),
    (
        "SELECT o.o_orderkey FROM orders o, customer c, nation n\n"
        "WHERE o.o_custkey = c.c_custkey AND c.c_nationkey = n.n_nationkey\n"
        "  AND n.n_regionkey = o.o_orderkey",
        "orders",
        "line 3: join predicate n.n_regionkey = o.o_orderkey closes a cycle",
    ),
    (
        "SELECT o.o_orderkey FROM customer c LEFT JOIN orders o ON o.o_custkey = c.c_custkey",
        "orders",
        "must be on the preserved side of every LEFT JOIN",
    ),
]


@pytest.mark.parametrize(("sql", "streams", "message"), COMPILE_BAD)
def test_queries_the_operator_cannot_run_are_refused(sql: str, streams: str | tuple[str, ...], message: str) -> None:
    names = {streams} if isinstance(streams, str) else set(streams)
    with pytest.raises(ConfigError) as err:
        compile_sql(sql, STAR_SCHEMAS, streams=names)
    assert message in str(err.value), str(err.value)


def test_chain_compiles_to_a_tree_rooted_at_the_stream() -> None:
    sql = """
    SELECT o.o_orderkey, c.c_name AS customer, n.n_name AS nation, r.r_name
    FROM region r, nation n, customer c, orders o
    WHERE r.r_regionkey = n.n_regionkey AND n.n_nationkey = c.c_nationkey
      AND c.c_custkey = o.o_custkey AND r.r_name = 'ASIA' AND o.o_date < DATE '1995-03-15'
    """
    spec = compile_sql(sql, STAR_SCHEMAS, streams={"orders"})
    assert spec.stream == "o"
    assert [(e.probe, e.master, e.probe_columns, e.master_columns) for e in spec.edges] == [
        ("o", "c", ("o_custkey",), ("c_custkey",)),
        ("c", "n", ("c_nationkey",), ("n_nationkey",)),
        ("n", "r", ("n_regionkey",), ("r_regionkey",)),
    ]
    assert [o.name for o in spec.output] == ["o_orderkey", "customer", "nation", "r_name"]
    assert set(spec.filters) == {"r", "o"}
    assert spec.master("r").columns == ("r_regionkey", "r_name")
    assert spec.stream_columns == ("o_custkey", "o_date", "o_orderkey")


def test_parse_keeps_left_join_order_and_on_filters() -> None:
    q = parse_query(
        "SELECT o.*, c.c_name FROM orders o LEFT JOIN customer c ON o.o_custkey = c.c_custkey AND c.c_name LIKE 'A%'",
        SCHEMAS,
    )
    assert [(s.alias, s.kind) for s in q.steps] == [("c", "left")]
    assert q.filter_text == {"c": "c.c_name LIKE 'A%'"}
    assert [o.name for o in q.output] == ["o_orderkey", "o_custkey", "o_date", "c_name"]
