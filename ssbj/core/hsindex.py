"""H_S's value index: one 4-byte word per join value, pointing at its newest tuple in the ring.

Open addressing with linear probing and backward-shift deletion. In a ring of fewer than
2**24 slots a word holds the slot modulo 2**24, a 4-bit hash tag and 4 bits of
displacement from the value's home index slot (15: that far or farther): a probe reads a
tuple's key (``ring_key``, a random read) only when tag and home match, and a deletion
finds the home of each word it shifts without reading its key. In a larger ring a word
is the slot modulo 2**32 - 1 alone. The index stores no key, so a value costs 4 bytes /
load and nothing else (:mod:`ssbj.core.hs` holds the ring and the chains).
"""

from __future__ import annotations

import numpy as np

from ssbj.core.hashing import between, home, mix
from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

M32 = np.int64((1 << 32) - 1)  # slots of a large ring are stored modulo this in the index
SLOT_BITS = 24  # a ring of fewer than 2**SLOT_BITS slots: slot residue, tag and displacement per word
SMALL = 1 << SLOT_BITS
RES = np.int64(SMALL - 1)
EMPTY = np.uint32(0xFFFFFFFF)  # never a word: tags stop at 14, large-ring residues at 2**32 - 2
# a small ring's word: 4 bits of displacement from the value's home index slot (15: 15 or
# more), a 4-bit hash tag, the slot residue. A probe compares tag and home, and a deletion
# finds the home of each word it shifts without reading the word's key (a random read)
DISP_SHIFT = 28
D_MAX = 15
TAG_MASK = np.int64(0xF)
KEEP_LOW = np.int64((1 << DISP_SHIFT) - 1)
INDEX_SLOT = 4  # bytes per index word
# most load of the value index, as the other tables: at 0.8 MESHJOIN holds 0.6% more tuples
# at 1% of R but a probe (mostly misses) costs 6-13% more CPU (bench/results/bound/hsmem.md)
INDEX_LOAD = 0.75


@njit(cache=True, inline="always")
def tag_of(h: np.uint64) -> np.int64:  # pragma: no cover - compiled
    """4-bit tag of hash ``h``, 0-14 (15 would let a word with the top displacement be EMPTY)."""
    t = np.int64(h & np.uint64(0xF))
    return t if t != 15 else np.int64(14)


@njit(cache=True, inline="always")
def enc(s: int, h: np.uint64, cap: int, d: int) -> np.uint32:  # pragma: no cover - compiled
    """Index word of slot ``s`` (of a value with hash ``h``), ``d`` index slots past its home, in a ring of ``cap``."""
    if cap < SMALL:
        return np.uint32((min(d, D_MAX) << DISP_SHIFT) | (tag_of(h) << SLOT_BITS) | (s & RES))
    return np.uint32(s % M32)


@njit(cache=True, inline="always")
def dec(v: np.uint32, hi: int, cap: int) -> int:  # pragma: no cover - compiled
    """Slot of index word ``v``, given that it is one of the live slots below ``hi``."""
    if cap < SMALL:
        return hi - ((hi - (np.int64(v) & RES)) & RES)
    d = (hi % M32 - np.int64(v) + M32) % M32
    return hi - d


@njit(cache=True, inline="always")
def disp_of(v: np.uint32) -> int:  # pragma: no cover - compiled
    """Displacement field of a small ring's word (``D_MAX``: that far or farther)."""
    return np.int64(v) >> DISP_SHIFT


@njit(cache=True, inline="always")
def tag_ok(v: np.uint32, h: np.uint64, cap: int, d: int) -> bool:  # pragma: no cover - compiled
    """Whether word ``v``, ``d`` slots past the home of hash ``h``, may belong to that value.

    Its tag must match and its home must be the same slot (the displacement it records
    equals ``d``; from ``D_MAX`` on only the tag is compared). Large rings keep neither.
    """
    if cap >= SMALL:
        return True
    if ((np.int64(v) >> SLOT_BITS) & TAG_MASK) != tag_of(h):
        return False
    w = disp_of(v)
    return w == d or (w == D_MAX and d >= D_MAX)


@njit(cache=True, inline="always")
def ix_find(
    hix: np.ndarray, ring_key: np.ndarray, cap: int, hi: int, key: int, h: np.uint64
) -> tuple[int, int]:  # pragma: no cover
    """(index slot, newest live slot of ``key``); the slot is -1 and the index slot free if absent.

    The probe reads a value's slot and ``ring_key`` (a random position) only when the
    word's tag and home match: most master rows have no tuple in H_S and never leave the index.
    """
    n = hix.shape[0]
    i = home(h, n)
    d = 0
    while hix[i] != EMPTY:
        v = hix[i]
        if tag_ok(v, h, cap, d):
            s = dec(v, hi, cap)
            if ring_key[s % cap] == key:
                return i, s
        i += 1
        d += 1
        if i == n:
            i = 0
    return i, np.int64(-1)


@njit(cache=True, inline="always")
def _home_at(hix: np.ndarray, ring_key: np.ndarray, cap: int, hi: int, j: int) -> int:  # pragma: no cover
    """Home slot of the word at index slot ``j``: from its displacement, else from its key (a random read)."""
    n = hix.shape[0]
    v = hix[j]
    if cap < SMALL and disp_of(v) < D_MAX:
        return (j - disp_of(v)) % n
    return home(mix(ring_key[dec(v, hi, cap) % cap]), n)


@njit(cache=True)
def ix_delete(hix: np.ndarray, ring_key: np.ndarray, cap: int, hi: int, i: int) -> None:  # pragma: no cover
    """Delete index slot ``i``, shifting the rest of its cluster back (its words' displacements shrink)."""
    n = hix.shape[0]
    hole = i
    j = i
    while True:
        j += 1
        if j == n:
            j = 0
        if hix[j] == EMPTY:
            break
        hj = _home_at(hix, ring_key, cap, hi, j)
        if between(hole, hj, j):
            continue
        v = hix[j]
        if cap < SMALL:
            d = min((hole - hj) % n, D_MAX)
            v = np.uint32((np.int64(v) & KEEP_LOW) | (d << DISP_SHIFT))
        hix[hole] = v
        hole = j
    hix[hole] = EMPTY


@njit(cache=True)
def ix_rebuild(hix: np.ndarray, heads: np.ndarray, ring_key: np.ndarray, cap: int) -> None:  # pragma: no cover
    """Insert the newest slots ``heads`` (one per value) into an empty index."""
    n = hix.shape[0]
    for t in range(heads.shape[0]):
        s = heads[t]
        h = mix(ring_key[s % cap])
        i = home(h, n)
        d = 0
        while hix[i] != EMPTY:
            i += 1
            d += 1
            if i == n:
                i = 0
        hix[i] = enc(s, h, cap, d)


@njit(cache=True)
def hs_heads(hix: np.ndarray, hi: int, cap: int) -> np.ndarray:  # pragma: no cover
    """Newest slot of every value in the index."""
    out = np.empty(hix.shape[0], dtype=np.int64)
    m = 0
    for i in range(hix.shape[0]):
        if hix[i] != EMPTY:
            out[m] = dec(hix[i], hi, cap)
            m += 1
    return out[:m]
