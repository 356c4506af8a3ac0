"""Which values the structural solve caches and SSBJ does not (and the reverse), by stream share.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/cache_gap.py 0.01 24

Arguments: fraction of R as the budget, R-cycles to run (stationary, skew 1, the bound
experiment's data). At the end it takes the values SSBJ caches (H_R's and the empty
entries) and the values the structural solve caches, with the overheads the committed
bound run measured (``bench/results/bound/results.json``), and prints the stream share
(p_j summed) of each set, split by master rows (none / some) and by how far each value's
tuples per R-cycle lie above its break-even in the solve. Deterministic (nothing timed).
"""

from __future__ import annotations

import itertools
import json
import math
import sys

import numpy as np

sys.path.insert(0, "bench/results/bound")
import early_trace

from ssbj.bench.exp_bound import SAMPLE_ROWS
from ssbj.core.bound import Overheads, key_distribution, memory_optimal_bound


def main(frac: float, cycles: int) -> None:
    """Run SSBJ for ``cycles`` R-cycles, then compare its cached values with the structural solve's."""
    p, ds, op = early_trace.setup(frac, False)
    budget = op.spec.memory_budget or 0
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    while op.r_cycle <= cycles:
        while op.buffered_tuples < p.max_step_tuples:
            op.push(next(batches))
        op.step()
    ix = op.cache.index
    op_keys = np.concatenate([ix.keys[ix.used], op.cache.empties.keys]).astype(np.int64)

    sample = ds.rows(SAMPLE_ROWS).column("sk").to_numpy()
    dist = key_distribution(sample, ds.master.column("mk").to_numpy())
    with open("bench/results/bound/results.json") as f:
        committed = json.load(f)["experiments"]["bound"]["points"]
    pt = next(x for x in committed if x["skew"] == 1.0 and not x["drifting"] and x["memory_fraction"] == frac)
    ov = Overheads(**pt["structural_bound"]["overheads"])
    sol = memory_optimal_bound(dist, budget, ds.v_s, ds.v_r, ov)
    vals = np.unique(np.asarray(sample, dtype=np.int64))  # key_distribution's order
    cost = np.where(dist.m > 0, dist.m * (ds.v_r + ov.o_r) + ov.e_r, ov.e_e)
    disk = sol.n_ssbj * dist.p * (ds.v_s + ov.o_s)
    solve = cost < disk
    ours = np.isin(vals, op_keys)
    ratio = disk / np.maximum(cost, 1e-9)
    out = {
        "budget": budget,
        "solve_share": float(dist.p[solve].sum()),
        "ssbj_share_of_sample": float(dist.p[ours].sum()),
        "solve_values": int(solve.sum()),
        "ssbj_values": int(ours.sum()),
    }
    for name, sel in (("both", solve & ours), ("solve_only", solve & ~ours), ("ssbj_only", ~solve & ours)):
        row = {"values": int(sel.sum()), "share": float(dist.p[sel].sum())}
        for m_name, m_sel in (("no_rows", dist.m == 0), ("rows", dist.m > 0)):
            row[m_name] = {"values": int((sel & m_sel).sum()), "share": float(dist.p[sel & m_sel].sum())}
        edges = [0, 0.5, 1, 1.5, 2, 3, 5, 10, math.inf]
        row["by_disk_over_cache_cost"] = {
            f"{lo}-{hi}": round(float(dist.p[sel & (ratio >= lo) & (ratio < hi)].sum()), 5)
            for lo, hi in itertools.pairwise(edges)
        }
        out[name] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]))
