"""MESHJOIN's step time at a fixed b over H_S sizes: the probe's cost per master row grows with H_S.

Eq. 2 charges every master row of a partition c_h, whatever H_S holds. This driver runs
MESHJOIN with fixed chunks (no budget) on the calibration's kind of data (the synthetic data
set at |R| = r_small of the full preset, skew 1), at two b and several w, and prints the
median measured c_loop, Eq. 2's prediction with the committed calibration
(bench/results/calibration.json), and the measured time per master row once the prediction's
other terms (c_fixed, the tuples, the outputs) are taken off.

    PYTHONPATH=$PWD .venv/bin/python bench/results/costmodel/hs_probe.py [REPS]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from ssbj.bench.harness import Bench, RunConfig, _run
from ssbj.bench.presets import PRESETS
from ssbj.core import CostConstants, CostModel

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = ((69, 64), (69, 256), (69, 1525), (69, 4000), (16, 256), (16, 1525), (16, 6000))  # (k, w)


def main() -> None:
    """Print the table (markdown) for REPS repetitions of each setting."""
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    consts = CostConstants.load(ROOT / "bench/results/calibration.json")
    model = CostModel(consts)
    bench = Bench(PRESETS["full"], Path(tempfile.mkdtemp(prefix="hs_probe")))
    p = bench.p
    ds = bench.synthetic(p.r_small, 1.0)
    print(f"c_h = {consts.c_h:.1f} ns, c_fixed = {consts.c_fixed / 1e3:.0f} us (calibration.json)")
    print("| k | b | w_S | tuples in H_S (w_S k) | measured c_loop | Eq. 2 | measured / Eq. 2 | ns per master row |")
    print("|---|---|---|---|---|---|---|---|")
    for k, w in SETTINGS:
        b = -(-ds.r_rows // k)
        meas, pred, ws = [], [], []
        for _ in range(reps):
            r = _run(
                ds,
                RunConfig("meshjoin", b, int(w * ds.v_s)),
                p,
                model,
                record_steps=True,
                warm_cycles=1,
                measure_cycles=2,
            )
            st = [s for s in r["steps"] if s["b"] == b]
            meas.append(np.median([s["c_loop_measured"] for s in st]))
            pred.append(np.median([s["c_loop_predicted"] for s in st]))
            ws.append(np.mean([s["w_s"] for s in st]))
        m, q, x = float(np.median(meas)), float(np.median(pred)), float(np.mean(ws))
        # the rest of the step priced by Eq. 2 (its probe term, c_h and c_hs at this H_S, taken out)
        probe = b * (consts.c_h + 1e-6 * x * k * consts.c_hs) * 1e-9
        per_row = (m - (q - probe)) * 1e9 / b
        row = [f"{k}", f"{b:,}", f"{x:,.0f}", f"{x * k:,.0f}", f"{m * 1e3:.3f} ms", f"{q * 1e3:.3f} ms"]
        print("| " + " | ".join([*row, f"{m / q:.2f}", f"{per_row:.1f}"]) + " |", flush=True)


if __name__ == "__main__":
    main()
