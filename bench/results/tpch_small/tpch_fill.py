"""SSBJ and MESHJOIN on TPC-H orders x customer at small budgets, step by step: tuples per R-cycle, CPU, peak.

Usage (from the repository root; ``PYTHONPATH`` selects the code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/tpch_small/tpch_fill.py FRACTION [R-CYCLES] [FIRST] [REPS]

The bench's TPC-H SF 1 data (``ssbj.bench.datasets.tpch_dataset``: orders stream, customer
master) and b planned as ``Bench.pair`` plans it with fixed cost constants
(``bench/results/bound/tpch_peak.py``'s ``setup``), a budget of FRACTION of R's projected bytes. Each
algorithm runs R-CYCLES R-cycles (default 10); from R-cycle FIRST on (default 4) it sums the
tuples read and the step's CPU time (``time.process_time``). REPS rounds (default 3), the
two algorithms interleaved in each. Tuples per R-cycle are deterministic; the CPU ratio is
the median of the rounds' ratios. Prints one JSON line per run and a summary line.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, "bench/results/bound")
import tpch_peak as TP

from ssbj.core.budget import breakdown


def run(algo: str, frac: float, cycles: int, first: int) -> dict[str, Any]:
    """One run: tuples per R-cycle, CPU seconds per R-cycle and the peak over R-cycles >= 2."""
    p, ds, op, budget, b = TP.setup(algo, frac)
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    w = served = 0
    cpu = 0.0
    peak = 0
    while True:
        while op.buffered_tuples < p.max_step_tuples and (bt := next(batches, None)) is not None:
            op.push(bt)
        t0 = time.process_time()
        m = op.step().metrics
        dt = time.process_time() - t0
        if m.r_cycle > cycles:
            break
        if m.r_cycle >= 2:
            peak = max(peak, m.memory.total)
        if m.r_cycle >= first:
            w += m.w
            served += m.w_n
            cpu += dt
    n = cycles - first + 1
    shares = {k: round(100 * v / budget, 2) for k, v in breakdown(op).items() if v and k != "budget"}
    return {
        "algorithm": algo,
        "fraction": frac,
        "budget": budget,
        "b": b,
        "k": op._k,
        "tuples_per_r_cycle": w / n,
        "cache_share": served / max(w, 1),
        "cpu_seconds_per_r_cycle": cpu / n,
        "tuples_per_cpu_second": w / cpu if cpu else 0.0,
        "peak_over_budget": peak / budget,
        "budget_pct_at_end": shares,
    }


def main() -> None:
    """Interleaved rounds of both algorithms at one budget."""
    frac = float(sys.argv[1])
    cycles = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    ratios, tuples = [], {}
    for _ in range(reps):
        r = {}
        for algo in ("meshjoin", "ssbj"):
            r[algo] = run(algo, frac, cycles, first)
            print(json.dumps(r[algo]), flush=True)
            tuples[algo] = r[algo]["tuples_per_r_cycle"]
        ratios.append(r["ssbj"]["tuples_per_cpu_second"] / r["meshjoin"]["tuples_per_cpu_second"])
    print(
        json.dumps(
            {
                "fraction": frac,
                "tuples_per_r_cycle_ssbj_over_meshjoin": tuples["ssbj"] / tuples["meshjoin"],
                "rate_ssbj_over_meshjoin_median": statistics.median(ratios),
                "rate_ratios": ratios,
            }
        )
    )


if __name__ == "__main__":
    main()
