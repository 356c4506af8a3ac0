"""The complete-cache mode (Theorem 3 (c)): SSBJ as a main-memory hash join holding all of R.

Entered at an R-cycle start when :func:`ssbj.core.switching.holds_all_of_r` holds and the
switch fits the budget (:func:`take_all_fits`), ``JoinSpec.complete_cache``
allowing it:

1. *take-all* R-cycle: the FSM instrumentation is off, and every master row read whose
   value is neither cached (with rows, or empty) goes to the switching buffer s_B, with
   its partition tag (:func:`take_all_rows`): all rows of every uncached value, as the
   switching FSM collects them for one value. The budget reserves s_B and the switch-in's
   transient for this R-cycle (:func:`ssbj.core.hrsize.take_all_bytes`).
2. at the next R-cycle start (:func:`end_take_all`) all of s_B is switched in at once
   (:func:`ssbj.core.switching.rebuild_hr`, :func:`ssbj.core.switching.switch_in`: an H_S
   tuple that entered at partition p0 of the take-all R-cycle met p0..k-1 there and gets
   the s_B rows of partitions < p0, read in the same R-cycle before it entered: exact).
   Every tuple still in H_S has a value no row of that R-cycle had (a row would have put
   its value into s_B or H_R): it finishes unmatched. The cache is then *complete*.
3. *complete* (:func:`ssbj.core.completephase.complete_phase`): a tuple whose value misses H_R finishes at once,
   unmatched: no master row as of the last read of every partition (at most one R-cycle
   old, the freshness of every cached row); nothing enters H_S. The disk phase is the
   refresh only, and it also adds the rows of values new in R and drops values whose rows
   all disappeared (:func:`refresh_complete`), so an insert into R is served within one
   R-cycle. If R outgrows the budget (at an R-cycle start, or when a refresh would grow
   H_R beyond it) the mode is left (:func:`leave`): the cache stays, misses go to H_S
   again and the FSM resumes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core import hrsize as HZ
from ssbj.core import switching as SW
from ssbj.core import takeall as TA
from ssbj.core.arrowtypes import take_rows
from ssbj.core.cache import HR_F, HR_SINCE
from ssbj.core.empties import es_find
from ssbj.core.hashing import kset_find, mix
from ssbj.core.hsindex import EMPTY
from ssbj.core.interest import interest_test
from ssbj.core.jit import njit
from ssbj.core.refresh import refresh_pairs, rows_equal
from ssbj.core.resident import remember, views_of_resident

if TYPE_CHECKING:
    from ssbj.core.keys import EncodedKeys
    from ssbj.core.operator import SemiStreamJoin
    from ssbj.core.scanacc import RefreshRows

# mypy: disable-error-code="return-value,arg-type,no-any-return"

TAKE_ALL = 3  # FSM codes beside 1 incrementing, 2 switching, 0 phase-out
COMPLETE = 4


# ---------------------------------------------------------------- kernels
@njit(cache=True, nogil=True)
def take_all_rows(
    mkeys: np.ndarray, mvalid: np.ndarray, hk: np.ndarray, hused: np.ndarray, ek: np.ndarray, ibits: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """Rows (in read order) whose value is neither in H_R nor an empty entry: s_B of a take-all R-cycle.

    (A value cached empty that gains rows gets them from the refresh, as always.)
    """
    every = mvalid.shape[0] == 0
    out = np.empty(mkeys.shape[0], dtype=np.int64)
    n = 0
    for i in range(mkeys.shape[0]):
        if not every and not mvalid[i]:
            continue
        key = mkeys[i]
        if interest_test(ibits, mix(key)) and (kset_find(hk, hused, key) >= 0 or es_find(ek, key) >= 0):
            continue
        out[n] = i
        n += 1
    return out[:n]


@njit(cache=True, nogil=True)
def split_rows(
    mkeys: np.ndarray, mvalid: np.ndarray, hk: np.ndarray, hused: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Rows of cached values with their H_R slot, and rows of values new to H_R (read order)."""
    every = mvalid.shape[0] == 0
    b = mkeys.shape[0]
    rf_row = np.empty(b, dtype=np.int64)
    rf_slot = np.empty(b, dtype=np.int64)
    new = np.empty(b, dtype=np.int64)
    nrf = 0
    nn = 0
    for i in range(b):
        if not every and not mvalid[i]:
            continue
        j = kset_find(hk, hused, mkeys[i])
        if j >= 0:
            rf_row[nrf] = i
            rf_slot[nrf] = j
            nrf += 1
        else:
            new[nn] = i
            nn += 1
    return rf_row[:nrf], rf_slot[:nrf], new[:nn]


