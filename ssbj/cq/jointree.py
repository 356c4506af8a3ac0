"""The join tree of a continuous query: key joins as edges, one root, assertion keys.

An edge P -> C exists when every primary-key column of alias C is equated with a column
of alias P (P references C).  The root is the one alias no other references; a spanning
tree is chosen breadth-first from it; the equalities the tree does not imply (a second
path to one alias, as Q5's ``c_nationkey = s_nationkey``) become assertion keys, checked at
the lowest common ancestor of their aliases.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ssbj.cq.schema import Table
from ssbj.errors import ConfigError

if TYPE_CHECKING:  # query.py holds the alias plans and imports this module
    from ssbj.cq.query import AliasPlan


@dataclass
class AssertClass:
    """Columns the query equates that the join tree does not: all must hold one non-NULL value."""

    members: list[tuple[str, str]]  # (alias, column)
    lca: str = ""


def join_tree(
    aliases: dict[str, AliasPlan],
    tables: dict[str, Table],
    equalities: list[tuple[tuple[str, str], tuple[str, str]]],
) -> tuple[dict[str, str | None], dict[str, tuple[str, ...]]]:
    """Parent of every alias in a spanning tree of the key-join graph, and the parent's FK columns."""
    uf = _UnionFind()
    for a, b in equalities:
        uf.union(a, b)
    # candidate edges P -> C: every key column of C is equated with a column of P
    cand: dict[str, list[tuple[str, tuple[str, ...]]]] = {a: [] for a in aliases}
    indeg = dict.fromkeys(aliases, 0)
    for c, cp in aliases.items():
        pk = tables[cp.relation].primary_key
        for p, pp in aliases.items():
            if p == c:
                continue
            fk_cols: list[str] = []
            for k in pk:
                cls = uf.find((c, k))
                options = [
                    col for col in tables[pp.relation].columns if uf.find((p, col)) == cls and (p, col) in uf.parent
                ]
                if not options:
                    break
                declared = [
                    f.columns[f.ref_columns.index(k) if f.ref_columns else pk.index(k)]
                    for f in tables[pp.relation].foreign_keys
                    if f.ref_table == cp.relation and (f.ref_columns or pk) == pk
                ]
                fk_cols.append(next((o for o in options if o in declared), sorted(options)[0]))
            else:
                cand[p].append((c, tuple(fk_cols)))
                indeg[c] += 1
    for a, b in equalities:
        covered = any(_covers(a, b, p, c, fk, tables, aliases) for p in cand for c, fk in cand[p])
        if not covered and not _implied(a, b, cand, uf):
            raise ConfigError(
                f"continuous query: join {a[0]}.{a[1]} = {b[0]}.{b[1]} is not a key join "
                "(one side must be the primary key of its table)"
            )
    roots = [a for a, d in indeg.items() if d == 0]
    if len(roots) != 1:
        what = (
            "no alias that no other references (a join cycle)"
            if not roots
            else f"several roots {sorted(roots)} (a cross product, or a join not on a key)"
        )
        raise ConfigError(f"continuous query: the join is not foreign-key acyclic with one root: {what}")
    _check_acyclic(cand)
    parent: dict[str, str | None] = {roots[0]: None}
    parent_fk: dict[str, tuple[str, ...]] = {roots[0]: ()}
    queue = deque([roots[0]])
    while queue:
        p = queue.popleft()
        for c, fk in sorted(cand[p]):
            if c not in parent:
                parent[c] = p
                parent_fk[c] = fk
                queue.append(c)
    missing = [a for a in aliases if a not in parent]
    if missing:
        raise ConfigError(
            f"continuous query: alias(es) {missing} are not joined to the rest by a key (a cross product)"
        )
    return parent, parent_fk


def _covers(
    a: tuple[str, str],
    b: tuple[str, str],
    p: str,
    c: str,
    fk: tuple[str, ...],
    tables: dict[str, Table],
    aliases: dict[str, AliasPlan],
) -> bool:
    pairs = set(zip(((p, f) for f in fk), ((c, k) for k in tables[aliases[c].relation].primary_key), strict=True))
    return (a, b) in pairs or (b, a) in pairs


def _implied(
    a: tuple[str, str], b: tuple[str, str], cand: dict[str, list[tuple[str, tuple[str, ...]]]], uf: Any
) -> bool:
    """Accept an equality of two foreign keys (Q5's c_nationkey = s_nationkey) if a key is in its class."""
    cls = uf.find(a)
    for p, edges in cand.items():
        for _c, fk in edges:
            for f in fk:
                if uf.find((p, f)) == cls:
                    return True
    return False


def _check_acyclic(cand: dict[str, list[tuple[str, tuple[str, ...]]]]) -> None:
    state: dict[str, int] = {}

    def visit(a: str) -> None:
        state[a] = 1
        for c, _ in cand[a]:
            if state.get(c) == 1:
                raise ConfigError(f"continuous query: the key joins form a cycle through {a} and {c}")
            if c not in state:
                visit(c)
        state[a] = 2

    for a in cand:
        if a not in state:
            visit(a)


def assertions(
    aliases: dict[str, AliasPlan],
    tables: dict[str, Table],
    equalities: list[tuple[tuple[str, str], tuple[str, str]]],
    order: list[str],
) -> list[AssertClass]:
    """Equalities the tree's edges do not imply, as assertion keys at their aliases' lowest common ancestor."""
    full, tree = _UnionFind(), _UnionFind()
    for a, b in equalities:
        full.union(a, b)
    for c, ap in aliases.items():
        if ap.parent is not None:
            for f, k in zip(ap.parent_fk, tables[ap.relation].primary_key, strict=True):
                tree.union((ap.parent, f), (c, k))
    classes: dict[Any, list[tuple[str, str]]] = {}
    for m in full.parent:
        classes.setdefault(full.find(m), []).append(m)
    out: list[AssertClass] = []
    for members in classes.values():
        if len({tree.find(m) for m in members}) <= 1:
            continue
        members = sorted(members)
        paths = [_path_to_root(m[0], aliases) for m in members]
        lca = next(a for a in paths[0] if all(a in p for p in paths))
        idx = len(out)
        out.append(AssertClass(members, lca))
        for alias, col in members:
            aliases[alias].assert_cols.append((idx, col))
    return out


def _path_to_root(alias: str, aliases: dict[str, AliasPlan]) -> list[str]:
    path = [alias]
    while aliases[path[-1]].parent is not None:
        path.append(aliases[path[-1]].parent)  # type: ignore[arg-type]
    return path


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)
