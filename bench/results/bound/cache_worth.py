"""Which values SSBJ caches at its own N, by worth: the gap between its cache share and the solve's.

Usage (from the repository root; ``PYTHONPATH`` selects the code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/cache_worth.py FRACTION R-CYCLES

Runs SSBJ on the bound experiment's stationary data (skew 1, planned as ``early_trace.py``
plans it) for R-CYCLES R-cycles, then takes N, the tuples it read in the last one, and
groups the stream's values by *worth* at that N: a value's tuples per R-cycle
(``N p_j``) times the operator's bytes per waiting tuple, over what caching it costs (its
rows and index entry, or an empty entry for a value without rows). A value of worth > 1
pays for its bytes at this N. Prints, per worth band, how many values the stream has
(``p`` from the bound experiment's sample), how many H_R or the empty entries hold, and
their shares of the stream's tuples. Deterministic (nothing is timed).
"""

from __future__ import annotations

import json
import sys

import numpy as np

sys.path.insert(0, "bench/results/bound")
import early_trace as ET

from ssbj.bench.exp_bound import SAMPLE_ROWS
from ssbj.core.budget import breakdown

BANDS = [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, 3.0), (3.0, 5.0), (5.0, 20.0), (20.0, float("inf"))]


def bands(worth: np.ndarray, p: np.ndarray, held: np.ndarray) -> list[dict[str, float]]:
    """Per worth band: values, values held, their shares of the tuples."""
    out = []
    for lo, hi in BANDS:
        s = (worth >= lo) & (worth < hi)
        out.append(
            {
                "worth": f"[{lo:g}, {hi:g})",
                "values": int(s.sum()),
                "held": int((s & held).sum()),
                "p": round(float(p[s].sum()), 4),
                "p_held": round(float(p[s & held].sum()), 4),
            }
        )
    return out


def main() -> None:
    """Run, then compare what is cached with what pays at the operator's N."""
    frac, cycles = float(sys.argv[1]), int(sys.argv[2])
    p, ds, op = ET.setup(frac, False)
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    n = served = 0
    while True:
        while op.buffered_tuples < p.max_step_tuples:
            op.push(next(batches))
        m = op.step().metrics
        if m.r_cycle > cycles:
            break
        if m.r_cycle == cycles:
            n += m.w
            served += m.w_n
    ix = op.cache.index
    cached = ix.keys[ix.used]
    empties = np.asarray(op.cache.empties.keys)
    sample = ds.rows(SAMPLE_ROWS).column("sk").to_numpy()
    sv, sc = np.unique(sample, return_counts=True)
    ps = sc / sc.sum()
    mv, mc = np.unique(ds.master.column("mk").to_numpy(), return_counts=True)
    has = np.isin(sv, mv)
    m_of = np.zeros(len(sv), dtype=np.int64)
    m_of[has] = mc[np.searchsorted(mv, sv[has])]
    tc, rc, ec, xc = op.tuple_cost(), op.row_cost(), op.entry_cost(), op.empty_cost()
    worth = n * ps * tc / np.where(has, m_of * rc + ec, xc)
    budget = op.spec.memory_budget or 1
    print(
        json.dumps(
            {
                "fraction": frac,
                "r_cycle": cycles,
                "n": n,
                "cache_share": served / max(n, 1),
                "bytes": {"tuple": tc, "row": rc, "entry": ec, "empty_entry": xc},
                "with_rows": bands(worth[has], ps[has], np.isin(sv[has], cached)),
                "without_rows": bands(worth[~has], ps[~has], np.isin(sv[~has], empties)),
                "budget_pct": {k: round(100 * v / budget, 2) for k, v in breakdown(op).items() if v and k != "budget"},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