# ---------------------------------------------------------------- mode changes
def allowed(op: SemiStreamJoin) -> bool:
    """Whether the spec lets the operator take all of R (SSBJ with a budget, ``complete_cache``)."""
    return op._use_cache and op.spec.complete_cache and op.spec.memory_budget is not None


def end_take_all(
    op: SemiStreamJoin, resident: bool, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> None:
    """At the R-cycle start after a take-all R-cycle: switch all of s_B in; complete if R still fits."""
    store, op._store = op._store, None
    if store is not None or op._take_all_void:
        done = store is not None and not op._take_all_void and resident and allowed(op)
        done = done and _switch_store(op, store, pairs, unmatched)  # type: ignore[arg-type]
        del store
        op._sb_bytes = 0
    else:
        peak = op.memory().total + HZ.switch_transient(op)  # H_S, old H_R, s_B and the rebuild, at once
        keys = np.unique(np.concatenate([k for _, k, _, _ in op._sb])) if op._sb else np.zeros(0, np.int64)
        if len(keys):
            SW.rebuild_hr(op, np.zeros(0, np.int64), keys)
            SW.switch_in(op, keys, pairs, unmatched)
        op._switch_peak = peak
        op._c.bump("take_all_values", len(keys))
        done = resident and allowed(op)
    op._sb, op._sb_bytes = [], 0
    op._take_all = op._take_all_void = False
    op._take_all_reserve = 0
    op._complete_seen.clear()
    if done:
        _finish_hs(op, unmatched)
        op.cache.empties.drop_mask(np.ones(op.cache.empties.size, dtype=bool))  # a miss needs no entry now
        op._complete = True
        op._c.bump("complete_entered")


def _switch_store(
    op: SemiStreamJoin, store: TA.RowStore, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> bool:
    """Switch s_B written in place in (:mod:`ssbj.core.takeall`); False (nothing switched) if it does not fit.

    The peak is counted at the arrays' nbytes: the sort beside everything held (the old H_R's
    rows twice), then the new index once the old rows are gone.
    """
    cache = op.cache
    n_sb = store.n
    old_keys = cache.key_array()
    held = op.memory().total + old_keys.nbytes
    ok = store.append(cache.table(), None, old_keys, cache.src)
    del old_keys
    if not ok:  # (R grew beyond the store, or H_R holds a NULL the store cannot)
        return _void(op)
    order = TA.sort_order(store)
    v, v_sb = TA.count_runs(store.keys, order, store.n, n_sb)
    keys = np.empty(v_sb, np.int64)
    TA.sb_values(store.keys, order, store.n, n_sb, keys)
    held = max(held, op.memory().total)
    budget = op.spec.memory_budget or 0
    sort_peak = held + TA.sort_bytes(store.n) + keys.nbytes
    index_peak = held - cache.row_nbytes() + TA.index_bytes(int(v))
    if max(sort_peak, index_peak) > budget:
        return _void(op)
    TA.permute_into(cache, store, order)
    del order
    op._sb_bytes = store.nbytes  # (its keys: the columns and tags are H_R's now)
    TA.index_from(cache, store, int(v), op._rc)
    op._sb_bytes = 0
    SW.switch_in(op, keys, pairs, unmatched)
    op._switch_peak = max(sort_peak, index_peak)
    op._c.bump("take_all_values", len(keys))
    return True


def _void(op: SemiStreamJoin) -> bool:
    """Drop the take-all's s_B: nothing switches in (H_S meets every partition as always)."""
    op._store = None
    op._store_failed = True  # (later take-alls hold s_B as tables)
    op._sb_bytes = 0
    op._c.bump("take_all_void")
    return False


def store_append(op: SemiStreamJoin, part: pa.Table, rows: np.ndarray, keys: np.ndarray, p: int) -> None:
    """Write a take-all piece's s_B rows in place; a piece that does not fit voids the R-cycle's s_B.

    (The R-cycle stays a take-all R-cycle: the FSM cannot resume mid R-cycle, see departure 1.)
    """
    store = op._store
    if store is None:
        return
    if store.append(part, rows, keys, p):
        op._sb_seq += 1
    else:
        _void(op)
        op._take_all_void = True


def next_mode(op: SemiStreamJoin, resident: bool) -> None:
    """At an R-cycle start (after the phase-out): leave the complete cache, or start a take-all R-cycle."""
    if op._complete:
        if not (resident and allowed(op)):
            leave(op)
        return
    if op._take_all or op._sb or not (resident and allowed(op)) or not take_all_fits(op):
        op._take_all_pending = False
        return
    reserve = HZ.take_all_bytes(op)
    op._take_all_reserve = reserve
    if op._take_all_pending or _ring_fits_beside(op, reserve):
        op._take_all_pending = False
        op._take_all = True
        if HZ.store_path(op):
            op._store = TA.RowStore(op._master_layout, HZ.store_rows(max(int(op._scan_last[0]), op.cache.rows)))
            op._sb_bytes = op._store.nbytes
        op._c.bump("take_all_cycles")
    else:  # H_S's live tuples hold the room: reserve it for an R-cycle first, while the ring shrinks
        op._take_all_pending = True
        op._c.bump("take_all_deferred")


def _ring_fits_beside(op: SemiStreamJoin, reserve: int) -> bool:
    """Whether H_S's live tuples fit in what the budget leaves H_S beside ``reserve``.

    (The ring cannot shrink under its live tuples.)
    """
    budget = op.spec.memory_budget
    assert budget is not None  # noqa: S101 - allowed() checked it
    per = B.per_tuple_bytes(op)
    avail = budget - (B.fixed_bytes(op, sb_reserve=False) + reserve)
    k = max(op._k, 1)
    return op.hs.span * per <= avail * (1.0 - 1.0 / k)


def take_all_fits(op: SemiStreamJoin) -> bool:
    """Whether a take-all R-cycle fits: its s_B and switch-in beside everything else, and H_S's tenth."""
    budget = op.spec.memory_budget
    if budget is None:
        return False
    hs = SW.RESIDENT_HS_SHARE * budget
    # beside what is held now (no s_B reserve): s_B, the switch-in, and the temporaries of an
    # H_S of that share (the ring shrinks to what the take-all leaves it)
    temps = op._transient_per_tuple * hs / max(B.per_tuple_bytes(op), 1.0)
    held = B.fixed_bytes(op, sb_reserve=False) - B.temporaries_reserve(op) + temps
    return held + HZ.take_all_bytes(op) + hs <= budget


def refresh_fits(op: SemiStreamJoin, rows: int) -> bool:
    """Whether H_R of ``rows`` rows still holds all of R, and its rebuild fits beside everything held now."""
    budget = op.spec.memory_budget
    if budget is None or not SW.holds_rows(op, rows):
        return False
    grow = max(0, rows - op.cache.rows) * (HZ.layout_row_bytes(op) + 4 + op.entry_cost())
    return op.memory().total + grow + HZ.rebuild_bytes(op, rows) <= budget


def refresh_room(op: SemiStreamJoin, p: int, rows_of_p: int) -> bool:
    """Whether an FSM refresh that gives partition p ``rows_of_p`` cached rows fits the budget.

    Only growth is checked (the rebuild's temporaries are reserved, :func:`ssbj.core.budget.temporaries_reserve`):
    after the complete cache is left, R may have grown under cached values.
    """
    budget = op.spec.memory_budget
    grow = rows_of_p - int(op.cache.cnt_src[p]) if p < len(op.cache.cnt_src) else rows_of_p
    if budget is None or grow <= 0:
        return True
    rows = op.cache.rows + grow
    temps = max(HZ.rebuild_bytes(op, rows) - B.temporaries_reserve(op), 0)  # beyond what is reserved
    return op.memory().total + grow * (HZ.layout_row_bytes(op) + 4) + temps <= budget


def clear_cache(op: SemiStreamJoin, beside: int = 0) -> bool:
    """Empty H_R (its refresh does not fit the budget): exact, as an eviction, at no rebuild's cost.

    A tuple of a value no longer cached enters H_S and meets every partition. Returns True (H_R changed).
    """
    cache = op.cache
    drop = cache.index.keys[cache.index.used]
    cache.rebuild(drop, None, np.zeros(0, np.int64), np.zeros(0, np.int32), op._rc, beside=beside + drop.nbytes)
    op.rebuild_interest()
    op._c.bump("refresh_cleared")
    return True


def leave(op: SemiStreamJoin) -> None:
    """Leave the complete cache: H_R stays as it is, misses go to H_S again, the FSM resumes."""
    op._complete = False
    op._complete_seen.clear()
    pay = op.cache.index.payload
    pay[:, HR_F] = 0  # (not counted while complete) eviction counts the hits from now
    pay[:, HR_SINCE] = op._rc
    op._c.bump("complete_left")
    if op.spec.memory_budget is not None:
        B.adapt(op)  # H_S had a token ring while complete


def _finish_hs(op: SemiStreamJoin, unmatched: list[pa.Table]) -> None:
    """Finish every tuple left in H_S: its value had no master row in the take-all R-cycle."""
    hs = op.hs
    if hs.live:
        slots = np.arange(hs.lo, hs.hi, dtype=np.int64)
        slots = slots[~hs.removed(slots)]
        matched = hs.matched(slots)
        n_m = int(np.count_nonzero(matched))
        op._c.matched += n_m
        op._c.served_disk += len(slots)
        if n_m < len(slots):
            unmatched.append(hs.take(slots[~matched]))
            op._c.bump("hs_unmatched", len(slots) - n_m)
    hs.rows.drop_before(hs.hi)
    hs.hix.fill(EMPTY)
    hs.values = 0
    hs.live = 0
    hs.row_bytes = 0
    while len(hs.queue):
        hs.queue.pop()


# ---------------------------------------------------------------- disk phase
def complete_piece(op: SemiStreamJoin, p: int, part: pa.Table, mk: EncodedKeys, acc: RefreshRows) -> None:
    """Run the disk phase of the complete cache on one piece of a partition: gather what the refresh needs."""
    if not acc.refresh:
        return
    if acc.whole and p in op._complete_seen:
        seen = views_of_resident(op, p, part)
        if seen is not None and op._complete_seen[p][0] == seen:
            acc.refresh = False  # the whole partition, unchanged since H_R's rows of it were made equal to it
            return
    cache = op.cache
    rf_row, rf_slot, new = split_rows(mk.values, mk.valid, cache.index.keys, cache.index.used)
    op._note_transient(rf_row.nbytes + rf_slot.nbytes + new.nbytes)
    rows = acc.rows(op, part, mk.values, mk.valid, rf_row, rf_slot, 0, new)
    if rows is not None:
        acc.keep(op, take_rows(part, rows), mk.values, rows, len(rf_row), rf_slot)


def refresh_complete(
    op: SemiStreamJoin,
    p: int,
    part: pa.Table,
    keys: np.ndarray,
    rf_row: np.ndarray,
    rf_slot: np.ndarray,
    n_new: int,
    beside: int = 0,
) -> bool:
    """Make H_R's rows read from partition p what was read now: updates, deletes and new values.

    ``part`` holds the valid rows of p (``keys`` their encoded keys), ``rf_row`` those of
    values cached now (``rf_slot`` their index slot), ``n_new`` rows are of other values.
    A value whose rows are all gone leaves H_R (a miss is answered anyway). If H_R would
    outgrow the budget, the complete cache is left and only cached values are refreshed.
    Returns whether H_R changed.
    """
    cache = op.cache
    if len(rf_row) == 0 and n_new == 0 and cache.cnt_src[p] == 0:
        return False
    seen = views_of_resident(op, p, part)
    if seen is not None and op._complete_seen.get(p, (None,))[0] == seen:
        return False  # the very buffers H_R's rows of p were last made equal to (immutable)
    changed = n_new > 0
    if not changed:
        old, matched = refresh_pairs(cache.index.payload, cache.src, rf_row, rf_slot, p)
        changed = matched != len(rf_row) or matched != cache.cnt_src[p]
        if not changed and matched:
            changed = not rows_equal(part, rf_row, cache.columns, old)
    if not changed:
        remember(op, p, part, seen)
        return False
    rows_after = cache.rows - int(cache.cnt_src[p]) + part.num_rows
    if not refresh_fits(op, rows_after):
        leave(op)  # R grew beyond the budget: the cached values are refreshed as usual
        op._c.bump("complete_outgrown")
        if not refresh_room(op, p, len(rf_row)):
            return clear_cache(op, beside)
        return cache.refresh(p, part, keys, rf_row, rf_slot, 0, op._rc, beside)
    before = cache.index.keys[cache.index.used]
    op._switch_transient = max(op._switch_transient, HZ.rebuild_bytes(op, rows_after))  # (reported with the step)
    src = np.full(part.num_rows, p, np.int32)
    cache.rebuild(np.zeros(0, np.int64), part, keys, src, op._rc, keep_src_not=p, beside=beside + src.nbytes)
    if n_new:
        added = np.unique(keys[~np.isin(keys, before)])
        op.interest.add(added)
        if op.interest.overfull:
            op.rebuild_interest()
        op._c.bump("complete_values_added", len(added))
    remember(op, p, part, seen)
    return True
