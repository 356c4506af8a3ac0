"""The cache phase's kernel against a plain reference: every tuple read lands in exactly one of its arrays.

``cache_probe`` fills two int32 arrays from both ends (pairs from the fronts, misses and
tuples without pairs from the backs); a call stops before a tuple the arrays may not
hold, and calls from where the last stopped answer each tuple once, in tuple order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.core.cache import HR_F, HR_SINCE
from ssbj.core.cachephase import cache_probe, split_call
from ssbj.core.empties import EmptySet
from ssbj.core.hashing import KeyedTable
from ssbj.core.refresh import HR_LEN, HR_START

_NO_BITS = np.zeros(1, dtype=np.uint64)


def _h_r(rows_of: dict[int, int]) -> KeyedTable:
    """H_R's index: value -> (first row, rows), rows laid out in the dict's order."""
    t = KeyedTable(4, np.int64)
    keys = np.array(list(rows_of), dtype=np.int64)
    pay = np.zeros((len(keys), 4), dtype=np.int64)
    at = 0
    for i, n in enumerate(rows_of.values()):
        pay[i, HR_START], pay[i, HR_LEN], pay[i, HR_F], pay[i, HR_SINCE] = at, n, 0, 0
        at += n
    t.load(keys, pay)
    return t


def _calls(
    t: KeyedTable, keys: np.ndarray, valid: np.ndarray, max_tuples: int, use_cache: bool
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]]:
    es = EmptySet()
    ibits = np.full(64, np.iinfo(np.uint64).max, dtype=np.uint64)  # every value may be cached
    row_bytes = np.full(len(keys), 10, dtype=np.int64)
    out = []
    start = 0
    while start < len(keys):
        got = cache_probe(
            t.keys, t.used, t.payload, es.blob, es.counts, ibits, keys, valid, row_bytes, start,
            1 << 40, 0, 1 << 40, max_tuples, use_cache, _NO_BITS, 0, 0, 0, False,
        )  # fmt: skip
        consumed, ti, pr, k, n_hit, nm, nb, nn, _, _, _ = got
        assert consumed > 0
        ps, pr_k, miss_idx, none_idx = split_call(ti, pr, k, nm, nb)
        assert k + max(nm, nb) <= len(ti) if use_cache else nm + nb <= len(ti)  # the ends never meet
        assert len(np.unique(ps)) == n_hit and nn <= nb
        out.append((ps, pr_k, miss_idx, none_idx, start, consumed))
        start += int(consumed)
    return out


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.integers(0, 4), min_size=1, max_size=12),
    picks=st.lists(st.integers(-1, 15), min_size=1, max_size=300),
    max_tuples=st.integers(1, 40),
    use_cache=st.booleans(),
)
def test_every_tuple_answered_once_in_order(
    rows: list[int], picks: list[int], max_tuples: int, use_cache: bool
) -> None:
    rows_of = {v * 7 + 1: n for v, n in enumerate(rows)}  # values 1, 8, 15, ...; n = 0: cached without rows
    start_of = {}
    at = 0
    for v, n in rows_of.items():
        start_of[v] = at
        at += n
    t = _h_r(rows_of)
    values = [*rows_of, 1000, 1001, 1002]  # three values not cached
    keys = np.array([values[p % len(values)] if p >= 0 else 0 for p in picks], dtype=np.int64)
    valid = np.array([p >= 0 for p in picks])
    seen_pairs: list[tuple[int, int]] = []
    seen_miss: list[int] = []
    seen_none: list[int] = []
    for ps, pr, miss_idx, none_idx, start, consumed in _calls(t, keys, valid, max_tuples, use_cache):
        inside = [set(map(int, a)) for a in (ps, miss_idx, none_idx)]
        assert set().union(*inside) == set(range(start, start + consumed))  # each tuple read, once
        assert sum(map(len, inside)) == consumed
        for a in (ps, miss_idx, none_idx):
            assert list(a) == sorted(a)  # tuple order
        seen_pairs += list(zip(map(int, ps), map(int, pr), strict=True))
        seen_miss += list(map(int, miss_idx))
        seen_none += list(map(int, none_idx))
    want_pairs, want_miss, want_none = [], [], []
    for i, (key, ok) in enumerate(zip(keys.tolist(), valid.tolist(), strict=True)):
        if not ok:
            want_none.append(i)
        elif not use_cache or key not in rows_of:
            want_miss.append(i)
        elif rows_of[key] == 0:
            want_none.append(i)
        else:
            want_pairs += [(i, start_of[key] + r) for r in range(rows_of[key])]
    assert (seen_pairs, seen_miss, seen_none) == (want_pairs, want_miss, want_none)


def test_a_value_with_more_rows_than_the_call_gets_arrays_of_its_own() -> None:
    t = _h_r({5: 50, 6: 1})
    keys = np.array([6, 5, 6, 5], dtype=np.int64)
    calls = _calls(t, keys, np.ones(4, dtype=bool), 8, True)
    assert [c[4:] for c in calls] == [(0, 1), (1, 1), (2, 1), (3, 1)]  # stops before the big value, then reads it alone
    assert [len(c[0]) for c in calls] == [1, 50, 1, 50]
