"""Arrow type normalisation at the operator's boundary.

Some Arrow kernels the operator relies on (``take``, ``binary_length``) have no kernels for
the view layouts (``string_view``, ``binary_view``) that newer Parquet writers produce, so
view columns are turned into their large counterparts when they enter the operator.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    return t


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with view types replaced by large string/binary."""
    return pa.schema([f.with_type(_plain(f.type)) for f in schema], metadata=schema.metadata)


def plain_table(table: pa.Table) -> pa.Table:
    """Return ``table`` cast to :func:`plain_schema` (no copy when there is nothing to change)."""
    target = plain_schema(table.schema)
    return table if target.equals(table.schema) else table.cast(target)


def take_rows(table: pa.Table, idx: np.ndarray) -> pa.Table:
    """Rows ``idx`` of ``table``: through its one record batch when it has one (~3x faster than Table.take)."""
    batches = table.to_batches()
    if len(batches) == 1:
        return pa.Table.from_batches([batches[0].take(pa.array(idx, pa.int64()))])
    return table.take(pa.array(idx, pa.int64()))
