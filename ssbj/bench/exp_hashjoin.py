"""SSBJ against a one-shot in-memory Arrow hash join, and data-plane throughput."""

from __future__ import annotations

import math
import os
import time

import pyarrow as pa

from ssbj.bench.harness import ALGORITHMS, Bench, Dataset, Json, RunConfig, _ratio


def _pyarrow_join(ds: Dataset, n: int, reps: int) -> Json:
    """One-shot in-memory pyarrow hash join (inner) of ``n`` stream tuples with R."""
    stream = ds.rows(n)
    master = ds.master.select([ds.master_key, *[c for c in ds.master_columns if c != ds.master_key]])
    out: Json = {"stream_rows": stream.num_rows}
    for threads in (False, True):
        best_wall = math.inf
        best_cpu = math.inf
        rows = 0
        for _ in range(reps):
            t0 = time.perf_counter()
            c0 = time.process_time()
            j = stream.join(
                master, keys=ds.stream_key, right_keys=ds.master_key, join_type="inner", use_threads=threads
            )
            best_wall = min(best_wall, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
            rows = j.num_rows
            del j
        key = "threads" if threads else "single_thread"
        out[key] = {
            "wall_seconds": best_wall,
            "cpu_seconds": best_cpu,
            "output_rows": rows,
            "rate_wall": stream.num_rows / best_wall,
            "rate_cpu": stream.num_rows / best_cpu,
        }
    out["best_rate_wall"] = max(out["threads"]["rate_wall"], out["single_thread"]["rate_wall"])
    return out


def _all_of_r_b(bench: Bench, ds: Dataset) -> int:
    """B when the budget holds all of R: ``min_partitions`` partitions.

    With all of R cached a step reads up to ``max_step_tuples`` from the cache, so an
    R-cycle of k steps consumes k times that; the planner's k (tens, from the cost
    model's per-step constant) would use up the generated stream in the warm-up.
    """
    return int(-(-ds.r_rows // bench.p.min_partitions))


def exp_hashjoin(bench: Bench) -> Json:
    """SSBJ with memory for all of R (skew 1) against a one-shot pyarrow hash join.

    The budget is ``hashjoin_budget_factor`` x R's projected bytes, enough for the cache
    to hold all of R plus its per-value entries.  The pyarrow join gets the same number
    of stream tuples as SSBJ's measured R-cycles, all at once, best of a few runs, both
    as pyarrow's default call (``use_threads=True``, the baseline of the target) and on
    one thread. SSBJ runs with as many threads as pyarrow's default
    (``JoinSpec.threads`` = ``pyarrow.cpu_count()``) against the first, and with one
    thread against the second.
    """
    p = bench.p
    ds = bench.synthetic(p.hashjoin_r, 1.0)
    budget = int(p.hashjoin_budget_factor * ds.r_bytes)
    threads = pa.cpu_count()
    b = _all_of_r_b(bench, ds)
    pt = bench.pair(ds, budget, partition_rows=b, threads=threads)
    one = pt["ssbj"] if threads == 1 else bench.run(ds, _ssbj_config(b, budget, 1))
    n = int(pt["ssbj"]["measured_tuples"])
    pj = _pyarrow_join(ds, n, p.pyarrow_reps)
    s = pt["ssbj"]
    return {
        "dataset": ds.info,
        "budget": budget,
        "budget_factor": p.hashjoin_budget_factor,
        "threads": threads,
        "ssbj": s,
        "ssbj_single_thread": one,
        "meshjoin": pt["meshjoin"],
        "pyarrow": pj,
        # the target's baseline is pyarrow's default call (use_threads=True, both cores)
        "ratio_service_rate_to_pyarrow": _ratio(s["service_rate"], pj["threads"]["rate_wall"]),
        "ratio_e2e_wall_to_pyarrow": _ratio(s["e2e_rate_wall"], pj["threads"]["rate_wall"]),
        "ratio_e2e_wall_to_pyarrow_single_thread": _ratio(one["e2e_rate_wall"], pj["single_thread"]["rate_wall"]),
        "ratio_e2e_cpu_to_pyarrow_cpu": _ratio(s["e2e_rate_cpu"], pj["threads"]["rate_cpu"]),
        "ratio_threads_to_single_thread": _ratio(s["e2e_rate_wall"], one["e2e_rate_wall"]),
        "ratio_ssbj_to_meshjoin": pt["ratio_service_rate"],
    }


def _ssbj_config(b: int, budget: int, threads: int) -> RunConfig:
    """SSBJ as :meth:`Bench.pair` runs it, with ``threads``."""
    return RunConfig("ssbj", b, chunk_bytes=max(1, budget // 16), memory_budget=budget, threads=threads)


def exp_throughput(bench: Bench) -> Json:
    """Data-plane throughput at skew 1: stream tuples per CPU second (per core).

    The measured R-cycles of the steady state, including the stream-buffer work (push),
    over the process CPU time and the wall clock; two budgets: all of R and 10% of R.
    """
    p = bench.p
    ds = bench.synthetic(p.hashjoin_r, 1.0)
    res: Json = {"dataset": ds.info, "nproc": os.cpu_count(), "configs": {}}
    for label, budget in (
        ("all_of_R", int(p.hashjoin_budget_factor * ds.r_bytes)),
        (f"{p.throughput_mem_frac:.0%}_of_R", int(p.throughput_mem_frac * ds.r_bytes)),
    ):
        pt = bench.pair(ds, budget, partition_rows=_all_of_r_b(bench, ds) if label == "all_of_R" else None)
        res["configs"][label] = {
            "budget": budget,
            **{
                a: {
                    "tuples_per_cpu_second": pt[a]["e2e_rate_cpu"],
                    "tuples_per_wall_second": pt[a]["e2e_rate_wall"],
                    "service_rate": pt[a]["service_rate"],
                    "cpu_seconds": pt[a]["cpu_seconds"],
                    "wall_seconds": pt[a]["wall_seconds"],
                    "measured_tuples": pt[a]["measured_tuples"],
                    "cpu_per_wall": pt[a]["cpu_seconds"] / pt[a]["wall_seconds"] if pt[a]["wall_seconds"] else None,
                    "cache_share": pt[a]["cache_share"],
                }
                for a in ALGORITHMS
            },
        }
    return res
