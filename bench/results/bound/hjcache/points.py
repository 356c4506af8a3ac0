"""Driver: the bound experiment's skew-1 stationary points (1% and 10% of R) only.

Usage: PYTHONPATH=. python bench/results/bound/hjcache/points.py OUT.json [reps]
Plans with the committed calibration (bench/results/calibration-2026-11-23.json) so before/after
runs get the same b and piece size.
"""

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from ssbj.bench.exp_bound import bound_point, issue_dataset
from ssbj.bench.harness import PRESETS, Bench
from ssbj.core.costmodel import CostConstants

out = Path(sys.argv[1])
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
p = dataclasses.replace(PRESETS["full"], reps=reps)
bench = Bench(p, Path(tempfile.mkdtemp()))
bench.set_model(CostConstants.load(Path("bench/results/calibration-2026-11-23.json")))
ds = issue_dataset(bench, p.r_main, 1.0, None)
res = {}
for frac in (0.01, 0.10):
    pt = bound_point(bench, ds, frac)
    s, m = pt["ssbj"], pt["meshjoin"]
    res[f"{frac:.0%}"] = {
        "tuples_per_r_cycle_ratio": pt["tuples_per_r_cycle_ratio"],
        "ratio_service_rate": pt["ratio_service_rate"],
        "structural_bound": pt["structural_bound"]["ratio"],
        "e_e": pt["structural_bound"]["overheads"]["e_e"],
        "bound": pt["bound"]["ratio"],
        "ssbj_tuples_per_r_cycle": s["tuples_per_r_cycle"],
        "meshjoin_tuples_per_r_cycle": m["tuples_per_r_cycle"],
        "cache_share": s["cache_share"],
        "empty_entries": s.get("empty_entries"),
        "empty_entry_bytes": s.get("empty_entry_bytes"),
        "empty_share_of_budget": s["memory_breakdown_mean"]["hr_empty_entries"] / pt["budget"],
        "peak_over_budget": s["memory_max_over_budget"],
        "loadavg_1m": s["loadavg_1m"],
        "partition_rows": pt["partition_rows"],
        "disk_chunk_rows": pt["disk_chunk_rows"],
    }
    print(frac, json.dumps(res[f"{frac:.0%}"]), flush=True)
out.write_text(json.dumps(res, indent=1))
