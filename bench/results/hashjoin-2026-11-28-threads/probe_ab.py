"""A/B of the complete cache's probe: one lookup after the other (commit 2fe94ab) against groups of 32 (now).

Usage (from the repository root, in a git checkout):

    PYTHONPATH=$PWD .venv/bin/python bench/results/hashjoin-2026-11-28-threads/probe_ab.py

Runs the hashjoin bench's data (|R| = 1M, skew 1, budget 2x R) until the cache is complete,
then times both kernels on the same H_R index and 6.3M stream tuples, five repetitions
interleaved, and checks that their outputs are equal.
"""

from __future__ import annotations

import math
import subprocess
import time
from typing import Any

import numpy as np
from numba import njit

from ssbj.bench.datasets import synthetic_dataset
from ssbj.bench.presets import PRESETS
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core import complete as CC

OLD = "2fe94ab"


def old_probe() -> Any:
    """``complete_probe`` as it was at commit OLD, compiled here."""
    cmd = ["git", "show", f"{OLD}:ssbj/core/complete.py"]
    src = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout  # noqa: S603 - git, fixed args
    lines = src.splitlines()
    start = lines.index("def complete_probe(")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("    return limit - start"))
    ns: dict[str, Any] = {**vars(CC), "njit": njit}
    exec("\n".join(["@njit(nogil=True)", *lines[start : end + 1]]), ns)  # noqa: S102 - our own code
    return ns["complete_probe"]


def main() -> None:
    """Reach the complete cache, then time both kernels."""
    p = PRESETS["full"]
    n = 1_000_000
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
    w = 1_048_576 // 4
    i = 0
    while not (op.complete and op._p == 0):
        op.push(stream.slice(i * w, w))
        i += 1
        op.step()
    ix = op.cache.index
    keys = stream.column(ds.stream_key).to_numpy()[i * w :].astype(np.int64).copy()
    valid = np.zeros(0, np.bool_)
    old, new = old_probe(), CC.complete_probe
    args = (ix.keys, ix.used, ix.payload, keys, valid, 0)
    a, b = old(*args, len(keys)), new(*args, len(keys))
    arrays = zip(a[1:3] + a[4:], b[1:3] + b[4:], strict=True)
    same = a[0] == b[0] and a[3] == b[3] and all(np.array_equal(x, y) for x, y in arrays)
    times: dict[str, list[float]] = {"one by one": [], "groups of 32": []}
    for _ in range(5):
        for name, f in (("one by one", old), ("groups of 32", new)):
            t0 = time.perf_counter()
            f(*args, len(keys))
            times[name].append(time.perf_counter() - t0)
    print(f"H_R values {op.cache.values:,}, index slots {ix.keys.shape[0]:,}, tuples {len(keys):,}")
    print(f"same output: {same}")
    for name, ts in times.items():
        print(f"{name}: {min(ts) / len(keys) * 1e9:.1f} ns a tuple (best of 5; all: {[round(t, 4) for t in ts]})")


if __name__ == "__main__":
    main()
