"""A resident master's partitions known unchanged by their buffers.

Arrow buffers are immutable: a partition read as the same buffers (address, size, offset,
length of every buffer of every chunk) as an earlier read holds the same rows. Two uses:

* the FSM's refresh (:mod:`ssbj.core.diskphase`): H_R's rows of partition p and its empty
  entries are consistent with the last read of p (the refresh makes them so at every
  read), so a read of p that brings the same buffers again has nothing to refresh
  (:class:`ReadMemo`);
* the complete cache (:mod:`ssbj.core.complete`): a partition read again into the very
  buffers H_R's rows of it were last made equal to (:func:`views_of_resident`, :func:`remember`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

BufferIds = tuple[tuple[int, int, int, int], ...]


def buffer_ids(t: pa.Table) -> BufferIds:
    """Identity of a table's data: (address, size, offset, length) of every buffer of every chunk."""
    out: list[tuple[int, int, int, int]] = []
    for col in t.columns:
        for ch in col.chunks:
            out.extend((b.address, b.size, ch.offset, len(ch)) for b in ch.buffers() if b is not None)
    return tuple(out)


def _held(t: pa.Table) -> list[pa.Buffer]:
    return [b for col in t.columns for ch in col.chunks for b in ch.buffers() if b is not None]


class ReadMemo:
    """Per partition, the buffers of its last read (held, so no address is reused while remembered).

    The buffers are the resident master's own: holding them costs nothing while the master
    holds them too; a partition the master has replaced is let go at its next read.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[BufferIds, list[pa.Buffer]]] = {}
        self._pieces: dict[int, tuple[BufferIds, int, int]] = {}  # p -> (buffers, piece rows, largest piece's bytes)

    def unchanged(self, p: int, ids: BufferIds) -> bool:
        """Whether the last read of ``p`` brought exactly the buffers ``ids``."""
        last = self._seen.get(p)
        return last is not None and last[0] == ids

    def piece_bytes(self, p: int, ids: BufferIds, rows: int) -> int | None:
        """Bytes of the largest ``rows``-row piece of ``p``, if known for these very buffers."""
        got = self._pieces.get(p)
        return got[2] if got is not None and got[0] == ids and got[1] == rows and self.unchanged(p, ids) else None

    def note_piece_bytes(self, p: int, ids: BufferIds, rows: int, nbytes: int) -> None:
        """Remember the largest piece's bytes of ``p`` read as ``ids`` (valid once :meth:`remember` holds them)."""
        self._pieces[p] = (ids, rows, nbytes)

    def remember(self, p: int, t: pa.Table, ids: BufferIds) -> None:
        """``t`` (with buffers ``ids``) is now the last read of ``p``."""
        self._seen[p] = (ids, _held(t))


def views_of_resident(op: SemiStreamJoin, p: int, part: pa.Table) -> BufferIds | None:
    """Return the buffers of partition p as read, if they are the master's resident partition (else None).

    Only views of data the master holds anyway are remembered (holding them costs nothing);
    a partition read into new buffers is compared row by row.
    """
    get = getattr(op.master, "resident_partition", None)
    if get is None:
        return None
    ids = buffer_ids(part)
    return ids if ids == buffer_ids(get(p).select(op._mcols)) else None


def remember(op: SemiStreamJoin, p: int, part: pa.Table, seen: BufferIds | None) -> None:
    """H_R's rows of p now equal ``part``'s (complete cache): remember its buffers, held."""
    if seen is None:
        op._complete_seen.pop(p, None)
    else:
        op._complete_seen[p] = (seen, _held(part))
