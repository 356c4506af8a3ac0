"""What the disk phase gathers over the pieces of one partition (:mod:`ssbj.core.diskphase`).

The output pairs' H_S slots and master rows, and the rows the cache refresh needs: a
partition is read in pieces, only one held at a time, while the refresh of H_R runs once
per partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core.complete import clear_cache, refresh_complete, refresh_room
from ssbj.core.resident import BufferIds

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


class RefreshRows:
    """The rows of one partition the cache refresh needs, gathered over its pieces.

    :meth:`Cache.refresh` replaces *all* cached rows read from partition p, so it runs
    once per partition, after the last piece, with the rows of every piece whose value is
    cached (with rows, or empty); those rows are copied out of each piece (``take``, few:
    at most the cached rows of p and the new rows of empty values) so the piece can go.
    A partition read whole is passed as it is.
    """

    def __init__(self, whole: bool) -> None:
        self.whole = whole
        self.raw: tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.cut: list[tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_empty = 0
        self.n_new = 0  # rows of values not in H_R (the complete cache adds them)
        self.refresh = False  # whether the pieces are probed for the refresh (H_R not empty)
        self.costs = (0.0, 0.0, 0.0)  # tuple, row and entry cost of the cache inequality
        self.slots: list[np.ndarray] = []  # H_S slots of the pairs (offsets from lo, int32), per piece
        self.masters: list[pa.Table] = []  # their master rows, taken out of each piece
        self.max_rows = 0  # rows of the largest piece so far
        self.ids: BufferIds | None = None  # a resident view's buffers (ssbj.core.resident)

    def rows(
        self,
        op: SemiStreamJoin,
        part: pa.Table,
        keys: np.ndarray,
        valid: np.ndarray,
        rf_row: np.ndarray,
        rf_slot: np.ndarray,
        n_empty: int,
        new: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """Rows of this piece the refresh needs copied out (None: none, or the piece is kept whole).

        ``new``: rows of values not in H_R, for the complete cache (:mod:`ssbj.core.complete`).
        """
        self.n_empty += n_empty
        n_new = 0 if new is None else len(new)
        self.n_new += n_new
        if len(rf_row) == 0 and n_empty == 0 and n_new == 0:
            return None
        if self.whole and valid.all():
            # (with NULL keys the rows are cut: refresh caches every row whose *encoded* key is
            # cached, and a NULL's encoding is a value too)
            self.raw = (part, keys, rf_row, rf_slot)
            return None
        if n_new:
            return np.concatenate([rf_row, new])  # type: ignore[list-item]
        if not n_empty:
            return rf_row
        # rows of values cached empty (new in R): the refresh gives them cached rows
        e = op.cache.empties
        return np.concatenate([rf_row, np.flatnonzero(valid & np.isin(keys, e.keys))])

    def keep(
        self, op: SemiStreamJoin, taken: pa.Table, keys: np.ndarray, rows: np.ndarray, n_rf: int, rf_slot: np.ndarray
    ) -> None:
        """Keep the rows :meth:`rows` asked for, ``taken`` out of the piece (the first ``n_rf`` have cached rows)."""
        op._note_transient(taken.nbytes + 16 * len(rows))
        self.cut.append((taken, keys[rows], np.arange(n_rf, dtype=np.int64), rf_slot))

    def finish(self, op: SemiStreamJoin, p: int) -> None:
        """Refresh the cached rows read from p with what every piece read."""
        if self.raw is not None:
            part, keys, rf_row, rf_slot = self.raw
            beside = rf_row.nbytes + rf_slot.nbytes  # (the partition and its keys: the disk buffer)
        else:
            got = self.cut
            part = pa.concat_tables([g[0] for g in got]) if got else op._master_layout.empty_table()
            keys = np.concatenate([g[1] for g in got]) if got else np.zeros(0, np.int64)
            offs = np.cumsum([0] + [g[0].num_rows for g in got])
            rf_row = np.concatenate([g[2] + o for g, o in zip(got, offs, strict=False)] or [np.zeros(0, np.int64)])
            rf_slot = np.concatenate([g[3] for g in got] or [np.zeros(0, np.int64)])
            del got
            beside = part.nbytes + keys.nbytes + rf_row.nbytes + rf_slot.nbytes
        self.raw, self.cut = None, []
        # (the rows kept for the refresh are alive while H_R is rebuilt: reported with the rebuild)
        if op._complete:
            changed = refresh_complete(op, p, part, keys, rf_row, rf_slot, int(self.n_new), beside)
        elif not refresh_room(op, p, len(rf_row) + int(self.n_empty)):
            changed = clear_cache(op, beside)
        else:
            changed = op.cache.refresh(p, part, keys, rf_row, rf_slot, int(self.n_empty), op._rc, beside)
        if changed:
            op._c.bump("cache_refreshes")
