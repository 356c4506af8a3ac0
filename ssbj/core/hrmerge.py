"""The new row order of H_R after a rebuild, by merging runs instead of sorting every row.

H_R's rows are grouped by value: one run per value, located by the index, and within a
run ordered by the partition read from (``src``), then read order. A rebuild keeps some
runs (not dropped; without the rows of one partition, for a refresh) and adds rows (s_B
at a switch-in, a partition's fresh rows at a refresh). Only the added rows are sorted;
the kept runs, walked in row order straight from the index, are merged with them value
by value. The rebuild then holds an int32 row index and the new tags a row, and the new
runs a value, where sorting every row held ~52 bytes a row (keys, tags, sort order).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ssbj.core.jit import njit
from ssbj.core.refresh import HR_LEN, HR_START

# mypy: disable-error-code="no-any-return"


@njit(cache=True, nogil=True)
def _runs_in_row_order(hused: np.ndarray, hpay: np.ndarray, rows: int) -> np.ndarray:  # pragma: no cover
    """Index slots of the values with rows, in the order of their runs (a counting sort by start)."""
    run_at = np.full(rows, -1, np.int32)
    n = 0
    for j in range(hused.shape[0]):
        if hused[j] and hpay[j, HR_LEN] > 0:
            run_at[hpay[j, HR_START]] = j
            n += 1
    out = np.empty(n, np.int32)
    t = 0
    for r in range(rows):
        if run_at[r] >= 0:
            out[t] = run_at[r]
            t += 1
    return out


@njit(cache=True, nogil=True)
def _count(
    hpay: np.ndarray, slots: np.ndarray, dropped: np.ndarray, src: np.ndarray, drop_src: int
) -> int:  # pragma: no cover
    n = 0
    for s in slots:
        if dropped.shape[0] and dropped[s]:
            continue
        for r in range(hpay[s, HR_START], hpay[s, HR_START] + hpay[s, HR_LEN]):
            if src[r] != drop_src:
                n += 1
    return n


@njit(cache=True, nogil=True)
def _merge(
    hk: np.ndarray,
    hpay: np.ndarray,
    slots: np.ndarray,
    dropped: np.ndarray,
    src: np.ndarray,
    drop_src: int,
    akey: np.ndarray,
    asrc: np.ndarray,
    aperm: np.ndarray,
    base: int,
    order: np.ndarray,
    out_src: np.ndarray,
    ukey: np.ndarray,
    upay: np.ndarray,
) -> int:  # pragma: no cover
    """Fill the new order (an old row, or ``base`` + an added row), tags and runs; return the runs (-1: unsorted)."""
    nv = slots.shape[0]
    na = aperm.shape[0]
    i = 0
    j = 0
    o = 0
    u = 0
    have_prev = False
    prev = kv = 0
    while i < nv or j < na:
        while i < nv and dropped.shape[0] and dropped[slots[i]]:
            i += 1
        if i >= nv and j >= na:
            break
        if i < nv:
            kv = hk[slots[i]]
            if have_prev and kv <= prev:
                return -1  # the old runs are not in value order
        if j >= na:
            k = kv
        elif i >= nv:
            k = akey[aperm[j]]
        else:
            k = min(kv, akey[aperm[j]])
        start = o
        r = r_end = 0
        if i < nv and kv == k:
            r = hpay[slots[i], HR_START]
            r_end = r + hpay[slots[i], HR_LEN]
            prev, have_prev = kv, True
            i += 1
        # the run's kept rows and the added rows of k by partition (ties: kept rows first, as a stable sort)
        while True:
            while r < r_end and src[r] == drop_src:
                r += 1
            more_add = j < na and akey[aperm[j]] == k
            if r < r_end and (not more_add or src[r] <= asrc[aperm[j]]):
                order[o] = r
                out_src[o] = src[r]
                r += 1
            elif more_add:
                order[o] = base + aperm[j]
                out_src[o] = asrc[aperm[j]]
                j += 1
            else:
                break
            o += 1
        if o > start:
            ukey[u] = k
            upay[u, HR_START] = start
            upay[u, HR_LEN] = o - start
            u += 1
    return u


def merge_runs(
    hk: np.ndarray,
    hused: np.ndarray,
    hpay: np.ndarray,
    dropped: np.ndarray,
    src: np.ndarray,
    drop_src: int,
    add_keys: np.ndarray,
    add_src: np.ndarray,
    pay_fields: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Return (order, tags, run keys, run payloads, bytes, runs' bytes) of the rebuilt rows.

    ``hk``/``hused``/``hpay``: H_R's index; ``dropped``: per index slot, whether its value
    leaves (empty: none); ``drop_src``: a partition whose rows are left out (-1: none); the
    added rows come after the ``len(src)`` old rows in ``order``; runs by ascending key,
    each an index payload row (``pay_fields`` int32: start and length set, the rest 0).
    ``bytes``: every temporary allocated here at its nbytes (an upper bound of what is
    alive at once); ``runs' bytes``: the run arrays' (views of larger buffers).
    """
    rows = len(src)
    slots = _runs_in_row_order(hused, hpay, rows)
    held = 4 * rows + slots.nbytes  # (the counting sort's marks, freed)
    add_keys = np.asarray(add_keys, np.int64)
    add_src = np.asarray(add_src, np.int32)
    aperm = np.lexsort((add_src, add_keys)) if len(add_keys) else np.zeros(0, np.int64)
    n = _count(hpay, slots, dropped, src, drop_src) + len(add_keys)
    order = np.empty(n, np.int32)
    out_src = np.empty(n, np.int32)
    most = len(slots) + len(add_keys)
    ukey = np.empty(most, np.int64)
    upay = np.zeros((most, pay_fields), np.int32)
    args = (src, drop_src, add_keys, add_src, aperm, rows, order, out_src, ukey, upay)
    u = _merge(hk, hpay, slots, dropped, *args)
    if u < 0:  # runs out of value order (a switch-in alone appends, Cache.rebuild): walk them by value
        slots = np.flatnonzero(hused & (hpay[:, HR_LEN] > 0)).astype(np.int32)
        slots = slots[np.argsort(hk[slots], kind="stable")]
        held += 3 * slots.nbytes
        u = _merge(hk, hpay, slots, dropped, *args)
    runs = ukey.nbytes + upay.nbytes
    held += aperm.nbytes + order.nbytes + out_src.nbytes + runs
    return order, out_src, ukey[:u], upay[:u], int(held), int(runs)


