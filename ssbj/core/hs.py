"""H_S, the MESHJOIN hash table of waiting stream tuples, and its queue Q.

Per tuple H_S holds its row (:class:`~ssbj.core.ringstore.RowRing`), its encoded join
value (``ring_key``, 8 bytes, 4 for exact keys of at most 32 bits, which keep their value
in 4; for exact key types this *is* the key column, which the ring then does not store
again) and a bit-packed ``link`` of ``log2(ring slots) + 2`` bits
(17 bits in a ring of 17,000 slots): the distance to the previous tuple of the same value
(a chain, newest to oldest; 0 for a value's oldest tuple; it is below the ring's size)
and two flags, *matched* (it met a master row) and *removed* (it left H_S early, when its
value moved to the cache) (:mod:`ssbj.core.hslinks`). Per join value H_S holds one
4-byte index word pointing at the value's newest tuple (:mod:`ssbj.core.hsindex`). How
many tuples a value has (``n`` of the cache inequality) is the length of its chain,
counted when it is needed.

The queue Q (:mod:`ssbj.core.queue`) holds one record per chunk.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ssbj.core.hashing import TARGET_LOAD, capacity_for, home, kset_find, mix
from ssbj.core.hsindex import (
    EMPTY,
    INDEX_LOAD,
    INDEX_SLOT,
    SMALL,
    enc,
    hs_heads,
    ix_delete,
    ix_find,
    ix_rebuild,
)
from ssbj.core.hslinks import (
    MATCHED,
    REMOVED,
    lk_flag,
    lk_flags,
    lk_get,
    lk_put,
    lk_read,
    lk_write,
    new_links,
)
from ssbj.core.jit import njit
from ssbj.core.keys import decode_keys
from ssbj.core.queue import Queue
from ssbj.core.ringstore import RowRing

# mypy: disable-error-code="return-value,arg-type,no-any-return"

# Fields of the value-statistics payload (see ssbj.core.stats).
ST_ROWS = 0  # s_count: master rows met in the incrementing R-cycle
ST_SINCE = 1  # when tracking began: 2 x R-cycle, + 1 unless at the R-cycle's first step
ST_LAST = 2  # last R-cycle the value entered H_S
ST_DECIDED = 3  # R-cycle of the switching decision
ST_SWITCH = 4  # 1 while the value's rows are collected in s_B, DEFERRED when they did not fit
DEFERRED = 2  # ST_SWITCH of a value the inequality took whose rows s_B had no room for (ssbj.core.switchroom)
ST_FIELDS = 5

# R-cycle kinds of Algorithm 1's switching FSM (ssbj.core.operator.SemiStreamJoin.fsm_code)
INCREMENTING = 1
SWITCHING = 2


def since_mark(rc: int, at_first_step: bool) -> int:
    """ST_SINCE of a candidate admitted in R-cycle ``rc``: 2·rc at its first step, 2·rc + 1 later."""
    return 2 * rc + (0 if at_first_step else 1)


def tracked_through(rc: int) -> int:
    """Largest ST_SINCE of a candidate that met every partition of R-cycle ``rc`` (admitted by its first step)."""
    return since_mark(rc, True)


def eligible_before(rc: int, unique: bool) -> int:
    """Largest ST_SINCE of a candidate that decides in switching R-cycle ``rc``.

    Tracked since the first step of the last R-cycle or before; with a unique key m = 1 is
    known, so any candidate decides at its row.
    """
    return 1 << 40 if unique else tracked_through(rc - 1)


@njit(cache=True, nogil=True)
def hs_insert(
    hix: np.ndarray,
    ring_key: np.ndarray,
    link: np.ndarray,
    cap: int,
    lo: int,
    hi0: int,
    keys: np.ndarray,
) -> int:  # pragma: no cover
    """ADD tuples as slots ``hi0, hi0 + 1, ...`` to H_S; returns the number of new values.

    No statistics here: a value becomes a candidate when the disk phase meets it with a
    long enough chain (:func:`ssbj.core.diskphase.disk_probe`), which walks the chain anyway.
    """
    created = 0
    for t in range(keys.shape[0]):
        s = hi0 + t
        key = keys[t]
        pos = s % cap
        ring_key[pos] = key
        h = mix(key)
        i, g = ix_find(hix, ring_key, cap, s + 1, key, h)
        if g >= lo:
            lk_put(link, pos, s - g)
        else:
            lk_put(link, pos, 0)
            created += 1
        hix[i] = enc(s, h, cap, (i - home(h, hix.shape[0])) % hix.shape[0])
    return created


@njit(cache=True, nogil=True)
def hs_expire(
    hix: np.ndarray,
    ring_key: np.ndarray,
    link: np.ndarray,
    cap: int,
    hi: int,
    lo: int,
    upto: int,
    find_empties: bool,
    empty_cost: float,
    tuple_cost: float,
    switch_factor: float,
    st_keys: np.ndarray,
    st_used: np.ndarray,
    st_pay: np.ndarray,
) -> tuple[np.ndarray, int, np.ndarray, int]:  # pragma: no cover
    """DELETE slots ``[lo, upto)``; returns (unmatched slots, live slots, empty values, values gone).

    A tuple that leaves unmatched has met every partition of R: its value has no master
    rows. With ``find_empties`` such a value becomes an *empty* cache entry when the
    cache inequality says so, using the tuples of the value that arrived after this one
    (an unbiased count of its arrivals in one R-cycle) for ``n``.
    """
    um = np.empty(upto - lo, dtype=np.int64)
    emp = np.empty(upto - lo, dtype=np.int64)
    nu = 0
    ne = 0
    live = 0
    gone = 0
    for s in range(lo, upto):
        pos = s % cap
        f = lk_flags(link, pos)
        if f & REMOVED:
            continue
        live += 1
        key = ring_key[pos]
        matched = (f & MATCHED) != 0
        if not matched:
            um[nu] = s
            nu += 1
        i, g = ix_find(hix, ring_key, cap, hi, key, mix(key))
        if g == s:
            ix_delete(hix, ring_key, cap, hi, i)
            gone += 1
        elif find_empties and not matched and g > s:
            # count the younger tuples only until the inequality holds: a full count per
            # expiring tuple is quadratic in a hot value's chain (seconds a step when all of R fits)
            c = 0
            t = g
            while t > s:
                c += 1
                if empty_cost < switch_factor * c * tuple_cost:
                    break
                d = lk_get(link, t % cap)
                if d == 0:
                    break
                t -= d
            if empty_cost < switch_factor * c * tuple_cost:
                j = kset_find(st_keys, st_used, key)
                if j < 0 or st_pay[j, ST_SWITCH] == 0:
                    emp[ne] = key
                    ne += 1
    return um[:nu], live, emp[:ne], gone


@njit(cache=True)
def hs_remove(
    hix: np.ndarray,
    ring_key: np.ndarray,
    link: np.ndarray,
    cap: int,
    lo: int,
    hi: int,
    keys: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Remove every tuple of ``keys`` from H_S; returns (slots, key position) of the removed."""  # pragma: no cover
    total = 0
    heads = np.empty(keys.shape[0], dtype=np.int64)
    for t in range(keys.shape[0]):
        i, g = ix_find(hix, ring_key, cap, hi, keys[t], mix(keys[t]))
        heads[t] = g
        s = g
        while s >= lo:
            total += 1
            d = lk_get(link, s % cap)
            if d == 0:
                break
            s -= d
    out = np.empty(total, dtype=np.int64)
    which = np.empty(total, dtype=np.int64)
    m = 0
    for t in range(keys.shape[0]):
        s = heads[t]
        if s < lo:
            continue
        while s >= lo:
            out[m] = s
            which[m] = t
            m += 1
            p = s % cap
            lk_flag(link, p, REMOVED)
            d = lk_get(link, p)
            if d == 0:
                break
            s -= d
        i, g = ix_find(hix, ring_key, cap, hi, keys[t], mix(keys[t]))
        ix_delete(hix, ring_key, cap, hi, i)
    return out[:m], which[:m]


