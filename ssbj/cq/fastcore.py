"""The live-tuple maintenance over arrays: Arrow in, numba kernels, ΔQ columns out.

:class:`FastCore` holds the state of :mod:`ssbj.cq.engine` as int64 arrays (one hash
table over ``(tag, key words)``, tuple slots with child counts s(t), live flags,
foreign keys and doubly linked index lists, own slot values as words) and applies a
micro-batch's changes with :func:`ssbj.cq.kernels.apply_changes`.  Values are encoded on
the boundary (:mod:`ssbj.cq.slotcodec`): integer keys as int64 words (a composite key as
several words), slot values as words per type (a decimal as its two 64-bit halves, a
float as its bits, a string as a code of a per-slot dictionary).  What it cannot encode
(non-integer keys, assertion keys, other value types) is refused by
:func:`fast_unsupported`; the caller then uses the dict-based engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.cq.expr import evaluate, to_array, where_mask
from ssbj.cq.kernels import EMPTY, apply_changes, grow
from ssbj.cq.query import QueryPlan
from ssbj.cq.slotcodec import SlotCodec, int_words, slot_kind
from ssbj.errors import CheckpointError

MAX_LOAD = 0.7  # the hash grows before a batch could take it past this load


def fast_unsupported(plan: QueryPlan) -> str | None:
    """Why the array engine cannot run ``plan`` (None: it can)."""
    if plan.asserts:
        return "assertion keys (a join graph with a second path to an alias)"
    for a, ap in plan.aliases.items():
        spec = plan.tables[ap.relation]
        for col in (*spec.primary_key, *ap.parent_fk):
            owner = plan.tables[plan.aliases[ap.parent].relation] if col in ap.parent_fk and ap.parent else spec
            t = owner.columns[col].type
            if not pa.types.is_integer(t) or t == pa.uint64():
                return f"key column {a}.{col} of type {t} (integer keys only)"
    for s in plan.slots:
        if s.type is None or slot_kind(s.type) is None:
            return f"slot {s.node.sql()} of type {s.type}"
    return None


class FastCore:
    """Array state of one query's join tree, and the batch boundary around the kernel."""

    # tuple slots (see kernels.apply_changes), allocated by _alloc_tuples
    t_node: np.ndarray
    t_pk: np.ndarray
    t_fk: np.ndarray
    t_fkn: np.ndarray
    t_s: np.ndarray
    t_live: np.ndarray
    t_next: np.ndarray
    t_prev: np.ndarray
    t_val: np.ndarray
    t_valn: np.ndarray
    t_free: np.ndarray
    d_slot: np.ndarray  # dirty flag per tuple slot (written since the last checkpoint)

    def __init__(self, plan: QueryPlan, layout: list[int]) -> None:
        self.plan = plan
        order = plan.order
        self.node_id = {a: i for i, a in enumerate(order)}
        nn = len(order)
        rels = plan.relations()
        self.rel_id = {r: i for i, r in enumerate(rels)}
        self.k = max(len(plan.tables[r].primary_key) for r in rels)
        self.maxc = max(1, *(len(plan.aliases[a].children) for a in order))
        self.max_al = max(len(plan.aliases_of(r)) for r in rels)
        self.codec = SlotCodec(plan)
        self.kinds = self.codec.kinds
        node_vw = np.zeros(nn, np.int64)
        node_ns = np.zeros(nn, np.int64)
        self.word_off: dict[int, int] = {}  # slot index -> word offset within its node's values
        for a in order:
            w = 0
            for si in plan.aliases[a].slots:
                self.word_off[si] = w
                w += self.kinds[si][1]
            node_vw[self.node_id[a]] = w
            node_ns[self.node_id[a]] = len(plan.aliases[a].slots)
        self.w = max(1, int(node_vw.max()))
        self.ns = max(1, int(node_ns.max()))
        node_nc = np.array([len(plan.aliases[a].children) for a in order], np.int64)
        parents = [plan.aliases[a].parent for a in order]
        node_parent = np.array([-1 if p is None else self.node_id[p] for p in parents], np.int64)
        node_ppos = np.full(nn, -1, np.int64)
        node_child = np.full((nn, self.maxc), -1, np.int64)
        for a in order:
            for i, c in enumerate(plan.aliases[a].children):
                node_child[self.node_id[a], i] = self.node_id[c]
                node_ppos[self.node_id[c]] = i
        # the gather program: preorder steps from the root, as the carried values are laid out
        steps: list[tuple[int, int, int]] = []

        def walk(a: str, parent_step: int, pos: int) -> None:
            me = len(steps)
            steps.append((self.node_id[a], parent_step, pos))
            for i, c in enumerate(plan.aliases[a].children):
                walk(c, me, i)

        walk(plan.root, -1, -1)
        step_node = np.array([s[0] for s in steps], np.int64)
        step_woff = np.concatenate([[0], np.cumsum(node_vw[step_node])[:-1]]).astype(np.int64)
        step_noff = np.concatenate([[0], np.cumsum(node_ns[step_node])[:-1]]).astype(np.int64)
        self.out_w = int(node_vw[step_node].sum()) or 1
        self.out_n = int(node_ns[step_node].sum()) or 1
        # output position of each slot: (word offset, null offset), in carried order (= layout)
        self.out_pos: dict[int, tuple[int, int]] = {}
        for j, (nid, _, _) in enumerate(steps):
            a = order[nid]
            for q, si in enumerate(plan.aliases[a].slots):
                self.out_pos[si] = (int(step_woff[j]) + self.word_off[si], int(step_noff[j]) + q)
        assert sorted(self.out_pos, key=lambda si: self.out_pos[si]) == layout or not layout  # noqa: S101
        rel_nodes = np.full((len(rels), 2 + self.max_al), -1, np.int64)
        for r in rels:
            al = plan.aliases_of(r)
            ri = self.rel_id[r]
            rel_nodes[ri, 0] = nn + nn * self.maxc + ri if len(al) > 1 else -1
            rel_nodes[ri, 1] = len(al)
            for j, a in enumerate(al):
                rel_nodes[ri, 2 + j] = self.node_id[a]
        self.meta = (
            node_nc,
            node_parent,
            node_ppos,
            node_child,
            node_vw,
            node_ns,
            step_node,
            np.array([s[1] for s in steps], np.int64),
            np.array([s[2] for s in steps], np.int64),
            step_woff,
            step_noff,
            rel_nodes,
        )
        self.cnt = np.zeros(3, np.int64)  # hash entries, free slots, high-water mark
        self.hk = np.full((1024, 2 + self.k), EMPTY, np.int64)  # rows: tag, key words, value
        self.d_hash = np.zeros(1024, np.uint8)  # dirty flag per hash row
        self._dirty: tuple[int, np.ndarray, np.ndarray] | None = None  # the last increment's rows
        self._alloc_tuples(256)

    # -- storage
    def _alloc_tuples(self, cap: int, keep: bool = True) -> None:
        old = getattr(self, "t_node", None) if keep else None
        hw = int(self.cnt[2])
        k, mc, w, ns = self.k, self.maxc, self.w, self.ns
        new: dict[str, np.ndarray] = {
            "t_node": np.full(cap, -1, np.int64),
            "t_pk": np.zeros((cap, k), np.int64),
            "t_fk": np.zeros((cap, mc, k), np.int64),
            "t_fkn": np.zeros((cap, mc), np.int8),
            "t_s": np.zeros(cap, np.int64),
            "t_live": np.zeros(cap, np.int8),
            "t_next": np.full((cap, mc), -1, np.int64),
            "t_prev": np.full((cap, mc), -1, np.int64),
            "t_val": np.zeros((cap, w), np.int64),
            "t_valn": np.zeros((cap, ns), np.int8),
            "t_free": np.zeros(cap, np.int64),
            "d_slot": np.zeros(cap, np.uint8),
        }
        if old is not None:
            for name, arr in new.items():
                n = int(self.cnt[1]) if name == "t_free" else hw
                arr[:n] = getattr(self, name)[:n]
        for name, arr in new.items():
            setattr(self, name, arr)

    TUPLE_ARRAYS = ("t_node", "t_pk", "t_fk", "t_fkn", "t_s", "t_live", "t_next", "t_prev", "t_val", "t_valn")

    def _reserve(self, new_slots: int) -> None:
        """Room for ``new_slots`` more tuples (the kernel grows the hash itself, not the slots)."""
        cap = len(self.t_node)
        hw, free = int(self.cnt[2]), int(self.cnt[1])
        if hw + new_slots - free > cap:
            self._alloc_tuples(max(2 * cap, hw + new_slots))

    # -- the boundary
    @property
    def dicts(self) -> dict[int, list[str]]:
        """The string slots' dictionaries (part of the state)."""
        return self.codec.dicts

    def prepare(self, relation: str, table: pa.Table) -> dict[str, np.ndarray]:
        """Return a relation's validated change rows as the kernel's per-row arrays."""
        plan = self.plan
        n = table.num_rows
        k, a_max, mc = self.k, self.max_al, self.maxc
        pk = np.zeros((n, k), np.int64)
        for j, col in enumerate(plan.tables[relation].primary_key):
            pk[:, j] = int_words(table.column(col).combine_chunks())[0]
        sel = np.zeros((n, a_max), np.bool_)
        fk = np.zeros((n, a_max, mc, k), np.int64)
        fkn = np.zeros((n, a_max, mc), np.int8)
        val = np.zeros((n, a_max, self.w), np.int64)
        valn = np.zeros((n, a_max, self.ns), np.int8)
        for j, a in enumerate(plan.aliases_of(relation)):
            ap = plan.aliases[a]
            resolve = plan.column_resolver(a, table)
            sel[:, j] = where_mask(ap.selection, resolve, n)
            for i, c in enumerate(ap.children):
                for q, col in enumerate(plan.aliases[c].parent_fk):
                    v, nul = int_words(table.column(col).combine_chunks())
                    fk[:, j, i, q] = v
                    fkn[:, j, i] |= nul
            for q, si in enumerate(ap.slots):
                arr = to_array(evaluate(plan.slots[si].node, resolve, n), n)
                words, nulls = self.codec.encode(si, arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
                off = self.word_off[si]
                val[:, j, off : off + words.shape[1]] = words
                valn[:, j, q] = nulls
        fk[fkn.astype(bool)] = 0
        ins = np.asarray(pc.equal(table.column("_op"), "+"))
        return {"pk": pk, "ins": ins, "sel": sel, "fk": fk, "fkn": fkn, "val": val, "valn": valn}

    def run(
        self,
        prepared: list[dict[str, np.ndarray]],
        rel_of: list[str],
        rels: np.ndarray,
        rows: np.ndarray,
        stale: np.ndarray,
    ) -> tuple[np.ndarray, list[pa.Array] | None, np.ndarray]:
        """Apply changes (sorted: part ``rels[k]``, row ``rows[k]``).

        Returns the status per change, ΔQ as one array per slot (None: empty) and per row whether it enters ΔQ.
        """
        sizes = np.array([len(p["ins"]) for p in prepared], np.int64)
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

        def cat(name: str) -> np.ndarray:
            return np.concatenate([p[name] for p in prepared])

        g_rel = np.repeat(np.array([self.rel_id_of(r) for r in rel_of], np.int64), sizes)
        g_ins = cat("ins")
        self._reserve(
            sum(int(p["ins"].sum()) * len(self.plan.aliases_of(r)) for p, r in zip(prepared, rel_of, strict=True))
        )
        c_row = offs[rels] + rows
        out0 = (
            np.empty((max(16, len(c_row)), self.out_w), np.int64),
            np.empty((max(16, len(c_row)), self.out_n), np.int8),
            np.empty(max(16, len(c_row)), np.int8),
            0,
        )
        status, out, self.hk, self.d_hash = apply_changes(
            c_row,
            stale,
            g_rel,
            g_ins,
            cat("pk"),
            cat("sel"),
            cat("fk"),
            cat("fkn"),
            cat("val"),
            cat("valn"),
            self.hk,
            self.t_node,
            self.t_pk,
            self.t_fk,
            self.t_fkn,
            self.t_s,
            self.t_live,
            self.t_next,
            self.t_prev,
            self.t_val,
            self.t_valn,
            self.t_free,
            self.cnt,
            self.d_hash,
            self.d_slot,
            self.meta,
            out0,
            1 + self.max_al * (1 + self.maxc),
            MAX_LOAD,
        )
        o_w, o_n, o_s, n_out = out
        return status, self._slots(o_w[:n_out], o_n[:n_out]) if n_out else None, o_s[:n_out] > 0

    def rel_id_of(self, relation: str) -> int:
        """Index of ``relation`` in the kernel's relation table."""
        return self.rel_id[relation]

    def _slots(self, words: np.ndarray, nulls: np.ndarray) -> list[pa.Array]:
        """ΔQ rows as one Arrow array per slot of the plan."""
        out: list[pa.Array] = []
        for si, (_, nw) in enumerate(self.kinds):
            wo, no = self.out_pos[si]
            out.append(self.codec.decode(si, words[:, wo : wo + nw], nulls[:, no]))
        return out

    # -- state
    def arrays(self) -> dict[str, np.ndarray]:
        """Return the state's arrays: tuple slots cut to the high-water mark, the hash's entries alone."""
        hw, free = int(self.cnt[2]), int(self.cnt[1])
        out = {name: getattr(self, name)[:hw] for name in self.TUPLE_ARRAYS}
        out["t_free"] = self.t_free[:free]
        used = self.hk[:, 0] != EMPTY
        out["hk"], out["cnt"] = self.hk[used], self.cnt
        return out

    def base_arrays(self) -> dict[str, np.ndarray]:
        """Return :meth:`arrays` with the hash's layout (capacity, row of each entry): increments patch rows."""
        out = self.arrays()
        self._dirty = None  # committing a full state clears every flag
        out["hk_idx"] = np.flatnonzero(self.hk[:, 0] != EMPTY)
        out["hk_cap"] = np.array([len(self.hk)], np.int64)
        return out

    def increment_arrays(self) -> dict[str, np.ndarray]:
        """Return what changed since :meth:`clear_dirty`: dirty hash rows and tuple slots, the free list, counts."""
        hw, free = int(self.cnt[2]), int(self.cnt[1])
        h_idx = np.flatnonzero(self.d_hash)
        s_idx = np.flatnonzero(self.d_slot[:hw])
        self._dirty = (len(self.d_hash), h_idx, s_idx)
        out = {name: getattr(self, name)[s_idx] for name in self.TUPLE_ARRAYS}
        out.update(
            s_idx=s_idx,
            hk_idx=h_idx,
            hk=self.hk[h_idx],
            hk_cap=np.array([len(self.hk)], np.int64),
            t_free=self.t_free[:free].copy(),
            cnt=self.cnt.copy(),
        )
        return out

    def dirty_fraction(self) -> float:
        """Share of the state (hash rows and tuple slots, by bytes) an increment would write now."""
        hw = int(self.cnt[2])
        row_h = self.hk.shape[1] * 8
        row_s = sum(getattr(self, n)[:1].nbytes for n in self.TUPLE_ARRAYS)
        dirty = int(np.count_nonzero(self.d_hash)) * row_h + int(np.count_nonzero(self.d_slot[:hw])) * row_s
        whole = int(self.cnt[0]) * row_h + hw * row_s
        return float(dirty / max(1, whole))

    def clear_dirty(self) -> None:
        """Everything is in the last checkpoint: no row is dirty (after an increment, only its rows are reset)."""
        dirty, self._dirty = self._dirty, None
        if dirty is not None and dirty[0] == len(self.d_hash):
            self.d_hash[dirty[1]] = 0
            self.d_slot[dirty[2]] = 0
        else:
            self.d_hash[:] = 0
            self.d_slot[:] = 0

    def load_arrays(self, arrays: dict[str, np.ndarray], dicts: dict[int, list[str]]) -> None:
        """Restore :meth:`arrays` or :meth:`base_arrays` (and the string dictionaries); nothing is dirty after."""
        self.cnt = arrays["cnt"].copy()
        if "hk_idx" in arrays:  # the same layout, so that increments' rows land where they were
            self.hk = np.full((int(arrays["hk_cap"][0]), 2 + self.k), EMPTY, np.int64)
            self.hk[arrays["hk_idx"]] = arrays["hk"]
        else:  # format 2: the entries alone, re-inserted (the layout may differ; the entries do not)
            cap = 1024
            while len(arrays["hk"]) > 0.5 * cap:
                cap *= 2
            self.hk = grow(arrays["hk"], cap)
        self.d_hash = np.zeros(len(self.hk), np.uint8)
        hw = int(self.cnt[2])
        self._alloc_tuples(max(256, hw + hw // 4), keep=False)
        for name in self.TUPLE_ARRAYS:
            getattr(self, name)[:hw] = arrays[name]
        self.t_free[: int(self.cnt[1])] = arrays["t_free"]
        self.codec.set_dicts(dicts)

    def apply_increment(self, arrays: dict[str, np.ndarray], dicts: dict[int, list[str]], where: str) -> None:
        """Patch the state with :meth:`increment_arrays` taken right after the state it was restored to."""
        cap = int(arrays["hk_cap"][0])
        h_idx = arrays["hk_idx"]
        if cap != len(self.hk):  # the hash grew in between: then every row of the new table is in the increment
            if len(h_idx) != cap:
                raise CheckpointError(f"{where}: the hash grew to {cap} rows but the increment holds {len(h_idx)}")
            self.hk = np.full((cap, 2 + self.k), EMPTY, np.int64)
            self.d_hash = np.zeros(cap, np.uint8)
        self.hk[h_idx] = arrays["hk"]
        hw = int(arrays["cnt"][2])
        if hw > len(self.t_node):
            self._alloc_tuples(max(hw + hw // 4, 2 * len(self.t_node)))
        s_idx = arrays["s_idx"]
        for name in self.TUPLE_ARRAYS:
            getattr(self, name)[s_idx] = arrays[name]
        self.cnt = arrays["cnt"].copy()
        self.t_free[: int(self.cnt[1])] = arrays["t_free"]
        self.codec.set_dicts(dicts)

    def state(self) -> dict[str, Any]:
        """Return the state comparably: tuple arrays as bytes, hash entries sorted (layout-free)."""
        arrs = self.arrays()
        used = self.hk[:, 0] != EMPTY
        entries = self.hk[used]
        entries = entries[np.lexsort(entries.T[::-1])] if len(entries) else entries
        out: dict[str, Any] = {n: a.tobytes() for n, a in arrs.items() if n not in ("hk", "cnt")}
        out["hash"] = entries.tobytes()
        out["cnt"] = self.cnt.tolist()
        out["dicts"] = self.dicts
        return out

    def nbytes(self) -> int:
        """Bytes held by the arrays (allocated capacity) and the string dictionaries."""
        total = sum(getattr(self, n).nbytes for n in (*self.TUPLE_ARRAYS, "t_free", "hk", "cnt", "d_hash", "d_slot"))
        return int(total) + sum(sum(len(v) + 49 for v in vals) for vals in self.dicts.values())
