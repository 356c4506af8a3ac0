"""The structural bound with one overhead set to zero at a time (skew 1, stationary, 1% and 10% of R).

Usage (from the repository root):

    .venv/bin/python bench/results/bound/structural_sensitivity.py \
        bench/results/bound/run-2026-11-28-4def4da/results.json

Takes each point's measured overheads (``structural_bound.overheads`` in the bound
experiment's ``results.json``), rebuilds the issue's data with the run's seed, and solves
:func:`ssbj.core.bound.memory_optimal_bound` with all of them, then with each one zero.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from ssbj.bench.datagen import SyntheticStream, synthetic_master
from ssbj.core.bound import Overheads, key_distribution, memory_optimal_bound

R_ROWS = 2_000_000


def main(path: str) -> None:
    """Print the bound, the structural bound and the structural bound without each overhead."""
    doc = json.loads(Path(path).read_text())
    points = doc["experiments"]["bound"]["points"]
    master = synthetic_master(R_ROWS, seed=doc["seed"], payload_bytes=20)
    src = SyntheticStream(R_ROWS, 1.0, seed=doc["seed"], payload_bytes=16, segment_rows=1 << 20)
    sk = np.concatenate([src.segment(i).column("sk").to_numpy() for i in range(4)])
    dist = key_distribution(sk, master.column("mk").to_numpy())
    for p in points:
        if p.get("skew") != 1.0 or p.get("drifting") or "error" in p:
            continue
        ov = Overheads(**p["structural_bound"]["overheads"])
        m = p["budget"]
        out = {
            "memory_fraction": p["memory_fraction"],
            "bound": memory_optimal_bound(dist, m, 32, 36).ratio,
            "structural": memory_optimal_bound(dist, m, 32, 36, ov).ratio,
        }
        for f in ("o_s", "o_r", "e_r", "e_e", "fixed"):
            out[f"without_{f}"] = memory_optimal_bound(dist, m, 32, 36, replace(ov, **{f: 0.0})).ratio
        print(json.dumps({k: round(v, 2) for k, v in out.items()}))


if __name__ == "__main__":
    main(sys.argv[1])
