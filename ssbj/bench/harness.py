"""The benchmark harness: :class:`Bench` (preset, calibrated model, memoised runs) and the calibration.

Presets are in :mod:`ssbj.bench.presets`, data sets in :mod:`ssbj.bench.datasets`, one measured
operator run in :mod:`ssbj.bench.run`.

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

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from ssbj.bench.datasets import Dataset, synthetic_dataset
from ssbj.bench.presets import PRESETS, Json, Preset
from ssbj.bench.run import ALGORITHMS, MasterFactory, RunConfig, SchemaMaster, _ratio, _run
from ssbj.core import CostConstants, CostModel, StepCost, calibrate
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
    "SchemaMaster",
    "_ratio",
    "_run",
    "exp_calibration",
]  # the run's names and the presets re-exported: the experiments and drivers import them from here


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

    def plan_pieces(self, ds: Dataset, budget: int, pieces: bool, resident: bool = False) -> tuple[int, int | None]:
        """B and, with ``pieces``, the disk phase's piece size (rows) for ``budget`` bytes.

        ``resident``: the master is the bench's in-memory one, whose pieces are views probed
        in one pass (they cost the plan no time).
        """
        settings = JoinSettings(
            stream_key=ds.stream_key,
            master_key=ds.master_key,
            memory_budget=budget,
            disk_chunks=pieces,
            resident_master=resident,
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
                b, rows = self.plan_pieces(ds, budget, pieces, resident=pieces and "master_factory" not in kw)
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
    samples: list[tuple[StepCost, float]] = []
    for skew, r_rows, runs in calibration_sets(bench):
        for r in runs:
            for s in r["steps"]:
                samples.append((StepCost(s["b"], s["w_n"], s["w_s"], s["output_rows"], s["hs"]), s["c_loop_measured"]))
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


def calibration_sets(bench: Bench) -> Iterator[tuple[float, int, list[Json]]]:
    """Yield the calibration's measured runs, one data set at a time: (skew, |R|, runs with their steps)."""
    p = bench.p
    default = CostModel()
    small = max(1, p.r_small // 4)
    smallest = synthetic_dataset(p, small, 1.0, bench.seed + 1000)
    # an unmeasured pass over the smallest data first: on a cold numba cache, kernels a
    # setting first needs after its warm-up compiled inside measured steps (r^2 0.19 against
    # 0.89-0.91 with a warm cache, bench/results/costmodel/README.md)
    _calibration_runs(bench, smallest, default)
    # two sizes of R: b x (tuples in H_S) is |R| x w_S in a steady step, so with one |R| the
    # probe's growth with H_S (c_hs) cannot be told from a cost per waiting tuple
    for skew, r_rows in ((0.0, p.r_small), (1.0, p.r_small), (1.0, small)):
        same = (skew, r_rows) == (1.0, small)
        ds = smallest if same else synthetic_dataset(p, r_rows, skew, bench.seed + 1000)
        yield skew, r_rows, _calibration_runs(bench, ds, default)


def _calibration_runs(bench: Bench, ds: Dataset, model: CostModel) -> list[Json]:
    """Each calibration setting (k, chunk) of each algorithm on ``ds``, with its steps recorded."""
    p = bench.p
    runs = []
    for k, chunk in p.calib_configs:
        for algo in ALGORITHMS:
            b = max(1, -(-ds.r_rows // k))
            cfg = RunConfig(algo, b, chunk)
            warm = 3 if algo == "ssbj" else 1
            runs.append(_run(ds, cfg, p, model, record_steps=True, warm_cycles=warm, measure_cycles=p.calib_cycles))
    return runs


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
