"""Hash helpers shared by the operator's open-addressing tables (numba, inlined).

Every table uses linear probing over a capacity that need not be a power of two: the home
slot of a key is ``fastrange(mix(key), cap)``, so a table can be sized to its load
target exactly instead of the next power of two. Deletion shifts later entries back
(no tombstones), so a lookup never walks dead slots.
"""

from __future__ import annotations

import numpy as np

from ssbj.core.jit import njit

# mypy cannot type numba-compiled bodies; see kernels' note
# mypy: disable-error-code="return-value,arg-type,no-any-return"

MAX_LOAD = 0.75  # tables grow past this load factor
TARGET_LOAD = 0.6  # and are rebuilt at this one


@njit(cache=True, inline="always")
def mix(x: int) -> np.uint64:  # pragma: no cover - compiled
    """Splitmix64 finaliser: spreads sequential keys over the table."""
    z = np.uint64(x)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def home(h: np.uint64, cap: int) -> int:  # pragma: no cover - compiled
    """Slot of hash ``h`` in a table of ``cap`` (< 2**32) slots, without a division."""
    return np.int64(((h >> np.uint64(32)) * np.uint64(cap)) >> np.uint64(32))


@njit(cache=True, inline="always")
def between(lo: int, x: int, hi: int) -> bool:  # pragma: no cover - compiled
    """Whether ``x`` lies in the cyclic interval ``(lo, hi]``."""
    if lo <= hi:
        return lo < x <= hi
    return x > lo or x <= hi


def capacity_for(n: int, load: float = TARGET_LOAD, floor: int = 8) -> int:
    """Slots for ``n`` entries at ``load``."""
    return max(floor, int(n / load) + 1)


# ---------------------------------------------------------------- keyed int64 sets
@njit(cache=True)
def kset_find(keys: np.ndarray, used: np.ndarray, key: int) -> int:  # pragma: no cover
    """Slot of ``key`` in a keyed table (``used[i]`` marks occupied slots), or -1."""
    cap = keys.shape[0]
    i = home(mix(key), cap)
    while used[i]:
        if keys[i] == key:
            return i
        i += 1
        if i == cap:
            i = 0
    return -1


@njit(cache=True)
def kset_slot(keys: np.ndarray, used: np.ndarray, key: int) -> int:  # pragma: no cover
    """Slot of ``key``, or the free slot where it would go, encoded as ``-(slot + 1)``."""
    cap = keys.shape[0]
    i = home(mix(key), cap)
    while used[i]:
        if keys[i] == key:
            return i
        i += 1
        if i == cap:
            i = 0
    return -(i + 1)


@njit(cache=True)
def kset_delete(keys: np.ndarray, used: np.ndarray, payload: np.ndarray, i: int) -> None:  # pragma: no cover
    """Remove slot ``i`` by shifting later entries of its cluster back (no tombstones)."""
    cap = keys.shape[0]
    hole = i
    j = i
    while True:
        j += 1
        if j == cap:
            j = 0
        if not used[j]:
            break
        h = home(mix(keys[j]), cap)
        if between(hole, h, j):
            continue  # j's home lies after the hole: it must stay
        keys[hole] = keys[j]
        for f in range(payload.shape[1]):
            payload[hole, f] = payload[j, f]
        hole = j
    used[hole] = False
    for f in range(payload.shape[1]):
        payload[hole, f] = 0


@njit(cache=True)
def kset_delete_keys(
    keys: np.ndarray, used: np.ndarray, payload: np.ndarray, gone: np.ndarray
) -> int:  # pragma: no cover
    """Remove every key of ``gone`` present; return how many were."""
    n = 0
    for t in range(gone.shape[0]):
        i = kset_find(keys, used, gone[t])
        if i >= 0:
            kset_delete(keys, used, payload, i)
            n += 1
    return n


@njit(cache=True)
def kset_rehash(
    keys: np.ndarray, used: np.ndarray, payload: np.ndarray, nkeys: np.ndarray, nused: np.ndarray, npay: np.ndarray
) -> None:  # pragma: no cover
    """Insert every entry of one table into another (empty) one."""
    cap = nkeys.shape[0]
    for i in range(keys.shape[0]):
        if not used[i]:
            continue
        j = home(mix(keys[i]), cap)
        while nused[j]:
            j += 1
            if j == cap:
                j = 0
        nused[j] = True
        nkeys[j] = keys[i]
        for f in range(payload.shape[1]):
            npay[j, f] = payload[i, f]


class KeyedTable:
    """An int64-keyed open-addressing table with a fixed-width integer payload per entry.

    The kernels work on ``keys``, ``used`` and ``payload`` directly; this class sizes them
    and reports their real bytes.
    """

    def __init__(self, nfields: int, dtype: type, cap: int = 8) -> None:
        self.nfields = nfields
        self.dtype = dtype
        self.keys = np.zeros(cap, dtype=np.int64)
        self.used = np.zeros(cap, dtype=np.bool_)
        self.payload: np.ndarray = np.zeros((cap, nfields), dtype=dtype)
        self.size = 0

    @property
    def cap(self) -> int:
        """Slots."""
        return int(self.keys.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays."""
        return int(self.keys.nbytes + self.used.nbytes + self.payload.nbytes)

    @staticmethod
    def bytes_for(cap: int, nfields: int, itemsize: int) -> int:
        """Bytes of a table of ``cap`` slots."""
        return cap * (8 + 1 + nfields * itemsize)

    def entry_bytes(self) -> float:
        """Bytes one entry costs at the target load (for the cache inequality)."""
        return (8 + 1 + self.nfields * np.dtype(self.dtype).itemsize) / TARGET_LOAD

    def count(self) -> int:
        """Entries (recounted from ``used``)."""
        self.size = int(np.count_nonzero(self.used))
        return self.size

    def resize(self, cap: int) -> None:
        """Rebuild at ``cap`` slots (>= entries / MAX_LOAD)."""
        cap = max(cap, capacity_for(self.size, MAX_LOAD), 8)
        keys = np.zeros(cap, dtype=np.int64)
        used = np.zeros(cap, dtype=np.bool_)
        payload: np.ndarray = np.zeros((cap, self.nfields), dtype=self.dtype)
        kset_rehash(self.keys, self.used, self.payload, keys, used, payload)
        self.keys, self.used, self.payload = keys, used, payload

    def reserve(self, n_more: int) -> None:
        """Room for ``n_more`` inserts below the maximum load."""
        if self.size + n_more > self.cap * MAX_LOAD:
            self.resize(capacity_for(self.size + n_more))

    def fit(self) -> None:
        """Shrink to the target load when far below it."""
        if self.cap > 8 and self.size < self.cap * TARGET_LOAD / 2:
            self.resize(capacity_for(self.size))

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, payload rows) of the occupied slots."""
        return self.keys[self.used], self.payload[self.used]

    def load(self, keys: np.ndarray, payload: np.ndarray, cap: int | None = None) -> None:
        """Replace the content by ``keys`` with ``payload`` rows."""
        n = len(keys)
        cap = cap if cap is not None else capacity_for(n)
        src_used = np.ones(n, dtype=np.bool_)
        self.keys = np.zeros(cap, dtype=np.int64)
        self.used = np.zeros(cap, dtype=np.bool_)
        self.payload = np.zeros((cap, self.nfields), dtype=self.dtype)
        kset_rehash(
            np.asarray(keys, dtype=np.int64),
            src_used,
            np.asarray(payload, dtype=self.dtype).reshape(n, self.nfields),
            self.keys,
            self.used,
            self.payload,
        )
        self.size = n
