"""The memory-optimal bound of Theorem 1, computed on actual data.

With memory ``M`` and ``N`` stream tuples arriving per R-cycle, join value ``j`` (stream
probability ``p_j``, ``m_j`` master rows) costs ``m_j * v_R`` in the cache and
``N * p_j * v_S`` in the disk phase. Theorem 1 places every value where it costs less,
so SSBJ can hold the largest ``N`` with

    sum_j min(m_j * v_R, N * p_j * v_S) = M

while MESHJOIN holds ``N = M / v_S``. At the same R-cycle time the service rates are in
the ratio of the two ``N``. Values with ``m_j = 0`` cost nothing (an empty cache entry is
taken as free, as in the paper's analysis) and values absent from the stream hold
nothing. When every value with master rows fits in ``M`` the bound is unlimited: SSBJ is
then a main-memory hash join (Theorem 3).

Assumptions, as in the paper: a stationary stream whose join values are i.i.d. with
probabilities ``p_j``; hash tables linear in their tuples with no per-entry overhead; the
disk buffer, queue and statistics not counted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ssbj.core.costmodel import CostModel, MemoryPlan, plan_memory
from ssbj.errors import ConfigError


@dataclass(frozen=True)
class KeyDistribution:
    """Per join value of the stream: its probability ``p`` and its master row count ``m``."""

    p: np.ndarray  # float64, sums to 1 over the stream's values
    m: np.ndarray  # int64
    stream_rows: int
    master_rows: int

    @property
    def values(self) -> int:
        """Distinct join values in the stream."""
        return len(self.p)


def key_distribution(stream_keys: np.ndarray, master_keys: np.ndarray) -> KeyDistribution:
    """Empirical ``p_j`` of the stream's (non-NULL, encoded) keys and ``m_j`` from R's keys."""
    s_vals, s_counts = np.unique(np.asarray(stream_keys, dtype=np.int64), return_counts=True)
    m_vals, m_counts = np.unique(np.asarray(master_keys, dtype=np.int64), return_counts=True)
    pos = np.searchsorted(m_vals, s_vals)
    pos_ok = np.minimum(pos, max(len(m_vals) - 1, 0))
    hit = (pos < len(m_vals)) & (m_vals[pos_ok] == s_vals) if len(m_vals) else np.zeros(len(s_vals), bool)
    m = np.where(hit, m_counts[pos_ok] if len(m_vals) else 0, 0).astype(np.int64)
    total = int(s_counts.sum())
    p = s_counts / max(total, 1)
    return KeyDistribution(p=p.astype(np.float64), m=m, stream_rows=total, master_rows=len(master_keys))


@dataclass(frozen=True)
class Bound:
    """Theorem 1 at memory ``memory``: SSBJ's ``N`` against MESHJOIN's ``M / v_S``."""

    memory: float
    v_s: float
    v_r: float
    n_ssbj: float  # stream tuples per R-cycle SSBJ can hold (inf: all of R fits)
    n_meshjoin: float  # M / v_S
    ratio: float  # n_ssbj / n_meshjoin (inf when all of R fits)
    cache_share: float  # share of stream tuples whose value is cached (empty entries included)
    cached_values: int
    cache_bytes: float  # sum of m_j * v_R over cached values
    disk_bytes: float  # N * v_S * (share of tuples left to the disk phase)
    all_of_r_fits: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (infinities as None)."""
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Overheads:
    """What real structures add to Theorem 1's costs (all 0: the theorem itself).

    ``o_s``: bytes per waiting tuple beyond ``v_S``; ``o_r``: per cached row beyond
    ``v_R``; ``e_r``: per cached value with rows (its index entry); ``e_e``: per cached
    value without rows (an empty entry); ``fixed``: bytes taken before anything is held
    (the disk buffer, the statistics).
    """

    o_s: float = 0.0
    o_r: float = 0.0
    e_r: float = 0.0
    e_e: float = 0.0
    fixed: float = 0.0


