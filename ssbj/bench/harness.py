"""The benchmark harness: one measured operator run, and :class:`Bench`.

Presets are in :mod:`ssbj.bench.presets`, data sets in :mod:`ssbj.bench.datasets`.

Every experiment (``ssbj.bench.exp_*``) is a function ``exp_<name>(bench) -> dict``
returning JSON-able results, built on this module. All timings are steady-state numbers:

* the stream is pushed ahead of the operator (the stream buffer always holds at least
  one full step), so every step is saturated and the measured rate is the *service rate*
  (the largest arrival rate the operator keeps up with);
* each run first completes a warm-up of whole R-cycles (SSBJ needs three, incrementing,
  switching and phase-out, before its cache serves anything, and a few rounds more to
  converge), then measures a fixed number of whole R-cycles on the same data;
* ``service_rate`` is the operator's own definition, stream tuples read over the busy
  time of the measured steps (sum of ``c_loop``); ``e2e_rate_wall`` / ``e2e_rate_cpu``
  add the stream-buffer work (``push``: key encoding, row sizes) and are taken over the
  wall clock and over the process CPU time (``time.process_time``) respectively.

Memory budgets are fractions of R's *projected* master bytes (the join key plus the
projected columns, as the disk buffer and H_R hold them), given to both algorithms in
``memory_budget`` mode; b comes from :func:`ssbj.planning.plan_join` with constants
calibrated on this machine (experiment ``calibration``), with at least ``min_partitions``
partitions: the planner (with ``cache_share=0``, the same b for both algorithms) picks
k = 1 as soon as the budget holds all of R, and then the disk buffer alone takes R's
bytes and leaves SSBJ no room for H_R.  Generating the stream is never timed.  The
machine is small and noisy: read ratios, not absolute numbers, and only ratios measured
within one process.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ssbj.bench.datasets import Dataset, synthetic_dataset
from ssbj.bench.presets import PRESETS, Json, Preset
from ssbj.contracts import MasterScan
from ssbj.core import (
    ArrowMaster,
    CostConstants,
    CostModel,
    JoinSpec,
    SemiStreamJoin,
    StepCost,
    calibrate,
)
from ssbj.core.budget import breakdown
from ssbj.core.spec import Switching
from ssbj.errors import ConfigError
from ssbj.planning import JoinSettings, plan_join

__all__ = [
    "ALGORITHMS",
    "PRESETS",
    "Bench",
    "Dataset",
    "Json",
    "MasterFactory",
    "Preset",
    "RunConfig",
    "exp_calibration",
]  # Dataset, Json and the presets re-exported: the experiments import them from here

ALGORITHMS = ("ssbj", "meshjoin")


class SchemaMaster(MasterScan, Protocol):
    """A master scan that knows its projected schema (ArrowMaster, SqlMasterScan)."""

    @property
    def schema(self) -> pa.Schema:
        """Arrow schema of the projected master columns."""
        ...


# R as a run reads it, given b: default the data set's table held in memory (ArrowMaster)
MasterFactory = Callable[[int], SchemaMaster]


# ---------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class RunConfig:
    """One operator run: algorithm, b, and the H_S sizing (fixed chunk or memory budget)."""

    algorithm: str
    partition_rows: int
    chunk_bytes: int
    memory_budget: int | None = None
    switch_factor: float = 1.0
    refresh_cache: bool = True
    disk_chunk_rows: int | None = None  # the disk phase reads partitions in pieces of this many rows
    switching: Switching = "pipelined"  # JoinSpec.switching (SSBJ's FSM: per value or Algorithm 1's R-cycles)
    threads: int = 1  # JoinSpec.threads (the complete cache's probe and takes)


@dataclass
class _Acc:
    steps: int = 0
    w: int = 0
    w_n: int = 0
    w_s: int = 0
    nulls: int = 0
    out: int = 0
    c_loop: float = 0.0
    c_pred: float = 0.0
    mem: float = 0.0
    mem_max: int = 0
    tuple_mem: float = 0.0
    hs_tuples: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, float] = field(default_factory=dict)


def _run(
    ds: Dataset,
    cfg: RunConfig,
    p: Preset,
    model: CostModel,
    record_steps: bool = False,
    warm_cycles: int | None = None,
    measure_cycles: int | None = None,
    master_factory: MasterFactory | None = None,
) -> Json:
    """Warm up, then measure whole R-cycles of one algorithm on ``ds``; see the module doc.

    ``master_factory`` reads R from elsewhere (a database) instead of ``ds.master`` in memory.
    """
    if master_factory is None:
        master: SchemaMaster = ArrowMaster(ds.master, cfg.partition_rows)
    else:
        master = master_factory(cfg.partition_rows)
    try:
        return _measure(ds, cfg, p, model, master, record_steps, warm_cycles, measure_cycles)
    finally:
        close = getattr(master, "close", None)
        if close is not None:
            close()


def _measure(
    ds: Dataset,
    cfg: RunConfig,
    p: Preset,
    model: CostModel,
    master: SchemaMaster,
    record_steps: bool,
    warm_cycles: int | None,
    measure_cycles: int | None,
) -> Json:
    spec = JoinSpec(
        stream_key=ds.stream_key,
        master_key=ds.master_key,
        master_columns=ds.master_columns,
        algorithm="ssbj" if cfg.algorithm == "ssbj" else "meshjoin",
        switch_factor=cfg.switch_factor,
        chunk_bytes=cfg.chunk_bytes,
        max_step_tuples=p.max_step_tuples,
        memory_budget=cfg.memory_budget,
        refresh_cache=cfg.refresh_cache,
        disk_chunk_rows=cfg.disk_chunk_rows,
        switching=cfg.switching,
        threads=cfg.threads,
        # at least one stream tuple per step, however small the budget
        min_chunk_bytes=max(1, math.ceil(ds.v_s)),
    )
    op = SemiStreamJoin(spec, master, ds.stream_schema, master.schema, cost_model=model)
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    need = p.max_step_tuples
    exhausted = False
    push_wall = 0.0  # stream-buffer work (push) during the measured cycles
    push_cpu = 0.0
    timing = False

    def refill() -> bool:
        """Keep one full step in the stream buffer; data generation is not timed."""
        nonlocal exhausted, push_wall, push_cpu
        while op.buffered_tuples < need:
            b = next(batches, None)
            if b is None:
                exhausted = True
                return False
            t0 = time.perf_counter()
            c0 = time.process_time()
            op.push(b)
            if timing:
                push_wall += time.perf_counter() - t0
                push_cpu += time.process_time() - c0
        return True

    warm = (
        warm_cycles
        if warm_cycles is not None
        else (p.warm_cycles_ssbj if cfg.algorithm == "ssbj" else p.warm_cycles_mesh)
    )
    measure = measure_cycles if measure_cycles is not None else p.measure_cycles
    t_start = time.perf_counter()
    done = 0
    while done < warm and refill():
        m = op.step().metrics
        if m.partition == m.partitions - 1:
            done += 1
        if time.perf_counter() - t_start > 4 * p.max_run_seconds:
            break
    warm_done = done
    warm_seconds = time.perf_counter() - t_start

    acc = _Acc()
    last_chunk = cfg.chunk_bytes
    steps: list[Json] = []
    measured = 0
    partial = 0
    wall = 0.0
    cpu = 0.0
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    timing = True
    while measured < measure:
        if not refill():
            break
        t0 = time.perf_counter()
        c0 = time.process_time()
        res = op.step()
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        m = res.metrics
        acc.steps += 1
        acc.w += m.w
        acc.w_n += m.w_n
        acc.w_s += m.w_s
        acc.nulls += m.null_keys
        acc.out += m.output_rows
        acc.c_loop += m.c_loop_measured
        acc.c_pred += m.c_loop_predicted
        last_chunk = m.chunk_bytes
        mem = m.memory
        acc.mem += mem.total
        acc.mem_max = max(acc.mem_max, mem.total)
        acc.tuple_mem += mem.h_s + mem.h_r + mem.disk_buffer + mem.switching_buffer
        acc.hs_tuples += m.hs_tuples
        for k, v in mem.to_dict().items():
            acc.components[k] = acc.components.get(k, 0.0) + v
        for k, x in breakdown(op).items():
            acc.breakdown[k] = acc.breakdown.get(k, 0.0) + x
        if record_steps:
            steps.append(
                {
                    "step": m.step,
                    "r_cycle": m.r_cycle,
                    "fsm": m.fsm_state,
                    "b": m.b,
                    "w_n": m.w_n + m.null_keys,
                    "w_s": m.w_s,
                    # H_S as the partition probed it (ssbj.core.reporting.step_metrics)
                    "hs": m.hs_tuples + m.w_s if m.b else 0,
                    "output_rows": m.output_rows,
                    "c_loop_measured": m.c_loop_measured,
                    "c_loop_predicted": m.c_loop_predicted,
                }
            )
        if m.partition == m.partitions - 1:
            measured += 1
            partial = 0
        else:
            partial += 1
        if wall > p.max_run_seconds and measured >= 1:
            break
    wall += push_wall
    cpu += push_cpu
    n = max(acc.steps, 1)
    totals = op.totals()
    return {
        "algorithm": cfg.algorithm,
        "config": asdict(cfg),
        "partitions": master.num_partitions(),
        "v_s": ds.v_s,
        "v_r": ds.v_r,
        "warm_cycles": warm_done,
        "warm_seconds": warm_seconds,
        "measured_cycles": measured + (partial / master.num_partitions() if partial else 0.0),
        "measured_steps": acc.steps,
        "measured_tuples": acc.w,
        "stream_exhausted": exhausted and measured < measure,
        "service_rate": acc.w / acc.c_loop if acc.c_loop > 0 else 0.0,
        "e2e_rate_wall": acc.w / wall if wall > 0 else 0.0,
        "e2e_rate_cpu": acc.w / cpu if cpu > 0 else 0.0,
        "busy_seconds": acc.c_loop,
        "push_wall_seconds": push_wall,
        "push_cpu_seconds": push_cpu,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "cache_share": acc.w_n / acc.w if acc.w else 0.0,
        "disk_share": acc.w_s / acc.w if acc.w else 0.0,
        "output_rows": acc.out,
        "w_per_step": acc.w / n,
        "w_s_per_step": acc.w_s / n,
        "c_loop_mean": acc.c_loop / n,
        "c_loop_predicted_mean": acc.c_pred / n,
        "memory_mean": acc.mem / n,
        "memory_max": acc.mem_max,
        "memory_max_over_budget": acc.mem_max / cfg.memory_budget if cfg.memory_budget else None,
        "tuple_memory_mean": acc.tuple_mem / n,
        "hs_tuples_mean": acc.hs_tuples / n,
        "memory_components_mean": {k: v / n for k, v in acc.components.items()},
        "memory_breakdown_mean": {k: v / n for k, v in acc.breakdown.items()},
        "chunk_bytes_final": last_chunk,
        "r_filter": _filter_info(op),
        "empty_entries": op.cache.empties.size,
        "empty_entry_bytes": op.cache.empties.entry_bytes(),
        "loadavg_1m": load0,
        "totals": {k: (float(v) if isinstance(v, float) else int(v)) for k, v in totals.items()},
        **({"steps": steps} if record_steps else {}),
    }


def _filter_info(op: SemiStreamJoin) -> Json | None:
    """Return the R-filter answering at the end of the run (mode, expected false positive rate, bytes)."""
    f = op.rfilter.active
    if f is None:
        return None
    return {"mode": ("bitmap", "bloom")[f.mode - 1], "fpr": f.fpr, "nbytes": int(f.bits.nbytes), "bits": f.nbits}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


# ---------------------------------------------------------------------------- context
class Bench:
    """Shared state of one benchmark invocation: preset, calibrated model, memoised runs."""

    def __init__(self, preset: Preset, work_dir: Path, seed: int = 0, log: Callable[[str], None] | None = None) -> None:
        self.p = preset
        self.work_dir = work_dir
        self.seed = seed
        self._log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        self._t0 = time.perf_counter()
        self._model: CostModel | None = None
        self.calibration: Json | None = None
        self._runs: dict[tuple[Any, ...], Json] = {}
        self._data: dict[tuple[Any, ...], Dataset] = {}

    def derived(self, **changes: Any) -> Bench:
        """Return a bench with preset fields changed, sharing this one's cost model, clock and log."""
        child = Bench(replace(self.p, **changes), self.work_dir, self.seed, self._log)
        child._t0 = self._t0
        child._model = self.model()
        child.calibration = self.calibration
        return child

    def log(self, msg: str) -> None:
        """Progress line with the elapsed time."""
        self._log(f"[{time.perf_counter() - self._t0:7.1f}s] {msg}")

    # data sets are kept only while one experiment uses them
    def synthetic(self, n_master: int, skew: float, seed: int | None = None) -> Dataset:
        """Return the synthetic data set (kept until :meth:`forget_data`)."""
        key = ("syn", n_master, skew, self.seed if seed is None else seed)
        if key not in self._data:
            self._data[key] = synthetic_dataset(self.p, n_master, skew, self.seed if seed is None else seed)
        return self._data[key]

    def forget_data(self) -> None:
        """Free the generated data sets."""
        self._data.clear()

    def model(self) -> CostModel:
        """Return the cost model calibrated on this machine (runs ``calibration`` once)."""
        if self._model is None:
            self.calibration = exp_calibration(self)
        assert self._model is not None  # noqa: S101 - set by exp_calibration
        return self._model

    def set_model(self, consts: CostConstants) -> None:
        """Use ``consts`` for planning and prediction from now on."""
        self._model = CostModel(consts)

    def run(self, ds: Dataset, cfg: RunConfig, **kw: Any) -> Json:
        """Run (or reuse) one configuration; see :meth:`runs`."""
        return self.runs(ds, [cfg], **kw)[0]

    def runs(self, ds: Dataset, cfgs: list[RunConfig], **kw: Any) -> list[Json]:
        """Run (or reuse) configurations ``reps`` times each, interleaved, keep the median.

        Repetitions go round-robin over ``cfgs`` (SSBJ, MESHJOIN, SSBJ, ...) so that a
        change of machine load hits both algorithms alike; each result is the repetition
        with the median service rate, with every repetition's rates alongside.
        """
        keys = [(ds.name, self.seed, cfg, tuple(sorted(kw.items()))) for cfg in cfgs]
        todo = [(k, c) for k, c in zip(keys, cfgs, strict=True) if k not in self._runs]
        reps: dict[tuple[Any, ...], list[Json]] = {k: [] for k, _ in todo}
        for i in range(self.p.reps):
            for key, cfg in todo:
                t = time.perf_counter()
                r = _run(ds, cfg, self.p, self.model(), **kw)
                self.log(
                    f"  {cfg.algorithm:8s} b={cfg.partition_rows} k={r['partitions']} "
                    f"budget={cfg.memory_budget} sf={cfg.switch_factor:g} rep {i + 1}: "
                    f"{r['service_rate']:,.0f} tuples/s, cache {r['cache_share']:.0%}, "
                    f"{r['measured_cycles']:.1f} cycles, {time.perf_counter() - t:.1f}s"
                )
                reps[key].append(r)
        for key, _ in todo:
            rs = sorted(reps[key], key=lambda r: float(r["service_rate"]))
            med = dict(rs[len(rs) // 2])
            med["reps"] = len(rs)
            for field_name in ("service_rate", "e2e_rate_wall", "e2e_rate_cpu", "cache_share"):
                med[f"rep_{field_name}"] = [r[field_name] for r in reps[key]]
            self._runs[key] = med
        return [self._runs[k] for k in keys]

    def plan(self, ds: Dataset, budget: int) -> int:
        """B for ``budget`` bytes by the calibrated cost model (same b for both algorithms).

        At least ``min_partitions`` partitions: the planner picks k = 1 once the budget
        holds all of R, leaving no room for H_R (see the module doc).
        """
        return self.plan_pieces(ds, budget, pieces=False)[0]

    def plan_pieces(self, ds: Dataset, budget: int, pieces: bool) -> tuple[int, int | None]:
        """B and, with ``pieces``, the disk phase's piece size (rows) for ``budget`` bytes."""
        settings = JoinSettings(
            stream_key=ds.stream_key, master_key=ds.master_key, memory_budget=budget, disk_chunks=pieces
        )
        plan = plan_join(settings, ds.v_s, ds.r_rows, ds.v_r, self.model())
        b = int(min(plan.partition_rows, -(-ds.r_rows // self.p.min_partitions)))
        rows = plan.spec.disk_chunk_rows
        return b, (rows if rows is not None and rows < b else None)

    def pair(
        self,
        ds: Dataset,
        budget: int,
        switch_factor: float = 1.0,
        partition_rows: int | None = None,
        pieces: bool = False,
        threads: int = 1,
        **kw: Any,
    ) -> Json:
        """SSBJ and MESHJOIN with the same memory budget and b (planned unless given); rates and their ratio.

        ``pieces``: the disk phase reads partitions in pieces (planned with b, the same for both).
        ``threads``: ``JoinSpec.threads`` of both (only SSBJ's complete cache uses more than one).
        ``kw`` go to every run (e.g. ``master_factory``).
        """
        rows: int | None = None
        try:
            if partition_rows:
                b = partition_rows
            else:
                b, rows = self.plan_pieces(ds, budget, pieces)
        except ConfigError as exc:  # the budget cannot hold a disk buffer and an H_S chunk
            self.log(f"  budget {budget} B: {exc}")
            return {"budget": budget, "error": str(exc)}
        out: Json = {"budget": budget, "partition_rows": b, "disk_chunk_rows": rows}
        cfgs = [
            RunConfig(
                algo,
                b,
                chunk_bytes=max(1, budget // 16),
                memory_budget=budget,
                switch_factor=switch_factor,
                disk_chunk_rows=rows,
                threads=threads,
            )
            for algo in ALGORITHMS
        ]
        for algo, r in zip(ALGORITHMS, self.runs(ds, cfgs, **kw), strict=True):
            out[algo] = r
        out["ratio_service_rate"] = _ratio(out["ssbj"]["service_rate"], out["meshjoin"]["service_rate"])
        out["ratio_e2e_cpu"] = _ratio(out["ssbj"]["e2e_rate_cpu"], out["meshjoin"]["e2e_rate_cpu"])
        return out


# ---------------------------------------------------------------------------- experiments
def exp_calibration(bench: Bench) -> Json:
    """Fit the cost-model constants (Eq. 2) to measured steps of calibration runs.

    Several (algorithm, k, chunk, skew) settings on a data set with another seed than the
    measurements, all steps after the first R-cycle, least squares by :func:`calibrate`.
    """
    p = bench.p
    bench.log("calibration")
    default = CostModel()
    samples: list[tuple[StepCost, float]] = []
    # two sizes of R: b x (tuples in H_S) is |R| x w_S in a steady step, so with one |R| the
    # probe's growth with H_S (c_hs) cannot be told from a cost per waiting tuple
    for skew, r_rows in ((0.0, p.r_small), (1.0, p.r_small), (1.0, max(1, p.r_small // 4))):
        ds = synthetic_dataset(p, r_rows, skew, bench.seed + 1000)
        for k, chunk in p.calib_configs:
            for algo in ALGORITHMS:
                b = max(1, -(-ds.r_rows // k))
                r = _run(
                    ds,
                    RunConfig(algo, b, chunk),
                    p,
                    default,
                    record_steps=True,
                    warm_cycles=3 if algo == "ssbj" else 1,
                    measure_cycles=p.calib_cycles,
                )
                for s in r["steps"]:
                    samples.append(
                        (StepCost(s["b"], s["w_n"], s["w_s"], s["output_rows"], s["hs"]), s["c_loop_measured"])
                    )
        bench.log(f"  calibration skew {skew:g}, |R| = {r_rows:,}: {len(samples)} steps so far")
    consts = calibrate(samples)
    bench.set_model(consts)
    model = CostModel(consts)
    meas = np.array([t for _, t in samples])
    pred = np.array([model.c_loop(s) for s, _ in samples])
    ss_res = float(((meas - pred) ** 2).sum())
    ss_tot = float(((meas - meas.mean()) ** 2).sum())
    return {
        "constants_ns": {k: float(v) for k, v in asdict(consts).items()},
        "samples": len(samples),
        "r_squared": 1.0 - ss_res / ss_tot if ss_tot > 0 else None,
        "median_abs_rel_error": float(np.median(np.abs(pred - meas) / meas)),
        "configs": [list(c) for c in p.calib_configs],
        "r_rows": [p.r_small, max(1, p.r_small // 4)],
    }


def stderr_log() -> Callable[[str], None]:
    """Return a logger that prints to stderr with seconds since its creation (a standalone experiment's)."""
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    return log


def emit(text: str, res: Json, md: Path | None, json_path: Path | None) -> None:
    """Print a standalone experiment's markdown; write it and its results where asked."""
    import json

    print(text)
    if md:
        md.write_text(text)
    if json_path:
        json_path.write_text(json.dumps(res, indent=1))
