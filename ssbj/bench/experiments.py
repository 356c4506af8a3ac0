"""The experiments by name, and :func:`run_experiments`; the harness is :mod:`ssbj.bench.harness`.

One module per group of experiments: :mod:`ssbj.bench.exp_paper` (the paper's figures),
:mod:`ssbj.bench.exp_hashjoin` (in-memory hash join, throughput),
:mod:`ssbj.bench.exp_bound` (Theorem 1's bound against what both algorithms achieve),
:mod:`ssbj.bench.exp_bound_sql` (the same with R read from a database),
:mod:`ssbj.bench.exp_refresh` (the cached-row refresh's cost),
:mod:`ssbj.bench.exp_prefetch` (master partitions read ahead from a database: the overlap),
:mod:`ssbj.bench.exp_hybrid` (the hybrid step: scan only vs lookup, on a database),
:mod:`ssbj.bench.exp_multiway` (the multi-way join: dpPick's probe order, the LSM-tree waiting store),
:mod:`ssbj.bench.exp_shared` (shared jobs: the sharing ILP's solve time, shared vs isolated),
:mod:`ssbj.bench.exp_cq` (continuous queries: Q7 under inserts and deletes),
:mod:`ssbj.bench.exp_cq_exact` (their exactness at scale: DuckDB after every batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ssbj.bench.exp_bound import exp_bound
from ssbj.bench.exp_bound_sql import exp_bound_sql
from ssbj.bench.exp_cq import exp_cq
from ssbj.bench.exp_cq_exact import exp_cq_exact
from ssbj.bench.exp_hashjoin import exp_hashjoin, exp_throughput
from ssbj.bench.exp_hybrid import exp_hybrid
from ssbj.bench.exp_multiway import exp_multiway_order, exp_multiway_spill
from ssbj.bench.exp_paper import (
    exp_fig4a,
    exp_fig5a,
    exp_fig5b,
    exp_fig5c,
    exp_fig5d,
    exp_fig5f,
    exp_fig6a,
    exp_fig6cd,
)
from ssbj.bench.exp_prefetch import exp_prefetch
from ssbj.bench.exp_refresh import exp_refresh
from ssbj.bench.exp_shared import exp_shared_ilp, exp_shared_jobs
from ssbj.bench.harness import PRESETS, Bench, Json, Preset, exp_calibration
from ssbj.bench.shared_data import Scale
from ssbj.errors import ConfigError

__all__ = ["EXPERIMENTS", "PRESETS", "Preset", "run_experiments"]


def _shared_ilp(bench: Bench) -> Json:
    return exp_shared_ilp(reps=3, log=bench.log)


def _shared_jobs(bench: Bench) -> Json:
    scale = Scale(tuples=100_000) if bench.p.name == "small" else Scale()
    return exp_shared_jobs(bench.work_dir / "shared", scale, seed=bench.seed, log=bench.log)


EXPERIMENTS: dict[str, Callable[[Bench], Json]] = {
    "calibration": exp_calibration,
    "fig4a": exp_fig4a,
    "fig5a": exp_fig5a,
    "fig5f": exp_fig5f,
    "fig5b": exp_fig5b,
    "fig5c": exp_fig5c,
    "fig5d": exp_fig5d,
    "fig6a": exp_fig6a,
    "fig6cd": exp_fig6cd,
    "hashjoin": exp_hashjoin,
    "throughput": exp_throughput,
    "bound": exp_bound,
    "bound_sql": exp_bound_sql,
    "refresh": exp_refresh,
    "prefetch": exp_prefetch,
    "hybrid": exp_hybrid,
    "multiway_order": exp_multiway_order,
    "multiway_spill": exp_multiway_spill,
    "shared_ilp": _shared_ilp,
    "shared_jobs": _shared_jobs,
    "cq": exp_cq,
    "cq_exact": exp_cq_exact,
}


def run_experiments(
    preset: Preset,
    names: list[str] | None,
    work_dir: Path,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    on_result: Callable[[str, Json], None] | None = None,
) -> dict[str, Json]:
    """Run the named experiments (all by default) in order; returns name -> result."""
    wanted = names if names else list(EXPERIMENTS)
    unknown = [n for n in wanted if n not in EXPERIMENTS]
    if unknown:
        raise ConfigError(f"unknown experiment(s) {unknown}; choose from {list(EXPERIMENTS)}")
    bench = Bench(preset, work_dir, seed, log)
    results: dict[str, Json] = {}
    for name in EXPERIMENTS:  # canonical order, so fig5f can reuse fig5a's runs
        if name not in wanted:
            continue
        if name == "calibration" and bench.calibration is not None:
            res = bench.calibration
        else:
            bench.log(f"experiment {name}")
            t = time.perf_counter()
            res = EXPERIMENTS[name](bench)
            res["seconds"] = time.perf_counter() - t
        for done, r in ((name, res), ("calibration", bench.calibration)):
            if r is not None and done not in results:
                results[done] = r
                if on_result is not None:
                    on_result(done, r)
    return results
