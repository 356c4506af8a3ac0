"""Measured byte sizes of rows (v_S, v_R of the cache inequality)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def held_nbytes(a: np.ndarray) -> int:
    """Bytes of the whole buffer ``a`` is a view of (a slice keeps its base alive)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return int(a.nbytes)


def _column_bytes(col: pa.ChunkedArray, n: int) -> np.ndarray | int:
    t = col.type
    if pa.types.is_dictionary(t):
        t = t.value_type
        col = pc.cast(col, t)
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return 4 + _lengths(col)
    if (
        pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    ):
        return 8 + _lengths(col)
    try:
        return max(1, int(t.bit_width) // 8)
    except ValueError:
        return int(col.nbytes // max(n, 1)) + 1


def _lengths(col: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_string_view(col.type):
        col = col.cast(pa.large_string())  # binary_length has no kernel for views
    elif pa.types.is_binary_view(col.type):
        col = col.cast(pa.large_binary())
    out: np.ndarray = np.asarray(pc.fill_null(pc.binary_length(col), 0).to_numpy(), dtype=np.int64)
    return out


def row_nbytes(table: pa.Table) -> np.ndarray:
    """Bytes each row occupies in Arrow layout (values plus offsets), as int64."""
    n = table.num_rows
    total = np.zeros(n, dtype=np.int64)
    for col in table.columns:
        total += _column_bytes(col, n)
    return total
