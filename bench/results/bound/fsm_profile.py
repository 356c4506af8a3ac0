"""Where a step's CPU goes, SSBJ's pipelined FSM against Algorithm 1's (fsm-ab.md, "Profile").

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/fsm_profile.py 0.01 2 > out.txt 2> runs.jsonl
    ORDER=paper,pipelined PYTHONPATH=$PWD .venv/bin/python bench/results/bound/fsm_profile.py 0.01 2

The issue's data at skew 1, stationary, at the given fraction of R (stepcost_ab.py's setup:
a fixed calibration, b = 57,142); each repetition runs both FSMs in ``ORDER`` with the
phases and kernels wrapped in CPU-time accumulators (stepcost_ab.py's ``Timers``, plus the
R-cycle start's statistics and H_R work). Prints per measured step, in microseconds, the
median over repetitions of each phase for both and their ratio; stderr has every run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, "bench/results/bound")
import stepcost_ab as SA

from ssbj.bench.harness import _run

EXTRA = [
    ("ssbj.core.stats", "ValueStats.prune_decided"),
    ("ssbj.core.stats", "ValueStats.reset_s_count"),
    ("ssbj.core.stats", "ValueStats.gc"),
    ("ssbj.core.switching", "rebuild_hr"),
    ("ssbj.core.switching", "switch_in"),
    ("ssbj.core.operator", "SemiStreamJoin.rebuild_interest"),
]
SA.WRAPPED.extend(EXTRA)


def main(frac: float, reps: int) -> None:
    """Profile both FSMs ``reps`` times at ``frac`` of R and print the medians."""
    bench, ds, p, budget, b, rows = SA.setup(frac)
    order = os.environ.get("ORDER", "pipelined,paper").split(",")
    res: dict[str, list] = {k: [] for k in order}
    for _ in range(reps):
        for fsm in res:
            cfg = dataclasses.replace(SA.configs("ssbj", b, budget, rows, 0.0, ds.v_s), switching=fsm)
            t = SA.Timers()
            undo = t.install()
            try:
                r = _run(ds, cfg, p, bench.model())
            finally:
                for owner, attr, orig in reversed(undo):
                    setattr(owner, attr, orig)
            n = r["measured_steps"]
            steps = t.steps[-n:]
            per = {k: 1e6 * sum(s.get(k, 0.0) for s in steps) / n for k in steps[0] if k != "out"}
            per.update(w=sum(s["w"] for s in steps) / n, w_s=sum(s["w_s"] for s in steps) / n)
            per["rate"] = r["service_rate"]
            per["cache_share"] = r.get("cache_share")
            per["partitions"] = r["partitions"]
            res[fsm].append(per)
            print(
                fsm,
                json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in per.items()}),
                file=sys.stderr,
                flush=True,
            )
    med = {
        fsm: {k: statistics.median(x[k] for x in rs if x.get(k) is not None) for k in rs[0] if rs[0][k] is not None}
        for fsm, rs in res.items()
    }
    keys = sorted(med["pipelined"], key=lambda k: -abs(med["pipelined"][k]))
    print(f"frac {frac} b {b} load {os.getloadavg()}")
    for k in keys:
        a, c = med["pipelined"].get(k, 0.0), med["paper"].get(k, 0.0)
        print(f"{k:45s} {a:12.1f} {c:12.1f}  {a / c if c else float('nan'):6.2f}")


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
