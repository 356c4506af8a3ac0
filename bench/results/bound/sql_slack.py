"""Where SSBJ's unused budget goes with R in SQLite (the ``bound_sql`` setting), or in memory.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/sql_slack.py 0.1 sql   # or: 0.1 mem

Runs the bound experiment's point (skew 1, stationary, whole partitions as ``bound_sql``
reads them) for the given fraction of R, with R in a 2M-row SQLite table (``sql``) or in
memory (``mem``). The read costs are fixed (120 us a query, 775 ns a row: what
``bound_sql`` measured on 2026-11-29), so two code versions plan the same b. Prints, per
run with a budget, the mean over its last three R-cycles of the budget's unused share
(slack) and of what the budget keeps for temporaries, as shares of the budget, then the
tuples per R-cycle (deterministic: nothing here is timed). The committed figures: this
script on 33b10cd and on e69e92e (docs/bound.md, "2026-12-06, afternoon").
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, "bench/results/bound")
import stepcost_ab as SA

from ssbj.bench import exp_bound_sql as BS
from ssbj.bench.exp_bound import bound_point, issue_dataset
from ssbj.bench.harness import PRESETS, Bench
from ssbj.core import budget as B
from ssbj.core.operator import SemiStreamJoin

PER_QUERY_NS, PER_ROW_NS = 120_000.0, 775.0


def main(frac: float, where: str) -> None:
    """Run the point and print the budget's unused share and reserves per run."""
    rec: dict[tuple[str, int], list[dict[str, float]]] = defaultdict(list)
    step = SemiStreamJoin.step

    def traced(op: SemiStreamJoin) -> Any:
        r = step(op)
        if op.spec.memory_budget:
            bd = B.breakdown(op)
            rec[(op.spec.algorithm, id(op))].append(
                {
                    "slack": bd["slack"],
                    "temporaries_reserve": B.temporaries_reserve(op),
                    "rebuild_peak_in_steps": op._rebuild_peak,
                    "rebuild_peak_at_starts": getattr(op, "_start_rebuild_peak", 0),
                    "probes_peak": op._transient_peak,
                    "disk_buffer": bd["disk_buffer_rows"] + bd["disk_buffer_keys"],
                    "h_r": bd["hr_rows"] + bd["hr_index"] + bd["hr_partition_tags"],
                    "budget": bd["budget"],
                    "rc": op._rc,
                    "k": op._k,
                }
            )
        return r

    SemiStreamJoin.step = traced  # type: ignore[method-assign]
    p = dataclasses.replace(PRESETS["full"], bound_skews=(1.0,), reps=1, measure_cycles=3)
    bench = Bench(p, Path(tempfile.mkdtemp()))
    bench.set_model(SA.CONSTANTS)
    ds = issue_dataset(bench, p.r_main, 1.0, None)
    kw: dict[str, Any] = {}
    if where == "sql":
        engine = sa.create_engine(f"sqlite:///{Path(tempfile.mkdtemp()) / 'm.sqlite'}")
        BS.write_table(engine, ds.master, BS.TABLE, "mid")
        kw["master_factory"] = BS.SqlMaster(engine, BS.TABLE, ds.master_key, (ds.master_key, *ds.master_columns))
        k = bench.model().k
        bench.set_model(dataclasses.replace(k, c_fixed=k.c_fixed + PER_QUERY_NS, c_io_row=k.c_io_row + PER_ROW_NS))
    pt = bound_point(bench, ds, frac, pieces=False, **kw)
    for (algo, _), rows in rec.items():
        last = [r for r in rows if r["rc"] >= rows[-1]["rc"] - 2]
        mean = {key: float(np.mean([r[key] for r in last])) for key in last[0]}
        shares = {
            key: round(100 * v / mean["budget"], 2) for key, v in mean.items() if key not in ("budget", "rc", "k")
        }
        print(algo, "k", int(mean["k"]), "% of the budget:", json.dumps(shares))
    print(json.dumps({a: {"tuples_per_r_cycle": pt[a]["tuples_per_r_cycle"]} for a in ("ssbj", "meshjoin")}))


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
