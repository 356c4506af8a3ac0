"""Cost of refreshing cached rows from the disk-phase scan, measured against the same run without it.

    .venv/bin/python bench/refresh_overhead_bench.py

SSBJ over 200k master rows (b = 20k), 4M stream tuples with Zipf 1.2 keys, 100k per batch;
rounds alternate with refresh on and off (``SemiStreamJoin._refresh_hr`` replaced by a no-op),
after one unmeasured warm-up run (numba compilation). Output must be identical either way,
since the master rows do not change.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pyarrow as pa

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin

ORIGINAL = SemiStreamJoin._refresh_hr


def run(stream: pa.Table, master: pa.Table, refresh: bool) -> tuple[float, float, int]:
    """Return (seconds, cache share, enriched rows) of one run."""
    SemiStreamJoin._refresh_hr = ORIGINAL if refresh else (lambda self, p, part, mk: None)  # type: ignore[method-assign]
    spec = JoinSpec(stream_key="k", master_key="k", chunk_bytes=16 * 50_000)
    op = SemiStreamJoin(spec, ArrowMaster(master, 20_000), stream.schema, master.schema)
    t = time.perf_counter()
    n = 0
    for i in range(0, stream.num_rows, 100_000):
        op.push(stream.slice(i, 100_000))
        while op.buffered_tuples:
            n += op.step().enriched.num_rows
    for r in op.drain():
        n += r.enriched.num_rows
    return time.perf_counter() - t, float(op.totals()["cache_share"]), n


def main() -> int:
    """Interleave runs with and without refresh; print the median ratio."""
    rng = np.random.default_rng(0)
    r_t = 200_000
    master = pa.table({"k": np.arange(r_t, dtype=np.int64), "v": rng.integers(0, 1000, r_t)})
    keys = (rng.zipf(1.2, 4_000_000) - 1) % r_t
    stream = pa.table({"id": np.arange(len(keys)), "k": keys.astype(np.int64)})
    run(stream, master, True)  # warm-up: numba compilation
    on, off = [], []
    for _ in range(3):
        a, share, n_on = run(stream, master, True)
        b, _, n_off = run(stream, master, False)
        if n_on != n_off:
            raise SystemExit(f"output differs: {n_on} rows with refresh, {n_off} without")
        on.append(a)
        off.append(b)
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"cache share {share:.2f}; refresh on {m_on:.2f} s, off {m_off:.2f} s (medians of 3); {m_on / m_off:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
