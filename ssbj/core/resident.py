"""A resident master's partitions known unchanged by their buffers (:mod:`ssbj.core.complete`).

Arrow buffers are immutable: a partition read again into the very buffers H_R's rows of it
were last made equal to brings the same rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


def _buffers(t: pa.Table) -> tuple[tuple[int, int, int, int], ...]:
    """Identity of a table's data: (address, size, offset, length) of every buffer of every chunk."""
    out: list[tuple[int, int, int, int]] = []
    for col in t.columns:
        for ch in col.chunks:
            out.extend((b.address, b.size, ch.offset, len(ch)) for b in ch.buffers() if b is not None)
    return tuple(out)


def views_of_resident(op: SemiStreamJoin, p: int, part: pa.Table) -> tuple[tuple[int, int, int, int], ...] | None:
    """Return the buffers of partition p as read, if they are the master's resident partition (else None).

    Arrow buffers are immutable, so a read of p that returns the very buffers of the last read
    brings the same rows. Only views of data the master holds anyway are remembered (holding
    them costs nothing); a partition read into new buffers is compared row by row.
    """
    get = getattr(op.master, "resident_partition", None)
    if get is None:
        return None
    ids = _buffers(part)
    return ids if ids == _buffers(get(p).select(op._mcols)) else None


def remember(op: SemiStreamJoin, p: int, part: pa.Table, seen: tuple[tuple[int, int, int, int], ...] | None) -> None:
    """H_R's rows of p now equal ``part``'s: remember its buffers (and hold them, so no address is reused).

    (The master's own buffers: holding them costs the operator nothing.)
    """
    if seen is None:
        op._complete_seen.pop(p, None)
    else:
        held = [b for col in part.columns for ch in col.chunks for b in ch.buffers() if b is not None]
        op._complete_seen[p] = (seen, held)
