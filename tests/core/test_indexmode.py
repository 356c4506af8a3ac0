"""Index mode (``hybrid: index``, ssbj.core.indexmode): SSBJ's cache in front of lookups, no scan."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from core_scenarios import KEY, ScanOnly, drifting, key_tables
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core import indexmode as IX
from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import CheckpointError, ConfigError

MCOLS = ["mval", "mk"]


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    hot = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    return {
        "master_keys": draw(st.lists(KEY, max_size=40)),
        "stream_keys": draw(st.lists(st.one_of(st.sampled_from(hot), st.sampled_from(hot), KEY), max_size=300)),
        "b": draw(st.integers(1, 12)),
        "chunk_bytes": draw(st.integers(1, 400)),
        "batch": draw(st.integers(1, 60)),
        "strings": draw(st.booleans()),
        "memory_budget": draw(st.one_of(st.none(), st.integers(1, 200_000))),
        "cut": draw(st.integers(0, 300)),
        "switch_factor": draw(st.sampled_from([0.05, 1.0])),
    }


class Mutable:
    """An in-memory master whose rows can be replaced between steps (a database that is updated)."""

    def __init__(self, t: pa.Table, b: int) -> None:
        self.m = ArrowMaster(t, b)
        self.b = b
        self.lookups = 0
        self.reads = 0

    def set(self, t: pa.Table) -> None:
        self.m = ArrowMaster(t, self.b)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["m"], name)

    def read_partition(self, p: int) -> pa.Table:
        self.reads += 1
        return self.m.read_partition(p)

    def lookup(self, key: str, values: pa.Array) -> pa.Table:
        self.lookups += 1
        return self.m.lookup(key, values)


def _operator(sc: dict[str, Any], master: Any, stream_schema: pa.Schema, schema: pa.Schema) -> SemiStreamJoin:
    spec = JoinSpec(
        "sk",
        "mk",
        tuple(MCOLS),
        chunk_bytes=sc["chunk_bytes"],
        memory_budget=sc["memory_budget"],
        switch_factor=sc["switch_factor"],
        hybrid="index",
    )
    return SemiStreamJoin(spec, master, stream_schema, schema)


def _check_counts(op: SemiStreamJoin) -> None:
    t = op.totals()
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]
    assert t["tuples_in"] - t["waiting"] == (
        t["served_by_cache"] + t["served_by_disk"] + t["served_by_lookup"] + t["null_keys"]
    )


def _decisions(op: SemiStreamJoin) -> tuple[int, ...]:
    """What the cache decided so far (the output is exact whatever it decides)."""
    x = op._c.extra
    return (op._c.served_cache, x.get("lookup_keys", 0), x.get("index_refreshed", 0), op.cache.values)


def _feed(op: SemiStreamJoin, batches: list[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    steps = []
    i = 0
    while i < len(batches) or op.waiting_tuples:
        if i < len(batches):
            op.push(batches[i])
            i += 1
        r = op.step()
        assert r.metrics.b == 0 and r.metrics.path in ("lookup", "idle")
        steps.append((as_multiset(r.enriched), as_multiset(r.unmatched), _decisions(op)))
        _check_counts(op)
    return steps


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_index_mode_equals_batch_join(sc: dict[str, Any]) -> None:
    """Duplicates, NULL keys, unmatched keys, many-to-many, budgets, string keys: the batch join's multiset."""
    stream, master = key_tables(sc)
    scan = Mutable(master, sc["b"])
    op = _operator(sc, scan, stream.schema, master.schema)
    steps = _feed(op, stream.to_batches(max_chunksize=sc["batch"]))
    assert sum((e for e, _, _ in steps), Counter()) == batch_join(stream, master, "sk", "mk", MCOLS)
    assert sum((u for _, u, _ in steps), Counter()) == unmatched_reference(stream, master, "sk", "mk")
    assert op.waiting_tuples == 0 and scan.reads == 0  # no partition was read
    if sc["strings"]:  # a hashed key type is never cached
        assert op.cache.values + op.cache.empty_values == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_index_mode_exact_across_save_restore(sc: dict[str, Any], tmp_path_factory: Any) -> None:
    """Restored at any step, the run continues step for step as without the restore, its cache decisions too."""
    stream, master = key_tables(sc)
    batches = stream.to_batches(max_chunksize=sc["batch"])
    reference = _feed(_operator(sc, Mutable(master, sc["b"]), stream.schema, master.schema), batches)
    store = DirectoryStore(tmp_path_factory.mktemp("ckpt"))
    op = _operator(sc, Mutable(master, sc["b"]), stream.schema, master.schema)
    cut = min(sc["cut"], len(reference))
    steps = []
    i = 0
    for j in range(cut):
        if i < len(batches):
            op.push(batches[i])
            i += 1
        r = op.step()
        steps.append((as_multiset(r.enriched), as_multiset(r.unmatched), _decisions(op)))
        op.checkpoint(store, j)
    op.checkpoint(store, cut)
    restored = SemiStreamJoin.restore(store, op.spec, Mutable(master, sc["b"]), stream.schema, master.schema)
    del op
    steps += _feed(restored, batches[i:])
    assert steps == reference


