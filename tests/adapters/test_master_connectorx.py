"""The connectorx fetch path reads exactly what the driver reads, and survives an outage."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.core.shards import ModRouter, RangeRouter, route_column
from ssbj.errors import ConfigError
from ssbj.retry import RetryPolicy
from ssbj.testing.mariadb import MariaDBServer

pytest.importorskip("connectorx")


@pytest.fixture(scope="module")
def customer(mariadb: MariaDBServer) -> Any:
    eng = sa.create_engine(mariadb.url)
    with eng.begin() as c:
        c.execute(sa.text("DROP TABLE IF EXISTS cx_customer"))
        c.execute(
            sa.text(
                "CREATE TABLE cx_customer (c_custkey BIGINT PRIMARY KEY, c_name VARCHAR(25), c_bal DECIMAL(12,2), "
                "c_d DOUBLE, c_dt DATETIME(6), c_day DATE, c_flag BOOLEAN, c_code VARCHAR(8) NOT NULL UNIQUE)"
            )
        )
        c.execute(
            sa.text("INSERT INTO cx_customer VALUES (:k, :n, :b, :d, :t, :day, :f, :code)"),
            [
                {
                    "k": i * 3,
                    "n": f"O'Brien \\\\ {i}" if i % 2 else None,
                    "b": i / 100,
                    "d": i / 3 if i % 5 else None,
                    "t": f"2026-01-01 10:00:{i % 60:02d}.123456",
                    "day": "2026-01-02",
                    "f": i % 2,
                    "code": f"c{i:06d}",
                }
                for i in range(1, 5001)
            ],
        )
    yield eng
    eng.dispose()


def test_connectorx_partitions_equal_driver_partitions(customer: Any) -> None:
    cx = SqlMasterScan(customer, "cx_customer", "c_custkey", 777, reader="connectorx")
    drv = SqlMasterScan(customer, "cx_customer", "c_custkey", 777, layout=cx.layout())
    assert (cx.reader, drv.reader) == ("connectorx", "driver")
    total = 0
    for p in range(cx.num_partitions()):
        a, b = cx.read_partition(p), drv.read_partition(p)
        assert a.schema == b.schema
        assert a.equals(b), p
        total += a.num_rows
    assert total == 5000 and cx.reader == "connectorx"


@pytest.mark.parametrize("router", [ModRouter(3), RangeRouter((4_000, 9_000))], ids=["mod", "range"])
def test_connectorx_reads_a_shards_share_like_the_driver(customer: Any, router: Any) -> None:
    """The shard predicate reaches connectorx as plain SQL (a modulo's % is not escaped to %% for it)."""
    total = 0
    for s in range(router.shards):
        cx = SqlMasterScan(customer, "cx_customer", "c_custkey", 500, reader="connectorx", shard=(router, s))
        drv = SqlMasterScan(customer, "cx_customer", "c_custkey", 500, layout=cx.layout(), shard=(router, s))
        for p in range(cx.num_partitions()):
            a, b = cx.read_partition(p), drv.read_partition(p)
            assert a.equals(b), (s, p)
            assert set(route_column(a.column("c_custkey"), "integer", router).tolist()) <= {s}
            total += a.num_rows
        assert cx.reader == "connectorx"  # it never fell back to the driver
    assert total == 5000


def test_auto_uses_the_driver_for_a_non_integer_page_column(customer: Any) -> None:
    scan = SqlMasterScan(customer, "cx_customer", "c_custkey", 500, page_column="c_code", reader="auto")
    assert scan.reader == "driver"
    with pytest.raises(ConfigError, match="not an integer column"):
        SqlMasterScan(customer, "cx_customer", "c_custkey", 500, page_column="c_code", reader="connectorx")


def test_connectorx_read_retries_through_an_outage(customer: Any, mariadb: MariaDBServer) -> None:
    scan = SqlMasterScan(
        customer,
        "cx_customer",
        "c_custkey",
        1000,
        reader="connectorx",
        retry=RetryPolicy(attempts=8, initial_backoff=0.5, max_backoff=2.0),
    )
    before = scan.read_partition(1)
    mariadb.stop()
    t = threading.Thread(target=lambda: (time.sleep(2), mariadb.start()))
    t.start()
    try:
        after = scan.read_partition(1)
    finally:
        t.join()
    assert after.equals(before)
    assert scan.reader == "connectorx"
