"""Filters over typed columns (decimal, double, date, timestamp, string, boolean) agree with DuckDB."""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter

import duckdb
import pyarrow as pa
import pytest
from multiway_reference import evaluate

from ssbj.errors import ConfigError
from ssbj.sql.compile import compile_sql

D = decimal.Decimal
T = pa.table(
    {
        "id": pa.array(range(6), pa.int64()),
        "price": pa.array([D("0.05"), D("0.06"), D("0.07"), None, D("10.00"), D("0.04")], pa.decimal128(15, 2)),
        "ratio": pa.array([0.5, 1.5, None, 2.5, -1.0, 0.05], pa.float64()),
        "day": pa.array(
            [
                dt.date(1995, 3, 14),
                dt.date(1995, 3, 15),
                dt.date(1995, 3, 16),
                None,
                dt.date(1994, 1, 1),
                dt.date(1996, 1, 1),
            ]
        ),
        "ts": pa.array(
            [
                dt.datetime(2020, 1, 1, 12),
                None,
                dt.datetime(2020, 1, 2),
                dt.datetime(2019, 12, 31),
                dt.datetime(2020, 1, 1),
                dt.datetime(2021, 1, 1),
            ],
            pa.timestamp("us"),
        ),
        "name": pa.array(["abc", "ABC", None, "a_c", "xyz", "b%"], pa.string()),
        "flag": pa.array([True, False, None, True, False, True]),
        "qty": pa.array([1, 2, 3, None, 5, 6], pa.int32()),
    }
)

PREDICATES = [
    "price BETWEEN 0.05 AND 0.07",
    "price >= 0.055",
    "price = 10",
    "ratio > 0.05",
    "ratio < 2",
    "qty < 2.5",
    "qty IN (1, 3, 6)",
    "qty NOT IN (1, NULL)",
    "day < DATE '1995-03-15'",
    "day < '1995-03-15'",
    "day >= DATE '1994-01-01' AND day < DATE '1994-01-01' + INTERVAL '1' YEAR",
    "ts >= TIMESTAMP '2020-01-01 00:00:00' AND ts < TIMESTAMP '2020-01-02 00:00:00'",
    "name LIKE 'a%'",
    "name ILIKE 'a%'",
    "name NOT LIKE '%c'",
    "name LIKE 'a_c'",
    "flag",
    "NOT flag",
    "flag = TRUE OR qty > 4",
    "name IS NULL OR ratio IS NULL",
    "NOT (qty BETWEEN 2 AND 5)",
    "-1 < ratio",
    "ratio <> -1.0",
]


@pytest.mark.parametrize("pred", PREDICATES)
def test_filter_equals_duckdb(pred: str) -> None:
    sql = f"SELECT id FROM t WHERE {pred}"  # noqa: S608 - test predicates, not user input
    spec = compile_sql(sql, {"t": T.schema}, streams={"t"})
    got = Counter(r["id"] for r in evaluate(spec, T, {}).to_pylist())
    con = duckdb.connect()
    con.register("t", T)
    want = Counter(r[0] for r in con.sql(sql).fetchall())
    assert got == want


@pytest.mark.parametrize(
    ("pred", "message"),
    [
        ("day < 'not a date'", "does not fit column type date32"),
        ("name LIKE 'a\\\\%'", "LIKE pattern"),
        ("qty > 'x'", "does not fit column type int32"),
        ("upper(name) = 'ABC'", "expression in a filter is not supported: UPPER(name)"),
    ],
)
def test_filter_errors(pred: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        compile_sql(f"SELECT id FROM t WHERE {pred}", {"t": T.schema}, streams={"t"})  # noqa: S608
    assert message in str(err.value)
