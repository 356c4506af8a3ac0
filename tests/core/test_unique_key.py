"""A unique master key: every R-cycle switches, and the cache engages in the first R-cycle.

Exactness against the plain batch join, the R-cycle of the first switch-in with and
without ``JoinSpec.unique_key_switch``, the master's own check, and restore.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from core_scenarios import checkpoint_after
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.errors import CheckpointError


def _data(n_master: int, n_stream: int, seed: int = 7) -> tuple[pa.Table, pa.Table]:
    """R with a unique key (a quarter of the domain has no row, two NULL keys); a drifting Zipf-1 stream."""
    rng = np.random.default_rng(seed)
    domain = rng.permutation(n_master * 4 // 3)
    mk = pa.array([*domain[:n_master].tolist(), None, None], pa.int64())
    master = pa.table({"mk": mk, "mval": pa.array(np.arange(n_master + 2), pa.int64())})
    p = 1.0 / np.arange(1, len(domain) + 1)
    ranks = rng.choice(len(domain), n_stream, p=p / p.sum())
    keys = np.empty(n_stream, dtype=np.int64)
    for q in range(2):  # the hot set drifts once
        sl = slice(q * n_stream // 2, (q + 1) * n_stream // 2)
        keys[sl] = rng.permutation(domain)[ranks[sl]]
    sk = pa.array(keys, pa.int64()).to_pylist()
    sk[::97] = [None] * len(sk[::97])
    stream = pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": pa.array(sk, pa.int64())})
    return stream, master


def _spec(**kw: Any) -> JoinSpec:
    return JoinSpec("sk", "mk", ("mval", "mk"), chunk_bytes=2_000, **kw)


def _run(op: SemiStreamJoin, stream: pa.Table) -> tuple[Counter[Any], Counter[Any], int]:
    """Output and unmatched multisets, and the R-cycle in which the first value switched in (0: none)."""
    out: Counter[Any] = Counter()
    unmatched: Counter[Any] = Counter()
    first = 0
    for r in op.run(stream.to_batches(max_chunksize=500)):
        out += as_multiset(r.enriched)
        unmatched += as_multiset(r.unmatched)
        if not first and op.totals()["switched_in"]:
            first = op.r_cycle
    return out, unmatched, first


@pytest.mark.parametrize("budget", [None, 60_000])
def test_unique_key_switches_from_the_first_r_cycle_and_is_exact(budget: int | None) -> None:
    stream, master = _data(2_000, 30_000)
    want = batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    want_unmatched = unmatched_reference(stream, master, "sk", "mk")
    firsts = {}
    for fast in (True, False):
        op = SemiStreamJoin(
            _spec(memory_budget=budget, unique_key_switch=fast), ArrowMaster(master, 100), stream.schema, master.schema
        )
        out, unmatched, firsts[fast] = _run(op, stream)
        assert out == want
        assert unmatched == want_unmatched
        assert op.waiting_tuples == 0
    # the phase-out at the start of R-cycle 2 against R-cycle 3 (pipelined) or later
    assert firsts[True] == 2
    assert firsts[False] >= 3


def test_a_master_with_a_repeated_key_keeps_algorithm_1() -> None:
    stream, master = _data(2_000, 10_000)
    twice = pa.concat_tables([master, master.slice(0, 1)])
    op = SemiStreamJoin(_spec(), ArrowMaster(twice, 100), stream.schema, master.schema)
    assert not op._unique
    out, unmatched, first = _run(op, stream)
    assert out == batch_join(stream, twice, "sk", "mk", ["mval", "mk"])
    assert unmatched == unmatched_reference(stream, twice, "sk", "mk")
    assert first == 0 or first >= 3


def test_key_unique_counts_non_null_values() -> None:
    ok = pa.table({"k": pa.array([1, None, 2, None], pa.int64()), "s": ["a", "a", "b", "b"]})
    m = ArrowMaster(ok, 2)
    assert m.key_unique("k")
    assert not m.key_unique("s")


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.integers(-5, 40)), max_size=60),
    as_text=st.booleans(),
    chunk=st.integers(1, 7),
)
def test_key_unique_equals_a_set_of_the_non_null_keys(keys: list[int | None], as_text: bool, chunk: int) -> None:
    """Integers are checked by sorting, other types by hashing: both as a plain set of the non-NULL keys says."""
    col = pa.array(
        [None if k is None else (f"v{k}" if as_text else k) for k in keys], pa.string() if as_text else pa.int64()
    )
    t = pa.table({"k": col})
    t = pa.concat_tables([t.slice(i, chunk) for i in range(0, len(t), chunk)]) if len(t) else t
    present = [k for k in keys if k is not None]
    assert ArrowMaster(t, 3).key_unique("k") == (len(set(present)) == len(present))


def test_hashed_keys_keep_algorithm_1() -> None:
    """Two strings could share a key code: one row per code is not what the master vouches for."""
    master = pa.table({"mk": ["a", "b", "c"], "mval": [1, 2, 3]})
    stream = pa.table({"sid": [1], "sk": ["a"]})
    op = SemiStreamJoin(_spec(), ArrowMaster(master, 2), stream.schema, master.schema)
    assert ArrowMaster(master, 2).key_unique("mk")
    assert not op._unique


def test_restore_needs_the_same_cycle_kind(tmp_path: Path) -> None:
    stream, master = _data(1_000, 6_000)
    op = SemiStreamJoin(_spec(), ArrowMaster(master, 100), stream.schema, master.schema)
    store = checkpoint_after(op, stream, 500, 25, tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="unique"):
        SemiStreamJoin.restore(
            store,
            _spec(unique_key_switch=False, switching="paper"),
            ArrowMaster(master, 100),
            stream.schema,
            master.schema,
        )
    # the pipelined FSM phases out at every R-cycle start too: it takes the state on
    plain = SemiStreamJoin.restore(
        store, _spec(unique_key_switch=False), ArrowMaster(master, 100), stream.schema, master.schema
    )
    assert not plain._unique
    restored = SemiStreamJoin.restore(store, _spec(), ArrowMaster(master, 100), stream.schema, master.schema)
    assert restored.r_cycle == op.r_cycle
