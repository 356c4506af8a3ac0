"""Theorem 1's memory-optimal bound against a plain bisection, and the advice built on it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import bound_n as reference_n

from ssbj.core import CostModel
from ssbj.core.bound import Overheads, advise, key_distribution, memory_optimal_bound


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 50), min_size=1, max_size=30),
    ms=st.lists(st.integers(0, 5), min_size=30, max_size=30),
    memory=st.floats(50, 5_000),
)
def test_bound_matches_bisection(counts: list[int], ms: list[int], memory: float) -> None:
    stream = np.repeat(np.arange(len(counts)), counts)
    master = np.repeat(np.arange(len(counts)), ms[: len(counts)])
    dist = key_distribution(stream, master)
    b = memory_optimal_bound(dist, memory, 32.0, 36.0)
    ref = reference_n(dist.p, dist.m, memory, 32.0, 36.0)
    if math.isinf(ref):
        assert b.all_of_r_fits and math.isinf(b.n_ssbj)
    else:
        assert b.n_ssbj == pytest.approx(ref, rel=1e-6)
        assert b.ratio == pytest.approx(ref / (memory / 32.0), rel=1e-6)
        assert b.cache_bytes + b.disk_bytes == pytest.approx(memory, rel=1e-6)


def test_values_without_master_rows_cost_nothing_and_count_as_cached() -> None:
    # half the stream has no master rows: the bound serves it from (free) empty entries
    stream = np.array([1] * 50 + [2] * 50)
    master = np.array([1] * 100)  # value 1: 100 rows, too many to cache at this memory
    b = memory_optimal_bound(key_distribution(stream, master), 320.0, 32.0, 36.0)
    assert b.cache_share == pytest.approx(0.5)
    assert b.ratio == pytest.approx(2.0)  # only value 1's half of the stream holds memory


def test_advice_predicts_ssbj_at_least_meshjoin_and_a_budget_for_a_target() -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    master = rng.integers(0, n, n)
    p = 1 / np.arange(1, n + 1)
    stream = rng.choice(n, 200_000, p=p / p.sum())
    dist = key_distribution(stream, master)
    model = CostModel()
    adv = advise(dist, 100_000, 32.0, 36.0, model, target_rate=None)
    assert adv.predicted_ssbj_rate >= adv.predicted_meshjoin_rate
    target = 2 * adv.predicted_ssbj_rate
    rec = advise(dist, 100_000, 32.0, 36.0, model, target_rate=target).recommended_budget
    assert rec is not None and rec > 100_000
    assert advise(dist, rec, 32.0, 36.0, model).predicted_ssbj_rate >= target


def test_overheads_make_entries_cost_and_match_a_plain_bisection() -> None:
    rng = np.random.default_rng(2)
    n = 400
    master = rng.integers(0, n, n)
    p = 1 / np.arange(1, n + 1)
    stream = rng.choice(n, 20_000, p=p / p.sum())
    dist = key_distribution(stream, master)
    ov = Overheads(o_s=12.0, o_r=4.0, e_r=40.0, e_e=18.0, fixed=500.0)
    memory = 3_000.0
    b = memory_optimal_bound(dist, memory, 32.0, 36.0, ov)
    cost = np.where(dist.m > 0, dist.m * 40.0 + 40.0, 18.0)

    def used(nn: float) -> float:
        return float(np.minimum(cost, nn * dist.p * 44.0).sum())

    lo, hi = 0.0, 1e9
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if used(mid) < memory - 500.0 else (lo, mid)
    assert b.n_ssbj == pytest.approx(hi, rel=1e-6)
    assert b.n_meshjoin == pytest.approx(2_500.0 / 44.0)
    free = memory_optimal_bound(dist, memory, 32.0, 36.0)
    assert b.ratio < free.ratio  # entries that cost bytes can only lower the bound
