"""The dict engine of a continuous query: one :class:`ssbj.cq.engine.Node` per alias, changes one by one.

:class:`RefCore` wires the plan's join tree into nodes (children, indexes per child, the
root's sink of join results, the slots each subtree carries, the assertion classes each
node holds) and applies a micro-batch's changes, sorted by ``_seq``, one at a time.  The
vectorised work (casting, selections, keys and slot values) is done per relation with
Arrow before the per-change loop.  It is what :class:`ssbj.cq.fastcore.FastCore` does
over arrays, for the queries that one cannot encode (assertion keys, non-integer keys).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.cq.changes import OP
from ssbj.cq.engine import Node
from ssbj.cq.expr import evaluate, to_array, where_mask
from ssbj.cq.kernels import ABSENT, PRESENT, STALE
from ssbj.cq.query import QueryPlan
from ssbj.cq.values import to_python

Row = tuple[Any, ...]


def _keys(table: pa.Table, cols: tuple[str, ...]) -> list[Any]:
    """Key values per row: a scalar for one column, a tuple for several (None if any part is NULL)."""
    if len(cols) == 1:
        values: list[Any] = table.column(cols[0]).to_pylist()
        return values
    parts = [table.column(c).to_pylist() for c in cols]
    if not any(table.column(c).null_count for c in cols):
        return list(zip(*parts, strict=True))
    return [None if None in t else t for t in zip(*parts, strict=True)]


class RefCore:
    """The nodes of one query, and the primary keys present per relation."""

    def __init__(self, plan: QueryPlan) -> None:
        self.plan = plan
        self.nodes: dict[str, Node] = {a: Node(a) for a in plan.order}
        for a in plan.order:
            ap, node = plan.aliases[a], self.nodes[a]
            node.children = [self.nodes[c] for c in ap.children]
            node.nc = len(node.children)
            node.index = [{} for _ in node.children]
            for pos, c in enumerate(node.children):
                c.parent = node
                c.parent_pos = pos
        for a in reversed(plan.order):  # children before parents: slots carried from each subtree
            node = self.nodes[a]
            node.nslots = len(plan.aliases[a].slots) + sum(c.nslots for c in node.children)
        root = self.nodes[plan.root]
        root.is_root = True
        root.sink = ([], [])
        self._assert_plans()
        self.present: dict[str, set[Any]] = {r: set() for r in plan.relations()}

    def _assert_plans(self) -> None:
        """Per node, the assertion classes its subtree holds: own column, children's exports, export or check."""
        plan = self.plan
        exports: dict[str, list[int]] = {}
        for alias in reversed(plan.order):  # children before parents
            ap, node = plan.aliases[alias], self.nodes[alias]
            own = {cls: i for i, (cls, _) in enumerate(ap.assert_cols)}
            classes = sorted(set(own) | {cls for c in ap.children for cls in exports[c]})
            out: list[int] = []
            for cls in classes:
                from_children = [(ci, exports[c].index(cls)) for ci, c in enumerate(ap.children) if cls in exports[c]]
                export = plan.asserts[cls].lca != alias
                node.assert_plan.append((own.get(cls, -1), from_children, export))
                if export:
                    out.append(cls)
            exports[alias] = out

    def _prepare(self, relation: str, table: pa.Table) -> tuple[list[Any], list[bool], list[Any]]:
        """Per-row keys, ops and, per alias of ``relation``, (node, selected, fks, slots, assertion values)."""
        plan = self.plan
        spec = plan.tables[relation]
        n = table.num_rows
        pks = _keys(table, spec.primary_key)
        ins = np.asarray(pc.equal(table.column(OP), "+")).tolist()
        per_alias = []
        for a in plan.aliases_of(relation):
            ap = plan.aliases[a]
            node = self.nodes[a]
            resolve = plan.column_resolver(a, table)
            sel = where_mask(ap.selection, resolve, n).tolist()
            fk_cols = [_keys(table, plan.aliases[c].parent_fk) for c in ap.children]
            fks = list(zip(*fk_cols, strict=True)) if fk_cols else [()] * n
            slot_cols = [to_python(to_array(evaluate(plan.slots[i].node, resolve, n), n)) for i in ap.slots]
            local = list(zip(*slot_cols, strict=True)) if slot_cols else [()] * n
            asrt_cols = [table.column(col).to_pylist() for _, col in ap.assert_cols]
            asrt = list(zip(*asrt_cols, strict=True)) if asrt_cols else [()] * n
            per_alias.append((node, sel, fks, local, asrt))
        return pks, ins, per_alias

    def apply(
        self,
        names: list[str],
        raw: list[pa.Table],
        rels_a: np.ndarray,
        rows_a: np.ndarray,
        stale: np.ndarray,
        reject: Callable[[int, int, int], None],
    ) -> tuple[int, list[Row], list[Row]]:
        """Apply sorted changes one by one; ``reject(relation index, row, reason code)`` for each refused one.

        Returns the number applied and the root's sink: the join results that entered and
        that left ΔQ (the caller empties both lists once it has used them).
        """
        prepared = [(name, *self._prepare(name, table)) for name, table in zip(names, raw, strict=True)]
        root = self.nodes[self.plan.root]
        plus, minus = root.sink
        rels, rows, stale_l = rels_a.tolist(), rows_a.tolist(), stale.tolist()
        present = [self.present[p[0]] for p in prepared]
        applied = 0
        for k in range(len(rels)):
            r, i = rels[k], rows[k]
            _, pks, ins, per_alias = prepared[r]
            if stale_l[k]:
                reject(r, i, STALE)
                continue
            pk = pks[i]
            have = present[r]
            if ins[i]:
                if pk in have:
                    reject(r, i, PRESENT)
                    continue
                have.add(pk)
                for node, sel, fks, local, asrt in per_alias:
                    if sel[i]:
                        node.insert(pk, fks[i], local[i], asrt[i])
            else:
                if pk not in have:
                    reject(r, i, ABSENT)
                    continue
                have.discard(pk)
                for node, _, _, _, _ in per_alias:
                    if pk in node.rows:
                        node.delete(pk)
            applied += 1
        return applied, plus, minus

    def state(self) -> dict[str, Any]:
        """Return the nodes' tuples and indexes, and the keys present (compared exactly in tests)."""
        return {"nodes": {a: n.state() for a, n in self.nodes.items()}, "present": self.present}

    def load(self, state: dict[str, Any]) -> None:
        """Take the state :meth:`state` returned (of the same plan)."""
        for a, n in self.nodes.items():
            n.load(state["nodes"][a])
        self.present = state["present"]
