"""Index mode (``JoinSpec.hybrid == "index"``, docs/hybrid.md): SSBJ's cache in front of an index, no scan.

With an index on the join key, a partition read serves only the few values that wait for
it; the batched lookup of the waiting keys serves them all. Index mode keeps SSBJ's
cache and replaces the scan:

* every step, the cache phase answers hits from H_R and the empty entries, and the
  misses are looked up at once (:func:`ssbj.core.lookupphase.lookup_phase`);
* of the values just looked up, those the inequality takes enter H_R with the rows just
  read (or the empty entries, with none), densest first (tuples per byte) within the
  budget's room (:func:`admit`). The waiting tuples cost no memory here (they are looked
  up at once), so the inequality weighs lookups: value j is cached iff ``s_f`` times its
  tuples per R-cycle exceed the one lookup per R-cycle that keeps it fresh. Its tuples
  per R-cycle are estimated from this step: its tuples in the step times the R-cycle's
  tuples over the step's;
* no partition is read. The R-cycle is :func:`cycle_tuples` stream tuples (by default
  about the scan's R-cycle at the same budget); at its start
  H_R and the empty entries are evicted by the same inequality on the hits they served
  (Algorithm 1, lines 42-51), every R-cycle;
* freshness: the cached values are split into k slices (a hash of the value mod k); as
  the R-cycle's tuples are read, the slices due are looked up again (:func:`refresh`),
  so every cached value, with rows or empty, is re-read once per R-cycle, and no
  enrichment uses a master row read more than one R-cycle (of stream tuples) ago. New
  master rows of a value not cached are found by its next lookup.

Exactness: a value is cached with every row a lookup of it returned, so a hit joins what a
lookup would (as of the value's last read); everything else is looked up. Only exact key
types cache: H_R is keyed by the encoded value, and a hashed encoding (strings) may stand
for two values, whose rows a lookup of one of them does not all return. Other key types
are looked up every time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core.cache import HR_F, HR_SINCE
from ssbj.core.diskphase import note_master_rows
from ssbj.core.hashing import capacity_for
from ssbj.core.keys import decode_keys, is_exact
from ssbj.core.lookupphase import Fetched, LookupDone, Offer, fetch, lookup_phase, run_positions
from ssbj.core.refresh import HR_LEN, HR_START

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

MEASURE_ROWS = 1 << 20  # master rows measured for v_R (the rows of lookups, as the scan measures its first)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def on(op: SemiStreamJoin) -> bool:
    """Whether ``op`` runs in index mode."""
    return op.spec.hybrid == "index"


def caches(op: SemiStreamJoin) -> bool:
    """Whether values may enter the cache (SSBJ, an exact key type)."""
    return op._use_cache and is_exact(op._family)


def slice_of(keys: np.ndarray, k: int) -> np.ndarray:
    """Return the refresh slice (0 .. k-1) of each encoded value: a multiplicative hash, mod k."""
    h = (np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64) * _MIX) >> np.uint64(33)
    out: np.ndarray = (h % np.uint64(max(k, 1))).astype(np.int64)
    return out


CYCLE_FACTOR = 2.0  # the default R-cycle: this many times the waiting tuples the budget holds


def cycle_tuples(op: SemiStreamJoin) -> int:
    """Stream tuples per R-cycle: ``JoinSpec.index_cycle_tuples``, or CYCLE_FACTOR x what the budget holds.

    The scan's R-cycle is the tuples H_S holds over the share that waits: with half the
    budget in H_S and half the tuples served by the cache, about the budget's worth of
    waiting tuples twice over (k chunks' worth without a budget).
    """
    if op.spec.index_cycle_tuples is not None:
        return op.spec.index_cycle_tuples
    held = op.spec.memory_budget if op.spec.memory_budget is not None else max(op._k, 1) * op.spec.chunk_bytes
    return max(1, max(op._k, 1), int(CYCLE_FACTOR * held / max(op.tuple_cost(), 1.0)))


def measure_rows(op: SemiStreamJoin, rows: pa.Table) -> None:
    """v_R from the rows looked up (no partition is read to measure it), up to MEASURE_ROWS of them."""
    if op._c.extra.get("master_rows_measured", 0) < MEASURE_ROWS:
        note_master_rows(op, rows)


def _room(op: SemiStreamJoin, more_rows: int, beside: int) -> float:
    """Bytes new cached values may take now: the budget's unplanned bytes less the rebuild's growth.

    Adding rows copies H_R's columns one at a time beside the old ones and may grow the
    index (:meth:`ssbj.core.cache.Cache._append`), while the lookup's result (``beside``)
    and the rows taken from it are alive; what that holds beyond the temporaries already
    reserved is kept free too.
    """
    if op.spec.memory_budget is None:
        return float(1 << 62)
    rows = op.cache.rows + more_rows
    grow = 2 * B.widest_column_bytes(op) * rows + beside + more_rows * B.layout_row_bytes(op)
    index = 16 * capacity_for(op.cache.values + more_rows) if more_rows else 0
    extra = max(0.0, grow + index - B.temporaries_reserve(op))
    return B.unplanned(op) - extra


def admit(op: SemiStreamJoin, offer: Offer, read: int) -> None:
    """Cache the values of ``offer`` the inequality takes (``read``: tuples the step read), densest first."""
    measure_rows(op, offer.fetched.rows)
    if not caches(op) or not len(offer.keys):
        return
    f = offer.fetched
    lo, cnt = f.runs(offer.keys)
    per_cycle = offer.tuples.astype(np.float64) * (cycle_tuples(op) / max(read, 1))
    cost = np.where(cnt > 0, cnt * op.row_cost() + op.entry_cost(), op.empty_cost())
    want = np.flatnonzero(op.spec.switch_factor * per_cycle > 1.0)  # as evict() weighs them
    if not len(want):
        return
    want = want[np.argsort(-(per_cycle[want] / np.maximum(cost[want], 1.0)), kind="stable")]
    held = cnt[want] * (B.layout_row_bytes(op) + 4) + np.where(cnt[want] > 0, op.entry_cost(), op.empty_cost())
    room = _room(op, int(cnt[want].sum()), f.nbytes)
    if room <= 0:
        op._c.bump("index_no_room", len(want))
        return
    fits = np.cumsum(held) <= room
    if not fits.all():
        op._c.bump("index_no_room", int(np.count_nonzero(~fits)))
    want = np.sort(want[fits])
    keys, lo, cnt = offer.keys[want], lo[want], cnt[want]
    with_rows = cnt > 0
    added = 0
    if with_rows.any():
        kr = keys[with_rows]
        pos = run_positions(lo[with_rows], cnt[with_rows])
        idx = f.order[pos]
        add = f.rows.take(pa.array(idx))
        # HR_SINCE one ahead: judged at eviction only after a whole R-cycle (:func:`evict`)
        op.cache.rebuild(np.zeros(0, np.int64), add, f.sorted_keys[pos], f.part[idx].astype(np.int32), op._rc + 1)
        op.cache.last_transient += add.nbytes + f.nbytes  # (both alive beside the rebuild)
        added = len(kr)
        op.interest.add(kr)
    empty = keys[~with_rows]
    if len(empty):
        n = op.cache.empties.add_within(empty, B.empties_room(op))
        op.interest.add(empty[:n])
        op._c.bump("index_admitted_empty", n)
    if op.interest.overfull:
        op.rebuild_interest()
    op.stats.delete(keys)
    op._c.bump("index_admitted", added)


def refresh(op: SemiStreamJoin, first: int, end: int) -> None:
    """Look up again the cached values of slices ``first .. end - 1``; rebuild H_R if their rows changed."""
    cache = op.cache
    if cache.values + cache.empty_values == 0:
        return
    cached = cache.values_cached()
    sl = slice_of(cached, op._k)
    sel = np.sort(cached[(sl >= first) & (sl < end)])
    if not len(sel):
        return
    mtype = op._master_layout.field(0).type
    f = fetch(op, decode_keys(sel, mtype, op._family))
    op._note_transient(f.nbytes)
    op._c.bump("index_refreshed", len(sel))
    op._c.bump("lookup_rows", f.rows.num_rows)
    ix = cache.index
    had_rows = sel[np.isin(sel, ix.keys[ix.used])]
    if not _changed(op, sel, had_rows, f):
        return
    pos = run_positions(*f.runs(sel))
    idx = f.order[pos]
    add = f.rows.take(pa.array(idx))
    cache.rebuild(had_rows, add, f.sorted_keys[pos], f.part[idx].astype(np.int32), op._rc, cached_after=sel)
    cache.last_transient += add.nbytes + f.nbytes
    op._c.bump("index_refresh_rebuilds")
    op.rebuild_interest()


def _changed(op: SemiStreamJoin, sel: np.ndarray, had_rows: np.ndarray, f: Fetched) -> bool:
    """Whether the rows looked up differ from H_R's for ``sel`` (a value gained or lost rows, a row changed)."""
    new_keys = np.unique(f.sorted_keys)
    if not np.array_equal(new_keys, had_rows):
        return True  # a value gained its first row or lost its last (or an empty one now has rows)
    if not len(had_rows):
        return False
    ix = op.cache.index
    slots = np.flatnonzero(ix.used)
    slots = slots[np.isin(ix.keys[slots], had_rows)]
    slots = slots[np.argsort(ix.keys[slots], kind="stable")]
    start, length = ix.payload[slots, HR_START].astype(np.int64), ix.payload[slots, HR_LEN].astype(np.int64)
    if int(length.sum()) != len(f.sorted_keys):
        return True
    _, cnt = f.runs(had_rows)
    if not np.array_equal(cnt, length):
        return True
    old = run_positions(start, length)
    # the same rows in the same order (value, then partition, then read order): else rebuilt
    order = f.order[np.lexsort((f.part[f.order], f.sorted_keys))]  # as H_R's runs: value, partition
    if not np.array_equal(op.cache.src[old].astype(np.int64), f.part[order]):
        return True
    olds = op.cache.table().take(pa.array(old))
    news = f.rows.take(pa.array(order))
    return not all(a.equals(b) for a, b in zip(olds.columns, news.columns, strict=True))


def lookup(
    op: SemiStreamJoin, p: int, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> LookupDone | None:
    """Finish every miss of this step by lookup (``None``: no miss)."""
    if not op.hs.live:
        return None
    before = op._transient
    done = lookup_phase(op, p, pairs, unmatched)
    # H_S is empty at the step's end: the lookup's temporaries per miss are measured here
    op._transient_per_tuple = max(op._transient_per_tuple, (op._transient - before) / max(done.tuples, 1))
    return done


def after_lookup(op: SemiStreamJoin, p: int, done: LookupDone | None, read: int) -> None:
    """Cache what the lookup offers, refresh the slices now due, and move on in the R-cycle.

    ``p`` is the next slice to refresh; after the step's ``read`` tuples, the slices up to
    the share of :func:`cycle_tuples` read so far are due (at least one a step). When all
    k are refreshed, the R-cycle ends: the next step begins the next one.
    """
    if done is not None and done.offer is not None:
        admit(op, done.offer, read)
    k = max(op._k, 1)
    op._ix_read += read
    due = min(k, max(p + 1, -(-op._ix_read * k // cycle_tuples(op))))
    refresh(op, p, due)
    if op.spec.memory_budget is not None and op._rc == 1 and p == 0:
        B.adapt(op)  # the first lookup is measured now: size the chunks of cycle 1
    op._p = due % k
    op._cycle_open = op._p != 0
    if not op._cycle_open:
        op._ix_read = 0


def evict(op: SemiStreamJoin) -> tuple[np.ndarray, int]:
    """Lines 42-51 with index mode's sides: evict a value unless s_f times its hits per R-cycle exceed one lookup.

    A value admitted during the R-cycle that just ended (``HR_SINCE`` set ahead, to that
    R-cycle + 1, by :func:`admit`) saw only part of it: it is judged after a whole one.
    Returns (values with rows to evict, empty entries evicted).
    """
    ix, rc, sf = op.cache.index, op._rc, op.spec.switch_factor
    pay = ix.payload
    since = pay[:, HR_SINCE].astype(np.int64)
    young = ix.used & (since >= rc)
    hits = pay[:, HR_F].astype(np.float64)
    out = ix.used & ~young & (sf * hits / np.maximum(1, rc - since) <= 1.0)
    restart = ix.used & ~out
    pay[restart, HR_F] = 0
    pay[restart, HR_SINCE] = rc
    return ix.keys[out], op.cache.empties.evict(1.0, 1.0, sf, rc)
