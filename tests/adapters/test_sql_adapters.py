"""SQL master scan against SQLite (a file) and a real MariaDB server."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import random
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from reference import as_multiset, batch_join
from sql_cases import all_partitions, make_master, table_rows, unique

from ssbj.adapters.master_layout import decode_value, encode_value
from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.contracts import CheckpointedMasterScan
from ssbj.core import JoinSpec, SemiStreamJoin
from ssbj.core.prefetch import PrefetchingScan
from ssbj.errors import (
    CheckpointError,
    ConfigError,
    StateError,
)


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


def test_key_unique_comes_from_the_tables_constraints(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 300)
    scan = SqlMasterScan(engine, name, "id", 50)
    assert scan.key_unique("id")  # the primary key
    assert not scan.key_unique("k")  # repeated values, no constraint
    with PrefetchingScan(scan, 1) as wrapped:
        assert wrapped.key_unique("id")
    other = unique("uniq")
    t = sa.Table(
        other,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("u", sa.Integer, nullable=True),
        sa.Column("v", sa.Integer, nullable=True),
        sa.Index(f"ix_{other}_u", "u", unique=True),
    )
    with engine.begin() as conn:
        t.create(conn)
        conn.execute(sa.insert(t), [{"id": i, "u": i * 2, "v": i % 3} for i in range(20)])
    scan2 = SqlMasterScan(engine, other, "u", 5)
    assert scan2.key_unique("u")
    assert not scan2.key_unique("v")


def test_join_on_a_primary_key_switches_from_the_first_r_cycle(engine: sa.Engine) -> None:
    name, _ = make_master(engine, 1500)
    scan = SqlMasterScan(engine, name, "id", 100)
    master = pa.concat_tables(all_partitions(scan))
    ids = master.column("id").to_pylist()
    weights = [1.0 / (r + 1) for r in range(len(ids))]
    keys = random.Random(5).choices(ids, weights=weights, k=12_000)
    stream = pa.table({"sid": list(range(len(keys))), "sk": pa.array(keys, pa.int64())})
    spec = JoinSpec("sk", "id", ("name",), chunk_bytes=2_000)
    op = SemiStreamJoin(spec, scan, stream.schema, scan.schema)
    out: Counter[Any] = Counter()
    first = 0
    for r in op.run(stream.to_batches(max_chunksize=500)):
        out += as_multiset(r.enriched)
        if not first and op.totals()["switched_in"]:
            first = op.r_cycle
    assert out == batch_join(stream, master, "sk", "id", ["name"])
    assert first == 2
