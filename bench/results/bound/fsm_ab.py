"""A/B of SSBJ's switching FSM: pipelined (per value) against Algorithm 1's R-cycles, with MESHJOIN.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/fsm_ab.py 2 > fsm_ab.json

The issue's data (full preset, skew 1), stationary and drifting as the bound experiment
builds them (a new hot set about every 4 R-cycles at the bound), at 1% and 10% of R; the
three runs interleaved ``reps`` times in one process (``Bench.runs``, median repetition);
a fixed calibration, so every run plans the same b and pieces. Prints one JSON line per
point: service rates, their ratios, cache shares and switch-ins.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from ssbj.bench.exp_bound import SAMPLE_ROWS, issue_dataset
from ssbj.bench.harness import PRESETS, Bench, RunConfig
from ssbj.core.bound import key_distribution, memory_optimal_bound
from ssbj.core.costmodel import CostConstants

CONSTANTS = CostConstants(c_fixed=570_000.0, c_h=6.0, c_s=1400.0)


def run_points(reps: int, configs: dict[str, tuple[str, dict[str, object]]], pairs: list[tuple[str, str]]) -> None:
    """Run every point with ``configs`` (name: algorithm and RunConfig fields) and print it with ``pairs``' ratios."""
    p = dataclasses.replace(PRESETS["full"], bound_skews=(1.0,), reps=reps)
    bench = Bench(p, Path(tempfile.gettempdir()))
    bench.set_model(CONSTANTS)
    ds0 = issue_dataset(bench, p.r_main, 1.0, None)
    for drifting in (False, True):
        for frac in (0.01, 0.10):
            ds = ds0
            if drifting:
                sample = ds0.rows(SAMPLE_ROWS).column("sk").to_numpy()
                dist = key_distribution(sample, ds0.master.column("mk").to_numpy())
                bnd = memory_optimal_bound(dist, frac * ds0.r_bytes, ds0.v_s, ds0.v_r)
                every = int(4 * (bnd.n_ssbj if math.isfinite(bnd.n_ssbj) else 4 * p.r_main))
                ds = issue_dataset(bench, p.r_main, 1.0, every)
            budget = int(frac * ds.r_bytes)
            b, rows = bench.plan_pieces(ds, budget, True)
            cfg = {
                name: RunConfig(
                    algo, b, chunk_bytes=max(1, budget // 16), memory_budget=budget, disk_chunk_rows=rows, **kw
                )
                for name, (algo, kw) in configs.items()
            }
            t0, load0 = time.time(), os.getloadavg()
            res = dict(zip(cfg, bench.runs(ds, list(cfg.values())), strict=True))
            out = {
                "drifting": drifting,
                "frac": frac,
                "b": b,
                "rows": rows,
                "reps": reps,
                "seconds": round(time.time() - t0, 1),
                "load": [load0, os.getloadavg()],
            }
            for name, r in res.items():
                out[name] = {
                    "service_rate": r["service_rate"],
                    "rep_service_rate": r["rep_service_rate"],
                    "cache_share": r["cache_share"],
                    "tuples_per_r_cycle": r["w_per_step"] * r["partitions"],
                    "memory_max_over_budget": r["memory_max_over_budget"],
                }
            for a, c in pairs:
                out[f"{a}_over_{c}"] = res[a]["service_rate"] / res[c]["service_rate"]
            print(json.dumps(out), flush=True)


def main(reps: int) -> None:
    """Run every point and print it."""
    run_points(
        reps,
        {
            "pipelined": ("ssbj", {"switching": "pipelined"}),
            "paper": ("ssbj", {"switching": "paper"}),
            "meshjoin": ("meshjoin", {}),
        },
        [("pipelined", "meshjoin"), ("paper", "meshjoin"), ("pipelined", "paper")],
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
