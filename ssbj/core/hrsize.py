"""Byte sizes of H_R's rows, of its rebuilds and of a take-all R-cycle, as :mod:`ssbj.core.budget` prices them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import switchroom as SR
from ssbj.core import takeall as TA
from ssbj.core.cache import INDEX_LOAD as HR_INDEX_LOAD
from ssbj.core.hashing import KeyedTable, capacity_for
from ssbj.core.rfilter import BITMAP

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


# Cache.rebuild's arrays (ssbj.core.hrmerge): a row's order, new tag and run mark (4 each) and an
# added row's sort (8); a value's slot (4), run (16) and payload (16)
REBUILD_ROW_BYTES = 20
REBUILD_VALUE_BYTES = 36


def layout_row_bytes(op: SemiStreamJoin) -> float:
    """Bytes of one master row as H_R and s_B hold it (the disk-buffer layout: key, projection)."""
    v = op._vr_avg + (0.0 if op.spec.master_key in op._proj else 8.0)
    cache = op.cache
    if cache.rows:
        v = max(v, (cache.row_nbytes() - cache.src.nbytes) / cache.rows)
    return v


def column_bytes(op: SemiStreamJoin) -> list[float]:
    """Bytes per row of each of H_R's columns (before anything is cached: from the layout's types)."""
    cache = op.cache
    if cache.rows:
        return [float(c.nbytes) / cache.rows for c in cache.columns]
    whole = layout_row_bytes(op)  # (a variable-width column may take the whole row)
    return [_width(f.type, whole) for f in op._master_layout]


def _width(t: pa.DataType, whole: float) -> float:
    """Bytes per row of a column of type ``t`` with its validity bits (``whole`` when not fixed-width)."""
    try:
        bits = t.bit_width
    except ValueError:
        return whole
    return (bits + 1) / 8 if bits and not pa.types.is_dictionary(t) else whole


def widest_column_bytes(op: SemiStreamJoin) -> float:
    """Bytes per row of H_R's widest column (the whole row before anything is cached)."""
    return max(column_bytes(op))


def rebuild_bytes(op: SemiStreamJoin, rows: int) -> int:
    """Return the transient of rebuilding H_R to ``rows`` rows (:meth:`ssbj.core.cache.Cache.rebuild`).

    Beside the old H_R: the merge's arrays, the column being rebuilt twice (merged with the
    added rows, then reordered) and the new index, for as many values as rows (at most).
    """
    index = KeyedTable.bytes_for(capacity_for(max(rows, 1), HR_INDEX_LOAD), 4, 4)
    per_row = REBUILD_ROW_BYTES + REBUILD_VALUE_BYTES + 2 * widest_column_bytes(op)
    return int(rows * per_row + index)


def take_all_bytes(op: SemiStreamJoin) -> int:
    """Return what a take-all R-cycle holds at its switch-in beyond H_R now.

    s_B written in place (:mod:`ssbj.core.takeall`): the store for all of R, and beyond it
    the sort (beside the old H_R) or the new index (once the old rows are gone), whichever
    is more. Otherwise s_B of every uncached row and the rebuild.
    """
    rows = max(int(op._scan_last[0]), op.cache.rows)
    if store_path(op):
        cap = store_rows(rows)
        old = op.cache.row_nbytes()
        extra = max(TA.sort_bytes(cap), TA.index_bytes(values_estimate(op, cap)) - old)
        return cap * TA.row_bytes(op._master_layout) + extra
    uncached = max(0, rows - op.cache.rows)
    return int(uncached * (layout_row_bytes(op) + 12)) + rebuild_bytes(op, rows)  # s_B: row, key, tag


def store_path(op: SemiStreamJoin) -> bool:
    """Whether a take-all R-cycle writes s_B in place (:mod:`ssbj.core.takeall`): a fixed-width layout."""
    return TA.supports(op._master_layout) and not op._store_failed


def store_rows(rows: int) -> int:
    """Rows the take-all's store holds: R's of the last R-cycle and a margin for growth."""
    return rows + max(64, int(rows * TA.SLACK))


def values_estimate(op: SemiStreamJoin, rows: int) -> int:
    """Distinct values of R: a bitmap R-filter's set bits (it forgets no value, so at least R's), else one a row."""
    rf = op.rfilter.active
    if rf is not None and rf.mode == BITMAP and not rf.oor:
        return min(rows, int(np.bitwise_count(rf.bits).sum()))
    return rows


def switch_transient(op: SemiStreamJoin) -> int:
    """Return the transient of switching s_B in now (the rebuild of H_R with s_B's rows)."""
    return rebuild_bytes(op, op.cache.rows + SR.sb_rows(op))
