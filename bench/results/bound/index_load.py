"""What the disk phase's probe costs on H_S's value index as it is against one of twice the words.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/index_load.py 0.01 ssbj
    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/index_load.py 0.01 meshjoin

The issue's data at skew 1, stationary, ``frac`` of R, k = 5 (``stepcost_ab.setup``), run
through the harness's own ``_run`` with ``ssbj.core.diskphase.disk_probe`` wrapped: before
each real call, the same call with the statistics off is timed (process CPU time) on the
index as it is, and on an index of twice the words rebuilt from the same heads (half the
load). Prints the summed seconds of both and the calls. The run itself is unchanged.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stepcost_ab import configs, setup

import ssbj.core.diskphase as D
from ssbj.bench.harness import _run
from ssbj.core.hsindex import EMPTY, hs_heads, ix_rebuild

HIX, CAP, HI, MARK, FSM = 2, 5, 7, 8, 9  # disk_probe's argument positions


def main(frac: float, name: str, k: int = 5) -> None:
    """Run ``name`` once and print the probe's seconds on its own index and on one of twice the words."""
    bench, ds, p, budget, _, rows = setup(frac)
    real = D.disk_probe
    acc = {"own_s": 0.0, "twice_the_words_s": 0.0, "calls": 0}

    def wrapped(*a: Any) -> Any:
        plain = list(a)
        plain[FSM], plain[MARK] = -1, False  # no statistics, no flags: the call changes nothing
        t0 = time.process_time()
        real(*plain)
        acc["own_s"] += time.process_time() - t0
        hix = a[HIX]
        wide = np.full(2 * len(hix), EMPTY, dtype=np.uint32)
        ix_rebuild(wide, hs_heads(hix, a[HI], a[CAP]), a[3], a[CAP])
        plain[HIX] = wide
        t0 = time.process_time()
        real(*plain)
        acc["twice_the_words_s"] += time.process_time() - t0
        acc["calls"] += 1
        return real(*a)

    D.disk_probe = wrapped
    b = -(-ds.r_rows // k)
    piece = rows if rows is not None and rows < b else None
    _run(ds, configs(name, b, budget, piece, 0.0, ds.v_s), p, bench.model())
    print(name, {key: round(v, 3) if isinstance(v, float) else v for key, v in acc.items()})


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
