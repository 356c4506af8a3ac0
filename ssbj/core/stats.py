"""Value statistics for cache migration: s_count, the switching FSM state, candidates only.

Algorithm 1 counts, in its incrementing R-cycle, the master rows (``s_count``) of every
value in H_S, and evaluates the cache inequality in the switching R-cycle. Only a value
with several tuples in H_S can satisfy ``m * v_R < n * v_S`` once the entries' own bytes
are counted (a value with no master rows is found at expiry instead, see
:func:`ssbj.core.hs.hs_expire`), so only values whose chain in H_S reaches
:meth:`ValueStats.set_admission` tuples are tracked: a bounded table of *candidates*,
whose bytes count in the budget; while it is full no candidate is added. A candidate
not seen in H_S for a whole R-cycle is dropped. The table is sized at each R-cycle
start for the most candidates the last R-cycle held (with a margin), within its budget
share, and grows on demand while the budget has room.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ssbj.core.hashing import MAX_LOAD, TARGET_LOAD, KeyedTable, capacity_for, kset_delete, kset_delete_keys
from ssbj.core.hs import (
    DEFERRED,
    ST_DECIDED,
    ST_FIELDS,
    ST_LAST,
    ST_ROWS,
    ST_SINCE,
    ST_SWITCH,
    since_mark,
    tracked_through,
)
from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

ADMIT_FACTOR = 2.0  # a candidate needs this many times the break-even tuples of a one-row value
PEAK_MARGIN = 1.25  # the table is sized for this many times the last R-cycle's most candidates

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


def candidate_bytes() -> float:
    """Bytes one candidate costs in the table at the target load."""
    return KeyedTable.bytes_for(1, ST_FIELDS, 4) / TARGET_LOAD


class ValueStats:
    """The candidates' s_count, tracking start, last sighting and switching state."""

    def __init__(self, max_values: int = 1 << 16, cap: int | None = None) -> None:
        self.table = KeyedTable(ST_FIELDS, np.int32, capacity_for(64) if cap is None else cap)
        # entries, most entries the kernels may add, tuples in H_S that make a value a candidate
        self.meta = np.array([0, 0, 2], dtype=np.int64)
        self.max_values = max_values
        self.peak = 0  # most candidates held since the last :meth:`limit_bytes`
        self._set_limit()

    def set_admission(
        self,
        tuple_cost: float,
        row_cost: float,
        entry_cost: float,
        switch_factor: float,
        count_overheads: bool = True,
        resident: bool = False,
    ) -> int:
        """Set (and return) the tuples a value needs in H_S to become a candidate.

        Break-even for the cheapest value with rows (one master row): its tuples in H_S
        must outweigh its row and index entry in H_R plus its own candidate entry. A
        value seen at its chain's longest has fewer tuples on average (most values that
        reach two tuples in H_S by chance never pay), so admission asks for
        ``ADMIT_FACTOR`` times that; at least two (Algorithm 1's own criterion). On the
        issue's data (skew 1) this admits values with 6 tuples or more; the table then
        holds the few values that can switch instead of filling with the first arrivals.
        Without ``count_overheads`` (the paper's inequality on row bytes alone) the
        candidate's bytes are not counted either: a value with one row needs two tuples.
        With ``resident`` (the budget holds all of R, :func:`ssbj.core.switching.holds_all_of_r`)
        the candidates' bytes compete with nothing that would pay more: two tuples, as in
        Algorithm 1.
        """
        if resident:
            self.meta[2] = 2
            return 2
        own = candidate_bytes() if count_overheads else 0.0
        need = (switch_factor * (row_cost + entry_cost) + own) / max(tuple_cost, 1.0)
        n = max(2, int(np.ceil(ADMIT_FACTOR * need)))
        self.meta[2] = n
        return n

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

    def grow(self, max_bytes: int | Callable[[], int]) -> None:
        """Let the table grow (up to ``max_bytes``, or what it returns: asked only then) when it is nearly full."""
        t = self.table
        t.size = self.size
        self.peak = max(self.peak, self.size)
        if self.size < 0.8 * self.meta[1] or self.meta[1] >= self.max_values:
            return
        if callable(max_bytes):  # (the budget's room sums every structure's bytes: not every step)
            max_bytes = max_bytes()
        want = capacity_for(2 * self.size + 64)
        per = KeyedTable.bytes_for(1, ST_FIELDS, 4)
        want = min(want, max(t.cap, max_bytes // per))
        if want > t.cap:
            t.resize(want)
            self._set_limit()

    def limit_bytes(self, max_bytes: int) -> None:
        """Size the table (dropping no entry) for the last R-cycle's peak, with margin, within ``max_bytes``.

        Called at an R-cycle start; the table grows again on demand (:meth:`grow`) while
        the budget has room. A resize happens only when the size is off by more than 25% (or over ``max_bytes``).
        """
        t = self.table
        t.size = self.size
        self.peak = max(self.peak, self.size)
        per = KeyedTable.bytes_for(1, ST_FIELDS, 4)
        want = capacity_for(int(PEAK_MARGIN * self.peak) + 64, MAX_LOAD)
        cap = max(capacity_for(self.size, MAX_LOAD), min(want, max_bytes // per), 16)
        if t.cap * per > max_bytes or not 0.8 * t.cap <= cap <= 1.25 * t.cap:
            t.resize(cap)
        self.peak = self.size
        self._set_limit()

    def gc(self, rc: int) -> None:
        """Drop candidates not seen in H_S during the previous R-cycle (and not switching)."""
        t = self.table
        self.meta[0] -= _gc(t.keys, t.used, t.payload, rc - 1)

    def reset_s_count(self, admitted_after: int | None = None) -> None:
        """RESET s_count to 0: all (phase-out R-cycle start), or of the candidates admitted after ``admitted_after``.

        The pipelined FSM (``JoinSpec.switching``) keeps the complete counts of the candidates
        tracked through the whole last R-cycle (``ST_SINCE <= admitted_after``, decided in
        this one) and restarts the partial counts of those admitted during it.
        """
        pay = self.table.payload
        if admitted_after is None:
            pay[:, ST_ROWS] = 0
        else:
            pay[pay[:, ST_SINCE] > admitted_after, ST_ROWS] = 0

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
            (pay[:, ST_DECIDED] == rc - 1) | ((pay[:, ST_SINCE] <= tracked_through(rc - 2)) & (pay[:, ST_ROWS] == 0))
        )
        keys = t.keys[t.used & settled]
        self.delete(keys)
        return len(keys)

    def demote_undecided(self, rc: int) -> None:
        """Make the candidates not decided in R-cycle ``rc`` count again from the next R-cycle.

        For a checkpoint of Algorithm 1's R-cycles restored into the pipelined FSM: a
        candidate may already have met rows of ``rc`` without a decision (incrementing or
        phase-out R-cycle), so deciding at its next row would put only part of its rows in s_B.
        """
        pay = self.table.payload
        undecided = self.table.used & (pay[:, ST_SWITCH] == 0) & (pay[:, ST_DECIDED] != rc)
        pay[undecided, ST_SINCE] = since_mark(rc, at_first_step=False)

    def retry_deferred(self) -> int:
        """Let the values deferred for want of s_B's room decide again (returns how many).

        At an R-cycle start, after :meth:`prune_decided` (which keeps them): their s_count
        stays, so they decide at their first row of the next switching R-cycle.
        """
        pay = self.table.payload
        deferred = self.table.used & (pay[:, ST_SWITCH] == DEFERRED)
        pay[deferred, ST_SWITCH] = 0
        pay[deferred, ST_DECIDED] = -1
        return int(np.count_nonzero(deferred))

    def switching(self) -> np.ndarray:
        """Values whose rows are in s_B."""
        t = self.table
        out: np.ndarray = t.keys[t.used & (t.payload[:, ST_SWITCH] == 1)]
        return out

    def delete(self, keys: np.ndarray) -> None:
        """Stop tracking ``keys``."""
        if len(keys):
            t = self.table
            self.meta[0] -= kset_delete_keys(t.keys, t.used, t.payload, np.asarray(keys, dtype=np.int64))

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, payload) of the candidates."""
        return self.table.entries()

    def load(
        self, keys: np.ndarray, payload: np.ndarray, cap: int, max_values: int, peak: int = 0, admit: int = 2
    ) -> None:
        """Restore from :meth:`entries` (``peak``, ``admit``: older checkpoints have neither)."""
        self.max_values = max_values
        self.peak = peak
        self.meta[2] = admit
        self.table.load(keys, payload.reshape(-1, ST_FIELDS), cap)
        self.meta[0] = len(keys)
        self._set_limit()
