"""The memory budget: "Adapt MESHJOIN setting w" (Algorithm 1, line 11) with real sizes.

With ``memory_budget`` set, at every R-cycle start (and once the first partition has
been read, so the disk buffer is measured) H_S gets what the other structures leave:

    avail = budget - disk buffer - prefetch reserve - H_R - s_B reserve - value statistics
            - R-filter - Q - temporaries

and the ring of H_S is re-laid out to hold every slot that leaves, in ``k`` chunks of ``w`` or
``w + 1`` tuples (a chunk enters in the step's cache phase, up to the ring's room, and the
oldest leaves at the end of the step's disk phase after meeting all k partitions, so at most
k chunks are live), each tuple costing its row bytes, its encoded key and link, and a
worst-case share of the value index (every tuple a value of its own), so the budget holds
whatever the key distribution. The s_B reserve is planned at the R-cycle start from the
values that decide in it (:mod:`ssbj.core.switchroom`): s_B cannot outgrow it, it covers
H_R's growth when s_B moves in at the next R-cycle start, and the temporaries reserve, with
the disk buffer's room (no partition is held then), covers that switch-in's rebuild. The prefetch reserve is
``depth`` disk buffers (:mod:`ssbj.core.prefetch`): while the step joins partition p, the
next ``depth`` partitions may be held read ahead.

Everything else is admitted against the room left: a new empty cache entry, the statistics' growth.

A take-all R-cycle (:mod:`ssbj.core.complete`) reserves, instead of the s_B reserve, what
its switch-in holds at once beside today's structures (:func:`take_all_bytes`): s_B with
every uncached row of R, and the rebuild of H_R to all of R (:func:`rebuild_bytes`); when
H_S's live tuples would not leave that room, one R-cycle first reserves it while the ring
shrinks. While the cache is complete H_S holds nothing, and gets a token ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ssbj.core import switchroom as SR
from ssbj.core.hashing import capacity_for
from ssbj.core.hrsize import column_bytes, layout_row_bytes
from ssbj.core.hs import SWITCHING
from ssbj.core.hsindex import INDEX_LOAD, INDEX_SLOT
from ssbj.core.prefetch import prefetch_depth, prefetched_nbytes
from ssbj.core.stats import candidate_bytes

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

QUEUE_RECORD = 32  # bytes per chunk record of Q
STATS_SHARE = 0.06  # most of the budget the candidate table may take (~39 B per candidate)


@dataclass
class Plan:
    """What the last adaptation chose."""

    w_tuples: int = 0  # stream tuples per H_S chunk
    ring_slots: int = 0
    avail: int = 0  # bytes H_S may hold
    per_tuple: float = 0.0  # bytes one waiting tuple costs in H_S


# the value index is planned for this many times the values measured per tuple, plus a share
# of the slots: 1.0 + 0.5% gave SSBJ 0.5% of the budget but bound MESHJOIN's chunks (ring not
# in use 2.4 -> 3.5% at 1% of R, 2.5 -> 5.3% at 10%: bench/results/bound/mem-2026-11-27.md)
VALUES_MARGIN = 1.05
VALUES_SLACK = 0.01
MIN_MEASURED = 256  # live tuples before the measured values per tuple replace the worst case (1)


def values_per_tuple(op: SemiStreamJoin) -> float:
    """Share of H_S's slots the value index is planned for: measured distinct values per tuple, with margin.

    The worst case (every tuple a value of its own) until H_S holds enough tuples to
    measure; the cache phase admits no tuple that would push the index past it
    (:func:`index_room`), so the budget holds even when the share grows (drift).
    """
    hs = op.hs
    if hs.live < MIN_MEASURED:
        return 1.0
    measured = hs.values / hs.live
    # a step's chunk enters before the oldest leaves, and may be all new values: with few,
    # large chunks (small k) that, not the margin, is what the index must take
    k = max(op._k, 1)
    return min(1.0, max(VALUES_MARGIN * measured + VALUES_SLACK, (measured * (k - 1) + 1) / k))


def per_tuple_bytes(op: SemiStreamJoin) -> float:
    """Bytes of H_S per slot: fixed columns, var bytes, key and link, the planned index share."""
    hs = op.hs
    var = hs.rows.var_bytes / hs.live if hs.live else max(0.0, op._vs_avg - hs.rows.slot_bytes() + 8)
    return hs.slot_bytes() + max(var, 0.0) + INDEX_SLOT * op._values_share / INDEX_LOAD


def disk_bytes(op: SemiStreamJoin) -> int:
    """Return the disk buffer's room: the most it held, or what it holds if more."""
    return max(op._disk_buffer_peak, op._disk_buffer_bytes)


