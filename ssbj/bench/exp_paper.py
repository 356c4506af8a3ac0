"""The paper's figures (Sec. 4): Fig. 4a, 5a-5f, 6a, 6c-6d, SSBJ and MESHJOIN side by side."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from ssbj.bench.datasets import Dataset, tpch_dataset
from ssbj.bench.harness import ALGORITHMS, Bench, Json, RunConfig, _ratio
from ssbj.errors import ConfigError


def exp_fig4a(bench: Bench) -> Json:
    """Fig. 4a: memory against service rate (|R| fixed, skew 1).

    The paper varies the arrival rate and measures memory; here the H_S chunk (w_S in
    bytes per step) is swept with a fixed b, which sets the service rate, and each run
    reports its memory.  MESHJOIN's memory is interpolated (log-log) at SSBJ's rates.
    """
    p = bench.p
    ds = bench.synthetic(p.r_small, 1.0)
    b = max(1, ds.r_rows // p.fig4a_partitions)
    series: Json = {a: [] for a in ALGORITHMS}
    for chunk in p.fig4a_chunks:
        runs = bench.runs(ds, [RunConfig(algo, b, chunk) for algo in ALGORITHMS])
        for algo, r in zip(ALGORITHMS, runs, strict=True):
            series[algo].append(
                {
                    "chunk_bytes": chunk,
                    "service_rate": r["service_rate"],
                    "memory_mean": r["memory_mean"],
                    "tuple_memory_mean": r["tuple_memory_mean"],
                    "cache_share": r["cache_share"],
                    "e2e_rate_cpu": r["e2e_rate_cpu"],
                    "memory_components_mean": r["memory_components_mean"],
                }
            )
    ratios = []
    mesh = sorted(series["meshjoin"], key=lambda x: x["service_rate"])
    xs = np.log([m["service_rate"] for m in mesh])
    for s in series["ssbj"]:
        mu = s["service_rate"]
        entry: Json = {"service_rate": mu}
        if len(mesh) >= 2 and xs[0] <= math.log(mu) <= xs[-1]:
            for key in ("memory_mean", "tuple_memory_mean"):
                ys = np.log([m[key] for m in mesh])
                entry[f"meshjoin_{key}"] = float(np.exp(np.interp(math.log(mu), xs, ys)))
                entry[f"ratio_{key}"] = entry[f"meshjoin_{key}"] / s[key]
        ratios.append(entry)
    bench.forget_data()
    return {"dataset": ds.info, "partition_rows": b, "series": series, "memory_ratio_at_equal_rate": ratios}


def _mem_sweep(bench: Bench, ds: Dataset, fracs: tuple[float, ...]) -> list[Json]:
    points = []
    for f in fracs:
        budget = int(f * ds.r_bytes)
        pt = bench.pair(ds, budget)
        pt["memory_fraction"] = f
        points.append(pt)
    return points


def exp_fig5a(bench: Bench) -> Json:
    """Fig. 5a: service rate against memory, 1%-10% of R (skew 1)."""
    p = bench.p
    ds = bench.synthetic(p.r_main, 1.0)
    pts = _mem_sweep(bench, ds, p.mem_fracs)
    return {"dataset": ds.info, "points": pts}


def exp_fig5f(bench: Bench) -> Json:
    """Fig. 5f: share of stream tuples served by the cache phase against memory (skew 1).

    Same runs as fig5a (reused when both run in one invocation).
    """
    p = bench.p
    ds = bench.synthetic(p.r_main, 1.0)
    pts = _mem_sweep(bench, ds, p.mem_fracs)
    return {
        "dataset": ds.info,
        "points": [
            {
                "memory_fraction": pt["memory_fraction"],
                "budget": pt["budget"],
                "cache_share": pt["ssbj"]["cache_share"],
                "cache_share_run": pt["ssbj"]["totals"]["cache_share"],
            }
            for pt in pts
            if "error" not in pt
        ],
    }


def exp_fig5b(bench: Bench) -> Json:
    """Fig. 5b: service rate against |R| with a fixed memory budget (skew 1)."""
    p = bench.p
    largest = bench.synthetic(max(p.r_sizes), 1.0)
    budget = int(p.fixed_mem_frac * largest.r_bytes)
    bench.forget_data()
    points = []
    for n in p.r_sizes:
        ds = bench.synthetic(n, 1.0)
        pt = bench.pair(ds, budget)
        pt["r_rows"] = n
        pt["memory_fraction"] = budget / ds.r_bytes
        pt["dataset"] = ds.info
        points.append(pt)
        if n != p.r_main:
            bench.forget_data()
    return {"budget": budget, "points": points}


def exp_fig5c(bench: Bench) -> Json:
    """Fig. 5c: service rate against the skew (Zipf exponent 0-1), memory 10% of R."""
    p = bench.p
    points = []
    for skew in p.skews:
        ds = bench.synthetic(p.r_main, skew)
        budget = int(p.skew_mem_frac * ds.r_bytes)
        pt = bench.pair(ds, budget)
        pt["skew"] = skew
        pt["dataset"] = ds.info
        points.append(pt)
        if skew != 1.0:
            bench._data.pop(("syn", p.r_main, skew, bench.seed), None)
    return {"memory_fraction": p.skew_mem_frac, "points": points}


def exp_fig5d(bench: Bench) -> Json:
    """Fig. 5d: TPC-H, orders as the stream and customer as the master, memory 1%-10%."""
    p = bench.p
    ds = tpch_dataset(p, bench.work_dir)
    pts = _mem_sweep(bench, ds, p.tpch_mem_fracs)
    return {"dataset": ds.info, "points": pts}


def exp_fig6a(bench: Bench) -> Json:
    """Fig. 6a: SSBJ's service rate against the switching factor s_f (memory 1%, skew 1)."""
    p = bench.p
    ds = bench.synthetic(p.r_small, 1.0)
    budget = int(p.sf_mem_frac * ds.r_bytes)
    try:
        b = bench.plan(ds, budget)
    except ConfigError as exc:
        return {"dataset": ds.info, "budget": budget, "error": str(exc), "points": []}
    chunk = max(1, budget // 16)
    mesh, *ssbj = bench.runs(
        ds,
        [RunConfig("meshjoin", b, chunk, budget)]
        + [RunConfig("ssbj", b, chunk, budget, switch_factor=sf) for sf in p.switch_factors],
    )
    points = []
    for sf, r in zip(p.switch_factors, ssbj, strict=True):
        points.append(
            {
                "switch_factor": sf,
                "service_rate": r["service_rate"],
                "cache_share": r["cache_share"],
                "e2e_rate_cpu": r["e2e_rate_cpu"],
                "memory_mean": r["memory_mean"],
                "ratio_to_meshjoin": _ratio(r["service_rate"], mesh["service_rate"]),
                "rep_service_rate": r.get("rep_service_rate"),
                "evicted": r["totals"].get("evicted"),
                "switched_in": r["totals"].get("switched_in"),
            }
        )
    return {
        "dataset": ds.info,
        "budget": budget,
        "partition_rows": b,
        "memory_fraction": p.sf_mem_frac,
        "meshjoin_service_rate": mesh["service_rate"],
        "points": points,
    }


def _subsample(steps: list[Json], n: int) -> list[Json]:
    if len(steps) <= n:
        return steps
    idx = np.linspace(0, len(steps) - 1, n).round().astype(int)
    return [steps[i] for i in idx]


def exp_fig6cd(bench: Bench) -> Json:
    """Fig. 6c/6d: cost model validation, predicted against measured c_loop, skew 0 and 1.

    The constants come from ``calibration`` (other data, same machine); each step's
    prediction is Eq. 2 with that step's b, w_N, w_S and output rows.
    """
    p = bench.p
    model = bench.model()
    out: Json = {"constants_ns": {k: float(v) for k, v in asdict(model.k).items()}, "skews": {}}
    for skew in (0.0, 1.0):
        ds = bench.synthetic(p.r_small, skew)
        budget = int(p.cost_mem_frac * ds.r_bytes)
        try:
            b = bench.plan(ds, budget)
        except ConfigError as exc:
            out["skews"][f"{skew:g}"] = {"budget": budget, "error": str(exc)}
            continue
        per: Json = {"budget": budget, "partition_rows": b, "dataset": ds.info}
        runs = bench.runs(ds, [RunConfig(a, b, max(1, budget // 16), budget) for a in ALGORITHMS], record_steps=True)
        for algo, r in zip(ALGORITHMS, runs, strict=True):
            st = r["steps"]
            meas = np.array([s["c_loop_measured"] for s in st])
            pred = np.array([s["c_loop_predicted"] for s in st])
            rel = np.abs(pred - meas) / np.maximum(meas, 1e-12)
            per[algo] = {
                "steps": _subsample(st, 300),
                "n_steps": len(st),
                "c_loop_measured_mean": float(meas.mean()) if len(meas) else None,
                "c_loop_predicted_mean": float(pred.mean()) if len(pred) else None,
                "median_abs_rel_error": float(np.median(rel)) if len(rel) else None,
                "sum_ratio_predicted_to_measured": float(pred.sum() / meas.sum()) if meas.sum() > 0 else None,
                "service_rate": r["service_rate"],
                "cache_share": r["cache_share"],
            }
        out["skews"][f"{skew:g}"] = per
        bench.forget_data()
    return out
