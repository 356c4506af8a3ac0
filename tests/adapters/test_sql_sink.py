"""SQL warehouse sink against SQLite and MariaDB, and the SQL adapters through MariaDB outages."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import threading
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from sql_cases import FAST_RETRY, OUT, make_master, unique

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.adapters.sql_common import is_transient
from ssbj.contracts import BATCH_ID_COLUMN, SEGMENT_COLUMN, WarehouseSink
from ssbj.errors import (
    ConfigError,
    InputError,
    ServiceError,
    StateError,
    TerminalError,
    TransientError,
)
from ssbj.retry import RetryPolicy
from ssbj.testing.mariadb import PASSWORD, MariaDBServer


# ---------------------------------------------------------------- SQL sink
def sink_rows(sink: SqlTableSink, *, full: bool = False) -> Counter[tuple[Any, ...]]:
    t = sa.Table(sink._short_name, sa.MetaData(), autoload_with=sink._engine)
    with sink._engine.connect() as conn:
        if full:
            return Counter(tuple(r) for r in conn.execute(sa.select(t)))
        q = sa.select(t.c[BATCH_ID_COLUMN], t.c[SEGMENT_COLUMN], sa.func.count()).group_by(
            t.c[BATCH_ID_COLUMN], t.c[SEGMENT_COLUMN]
        )
        return Counter({(b, s): n for b, s, n in conn.execute(q)})


def test_sql_sink_replaces_each_batch_and_segment(engine: sa.Engine) -> None:
    sink = SqlTableSink(engine, unique("out"), chunk_rows=3)
    assert isinstance(sink, WarehouseSink)
    sink.prepare(OUT.schema)
    sink.write(1, 0, OUT)
    sink.write(1, 0, OUT)  # a replayed write
    sink.write(1, 1, OUT.slice(0, 2))
    sink.write(2, 0, OUT.slice(0, 1))
    assert sink_rows(sink) == Counter({(1, 0): 4, (1, 1): 2, (2, 0): 1})
    sink.write(1, 1, OUT.slice(0, 0))  # an empty write still deletes the earlier attempt
    assert sink_rows(sink) == Counter({(1, 0): 4, (2, 0): 1})
    rows = sorted(r for r in sink_rows(sink, full=True) if r[-2:] == (1, 0))
    assert rows[0][:3] == (1, "a", decimal.Decimal("1.50"))
    assert rows[0][4:6] == (dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 1, 2, 3, 456789))
    assert rows[0][6].replace(tzinfo=None) == dt.datetime(2024, 5, 6, 7, 8, 9)  # MariaDB/SQLite keep UTC, naive
    assert rows[3][1] == "d" * 500
    # a second sink on the existing table (a restarted job) checks it and replaces as well
    again = SqlTableSink(engine, sink._table_name, create=False)
    again.prepare(OUT.schema)
    again.write(2, 0, OUT)
    assert sink_rows(again) == Counter({(1, 0): 4, (2, 0): 4})
    sink.close()
    again.close()


def test_sql_sink_write_is_one_transaction(engine: sa.Engine) -> None:
    schema = pa.schema([pa.field("sid", pa.int64(), nullable=False)])
    sink = SqlTableSink(engine, unique("tx"), chunk_rows=2, retry=FAST_RETRY)
    sink.prepare(schema)
    sink.write(5, 0, pa.table({"sid": [1, 2, 3]}, schema=schema))
    bad = pa.table({"sid": pa.array([7, 8, None], pa.int64())})  # the second chunk breaks NOT NULL
    with pytest.raises(TerminalError):
        sink.write(5, 0, bad)
    assert sink_rows(sink) == Counter({(5, 0): 3})  # the delete and the first chunk were rolled back
    sink.close()


def test_sql_sink_schema_errors(engine: sa.Engine) -> None:
    name = unique("out")
    sink = SqlTableSink(engine, name)
    sink.prepare(OUT.schema)
    wider = OUT.schema.append(pa.field("extra", pa.int32()))
    with pytest.raises(StateError, match=r"lacks column\(s\) 'extra'"):
        SqlTableSink(engine, name).prepare(wider)
    with pytest.raises(StateError, match="does not exist"):
        SqlTableSink(engine, unique("missing"), create=False).prepare(OUT.schema)
    with pytest.raises(ConfigError, match="reserved"):
        SqlTableSink(engine, unique("x")).prepare(pa.schema([pa.field(BATCH_ID_COLUMN, pa.int64())]))
    with pytest.raises(InputError, match="cannot store"):
        SqlTableSink(engine, unique("x")).prepare(pa.schema([pa.field("l", pa.list_(pa.int64()))]))
    with pytest.raises(InputError, match="columns"):
        sink.write(1, 0, OUT.select(["sid"]))
    with pytest.raises(StateError, match="before prepare"):
        SqlTableSink(engine, name).write(1, 0, OUT)
    sink.close()


# ---------------------------------------------------------------- outages (MariaDB)
def _restart_later(server: MariaDBServer, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        server.start()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def test_read_survives_a_short_outage(mariadb: MariaDBServer, caplog: pytest.LogCaptureFixture) -> None:
    eng = sa.create_engine(mariadb.url, pool_pre_ping=True)
    try:
        name, _ = make_master(eng, 500)
        scan = SqlMasterScan(
            mariadb.url, name, "k", 97, retry=RetryPolicy(attempts=12, initial_backoff=0.1, max_backoff=0.8)
        )
        before = scan.read_partition(2)
        caplog.set_level(logging.WARNING, logger="adapters")
        mariadb.stop()
        th = _restart_later(mariadb, 1.0)
        try:
            after = scan.read_partition(2)
        finally:
            th.join()
        assert after.equals(before)
        retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert retries and "attempt 1 of 12" in retries[0] and "OperationalError" in retries[0]
        assert "127.0.0.1" in retries[0] and "***" in retries[0]
        assert PASSWORD not in caplog.text
        scan.close()
    finally:
        mariadb.start()
        eng.dispose()


def test_outage_longer_than_the_retry_budget(mariadb: MariaDBServer, caplog: pytest.LogCaptureFixture) -> None:
    eng = sa.create_engine(mariadb.url, pool_pre_ping=True)
    try:
        name, _ = make_master(eng, 200)
        scan = SqlMasterScan(eng, name, "k", 97, retry=RetryPolicy(attempts=3, initial_backoff=0.05, max_backoff=0.1))
        scan.read_partition(0)
        mariadb.stop()
        t0 = time.monotonic()
        with pytest.raises(TransientError, match=rf"{name}.*3 times") as info:
            scan.read_partition(1)
        assert time.monotonic() - t0 < 5
        assert "127.0.0.1" in str(info.value) and PASSWORD not in str(info.value)
        assert PASSWORD not in caplog.text
    finally:
        mariadb.start()
        eng.dispose()


def test_sink_write_survives_a_short_outage(mariadb: MariaDBServer) -> None:
    sink = SqlTableSink(
        mariadb.url, unique("out"), retry=RetryPolicy(attempts=12, initial_backoff=0.1, max_backoff=0.8)
    )
    try:
        sink.prepare(OUT.schema)
        sink.write(1, 0, OUT)
        mariadb.stop()
        th = _restart_later(mariadb, 1.0)
        try:
            sink.write(1, 0, OUT)
        finally:
            th.join()
        assert sink_rows(sink) == Counter({(1, 0): OUT.num_rows})
    finally:
        mariadb.start()
        sink.close()


def test_terminal_errors_are_not_retried(mariadb: MariaDBServer) -> None:
    bad = mariadb.url.set(password="wrong")  # noqa: S106
    t0 = time.monotonic()
    with pytest.raises(ServiceError) as info:
        SqlMasterScan(bad, "whatever", "k", 10, retry=RetryPolicy(attempts=5, initial_backoff=1.0))
    assert time.monotonic() - t0 < 1.0
    assert "Access denied" in str(info.value) and ":wrong@" not in str(info.value) and "***" in str(info.value)
    assert not is_transient(ValueError())
