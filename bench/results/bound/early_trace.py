"""Per R-cycle trace of SSBJ on the bound experiment's data (skew 1): the driver behind the early switch's figures.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/early_trace.py 0.1 drift 40 4

Arguments: fraction of R as the budget, ``drift`` or ``stat``, R-cycles to run, first
R-cycle of the summary. Prints one JSON line per R-cycle (tuples read, served by the cache,
H_R values, slack and H_R's share of the budget, switch counters), then the mean tuples per
R-cycle and cache share from the given R-cycle on. Tuples per R-cycle are deterministic
(nothing here is timed). The committed figures: this script on 607abbf and on a7e9c2c.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, "bench/results/bound")
import stepcost_ab as SA

from ssbj.bench.exp_bound import SAMPLE_ROWS, issue_dataset
from ssbj.bench.harness import PRESETS, Bench
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.bound import key_distribution, memory_optimal_bound
from ssbj.core.budget import breakdown


def setup(frac: float, drift: bool) -> tuple[Any, Any, SemiStreamJoin]:
    """Return the preset, the dataset and SSBJ planned as the bound experiment plans it."""
    p = dataclasses.replace(PRESETS["full"], bound_skews=(1.0,), reps=1)
    bench = Bench(p, Path(tempfile.gettempdir()))
    bench.set_model(SA.CONSTANTS)
    ds = ds0 = issue_dataset(bench, p.r_main, 1.0, None)
    if drift:  # as the bound experiment: a new hot set every 4 x the bound's tuples per R-cycle
        sample = ds0.rows(SAMPLE_ROWS).column("sk").to_numpy()
        dist = key_distribution(sample, ds0.master.column("mk").to_numpy())
        bd = memory_optimal_bound(dist, frac * ds0.r_bytes, ds0.v_s, ds0.v_r)
        ds = issue_dataset(bench, p.r_main, 1.0, int(4 * bd.n_ssbj))
    budget = int(frac * ds.r_bytes)
    b, rows = bench.plan_pieces(ds, budget, True)
    spec = JoinSpec(
        stream_key=ds.stream_key,
        master_key=ds.master_key,
        master_columns=ds.master_columns,
        algorithm="ssbj",
        chunk_bytes=max(1, budget // 16),
        max_step_tuples=p.max_step_tuples,
        memory_budget=budget,
        disk_chunk_rows=rows,
        min_chunk_bytes=math.ceil(ds.v_s),
    )
    op = SemiStreamJoin(spec, ArrowMaster(ds.master, b), ds.stream_schema, ds.master.schema, cost_model=bench.model())
    return p, ds, op


def main(frac: float, drift: bool, cycles: int, first: int) -> None:
    """Run SSBJ for ``cycles`` R-cycles and print the trace and its summary."""
    p, ds, op = setup(frac, drift)
    budget = op.spec.memory_budget or 0
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    cur: dict | None = None
    ws: list[int] = []
    shares: list[float] = []
    while True:
        while op.buffered_tuples < p.max_step_tuples:
            op.push(next(batches))
        m = op.step().metrics
        if cur is None or m.r_cycle != cur["rc"]:
            if cur is not None:
                cur["switch"] = {k: v for k, v in op._c.extra.items() if k.startswith("switch")}
                print(json.dumps(cur), flush=True)
                if cur["rc"] >= first:
                    ws.append(cur["w"])
                    shares.append(cur["w_n"] / max(cur["w"], 1))
                if cur["rc"] >= cycles:
                    break
            bdn = breakdown(op)
            cur = {
                "rc": m.r_cycle,
                "w": 0,
                "w_n": 0,
                "hr_values": m.cache_values,
                "slack_pct": round(100 * bdn["slack"] / budget, 1),
                "hr_pct": round(100 * (bdn["hr_rows"] + bdn["hr_index"] + bdn["hr_partition_tags"]) / budget, 1),
            }
        cur["w"] += m.w
        cur["w_n"] += m.w_n
    print(
        json.dumps(
            {
                "r_cycles": len(ws),
                "mean_tuples_per_r_cycle": sum(ws) / len(ws),
                "mean_cache_share": sum(shares) / len(shares),
            }
        )
    )


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2] == "drift", int(sys.argv[3]), int(sys.argv[4]))
