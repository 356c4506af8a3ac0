"""How the array engine stores values as int64 words (:mod:`ssbj.cq.fastcore`), and back.

A slot's values by type: integers and booleans as one word, a decimal as its two 64-bit
halves, a float as its bits, dates, times, timestamps and durations as their integer
view, a string as its code in a per-slot dictionary (codes in order of first sight).
Integer keys are int64 words with a NULL mask.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.cq.query import QueryPlan


def slot_kind(t: pa.DataType) -> tuple[str, int] | None:
    """How a slot of type ``t`` is stored: (kind, words), or None if not supported."""
    if pa.types.is_boolean(t):
        return "bool", 1
    if pa.types.is_integer(t) and t != pa.uint64():
        return "int", 1
    if pa.types.is_decimal128(t):
        return "dec", 2
    if pa.types.is_floating(t):
        return "float", 1
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return "i32view", 1
    if pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        return "i64view", 1
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "str", 1
    return None


def int_words(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """int64 values (0 where NULL) and the NULL mask of an integer column."""
    if not arr.null_count:  # the common case: no fill, no mask
        return np.asarray(arr if arr.type == pa.int64() else arr.cast(pa.int64())), np.zeros(len(arr), bool)
    return np.asarray(pc.fill_null(arr, 0).cast(pa.int64())), np.asarray(arr.is_null())


class SlotCodec:
    """The encoding of every slot of one plan, with the string slots' dictionaries."""

    def __init__(self, plan: QueryPlan) -> None:
        self.plan = plan
        kinds = [slot_kind(s.type) for s in plan.slots]  # type: ignore[arg-type]
        self.kinds: list[tuple[str, int]] = [k for k in kinds if k is not None]
        self.dicts: dict[int, list[str]] = {si: [] for si, k in enumerate(self.kinds) if k[0] == "str"}
        self._codes: dict[int, dict[str, int]] = {si: {} for si in self.dicts}

    def encode(self, si: int, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Words [n, w] and NULL flags of slot ``si``'s values (0 where NULL)."""
        kind, nw = self.kinds[si]
        n = len(arr)
        nulls = np.asarray(arr.is_null()) if arr.null_count else np.zeros(n, bool)
        words = np.zeros((n, nw), np.int64)
        if n == 0:
            return words, nulls
        if kind in ("int", "bool"):
            words[:, 0] = np.asarray(pc.fill_null(arr, 0 if kind == "int" else False).cast(pa.int64()))
        elif kind == "dec":
            buf = np.frombuffer(arr.buffers()[1], dtype=np.int64)[2 * arr.offset : 2 * (arr.offset + n)]
            words[:] = buf.reshape(n, 2)
        elif kind == "float":
            words[:, 0] = np.asarray(pc.fill_null(arr.cast(pa.float64()), 0.0)).view(np.int64)
        elif kind == "i32view":
            words[:, 0] = np.asarray(pc.fill_null(arr.view(pa.int32()), 0))
        elif kind == "i64view":
            words[:, 0] = np.asarray(pc.fill_null(arr.view(pa.int64()), 0))
        else:  # a string: its code in the slot's dictionary
            arr = arr.cast(pa.string())
            uniq = pc.unique(arr.drop_null())
            codes = self._codes[si]
            values = self.dicts[si]
            lut = np.empty(len(uniq), np.int64)
            for i, v in enumerate(uniq.to_pylist()):
                c = codes.get(v)
                if c is None:
                    c = codes[v] = len(values)
                    values.append(v)
                lut[i] = c
            idx = np.asarray(pc.fill_null(pc.index_in(arr, value_set=uniq), 0))
            words[:, 0] = lut[idx] if len(lut) else 0
        if nulls.any():
            words[nulls] = 0
        return words, nulls

    def decode(self, si: int, words: np.ndarray, nulls: np.ndarray) -> pa.Array:
        """Invert :meth:`encode` for one slot's words [n, w]."""
        kind, _ = self.kinds[si]
        t = self.plan.slots[si].type
        n = len(words)
        mask = nulls.astype(bool) if nulls.any() else None
        w0 = np.ascontiguousarray(words[:, 0])
        if kind == "int":
            return pa.array(w0, pa.int64(), mask=mask).cast(t)
        if kind == "bool":
            return pa.array(w0 != 0, pa.bool_(), mask=mask)
        if kind == "float":
            return pa.array(w0.view(np.float64), pa.float64(), mask=mask).cast(t)
        if kind == "i32view":
            return pa.array(w0.astype(np.int32), pa.int32(), mask=mask).view(t)
        if kind == "i64view":
            return pa.array(w0, pa.int64(), mask=mask).view(t)
        if kind == "dec":
            data = pa.py_buffer(np.ascontiguousarray(words[:, :2]).tobytes())
            valid = None if mask is None else pa.array(~mask, pa.bool_()).buffers()[1]
            return pa.Array.from_buffers(t, n, [valid, data], null_count=-1)
        dictionary = pa.array(self.dicts[si], pa.string())
        out = dictionary.take(pa.array(w0, pa.int64(), mask=mask)) if n else pa.array([], pa.string())
        return out.cast(t)

    def set_dicts(self, dicts: dict[int, list[str]]) -> None:
        """Take the string dictionaries of a saved state (the codes follow their order)."""
        self.dicts = {int(si): list(v) for si, v in dicts.items()}
        self._codes = {si: {v: i for i, v in enumerate(vals)} for si, vals in self.dicts.items()}
