"""Driver: SSBJ in the hashjoin experiment's setting (memory for all of R), one line per R-cycle.

Usage: PYTHONPATH=. python bench/results/bound/hjcache/hashjoin_cycles.py R_ROWS CYCLES [ALGO] [STEP_TUPLES]
(the experiment: R_ROWS 1000000, STEP_TUPLES 1048576; budget 2x R's projected bytes, k = 4).
"""

import dataclasses
import math
import os
import sys
import time

from ssbj.bench.harness import PRESETS, synthetic_dataset
from ssbj.core import ArrowMaster
from ssbj.core.costmodel import CostModel
from ssbj.core.operator import JoinSpec, SemiStreamJoin


def main() -> None:
    """Run and print per-R-cycle figures."""
    r = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    cycles = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    algo = sys.argv[3] if len(sys.argv) > 3 else "ssbj"
    step_tuples = int(sys.argv[4]) if len(sys.argv) > 4 else (1 << 20)
    p = dataclasses.replace(PRESETS["full"], max_step_tuples=step_tuples)
    ds = synthetic_dataset(p, r, 1.0, 0)
    budget = int(p.hashjoin_budget_factor * ds.r_bytes)
    b = -(-ds.r_rows // p.min_partitions)
    spec = JoinSpec(
        stream_key=ds.stream_key,
        master_key=ds.master_key,
        master_columns=ds.master_columns,
        algorithm=algo,
        chunk_bytes=max(1, budget // 16),
        max_step_tuples=p.max_step_tuples,
        memory_budget=budget,
        min_chunk_bytes=max(1, math.ceil(ds.v_s)),
    )
    op = SemiStreamJoin(spec, ArrowMaster(ds.master, b), ds.stream_schema, ds.master.schema, cost_model=CostModel())
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    print(f"R={r} budget={budget} b={b} load={os.getloadavg()[0]:.1f}", flush=True)
    t_all = time.perf_counter()
    w = wn = steps = 0
    c = cp = dp = cpu = 0.0
    done = 0
    while done < cycles:
        while op.buffered_tuples < p.max_step_tuples:
            op.push(next(batches))
        c0 = time.process_time()
        m = op.step().metrics
        cpu += time.process_time() - c0
        w, wn, steps = w + m.w, wn + m.w_n, steps + 1
        c, cp, dp = c + m.c_loop_measured, cp + m.cache_phase_seconds, dp + m.disk_phase_seconds
        if m.partition == m.partitions - 1:
            done += 1
            print(
                f"rc {m.r_cycle:2d} {m.fsm_state:12s} tuples/step {w / steps:>9,.0f} cache {wn / max(w, 1):.3f} "
                f"rate {w / c / 1e6:5.2f}M/s cpu-rate {w / cpu / 1e6:5.2f}M/s step {c / steps * 1e3:7.1f} ms "
                f"(cache phase {cp / steps * 1e3:6.1f}, disk phase+expiry {dp / steps * 1e3:6.1f}) "
                f"H_R values {op.cache.values:,} empties {op.cache.empty_values:,} candidates {op.stats.size:,} "
                f"admit {op.stats.meta[-1]} H_S {op.hs.live:,} mem {m.memory.total / budget:.2f} "
                f"load {os.getloadavg()[0]:.1f} t {time.perf_counter() - t_all:.0f}s",
                flush=True,
            )
            w = wn = steps = 0
            c = cp = dp = cpu = 0.0


main()
