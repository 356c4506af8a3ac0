"""The stream tuples of H_S, addressed by slot.

Chunks enter at the young end and expire at the old end, so H_S's rows are one
contiguous slot range. They are kept as a few contiguous segments (at most
``max_segments``): adjacent segments are merged, the smallest pair first, so gathering
the rows of any set of slots costs a handful of Arrow ``take`` calls however many chunks
(k) are waiting, and each row is copied O(log k) times over its life.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class HSRows:
    """Rows of slots ``[lo, hi)`` as contiguous segments ``(base, table)``."""

    def __init__(self, schema: pa.Schema, max_segments: int = 8) -> None:
        self.schema = schema
        self.max_segments = max_segments
        self._bases: list[int] = []
        self._tables: list[pa.Table] = []
        self._dead = 0  # rows before the first live slot still held by the oldest segment

    def append(self, base: int, table: pa.Table) -> None:
        """Add the rows of slots ``[base, base + n)`` (``base`` follows the last slot)."""
        self._bases.append(base)
        self._tables.append(table)
        while len(self._tables) > self.max_segments:
            sizes = [t.num_rows for t in self._tables]
            i = min(range(len(sizes) - 1), key=lambda j: sizes[j] + sizes[j + 1])
            merged = pa.concat_tables(self._tables[i : i + 2]).combine_chunks()
            self._tables[i : i + 2] = [merged]
            del self._bases[i + 1]

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers the segments hold (a slice pins its whole buffers)."""
        return sum(int(t.get_total_buffer_size()) for t in self._tables)

    def drop_before(self, slot: int) -> None:
        """Forget every slot < ``slot`` (expiry of the oldest chunks)."""
        while self._tables and self._bases[0] + self._tables[0].num_rows <= slot:
            self._bases.pop(0)
            self._tables.pop(0)
            self._dead = 0
        if self._tables and self._bases[0] < slot:
            cut = slot - self._bases[0]
            self._tables[0] = self._tables[0].slice(cut)
            self._bases[0] = slot
            self._dead += cut
            if self._dead > self._tables[0].num_rows:
                # the slice still pins the expired rows' buffers: copy the live part out
                t = self._tables[0]
                self._tables[0] = t.take(np.arange(t.num_rows))
                self._dead = 0

    def take(self, slots: np.ndarray) -> pa.Table:
        """Rows of ``slots`` (all live), in the order given."""
        if len(slots) == 0:
            return self.schema.empty_table()
        if len(self._tables) == 1:
            return self._tables[0].take(slots - self._bases[0])
        seg = np.searchsorted(np.asarray(self._bases, dtype=np.int64), slots, side="right") - 1
        first = int(seg[0])
        if (seg == first).all():
            return self._tables[first].take(slots - self._bases[first])
        order = np.argsort(seg, kind="stable")
        sorted_seg = seg[order]
        bounds = np.flatnonzero(np.diff(sorted_seg)) + 1
        pieces = []
        for idx in np.split(order, bounds):
            s = int(seg[idx[0]])
            pieces.append(self._tables[s].take(slots[idx] - self._bases[s]))
        t = pa.concat_tables(pieces)
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        return t.take(inv)