def fixed_bytes(op: SemiStreamJoin, sb_reserve: bool = True) -> int:
    """Budgeted bytes outside H_S (``sb_reserve=False``: s_B as it is, without the room kept for it)."""
    if op._take_all or op._take_all_pending:
        reserve = op._take_all_reserve
    else:
        reserve = SR.reserve_bytes(op, layout_row_bytes(op))
    sb = max(op._sb_bytes, reserve) if sb_reserve else op._sb_bytes
    queue = (op._k + 2) * QUEUE_RECORD
    filters = op.rfilter.nbytes + op._rf_pending  # (a first filter deferred to the next R-cycle start)
    keys = op.stats.nbytes + op.interest.nbytes + op.doorkeeper.nbytes
    held = op.cache.nbytes() + sb + keys + filters + queue
    return int(disk_bytes(op) + prefetch_reserve(op) + held + temporaries_reserve(op))


def probe_reserve(op: SemiStreamJoin) -> int:
    """Return the bytes kept for the step's temporaries (probe results).

    The disk phase's grow with the tuples in H_S: the most seen per waiting tuple, for a
    full ring, up to what its calls of bounded pairs can hold (:func:`probe_call_pairs`).
    The cache phase's are per step, bounded by :func:`cache_call_tuples`: with a cache that
    bound (the first R-cycle with hits reads whole batches of them), the most seen in a step
    if more. Or the peak seen, if more. Or, if more, the most an H_R rebuild's temporaries
    held in a step (:meth:`ssbj.core.cache.Cache.rebuild`: a refresh, index mode's lookups):
    never alive with the probes' (a refresh runs after the disk phase's probe, with the rows
    it keeps counted in the rebuild's). An R-cycle start's is :func:`temporaries_reserve`'s.
    """
    cache = op._cache_transient_peak
    if op._use_cache:
        cache = max(cache, cache_call_tuples(op) * CACHE_CALL_BYTES)
    # the pairs of a kernel call are bounded (probe_call_pairs): past that bound a larger ring adds
    # calls, not bytes (a step of few tuples with many pairs each would otherwise scale its ratio to the whole ring)
    disk = min(int(op._transient_per_tuple * op.hs.cap), PROBE_CALL_SLACK * PAIR_BYTES * probe_call_pairs(op))
    probes = max(op._transient_peak, disk + cache)
    return max(probes, op._rebuild_peak)


def temporaries_reserve(op: SemiStreamJoin) -> int:
    """Return the bytes kept for the steps' temporaries (:func:`probe_reserve`) or an R-cycle start's rebuild's.

    A switch-in or eviction rebuilds H_R at the R-cycle start, before the partition is read (the
    most seen, or the planned switch-in's if more): it may take the disk buffer's room too.
    """
    start = max(op._start_rebuild_peak, SR.transient_bytes(op, column_bytes(op)))
    return max(probe_reserve(op), start - disk_bytes(op))


CACHE_CALL_SHARE = 0.01  # most of the budget one cache-phase call's index arrays may take
# their bytes per tuple read: two int32 words, each array filled from both ends (ssbj.core.cachephase;
# 12 B before, a pair and an index word: a third fewer calls, about 1% of a step at 10% of R)
CACHE_CALL_BYTES = 8
# the complete phase's calls keep their size (their arrays, 16 B a tuple and 8 a further pair, are counted as they come)
COMPLETE_CALL_BYTES = 12
MIN_CACHE_CALL = 1024  # tuples a cache-phase call may read however small the budget (8 kB)


