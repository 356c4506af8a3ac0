"""Loading a micro-batch's output in parts while the join runs: same rows as one write, all or nothing."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.errors import StateError
from ssbj.pipeline.partwriter import PartWriter, parts_sink
from ssbj.testing.mariadb import MariaDBServer
from ssbj.testing.tables import mixed_types_table as _table


def _rows(engine: sa.Engine, table: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY ssbj_segment, id"))]  # noqa: S608


@pytest.mark.parametrize("bulk", ["load_data", "insert"])
def test_parts_load_what_one_write_loads(mariadb: MariaDBServer, bulk: str) -> None:
    data = _table(3000)
    whole = SqlTableSink(mariadb.url, f"whole_{bulk}", bulk=bulk)
    parted = SqlTableSink(mariadb.url, f"parted_{bulk}", bulk=bulk, overlap=True)
    assert parts_sink(whole) is None and parts_sink(parted) is parted
    for sink in (whole, parted):
        sink.prepare(data.schema)
    whole.write(2, 0, data)
    for _ in range(2):  # the replay replaces, never duplicates
        w = PartWriter(parted, 2, 0)
        for start, n in ((0, 7), (7, 993), (1000, 0), (1000, 1999), (2999, 1)):  # uneven parts, an empty one
            w.put(data.slice(start, n))
        w.finish()
    engine = sa.create_engine(mariadb.url)
    assert _rows(engine, f"parted_{bulk}") == _rows(engine, f"whole_{bulk}")
    whole.close()
    parted.close()
    engine.dispose()


def test_an_aborted_write_rolls_back_and_keeps_the_earlier_rows(mariadb: MariaDBServer) -> None:
    data = _table(100)
    sink = SqlTableSink(mariadb.url, "parted_abort", bulk="load_data", overlap=True)
    sink.prepare(data.schema)
    sink.write(5, 0, data.slice(0, 10))
    engine = sa.create_engine(mariadb.url)
    before = _rows(engine, "parted_abort")
    w = PartWriter(sink, 5, 0)
    w.put(data)
    w.abort()
    assert _rows(engine, "parted_abort") == before

    def failing() -> Any:
        yield data  # loaded inside the open transaction (min_rows=1), then the producer fails
        raise RuntimeError("the join failed")

    with pytest.raises(RuntimeError, match="join failed"):
        sink.write_parts(5, 0, failing(), min_rows=1)
    assert _rows(engine, "parted_abort") == before
    w = PartWriter(sink, 5, 0)
    w.put(pa.table({"other": [1]}))  # the sink refuses the part: finish() raises it, nothing changes
    with pytest.raises(Exception, match="columns"):
        w.finish()
    assert _rows(engine, "parted_abort") == before
    with pytest.raises(StateError):
        SqlTableSink(mariadb.url, "never_prepared", overlap=True).write_parts(1, 0, iter([data]))
    sink.close()
    engine.dispose()
