"""SQL master scan and warehouse sinks against SQLite (a file) and a real MariaDB server."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from reference import as_multiset, batch_join

from ssbj.adapters.master_layout import decode_value, encode_value
from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_parquet import SCHEMA_FILE, STALE_TMP_SECONDS, ParquetDirSink, file_name
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.adapters.sql_common import is_transient
from ssbj.contracts import BATCH_ID_COLUMN, SEGMENT_COLUMN, CheckpointedMasterScan, WarehouseSink
from ssbj.core import JoinSpec, SemiStreamJoin
from ssbj.errors import (
    CheckpointError,
    ConfigError,
    InputError,
    ServiceError,
    StateError,
    TerminalError,
    TransientError,
)
from ssbj.retry import RetryPolicy
from ssbj.testing.mariadb import PASSWORD, MariaDBServer

FAST_RETRY = RetryPolicy(attempts=3, initial_backoff=0.01, max_backoff=0.02)


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.services)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """An engine on a SQLite file or on the session's MariaDB server."""
    if request.param == "sqlite":
        eng = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    else:
        server: MariaDBServer = request.getfixturevalue("mariadb")
        eng = sa.create_engine(server.url, pool_pre_ping=True)
    yield eng
    eng.dispose()


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_master(engine: sa.Engine, n: int, *, name: str | None = None, step: int = 3) -> tuple[str, sa.Table]:
    """``n`` rows with gaps in the primary key (id = 10 + step * i), a skewed join key, a string and a decimal."""
    name = name or unique("master")
    t = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("k", sa.Integer, nullable=True),
        sa.Column("name", sa.String(20)),
        sa.Column("amount", sa.Numeric(12, 2)),
    )
    with engine.begin() as conn:
        t.create(conn)
        if n:
            rows = [
                {
                    "id": 10 + step * i,
                    "k": None if i % 41 == 0 else i % 37,
                    "name": f"name-{i}",
                    "amount": decimal.Decimal(i) / 4,
                }
                for i in range(n)
            ]
            conn.execute(sa.insert(t), rows)
    return name, t


def table_rows(engine: sa.Engine, t: sa.Table, cols: list[str]) -> Counter[tuple[Any, ...]]:
    with engine.connect() as conn:
        return Counter(tuple(r) for r in conn.execute(sa.select(*[t.c[c] for c in cols])))


def all_partitions(scan: SqlMasterScan) -> list[pa.Table]:
    return [scan.read_partition(p) for p in range(scan.num_partitions())]


# ---------------------------------------------------------------- master scan
def test_partitions_cover_the_table_once(engine: sa.Engine) -> None:
    name, t = make_master(engine, 2000)
    scan = SqlMasterScan(engine, name, "k", 97)
    assert isinstance(scan, CheckpointedMasterScan)
    assert scan.num_rows == 2000
    assert scan.num_partitions() == -(-2000 // 97)
    assert scan.schema.names == ["id", "k", "name", "amount"]
    assert scan.schema.field("amount").type == pa.decimal128(12, 2)
    parts = all_partitions(scan)
    assert [p.num_rows for p in parts] == [97] * (len(parts) - 1) + [2000 - 97 * (len(parts) - 1)]
    seen: Counter[tuple[Any, ...]] = Counter()
    for part in parts:
        assert part.schema.equals(scan.schema)
        ids = part.column("id").to_pylist()
        assert ids == sorted(ids)  # ordered by the page column: re-reads are deterministic
        seen += as_multiset(part)
    assert seen == table_rows(engine, t, ["id", "k", "name", "amount"])
    assert max(seen.values()) == 1
    assert scan.read_partition(3).equals(parts[3])


@pytest.mark.parametrize(
    "value",
    [
        -(2**62),
        "ä/b c",
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 1, 2, 3, 4),
        dt.datetime(2024, 2, 29, 1, 2, 3, tzinfo=dt.UTC),
        decimal.Decimal("-12.340"),
        0.1,
        b"\x00\xff",
        uuid.UUID(int=12345),
    ],
)
def test_boundary_values_survive_json(value: object) -> None:
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    assert back == value and type(back) is type(value)


def test_exact_multiple_of_b_has_no_empty_last_partition(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 97 * 4)
    scan = SqlMasterScan(engine, name, "k", 97)
    assert scan.num_partitions() == 4
    assert [scan.read_partition(p).num_rows for p in range(4)] == [97] * 4


def test_empty_table_has_one_empty_partition(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 0)
    scan = SqlMasterScan(engine, name, "k", 10)
    assert (scan.num_partitions(), scan.num_rows) == (1, 0)
    part = scan.read_partition(0)
    assert part.num_rows == 0 and part.schema.equals(scan.schema)
    with pytest.raises(StateError, match="out of range"):
        scan.read_partition(1)


