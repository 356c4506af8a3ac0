"""The SSBJ-style cache of one scanned master: all rows of frequent join values.

Per R-cycle of the master (K partition reads) three things happen, as SSBJ's FSM does in
its own way: the values arriving at the edge are counted (``n``, every arriving row,
served or not); the most frequent values not cached become candidates, whose master rows
are collected during the next full R-cycle (from partition 0 to K-1, so the collection is
complete); at the end of that cycle every candidate and every cached value is kept only
if the cache inequality ``m * v_R < n * v_S`` holds (``m`` its master rows, ``n`` its
arrivals in the last cycle) and the most beneficial ones fit the cache's bytes. A value
with no master rows (``m = 0``) is an empty entry: rows of it are resolved at once (an
inner edge drops them, a left edge NULL-extends them). Keys are exact values
(:class:`KeyIndex`), so a cached value is served only with all of its rows.

Cached rows are refreshed from the scan as the binary operator refreshes its own: every
cached row carries the partition it was read from, and each read of partition ``k``
replaces the cached rows of ``k`` with that partition's current rows of the cached values
(rows updated, inserted or deleted in the master), so a cached value is at most one
R-cycle older than the master, as a scanned one is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.multiway.keyindex import KeyIndex
from ssbj.errors import StateError

MAX_CANDIDATES = 2048
MAX_COUNTED = 1 << 15  # distinct values the per-cycle counts keep (the most frequent)


def _key_table(cols: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Table:
    return pa.table({f"k{i}": c for i, c in enumerate(cols)})


def _keys(t: pa.Table, n: int) -> list[pa.ChunkedArray]:
    return [t.column(f"k{i}") for i in range(n)]


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Whether two tables hold the same rows as multisets (in any order)."""
    if a.num_rows != b.num_rows:
        return False
    if a.equals(b):
        return True
    order = [(c, "ascending") for c in a.column_names]
    try:
        return bool(a.take(pc.sort_indices(a, sort_keys=order)).equals(b.take(pc.sort_indices(b, sort_keys=order))))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a type without an order: treat as changed
        return False


