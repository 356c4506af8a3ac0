"""The disk phase's kernel: one compiled pass over master rows probing H_S (:mod:`ssbj.core.diskphase`).

A call covers the rows from ``start`` on and stops before the row that would begin past
``most_pairs`` output pairs, returning where it stopped: the caller takes the pairs'
rows and calls again, so a step's pair arrays are bounded by the budget and not by the
tuples H_S holds (one call's arrays alive at a time).
"""

from __future__ import annotations

import numpy as np

from ssbj.core.empties import es_find
from ssbj.core.hashing import home, kset_find, kset_slot, mix
from ssbj.core.hs import (
    DEFERRED,
    INCREMENTING,
    ST_DECIDED,
    ST_LAST,
    ST_ROWS,
    ST_SINCE,
    ST_SWITCH,
    SWITCHING,
)
from ssbj.core.hsindex import EMPTY, ix_find
from ssbj.core.hslinks import MATCHED, lk_flag, lk_get
from ssbj.core.interest import interest_set, interest_test
from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

PROBE_GROUP = 32  # master rows whose home words in H_S's index are loaded together


@njit(cache=True)
def _grow(a: np.ndarray, n: int, most: int = 1 << 62) -> np.ndarray:  # pragma: no cover
    """Return ``a`` with room for ``n`` items: doubled, but not past ``most`` unless ``n`` needs it."""
    size = max(2 * a.shape[0], n, 16)
    if a.shape[0] < most:
        size = max(min(size, most), n)
    b = np.empty(size, dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True, nogil=True)
