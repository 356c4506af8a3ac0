"""Index mode (``JoinSpec.hybrid == "index"``, docs/hybrid.md): SSBJ's cache in front of an index, no scan.

With an index on the join key, a partition read serves only the few values that wait for
it; the batched lookup of the waiting keys serves them all. Index mode keeps SSBJ's
cache and replaces the scan:

* every step, the cache phase answers hits from H_R and the empty entries, and the
  misses are looked up at once (:func:`ssbj.core.lookupphase.lookup_phase`);
* of the values just looked up, those the doorkeeper saw before (:mod:`ssbj.core.doorkeeper`:
  a second lookup within this R-cycle and the last) or with two tuples in the step, and
  that the inequality takes, enter H_R with the rows just read (or the empty entries,
  with none), densest first (tuples per byte) within the budget's room (:func:`admit`).
  The waiting tuples cost no memory here (they are looked up at once), so the inequality
  weighs lookups: value j is cached iff ``s_f`` times its tuples per R-cycle exceed the
  one lookup per R-cycle that keeps it fresh;
* no partition is read. The R-cycle is :func:`cycle_tuples` stream tuples (by default
  about the scan's R-cycle at the same budget), k ticks of it;
* freshness and eviction (Algorithm 1, lines 42-51, per value): a value with rows is due
  one R-cycle after it was read (``HR_SINCE`` holds the tick). Then it is judged on that
  R-cycle's hits: evicted, with no lookup, unless ``s_f`` times them exceed one lookup,
  else looked up again (:func:`refresh`). The empty entries are looked up again in k
  slices (a hash of the value mod k, one slice a tick) and judged at each R-cycle start
  (:func:`evict`). So no enrichment uses a master row read more than one R-cycle (of
  stream tuples, plus the step's) ago. New master rows of a value not cached are found
  by its next lookup.

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
from ssbj.core import hrsize as HZ
from ssbj.core.cache import HR_F, HR_SINCE, INDEX_LOAD
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


APPEND_ROW_BYTES = 48  # the append's per added row: its order (twice), sorted key, tag, run arrays


def _room(op: SemiStreamJoin, more_rows: int, more_values: int, beside: int) -> float:
    """Bytes new cached values may take now: the budget's unplanned bytes less the append's temporaries.

    Adding rows (:meth:`ssbj.core.cache.Cache._append`) writes each of H_R's columns anew,
    with the added rows, beside the old one (and the added rows' copy twice), or, when the
    index must grow, holds the old index beside the new; meanwhile the lookup's result
    (``beside``) and the rows taken from it are alive. What that holds beyond the
    temporaries already reserved is kept free too, and so is the step's share
    (``INDEX_CHUNK_SHARE``, its misses and their lookup's temporaries) where the ring as
    laid out holds less: a cache grown into it would shrink the steps, and with them the
    ``IN`` lists (at R = 20M, 1% of R and an R-cycle of 2.2M tuples: 3,131 steps against
    339, 20 us a key against 15).
    """
    budget = op.spec.memory_budget
    if budget is None:
        return float(1 << 62)
    step = op.hs.nbytes() + op._transient_per_tuple * op.hs.cap
    short = max(0.0, B.INDEX_CHUNK_SHARE * budget - step)
    cache = op.cache
    widest = HZ.widest_column_bytes(op)
    columns = widest * (cache.rows + 3 * more_rows)
    grows = capacity_for(cache.values + more_values, INDEX_LOAD) > cache.index.cap
    index = cache.index.nbytes + 16 * more_values if grows else 0
    held = beside + more_rows * (HZ.layout_row_bytes(op) + APPEND_ROW_BYTES)
    extra = max(0.0, max(columns, index) + held - B.temporaries_reserve(op))
    return B.unplanned(op) - extra - short


def admit(op: SemiStreamJoin, offer: Offer, read: int) -> None:
    """Cache the values of ``offer`` the inequality takes (``read``: tuples the step read), densest first."""
    measure_rows(op, offer.fetched.rows)
    if not caches(op) or not len(offer.keys):
        return
    f = offer.fetched
    lo, cnt = f.runs(offer.keys)
    per_cycle = offer.tuples.astype(np.float64) * (cycle_tuples(op) / max(read, 1))
    cost = np.where(cnt > 0, cnt * op.row_cost() + op.entry_cost(), op.empty_cost())
    # offered at a second tuple: in this step, or an earlier lookup in this R-cycle or the last
    seen = op.doorkeeper.seen(offer.keys)
    offered = seen | (offer.tuples > 1)
    op._c.bump("index_first_seen", int(len(offered) - np.count_nonzero(offered)))
    want = np.flatnonzero(offered & (op.spec.switch_factor * per_cycle > 1.0))  # as evict() weighs them
    if not len(want):
        return
    want = want[np.argsort(-(per_cycle[want] / np.maximum(cost[want], 1.0)), kind="stable")]
    held = cnt[want] * (HZ.layout_row_bytes(op) + 4) + np.where(cnt[want] > 0, op.entry_cost(), op.empty_cost())
    room = _room(op, int(cnt[want].sum()), len(want), f.nbytes)
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
        before, op.cache.last_transient = op.cache.last_transient, 0  # (an eviction's, this step)
        # read now: due (judged and looked up again) one R-cycle of ticks later (:func:`refresh`)
        op.cache.rebuild(np.zeros(0, np.int64), add, f.sorted_keys[pos], f.part[idx].astype(np.int32), op._ix_tick)
        # the append's temporaries, with the rows and the lookup's result alive beside them, fit in
        # the room _room kept: reported for this step, not reserved for every step after it
        op._switch_transient = max(op._switch_transient, op.cache.last_transient + add.nbytes + f.nbytes)
        op.cache.last_transient = before
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


def refresh(op: SemiStreamJoin, first: int, end: int, tick: int) -> None:
    """Judge and look up again the cached values now due; rebuild H_R if their rows changed.

    A value with rows is due one R-cycle (k ticks) after it was read (``HR_SINCE`` holds
    that tick; ``tick`` is the one this step reached). It is judged on the hits of exactly
    that R-cycle: evicted if s_f times them do not exceed the one lookup that would keep it
    fresh, else looked up again. Empty entries are refreshed by slice (``first .. end - 1``
    of :func:`slice_of`) and judged at the R-cycle start (:func:`evict`).
    """
    cache = op.cache
    if cache.values + cache.empty_values == 0:
        return
    k = max(op._k, 1)
    ix = cache.index
    due = ix.used & (ix.payload[:, HR_SINCE].astype(np.int64) + k <= tick)
    keys_due = ix.keys[due]
    cold = op.spec.switch_factor * ix.payload[due, HR_F].astype(np.float64) <= 1.0
    if cold.any():
        cache.rebuild(keys_due[cold], None, np.zeros(0, np.int64), np.zeros(0, np.int32), tick)
        op._c.evicted += int(np.count_nonzero(cold))
        op._c.bump("index_evicted_at_refresh", int(np.count_nonzero(cold)))
    again = np.sort(keys_due[~cold])
    em = cache.empties.keys
    sl = slice_of(em, k)
    sel = np.sort(np.concatenate([again, em[(sl >= first) & (sl < end)]]))
    if not len(sel):
        return
    mtype = op._master_layout.field(0).type
    f = fetch(op, decode_keys(sel, mtype, op._family))
    op._note_transient(f.nbytes)
    op._c.bump("index_refreshed", len(sel))
    op._c.bump("lookup_rows", f.rows.num_rows)
    if _changed(op, sel, again, f):
        pos = run_positions(*f.runs(sel))
        idx = f.order[pos]
        add = f.rows.take(pa.array(idx))
        cache.rebuild(again, add, f.sorted_keys[pos], f.part[idx].astype(np.int32), tick, cached_after=sel)
        cache.last_transient += add.nbytes + f.nbytes
        op._c.bump("index_refresh_rebuilds")
        op.rebuild_interest()
    ix = cache.index  # (a rebuild replaces its arrays)
    read = ix.used & np.isin(ix.keys, sel)
    ix.payload[read, HR_F] = 0
    ix.payload[read, HR_SINCE] = tick


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
    """Cache what the lookup offers, pass the ticks now due (refreshing), and move on in the R-cycle.

    ``p`` is the R-cycle's next tick (and empty-entry slice); after the step's ``read``
    tuples, the ticks up to the share of :func:`cycle_tuples` read so far pass (at least
    one a step). When all k have passed, the R-cycle ends: the next step begins the next one.
    """
    if done is not None and done.offer is not None:
        admit(op, done.offer, read)
    k = max(op._k, 1)
    op._ix_read += read
    due = min(k, max(p + 1, -(-op._ix_read * k // cycle_tuples(op))))
    op._ix_tick += due - p
    refresh(op, p, due, op._ix_tick)
    if op.spec.memory_budget is not None and op._rc == 1 and p == 0:
        # the first lookup is measured now: size the chunks of cycle 1. Its step was sized
        # before anything was measured; its temporaries are not what the sized steps hold
        op._transient_peak = 0
        B.adapt(op)
    op._p = due % k
    op._cycle_open = op._p != 0
    if not op._cycle_open:
        op._ix_read = 0


DOOR_FLOOR = 8  # a doorkeeper generation is sized for at least one value per this many tuples of an R-cycle


def rotate_doorkeeper(op: SemiStreamJoin) -> None:
    """At an R-cycle start: a new doorkeeper generation (the first sized for half an R-cycle's tuples)."""
    if caches(op):
        op.doorkeeper.rotate(cycle_tuples(op) // (2 if op._rc <= 1 else DOOR_FLOOR))


def evict(op: SemiStreamJoin) -> tuple[np.ndarray, int]:
    """Lines 42-51 for the empty entries, every R-cycle: evict unless s_f times their hits exceed one lookup.

    Values with rows are judged one by one when due (:func:`refresh`). Returns (values
    with rows to evict: none here, empty entries evicted).
    """
    return np.zeros(0, np.int64), op.cache.empties.evict(1.0, 1.0, op.spec.switch_factor, op._rc)
