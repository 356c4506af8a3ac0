"""The empty cache entries: join values cached with no master row, block-packed.

Most cached values of a long-tailed stream have no master row (30% of the stream's mass
on the issue's data), and at small budgets their entries compete with H_S for every
byte. An entry needs its key (exactly: a tuple whose value is an entry finishes unmatched
at once) and what eviction reads, a hit count since the last eviction.

**Keys.** The sorted keys are cut into blocks of :data:`BLOCK` consecutive keys; a block
stores its first key (8 bytes), one word with its bit offset and width (8 bytes), and
each key as its distance from the first key in the fewest bits that hold the block's
largest distance (frame-of-reference packing). A block of keys ``g`` apart takes
``log2(BLOCK * g)`` bits a key plus 16 bytes: on the issue's data at 1% of R (a few
thousand entries over a 2M-value key range, ~1,200 apart) about 19 bits. A lookup is a
binary search over the blocks' first keys and one over the block's packed distances
(random access: fixed width within a block). Keys are mapped to unsigned order
(``key ^ 2**63``), so any int64 key works, hashed keys too (they just pack less well).

**Counters.** Two bits an entry: hits since the last eviction, saturating at 3. Eviction
(lines 42-51) asks whether ``entry_cost < s_f * f / cycles * tuple_cost``; with an entry
of ~2.5 B and a tuple of ~40 B one hit decides it, so a coarse count loses nothing that
matters. ``cycles`` counts from the last eviction of the whole set (one shared ``since``):
an entry made after it is taken to be as old, which can only evict a young entry early.

Entries change only in batches (values found empty at an expiry, an eviction, an H_R
rebuild): a batch rewrites the arrays in one merge that streams through the old
encoding (no decoded copy of the set), so the old and the new arrays are the only
memory held, and :attr:`EmptySet.nbytes` is their exact size (no spare capacity).
"""

from __future__ import annotations

import numpy as np

from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return,assignment,operator"

BLOCK = 64  # keys per block
HDR = 2  # blob header words: entries, blocks
SIGN = np.uint64(1 << 63)
F_MAX_EMPTY = 3  # the 2-bit hit counter saturates here
PER_WORD = 32  # counters per uint64 word
# bytes an entry costs until the set is large enough to measure it (a block's ~19 bits
# of keys + 2 counter bits + its header share, rounded up)
ENTRY_ESTIMATE = 3.0
_W_BITS = 7  # meta word: bit offset << 7 | width (0-64)
_W_MASK = np.uint64((1 << _W_BITS) - 1)


@njit(cache=True, inline="always")
def _u(key: int) -> np.uint64:  # pragma: no cover - compiled
    """Order-preserving map of an int64 key to uint64."""
    return np.uint64(key) ^ SIGN


@njit(cache=True, inline="always")
def _get(blob: np.ndarray, base: int, bitpos: int, w: int) -> np.uint64:  # pragma: no cover - compiled
    """Return the ``w``-bit field at bit ``bitpos`` of the packed words starting at ``blob[base]``."""
    if w == 0:
        return np.uint64(0)
    wi = base + (bitpos >> 6)
    sh = bitpos & 63
    v = blob[wi] >> np.uint64(sh)
    if sh + w > 64:
        v |= blob[wi + 1] << np.uint64(64 - sh)
    if w < 64:
        v &= (np.uint64(1) << np.uint64(w)) - np.uint64(1)
    return v


@njit(cache=True, inline="always")
def _put(blob: np.ndarray, base: int, bitpos: int, w: int, v: np.uint64) -> None:  # pragma: no cover - compiled
    """Write ``v`` as the ``w``-bit field at bit ``bitpos`` (the words start zeroed)."""
    if w == 0:
        return
    wi = base + (bitpos >> 6)
    sh = bitpos & 63
    blob[wi] |= v << np.uint64(sh)
    if sh + w > 64:
        blob[wi + 1] |= v >> np.uint64(64 - sh)


