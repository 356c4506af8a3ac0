"""Compiled kernels for the operator's hash structures.

Every hash structure of the paper is a set of flat NumPy arrays driven by these
``numba`` kernels, so one step costs O(b + w + output) with no per-tuple Python.

* The *key table* is an open-addressing index (``tkeys``, ``trec``) from a 64-bit join
  value to a record; ``kv[record, FIELD]`` holds the per-join-value state (H_S chain head
  and counts, s_count, f_count, cache flags, H_R CSR range).  Records are dense and
  recycled through a free stack, so the sparse index costs 12 bytes a slot and the
  136-byte records are allocated only for values that exist.
* H_S is a ring of stream-tuple slots (global, monotonically increasing ids) with a
  per-join-value chain newest -> oldest.  The queue is FIFO, so the live slots are
  always ``[live_lo, next_slot)``; a chain walk stops at the first slot that has
  expired or was removed when its join value moved to the cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# The bodies below are compiled by numba and work on NumPy scalars; mypy sees them as
# Python and cannot tell np.int64 from int, so those two codes are silenced here only.
# mypy: disable-error-code="return-value,arg-type,no-any-return"

# Index slots hold a record id, or one of these.
EMPTY = -1
TOMB = -2

# Fields of kv[entry, :].
HS_HEAD = 0  # newest live H_S slot of this join value, -1 if none
HS_COUNT = 1  # live stream tuples in H_S
HS_BYTES = 2  # bytes of those tuples (n * v_S side of the cache inequality)
S_ROWS = 3  # s_count: master rows seen in the incrementing R-cycle
S_BYTES = 4  # bytes of those master rows (m * v_R side)
TRACK_SINCE = 5  # step at which tracking of this join value (re)started
DECIDED_CYCLE = 6  # R-cycle in which the switching decision was taken
SWITCHING = 7  # 1 while the value's master rows are collected in s_B
CACHED = 8  # 1 while the value is served by H_R
F_COUNT = 9  # f_count: cache hits since F_SINCE
F_BYTES = 10  # bytes of those stream tuples
F_SINCE = 11  # R-cycle at which f_count started counting
HR_START = 12  # first row of the value in H_R
HR_LEN = 13  # number of master rows of the value in H_R (0: empty entry)
HR_BYTES = 14  # bytes of those rows
REMOVED_UPTO = 15  # slots <= this are not in H_S for this value
LAST_SEEN = 16  # step of the value's latest H_S insert (garbage collection)
KEY = 17  # the join value itself (to find the index slot from a record)
NFIELDS = 18


@njit(cache=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    # splitmix64 finaliser: spreads sequential ids over the table
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def hash_bytes(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """64-bit FNV-1a of each variable-length value, finalised with splitmix64."""
    for i in range(out.shape[0]):
        h = np.uint64(0xCBF29CE484222325)
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * np.uint64(0x100000001B3)
        out[i] = np.int64(_mix(h) & np.uint64(0x7FFFFFFFFFFFFFFF))


@njit(cache=True, inline="always")
def _find(tkeys: np.ndarray, trec: np.ndarray, key: int) -> int:  # pragma: no cover
    mask = tkeys.shape[0] - 1
    i = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
    while True:
        r = trec[i]
        if r == EMPTY:
            return -1
        if r >= 0 and tkeys[i] == key:
            return r
        i = (i + 1) & mask


@njit(cache=True)
def _init_entry(kv: np.ndarray, e: int, key: int, now_step: int, first_slot: int) -> None:  # pragma: no cover
    for f in range(NFIELDS):
        kv[e, f] = 0
    kv[e, HS_HEAD] = -1
    kv[e, TRACK_SINCE] = now_step
    kv[e, DECIDED_CYCLE] = -1
    kv[e, REMOVED_UPTO] = first_slot - 1
    kv[e, LAST_SEEN] = now_step
    kv[e, KEY] = key


@njit(cache=True)
def _get_or_create(
    tkeys: np.ndarray,
    trec: np.ndarray,
    kv: np.ndarray,
    rstate: np.ndarray,
    free: np.ndarray,
    meta: np.ndarray,
    key: int,
    now_step: int,
    first_slot: int,
) -> tuple[int, int]:  # pragma: no cover
    """Record of ``key``, created if missing; returns (record, 1 if created)."""
    mask = tkeys.shape[0] - 1
    i = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
    tomb = np.int64(-1)
    while True:
        r = trec[i]
        if r == EMPTY:
            break
        if r >= 0 and tkeys[i] == key:
            return r, np.int64(0)
        if r == TOMB and tomb < 0:
            tomb = i
        i = (i + 1) & mask
    if tomb >= 0:
        i = tomb
    meta[0] -= 1
    e = free[meta[0]]
    rstate[e] = 1
    tkeys[i] = key
    trec[i] = e
    _init_entry(kv, e, key, now_step, first_slot)
    return e, np.int64(1)


@njit(cache=True)
def _release(
    tkeys: np.ndarray, trec: np.ndarray, rstate: np.ndarray, free: np.ndarray, meta: np.ndarray, kv: np.ndarray, e: int
) -> None:  # pragma: no cover
    key = kv[e, KEY]
    mask = tkeys.shape[0] - 1
    i = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
    while trec[i] != e:
        i = (i + 1) & mask
    trec[i] = TOMB
    rstate[e] = 0
    free[meta[0]] = e
    meta[0] += 1


@njit(cache=True)
def lookup_many(
    tkeys: np.ndarray, trec: np.ndarray, keys: np.ndarray, valid: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """Record per key, -1 where absent or the key is NULL."""
    out = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        out[i] = _find(tkeys, trec, keys[i]) if valid[i] else -1
    return out


@njit(cache=True)
def rehash(kv: np.ndarray, rstate: np.ndarray, new_cap: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Rebuild the index at ``new_cap`` slots from the live records (drops tombstones)."""
    nk = np.zeros(new_cap, dtype=np.int64)
    nr = np.full(new_cap, EMPTY, dtype=np.int32)
    mask = new_cap - 1
    for e in range(rstate.shape[0]):
        if rstate[e] != 1:
            continue
        key = kv[e, KEY]
        j = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
        while nr[j] != EMPTY:
            j = (j + 1) & mask
        nk[j] = key
        nr[j] = e
    return nk, nr