@njit(cache=True, nogil=True)
def _gather(
    old: np.ndarray, add: np.ndarray, order: np.ndarray, base: int, out: np.ndarray
) -> None:  # pragma: no cover
    """Rows (of bytes) of ``old``, or of ``add`` past ``base``, in ``order``."""
    width = out.shape[1]
    for o in range(order.shape[0]):
        r = order[o]
        if r < base:
            for b in range(width):
                out[o, b] = old[r, b]
        else:
            for b in range(width):
                out[o, b] = add[r - base, b]


def _rows_2d(arr: pa.Array) -> np.ndarray | None:
    """Return a fixed-width column without NULLs as (rows, width) bytes (a view of its buffer), else None."""
    t = arr.type
    plain = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_fixed_size_binary(t)
    plain = plain or pa.types.is_temporal(t) or pa.types.is_decimal(t)
    if not plain or arr.null_count:
        return None
    width = t.bit_width // 8
    buf = arr.buffers()[1]
    if width < 1 or buf is None:
        return None
    return np.frombuffer(buf, np.uint8, len(arr) * width, arr.offset * width).reshape(len(arr), width)


def reorder_column(old: pa.Array, add: pa.ChunkedArray | None, order: np.ndarray) -> tuple[pa.Array, int]:
    """Return the new column (``order`` over the old rows, then the added ones) and its temporaries' bytes.

    A fixed-width column without NULLs is gathered straight from both: no merged copy, the
    new column is the only one; others are concatenated, then taken.
    """
    if add is None or len(add) == 0:
        new = old.take(pa.array(order))
        return new, int(new.nbytes)
    extra = add.combine_chunks()
    copied = int(extra.nbytes) if add.num_chunks > 1 else 0
    old2, add2 = _rows_2d(old), _rows_2d(extra)
    if old2 is None or add2 is None or old.type != extra.type:
        merged = pa.concat_arrays([old, extra])
        new = merged.take(pa.array(order))
        return new, int(merged.nbytes + new.nbytes) + copied
    out = np.empty((len(order), old2.shape[1]), np.uint8)
    _gather(old2, add2, order, len(old), out)
    new = pa.Array.from_buffers(old.type, len(order), [None, pa.py_buffer(out)])
    return new, int(out.nbytes) + copied
