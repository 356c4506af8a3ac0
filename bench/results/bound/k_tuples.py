"""Tuples per R-cycle and the budget's breakdown of SSBJ and MESHJOIN at given partition counts k.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/k_tuples.py 0.1 5,12,36

The issue's data at skew 1, stationary, ``frac`` of R as the budget, b = ceil(|R| / k) and the
planned piece size (``stepcost_ab.setup``); one run of each algorithm per k through the
harness's own ``_run``. Tuples per R-cycle and bytes are deterministic (not timed), so the
machine's load does not change them. Prints one line per (k, algorithm): tuples per R-cycle,
tuples a step reads, and each structure's mean share of the budget.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stepcost_ab import configs, setup

from ssbj.bench.harness import _run


def main(frac: float, ks: list[int]) -> None:
    """Run both algorithms at each k and print their tuples and budget shares."""
    bench, ds, p, budget, _, rows = setup(frac)
    for k in ks:
        b = -(-ds.r_rows // k)
        piece = rows if rows is not None and rows < b else None
        for name in ("meshjoin", "ssbj"):
            r = _run(ds, configs(name, b, budget, piece, 0.0, ds.v_s), p, bench.model())
            shares = {s: round(v / budget, 4) for s, v in r["memory_breakdown_mean"].items() if v and s != "budget"}
            line = {"k": k, "algorithm": name, "tuples_per_r_cycle": round(r["w_per_step"] * r["partitions"])}
            line |= {"w_per_step": round(r["w_per_step"]), "budget_shares": shares}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")])
