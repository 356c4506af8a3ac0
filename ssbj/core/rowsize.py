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


def value_bytes(t: pa.DataType) -> int | None:
    """Bytes :func:`row_nbytes` counts for one value of type ``t`` beyond string data: its width or offset.

    ``None`` where it is measured per row (dictionaries, views, types without a bit width).
    """
    if pa.types.is_dictionary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return None
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return 4
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return 8
    try:
        return max(1, int(t.bit_width) // 8)
    except ValueError:
        return None


def has_strings(t: pa.DataType) -> bool:
    """Whether values of ``t`` carry string data beyond :func:`value_bytes` (string/binary, large or not)."""
    return bool(
        pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    )


def _span_bytes(col: pa.ChunkedArray) -> int | None:
    """Value bytes of a string/binary column from its offsets (``None``: a chunk with nulls, measured per row)."""
    total = 0
    wide = pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type)
    for chunk in col.chunks:
        if chunk.null_count or not len(chunk):
            if chunk.null_count:
                return None
            continue
        off = np.frombuffer(chunk.buffers()[1], dtype=np.int64 if wide else np.int32)
        total += int(off[chunk.offset + len(chunk)]) - int(off[chunk.offset])
    return total


def total_nbytes(table: pa.Table) -> int:
    """``row_nbytes(table).sum()`` without a per-row array: string columns from their offsets (v_R per partition)."""
    n = table.num_rows
    total = 0
    for col in table.columns:
        width = value_bytes(col.type)
        span = _span_bytes(col) if has_strings(col.type) else 0
        if width is None or span is None:
            per = _column_bytes(col, n)
            total += int(per.sum()) if isinstance(per, np.ndarray) else per * n
        else:
            total += width * n + span
    return total


def row_nbytes(table: pa.Table) -> np.ndarray:
    """Bytes each row occupies in Arrow layout (values plus offsets), as int64."""
    n = table.num_rows
    total = np.zeros(n, dtype=np.int64)
    for col in table.columns:
        total += _column_bytes(col, n)
    return total
