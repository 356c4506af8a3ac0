"""Value statistics for cache migration: s_count, the switching FSM state, candidates only.

Algorithm 1 counts, in its incrementing R-cycle, the master rows (``s_count``) of every
value in H_S, and evaluates the cache inequality in the switching R-cycle. Only a value
with at least two tuples in H_S can satisfy ``m * v_R < n * v_S`` once the entries'
own bytes are counted (a value with no master rows is found at expiry instead, see
:func:`ssbj.core.hs.hs_expire`), so only such values are tracked: a bounded table of
*candidates*, whose bytes count in the budget; while it is full no candidate is added.
A candidate not seen in H_S for a whole R-cycle is dropped.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ssbj.core.hashing import MAX_LOAD, KeyedTable, capacity_for, kset_delete, kset_find
from ssbj.core.hs import ST_DECIDED, ST_FIELDS, ST_LAST, ST_ROWS, ST_SINCE, ST_SWITCH

# mypy: disable-error-code="return-value,arg-type,no-any-return"

__all__ = ["ST_DECIDED", "ST_LAST", "ST_ROWS", "ST_SINCE", "ST_SWITCH", "ValueStats"]


@njit(cache=True)
def _gc(keys: np.ndarray, used: np.ndarray, pay: np.ndarray, before_rc: int) -> int:  # pragma: no cover
    n = 0
    i = 0
    while i < keys.shape[0]:
        if used[i] and pay[i, ST_SWITCH] == 0 and pay[i, ST_LAST] < before_rc:
            kset_delete(keys, used, pay, i)
            n += 1
            continue  # another entry may have moved into slot i
        i += 1
    return n


@njit(cache=True)
def _delete_keys(keys: np.ndarray, used: np.ndarray, pay: np.ndarray, drop: np.ndarray) -> int:  # pragma: no cover
    n = 0
    for t in range(drop.shape[0]):
        i = kset_find(keys, used, drop[t])
        if i >= 0:
            kset_delete(keys, used, pay, i)
            n += 1
    return n


class ValueStats:
    """The candidates' s_count, tracking start, last sighting and switching state."""

    def __init__(self, max_values: int = 1 << 16) -> None:
        self.table = KeyedTable(ST_FIELDS, np.int32, capacity_for(64))
        self.meta = np.array([0, 0], dtype=np.int64)  # entries, most entries the kernels may add
        self.max_values = max_values
        self._set_limit()

    def _set_limit(self) -> None:
        self.meta[1] = min(self.max_values, int(self.table.cap * MAX_LOAD))

    @property
    def size(self) -> int:
        """Candidates tracked."""
        return int(self.meta[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the table."""
        return self.table.nbytes + int(self.meta.nbytes)

    def grow(self, max_bytes: int) -> None:
        """Let the table grow (up to ``max_bytes``) when it is nearly full."""
        t = self.table
        t.size = self.size
        if self.size < 0.8 * self.meta[1] or self.meta[1] >= self.max_values:
            return
        want = capacity_for(2 * self.size + 64)
        per = KeyedTable.bytes_for(1, ST_FIELDS, 4)
        want = min(want, max(t.cap, max_bytes // per))
        if want > t.cap:
            t.resize(want)
            self._set_limit()

    def limit_bytes(self, max_bytes: int) -> None:
        """Shrink the table (dropping no entry) toward ``max_bytes``."""
        t = self.table
        t.size = self.size
        per = KeyedTable.bytes_for(1, ST_FIELDS, 4)
        cap = max(capacity_for(self.size, MAX_LOAD), max_bytes // per, 16)
        if cap < t.cap:
            t.resize(cap)
        self._set_limit()

    def gc(self, rc: int) -> None:
        """Drop candidates not seen in H_S during the previous R-cycle (and not switching)."""
        t = self.table
        self.meta[0] -= _gc(t.keys, t.used, t.payload, rc - 1)

    def reset_s_count(self) -> None:
        """RESET all s_count to 0 (start of the phase-out R-cycle)."""
        self.table.payload[:, ST_ROWS] = 0

    def prune_decided(self, rc: int) -> int:
        """At phase-out (``rc``): stop tracking candidates that are settled for this round.

        A candidate tracked through the whole incrementing R-cycle (rc - 2) that met no
        master row has none (the empty entries take such values at expiry); one decided in
        the switching R-cycle (rc - 1) against the cache failed the inequality. Both would
        hold their slot for nothing while a bounded table turns new candidates away; they
        come back when they again have two tuples in H_S.
        """
        t = self.table
        pay = t.payload
        settled = (pay[:, ST_SWITCH] == 0) & (
            (pay[:, ST_DECIDED] == rc - 1) | ((pay[:, ST_SINCE] <= 2 * (rc - 2)) & (pay[:, ST_ROWS] == 0))
        )
        keys = t.keys[t.used & settled]
        self.delete(keys)
        return len(keys)

    def switching(self) -> np.ndarray:
        """Values whose rows are in s_B."""
        t = self.table
        out: np.ndarray = t.keys[t.used & (t.payload[:, ST_SWITCH] == 1)]
        return out

    def delete(self, keys: np.ndarray) -> None:
        """Stop tracking ``keys``."""
        if len(keys):
            t = self.table
            self.meta[0] -= _delete_keys(t.keys, t.used, t.payload, np.asarray(keys, dtype=np.int64))

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, payload) of the candidates."""
        return self.table.entries()

    def load(self, keys: np.ndarray, payload: np.ndarray, cap: int, max_values: int) -> None:
        """Restore from :meth:`entries`."""
        self.max_values = max_values
        self.table.load(keys, payload.reshape(-1, ST_FIELDS), cap)
        self.meta[0] = len(keys)
        self._set_limit()
