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
from ssbj.core.cache import cache_probe, expand_hits
from ssbj.core.hs import hs_insert

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

_NO_BITS = np.zeros(1, dtype=np.uint64)
_NO_ROWS = np.zeros(0, dtype=np.int64)


def hs_room(op: SemiStreamJoin) -> int:
    """Tuples the new H_S chunk may take (the ring is sized by the budget)."""
    if op.spec.memory_budget is None:
        return 1 << 62
    return min(max(op.hs.cap - op.hs.span, 0), B.index_room(op))


def cache_phase(
    op: SemiStreamJoin, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> tuple[int, int, int]:
    """READ w stream tuples; hits are answered from H_R, misses form the new H_S chunk."""
    budget = op._chunk_bytes
    used = 0
    remaining = op.spec.max_step_tuples
    room = hs_room(
        op,
    )
    cache = op.cache
    rf = op.rfilter.answering(op._rc) if op._use_cache else None
    use_cache = op._use_cache and ((cache.values + cache.empty_values) > 0 or rf is not None)
    rf_bits = rf.bits if rf is not None else _NO_BITS
    rf_args = (rf.mode, rf.base, rf.nbits, rf.oor) if rf is not None else (0, 0, 0, False)
    miss_tables: list[pa.Table] = []
    miss_keys: list[np.ndarray] = []
    miss_bytes = 0
    w_n = w_s = w_null = 0
    hr_table = cache.table() if use_cache else None
    while op._buffer and remaining > 0 and used < budget:
        buf = op._buffer[0]
        start = buf.pos
        consumed, hit, miss_idx, null_idx, emp_idx, used, n_filtered = cache_probe(
            cache.index.keys,
            cache.index.used,
            cache.index.payload,
            cache.empties.blob,
            cache.empties.counts,
            buf.keys.values,
            buf.keys.valid,
            buf.row_bytes,
            start,
            budget,
            used,
            room - w_s,
            remaining,
            use_cache,
            rf_bits,
            *rf_args,
        )
        consumed = int(consumed)
        if n_filtered:
            op._c.bump("filter_answered", int(n_filtered))
        if consumed == 0:
            break
        op._buffer_bytes -= int(buf.row_bytes[start : start + consumed].sum())
        remaining -= consumed
        buf.pos += consumed
        n_hits = int(np.count_nonzero(hit >= 0))
        ps, pr = expand_hits(hit, cache.index.payload, start) if n_hits else (_NO_ROWS, _NO_ROWS)
        # one take for the batch's hits, NULLs, empty hits and misses (a take's fixed cost is ~20-40 us)
        parts = [a for a in (ps, null_idx, emp_idx, miss_idx) if len(a)]
        taken = take_rows(buf.table, parts[0] if len(parts) == 1 else np.concatenate(parts)) if parts else None
        at = 0
        s = None
        if len(ps):
            s = taken.slice(at, len(ps))  # type: ignore[union-attr]
            at += len(ps)
        if len(null_idx):
            unmatched.append(taken.slice(at, len(null_idx)))  # type: ignore[union-attr]
            at += len(null_idx)
            w_null += len(null_idx)
        if len(emp_idx):
            unmatched.append(taken.slice(at, len(emp_idx)))  # type: ignore[union-attr]
            at += len(emp_idx)
            w_n += len(emp_idx)
        if n_hits:
            assert hr_table is not None  # noqa: S101 - use_cache implies it
            m = hr_table.take(pr)
            if s is None:
                s = buf.table.slice(0, 0)
            ok = op._verified(s, m)
            if ok is not None:
                s, m, ps = s.filter(ok), m.filter(ok), ps[ok]
            if len(ps):
                pairs.append((s, m))
            matched = np.zeros(consumed, dtype=bool)
            matched[ps - start] = True
            n_matched = int(np.count_nonzero(matched))
            op._c.matched += n_matched
            if n_matched < n_hits:
                lost = np.flatnonzero((hit >= 0) & ~matched) + start
                unmatched.append(buf.table.take(lost))
            w_n += n_hits
        if len(miss_idx):
            miss_tables.append(taken.slice(at))  # type: ignore[union-attr]
            miss_keys.append(buf.keys.values[miss_idx])
            miss_bytes += int(buf.row_bytes[miss_idx].sum())
            w_s += len(miss_idx)
        if buf.pos >= buf.table.num_rows:
            op._buffer.popleft()
        else:
            break  # stopped inside the batch: the chunk is full or max_step_tuples reached
    op._c.served_cache += w_n
    op._c.null_keys += w_null
    if miss_tables:
        t = pa.concat_tables(miss_tables) if len(miss_tables) > 1 else miss_tables[0]
        hs_add(op, t, np.concatenate(miss_keys), miss_bytes)
    return w_n, w_s, w_null


def hs_add(op: SemiStreamJoin, table: pa.Table, keys: np.ndarray, nbytes: int) -> None:
    """ADD the chunk into H_S and its pointer into the queue Q."""
    hs = op.hs
    n = table.num_rows
    if hs.span + n > hs.cap:  # without a budget the ring grows on demand
        hs.set_capacity(max(2 * hs.cap, hs.span + n))
    hs.reserve_values(n, B.index_limit(op))
    if op._use_cache:
        op.stats.grow(B.stats_limit(op))
    st = op.stats.table
    tracked = op.stats.size
    hs.values += int(
        hs_insert(
            hs.hix,
            hs.ring_key,
            hs.link,
            hs.cap,
            hs.lo,
            hs.hi,
            keys,
            op._use_cache,
            st.keys,
            st.used,
            st.payload,
            op.stats.meta,
            # when tracking began: 2 rc, +1 unless at the R-cycle's first step (int32-safe)
            2 * op._rc + (0 if op._step == op._cycle_start.get(op._rc, -1) else 1),
            op._rc,
            op.interest.bits,
        )
    )
    op.interest.added += op.stats.size - tracked
    if op.interest.overfull:
        op.rebuild_interest()
    hs.rows.append(table)
    hs.queue.push(hs.hi - n, n, op._p, nbytes)
    hs.live += n
    hs.row_bytes += nbytes
