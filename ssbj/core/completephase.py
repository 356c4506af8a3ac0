"""The complete cache's phase (Theorem 3 (c), :mod:`ssbj.core.complete`): every tuple finished against H_R.

While the cache holds all of R nothing enters H_S: a tuple whose value misses H_R has no
master row as of the last read of every partition, and finishes at once, unmatched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core import lanes
from ssbj.core.arrowtypes import take_rows
from ssbj.core.cachephase import answer_hits
from ssbj.core.hashing import home, kset_find, mix
from ssbj.core.jit import njit
from ssbj.core.refresh import HR_LEN, HR_START
from ssbj.core.rowsize import held_nbytes

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin
    from ssbj.core.spec import Buffered

# mypy: disable-error-code="return-value,arg-type,no-any-return"

PROBE_GROUP = 32  # tuples whose index slots are loaded together (their cache misses overlap)


@njit(cache=True, nogil=True)
def complete_probe(
    hk: np.ndarray,
    hused: np.ndarray,
    hpay: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    start: int,
    max_tuples: int,
) -> tuple[int, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:  # pragma: no cover
    """Cache phase of the complete cache over ``keys[start:]``: every tuple finishes here.

    Returns (consumed, pair tuple, pair H_R row, tuples with pairs, null_idx, miss_idx);
    a miss has no master row. f_count is not kept (nothing is evicted while R fits; it
    counts again from the R-cycle the complete cache is left, :func:`ssbj.core.complete.leave`).

    The lookups go in groups of ``PROBE_GROUP`` tuples: first every tuple's home slot is
    read (loads that do not wait on each other, so their cache misses overlap), then the
    probes are finished, then the runs read: 1.20-1.29x faster than one lookup after the
    other on the hashjoin bench's H_R (bench/results/hashjoin-2026-11-28-threads.md).
    """
    n = keys.shape[0]
    limit = min(n, start + max_tuples)
    m = limit - start
    ps = np.empty(m, dtype=np.int32)
    pr = np.empty(m, dtype=np.int32)
    nul = np.empty(m, dtype=np.int32)
    miss = np.empty(m, dtype=np.int32)
    every = valid.shape[0] == 0
    cap = hk.shape[0]
    g = PROBE_GROUP
    home_at = np.empty(g, dtype=np.int64)
    used0 = np.empty(g, dtype=np.bool_)
    key0 = np.empty(g, dtype=np.int64)
    run_st = np.empty(g, dtype=np.int64)
    run_ln = np.empty(g, dtype=np.int64)
    k = 0
    n_hit = 0
    nn = 0
    nm = 0
    for base in range(start, limit, g):
        cnt = min(g, limit - base)
        for t in range(cnt):
            h = home(mix(keys[base + t]), cap)
            home_at[t] = h
            used0[t] = hused[h]
            key0[t] = hk[h]
        for t in range(cnt):
            run_ln[t] = 0
            i = base + t
            if not used0[t] or (not every and not valid[i]):
                continue
            key = keys[i]
            j = home_at[t]
            if key0[t] != key:  # further along the cluster (linear probing)
                j = kset_find(hk, hused, key)
            if j >= 0:
                run_st[t] = j  # the slot for now: its run is read below
                run_ln[t] = 1
        for t in range(cnt):
            if run_ln[t]:
                j = run_st[t]
                run_st[t] = hpay[j, HR_START]
                run_ln[t] = hpay[j, HR_LEN]
        for t in range(cnt):
            i = base + t
            if not every and not valid[i]:
                nul[nn] = i
                nn += 1
                continue
            ln = run_ln[t]
            if ln == 0:
                miss[nm] = i
                nm += 1
                continue
            if k + ln > ps.shape[0]:
                cp = max(2 * ps.shape[0], k + ln)
                ps2 = np.empty(cp, dtype=np.int32)
                pr2 = np.empty(cp, dtype=np.int32)
                ps2[:k] = ps[:k]
                pr2[:k] = pr[:k]
                ps, pr = ps2, pr2
            st = run_st[t]
            for r in range(st, st + ln):
                ps[k] = i
                pr[k] = r
                k += 1
            n_hit += 1
    return limit - start, ps[:k], pr[:k], n_hit, nul[:nn], miss[:nm]


# ---------------------------------------------------------------- cache phase
@dataclass
class _Probed:
    """One slice of a complete-cache call: the probe's arrays and the rows they take."""

    ps: np.ndarray  # pair: stream tuple
    pr: np.ndarray  # pair: H_R row
    n_hits: int
    null_idx: np.ndarray
    miss_idx: np.ndarray
    taken: pa.Table | None  # stream rows of the hits, then of the NULL keys and misses
    master: pa.Table | None  # H_R's pair columns of the pairs
    held: int  # bytes of the probe's arrays


