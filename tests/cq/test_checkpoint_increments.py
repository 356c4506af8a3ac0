"""Incremental checkpoints of the array engine: base + increments restores exactly what ran uninterrupted."""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from cq.test_properties import _ddl, _frames, _sql, scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssbj.cq import ckfile
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import CheckpointError, ConfigError


def _restore(plan: Any, base: bytes, increments: list[bytes]) -> ContinuousQuery:
    cq = ContinuousQuery.from_state_bytes(plan, base, "base")
    for i, blob in enumerate(increments):
        cq.apply_increment_bytes(blob, f"increment {i}")
    return cq


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sc=scenario(), fulls=st.sets(st.integers(1, 6), max_size=2), swap=st.integers(0, 6))
def test_base_plus_increments_equals_uninterrupted(sc: dict[str, Any], fulls: set[int], swap: int) -> None:
    """After every batch: restore (base + increments so far) == the running engine; a restored one runs on exactly."""
    sc["dag"] = None  # assertion keys are the dict engine's alone
    plan = plan_query(_sql(sc), parse_schema(_ddl(sc)))
    cq = ContinuousQuery(plan, engine="fast")
    steps = sc["steps"]
    bounds = sorted({0, len(steps), *(c for c in sc["cuts"] if c < len(steps))})
    base, incs = cq.state_bytes(), []
    cq.checkpoint_committed()
    for b, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        cq.apply(_frames(sc, steps[lo:hi], lo))
        if b in fulls:
            base, incs = cq.state_bytes(), []
        else:
            incs.append(cq.increment_bytes())
        cq.checkpoint_committed()
        restored = _restore(plan, base, incs)
        assert restored.state() == cq.state(), f"batch {b}"
        assert restored.result().equals(cq.result())
        if b == swap:  # continue from the restored engine: its own increments chain on
            restored.dead_letters = cq.dead_letters
            cq = restored


def _load(plan: Any, rng: np.random.Generator, lo: int, n: int, seq: int) -> dict[str, pa.Table]:
    """``n`` fact rows (keys lo..lo+n) referencing dims 0..49, and the dims on the first call."""
    out = {
        "fact": pa.table(
            {
                "id": np.arange(lo, lo + n),
                "dk": rng.integers(0, 50, n),
                "amt": pa.array([1] * n, pa.decimal128(12, 2)),
                "_op": ["+"] * n,
                "_seq": np.arange(seq, seq + n),
            }
        )
    }
    if lo == 0:
        out["dim"] = pa.table(
            {
                "dk": np.arange(50),
                "name": [f"d{i % 7}" for i in range(50)],
                "_op": ["+"] * 50,
                "_seq": -1 - np.arange(50),
            }
        )
    return out


_DDL = """
create table dim (dk integer primary key, name varchar(10));
create table fact (id bigint primary key, dk integer references dim(dk), amt decimal(12, 2));
"""
_SQL = "select d.name, sum(f.amt) as s, count(*) as n from fact f, dim d where f.dk = d.dk group by d.name"


def test_hash_growth_between_checkpoints_and_deletes() -> None:
    """The hash doubles after the base (the increment then holds every row); deletes free slots; all exact."""
    plan = plan_query(_SQL, parse_schema(_DDL))
    rng = np.random.default_rng(7)
    cq = ContinuousQuery(plan, engine="fast")
    cq.apply(_load(plan, rng, 0, 100, 0))
    base, incs = cq.state_bytes(), []
    cq.checkpoint_committed()
    cap0 = len(cq.fast.hk)  # type: ignore[union-attr]
    seq = 1000
    for lo in range(100, 3100, 1000):
        cq.apply(_load(plan, rng, lo, 1000, seq))
        seq += 1000
        incs.append(cq.increment_bytes())
        cq.checkpoint_committed()
    assert len(cq.fast.hk) > cap0  # type: ignore[union-attr]
    gone = rng.choice(3100, 100, replace=False)
    dels = pa.table({"id": gone, "dk": [0] * 100, "amt": pa.array([0] * 100, pa.decimal128(12, 2))})
    dels = dels.append_column("_op", pa.array(["-"] * 100)).append_column("_seq", pa.array(np.arange(seq, seq + 100)))
    cq.apply({"fact": dels})
    small = cq.increment_bytes()
    cq.checkpoint_committed()
    incs.append(small)
    restored = _restore(plan, base, incs)
    assert restored.state() == cq.state()
    assert restored.result().equals(cq.result())
    assert len(small) < len(cq.state_bytes()) / 2  # 100 deletes of 3100 tuples: a part of the state


def test_increment_chain_is_checked_and_old_formats_restore() -> None:
    plan = plan_query(_SQL, parse_schema(_DDL))
    rng = np.random.default_rng(1)
    cq = ContinuousQuery(plan, engine="fast")
    with pytest.raises(ConfigError, match="committed checkpoint"):
        cq.increment_bytes()
    cq.apply(_load(plan, rng, 0, 200, 0))
    base = cq.state_bytes()
    cq.checkpoint_committed()
    cq.apply(_load(plan, rng, 200, 100, 500))
    inc1 = cq.increment_bytes()
    cq.checkpoint_committed()
    cq.apply(_load(plan, rng, 300, 100, 900))
    inc2 = cq.increment_bytes()
    cq.checkpoint_committed()
    fresh = ContinuousQuery.from_state_bytes(plan, base, "base")
    with pytest.raises(CheckpointError, match="increment 2 of chain"):
        fresh.apply_increment_bytes(inc2, "inc2")  # inc1 skipped
    with pytest.raises(CheckpointError, match="is an increment"):
        ContinuousQuery.from_state_bytes(plan, inc1, "inc1")
    # format 2 (an uncompressed pickle of the entries, as the previous version wrote) still restores
    assert cq.fast is not None
    old = {
        "format": 2,
        "fingerprint": plan.fingerprint,
        "engine": "fast",
        "dead": 0,
        "arrays": cq.fast.arrays(),
        "dicts": cq.fast.dicts,
        "groups": cq.groups.groups,
        "last_seq": cq.last_seq,
        "applied": cq.applied,
    }
    back = ContinuousQuery.from_state_bytes(plan, pickle.dumps(old, protocol=5), "format 2")
    assert back.state() == cq.state() and back.chain is None and not back.can_increment()
    with pytest.raises(CheckpointError, match="format 9"):
        ContinuousQuery.from_state_bytes(plan, pickle.dumps({**old, "format": 9}), "future")
    with pytest.raises(CheckpointError, match="damaged"):
        ContinuousQuery.from_state_bytes(plan, base[:-20], "cut")
    assert base.startswith(ckfile.MAGIC)


def test_small_batch_global_aggregate() -> None:
    """A batch's few join results without GROUP BY are one group (the Python pre-aggregation of small batches)."""
    plan = plan_query(
        "select sum(f.amt) as s, count(*) as n, count(f.amt) as c from fact f, dim d where f.dk = d.dk",
        parse_schema(_DDL),
    )
    cq = ContinuousQuery(plan, engine="fast")
    cq.apply(_load(plan, np.random.default_rng(3), 0, 10, 0))
    assert cq.result().to_pylist() == [{"s": pytest.approx(10), "n": 10, "c": 10}]