def cache_call_tuples(op: SemiStreamJoin, tuple_bytes: int = CACHE_CALL_BYTES) -> int:
    """Most stream tuples one cache-phase call reads (its arrays: ``tuple_bytes`` a tuple; no bound without a budget).

    A step reads until its H_S chunk is full, which with nearly every tuple served by H_R
    is up to ``max_step_tuples``: the calls are bounded instead, one call's arrays alive
    at a time.
    """
    budget = op.spec.memory_budget
    if budget is None:
        return 1 << 62
    return max(MIN_CACHE_CALL, int(CACHE_CALL_SHARE * budget / tuple_bytes))


PROBE_CALL_SHARE = 0.01  # most of the budget one disk-phase kernel call's pair arrays may take
PAIR_BYTES = 8  # a pair: master row and H_S slot, two int32 (ssbj.core.diskprobe)
MIN_PROBE_CALL = 1024  # pairs a call may hold however small the budget (8 kB)
# a call's pair arrays and the H_S slots kept beside them for one take, in units of a call's pairs
PROBE_CALL_SLACK = 3


def probe_call_pairs(op: SemiStreamJoin) -> int:
    """Most output pairs one disk-phase kernel call gathers before its rows are taken (no bound without a budget).

    The pairs of a step grow with the tuples H_S holds (~40k a step at 10% of R on the
    issue's data, 4.5% of the budget); in calls of this many, one call's arrays are alive
    at a time and the H_S side is taken every call's worth.
    """
    budget = op.spec.memory_budget
    if budget is None:
        return 1 << 62
    return max(MIN_PROBE_CALL, int(PROBE_CALL_SHARE * budget / PAIR_BYTES))


def prefetch_reserve(op: SemiStreamJoin) -> int:
    """Bytes kept for the partitions read ahead: ``depth`` disk buffers (or what the queue holds, if more)."""
    depth = prefetch_depth(op.master)
    if depth == 0:
        return 0
    return max(depth * disk_bytes(op), prefetched_nbytes(op.master))


INDEX_CHUNK_SHARE = 0.1  # index mode: the budget's share for one step's misses (the rest: H_R, entries, temporaries)


