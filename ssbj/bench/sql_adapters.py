"""Measure the SQL adapters on MariaDB: partition layout, partition reads (by driver), sink inserts.

Usage (from the repository root; starts a throw-away MariaDB unless ``--url`` is given)::

    .venv/bin/python -m ssbj.bench.sql_adapters [--rows 1000000] [--out FILE]

Drivers that are not project dependencies (connectorx, mysqlclient) are measured when they
can be imported, e.g. from a scratch directory on ``PYTHONPATH`` after
``pip install --target /tmp/sqlx connectorx mysqlclient``.  Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import importlib.util
import os
import platform
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.testing.mariadb import launch

ARROW_TYPES = {
    "decimal": [pa.int32(), pa.int32(), pa.string(), pa.decimal128(12, 2)],
    "double": [pa.int32(), pa.int32(), pa.string(), pa.float64()],
}
NAMES = ["id", "k", "name", "amount"]


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Return (median s, min s, last result) over ``repeat`` runs after one warm-up run."""
    fn()
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


def to_arrow(rows: list[tuple[Any, ...]], types: list[pa.DataType]) -> pa.Table:
    """Build the Arrow table column-wise, as the master scan does."""
    cols = list(zip(*rows, strict=True))
    return pa.table([pa.array(c, type=t) for c, t in zip(cols, types, strict=True)], names=NAMES)


def load_master(engine: sa.Engine, rows: int) -> None:
    """Tables bench_dec and bench_dbl: int pk, int key, varchar(20), decimal(12,2) or double (MariaDB seq engine)."""
    with engine.begin() as conn:
        for name, amount in (("bench_dec", "DECIMAL(12,2)"), ("bench_dbl", "DOUBLE")):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
            conn.exec_driver_sql(
                f"CREATE TABLE {name} (id INT PRIMARY KEY, k INT NOT NULL, name VARCHAR(20), amount {amount})"
            )
            conn.exec_driver_sql(
                f"INSERT INTO {name} SELECT seq, MOD(seq, 50000), CONCAT('name-', seq), seq / 100 "  # noqa: S608
                f"FROM seq_1_to_{int(rows)}"
            )


def bench_layout(engine: sa.Engine, rows: int, out: list[str]) -> None:
    """Time the keyset boundary walk against one ordered scan of the page column."""
    t = sa.Table("bench_dec", sa.MetaData(), autoload_with=engine)
    pk = t.c.id
    out += [
        "## Partition boundaries (K - 1 values of the page column)",
        "",
        "| b | K | keyset queries (adopted), best of 3 | one ordered scan of the page column, best of 2 |",
        "|---:|---:|---:|---:|",
    ]
    for b in (100_000, 10_000, 1_000, 100):
        if b > rows:
            continue

        def keyset(b: int = b) -> int:
            scan = SqlMasterScan(engine, "bench_dec", "k", b)
            return scan.num_partitions()

        def scan_all(b: int = b) -> int:
            with engine.connect() as conn:
                vals: Sequence[Any] = conn.execute(sa.select(pk).order_by(pk)).scalars().all()
            return len(vals[b - 1 :: b]) + 1

        _, m1, k = timed(keyset, 3)
        _, m2, _ = timed(scan_all, 2)
        out.append(f"| {b:,} | {k:,} | {m1 * 1000:.0f} ms | {m2 * 1000:.0f} ms |")
    out.append("")


def interleaved(jobs: list[tuple[str, Callable[[], Any]]], rounds: int) -> dict[str, list[float]]:
    """Run every job once as a warm-up, then ``rounds`` times round-robin; return the times per job.

    Interleaving spreads changes of the machine's other load evenly over the paths compared.
    """
    for _, fn in jobs:
        fn()
    times: dict[str, list[float]] = {label: [] for label, _ in jobs}
    for _ in range(rounds):
        for label, fn in jobs:
            t0 = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t0)
    return times


def cell(ts: list[float]) -> str:
    """``best ms (median)``."""
    return f"{min(ts) * 1000:.0f} ms ({statistics.median(ts) * 1000:.0f})"


