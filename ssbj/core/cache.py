"""H_R, the cache phase's hash table: the master rows of cached join values.

* rows of cached values, column by column (the disk-buffer layout: key first, then the
  projected columns), grouped by value and, within a value, by the partition they were
  read from (``src``) and read order;
* an index from value to its group (start, length) with f_count (cache hits since the
  R-cycle in ``since``, saturating) for eviction (every ``eviction_interval`` R-cycles, and
  with the pipelined FSM between them for values clearly cold: :func:`_evict`), at 75% load: rebuilt whole by a merge,
  grown by a rehash for a switch-in alone, entries deleted in place by an eviction alone;
* a separate set of *empty* entries (values cached with no master row) that holds only
  the key and a 2-bit hit count: most cached values of a long-tailed stream are such
  values, so their keys are block-packed (:mod:`ssbj.core.empties`, ~2.5 bytes an entry
  for integer keys at small budgets).

A value is served by the cache from its switch-in until its eviction; every partition
read by the disk phase refreshes the cached rows read from it (updates, inserts,
deletes; :meth:`Cache.refresh`), so no cached row is older than one R-cycle.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.empties import EmptySet
from ssbj.core.hashing import MAX_LOAD, KeyedTable, capacity_for, kset_delete_keys, kset_find, kset_rehash
from ssbj.core.hrmerge import merge_runs, reorder_column
from ssbj.core.jit import njit
from ssbj.core.keys import encode_keys
from ssbj.core.refresh import HR_LEN, HR_START, refresh_pairs, rows_equal
from ssbj.core.rowsize import held_nbytes

# mypy: disable-error-code="return-value,arg-type,no-any-return"

HR_F = 2
HR_SINCE = 3
F_MAX_ROWS = (1 << 31) - 1
# the index is rebuilt whole (never grown in place): at the highest load the tables allow
# (42 -> 33 B per cached value; lookups stay in a table of a few thousand entries)
INDEX_LOAD = MAX_LOAD
# between evictions (pipelined FSM), a one-sided Poisson test of each value's hits; on the
# bound experiment's data 0.05 and 0.2 differ by 1% (docs/bound.md, "2026-12-06")
EARLY_ALPHA = 0.2
EARLY_MIN_CYCLES = 2  # R-cycles of hits before a value is judged between evictions


@njit(cache=True)
def _row_keys(hk: np.ndarray, hused: np.ndarray, hpay: np.ndarray, nrows: int) -> np.ndarray:  # pragma: no cover
    out = np.zeros(nrows, dtype=np.int64)
    for j in range(hk.shape[0]):
        if hused[j]:
            st = hpay[j, HR_START]
            for r in range(st, st + hpay[j, HR_LEN]):
                out[r] = hk[j]
    return out


@njit(cache=True)
def _carry(
    hk: np.ndarray, hused: np.ndarray, hpay: np.ndarray, keys: np.ndarray, pay: np.ndarray
) -> None:  # pragma: no cover
    """Copy f_count and since of ``keys`` still in the old index into their new payload rows."""
    for t in range(keys.shape[0]):
        j = kset_find(hk, hused, keys[t])
        if j >= 0:
            pay[t, HR_F] = hpay[j, HR_F]
            pay[t, HR_SINCE] = hpay[j, HR_SINCE]


@njit(cache=True)
def _evict(
    hk: np.ndarray,
    hused: np.ndarray,
    hpay: np.ndarray,
    row_cost: float,
    entry_cost: float,
    tuple_cost: float,
    switch_factor: float,
    rc: int,
    out: np.ndarray,
    early: bool,
    alpha: float,
) -> int:  # pragma: no cover
    """Cache eviction (lines 42-51): values whose m_cache >= s_f * m_disk; resets f_count.

    ``early``: the test between evictions. f_count over the R-cycles since ``since`` is
    read as a Poisson count against mu, the hits that would just pay for the value's
    bytes: a value whose count is below mu at significance ``alpha`` goes now (the hot
    set moved on), one above it at the same significance starts a new count from here (so
    a later fall shows within a few R-cycles, not diluted by old hits), the rest wait.
    """
    n = 0
    for j in range(hk.shape[0]):
        if not hused[j]:
            continue
        cycles = max(1, rc - hpay[j, HR_SINCE])
        m_cache = hpay[j, HR_LEN] * row_cost + entry_cost
        if early:
            if cycles < EARLY_MIN_CYCLES:
                continue
            mu = cycles * m_cache / max(switch_factor * tuple_cost, 1e-12)  # hits at break-even
            f = hpay[j, HR_F]
            if f < mu and _poisson_cdf(f, mu) < alpha:  # clearly below break-even: evict now
                out[n] = hk[j]
                n += 1
            elif f > mu and 1.0 - _poisson_cdf(f - 1, mu) < alpha:  # clearly above: a new window
                hpay[j, HR_F] = 0
                hpay[j, HR_SINCE] = rc
            continue
        m_disk = hpay[j, HR_F] / cycles * tuple_cost
        if m_cache >= switch_factor * m_disk:
            out[n] = hk[j]
            n += 1
        else:
            hpay[j, HR_F] = 0
            hpay[j, HR_SINCE] = rc
    return n


@njit(cache=True)
def _poisson_cdf(f: int, mu: float) -> float:  # pragma: no cover
    """P(X <= f) for X ~ Poisson(mu) (normal approximation past mu = 50)."""
    if f < 0:
        return 0.0
    if mu > 50.0:
        return 0.5 * math.erfc(-(f + 0.5 - mu) / math.sqrt(2.0 * mu))
    term = math.exp(-mu)
    total = term
    for i in range(1, f + 1):
        term *= mu / i
        total += term
        if i > mu and term < 1e-17 * total:
            break
    return min(total, 1.0)


class Cache:
    """H_R plus the empty entries; see the module doc."""

    def __init__(self, layout: pa.Schema, family: str) -> None:
        self.layout = layout
        self.family = family
        self.columns: list[pa.Array] = [pa.array([], type=f.type) for f in layout]
        self.src = np.zeros(0, dtype=np.int32)
        self._rows_gen = 0  # bumped whenever columns or src are replaced
        self._rows_nb = (-1, 0)  # (generation, bytes): summing Arrow buffers per call is slow
        self.index = KeyedTable(4, np.int32)
        self.empties = EmptySet()
        self.cnt_src = np.zeros(1, dtype=np.int64)
        self.version = 0  # bumped when the rows change (checkpoints write H_R only then)
        self.last_transient = 0  # bytes of the last rebuild's temporaries at their peak (nbytes)

    # ------------------------------------------------------------ sizes
    @property
    def rows(self) -> int:
        """Cached master rows."""
        return len(self.src)

    @property
    def values(self) -> int:
        """Cached values with master rows."""
        return self.index.size

    @property
    def empty_values(self) -> int:
        """Cached values without master rows."""
        return self.empties.size

    def row_nbytes(self) -> int:
        """Bytes of the cached rows' columns and their partition tags."""
        if self._rows_nb[0] != self._rows_gen:
            # what is held: the columns' whole buffers, the tags' whole array (both may be
            # larger than the rows, written in place: ssbj.core.takeall)
            cols = sum(b.size for c in self.columns for b in c.buffers() if b is not None)
            self._rows_nb = (self._rows_gen, int(cols + held_nbytes(self.src)))
        return self._rows_nb[1]

    def nbytes(self) -> int:
        """Bytes of H_R: rows, tags, index, empty entries, per-partition counts."""
        return self.row_nbytes() + self.index.nbytes + self.empties.nbytes + int(self.cnt_src.nbytes)

    def entry_cost(self) -> float:
        """Bytes of one index entry of a value with rows (at the index's load)."""
        return KeyedTable.bytes_for(1, 4, 4) / INDEX_LOAD

    def empty_cost(self) -> float:
        """Bytes of one empty entry."""
        return float(self.empties.entry_bytes())

    def table(self) -> pa.Table:
        """Return the cached rows as a table (no copy)."""
        return pa.Table.from_arrays(self.columns, schema=self.layout)

    def values_cached(self) -> np.ndarray:
        """Return the encoded values served by the cache (with and without rows)."""
        return np.concatenate([self.index.keys[self.index.used], self.empties.keys])

    # ------------------------------------------------------------ changes
    def set_partitions(self, k: int) -> None:
        """Per-partition row counts for ``k`` partitions."""
        if len(self.cnt_src) != k:
            self.cnt_src = np.bincount(self.src, minlength=k).astype(np.int64)[: max(k, 1)]
            if len(self.cnt_src) < k:
                self.cnt_src = np.concatenate([self.cnt_src, np.zeros(k - len(self.cnt_src), np.int64)])

    def add_empties(self, keys: np.ndarray, rc: int) -> None:
        """Cache ``keys`` as values without master rows."""
        if len(keys):
            self.empties.add(keys, rc)

    def evict(
        self,
        row_cost: float,
        entry_cost: float,
        empty_cost: float,
        tuple_cost: float,
        switch_factor: float,
        rc: int,
        early: bool = False,
    ) -> tuple[np.ndarray, int]:
        """Evict values the cache inequality no longer favours; returns (evicted keys with rows, empties evicted).

        ``early``: the test between evictions (:func:`_evict`), for values with rows only.
        """
        out = np.empty(self.index.cap, dtype=np.int64)
        n = _evict(
            self.index.keys,
            self.index.used,
            self.index.payload,
            row_cost,
            entry_cost,
            tuple_cost,
            switch_factor,
            rc,
            out,
            early,
            EARLY_ALPHA,
        )
        if early:
            return out[:n], 0
        ne = self.empties.evict(empty_cost, tuple_cost, switch_factor, rc)
        return out[:n], ne

    def rebuild(
        self,
        drop: np.ndarray,
        add: pa.Table | None,
        add_keys: np.ndarray,
        add_src: np.ndarray,
        rc: int,
        keep_src_not: int | None = None,
        cached_after: np.ndarray | None = None,
        beside: int = 0,
    ) -> None:
        """Rebuild the rows: drop values ``drop`` (and rows read from ``keep_src_not``), add ``add``.

        ``beside``: bytes of the caller's temporaries alive during the rebuild (a refresh's
        rows), reported with the rebuild's (:attr:`last_transient`, the most in a step).

        The new row order merges the kept runs with the added rows (:mod:`ssbj.core.hrmerge`);
        columns are rebuilt one at a time, so the extra memory while rebuilding is the order
        and new tags (8 B a row) and one new column (a variable-width or nullable one also
        merged with the added rows first: twice) (:func:`ssbj.core.hrsize.rebuild_bytes`).
        Values in ``cached_after`` that end with no row become empty entries.
        """
        ix = self.index
        added = len(add_keys) > 0
        if keep_src_not is None and not beside and not (len(drop) and added):
            # a switch-in or an eviction alone keeps every other run as it is: no merge
            if added and not np.isin(add_keys, ix.keys[ix.used]).any():
                assert add is not None  # noqa: S101  (rows come with their keys)
                self._append(add, add_keys, add_src, rc)
                self._finish_rebuild(cached_after, rc)
                return
            if not added:
                if len(drop):
                    self._drop(drop)
                self._finish_rebuild(cached_after, rc)
                return
        dropped = ix.used & np.isin(ix.keys, drop) if len(drop) else np.zeros(0, np.bool_)
        drop_src = -1 if keep_src_not is None else int(keep_src_not)
        order, src, uniq, pay, peak, runs = merge_runs(
            ix.keys, ix.used, ix.payload, dropped, self.src, drop_src, add_keys, np.asarray(add_src, np.int32), 4
        )
        peak += dropped.nbytes
        del dropped
        # then: the new order and tags, the runs, and per column its copies (the old one stays until replaced)
        base = order.nbytes + src.nbytes + runs
        for c in range(len(self.columns)):
            self.columns[c], copies = reorder_column(self.columns[c], None if add is None else add.column(c), order)
            peak = max(peak, base + copies)
        del order
        self.src = src
        self._rows_gen += 1
        pay[:, HR_SINCE] = rc
        _carry(ix.keys, ix.used, ix.payload, uniq, pay)
        old_ix = ix.nbytes
        ix.load(uniq, pay, capacity_for(len(uniq), INDEX_LOAD))
        transient = max(peak, runs + old_ix) + beside  # (the old index beside the new)
        self.last_transient = max(self.last_transient, transient)
        self._finish_rebuild(cached_after, rc)

    def _finish_rebuild(self, cached_after: np.ndarray | None, rc: int) -> None:
        """Values of ``cached_after`` left without rows become empty entries; values with rows leave the empties."""
        ix = self.index
        with_rows = ix.keys[ix.used]
        if cached_after is not None and len(cached_after):
            self.add_empties(np.setdiff1d(cached_after, with_rows), rc)
        if len(with_rows) and self.empties.size:
            self._drop_empties(with_rows)
        self.cnt_src = np.bincount(self.src, minlength=len(self.cnt_src)).astype(np.int64)
        self.version += 1

    def _append(self, add: pa.Table, add_keys: np.ndarray, add_src: np.ndarray, rc: int) -> None:
        """Add the rows of values not cached yet after the old ones, one run per value (key, then partition).

        The old runs stay in place (the rows are then not in value order, which the merge
        handles): the extra memory is the added rows' order, one new column at a time and,
        when the index must grow, the old index beside the new; the merge would hold the
        order of every row, a string column twice and a second index.
        """
        ix = self.index
        keys = np.asarray(add_keys, np.int64)
        tags = np.asarray(add_src, np.int32)
        perm = np.lexsort((tags, keys))  # as hrmerge orders added rows (stable: read order within a partition)
        skeys = keys[perm]
        uniq, first, counts = np.unique(skeys, return_index=True, return_counts=True)
        small = 2 * perm.nbytes + skeys.nbytes + uniq.nbytes + first.nbytes + counts.nbytes  # (perm as Arrow too)
        take = pa.array(perm)
        peak = 0
        for c in range(len(self.columns)):
            extra = add.column(c).take(take).combine_chunks()
            new = pa.concat_arrays([self.columns[c], extra])
            peak = max(peak, int(2 * extra.nbytes + new.nbytes))  # (a chunked take, then its combined copy)
            self.columns[c] = new
            del extra, new
        del take
        src = np.concatenate([self.src, tags[perm]])
        peak = max(peak, int(src.nbytes + 4 * len(perm)))
        self.src = src
        self._rows_gen += 1
        pay = np.zeros((len(uniq), ix.nfields), np.int32)
        pay[:, HR_START] = self.rows - len(perm) + first
        pay[:, HR_LEN] = counts
        pay[:, HR_SINCE] = rc
        index = pay.nbytes
        need = capacity_for(ix.size + len(uniq), INDEX_LOAD)
        if need > ix.cap:  # grown by a rehash of the old table into the new (the old one beside it)
            index += ix.nbytes
            ix.resize(need)
        kset_rehash(uniq, np.ones(len(uniq), np.bool_), pay, ix.keys, ix.used, ix.payload)  # (new keys: inserts)
        ix.size += len(uniq)
        self.last_transient = max(self.last_transient, small + max(peak, index))

    def _drop(self, drop: np.ndarray) -> None:
        """Remove the runs of the values ``drop``; the others keep their order, moved up over the gaps."""
        ix = self.index
        gone = ix.used & np.isin(ix.keys, drop)
        if not gone.any():
            return
        rows = self.rows
        # +1 at a dropped run's start, -1 past its end: the running sum marks dropped rows
        mark = np.zeros(rows + 1, np.int32)
        starts = ix.payload[gone, HR_START]
        np.add.at(mark, starts, 1)
        np.add.at(mark, starts + ix.payload[gone, HR_LEN], -1)
        keep = np.cumsum(mark[:rows], dtype=np.int32) == 0
        prep = mark.nbytes + 4 * rows + keep.nbytes
        del mark
        before = np.zeros(rows + 1, np.int32)  # dropped rows before each row
        np.cumsum(~keep, dtype=np.int32, out=before[1:])
        stay = ix.used & ~gone
        moved = ix.payload[stay, HR_START]
        ix.payload[stay, HR_START] = moved - before[moved]
        held = gone.nbytes + stay.nbytes + keep.nbytes
        prep = max(prep, held + before.nbytes + rows + 2 * moved.nbytes)  # (~keep; the starts and their shifts)
        del before, moved, stay
        # deleted in place (the freed slots take the next switch-in's values): no second index
        ix.size -= kset_delete_keys(ix.keys, ix.used, ix.payload, ix.keys[gone])
        mask = pa.array(keep)
        peak = gone_bytes = 0
        for c in range(len(self.columns)):
            new = self.columns[c].filter(mask)
            peak = max(peak, int(new.nbytes))
            gone_bytes += int(self.columns[c].nbytes - new.nbytes)
            self.columns[c] = new
            del new
        src = self.src[keep]
        peak = max(peak, int(src.nbytes))
        gone_bytes += int(self.src.nbytes - src.nbytes)
        self.src = src
        self._rows_gen += 1
        # the dropped rows are alive until the end (H_R's bytes after it do not hold them)
        self.last_transient = max(self.last_transient, gone_bytes + max(prep, held + int(mask.nbytes) + peak))

    def _drop_empties(self, keys: np.ndarray) -> None:
        self.empties.drop(keys)

    def refresh(
        self,
        p: int,
        part: pa.Table,
        mkeys: np.ndarray,
        rf_row: np.ndarray,
        rf_slot: np.ndarray,
        n_empty_hits: int,
        rc: int,
        beside: int = 0,
    ) -> bool:
        """Replace the cached rows last read from partition ``p`` by what was read now.

        ``rf_row`` are the rows of ``part`` whose value has cached rows (``rf_slot`` its
        index slot), ``n_empty_hits`` the rows whose value is cached empty. Returns
        whether anything changed (then H_R is rebuilt).
        """
        if len(rf_row) == 0 and n_empty_hits == 0 and self.cnt_src[p] == 0:
            return False
        changed = n_empty_hits > 0
        if not changed:
            old, matched = refresh_pairs(self.index.payload, self.src, rf_row, rf_slot, p)
            changed = matched != len(rf_row) or matched != self.cnt_src[p]
            if not changed and matched:
                changed = not rows_equal(part, rf_row, self.columns, old)
        if not changed:
            return False
        # the value set stays; only its rows from p are replaced
        cached_keys = self.values_cached()
        new_rows = np.flatnonzero(np.isin(mkeys, cached_keys))
        fresh = part.take(pa.array(new_rows))
        before = self.index.keys[self.index.used].copy()
        self.rebuild(
            np.zeros(0, np.int64),
            fresh,
            mkeys[new_rows],
            np.full(len(new_rows), p, np.int32),
            rc,
            keep_src_not=p,
            cached_after=before,
            beside=beside + fresh.nbytes + new_rows.nbytes,
        )
        return True

    def load(
        self,
        table: pa.Table,
        src: np.ndarray,
        index_keys: np.ndarray,
        index_pay: np.ndarray,
        index_cap: int,
        empty_keys: np.ndarray,
        empty_pay: np.ndarray,
        k: int,
        empty_since: int = 0,
    ) -> None:
        """Restore the state saved by a checkpoint (``empty_pay``: hit counts, or older (f_count, since) pairs)."""
        self.columns = [c.combine_chunks() for c in table.columns]
        self.src = np.asarray(src, dtype=np.int32)
        self._rows_gen += 1
        self.index.load(index_keys, index_pay, index_cap)
        self.empties.load(empty_keys, empty_pay, empty_since)
        self.cnt_src = np.bincount(self.src, minlength=max(k, 1)).astype(np.int64)

    def key_array(self) -> np.ndarray:
        """Return the encoded key of every cached row."""
        return _row_keys(self.index.keys, self.index.used, self.index.payload, self.rows)

    def encode(self, table: pa.Table) -> np.ndarray:
        """Return the encoded keys of a table in the cache layout."""
        return encode_keys(table.column(0), self.family).values

    def verify(self, stream_keys: pa.Array, rows: np.ndarray) -> np.ndarray:
        """Mask of pairs whose real key values agree (for hashed key families)."""
        m = self.columns[0].take(pa.array(rows))
        return np.asarray(pc.equal(stream_keys, m).to_numpy(zero_copy_only=False), dtype=bool)


def new_capacity(n: int) -> int:
    """Table capacity for ``n`` entries (re-exported for the budget planner)."""
    return capacity_for(n)
