"""Eq. 2's fit, as shipped and with SSBJ-only terms, judged on the same Fig. 6c/d steps.

Usage (from the repository root):

    PYTHONPATH=$PWD .venv/bin/python bench/results/costmodel/fit_variants.py collect OUT.npz
    PYTHONPATH=$PWD .venv/bin/python bench/results/costmodel/fit_variants.py eval OUT.npz [...]

``collect`` runs what ``exp_calibration`` runs (the unmeasured pass, then every setting on
the three data sets) and Fig. 6c/d's two skews at b = 14,492 (the committed runs' plan),
and saves every measured step with its algorithm. ``eval`` fits each variant on the
calibration's steps and prints the median signed (absolute) relative error of its
prediction of Fig. 6c/d's steps, per algorithm and skew: the same steps for every variant,
so the comparison does not depend on the machine's state between runs.

Variants: ``shipped`` (:func:`ssbj.core.costmodel.calibrate`), ``ls`` (the same least
squares without the split into Table 1's constants: must print the same errors), ``ssbj``
(plus a fixed cost per SSBJ step and a cost per master row of an SSBJ step), ``ssbj_b``
(only the latter), ``separate`` (one fit per algorithm).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ssbj.bench.harness import PRESETS, Bench, RunConfig, calibration_sets
from ssbj.bench.run import ALGORITHMS
from ssbj.core.costmodel import CostModel, StepCost, calibrate

# columns: skew, |R|, is SSBJ, b, w_N, w_S, output rows, tuples in H_S, measured seconds
SKEW, R_ROWS, IS_SSBJ, B, W_N, W_S, OUT, HS, SECONDS = range(9)
FIG6CD_B = 14_492


def _rows(runs: list[dict[str, Any]], algos: list[str], skew: float, r_rows: int) -> list[list[float]]:
    return [
        [skew, r_rows, float(a == "ssbj"), s["b"], s["w_n"], s["w_s"], s["output_rows"], s["hs"], s["c_loop_measured"]]
        for r, a in zip(runs, algos, strict=True)
        for s in r["steps"]
    ]


def collect(out: str) -> None:
    """Measure the calibration's and Fig. 6c/d's steps in one process; save them to ``out``."""
    p = PRESETS["full"]
    bench = Bench(p, Path(tempfile.gettempdir()), 0, lambda m: print(m, file=sys.stderr))
    algos = [a for _ in p.calib_configs for a in ALGORITHMS]
    cal: list[list[float]] = []
    for skew, r_rows, runs in calibration_sets(bench):  # exp_calibration's runs
        cal += _rows(runs, algos, skew, r_rows)
    val: list[list[float]] = []
    for skew in (0.0, 1.0):
        ds = bench.synthetic(p.r_small, skew)
        budget = int(p.cost_mem_frac * ds.r_bytes)
        cfgs = [RunConfig(a, FIG6CD_B, max(1, budget // 16), budget) for a in ALGORITHMS]
        val += _rows(bench.runs(ds, cfgs, record_steps=True), list(ALGORITHMS), skew, p.r_small)
        bench.forget_data()
    np.savez(out, cal=np.array(cal), val=np.array(val))


def _features(a: np.ndarray, variant: str) -> np.ndarray:
    b = a[:, B]
    cols = [np.ones_like(b), b, a[:, W_N], a[:, W_S], a[:, OUT], 1e-6 * b * a[:, HS]]
    if variant == "ssbj":
        cols += [a[:, IS_SSBJ], a[:, IS_SSBJ] * b]
    elif variant == "ssbj_b":
        cols += [a[:, IS_SSBJ] * b]
    return np.stack(cols, 1)


def _fit(cal: np.ndarray, variant: str) -> np.ndarray:
    """Relative least squares, as :func:`calibrate` (ns)."""
    y = cal[:, SECONDS] * 1e9
    w = 1.0 / np.maximum(y, 1.0)
    coef, *_ = np.linalg.lstsq(_features(cal, variant) * w[:, None], y * w, rcond=None)
    return np.maximum(coef, 0.0)


def _report(name: str, predict: Any, val: np.ndarray) -> None:
    cells = []
    for skew in (0.0, 1.0):
        for is_ssbj in (1.0, 0.0):
            v = val[(val[:, SKEW] == skew) & (val[:, IS_SSBJ] == is_ssbj)]
            rel = (predict(v) - v[:, SECONDS] * 1e9) / (v[:, SECONDS] * 1e9)
            label = "SSBJ" if is_ssbj else "MESHJOIN"
            cells.append(f"{label} skew {skew:g} {np.median(rel):+.0%} ({np.median(np.abs(rel)):.0%})")
    print(f"  {name:9s}", " | ".join(cells))


def evaluate(paths: list[str]) -> None:
    """Print each variant's errors on each saved collection."""
    for path in paths:
        d = np.load(path)
        cal, val = d["cal"], d["val"]
        print(f"{path}: {len(cal)} calibration steps, {len(val)} Fig. 6c/d steps")
        model = CostModel(calibrate([(_step(r), float(r[SECONDS])) for r in cal]))
        _report("shipped", lambda v, m=model: np.array([1e9 * m.c_loop(_step(r)) for r in v]), val)
        for variant in ("ls", "ssbj", "ssbj_b"):
            c = _fit(cal, variant)
            _report(variant, lambda v, c=c, variant=variant: _features(v, variant) @ c, val)
            print(f"  {'':9s} coefficients (ns): {np.round(c, 1).tolist()}")
        per = {s: _fit(cal[cal[:, IS_SSBJ] == s], "ls") for s in (0.0, 1.0)}
        sep = {s: (lambda v, c=c: _features(v, "ls") @ c) for s, c in per.items()}
        _report("separate", lambda v, sep=sep: sep[float(v[0, IS_SSBJ])](v), val)


def _step(r: np.ndarray) -> StepCost:
    return StepCost(int(r[B]), int(r[W_N]), int(r[W_S]), int(r[OUT]), int(r[HS]))


if __name__ == "__main__":
    if sys.argv[1] == "collect":
        collect(sys.argv[2])
    else:
        evaluate(sys.argv[2:])