@njit(cache=True)
def chain_length(
    hix: np.ndarray, ring_key: np.ndarray, link: np.ndarray, cap: int, lo: int, hi: int, key: int
) -> int:  # pragma: no cover
    """Live tuples of ``key`` in H_S."""
    _i, s = ix_find(hix, ring_key, cap, hi, key, mix(key))
    n = 0
    while s >= lo:
        n += 1
        d = lk_get(link, s % cap)
        if d == 0:
            break
        s -= d
    return n


def ring_key_bytes(t: pa.DataType, store_key: bool) -> int:
    """Bytes of a tuple's encoded key in H_S: 4 for a key kept only there (exact) of 8-32 bits, but uint32; else 8."""
    if store_key or pa.types.is_uint32(t) or pa.types.is_boolean(t):
        return 8
    return 4 if 8 <= t.bit_width <= 32 else 8


class StreamTable:
    """H_S: the ring of waiting tuples with its value index and chain links (see module doc)."""

    def __init__(self, schema: pa.Schema, key: str, family: str, store_key: bool, cap: int = 64) -> None:
        self.schema = schema
        self.key = key
        self.family = family
        self.store_key = store_key
        names = [n for n in schema.names if store_key or n != key]
        self.rows = RowRing(schema, names, cap)
        self.ring_key = np.zeros(
            cap, dtype=np.int32 if ring_key_bytes(schema.field(key).type, store_key) == 4 else np.int64
        )
        self.link = new_links(cap)
        self.hix = np.full(capacity_for(16), EMPTY, dtype=np.uint32)
        self.values = 0  # entries in the index (join values with live tuples)
        self.queue = Queue()
        self.live = 0  # live tuples (not removed, not expired)
        self.row_bytes = 0  # raw Arrow bytes of the live tuples' rows

    # ------------------------------------------------------------ shape
    @property
    def cap(self) -> int:
        """Slots of the ring."""
        return self.rows.cap

    @property
    def lo(self) -> int:
        """Oldest live slot."""
        return self.rows.lo

    @property
    def hi(self) -> int:
        """Next slot to be used."""
        return self.rows.hi

    @property
    def span(self) -> int:
        """Slots between the oldest and the next (removed tuples included)."""
        return self.rows.hi - self.rows.lo

    def nbytes(self) -> int:
        """Bytes held: rows, ring keys, links and the index."""
        return int(self.rows.nbytes() + self.ring_key.nbytes + self.link.nbytes + self.hix.nbytes)

    @property
    def link_bytes(self) -> float:
        """Bytes of one tuple's link (bit-packed: a fraction)."""
        return int(self.link[-1]) / 8

    def slot_bytes(self) -> float:
        """Bytes per slot of ring capacity (without string data and the value index)."""
        return self.rows.slot_bytes() + self.ring_key.itemsize + self.link_bytes

    @staticmethod
    def index_bytes_per_value() -> float:
        """Bytes one join value costs in the index at the target load."""
        return INDEX_SLOT / TARGET_LOAD

    def set_capacity(self, cap: int, var_extra: int = 0) -> None:
        """Re-lay the live slots out at ``cap`` slots (the index is kept: it stores slots)."""
        cap = max(cap, self.span, 1)
        if cap == self.cap and var_extra == 0:
            return
        # the index words' layout depends on the ring's size class (see the module doc)
        heads = hs_heads(self.hix, self.hi, self.cap) if (cap < SMALL) != (self.cap < SMALL) else None
        lo, hi = self.lo, self.hi
        live = np.arange(lo, hi, dtype=np.int64)
        old_pos, new_pos = live % self.cap, live % cap
        rk = np.zeros(cap, dtype=self.ring_key.dtype)
        rk[new_pos] = self.ring_key[old_pos]
        ln = new_links(cap)  # the bits per link follow the ring's size
        d, f = lk_read(self.link, old_pos)
        lk_write(ln, new_pos, d, f)
        self.ring_key, self.link = rk, ln
        self.rows.set_capacity(cap, var_extra)
        if heads is not None:
            self.hix[:] = EMPTY
            ix_rebuild(self.hix, heads, self.ring_key, cap)

    def reserve_values(self, n_new: int, max_cap: int = 1 << 62) -> None:
        """Room in the index for ``n_new`` more values below the maximum load (at most ``max_cap`` slots)."""
        need = self.values + n_new
        if need > self.hix.shape[0] * INDEX_LOAD:
            cap = min(capacity_for(need), max_cap)
            self.rebuild_index(max(cap, need + 1))

    def fit_index(self, expected_values: int) -> None:
        """Shrink the index when it is far larger than ``expected_values`` need."""
        want = capacity_for(max(expected_values, self.values))
        if self.hix.shape[0] > 2 * want:
            self.rebuild_index(want)

    def rebuild_index(self, cap: int) -> None:
        """Rebuild the index at ``cap`` slots."""
        heads = hs_heads(self.hix, self.hi, self.cap)
        cap = max(cap, capacity_for(len(heads), INDEX_LOAD))
        self.hix = np.full(cap, EMPTY, dtype=np.uint32)
        ix_rebuild(self.hix, heads, self.ring_key, self.cap)

    # ------------------------------------------------------------ rows
    def take(self, slots: np.ndarray) -> pa.Table:
        """Stream rows of live ``slots``, in the order given."""
        slots = np.asarray(slots, dtype=np.int64)
        cols = self.rows.take(slots)
        if not self.store_key:
            cols[self.key] = decode_keys(self.ring_key[slots % self.cap], self.schema.field(self.key).type, self.family)
        return pa.Table.from_arrays([cols[n] for n in self.schema.names], schema=self.schema)

    def keys_of(self, slots: np.ndarray) -> np.ndarray:
        """Return the encoded join values of ``slots``."""
        out: np.ndarray = self.ring_key[np.asarray(slots, dtype=np.int64) % self.cap]
        return out.astype(np.int64, copy=False)

    def _flag_bits(self, slots: np.ndarray, f: int) -> np.ndarray:
        b = int(self.link[-1])
        return (np.asarray(slots, dtype=np.int64) % self.cap) * b + b - 2 + (1 if f == MATCHED else 0)

    def _set_flag(self, slots: np.ndarray, f: int) -> None:
        if len(slots):
            bit = self._flag_bits(slots, f)
            np.bitwise_or.at(self.link, bit >> 3, (1 << (bit & 7)).astype(np.uint8))  # slots share bytes

    def _get_flag(self, slots: np.ndarray, f: int) -> np.ndarray:
        bit = self._flag_bits(slots, f)
        out: np.ndarray = ((self.link[bit >> 3] >> (bit & 7).astype(np.uint8)) & 1) != 0
        return out

    def mark_matched(self, slots: np.ndarray) -> None:
        """Flag ``slots`` as having met a master row."""
        self._set_flag(slots, MATCHED)

    def mark_removed(self, slots: np.ndarray) -> None:
        """Flag ``slots`` as removed (their value moved to the cache)."""
        self._set_flag(slots, REMOVED)

    def matched(self, slots: np.ndarray) -> np.ndarray:
        """Mask of ``slots`` flagged matched."""
        return self._get_flag(slots, MATCHED)

    def removed(self, slots: np.ndarray) -> np.ndarray:
        """Mask of ``slots`` flagged removed."""
        return self._get_flag(slots, REMOVED)

    def deltas(self, slots: np.ndarray) -> np.ndarray:
        """Chain distances of ``slots`` (0: the value's oldest tuple), without the flags."""
        d, _ = lk_read(self.link, np.asarray(slots, dtype=np.int64) % self.cap)
        return d

    def set_deltas(self, slots: np.ndarray, deltas: np.ndarray) -> None:
        """Set the chain distances of ``slots`` (flags cleared): a restore writes saved chains back."""
        pos = np.asarray(slots, dtype=np.int64) % self.cap
        lk_write(self.link, pos, np.asarray(deltas, dtype=np.int64), np.zeros(len(pos), np.uint8))

    def chain_length(self, key: int) -> int:
        """Live tuples of (encoded) value ``key``."""
        return int(chain_length(self.hix, self.ring_key, self.link, self.cap, self.lo, self.hi, key))