def test_projection_keeps_config_order_and_adds_the_key(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 300)
    scan = SqlMasterScan(engine, name, "k", 50, columns=["amount", "name"])
    assert scan.schema.names == ["k", "amount", "name"]
    scan = SqlMasterScan(engine, name, "k", 50, columns=["name", "k"])
    assert scan.schema.names == ["name", "k"]
    assert sum(scan.read_partition(p).num_rows for p in range(scan.num_partitions())) == 300


def test_layout_round_trip_and_later_changes(engine: sa.Engine) -> None:
    name, t = make_master(engine, 1000)
    scan = SqlMasterScan(engine, name, "k", 97)
    saved = json.loads(json.dumps(scan.layout()))
    k = scan.num_partitions()

    with engine.begin() as conn:
        conn.execute(
            sa.insert(t),
            [
                {"id": 1, "k": 1, "name": "before-all", "amount": 1},  # below every boundary
                {"id": 11, "k": 2, "name": "in-a-gap", "amount": 2},  # between two existing ids
                {"id": 500_000, "k": 3, "name": "after-all", "amount": 3},  # beyond the last boundary
            ],
        )
        conn.execute(sa.delete(t).where(t.c.id == 13))
        conn.execute(sa.update(t).where(t.c.id == 16).values(name="updated"))

    restored = SqlMasterScan(engine, name, "k", 97, layout=saved)
    assert restored.num_partitions() == k  # K is fixed by the layout, not by the new row count
    assert restored.num_rows == 1000
    assert restored.layout() == saved
    parts = all_partitions(restored)
    seen: Counter[tuple[Any, ...]] = Counter()
    for part in parts:
        seen += as_multiset(part)
    assert seen == table_rows(engine, t, ["id", "k", "name", "amount"])
    assert max(seen.values()) == 1
    assert parts[0].column("id").to_pylist()[:2] == [1, 10]
    assert parts[-1].column("id").to_pylist()[-1] == 500_000
    names = [n for p in parts for n in p.column("name").to_pylist()]
    assert "updated" in names and names.count("in-a-gap") == 1

    with pytest.raises(CheckpointError, match="repartition"):
        SqlMasterScan(engine, name, "k", 50, layout=saved)
    with pytest.raises(CheckpointError, match="page_column"):
        SqlMasterScan(engine, name, "k", 97, layout=saved | {"page_column": "other"})
    with pytest.raises(CheckpointError, match="boundary"):
        SqlMasterScan(engine, name, "k", 97, layout=saved | {"bounds": [{"t": "int", "v": "x"}]})
    with pytest.raises(CheckpointError, match="not all of type 'int'"):
        SqlMasterScan(engine, name, "k", 97, layout=saved | {"bounds": [{"t": "str", "v": "x"}]})

    fresh = restored.repartition(200)
    assert fresh.num_rows == 1002
    assert fresh.num_partitions() == 6
    assert sum(p.num_rows for p in all_partitions(fresh)) == 1002


def test_string_and_date_page_columns(engine: sa.Engine) -> None:
    name = unique("codes")
    t = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("code", sa.String(16), primary_key=True),
        sa.Column("day", sa.Date, nullable=False, unique=True),
        sa.Column("k", sa.Integer),
    )
    base = dt.date(2020, 1, 1)
    with engine.begin() as conn:
        t.create(conn)
        conn.execute(
            sa.insert(t),
            [{"code": f"c{i * 7919 % 1000:04d}", "day": base + dt.timedelta(days=i), "k": i % 10} for i in range(1000)],
        )
    by_code = SqlMasterScan(engine, name, "k", 97)
    saved = json.loads(json.dumps(by_code.layout()))
    assert saved["bounds"][0]["t"] == "str"
    by_day = SqlMasterScan(engine, name, "k", 97, page_column="day")
    saved_day = json.loads(json.dumps(by_day.layout()))
    assert saved_day["bounds"][0] == {"t": "date", "v": (base + dt.timedelta(days=96)).isoformat()}
    with engine.begin() as conn:
        conn.execute(sa.insert(t), [{"code": "c0000a", "day": base - dt.timedelta(days=5), "k": 1}])
    want = table_rows(engine, t, ["code", "day", "k"])
    for s in (
        SqlMasterScan(engine, name, "k", 97, layout=saved),
        SqlMasterScan(engine, name, "k", 97, page_column="day", layout=saved_day),
    ):
        seen: Counter[tuple[Any, ...]] = Counter()
        for part in all_partitions(s):
            seen += as_multiset(part.select(["code", "day", "k"]))
        assert seen == want