def disk_probe(
    mkeys: np.ndarray,
    mvalid: np.ndarray,
    hix: np.ndarray,
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
    st_meta: np.ndarray,
    since: int,
    refresh: bool,
    hk: np.ndarray,
    hused: np.ndarray,
    ek: np.ndarray,
    ibits: np.ndarray,
    sb_allow: np.ndarray,
    early: np.ndarray,
    start: int,
    most_pairs: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:  # pragma: no cover
    """Return (pair master row, pair slot, s_B rows, refresh rows, their H_R slot, empty hits, stop row).

    Rows ``start`` to the stop row are probed: the call stops before a row once it holds
    ``most_pairs`` pairs (a row's chain is never split, so one value with more tuples
    may pass it), else at the end of ``mkeys``.

    ``ibits`` (:mod:`ssbj.core.interest`) tells which rows need the statistics, H_R and
    empty-entry lookups at all. The output arrays start small and double: their size is
    the call's transient memory (at most ``most_pairs`` pairs unless one row has more). A
    pair is two int32: the master row in the piece and the
    slot's offset from ``lo`` (below the ring's size), half the bytes of two int64.

    With ``fsm`` >= 0 (SSBJ) a value met with ``st_meta[2]`` tuples or more in H_S becomes a
    candidate of the value statistics (while the table has room; tracked since ``since``),
    and a tracked value met with tuples in H_S records the R-cycle (``ST_LAST``). The chain
    is walked here anyway, so admission costs the stream side nothing, and only values
    with master rows become candidates (a value without rows is found at expiry). A value
    the inequality takes switches while its rows fit ``sb_allow[0]`` (rows s_B may still
    take), which it then lowers; otherwise ``sb_allow[1]`` counts it as deferred. ``early``
    (the pipelined FSM, :func:`ssbj.core.rcycle.early_rows`): [rows s_B reserves for an
    early switch (0: off), early switches, early switches given up].
    """
    b = mkeys.shape[0]
    every = mvalid.shape[0] == 0  # no NULL keys: no validity array
    # (pairs grow with the tuples in H_S: a fixed first size would be most of a small H_S's bytes)
    first = max(min(b - start, most_pairs, hi - lo), 16)
    pm = np.empty(first, dtype=np.int32)
    psl = np.empty(first, dtype=np.int32)
    track = fsm >= 0
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
    stop = b
    g = PROBE_GROUP
    gh = np.empty(g, dtype=np.uint64)
    gword = np.empty(g, dtype=np.uint32)
    nix = hix.shape[0]
    for base in range(start, b, g):
        cnt = min(g, b - base)
        # the group's home words first: loads that do not wait on each other, so their
        # cache misses overlap (most rows find an empty word or no match). The interest
        # filter is tested where it is used: it sits in L1, and testing it here as well
        # cost SSBJ's probe 4-7% (docs/bound.md, "2026-12-07, day")
        for t in range(cnt):
            h = mix(mkeys[base + t])
            gh[t] = h
            gword[t] = hix[home(h, nix)]
        for t in range(cnt):
            i = base + t
            if k >= most_pairs:
                stop = i
                break
            if not every and not mvalid[i]:
                continue
            key = mkeys[i]
            h = gh[t]
            s = -1
            if gword[t] != EMPTY:
                _, s = ix_find(hix, ring_key, cap, hi, key, h)
            n = 0
            while s >= lo:
                if k == pm.shape[0]:
                    pm = _grow(pm, k + 1, most_pairs)
                    psl = _grow(psl, k + 1, most_pairs)
                pm[k] = i
                psl[k] = s - lo
                k += 1
                n += 1
                p = s % cap
                if mark_matched:
                    lk_flag(link, p, MATCHED)
                d = lk_get(link, p)
                if d == 0:
                    break
                s -= d
            maybe = interest_test(ibits, h) if track else False
            j = -1
            if n and track:
                j = kset_find(st_keys, st_used, key) if maybe else -1
                if j < 0 and n >= st_meta[2] and st_meta[0] < st_meta[1]:
                    j = kset_slot(st_keys, st_used, key)
                    if j < 0:
                        j = -j - 1
                        st_used[j] = True
                        st_keys[j] = key
                        st_pay[j, ST_ROWS] = 0
                        st_pay[j, ST_SINCE] = since
                        st_pay[j, ST_DECIDED] = -1
                        st_pay[j, ST_SWITCH] = 0
                        st_meta[0] += 1
                        interest_set(ibits, h)
                        maybe = True
                if j >= 0:
                    st_pay[j, ST_LAST] = rc
            if not look or not maybe:
                continue
            if fsm == INCREMENTING or fsm == SWITCHING:  # noqa: SIM109 (numba)
                if j < 0 and not n:
                    j = kset_find(st_keys, st_used, key)
                if j >= 0:
                    if fsm == INCREMENTING or st_pay[j, ST_SINCE] > eligible_before:
                        # (switching: a candidate not tracked through the last R-cycle counts
                        # this one; the paper's FSM resets those counts at its phase-out)
                        if fsm == SWITCHING and early[0] > 0 and st_pay[j, ST_SINCE] == 2 * rc - 1:
                            # admitted during the last R-cycle: at its first row of this one it
                            # switches at once if its tuples outweigh the rows of a counted value
                            # (early[0], a high quantile, reserved in s_B); past that many it gives up
                            if st_pay[j, ST_ROWS] == 0 and st_pay[j, ST_SWITCH] == 0:
                                if (
                                    n * tuple_cost > switch_factor * (early[0] * row_cost + entry_cost)
                                    and early[0] <= sb_allow[0]
                                ):
                                    sb_allow[0] -= early[0]
                                    st_pay[j, ST_SWITCH] = 1
                                    st_pay[j, ST_DECIDED] = rc
                                    early[1] += 1
                            elif st_pay[j, ST_SWITCH] == 1 and st_pay[j, ST_ROWS] >= early[0]:
                                st_pay[j, ST_SWITCH] = DEFERRED  # its s_B rows are dropped at the switch-in
                                early[2] += 1
                        st_pay[j, ST_ROWS] += 1
                    elif st_pay[j, ST_DECIDED] != rc:
                        # first master tuple of the value in this R-cycle: decide once
                        st_pay[j, ST_DECIDED] = rc
                        # (a value met here has a row: a unique key's s_count is never counted)
                        m = max(st_pay[j, ST_ROWS], 1)
                        if n * tuple_cost > switch_factor * (m * row_cost + entry_cost):
                            if m <= sb_allow[0]:  # s_B's rows stay within their reserve (ssbj.core.switchroom)
                                sb_allow[0] -= m
                                st_pay[j, ST_SWITCH] = 1
                            else:  # decided again next R-cycle (ssbj.core.stats.ValueStats.retry_deferred)
                                st_pay[j, ST_SWITCH] = DEFERRED
                                sb_allow[1] += 1
                    if st_pay[j, ST_SWITCH] == 1:  # every row of a switching value goes to s_B
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
                elif es_find(ek, key) >= 0:
                    n_empty += 1
        if stop < b:
            break
    return pm[:k], psl[:k], sb[:nsb], rf_row[:nrf], rf_slot[:nrf], n_empty, stop
