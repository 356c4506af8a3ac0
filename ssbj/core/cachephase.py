"""The cache phase (Algorithm 1, lines 15-23): READ w stream tuples, answer hits from H_R.

Misses form the new chunk of H_S and its record in Q (ADD); a value that now has two
tuples or more in H_S becomes a candidate of the value statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core.arrowtypes import take_rows
from ssbj.core.cache import F_MAX_ROWS, HR_F
from ssbj.core.empties import es_find, es_hit
from ssbj.core.hashing import kset_find, mix
from ssbj.core.hs import hs_insert
from ssbj.core.interest import interest_test
from ssbj.core.jit import njit
from ssbj.core.refresh import HR_LEN, HR_START
from ssbj.core.rfilter import rf_test

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

# mypy: disable-error-code="return-value,arg-type,no-any-return"

_NO_BITS = np.zeros(1, dtype=np.uint64)


@njit(cache=True, nogil=True)
def cache_probe(
    hk: np.ndarray,
    hused: np.ndarray,
    hpay: np.ndarray,
    eblob: np.ndarray,
    ecount: np.ndarray,
    ibits: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    row_bytes: np.ndarray,
    start: int,
    miss_budget: int,
    miss_used: int,
    max_misses: int,
    max_tuples: int,
    use_cache: bool,
    rf_bits: np.ndarray,
    rf_mode: int,
    rf_base: int,
    rf_nbits: int,
    rf_oor: bool,
    row_fixed: int = 0,
    var_room: int = -1,
) -> tuple[int, np.ndarray, np.ndarray, int, int, int, int, int, int, int, int]:  # pragma: no cover
    """Cache phase over ``keys[start:]``: H_R hits with their pairs, empty hits, NULLs and misses.

    Stops before the miss that would make the new H_S chunk exceed ``miss_budget`` bytes
    or ``max_misses`` tuples (``stop`` 1), or bring more than ``var_room`` bytes of strings
    into H_S's byte rings (a row's bytes beyond ``row_fixed``; ``stop`` 3; -1: no bound),
    before a tuple the arrays may not hold (``stop`` 2: the caller calls again) or at
    ``max_tuples`` (``stop`` 0). Returns (consumed, ti, pr, pairs, tuples with pairs,
    misses, tuples without pairs, of them NULL, miss bytes used, tuples the R-filter
    answered, stop); the arrays whole, so the caller counts the bytes they hold (8 per
    tuple of ``max_tuples`` with the cache, 4 without; more only for one value with more
    rows). Two int32 words a tuple read, each array filled from both ends
    (:func:`split_call`): ``ti`` holds the pairs' tuples from its front and the misses from
    its back; ``pr`` the pairs' H_R rows from its front and, from its back, the NULLs and
    the tuples known to have no master rows: from an empty entry, from the R-filter
    (``rf_mode`` > 0, see :mod:`ssbj.core.rfilter`) or from an H_R entry without rows.
    Without the cache there are no pairs: ``pr`` is empty and those tuples fill ``ti``'s
    front. Every value of H_R and of the empty entries has its bits in ``ibits``
    (:mod:`ssbj.core.interest`), so a tuple whose bits are clear skips both lookups; the
    R-filter is asked in any case.
    """
    n = keys.shape[0]
    limit = min(n, start + max_tuples)
    m = limit - start
    # int32: a batch's rows and H_R's rows stay below 2**31. A tuple takes a pair (a
    # one-row value) or a word at one array's back, so each array is bounded by the tuples
    # read; without the cache every tuple is a miss or a NULL: ``ti`` for the chunk's room
    # (a call stops when it is full, ``stop`` 2)
    size = m if use_cache else min(m, max(max_misses, 0) + 64)
    ti = np.empty(size, dtype=np.int32)
    pr = np.empty(size if use_cache else 0, dtype=np.int32)
    k = 0
    n_hit = 0
    nm = 0
    nb = 0  # tuples without pairs
    nn = 0
    nf = 0
    stop = 0
    var_used = 0
    i = start
    while i < limit:
        # room for one more word at either end (without the cache both ends are ti's)
        if (k + max(nm, nb) if use_cache else nm + nb) >= size:
            stop = 2
            break
        if not valid[i]:
            nb += 1
            if use_cache:
                pr[size - nb] = i
            else:
                ti[nb - 1] = i
            nn += 1
            i += 1
            continue
        if use_cache:
            key = keys[i]
            maybe = interest_test(ibits, mix(key))
            j = kset_find(hk, hused, key) if maybe else -1
            if j >= 0:
                st = hpay[j, HR_START]
                ln = hpay[j, HR_LEN]
                if k + ln + max(nm, nb) > size:
                    if k + nm + nb > 0:
                        stop = 2
                        break
                    size = ln  # one value with more rows than the call's tuples
                    ti = np.empty(size, dtype=np.int32)
                    pr = np.empty(size, dtype=np.int32)
                if hpay[j, HR_F] < F_MAX_ROWS:
                    hpay[j, HR_F] += 1
                if ln == 0:
                    nb += 1
                    pr[size - nb] = i
                else:
                    for r in range(st, st + ln):
                        ti[k] = i
                        pr[k] = r
                        k += 1
                    n_hit += 1
                i += 1
                continue
            if rf_mode > 0 and not rf_test(rf_bits, rf_mode, rf_base, rf_nbits, rf_oor, key):
                nb += 1
                pr[size - nb] = i
                nf += 1
                i += 1
                continue
            j = es_find(eblob, key) if maybe else -1
            if j >= 0:
                nb += 1
                pr[size - nb] = i
                es_hit(ecount, j)
                i += 1
                continue
        if nm >= max_misses or (miss_used > 0 and miss_used + row_bytes[i] > miss_budget):
            stop = 1
            break
        if var_room >= 0 and var_used + row_bytes[i] - row_fixed > var_room:
            stop = 3
            break
        nm += 1
        ti[size - nm] = i
        miss_used += row_bytes[i]
        var_used += row_bytes[i] - row_fixed
        i += 1
        if miss_used >= miss_budget:
            stop = 1
            break
    return i - start, ti, pr, k, n_hit, nm, nb, nn, miss_used, nf, stop


def split_call(
    ti: np.ndarray, pr: np.ndarray, k: int, nm: int, nb: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split a :func:`cache_probe` call's arrays into pairs (tuples, H_R rows), misses and the rest, in tuple order."""
    miss_idx = ti[len(ti) - nm :][::-1]
    none_idx = pr[len(pr) - nb :][::-1] if len(pr) else ti[:nb]
    return ti[:k], pr[:k], miss_idx, none_idx


