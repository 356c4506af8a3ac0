"""SqlMasterScan read ahead by PrefetchingScan on SQLite: exact joins, freshness bound, job config wiring."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.config import parse_config
from ssbj.core import JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.prefetch import PrefetchingScan
from ssbj.errors import ConfigError
from ssbj.pipeline.factory import MasterSource


def _master_db(path: Path, n: int, seed: int = 2) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(1, n + 1) * 3  # gaps in the page column
    keys = rng.integers(0, n // 3, n)  # repeated keys: many-to-many
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, k INTEGER, attr INTEGER)")
        db.executemany(
            "INSERT INTO m VALUES (?, ?, ?)", [(int(i), int(k), int(i % 11)) for i, k in zip(ids, keys, strict=True)]
        )
    return pa.table({"id": ids.astype(np.int64), "k": keys.astype(np.int64), "attr": (ids % 11).astype(np.int64)})


def _stream(n: int, n_master: int, seed: int = 4) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, n_master // 2, n)
    return pa.table({"sid": np.arange(n, dtype=np.int64), "sk": pa.array(keys, mask=rng.random(n) < 0.03)})


@pytest.mark.parametrize("depth", [1, 2])
def test_sql_scan_with_prefetch_joins_exactly_through_a_restore(depth: int, tmp_path: Path) -> None:
    master = _master_db(tmp_path / "m.db", 3_000)
    stream = _stream(9_000, 3_000)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    spec = JoinSpec("sk", "k", ("id", "attr"), chunk_bytes=3_000, eviction_interval=3)
    scan = PrefetchingScan(SqlMasterScan(url, "m", "k", 400, columns=["id", "attr"]), depth)
    op = SemiStreamJoin(spec, scan, stream.schema, scan.schema)
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    store = DirectoryStore(tmp_path / "ck")
    batches = stream.to_batches(max_chunksize=800)
    for i, b in enumerate(batches):
        op.push(b)
        while op.buffered_tuples:
            r = op.step()
            out += as_multiset(r.enriched)
            um += as_multiset(r.unmatched)
        if i == len(batches) // 2:  # a restart: a new scan from the saved layout
            op.checkpoint(store, 1, {"layout": scan.layout()})
            scan.close()
            layout = SemiStreamJoin.checkpoint_meta(store, 1)["layout"]
            scan = PrefetchingScan(SqlMasterScan(url, "m", "k", 400, columns=["id", "attr"], layout=layout), depth)
            op = SemiStreamJoin.restore(store, spec, scan, stream.schema, scan.schema)
    for r in op.drain():
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    assert scan.stats.hits > 10 and scan.stats.misses == 1  # after the restart, only the first read waited
    scan.close()
    ref_master = master.select(["k", "id", "attr"])
    assert out == batch_join(stream, ref_master, "sk", "k", ["id", "attr"])
    assert um == unmatched_reference(stream, ref_master, "sk", "k")


def test_prefetched_partition_is_at_most_one_step_old(tmp_path: Path) -> None:
    """An update made after partition p+1 was read ahead shows at its next read, one R-cycle later."""
    _master_db(tmp_path / "m.db", 1_000)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with PrefetchingScan(SqlMasterScan(url, "m", "k", 250, columns=["attr"]), 1) as scan:
        k = scan.num_partitions()
        assert k == 4
        scan.read_partition(1)  # partition 2 is read ahead now
        scan.settle()
        assert scan.read_partition(2).num_rows == 250
        scan.settle()  # partition 3 is read ahead
        with sqlite3.connect(tmp_path / "m.db") as db:
            db.execute("UPDATE m SET attr = 99 WHERE id > 3 * 750")  # partition 3
        stale = scan.read_partition(3)
        assert set(stale.column("attr").to_pylist()) != {99}  # read before the update: one step old
        for p in [*range(4, k), *range(0, 3)]:
            scan.read_partition(p % k)
        fresh = scan.read_partition(3)
        assert set(fresh.column("attr").to_pylist()) == {99}


def _cfg(tmp: Path, **master: Any) -> Any:
    return parse_config(
        {
            "source": {"kind": "files", "path": str(tmp / "landing"), "format": "jsonl"},
            "schema": {"sid": "int64", "sk": "int64"},
            "master": {"url": f"sqlite:///{tmp / 'm.db'}", "table": "m", "key": "k", **master},
            "join": {"stream_key": "sk"},
            "sink": {"kind": "parquet", "path": str(tmp / "out")},
            "dead_letter": {"kind": "parquet", "path": str(tmp / "dl")},
            "checkpoint": str(tmp / "ck"),
        }
    )


def test_job_config_prefetch_is_applied_by_the_factory(tmp_path: Path) -> None:
    _master_db(tmp_path / "m.db", 100)
    assert isinstance(MasterSource(_cfg(tmp_path)).scan(None, 30), SqlMasterScan)  # default: off
    one = MasterSource(_cfg(tmp_path, prefetch=1)).scan(None, 30)
    assert isinstance(one, PrefetchingScan) and one.depth == 1
    deep = MasterSource(_cfg(tmp_path, prefetch=2)).scan(None, 30)
    assert isinstance(deep, PrefetchingScan) and deep.depth == 2
    off = MasterSource(_cfg(tmp_path, prefetch=0)).scan(None, 30)
    assert isinstance(off, SqlMasterScan)
    assert _cfg(tmp_path, prefetch=3).join_settings().prefetch == 3  # the planner reserves 3 buffers
    for bad in (-1, "two", True):
        with pytest.raises(ConfigError, match=r"master\.prefetch"):
            _cfg(tmp_path, prefetch=bad)


def test_in_memory_sqlite_master_is_read_without_a_thread(tmp_path: Path) -> None:
    """``sqlite://`` is one database per thread: a read-ahead thread would see an empty one."""
    cfg = _cfg(tmp_path, prefetch=1)
    src = MasterSource(cfg.model_copy(update={"master": cfg.master.model_copy(update={"url": "sqlite://"})}))
    with src.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE m (id INTEGER PRIMARY KEY, k INTEGER, attr INTEGER)")
        conn.exec_driver_sql("INSERT INTO m VALUES (1, 1, 1), (2, 1, 2)")
    scan = src.scan(None, 1)
    assert isinstance(scan, SqlMasterScan)
    assert [scan.read_partition(p).num_rows for p in range(scan.num_partitions())] == [1, 1]
