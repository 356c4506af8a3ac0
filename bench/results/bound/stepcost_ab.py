"""The driver behind stepcost.md: where a step's CPU time goes, SSBJ against MESHJOIN (skew 1, stationary).

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/stepcost_ab.py ab 0.01 3
    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/stepcost_ab.py profile 0.01
    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/stepcost_ab.py sweep 0.01 18,26,36,56 1

``ab``: SSBJ, MESHJOIN and MESHJOIN at SSBJ's w, interleaved in each of ``reps``
repetitions (the harness's own ``_run``, nothing wrapped); the median over repetitions is
printed as JSON, c_loop and service rates in wall-clock and in process CPU time. A fixed
calibration makes every code version plan the same b and piece size.

``profile``: the same three runs once, with the operator's phases and kernels wrapped in
CPU-time accumulators (``time.process_time``, inclusive: a phase includes the kernels it
calls); printed per measured step in microseconds. The wrappers cost ~1 us a call.

``sweep``: SSBJ and MESHJOIN at the given partition counts k (b = ceil(|R| / k), the
same pieces), to check the planner's choice of k against measured service rates.

``load``: SSBJ and MESHJOIN with H_S's value index planned at each of the given most
loads (``ssbj.core.hsindex.INDEX_LOAD`` and every copy of it, set for the run), at the b
planned with the code's own load, interleaved; CPU-time rates:

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/stepcost_ab.py load 0.01 0.75,0.6,0.5 3
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ssbj.bench.exp_bound import issue_dataset
from ssbj.bench.harness import PRESETS, Bench, Dataset, RunConfig, _run
from ssbj.core.costmodel import CostConstants
from ssbj.core.operator import SemiStreamJoin

CONSTANTS = CostConstants(c_fixed=570_000.0, c_h=6.0, c_s=1400.0)

# (module, attribute): module-level functions or class methods, as the operator calls them
WRAPPED = [
    ("ssbj.core.operator", "SemiStreamJoin._begin_r_cycle"),
    ("ssbj.core.operator", "SemiStreamJoin._assemble"),
    ("ssbj.core.reporting", "step_metrics"),
    ("ssbj.core.operator", "SemiStreamJoin.memory"),
    ("ssbj.core.cachephase", "cache_phase"),
    ("ssbj.core.cachephase", "cache_probe"),
    ("ssbj.core.cachephase", "expand_hits"),
    ("ssbj.core.cachephase", "hs_add"),
    ("ssbj.core.cachephase", "hs_insert"),
    ("ssbj.core.lookupphase", "choose_lookup"),
    ("ssbj.core.lookupphase", "can_idle"),
    ("ssbj.core.diskphase", "scan_partition"),
    ("ssbj.core.diskphase", "resident_view"),
    ("ssbj.core.diskphase", "disk_phase"),
    ("ssbj.core.diskphase", "disk_probe"),
    ("ssbj.core.diskphase", "note_scan"),
    ("ssbj.core.diskphase", "_charge_pieces"),
    ("ssbj.core.diskphase", "_finish"),
    ("ssbj.core.diskphase", "_pairs"),
    ("ssbj.core.scanacc", "RefreshRows.finish"),
    ("ssbj.core.scanacc", "RefreshRows.rows"),
    ("ssbj.core.scanacc", "RefreshRows.keep"),
    ("ssbj.core.expiry", "expire"),
    ("ssbj.core.expiry", "hs_expire"),
    ("ssbj.core.expiry", "cache_empties"),
    ("ssbj.core.hs", "StreamTable.take"),
    ("ssbj.core.ringstore", "RowRing.append"),
    ("ssbj.core.cache", "Cache.refresh"),
    ("ssbj.core.budget", "room"),
    ("ssbj.core.empties", "EmptySet.fit"),
    ("ssbj.core.empties", "EmptySet.add"),
    ("ssbj.core.interest", "Interest.add"),
    ("ssbj.core.switching", "hs_remove"),
    ("ssbj.core.stats", "ValueStats.delete"),
]


def cpu_c_loop(r: dict[str, Any]) -> float:
    """CPU seconds per measured step, without the stream buffer's push."""
    return float((r["cpu_seconds"] - r["push_cpu_seconds"]) / max(r["measured_steps"], 1))