@njit(cache=True, inline="always")
def es_find(blob: np.ndarray, key: int) -> int:  # pragma: no cover - compiled
    """Rank of ``key`` among the entries (its position in sorted order), or -1."""
    n = np.int64(blob[0])
    if n == 0:
        return -1
    nb = np.int64(blob[1])
    u = _u(key)
    lo = 0
    hi = nb
    while lo < hi:  # the last block whose first key is <= u
        mid = (lo + hi) >> 1
        if blob[HDR + mid] <= u:
            lo = mid + 1
        else:
            hi = mid
    b = lo - 1
    if b < 0:
        return -1
    d = u - blob[HDR + b]
    meta = blob[HDR + nb + b]
    w = np.int64(meta & _W_MASK)
    off = np.int64(meta >> np.uint64(_W_BITS))
    if w < 64 and d >> np.uint64(w) != 0:
        return -1
    base = HDR + 2 * nb
    cnt = min(BLOCK, n - b * BLOCK)
    lo = 0
    hi = cnt
    while lo < hi:
        mid = (lo + hi) >> 1
        if _get(blob, base, off + mid * w, w) < d:
            lo = mid + 1
        else:
            hi = mid
    if lo < cnt and _get(blob, base, off + lo * w, w) == d:
        return b * BLOCK + lo
    return -1


@njit(cache=True, inline="always")
def es_hit(counts: np.ndarray, j: int) -> None:  # pragma: no cover - compiled
    """Count a hit of entry ``j`` (saturating)."""
    wi = j >> 5
    sh = np.uint64((j & 31) * 2)
    if (counts[wi] >> sh) & np.uint64(3) < np.uint64(F_MAX_EMPTY):
        counts[wi] += np.uint64(1) << sh


@njit(cache=True, inline="always")
def _count(counts: np.ndarray, j: int) -> int:  # pragma: no cover - compiled
    return np.int64((counts[j >> 5] >> np.uint64((j & 31) * 2)) & np.uint64(3))


@njit(cache=True, inline="always")
def _key_at(blob: np.ndarray, i: int) -> np.uint64:  # pragma: no cover - compiled
    """Return the (unsigned-mapped) key of entry ``i``."""
    nb = np.int64(blob[1])
    b = i // BLOCK
    meta = blob[HDR + nb + b]
    w = np.int64(meta & _W_MASK)
    off = np.int64(meta >> np.uint64(_W_BITS))
    return blob[HDR + b] + _get(blob, HDR + 2 * nb, off + (i - b * BLOCK) * w, w)


@njit(cache=True)
def _bits(x: np.uint64) -> int:  # pragma: no cover - compiled
    """Bits needed to hold ``x``."""
    n = 0
    while x != 0:
        x >>= np.uint64(1)
        n += 1
    return n


@njit(cache=True, inline="always")
def _kth(blob: np.ndarray, n_old: int, add: np.ndarray, n_add: int, t: int) -> np.uint64:  # pragma: no cover
    """Return the ``t``-th smallest key (0-based) of the entries and the first ``n_add`` keys of ``add`` (disjoint)."""
    lo = max(0, t + 1 - n_old)
    hi = min(t + 1, n_add)
    while True:  # j keys from add, i = t + 1 - j from the entries
        j = (lo + hi) // 2
        i = t + 1 - j
        if j < hi and i > 0 and _key_at(blob, i - 1) > add[j]:
            lo = j + 1
        elif j > lo and i < n_old and add[j - 1] > _key_at(blob, i):
            hi = j - 1
        else:
            break
    if j == 0:
        return _key_at(blob, i - 1)
    if i == 0:
        return add[j - 1]
    a = add[j - 1]
    o = _key_at(blob, i - 1)
    return a if a > o else o


