"""dpPick's cost model, its DP against brute force, the baselines, Holt forecasts, adaptation."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.bench.exp_multiway import star_data, star_spec
from ssbj.core.multiway import MultiWayJoin
from ssbj.core.multiway.order import EdgeCost, Holt, choose, dp_pick, order_cost, valid
from ssbj.errors import ConfigError

costs_st = st.lists(
    st.builds(
        EdgeCost,
        gamma=st.floats(0.0, 1.0),
        mu=st.floats(1.0, 4.0),
        kappa=st.floats(1.0, 1e6),
        partitions=st.integers(1, 8),
        left=st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(costs_st, st.data())
def test_dp_pick_is_the_cheapest_valid_order(costs: list[EdgeCost], data: st.DataObject) -> None:
    n = len(costs)
    # a random tree: edge i probes the stream or an edge before it
    needs = [None if i == 0 else data.draw(st.sampled_from([None, *range(i)])) for i in range(n)]
    orders = [o for o in itertools.permutations(range(n)) if valid(o, needs)]
    best = min(order_cost(o, costs) for o in orders)
    got = dp_pick(costs, needs)
    assert valid(got, needs)
    assert order_cost(got, costs) == pytest.approx(best, rel=1e-9, abs=1e-9)
    for pol in ("greedy", "selectivity", "fixed"):
        o = choose(pol, tuple(orders[0]), costs, needs)
        assert valid(o, needs) and order_cost(o, costs) >= best - 1e-9


def test_selective_edge_first_and_unknown_policy() -> None:
    c = [EdgeCost(0.9, 1.0, 100, 1, False), EdgeCost(0.05, 1.0, 100, 1, False)]
    assert dp_pick(c, [None, None]) == (1, 0)
    assert choose("selectivity", (0, 1), c, [None, None]) == (1, 0)
    with pytest.raises(ConfigError):
        choose("random", (0, 1), c, [None, None])


def test_holt_follows_a_linear_trend_and_damps() -> None:
    h = Holt(alpha=0.5, beta=0.5)
    for x in range(10):
        h.update(2.0 * x + 1)
    assert h.forecast() == pytest.approx(21.0, rel=1e-3)
    d = Holt(alpha=0.5, beta=0.5, phi=0.5)
    for x in range(10):
        d.update(2.0 * x + 1)
    f = d.forecast()
    assert f is not None and 17.0 < f < 21.0  # the damped trend adds less than the full slope


def test_dppick_probes_fewer_rows_than_a_bad_fixed_order_on_drift() -> None:
    stream, masters = star_data(60_000, 2_000, (500, 2_000, 5_000, 20), seed=3)
    spec = star_spec()
    probed, rows = {}, {}
    for pol in ("fixed", "dppick", "selectivity"):
        op = MultiWayJoin(spec, masters, 1 << 30, order_policy=pol, initial_order=(3, 2, 1, 0), period=2)
        n = sum(op.process(stream.slice(i, 2_000)).num_rows for i in range(0, 60_000, 2_000))
        probed[pol], rows[pol] = op.counters["rows_probed"], n
        if pol != "fixed":
            assert op.counters["reorders"] > 0
    assert len(set(rows.values())) == 1
    assert probed["dppick"] < 0.8 * probed["fixed"]
