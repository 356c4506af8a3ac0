"""The LSM-tree waiting store: completes where the in-memory store would exceed its budget, exactly."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest
from multiway_cases import chain_case, duckdb_answer, multiset, run_with_restarts

from ssbj.adapters.lsmstore import LsmStore
from ssbj.core.multiway import MultiWayJoin, WaitingStateOverflow
from ssbj.errors import DependencyError

SCANNED = {"c": False, "n": False, "p": False}


def _budget_for(case, **options) -> int:  # type: ignore[no-untyped-def]
    """Fixed bytes of the operator (held masters, buffers, caches) plus a little room for waiting rows."""
    op = MultiWayJoin(case.spec, case.masters, 1 << 30, **options)
    return op.fixed_bytes() + (256 << 10)


def test_lsm_completes_where_memory_overflows() -> None:
    case = chain_case(11, ("inner", "left", "left"), n_stream=6000)
    options = {"hold": SCANNED, "partition_rows": 2, "use_cache": False}
    budget = _budget_for(case, **options)
    with pytest.raises(WaitingStateOverflow, match="LSM-tree store"):
        run_with_restarts(case, budget, [1500], set(), **options)
    store = LsmStore(memtable_bytes=64 << 10, block_cache_bytes=64 << 10)
    op = MultiWayJoin(case.spec, case.masters, budget, store=store, **options)
    out, peak, disk = [], 0, 0
    for i in range(0, case.stream.num_rows, 1500):
        out.append(op.process(case.stream.slice(i, 1500)))
        peak, disk = max(peak, op.memory()["total"]), max(disk, store.disk_bytes())
    for t in op.drain():
        out.append(t)
        peak = max(peak, op.memory()["total"])
    assert multiset(out) == duckdb_answer(case)
    assert peak <= budget  # the store's hot chunks plus RocksDB's capped memory stay in the budget
    assert disk > 0 and store.spilled_chunks > 0 and store.reads > 0
    assert store.rocksdb_memory() <= store.reserve
    store.close()


def test_lsm_restores_exactly_across_restarts() -> None:
    case = chain_case(5, ("left", "inner", "left"), n_stream=2000)
    options = {
        "hold": SCANNED,
        "partition_rows": 3,
        "store_factory": lambda: LsmStore(memtable_bytes=64 << 10, block_cache_bytes=0, spill_all=True),
    }
    out, op = run_with_restarts(case, 1 << 24, [97, 250], {2, 5, 9, 14}, **options)
    assert multiset(out) == duckdb_answer(case)
    op.store.close()


def test_lsm_store_round_trip_and_flags() -> None:
    s = LsmStore(memtable_bytes=64 << 10, block_cache_bytes=0, spill_all=True)
    t = pa.table({"x": np.arange(13), "y": [f"v{i}" for i in range(13)]})
    flags = np.zeros(13, bool)
    s.put(1, 7, t, flags)
    flags2 = flags.copy()
    flags2[[0, 5, 12]] = True
    s.set_matched(1, 7, flags2)
    got, f = s.get(1, 7)
    assert got.equals(t) and f is not None and (f == flags2).all()
    assert s.disk_bytes() > 0 and s.memory_bytes() == s.reserve
    s.delete(1, 7)
    assert s.disk_bytes() == 0
    s.close()


def test_missing_rocksdict_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # import now raises ImportError
    with pytest.raises(DependencyError, match="'lsm' extra"):
        LsmStore()