def _probe_slice(op: SemiStreamJoin, buf: Buffered, hr_table: pa.Table, start: int, n: int) -> _Probed:
    """Probe ``n`` tuples of ``buf`` from ``start`` and take their rows (runs on a lane: writes nothing shared)."""
    ix = op.cache.index
    _, ps, pr, n_hits, null_idx, miss_idx = complete_probe(
        ix.keys, ix.used, ix.payload, buf.keys.values, buf.keys.valid, start, n
    )
    parts = [a for a in (ps, null_idx, miss_idx) if len(a)]
    taken = take_rows(buf.table, parts[0] if len(parts) == 1 else np.concatenate(parts)) if parts else None
    master = take_rows(hr_table, pr) if len(pr) else None
    held = sum(held_nbytes(a) for a in (ps, pr, null_idx, miss_idx))
    return _Probed(ps, pr, int(n_hits), null_idx, miss_idx, taken, master, held)


def complete_phase(
    op: SemiStreamJoin, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> tuple[int, int, int]:
    """READ up to ``max_step_tuples`` stream tuples and finish each against H_R (hit or no master row).

    With ``JoinSpec.threads`` > 1 a call's tuples are probed and taken in slices on that
    many threads (:mod:`ssbj.core.lanes`); the slices' arrays together are bounded as one
    call's, and the results are merged in slice order.
    """
    remaining = op.spec.max_step_tuples
    per_call = B.cache_call_tuples(op, B.COMPLETE_CALL_BYTES)  # (16 B a tuple read, 8 a further pair, counted)
    w_n = w_null = n_miss = 0
    hr_table = op.cache.table().select(op._pair_idx)
    while op._buffer and remaining > 0:
        buf = op._buffer[0]
        start = buf.pos
        n = min(remaining, per_call, buf.table.num_rows - start)
        got = lanes.run(
            lambda at, ln: _probe_slice(op, buf, hr_table, at, ln),  # noqa: B023 (run returns before the loop goes on)
            lanes.slices(start, n, op.spec.threads),
        )
        op._note_cache_transient(sum(g.held for g in got))
        op._buffer_bytes -= int(buf.row_bytes[start : start + n].sum())
        remaining -= n
        buf.pos += n
        for g in got:
            hits = len(g.ps)
            if len(g.null_idx) or len(g.miss_idx):
                unmatched.append(g.taken.slice(hits))  # type: ignore[union-attr]
                w_null += len(g.null_idx)
                w_n += len(g.miss_idx)
                n_miss += len(g.miss_idx)
            if g.n_hits:
                s = g.taken.slice(0, hits)  # type: ignore[union-attr]
                answer_hits(op, buf.table, s, g.ps, g.pr, g.n_hits, hr_table, pairs, unmatched, g.master)
                w_n += g.n_hits
        if buf.pos >= buf.table.num_rows:
            op._buffer.popleft()
    op._c.served_cache += w_n
    op._c.null_keys += w_null
    if n_miss:
        op._c.bump("complete_missed", n_miss)
    return w_n, 0, w_null
