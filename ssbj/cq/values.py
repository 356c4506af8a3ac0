"""Arrow arrays to Python lists and back, fast for the types slots carry.

Decimals travel as their unscaled integers and dates as day numbers: Arrow's own
conversion to ``decimal.Decimal`` and ``datetime.date`` objects costs about a microsecond
a value, more than the maintenance of a change itself.
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# decimal(38) values and their sums: exact, never rounded to the default 28 digits
_EXACT = decimal.Context(prec=200)


def to_python(arr: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Values of ``arr`` as Python objects in the engine's encoding (``None`` for NULL)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_decimal128(t):
        n = len(arr)
        if n == 0:
            return []
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64)[2 * arr.offset : 2 * (arr.offset + n)].reshape(n, 2)
        low, high = words[:, 0], words[:, 1]
        if not np.array_equal(high, low >> 63):  # beyond 64 bits: the exact, slow way
            scale = t.scale
            return [None if v is None else int(v.scaleb(scale, _EXACT)) for v in arr.to_pylist()]
        mask = None if arr.null_count == 0 else np.asarray(pc.is_null(arr))
        out: list[Any] = pa.array(low, mask=mask).to_pylist()
        return out
    if pa.types.is_date32(t):
        arr = arr.view(pa.int32())
    elif pa.types.is_string_view(t) or pa.types.is_large_string(t):
        arr = arr.cast(pa.string())
    values: list[Any] = arr.to_pylist()
    return values


def from_python(values: list[Any], t: pa.DataType) -> pa.Array:
    """Invert :func:`to_python`: an array of type ``t``."""
    if pa.types.is_decimal128(t):
        try:
            ints = pa.array(values, pa.int64())
        except (OverflowError, pa.ArrowInvalid):
            scale = -t.scale
            return pa.array([None if v is None else decimal.Decimal(v).scaleb(scale, _EXACT) for v in values], t)
        n = len(ints)
        low = np.frombuffer(ints.buffers()[1], dtype=np.int64)[:n] if n else np.zeros(0, np.int64)
        words = np.empty((n, 2), dtype=np.int64)
        words[:, 0] = low
        words[:, 1] = low >> 63
        return pa.Array.from_buffers(t, n, [ints.buffers()[0], pa.py_buffer(words.tobytes())])
    if pa.types.is_date32(t):
        return pa.array(values, pa.int32()).view(pa.date32())
    return pa.array(values, t)
