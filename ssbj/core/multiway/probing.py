"""How rows of :class:`MultiWayJoin` travel through the edges: probes, waits and partition scans.

``route`` takes rows along their probe order: a held master is probed at once, a scanned
one's cache serves what it can, and the rest wait at that edge (``wait``) as one chunk.
``scan`` reads a scanned master's next partition, probes its waiting chunks, routes the
matches on, and lets a chunk that has met all K partitions leave (NULL-extending its
unmatched rows on a left edge). Functions of the operator, as :mod:`.persist` is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core.multiway.keyindex import KeyIndex
from ssbj.core.multiway.plan import EdgePlan, joined, null_extended
from ssbj.core.multiway.store import Chunk

if TYPE_CHECKING:
    from ssbj.core.multiway.operator import MultiWayJoin


def route(op: MultiWayJoin, table: pa.Table, oid: int, pos: int, out: list[pa.Table]) -> None:
    """Take rows from position ``pos`` of probe order ``oid`` until they wait at a scanned edge or reach ``out``."""
    order = op.orders[oid]
    while pos < len(order) and table.num_rows:
        p = op.edges[order[pos]]
        keys = [table.column(c) for c in p.probe_cols]
        if p.held:
            left, right = p.held_index().match(keys)
            table = resolve(op, table, left, right, p.table, p, None)
            pos += 1
            continue
        cache = op.caches.get(p.index)
        if cache is not None:
            cache.count(keys)
            hit, left, right = cache.serve(keys)
            if hit.any():
                served = resolve(op, table, left, right, cache.served_rows(), p, hit)
                op.counters["served_by_cache"] += int(hit.sum())
                route(op, served, oid, pos + 1, out)
                table = table.filter(pa.array(~hit))
                if table.num_rows == 0:
                    return
        wait(op, p, table, oid, pos)
        return
    if table.num_rows:
        out.append(table)


def resolve(
    op: MultiWayJoin,
    table: pa.Table,
    left: np.ndarray,
    right: np.ndarray,
    master: pa.Table,
    p: EdgePlan,
    among: np.ndarray | None,
) -> pa.Table:
    """Rows fully resolved at edge ``p``: matches, and NULL-extended misses on a left edge."""
    q = int(among.sum()) if among is not None else table.num_rows
    hit_rows = np.unique(left)
    op.estats[p.index].note(q, len(hit_rows), len(left))
    op.counters["rows_probed"] += q
    res = joined(table, left, master, right, p)
    if p.left:
        miss = np.ones(table.num_rows, bool) if among is None else among.copy()
        miss[hit_rows] = False
        if miss.any():
            res = pa.concat_tables([res, null_extended(table, np.flatnonzero(miss), p)])
    return res


def wait(op: MultiWayJoin, p: EdgePlan, table: pa.Table, oid: int, pos: int) -> None:
    """Put rows into the waiting store as one chunk of edge ``p`` (they meet its next K partitions)."""
    table = table.combine_chunks()
    matched = np.zeros(table.num_rows, bool) if p.left else None
    cid = op._new_chunk_id()
    width = table.nbytes / max(table.num_rows, 1)
    op._vs[p.index] = 0.9 * op._vs[p.index] + 0.1 * width if op._vs[p.index] else width
    op._fit_store()
    op.store.put(p.index, cid, table, matched)
    op._note("waits", table)
    op._chunks[p.index].append(Chunk(cid, p.index, oid, pos, 0, table.num_rows, width))
    op.estats[p.index].note(table.num_rows, 0, 0)
    op.counters["rows_probed"] += table.num_rows


def scan(op: MultiWayJoin, p: EdgePlan, out: list[pa.Table]) -> None:
    """Read edge ``p``'s next partition and probe every waiting chunk of ``p`` with it; finished chunks leave."""
    k = op._p[p.index]
    part = p.read_partition(k, op.spec)
    op.counters["partitions_read"] += 1
    op._disk_peak[p.index] = max(op._disk_peak[p.index], int(part.nbytes))
    cache = op.caches.get(p.index)
    if cache is not None:
        if k == 0 and cache.cand is not None:
            cache.collecting = True
        cache.collect(part, k)
    idx = KeyIndex([part.column(c) for c in p.key_cols]) if part.num_rows else None
    still: list[Chunk] = []
    for ch in op._chunks[p.index]:
        table, matched = op.store.get(p.index, ch.id)
        if idx is not None:
            left, right = idx.match([table.column(c) for c in p.probe_cols])
            if len(left):
                hit = np.unique(left)
                st = op.estats[p.index]
                st.h += len(hit) if matched is None else int((~matched[hit]).sum())
                st.s += len(left)
                route(op, joined(table, left, part, right, p), ch.oid, ch.pos + 1, out)
                if matched is not None and not matched[hit].all():
                    matched = matched.copy()
                    matched[hit] = True
                    op.store.set_matched(p.index, ch.id, matched)
        ch.seen += 1
        if ch.seen >= p.k:
            if matched is not None and not matched.all():
                route(op, null_extended(table, np.flatnonzero(~matched), p), ch.oid, ch.pos + 1, out)
            op._note("leaves", table)
            op.store.delete(p.index, ch.id)
            op._persisted.discard(ch.id)
        else:
            still.append(ch)
    op._chunks[p.index] = still
    op._p[p.index] = (k + 1) % p.k
    if cache is not None and op._p[p.index] == 0:
        schema = pa.schema([pa.field(c, t) for c, t in zip(p.master_cols, p.master_types, strict=True)])
        cache.end_cycle(p.row_bytes, op._vs[p.index] or p.row_bytes, schema)
