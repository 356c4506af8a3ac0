"""The CLASH multi-query ILP (seed 002, Section V), for stores of streams and master tables.

Every query is answered by one *probe order* per starting (arriving) relation: the
arriving tuple probes the store of a second relation, the partial result the store of a
third, and so on. Each store is partitioned by one of its attributes (and, for master
tables, into P shards); a probe that does not know the partitioning attribute is
broadcast to every shard (CLASH's chi). A probe-order *prefix* is a step; equal steps of
different queries are one variable, so choosing them shares their cost (Algorithm 2):

* ``sum(x_sigma for sigma in candidates(q, start)) == 1`` per query and starting relation,
* ``x_sigma <= y_step`` for every step of sigma (its prefixes),
* ``y_step <= p[store, partitioning]`` for the store the step probes,
* ``sum(p[store, *]) <= 1`` per store: one partitioning,
* optionally, per store and partitioning, the load of its steps within its shards'
  capacity (``capacity``: core-seconds per second per shard).

Objective: the step costs of the chosen steps plus a fixed cost per installed store
partitioning (for a master table: its cyclic scan, ssbj.shared.model). Materialized
intermediate results (CLASH's MIR stores) are not generated: every store is a base relation.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from ssbj.errors import InputError
from ssbj.shared.optimize_shim import milp_solver


@dataclass(frozen=True)
class Relation:
    """An input: a stream (arrives, starts probe orders) or a master table (only probed)."""

    name: str
    attrs: tuple[str, ...]
    rate: float = 1.0  # tuples per second (a stream); a table's rows do not arrive
    size: float = 1.0  # tuples held for probing: a stream's window, a table's rows
    stream: bool = True
    shards: tuple[int, ...] = (1,)  # shard counts to choose from (a master table's P)
    fixed_cost: tuple[float, ...] = ()  # per shard count: cost of installing the store (a scan)
    probe_cost: float = 1.0  # cost of one probing tuple (CLASH: 1, a tuple sent)


@dataclass(frozen=True)
class Predicate:
    """An equi-join predicate ``left.lattr = right.rattr`` (stored with left <= right)."""

    left: str
    lattr: str
    right: str
    rattr: str

    @staticmethod
    def of(a: str, aa: str, b: str, ba: str) -> Predicate:
        """Return the predicate in its normal order."""
        return Predicate(a, aa, b, ba) if (a, aa) <= (b, ba) else Predicate(b, ba, a, aa)

    def attr_of(self, rel: str) -> str:
        """Return the attribute of ``rel`` in this predicate."""
        return self.lattr if rel == self.left else self.rattr

    def other(self, rel: str) -> str:
        """Return the relation on the other side of ``rel``."""
        return self.right if rel == self.left else self.left


@dataclass(frozen=True)
class Query:
    """A join query over ``relations`` connected by ``predicates``."""

    name: str
    relations: tuple[str, ...]
    predicates: tuple[Predicate, ...]
    selectivity: float | None = None  # per predicate; default 1 / rate of the probed relation


StoreKey = tuple[str, str, int]  # (relation, partitioning attribute or "*" for any, shards)
StepKey = tuple[str, tuple[StoreKey, ...], frozenset[Predicate]]
ANY = "*"


@dataclass
class Problem:
    """The ILP's ingredients: candidates per (query, start), steps with costs, store options."""

    candidates: dict[tuple[str, str], list[tuple[int, ...]]] = field(default_factory=dict)  # -> step ids
    steps: list[StepKey] = field(default_factory=list)
    step_cost: list[float] = field(default_factory=list)
    step_needs: list[tuple[int, ...]] = field(default_factory=list)  # store options, one of which it needs
    stores: list[StoreKey] = field(default_factory=list)
    store_cost: list[float] = field(default_factory=list)
    build_seconds: float = 0.0

    @property
    def orders(self) -> int:
        """Candidate probe orders."""
        return sum(len(c) for c in self.candidates.values())

    @property
    def variables(self) -> int:
        """ILP variables: probe orders, steps and store partitionings."""
        return self.orders + len(self.steps) + len(self.stores)


