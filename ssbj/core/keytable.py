"""The per-join-value state table: a sparse index over dense, recycled records."""

from __future__ import annotations

import numpy as np

from ssbj.core import kernels as K

INDEX_SLOT_BYTES = 8 + 4  # tkeys, trec
RECORD_BYTES = 8 * K.NFIELDS + 1 + 8  # kv row, rstate, free-stack slot


def _pow2(n: int, floor: int = 64) -> int:
    p = floor
    while p < n:
        p *= 2
    return p


class KeyTable:
    """Arrays shared with the kernels; the Python side only sizes and serialises them."""

    def __init__(self, index_cap: int = 64, rec_cap: int = 32) -> None:
        self.tkeys = np.zeros(index_cap, dtype=np.int64)
        self.trec = np.full(index_cap, K.EMPTY, dtype=np.int32)
        self.kv = np.zeros((rec_cap, K.NFIELDS), dtype=np.int64)
        self.rstate = np.zeros(rec_cap, dtype=np.uint8)
        self.free = np.arange(rec_cap - 1, -1, -1, dtype=np.int64)  # pops give 0, 1, 2, ...
        self.meta = np.array([rec_cap], dtype=np.int64)  # free-stack height
        self.tombs = 0

    @property
    def used(self) -> int:
        """Live records (join values tracked)."""
        return len(self.rstate) - int(self.meta[0])

    @property
    def nbytes(self) -> int:
        """Physical bytes of index and records."""
        return len(self.tkeys) * INDEX_SLOT_BYTES + len(self.rstate) * RECORD_BYTES

    @staticmethod
    def bytes_for(entries: int) -> int:
        """Most bytes ``entries`` values can take (index at 50% load, one record each)."""
        return _pow2(2 * entries + 2) * INDEX_SLOT_BYTES + max(entries, 32) * RECORD_BYTES

    def live(self) -> np.ndarray:
        """Mask over records of the live ones."""
        mask: np.ndarray = self.rstate == 1
        return mask

    def lookup(self, keys: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Record per key (-1 if absent)."""
        if valid is None:
            valid = np.ones(len(keys), dtype=bool)
        out: np.ndarray = np.asarray(K.lookup_many(self.tkeys, self.trec, keys, valid), dtype=np.int64)
        return out

    def released(self, n: int) -> None:
        """Account for ``n`` records released by a kernel (their index slots are tombstones)."""
        self.tombs += n

    def ensure(self, n_new: int) -> None:
        """Room for ``n_new`` more values: free records and an index below 70% load."""
        if int(self.meta[0]) < n_new:
            self._resize_records(max(len(self.rstate) * 9 // 8, self.used + n_new))
        if (self.used + self.tombs + n_new) * 10 > len(self.tkeys) * 7:
            self._rehash(_pow2(2 * (self.used + n_new) + 2))

    def shrink(self, entries: int) -> None:
        """Release index slots and records beyond what ``entries`` values need (never below use)."""
        recs = max(entries, self.used, 32)
        if recs < len(self.rstate):
            self._resize_records(recs)
        cap = max(_pow2(2 * entries + 2), _pow2(2 * (self.used + 1)))
        if cap < len(self.tkeys):
            self._rehash(cap)

    def _rehash(self, cap: int) -> None:
        self.tkeys, self.trec = K.rehash(self.kv, self.rstate, cap)
        self.tombs = 0

    def _resize_records(self, rec_cap: int) -> None:
        live = np.flatnonzero(self.rstate == 1)
        if rec_cap >= len(self.rstate):
            old = len(self.rstate)
            kv = np.zeros((rec_cap, K.NFIELDS), dtype=np.int64)
            kv[:old] = self.kv
            rstate = np.zeros(rec_cap, dtype=np.uint8)
            rstate[:old] = self.rstate
            # new ids go under the ids already free, so they are handed out last, ascending
            stack = np.concatenate([np.arange(rec_cap - 1, old - 1, -1, dtype=np.int64), self.free[: self.meta[0]]])
            self.free = np.zeros(rec_cap, dtype=np.int64)
            self.free[: len(stack)] = stack
            self.meta[0] = len(stack)
            self.kv, self.rstate = kv, rstate
            return
        # shrink: compact the live records to the front, then rebuild the index
        self._load(self.kv[live], rec_cap, len(self.tkeys))

    def _load(self, records: np.ndarray, rec_cap: int, index_cap: int) -> None:
        n = len(records)
        self.kv = np.zeros((rec_cap, K.NFIELDS), dtype=np.int64)
        self.kv[:n] = records
        self.rstate = np.zeros(rec_cap, dtype=np.uint8)
        self.rstate[:n] = 1
        self.free = np.zeros(rec_cap, dtype=np.int64)
        self.free[: rec_cap - n] = np.arange(rec_cap - 1, n - 1, -1, dtype=np.int64)
        self.meta[0] = rec_cap - n
        self._rehash(index_cap)

    def records(self) -> np.ndarray:
        """Live records, for a checkpoint."""
        out: np.ndarray = self.kv[self.rstate == 1]
        return out

    @classmethod
    def from_records(cls, records: np.ndarray, rec_cap: int, index_cap: int) -> KeyTable:
        """Rebuild from :meth:`records` at the same capacities."""
        kt = cls()
        kt._load(records.astype(np.int64), max(rec_cap, len(records)), index_cap)
        return kt
