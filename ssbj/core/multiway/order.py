"""Probe order: per-cycle statistics, Holt forecasts and dpPick's cost model (seed 001).

Every ``period`` steps (the paper's optimisation period T) the operator closes a cycle of
statistics per edge: rows probed ``q``, rows with at least one match ``h`` and rows
produced ``s``, so the match rate ``gamma = h / q`` (Eq. 9), the records per match
``mu = s / h`` (Eq. 10) and the key count ``kappa`` of the probed side (Eq. 11: the
distinct keys of a table held whole, the partition keys times partitions of a scanned
one). Their histories are forecast one cycle ahead with Holt's linear-trend smoothing,
damped for the match rate (``phi < 1``), as the paper does; ``smoothing=False`` (the
paper's dpPick_noSmooth ablation) uses the last cycle as it is.

The cost of an order is Eq. 8 with two adaptations to enrichment: every record a match
produces goes on to the next probe (so the rest of the order is paid ``mu`` times, where
the paper's Eq. 8 adds it once), and a left edge passes on its unmatched rows too
(``(1 - gamma)`` times the rest). ``f(kappa) = log2(kappa + 2)`` (Eq. 6: the index is an
ordered array); a scanned master is probed by each of its ``K`` partitions, so its query
cost is ``K * f(kappa / K)``. dpPick finds the cheapest order by dynamic programming over
the set of edges still to probe (the paper's memo of sub-sequence costs), restricted to
orders in which an edge comes after the edge that joins its probing input (chains).

Baselines: ``fixed`` (the initial order throughout), ``greedy`` (MultiStream: the next
probe is the cheapest one by its own query and match cost) and ``selectivity`` (MJoin,
GrubJoin: the next probe is the one producing fewest rows per input row, ``gamma * mu``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ssbj.errors import ConfigError

OrderPolicy = Literal["dppick", "dppick-nosmooth", "fixed", "greedy", "selectivity"]
POLICIES: tuple[str, ...] = ("dppick", "dppick-nosmooth", "fixed", "greedy", "selectivity")


@dataclass
class Holt:
    """Holt's double exponential smoothing, optionally with a damped trend."""

    alpha: float = 0.5
    beta: float = 0.3
    phi: float = 1.0  # 1: linear trend; < 1: damped trend
    level: float | None = None
    trend: float = 0.0
    last: float | None = None
    n: int = 0

    def update(self, x: float) -> None:
        """Add one observation (the trend starts as the first difference)."""
        self.last = x
        self.n += 1
        if self.level is None:
            self.level = x
            return
        if self.n == 2:
            self.trend = x - self.level
            self.level = x
            return
        prev = self.level
        self.level = self.alpha * x + (1 - self.alpha) * (prev + self.phi * self.trend)
        self.trend = self.beta * (self.level - prev) + (1 - self.beta) * self.phi * self.trend

    def forecast(self) -> float | None:
        """Forecast of the next observation (None before any)."""
        if self.level is None:
            return None
        return self.level + self.phi * self.trend


@dataclass
class EdgeStats:
    """Counters of the current cycle and the forecasting state of one edge."""

    q: int = 0
    h: int = 0
    s: int = 0
    kappa: float = 1.0
    gamma: Holt = field(default_factory=lambda: Holt(phi=0.8))
    mu: Holt = field(default_factory=Holt)
    kap: Holt = field(default_factory=Holt)
    cycles: int = 0

    def note(self, q: int, h: int, s: int) -> None:
        """Rows probed, rows matched, rows produced."""
        self.q += q
        self.h += h
        self.s += s

    def close(self) -> None:
        """End of a statistics cycle: feed the smoothers (cycles without probes add nothing)."""
        if self.q > 0:
            self.gamma.update(self.h / self.q)
            self.mu.update(self.s / self.h if self.h else 1.0)
            self.cycles += 1
        self.kap.update(self.kappa)
        self.q = self.h = self.s = 0

    def estimate(self, smoothing: bool) -> tuple[float, float, float]:
        """(gamma, mu, kappa) for the coming cycle."""
        if smoothing:
            g, m, k = self.gamma.forecast(), self.mu.forecast(), self.kap.forecast()
        else:
            g, m, k = self.gamma.last, self.mu.last, self.kap.last
        g = 1.0 if g is None else min(max(g, 0.0), 1.0)
        m = 1.0 if m is None else max(m, 1.0)
        k = self.kappa if k is None else max(k, 1.0)
        return g, m, k


