"""The CLASH ILP: shared prefixes, partitioning, capacity, and shared cost <= isolated cost."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssbj.shared import ilp
from ssbj.shared import randomqueries as rq
from ssbj.shared.ilp import Predicate, Query, Relation


def _paper_example() -> tuple[dict[str, Relation], list[Query]]:
    """Seed 002, Section IV-A: q1 = R(a),S(a,b),T(b) and q2 = R(a),S(a,c),U(c)."""
    rels = {
        "R": Relation("R", ("a",), rate=100, size=100),
        "S": Relation("S", ("a", "b", "c"), rate=100, size=100),
        "T": Relation("T", ("b",), rate=100, size=100),
        "U": Relation("U", ("c",), rate=100, size=100),
    }
    rs = Predicate.of("R", "a", "S", "a")
    q1 = Query("q1", ("R", "S", "T"), (rs, Predicate.of("S", "b", "T", "b")))
    q2 = Query("q2", ("R", "S", "U"), (rs, Predicate.of("S", "c", "U", "c")))
    return rels, [q1, q2]


def _brute_force(rels: dict[str, Relation], queries: list[Query]) -> float:
    """Cheapest choice of one candidate per (query, start), paying each step and store once."""
    prob = ilp.build(rels, queries)
    best = float("inf")
    for choice in itertools.product(*prob.candidates.values()):
        steps = {s for cand in choice for s in cand}
        stores = {n for s in steps for n in prob.step_needs[s][:1]}
        # a broadcast step works with any partitioning: the cheapest installed one or the cheapest option
        cost = sum(prob.step_cost[s] for s in steps) + sum(prob.store_cost[n] for n in stores)
        best = min(best, cost)
    return best


def test_paper_example_shares_the_r_to_s_prefix() -> None:
    rels, queries = _paper_example()
    prob = ilp.build(rels, queries)
    sol = ilp.solve(prob, rels)
    assert "Optimal" in sol.status
    r1, r2 = sol.orders[("q1", "R")], sol.orders[("q2", "R")]
    assert r1[0] == r2[0]  # both send R tuples to the same S store: one step, paid once
    assert sol.cost < ilp.isolated_cost(rels, queries)
    assert sol.cost == pytest.approx(_brute_force(rels, queries))


def test_partitioning_matters_with_shards() -> None:
    """With 4 shards, S partitioned on a attribute the probe does not know costs a broadcast."""
    rels = {
        "R": Relation("R", ("a",), rate=100, size=100),
        "S": Relation("S", ("a", "b"), rate=100, size=100, shards=(4,)),
    }
    q = Query("q", ("R", "S"), (Predicate.of("R", "a", "S", "a"),))
    sol = ilp.solve(ilp.build(rels, [q]), rels)
    assert sol.orders[("q", "R")][0][1] == (("S", "a", 4),)  # routed on a, not broadcast
    assert ("S", "a", 4) in sol.stores


def test_capacity_forces_more_shards_or_is_infeasible() -> None:
    s = Relation("M", ("k",), rate=1, size=1, stream=False, shards=(1, 2, 4), fixed_cost=(0.1, 0.2, 0.4))
    rels = {"S": Relation("S", ("k",), rate=3.0, size=1), "M": s}
    q = Query("q", ("S", "M"), (Predicate.of("S", "k", "M", "k"),), 1.0)
    sol = ilp.solve(ilp.build(rels, [q]), rels, capacity=1.0)
    assert sol.stores == [("M", "k", 4)]  # a load of 3.1 needs 4 shards of capacity 1
    with pytest.raises(Exception, match="no solution"):
        ilp.solve(ilp.build(rels, [q]), rels, capacity=0.5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_rel=st.integers(4, 12), n_q=st.integers(1, 6), size=st.integers(2, 3), seed=st.integers(0, 1000))
def test_shared_never_costs_more_and_matches_brute_force(n_rel: int, n_q: int, size: int, seed: int) -> None:
    rels = rq.environment(n_rel, parallelism=1, seed=seed)
    queries = rq.queries(rels, n_q, size, seed=seed + 1)
    if not queries:
        return
    sol = ilp.solve(ilp.build(rels, queries), rels)
    assert sol.cost <= ilp.isolated_cost(rels, queries) + 1e-6
    prob = ilp.build(rels, queries)
    if len(list(itertools.product(*prob.candidates.values()))) <= 5000:
        assert sol.cost == pytest.approx(_brute_force(rels, queries))
    for (qname, start), steps in sol.orders.items():
        q = next(x for x in queries if x.name == qname)
        assert {s for s, *_ in [st[1][-1] for st in steps]} | {start} == set(q.relations)


def test_random_query_sets_are_distinct_and_connected() -> None:
    rels = rq.environment(10, seed=3)
    qs = rq.queries(rels, 50, 3, seed=4)
    assert len({(tuple(sorted(q.relations)), frozenset(q.predicates)) for q in qs}) == len(qs) == 50
    for q in qs:
        assert len(set(q.relations)) == 3 and len(q.predicates) == 2


def test_missing_scipy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ssbj.errors import DependencyError
    from ssbj.shared.optimize_shim import milp_solver

    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(DependencyError, match=r"ssbj\[optimize\]"):
        milp_solver()
