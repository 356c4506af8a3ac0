"""Whether a read of a resident master's partition brings the very buffers of its last read.

Arrow buffers are immutable: a partition read as the same buffers (address, size, offset,
length of every buffer of every chunk) as the last read of it holds the same rows. H_R's
rows of partition p and its empty entries are consistent with the last read of p (the
refresh makes them so at every read, ``docs/architecture.md``, "Freshness"), so a read of p
that brings the same buffers again has nothing to refresh.
"""

from __future__ import annotations

import pyarrow as pa

BufferIds = tuple[tuple[int, int, int, int], ...]


def buffer_ids(t: pa.Table) -> BufferIds:
    """Identity of a table's data: (address, size, offset, length) of every buffer of every chunk."""
    out: list[tuple[int, int, int, int]] = []
    for col in t.columns:
        for ch in col.chunks:
            out.extend((b.address, b.size, ch.offset, len(ch)) for b in ch.buffers() if b is not None)
    return tuple(out)


class ReadMemo:
    """Per partition, the buffers of its last read (held, so no address is reused while remembered).

    The buffers are the resident master's own: holding them costs nothing while the master
    holds them too; a partition the master has replaced is let go at its next read.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[BufferIds, list[pa.Buffer]]] = {}

    def unchanged(self, p: int, ids: BufferIds) -> bool:
        """Whether the last read of ``p`` brought exactly the buffers ``ids``."""
        last = self._seen.get(p)
        return last is not None and last[0] == ids

    def remember(self, p: int, t: pa.Table, ids: BufferIds) -> None:
        """``t`` (with buffers ``ids``) is now the last read of ``p``."""
        held = [b for col in t.columns for ch in col.chunks for b in ch.buffers() if b is not None]
        self._seen[p] = (ids, held)
