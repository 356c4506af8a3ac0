"""Pushed-down shard predicates: quoted identifiers, bound values, and the router's semantics.

No database server: the text is checked per dialect, and the statements are evaluated by
Python's in-process sqlite3 against the routers (full int64 range, negative keys, NULLs).
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
import sqlalchemy as sa

from ssbj.adapters.shard_sql import identifier, partition_query, render
from ssbj.core.shards import HashRouter, ModRouter, RangeRouter
from ssbj.errors import ConfigError

KEYS = [-(2**63), -(2**62) - 7, -10, -7, -1, 0, 1, 2, 7, 10, 11, 2**62 + 3, 2**63 - 1]


def test_mariadb_text_quotes_identifiers_and_binds_values() -> None:
    sql, params = render(
        partition_query("crm.customer", "c_custkey", ["c_name"], ModRouter(4), 3, "id", 10, 20), "mariadb"
    )
    assert "FROM `crm`.`customer`" in sql
    assert "(`crm`.`customer`.`c_custkey` %% %s + %s) %% %s = %s" in sql
    assert "`crm`.`customer`.`id` > %s AND `crm`.`customer`.`id` <= %s" in sql
    assert params == [4, 4, 4, 3, 10, 20]


def test_postgresql_range_text() -> None:
    sql, params = render(partition_query("customer", "k", ["v"], RangeRouter((100, 200)), 1, "k"), "postgresql")
    assert '"customer"."k" >= %(shard_lo_1)s::BIGINT AND "customer"."k" < %(shard_hi_1)s::BIGINT' in sql
    assert params == {"shard_lo_1": 100, "shard_hi_1": 200}


def test_first_and_last_range_shards_are_open() -> None:
    r = RangeRouter((100, 200))
    first, _ = render(partition_query("t", "k", [], r, 0, "k"), "postgresql")
    last, _ = render(partition_query("t", "k", [], r, 2, "k"), "postgresql")
    assert ">=" not in first and "<" in first
    assert "<" not in last and ">=" in last


@pytest.mark.parametrize(
    "table,key,cols",
    [("cust omer", "k", []), ("t", "k; DROP TABLE t", []), ("t", "k", ["v`x"]), ("a.b.c", "k", []), ("t", "1k", [])],
)
def test_non_plain_identifiers_are_refused(table: str, key: str, cols: list[str]) -> None:
    with pytest.raises(ConfigError):
        partition_query(table, key, cols, ModRouter(2), 0, "k")


def test_bad_shard_and_unsupported_router() -> None:
    with pytest.raises(ConfigError):
        partition_query("t", "k", [], ModRouter(2), 2, "k")
    with pytest.raises(ConfigError, match="filter its shard after reading"):
        partition_query("t", "k", [], HashRouter(2), 0, "k")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        render(sa.select(sa.literal(1)), "oracle")
    assert identifier("c_$1", "column") == "c_$1"


def _sqlite_rows(router: ModRouter | RangeRouter, shard: int, lower: int | None, upper: int | None) -> list[int]:
    con = sqlite3.connect(":memory:")
    con.execute('CREATE TABLE "m" ("k" INTEGER, "v" INTEGER)')
    con.executemany('INSERT INTO "m" VALUES (?, ?)', [(k, i) for i, k in enumerate([*KEYS, None])])
    sql, params = render(partition_query("m", "k", ["v"], router, shard, "v", lower, upper), "sqlite")
    assert isinstance(params, list)
    return sorted(v for _, v in con.execute(sql, params).fetchall())


@pytest.mark.parametrize("router", [ModRouter(1), ModRouter(3), ModRouter(4), RangeRouter((-7, 2, 11))])
def test_sqlite_evaluates_the_router(router: ModRouter | RangeRouter) -> None:
    shard_of = router.route_values(np.array(KEYS, dtype=np.int64)).tolist()
    got: list[int] = []
    for s in range(router.shards):
        rows = _sqlite_rows(router, s, None, None)
        assert rows == [i for i, sh in enumerate(shard_of) if sh == s]
        got += rows
    assert sorted(got) == list(range(len(KEYS)))  # NULL keys are in no share: they never match


def test_page_bounds_are_half_open() -> None:
    assert _sqlite_rows(ModRouter(1), 0, 2, 5) == [3, 4, 5]
