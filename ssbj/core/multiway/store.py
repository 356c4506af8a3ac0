"""Where waiting tuples of a scanned master wait for the rest of its R-cycle.

A chunk is the set of intermediate tuples that entered one edge's scan in one step; it
waits until it has met every partition of that master. The operator keeps each chunk's
small bookkeeping (edge, probe order, partitions met) itself and asks the store only for
the rows and, on a left edge, their matched flags. Two stores exist: :class:`MemoryStore`
here, which refuses to grow past its limit (:class:`WaitingStateOverflow`, never a silent
overrun), and the LSM-tree store in :mod:`ssbj.adapters.lsmstore`, which spills to disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from ssbj.errors import StateError


@dataclass
class Chunk:
    """Bookkeeping of one waiting chunk (its rows are in the store)."""

    id: int
    edge: int
    oid: int  # index of the probe order the rows follow
    pos: int  # position of ``edge`` in that order
    seen: int  # partitions met so far
    rows: int
    width: float  # bytes per row


class WaitingStateOverflow(StateError):
    """The waiting state no longer fits the memory the store was given."""


@runtime_checkable
class WaitingStore(Protocol):
    """Chunks of waiting tuples, keyed by (edge, chunk id)."""

    def set_limit(self, nbytes: int) -> None:
        """Bytes of memory the store may hold from now on."""

    def put(self, edge: int, chunk: int, table: pa.Table, matched: np.ndarray | None) -> None:
        """Store a new chunk (``matched``: per-row flags, left edges only)."""

    def get(self, edge: int, chunk: int) -> tuple[pa.Table, np.ndarray | None]:
        """Rows and flags of a chunk."""

    def set_matched(self, edge: int, chunk: int, matched: np.ndarray) -> None:
        """Replace a chunk's matched flags."""

    def delete(self, edge: int, chunk: int) -> None:
        """Drop a chunk (it has met every partition)."""

    def memory_bytes(self) -> int:
        """Bytes the store holds in memory now (what counts against the budget)."""

    def disk_bytes(self) -> int:
        """Bytes the store keeps outside memory (0 for the in-memory store)."""

    def close(self) -> None:
        """Release resources (files of a spilling store)."""


def chunk_nbytes(table: pa.Table, matched: np.ndarray | None) -> int:
    """Real bytes a chunk takes in memory: its Arrow buffers and its flags."""
    return int(table.nbytes) + (int(matched.nbytes) if matched is not None else 0)


class MemoryStore:
    """Chunks held as Arrow tables in a dict; raises when they exceed the limit."""

    def __init__(self, limit: int | None = None) -> None:
        self._chunks: dict[tuple[int, int], tuple[pa.Table, np.ndarray | None]] = {}
        self._bytes = 0
        self._limit = limit

    def set_limit(self, nbytes: int) -> None:
        """Bytes of memory the store may hold from now on."""
        self._limit = nbytes

    def put(self, edge: int, chunk: int, table: pa.Table, matched: np.ndarray | None) -> None:
        """Store a new chunk; :class:`WaitingStateOverflow` when it does not fit."""
        size = chunk_nbytes(table, matched)
        if self._limit is not None and self._bytes + size > self._limit:
            raise WaitingStateOverflow(
                f"waiting state of the multi-way join needs {self._bytes + size} bytes, more than the "
                f"{self._limit} bytes the memory budget leaves it: raise memory_budget or use the LSM-tree "
                "store (ssbj.adapters.lsmstore.LsmStore, extra 'lsm')"
            )
        self._chunks[(edge, chunk)] = (table, matched)
        self._bytes += size

    def get(self, edge: int, chunk: int) -> tuple[pa.Table, np.ndarray | None]:
        """Rows and flags of a chunk."""
        return self._chunks[(edge, chunk)]

    def set_matched(self, edge: int, chunk: int, matched: np.ndarray) -> None:
        """Replace a chunk's matched flags (same size)."""
        table, _ = self._chunks[(edge, chunk)]
        self._chunks[(edge, chunk)] = (table, matched)

    def delete(self, edge: int, chunk: int) -> None:
        """Drop a chunk."""
        table, matched = self._chunks.pop((edge, chunk))
        self._bytes -= chunk_nbytes(table, matched)

    def memory_bytes(self) -> int:
        """Bytes of the chunks held."""
        return self._bytes

    def disk_bytes(self) -> int:
        """Nothing is kept outside memory."""
        return 0

    def close(self) -> None:
        """Drop everything."""
        self._chunks.clear()
        self._bytes = 0
