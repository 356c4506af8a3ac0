"""The disk phase (Algorithm 1, lines 24-38): probe H_S with every tuple of the disk buffer.

One compiled pass over the partition does, per master tuple ``r``:

* the MESHJOIN probe: every tuple of ``r``'s value in H_S is an output pair (and is
  flagged matched); the chain walk also counts them, which is ``n`` of the inequality;
* the instrumentation (lines 28-36): in the *incrementing* R-cycle ``s_count`` of a
  tracked value grows; in the *switching* R-cycle the cache inequality is evaluated once
  per value, at its first master tuple of the R-cycle, and every tuple of a value that
  switches goes to the switching buffer s_B (so s_B receives all of its rows);
* for the cache refresh, the master tuples whose value is cached.

The inequality uses the bytes each choice really takes: ``n * (v_S + o_S)`` in H_S
(``o_S``: ring key, link and index share per tuple) against ``m * v_R + e_R`` in H_R
(``e_R``: the value's index entry), with the hysteresis factor ``s_f``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ssbj.core.hashing import kset_find, mix
from ssbj.core.hs import DELTA, MATCHED, ST_DECIDED, ST_ROWS, ST_SINCE, ST_SWITCH, ix_find
from ssbj.core.interest import interest_test

# mypy: disable-error-code="return-value,arg-type,no-any-return"

INCREMENTING = 1
SWITCHING = 2


@njit(cache=True)
def _grow(a: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover
    b = np.empty(max(2 * a.shape[0], n, 16), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def disk_probe(
    mkeys: np.ndarray,
    mvalid: np.ndarray,
    hix: np.ndarray,
    htag: np.ndarray,
    ring_key: np.ndarray,
    link: np.ndarray,
    cap: int,
    lo: int,
    hi: int,
    mark_matched: bool,
    fsm: int,
    rc: int,
    eligible_before: int,
    switch_factor: float,
    tuple_cost: float,
    row_cost: float,
    entry_cost: float,
    st_keys: np.ndarray,
    st_used: np.ndarray,
    st_pay: np.ndarray,
    refresh: bool,
    hk: np.ndarray,
    hused: np.ndarray,
    ek: np.ndarray,
    eused: np.ndarray,
    ibits: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:  # pragma: no cover
    """Return (pair master row, pair slot, s_B rows, refresh rows, their H_R slot, empty hits).

    ``ibits`` (:mod:`ssbj.core.interest`) tells which rows need the statistics, H_R and
    empty-entry lookups at all. The output arrays start small and double: their size is
    the step's transient memory.
    """
    b = mkeys.shape[0]
    pm = np.empty(min(b, 1024), dtype=np.int64)
    psl = np.empty(min(b, 1024), dtype=np.int64)
    look = (fsm == INCREMENTING) | (fsm == SWITCHING) | refresh
    sb = np.empty(0, dtype=np.int64)
    rf_row = np.empty(0, dtype=np.int64)
    rf_slot = np.empty(0, dtype=np.int64)
    if refresh:
        rf_row = np.empty(64, dtype=np.int64)
        rf_slot = np.empty(64, dtype=np.int64)
    if fsm == SWITCHING:
        sb = np.empty(64, dtype=np.int64)
    k = 0
    nsb = 0
    nrf = 0
    n_empty = 0
    for i in range(b):
        if not mvalid[i]:
            continue
        key = mkeys[i]
        h = mix(key)
        _, s = ix_find(hix, htag, ring_key, cap, hi, key, h)
        n = 0
        while s >= lo:
            if k == pm.shape[0]:
                pm = _grow(pm, k + 1)
                psl = _grow(psl, k + 1)
            pm[k] = i
            psl[k] = s
            k += 1
            n += 1
            p = s % cap
            if mark_matched:
                link[p] |= MATCHED
            d = int(link[p] & DELTA)
            if d == 0:
                break
            s -= d
        if not look or not interest_test(ibits, h):
            continue
        if fsm == INCREMENTING or fsm == SWITCHING:  # noqa: SIM109 (numba)
            j = kset_find(st_keys, st_used, key)
            if j >= 0:
                if fsm == INCREMENTING:
                    st_pay[j, ST_ROWS] += 1
                else:
                    if st_pay[j, ST_DECIDED] != rc:
                        # first master tuple of the value in this R-cycle: decide once
                        st_pay[j, ST_DECIDED] = rc
                        m_cache = st_pay[j, ST_ROWS] * row_cost + entry_cost
                        if st_pay[j, ST_SINCE] <= eligible_before and n * tuple_cost > switch_factor * m_cache:
                            st_pay[j, ST_SWITCH] = 1
                    if st_pay[j, ST_SWITCH] == 1:
                        if nsb == sb.shape[0]:
                            sb = _grow(sb, nsb + 1)
                        sb[nsb] = i
                        nsb += 1
        if refresh:
            j = kset_find(hk, hused, key)
            if j >= 0:
                if nrf == rf_row.shape[0]:
                    rf_row = _grow(rf_row, nrf + 1)
                    rf_slot = _grow(rf_slot, nrf + 1)
                rf_row[nrf] = i
                rf_slot[nrf] = j
                nrf += 1
            elif kset_find(ek, eused, key) >= 0:
                n_empty += 1
    return pm[:k], psl[:k], sb[:nsb], rf_row[:nrf], rf_slot[:nrf], n_empty


@njit(cache=True)
def switch_in_pairs(
    slots: np.ndarray,
    which: np.ndarray,
    p0: np.ndarray,
    hk_slot: np.ndarray,
    hpay: np.ndarray,
    src: np.ndarray,
    start_field: int,
    len_field: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Pairs (slot, H_R row) of switched-in tuples with their value's rows from partitions < p0.

    A tuple that entered H_S when partition p0 was loaded has met partitions p0..k-1;
    the rest of its R-cycle comes from the switching buffer, now part of H_R.
    """
    total = 0
    for t in range(slots.shape[0]):
        j = hk_slot[which[t]]
        if j < 0:
            continue
        st = hpay[j, start_field]
        for r in range(st, st + hpay[j, len_field]):
            if src[r] < p0[t]:
                total += 1
    ps = np.empty(total, dtype=np.int64)
    pr = np.empty(total, dtype=np.int64)
    k = 0
    for t in range(slots.shape[0]):
        j = hk_slot[which[t]]
        if j < 0:
            continue
        st = hpay[j, start_field]
        for r in range(st, st + hpay[j, len_field]):
            if src[r] < p0[t]:
                ps[k] = slots[t]
                pr[k] = r
                k += 1
    return ps, pr