@dataclass
class Solution:
    """The chosen probe orders (step keys per query and start), stores and the cost."""

    cost: float
    orders: dict[tuple[str, str], tuple[StepKey, ...]]
    stores: list[StoreKey]
    steps: list[StepKey]
    solve_seconds: float
    build_seconds: float
    variables: int
    constraints: int
    status: str


def _connected_orders(q: Query, start: str) -> list[list[tuple[str, frozenset[Predicate]]]]:
    """Orders of q's other relations where each joins the prefix (no cross products)."""
    rest = [r for r in q.relations if r != start]
    out = []
    for perm in itertools.permutations(rest):
        seen = {start}
        order = []
        ok = True
        for r in perm:
            preds = frozenset(
                p for p in q.predicates if (p.left == r and p.right in seen) or (p.right == r and p.left in seen)
            )
            if not preds:
                ok = False
                break
            order.append((r, preds))
            seen.add(r)
        if ok:
            out.append(order)
    return out


def _store_options(rel: Relation) -> list[tuple[str, int, float]]:
    """(partitioning attribute, shards, fixed cost) a store of ``rel`` may take.

    One shard has no partitioning to choose (``*``): every attribute gives the same store.
    """
    out = []
    for i, p in enumerate(rel.shards):
        fixed = rel.fixed_cost[i] if rel.fixed_cost else 0.0
        attrs = (ANY,) if p == 1 else rel.attrs
        out += [(a, p, fixed) for a in attrs]
    return out


def build(relations: dict[str, Relation], queries: list[Query]) -> Problem:
    """Generate every query's candidate probe orders and their steps (Algorithm 2's input).

    A probe into a store of P shards is either *routed* (the store is partitioned by an
    attribute the probing tuple knows: one shard, chi = 1) or *broadcast* (any
    partitioning: all P shards, chi = P). Broadcast is always correct, and routed is
    cheaper whenever the partitioning allows it, so this has the same optimum as CLASH's
    one candidate per partitioning attribute, with fewer candidates.
    """
    t0 = time.perf_counter()
    prob = Problem()
    step_ids: dict[StepKey, int] = {}
    store_ids: dict[StoreKey, int] = {}
    for rel in relations.values():
        for a, p, fixed in _store_options(rel):
            store_ids[(rel.name, a, p)] = len(prob.stores)
            prob.stores.append((rel.name, a, p))
            prob.store_cost.append(fixed)
    for q in queries:
        for r in q.relations:
            if r not in relations:
                raise InputError(f"query {q.name!r} names unknown relation {r!r}")
        for start in q.relations:
            if not relations[start].stream:
                continue
            cands: list[tuple[int, ...]] = []
            for order in _connected_orders(q, start):
                # rate of the partial result before each step (CLASH Eq. 1's |join of the prefix|)
                sizes = [relations[start].rate]
                per_store: list[list[tuple[StoreKey, float, tuple[int, ...]]]] = []
                for r, preds in order:
                    rel = relations[r]
                    sel = q.selectivity if q.selectivity is not None else 1.0 / max(rel.rate, 1e-12)
                    sizes.append(sizes[-1] * rel.size * sel ** len(preds))
                    known = sorted({pr.attr_of(r) for pr in preds})
                    opts: list[tuple[StoreKey, float, tuple[int, ...]]] = []
                    for p in rel.shards:
                        if p == 1:
                            opts.append(((r, ANY, 1), 1.0, (store_ids[(r, ANY, 1)],)))
                            continue
                        opts += [((r, a, p), 1.0, (store_ids[(r, a, p)],)) for a in known if a in rel.attrs]
                        every = tuple(store_ids[(r, a, p)] for a in rel.attrs)
                        opts.append(((r, ANY, p), float(p), every))  # broadcast
                    per_store.append(opts)
                for choice in itertools.product(*per_store):
                    prefix: tuple[StoreKey, ...] = ()
                    preds_so_far: frozenset[Predicate] = frozenset()
                    ids = []
                    for j, ((r, preds), (sk, chi, needs)) in enumerate(zip(order, choice, strict=True)):
                        prefix = (*prefix, sk)
                        preds_so_far = preds_so_far | preds
                        key: StepKey = (start, prefix, preds_so_far)
                        sid = step_ids.get(key)
                        if sid is None:
                            sid = step_ids[key] = len(prob.steps)
                            prob.steps.append(key)
                            prob.step_cost.append(sizes[j] / (j + 1) * chi * relations[r].probe_cost)
                            prob.step_needs.append(needs)
                        ids.append(sid)
                    cands.append(tuple(ids))
            if not cands:
                raise InputError(f"query {q.name!r} has no probe order from {start!r} without a cross product")
            prob.candidates[(q.name, start)] = cands
    prob.build_seconds = time.perf_counter() - t0
    return prob