def adapt(op: SemiStreamJoin) -> None:
    """Size H_S's chunks and ring for the coming R-cycle (no-op without a budget)."""
    budget = op.spec.memory_budget
    k = max(op._k, 1)
    op.hs.queue.resize(k + 2)
    if budget is None:
        op.stats.grow(1 << 62)
        return
    if op.spec.hybrid == "index":  # H_S holds one step's misses until their lookup (ssbj.core.indexmode)
        if op._use_cache:
            op.stats.limit_bytes(int(STATS_SHARE * budget))
        # a miss takes its ring slot and, at its lookup, the lookup's temporaries (measured per tuple)
        per = per_tuple_bytes(op) + op._transient_per_tuple
        # (the reserve already holds the temporaries of the ring as it is: counted once, in per)
        avail = budget - fixed_bytes(op) + op._transient_per_tuple * op.hs.cap
        w = max(1, int(min(INDEX_CHUNK_SHARE * budget, avail) / max(per, 1.0)))
        op._chunk_bytes = max(op.spec.min_chunk_bytes, int(w * max(op._vs_avg, 1.0)))
        op._plan = Plan(w, w, budget - fixed_bytes(op), per)
        _set_ring(op, w, w, per_tuple_bytes(op))  # (the temporaries are reserved, not the ring's strings)
        op._sb_allow[:] = (0, 0)
        return
    if op._disk_buffer_peak == 0:
        # nothing measured yet: the planned chunk size, a ring for one R-cycle of it
        per = max(op._vs_avg, 1.0)
        w = max(1, int(op._chunk_bytes / per))
        _set_ring(op, k * w, w, per)
        op._sb_allow[:] = (0, 0)  # (a value deciding before the first partition is measured waits an R-cycle)
        return
    if op._use_cache:
        op.stats.limit_bytes(int(STATS_SHARE * budget))
    op._values_share = values_per_tuple(op)
    avail = budget - fixed_bytes(op)
    per = per_tuple_bytes(op)
    if op._complete:  # nothing enters H_S: a token ring of one tuple a chunk
        op._chunk_bytes = max(op.spec.min_chunk_bytes, int(max(op._vs_avg, 1.0)))
        op._plan = Plan(1, k, avail, per)
        _set_ring(op, k, 1, per)
        allow_switching(op)
        return
    # every slot H_S may hold, in chunks of w or w + 1 tuples (the cache phase stops at the ring's
    # room): with a few tuples a chunk, k floor(slots / k) slots alone lost up to a third of them
    slots = max(k, int((avail - cushion_bytes(op, avail)) / per))
    w = max(1, slots // k)
    if op.spec.min_chunk_bytes > 1 and op._vs_avg > 0:
        w = max(w, int(op.spec.min_chunk_bytes / op._vs_avg))
    slots = max(slots, k * w)
    most = -(-slots // k)
    op._chunk_bytes = max(op.spec.min_chunk_bytes, int(most * max(op._vs_avg, 1.0)))
    op._plan = Plan(w, slots, avail, per)
    _set_ring(op, slots, most, per)
    allow_switching(op)


def allow_switching(op: SemiStreamJoin) -> None:
    """With H_S sized: the rows s_B may take in this R-cycle (:func:`ssbj.core.switchroom.allow`).

    The room is the budget less H_S as laid out, what the other structures hold and keep,
    and the cushion H_S leaves for the next R-cycle start; at the switch-in, the disk buffer's too.
    """
    budget = op.spec.memory_budget
    room = 0
    if budget is not None:
        held = fixed_bytes(op, sb_reserve=False) - temporaries_reserve(op) - op._sb_bytes
        room = budget - op.hs.nbytes() - held - int(cushion_bytes(op, op._plan.avail))
    switching = op._use_cache and op.fsm_code == SWITCHING
    SR.allow(op, switching, room, probe_reserve(op), layout_row_bytes(op), column_bytes(op), disk_bytes(op))


def cushion_bytes(op: SemiStreamJoin, avail: float) -> float:
    """Bytes H_S leaves free this R-cycle for a structure that may appear at the next R-cycle start.

    In the warm-up one chunk's worth (``avail / (k + 1)``), or, ahead of an R-filter
    rebuild, the active filter's bytes if more: the rebuilt filter is built beside it, and
    at small budgets it is larger than a chunk (60 kB budget, k = 36: a chunk ~1.3 kB, the
    filter ~2.5 kB). Past the warm-up only the filter comes (an eviction's rebuild has
    its reserve, :func:`temporaries_reserve`), so only its bytes are kept: with few
    partitions a chunk is a sixth of the budget (k = 5), and a filter that finds no room
    is built an R-cycle later (:func:`ssbj.core.switching.plan_filter`).
    """
    if not cushion_ahead(op):
        return 0.0
    active = op.rfilter.active
    rebuild = active.bits.nbytes if active is not None and op._rc + 1 > 3 else 0
    if op._use_cache and op._rc + 1 > 3:
        return float(rebuild)
    chunk = avail / (max(op._k, 1) + 1)
    return float(max(chunk, rebuild))


def cushion_ahead(op: SemiStreamJoin) -> bool:
    """Whether H_S keeps bytes spare this R-cycle (:func:`cushion_bytes`).

    The ring cannot shrink under its live span ((k - 1) chunks of this R-cycle's w) when
    the next R-cycle starts, so a structure that appears then (the first disk buffer and
    s_B in the warm-up, an R-filter (re)built at R-cycle 3 and every eviction R-cycle) must
    find its bytes left free this R-cycle already.
    """
    nxt = op._rc + 1
    if not op._use_cache:
        return nxt <= 1
    if nxt <= 3:
        return True
    return op.spec.r_filter != "off" and nxt % op.spec.eviction_interval == 0


def _set_ring(op: SemiStreamJoin, slots: int, w: int, per: float) -> None:
    hs = op.hs
    slots = max(slots, hs.span + w, 1)
    var_per = max(0.0, per - hs.slot_bytes() - INDEX_SLOT * op._values_share / INDEX_LOAD)
    # string bytes for every slot not live now (the first R-cycle fills the whole ring), and
    # re-sized when the rings hold more than that (the budget counts them), or 1/16 less
    var_extra = int(var_per * max(slots - hs.span, w))
    held, target = hs.rows.var_capacity, hs.rows.var_bytes + var_extra
    if slots != hs.cap or (held and (held > target + 64 or held < target - target // 16)):
        hs.set_capacity(slots, var_extra)
    hs.fit_index(min(hs.values + w, slots))
    limit = index_limit(op)
    if hs.hix.shape[0] > limit:  # planned for fewer values per tuple than it was sized for
        hs.rebuild_index(max(limit, capacity_for(hs.values, INDEX_LOAD)))


def index_limit(op: SemiStreamJoin) -> int:
    """Most slots the value index of H_S may have (its planned share of the ring's slots)."""
    if op.spec.memory_budget is None:
        return 1 << 62
    return int(op.hs.cap * op._values_share / INDEX_LOAD) + 2


def index_room(op: SemiStreamJoin) -> int:
    """Return how many new values the index takes before it outgrows :func:`index_limit` (each new tuple may be one)."""
    if op.spec.memory_budget is None:
        return 1 << 62
    return max(int(index_limit(op) * INDEX_LOAD) - op.hs.values, 0)


def stats_limit(op: SemiStreamJoin) -> int:
    """Bytes the statistics table may grow to now."""
    budget = op.spec.memory_budget
    if budget is None:
        return 1 << 62
    return int(min(STATS_SHARE * budget, op.stats.nbytes + max(room(op), 0) // 2))


def unplanned(op: SemiStreamJoin) -> int:
    """Bytes of the budget neither held nor kept: H_S as laid out and everything :func:`fixed_bytes` counts."""
    budget = op.spec.memory_budget
    if budget is None:
        return 1 << 62
    return budget - op.hs.nbytes() - fixed_bytes(op)


def room(op: SemiStreamJoin) -> int:
    """Bytes of the budget not held now."""
    budget = op.spec.memory_budget
    if budget is None:
        return 1 << 62
    return budget - op.memory().total


def empties_room(op: SemiStreamJoin) -> int | None:
    """Bytes new empty entries' arrays may take (``None``: no budget).

    A batch writes the entries' arrays anew beside the old ones (:mod:`ssbj.core.empties`).
    """
    if op.spec.memory_budget is None:
        return None
    return room(op)


def stats_entry_bytes() -> float:
    """Bytes one candidate costs in the statistics table at the target load."""
    return candidate_bytes()


def breakdown(op: SemiStreamJoin) -> dict[str, float]:
    """Where every byte of the budget goes now, structure by structure (bytes).

    H_S is split into the live tuples' row bytes, their encoded keys (only where the key
    column is not stored in the ring) and links, the value index, and ring capacity not
    holding a live tuple; H_R into rows, partition tags, index and empty entries. ``slack``
    is the part of the budget nothing holds. The sum of all but ``slack`` (and the
    ``waiting_tuples`` and ``budget`` entries) is :meth:`MemoryReport.total`.
    """
    hs, cache = op.hs, op.cache
    live = hs.live
    hs_total = hs.nbytes()
    index = int(hs.hix.nbytes)
    keys_links = live * (op._key_overhead + hs.link_bytes)  # beyond the row's own key bytes: link, key copy
    rows = hs.row_bytes  # the live tuples' raw projected rows (v_S each)
    mem = op.memory()
    out = {
        "hs_rows": float(rows),
        "hs_keys_links": float(keys_links),
        "hs_index": float(index),
        "hs_unused_capacity": float(hs_total - rows - keys_links - index),
        "hr_rows": float(sum(c.nbytes for c in cache.columns)),
        "hr_partition_tags": float(cache.src.nbytes + cache.cnt_src.nbytes),
        "hr_index": float(cache.index.nbytes),
        "hr_empty_entries": float(cache.empties.nbytes),
        "disk_buffer_rows": float(mem.disk_buffer - op._disk_keys_bytes),
        "disk_buffer_keys": float(op._disk_keys_bytes),
        "switching_buffer": float(mem.switching_buffer),
        "value_statistics": float(op.stats.nbytes),
        "interest_filter": float(op.interest.nbytes),
        "doorkeeper": float(op.doorkeeper.nbytes),
        "r_filter": float(op.rfilter.nbytes),
        "queue": float(mem.queue),
        "transient": float(mem.transient),
        "prefetch": float(mem.prefetch),
    }
    budget = op.spec.memory_budget
    out["slack"] = float(budget - mem.total) if budget is not None else 0.0
    out["waiting_tuples"] = float(live)
    out["budget"] = float(budget or 0)
    return out
