"""Driver: a one-shot pyarrow hash join of N stream tuples with R (the hashjoin experiment's data), wall and CPU.

Usage: PYTHONPATH=. python bench/results/bound/hjcache/pyarrow_join.py R_ROWS N_TUPLES
"""

import dataclasses
import sys
import time

from ssbj.bench.harness import PRESETS, synthetic_dataset

r, n = int(sys.argv[1]), int(sys.argv[2])
p = dataclasses.replace(PRESETS["full"])
ds = synthetic_dataset(p, r, 1.0, 0)
stream = ds.rows(n)
master = ds.master.select([ds.master_key, *[c for c in ds.master_columns if c != ds.master_key]])
for threads in (False, True):
    best = (float("inf"), float("inf"))
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        j = stream.join(master, keys=ds.stream_key, right_keys=ds.master_key, join_type="inner", use_threads=threads)
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
        del j
    print(f"threads={threads}: {n / best[0] / 1e6:.2f}M/s wall, {n / best[1] / 1e6:.2f}M/s CPU", flush=True)
