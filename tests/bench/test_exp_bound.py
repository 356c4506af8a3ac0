"""The bound experiment's efficiency decomposition (pure arithmetic on a point's fields)."""

from __future__ import annotations

import math

import pytest

from ssbj.bench.exp_bound import efficiency_factors, factors_markdown


def _point(bound: float, structural: float, tuples: float, rate: float) -> dict:
    return {
        "skew": 1.0,
        "drifting": False,
        "memory_fraction": 0.1,
        "bound": {"ratio": bound},
        "structural_bound": {"ratio": structural},
        "tuples_per_r_cycle_ratio": tuples,
        "ratio_service_rate": rate,
        "efficiency": rate / bound if math.isfinite(bound) else None,
    }


def test_the_three_factors_multiply_to_the_efficiency() -> None:
    pt = _point(5.15, 4.31, 3.50, 2.01)
    f = efficiency_factors(pt)
    assert f is not None
    assert f["structures"] == pytest.approx(4.31 / 5.15)
    assert f["memory_use"] == pytest.approx(3.50 / 4.31)
    assert f["r_cycle_time"] == pytest.approx(2.01 / 3.50)
    assert f["structures"] * f["memory_use"] * f["r_cycle_time"] == pytest.approx(pt["efficiency"])


def test_no_factors_without_a_finite_bound_or_for_a_failed_point() -> None:
    assert efficiency_factors(_point(math.inf, math.inf, 9.0, 8.0)) is None
    assert efficiency_factors({"error": "budget too small"}) is None
    assert factors_markdown({"points": [_point(math.inf, math.inf, 9.0, 8.0)]}) == []


def test_the_table_has_one_row_per_point_with_a_bound() -> None:
    rows = factors_markdown({"points": [_point(3.18, 2.07, 1.75, 1.34), _point(math.inf, math.inf, 9.0, 8.0)]})
    assert len(rows) == 3  # header, rule, one point
    assert "| 0.65 | 0.85 | 0.77 | 0.42 |" in rows[2]


def test_the_table_places_the_memory_use_loss_when_the_shares_are_known() -> None:
    pt = _point(3.18, 2.07, 1.75, 1.34)
    assert "| - | - |" in factors_markdown({"points": [pt]})[2]  # results from before the shares
    pt.update(ssbj_vs_structural_n=0.84, meshjoin_vs_structural_n=0.98)
    assert factors_markdown({"points": [pt]})[2].endswith("| 0.42 | 0.84 | 0.98 |")
