"""Data and oracle of the two-stream (window join) pipeline tests: orders and shipments, one master.

Orders and shipments join on the customer key (many-to-many: few keys) within an event-time
band, then the customer master (0-2 rows per key) by a LEFT JOIN. Keys and times may be
NULL; some rows arrive later than the allowed lateness (dead letters); a few records are
malformed. Each landing file is one micro-batch of its stream (``max_files_per_trigger: 1``),
so which rows are late is fixed by the files: :func:`late_ids` finds them from the rows
alone. The oracle is DuckDB running the same SQL over the rows that are not late.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

LATENESS = 10  # seconds
SQL = """
SELECT o.o_id, s.s_id, c.c_name
FROM orders o
  JOIN shipments s ON s.s_custkey = o.o_custkey
    AND s.s_ts BETWEEN o.o_ts - INTERVAL '20' SECOND AND o.o_ts + INTERVAL '40' SECOND
  LEFT JOIN customer c ON c.c_custkey = o.o_custkey
"""
COLUMNS = ("o_id", "s_id", "c_name")
SCHEMAS = {
    "orders": {"o_id": "int64", "o_custkey": "int64", "o_ts": "timestamp"},
    "shipments": {"s_id": "int64", "s_custkey": "int64", "s_ts": "timestamp"},
}
PREFIX = {"orders": "o", "shipments": "s"}
T0 = datetime(2026, 1, 1)


@dataclass
class Streams:
    """Per stream: files (each a list of raw lines), the good rows per file, the bad record count."""

    files: dict[str, list[list[bytes]]] = field(default_factory=dict)
    rows: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    bad: dict[str, int] = field(default_factory=dict)


def streams(
    seed: int,
    files: int = 6,
    per_file: int = 120,
    keys: int = 40,
    lateness: int = LATENESS,
    late_frac: dict[str, float] | None = None,
) -> Streams:
    """Both streams: event times rise file by file (30 s each), jitter below 10 s, some rows late.

    A late row is ``lateness`` + 40-70 s behind its file; a stream with ``late_frac`` 0 and
    ``lateness`` >= 40 has no late row however its records are cut into batches.
    """
    late_frac = late_frac if late_frac is not None else {"orders": 0.08, "shipments": 0.08}
    rng = random.Random(seed)
    out = Streams()
    for name, p in PREFIX.items():
        out.files[name], out.rows[name], out.bad[name] = [], [], 0
        start = 0 if name == "orders" else 1_000_000
        for f in range(files):
            lines: list[bytes] = []
            good: list[dict[str, Any]] = []
            for j in range(per_file):
                i = start + f * per_file + j
                if j == 7 and f % 2 == 0:
                    lines.append(b'{"' + p.encode() + b'_id": 1, ')  # truncated JSON
                    out.bad[name] += 1
                    continue
                base = f * 30 + rng.randrange(0, 30)
                behind = rng.randrange(0, 10)
                if rng.random() < late_frac[name]:  # late: far behind the stream's watermark
                    behind = lateness + 40 + rng.randrange(0, 30)
                secs = base - behind
                ts = None if rng.random() < 0.03 else (T0 + timedelta(seconds=secs)).isoformat()
                key = None if rng.random() < 0.06 else rng.randrange(0, keys)
                r = {f"{p}_id": i, f"{p}_custkey": key, f"{p}_ts": ts}
                lines.append(json.dumps(r).encode())
                good.append({**r, f"{p}_ts": None if ts is None else datetime.fromisoformat(ts)})
            out.files[name].append(lines)
            out.rows[name].append(good)
    return out


def late_ids(data: Streams, lateness: int = LATENESS, step_rows: int | None = None) -> dict[str, set[int]]:
    """Ids of rows below (largest on-time event time of the stream's earlier steps) - lateness.

    A step is a file's rows, or each ``step_rows`` slice of them (``join.step_rows``).
    """
    late: dict[str, set[int]] = {}
    for name, p in PREFIX.items():
        top: datetime | None = None
        late[name] = set()
        steps = [
            rows[i : i + (step_rows or len(rows) or 1)]
            for rows in data.rows[name]
            for i in range(0, len(rows), step_rows or len(rows) or 1)
        ]
        for rows in steps:
            on_time = []
            wm = None if top is None else top - timedelta(seconds=lateness)
            for r in rows:
                t = r[f"{p}_ts"]
                if t is not None and wm is not None and t < wm:
                    late[name].add(r[f"{p}_id"])
                elif t is not None:
                    on_time.append(t)
            if on_time:
                top = max(on_time) if top is None else max(top, *on_time)
    return late


def write_landing(root: Path, data: Streams) -> dict[str, Path]:
    """One directory per stream, one JSON-lines file per batch (renamed into place whole)."""
    dirs = {}
    for name, files in data.files.items():
        d = root / f"landing-{name}"
        d.mkdir(parents=True, exist_ok=True)
        for f, lines in enumerate(files):
            tmp = d / f".{name}-{f:03d}.tmp"
            tmp.write_bytes(b"\n".join(lines) + b"\n")
            tmp.rename(d / f"{name}-{f:03d}.jsonl")
            # Spark's file source takes files in modification-time order: make it the files' order
            os.utime(d / f"{name}-{f:03d}.jsonl", (1_700_000_000 + f, 1_700_000_000 + f))
        dirs[name] = d
    return dirs


def duckdb_answer(data: Streams, customer: pa.Table, late: dict[str, set[int]]) -> Counter[tuple[Any, ...]]:
    """DuckDB's result of :data:`SQL` over the rows that are not late, as a multiset."""
    con = duckdb.connect()
    for name, p in PREFIX.items():
        schema = pa.schema([(f"{p}_id", pa.int64()), (f"{p}_custkey", pa.int64()), (f"{p}_ts", pa.timestamp("us"))])
        rows = [r for rs in data.rows[name] for r in rs if r[f"{p}_id"] not in late[name]]
        con.register(name, pa.Table.from_pylist(rows, schema=schema))
    con.register("customer", customer)
    got = Counter(tuple(r) for r in con.execute(SQL).fetchall())
    con.close()
    return got


def job(
    tmp: Path,
    database: dict[str, Any],
    dirs: dict[str, Path],
    sink: dict[str, Any],
    dead_letter: dict[str, Any],
    **over: Any,
) -> dict[str, Any]:
    """A two-stream job file (as data): orders and shipments landing as files, customer scanned."""
    cfg: dict[str, Any] = {
        "name": "orders-shipments",
        "source": {"kind": "files", "path": str(dirs["orders"]), "format": "jsonl", "max_files_per_trigger": 1},
        "stream": {"name": "orders", "schema": SCHEMAS["orders"], "event_time": "o_ts"},
        "second_stream": {
            "name": "shipments",
            "schema": SCHEMAS["shipments"],
            "event_time": "s_ts",
            "source": {"kind": "files", "path": str(dirs["shipments"]), "format": "jsonl", "max_files_per_trigger": 1},
        },
        "database": database,
        "masters": {"customer": {"mode": "scanned", "partition_rows": 40}},
        "sql": SQL,
        "join": {"memory": "32MiB", "lateness": LATENESS},
        "sink": sink,
        "dead_letter": dead_letter,
        "checkpoint": str(tmp / "ck"),
    }
    cfg.update(over)
    return cfg