@njit(cache=True)
def cache_probe(
    tkeys: np.ndarray,
    trec: np.ndarray,
    kv: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    row_bytes: np.ndarray,
    start: int,
    miss_budget_bytes: int,
    miss_bytes_used: int,
    max_tuples: int,
    use_cache: bool,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int]:  # pragma: no cover
    """Cache phase over ``keys[start:]``: probe H_R, stop when the H_S chunk is full.

    Returns (consumed, hit_entry, miss_idx, null_idx, miss_bytes_used); ``hit_entry``
    has one value per consumed tuple: the H_R entry, or -1 (miss or NULL).
    """
    n = keys.shape[0]
    hit_entry = np.full(n - start, -1, dtype=np.int64)
    miss_idx = np.empty(n - start, dtype=np.int64)
    null_idx = np.empty(n - start, dtype=np.int64)
    nm = 0
    nn = 0
    i = start
    limit = min(n, start + max_tuples)
    while i < limit:
        if miss_bytes_used >= miss_budget_bytes:
            break  # the H_S chunk is full: this step reads no further tuple
        if not valid[i]:
            null_idx[nn] = i
            nn += 1
            i += 1
            continue
        e = _find(tkeys, trec, keys[i]) if use_cache else np.int64(-1)
        if e >= 0 and kv[e, CACHED] == 1:
            hit_entry[i - start] = e
            kv[e, F_COUNT] += 1
            kv[e, F_BYTES] += row_bytes[i]
        else:
            if miss_bytes_used + row_bytes[i] > miss_budget_bytes and miss_bytes_used > 0:
                break
            miss_idx[nm] = i
            nm += 1
            miss_bytes_used += row_bytes[i]
        i += 1
    return i - start, hit_entry[: i - start], miss_idx[:nm], null_idx[:nn], miss_bytes_used