@njit(cache=True)
def _merged_bytes(blob: np.ndarray, add: np.ndarray, n_add: int) -> int:  # pragma: no cover - compiled
    """Bytes :func:`_rewrite` would write for all entries and the first ``n_add`` keys of ``add``.

    A block's width is set by its first and last key only, found by rank in the merged
    order (a search over ``add``, random access into the packing): a few operations a
    block instead of a pass over every key.
    """
    n_old = np.int64(blob[0])
    n_new = n_old + n_add
    nb = (n_new + BLOCK - 1) // BLOCK
    total_bits = 0
    for b in range(nb):
        t0 = b * BLOCK
        t1 = min(t0 + BLOCK, n_new) - 1
        if t1 > t0:
            w = _bits(_kth(blob, n_old, add, n_add, t1) - _kth(blob, n_old, add, n_add, t0))
            total_bits += w * (t1 - t0 + 1)
    words = HDR + 2 * nb + (total_bits + 63) // 64
    cwords = (n_new + PER_WORD - 1) // PER_WORD
    return 8 * (words + cwords)


@njit(cache=True)
def _rewrite(
    blob: np.ndarray,
    counts: np.ndarray,
    add: np.ndarray,
    n_add: int,
    keep: np.ndarray,
    reset: bool,
    write: bool,
) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Merge the first ``n_add`` of the sorted, absent, unsigned-mapped keys ``add`` into the kept entries.

    ``keep`` (empty: all) masks the old entries; ``reset`` zeroes the kept counters. With
    ``write`` False only the size is computed: returns (empty, empty, bytes of the result).
    Streams through the old encoding: what it holds beyond the result is one block's widths.
    """
    n_old = np.int64(blob[0])
    all_kept = keep.shape[0] == 0
    n_new = n_add
    for i in range(n_old):
        if all_kept or keep[i]:
            n_new += 1
    nb = (n_new + BLOCK - 1) // BLOCK
    widths = np.zeros(nb, dtype=np.int64)
    firsts = np.zeros(nb, dtype=np.uint64)
    # pass 1: each block's first key and width
    i = 0
    j = 0
    t = 0
    while t < n_new:
        while i < n_old and not (all_kept or keep[i]):
            i += 1
        if i < n_old and (j >= n_add or _key_at(blob, i) < add[j]):
            x = _key_at(blob, i)
            i += 1
        else:
            x = add[j]
            j += 1
        b = t // BLOCK
        if t % BLOCK == 0:
            firsts[b] = x
        else:
            widths[b] = _bits(x - firsts[b])  # keys ascend: the last one sets the width
        t += 1
    total_bits = 0
    for b in range(nb):
        total_bits += widths[b] * min(BLOCK, n_new - b * BLOCK)
    words = HDR + 2 * nb + (total_bits + 63) // 64
    cwords = (n_new + PER_WORD - 1) // PER_WORD
    nbytes = 8 * (words + cwords)
    if not write:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), nbytes
    out = np.zeros(words, dtype=np.uint64)
    oc = np.zeros(cwords, dtype=np.uint64)
    out[0] = np.uint64(n_new)
    out[1] = np.uint64(nb)
    off = 0
    for b in range(nb):
        out[HDR + b] = firsts[b]
        out[HDR + nb + b] = (np.uint64(off) << np.uint64(_W_BITS)) | np.uint64(widths[b])
        off += widths[b] * min(BLOCK, n_new - b * BLOCK)
    base = HDR + 2 * nb
    # pass 2: the packed distances and the counters
    i = 0
    j = 0
    t = 0
    off = 0
    while t < n_new:
        while i < n_old and not (all_kept or keep[i]):
            i += 1
        c = 0
        if i < n_old and (j >= n_add or _key_at(blob, i) < add[j]):
            x = _key_at(blob, i)
            if not reset:
                c = _count(counts, i)
            i += 1
        else:
            x = add[j]
            j += 1
        b = t // BLOCK
        w = widths[b]
        _put(out, base, off, w, x - firsts[b])
        off += w
        if c:
            oc[t >> 5] |= np.uint64(c) << np.uint64((t & 31) * 2)
        t += 1
    return out, oc, nbytes


@njit(cache=True)
def _absent(blob: np.ndarray, cand: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Mask of ``cand`` not among the entries."""
    out = np.empty(cand.shape[0], dtype=np.bool_)
    for i in range(cand.shape[0]):
        out[i] = es_find(blob, cand[i]) < 0
    return out


