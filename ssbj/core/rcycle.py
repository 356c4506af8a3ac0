"""A new R-cycle (Algorithm 1, lines 3-14, with the eviction of lines 42-51).

At the first step of each R-cycle, before the cache phase: the R-filter is planned, the
value statistics are collected and their admission threshold set, H_R is evicted every
``eviction_interval`` R-cycles (with the per-value FSM, values clearly cold also between
them: :meth:`ssbj.core.cache.Cache.evict`), the coming switch-ins' room is planned
(:mod:`ssbj.core.switchroom`), and in the phase-out the values the cache inequality took
move from s_B into H_R (H_R rebuilt once for eviction and switch-in together) and
s_count restarts. Last, w is adapted to the budget (:func:`ssbj.core.budget.adapt`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core import complete as CC
from ssbj.core import indexmode as IX
from ssbj.core import switching as SW
from ssbj.core import switchroom as SR
from ssbj.core.hs import ST_ROWS, ST_SINCE, tracked_through
from ssbj.core.interest import EMPTY_GROWTH

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


def begin_r_cycle(op: SemiStreamJoin, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]) -> None:
    """Lines 3-14 (and the eviction of lines 42-51): FSM, eviction, phase-out, adapt w."""
    op._rc += 1
    op._k = op.master.num_partitions()
    op.cache.set_partitions(op._k)
    op._cycle_start[op._rc] = op._step
    for old in [c for c in op._cycle_start if c < op._rc - 2]:
        del op._cycle_start[old]
    if op._use_cache:
        op._scan_last, op._scan = op._scan, np.zeros(3, dtype=np.int64)
        op.rfilter.new_cycle(op._rc)
        SW.plan_filter(op)
        if op._rc > 1:
            op.stats.gc(op._rc)
        # the budget holds all of R (Theorem 3): admit at two tuples, track as many
        # values as R has (within the statistics' budget share), evict nothing
        resident = SW.holds_all_of_r(op)
        if resident:
            op.stats.max_values = max(op.stats.max_values, int(op._scan_last[0]))
        op.stats.set_admission(
            op.tuple_cost(),
            op.row_cost(),
            op.entry_cost(),
            op.spec.switch_factor,
            op.spec.count_overheads,
            resident=resident,
        )
        if op._take_all:  # the take-all R-cycle ended: all of s_B moves into H_R
            CC.end_take_all(op, resident, pairs, unmatched)
        evicted = np.zeros(0, np.int64)
        if op.spec.hybrid == "index":  # every R-cycle, by lookups saved (ssbj.core.indexmode)
            evicted, n_empty = IX.evict(op)
            IX.rotate_doorkeeper(op)
            op._c.evicted += len(evicted) + n_empty
        elif not resident:
            interval = op._rc % op.spec.eviction_interval == 0
            # between evictions, with the per-value FSM: the values clearly cold (Cache.evict)
            early = not interval and op.spec.early_eviction and op._per_value_fsm()
            if interval or early:
                costs = (op.row_cost(), op.entry_cost(), op.empty_cost(), op.tuple_cost())
                evicted, n_empty = op.cache.evict(*costs, op.spec.switch_factor, op._rc, early=early)
                op._c.evicted += len(evicted) + n_empty
                if early:
                    op._c.bump("evicted_early", len(evicted))
        SR.plan(op)  # (before the counts restart: the next R-cycle's switch-in from them)
        op._early[0] = early_rows(op)
        phase_out = op._phase_out_now()
        switching = op.stats.switching() if phase_out else np.zeros(0, np.int64)
        if len(evicted) or len(switching):
            sb_old = op._sb_bytes  # (s_B's tables stay alive through the rebuild)
            SW.rebuild_hr(op, evicted, switching)
            note_start_rebuild(op, sb_old)
        if len(switching):  # phase-out: MOVE all tuples from s_B to H_R
            SW.switch_in(op, switching, pairs, unmatched)
        elif phase_out and op._sb:  # only early switches given up: their rows are not needed
            SW.drop_sb(op)
        if phase_out:
            op._c.bump("candidates_pruned", op.stats.prune_decided(op._rc))
            # pipelined: only the counts of candidates about to count a whole R-cycle restart
            op.stats.reset_s_count(tracked_through(op._rc - 1) if op._per_value_fsm() else None)
        retried = op.stats.retry_deferred()
        if retried:
            op._c.bump("switch_retried", retried)
        CC.next_mode(op, resident)
        op.rebuild_interest()
    B.adapt(op)


def rebuild_interest(op: SemiStreamJoin) -> None:
    """Refill the disk phase's filter from the statistics, H_R and the empty entries."""
    st, cache = op.stats.table, op.cache
    op.interest.rebuild(
        st.keys[st.used],
        cache.index.keys[cache.index.used],
        cache.empties.keys,
        expect=int(op.stats.meta[1] + cache.values + EMPTY_GROWTH * cache.empty_values) + 64,
    )


def note_start_rebuild(op: SemiStreamJoin, sb_old: int) -> None:
    """Keep an R-cycle start's H_R rebuild apart from the steps' (:func:`ssbj.core.budget.temporaries_reserve`).

    It runs before the step reads its partition: the disk buffer's room is free then, and
    its temporaries may take it; a refresh's rebuild runs beside the partition it read.
    """
    t = op.cache.last_transient
    op.cache.last_transient = 0
    op._start_rebuild_peak = max(op._start_rebuild_peak, t)
    op._start_transient = max(op._start_transient, t + sb_old)


EARLY_QUANTILE = 0.9  # of the rows of candidates counted through a whole R-cycle: s_B's reserve per early value


def early_rows(op: SemiStreamJoin) -> int:
    """Rows s_B reserves for a value that switches early (0: no early switch).

    The pipelined FSM decides a candidate on its count of a whole R-cycle, so a value
    admitted mid-R-cycle counts the next one too and switches in at the start of the
    third: after a drift the new hot values wait three R-cycles for the cache. A candidate
    admitted during the last R-cycle may instead switch at its first row of this one when
    its tuples outweigh the rows of the :data:`EARLY_QUANTILE` quantile of the candidates
    counted through a whole R-cycle; s_B reserves that many rows for it, and a value with
    more gives up (its rows are dropped at the switch-in and it decides on its own count in
    the next R-cycle). Exactness does not depend on the
    estimate: s_B collects every row of an early value from the R-cycle's first partition.
    """
    if not op._per_value_fsm() or op._unique:
        return 0
    st = op.stats.table
    full = st.used & (st.payload[:, ST_SINCE] <= tracked_through(op._rc - 1))
    counts = st.payload[full, ST_ROWS]
    counts = counts[counts > 0]
    if not len(counts):
        return int(op._early[0])
    return max(1, int(np.ceil(np.quantile(counts, EARLY_QUANTILE))))
