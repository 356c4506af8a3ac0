"""SqlMasterScan.lookup (the hybrid step's lookup path) on SQLite (a file) and MariaDB."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from reference import as_multiset, batch_join, unmatched_reference
from sql_cases import FAST_RETRY

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.contracts import PARTITION_COLUMN, MasterLookup
from ssbj.core import JoinSpec, SemiStreamJoin
from ssbj.errors import ConfigError


def make_master(engine: sa.Engine, n: int, string_page: bool = False) -> str:
    """``n`` rows: int key k (NULL every 11th, many rows per key), string key sk, int or string page column."""
    name = f"lk_{uuid.uuid4().hex[:8]}"
    page = sa.Column("id", sa.String(12) if string_page else sa.Integer, primary_key=True, autoincrement=False)
    t = sa.Table(
        name,
        sa.MetaData(),
        page,
        sa.Column("k", sa.Integer, nullable=True, index=True),
        sa.Column("sk", sa.String(16), nullable=True, index=True),
        sa.Column("attr", sa.Integer),
    )
    rows = [
        {
            "id": f"p{(i * 7919) % 100_003:06d}" if string_page else 5 + 3 * i,
            "k": None if i % 11 == 0 else i % 13,
            "sk": None if i % 11 == 0 else f"s{i % 13}",
            "attr": i,
        }
        for i in range(n)
    ]
    with engine.begin() as conn:
        t.create(conn)
        if rows:
            conn.execute(sa.insert(t), rows)
    return name


def _scan_rows(scan: SqlMasterScan, key: str, values: set[Any]) -> Counter[Any]:
    """Rows of ``values`` found by reading every partition, with the partition index."""
    out: Counter[Any] = Counter()
    for p in range(scan.num_partitions()):
        part = scan.read_partition(p)
        for row in part.to_pylist():
            if row[key] is not None and row[key] in values:
                out[(*row.values(), p)] += 1
    return out


@pytest.mark.parametrize("string_page", [False, True])
@pytest.mark.parametrize("key", ["k", "sk"])
def test_lookup_equals_the_partitions_rows(engine: sa.Engine, key: str, string_page: bool) -> None:
    name = make_master(engine, 200, string_page)
    scan = SqlMasterScan(engine, name, key, 17, columns=["k", "sk", "attr"], page_column="id", retry=FAST_RETRY)
    assert isinstance(scan, MasterLookup)
    scan.lookup_batch = 3
    scan.num_partitions()  # the layout's queries come before the ones counted
    ints = [0, 3, 5, 7, 12, 99, None]
    vals = ints if key == "k" else [None if v is None else f"s{v}" for v in ints]
    statements: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        statements.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        got = scan.lookup(key, pa.array(vals + vals[:2]))  # duplicates are sent once
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    assert got.schema.names == [*scan.schema.names, PARTITION_COLUMN]
    assert as_multiset(got) == _scan_rows(scan, key, {v for v in vals if v is not None})
    # 6 distinct non-NULL keys in IN lists of at most 3 bound parameters: 2 round trips
    assert len(statements) == 2
    for text, params in statements:
        assert " IN " in text.upper()
        flat = list(params.values()) if isinstance(params, dict) else list(params)
        assert None not in flat
        for v in vals:
            if isinstance(v, str):
                assert f"'{v}'" not in text  # values are parameters, not SQL text
    assert scan.lookup(key, pa.array([None, None], pa.int64() if key == "k" else pa.string())).num_rows == 0
    with pytest.raises(ConfigError, match="lookup column"):
        scan.lookup("nope", pa.array([1]))


def _run(op: SemiStreamJoin, batches: list[pa.Table]) -> tuple[Counter[Any], Counter[Any]]:
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    for b in batches:
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    for r in op.drain():
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    t = op.totals()
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]
    return out, um


@pytest.mark.parametrize("mode", ["always", "auto", "random"])
@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_operator_on_sql_master_is_exact(engine: sa.Engine, mode: str, algorithm: str) -> None:
    name = make_master(engine, 120)
    scan = SqlMasterScan(engine, name, "sk", 10, columns=["sk", "attr"], page_column="id", retry=FAST_RETRY)
    master = pa.concat_tables([scan.read_partition(p) for p in range(scan.num_partitions())])
    rng = random.Random(7)
    keys = [None if rng.random() < 0.05 else f"s{min(int(rng.paretovariate(1.0)), 20)}" for _ in range(900)]
    stream = pa.table({"sid": list(range(len(keys))), "key": pa.array(keys, pa.string())})
    spec = JoinSpec(
        "key", "sk", ("attr",), algorithm=algorithm, chunk_bytes=300, hybrid="always" if mode == "always" else "auto"
    )
    op = SemiStreamJoin(spec, scan, stream.schema, scan.schema)
    if mode == "random":
        op.hybrid_policy = lambda o: random.Random(o._step).random() < 0.3
    out, um = _run(op, [stream.slice(i, 25) for i in range(0, stream.num_rows, 25)])
    assert out == batch_join(stream, master, "key", "sk", ["attr"])
    assert um == unmatched_reference(stream, master, "key", "sk")
    if mode != "auto":
        assert op.totals()["served_by_lookup"] > 0


@pytest.mark.parametrize("mode", ["off", "auto", "always"])
@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_freshness_bound(tmp_path: Path, mode: str, algorithm: str) -> None:
    """A master row changed mid-run: every tuple arriving one R-cycle (k steps) after the change sees it.

    Tuples the scan or a lookup finishes meet rows read after they arrived; only cached
    rows (H_R) can be older, and the scan refreshes them within one R-cycle (it never
    idles while H_R holds anything).
    """
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'm.sqlite'}")
    name = make_master(engine, 60)
    scan = SqlMasterScan(engine, name, "k", 6, columns=["k", "attr"], page_column="id", retry=FAST_RETRY)
    k = scan.num_partitions()
    spec = JoinSpec("key", "k", ("attr",), algorithm=algorithm, chunk_bytes=10_000, hybrid=mode)  # type: ignore[arg-type]
    schema = pa.schema([("sid", pa.int64()), ("key", pa.int64()), ("arrived", pa.int64())])
    op = SemiStreamJoin(spec, scan, schema, scan.schema)
    target = 5  # a hot key: it moves into H_R under SSBJ
    table = sa.Table(name, sa.MetaData(), autoload_with=engine)
    change_step = 8 * k
    sid = 0
    rows: list[dict[str, Any]] = []
    for step in range(14 * k):
        if step == change_step:
            with engine.begin() as conn:
                conn.execute(sa.update(table).where(table.c.k == target).values(attr=table.c.attr + 1_000_000))
        batch = pa.table(
            {"sid": list(range(sid, sid + 20)), "key": [target] * 15 + [1, 2, 3, 4, 6], "arrived": [step] * 20},
            schema=schema,
        )
        sid += 20
        op.push(batch)
        rows += op.step().enriched.to_pylist()
    rows += [r for res in op.drain() for r in res.enriched.to_pylist()]
    if algorithm == "ssbj" and mode != "always":
        assert op.cache.values > 0  # the bound is exercised through H_R
    hot = [r for r in rows if r["key"] == target]
    before = [r["attr"] for r in hot if r["arrived"] < change_step - k]
    late = [r["attr"] for r in hot if r["arrived"] >= change_step + k]
    assert before and all(a < 1_000_000 for a in before)
    assert late and all(a >= 1_000_000 for a in late)
    if mode == "always":  # every tuple finishes by lookup in the step it arrives: no staleness at all
        assert all(r["attr"] >= 1_000_000 for r in hot if r["arrived"] >= change_step)
    engine.dispose()


def test_index_mode_on_sql_master_is_exact(engine: sa.Engine) -> None:
    """Index mode on a database: many-to-many integer key with NULLs, cached and looked up, equals the batch join."""
    name = make_master(engine, 300)
    scan = SqlMasterScan(engine, name, "k", 20, columns=["k", "attr"], page_column="id", retry=FAST_RETRY)
    master = pa.concat_tables([scan.read_partition(p) for p in range(scan.num_partitions())])
    rng = random.Random(11)
    keys = [None if rng.random() < 0.05 else min(int(rng.paretovariate(1.0)), 30) for _ in range(2_000)]
    stream = pa.table({"sid": list(range(len(keys))), "key": pa.array(keys, pa.int64())})
    spec = JoinSpec("key", "k", ("attr",), chunk_bytes=400, hybrid="index")
    op = SemiStreamJoin(spec, scan, stream.schema, scan.schema)
    out, um = _run(op, [stream.slice(i, 50) for i in range(0, stream.num_rows, 50)])
    assert out == batch_join(stream, master, "key", "k", ["attr"])
    assert um == unmatched_reference(stream, master, "key", "k")
    assert op.totals()["cache_share"] > 0.3 and op.cache.values > 0


def test_a_lookup_by_a_column_without_index_warns_once(engine: sa.Engine, caplog: pytest.LogCaptureFixture) -> None:
    name = make_master(engine, 30)
    scan = SqlMasterScan(engine, name, "k", 10, columns=["k", "attr"], page_column="id", retry=FAST_RETRY)
    assert scan.key_indexed("id") and scan.key_indexed("k") and not scan.key_indexed("attr")
    with caplog.at_level("WARNING", logger="ssbj.adapters.master_sql"):
        scan.lookup("k", pa.array([1, 2]))
        assert not caplog.records
        scan.lookup("attr", pa.array([1, 2]))
        scan.lookup("attr", pa.array([3]))
    assert [r.getMessage().count("no index") for r in caplog.records] == [1]