def hs_room(op: SemiStreamJoin) -> int:
    """Tuples the new H_S chunk may take: the ring's room, up to the slots the budget planned.

    The ring cannot shrink under its live span at an R-cycle start, so a ring larger than
    the plan (planned for more slots earlier) shrinks only once the chunks have brought
    the span down to the plan.
    """
    if op.spec.memory_budget is None:
        return 1 << 62
    slots = op.hs.cap if op._plan.ring_slots <= 0 else min(op.hs.cap, op._plan.ring_slots)
    return min(max(slots - op.hs.span, 0), B.index_room(op))


def cache_phase(
    op: SemiStreamJoin, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> tuple[int, int, int]:
    """READ w stream tuples; hits are answered from H_R, misses form the new H_S chunk.

    A chunk stops before the tuple that would pass its bytes; the bytes it leaves go to the
    next chunk (``_chunk_carry``), so with a few tuples a chunk the cut does not lose up to
    a tuple's bytes every step: on TPC-H at 1% of R (about 3 tuples a chunk) it left 16% of
    H_S's slots unused. H_S then holds at most one tuple's bytes more than its chunks' plan.
    """
    room = hs_room(op)
    budget = op._chunk_bytes + op._chunk_carry
    # nor more strings than H_S's byte rings hold (an empty ring grows for what comes)
    ring = op.hs.rows.byte_room() if op.spec.memory_budget is not None and op.hs.span else None
    row_fixed, var_room = ring if ring is not None else (0, -1)
    used = 0
    remaining = op.spec.max_step_tuples
    cache = op.cache
    rf = op.rfilter.answering(op._rc) if op._use_cache else None
    use_cache = op._use_cache and ((cache.values + cache.empty_values) > 0 or rf is not None)
    rf_bits = rf.bits if rf is not None else _NO_BITS
    rf_args = (rf.mode, rf.base, rf.nbits, rf.oor) if rf is not None else (0, 0, 0, False)
    miss_tables: list[pa.Table] = []
    miss_keys: list[np.ndarray] = []
    miss_bytes = 0
    w_n = w_s = w_null = 0
    hr_table: pa.Table | None = None  # H_R's pair columns, made at the first hit
    call = B.cache_call_tuples(op)
    stop = 0
    while op._buffer and remaining > 0 and used < budget:
        buf = op._buffer[0]
        start = buf.pos
        most = min(remaining, call)
        consumed, ti, pr, k, n_hits, nm, nb, nn, used, n_filtered, stop = cache_probe(
            cache.index.keys,
            cache.index.used,
            cache.index.payload,
            cache.empties.blob,
            cache.empties.counts,
            op.interest.bits,
            buf.keys.values,
            buf.keys.valid,
            buf.row_bytes,
            start,
            budget,
            used,
            room - w_s,
            most,
            use_cache,
            rf_bits,
            *rf_args,
            row_fixed,
            var_room if var_room < 0 else max(var_room - (used - row_fixed * w_s), 0),
        )
        consumed = int(consumed)
        n_hits = int(n_hits)
        # the probe's index arrays live until its tuples are taken and answered (one call at a time)
        op._note_cache_transient(ti.nbytes + pr.nbytes)
        if n_filtered:
            op._c.bump("filter_answered", int(n_filtered))
        if consumed == 0:
            break
        ps, pr, miss_idx, none_idx = split_call(ti, pr, k, nm, nb)
        op._buffer_bytes -= int(buf.row_bytes[start : start + consumed].sum())
        remaining -= consumed
        buf.pos += consumed
        # one take for the batch's hits, tuples without pairs and misses (a take's fixed cost is ~20-40 us)
        parts = [a for a in (ps, none_idx, miss_idx) if len(a)]
        taken = take_rows(buf.table, parts[0] if len(parts) == 1 else np.concatenate(parts)) if parts else None
        at = 0
        s = None
        if len(ps):
            s = taken.slice(at, len(ps))  # type: ignore[union-attr]
            at += len(ps)
        if nb:  # NULLs and tuples known to have no master row: unmatched at once
            unmatched.append(taken.slice(at, nb))  # type: ignore[union-attr]
            at += nb
            w_null += int(nn)
            w_n += int(nb - nn)
        if n_hits:
            hr_table = answer_hits(op, buf.table, s, ps, pr, n_hits, hr_table, pairs, unmatched)  # type: ignore[arg-type]
            w_n += n_hits
        if len(miss_idx):
            miss_tables.append(taken.slice(at))  # type: ignore[union-attr]
            miss_keys.append(buf.keys.values[miss_idx])
            miss_bytes += int(buf.row_bytes[miss_idx].sum())
            w_s += len(miss_idx)
        del ti, ps, pr, miss_idx, none_idx  # before the next call allocates its own
        if buf.pos >= buf.table.num_rows:
            op._buffer.popleft()
        elif stop in (1, 3):
            break  # stopped inside the batch: the chunk (or H_S's byte rings) is full
    # carried only past a cut by bytes (not when the ring's room or the buffer ended the chunk)
    op._chunk_carry = budget - used if stop == 1 and w_s < room and 0 < used < budget else 0
    op._c.served_cache += w_n
    op._c.null_keys += w_null
    if miss_tables:
        t = pa.concat_tables(miss_tables) if len(miss_tables) > 1 else miss_tables[0]
        hs_add(op, t, np.concatenate(miss_keys), miss_bytes)
    return w_n, w_s, w_null


def answer_hits(
    op: SemiStreamJoin,
    batch: pa.Table,
    s: pa.Table,
    ps: np.ndarray,
    pr: np.ndarray,
    n_hits: int,
    hr_table: pa.Table | None,
    pairs: list[tuple[pa.Table, pa.Table]],
    unmatched: list[pa.Table],
    master: pa.Table | None = None,
) -> pa.Table:
    """OUTPUT the pairs of ``n_hits`` tuples (stream rows ``s`` of tuples ``ps`` of ``batch``, H_R rows ``pr``).

    Hashed keys are verified: a tuple whose every pair fails matches nothing and finishes
    unmatched. Returns H_R's pair columns (made at the step's first hit, kept for the next).
    ``master``: H_R's rows ``pr`` already taken.
    """
    if hr_table is None:
        hr_table = op.cache.table().select(op._pair_idx)
    m = take_rows(hr_table, pr) if master is None else master
    ok = op._verified(s, m)
    n_matched = n_hits
    if ok is not None:  # hashed keys: a tuple whose every pair fails matches nothing
        hit_tuples = np.unique(ps)
        s, m, ps = s.filter(ok), m.filter(ok), ps[ok]
        lost = np.setdiff1d(hit_tuples, ps)
        n_matched -= len(lost)
        if len(lost):
            unmatched.append(batch.take(lost))
    if len(ps):
        pairs.append((s, m))
    op._c.matched += n_matched
    return hr_table


def hs_add(op: SemiStreamJoin, table: pa.Table, keys: np.ndarray, nbytes: int) -> None:
    """ADD the chunk into H_S and its pointer into the queue Q."""
    hs = op.hs
    n = table.num_rows
    if hs.span + n > hs.cap:  # without a budget the ring grows on demand
        hs.set_capacity(max(2 * hs.cap, hs.span + n))
    hs.reserve_values(n, B.index_limit(op))
    hs.values += int(hs_insert(hs.hix, hs.ring_key, hs.link, hs.cap, hs.lo, hs.hi, keys))
    hs.rows.append(table)
    hs.queue.push(hs.hi - n, n, op._p, nbytes)
    hs.live += n
    hs.row_bytes += nbytes