def test_configuration_errors_name_the_culprit(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 10)
    with pytest.raises(ConfigError, match="no_such_table"):
        SqlMasterScan(engine, "no_such_table", "k", 10)
    with pytest.raises(ConfigError, match=r"'nope'.*columns: id, k, name, amount"):
        SqlMasterScan(engine, name, "k", 10, columns=["name", "nope"])
    with pytest.raises(ConfigError, match=r"key column 'kk'"):
        SqlMasterScan(engine, name, "kk", 10)
    with pytest.raises(ConfigError, match=r"page column 'name'.*unique"):
        SqlMasterScan(engine, name, "k", 10, page_column="name")
    with pytest.raises(ConfigError, match="partition_rows"):
        SqlMasterScan(engine, name, "k", 0)
    with pytest.raises(ConfigError, match="twice"):
        SqlMasterScan(engine, name, "k", 10, columns=["name", "name"])

    nopk = unique("nopk")
    t = sa.Table(
        nopk,
        sa.MetaData(),
        sa.Column("a", sa.Integer, nullable=False),
        sa.Column("b", sa.Integer),
        sa.UniqueConstraint("a"),
        sa.UniqueConstraint("b"),
    )
    t.create(engine)
    with pytest.raises(ConfigError, match="no primary key"):
        SqlMasterScan(engine, nopk, "b", 10)
    with pytest.raises(ConfigError, match="nullable"):
        SqlMasterScan(engine, nopk, "a", 10, page_column="b")
    assert SqlMasterScan(engine, nopk, "b", 10, page_column="a").num_partitions() == 1


def test_column_types_map_to_arrow(engine: sa.Engine) -> None:
    name = unique("types")
    t = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("small", sa.SmallInteger),
        sa.Column("i", sa.Integer),
        sa.Column("f", sa.Double),
        sa.Column("d", sa.Numeric(10, 3)),
        sa.Column("s", sa.String(30)),
        sa.Column("txt", sa.Text),
        sa.Column("bin", sa.LargeBinary),
        sa.Column("day", sa.Date),
        sa.Column("ts", sa.DateTime),
        sa.Column("flag", sa.Boolean),
    )
    row = {
        "id": 2**40,
        "small": -5,
        "i": 123456,
        "f": 0.25,
        "d": decimal.Decimal("12.345"),
        "s": "héllo",
        "txt": "x" * 300,
        "bin": b"\x00\xff\x10",
        "day": dt.date(2024, 2, 29),
        "ts": dt.datetime(2024, 2, 29, 13, 14, 15),
        "flag": True,
    }
    nulls = {c: None for c in row} | {"id": 1}
    with engine.begin() as conn:
        t.create(conn)
        conn.execute(sa.insert(t), [row, nulls])
    scan = SqlMasterScan(engine, name, "i", 10)
    types = {f.name: f.type for f in scan.schema}
    assert types["id"] == pa.int64()
    assert types["small"] == (pa.int64() if engine.dialect.name == "sqlite" else pa.int16())
    assert types["f"] == pa.float64()
    assert types["d"] == pa.decimal128(10, 3)
    assert types["s"] == types["txt"] == pa.string()
    assert types["bin"] == pa.binary()
    assert types["day"] == pa.date32()
    assert types["ts"] == pa.timestamp("us")
    if engine.dialect.name == "sqlite":
        assert types["flag"] == pa.bool_()
    got = scan.read_partition(0).to_pylist()
    assert got[0] == nulls | {"flag": None}
    assert {k: v for k, v in got[1].items() if k != "flag"} == {k: v for k, v in row.items() if k != "flag"}
    assert bool(got[1]["flag"]) is True


def test_growth_warning_once_per_partition_per_cycle(engine: sa.Engine, caplog: pytest.LogCaptureFixture) -> None:
    name, t = make_master(engine, 30, step=1000)
    scan = SqlMasterScan(engine, name, "k", 10)
    assert scan.num_partitions() == 3
    with engine.begin() as conn:  # 45 new rows between the first two boundaries: partition 1 holds 55 > 4 b
        conn.execute(sa.insert(t), [{"id": 10_011 + i, "k": 1, "name": "new", "amount": 0} for i in range(45)])
    caplog.set_level(logging.WARNING, logger="ssbj.adapters.master_sql")
    for _cycle in range(2):
        for p in range(scan.num_partitions()):
            scan.read_partition(p)
        scan.read_partition(1)  # a re-read within the cycle does not warn again
    warnings = [r for r in caplog.records if "grew" in r.getMessage()]
    assert len(warnings) == 2
    assert "partition 1" in warnings[0].getMessage()


def test_semi_stream_join_over_a_sql_master(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 500)
    scan = SqlMasterScan(engine, name, "k", 60, columns=["k", "name"])
    master = pa.Table.from_batches([], schema=scan.schema)
    for p in range(scan.num_partitions()):
        master = pa.concat_tables([master, scan.read_partition(p)])
    keys = [None if i % 13 == 0 else i % 45 for i in range(700)]
    stream = pa.table({"sid": pa.array(range(700), pa.int64()), "sk": pa.array(keys, pa.int32())})
    op = SemiStreamJoin(JoinSpec("sk", "k", ("name",), chunk_bytes=64), scan, stream.schema, scan.schema)
    out: Counter[Any] = Counter()
    for r in op.run(stream.to_batches(max_chunksize=50)):
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, master, "sk", "k", ["name"])


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


