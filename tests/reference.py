"""Naive batch join used as the oracle: the multiset of (stream row, master row) pairs."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa


def _rows(t: pa.Table) -> list[tuple[Any, ...]]:
    cols = [c.to_pylist() for c in t.columns]
    return list(zip(*cols, strict=True)) if cols else []


def batch_join(stream: pa.Table, master: pa.Table, skey: str, mkey: str, mcols: list[str]) -> Counter[tuple[Any, ...]]:
    """Inner equi-join, NULL keys never match."""
    index: dict[Any, list[tuple[Any, ...]]] = {}
    mk = master.column(mkey).to_pylist()
    mrows = _rows(master.select(mcols))
    for k, r in zip(mk, mrows, strict=True):
        if k is not None:
            index.setdefault(k, []).append(r)
    out: Counter[tuple[Any, ...]] = Counter()
    for row, k in zip(_rows(stream), stream.column(skey).to_pylist(), strict=True):
        if k is None:
            continue
        for r in index.get(k, []):
            out[row + r] += 1
    return out


def as_multiset(t: pa.Table) -> Counter[tuple[Any, ...]]:
    """Rows of a table as a multiset."""
    return Counter(_rows(t))


def unmatched_reference(stream: pa.Table, master: pa.Table, skey: str, mkey: str) -> Counter[tuple[Any, ...]]:
    """Stream rows with no master row (including NULL keys)."""
    keys = {k for k in master.column(mkey).to_pylist() if k is not None}
    out: Counter[tuple[Any, ...]] = Counter()
    for row, k in zip(_rows(stream), stream.column(skey).to_pylist(), strict=True):
        if k is None or k not in keys:
            out[row] += 1
    return out


def bound_n(p: np.ndarray, m: np.ndarray, memory: float, v_s: float, v_r: float) -> float:
    """N solving sum_j min(m_j v_R, N p_j v_S) = M by bisection (plain, independent of the code)."""

    def used(n: float) -> float:
        return float(sum(min(mj * v_r, n * pj * v_s) for pj, mj in zip(p, m, strict=True) if mj > 0))

    if sum(mj * v_r for mj in m if mj > 0) <= memory:
        return math.inf
    lo, hi = 0.0, 1.0
    while used(hi) < memory:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if used(mid) < memory else (lo, mid)
    return hi
