"""H_S's links: per waiting tuple, the distance to the previous tuple of its value and two flags.

A link takes ``log2(ring slots) + 2`` bits (17 bits in a ring of 17,000 slots), packed into
one byte array (:func:`new_links`; its last byte holds the bits per link): the distance to
the previous tuple of the same value in the ring (0 for a value's oldest tuple; it is
below the ring's size) and the flags *matched* (it met a master row) and *removed* (it
left H_S early, when its value moved to the cache). :mod:`ssbj.core.hs` chains a value's
tuples with them.
"""

from __future__ import annotations

import numpy as np

from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

MATCHED = np.uint8(2)  # flag values of a link (its two top bits)
REMOVED = np.uint8(1)


def link_bits(cap: int) -> int:
    """Bits of one link in a ring of ``cap`` slots: a distance below ``cap``, and two flags."""
    return max(1, int(cap - 1).bit_length()) + 2


def new_links(cap: int) -> np.ndarray:
    """Links of a ring of ``cap`` slots, bit-packed; the last byte holds the bits per link.

    Link ``p`` is bits ``[p b, (p + 1) b)`` (little-endian); 8 spare bytes before the last
    let a read take whole bytes past the final link.
    """
    b = link_bits(cap)
    out = np.zeros((cap * b + 7) // 8 + 9, dtype=np.uint8)
    out[-1] = b
    return out


@njit(cache=True, inline="always")
def _lk_raw(link: np.ndarray, p: int) -> tuple[int, int]:  # pragma: no cover - compiled
    b = np.int64(link[link.shape[0] - 1])
    bit = p * b
    i = bit >> 3
    # always 8 bytes (the array's spare bytes keep them in bounds): one load once compiled
    v = np.uint64(0)
    for j in range(8):
        v |= np.uint64(link[i + j]) << np.uint64(8 * j)
    return np.int64((v >> np.uint64(bit & 7)) & np.uint64((np.int64(1) << b) - 1)), b


@njit(cache=True, inline="always")
def lk_get(link: np.ndarray, p: int) -> int:  # pragma: no cover - compiled
    """Distance from slot position ``p``'s tuple to the previous tuple of its value (0: none)."""
    v, b = _lk_raw(link, p)
    return v & ((np.int64(1) << (b - 2)) - 1)


@njit(cache=True, inline="always")
def lk_flags(link: np.ndarray, p: int) -> int:  # pragma: no cover - compiled
    """Return the flags (:data:`MATCHED`, :data:`REMOVED`) of position ``p``."""
    v, b = _lk_raw(link, p)
    return v >> (b - 2)


@njit(cache=True, inline="always")
def lk_set(link: np.ndarray, p: int, d: int, f: int) -> None:  # pragma: no cover - compiled
    """Set position ``p``'s link to distance ``d`` (0 when it does not fit) and flags ``f``."""
    b = np.int64(link[link.shape[0] - 1])
    if d >= np.int64(1) << (b - 2):
        d = 0
    bit = p * b
    i = bit >> 3
    sh = bit & 7
    mask = ((np.int64(1) << b) - 1) << sh
    val = ((np.int64(f) << (b - 2)) | d) << sh
    for j in range((sh + b + 7) >> 3):
        m = (mask >> (8 * j)) & 0xFF
        link[i + j] = np.uint8((np.int64(link[i + j]) & ~m) | ((val >> (8 * j)) & m))


@njit(cache=True, inline="always")
def lk_put(link: np.ndarray, p: int, d: int) -> None:  # pragma: no cover - compiled
    """Set position ``p``'s distance to ``d`` and clear its flags (a tuple entering H_S)."""
    lk_set(link, p, d, 0)


@njit(cache=True, inline="always")
def lk_flag(link: np.ndarray, p: int, f: int) -> None:  # pragma: no cover - compiled
    """Set flag ``f`` (:data:`MATCHED` or :data:`REMOVED`) of position ``p``."""
    b = np.int64(link[link.shape[0] - 1])
    bit = p * b + b - 2 + (1 if f == MATCHED else 0)
    link[bit >> 3] |= np.uint8(1 << (bit & 7))


@njit(cache=True)
def lk_read(link: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """(distances, flags) of positions ``pos``."""
    d = np.empty(pos.shape[0], dtype=np.int64)
    f = np.empty(pos.shape[0], dtype=np.uint8)
    for t in range(pos.shape[0]):
        d[t] = lk_get(link, pos[t])
        f[t] = lk_flags(link, pos[t])
    return d, f


@njit(cache=True)
def lk_write(link: np.ndarray, pos: np.ndarray, d: np.ndarray, f: np.ndarray) -> None:  # pragma: no cover
    """Set the links of positions ``pos`` to distances ``d`` and flags ``f``."""
    for t in range(pos.shape[0]):
        lk_set(link, pos[t], d[t], f[t])