def _zipf(n_master: int, n_stream: int, seed: int = 5) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    master = pa.table({"mk": np.arange(n_master, dtype=np.int64), "mval": rng.integers(0, 100, n_master)})
    p = 1.0 / np.arange(1, 4 * n_master + 1)
    keys = rng.choice(4 * n_master, n_stream, p=p / p.sum())  # 3 in 4 values have no master row
    return pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": keys}), master


def test_the_cache_serves_hot_values_and_lookups_fall() -> None:
    """On skewed data the inequality caches hot values (with rows and empty): fewer keys are looked up."""
    stream, master = _zipf(2_000, 40_000)
    scan = Mutable(master, 100)
    op = SemiStreamJoin(
        JoinSpec("sk", "mk", tuple(MCOLS), hybrid="index", chunk_bytes=4_000), scan, stream.schema, master.schema
    )
    out: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=1_000):
        op.push(b)
        while op.buffered_tuples:
            out += as_multiset(op.step().enriched)
    assert out == batch_join(stream, master, "sk", "mk", MCOLS)
    t = op.totals()
    assert t["cache_share"] > 0.5, t
    assert op.cache.values > 0 and op.cache.empty_values > 0
    assert op._c.extra["lookup_keys"] < 0.5 * stream.num_rows
    assert scan.reads == 0


@pytest.mark.parametrize("cut", [60, 101])
def test_restore_keeps_the_cache_decisions(cut: int, tmp_path: Any) -> None:
    """On skewed data (admissions, refreshes, evictions at refresh), a restore continues every decision as before."""
    stream, master = _zipf(500, 6_000)
    sc = {"chunk_bytes": 400, "memory_budget": None, "switch_factor": 1.0}
    batches = stream.to_batches(max_chunksize=50)
    reference = _feed(_operator(sc, Mutable(master, 10), stream.schema, master.schema), batches)
    op = _operator(sc, Mutable(master, 10), stream.schema, master.schema)
    for b in batches[:cut]:
        op.push(b)
        op.step()
    assert op.doorkeeper.added and op._ix_tick > op._k and op._c.extra.get("index_evicted_at_refresh")
    store = DirectoryStore(tmp_path)
    op.checkpoint(store, cut)
    restored = SemiStreamJoin.restore(store, op.spec, Mutable(master, 10), stream.schema, master.schema)
    assert _feed(restored, batches[cut:]) == reference[cut:]


def test_cached_values_are_refreshed_within_one_r_cycle() -> None:
    """A changed, a deleted and a new master row reach every tuple that arrives one R-cycle later."""
    vals, rebuilds = _update_hot_values()
    assert set(vals) == {1001, 1002, 1600}, vals  # every hot value as the master is now
    assert rebuilds > 0


