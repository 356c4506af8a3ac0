"""Room for the coming switch-in, reserved before it appears (:mod:`ssbj.core.budget`).

In a switching R-cycle s_B fills with every master row of the values the cache inequality
takes (Algorithm 1, lines 33-36); at the next R-cycle start the rows move into H_R, a
rebuild beside the old H_R (:meth:`ssbj.core.cache.Cache.rebuild`). Both appear while H_S
is full, and H_S's ring cannot shrink under its live span, so their bytes must be left
free from this R-cycle's start.

At that start :func:`plan` predicts them from the values that decide in this R-cycle: a
candidate tracked through the last R-cycle (for a unique key: any value of H_S) that
passes the inequality with its tuples in H_S now brings its s_count rows (one, for a
unique key). The budget reserves s_B for those rows with a margin, H_R's growth beyond
them, and the switch-in's temporaries; the disk phase switches a value only while its rows
fit the rows left (:func:`ssbj.core.diskphase.disk_probe`), so s_B never outgrows its
reserve. A value that does not fit is decided against in this R-cycle, tracked again later,
and counted (``switch_deferred``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ssbj.core.cache import INDEX_LOAD
from ssbj.core.hashing import KeyedTable, capacity_for, mix
from ssbj.core.hs import ST_ROWS, ST_SINCE, ST_SWITCH, eligible_before
from ssbj.core.hsindex import EMPTY, dec, ix_find
from ssbj.core.hslinks import lk_get
from ssbj.core.jit import njit

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

# mypy: disable-error-code="no-any-return"

MARGIN = 1.25  # rows allowed over the prediction (a value's chain in H_S moves during the R-cycle)
MIN_ROWS = 16  # rows allowed however few are predicted
SB_ROW_EXTRA = 12  # s_B's bytes per row beyond the row: its key (8) and partition tag (4)
UNLIMITED = 1 << 62


@njit(cache=True)
def _chain_at_least(
    hix: np.ndarray, ring_key: np.ndarray, link: np.ndarray, cap: int, lo: int, hi: int, s: int, need: int
) -> bool:  # pragma: no cover
    """Whether the chain from slot ``s`` (a value's newest tuple) has ``need`` live tuples."""
    n = 0
    while s >= lo:
        n += 1
        if n >= need:
            return True
        d = lk_get(link, s % cap)
        if d == 0:
            break
        s -= d
    return False


PARTIAL_SCALE = 2.0  # a count begun mid-R-cycle saw about half of it (admission comes at a random partition)


@njit(cache=True)
def predict(
    hix: np.ndarray,
    ring_key: np.ndarray,
    link: np.ndarray,
    cap: int,
    lo: int,
    hi: int,
    st_keys: np.ndarray,
    st_used: np.ndarray,
    st_pay: np.ndarray,
    unique: bool,
    eligible_before: int,
    admit: int,
    switch_factor: float,
    tuple_cost: float,
    row_cost: float,
    entry_cost: float,
) -> tuple[int, int, int, int]:  # pragma: no cover
    """Return (rows, values) switching in this R-cycle and in the next, with H_S as it is now.

    This R-cycle's: the candidates tracked long enough (``ST_SINCE <= eligible_before``) with
    their complete s_count; the next's: the others, their partial count scaled by
    ``PARTIAL_SCALE``. A unique key's values decide at their row (m = 1): any value in H_S
    with enough tuples, for both.
    """
    rows = values = rows_next = values_next = 0
    tc = max(tuple_cost, 1e-9)
    if unique:
        need = max(admit, int(switch_factor * (row_cost + entry_cost) / tc) + 1)
        for i in range(hix.shape[0]):
            if hix[i] != EMPTY and _chain_at_least(hix, ring_key, link, cap, lo, hi, dec(hix[i], hi, cap), need):
                rows += 1
        return rows, rows, rows, rows
    for j in range(st_keys.shape[0]):
        if not st_used[j] or st_pay[j, ST_SWITCH] == 1:
            continue
        now = st_pay[j, ST_SINCE] <= eligible_before
        m = max(st_pay[j, ST_ROWS], 1) if now else max(int(PARTIAL_SCALE * st_pay[j, ST_ROWS]), 1)
        need = int(switch_factor * (m * row_cost + entry_cost) / tc) + 1
        key = st_keys[j]
        _i, s = ix_find(hix, ring_key, cap, hi, key, mix(key))
        if _chain_at_least(hix, ring_key, link, cap, lo, hi, s, need):
            if now:
                rows += m
                values += 1
            else:
                rows_next += m
                values_next += 1
    return rows, values, rows_next, values_next


def plan(op: SemiStreamJoin) -> None:
    """At an R-cycle start, before the counts restart and H_S is sized: the switch-in to keep room for.

    H_S sized now holds the next R-cycle's live span, so the room kept is for the larger
    of this R-cycle's switch-in and the next's (:func:`predict`), with a margin
    (:func:`reserve_bytes`, :func:`transient_bytes`); what s_B may take now is set once
    H_S is sized (:func:`allow`).
    """
    op._switch_plan = (0, 0)
    if op.spec.memory_budget is None or not op._use_cache:
        return
    hs, st = op.hs, op.stats.table
    rows, values, rows_next, values_next = predict(
        hs.hix,
        hs.ring_key,
        hs.link,
        hs.cap,
        hs.lo,
        hs.hi,
        st.keys,
        st.used,
        st.payload,
        op._unique,
        eligible_before(op._rc, op._unique),
        int(op.stats.meta[2]),
        op.spec.switch_factor,
        op.tuple_cost(),
        op.row_cost(),
        op.entry_cost(),
    )
    if rows_next > rows:
        rows, values = rows_next, values_next
    if rows:
        planned = int(np.ceil(MARGIN * rows)) + MIN_ROWS
        op._switch_plan = (planned, int(np.ceil(planned * values / rows)))


def allow(
    op: SemiStreamJoin, switching: bool, room: int, probes: int, row_bytes: float, columns: list[float], disk: int = 0
) -> None:
    """Set the rows s_B may still take this R-cycle: what fits in ``room`` with H_S as it is now.

    ``room``: bytes of the budget that nothing but s_B holds or keeps; ``probes``: the
    steps' temporaries reserve. Three moments must fit: s_B full beside the probes'
    temporaries (this R-cycle), s_B beside the switch-in's temporaries (the next R-cycle's
    start: no probe is alive then, nor the disk buffer's ``disk`` bytes), and H_R grown by
    s_B's rows beside the probes (before the ring shrinks).
    """
    op._sb_allow[1] = 0
    if op.spec.memory_budget is None:
        op._sb_allow[0] = UNLIMITED
        return
    if not switching:
        op._sb_allow[0] = 0
        return
    held = sb_rows(op)
    rows, values = op._switch_plan
    per_value = values / rows if rows else 1.0
    ix = op.cache.index

    def fits(n: int) -> bool:
        total = held + n
        vals = max(1, int(np.ceil(total * per_value)))
        sb = op._sb_bytes + n * (row_bytes + SB_ROW_EXTRA)
        grown = KeyedTable.bytes_for(capacity_for(ix.size + vals, INDEX_LOAD), ix.nfields, 4) - ix.nbytes
        hr = total * (row_bytes + 4) + max(grown, 0)
        return max(sb, hr) + probes <= room and sb + _append_bytes(op, total, vals, columns) <= room + disk

    lo, hi = 0, max(0, int(room / (row_bytes + 4)))
    while lo < hi:  # the most rows that fit (the temporaries grow with them)
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    op._sb_allow[0] = lo


def sb_rows(op: SemiStreamJoin) -> int:
    """Rows s_B holds now."""
    return sum(len(k) for _, k, _, _ in op._sb)


def reserve_bytes(op: SemiStreamJoin, row_bytes: float) -> int:
    """Bytes kept for the planned s_B, or for H_R's growth when it moves in if more (``row_bytes``: a row's layout).

    At the switch-in s_B's rows become H_R's: their key leaves, a tag and, per value, an
    index entry come.
    """
    rows, values = op._switch_plan
    if not rows:
        return 0
    sb = rows * (row_bytes + SB_ROW_EXTRA)
    hr = rows * (row_bytes + 4) + values * op.cache.entry_cost()
    return int(max(sb, hr))


def transient_bytes(op: SemiStreamJoin, columns: list[float]) -> int:
    """Return the temporaries of switching the planned rows in (``columns``: bytes per row of H_R's columns)."""
    rows, values = op._switch_plan
    return _append_bytes(op, rows, values, columns) if rows else 0


def _append_bytes(op: SemiStreamJoin, rows: int, values: int, columns: list[float]) -> int:
    """Temporaries of :meth:`ssbj.core.cache.Cache._append` adding ``rows`` rows of ``values`` new values.

    The order arrays of the added rows, then the larger of: one column rebuilt (the old
    one, the new one and the added rows twice), the new tags beside the old, the index
    payload with, when the index must grow, the new index beside the old.
    """
    cache, ix = op.cache, op.cache.index
    small = 24 * rows + 24 * values
    cols = max(columns, default=8.0) * (cache.rows + 3 * rows)
    tags = 4 * (cache.rows + 2 * rows)
    index = values * ix.nfields * 4
    need = capacity_for(ix.size + values, INDEX_LOAD)
    if need > ix.cap:
        index += KeyedTable.bytes_for(need, ix.nfields, 4)
    return int(small + max(cols, tags, index))
