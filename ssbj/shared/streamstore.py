"""The shared stream store: decoded stream rows kept once for every job and every scan.

Each pushed batch gets a contiguous range of row ids (one counter over all streams, so
every shared scan sees row ids in increasing order) and keeps the union of the columns
its jobs need plus ``__ssbj_jobs``, the bit set of the jobs on that stream whose filter
the row passes. The scans' H_S hold only the join key and the row id; output rows are
gathered from here by row id. A batch is dropped once no scan has a waiting row older
than its end (:meth:`StreamStore.drop_below`), and before that its rows are released as
soon as every scan that took them has finished them: :meth:`StreamStore.release` keeps
only the rows some scan still waits for, once at most half of a batch's rows are (each
row is then copied at most once per halving), with their row ids in a column of their own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

MASK = "__ssbj_jobs"
STORE_RID = "__ssbj_store_rid"  # row ids of a batch some of whose rows were released
RELEASE_SHARE = 0.5  # a batch is compacted once at most this share of its rows is still needed


@dataclass
class StoredBatch:
    """Rows ``start .. start + rows - 1`` of one stream."""

    start: int
    stream: str
    table: pa.Table  # projected columns + MASK (+ STORE_RID once compacted)
    span: int = -1  # row ids it covers (its rows before any release); -1: the table's rows

    def __post_init__(self) -> None:
        if self.span < 0:
            self.span = int(self.table.num_rows)
        self._rids: np.ndarray | None = None

    @property
    def end(self) -> int:
        """One past the last row id."""
        return self.start + self.span

    @property
    def compacted(self) -> bool:
        """Whether some of its rows were released (its rows carry their ids)."""
        return STORE_RID in self.table.column_names

    def rids(self) -> np.ndarray:
        """Row ids of its rows (sorted)."""
        if self._rids is None:
            self._rids = (
                self.table.column(STORE_RID).to_numpy()
                if self.compacted
                else np.arange(self.start, self.end, dtype=np.int64)
            )
        return self._rids

    def positions(self, rids: np.ndarray) -> np.ndarray:
        """Positions of ``rids`` (all of them held) in its table."""
        if not self.compacted:
            return rids - self.start
        pos = np.searchsorted(self.rids(), rids)
        if np.any(pos >= self.table.num_rows) or np.any(self.rids()[np.minimum(pos, self.table.num_rows - 1)] != rids):
            raise LookupError("row id released from the shared stream store")  # a bug, never data
        return pos

    @property
    def name(self) -> str:
        """File name of this batch in a checkpoint (a compacted one: by its rows too)."""
        if not self.compacted:
            return f"rows-{self.start}.arrow"
        # by the rows it keeps: a crashed attempt may have left another compaction of this batch
        digest = hashlib.sha1(self.rids().tobytes()).hexdigest()[:12]  # noqa: S324 - a name, not security
        return f"rows-{self.start}-{digest}.arrow"


class StreamStore:
    """Batches of decoded stream rows by row id (see the module doc)."""

    def __init__(self, next_rid: int = 0) -> None:
        self.batches: list[StoredBatch] = []
        self.next_rid = next_rid

    def add(self, stream: str, table: pa.Table) -> int:
        """Store ``table`` (with its MASK column); return its first row id."""
        start = self.next_rid
        self.next_rid += table.num_rows
        if table.num_rows:
            self.batches.append(StoredBatch(start, stream, table.combine_chunks()))
        return start

    def reserve(self, n: int) -> int:
        """Take ``n`` row ids for rows kept elsewhere (a stream one scan group holds inline)."""
        start = self.next_rid
        self.next_rid += n
        return start

    def drop_below(self, rid: int) -> None:
        """Forget every batch whose rows all have ids below ``rid`` (no scan waits for them)."""
        i = 0
        while i < len(self.batches) and self.batches[i].end <= rid:
            i += 1
        if i:
            del self.batches[:i]

    def release(self, needed: np.ndarray) -> int:
        """Keep only the rows whose ids are in ``needed`` in batches where at most half still are; rows released."""
        freed = 0
        for i, b in enumerate(self.batches):
            ids = b.rids()
            keep = np.isin(ids, needed, assume_unique=False)
            n = int(keep.sum())
            if n > RELEASE_SHARE * len(ids):
                continue
            table = b.table.filter(pa.array(keep))
            if not b.compacted:
                table = table.append_column(STORE_RID, pa.array(ids[keep], pa.int64()))
            self.batches[i] = StoredBatch(b.start, b.stream, table.combine_chunks(), b.span)
            freed += len(ids) - n
        return freed

    @property
    def rows(self) -> int:
        """Rows held."""
        return sum(b.table.num_rows for b in self.batches)

    def nbytes(self) -> int:
        """Bytes of the rows held (Arrow buffers)."""
        return sum(int(b.table.nbytes) for b in self.batches)

    def _locate(self, rids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = np.fromiter((b.start for b in self.batches), dtype=np.int64, count=len(self.batches))
        which = np.searchsorted(starts, rids, side="right") - 1
        if len(rids) and (which.min() < 0 or np.any(rids - starts[which] >= self._spans()[which])):
            raise LookupError("row id no longer in the shared stream store")  # a bug, never data
        pos = rids - starts[which]
        for w in np.unique(which) if any(b.compacted for b in self.batches) else ():
            b = self.batches[w]
            if b.compacted:
                sel = which == w
                pos[sel] = b.positions(rids[sel])
        return which, pos

    def _spans(self) -> np.ndarray:
        return np.fromiter((b.span for b in self.batches), dtype=np.int64, count=len(self.batches))

    def masks(self, rids: np.ndarray) -> np.ndarray:
        """Return the job bit sets of rows ``rids``."""
        out = np.zeros(len(rids), dtype=np.int64)
        if not len(rids):
            return out
        which, pos = self._locate(rids)
        for w in np.unique(which):
            sel = which == w
            col = self.batches[w].table.column(MASK).to_numpy()
            out[sel] = col[pos[sel]]
        return out

    def take_grouped(
        self, rids: np.ndarray, columns: list[str], schema: pa.Schema
    ) -> tuple[pa.Table, np.ndarray | None]:
        """Rows ``rids`` grouped by batch, and the order: row i is ``rids[order[i]]`` (None: as given).

        One take per batch and no second take to restore the order asked for: the caller
        puts its other columns in this order instead (cheaper than moving the wide rows).
        """
        if not len(rids):
            return schema.empty_table(), None
        which, pos = self._locate(rids)
        if which[0] == which[-1] and (len(which) == 1 or not np.any(which != which[0])):
            return self.batches[which[0]].table.select(columns).take(pos), None
        order = np.argsort(which, kind="stable")
        ws, pos_sorted = which[order], pos[order]
        cuts = np.flatnonzero(np.diff(ws)) + 1
        parts = [
            self.batches[ws[a]].table.select(columns).take(pos_sorted[a:b])
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(ws)], strict=True)
        ]
        return pa.concat_tables(parts), order

    def take(self, rids: np.ndarray, columns: list[str], schema: pa.Schema) -> pa.Table:
        """Rows ``rids`` (in that order), columns ``columns`` typed as in ``schema``."""
        if not len(rids):
            return schema.empty_table()
        which, pos = self._locate(rids)
        groups = np.unique(which)
        if len(groups) == 1:
            return self.batches[groups[0]].table.select(columns).take(pos)
        order = np.argsort(which, kind="stable")
        parts = [self.batches[w].table.select(columns).take(pos[which == w]) for w in groups]
        table = pa.concat_tables(parts)
        # parts come grouped by batch: put the rows back in the order asked for
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return table.take(inverse)
