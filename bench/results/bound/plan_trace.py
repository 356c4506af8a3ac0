"""Per-R-cycle plan of H_S against the budget's other parts (the issue's data, skew 1, stationary).

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/plan_trace.py 0.1 5 [ssbj|meshjoin]

Runs one algorithm at ``frac`` of R with k partitions (``stepcost_ab.setup``: the planned
piece size, b = ceil(|R| / k)) through the harness's own ``_run``, with
``ssbj.core.budget.adapt`` wrapped to print, at each R-cycle start, what H_S is planned to
hold and what the budget keeps for everything else, as shares of the budget: the cushion,
disk buffer, H_R, s_B's reserve, statistics and filters, the temporaries reserve and its
parts (the peak seen, the per-tuple term for the ring, the cache phase's calls, the largest
rebuild, the planned switch-in's). Deterministic: bytes, not time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stepcost_ab import configs, setup

import ssbj.core.budget as B
import ssbj.core.hrsize as HZ
import ssbj.core.switchroom as SR
from ssbj.bench.harness import _run


def main(frac: float, k: int, name: str) -> None:
    """Print one JSON line per R-cycle start, then the run's tuples per R-cycle."""
    bench, ds, p, budget, _, rows = setup(frac)
    adapt = B.adapt

    def share(x: float) -> float:
        return round(x / budget, 4)

    def traced(op: Any) -> None:
        adapt(op)
        if op.spec.memory_budget is None or op._disk_buffer_peak == 0:
            return
        line = {
            "r_cycle": op._rc,
            "ring_slots": op.hs.cap,
            "ring": share(op.hs.nbytes()),
            "cushion": share(B.cushion_bytes(op, op._plan.avail)),
            "disk_buffer": share(max(op._disk_buffer_peak, op._disk_buffer_bytes)),
            "h_r": share(op.cache.nbytes()),
            "s_b_reserve": share(SR.reserve_bytes(op, HZ.layout_row_bytes(op))),
            "statistics_and_interest": share(op.stats.nbytes + op.interest.nbytes),
            "r_filter": share(op.rfilter.nbytes + op._rf_pending),
            "temporaries_reserve": share(B.temporaries_reserve(op)),
            "transient_peak": share(op._transient_peak),
            "per_tuple_term": share(op._transient_per_tuple * op.hs.cap),
            "cache_calls": share(B.cache_call_tuples(op) * B.CACHE_CALL_BYTES),
            "rebuild_peak": share(op._rebuild_peak),
            "switch_in": share(SR.transient_bytes(op, HZ.column_bytes(op))),
        }
        print(json.dumps(line), flush=True)

    B.adapt = traced
    b = -(-ds.r_rows // k)
    piece = rows if rows is not None and rows < b else None
    r = _run(ds, configs(name, b, budget, piece, 0.0, ds.v_s), p, bench.model())
    print(json.dumps({"algorithm": name, "tuples_per_r_cycle": round(r["w_per_step"] * r["partitions"])}))


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "ssbj")
