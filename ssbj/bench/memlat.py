"""Memory latency by working-set size: a dependent random walk (pointer chase) over an array of n bytes.

What grows with a continuous query's state is the cost of a random access, not the work
per change; this measures that cost on the machine the benchmark runs on, for the state
sizes it has (no hardware counters are needed: the VMs it runs on expose none).
"""

from __future__ import annotations

import time

import numpy as np

from ssbj.core.jit import njit


@njit(cache=True)
def _chase(nxt: np.ndarray, steps: int) -> int:  # pragma: no cover - compiled
    i = 0
    for _ in range(steps):
        i = nxt[i]
    return i


def chase_ns(nbytes: int, steps: int = 2_000_000, seed: int = 0) -> float:
    """CPU nanoseconds per step of a walk through one random cycle over ``nbytes`` of int64 (a dependent load each)."""
    n = max(2, nbytes // 8)
    perm = np.random.default_rng(seed).permutation(n)
    nxt = np.empty(n, np.int64)
    nxt[perm] = np.roll(perm, -1)  # one cycle through every element, in random order
    _chase(nxt, 1000)  # compile, warm the page tables
    t0 = time.process_time()  # CPU time: a stalled load counts, a descheduled process does not
    _chase(nxt, steps)
    return 1e9 * (time.process_time() - t0) / steps