@njit(cache=True)
def expand_cache_hits(
    hit_entry: np.ndarray, kv: np.ndarray, offset: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Output pairs (stream index, H_R row) of the cache hits."""
    total = 0
    for i in range(hit_entry.shape[0]):
        e = hit_entry[i]
        if e >= 0:
            total += kv[e, HR_LEN]
    ps = np.empty(total, dtype=np.int64)
    pr = np.empty(total, dtype=np.int64)
    k = 0
    for i in range(hit_entry.shape[0]):
        e = hit_entry[i]
        if e < 0:
            continue
        st = kv[e, HR_START]
        for r in range(st, st + kv[e, HR_LEN]):
            ps[k] = i + offset
            pr[k] = r
            k += 1
    return ps, pr


@njit(cache=True)
def hs_insert(
    tkeys: np.ndarray,
    trec: np.ndarray,
    kv: np.ndarray,
    rstate: np.ndarray,
    free: np.ndarray,
    meta: np.ndarray,
    ring_key: np.ndarray,
    ring_next: np.ndarray,
    ring_bytes: np.ndarray,
    ring_matched: np.ndarray,
    keys: np.ndarray,
    row_bytes: np.ndarray,
    base_slot: int,
    now_step: int,
) -> int:  # pragma: no cover
    """Append a chunk to H_S and the queue; returns the number of entries created."""
    mask = ring_key.shape[0] - 1
    created = 0
    for i in range(keys.shape[0]):
        s = base_slot + i
        e, c = _get_or_create(tkeys, trec, kv, rstate, free, meta, keys[i], now_step, s)
        created += c
        j = s & mask
        ring_key[j] = keys[i]
        ring_bytes[j] = row_bytes[i]
        ring_matched[j] = 0
        ring_next[j] = kv[e, HS_HEAD]
        kv[e, HS_HEAD] = s
        kv[e, HS_COUNT] += 1
        kv[e, HS_BYTES] += row_bytes[i]
        kv[e, LAST_SEEN] = now_step
    return created


@njit(cache=True)
def disk_probe(
    tkeys: np.ndarray,
    trec: np.ndarray,
    kv: np.ndarray,
    ring_next: np.ndarray,
    ring_matched: np.ndarray,
    live_lo: int,
    mkeys: np.ndarray,
    mvalid: np.ndarray,
    mbytes: np.ndarray,
    fsm: int,
    rc: int,
    eligible_before: int,
    switch_factor: float,
    mark_matched: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Disk phase: probe H_S with the disk buffer, with the paper's instrumentation.

    ``fsm``: 1 incrementing (count s_count), 2 switching (evaluate the cache inequality,
    collect s_B), anything else: plain MESHJOIN probe.  The switching decision for a
    join value is taken once, at its first master row of the R-cycle, so s_B always
    receives *all* rows of a value.  Returns (pair_master_row, pair_slot, sb_rows).
    """
    mask = ring_next.shape[0] - 1
    n = mkeys.shape[0]
    ent = np.empty(n, dtype=np.int64)
    total = 0
    nsb = 0
    for i in range(n):
        ent[i] = -1
        if not mvalid[i]:
            continue
        e = _find(tkeys, trec, mkeys[i])
        if e < 0 or kv[e, CACHED] == 1:
            continue
        if fsm == 1:
            kv[e, S_ROWS] += 1
            kv[e, S_BYTES] += mbytes[i]
        elif fsm == 2:
            if kv[e, DECIDED_CYCLE] != rc:
                kv[e, DECIDED_CYCLE] = rc
                # cache inequality m*v_R < n*v_S, with measured bytes on both sides
                if kv[e, TRACK_SINCE] <= eligible_before and kv[e, HS_BYTES] > switch_factor * kv[e, S_BYTES]:
                    kv[e, SWITCHING] = 1
            if kv[e, SWITCHING] == 1:
                nsb += 1
        if kv[e, HS_COUNT] > 0 or (fsm == 2 and kv[e, SWITCHING] == 1):
            ent[i] = e
            total += kv[e, HS_COUNT]
    pm = np.empty(total, dtype=np.int64)
    psl = np.empty(total, dtype=np.int64)
    sb = np.empty(nsb, dtype=np.int64)
    k = 0
    q = 0
    for i in range(n):
        e = ent[i]
        if e < 0:
            continue
        if fsm == 2 and kv[e, SWITCHING] == 1:
            sb[q] = i
            q += 1
        lim = kv[e, REMOVED_UPTO]
        s = kv[e, HS_HEAD]
        while s >= live_lo and s > lim:
            pm[k] = i
            psl[k] = s
            if mark_matched:
                ring_matched[s & mask] = 1
            k += 1
            s = ring_next[s & mask]
    return pm[:k], psl[:k], sb


@njit(cache=True)
def expire_slots(
    tkeys: np.ndarray,
    trec: np.ndarray,
    kv: np.ndarray,
    ring_key: np.ndarray,
    ring_bytes: np.ndarray,
    ring_matched: np.ndarray,
    lo: int,
    hi: int,
) -> tuple[np.ndarray, int]:  # pragma: no cover
    """Expire slots [lo, hi) from H_S; returns (unmatched live slots, live slots)."""
    mask = ring_key.shape[0] - 1
    out = np.empty(hi - lo, dtype=np.int64)
    m = 0
    live = 0
    for s in range(lo, hi):
        j = s & mask
        e = _find(tkeys, trec, ring_key[j])
        if e < 0 or s <= kv[e, REMOVED_UPTO]:
            continue  # left H_S earlier, when its value moved to the cache
        live += 1
        kv[e, HS_COUNT] -= 1
        kv[e, HS_BYTES] -= ring_bytes[j]
        if ring_matched[j] == 0:
            out[m] = s
            m += 1
    return out[:m], live


@njit(cache=True)
def mark_empty_switches(
    rstate: np.ndarray, kv: np.ndarray, rc: int, eligible_before: int, switch_factor: float
) -> int:  # pragma: no cover
    """End of a switching R-cycle: values tracked all cycle that met no master row have m = 0.

    The cache inequality then holds whenever they have stream tuples in H_S, so they
    move to the cache as empty entries.
    """
    n = 0
    for e in range(rstate.shape[0]):
        if rstate[e] != 1 or kv[e, CACHED] == 1 or kv[e, SWITCHING] == 1:
            continue
        if kv[e, DECIDED_CYCLE] == rc or kv[e, TRACK_SINCE] > eligible_before:
            continue
        if kv[e, HS_BYTES] > switch_factor * 0:
            kv[e, SWITCHING] = 1
            kv[e, DECIDED_CYCLE] = rc
            n += 1
    return n


@njit(cache=True)
def switch_in(
    rstate: np.ndarray,
    kv: np.ndarray,
    ring_next: np.ndarray,
    ring_matched: np.ndarray,
    live_lo: int,
    next_slot: int,
    chunk_base: np.ndarray,
    chunk_p0: np.ndarray,
    hr_part: np.ndarray,
    rc: int,
    mark_matched: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Start of the phase-out R-cycle: s_B becomes part of H_R.

    Each H_S tuple of a switched value entered at partition p0 and has met partitions
    p0..k-1; it is joined now with the value's s_B rows from partitions < p0 and removed
    from H_S.  Returns (pair_slot, pair_hr_row, removed_slots).
    """
    mask = ring_next.shape[0] - 1
    total = 0
    nslots = 0
    for e in range(rstate.shape[0]):
        if rstate[e] == 1 and kv[e, SWITCHING] == 1:
            nslots += kv[e, HS_COUNT]
            total += kv[e, HS_COUNT] * kv[e, HR_LEN]
    ps = np.empty(total, dtype=np.int64)
    pr = np.empty(total, dtype=np.int64)
    removed = np.empty(nslots, dtype=np.int64)
    k = 0
    u = 0
    for e in range(rstate.shape[0]):
        if rstate[e] != 1 or kv[e, SWITCHING] != 1:
            continue
        lim = kv[e, REMOVED_UPTO]
        s = kv[e, HS_HEAD]
        st = kv[e, HR_START]
        while s >= live_lo and s > lim:
            c = np.searchsorted(chunk_base, s, side="right") - 1
            p0 = chunk_p0[c]
            for r in range(st, st + kv[e, HR_LEN]):
                if hr_part[r] < p0:
                    ps[k] = s
                    pr[k] = r
                    k += 1
                    if mark_matched:
                        ring_matched[s & mask] = 1
            removed[u] = s
            u += 1
            s = ring_next[s & mask]
        kv[e, HS_HEAD] = -1
        kv[e, HS_COUNT] = 0
        kv[e, HS_BYTES] = 0
        kv[e, REMOVED_UPTO] = next_slot - 1
        kv[e, SWITCHING] = 0
        kv[e, CACHED] = 1
        kv[e, F_COUNT] = 0
        kv[e, F_BYTES] = 0
        kv[e, F_SINCE] = rc
    return ps[:k], pr[:k], removed[:u]


@njit(cache=True)
def evict(rstate: np.ndarray, kv: np.ndarray, rc: int, now_step: int, switch_factor: float) -> int:  # pragma: no cover
    """Cache eviction: evict values whose H_R rows outweigh their stream tuples per R-cycle.

    f_count is divided by the number of R-cycles it covers (10 for a value cached for the
    whole window), then reset.
    """
    n = 0
    for e in range(rstate.shape[0]):
        if rstate[e] != 1 or kv[e, CACHED] != 1:
            continue
        cycles = rc - kv[e, F_SINCE]
        if cycles <= 0:
            continue
        m_cache = kv[e, HR_BYTES]
        m_disk = kv[e, F_BYTES] / cycles
        if m_cache >= switch_factor * m_disk:
            kv[e, CACHED] = 0
            kv[e, HR_LEN] = 0
            kv[e, HR_BYTES] = 0
            kv[e, TRACK_SINCE] = now_step
            kv[e, DECIDED_CYCLE] = -1
            kv[e, S_ROWS] = 0
            kv[e, S_BYTES] = 0
            n += 1
        kv[e, F_COUNT] = 0
        kv[e, F_BYTES] = 0
        kv[e, F_SINCE] = rc
    return n


@njit(cache=True)
def collect_garbage(
    tkeys: np.ndarray,
    trec: np.ndarray,
    kv: np.ndarray,
    rstate: np.ndarray,
    free: np.ndarray,
    meta: np.ndarray,
    idle_before: int,
) -> int:  # pragma: no cover
    """Drop values with no H_S tuple since step ``idle_before``, neither cached nor switching.

    Values seen in the previous R-cycle keep their record, so their counts stay complete
    for the next switching decision even when k is small.
    """
    n = 0
    for e in range(rstate.shape[0]):
        if (
            rstate[e] == 1
            and kv[e, HS_COUNT] == 0
            and kv[e, CACHED] == 0
            and kv[e, SWITCHING] == 0
            and kv[e, LAST_SEEN] < idle_before
        ):
            _release(tkeys, trec, rstate, free, meta, kv, e)
            n += 1
    return n


@njit(cache=True)
def reset_s_count(rstate: np.ndarray, kv: np.ndarray) -> None:  # pragma: no cover
    """RESET all H_S().s_count to 0 (start of the phase-out R-cycle)."""
    for e in range(rstate.shape[0]):
        if rstate[e] == 1:
            kv[e, S_ROWS] = 0
            kv[e, S_BYTES] = 0
