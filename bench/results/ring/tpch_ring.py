"""Stream tuples a step and the budget's breakdown of SSBJ and MESHJOIN on TPC-H (orders x customer).

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/ring/tpch_ring.py 0.01

The full preset's TPC-H data (SF 1, generated once into ``ssbj-tpch-ring`` under the temp dir), a budget of
``frac`` of R's bytes, b planned by the harness with fixed cost constants (the same b for
every code version); one run of each algorithm through the harness's own ``_run``. Tuples
a step and bytes are deterministic (not timed).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from ssbj.bench.datasets import tpch_dataset
from ssbj.bench.harness import PRESETS, Bench, RunConfig, _run
from ssbj.core.costmodel import CostConstants

CONSTANTS = CostConstants(c_fixed=570_000.0, c_h=6.0, c_s=1400.0)  # as stepcost_ab.py


def main(frac: float) -> None:
    """Run both algorithms and print their tuples a step and budget shares."""
    p = dataclasses.replace(PRESETS["full"], reps=1)
    bench = Bench(p, Path(tempfile.gettempdir()) / "ssbj-tpch-ring")
    bench.set_model(CONSTANTS)
    ds = tpch_dataset(p, bench.work_dir)
    budget = int(frac * ds.r_bytes)
    b = bench.plan(ds, budget)
    for name in ("meshjoin", "ssbj"):
        r = _run(ds, RunConfig(name, b, chunk_bytes=max(1, budget // 16), memory_budget=budget), p, bench.model())
        shares = {k: round(v / budget, 3) for k, v in r["memory_breakdown_mean"].items() if v and k != "budget"}
        line = {"algorithm": name, "b": b, "budget": budget, "tuples_per_step": round(r["w_per_step"], 2)}
        print(json.dumps(line | {"budget_shares": shares}), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
