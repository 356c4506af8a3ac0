"""A budget overrun at SSBJ's first large switch-in (found at the end of stop 28, fixed the day after).

Usage (from the repository root; ``PYTHONPATH`` selects the code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/switchin_peak.py K FRACTION

R = 400k rows over 100k join values (about 4 rows a value), a Zipf-1 stream of 2M tuples,
b = |R| / K, a budget of FRACTION of R's projected bytes; SSBJ's defaults (pipelined FSM).
Runs up to 8 R-cycles and prints the step whose memory was the largest share of the
budget, with its components.

Measured at FRACTION 0.3, peak / budget for K = 36 / 100 / 600 / 1250:

* before (f10acd9: s_B's reserve the largest s_B seen, the rebuild's the largest rebuild
  seen): 1.051 / 1.082 / 1.117 / 1.12, at the end of the first switching R-cycle or at the
  next R-cycle start;
* after (ssbj/core/switchroom.py: the coming switch-in predicted, reserved an R-cycle
  ahead and bounded): 0.987 / 0.995 / 0.980 / 0.973, all in R-cycle 1.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.rowsize import row_nbytes

PARTS = ("h_s", "h_r", "disk_buffer", "key_table", "switching_buffer", "transient", "queue")


def main() -> None:
    """Run one configuration and print its peak step."""
    k, frac = int(sys.argv[1]), float(sys.argv[2])
    n_master, n_stream = 400_000, 2_000_000
    rng = np.random.default_rng(3)
    n_keys = n_master // 4
    master = pa.table(
        {
            "mid": np.arange(n_master, dtype=np.int64),
            "mk": rng.integers(0, n_keys, n_master),
            "attr": rng.integers(0, 100, n_master),
        }
    )
    p = 1.0 / np.arange(1, n_keys + 1)
    p /= p.sum()
    keys = rng.permutation(n_keys)[rng.choice(n_keys, n_stream, p=p)]
    stream = pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": keys, "amt": rng.random(n_stream)})
    budget = int(frac * float(row_nbytes(master.select(["mk", "mid", "attr"])).sum()))
    spec = JoinSpec("sk", "mk", ("mid", "attr"), memory_budget=budget, chunk_bytes=max(1, budget // 16))
    op = SemiStreamJoin(spec, ArrowMaster(master, -(-n_master // k)), stream.schema, master.schema)
    peak: tuple[float, Any] = (0.0, None)
    for batch in stream.to_batches(max_chunksize=20_000):
        op.push(batch)
        while op.buffered_tuples:
            m = op.step().metrics
            share = m.memory.total / budget
            if m.step > 0 and share > peak[0]:
                peak = (share, (m.r_cycle, m.partition, m.memory.to_dict()))
        if op.totals()["r_cycles"] > 8:
            break
    share, (rc, part, mem) = peak
    print(f"k {k} budget {budget:,} peak/budget {share:.4f} at R-cycle {rc}, partition {part}")
    print({name: mem[name] for name in PARTS}, f"cache share {op.totals()['cache_share']:.2f}")


if __name__ == "__main__":
    main()
