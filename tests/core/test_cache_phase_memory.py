"""The cache phase's index arrays are counted at their real sizes and bounded per call.

A step reads stream tuples until its H_S chunk is full: with nearly every tuple served by
H_R that is a whole large batch, so the probe's arrays (a pair or an index word per tuple)
would grow with the batch. The calls are bounded (``budget.cache_call_tuples``), one
call's arrays alive at a time, and the step counts the most one call held.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from reference import as_multiset, batch_join

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core import budget as B
from ssbj.core import cachephase as CP


def _hot_stream(n: int, seed: int = 5) -> tuple[pa.Table, pa.Table]:
    """A stream of 12 hot values (with one to three master rows each), some without rows, some NULL."""
    rng = np.random.default_rng(seed)
    master = pa.table(
        {"mid": np.arange(24, dtype=np.int64), "mk": np.repeat(np.arange(12, dtype=np.int64), 2), "attr": np.arange(24)}
    ).slice(0, 22)  # value 11 has one row, the others two
    keys = rng.integers(0, 12, n)
    keys[rng.random(n) < 0.02] = 1000 + rng.integers(0, 50, int((rng.random(n) < 0.02).sum()) or 1)[0]
    valid = rng.random(n) > 0.01
    stream = pa.table({"sid": np.arange(n, dtype=np.int64), "sk": pa.array(keys, pa.int64(), mask=~valid)})
    return stream, master


@pytest.mark.parametrize("budget", [60_000, 400_000])
def test_cache_phase_arrays_counted_and_bounded(budget: int, monkeypatch: Any) -> None:
    stream, master = _hot_stream(120_000)
    real = CP.cache_probe
    held: list[int] = []

    def spy(*args: Any) -> Any:
        out = real(*args)
        held.append(sum(a.nbytes for a in (out[1], out[2], out[5])))
        return out

    monkeypatch.setattr(CP, "cache_probe", spy)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), memory_budget=budget, chunk_bytes=budget // 16)
    op = SemiStreamJoin(spec, ArrowMaster(master, 4), stream.schema, master.schema)
    bound = B.cache_call_tuples(op) * B.CACHE_CALL_BYTES
    out: Counter[Any] = Counter()
    hits = 0
    for b in stream.to_batches(max_chunksize=40_000):  # batches far above one call's tuples
        op.push(b)
        while op.buffered_tuples:
            held.clear()
            r = op.step()
            out += as_multiset(r.enriched)
            assert op._cache_transient == max(held, default=0)  # the most one call held, at real nbytes
            assert op._cache_transient <= bound
            assert r.metrics.memory.total <= 1.05 * budget
            hits += r.metrics.w_n
    for r in op.drain():
        out += as_multiset(r.enriched)
    assert hits > 0.8 * stream.num_rows
    assert op._cache_transient_peak > 0 and B.temporaries_reserve(op) >= op._cache_transient_peak
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