def solve(
    prob: Problem,
    relations: dict[str, Relation],
    capacity: float | None = None,
    time_limit: float | None = None,
    one_partitioning: bool = False,
) -> Solution:
    """Solve the ILP with HiGHS (``scipy.optimize.milp``).

    ``capacity``: most load (in the cost unit per second) one shard may carry; a store
    partitioned into P shards then carries at most P times that.
    """
    so = milp_solver()
    import scipy.sparse as sp

    t0 = time.perf_counter()
    keys = list(prob.candidates)
    cands = [c for k in keys for c in prob.candidates[k]]
    n_x, n_y, n_p = len(cands), len(prob.steps), len(prob.stores)
    n = n_x + n_y + n_p
    cost = np.concatenate([np.zeros(n_x), np.asarray(prob.step_cost), np.asarray(prob.store_cost)])
    blocks = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    # (A) exactly one probe order per query and starting relation
    sizes = np.array([len(prob.candidates[k]) for k in keys])
    a_rows = np.repeat(np.arange(len(keys)), sizes)
    blocks.append(sp.csr_matrix((np.ones(n_x), (a_rows, np.arange(n_x))), shape=(len(keys), n)))
    lo.append(np.ones(len(keys)))
    hi.append(np.ones(len(keys)))
    # (B) a step is paid for if a chosen probe order contains it: per (query, start) and
    # step, the sum of that query's candidates containing it (at most one is 1) <= y_step
    pairs: dict[tuple[int, int], list[int]] = {}
    xi = 0
    for ki, k in enumerate(keys):
        for cand in prob.candidates[k]:
            for sid in cand:
                pairs.setdefault((ki, sid), []).append(xi)
            xi += 1
    m = len(pairs)
    lens = np.fromiter((len(v) for v in pairs.values()), dtype=np.int64, count=m)
    xs = np.fromiter(itertools.chain.from_iterable(pairs.values()), dtype=np.int64, count=int(lens.sum()))
    ys = np.fromiter((sid for _, sid in pairs), dtype=np.int64, count=m)
    rx = np.repeat(np.arange(m), lens)
    r = np.arange(m)
    blocks.append(
        sp.csr_matrix(
            (
                np.concatenate([np.ones(len(xs)), -np.ones(m)]),
                (np.concatenate([rx, r]), np.concatenate([xs, n_x + ys])),
            ),
            shape=(m, n),
        )
    )
    lo.append(np.full(m, -np.inf))
    hi.append(np.zeros(m))
    # (C) a step needs its store in one of the partitionings it works with
    nl = np.array([len(v) for v in prob.step_needs], dtype=np.int64)
    need = np.fromiter(itertools.chain.from_iterable(prob.step_needs), dtype=np.int64, count=int(nl.sum()))
    r = np.arange(n_y)
    blocks.append(
        sp.csr_matrix(
            (
                np.concatenate([np.ones(n_y), -np.ones(len(need))]),
                (np.concatenate([r, np.repeat(r, nl)]), np.concatenate([n_x + r, n_x + n_y + need])),
            ),
            shape=(n_y, n),
        )
    )
    lo.append(np.full(n_y, -np.inf))
    hi.append(np.zeros(n_y))
    # (D) optionally one partitioning per relation (otherwise each partitioning is a store of its own, paid for)
    if one_partitioning:
        rel_ids = {name: i for i, name in enumerate(relations)}
        prow = np.array([rel_ids[s[0]] for s in prob.stores], dtype=np.int64)
        blocks.append(sp.csr_matrix((np.ones(n_p), (prow, n_x + n_y + np.arange(n_p))), shape=(len(rel_ids), n)))
        lo.append(np.full(len(rel_ids), -np.inf))
        hi.append(np.ones(len(rel_ids)))
    # (E) the load of a store's steps within its shards' capacity
    if capacity is not None:
        # per relation and shard count: the load of its steps and scans <= capacity x P x installed
        groups = {rp: i for i, rp in enumerate(dict.fromkeys((s[0], s[2]) for s in prob.stores))}
        g_of_store = np.array([groups[(s[0], s[2])] for s in prob.stores], dtype=np.int64)
        g_of_step = np.array([g_of_store[v[0]] for v in prob.step_needs], dtype=np.int64)
        shards = np.array([s[2] for s in prob.stores], dtype=float)
        vals = np.concatenate([np.asarray(prob.step_cost), np.asarray(prob.store_cost) - capacity * shards])
        rows_e = np.concatenate([g_of_step, g_of_store])
        cols_e = np.concatenate([n_x + np.arange(n_y), n_x + n_y + np.arange(n_p)])
        blocks.append(sp.csr_matrix((vals, (rows_e, cols_e)), shape=(len(groups), n)))
        lo.append(np.full(len(groups), -np.inf))
        hi.append(np.zeros(len(groups)))
    a = sp.vstack(blocks, format="csr")
    options = {"time_limit": time_limit} if time_limit else {}
    res = so.milp(
        cost,
        constraints=so.LinearConstraint(a, np.concatenate(lo), np.concatenate(hi)),
        # x may stay continuous: with the steps and stores integral, any candidate with
        # x > 0 has all its steps paid for, so an integral choice of the same cost exists
        integrality=np.concatenate([np.zeros(n_x), np.ones(n - n_x)]),
        bounds=so.Bounds(0, 1),
        options=options,
    )
    elapsed = time.perf_counter() - t0
    if res.x is None:
        raise InputError(f"the sharing ILP has no solution: {res.message}")
    sol = np.round(res.x).astype(bool)
    chosen: dict[tuple[str, str], tuple[StepKey, ...]] = {}
    i = 0
    for k in keys:
        cs = prob.candidates[k]
        best = int(np.argmax(res.x[i : i + len(cs)]))
        if not all(sol[n_x + s] for s in cs[best]):  # never, by the argument above
            raise InputError(f"the ILP's probe order for {k} uses a step it did not pay for")
        chosen[k] = tuple(prob.steps[s] for s in cs[best])
        i += len(cs)
    return Solution(
        cost=float(res.fun),
        orders=chosen,
        stores=[prob.stores[j] for j in np.flatnonzero(sol[n_x + n_y :])],
        steps=[prob.steps[j] for j in np.flatnonzero(sol[n_x : n_x + n_y])],
        solve_seconds=elapsed,
        build_seconds=prob.build_seconds,
        variables=n,
        constraints=int(a.shape[0]),
        status=str(res.message),
    )


def isolated_cost(relations: dict[str, Relation], queries: list[Query], capacity: float | None = None) -> float:
    """Cost with no sharing: every query optimized alone, on stores of its own."""
    total = 0.0
    for q in queries:
        total += solve(build(relations, [q]), relations, capacity).cost
    return total
