"""Stream rows of H_S in a columnar ring: raw Arrow bytes per tuple, nothing more.

Tuples are addressed by *slot*, a global counter; slot ``s`` lives at position
``s % cap``. Chunks enter at the young end and leave at the old end (the MESHJOIN queue
is FIFO), so the live slots are always one range ``[lo, hi)``.

* fixed-width columns (integers, floats, temporal, decimals, fixed-size binary) keep
  their value bytes in a ``(cap, width)`` array; booleans one byte each;
* string and binary columns keep their bytes in a byte ring plus one 4-byte start per slot
  (Arrow's own layout has a 4-byte offset): the low 32 bits of the global byte counter,
  which :func:`_gstart` widens back against the head (the live bytes are fewer than 2^32);
* a validity byte per slot is allocated only for a column that has had a NULL;
* anything else (dictionaries, nested types) is kept as Arrow segments
  (:class:`ssbj.core.hsrows.HSRows`).

Capacities change only through :meth:`RowRing.set_capacity`, so the bytes reported are
the bytes held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ssbj.core.hsrows import HSRows
from ssbj.core.jit import njit
from ssbj.core.rowsize import value_bytes
from ssbj.errors import StateError

# mypy: disable-error-code="return-value,arg-type,no-any-return"


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return "other"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return "var32"
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return "var64"
    try:
        width = t.bit_width
    except ValueError:  # not a fixed-width type
        return "other"
    if width > 0 and width % 8 == 0 and not pa.types.is_nested(t):
        return "fixed"
    return "other"


_LOW32 = 0xFFFFFFFF


def _byte_ring(dcap: int) -> np.ndarray:
    if dcap > _LOW32:  # starts keep 32 bits: the live bytes must stay below 2^32
        raise StateError(f"a string column of H_S would hold {dcap} bytes (at most 2^32 - 1)")
    return np.zeros(dcap, dtype=np.uint8)


@njit(cache=True)
def _gstart(starts: np.ndarray, p: int, head: int) -> int:  # pragma: no cover - compiled
    """Global byte offset of the start kept at position ``p`` (its low 32 bits, ``head`` after it)."""
    return head - ((head - np.int64(starts[p])) & _LOW32)


@njit(cache=True)
def _put_var(
    starts: np.ndarray, data: np.ndarray, src_off: np.ndarray, src: np.ndarray, pos0: int, head: int
) -> int:  # pragma: no cover - compiled
    """Append rows (offsets ``src_off`` into ``src``) at slot positions from ``pos0``; returns new head."""
    cap = starts.shape[0]
    dcap = data.shape[0]
    n = src_off.shape[0] - 1
    for i in range(n):
        p = pos0 + i
        if p >= cap:
            p -= cap
        starts[p] = head & _LOW32
        for j in range(src_off[i], src_off[i + 1]):
            data[head % dcap] = src[j]
            head += 1
    return head


@njit(cache=True)
def _var_lengths(starts: np.ndarray, slots: np.ndarray, hi: int, head: int) -> np.ndarray:  # pragma: no cover
    cap = starts.shape[0]
    out = np.empty(slots.shape[0] + 1, dtype=np.int64)
    out[0] = 0
    for i in range(slots.shape[0]):
        s = slots[i]
        st = _gstart(starts, s % cap, head)
        en = head if s + 1 >= hi else _gstart(starts, (s + 1) % cap, head)
        out[i + 1] = out[i] + en - st
    return out


@njit(cache=True)
def _gather_var(
    starts: np.ndarray, data: np.ndarray, slots: np.ndarray, hi: int, head: int, offsets: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover
    cap = starts.shape[0]
    dcap = data.shape[0]
    for i in range(slots.shape[0]):
        s = slots[i]
        st = _gstart(starts, s % cap, head)
        o = offsets[i]
        n = offsets[i + 1] - o
        for j in range(n):
            out[o + j] = data[(st + j) % dcap]


@njit(cache=True)
def _relayout_var(
    starts: np.ndarray,
    data: np.ndarray,
    lo: int,
    hi: int,
    head: int,
    nstarts: np.ndarray,
    ndata: np.ndarray,
) -> None:  # pragma: no cover
    """Copy live slots [lo, hi) into arrays of other capacities (global offsets are kept)."""
    cap, ncap = starts.shape[0], nstarts.shape[0]
    dcap, ndcap = data.shape[0], ndata.shape[0]
    if hi > lo:
        first = _gstart(starts, lo % cap, head)
        for b in range(first, head):
            ndata[b % ndcap] = data[b % dcap]
    for s in range(lo, hi):
        nstarts[s % ncap] = starts[s % cap]


def _slots(a: np.ndarray) -> np.ndarray:
    """One element per slot: a (cap, width) byte array as a 1-D view of width-byte items.

    NumPy gathers and scatters 1-D items ~9x faster than rows of a 2-D byte array.
    """
    return a.view(np.dtype((np.void, a.shape[1]))).reshape(a.shape[0]) if a.ndim == 2 else a


def _to_u8(buf: pa.Buffer | None) -> np.ndarray:
    return np.zeros(0, np.uint8) if buf is None else np.frombuffer(buf, dtype=np.uint8)


def _unpack_bits(buf: pa.Buffer | None, offset: int, n: int, default: int) -> np.ndarray:
    if buf is None:
        return np.full(n, default, dtype=np.uint8)
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return bits[offset : offset + n].astype(np.uint8, copy=False)


@dataclass
class _Col:
    name: str
    type: pa.DataType
    kind: str
    width: int = 0
    data: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))  # low 32 bits (_gstart)
    valid: np.ndarray | None = None
    head: int = 0  # var: global byte counter (bytes ever written)
    appended: int = 0  # var: bytes ever appended (each column's share of a var_extra)

    def nbytes(self) -> int:
        n = int(self.data.nbytes + self.starts.nbytes)
        return n + (int(self.valid.nbytes) if self.valid is not None else 0)


class RowRing:
    """Columnar ring of stream rows; see the module doc."""

    def __init__(self, schema: pa.Schema, names: list[str], cap: int = 64) -> None:
        self.schema = schema
        self.names = names
        self._cols: list[_Col] = []
        other = []
        for n in names:
            t = schema.field(n).type
            k = _kind(t)
            if k == "other":
                other.append(n)
                continue
            c = _Col(n, t, k)
            if k == "fixed":
                c.width = t.bit_width // 8
            self._cols.append(c)
        self._other_names = other
        self._other = HSRows(pa.schema([schema.field(n) for n in other])) if other else None
        self._row_fixed = self._fixed_row_bytes()  # (the schema's: once, not every step)
        self.cap = 0
        self.lo = 0
        self.hi = 0
        self._alloc(cap, 64)

    # ------------------------------------------------------------ capacity
    def _alloc(self, cap: int, dcap_min: int) -> None:
        for c in self._cols:
            if c.kind == "fixed":
                c.data = np.zeros((cap, c.width), dtype=np.uint8)
            elif c.kind == "bool":
                c.data = np.zeros(cap, dtype=np.uint8)
            else:
                c.starts = np.zeros(cap, dtype=np.uint32)
                c.data = np.zeros(max(dcap_min, 64), dtype=np.uint8)
        self.cap = cap

    @property
    def var_bytes(self) -> int:
        """Bytes of string/binary values held for the live slots."""
        return sum(self._live_var(c) for c in self._cols if c.kind.startswith("var"))

    @property
    def var_capacity(self) -> int:
        """Bytes of the string/binary byte rings (held, live or not)."""
        return sum(int(c.data.shape[0]) for c in self._cols if c.kind.startswith("var"))

    def _var_shares(self) -> dict[str, float]:
        """Each string/binary column's share of the bytes appended so far (equal before any)."""
        var = [c for c in self._cols if c.kind.startswith("var")]
        total = sum(c.appended for c in var)
        return {c.name: (c.appended / total if total else 1.0 / len(var)) for c in var}

    def _live_var(self, c: _Col) -> int:
        if self.hi == self.lo:
            return 0
        return c.head - int(_gstart(c.starts, self.lo % self.cap, c.head))

    def set_capacity(self, cap: int, var_extra: int = 0) -> None:
        """Re-lay the live slots out at ``cap`` slots and byte rings with ``var_extra`` free bytes.

        ``var_extra`` is shared among the string/binary columns as the bytes appended to
        them so far are (each column its own byte ring).
        """
        cap = max(cap, self.hi - self.lo, 1)
        lo, hi = self.lo, self.hi
        live = np.arange(lo, hi, dtype=np.int64)
        old_pos = live % self.cap if self.cap else live
        new_pos = live % cap
        shares = self._var_shares() if any(c.kind.startswith("var") for c in self._cols) else {}
        for c in self._cols:
            if c.kind in ("fixed", "bool"):
                shape = (cap, c.width) if c.kind == "fixed" else (cap,)
                nd = np.zeros(shape, dtype=np.uint8)
                _slots(nd)[new_pos] = _slots(c.data)[old_pos]
                c.data = nd
            else:
                dcap = max(64, self._live_var(c) + int(var_extra * shares[c.name]))
                ns = np.zeros(cap, dtype=np.uint32)
                ndata = _byte_ring(dcap)
                _relayout_var(c.starts, c.data, lo, hi, c.head, ns, ndata)
                c.starts, c.data = ns, ndata
            if c.valid is not None:
                nv = np.ones(cap, dtype=np.uint8)
                nv[new_pos] = c.valid[old_pos]
                c.valid = nv
        self.cap = cap

    def _fixed_row_bytes(self) -> int | None:
        """Return a row's bytes beyond its strings, as ``row_nbytes`` counts them, if the byte rings hold its strings.

        ``None`` without string/binary columns (the slots alone bound the rows), with columns
        kept as Arrow segments, or with a column not stored here that is not fixed-width.
        """
        if self._other is not None or not any(c.kind.startswith("var") for c in self._cols):
            return None
        total = 0
        for f in self.schema:  # a row's bytes count the columns not stored here too (the join key)
            width = value_bytes(f.type)
            if width is None or (f.name not in self.names and _kind(f.type) != "fixed"):
                return None
            total += width
        return total

    def byte_room(self) -> tuple[int, int] | None:
        """Return (a row's bytes beyond its strings, string bytes the byte rings still take), as ``row_nbytes`` counts.

        The byte rings fill in proportion to the bytes appended to each so far (exact for
        one); ``None`` where :meth:`_fixed_row_bytes` is.
        """
        if self._row_fixed is None:
            return None
        var = [c for c in self._cols if c.kind.startswith("var")]
        shares = self._var_shares()
        room = min((int(c.data.shape[0]) - self._live_var(c)) / max(shares[c.name], 1e-9) for c in var)
        return self._row_fixed, max(int(room), 0)

    def nbytes(self) -> int:
        """Bytes held (rings at capacity, plus the Arrow segments of other columns)."""
        n = sum(c.nbytes() for c in self._cols)
        if self._other is not None:
            n += self._other.nbytes
        return n

    def slot_bytes(self) -> float:
        """Return the fixed bytes per slot of capacity (value widths, start offsets, validity)."""
        n = 0.0
        for c in self._cols:
            if c.kind == "fixed":
                n += c.width
            elif c.kind == "bool":
                n += 1
            else:
                n += 4
            if c.valid is not None:
                n += 1
        return n

    # ------------------------------------------------------------ rows
    def append(self, table: pa.Table) -> None:
        """Add ``table``'s rows as slots ``[hi, hi + n)``; capacity must suffice."""
        n = table.num_rows
        if n == 0:
            return
        if self.hi + n - self.lo > self.cap:
            raise StateError("RowRing capacity exceeded")  # the operator sizes the ring first
        pos0 = self.hi % self.cap
        first = min(n, self.cap - pos0)
        for c in self._cols:
            arr = table.column(c.name)
            arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
            bufs = arr.buffers()
            if c.kind == "fixed":
                raw = _to_u8(bufs[1])[arr.offset * c.width : (arr.offset + n) * c.width].reshape(n, c.width)
                c.data[pos0 : pos0 + first] = raw[:first]
                c.data[: n - first] = raw[first:]
            elif c.kind == "bool":
                vals = _unpack_bits(bufs[1], arr.offset, n, 0)
                c.data[pos0 : pos0 + first] = vals[:first]
                c.data[: n - first] = vals[first:]
            else:
                odt = np.int32 if c.kind == "var32" else np.int64
                off = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + n + 1].astype(np.int64)
                c.appended += int(off[-1] - off[0])
                need = self._live_var(c) + int(off[-1] - off[0])
                if need > c.data.shape[0]:
                    self._grow_var(c, need)
                c.head = int(_put_var(c.starts, c.data, off, _to_u8(bufs[2]), pos0, c.head))
            if arr.null_count:
                if c.valid is None:
                    c.valid = np.ones(self.cap, dtype=np.uint8)
                v = _unpack_bits(bufs[0], arr.offset, n, 1)
                c.valid[pos0 : pos0 + first] = v[:first]
                c.valid[: n - first] = v[first:]
            elif c.valid is not None:
                c.valid[pos0 : pos0 + first] = 1
                c.valid[: n - first] = 1
        if self._other is not None:
            self._other.append(self.hi, table.select(self._other_names))
        self.hi += n

    def _grow_var(self, c: _Col, need: int) -> None:
        # to what is needed and a little more, not geometrically: under a budget the rings
        # are re-sized at every R-cycle start, and a larger ring would be held until then
        dcap = need + need // 16
        ns = np.zeros(self.cap, dtype=np.uint32)
        ndata = _byte_ring(dcap)
        _relayout_var(c.starts, c.data, self.lo, self.hi, c.head, ns, ndata)
        c.starts, c.data = ns, ndata

    def drop_before(self, slot: int) -> None:
        """Forget slots < ``slot`` (expiry of the oldest chunks)."""
        self.lo = max(self.lo, min(slot, self.hi))
        if self._other is not None:
            self._other.drop_before(self.lo)

    def take(self, slots: np.ndarray) -> dict[str, pa.Array]:
        """Arrays of the stored columns for live ``slots``, in the order given."""
        n = len(slots)
        slots = np.asarray(slots, dtype=np.int64)
        pos = slots % self.cap
        out: dict[str, pa.Array] = {}
        for c in self._cols:
            validity = None
            nulls = 0
            if c.valid is not None:
                v = c.valid[pos]
                nulls = int(n - np.count_nonzero(v))
                if nulls:
                    validity = pa.py_buffer(np.packbits(v, bitorder="little"))
            if c.kind == "fixed":
                buf = pa.py_buffer(_slots(c.data)[pos])
                out[c.name] = pa.Array.from_buffers(c.type, n, [validity, buf], null_count=nulls)
            elif c.kind == "bool":
                buf = pa.py_buffer(np.packbits(c.data[pos], bitorder="little"))
                out[c.name] = pa.Array.from_buffers(c.type, n, [validity, buf], null_count=nulls)
            else:
                offs = _var_lengths(c.starts, slots, self.hi, c.head)
                data = np.empty(int(offs[-1]), dtype=np.uint8)
                _gather_var(c.starts, c.data, slots, self.hi, c.head, offs, data)
                odt = np.int32 if c.kind == "var32" else np.int64
                out[c.name] = pa.Array.from_buffers(
                    c.type, n, [validity, pa.py_buffer(offs.astype(odt)), pa.py_buffer(data)], null_count=nulls
                )
        if self._other is not None:
            t = self._other.take(slots)
            for name in self._other_names:
                col = t.column(name)
                out[name] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return out
