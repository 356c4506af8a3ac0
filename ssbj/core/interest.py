"""A blocked bit filter of the join values the disk phase must look up beyond H_S.

Per master row the disk phase probes H_S; in SSBJ it may also need the value statistics
(s_count, the switching decision), H_R's index (refresh of cached rows) and the empty
entries. Those tables are small and their values rare among R's rows, so each probe is a
cache miss that almost always finds nothing. The filter sets three bits of one 64-bit
word per value in any of them (16 bits per value planned) and sits in the L2 cache; a row
whose three bits are not all set skips the three lookups. One word per value keeps the
test at one load, as a one-bit filter's; three bits cut the false positives from ~6%
(one bit) to ~1% at 16 bits per value (~0.2% at the 30-odd bits per value a filter
planned for its R-cycle's peak holds): on the issue's data at 1% of R, 3.4% of master
rows passed the one-bit filter and nearly all were false positives, each paying three
lookups. The bit array has exactly the words the planned values need (the word is chosen
by a multiply-shift of the hash, as the tables' home slots are, not by a mask, so no
power-of-two rounding). False positives only cost a lookup; there are no false negatives
because every insertion into those tables sets the bits, and the filter is rebuilt from
the tables (dropping stale bits) at each R-cycle start. The same guarantee lets
:func:`ssbj.core.hs.hs_insert` skip the statistics lookup of a value whose bits are clear.
"""

from __future__ import annotations

import numpy as np

from ssbj.core.hashing import mix
from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

BITS_PER_VALUE = 16
# planned values per empty entry at a rebuild (more are added during the R-cycle): 2 held
# 0.5% of the budget more at 1% of R (bench/results/bound/mem-2026-11-27.md)
EMPTY_GROWTH = 1.25


@njit(cache=True, inline="always")
def word_of(h: np.uint64, nwords: np.uint64) -> np.int64:  # pragma: no cover - compiled
    """Word of hash ``h`` among ``nwords`` (from hash bits 8-39)."""
    return np.int64((((h >> np.uint64(8)) & np.uint64(0xFFFFFFFF)) * nwords) >> np.uint64(32))


@njit(cache=True, inline="always")
def mask_of(h: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """Return the value's three bits within its word (from hash bits 40-57, apart from the word's)."""
    one = np.uint64(1)
    m63 = np.uint64(63)
    return (
        (one << ((h >> np.uint64(40)) & m63))
        | (one << ((h >> np.uint64(46)) & m63))
        | (one << ((h >> np.uint64(52)) & m63))
    )


@njit(cache=True, inline="always")
def interest_test(bits: np.ndarray, h: np.uint64) -> bool:  # pragma: no cover - compiled
    """Whether the value with hash ``h`` may be in one of the filtered tables."""
    m = mask_of(h)
    return (bits[word_of(h, np.uint64(bits.shape[0]))] & m) == m


@njit(cache=True, inline="always")
def interest_set(bits: np.ndarray, h: np.uint64) -> None:  # pragma: no cover - compiled
    """Set the bits of hash ``h``."""
    bits[word_of(h, np.uint64(bits.shape[0]))] |= mask_of(h)


@njit(cache=True)
def interest_add(bits: np.ndarray, keys: np.ndarray) -> None:  # pragma: no cover - compiled
    """Set the bits of ``keys``."""
    for t in range(keys.shape[0]):
        interest_set(bits, mix(keys[t]))


# how a hash picks its bits (1: one bit by a mask over a power of two of bits; 2: one bit by multiply-shift)
MAPPING = 3


class Interest:
    """The filter's bits and how many values it was sized for."""

    def __init__(self) -> None:
        self.bits = np.zeros(1, dtype=np.uint64)
        self.planned = 0
        self.added = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the bit array."""
        return int(self.bits.nbytes)

    def rebuild(self, *key_sets: np.ndarray, expect: int = 0) -> None:
        """Hold exactly ``key_sets``, sized for ``expect`` values or the keys given, if more."""
        n = sum(len(k) for k in key_sets)
        want = max(n, expect, 64)
        words = max(1, -(-want * BITS_PER_VALUE // 64))
        if words != self.bits.shape[0]:
            self.bits = np.zeros(words, dtype=np.uint64)
        else:
            self.bits[:] = 0
        self.planned = want
        self.added = 0
        for k in key_sets:
            interest_add(self.bits, np.asarray(k, dtype=np.int64))
        self.added = n

    def load(self, bits: np.ndarray, planned: int, added: int) -> None:
        """Restore the filter exactly as saved (its size drives the budget, ``added`` the next rebuild)."""
        self.bits = np.asarray(bits, dtype=np.uint64).copy()
        self.planned, self.added = planned, added

    def refill(self, *key_sets: np.ndarray) -> None:
        """Set the bits of ``key_sets`` anew at the same size (a filter saved with another bit mapping)."""
        self.bits[:] = 0
        for k in key_sets:
            interest_add(self.bits, np.asarray(k, dtype=np.int64))

    def add(self, keys: np.ndarray) -> None:
        """Set the bits of new values (the filter fills up until the next rebuild)."""
        interest_add(self.bits, np.asarray(keys, dtype=np.int64))
        self.added += len(keys)

    @property
    def overfull(self) -> bool:
        """More values than planned: false positives grow, rebuild bigger."""
        return self.added > 2 * self.planned
