"""P shard operators, each a full SemiStreamJoin over its share with budget/P, equal the batch join.

The oracles are independent of the operator: ``reference.batch_join`` (plain Python) and
DuckDB's own hash join over the same Arrow tables. Every run checkpoints and restores all
shards between two micro-batches, and replays the next micro-batch from that checkpoint
(what a retried task does): the replay must give the same output as the first attempt.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec
from ssbj.core.operator import StepResult
from ssbj.core.sharded import ShardedJoin
from ssbj.core.shards import HashRouter, ModRouter, RangeRouter, Router

KEY = st.one_of(st.none(), st.integers(-6, 14))


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    hot = draw(st.lists(st.integers(-6, 14), min_size=1, max_size=3))
    shards = draw(st.integers(1, 4))
    return {
        "master_keys": draw(st.lists(KEY, max_size=40)),
        "stream_keys": draw(st.lists(st.one_of(st.sampled_from(hot), KEY), max_size=300)),
        "shards": shards,
        "router": draw(st.sampled_from(["hash", "mod", "range"])),
        "strings": draw(st.booleans()),
        "b": draw(st.integers(1, 10)),
        "batch": draw(st.integers(1, 60)),
        "cut": draw(st.integers(0, 8)),
        "algorithm": draw(st.sampled_from(["ssbj", "meshjoin"])),
        "memory_budget": draw(st.one_of(st.none(), st.integers(4_000, 200_000))),
        "chunk_bytes": draw(st.integers(16, 400)),
    }


def _tables(sc: dict[str, Any]) -> tuple[pa.Table, pa.Table]:
    strings = sc["strings"] and sc["router"] == "hash"  # mod and range route integer keys only
    conv = (lambda k: None if k is None else f"v{k}") if strings else (lambda k: k)
    ktype = pa.string() if strings else pa.int64()
    mk = [conv(k) for k in sc["master_keys"]]
    sk = [conv(k) for k in sc["stream_keys"]]
    # the stream key is narrower than the master key for integers: routing is by encoded key
    stype = ktype if strings else pa.int32()
    master = pa.table({"mk": pa.array(mk, ktype), "mval": pa.array(range(len(mk)), pa.int64())})
    stream = pa.table({"sid": pa.array(range(len(sk)), pa.int64()), "sk": pa.array(sk, stype)})
    return stream, master


def _router(sc: dict[str, Any], master: pa.Table) -> Router:
    p = sc["shards"]
    if sc["router"] == "mod":
        return ModRouter(p)
    if sc["router"] == "range":
        keys = np.array([k for k in master.column("mk").to_pylist() if k is not None] or [0], dtype=np.int64)
        return RangeRouter.even(keys, p)
    return HashRouter(p)


def _duckdb_join(stream: pa.Table, master: pa.Table) -> Counter[Any]:
    con = duckdb.connect()
    con.register("s", stream)
    con.register("m", master)
    rows = con.execute("SELECT s.sid, s.sk, m.mval, m.mk FROM s JOIN m ON s.sk = m.mk").fetchall()
    return Counter(tuple(r) for r in rows)


def _collect(results: list[StepResult], out: Counter[Any], unmatched: Counter[Any]) -> None:
    for r in results:
        out.update(as_multiset(r.enriched))
        unmatched.update(as_multiset(r.unmatched))


@pytest.mark.slow  # a hypothesis search: ~15 s
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_shards_together_equal_the_batch_join(sc: dict[str, Any], tmp_path_factory: Any) -> None:
    stream, master = _tables(sc)
    router = _router(sc, master)
    spec = JoinSpec(
        "sk",
        "mk",
        ("mval", "mk"),
        algorithm=sc["algorithm"],
        chunk_bytes=sc["chunk_bytes"],
        memory_budget=sc["memory_budget"],
    )
    root = Path(tmp_path_factory.mktemp("shards"))

    def restored(checkpoint_id: int) -> ShardedJoin:
        return ShardedJoin.restore(
            root, spec, ArrowMaster(master, sc["b"]), stream.schema, router, sc["b"], checkpoint_id
        )

    sj = ShardedJoin(spec, ArrowMaster(master, sc["b"]), stream.schema, router, sc["b"])
    assert sum(m.num_rows for m in sj.masters) == master.num_rows
    batches = stream.to_batches(max_chunksize=sc["batch"])
    out: Counter[Any] = Counter()
    unmatched: Counter[Any] = Counter()
    for i, b in enumerate(batches):
        sj.push(b)
        results = sj.process()
        if i == sc["cut"] + 1:  # replay this batch from the checkpoint of the one before
            first = (Counter[Any](), Counter[Any]())
            _collect(results, *first)
            sj = restored(i - 1)
            sj.push(b)
            results = sj.process()
            again = (Counter[Any](), Counter[Any]())
            _collect(results, *again)
            assert again == first
        _collect(results, out, unmatched)
        if i == sc["cut"]:
            sj.checkpoint(root, i)
            sj = restored(i)
    for op in sj.operators:
        _collect(list(op.drain()), out, unmatched)
    assert all(op.waiting_tuples == 0 for op in sj.operators)
    expected = batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    assert out == expected
    assert out == _duckdb_join(stream, master)
    assert unmatched == unmatched_reference(stream, master, "sk", "mk")
    tuples_in = sum(op.totals().tuples_in for op in sj.operators)
    assert tuples_in == stream.num_rows


def test_budget_is_divided_among_shards() -> None:
    master = pa.table({"mk": pa.array(range(100), pa.int64())})
    stream = pa.table({"sk": pa.array([1], pa.int64())})
    spec = JoinSpec("sk", "mk", memory_budget=90_000, chunk_bytes=3_000)
    sj = ShardedJoin(spec, ArrowMaster(master, 10), stream.schema, HashRouter(3))
    assert [op.spec.memory_budget for op in sj.operators] == [30_000] * 3
    assert [op.spec.chunk_bytes for op in sj.operators] == [1_000] * 3
