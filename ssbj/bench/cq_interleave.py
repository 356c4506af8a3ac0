"""Per-change cost of Q7's engine at two scale factors, interleaved, with the same update mix at both.

    python -m ssbj.bench.cq_interleave DATA_DIR [SF ...]

The ``cq`` experiment's streams carry fewer customer moves per change at SF 0.1 (it caps
moves at half the customers, and its long update stream passes that cap at SF 0.1); here
each scale factor's stream has 140k update changes, below the cap at SF 0.1 and 1, so a
change does the same kind of work at both.  Loads each scale factor in one batch, then
runs :func:`ssbj.bench.exp_cq._interleaved` (40 batches of 1k, 10 of 10k, in turns) and
prints its JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ssbj.bench.exp_cq import EXAMPLES, _interleaved, build_stream, tpch_q7_data
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema

CFG: dict[str, Any] = {"interleave": {1_000: 40, 10_000: 10}}


class _Log:
    def log(self, msg: str) -> None:
        print(msg, flush=True)


def main() -> None:
    """Load the scale factors, interleave their update batches, print the result."""
    data_dir = Path(sys.argv[1])
    sfs = tuple(float(a) for a in sys.argv[2:]) or (0.1, 1.0)
    plan = plan_query((EXAMPLES / "q7.sql").read_text(), parse_schema((EXAMPLES / "tpch_schema.sql").read_text()))
    updates = sum(b * n for b, n in CFG["interleave"].items())
    live = []
    for sf in sfs:
        data = tpch_q7_data(sf, data_dir / f"tpch-q7-sf{sf:g}")
        stream, n_load = build_stream(data, updates, np.random.default_rng(0))
        cq = ContinuousQuery(plan)
        t0 = time.process_time()
        cq.apply(stream.frames(0, n_load))
        print(f"sf {sf:g}: loaded {n_load:,} in {time.process_time() - t0:.1f} s CPU", flush=True)
        live.append((cq, stream, n_load))
    print(json.dumps(_interleaved(_Log(), CFG, sfs, live)))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
