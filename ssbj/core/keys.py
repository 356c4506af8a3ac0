"""Join keys as 64-bit integers: exact for integer-like types, hashed for strings and binaries."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.hashing import mix
from ssbj.core.jit import njit
from ssbj.errors import InputError


def key_family(t: pa.DataType) -> str:
    """Family of a key type; two key columns can be joined only within one family."""
    if pa.types.is_dictionary(t):
        return key_family(t.value_type)
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_temporal(t):
        return f"temporal:{t}"
    raise InputError(
        f"join key type {t} is not supported (use integer, string, binary, decimal, boolean, "
        "date or timestamp keys; floating-point keys do not compare reliably)"
    )


def check_compatible(stream_type: pa.DataType, master_type: pa.DataType) -> str:
    """Family shared by both key types; raises InputError on a mismatch."""
    fs, fm = key_family(stream_type), key_family(master_type)
    if fs != fm:
        raise InputError(
            f"stream key type {stream_type} and master key type {master_type} are incompatible ({fs} vs {fm})"
        )
    return fs


@njit(cache=True)
def hash_bytes(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """64-bit FNV-1a of each variable-length value, finalised with splitmix64."""
    for i in range(out.shape[0]):
        h = np.uint64(0xCBF29CE484222325)
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * np.uint64(0x100000001B3)
        out[i] = np.int64(mix(h) & np.uint64(0x7FFFFFFFFFFFFFFF))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class EncodedKeys:
    """Join keys of a batch: ``values`` is meaningful only where ``valid``."""

    values: np.ndarray  # int64
    valid: np.ndarray  # bool; False for NULL keys, which never match


def _hash_varlen(arr: pa.Array) -> np.ndarray:
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary_view(arr.type):
        arr = arr.cast(pa.large_binary())
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    off_dtype = np.int64 if large else np.int32
    offsets = np.frombuffer(bufs[1], dtype=off_dtype)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    out = np.empty(len(arr), dtype=np.int64)
    hash_bytes(offsets.astype(np.int64, copy=False), data, out)
    return out


def encoded_in_place(col: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a key column's encoding is a view of its own buffer (int64 without NULLs), not a new one."""
    return bool(col.type == pa.int64() and col.null_count == 0)


def _encode_array(arr: pa.Array, family: str) -> np.ndarray:
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if family == "integer":
        if encoded_in_place(arr):
            # the Arrow buffer itself (read-only): no copy of the keys, no bytes of their own
            return np.asarray(arr.to_numpy(zero_copy_only=True))
        if arr.null_count == 0 and arr.type != pa.uint64():
            # no nulls to fill and a lossless widening: skip two compute kernels per call
            return np.array(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
        if arr.type == pa.uint64():
            arr = pc.cast(arr, pa.int64(), safe=True)
        filled = pc.fill_null(pc.cast(arr, pa.int64()), 0)
        return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int64)
    if family == "boolean":
        return np.asarray(pc.fill_null(pc.cast(arr, pa.int64()), 0).to_numpy(), dtype=np.int64)
    if family.startswith("temporal:"):
        width = arr.type.bit_width
        storage = arr.view(pa.int64() if width == 64 else pa.int32())
        return np.asarray(pc.fill_null(pc.cast(storage, pa.int64()), 0).to_numpy(), dtype=np.int64)
    if family == "decimal":
        return _hash_varlen(pc.cast(arr, pa.string()))
    return _hash_varlen(arr)


def encode_keys(col: pa.Array | pa.ChunkedArray, family: str) -> EncodedKeys:
    """Encode a key column (any supported type) into int64 join values and a validity mask."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n = len(col)
    valid = (
        np.ones(n, dtype=bool)
        if col.null_count == 0
        else np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    )
    values = _encode_array(col, family) if n else np.zeros(0, dtype=np.int64)
    return EncodedKeys(values=values, valid=valid)


def needs_verification(family: str) -> bool:
    """Whether equal 64-bit values may still be different keys (hash collisions)."""
    return family in ("string", "binary", "decimal")


def is_exact(family: str) -> bool:
    """Whether the 64-bit encoding of a key family is lossless (integers, booleans, temporal)."""
    return family in ("integer", "boolean") or family.startswith("temporal:")


def decode_keys(values: np.ndarray, t: pa.DataType, family: str) -> pa.Array:
    """Key column of type ``t`` from encoded values (inverse of the encoding of exact families)."""
    values = np.asarray(values, dtype=np.int64)
    if pa.types.is_dictionary(t):
        raise InputError("dictionary keys are hashed, not decoded")
    if family == "integer":
        return pa.array(values, pa.int64()).cast(t, safe=False)
    if family == "boolean":
        return pa.array(values != 0, pa.bool_())
    if family.startswith("temporal:"):
        if t.bit_width == 64:
            return pa.array(values, pa.int64()).view(t)
        return pa.array(values.astype(np.int32), pa.int32()).view(t)
    raise InputError(f"keys of family {family} cannot be decoded")