@dataclass(frozen=True)
class EdgeCost:
    """Estimated statistics of one edge for the cost model."""

    gamma: float
    mu: float
    kappa: float
    partitions: int  # K of a scanned master, 1 for one held whole
    left: bool
    alpha_q: float = 1.0
    alpha_m: float = 1.0

    def query(self) -> float:
        """alpha_q * f(kappa) (Eq. 4, 6), summed over the partitions that probe a waiting row."""
        k = max(self.partitions, 1)
        return self.alpha_q * k * math.log2(self.kappa / k + 2.0)

    def match(self) -> float:
        """alpha_m * mu (Eq. 7)."""
        return self.alpha_m * self.mu


def order_cost(order: Sequence[int], costs: Sequence[EdgeCost]) -> float:
    """Eq. 1-3 and 8 (adapted, see the module doc) for one probe order, per input row."""
    c = 0.0
    for e in reversed(order):
        ec = costs[e]
        cont = ec.gamma * ec.mu + ((1.0 - ec.gamma) if ec.left else 0.0)
        c = ec.query() + ec.gamma * ec.match() + cont * c
    return c


def valid(order: Sequence[int], needs: Sequence[int | None]) -> bool:
    """Each edge comes after the edge that joins the input it probes."""
    seen: set[int] = set()
    for e in order:
        n = needs[e]
        if n is not None and n not in seen:
            return False
        seen.add(e)
    return len(seen) == len(needs)


def dp_pick(costs: Sequence[EdgeCost], needs: Sequence[int | None]) -> tuple[int, ...]:
    """Return the cheapest valid order under :func:`order_cost`, by DP over the edges still to probe."""
    n = len(costs)
    memo: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}

    def best(remaining: int) -> tuple[float, tuple[int, ...]]:
        if remaining in memo:
            return memo[remaining]
        done = ((1 << n) - 1) & ~remaining
        result: tuple[float, tuple[int, ...]] = (math.inf, ())
        for e in range(n):
            if not remaining >> e & 1:
                continue
            need = needs[e]
            if need is not None and not done >> need & 1:
                continue
            sub_cost, sub = best(remaining & ~(1 << e))
            ec = costs[e]
            cont = ec.gamma * ec.mu + ((1.0 - ec.gamma) if ec.left else 0.0)
            c = ec.query() + ec.gamma * ec.match() + cont * sub_cost
            if c < result[0]:
                result = (c, (e, *sub))
        memo[remaining] = result
        return result

    return best((1 << n) - 1)[1]


def _step_by_step(costs: Sequence[EdgeCost], needs: Sequence[int | None], key: str) -> tuple[int, ...]:
    order: list[int] = []
    left = set(range(len(costs)))
    while left:
        ready = [e for e in sorted(left) if needs[e] is None or needs[e] in order]
        if key == "greedy":
            e = min(ready, key=lambda e: costs[e].query() + costs[e].gamma * costs[e].match())
        else:
            e = min(ready, key=lambda e: costs[e].gamma * costs[e].mu)
        order.append(e)
        left.discard(e)
    return tuple(order)


def choose(
    policy: str, initial: tuple[int, ...], costs: Sequence[EdgeCost], needs: Sequence[int | None]
) -> tuple[int, ...]:
    """Return the probe order for the coming cycle under ``policy``."""
    if policy == "fixed":
        return initial
    if policy in ("dppick", "dppick-nosmooth"):
        return dp_pick(costs, needs)
    if policy in ("greedy", "selectivity"):
        return _step_by_step(costs, needs, policy)
    raise ConfigError(f"order policy must be one of {POLICIES}, got {policy!r}")