def bench_read(engine: sa.Engine, url: sa.URL, rows: int, out: list[str], rounds: int) -> None:
    """Time reading one partition through each available path."""
    import pymysql  # type: ignore[import-untyped]
    import pymysql.cursors  # type: ignore[import-untyped]

    b = min(100_000, rows // 10)
    lo, hi = 4 * b, 5 * b
    kw: dict[str, Any] = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "database": url.database,
    }
    out += [
        f"## Reading one partition of {b:,} rows (rows {lo:,} < id <= {hi:,}) into an Arrow table",
        "",
        f"Best (median) of {rounds} runs, all paths interleaved round-robin after a warm-up run each (buffer "
        "pool warm); the best run is the one least disturbed by other load on the machine. "
        "'fetch only' = rows as Python tuples; '+ arrow' = then `pa.array` per column with the target type.",
        "",
        "| path | DECIMAL(12,2) column | DOUBLE column |",
        "|---|---:|---:|",
    ]
    jobs: list[tuple[str, Callable[[], Any]]] = []
    closers: list[Callable[[], Any]] = []

    def add(label: str, kind: str, fn: Callable[[], int]) -> None:
        def checked() -> None:
            n = fn()
            assert n == b, (label, n)  # noqa: S101

        jobs.append((f"{label}\t{kind}", checked))

    have_mysqlclient = importlib.util.find_spec("MySQLdb") is not None
    have_connectorx = importlib.util.find_spec("connectorx") is not None
    for kind, table in (("decimal", "bench_dec"), ("double", "bench_dbl")):
        types = ARROW_TYPES[kind]
        sql = f"SELECT id, k, name, amount FROM {table} WHERE id > %s AND id <= %s ORDER BY id"  # noqa: S608
        scan = SqlMasterScan(engine, table, "k", b)

        def read4(s: SqlMasterScan = scan) -> int:
            return int(s.read_partition(4).num_rows)

        add("SqlMasterScan.read_partition (SQLAlchemy + PyMySQL)", kind, read4)
        t = sa.Table(table, sa.MetaData(), autoload_with=engine)
        # reflected MySQL DOUBLE columns would come back as Decimal: read them as float, as the scan does
        amount = sa.type_coerce(t.c.amount, sa.Double(asdecimal=False)) if kind == "double" else t.c.amount
        stmt = sa.select(t.c.id, t.c.k, t.c.name, amount).where(t.c.id > lo, t.c.id <= hi).order_by(t.c.id)

        def sa_fetch(stmt: Any = stmt, arrow: bool = False, types: list[pa.DataType] = types) -> int:
            with engine.connect() as conn:
                rows_ = conn.execute(stmt).fetchall()
            return to_arrow(list(rows_), types).num_rows if arrow else len(rows_)

        add("SQLAlchemy Core execute + fetchall (fetch only)", kind, sa_fetch)
        add("SQLAlchemy Core execute + fetchall + arrow", kind, partial(sa_fetch, arrow=True))
        conn = pymysql.connect(**kw)
        closers.append(conn.close)

        def raw(cursor: Any, arrow: bool, sql: str = sql, types: list[pa.DataType] = types, conn: Any = conn) -> int:
            with conn.cursor(cursor) as cur:
                cur.execute(sql, (lo, hi))
                rows_ = cur.fetchall()
            return to_arrow(list(rows_), types).num_rows if arrow else len(rows_)

        add("raw PyMySQL Cursor fetchall (fetch only)", kind, partial(raw, pymysql.cursors.Cursor, False))
        add("raw PyMySQL Cursor fetchall + arrow", kind, partial(raw, pymysql.cursors.Cursor, True))
        add("raw PyMySQL SSCursor fetchall + arrow", kind, partial(raw, pymysql.cursors.SSCursor, True))
        if have_mysqlclient:
            import MySQLdb  # type: ignore[import-untyped]

            mconn = MySQLdb.connect(**kw)
            closers.append(mconn.close)

            def mysqlclient(sql: str = sql, types: list[pa.DataType] = types, mconn: Any = mconn) -> int:
                cur = mconn.cursor()
                cur.execute(sql, (lo, hi))
                rows_ = cur.fetchall()
                cur.close()
                return int(to_arrow(list(rows_), types).num_rows)

            add("mysqlclient (MySQLdb, C) fetchall + arrow", kind, mysqlclient)
        if have_connectorx:
            import connectorx as cx

            cx_url = f"mysql://{url.username}:{url.password}@{url.host}:{url.port}/{url.database}"
            q = f"SELECT id, k, name, amount FROM {table} WHERE id > {lo} AND id <= {hi} ORDER BY id"  # noqa: S608

            def cx_read(q: str = q, u: str = cx_url) -> int:
                return int(cx.read_sql(u, q, return_type="arrow").num_rows)

            add("connectorx read_sql(return_type='arrow') (Rust)", kind, cx_read)
    times = interleaved(jobs, rounds)
    for c in closers:
        c()
    labels = list(dict.fromkeys(k.split("\t")[0] for k in times))
    for label in labels:
        dec, dbl = times[label + "\tdecimal"], times[label + "\tdouble"]
        out.append(f"| {label} | {cell(dec)} | {cell(dbl)} |")
    out.append("")


