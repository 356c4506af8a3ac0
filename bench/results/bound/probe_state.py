"""The disk phase's probe on captured states: SSBJ against MESHJOIN at SSBJ's w, and SSBJ at other index loads.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/probe_state.py 0.01 0.49

Runs SSBJ on the bound experiment's data (skew 1, stationary) at the given fraction of R
with the bound experiment's plan (b, pieces), then MESHJOIN without a budget at SSBJ's
mean w (as the bound experiment's "c_loop at equal w" does), each until R-cycle 15; the
arguments of every ``disk_probe`` call of R-cycle 14 are copied. Then each captured call
is timed again (wall clock, three rounds; the kernel mutates its arguments, so every
round runs on fresh copies): SSBJ's calls, MESHJOIN's calls, and SSBJ's calls with H_S's
value index rebuilt from the same heads at each given load (``0.49``: about MESHJOIN's
after it grew without a budget). Prints H_S's shape (live tuples, values, index words,
ring slots) and the times. Nothing here changes the operator.
"""

from __future__ import annotations

import inspect
import math
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, "bench/results/bound")
import stepcost_ab as SA

import ssbj.core.diskphase as DP
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.hs import hs_heads
from ssbj.core.hsindex import EMPTY, ix_rebuild

KERNEL = DP.disk_probe
NAMES = list(inspect.signature(KERNEL.py_func).parameters)
UPTO = 15  # R-cycles run; the calls of the last one are captured


def capture(op: SemiStreamJoin, ds: Any, p: Any) -> tuple[list[tuple[Any, ...]], tuple[int, ...], float]:
    """Run ``op`` to R-cycle ``UPTO``; return the last R-cycle's calls, H_S's shape at its middle, mean w."""
    calls: list[tuple[Any, ...]] = []
    shapes: list[tuple[int, ...]] = []

    def spy(*a: Any) -> Any:
        if op._rc >= UPTO - 1:
            calls.append(tuple(x.copy() if isinstance(x, np.ndarray) else x for x in a))
            hs = op.hs
            shapes.append((hs.live, hs.values, len(hs.hix), hs.cap))
        return KERNEL(*a)

    DP.disk_probe = spy
    try:
        batches = ds.batches(p.batch_rows, p.max_stream_rows)
        w: list[int] = []
        while op._rc < UPTO:
            while op.buffered_tuples < p.max_step_tuples:
                op.push(next(batches))
            m = op.step().metrics
            if op._rc >= UPTO - 1:
                w.append(m.w)
    finally:
        DP.disk_probe = KERNEL
    return calls, shapes[len(shapes) // 2], float(np.mean(w))


def timed(calls: list[tuple[Any, ...]]) -> tuple[float, int]:
    """Seconds of all calls on fresh copies of their arguments, and the pairs they found."""
    total, pairs = 0.0, 0
    for c in calls:
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in c]
        t = time.perf_counter()
        r = KERNEL(*a)
        total += time.perf_counter() - t
        pairs += len(r[0])
    return total, pairs


def relaid(calls: list[tuple[Any, ...]], load: float) -> list[tuple[Any, ...]]:
    """Return the same calls with H_S's value index rebuilt from its heads at ``load``."""
    out = []
    ix, rk, cp, hi = (NAMES.index(n) for n in ("hix", "ring_key", "cap", "hi"))
    for c in calls:
        a = list(c)
        heads = hs_heads(a[ix], a[hi], a[cp])
        new = np.full(int(len(heads) / load) + 1, EMPTY, dtype=np.uint32)
        ix_rebuild(new, heads, a[rk], a[cp])
        a[ix] = new
        out.append(tuple(a))
    return out


def spec_args(ds: Any, p: Any, rows: int | None) -> dict[str, Any]:
    """Return the ``JoinSpec`` arguments both captured runs share: the bound experiment's keys, columns, pieces."""
    return {
        "stream_key": ds.stream_key,
        "master_key": ds.master_key,
        "master_columns": ds.master_columns,
        "max_step_tuples": p.max_step_tuples,
        "disk_chunk_rows": rows,
        "min_chunk_bytes": math.ceil(ds.v_s),
    }


def main(frac: float, loads: list[float]) -> None:
    """Capture both states, then time the calls."""
    bench, ds, p, budget, b, rows = SA.setup(frac)  # the step-cost driver's data and plan
    common = spec_args(ds, p, rows)
    s_spec = JoinSpec(algorithm="ssbj", chunk_bytes=max(1, budget // 16), memory_budget=budget, **common)
    s_op = SemiStreamJoin(
        s_spec, ArrowMaster(ds.master, b), ds.stream_schema, ds.master.schema, cost_model=bench.model()
    )
    s_calls, s_shape, s_w = capture(s_op, ds, p)
    m_spec = JoinSpec(algorithm="meshjoin", chunk_bytes=max(1, int(s_w * ds.v_s)), **common)
    m_op = SemiStreamJoin(m_spec, ArrowMaster(ds.master, b), ds.stream_schema, ds.master.schema)
    m_calls, m_shape, m_w = capture(m_op, ds, p)
    print(f"w: SSBJ {s_w:.0f}, MESHJOIN {m_w:.0f}; calls {len(s_calls)} / {len(m_calls)}")
    print(f"H_S (live, values, index words, ring slots): SSBJ {s_shape}, MESHJOIN {m_shape}")
    variants = {"ssbj": s_calls, "meshjoin": m_calls}
    variants.update({f"ssbj at load {x:g}": relaid(s_calls, x) for x in loads})
    for name, calls in variants.items():
        timed(calls)  # compile and warm
        runs = [timed(calls) for _ in range(3)]
        best = min(t for t, _ in runs)
        print(f"{name}: {1e3 * best:.1f} ms for the R-cycle's calls (best of 3), {runs[0][1]} pairs")


if __name__ == "__main__":
    main(float(sys.argv[1]), [float(x) for x in sys.argv[2:]])
