"""The join in the executors (join.placement: executors): exact against a plain batch join, per router.

A SQLite master (``m``: ``id`` primary key, ``k`` a many-to-many join attribute), landing
CSV files with NULL keys, unmatched keys and a malformed line, P = 2 shards on ``local[2]``.
The warehouse (Parquet) must equal the batch join as a multiset, every dead letter must
appear once, and the counts must reconcile; a second run over the same checkpoint adds
nothing.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from ssbj.config import parse_config
from ssbj.contracts import MAX_SHARDS, SEGMENT_COLUMN
from ssbj.pipeline.job import EnrichmentJob

pytestmark = pytest.mark.slow


def _master(path: Path, n: int) -> list[tuple[int, int, str]]:
    rows = [(i, (i + 1) // 2 if i % 9 else -((i + 1) // 2), f"name-{i}") for i in range(1, n + 1)]
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, k INTEGER, name TEXT)")
        db.executemany("INSERT INTO m VALUES (?, ?, ?)", rows)
    return rows


def _orders(n: int) -> list[tuple[int, int | None, int]]:
    return [(i, None if i % 37 == 0 else ((i * 7919) % 300) - 40, i % 5) for i in range(n)]


def _land(tmp: Path, orders: list[tuple[int, int | None, int]], files: int) -> None:
    (tmp / "landing").mkdir()
    per = -(-len(orders) // files)
    for f in range(files):
        part = orders[f * per : (f + 1) * per]
        lines = ["oid,key,qty"] + [f"{o},{'' if k is None else k},{q}" for o, k, q in part]
        if f == 1:
            lines.insert(5, "424242,not-a-number,1")
        (tmp / "landing" / f"orders-{f:02d}.csv").write_text("\n".join(lines) + "\n")


def _cfg(tmp: Path, key: str, router: str, join_type: str = "inner", shards: int = 2, extra: str = "") -> Any:
    doc = {
        "name": f"exec-{router}",
        "source": {"kind": "files", "path": str(tmp / "landing"), "format": "csv", "max_files_per_trigger": 2},
        "schema": {"oid": "int64", "key": "int64", "qty": "int32"},
        "master": {"url": f"sqlite:///{tmp / 'm.db'}", "table": "m", "key": key, "columns": ["name"]},
        "join": {
            "stream_key": "key",
            "type": join_type,
            "memory": "2MiB",
            "step_rows": 150,
            "placement": "executors",
            "shards": shards,
            "shard_router": router,
        },
        "sink": {"kind": "parquet", "path": str(tmp / "out")},
        "dead_letter": {"kind": "parquet", "path": str(tmp / "dl")},
        "checkpoint": str(tmp / "ck"),
    }
    if extra == "prefetch+lookup":  # the read-ahead thread and the hybrid step's lookup path in every shard
        doc["master"]["prefetch"] = 1  # type: ignore[index]
        doc["join"]["hybrid"] = "always"  # type: ignore[index]
    if extra == "index":  # index mode in every shard: no scan, the cache filled and refreshed by lookups
        doc["join"]["hybrid"] = "index"  # type: ignore[index]
    return parse_config(doc)


def _expected(
    orders: list[tuple[int, int | None, int]], master: list[tuple[int, int, str]], key: int, left: bool
) -> Counter[Any]:
    by_key: dict[int, list[str]] = {}
    for row in master:
        by_key.setdefault(row[key], []).append(row[2])
    out: Counter[Any] = Counter()
    for oid, k, qty in orders:
        names = by_key.get(k, []) if k is not None else []
        for name in names or ([None] if left else []):
            out[(oid, k, qty, name)] += 1
    return out


def _got(path: Path) -> tuple[Counter[Any], set[int]]:
    t = ds.dataset(path, format="parquet").to_table()
    cols = [t.column(c).to_pylist() for c in ("oid", "key", "qty", "name")]
    shards = {s % MAX_SHARDS for s in t.column(SEGMENT_COLUMN).to_pylist()}
    return Counter(zip(*cols, strict=True)), shards


@pytest.mark.parametrize(
    ("key", "router", "join_type", "extra"),
    [
        ("k", "mod", "inner", ""),
        ("id", "range", "left", ""),
        ("k", "hash", "left", ""),
        ("k", "mod", "left", "prefetch+lookup"),
        ("k", "hash", "left", "index"),
    ],
)
def test_sharded_join_in_executors_equals_the_batch_join(
    spark: Any, tmp_path: Path, key: str, router: str, join_type: str, extra: str
) -> None:
    master = _master(tmp_path / "m.db", 500)
    orders = _orders(3000)
    _land(tmp_path, orders, 6)
    cfg = _cfg(tmp_path, key, router, join_type, extra=extra)
    summary = EnrichmentJob(cfg, spark=spark).run()
    got, shards = _got(tmp_path / "out")
    assert got == _expected(orders, master, 0 if key == "id" else 1, join_type == "left")
    assert shards == {0, 1}  # both shards wrote rows
    dl = ds.dataset(tmp_path / "dl", format="parquet").to_table()
    assert dl.column("line").to_pylist() == [6]
    c = summary.counts
    assert c.records_in == len(orders) + 1 and c.dead_letters == 1 and c.waiting == 0 and c.reconciled
    again = EnrichmentJob(cfg, spark=spark).run()  # nothing new: the same rows, no duplicates
    assert _got(tmp_path / "out")[0] == got
    assert again.counts == c


def test_a_new_job_at_the_same_paths_never_meets_the_old_jobs_resident_state(spark: Any, tmp_path: Path) -> None:
    """Python workers keep shard operators between tasks: a job started afresh with another P at the same
    checkpoint path must not pick them up (found by the benchmark, which reuses paths between variants)."""
    master = _master(tmp_path / "m.db", 300)
    orders = _orders(1500)
    _land(tmp_path, orders, 3)
    expected = _expected(orders, master, 1, False)
    for shards in (1, 2, 1):
        shutil.rmtree(tmp_path / "ck", ignore_errors=True)
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        shutil.rmtree(tmp_path / "dl", ignore_errors=True)
        EnrichmentJob(_cfg(tmp_path, "k", "mod", shards=shards), spark=spark).run()
        assert _got(tmp_path / "out")[0] == expected
