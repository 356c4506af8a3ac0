"""The disk phase's kernel runs in calls of a bounded number of pairs (ssbj.core.diskprobe).

A partition's pairs grow with the tuples H_S holds; in calls of at most
``budget.probe_call_pairs`` pairs (a row's chain is never split) one call's arrays are
alive at a time. Splitting a partition's probe must change nothing else: the statistics,
s_B, the refresh's rows and the output stay those of one pass (the property test with calls
of 1-4 pairs is in test_operator_properties.py).
"""

from __future__ import annotations

import types
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from reference import as_multiset, batch_join

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core import budget as B
from ssbj.core import diskphase as DP
from ssbj.core.rowsize import held_nbytes


def _zipf_many_to_many(n_master: int, n_stream: int, seed: int = 11) -> tuple[pa.Table, pa.Table]:
    """R with repeated keys (many-to-many), a Zipf stream over more values than R has, 1% NULL keys."""
    rng = np.random.default_rng(seed)
    master = pa.table(
        {
            "mid": np.arange(n_master, dtype=np.int64),
            "mk": rng.integers(0, n_master // 2, n_master),
            "attr": rng.integers(0, 1000, n_master),
        }
    )
    p = 1.0 / np.arange(1, n_master + 1)
    keys = rng.choice(n_master, n_stream, p=p / p.sum())
    valid = rng.random(n_stream) > 0.01
    stream = pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": pa.array(keys, pa.int64(), mask=~valid)})
    return stream, master


@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_calls_bounded_counted_and_exact(algorithm: str, monkeypatch: Any) -> None:
    """Each call holds at most its pairs (plus one row's chain); the step counts the most held, not the sum."""
    stream, master = _zipf_many_to_many(40_000, 150_000)
    budget = 400_000
    real = DP.disk_probe
    calls: list[tuple[int, int, int, int]] = []  # (start, stop, pairs, held bytes)

    def spy(*args: Any) -> Any:
        out = real(*args)
        pm, psl, sb, rf_row, rf_slot, _, stop = out
        held = sum(held_nbytes(a) for a in (pm, psl, sb, rf_row, rf_slot))
        calls.append((int(args[-2]), int(stop), len(pm), held))
        return out

    monkeypatch.setattr(DP, "disk_probe", spy)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), algorithm=algorithm, memory_budget=budget, chunk_bytes=budget // 20)
    op = SemiStreamJoin(spec, ArrowMaster(master, 8_000), stream.schema, master.schema)
    most = B.probe_call_pairs(op)
    chain = int(np.bincount(stream.column("sk").drop_null().to_numpy()).max())  # most tuples of one value
    out: Counter[Any] = Counter()
    peaks: list[float] = []
    split = 0
    for b in stream.to_batches(max_chunksize=10_000):
        op.push(b)
        while op.buffered_tuples:
            calls.clear()
            r = op.step()
            out += as_multiset(r.enriched)
            peaks.append(r.metrics.memory.total / budget)
            for start, stop, n, _ in calls:
                assert n <= most + chain and start < stop
                split += start > 0
            if calls:  # the most one call held (with the slots kept beside it) is what the step counts
                assert op._disk_transient >= max(h for *_, h in calls)
                assert op._disk_transient <= 3 * B.PAIR_BYTES * most + max(h for *_, h in calls)
    for r in op.drain():
        out += as_multiset(r.enriched)
    assert split > 0  # partitions were probed in several calls
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    assert max(peaks) <= 1.05, f"peak {max(peaks):.3f}x the budget"


def test_grouped_loads_change_nothing_against_one_row_at_a_time(monkeypatch: Any) -> None:
    """The kernel loads a group's index words first; the result must be a per-row pass's.

    States are captured from an SSBJ run over a master sorted by key (a value's rows are
    neighbours, so a candidate admitted at one row has its next rows in the same group),
    then each call runs as shipped and compiled again with groups of one row; outputs and
    every array the kernel writes (statistics, filter bits, links, s_B's allowance) must match.
    """
    stream, master = _zipf_many_to_many(6_000, 30_000, seed=5)
    master = master.sort_by("mk")
    real = DP.disk_probe
    calls: list[tuple[Any, ...]] = []

    def spy(*args: Any) -> Any:
        if len(calls) < 40 and args[9] >= 0:  # fsm: SSBJ's calls
            calls.append(tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        return real(*args)

    monkeypatch.setattr(DP, "disk_probe", spy)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), algorithm="ssbj", memory_budget=120_000, chunk_bytes=6_000)
    op = SemiStreamJoin(spec, ArrowMaster(master, 1_500), stream.schema, master.schema)
    for b in stream.to_batches(max_chunksize=2_000):
        op.push(b)
        while op.buffered_tuples:
            op.step()
    monkeypatch.setattr(DP, "disk_probe", real)
    from numba import njit

    from ssbj.core import diskprobe

    # the same code with groups of one row: a new function over globals of its own (numba
    # freezes a global's value when it compiles, and shares that across copies of one function)
    fn = real.py_func
    one_row = njit(types.FunctionType(fn.__code__, {**vars(diskprobe), "PROBE_GROUP": 1}, fn.__name__, fn.__defaults__))
    assert len(calls) == 40
    admitted_beside = 0
    for c in calls:
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in c]
        b = [x.copy() if isinstance(x, np.ndarray) else x for x in c]
        got = real(*a)
        want = one_row(*b)
        for x, y in zip(got, want, strict=True):
            assert np.array_equal(x, y)
        for x, y in zip(a, b, strict=True):
            if isinstance(x, np.ndarray):
                assert np.array_equal(x, y)
        # a candidate admitted at a row whose next row has the same key (both probed)
        mk = c[0][c[-2] : got[-1]]
        st_keys, st_used = a[16], a[17]
        new = set(st_keys[st_used].tolist()) - set(c[16][c[17]].tolist())
        admitted_beside += int(np.isin(mk[1:][mk[1:] == mk[:-1]], list(new)).sum())
    assert admitted_beside > 0  # the case a filter test made for the whole group first would get wrong
