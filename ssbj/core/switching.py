"""Moving values into the cache: switch-in of s_B (phase-out), empty entries, H_R rebuilds.

* :func:`rebuild_hr`: H_R without the evicted values and with s_B (lines 10-14, 42-51);
* :func:`switch_in`: the H_S tuples of switched values finish at once against the s_B
  rows of the partitions they had not met (exact, see docs/architecture.md);
* :func:`cache_empties`: values shown to have no master rows become empty entries;
* :func:`plan_filter`: the R-filter (:mod:`ssbj.core.rfilter`), which answers the
  tuples of values without master rows before they reach H_S, is (re)planned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core import hrsize as HZ
from ssbj.core.hashing import kset_find
from ssbj.core.hs import hs_remove
from ssbj.core.jit import njit
from ssbj.core.keys import is_exact
from ssbj.core.refresh import HR_LEN, HR_START
from ssbj.core.rfilter import OFF, rf_test
from ssbj.core.rfilter import plan as rf_plan

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


# mypy: disable-error-code="no-any-return"


@njit(cache=True, nogil=True)
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


def rebuild_hr(op: SemiStreamJoin, evicted: np.ndarray, switching: np.ndarray) -> None:
    """Rebuild H_R without the evicted values and with s_B (values switching in)."""
    sb = [t for t, _, _, _ in op._sb]
    # (no combine_chunks: the rebuild combines one column at a time)
    table = pa.concat_tables(sb) if sb else None
    keys = np.concatenate([k for _, k, _, _ in op._sb]) if op._sb else np.zeros(0, np.int64)
    src = np.concatenate([s for _, _, s, _ in op._sb]) if op._sb else np.zeros(0, np.int32)
    if table is not None and op._c.extra.get("switch_early_given_up", 0):
        keep = np.isin(keys, switching)  # rows of early switches given up (ssbj.core.rcycle.early_rows)
        if not keep.all():
            table, keys, src = table.filter(pa.array(keep)), keys[keep], src[keep]
    after = np.concatenate([op.cache.index.keys[op.cache.index.used], switching])
    after = after[~np.isin(after, evicted)]
    if len(evicted) and len(keys):  # apart, neither needs the merge of every row (Cache.rebuild)
        op.cache.rebuild(evicted, None, np.zeros(0, np.int64), np.zeros(0, np.int32), op._rc)
        evicted = np.zeros(0, np.int64)
    op.cache.rebuild(evicted, table, keys, src, op._rc, cached_after=after)
    drop_sb(op)


# a filter up to this share of the budget beyond the unplanned bytes is built at once: while
# w shrinks (the cache filling, drift), H_S's ring lags an R-cycle behind its plan and the
# unplanned bytes are near zero at every start; the budget's 1.05x tolerance covers that
# much (bench/results/bound: 250 kB at 10% of R, 3.5%), a larger one waits
FILTER_SLACK = 0.04

RESIDENT_HS_SHARE = 0.10  # H_S must keep at least this share of the budget for R to count as held


def holds_all_of_r(op: SemiStreamJoin) -> bool:
    """Whether the budget holds every master row of the last complete R-cycle in H_R (Theorem 3).

    Every row with its partition tag and (at most) one index entry, beside the disk buffer
    and a tenth of the budget for H_S. Then SSBJ is a main-memory hash join: a value kept
    out of the cache frees nothing that would pay more, so candidates are admitted at two
    tuples (:meth:`ssbj.core.stats.ValueStats.set_admission`), as many as R has rows are
    tracked (within the statistics' budget share), and nothing is evicted; with
    ``JoinSpec.complete_cache`` the cache takes all of R at once when the switch fits too
    (:mod:`ssbj.core.complete`, :func:`ssbj.core.budget.take_all_fits`).
    """
    rows = int(op._scan_last[0])
    return rows > 0 and holds_rows(op, rows)


def holds_rows(op: SemiStreamJoin, rows: int) -> bool:
    """Whether ``rows`` master rows fit in H_R as :func:`holds_all_of_r` counts them."""
    budget = op.spec.memory_budget
    if budget is None or not op._use_cache:
        return False
    # a row as H_R holds it (the key too, when the projection leaves it out) and its tag
    row = max(op.row_cost(), HZ.layout_row_bytes(op) + 4)
    need = rows * (row + op.entry_cost()) + B.disk_bytes(op)
    return need <= (1.0 - RESIDENT_HS_SHARE) * budget


def cache_empties(op: SemiStreamJoin, keys: np.ndarray, lo: int | None = None) -> np.ndarray:
    """Values found to have no master rows enter the cache as empty entries.

    Their other tuples in H_S cannot match either: they finish now, unmatched. Returns
    their slots (removed from H_S, still live in the ring): the caller takes their rows
    with the expiring chunk's unmatched ones, in one gather. ``lo``: H_S's oldest live
    slot (default the ring's; expiry passes the expired chunk's end before dropping it).
    """
    keys = keys[: op.cache.empties.add_within(keys, B.empties_room(op))]
    if not len(keys):
        return np.zeros(0, np.int64)
    op.interest.add(keys)
    if op.interest.overfull:
        op.rebuild_interest()
    hs = op.hs
    slots, which = hs_remove(hs.hix, hs.ring_key, hs.link, hs.cap, hs.lo if lo is None else lo, hs.hi, keys)
    hs.values -= len(np.unique(which))
    if len(slots):
        hs.live -= len(slots)
        op._c.served_disk += len(slots)
        op._c.bump("hs_unmatched", len(slots))
    op.stats.delete(keys)
    op._c.bump("empties_cached", len(keys))
    return slots


def drop_sb(op: SemiStreamJoin) -> None:
    """Empty s_B (its rows moved into H_R, or only early switches given up held rows)."""
    op._sb = []
    op._sb_bytes = 0


def switch_in(
    op: SemiStreamJoin, keys: np.ndarray, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> None:
    """Finish the H_S tuples of values now in H_R with the s_B rows they have not met."""
    hs = op.hs
    slots, which = hs_remove(hs.hix, hs.ring_key, hs.link, hs.cap, hs.lo, hs.hi, keys)
    ix = op.cache.index
    hk_slot = np.array([kset_find(ix.keys, ix.used, int(k)) for k in keys], dtype=np.int64)
    recs = hs.queue.records()
    chunk = np.searchsorted(recs[:, 0], slots, side="right") - 1
    p0 = recs[chunk, 2] if len(slots) else np.zeros(0, np.int64)
    ps, pr = switch_in_pairs(slots, which, p0, hk_slot, ix.payload, op.cache.src, HR_START, HR_LEN)
    matched = hs.matched(slots)
    if len(ps):
        s = hs.take(ps)
        m = op.cache.table().take(pr)
        ok = op._verified(s, m)
        if ok is not None:
            s, m, ps = s.filter(ok), m.filter(ok), ps[ok]
        if len(ps):
            pairs.append((s, m))
            matched |= np.isin(slots, ps)
    op._c.served_disk += len(slots)
    hs.live -= len(slots)
    op._c.matched += int(np.count_nonzero(matched))
    if not matched.all():
        unmatched.append(hs.take(slots[~matched]))
    hs.values -= len(np.unique(which))
    op.stats.delete(keys)
    op._c.switched_in += len(keys)


@njit(cache=True)
def _filter_answers(
    keys: np.ndarray, bits: np.ndarray, mode: int, base: int, nbits: int, oor: bool
) -> np.ndarray:  # pragma: no cover
    """Mask of ``keys`` the R-filter answers (tests negative)."""
    out = np.zeros(keys.shape[0], dtype=np.bool_)
    for i in range(keys.shape[0]):
        out[i] = not rf_test(bits, mode, base, nbits, oor, keys[i])
    return out


def drop_answered_empties(op: SemiStreamJoin) -> int:
    """Drop the empty entries of values the answering R-filter tests negative.

    The cache phase asks the filter before the empty entries, so such an entry is never
    consulted again (with a bitmap: every one). Returns how many were dropped.
    """
    rf = op.rfilter.answering(op._rc)
    e = op.cache.empties
    if rf is None or not e.size:
        return 0
    return e.drop_mask(_filter_answers(e.keys, rf.bits, rf.mode, rf.base, rf.nbits, rf.oor))


def plan_filter(op: SemiStreamJoin) -> None:
    """At an R-cycle start: plan the R-filter from the last R-cycle and start building it.

    First at R-cycle 3 (R-cycle 2 measured how many tuples left H_S without a match),
    then at every eviction R-cycle (a rebuilt filter forgets values deleted from R). The
    saving is the H_S bytes those tuples would hold (they wait one R-cycle each), counted
    with the tuples the filter answered itself. ``always`` (tests): from R-cycle 2, as
    large as the planner allows. A filter must fit the budget's unplanned bytes now, with
    ``FILTER_SLACK`` (H_S keeps a cushion for it ahead of an eviction R-cycle,
    :func:`ssbj.core.budget.cushion_bytes`, but cannot shrink under its live tuples): a
    rebuild that does not is skipped (the active filter answers on, forgetting deleted
    values later), a first filter deferred: its bytes are kept free in this R-cycle
    (:func:`ssbj.core.budget.fixed_bytes`) and it is planned again at the next start.
    """
    op._c.bump("empties_filtered", drop_answered_empties(op))
    mode, rc = op.spec.r_filter, op._rc
    c = op._c.extra
    now = (c.get("hs_unmatched", 0), c.get("filter_answered", 0))
    mark, op._rf_mark = op._rf_mark, now
    first = 2 if mode == "always" else 3
    if mode == "off" or rc < first or op.rfilter.building is not None:
        return
    if rc != first and rc % op.spec.eviction_interval != 0 and not op._rf_pending:
        return
    value_less = (now[0] - mark[0]) + (now[1] - mark[1])
    saving = 1e18 if mode == "always" else value_less * op.tuple_cost()
    rows, kmin, kmax = (int(x) for x in op._scan_last)
    p = rf_plan(rows, kmin, kmax, is_exact(op._family), saving)
    if p.mode == OFF:
        op.rfilter.drop()
        op._rf_pending = 0
        return
    slack = FILTER_SLACK * (op.spec.memory_budget or 0)
    if p.nbytes > B.unplanned(op) + op._rf_pending + slack:  # (the bytes kept for it are its own)
        # H_S is sized for this R-cycle and cannot shrink under its live tuples
        if op.rfilter.active is not None:  # it answers on; rebuilt at a later eviction R-cycle
            op._c.bump("filter_rebuilds_skipped")
            return
        op._rf_pending = p.nbytes  # kept free in this R-cycle, built at the next start
        op._c.bump("filter_deferred")
        return
    op._rf_pending = 0
    op.rfilter.start(p, rc)
    op._c.bump("filter_builds")