class EdgeCache:
    """Cached rows, empty entries, candidates and per-cycle counts of one scanned edge."""

    def __init__(self, n_keys: int, key_cols: list[str], capacity: int) -> None:
        self.n = n_keys
        self.key_cols = key_cols  # qualified master key columns
        self.capacity = capacity  # bytes the cached rows and keys may take
        self.rows: pa.Table | None = None  # master rows of cached values
        self.tags: np.ndarray | None = None  # the partition each cached row was read from (int32)
        self.keys: pa.Table | None = None  # k0.. of cached values (with or without rows)
        self.cand: pa.Table | None = None  # k0.., n of the candidates being collected
        self.collecting = False
        self.collected: list[pa.Table] = []
        self.collected_tags: list[np.ndarray] = []
        self.counts: list[pa.Table] = []
        self._rows_idx: KeyIndex | None = None
        self._keys_idx: KeyIndex | None = None
        self._cand_idx: KeyIndex | None = None
        self.served = 0
        self.admitted = 0
        self.refreshed = 0  # partitions whose cached rows changed

    # ------------------------------------------------------------------ serving
    def serve(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mask of rows whose value is cached, probing rows, cached-row numbers) of the matches."""
        if self._keys_idx is None or self._rows_idx is None:
            z = np.zeros(0, np.int64)
            return np.zeros(len(keys[0]), bool), z, z
        hit = self._keys_idx.contains(keys)
        left, right = self._rows_idx.match(keys)
        self.served += int(hit.sum())
        return hit, left, right

    def served_rows(self) -> pa.Table:
        """Return the cached master rows :meth:`serve` numbers."""
        if self.rows is None:
            raise StateError("the cache holds no rows")
        return self.rows

    # ------------------------------------------------------------------ statistics
    def count(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> None:
        """Count arriving values (NULL keys never match, so they are not counted)."""
        t = _key_table(keys)
        valid = None
        for c in t.columns:
            v = pc.is_valid(c)
            valid = v if valid is None else pc.and_(valid, v)
        t = t.filter(valid)
        if t.num_rows == 0:
            return
        self.counts.append(
            t.group_by(t.column_names).aggregate([([], "count_all")]).rename_columns([*t.column_names, "n"])
        )
        if len(self.counts) > 16:
            self.counts = [self._merged_counts()]

    def _merged_counts(self) -> pa.Table:
        t = pa.concat_tables(self.counts, promote_options="permissive")
        names = [f"k{i}" for i in range(self.n)]
        t = t.group_by(names).aggregate([("n", "sum")]).rename_columns([*names, "n"])
        if t.num_rows > MAX_COUNTED:
            t = t.take(pc.select_k_unstable(t, MAX_COUNTED, [("n", "descending")]))
        return t

    # ------------------------------------------------------------------ the scan
    def collect(self, part: pa.Table, k: int) -> None:
        """Partition ``k`` was read: refresh the cached rows of ``k``; keep its rows of candidate values."""
        keys = [part.column(c) for c in self.key_cols]
        self._refresh(part, keys, k)
        if not self.collecting or self._cand_idx is None or part.num_rows == 0:
            return
        mask = self._cand_idx.contains(keys)
        if mask.any():
            self.collected.append(part.filter(pa.array(mask)))
            self.collected_tags.append(np.full(int(mask.sum()), k, np.int32))

    def _refresh(self, part: pa.Table, keys: list[pa.ChunkedArray], k: int) -> None:
        """Replace the cached rows read from partition ``k`` with its current rows of the cached values."""
        if self.rows is None or self.tags is None or self._keys_idx is None:
            return
        old = self.tags == k
        fresh = self._keys_idx.contains(keys) if part.num_rows else np.zeros(0, bool)
        new_rows = part.filter(pa.array(fresh)) if fresh.any() else None
        if not old.any() and new_rows is None:
            return
        if new_rows is not None and _same_rows(self.rows.filter(pa.array(old)), new_rows):
            return  # unchanged (the usual case): keep the rows and their index
        kept = self.rows.filter(pa.array(~old))
        parts = [kept] if new_rows is None else [kept, new_rows.cast(kept.schema)]
        self.rows = pa.concat_tables(parts).combine_chunks()
        n_new = 0 if new_rows is None else new_rows.num_rows
        self.tags = np.concatenate([self.tags[~old], np.full(n_new, k, np.int32)])
        self.refreshed += 1
        self._index()

    def end_cycle(self, v_r: float, v_s: float, master_schema: pa.Schema) -> None:
        """End the master's R-cycle: admit, evict, pick the next candidates."""
        counts = self._merged_counts() if self.counts else None
        self.counts = []
        pools: list[tuple[pa.Table, pa.Table, np.ndarray]] = []  # (keys, rows, their partitions)
        if self.keys is not None and self.rows is not None and self.tags is not None:
            pools.append((self.keys, self.rows, self.tags))
        if self.collecting and self.cand is not None:
            rows = pa.concat_tables(self.collected) if self.collected else master_schema.empty_table()
            tags = np.concatenate(self.collected_tags) if self.collected_tags else np.zeros(0, np.int32)
            pools.append((self.cand.select([f"k{i}" for i in range(self.n)]), rows, tags))
        self.collected, self.collected_tags = [], []
        self.collecting = False
        keep_keys: list[pa.Table] = []
        keep_rows: list[pa.Table] = []
        keep_tags: list[np.ndarray] = []
        if counts is not None and pools:
            cidx = KeyIndex(_keys(counts, self.n))
            n_all = counts.column("n").to_numpy()
            # (benefit, pool, value position, bytes) of every value the inequality admits
            entries: list[tuple[float, int, int, float]] = []
            matches: list[tuple[np.ndarray, np.ndarray]] = []
            for pi, (keys, rows, _) in enumerate(pools):
                kidx = KeyIndex(_keys(keys, self.n))
                r_left, r_right = kidx.match([rows.column(c) for c in self.key_cols])
                matches.append((r_left, r_right))
                m = np.bincount(r_right, minlength=keys.num_rows)
                c_left, c_right = cidx.match(_keys(keys, self.n))
                n = np.zeros(keys.num_rows, np.int64)
                n[c_left] = n_all[c_right]
                per_row = rows.nbytes / max(rows.num_rows, 1)
                per_key = keys.nbytes / max(keys.num_rows, 1)
                for jj in np.flatnonzero(m * v_r < n * v_s):
                    entries.append((float(n[jj] * v_s - m[jj] * v_r), pi, int(jj), float(per_key + m[jj] * per_row)))
            entries.sort(key=lambda e: -e[0])
            used = 0.0
            chosen: list[list[int]] = [[] for _ in pools]
            for _, pi, j, size in entries:
                if used + size <= self.capacity:
                    used += size
                    chosen[pi].append(j)
            for (keys, rows, tags), js, (r_left, r_right) in zip(pools, chosen, matches, strict=True):
                if js:
                    sel = np.asarray(sorted(js), np.int64)
                    take = r_left[np.isin(r_right, sel)]
                    keep_keys.append(keys.take(sel))
                    keep_rows.append(rows.take(take))
                    keep_tags.append(tags[take])
        self.keys = pa.concat_tables(keep_keys, promote_options="permissive") if keep_keys else None
        self.rows = pa.concat_tables(keep_rows, promote_options="permissive").combine_chunks() if keep_rows else None
        self.tags = np.concatenate(keep_tags).astype(np.int32) if keep_rows else None
        self.admitted = 0 if self.keys is None else self.keys.num_rows
        self._index()
        # next candidates: the most frequent values not cached, seen at least twice
        self.cand = None
        if counts is not None and counts.num_rows:
            if self._keys_idx is not None:
                counts = counts.filter(pa.array(~self._keys_idx.contains(_keys(counts, self.n))))
            counts = counts.filter(pc.greater_equal(counts.column("n"), 2))
            if counts.num_rows:
                k = min(MAX_CANDIDATES, counts.num_rows)
                self.cand = counts.take(pc.select_k_unstable(counts, k, [("n", "descending")]))
        self.collecting = self.cand is not None
        self._cand_idx = KeyIndex(_keys(self.cand, self.n)) if self.cand is not None else None

    def _index(self) -> None:
        if self.keys is None or self.rows is None:
            self._keys_idx = self._rows_idx = None
            return
        self._keys_idx = KeyIndex(_keys(self.keys, self.n))
        self._rows_idx = KeyIndex([self.rows.column(c) for c in self.key_cols])

    def nbytes(self) -> int:
        """Bytes of the cached rows and keys, the candidates, the collected rows and the counts."""
        total = sum(t.nbytes for t in self.collected) + sum(t.nbytes for t in self.counts)
        total += sum(t.nbytes for t in self.collected_tags) + (0 if self.tags is None else self.tags.nbytes)
        for t in (self.rows, self.keys, self.cand):
            if t is not None:
                total += t.nbytes
        for ix in (self._rows_idx, self._keys_idx, self._cand_idx):
            if ix is not None:
                total += ix.nbytes
        return int(total)

    # ------------------------------------------------------------------ checkpoint
    def tables(self) -> dict[str, pa.Table | None]:
        """State as tables (for a checkpoint)."""
        collected = pa.concat_tables(self.collected) if self.collected else None
        counts = self._merged_counts() if self.counts else None
        tags = None if self.tags is None else pa.table({"partition": self.tags})
        ctags = pa.table({"partition": np.concatenate(self.collected_tags)}) if self.collected_tags else None
        return {
            "rows": self.rows,
            "keys": self.keys,
            "cand": self.cand,
            "collected": collected,
            "counts": counts,
            "tags": tags,
            "collected_tags": ctags,
        }

    def load(self, tables: dict[str, pa.Table | None], collecting: bool) -> None:
        """Restore from :meth:`tables`."""
        self.rows, self.keys, self.cand = tables["rows"], tables["keys"], tables["cand"]
        tags, ctags = tables.get("tags"), tables.get("collected_tags")
        self.tags = None if tags is None else tags.column("partition").to_numpy().astype(np.int32)
        c = tables["collected"]
        self.collected = [c] if c is not None else []
        self.collected_tags = [] if ctags is None else [ctags.column("partition").to_numpy().astype(np.int32)]
        n = tables["counts"]
        self.counts = [n] if n is not None else []
        self.collecting = collecting
        if self.rows is not None and self.tags is None:  # written before rows knew their partition
            self.rows = self.keys = None  # served again by the scan until re-admitted (never stale)
        if self.collected and not self.collected_tags:
            self.collected, self.collecting = [], False
        self._index()
        self._cand_idx = KeyIndex(_keys(self.cand, self.n)) if self.cand is not None else None
        self.admitted = 0 if self.keys is None else self.keys.num_rows
