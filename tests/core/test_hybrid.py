"""The hybrid step (docs/hybrid.md): scan and lookup paths mixed per step stay exact."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from core_scenarios import KEY, ScanOnly, key_tables
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.contracts import PARTITION_COLUMN, MasterLookup
from ssbj.core import ArrowMaster, CostConstants, CostModel, JoinSpec, SemiStreamJoin
from ssbj.core import lookupphase as LP
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import calibrate_lookup
from ssbj.core.prefetch import PrefetchingScan
from ssbj.errors import ConfigError

MCOLS = ["mval", "mk"]


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    hot = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    return {
        "master_keys": draw(st.lists(KEY, max_size=40)),
        "stream_keys": draw(st.lists(st.one_of(st.sampled_from(hot), KEY), max_size=300)),
        "b": draw(st.integers(1, 12)),
        "chunk_bytes": draw(st.integers(1, 200)),
        "batch": draw(st.integers(1, 60)),
        "algorithm": draw(st.sampled_from(["ssbj", "meshjoin"])),
        "strings": draw(st.booleans()),
        "memory_budget": draw(st.one_of(st.none(), st.integers(1, 200_000))),
        # "always", "auto", or a random decision per step (seeded, a function of the step)
        "mode": draw(st.sampled_from(["always", "auto", "random"])),
        "seed": draw(st.integers(0, 1000)),
        "share": draw(st.sampled_from([0.1, 0.5, 0.9])),
        "cut": draw(st.integers(0, 300)),
        "pushes_per_step": draw(st.integers(0, 3)),
    }


def _operator(sc: dict[str, Any], master: pa.Table, stream_schema: pa.Schema, prefetch: int = 0) -> SemiStreamJoin:
    spec = JoinSpec(
        "sk",
        "mk",
        tuple(MCOLS),
        algorithm=sc["algorithm"],
        chunk_bytes=sc["chunk_bytes"],
        memory_budget=sc["memory_budget"],
        eviction_interval=2,
        hybrid="always" if sc["mode"] == "always" else "auto",
    )
    # cheap lookups, so "auto" really takes the lookup path in these small cases
    model = CostModel(CostConstants(c_rt=1.0, c_key=1.0, c_row=1.0))
    scan: Any = ArrowMaster(master, sc["b"])
    if prefetch:
        scan = PrefetchingScan(scan, prefetch)
    op = SemiStreamJoin(spec, scan, stream_schema, master.schema, model)
    _set_policy(op, sc)
    return op


def _set_policy(op: SemiStreamJoin, sc: dict[str, Any]) -> None:
    if sc["mode"] == "random":
        seed, share = sc["seed"], sc["share"]
        op.hybrid_policy = lambda o: random.Random(seed * 1_000_003 + o._step).random() < share


def _check_counts(op: SemiStreamJoin) -> None:
    t = op.totals()
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]
    assert t["tuples_in"] - t["waiting"] == (
        t["served_by_cache"] + t["served_by_disk"] + t["served_by_lookup"] + t["null_keys"]
    )


def _feed(op: SemiStreamJoin, batches: list[pa.RecordBatch], per_step: int) -> list[tuple[Counter[Any], Counter[Any]]]:
    """Interleave arrivals and steps (``per_step`` batches before each step, 0: one step with none)."""
    steps = []
    i = 0
    while i < len(batches) or op.waiting_tuples:
        for _ in range(per_step):
            if i < len(batches):
                op.push(batches[i])
                i += 1
        if per_step == 0 and i < len(batches) and not op.waiting_tuples:
            op.push(batches[i])
            i += 1
        r = op.step()
        steps.append((as_multiset(r.enriched), as_multiset(r.unmatched)))
        _check_counts(op)
    return steps


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_hybrid_equals_batch_join(sc: dict[str, Any]) -> None:
    stream, master = key_tables(sc)
    op = _operator(sc, master, stream.schema)
    steps = _feed(op, stream.to_batches(max_chunksize=sc["batch"]), max(sc["pushes_per_step"], 1))
    out = sum((e for e, _ in steps), Counter())
    unmatched = sum((u for _, u in steps), Counter())
    assert out == batch_join(stream, master, "sk", "mk", MCOLS)
    assert unmatched == unmatched_reference(stream, master, "sk", "mk")
    assert op.waiting_tuples == 0
    if sc["mode"] == "always":  # H_S is empty after every step: the cache never fills
        assert op.totals()["served_by_lookup"] == stream.num_rows - stream.column("sk").null_count


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_hybrid_exact_across_save_restore(sc: dict[str, Any], tmp_path_factory: Any) -> None:
    stream, master = key_tables(sc)
    batches = stream.to_batches(max_chunksize=sc["batch"])
    reference = _feed(_operator(sc, master, stream.schema), batches, 1)
    store = DirectoryStore(tmp_path_factory.mktemp("ckpt"))
    op = _operator(sc, master, stream.schema)
    cut = min(sc["cut"], len(reference))
    steps = []
    i = 0
    for j in range(cut):  # checkpoints between micro-batches, each step after one push
        if i < len(batches):
            op.push(batches[i])
            i += 1
        r = op.step()
        steps.append((as_multiset(r.enriched), as_multiset(r.unmatched)))
        op.checkpoint(store, j)
    op.checkpoint(store, cut)
    restored = SemiStreamJoin.restore(
        store, op.spec, ArrowMaster(master, sc["b"]), stream.schema, master.schema, cost_model=op.cost_model
    )
    _set_policy(restored, sc)
    del op
    steps += _feed(restored, batches[i:], 1)
    assert steps == reference


def _met_then_lookup() -> tuple[Counter[Any], Counter[Any], Counter[Any], Counter[Any]]:
    master = pa.table({"mk": [1, 2, 1, 3, 1, 2, None, 4], "mval": list(range(8))})
    stream = pa.table({"sid": list(range(9)), "sk": [1, 1, 2, None, 5, 3, 1, 2, 4]})
    spec = JoinSpec("sk", "mk", tuple(MCOLS), algorithm="meshjoin", chunk_bytes=16, hybrid="auto")
    op = SemiStreamJoin(spec, ArrowMaster(master, 2), stream.schema, master.schema)
    calls = []
    # scan three steps (chunks meet 1-3 of the 4 partitions), then one lookup finishes them
    op.hybrid_policy = lambda o: calls.append(o._step) is None and o._step == 3
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=1):
        op.push(b)
    while op.waiting_tuples:
        r = op.step()
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
        if r.metrics.path.startswith("lookup"):
            assert r.metrics.lookup_tuples > 1
    assert op.totals()["served_by_lookup"] > 0
    return out, um, batch_join(stream, master, "sk", "mk", MCOLS), unmatched_reference(stream, master, "sk", "mk")


def test_lookup_skips_partitions_already_met() -> None:
    """Many-to-many, duplicates in both inputs, tuples that met part of R: each pair exactly once."""
    out, um, want, want_um = _met_then_lookup()
    assert out == want
    assert um == want_um


def test_mutation_without_partition_filter_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails when the lookup joins rows of partitions a tuple already met."""
    monkeypatch.setattr(LP, "not_met", lambda part, p0, met, k: np.ones(len(part), dtype=bool))
    out, _, want, _ = _met_then_lookup()
    assert out != want
    assert sum(out.values()) > sum(want.values())  # pairs of met partitions come out twice


