"""Keys per ``IN`` list of a lookup (``SqlMasterScan.lookup_batch``), per driver, on MariaDB.

A MariaDB server started by :mod:`ssbj.testing`, a customer-like master of ``--rows`` rows
with its primary key, and ``--keys`` distinct random keys looked up through
:meth:`ssbj.adapters.master_sql.SqlMasterScan.lookup` in calls of ``--call`` keys (index
mode's misses of a step), for each batch size and SQLAlchemy driver, one after the other
in the same process; then the same keys through a raw DB-API cursor in ``IN`` lists of
1,000 (what the pipeline bench's ``lookup_lru_in`` does) as the baseline. The keys' pages
are read into the buffer pool first; each point is the median of three passes. Prints
microseconds per key.

``python -m ssbj.bench.exp_lookup_batch [--rows N] [--keys N] [--md F] [--json F]``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.bench.harness import Json, emit, stderr_log
from ssbj.testing.mariadb import launch

BATCHES = (250, 500, 1_000, 2_000, 4_000, 8_000)
DRIVERS = {"pymysql": "pymysql", "mysqldb": "MySQLdb"}  # SQLAlchemy driver name: the module it needs
COLUMNS = ["c_custkey", "c_name", "c_segment", "c_balance"]
RAW_IN = 1_000


def _load(engine: sa.Engine, rows: int) -> None:
    meta = sa.MetaData()
    t = sa.Table(
        "customer",
        meta,
        sa.Column("c_custkey", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("c_name", sa.String(25)),
        sa.Column("c_segment", sa.String(10)),
        sa.Column("c_balance", sa.Float),
    )
    meta.create_all(engine)
    with engine.begin() as conn:
        for lo in range(0, rows, 20_000):
            conn.execute(
                t.insert(),
                [
                    {"c_custkey": i, "c_name": f"Customer#{i:09d}", "c_segment": "BUILDING", "c_balance": i * 0.5}
                    for i in range(lo, min(rows, lo + 20_000))
                ],
            )


REPEATS = 3  # the median of this many passes over the keys


def _per_key(fn: Callable[[np.ndarray], Any], keys: np.ndarray) -> float:
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn(keys)
        times.append((time.perf_counter() - t) / len(keys) * 1e6)
    return float(np.median(times))


def run(rows: int, n_keys: int, call: int, seed: int, log: Callable[[str], None]) -> Json:
    """Start MariaDB, load the master, time every (driver, batch) and the raw baseline."""
    out: Json = {"rows": rows, "keys": n_keys, "keys_per_call": call, "raw_in_list": RAW_IN, "points": []}
    with tempfile.TemporaryDirectory(prefix="ssbj-lookup-batch-") as tmp:
        server = launch(Path(tmp) / "mariadb")
        try:
            base = sa.make_url(server.url)
            _load(sa.create_engine(base), rows)
            log(f"{rows:,} rows loaded")
            keys = np.random.default_rng(seed).choice(rows, n_keys, replace=False).astype(np.int64)
            warm = sa.create_engine(base).raw_connection()
            _raw(warm, keys)  # their pages in the buffer pool before the first point is timed
            warm.close()
            for driver, module in DRIVERS.items():
                if importlib.util.find_spec(module) is None:
                    log(f"{driver}: not installed, skipped")
                    continue
                engine = sa.create_engine(base.set(drivername=f"mysql+{driver}"))
                scan = SqlMasterScan(engine, "customer", "c_custkey", 20_000, columns=COLUMNS, reader="driver")
                scan.layout()
                scan.lookup("c_custkey", pa.array(keys[:100]))  # (connection and statement warm)
                for batch in BATCHES:
                    scan.lookup_batch = batch

                    def many(ks: np.ndarray) -> None:
                        for i in range(0, len(ks), call):
                            scan.lookup("c_custkey", pa.array(ks[i : i + call]))  # noqa: B023 - used at once

                    us = _per_key(many, keys)
                    out["points"].append(
                        {"driver": driver, "path": "SqlMasterScan.lookup", "batch": batch, "us_per_key": us}
                    )
                    log(f"{driver} SqlMasterScan.lookup batch {batch}: {us:.1f} us/key")
                raw = engine.raw_connection()
                try:
                    us = _per_key(lambda ks: _raw(raw, ks), keys)  # noqa: B023
                finally:
                    raw.close()
                out["points"].append({"driver": driver, "path": "raw cursor", "batch": RAW_IN, "us_per_key": us})
                log(f"{driver} raw cursor IN {RAW_IN}: {us:.1f} us/key")
                engine.dispose()
        finally:
            server.stop()
    return out


def _raw(conn: Any, keys: np.ndarray) -> None:
    cur = conn.cursor()
    select = f"SELECT {', '.join(COLUMNS)} FROM customer WHERE c_custkey IN "  # noqa: S608 - fixed names, %s only
    for i in range(0, len(keys), RAW_IN):
        part = [int(x) for x in keys[i : i + RAW_IN]]
        cur.execute(select + "(" + ",".join(["%s"] * len(part)) + ")", part)
        cur.fetchall()
    cur.close()


def markdown(res: Json, command: str) -> str:
    """Return the table: microseconds per key per driver and batch size."""
    lines = [
        "# Keys per IN list of a lookup, per driver (MariaDB)",
        "",
        f"`{command}`: {res['rows']:,} master rows, {res['keys']:,} distinct random keys looked up in calls of "
        f"{res['keys_per_call']:,}, buffer pool warm, median of {REPEATS} passes. Lower is better; same process, "
        "one after the other.",
        "",
        "| driver | path | keys per IN list | us per key |",
        "|---|---|---:|---:|",
    ]
    for p in res["points"]:
        lines.append(f"| {p['driver']} | {p['path']} | {p['batch']:,} | {p['us_per_key']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module doc)."""
    ap = argparse.ArgumentParser(prog="python -m ssbj.bench.exp_lookup_batch")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--call", type=int, default=5_000, help="keys per lookup call (a step's misses)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    res = run(args.rows, args.keys, args.call, args.seed, stderr_log())
    command = "python -m ssbj.bench.exp_lookup_batch " + " ".join(argv if argv is not None else sys.argv[1:])
    emit(markdown(res, command.strip()), res, args.md, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
