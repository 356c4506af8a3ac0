"""Independent reference for pipeline tests: decode the landed demo files by hand, join in Python."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any


def good_orders(landing: Path) -> tuple[list[tuple[Any, ...]], int]:
    """(order_id, customer_id, amount, placed_at) of every well-formed line, and the number of bad lines."""
    rows: list[tuple[Any, ...]] = []
    bad = 0
    for f in sorted(landing.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(r.get("order_id"), int) or "customer_id" not in r:
                bad += 1
                continue
            rows.append((r["order_id"], r["customer_id"], r.get("amount"), datetime.fromisoformat(r["placed_at"])))
    return rows, bad


def expected_join(landing: Path, master_db: Path) -> tuple[Counter[tuple[Any, ...]], int, int]:
    """Multiset of enriched rows (stream columns then c_name, c_segment, c_balance), unmatched count, bad lines."""
    with sqlite3.connect(master_db) as db:
        master = {
            k: (n, s, b) for k, n, s, b in db.execute("SELECT c_custkey, c_name, c_segment, c_balance FROM customer")
        }
    rows, bad = good_orders(landing)
    out: Counter[tuple[Any, ...]] = Counter()
    unmatched = 0
    for r in rows:
        m = master.get(r[1]) if r[1] is not None else None
        if m is None:
            unmatched += 1
        else:
            out[r + m] += 1
    return out, unmatched, bad


def warehouse_rows(db_path: Path, table: str) -> Counter[tuple[Any, ...]]:
    """Multiset of the warehouse rows without ssbj's batch columns."""
    with sqlite3.connect(db_path) as db:
        cur = db.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - test-owned table name
        names = [d[0] for d in cur.description]
        keep = [i for i, n in enumerate(names) if not n.startswith("ssbj_")]
        out: Counter[tuple[Any, ...]] = Counter()
        for row in cur:
            vals = [row[i] for i in keep]
            ts = names.index("placed_at")
            if isinstance(vals[ts], str):
                vals[ts] = datetime.fromisoformat(vals[ts])
            out[tuple(vals)] += 1
        return out
