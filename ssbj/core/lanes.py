"""Worker threads for slices of one call (``JoinSpec.threads``).

The compiled kernels are numba ``nogil`` and pyarrow's take releases the GIL, so the
slices of one call (a range of stream tuples) run on several cores at once. A slice's
worker computes and returns; the calling thread merges the results in slice order, so
no counter or structure is written from two threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

MIN_SLICE = 4096  # tuples per slice at least: below this a thread's hand-off costs more than it saves

_POOLS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per worker count for the process: operators share it (a slice never waits on another)."""
    with _LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ssbj-lane")
        return pool


def slices(start: int, n: int, threads: int, min_slice: int | None = None) -> list[tuple[int, int]]:
    """Split ``n`` tuples from ``start`` into at most ``threads`` (start, length) slices of >= ``min_slice``."""
    if n <= 0:
        return []
    least = MIN_SLICE if min_slice is None else min_slice
    parts = max(1, min(threads, n // max(least, 1)))
    base, extra = divmod(n, parts)
    out = []
    at = start
    for i in range(parts):
        ln = base + (1 if i < extra else 0)
        out.append((at, ln))
        at += ln
    return out


def run(fn: Callable[[int, int], T], parts: list[tuple[int, int]]) -> list[T]:
    """``fn(start, length)`` for every slice, the first on the calling thread; results in slice order."""
    if len(parts) <= 1:
        return [fn(s, n) for s, n in parts]
    pool = _pool(len(parts) - 1)
    futures: list[Future[T]] = [pool.submit(fn, s, n) for s, n in parts[1:]]
    try:
        first = fn(*parts[0])
    except BaseException:
        for f in futures:  # no slice outlives the call
            f.exception()
        raise
    return [first, *(f.result() for f in futures)]
