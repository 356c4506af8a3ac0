"""Exact equi-join matching of composite keys of any Arrow type, as integer codes.

A :class:`KeyIndex` is built over the key columns of a set of master rows (a table held
whole, one partition of a scanned table, the rows of a cache). Each key column is
dictionary-coded against the distinct master values (``pc.index_in``: exact for strings,
dates, decimals; NULL never matches), the per-column codes are combined in mixed radix
(re-densified before they could overflow int64), and the master rows are sorted by code,
so a probe is one ``searchsorted`` per probing row (Eq. 6 of dpPick: an ordered array,
``f(kappa) = log kappa``). No hashing, so no verification step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.errors import InputError

_DENSIFY = 1 << 40  # re-densify combined codes before a product of cardinalities could overflow


def _plain_key(a: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_dictionary(a.type):
        return a.cast(a.type.value_type)
    if pa.types.is_string_view(a.type):
        return a.cast(pa.large_string())
    return a


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """Return the type both sides of an equi-join predicate are compared in."""
    if a.equals(b):
        return a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.int64()
    if (pa.types.is_integer(a) or pa.types.is_floating(a)) and (pa.types.is_integer(b) or pa.types.is_floating(b)):
        return pa.float64()
    texts = (pa.types.is_string, pa.types.is_large_string)
    if any(f(a) for f in texts) and any(f(b) for f in texts):
        return pa.large_string()
    return a


def _cast(a: pa.Array | pa.ChunkedArray, t: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if a.type.equals(t):
        return a
    try:
        return a.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"join key of type {a.type} cannot be compared with {t}: {exc}") from exc


def _kind(t: pa.DataType) -> str | None:
    """'i' or 'f' when keys of this type are compared as NumPy int64 / float64, else None."""
    if pa.types.is_integer(t):
        return "i"
    if pa.types.is_floating(t):
        return "f"
    return None


def _numpy(col: pa.Array | pa.ChunkedArray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Values (NULL as 0) and validity of a numeric key column."""
    t = pa.int64() if kind == "i" else pa.float64()
    valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    vals = np.asarray(pc.fill_null(col.cast(t), 0).to_numpy(zero_copy_only=False))
    return vals, valid


def _sorted_codes(vals: np.ndarray, valid: np.ndarray, uniq: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(uniq, vals)
    ok = valid & (pos < len(uniq))
    u, v = uniq[pos[ok]], vals[ok]
    same = u == v
    if uniq.dtype.kind == "f":  # NaN equals NaN in a SQL join (DuckDB, Spark), not in IEEE
        same |= np.isnan(u) & np.isnan(v)
    ok[ok] &= same
    return np.where(ok, pos, -1).astype(np.int64)


def _codes(col: pa.Array | pa.ChunkedArray, uniq: pa.Array) -> np.ndarray:
    idx = pc.index_in(col, value_set=uniq, skip_nulls=True)
    out: np.ndarray = np.asarray(pc.fill_null(idx, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return out


class KeyIndex:
    """Master rows sorted by their exact composite join key; see the module doc."""

    def __init__(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> None:
        if not keys:
            raise InputError("a join needs at least one key column")
        n = len(keys[0])
        self._uniq: list[pa.Array] = []
        self._dense: list[np.ndarray | None] = []  # sorted combined codes kept after a densify step
        codes = np.zeros(n, dtype=np.int64)
        valid = np.ones(n, dtype=bool)
        card = 1
        self._num: list[np.ndarray | None] = []  # sorted distinct values of a numeric key column
        for col in keys:
            col = _plain_key(col)
            kind = _kind(col.type)
            if kind is not None:
                # numeric keys: codes are positions in the sorted distinct values (no hash table
                # to rebuild per probe, as pc.index_in would)
                vals, ok = _numpy(col, kind)
                nu = np.unique(vals[ok])
                c = _sorted_codes(vals, ok, nu)
                uniq = pa.array(nu)
                self._num.append(nu)
            else:
                uniq = pc.unique(pc.drop_null(col))
                uniq = uniq.combine_chunks() if isinstance(uniq, pa.ChunkedArray) else uniq
                c = _codes(col, uniq)
                self._num.append(None)
            valid &= c >= 0
            size = max(len(uniq), 1)
            if card * size >= _DENSIFY:
                d = np.unique(codes[valid])
                codes = np.where(valid, np.searchsorted(d, codes), 0)
                card = max(len(d), 1)
                self._dense.append(d)
            else:
                self._dense.append(None)
            codes = codes * size + np.maximum(c, 0)
            card *= size
            self._uniq.append(uniq)
        rows = np.flatnonzero(valid).astype(np.int64)
        order = np.argsort(codes[rows], kind="stable")
        self.rows = rows[order]  # master row numbers, sorted by code
        self.codes = codes[self.rows]
        self.num_rows = n
        self.keys = len(np.unique(self.codes)) if len(self.codes) else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the index itself (the rows it points to are counted with their table)."""
        dense = sum(d.nbytes for d in self._dense if d is not None)
        num = sum(u.nbytes for u in self._num if u is not None)
        return int(self.rows.nbytes + self.codes.nbytes + dense + num + sum(u.nbytes for u in self._uniq))

    def probe_codes(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """Return the combined code of each probing row, or -1 where a key is NULL or not among the master's."""
        n = len(keys[0])
        codes = np.zeros(n, dtype=np.int64)
        valid = np.ones(n, dtype=bool)
        for col, uniq, dense, nu in zip(keys, self._uniq, self._dense, self._num, strict=True):
            col = _plain_key(col)
            kind = _kind(col.type)
            if nu is not None and kind is not None and kind == _kind(uniq.type):
                vals, ok = _numpy(col, kind)
                c = _sorted_codes(vals, ok, nu)
            elif nu is not None and kind is not None:  # int against float: compare as float
                vals, ok = _numpy(col, "f")
                c = _sorted_codes(vals, ok, nu.astype(np.float64))
            else:
                t = common_type(uniq.type, col.type)
                c = _codes(_cast(col, t), _cast(uniq, t))
            valid &= c >= 0
            if dense is not None:
                pos = np.searchsorted(dense, codes)
                pos_c = np.minimum(pos, max(len(dense) - 1, 0))
                valid &= (len(dense) > 0) & (dense[pos_c] == codes) if len(dense) else np.zeros(n, bool)
                codes = np.where(valid, pos, 0)
            codes = codes * max(len(uniq), 1) + np.maximum(c, 0)
        return np.where(valid, codes, -1)

    def match(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, np.ndarray]:
        """All matching pairs: (probing row numbers, master row numbers), many-to-many."""
        codes = self.probe_codes(keys)
        lo = np.searchsorted(self.codes, codes, side="left")
        hi = np.searchsorted(self.codes, codes, side="right")
        cnt = np.where(codes >= 0, hi - lo, 0)
        left = np.repeat(np.arange(len(codes), dtype=np.int64), cnt)
        if len(left) == 0:
            return left, np.zeros(0, np.int64)
        starts = np.repeat(lo - np.cumsum(cnt) + cnt, cnt)
        pos = starts + np.arange(len(left), dtype=np.int64)
        return left, self.rows[pos]

    def contains(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """Mask of probing rows whose key is among the master's (NULL never is)."""
        codes = self.probe_codes(keys)
        lo = np.searchsorted(self.codes, codes, side="left")
        hi = np.searchsorted(self.codes, codes, side="right")
        out: np.ndarray = (codes >= 0) & (hi > lo)
        return out
