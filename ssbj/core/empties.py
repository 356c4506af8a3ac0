"""The empty cache entries: join values cached with no master row, as a sorted array.

Most cached values of a long-tailed stream have no master row (30% of the stream's mass
on the issue's data). Each needs its key, a saturating f_count (hits since ``since``)
and ``since`` (an R-cycle, modulo 256) for eviction: 10 bytes. A hash set paid that at
60% load plus a used flag (18 B per entry); a sorted key array with a parallel
two-byte payload pays exactly 10 B and a lookup is a binary search over a few thousand
keys that stay in the CPU cache. Entries change only in batches (values found empty at
an expiry, an eviction R-cycle, an H_R rebuild), so a batch is one merge, in place
while the arrays' spare quarter holds it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

E_F = 0  # payload fields: f_count (saturating), since (R-cycle modulo 256)
E_SINCE = 1
F_MAX_EMPTY = 255
ENTRY_BYTES = 8 + 2  # key and payload: the whole cost of an entry (no load factor)


@njit(cache=True, inline="always")
def es_find(keys: np.ndarray, key: int) -> int:  # pragma: no cover - compiled
    """Position of ``key`` in the sorted ``keys``, or -1."""
    lo = 0
    hi = keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    if lo < keys.shape[0] and keys[lo] == key:
        return lo
    return -1


@njit(cache=True)
def _merge_in(keys: np.ndarray, pay: np.ndarray, n: int, new: np.ndarray, since: int) -> None:  # pragma: no cover
    """Merge the sorted ``new`` keys (none present) into ``keys[:n]`` in place, from the back."""
    i = n - 1
    j = new.shape[0] - 1
    w = n + new.shape[0] - 1
    while j >= 0:
        if i >= 0 and keys[i] > new[j]:
            keys[w] = keys[i]
            pay[w, 0] = pay[i, 0]
            pay[w, 1] = pay[i, 1]
            i -= 1
        else:
            keys[w] = new[j]
            pay[w, 0] = 0
            pay[w, 1] = since
            j -= 1
        w -= 1


@njit(cache=True)
def _compact(keys: np.ndarray, pay: np.ndarray, n: int, keep: np.ndarray) -> int:  # pragma: no cover
    """Keep the entries ``keep`` of ``keys[:n]`` in place, in order; returns how many."""
    w = 0
    for i in range(n):
        if keep[i]:
            keys[w] = keys[i]
            pay[w, 0] = pay[i, 0]
            pay[w, 1] = pay[i, 1]
            w += 1
    return w


@njit(cache=True)
def _absent(keys: np.ndarray, cand: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Mask of ``cand`` not in the sorted ``keys`` (a binary search each: batches are small)."""
    out = np.empty(cand.shape[0], dtype=np.bool_)
    for i in range(cand.shape[0]):
        out[i] = es_find(keys, cand[i]) < 0
    return out


def capacity_after(size: int, cap: int) -> int:
    """Capacity for ``size`` entries: ``cap`` while it holds them, else a quarter more than needed."""
    return cap if size <= cap else size + size // 4 + 16


class EmptySet:
    """Sorted int64 keys of the values cached without rows, and their (f_count, since) bytes.

    The arrays have room for a quarter more entries than they hold (counted in
    :attr:`nbytes`), so most batches merge in place.
    """

    def __init__(self) -> None:
        self._keys = np.zeros(0, dtype=np.int64)
        self._pay: np.ndarray = np.zeros((0, 2), dtype=np.uint8)
        self._n = 0

    @property
    def keys(self) -> np.ndarray:
        """The sorted keys (a view)."""
        return self._keys[: self._n]

    @property
    def payload(self) -> np.ndarray:
        """(f_count, since) per key (a view)."""
        return self._pay[: self._n]

    @property
    def size(self) -> int:
        """Entries."""
        return self._n

    @property
    def cap(self) -> int:
        """Entries the arrays have room for."""
        return int(self._keys.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays."""
        return int(self._keys.nbytes + self._pay.nbytes)

    @staticmethod
    def entry_bytes() -> float:
        """Bytes one entry costs (for the cache inequality), with the arrays' spare quarter."""
        return 1.25 * ENTRY_BYTES

    @staticmethod
    def bytes_for(cap: int) -> int:
        """Bytes of arrays with room for ``cap`` entries."""
        return cap * ENTRY_BYTES

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, payload rows), sorted by key."""
        return self.keys, self.payload

    def _resize(self, cap: int) -> None:
        keys = np.zeros(cap, dtype=np.int64)
        pay: np.ndarray = np.zeros((cap, 2), dtype=np.uint8)
        keys[: self._n] = self._keys[: self._n]
        pay[: self._n] = self._pay[: self._n]
        self._keys, self._pay = keys, pay

    def add(self, keys: np.ndarray, rc: int) -> int:
        """Add the values of ``keys`` not present (f_count 0, since ``rc``); returns how many were new."""
        cand = np.asarray(keys, dtype=np.int64)
        new = np.unique(cand[_absent(self.keys, cand)])
        if not len(new):
            return 0
        cap = capacity_after(self._n + len(new), self.cap)
        if cap != self.cap:
            self._resize(cap)
        _merge_in(self._keys, self._pay, self._n, new, rc % 256)
        self._n += len(new)
        return len(new)

    def _keep(self, keep: np.ndarray) -> int:
        before = self._n
        self._n = int(_compact(self._keys, self._pay, self._n, keep))
        if self.cap > 64 and self._n < self.cap // 4:
            self._resize(capacity_after(self._n, 0))
        return before - self._n

    def drop(self, keys: np.ndarray) -> int:
        """Remove ``keys`` where present; returns how many were."""
        if not len(keys) or not self._n:
            return 0
        return self._keep(~np.isin(self.keys, np.asarray(keys, dtype=np.int64)))

    def evict(self, entry_cost: float, tuple_cost: float, switch_factor: float, rc: int) -> int:
        """Evict entries the cache inequality no longer favours (lines 42-51); reset the others' f_count."""
        if not self._n:
            return 0
        pay = self.payload
        f = pay[:, E_F].astype(np.float64)
        cycles = np.maximum(1, (rc - pay[:, E_SINCE].astype(np.int64)) % 256)
        n = self._keep(~(entry_cost >= switch_factor * f / cycles * tuple_cost))
        self.payload[:, E_F] = 0
        self.payload[:, E_SINCE] = rc % 256
        return n

    def load(self, keys: np.ndarray, payload: np.ndarray) -> None:
        """Replace the content by ``keys`` with ``payload`` rows (any order)."""
        k = np.asarray(keys, dtype=np.int64)
        order = np.argsort(k, kind="stable")
        self._n = 0
        self._resize(capacity_after(len(k), 0))
        self._keys[: len(k)] = k[order]
        self._pay[: len(k)] = np.asarray(payload, dtype=np.uint8).reshape(len(k), 2)[order]
        self._n = len(k)
