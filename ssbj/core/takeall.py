"""The take-all R-cycle's s_B written in place (:mod:`ssbj.core.complete`), for fixed-width layouts.

s_B of a take-all R-cycle is nearly all of R. Held as taken tables and switched in by
:meth:`ssbj.core.cache.Cache.rebuild`, the switch-in holds s_B, the old H_R and the rebuilt
column (twice) at once: ~4.5x R's bytes with 96-byte rows. When every column of the
disk-buffer layout is fixed-width (and byte-aligned), s_B is instead written into column
buffers sized for all of R (:class:`RowStore`); at the switch-in the old H_R's rows are
copied in after it, the rows are put in H_R's order (value, partition, read order) in
place, walking the sort permutation cycle by cycle, and the buffers become H_R's columns
(Arrow arrays over them, no copy). The switch-in then holds R's rows once, beside the
sort order and the new index (:func:`finish_bytes`).

A value is either cached or in s_B (s_B takes the rows of values not in H_R, and H_R's
values do not change during a take-all R-cycle but by a refresh, which adds no value
s_B has), and s_B's rows are appended in read order: a stable sort by value alone gives
H_R's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core.cache import HR_SINCE, INDEX_LOAD
from ssbj.core.hashing import KeyedTable, capacity_for, kset_slot
from ssbj.core.jit import njit
from ssbj.core.refresh import HR_LEN, HR_START

if TYPE_CHECKING:
    from ssbj.core.cache import Cache

# mypy: disable-error-code="no-any-return"

SLACK = 1 / 64  # rows beyond the last R-cycle's the store holds (R may grow during the R-cycle)
# per row: the stable sort's order (8) and scratch (<= 8), the cycle walk's marks (1), spare
SORT_ROW_BYTES = 21


def width(t: pa.DataType) -> int:
    """Bytes per row of a column type the store holds, or 0 (variable-width, bits, dictionary, nested)."""
    if pa.types.is_dictionary(t) or pa.types.is_boolean(t) or pa.types.is_nested(t):
        return 0
    try:
        bits = t.bit_width
    except ValueError:
        return 0
    return bits // 8 if bits and bits % 8 == 0 else 0


def supports(layout: pa.Schema) -> bool:
    """Whether every column of the layout is fixed-width and byte-aligned."""
    return all(width(f.type) > 0 for f in layout)


def row_bytes(layout: pa.Schema) -> int:
    """Bytes per row of the store: the columns, the encoded key and the partition tag."""
    return sum(width(f.type) for f in layout) + 12


def _bytes_of(arr: pa.Array, w: int) -> np.ndarray:
    """Return the rows of a fixed-width array as a (rows, w) byte view of its data buffer."""
    buf = arr.buffers()[1]
    return np.frombuffer(buf, np.uint8, count=len(arr) * w, offset=arr.offset * w).reshape(len(arr), w)


def _all_valid(arr: pa.Array, rows: np.ndarray | None) -> bool:
    """Whether rows ``rows`` (None: all) of ``arr`` are not NULL (a NULL key's row is never taken)."""
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return bool(valid.all() if rows is None else valid[rows].all())


class RowStore:
    """s_B of a take-all R-cycle: column buffers for ``cap`` rows, the rows' encoded keys and tags."""

    def __init__(self, layout: pa.Schema, cap: int) -> None:
        self.layout = layout
        self.widths = [width(f.type) for f in layout]
        self.cols = [np.empty((cap, w), np.uint8) for w in self.widths]
        self.keys = np.empty(cap, np.int64)
        self.src = np.empty(cap, np.int32)
        self.n = 0

    @property
    def cap(self) -> int:
        """Rows the store holds at most."""
        return int(self.keys.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays."""
        return int(sum(c.nbytes for c in self.cols) + self.keys.nbytes + self.src.nbytes)

    def append(self, part: pa.Table, rows: np.ndarray | None, keys: np.ndarray, src: np.ndarray | int) -> bool:
        """Copy rows ``rows`` (None: all) of ``part``, keys and tags in; False if they do not fit or hold a NULL."""
        m = part.num_rows if rows is None else len(rows)
        n = self.n
        if n + m > self.cap:
            return False
        if m == 0:
            return True
        for c, w in enumerate(self.widths):
            col = part.column(c)
            arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            if arr.null_count and not _all_valid(arr, rows):  # (the store keeps no validity)
                return False
            if rows is None:
                self.cols[c][n : n + m] = _bytes_of(arr, w)
            else:
                np.take(_bytes_of(arr, w), rows, axis=0, out=self.cols[c][n : n + m])
        self.keys[n : n + m] = keys
        self.src[n : n + m] = src
        self.n = n + m
        return True

    def table(self) -> pa.Table:
        """Return the rows held as a table over the buffers (no copy)."""
        return pa.Table.from_arrays(
            [_array(f.type, c, self.n) for f, c in zip(self.layout, self.cols, strict=True)], schema=self.layout
        )


def _array(t: pa.DataType, col: np.ndarray, n: int) -> pa.Array:
    """Return an Arrow array of the first ``n`` rows over a store column (its buffer the whole column)."""
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(col.reshape(-1))])


def sort_bytes(rows: int) -> int:
    """Return what the switch-in's sort holds beside the store and the old H_R."""
    return SORT_ROW_BYTES * rows


def index_bytes(values: int) -> int:
    """Return what the new index (and s_B's values) holds beside the store, once the old rows are gone."""
    return KeyedTable.bytes_for(capacity_for(max(values, 1), INDEX_LOAD), 4, 4) + 8 * values


# ---------------------------------------------------------------- kernels
@njit(cache=True, nogil=True)
def count_runs(keys: np.ndarray, order: np.ndarray, n: int, n_sb: int) -> tuple[int, int]:  # pragma: no cover
    """(values, values of s_B's rows) among ``keys[order[:n]]`` (sorted); s_B rows come before ``n_sb``."""
    v = 0
    v_sb = 0
    for i in range(n):
        if i == 0 or keys[order[i]] != keys[order[i - 1]]:
            v += 1
            if order[i] < n_sb:
                v_sb += 1
    return v, v_sb


@njit(cache=True, nogil=True)
def sb_values(keys: np.ndarray, order: np.ndarray, n: int, n_sb: int, out: np.ndarray) -> None:  # pragma: no cover
    """Fill ``out`` with the values of s_B's rows (sorted)."""
    j = 0
    for i in range(n):
        if (i == 0 or keys[order[i]] != keys[order[i - 1]]) and order[i] < n_sb:
            out[j] = keys[order[i]]
            j += 1


@njit(cache=True, nogil=True)
def permute(a: np.ndarray, order: np.ndarray, n: int, seen: np.ndarray) -> None:  # pragma: no cover
    """``a[i] = a[order[i]]`` for the first ``n`` rows, in place: each cycle of the permutation walked once."""
    seen[:] = False
    tmp = np.empty(a.shape[1], np.uint8)
    for i in range(n):
        if seen[i]:
            continue
        seen[i] = True
        if order[i] == i:
            continue
        tmp[:] = a[i]
        j = i
        while True:
            k = order[j]
            if k == i:
                a[j] = tmp
                break
            a[j] = a[k]
            seen[k] = True
            j = k


@njit(cache=True, nogil=True)
def fill_index(
    keys: np.ndarray, n: int, hk: np.ndarray, used: np.ndarray, pay: np.ndarray, rc: int
) -> None:  # pragma: no cover
    """Insert each run of equal (sorted) ``keys`` as an index entry (start, length, f_count 0, since rc)."""
    i = 0
    while i < n:
        j = i + 1
        while j < n and keys[j] == keys[i]:
            j += 1
        s = -(kset_slot(hk, used, keys[i]) + 1)
        hk[s] = keys[i]
        used[s] = True
        pay[s, HR_START] = i
        pay[s, HR_LEN] = j - i
        pay[s, HR_SINCE] = rc
        i = j


# ---------------------------------------------------------------- the switch-in
def sort_order(store: RowStore) -> np.ndarray:
    """H_R's order of the store's rows (stable by value: see the module doc)."""
    return np.argsort(store.keys[: store.n], kind="stable")


def permute_into(cache: Cache, store: RowStore, order: np.ndarray) -> None:
    """Put the store's rows (old H_R's copied in) in ``order``, in place; its columns and tags become H_R's."""
    n = store.n
    seen = np.empty(n, np.bool_)
    for c in store.cols:
        permute(c, order, n, seen)
    permute(store.keys.view(np.uint8).reshape(-1, 8), order, n, seen)
    permute(store.src.view(np.uint8).reshape(-1, 4), order, n, seen)
    del seen
    cache.columns = [_array(f.type, c, n) for f, c in zip(store.layout, store.cols, strict=True)]
    cache.src = store.src[:n]  # (a view: its bytes are the store's tags, see Cache.row_nbytes)
    cache._rows_gen += 1
    store.cols = []


def index_from(cache: Cache, store: RowStore, values: int, rc: int) -> None:
    """H_R's index from the store's sorted keys (``values`` runs); the store's keys are released.

    f_count is not carried: nothing is evicted while complete, and it restarts when the mode is left.
    """
    ix = cache.index
    cap = capacity_for(max(values, 1), INDEX_LOAD)
    hk = np.zeros(cap, np.int64)
    used = np.zeros(cap, np.bool_)
    pay: np.ndarray = np.zeros((cap, ix.nfields), ix.dtype)
    fill_index(store.keys, store.n, hk, used, pay, rc)
    ix.keys, ix.used, ix.payload, ix.size = hk, used, pay, values
    store.keys = np.zeros(0, np.int64)
    cache.cnt_src = np.bincount(cache.src, minlength=len(cache.cnt_src)).astype(np.int64)
    cache.version += 1
