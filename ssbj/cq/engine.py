"""Cquirrel's live-tuple maintenance of a foreign-key-acyclic join (Wang & Yi, SIGMOD 2020).

Per alias ``R`` of the join tree (:class:`Node`):

* ``rows``  every tuple of sigma(R): key -> (foreign keys to the children, own slots, own
  assertion-key values);
* ``live``  I(L(R)): key -> the tuple's *carried* values, its own slots and those of the
  live child tuples it joins (so the root's carried values are the join result), then the
  assertion-key values it passes up;
* ``nonlive`` I(N(R)) with s(t): key -> the number of children on which t is alive;
* ``index[i]`` I(R, R_c) for the i-th child: the child's key -> keys of R that reference it.

A tuple is live when s(t) = |C(R)| and every assertion key agrees (SQL equality: NULL
never agrees); insert and delete propagate bottom-up (Algorithms 1-4 of the seed paper):
a child turning live raises s of the parents that reference it, a live child deleted
turns its live parents non-live; when the root's tuple changes state, a join result
enters or leaves ΔQ.  A child arriving before its parent is normal (its parent simply
is not there yet), a parent before its child stays non-live until the child arrives.
"""

from __future__ import annotations

from typing import Any

BOTTOM = object()  # an assertion key that disagrees: the tuple cannot be live


class Node:
    """The indexes of one alias."""

    __slots__ = (
        "alias",
        "assert_plan",
        "children",
        "index",
        "is_root",
        "live",
        "nc",
        "nonlive",
        "nslots",
        "parent",
        "parent_pos",
        "rows",
        "sink",
    )

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.children: list[Node] = []
        self.parent: Node | None = None
        self.parent_pos = -1  # this node's position among its parent's children
        self.nc = 0
        self.nslots = 0  # slots carried from this subtree
        # per assertion class handled here: (own value position or -1, [(child position, export position)], export?)
        self.assert_plan: list[tuple[int, list[tuple[int, int]], bool]] = []
        self.is_root = False
        self.rows: dict[Any, tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]] = {}
        self.live: dict[Any, tuple[Any, ...]] = {}
        self.nonlive: dict[Any, int] = {}
        self.index: list[dict[Any, set[Any]]] = []
        self.sink: Any = None  # root only: (plus list, minus list) of join results

    # -- liveness
    def _carried(self, fks: tuple[Any, ...], local: tuple[Any, ...], own_assert: tuple[Any, ...]) -> Any:
        """Return the carried values of a tuple all of whose children are live, or BOTTOM."""
        vals = local
        children = self.children
        if not self.assert_plan:
            for i, c in enumerate(children):
                vals = vals + c.live[fks[i]]
            return vals
        got = [c.live[fks[i]] for i, c in enumerate(children)]
        for i, c in enumerate(children):
            vals = vals + got[i][: c.nslots]
        exports: list[Any] = []
        for own, from_children, export in self.assert_plan:
            sources = [own_assert[own]] if own >= 0 else []
            sources.extend(got[ci][children[ci].nslots + p] for ci, p in from_children)
            first = sources[0]
            if first is None or any(v != first for v in sources[1:]):
                return BOTTOM
            if export:
                exports.append(first)
        return vals + tuple(exports) if exports else vals

    # -- Algorithm 1: Insert(t, R)
    def insert(self, pk: Any, fks: tuple[Any, ...], local: tuple[Any, ...], own_assert: tuple[Any, ...]) -> None:
        """Insert a tuple that is not present (the caller checked)."""
        self.rows[pk] = (fks, local, own_assert)
        if not self.nc and not self.assert_plan:  # a leaf: live at once, carrying its own slots
            self._insert_update(pk, local)
            return
        s = 0
        for i, c in enumerate(self.children):
            fk = fks[i]
            if fk is None:
                continue  # a NULL foreign key never joins
            bucket = self.index[i].get(fk)
            if bucket is None:
                self.index[i][fk] = {pk}
            else:
                bucket.add(pk)
            if fk in c.live:
                s += 1
        if s == self.nc:
            carried = self._carried(fks, local, own_assert)
            if carried is not BOTTOM:
                self._insert_update(pk, carried)
                return
        self.nonlive[pk] = s

    # -- Algorithm 2: Insert-Update(t, R)
    def _insert_update(self, pk: Any, carried: tuple[Any, ...]) -> None:
        self.live[pk] = carried
        p = self.parent
        if p is None:  # the root: a join result enters ΔQ
            self.sink[0].append(carried)
            return
        refs = p.index[self.parent_pos].get(pk)
        if not refs:
            return
        nonlive = p.nonlive
        for ppk in refs:
            s = nonlive[ppk] + 1
            if s == p.nc:
                fks, local, own_assert = p.rows[ppk]
                carried_p = p._carried(fks, local, own_assert)
                if carried_p is not BOTTOM:
                    del nonlive[ppk]
                    p._insert_update(ppk, carried_p)
                    continue
            nonlive[ppk] = s

    # -- Algorithm 3: Delete(t, R)
    def delete(self, pk: Any) -> None:
        """Delete a tuple that is present (the caller checked)."""
        fks, _, _ = self.rows.pop(pk)
        if pk in self.live:
            self._delete_update(pk)
        del self.nonlive[pk]  # _delete_update leaves it non-live; a non-live tuple just goes
        for i in range(self.nc):
            fk = fks[i]
            if fk is None:
                continue
            bucket = self.index[i][fk]
            bucket.discard(pk)
            if not bucket:
                del self.index[i][fk]

    # -- Algorithm 4: Delete-Update(t, R)
    def _delete_update(self, pk: Any) -> None:
        carried = self.live.pop(pk)
        self.nonlive[pk] = self.nc  # all children live; it leaves L(R) because it goes or a parent check fails
        p = self.parent
        if p is None:  # the root: a join result leaves ΔQ
            self.sink[1].append(carried)
            return
        refs = p.index[self.parent_pos].get(pk)
        if not refs:
            return
        nonlive = p.nonlive
        for ppk in refs:
            s = nonlive.get(ppk)
            if s is not None:
                nonlive[ppk] = s - 1
            else:
                p._delete_update(ppk)
                nonlive[ppk] = p.nc - 1

    def state(self) -> dict[str, Any]:
        """Return the node's indexes (for checkpoints and exact comparisons)."""
        return {
            "rows": self.rows,
            "live": self.live,
            "nonlive": self.nonlive,
            "index": self.index,
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.rows = state["rows"]
        self.live = state["live"]
        self.nonlive = state["nonlive"]
        self.index = state["index"]
