"""Jobs, landing files and the independent reference of the shared-run tests (DuckDB joins)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import yaml

from ssbj.config import JobConfig, parse_config

ORDERS = {"oid": "int64", "cust": "int64", "prod": "int64", "note": "string"}
CLICKS = {"cid": "int64", "cust": "int64", "page": "string"}

# name -> (source, stream key, master table, master key, master columns, join type)
JOBS: dict[str, tuple[str, str, str, str, list[str], str]] = {
    "a": ("orders", "cust", "customer", "ck", ["c_name", "c_seg"], "inner"),
    "b": ("orders", "prod", "product", "p_key", ["p_name"], "left"),
    "c": ("clicks", "cust", "customer", "ck", ["c_name"], "left"),
    "d": ("orders", "cust", "customer", "ck", ["c_seg"], "inner"),
}


def write_masters(root: Path) -> Path:
    """customer: 120 keys, up to 3 rows each (many-to-many); product: 80 keys; keys >= 120/80 unmatched."""
    db = root / "m.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE customer (id INTEGER PRIMARY KEY, ck INTEGER, c_name TEXT, c_seg INTEGER)")
        rows = [(i, i // 3 if i % 5 else i // 3 + 1, f"n{i}", i % 4) for i in range(360)]
        con.executemany("INSERT INTO customer VALUES (?, ?, ?, ?)", rows)
        con.execute("CREATE TABLE product (p_key INTEGER PRIMARY KEY, p_name TEXT)")
        con.executemany("INSERT INTO product VALUES (?, ?)", [(k, f"p{k}") for k in range(80)])
    return db


def job_config(root: Path, name: str, **over: Any) -> JobConfig:
    src, key, table, mkey, cols, how = JOBS[name]
    cfg: dict[str, Any] = {
        "name": name,
        "source": {"kind": "files", "path": str(root / src), "format": "jsonl", "max_files_per_trigger": 1},
        "schema": ORDERS if src == "orders" else CLICKS,
        "master": {"url": f"sqlite:///{root / 'm.db'}", "table": table, "key": mkey, "columns": cols},
        "join": {"stream_key": key, "type": how, "step_rows": 40},
        "sink": {"kind": "parquet", "path": str(root / "out" / name)},
        "dead_letter": {"kind": "parquet", "path": str(root / "dead" / name)},
        "checkpoint": str(root / "ck" / name),
    }
    if table == "customer":
        cfg["master"]["partition_rows"] = 50
    else:
        cfg["master"]["partition_rows"] = 30
    cfg.update(over)
    return parse_config(cfg, name)


def write_job_file(root: Path, name: str, **over: Any) -> Path:
    cfg = job_config(root, name, **over)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True), sort_keys=False))
    return path


def lines_for(source: str, f: int, n: int) -> list[str]:
    """``n`` records of file ``f``: NULL keys, unmatched keys, missing key fields, bad JSON."""
    out = []
    for i in range(n):
        rid = f * 10_000 + i
        cust = None if i % 17 == 0 else (i * 7 + f * 13) % 140  # 120..139: no customer
        if source == "orders":
            rec: dict[str, Any] = {"oid": rid, "cust": cust, "prod": (i * 11 + f) % 95, "note": f"o{rid}"}
            if i % 23 == 5:
                del rec["prod"]  # a dead letter of the product job only
            if i % 29 == 7:
                del rec["cust"]  # a dead letter of the customer jobs only
        else:
            rec = {"cid": rid, "cust": cust, "page": f"/p{i % 9}"}
        out.append("{oops" if i % 31 == 30 else json.dumps(rec))
    return out


def land(root: Path, source: str, f: int, n: int) -> Path:
    """Write file ``f`` of ``source`` atomically, with a modification time that orders the files."""
    d = root / source
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{source}-{f:03d}.jsonl"
    tmp = d / f".{path.name}.tmp"
    tmp.write_text("\n".join(lines_for(source, f, n)) + "\n")
    os.utime(tmp, (1_700_000_000 + f * 10, 1_700_000_000 + f * 10))
    tmp.rename(path)
    return path


def expected(root: Path, name: str, files: list[Path]) -> tuple[Counter[tuple[Any, ...]], int]:
    """The job's batch join of the records in ``files`` (decoded here, joined by DuckDB), and its dead letters."""
    return expected_lines(root, name, [ln for p in files for ln in p.read_text().splitlines()])


def expected_lines(root: Path, name: str, lines: list[str]) -> tuple[Counter[tuple[Any, ...]], int]:
    """The job's batch join of ``lines`` (one record each) with the masters in ``root/m.db``, and its dead letters."""
    src, key, table, mkey, cols, how = JOBS[name]
    schema = ORDERS if src == "orders" else CLICKS
    rows: dict[str, list[Any]] = {c: [] for c in schema}
    dead = 0
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            dead += 1
            continue
        if key not in rec:
            dead += 1
            continue
        for c in schema:
            rows[c].append(rec.get(c))
    types = {"int64": pa.int64(), "string": pa.string()}
    stream = pa.table({c: pa.array(v, types[schema[c]]) for c, v in rows.items()})
    with sqlite3.connect(root / "m.db") as con:
        mrows = con.execute(f"SELECT {mkey}, {', '.join(cols)} FROM {table}").fetchall()  # noqa: S608
    master = pa.table({c: [r[i] for r in mrows] for i, c in enumerate([mkey, *cols])})
    db = duckdb.connect()
    db.register("s", stream)
    db.register("m", master)
    join = "LEFT JOIN" if how == "left" else "JOIN"
    sel = ", ".join([*(f"s.{c}" for c in schema), *(f"m.{c}" for c in cols)])
    got = db.execute(f"SELECT {sel} FROM s {join} m ON s.{key} = m.{mkey}").fetchall()  # noqa: S608
    return Counter(got), dead


def output(root: Path, name: str) -> Counter[tuple[Any, ...]]:
    """The job's sink rows (without ssbj's columns) as a multiset."""
    src, _, _, _, cols, _ = JOBS[name]
    names = [*(ORDERS if src == "orders" else CLICKS), *cols]
    path = root / "out" / name
    if not path.exists() or not any(path.glob("*.parquet")):
        return Counter()
    t = ds.dataset(path, format="parquet").to_table()
    return Counter(zip(*[t.column(c).to_pylist() for c in names], strict=True))


def dead_letters(root: Path, name: str) -> int:
    path = root / "dead" / name
    if not path.exists() or not any(path.glob("*.parquet")):
        return 0
    return ds.dataset(path, format="parquet").count_rows()
