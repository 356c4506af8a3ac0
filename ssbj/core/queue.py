"""Q, MESHJOIN's queue: one record per chunk of H_S, oldest first.

A record holds the chunk's first slot in H_S's ring, its tuples, the partition loaded in
the step it entered (so it expires after meeting all k partitions) and its row bytes.
"""

from __future__ import annotations

import numpy as np


class Queue:
    """Q: one record (first slot, tuples, partition at entry, row bytes) per chunk, FIFO."""

    FIELDS = 4

    def __init__(self, cap: int = 16) -> None:
        self._a = np.zeros((cap, self.FIELDS), dtype=np.int64)
        self._head = 0
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes of the record array."""
        return int(self._a.nbytes)

    def push(self, base: int, n: int, p0: int, nbytes: int) -> None:
        """Enqueue a chunk."""
        if self._n == len(self._a):
            self.resize(2 * len(self._a))
        i = (self._head + self._n) % len(self._a)
        self._a[i] = (base, n, p0, nbytes)
        self._n += 1

    def oldest(self) -> tuple[int, int, int, int]:
        """Return (base, n, p0, nbytes) of the oldest chunk."""
        r = self._a[self._head]
        return int(r[0]), int(r[1]), int(r[2]), int(r[3])

    def pop(self) -> tuple[int, int, int, int]:
        """Dequeue the oldest chunk."""
        r = self.oldest()
        self._head = (self._head + 1) % len(self._a)
        self._n -= 1
        return r

    def records(self) -> np.ndarray:
        """All records, oldest first."""
        idx = (self._head + np.arange(self._n)) % len(self._a)
        out: np.ndarray = self._a[idx]
        return out

    def resize(self, cap: int) -> None:
        """Room for ``cap`` chunks (never fewer than queued)."""
        cap = max(cap, self._n, 1)
        recs = self.records()
        self._a = np.zeros((cap, self.FIELDS), dtype=np.int64)
        self._a[: self._n] = recs
        self._head = 0

    def load(self, records: np.ndarray, cap: int) -> None:
        """Replace by ``records`` (from :meth:`records`)."""
        self._n = len(records)
        self._a = np.zeros((max(cap, self._n, 1), self.FIELDS), dtype=np.int64)
        self._a[: self._n] = records
        self._head = 0
