"""When the hash-join experiment's operator enters the complete cache (see hashjoin-2026-11-27-complete.md)."""

import math
import time

from ssbj.bench.datasets import synthetic_dataset
from ssbj.bench.presets import PRESETS
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin

p = PRESETS["full"] if isinstance(PRESETS, dict) else next(x for x in PRESETS if x.name == "full")
ds = synthetic_dataset(p, 1_000_000, 1.0, 0)
spec = JoinSpec(
    stream_key=ds.stream_key,
    master_key=ds.master_key,
    master_columns=ds.master_columns,
    chunk_bytes=14_000_000,
    max_step_tuples=p.max_step_tuples,
    memory_budget=224_000_000,
    min_chunk_bytes=max(1, math.ceil(ds.v_s)),
)
op = SemiStreamJoin(spec, ArrowMaster(ds.master, 250_000), ds.rows(1).schema, ds.master.schema)
stream = ds.rows(16 * 1_048_576)
i = 0
t0 = time.process_time()
while op.r_cycle < 9 and not (op.complete and op._p == 0 and op.r_cycle >= 4):
    seg = stream.slice(i * 1_048_576, 1_048_576)
    op.push(seg)
    i += 1
    r = op.step()
    m = r.metrics
    print(
        m.step,
        m.r_cycle,
        m.fsm_state,
        "mem/budget %.3f" % (m.memory.total / 224e6),
        "transient",
        m.memory.transient,
        {k: v for k, v in op._c.extra.items() if "take" in k or "complete_e" in k},
        flush=True,
    )
