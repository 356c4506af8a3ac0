"""The driver behind piececost.md: skew 1, stationary, one budget; SSBJ, MESHJOIN and MESHJOIN at SSBJ's w.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/piececost_ab.py 0.01 3

The three runs are interleaved in each repetition; the median over repetitions is printed
as JSON, with c_loop and service rates in wall-clock time (as the harness reports them)
and in process CPU time (less sensitive to a loaded machine). A fixed calibration makes
every code version plan the same b and piece size.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ssbj.bench.exp_bound import issue_dataset
from ssbj.bench.harness import PRESETS, Bench, RunConfig, _run
from ssbj.core.costmodel import CostConstants


def cpu_c_loop(r: dict[str, Any]) -> float:
    """CPU seconds per measured step, without the stream buffer's push."""
    return float((r["cpu_seconds"] - r["push_cpu_seconds"]) / max(r["measured_steps"], 1))


def main(frac: float, reps: int) -> dict[str, Any]:
    """Run the three configurations ``reps`` times, interleaved, at ``frac`` of R."""
    p = dataclasses.replace(PRESETS["full"], bound_skews=(1.0,), reps=1)
    bench = Bench(p, Path(tempfile.gettempdir()))
    bench.set_model(CostConstants(c_fixed=570_000.0, c_h=6.0, c_s=1400.0))
    ds = issue_dataset(bench, p.r_main, 1.0, None)
    budget = int(frac * ds.r_bytes)
    b, rows = bench.plan_pieces(ds, budget, True)
    runs: dict[str, list[dict[str, Any]]] = {"ssbj": [], "meshjoin": [], "meshjoin_same_w": []}
    w_s = 0.0
    for _ in range(reps):
        for name in runs:
            if name == "meshjoin_same_w":
                cfg = RunConfig("meshjoin", b, chunk_bytes=max(1, int(w_s * ds.v_s)), disk_chunk_rows=rows)
            else:
                cfg = RunConfig(name, b, chunk_bytes=max(1, budget // 16), memory_budget=budget, disk_chunk_rows=rows)
            r = _run(ds, cfg, p, bench.model())
            if name == "ssbj" and not w_s:
                w_s = r["w_per_step"]
            runs[name].append(r)
    med = statistics.median
    out: dict[str, Any] = {"frac": frac, "b": b, "rows": rows, "load_end": os.getloadavg(), "reps": reps}
    for name, rs in runs.items():
        out[name] = {
            "w": med(r["w_per_step"] for r in rs),
            "c_loop_wall_ms": med(1e3 * r["c_loop_mean"] for r in rs),
            "c_loop_cpu_ms": med(1e3 * cpu_c_loop(r) for r in rs),
            "rate_wall": med(r["service_rate"] for r in rs),
            "rate_cpu": med(r["w_per_step"] / cpu_c_loop(r) for r in rs),
            "peak_over_budget": max((r["memory_max_over_budget"] or 0.0) for r in rs),
        }
    # ratios per repetition (its runs share the machine's state), then the median
    pairs = list(zip(runs["ssbj"], runs["meshjoin"], runs["meshjoin_same_w"], strict=True))
    out["rate_ratio_wall"] = med(s["service_rate"] / m["service_rate"] for s, m, _ in pairs)
    out["rate_ratio_cpu"] = med(
        (s["w_per_step"] / cpu_c_loop(s)) / (m["w_per_step"] / cpu_c_loop(m)) for s, m, _ in pairs
    )
    out["tuples_ratio"] = out["ssbj"]["w"] / out["meshjoin"]["w"]
    out["c_loop_same_w_wall"] = med(s["c_loop_mean"] / mw["c_loop_mean"] for s, _, mw in pairs)
    out["c_loop_same_w_cpu"] = med(cpu_c_loop(s) / cpu_c_loop(mw) for s, _, mw in pairs)
    out["rep_rate_ratio_wall"] = [s["service_rate"] / m["service_rate"] for s, m, _ in pairs]
    return out


if __name__ == "__main__":
    print(json.dumps(main(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3), indent=1))