# ---------------------------------------------------------------- SQL sink
OUT = pa.table(
    {
        "sid": pa.array([1, 2, 3, 4], pa.int64()),
        "name": pa.array(["a", None, "c", "d" * 500]),
        "amount": pa.array(
            [decimal.Decimal("1.50"), None, decimal.Decimal("-2.25"), decimal.Decimal(0)], pa.decimal128(9, 2)
        ),
        "score": pa.array([0.5, 1.5, None, 3.0], pa.float64()),
        "day": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 1, 3), dt.date(2024, 1, 4)], pa.date32()),
        "ts": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 456789), None, None, None], pa.timestamp("us")),
        "tz": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC), None, None, None], pa.timestamp("us", "UTC")),
    }
)


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


# ---------------------------------------------------------------- Parquet sink
def read_dir(path: Path) -> pa.Table:
    return ds.dataset(path, format="parquet").to_table()


def test_parquet_sink_replaces_each_batch_and_segment(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetDirSink(out)
    assert isinstance(sink, WarehouseSink)
    sink.prepare(OUT.schema)
    sink.write(1, 0, OUT)
    sink.write(1, 0, OUT)
    sink.write(1, 1, OUT.slice(0, 2))
    sink.write(12, 3, OUT.slice(0, 1))
    files = sorted(p.name for p in out.iterdir())
    assert files == [SCHEMA_FILE, file_name(1, 0), file_name(1, 1), file_name(12, 3)]
    assert file_name(12, 3) == "batch=000000000012-seg=0003.parquet"
    got = read_dir(out)
    assert got.num_rows == 7
    pairs = zip(got.column(BATCH_ID_COLUMN).to_pylist(), got.column(SEGMENT_COLUMN).to_pylist(), strict=True)
    assert Counter(pairs) == Counter({(1, 0): 4, (1, 1): 2, (12, 3): 1})
    one = pq.read_table(out / file_name(1, 0))
    assert one.drop_columns([BATCH_ID_COLUMN, SEGMENT_COLUMN]).equals(OUT)
    assert one.schema.field(BATCH_ID_COLUMN).type == pa.int64()
    sink.write(1, 1, OUT.slice(0, 0))  # empty: removes the earlier attempt's file
    sink.write(7, 0, OUT.slice(0, 0))  # empty and nothing there: no file
    assert sorted(p.name for p in out.iterdir()) == [SCHEMA_FILE, file_name(1, 0), file_name(12, 3)]
    sink.close()


def test_parquet_sink_schema_is_recorded_and_checked(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "out"
    ParquetDirSink(out).prepare(OUT.schema)
    ParquetDirSink(out).prepare(OUT.schema)  # the same schema again: fine
    changed = OUT.schema.set(0, pa.field("sid", pa.int32()))
    with pytest.raises(StateError, match=r"changed sid \(int64 -> int32\)"):
        ParquetDirSink(out).prepare(changed)
    with pytest.raises(StateError, match="missing ts"):
        ParquetDirSink(out).prepare(OUT.schema.remove(5))
    sink = ParquetDirSink(out)
    sink.prepare(OUT.schema)
    with pytest.raises(InputError, match="changed sid"):
        sink.write(1, 0, OUT.cast(changed))
    with pytest.raises(StateError, match="before prepare"):
        ParquetDirSink(out).write(1, 0, OUT)


def test_parquet_sink_leaves_no_partial_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    sink = ParquetDirSink(out)
    sink.prepare(OUT.schema)
    sink.write(3, 0, OUT)

    def boom(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError, match="disk full"):
        sink.write(3, 0, OUT.slice(0, 1))
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == [SCHEMA_FILE, file_name(3, 0)]
    assert pq.read_table(out / file_name(3, 0)).num_rows == 4  # the old file is intact
    stale = out / f".{file_name(4, 0)}.{uuid.uuid4().hex}.tmp"
    stale.write_bytes(b"partial")
    old = time.time() - STALE_TMP_SECONDS - 1
    os.utime(stale, (old, old))
    in_progress = out / f".{file_name(5, 1)}.{uuid.uuid4().hex}.tmp"  # another shard writing right now
    in_progress.write_bytes(b"partial")
    ParquetDirSink(out).prepare(OUT.schema)  # a restarted job drops stale temp files
    assert not stale.exists()
    assert in_progress.exists()  # a young temp file may be another writer's: kept
    in_progress.unlink()
    assert sorted(os.listdir(out)) == [SCHEMA_FILE, file_name(3, 0)]