def test_scan_idles_while_nothing_waits() -> None:
    master = pa.table({"mk": list(range(100)), "mval": list(range(100))})
    stream = pa.table({"sid": [1, 2, 3], "sk": [5, 50, 500]})
    spec = JoinSpec("sk", "mk", tuple(MCOLS), algorithm="meshjoin", hybrid="always")
    op = SemiStreamJoin(spec, ArrowMaster(master, 10), stream.schema, master.schema)
    op.push(stream)
    r = op.step()
    assert r.metrics.path == "lookup" and r.metrics.b == 0
    assert as_multiset(r.enriched) == batch_join(stream, master, "sk", "mk", MCOLS)
    assert r.unmatched.column("sid").to_pylist() == [3]
    r = op.step()  # nothing arrived: no partition is read
    assert r.metrics.path == "idle" and op.r_cycle == 1 and op._p == 0
    t = op.totals()
    assert (t["tuples_in"], t["matched_source_rows"], t["unmatched_source_rows"], t["waiting"]) == (3, 2, 1, 0)
    assert t["served_by_lookup"] == 3


def test_auto_switches_with_the_arrival_rate() -> None:
    """Few keys per step: lookup; many: scan (the cost formula of docs/hybrid.md)."""
    master = pa.table({"mk": list(range(10_000)), "mval": list(range(10_000))})
    model = CostModel(CostConstants(c_rt=50_000.0, c_key=2_000.0, c_row=1_000.0, c_io_row=1_000.0))
    spec = JoinSpec("sk", "mk", tuple(MCOLS), algorithm="meshjoin", hybrid="auto", chunk_bytes=1 << 30)
    paths = {}
    for n in (5, 5_000):
        stream = pa.table({"sid": list(range(n)), "sk": [i * 7 % 10_000 for i in range(n)]})
        op = SemiStreamJoin(spec, ArrowMaster(master, 1_000), stream.schema, master.schema, model)
        op.push(stream)
        paths[n] = op.step().metrics.path
        # lookup: c_rt + n (c_key + c_row); scan: c_rt + b (c_io_row + c_h + c_b)
        b = 1_000
        predicted = model.lookup_cost(n, n, op.master.lookup_batch) < model.scan_cost(b)
        assert (paths[n] == "lookup") == predicted
    assert paths == {5: "lookup", 5_000: "scan"}


