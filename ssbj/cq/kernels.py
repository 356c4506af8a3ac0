"""Numba kernels of the array-encoded live-tuple maintenance (:mod:`ssbj.cq.fastcore`).

One hash table maps ``(tag, key words)`` to an int64 value (a row: tag, key words, value) for every lookup the
algorithm makes: a tag is a node (alias: key -> tuple slot, or -1 for a present tuple
its selection dropped), an index I(R, R_c) (foreign key -> the head of a doubly linked
list of the parent slots that reference it) or a relation's presence (relations with
several aliases).  Tuples live in slot arrays (``t_*``); changes of one micro-batch are
applied in ``_seq`` order with the seed paper's bottom-up propagation (Algorithms 1-4),
as :class:`ssbj.cq.engine.Node` does with dicts, and the root's tuples entering or
leaving the join are gathered into ΔQ rows.  Linear probing with backward-shift delete
(no tombstones) over a power-of-two capacity.
"""

from __future__ import annotations

import numpy as np

from ssbj.core.hashing import between, mix
from ssbj.core.jit import njit

# mypy cannot type numba-compiled bodies
# mypy: disable-error-code="return-value,arg-type,no-any-return"

EMPTY = -1  # tag of an empty hash slot
APPLIED, STALE, PRESENT, ABSENT = 0, 1, 2, 3  # status of a change


