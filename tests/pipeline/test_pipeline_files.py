"""Landing-directory jobs on Spark: CSV and Parquet in, Parquet out, left join, processing-time trigger."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ssbj.config import parse_config
from ssbj.pipeline.job import EnrichmentJob


def _master(path: Path, n: int) -> dict[int, tuple[str, int]]:
    rows = {k: (f"name-{k}", k % 7) for k in range(1, n + 1)}
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, k INTEGER, name TEXT, grp INTEGER)")
        # two master rows per key 1..n/2: a many-to-many join
        db.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", [(i, (i + 1) // 2, rows[i][0], rows[i][1]) for i in rows])
    return {i: ((i + 1) // 2, *rows[i]) for i in rows}  # type: ignore[misc]


def _cfg(tmp: Path, fmt: str, **over: Any) -> Any:
    base: dict[str, Any] = {
        "name": f"files-{fmt}",
        "source": {"kind": "files", "path": str(tmp / "landing"), "format": fmt, "max_files_per_trigger": 1},
        "schema": {"oid": "int64", "k": "int64", "qty": "int32"},
        "master": {"url": f"sqlite:///{tmp / 'm.db'}", "table": "m", "key": "k", "columns": ["name", "grp"]},
        "join": {"stream_key": "k", "type": "left", "memory": "8MiB", "step_rows": 300},
        "sink": {"kind": "parquet", "path": str(tmp / "out")},
        "dead_letter": {"kind": "parquet", "path": str(tmp / "dl")},
        "checkpoint": str(tmp / "ck"),
    }
    base.update(over)
    return parse_config(base)


def _expected(orders: list[tuple[int, int | None, int]], master: dict[int, tuple[Any, ...]]) -> Counter[Any]:
    by_key: dict[int, list[tuple[str, int]]] = {}
    for k, name, grp in master.values():
        by_key.setdefault(k, []).append((name, grp))
    out: Counter[Any] = Counter()
    for oid, k, qty in orders:
        for name, grp in by_key.get(k, [(None, None)]) if k is not None else [(None, None)]:
            out[(oid, k, qty, name, grp)] += 1
    return out


def _got(path: Path) -> Counter[Any]:
    t = ds.dataset(path, format="parquet").to_table()
    if t.num_columns == 0:  # prepared (schema file only), no batch written yet: polled early under load
        return Counter()
    cols = [t.column(c).to_pylist() for c in ("oid", "k", "qty", "name", "grp")]
    return Counter(zip(*cols, strict=True))


def _orders(start: int, n: int) -> list[tuple[int, int | None, int]]:
    return [(i, None if i % 41 == 0 else (i * 7919) % 260, i % 5) for i in range(start, start + n)]


def test_csv_landing_left_join_processing_time_with_idle_drain(spark: Any, tmp_path: Path) -> None:
    master = _master(tmp_path / "m.db", 400)
    (tmp_path / "landing").mkdir()
    cfg = _cfg(tmp_path, "csv", trigger={"mode": "processing-time", "interval": "1 second", "idle_drain_seconds": 2})
    job = EnrichmentJob(cfg, spark=spark)
    orders: list[tuple[int, int | None, int]] = []
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        for f in range(5):
            part = _orders(f * 400, 400)
            orders.extend(part)
            lines = ["oid,k,qty"] + [f"{o},{'' if k is None else k},{q}" for o, k, q in part]
            if f == 2:
                lines.insert(10, "999999,oops,1")
            tmp = tmp_path / f".f{f}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            tmp.rename(tmp_path / "landing" / f"orders-{f}.csv")
            time.sleep(1.5)
        expected = _expected(orders, master)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if (tmp_path / "out").exists() and _got(tmp_path / "out") == expected:
                break
            time.sleep(1)
    finally:
        job.stop()
        runner.join(60)
    assert _got(tmp_path / "out") == expected
    dl = ds.dataset(tmp_path / "dl", format="parquet").to_table()
    assert dl.column("line").to_pylist() == [11]
    assert job.processor.counts().waiting == 0


def test_parquet_landing_available_now_inner_join_twice_is_idempotent(spark: Any, tmp_path: Path) -> None:
    master = _master(tmp_path / "m.db", 300)
    (tmp_path / "landing").mkdir()
    orders: list[tuple[int, int | None, int]] = []
    for f in range(4):
        part = _orders(f * 500, 500)
        orders.extend(part)
        t = pa.table(
            {
                "oid": pa.array([o for o, _, _ in part], pa.int64()),
                "k": pa.array([k for _, k, _ in part], pa.int64()),
                "qty": pa.array([q for _, _, q in part], pa.int32()),
            }
        )
        pq.write_table(t, tmp_path / "landing" / f"orders-{f}.parquet")
    (tmp_path / "landing" / "broken.parquet").write_bytes(b"PAR1 not really")
    cfg = _cfg(tmp_path, "parquet", join={"stream_key": "k", "type": "inner", "memory": "8MiB", "step_rows": 200})
    summary = EnrichmentJob(cfg, spark=spark).run()
    expected = Counter({r: c for r, c in _expected(orders, master).items() if r[3] is not None})
    assert _got(tmp_path / "out") == expected
    assert summary.counts.dead_letters == 1 and summary.counts.waiting == 0
    again = EnrichmentJob(cfg, spark=spark).run()
    assert again.batches == 0
    assert _got(tmp_path / "out") == expected