def bench_sink(engine: sa.Engine, url: sa.URL, out: list[str], rounds: int) -> None:
    """Time SqlTableSink.write against a raw PyMySQL executemany of the same rows."""
    import pymysql

    n = 100_000
    base = dt.datetime(2024, 1, 1)
    table = pa.table(
        {
            "sid": pa.array(range(n), pa.int64()),
            "k": pa.array([i % 50_000 for i in range(n)], pa.int32()),
            "name": pa.array([f"name-{i}" for i in range(n)]),
            "amount": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            "score": pa.array([i / 7 for i in range(n)], pa.float64()),
            "ts": pa.array([base + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
        }
    )
    out += [
        f"## Sink: writing {n:,} rows of 6 columns (int64, int32, string, decimal, double, timestamp)",
        "",
        "One `write(batch, 0, table)` = one transaction: a delete of the (batch, segment), then executemany "
        "inserts in chunks; every run after the warm-up replaces the previous run's rows (the idempotent path). "
        f"Best (median) of {rounds} interleaved runs. The last column is the server's Com_insert delta per "
        "write: PyMySQL rewrote each chunk into multi-row VALUES statements of at most 1 MB.",
        "",
        "| path | chunk rows | time | rows/s (best) | INSERT statements per write |",
        "|---|---:|---:|---:|---:|",
    ]

    def com_insert() -> int:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Com_insert'").one()[1])

    jobs: list[tuple[str, Callable[[], Any]]] = []
    stmts: dict[str, int] = {}
    sinks = []
    for chunk in (1_000, 5_000, 20_000):
        sink = SqlTableSink(engine, f"bench_sink_{chunk}", chunk_rows=chunk)
        sink.prepare(table.schema)
        sinks.append(sink)
        before = com_insert()
        sink.write(0, 0, table)
        stmts[f"SqlTableSink.write\t{chunk}"] = com_insert() - before
        jobs.append((f"SqlTableSink.write\t{chunk}", partial(sink.write, 0, 0, table)))

    conn = pymysql.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, database=url.database
    )
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bench_raw")
        cur.execute(
            "CREATE TABLE bench_raw (sid BIGINT, k INT, name LONGTEXT, amount DECIMAL(12,2), score DOUBLE, "
            "ts DATETIME(6), ssbj_batch_id BIGINT NOT NULL, ssbj_segment INT NOT NULL, "
            "KEY ix (ssbj_batch_id, ssbj_segment))"
        )

    def raw() -> None:
        cols = [c.to_pylist() for c in table.columns]
        rows = [(*r, 0, 0) for r in zip(*cols, strict=True)]
        sql = "INSERT INTO bench_raw VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        with conn.cursor() as cur:
            cur.execute("DELETE FROM bench_raw WHERE ssbj_batch_id = 0 AND ssbj_segment = 0")
            for i in range(0, n, 5_000):
                cur.executemany(sql, rows[i : i + 5_000])
        conn.commit()

    jobs.append(("raw PyMySQL executemany (tuples, no SQLAlchemy)\t5000", raw))
    times = interleaved(jobs, rounds)
    for key, ts in times.items():
        label, chunk_text = key.split("\t")
        count = stmts.get(key, "")
        out.append(f"| {label} | {int(chunk_text):,} | {cell(ts)} | {n / min(ts):,.0f} | {count} |")
    with conn.cursor() as cur:
        cur.execute("DROP TABLE bench_raw")
    conn.close()
    with engine.begin() as c:
        for chunk in (1_000, 5_000, 20_000):
            c.exec_driver_sql(f"DROP TABLE bench_sink_{chunk}")
    out.append("")


def main() -> None:
    """Run every measurement and print the Markdown report."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="SQLAlchemy URL of a MariaDB/MySQL database to use (default: start one)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timed runs per path")
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    server = None
    if args.url:
        url = sa.make_url(args.url)
    else:
        server = launch()
        url = server.url
    engine = sa.create_engine(url, pool_pre_ping=True)
    try:
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SELECT VERSION()").scalar()
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        out = [
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"server {version} on 127.0.0.1 (TCP loopback); SQLAlchemy {sa.__version__}, pyarrow {pa.__version__}; "
            f"load average at start {load}.",
            "",
        ]
        t0 = time.perf_counter()
        load_master(engine, args.rows)
        out += [f"Loaded {args.rows:,} rows per table in {time.perf_counter() - t0:.1f} s.", ""]
        bench_layout(engine, args.rows, out)
        bench_read(engine, url, args.rows, out, args.rounds)
        bench_sink(engine, url, out, args.rounds)
        out.append(f"Load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}.")
        text = "\n".join(out)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
    finally:
        engine.dispose()
        if server is not None:
            server.stop()
            shutil.rmtree(server.base, ignore_errors=True)


if __name__ == "__main__":
    main()
