"""The LOAD DATA bulk path of the SQL sink stores exactly what executemany stores."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.errors import InputError
from ssbj.testing.mariadb import MariaDBServer
from ssbj.testing.tables import TRICKY
from ssbj.testing.tables import mixed_types_table as _table


def _rows(engine: sa.Engine, table: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY id, ssbj_segment"))]  # noqa: S608


def test_load_data_equals_executemany(mariadb: MariaDBServer) -> None:
    data = _table(3000)
    bulk = SqlTableSink(mariadb.url, "bulk_loaded", bulk="load_data")
    plain = SqlTableSink(mariadb.url, "bulk_inserted", bulk="insert")
    for sink in (bulk, plain):
        sink.prepare(data.schema)
        sink.write(4, 0, data)
        sink.write(4, 1, data.slice(0, 10))
        sink.write(4, 0, data)  # a replay replaces, never duplicates
    engine = sa.create_engine(mariadb.url)
    loaded, inserted = _rows(engine, "bulk_loaded"), _rows(engine, "bulk_inserted")
    assert len(loaded) == 3010
    assert loaded == inserted
    by_id = {r[0]: r for r in loaded if r[-1] == 0}
    assert [by_id[i][1] for i in range(len(TRICKY))] == TRICKY
    bulk.close()
    plain.close()
    engine.dispose()


def test_load_data_refuses_values_the_table_would_change(mariadb: MariaDBServer) -> None:
    sink = SqlTableSink(mariadb.url, "bulk_narrow", bulk="load_data")
    sink.prepare(pa.schema([("id", pa.int64()), ("s", pa.string())]))
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE bulk_narrow MODIFY s VARCHAR(3)"))
    sink.write(1, 0, pa.table({"id": [1], "s": ["abc"]}))
    with pytest.raises(InputError, match="rolled back"):
        sink.write(1, 0, pa.table({"id": [1, 2], "s": ["abc", "too long"]}))
    assert _rows(engine, "bulk_narrow") == [(1, "abc", 1, 0)]  # the failed replacement left the old rows
    sink.close()
    engine.dispose()


def test_auto_falls_back_to_insert_when_the_server_refuses_local_files(mariadb: MariaDBServer) -> None:
    root = sa.create_engine(mariadb.root_url)
    with root.begin() as conn:
        conn.execute(sa.text("SET GLOBAL local_infile = 0"))
    try:
        sink = SqlTableSink(mariadb.url, "bulk_refused", bulk="auto")
        data = _table(50)
        sink.prepare(data.schema)
        sink.write(1, 0, data)
        engine = sa.create_engine(mariadb.url)
        assert len(_rows(engine, "bulk_refused")) == 50
        engine.dispose()
        sink.close()
    finally:
        with root.begin() as conn:
            conn.execute(sa.text("SET GLOBAL local_infile = 1"))
        root.dispose()