def test_auto_keeps_scanning_while_the_cache_needs_refresh() -> None:
    master = pa.table({"mk": [1, 2, 3, 4] * 5, "mval": list(range(20))})
    hot = pa.table({"sid": list(range(400)), "sk": [1] * 400})
    spec = JoinSpec("sk", "mk", tuple(MCOLS), algorithm="ssbj", chunk_bytes=160, hybrid="auto")
    op = SemiStreamJoin(spec, ArrowMaster(master, 2), hot.schema, master.schema)
    op.push(hot)
    paths = [op.step().metrics.path for _ in range(60)]
    assert op.cache.values > 0  # value 1 moved into H_R
    after = paths[-10:]
    assert all(p.endswith("scan") for p in after)  # H_R is refreshed by the scan: never idle


def test_always_needs_a_lookup_master() -> None:
    master = pa.table({"mk": [1], "mval": [1]})
    s = pa.schema([("sid", pa.int64()), ("sk", pa.int64())])
    assert not isinstance(ScanOnly(master), MasterLookup)
    with pytest.raises(ConfigError, match="MasterLookup"):
        SemiStreamJoin(JoinSpec("sk", "mk", hybrid="always"), ScanOnly(master), s, master.schema)
    op = SemiStreamJoin(JoinSpec("sk", "mk", hybrid="auto"), ScanOnly(master), s, master.schema)
    op.push(pa.table({"sid": [1], "sk": [1]}))
    assert op.step().metrics.path == "scan" and not LP.supports_lookup(op.master)
    with pytest.raises(ConfigError):
        JoinSpec("sk", "mk", hybrid="sometimes")  # type: ignore[arg-type]


def test_arrow_master_lookup() -> None:
    t = pa.table({"k": [3, None, 1, 3, 2], "v": ["a", "b", "c", "d", "e"]})
    m = ArrowMaster(t, 2)
    got = m.lookup("k", pa.array([3, None, 9], pa.int64()))
    assert got.column("v").to_pylist() == ["a", "d"]
    assert got.column(PARTITION_COLUMN).to_pylist() == [0, 1]
    assert m.lookup("k", pa.array([None], pa.int64())).num_rows == 0


def test_calibrate_lookup_recovers_constants() -> None:
    truth = {"c_rt": 80_000.0, "c_key": 3_000.0, "c_row": 1_500.0, "c_io_row": 700.0}
    lookups = [
        (t, k, r, 1e-9 * (t * 80_000 + k * 3_000 + r * 1_500))
        for t, k, r in [(1, 1, 1), (1, 50, 120), (2, 700, 700), (4, 2000, 9000), (1, 10, 0)]
    ]
    scans = [(b, 1e-9 * (80_000 + 700 * b)) for b in (100, 1_000, 10_000)]
    c = calibrate_lookup(lookups, scans)
    for name, want in truth.items():
        assert getattr(c, name) == pytest.approx(want, rel=1e-6)


class _ScanOnly:
    """A master scan without the lookup capability."""

    def __init__(self, inner: ArrowMaster) -> None:
        self.inner = inner
        self.partition_rows, self.num_rows = inner.partition_rows, inner.num_rows

    def num_partitions(self) -> int:
        return self.inner.num_partitions()

    def read_partition(self, p: int) -> pa.Table:
        return self.inner.read_partition(p)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_hybrid_through_the_prefetch_wrapper(sc: dict[str, Any]) -> None:
    """The lookup path stays available (and exact) behind the read-ahead wrapper the job puts around scans."""
    stream, master = key_tables(sc)
    op = _operator(sc, master, stream.schema, prefetch=1)
    assert isinstance(op.master, MasterLookup)
    steps = _feed(op, stream.to_batches(max_chunksize=sc["batch"]), max(sc["pushes_per_step"], 1))
    assert sum((e for e, _ in steps), Counter()) == batch_join(stream, master, "sk", "mk", MCOLS)
    op.master.close()


def test_the_prefetch_wrapper_has_a_lookup_only_when_its_scan_has_one() -> None:
    m = ArrowMaster(pa.table({"mk": pa.array([1, 2], pa.int64()), "mval": pa.array([1, 2], pa.int64())}), 1)
    assert isinstance(PrefetchingScan(m, 1), MasterLookup)
    assert not isinstance(PrefetchingScan(_ScanOnly(m), 1), MasterLookup)  # type: ignore[arg-type]
