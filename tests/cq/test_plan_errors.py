"""The planner: the schema and join tree it derives, and a ConfigError naming every unsupported construct."""

from __future__ import annotations

import pytest
from cq_reference import EXAMPLES

from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import ConfigError

SCHEMA = parse_schema((EXAMPLES / "tpch_schema.sql").read_text())


def test_tpch_schema_keys() -> None:
    assert SCHEMA["lineitem"].primary_key == ("l_orderkey", "l_linenumber")
    fks = {(f.columns, f.ref_table) for f in SCHEMA["lineitem"].foreign_keys}
    assert (("l_partkey", "l_suppkey"), "partsupp") in fks
    assert SCHEMA["customer"].columns["c_name"].max_length == 25


def test_q7_tree_two_nations() -> None:
    plan = plan_query((EXAMPLES / "q7.sql").read_text(), SCHEMA)
    assert plan.root == "lineitem"
    assert plan.aliases["n1"].parent == "supplier" and plan.aliases["n2"].parent == "customer"
    assert plan.aliases["supplier"].parent_fk == ("l_suppkey",)
    assert len(plan.residual) == 1 and not plan.asserts  # the nation pair spans n1 and n2
    assert [o.name for o in plan.outputs] == ["supp_nation", "cust_nation", "l_year", "revenue"]


def test_q5_assertion_key() -> None:
    plan = plan_query((EXAMPLES / "q5.sql").read_text(), SCHEMA)
    assert len(plan.asserts) == 1
    cls = plan.asserts[0]
    assert ("customer", "c_nationkey") in cls.members and cls.lca == "lineitem"


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("select count(*) from orders left join customer on o_custkey = c_custkey", "LEFT JOIN"),
        ("select count(*) from orders, customer where o_totalprice = c_acctbal", "not a key join"),
        ("select count(*) from orders, customer", "cross product"),
        ("select count(*) from orders, nation", "cross product"),
        ("select o_custkey, count(*) from orders group by o_custkey having count(*) > 1", "HAVING"),
        ("select o_orderkey from orders limit 10", "LIMIT"),
        ("select distinct o_custkey from orders", "DISTINCT"),
        ("select min(o_totalprice) from orders", "aggregate"),
        ("select count(distinct o_custkey) from orders", "COUNT(DISTINCT"),
        ("select o_orderkey from orders where o_custkey in (select c_custkey from customer)", "subquery"),
        ("select sum(o_totalprice) / count(*) from orders", "expression over aggregates"),
        ("select o_orderkey, count(*) from orders", "neither grouped nor aggregated"),
        ("select x from nosuch", "not in the schema"),
        ("select o_nosuch from orders", "in none of the query's tables"),
        ("select upper(o_comment) from orders", "not supported"),
        ("select * from orders", "SELECT *"),
        ("select o_orderkey from orders union select c_custkey from customer", "SELECT"),
        ("select count(*) from nation a, nation b where a.n_nationkey = b.n_nationkey", "root"),
        ("select sum(o_comment) from orders", "SUM of a string"),
    ],
)
def test_unsupported_constructs_are_named(sql: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_query(sql, SCHEMA)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("ddl", "needle"),
    [
        ("create table t (a int)", "no PRIMARY KEY"),
        ("create table t (a int primary key, b int references u(x))", "unknown table u"),
        (
            "create table u (x int primary key, y int); create table t (a int primary key, b int references u(y))",
            "not its primary key",
        ),
        ("create table t (a int primary key, b blob)", "not supported"),
        ("create view v as select 1", "only CREATE TABLE"),
    ],
)
def test_schema_errors(ddl: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_schema(ddl)
    assert needle in str(err.value)
