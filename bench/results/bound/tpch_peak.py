"""Where MESHJOIN or SSBJ exceeds its budget on TPC-H (orders x customer): the peak step and H_S's string rings.

Usage (from the repository root; ``PYTHONPATH`` selects the code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/tpch_peak.py {meshjoin,ssbj} FRACTION [SF] [R-CYCLES]

The bench's TPC-H data (``ssbj.bench.datasets.tpch_dataset``) and b (planned as
``Bench.pair`` plans it, with stepcost_ab.py's fixed constants), a budget of FRACTION of
R's projected bytes, stepped for R-CYCLES R-cycles (default 12). Prints every change of
H_S's string rings, and the memory of the peak step and of the step before it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from ssbj.bench.datasets import tpch_dataset
from ssbj.bench.harness import PRESETS, Bench
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.costmodel import CostConstants


def rings(op: SemiStreamJoin) -> list[tuple[str, int]]:
    """(column, bytes held) of H_S's string/binary byte rings."""
    return [(c.name, int(c.data.shape[0])) for c in op.hs.rows._cols if c.kind.startswith("var")]


def setup(algo: str, frac: float, sf: float = 1.0) -> tuple[Any, Any, SemiStreamJoin, int, int]:
    """Return (preset, dataset, operator, budget, b): the bench's TPC-H data and plan with fixed constants."""
    p = dataclasses.replace(PRESETS["full"], tpch_scale=sf)
    bench = Bench(p, Path(tempfile.gettempdir()) / "ssbj-tpch-peak")
    bench.work_dir.mkdir(exist_ok=True)
    bench.set_model(CostConstants(c_fixed=570_000.0, c_h=6.0, c_s=1400.0))
    ds = tpch_dataset(p, bench.work_dir)
    budget = int(frac * ds.r_bytes)
    b, _ = bench.plan_pieces(ds, budget, False)
    spec = JoinSpec(
        stream_key=ds.stream_key,
        master_key=ds.master_key,
        master_columns=ds.master_columns,
        algorithm=algo,  # type: ignore[arg-type]
        chunk_bytes=max(1, budget // 16),
        max_step_tuples=p.max_step_tuples,
        memory_budget=budget,
        min_chunk_bytes=max(1, math.ceil(ds.v_s)),
    )
    op = SemiStreamJoin(spec, ArrowMaster(ds.master, b), ds.stream_schema, ds.master.schema, cost_model=bench.model())
    return p, ds, op, budget, b


def main() -> None:
    """Run one configuration and print where its memory peaked."""
    algo, frac = sys.argv[1], float(sys.argv[2])
    sf = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    cycles = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    p, ds, op, budget, b = setup(algo, frac, sf)
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    print(f"budget {budget} b {b} v_s {ds.v_s:.1f} v_r {ds.v_r:.1f}")
    peak: tuple[int, Any] = (0, None)
    prev: Any = None
    done = step = 0
    while done < cycles:
        while op.buffered_tuples < p.max_step_tuples and (bt := next(batches, None)) is not None:
            op.push(bt)
        before = rings(op)
        m = op.step().metrics
        after = rings(op)
        if before != after and step > 0:
            print(f"step {step} rc {m.r_cycle} p {m.partition}: {before} -> {after}; {m.memory.total / budget:.3f}")
        if m.memory.total > peak[0]:
            peak = (m.memory.total, (step, m.r_cycle, m.partition, m.memory.to_dict(), prev))
        prev = (step, m.memory.to_dict())
        done += m.partition == m.partitions - 1
        step += 1
    total, (s, rc, part, mem, before_peak) = peak
    print(f"peak/budget {total / budget:.4f} at step {s} (R-cycle {rc}, partition {part})")
    print("at the peak", json.dumps(mem))
    print("the step before", json.dumps(before_peak))


if __name__ == "__main__":
    main()