@njit(cache=True, inline="always")
def _hash(tag: int, key: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    h = mix(tag)
    for w in key:
        h = mix(np.int64(h ^ np.uint64(w)))
    return h


@njit(cache=True)
def h_find(hk: np.ndarray, tag: int, key: np.ndarray) -> int:  # pragma: no cover - compiled
    """Hash slot of ``(tag, key)``, or ``-(slot + 1)`` of the empty slot where it would go."""
    mask = hk.shape[0] - 1
    i = np.int64(_hash(tag, key) & np.uint64(mask))
    kw = key.shape[0]
    while hk[i, 0] != EMPTY:
        if hk[i, 0] == tag:
            same = True
            for j in range(kw):
                if hk[i, 1 + j] != key[j]:
                    same = False
                    break
            if same:
                return i
        i = (i + 1) & mask
    return -(i + 1)


@njit(cache=True)
def h_get(hk: np.ndarray, tag: int, key: np.ndarray) -> int:  # pragma: no cover - compiled
    """Value of ``(tag, key)``, or -2 if absent."""
    i = h_find(hk, tag, key)
    return hk[i, hk.shape[1] - 1] if i >= 0 else -2


@njit(cache=True)
def h_put(
    hk: np.ndarray, d_hash: np.ndarray, cnt: np.ndarray, i: int, tag: int, key: np.ndarray, v: int
) -> None:  # pragma: no cover - compiled
    """Fill the empty slot ``i`` (from :func:`h_find`) with ``(tag, key) -> v``; the row is marked dirty."""
    d_hash[i] = 1
    hk[i, 0] = tag
    for j in range(key.shape[0]):
        hk[i, 1 + j] = key[j]
    hk[i, hk.shape[1] - 1] = v
    cnt[0] += 1


@njit(cache=True)
def h_del(hk: np.ndarray, d_hash: np.ndarray, cnt: np.ndarray, i: int) -> None:  # pragma: no cover - compiled
    """Remove slot ``i``, shifting later entries of its cluster back (every row written is marked dirty)."""
    mask = hk.shape[0] - 1
    kw = hk.shape[1] - 1
    j = i
    while True:
        j = (j + 1) & mask
        if hk[j, 0] == EMPTY:
            break
        k = np.int64(_hash(hk[j, 0], hk[j, 1:kw]) & np.uint64(mask))
        if not between(i, k, j):  # j's home is not in (i, j]: it may move back to i
            hk[i] = hk[j]
            d_hash[i] = 1
            i = j
    hk[i, 0] = EMPTY
    d_hash[i] = 1
    cnt[0] -= 1


@njit(cache=True)
def rehash(hk: np.ndarray, nk: np.ndarray) -> None:  # pragma: no cover - compiled
    """Move every entry of ``hk`` into the empty table ``nk``, in slot order."""
    mask = nk.shape[0] - 1
    kw = hk.shape[1] - 1
    for i in range(hk.shape[0]):
        if hk[i, 0] == EMPTY:
            continue
        j = np.int64(_hash(hk[i, 0], hk[i, 1:kw]) & np.uint64(mask))
        while nk[j, 0] != EMPTY:
            j = (j + 1) & mask
        nk[j] = hk[i]


@njit(cache=True)
def grow(hk: np.ndarray, cap: int) -> np.ndarray:  # pragma: no cover - compiled
    """Return a table of ``cap`` slots (a power of two) holding the entries of ``hk``."""
    nk = np.full((cap, hk.shape[1]), EMPTY, np.int64)
    rehash(hk, nk)
    return nk


@njit(cache=True)
def _emit(
    x: int,
    sign: int,
    hk: np.ndarray,
    t_fk: np.ndarray,
    t_val: np.ndarray,
    t_valn: np.ndarray,
    meta: tuple,  # type: ignore[type-arg]
    out: tuple,  # type: ignore[type-arg]
) -> tuple:  # type: ignore[type-arg]  # pragma: no cover - compiled
    """Append the join result of root slot ``x`` (its slots, then each child's subtree, preorder)."""
    (_, _, _, _, node_vw, node_ns, step_node, step_parent, step_pos, step_woff, step_noff, _) = meta
    o_w, o_n, o_s, n = out
    if n == o_w.shape[0]:
        w2 = np.empty((2 * n, o_w.shape[1]), np.int64)
        w2[:n] = o_w
        n2 = np.empty((2 * n, o_n.shape[1]), np.int8)
        n2[:n] = o_n
        s2 = np.empty(2 * n, np.int8)
        s2[:n] = o_s
        o_w, o_n, o_s = w2, n2, s2
    nsteps = step_node.shape[0]
    slots = np.empty(nsteps, np.int64)
    for j in range(nsteps):
        if j == 0:
            y = x
        else:
            p = slots[step_parent[j]]
            y = h_get(hk, step_node[j], t_fk[p, step_pos[j]])
        slots[j] = y
        a = step_node[j]
        for w in range(node_vw[a]):
            o_w[n, step_woff[j] + w] = t_val[y, w]
        for w in range(node_ns[a]):
            o_n[n, step_noff[j] + w] = t_valn[y, w]
    o_s[n] = sign
    return (o_w, o_n, o_s, n + 1)


@njit(cache=True)
def _propagate(
    x: int,
    sign: int,
    stack: np.ndarray,
    hk: np.ndarray,
    t_node: np.ndarray,
    t_pk: np.ndarray,
    t_fk: np.ndarray,
    t_s: np.ndarray,
    t_live: np.ndarray,
    t_next: np.ndarray,
    t_val: np.ndarray,
    t_valn: np.ndarray,
    d_slot: np.ndarray,
    meta: tuple,  # type: ignore[type-arg]
    out: tuple,  # type: ignore[type-arg]
) -> tuple:  # type: ignore[type-arg]  # pragma: no cover - compiled
    """Bottom-up propagation from slot ``x``, which just turned live (sign 1: Insert-Update) or not (-1: Delete-Update).

    A parent turns live when its last child count arrives and stops being live with its
    first lost child; a root that turns emits its join result with ``sign``. Returns the
    (possibly grown) stack and ΔQ.
    """
    (node_nc, node_parent, node_ppos, node_child, _, _, _, _, _, _, _, _) = meta
    nn = node_nc.shape[0]
    maxc = node_child.shape[1]
    stack[0] = x
    sp = 1
    while sp:
        sp -= 1
        z = stack[sp]
        b = t_node[z]
        p = node_parent[b]
        if p < 0:
            out = _emit(z, sign, hk, t_fk, t_val, t_valn, meta, out)
            continue
        pos = node_ppos[b]
        w = h_get(hk, nn + p * maxc + pos, t_pk[z])
        while w >= 0:
            d_slot[w] = 1
            turns = False
            if sign > 0:
                t_s[w] += 1
                if t_s[w] == node_nc[p]:
                    t_live[w] = 1
                    turns = True
            elif t_live[w]:
                t_live[w] = 0
                t_s[w] = node_nc[p] - 1
                turns = True
            else:
                t_s[w] -= 1
            if turns:
                if sp == stack.shape[0]:
                    st2 = np.empty(2 * sp, np.int64)
                    st2[:sp] = stack
                    stack = st2
                stack[sp] = w
                sp += 1
            w = t_next[w, pos]
    return stack, out


@njit(cache=True)
def apply_changes(
    c_row: np.ndarray,  # global row of each change, in _seq order
    c_stale: np.ndarray,
    g_rel: np.ndarray,  # per global row: relation, insert?, primary key words, per alias: selected, fks, values
    g_ins: np.ndarray,
    g_pk: np.ndarray,
    g_sel: np.ndarray,
    g_fk: np.ndarray,
    g_fkn: np.ndarray,
    g_val: np.ndarray,
    g_valn: np.ndarray,
    hk: np.ndarray,
    t_node: np.ndarray,
    t_pk: np.ndarray,
    t_fk: np.ndarray,
    t_fkn: np.ndarray,
    t_s: np.ndarray,
    t_live: np.ndarray,
    t_next: np.ndarray,
    t_prev: np.ndarray,
    t_val: np.ndarray,
    t_valn: np.ndarray,
    t_free: np.ndarray,
    cnt: np.ndarray,  # [hash entries, free slots, high-water mark]
    d_hash: np.ndarray,  # dirty flags (written since the last checkpoint) per hash row
    d_slot: np.ndarray,  # and per tuple slot
    meta: tuple,  # type: ignore[type-arg]
    out: tuple,  # type: ignore[type-arg]
    per_change: int,  # most hash entries one change adds
    max_load: float,
) -> tuple:  # type: ignore[type-arg]  # pragma: no cover - compiled
    """Apply the changes; returns (status per change, ΔQ (words, null flags, signs, rows), the hash, its flags).

    The hash doubles whenever a change could take it past ``max_load`` (every row of the
    new table is then dirty); the tuple slots must have room for the batch's inserts (the
    caller reserves them).  Every hash row and tuple slot written is flagged in
    ``d_hash``/``d_slot``, so an incremental checkpoint writes those alone.
    """
    (node_nc, _, _, node_child, node_vw, node_ns, _, _, _, _, _, rel_nodes) = meta
    rel_ptag = rel_nodes[:, 0]  # presence tag, or -1: the relation's single alias holds presence
    n_aliases = rel_nodes[:, 1]
    nn = node_nc.shape[0]
    vcol = hk.shape[1] - 1  # the value column of a hash row
    maxc = node_child.shape[1]
    status = np.zeros(c_row.shape[0], np.int8)
    stack = np.empty(64, np.int64)
    for k in range(c_row.shape[0]):
        if cnt[0] + per_change > max_load * hk.shape[0]:
            hk = grow(hk, 2 * hk.shape[0])
            d_hash = np.ones(hk.shape[0], np.uint8)
        if c_stale[k]:
            status[k] = STALE
            continue
        g = c_row[k]
        r = g_rel[g]
        pk = g_pk[g]
        ptag = rel_ptag[r]
        single = rel_nodes[r, 2]
        # presence
        hp = h_find(hk, ptag if ptag >= 0 else single, pk)
        if g_ins[g]:
            if hp >= 0:
                status[k] = PRESENT
                continue
            if ptag >= 0:
                h_put(hk, d_hash, cnt, -(hp + 1), ptag, pk, 0)
            for j in range(n_aliases[r]):
                a = rel_nodes[r, 2 + j]
                if not g_sel[g, j]:
                    if ptag < 0:
                        h_put(hk, d_hash, cnt, -(hp + 1), a, pk, -1)
                    continue
                # allocate a slot
                if cnt[1] > 0:
                    cnt[1] -= 1
                    x = t_free[cnt[1]]
                else:
                    x = cnt[2]
                    cnt[2] += 1
                d_slot[x] = 1
                # a single alias holds presence itself: its empty slot is the one found above
                hs = hp if ptag < 0 else h_find(hk, a, pk)
                h_put(hk, d_hash, cnt, -(hs + 1), a, pk, x)
                t_node[x] = a
                t_pk[x] = pk
                nc = node_nc[a]
                s = 0
                for i in range(nc):
                    t_fk[x, i] = g_fk[g, j, i]
                    t_fkn[x, i] = g_fkn[g, j, i]
                    t_next[x, i] = -1
                    t_prev[x, i] = -1
                    if g_fkn[g, j, i]:
                        continue  # a NULL foreign key never joins
                    fk = g_fk[g, j, i]
                    tag = nn + a * maxc + i
                    hi = h_find(hk, tag, fk)
                    if hi >= 0:
                        head = hk[hi, vcol]
                        t_next[x, i] = head
                        t_prev[head, i] = x
                        d_slot[head] = 1
                        hk[hi, vcol] = x
                        d_hash[hi] = 1
                    else:
                        h_put(hk, d_hash, cnt, -(hi + 1), tag, fk, x)
                    y = h_get(hk, node_child[a, i], fk)
                    if y >= 0 and t_live[y]:
                        s += 1
                for w in range(node_vw[a]):
                    t_val[x, w] = g_val[g, j, w]
                for w in range(node_ns[a]):
                    t_valn[x, w] = g_valn[g, j, w]
                t_s[x] = s
                t_live[x] = 0
                if s < nc:
                    continue
                t_live[x] = 1
                stack, out = _propagate(
                    x, 1, stack, hk, t_node, t_pk, t_fk, t_s, t_live, t_next, t_val, t_valn, d_slot, meta, out
                )
        else:
            if hp < 0:
                status[k] = ABSENT
                continue
            if ptag >= 0:
                h_del(hk, d_hash, cnt, hp)
            for j in range(n_aliases[r]):
                a = rel_nodes[r, 2 + j]
                hs = hp if ptag < 0 else h_find(hk, a, pk)  # a single alias: the presence row itself
                if hs < 0:
                    continue
                x = hk[hs, vcol]
                if x >= 0:
                    d_slot[x] = 1
                if x < 0:  # present, not selected
                    h_del(hk, d_hash, cnt, hs)
                    continue
                if t_live[x]:
                    t_live[x] = 0
                    stack, out = _propagate(
                        x, -1, stack, hk, t_node, t_pk, t_fk, t_s, t_live, t_next, t_val, t_valn, d_slot, meta, out
                    )
                # unlink from the child indexes, then free the slot (the propagation only reads the hash)
                h_del(hk, d_hash, cnt, hs)
                for i in range(node_nc[a]):
                    if t_fkn[x, i]:
                        continue
                    nx, pv = t_next[x, i], t_prev[x, i]
                    if pv < 0:
                        hi = h_find(hk, nn + a * maxc + i, t_fk[x, i])
                        if nx < 0:
                            h_del(hk, d_hash, cnt, hi)
                        else:
                            hk[hi, vcol] = nx
                            d_hash[hi] = 1
                            t_prev[nx, i] = -1
                            d_slot[nx] = 1
                    else:
                        t_next[pv, i] = nx
                        d_slot[pv] = 1
                        if nx >= 0:
                            t_prev[nx, i] = pv
                            d_slot[nx] = 1
                t_node[x] = -1
                t_live[x] = 0
                t_s[x] = 0
                t_free[cnt[1]] = x
                cnt[1] += 1
    return status, out, hk, d_hash


@njit(cache=True)
def probe_lengths(hk: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Per occupied row, how many rows a lookup of its entry reads (1: at its home row); for measurements."""
    mask = hk.shape[0] - 1
    kw = hk.shape[1] - 1
    out = np.empty(hk.shape[0], np.int64)
    n = 0
    for i in range(hk.shape[0]):
        if hk[i, 0] == EMPTY:
            continue
        home = np.int64(_hash(hk[i, 0], hk[i, 1:kw]) & np.uint64(mask))
        out[n] = ((i - home) & mask) + 1
        n += 1
    return out[:n]
