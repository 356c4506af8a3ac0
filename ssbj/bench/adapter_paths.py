"""Fetch and write paths of the SQL adapters on MariaDB, each timed against the other in one process.

    .venv/bin/python -m ssbj.bench.adapter_paths [--rows 1000000] [--rounds 5]

Starts a throw-away MariaDB (ssbj.testing.mariadb), loads a ``customer`` table, then times
``SqlMasterScan.read_partition`` of a 100k-row partition through the driver (PyMySQL) and
through connectorx, and ``SqlTableSink.write`` of 100k enriched rows with ``bulk="insert"``
(executemany) and ``bulk="load_data"`` (LOAD DATA LOCAL INFILE). Prints the best and median
of the interleaved rounds and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.testing.mariadb import launch
from ssbj.testing.tables import mixed_types_table as _table  # 8 columns incl. escaped strings, decimals


def _time(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    """Run the measurements and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    server = launch(Path(tempfile.mkdtemp(prefix="ssbj-bench-")))
    try:
        eng = sa.create_engine(server.url)
        with eng.begin() as c:
            c.execute(
                sa.text(
                    "CREATE TABLE customer (c_custkey BIGINT PRIMARY KEY, c_name VARCHAR(25) NOT NULL, "
                    "c_segment VARCHAR(10) NOT NULL, c_balance DOUBLE NOT NULL)"
                )
            )
            for lo in range(0, args.rows, 100_000):
                c.execute(
                    sa.text("INSERT INTO customer VALUES (:k, :n, :s, :b)"),
                    [
                        {"k": i, "n": f"Customer#{i:09d}", "s": "BUILDING", "b": i / 7}
                        for i in range(lo + 1, min(args.rows, lo + 100_000) + 1)
                    ],
                )
        driver = SqlMasterScan(eng, "customer", "c_custkey", 100_000, reader="driver")
        cx = SqlMasterScan(eng, "customer", "c_custkey", 100_000, layout=driver.layout(), reader="connectorx")
        rows = _table(100_000)
        sinks = {m: SqlTableSink(server.url, f"out_{m}", bulk=m) for m in ("insert", "load_data")}
        for s in sinks.values():
            s.prepare(rows.schema)
        times: dict[str, list[float]] = {
            k: [] for k in ("read driver", "read connectorx", "write insert", "write load_data")
        }
        for r in range(args.rounds):
            p = r % driver.num_partitions()
            times["read driver"].append(_time(partial(driver.read_partition, p)))
            times["read connectorx"].append(_time(partial(cx.read_partition, p)))
            for m, s in sinks.items():
                times[f"write {m}"].append(_time(partial(s.write, r, 0, rows)))
        print(f"MariaDB, {args.rows:,}-row customer table, 100,000 rows per read or write, {args.rounds} rounds")
        print("| path | best | median | rows/s (best) |\n|---|---:|---:|---:|")
        for k, v in times.items():
            print(f"| {k} | {min(v) * 1000:.0f} ms | {statistics.median(v) * 1000:.0f} ms | {100_000 / min(v):,.0f} |")
        rd = statistics.median(times["read driver"]) / statistics.median(times["read connectorx"])
        wr = statistics.median(times["write insert"]) / statistics.median(times["write load_data"])
        print(
            f"\nmedian ratios: connectorx read {rd:.1f}x faster than the driver; "
            f"LOAD DATA write {wr:.1f}x faster than executemany"
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
