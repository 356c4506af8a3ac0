"""Bytes per waiting tuple and tuples per R-cycle on the issue's data (issue 9; mem-2026-11-27*.md).

``PYTHONPATH=$PWD .venv/bin/python bench/results/bound/memdrive.py [--algos ssbj] [--fracs 0.1] --tag NAME``
prints one JSON line per (budget, algorithm): tuples per R-cycle over M / v_S, budget bytes
per waiting tuple over v_S, the peak, the temporaries' reserve and the largest H_R rebuild,
and the mean memory breakdown over the measured steps. Byte counts and tuples are
deterministic (load changes only the time it takes). Levers by environment: ``MEM_CALL_MIN``,
``MEM_CALL_SHARE``, ``MEM_VALUES_MARGIN``, ``MEM_VALUES_SLACK``, ``MEM_STATS_MARGIN``,
``MEM_EG``, ``MEM_RF=off``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

import ssbj.bench.run as H  # the module whose operator and spec a run builds (patched below)
import ssbj.core.operator as OPM
from ssbj.bench.exp_bound import PIECES, SAMPLE_ROWS, issue_dataset
from ssbj.bench.harness import PRESETS, Bench, RunConfig, _run
from ssbj.core import budget as B
from ssbj.core import stats as ST
from ssbj.core.bound import key_distribution, memory_optimal_bound
from ssbj.core.costmodel import CostModel

OPS: list[Any] = []
KNOBS: dict[str, str] = {}


class _Rec(H.SemiStreamJoin):  # type: ignore[misc]
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        OPS.append(self)


def knobs() -> None:
    """Apply the levers given by environment variables."""
    levers = {
        "MEM_CALL_MIN": (B, "MIN_CACHE_CALL"),
        "MEM_CALL_SHARE": (B, "CACHE_CALL_SHARE"),
        "MEM_VALUES_MARGIN": (B, "VALUES_MARGIN"),
        "MEM_VALUES_SLACK": (B, "VALUES_SLACK"),
        "MEM_STATS_MARGIN": (ST, "PEAK_MARGIN"),
    }
    for env, (mod, name) in levers.items():
        if env in os.environ:
            setattr(mod, name, type(getattr(mod, name))(os.environ[env]))
            KNOBS[name] = os.environ[env]
    if os.environ.get("MEM_EG"):
        OPM.EMPTY_GROWTH = float(os.environ["MEM_EG"])  # type: ignore[attr-defined]
    if os.environ.get("MEM_RF"):
        spec = H.JoinSpec
        H.JoinSpec = lambda *a, **kw: spec(*a, r_filter=os.environ["MEM_RF"], **kw)


def main() -> None:
    """Run the driver (arguments above)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--fracs", default="0.01,0.10")
    ap.add_argument("--algos", default="ssbj,meshjoin")
    ap.add_argument("--measure", type=int, default=3)
    ap.add_argument("--warm", type=int, default=12)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    H.SemiStreamJoin = _Rec
    knobs()
    p = dataclasses.replace(PRESETS["full"], bound_skews=(1.0,), max_run_seconds=1e9, reps=1)
    bench = Bench(p, None, 0)
    ds = issue_dataset(bench, p.r_main, 1.0, None)
    dist = key_distribution(ds.rows(SAMPLE_ROWS).column("sk").to_numpy(), ds.master.column("mk").to_numpy())
    for frac in [float(x) for x in a.fracs.split(",")]:
        budget = int(frac * ds.r_bytes)
        bound = memory_optimal_bound(dist, budget, ds.v_s, ds.v_r)
        b, rows = bench.plan_pieces(ds, budget, PIECES)
        for algo in a.algos.split(","):
            cfg = RunConfig(algo, b, chunk_bytes=max(1, budget // 16), memory_budget=budget, disk_chunk_rows=rows)
            warm = a.warm if algo == "ssbj" else 3
            r = _run(ds, cfg, p, CostModel(), warm_cycles=warm, measure_cycles=a.measure)
            op = OPS[-1]
            row = {
                "tag": a.tag,
                "frac": frac,
                "algo": algo,
                "tpc_over_MvS": r["w_per_step"] * r["partitions"] / bound.n_meshjoin,
                "bytes_per_waiting_over_vs": budget / max(r["hs_tuples_mean"], 1) / ds.v_s,
                "peak": r["memory_max_over_budget"],
                "cache_share": r["cache_share"],
                "cp_peak_pct": 100 * op._cache_transient_peak / budget,
                "rebuild_peak_pct": 100 * op._rebuild_peak / budget,
                "reserve_pct": 100 * B.temporaries_reserve(op) / budget,
                "knobs": KNOBS,
                "breakdown_pct": {
                    k: round(100 * v / budget, 2)
                    for k, v in r["memory_breakdown_mean"].items()
                    if k not in ("waiting_tuples", "budget")
                },
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
