"""Comparing the rows a partition read brings with the cached rows read from it (H_R's refresh)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

HR_START = 0  # fields of H_R's index payload (ssbj.core.cache)
HR_LEN = 1


@njit(cache=True, nogil=True)
def refresh_pairs(
    hpay: np.ndarray, src: np.ndarray, rf_row: np.ndarray, rf_slot: np.ndarray, p: int
) -> tuple[np.ndarray, int]:  # pragma: no cover
    """Return the cached row expected for each fresh row (-1: none left) and the fresh rows matched.

    Fresh rows arrive in read order; the cached rows of a value read from partition ``p``
    are in the same order, so the i-th fresh row of a value pairs with its i-th cached
    row from ``p``.
    """
    order = np.argsort(rf_slot, kind="mergesort")
    out = np.full(rf_row.shape[0], -1, dtype=np.int64)
    matched = 0
    t = 0
    while t < order.shape[0]:
        j = rf_slot[order[t]]
        st = hpay[j, HR_START]
        en = st + hpay[j, HR_LEN]
        r = st
        while t < order.shape[0] and rf_slot[order[t]] == j:
            while r < en and src[r] != p:
                r += 1
            if r < en:
                out[order[t]] = r
                matched += 1
                r += 1
            t += 1
    return out, matched


def _fixed_view(a: pa.Array) -> np.ndarray | None:
    """Rows of a null-free fixed-width array as a 1-D view of width-byte items, or None.

    (1-D items, not a (n, width) byte array: NumPy gathers rows of a 2-D byte array ~9x slower.)
    """
    t = a.type
    if a.null_count or not (pa.types.is_fixed_size_binary(t) or pa.types.is_integer(t) or pa.types.is_temporal(t)):
        return None
    width = t.byte_width
    buf = a.buffers()[1]
    if buf is None:
        return None
    raw = np.frombuffer(buf, dtype=np.dtype((np.void, width)), count=a.offset + len(a))
    return raw[a.offset : a.offset + len(a)]


def rows_equal(part: pa.Table, rows: np.ndarray, cached: list[pa.Array], old: np.ndarray) -> bool:
    """Whether ``part``'s ``rows`` equal the cached rows ``old``, column by column.

    Null-free fixed-width columns are compared as raw bytes with NumPy (no Arrow call per
    column); the others, and floats (NaN != NaN in NumPy), with Arrow's ``equals``.
    """
    for c, col in enumerate(part.columns):
        a = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        va, vb = _fixed_view(a), _fixed_view(cached[c])
        if va is not None and vb is not None:
            if not np.array_equal(va[rows], vb[old]):
                return False
        elif not a.take(pa.array(rows)).equals(cached[c].take(pa.array(old))):
            return False
    return True
