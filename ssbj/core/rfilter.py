"""The R-filter: which join values R has, so a tuple whose value has no master rows finishes at once.

Theorem 1 prices a value without master rows at zero: it belongs in the cache as an
empty entry. Found one at a time (at expiry, :func:`ssbj.core.hs.hs_expire`) such values
cost an entry each, or a whole R-cycle in H_S each time they arrive; on a long-tailed
stream most of them are rare. The R-filter holds every join value the cyclic scan has
read since it was started, as

* a *bitmap* over ``[base, base + nbits)`` for exact key families whose range is small
  (one bit per value of the range, no false positive; a value read outside the range
  sets ``oor`` and from then on every value outside the range counts as present), or
* a word-blocked *Bloom* filter (``K`` bits in one 64-bit word per value) otherwise.

A negative answer is exact: no row of that value was read during the last complete
R-cycle (or since), the freshness an empty cache entry has (no cached answer is older
than one R-cycle). False positives only send a tuple to H_S, as without the filter;
values deleted from R stay set until the filter is rebuilt. It answers only once it
has seen one complete R-cycle (``complete_rc``).

Adopted only when it pays (:func:`plan`): the bytes of H_S that the value-less tuples of
one R-cycle would hold, times the share the filter answers (1 - false positive rate),
against the filter's own bytes, all counted in the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ssbj.core.hashing import mix
from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

OFF = 0
BITMAP = 1
BLOOM = 2
K = 3  # Bloom bits per value, all in one 64-bit word (one cache miss per test)
MAX_BITMAP_BITS = 1 << 36  # ranges beyond this are never a bitmap


@njit(cache=True, inline="always")
def rf_bits_of(h: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """Return the ``K`` bits of hash ``h`` inside its word (6 hash bits each, above the word's)."""
    m = np.uint64(0)
    for i in range(K):
        m |= np.uint64(1) << ((h >> np.uint64(6 * i)) & np.uint64(63))
    return m


@njit(cache=True, inline="always")
def rf_test(bits: np.ndarray, mode: int, base: int, nbits: int, oor: bool, key: int) -> bool:  # pragma: no cover
    """Whether R may have value ``key`` (False: it has none, exactly)."""
    if mode == BITMAP:
        d = key - base
        if d < 0 or d >= nbits:
            return oor
        return (bits[d >> 6] >> np.uint64(d & 63)) & np.uint64(1) != 0
    h = mix(key)
    w = np.int64((h >> np.uint64(32)) & np.uint64(bits.shape[0] - 1))
    m = rf_bits_of(h)
    return (bits[w] & m) == m


@njit(cache=True, nogil=True)
def rf_add(
    bits: np.ndarray, mode: int, base: int, nbits: int, keys: np.ndarray, valid: np.ndarray
) -> bool:  # pragma: no cover
    """Add the valid ``keys`` (``valid`` empty: all are); returns whether one fell outside a bitmap's range."""
    oor = False
    every = valid.shape[0] == 0
    for i in range(keys.shape[0]):
        if not every and not valid[i]:
            continue
        key = keys[i]
        if mode == BITMAP:
            d = key - base
            if d < 0 or d >= nbits:
                oor = True
                continue
            bits[d >> 6] |= np.uint64(1) << np.uint64(d & 63)
        else:
            h = mix(key)
            w = np.int64((h >> np.uint64(32)) & np.uint64(bits.shape[0] - 1))
            bits[w] |= rf_bits_of(h)
    return oor


def bloom_fpr(bits_per_value: float) -> float:
    """Return the false positive rate of the word-blocked filter (standard Bloom formula, K hashes)."""
    if bits_per_value <= 0:
        return 1.0
    return float((1.0 - math.exp(-K / bits_per_value)) ** K)


@dataclass(frozen=True)
class FilterPlan:
    """What :func:`plan` chose: mode, geometry, bytes, expected false positive rate and gain."""

    mode: int = OFF
    base: int = 0
    nbits: int = 0
    fpr: float = 1.0
    nbytes: int = 0
    gain: float = 0.0  # bytes of H_S saved per R-cycle minus the filter's bytes


def plan(rows: int, kmin: int, kmax: int, exact: bool, value_less_bytes: float) -> FilterPlan:
    """Return the filter that saves most: ``value_less_bytes`` is what tuples without master rows hold in H_S.

    ``rows`` (master rows per R-cycle) bounds the distinct values; a Bloom filter of
    ``bits`` per row answers ``1 - fpr`` of those tuples; a bitmap over ``[kmin, kmax]``
    (exact key families) answers all of them.
    """
    best = FilterPlan()
    if rows <= 0 or value_less_bytes <= 0:
        return best
    if exact and kmax >= kmin and kmax - kmin + 1 <= MAX_BITMAP_BITS:
        nbits = int(kmax - kmin + 1)
        nb = 8 * ((nbits + 63) // 64)
        best = FilterPlan(BITMAP, int(kmin), nbits, 0.0, nb, value_less_bytes - nb)
    for words_log2 in range(0, 40):
        words = 1 << words_log2
        bits_per = 64 * words / rows
        if bits_per > 24:
            break
        fpr = bloom_fpr(bits_per)
        gain = value_less_bytes * (1.0 - fpr) - 8 * words
        if gain > best.gain:
            best = FilterPlan(BLOOM, 0, 64 * words, fpr, 8 * words, gain)
    return best if best.gain > 0 else FilterPlan()


class RFilter:
    """The active filter, and one being built during an R-cycle to replace it."""

    def __init__(self) -> None:
        self.active: FilterState | None = None
        self.building: FilterState | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of both bit arrays."""
        return sum(int(s.bits.nbytes) for s in (self.active, self.building) if s is not None)

    def start(self, p: FilterPlan, rc: int) -> None:
        """Begin building ``p`` at the start of R-cycle ``rc`` (it answers from ``rc + 1``)."""
        self.building = FilterState(p, rc + 1)

    def drop(self) -> None:
        """Stop using any filter."""
        self.active = self.building = None

    def add(self, keys: np.ndarray, valid: np.ndarray) -> None:
        """Every key the scan reads goes into both filters."""
        for s in (self.active, self.building):
            if s is not None and len(keys):
                s.oor |= bool(rf_add(s.bits, s.mode, s.base, s.nbits, keys, valid))

    def new_cycle(self, rc: int) -> None:
        """At the start of R-cycle ``rc``: a filter that has seen a complete R-cycle takes over."""
        if self.building is not None and rc >= self.building.complete_rc:
            self.active, self.building = self.building, None

    def answering(self, rc: int) -> FilterState | None:
        """Return the filter that answers in R-cycle ``rc``, if any."""
        a = self.active
        return a if a is not None and rc >= a.complete_rc else None


class FilterState:
    """One filter's bits and geometry."""

    def __init__(self, p: FilterPlan, complete_rc: int) -> None:
        self.mode = p.mode
        self.base = p.base
        self.nbits = p.nbits
        self.fpr = p.fpr
        self.bits = np.zeros(max(1, (p.nbits + 63) // 64), dtype=np.uint64)
        self.oor = False
        self.complete_rc = complete_rc

    def to_meta(self) -> dict[str, int | float | bool]:
        """Scalars for a checkpoint (the bits are saved as an array)."""
        return {
            "mode": self.mode,
            "base": self.base,
            "nbits": self.nbits,
            "fpr": self.fpr,
            "oor": self.oor,
            "complete_rc": self.complete_rc,
        }

    @classmethod
    def from_meta(cls, m: dict[str, int | float | bool], bits: np.ndarray) -> FilterState:
        """Inverse of :meth:`to_meta`."""
        s = cls(FilterPlan(int(m["mode"]), int(m["base"]), int(m["nbits"]), float(m["fpr"])), int(m["complete_rc"]))
        s.bits = np.asarray(bits, dtype=np.uint64).copy()
        s.oor = bool(m["oor"])
        return s