def memory_optimal_bound(
    dist: KeyDistribution, memory: float, v_s: float, v_r: float, overheads: Overheads | None = None
) -> Bound:
    """Solve ``sum_j min(c_j, N p_j v_S) = M`` for N exactly (piecewise linear in N).

    ``c_j = m_j v_R`` for values with master rows and 0 for values without (Theorem 1).
    With ``overheads``, ``c_j = m_j (v_R + o_r) + e_r`` (``e_e`` without rows), a tuple
    costs ``v_S + o_s``, and both algorithms have ``M - fixed``: what an exact per-value
    cache with those entry sizes could reach at best, against MESHJOIN with the same
    per-tuple bytes.
    """
    if memory <= 0 or v_s <= 0 or v_r <= 0:
        raise ConfigError(f"memory, v_S and v_R must be > 0 (got {memory}, {v_s}, {v_r})")
    o = overheads or Overheads()
    avail = memory - o.fixed
    if avail <= 0:
        raise ConfigError(f"fixed overheads of {o.fixed:.0f} bytes leave nothing of {memory:.0f}")
    vs = v_s + o.o_s
    sel = dist.p > 0
    ps, ms = dist.p[sel], dist.m[sel].astype(np.float64)
    c = np.where(ms > 0, ms * (v_r + o.o_r) + o.e_r, o.e_e)
    n_mesh = avail / vs
    cache_all = float(c.sum())
    if cache_all <= avail:
        return Bound(memory, v_s, v_r, math.inf, n_mesh, math.inf, 1.0, int((ms > 0).sum()), cache_all, 0.0, True)
    # value j is cached once N >= t_j = c_j / (p_j v_S); sort by that threshold
    t = c / (ps * vs)
    order = np.argsort(t, kind="stable")
    t, ps, ms, c = t[order], ps[order], ms[order], c[order]
    cached_bytes = np.concatenate([[0.0], np.cumsum(c)])  # first i values cached
    tail_p = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])  # p of values i.. (disk phase)
    # f(N) with the first i values cached holds for N in [t_{i-1}, t_i]; f(t_i) with i cached:
    f_at_t = cached_bytes[:-1] + t * vs * tail_p[:-1]
    i = int(np.searchsorted(f_at_t, avail, side="left"))  # values 0..i-1 cached
    n = (avail - cached_bytes[i]) / (vs * tail_p[i]) if tail_p[i] > 0 else math.inf
    return Bound(
        memory=memory,
        v_s=v_s,
        v_r=v_r,
        n_ssbj=n,
        n_meshjoin=n_mesh,
        ratio=n / n_mesh,
        cache_share=float(ps[:i].sum()),
        cached_values=int((ms[:i] > 0).sum()),
        cache_bytes=float(cached_bytes[i]),
        disk_bytes=float(n * vs * tail_p[i]),
        all_of_r_fits=False,
    )


@dataclass(frozen=True)
class Advice:
    """What SSBJ can buy on given data at a budget: the bound and the cost model's prediction."""

    bound: Bound
    partition_rows: int  # b the planner picks
    partitions: int
    predicted_meshjoin_rate: float  # tuples/s (Eq. 3 at MESHJOIN's plan)
    predicted_ssbj_rate: float  # tuples/s at the bound's cache share, H_S getting what H_R leaves
    predicted_ratio: float
    target_rate: float | None = None
    recommended_budget: float | None = None  # smallest budget whose predicted SSBJ rate meets the target

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        d = {k: v for k, v in asdict(self).items() if k != "bound"}
        d["bound"] = self.bound.to_dict()
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}


def _predict(
    dist: KeyDistribution,
    memory: float,
    v_s: float,
    v_r: float,
    model: CostModel,
    chunked: bool = False,
    resident: bool = False,
) -> tuple[Bound, MemoryPlan, float]:
    """Return (bound, MESHJOIN's plan, SSBJ's predicted rate) at ``memory`` bytes."""
    bound = memory_optimal_bound(dist, memory, v_s, v_r)
    mesh = plan_memory(int(memory), dist.master_rows, v_s, v_r, model, chunked=chunked, resident=resident)
    share, left = (1.0 if bound.all_of_r_fits else bound.cache_share), memory - bound.cache_bytes
    try:
        ssbj = plan_memory(
            int(max(left, 1)),
            dist.master_rows,
            v_s,
            v_r,
            model,
            cache_share=min(share, 0.999),
            chunked=chunked,
            resident=resident,
        )
        rate = ssbj.predicted_service_rate
    except ConfigError:  # H_R leaves no room for a disk buffer: MESHJOIN's own plan is the floor
        rate = mesh.predicted_service_rate
    return bound, mesh, max(rate, mesh.predicted_service_rate)


def advise(
    dist: KeyDistribution,
    memory: float,
    v_s: float,
    v_r: float,
    model: CostModel,
    target_rate: float | None = None,
    chunked: bool = False,
    resident: bool = False,
) -> Advice:
    """Return the bound at ``memory``, the predicted rates, and the budget a ``target_rate`` needs.

    The SSBJ prediction plans H_S with what the bound's cache leaves and the bound's cache
    share (Eq. 1-3 with the structures' real sizes); it is an upper estimate, as the bound
    is. The recommended budget is found by bisection on that prediction (it grows with
    the budget), between one disk-buffer row and twice R's bytes. ``chunked``: plan as for
    a master handed out in pieces (``plan_memory``), as ``ssbj join`` reads its in-memory one;
    ``resident``: its pieces are views probed in one pass and cost no time.
    """
    bound, mesh, rate = _predict(dist, memory, v_s, v_r, model, chunked, resident)
    rec: float | None = None
    if target_rate is not None and target_rate > 0:
        lo, hi = 1024.0, max(2.0 * dist.master_rows * v_r, 1 << 20)
        try:
            ok_hi = _predict(dist, hi, v_s, v_r, model, chunked, resident)[2] >= target_rate
        except ConfigError:
            ok_hi = False
        if ok_hi:
            for _ in range(40):
                mid = math.sqrt(lo * hi)
                try:
                    ok = _predict(dist, mid, v_s, v_r, model, chunked, resident)[2] >= target_rate
                except ConfigError:
                    ok = False
                lo, hi = (lo, mid) if ok else (mid, hi)
                if hi / lo < 1.01:
                    break
            rec = hi
    return Advice(
        bound=bound,
        partition_rows=mesh.partition_rows,
        partitions=mesh.partitions,
        predicted_meshjoin_rate=mesh.predicted_service_rate,
        predicted_ssbj_rate=rate,
        predicted_ratio=rate / mesh.predicted_service_rate if mesh.predicted_service_rate else math.nan,
        target_rate=target_rate,
        recommended_budget=rec,
    )
