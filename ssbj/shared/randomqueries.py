"""Random query sets as in CLASH's ILP experiments (seed 002, Section VII-C).

``relations`` input relations with three attributes each, equal arrival rates, and a
selectivity of 1 / rate between any two; queries of ``size`` relations drawn at random,
connected through shared attribute names (no cross products), exact duplicates removed.
"""

from __future__ import annotations

import numpy as np

from ssbj.shared.ilp import Predicate, Query, Relation


def environment(
    n_relations: int, attrs_per_relation: int = 3, rate: float = 1000.0, parallelism: int = 4, seed: int = 0
) -> dict[str, Relation]:
    """``n_relations`` streams of ``parallelism`` shards whose attributes come from a shared pool."""
    rng = np.random.default_rng(seed)
    pool = max(attrs_per_relation + 1, n_relations)  # as many attribute names as relations
    out = {}
    for i in range(n_relations):
        attrs = tuple(f"a{j}" for j in sorted(rng.choice(pool, attrs_per_relation, replace=False)))
        # storing a tuple in a store is one tuple sent (CLASH): each installed store costs its rate
        out[f"R{i}"] = Relation(f"R{i}", attrs, rate=rate, size=rate, shards=(parallelism,), fixed_cost=(rate,))
    return out


def queries(relations: dict[str, Relation], n_queries: int, size: int = 3, seed: int = 0) -> list[Query]:
    """``n_queries`` distinct connected queries of ``size`` relations (fewer if they run out)."""
    rng = np.random.default_rng(seed)
    names = list(relations)
    by_attr: dict[str, list[str]] = {}
    for r in relations.values():
        for a in r.attrs:
            by_attr.setdefault(a, []).append(r.name)
    seen: set[tuple[tuple[str, ...], frozenset[Predicate]]] = set()
    out: list[Query] = []
    tries = 0
    while len(out) < n_queries and tries < 50 * n_queries:
        tries += 1
        rels = [names[int(rng.integers(len(names)))]]
        preds: list[Predicate] = []
        while len(rels) < size:
            src = rels[int(rng.integers(len(rels)))]
            a = relations[src].attrs[int(rng.integers(len(relations[src].attrs)))]
            partners = [p for p in by_attr[a] if p not in rels]
            if not partners:
                if len(set(rels)) == len(rels) and tries % 7 == 0:
                    break
                continue
            dst = partners[int(rng.integers(len(partners)))]
            rels.append(dst)
            preds.append(Predicate.of(src, a, dst, a))
        if len(rels) < size:
            continue
        key = (tuple(sorted(rels)), frozenset(preds))
        if key in seen:
            continue
        seen.add(key)
        out.append(Query(f"q{len(out)}", tuple(rels), tuple(preds)))
    return out
