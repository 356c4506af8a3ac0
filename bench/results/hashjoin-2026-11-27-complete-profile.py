"""Profile of complete-mode steps on the hash-join experiment's data (see hashjoin-2026-11-27-complete.md)."""

import cProfile
import math
import pstats
import time

from ssbj.bench.datasets import synthetic_dataset
from ssbj.bench.presets import PRESETS
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin

p = PRESETS["full"]
n = 250_000
ds = synthetic_dataset(p, n, 1.0, 0)
budget = int(2 * ds.r_bytes)
spec = JoinSpec(
    stream_key=ds.stream_key,
    master_key=ds.master_key,
    master_columns=ds.master_columns,
    chunk_bytes=budget // 16,
    max_step_tuples=p.max_step_tuples,
    memory_budget=budget,
    min_chunk_bytes=max(1, math.ceil(ds.v_s)),
)
op = SemiStreamJoin(spec, ArrowMaster(ds.master, n // 4), ds.rows(1).schema, ds.master.schema)
stream = ds.rows(40 * 1_048_576 // 4)
W = 1_048_576 // 4
i = 0
while not (op.complete and op._p == 0):
    op.push(stream.slice(i * W, W))
    i += 1
    op.step()
print("complete at rc", op.r_cycle, "after steps", i)
pr = cProfile.Profile()
c0 = time.process_time()
tuples = 0
pr.enable()
for _ in range(12):
    op.push(stream.slice(i * W, W))
    i += 1
    r = op.step()
    tuples += r.metrics.w
pr.disable()
cpu = time.process_time() - c0
print("tuples", tuples, "cpu", round(cpu, 3), "rate/cpu-s", round(tuples / cpu))
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