@njit(cache=True)
def _decode(blob: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n = np.int64(blob[0])
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        out[i] = np.int64(_key_at(blob, i) ^ SIGN)
    return out


@njit(cache=True)
def _counts_of(counts: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(n, dtype=np.uint8)
    for i in range(n):
        out[i] = _count(counts, i)
    return out


@njit(cache=True)
def _evict_keep(
    counts: np.ndarray, n: int, entry_cost: float, tuple_cost: float, sf: float, cycles: int
) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(n, dtype=np.bool_)
    for i in range(n):
        out[i] = not (entry_cost >= sf * _count(counts, i) / cycles * tuple_cost)
    return out


@njit(cache=True)
def _match_mask(blob: np.ndarray, sorted_u: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Mask (in key order) of the entries among the sorted unsigned-mapped ``sorted_u`` (one merge walk)."""
    n = np.int64(blob[0])
    out = np.zeros(n, dtype=np.bool_)
    p = 0
    for i in range(n):
        x = _key_at(blob, i)
        while p < sorted_u.shape[0] and sorted_u[p] < x:
            p += 1
        if p == sorted_u.shape[0]:
            break
        out[i] = sorted_u[p] == x
    return out


_EMPTY_BLOB = np.zeros(HDR, dtype=np.uint64)
_NO_KEYS = np.zeros(0, dtype=np.uint64)
_ALL = np.zeros(0, dtype=np.bool_)


class EmptySet:
    """The values cached without rows: block-packed sorted keys and 2-bit hit counters (see the module doc)."""

    def __init__(self) -> None:
        self.blob: np.ndarray = _EMPTY_BLOB.copy()
        self.counts: np.ndarray = np.zeros(0, dtype=np.uint64)
        self.since = 0  # R-cycle of the last eviction (the counters count from it)

    @property
    def size(self) -> int:
        """Entries."""
        return int(self.blob[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (exact: no spare capacity)."""
        return int(self.blob.nbytes + self.counts.nbytes)

    @property
    def keys(self) -> np.ndarray:
        """The keys, sorted (a decoded copy: 8 B an entry, for batch work outside the step's kernels)."""
        return _decode(self.blob)

    @property
    def hits(self) -> np.ndarray:
        """Hit count (0-3) per entry, in key order (a decoded copy)."""
        return _counts_of(self.counts, self.size)

    def entry_bytes(self) -> float:
        """Bytes one entry costs now (for the cache inequality): measured once a few blocks exist."""
        if self.size < 4 * BLOCK:
            return ENTRY_ESTIMATE
        return (self.nbytes - 8 * HDR) / self.size

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, hit counts), sorted by key (decoded copies)."""
        return self.keys, self.hits

    def contains(self, key: int) -> bool:
        """Whether ``key`` is an entry."""
        return bool(es_find(self.blob, int(key)) >= 0)

    def _new(self, keys: np.ndarray) -> np.ndarray:
        """Sorted unique unsigned-mapped keys of ``keys`` not present."""
        cand = np.asarray(keys, dtype=np.int64)
        if not len(cand):
            return _NO_KEYS
        new = np.unique(cand[_absent(self.blob, cand)])
        return new.view(np.uint64) ^ SIGN

    def fit(self, keys: np.ndarray, max_bytes: int) -> int:
        """How many of ``keys`` (sorted, unique) may be added with the new arrays within ``max_bytes``.

        A batch writes new arrays beside the old ones, so the new ones must fit in what
        the budget has free. Keys already present cost nothing and count as fitting.
        """
        return self._fit(np.asarray(keys, dtype=np.int64), max_bytes)[0]

    def _fit(self, k: np.ndarray, max_bytes: int) -> tuple[int, np.ndarray]:
        """(keys of ``k`` that fit, as :meth:`fit`; the new keys among those, unsigned-mapped and sorted)."""
        if not len(k):
            return 0, _NO_KEYS
        absent = _absent(self.blob, k)
        new_all = k[absent].view(np.uint64) ^ SIGN
        hi = len(new_all)
        if not hi or _merged_bytes(self.blob, new_all, hi) <= max_bytes:
            return len(k), new_all  # the usual case: all fit, one pass instead of a search's log2(new) passes
        lo, hi = 0, hi - 1
        while lo < hi:  # most new keys that fit (the size grows with them)
            mid = (lo + hi + 1) // 2
            if _merged_bytes(self.blob, new_all[:mid], mid) <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        order = np.cumsum(absent)  # new keys among the first i + 1
        return int(np.searchsorted(order, lo + 1)), new_all[:lo]  # keys before the first new key that does not fit

    def add_within(self, keys: np.ndarray, max_bytes: int | None) -> int:
        """Add the longest prefix of ``keys`` (sorted, unique) whose new arrays fit in ``max_bytes``.

        One presence test serves the fit and the merge (:meth:`fit` then :meth:`add` make
        two). ``None``: no limit. Returns how many of ``keys`` fitted (present ones included).
        """
        k = np.asarray(keys, dtype=np.int64)
        if max_bytes is None:
            self.add(k)
            return len(k)
        n, new = self._fit(k, max_bytes)
        if len(new):
            self.blob, self.counts, _ = _rewrite(self.blob, self.counts, new, len(new), _ALL, False, True)
        return n

    def add(self, keys: np.ndarray, rc: int = 0) -> int:
        """Add the values of ``keys`` not present (hit count 0); returns how many were new."""
        new = self._new(keys)
        if len(new):
            self.blob, self.counts, _ = _rewrite(self.blob, self.counts, new, len(new), _ALL, False, True)
        return len(new)

    def _keep(self, keep: np.ndarray, reset: bool = False) -> int:
        before = self.size
        self.blob, self.counts, _ = _rewrite(self.blob, self.counts, _NO_KEYS, 0, keep, reset, True)
        return before - self.size

    def drop(self, keys: np.ndarray) -> int:
        """Remove ``keys`` where present; returns how many were."""
        if not len(keys) or not self.size:
            return 0
        mask = _match_mask(self.blob, np.unique(np.asarray(keys, dtype=np.int64)).view(np.uint64) ^ SIGN)
        return self.drop_mask(mask)

    def drop_mask(self, drop: np.ndarray) -> int:
        """Remove the entries where ``drop`` (in key order) is set; returns how many."""
        if not len(drop) or not drop.any():
            return 0
        return self._keep(~np.asarray(drop, dtype=bool))

    def evict(self, entry_cost: float, tuple_cost: float, switch_factor: float, rc: int) -> int:
        """Evict entries the cache inequality no longer favours (lines 42-51); reset the others' counts."""
        cycles = max(1, rc - self.since)
        self.since = rc
        if not self.size:
            return 0
        keep = _evict_keep(self.counts, self.size, entry_cost, tuple_cost, switch_factor, cycles)
        return self._keep(keep, reset=True)

    def load(self, keys: np.ndarray, hits: np.ndarray, since: int = 0) -> None:
        """Replace the content by ``keys`` with their hit counts (any order; counts above 3 saturate).

        Older checkpoints saved (f_count, since) byte pairs per key: their f_count is taken.
        """
        k = np.asarray(keys, dtype=np.int64)
        h = np.asarray(hits)
        if h.ndim == 2:
            h = h[:, 0]
        order = np.argsort(k, kind="stable")
        u = k[order].view(np.uint64) ^ SIGN
        self.blob, counts, _ = _rewrite(_EMPTY_BLOB, np.zeros(0, np.uint64), u, len(u), _ALL, False, True)
        c = np.minimum(h[order].astype(np.uint64), F_MAX_EMPTY) if len(k) else np.zeros(0, np.uint64)
        for s in range(PER_WORD):  # pack 32 counters a word
            part = c[s::PER_WORD]
            counts[: len(part)] |= part << np.uint64(2 * s)
        self.counts = counts
        self.since = since

    def load_packed(self, blob: np.ndarray, counts: np.ndarray, since: int) -> None:
        """Restore the arrays exactly as :attr:`blob` and :attr:`counts` were saved."""
        self.blob = np.asarray(blob, dtype=np.uint64).copy()
        self.counts = np.asarray(counts, dtype=np.uint64).copy()
        self.since = since