def test_mutation_without_refresh_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails when the cached values are not looked up again."""
    monkeypatch.setattr(IX, "refresh", lambda op, first, end, tick: None)
    vals, _ = _update_hot_values()
    assert set(vals) != {1001, 1002, 1600}


def _update_hot_values() -> tuple[Counter[Any], int]:
    master = pa.table({"mk": list(range(50)), "mval": list(range(50))})
    scan = Mutable(master, 5)  # k = 10
    hot = [1, 2, 3, 60]  # 60 has no row yet
    schema = pa.schema([("sid", pa.int64()), ("sk", pa.int64())])
    op = SemiStreamJoin(
        JoinSpec("sk", "mk", tuple(MCOLS), hybrid="index", chunk_bytes=1_000), scan, schema, master.schema
    )
    sid = 0

    def step() -> pa.Table:
        nonlocal sid
        op.push(pa.table({"sid": list(range(sid, sid + 40)), "sk": hot * 10}, schema=schema))
        sid += 40
        return op.step().enriched

    for _ in range(25):
        step()
    assert op.cache.values == 3 and op.cache.empty_values == 1  # all four cached
    updated = pa.table({"mk": [*range(50), 60], "mval": [*range(50), 600]})
    updated = updated.filter(pa.compute.not_equal(updated.column("mk"), 3))  # 3 deleted
    updated = updated.set_column(1, "mval", pa.compute.add(updated.column("mval"), 1000))
    scan.set(updated)
    for _ in range(-(-IX.cycle_tuples(op) // 40)):  # one R-cycle of stream tuples
        step()
    got = step()
    return Counter(got.column("mval").to_pylist()), op._c.extra.get("index_refresh_rebuilds", 0)


def test_budget_holds_in_index_mode() -> None:
    """Peak <= 1.05x the budget through drift (the hot set changes every quarter) at small budgets too."""
    stream, master = drifting(4_000, 60_000)
    for budget in (20_000, 120_000):
        op = SemiStreamJoin(
            JoinSpec("sk", "mk", ("attr",), hybrid="index", memory_budget=budget),
            Mutable(master, 200),
            stream.schema,
            master.schema,
        )
        peaks = []
        out: Counter[Any] = Counter()
        for b in stream.to_batches(max_chunksize=2_000):
            op.push(b)
            while op.buffered_tuples:
                r = op.step()
                out += as_multiset(r.enriched)
                peaks.append(r.metrics.memory.total / budget)
        assert out == batch_join(stream, master, "sk", "mk", ["attr"])
        assert max(peaks) <= 1.05, (budget, max(peaks))
        assert op.totals()["cache_share"] > 0.2
        assert op.cache.nbytes() == (
            sum(b.size for c in op.cache.columns for b in c.buffers() if b is not None)
            + op.cache.src.nbytes
            + op.cache.index.nbytes
            + op.cache.empties.nbytes
            + op.cache.cnt_src.nbytes
        )


def test_index_mode_needs_ssbj_and_a_lookup_master(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="algorithm"):
        JoinSpec("sk", "mk", algorithm="meshjoin", hybrid="index")

    master = pa.table({"mk": [1], "mval": [1]})
    s = pa.schema([("sid", pa.int64()), ("sk", pa.int64())])
    with pytest.raises(ConfigError, match="MasterLookup"):
        SemiStreamJoin(JoinSpec("sk", "mk", hybrid="index"), ScanOnly(master), s, master.schema)
    # a scan checkpoint is not restored into index mode (its s_B could never complete), nor the reverse
    op = SemiStreamJoin(JoinSpec("sk", "mk", hybrid="off"), ArrowMaster(master, 1), s, master.schema)
    op.push(pa.table({"sid": [1], "sk": [1]}, schema=s))
    op.step()
    store = DirectoryStore(tmp_path)
    op.checkpoint(store, 0)
    with pytest.raises(CheckpointError, match="index"):
        SemiStreamJoin.restore(store, JoinSpec("sk", "mk", hybrid="index"), ArrowMaster(master, 1), s, master.schema)


def test_slices_cover_every_value_once() -> None:
    keys = np.arange(-500, 5_000, dtype=np.int64) * 7919
    for k in (1, 3, 16):
        s = IX.slice_of(keys, k)
        assert s.min() >= 0 and s.max() < k
        assert len(np.unique(s)) == k
