"""A scanned master's cache follows the master: within one R-cycle of a change, cached values serve the new rows.

The master changes in place (rows updated, a row's key moved away: a delete, another's
moved in: an insert) while hot values are cached. After one full R-cycle of scans the
stream rows that arrive must join exactly as DuckDB joins them with the new master, the
cache serving them (not the scan), also across a checkpoint and restore in between.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.multiway import MultiWayJoin
from ssbj.core.multiway.spec import JoinEdge, MasterInput, MultiWaySpec, OutputColumn

B = 10  # master rows per partition
SPEC = MultiWaySpec(
    stream="s",
    stream_columns=("id", "k"),
    masters=(MasterInput("m", "M", ("k", "x")),),
    edges=(JoinEdge("m", "s", ("k",), ("k",), "inner"),),
    output=(OutputColumn("sid", "s", "id"), OutputColumn("k", "s", "k"), OutputColumn("x", "m", "x")),
)


class MutableScan:
    """A master scan over a table the test may change between steps (same rows per partition)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    @property
    def partition_rows(self) -> int:
        return B

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    def num_partitions(self) -> int:
        return -(-self.table.num_rows // B)

    def read_partition(self, p: int) -> pa.Table:
        return self.table.slice(p * B, B)

    def repartition(self, partition_rows: int) -> MutableScan:
        assert partition_rows == B
        return self

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema


def _master_a() -> pa.Table:
    keys = [0, 0, 0, *range(3, 100)]  # hot value 0 has three rows; 1 and 2 have none yet
    return pa.table({"k": pa.array(keys, pa.int64()), "x": pa.array([10 * k + i for i, k in enumerate(keys)])})


def _master_b(a: pa.Table) -> pa.Table:
    k = a.column("k").to_pylist()
    x = a.column("x").to_pylist()
    x[0] = -7  # value 0: a row updated
    k[1] = 1000  # value 0: a row deleted (its key moved to one no stream row has)
    k[50] = 0  # value 0: a row inserted (in another partition)
    x[50] = -50
    k[97] = 3  # value 3 (hot, cached): a second row, in the last partition
    x[97] = -97
    return pa.table({"k": pa.array(k, pa.int64()), "x": pa.array(x, pa.int64())})


def _stream(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    hot = rng.choice([0, 3, 4], size=n)
    cold = rng.integers(5, 100, size=n)
    keys = np.where(rng.random(n) < 0.7, hot, cold)
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()), "k": pa.array(keys, pa.int64())})


def _duckdb(stream: pa.Table, master: pa.Table) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    con.register("s", stream)
    con.register("m", master)
    rows = con.execute("SELECT s.id, s.k, m.x FROM s JOIN m ON s.k = m.k").fetchall()
    con.close()
    return Counter(tuple(r) for r in rows)


def _rows(out: list[pa.Table], ids: set[int]) -> Counter[tuple[Any, ...]]:
    got: Counter[tuple[Any, ...]] = Counter()
    for t in out:
        for r in zip(*[c.to_pylist() for c in t.columns], strict=True):
            if r[0] in ids:
                got[r] += 1
    return got


@pytest.mark.parametrize("restore", [False, True])
def test_cached_values_serve_the_changed_master_within_one_r_cycle(restore: bool) -> None:
    rng = np.random.default_rng(7)
    scan = MutableScan(_master_a())
    k = scan.num_partitions()
    op = MultiWayJoin(SPEC, {"m": scan}, 1 << 24)
    out: list[pa.Table] = []
    n = 0
    for _ in range(6 * k):  # enough R-cycles for the hot values to be admitted
        out.append(op.process(_stream(rng, n, 40)))
        n += 40
    cache = op.caches[0]
    assert cache.admitted >= 2 and cache.tags is not None
    scan.table = _master_b(scan.table)
    with tempfile.TemporaryDirectory() as tmp:
        for step in range(k + 1):  # one full R-cycle of scans after the change (rows keep waiting)
            out.append(op.process(_stream(rng, n, 40)))
            n += 40
            if restore and step == k // 2:
                store = DirectoryStore(tmp)
                op.checkpoint(store, 1)
                op = MultiWayJoin.restore(store, SPEC, {"m": scan}, 1 << 24, 1)
        cache = op.caches[0]
        served = cache.served
        late = _stream(rng, n, 400)
        out.append(op.process(late))
        out.extend(op.drain())
    assert cache.refreshed > 0
    assert cache.served - served > 100  # the late rows of hot values were served by the cache
    ids = set(late.column("id").to_pylist())
    want = _duckdb(late, scan.table)
    assert _rows(out, ids) == want


def test_unchanged_master_keeps_the_cache_index() -> None:
    """Re-read partitions with the same rows change nothing, while values enter and leave the cache."""
    rng = np.random.default_rng(3)
    scan = MutableScan(_master_a())
    k = scan.num_partitions()
    op = MultiWayJoin(SPEC, {"m": scan}, 1 << 24)
    stream = _stream(rng, 0, 40 * 10 * k)
    out = [op.process(stream.slice(i, 40)) for i in range(0, stream.num_rows, 40)]
    out.extend(op.drain())
    cache = op.caches[0]
    assert cache.admitted >= 2 and cache.served > 0
    assert cache.refreshed == 0
    assert _rows(out, set(stream.column("id").to_pylist())) == _duckdb(stream, scan.table)