def setup(frac: float) -> tuple[Bench, Dataset, Any, int, int, int | None]:
    """Build the full preset's data at skew 1 and plan (b, piece rows) for ``frac`` of R."""
    p = dataclasses.replace(PRESETS["full"], bound_skews=(1.0,), reps=1)
    bench = Bench(p, Path(tempfile.gettempdir()))
    bench.set_model(CONSTANTS)
    ds = issue_dataset(bench, p.r_main, 1.0, None)
    budget = int(frac * ds.r_bytes)
    b, rows = bench.plan_pieces(ds, budget, True)
    return bench, ds, p, budget, b, rows


def configs(name: str, b: int, budget: int, rows: int | None, w_s: float, v_s: float) -> RunConfig:
    """Return the run of ``name``: SSBJ or MESHJOIN under the budget, or MESHJOIN at SSBJ's w (no budget)."""
    if name == "meshjoin_same_w":
        return RunConfig("meshjoin", b, chunk_bytes=max(1, int(w_s * v_s)), disk_chunk_rows=rows)
    return RunConfig(name, b, chunk_bytes=max(1, budget // 16), memory_budget=budget, disk_chunk_rows=rows)


NAMES = ("ssbj", "meshjoin", "meshjoin_same_w")


def ab(frac: float, reps: int) -> dict[str, Any]:
    """Run the three configurations ``reps`` times, interleaved, at ``frac`` of R."""
    bench, ds, p, budget, b, rows = setup(frac)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in NAMES}
    w_s = 0.0
    load0 = os.getloadavg()
    t0 = time.time()
    for _ in range(reps):
        for name in NAMES:
            r = _run_steps(ds, configs(name, b, budget, rows, w_s, ds.v_s), p, bench)
            if name == "ssbj" and not w_s:
                w_s = r["w_per_step"]
            runs[name].append(r)
    med = statistics.median
    out: dict[str, Any] = {
        "frac": frac,
        "b": b,
        "rows": rows,
        "reps": reps,
        "load_start": load0,
        "load_end": os.getloadavg(),
        "seconds": time.time() - t0,
    }
    for name, rs in runs.items():
        out[name] = {
            "w": med(r["w_per_step"] for r in rs),
            "c_loop_wall_ms": med(1e3 * r["c_loop_mean"] for r in rs),
            "c_loop_cpu_ms": med(1e3 * cpu_c_loop(r) for r in rs),
            "rate_wall": med(r["service_rate"] for r in rs),
            "rate_cpu": med(r["w_per_step"] / cpu_c_loop(r) for r in rs),
            "tuples_per_r_cycle": med(r["w_per_step"] * r["partitions"] for r in rs),
            "peak_over_budget": max((r["memory_max_over_budget"] or 0.0) for r in rs),
            "step_cpu_median_ms": med(1e3 * r["step_cpu_median"] for r in rs),
        }
    pairs = list(zip(runs["ssbj"], runs["meshjoin"], runs["meshjoin_same_w"], strict=True))
    # the median step's CPU time: robust to the steps a loaded machine disturbs (R-cycle starts excluded)
    out["rate_ratio_cpu_median_step"] = med(
        (s["w_per_step"] / s["step_cpu_median"]) / (m["w_per_step"] / m["step_cpu_median"]) for s, m, _ in pairs
    )
    out["c_loop_same_w_cpu_median_step"] = med(s["step_cpu_median"] / mw["step_cpu_median"] for s, _, mw in pairs)
    out["tuples_ratio"] = out["ssbj"]["tuples_per_r_cycle"] / out["meshjoin"]["tuples_per_r_cycle"]
    out["rate_ratio_wall"] = med(s["service_rate"] / m["service_rate"] for s, m, _ in pairs)
    out["rate_ratio_cpu"] = med(
        (s["w_per_step"] / cpu_c_loop(s)) / (m["w_per_step"] / cpu_c_loop(m)) for s, m, _ in pairs
    )
    out["c_loop_same_w_wall"] = med(s["c_loop_mean"] / mw["c_loop_mean"] for s, _, mw in pairs)
    out["c_loop_same_w_cpu"] = med(cpu_c_loop(s) / cpu_c_loop(mw) for s, _, mw in pairs)
    out["rep_rate_ratio_cpu"] = [
        (s["w_per_step"] / cpu_c_loop(s)) / (m["w_per_step"] / cpu_c_loop(m)) for s, m, _ in pairs
    ]
    out["rep_c_loop_same_w_cpu"] = [cpu_c_loop(s) / cpu_c_loop(mw) for s, _, mw in pairs]
    return out


def _run_steps(ds: Dataset, cfg: RunConfig, p: Any, bench: Bench) -> dict[str, Any]:
    """Run the harness's ``_run``, recording each measured step's CPU time (``step_cpu_median``)."""
    times: list[float] = []
    step = SemiStreamJoin.step

    def timed(op: SemiStreamJoin) -> Any:
        c0 = time.process_time()
        res = step(op)
        times.append(time.process_time() - c0)
        return res

    SemiStreamJoin.step = timed  # type: ignore[method-assign]
    try:
        r = _run(ds, cfg, p, bench.model())
    finally:
        SemiStreamJoin.step = step  # type: ignore[method-assign]
    n = r["measured_steps"]
    r["step_cpu_median"] = statistics.median(times[-n:]) if n else float("nan")
    return r


class Timers:
    """Inclusive CPU seconds per wrapped name, snapshotted per step."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.steps: list[dict[str, float]] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Return ``fn`` adding its CPU time to ``name``."""
        acc, calls = self.acc, self.calls
        acc.setdefault(name, 0.0)
        calls.setdefault(name, 0)
        clock = time.process_time

        @functools.wraps(fn)
        def inner(*a: Any, **kw: Any) -> Any:
            c0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                acc[name] += clock() - c0
                calls[name] += 1

        return inner

    def install(self) -> list[tuple[Any, str, Any]]:
        """Wrap every name of ``WRAPPED`` and the step; returns what undoes it."""
        undo = []
        for mod_name, attr in WRAPPED:
            mod = importlib.import_module(mod_name)
            owner: Any = mod
            parts = attr.split(".")
            for part in parts[:-1]:
                owner = getattr(owner, part)
            if not hasattr(owner, parts[-1]):
                continue
            orig = owner.__dict__[parts[-1]] if isinstance(owner, type) else getattr(owner, parts[-1])
            undo.append((owner, parts[-1], orig))
            setattr(owner, parts[-1], self.wrap(attr, orig))
        step = SemiStreamJoin.step
        undo.append((SemiStreamJoin, "step", step))
        timers = self

        def stepped(op: SemiStreamJoin) -> Any:
            before = dict(timers.acc)
            c0 = time.process_time()
            res = step(op)
            d = {k: timers.acc[k] - before.get(k, 0.0) for k in timers.acc}
            d["step"] = time.process_time() - c0
            d["w"] = float(res.metrics.w)
            d["w_s"] = float(res.metrics.w_s)
            d["out"] = float(res.metrics.output_rows)
            timers.steps.append(d)
            return res

        SemiStreamJoin.step = stepped  # type: ignore[method-assign]
        return undo


def profile(frac: float) -> dict[str, Any]:
    """One run of each configuration with the phases wrapped; CPU microseconds per measured step."""
    bench, ds, p, budget, b, rows = setup(frac)
    out: dict[str, Any] = {"frac": frac, "b": b, "rows": rows, "load_start": os.getloadavg()}
    w_s = 0.0
    for name in NAMES:
        t = Timers()
        undo = t.install()
        try:
            r = _run(ds, configs(name, b, budget, rows, w_s, ds.v_s), p, bench.model())
        finally:
            for owner, attr, orig in reversed(undo):
                setattr(owner, attr, orig)
        if name == "ssbj":
            w_s = r["w_per_step"]
        n = r["measured_steps"]
        steps = t.steps[-n:] if n else []
        keys = sorted({k for s in steps for k in s}, key=lambda k: -sum(s.get(k, 0.0) for s in steps))
        per = {k: sum(s.get(k, 0.0) for s in steps) / max(n, 1) for k in keys}
        out[name] = {
            "measured_steps": n,
            "w_per_step": r["w_per_step"],
            "unwrapped_cpu_c_loop_us": 1e6 * cpu_c_loop(r),
            "per_step_us": {k: round(v if k in ("w", "w_s", "out") else 1e6 * v, 1) for k, v in per.items()},
        }
    out["load_end"] = os.getloadavg()
    return out


def _medians(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repetitions of one configuration's runs (the peak: the largest)."""
    med = statistics.median
    return {
        "w": med(r["w_per_step"] for r in rs),
        "tuples_per_r_cycle": med(r["w_per_step"] * r["partitions"] for r in rs),
        "c_loop_cpu_ms": med(1e3 * cpu_c_loop(r) for r in rs),
        "rate_cpu": med(r["w_per_step"] / cpu_c_loop(r) for r in rs),
        "rate_wall": med(r["service_rate"] for r in rs),
        "peak_over_budget": max((r["memory_max_over_budget"] or 0.0) for r in rs),
    }


def sweep(frac: float, ks: list[int], reps: int) -> dict[str, Any]:
    """SSBJ and MESHJOIN at partition counts ``ks`` (b = ceil(|R| / k)), interleaved; CPU-time rates."""
    bench, ds, p, budget, b0, rows = setup(frac)
    out: dict[str, Any] = {"frac": frac, "planned_b": b0, "rows": rows, "load_start": os.getloadavg(), "points": []}
    for k in ks:
        b = -(-ds.r_rows // k)
        piece = rows if rows is not None and rows < b else None
        got: dict[str, list[dict[str, Any]]] = {"ssbj": [], "meshjoin": []}
        for _ in range(reps):
            for name in got:
                got[name].append(_run(ds, configs(name, b, budget, piece, 0.0, ds.v_s), p, bench.model()))
        pt: dict[str, Any] = {"k": k, "b": b}
        for name, rs in got.items():
            pt[name] = _medians(rs)
        pt["rate_ratio_cpu"] = pt["ssbj"]["rate_cpu"] / pt["meshjoin"]["rate_cpu"]
        out["points"].append(pt)
        print(json.dumps(pt), file=sys.stderr, flush=True)
    out["load_end"] = os.getloadavg()
    return out


def set_index_load(x: float) -> None:
    """Plan H_S's value index at most load ``x``: the constant and every module's copy of it."""
    from ssbj.core import budget, costmodel, hs, hsindex

    for mod in (hsindex, hs, budget, costmodel):
        mod.INDEX_LOAD = x  # type: ignore[attr-defined]
    costmodel.NEW_CHUNK_INDEX_BYTES = hsindex.INDEX_SLOT / x


def load_sweep(frac: float, loads: list[float], reps: int) -> dict[str, Any]:
    """SSBJ and MESHJOIN with H_S's index at each most load of ``loads``, interleaved; CPU-time rates."""
    from ssbj.core import hsindex

    base = hsindex.INDEX_LOAD
    bench, ds, p, budget, b, rows = setup(frac)
    out: dict[str, Any] = {"frac": frac, "b": b, "rows": rows, "load_start": os.getloadavg(), "points": []}
    got: dict[float, dict[str, list[dict[str, Any]]]] = {x: {"ssbj": [], "meshjoin": []} for x in loads}
    med = statistics.median
    try:
        for _ in range(reps):
            for x in loads:
                set_index_load(x)
                for name in ("ssbj", "meshjoin"):
                    got[x][name].append(_run_steps(ds, configs(name, b, budget, rows, 0.0, ds.v_s), p, bench))
    finally:
        set_index_load(base)
    for x in loads:
        pt: dict[str, Any] = {"index_load": x}
        for name, rs in got[x].items():
            pt[name] = _medians(rs) | {"step_cpu_median_ms": med(1e3 * r["step_cpu_median"] for r in rs)}
        pt["rate_ratio_cpu"] = pt["ssbj"]["rate_cpu"] / pt["meshjoin"]["rate_cpu"]
        out["points"].append(pt)
        print(json.dumps(pt), file=sys.stderr, flush=True)
    out["load_end"] = os.getloadavg()
    return out


if __name__ == "__main__":
    mode = sys.argv[1]
    frac = float(sys.argv[2])
    if mode == "ab":
        res = ab(frac, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    elif mode == "load":
        res = load_sweep(frac, [float(x) for x in sys.argv[3].split(",")], int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    elif mode == "sweep":
        res = sweep(frac, [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    else:
        res = profile(frac)
    print(json.dumps(res, indent=1))
