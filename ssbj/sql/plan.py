"""The binary plan of a query: a tree of scans, filters, projections and binary joins.

Built from the sqlglot tree after qualification (every column names its input): filters on
one input are pushed down onto its scan, scans read only the columns the query uses, inner
joins are ordered greedily along join predicates (FROM order, next input connected to the
inputs joined so far), and a projection after a join drops the columns no later step needs,
as a streaming SQL planner (Flink's Calc) does. Subqueries in expressions become their own
subtrees, inputs of the filter or projection that holds them; views and CTEs are planned
where they are used. This is the plan TSC (``ssbj.sql.tsc``) converts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ssbj.errors import ConfigError
from ssbj.sql._sqlglot import exp, require
from ssbj.sql.parse import DIALECT, from_clause, parse_script, where

__all__ = ["Node", "build_plan", "render", "walk"]

_EQUI_KINDS = ("inner", "left")


@dataclass(eq=False)
class Node:
    """One operator of a plan; identity (not value) tells nodes apart."""

    op: str
    inputs: list[Node]
    columns: tuple[str, ...]
    detail: str = ""
    kind: str = ""  # of a join: inner, left, right, full, cross, semi, anti
    equi: tuple[tuple[str, str], ...] = ()  # of a join: (left column, right column)
    residual: tuple[str, ...] = ()  # of a join: its other predicates (SQL)
    role: str = ""  # "subquery": the plan of a subquery expression of its parent
    members: tuple[Node, ...] = field(default_factory=tuple)  # of a MultiJoin: the joins it replaces

    def convertible(self) -> bool:
        """Tell whether a multi-way node can take this join over: inner or left, with an equi-join key."""
        return self.op == "Join" and self.kind in _EQUI_KINDS and bool(self.equi)

    def condition(self) -> str:
        """Return the join condition as text."""
        parts = [f"{a} = {b}" for a, b in self.equi] + list(self.residual)
        return " AND ".join(parts) or "TRUE"


def walk(node: Node) -> Iterator[Node]:
    """Yield every node of the tree under ``node`` (pre-order)."""
    yield node
    for i in node.inputs:
        yield from walk(i)


def _short(cols: tuple[str, ...], limit: int = 8) -> str:
    shown = ", ".join(cols[:limit])
    return f"[{shown}{', ...' if len(cols) > limit else ''}]"


def _label(n: Node) -> str:
    prefix = "(subquery) " if n.role == "subquery" else ""
    if n.op == "Join":
        return f"{prefix}Join {n.kind.upper()} ON {n.condition()}"
    if n.op == "MultiJoin":
        joins = "; ".join(f"{m.kind.upper()} {m.condition()}" for m in n.members)
        return f"{prefix}MultiJoin ({len(n.inputs)} inputs) {{{joins}}} -> {_short(n.columns)}"
    if n.op in ("Project", "Scan"):
        return f"{prefix}{n.op} {n.detail} {_short(n.columns)}".replace("  ", " ")
    return f"{prefix}{n.op} {n.detail}".rstrip()


def render(node: Node, indent: int = 0) -> str:
    """Render the plan as an indented tree, one operator per line."""
    lines = ["  " * indent + _label(node)]
    lines += [render(i, indent + 1) for i in node.inputs]
    return "\n".join(lines)


def _sql(e: Any) -> str:
    """Return the SQL of ``e`` for display: each subquery inside shown as ``<subquery k>`` (it is a plan input)."""
    subs = _subqueries(e)
    if subs:
        e = e.copy()
        for k, sub in enumerate(_subqueries(e), start=1):
            sub.replace(exp.Var(this=f"<subquery {k}>"))
    text = str(e.sql(dialect=DIALECT))
    return f"({text})" if isinstance(e, exp.Or) else text


def _conjuncts(node: Any) -> list[Any]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _subqueries(node: Any) -> list[Any]:
    """Return the outermost SELECTs inside ``node`` (not ``node`` itself)."""
    found: list[Any] = []
    for child in node.iter_expressions():
        if isinstance(child, exp.Query):
            found.append(child)
        else:
            found += _subqueries(child)
    return found


def _local_columns(node: Any) -> list[Any]:
    """Columns of ``node`` outside its subqueries."""
    if isinstance(node, exp.Column):
        return [node]
    cols: list[Any] = []
    for child in node.iter_expressions():
        if not isinstance(child, exp.Query):
            cols += _local_columns(child)
    return cols


def _has_agg(node: Any) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return any(not isinstance(c, exp.Query) and _has_agg(c) for c in node.iter_expressions())


@dataclass
class _Pred:
    expr: Any
    aliases: frozenset[str]
    columns: frozenset[str]


class _Builder:
    def __init__(self, root: Any) -> None:
        from sqlglot.optimizer.scope import traverse_scope

        self.scopes = {id(s.expression): s for s in traverse_scope(root)}

    def query(self, q: Any, role: str = "") -> Node:
        while isinstance(q, exp.Subquery):
            q = q.this
        if isinstance(q, exp.SetOperation):
            kind = q.key.upper() + ("" if q.args.get("distinct") else " ALL")
            left, right = self.query(q.this), self.query(q.expression)
            node = Node("SetOp", [left, right], left.columns, kind, role=role)
            return self._order_limit(q, node)
        if not isinstance(q, exp.Select):
            raise ConfigError(f"{where(q)}{q.key.upper()} is not supported in a plan")
        node = self.select(q)
        node.role = role
        return node

    def _order_limit(self, q: Any, node: Node) -> Node:
        if q.args.get("order"):
            node = Node("Sort", [node], node.columns, ", ".join(_sql(o) for o in q.args["order"].expressions))
        if q.args.get("limit"):
            node = Node("Limit", [node], node.columns, _sql(q.args["limit"].expression))
        return node

    def _source(self, item: Any, scope: Any) -> tuple[str, Node, tuple[str, ...]]:
        """``(alias, plan, columns it offers)`` of one FROM item."""
        from sqlglot.optimizer.scope import Scope

        alias = item.alias_or_name
        src = scope.sources.get(alias)
        if isinstance(item, exp.Table) and not isinstance(src, Scope):
            return alias, Node("Scan", [], (), f"{item.name} AS {alias}"), ()
        if isinstance(item, exp.Subquery) and not isinstance(item.this, exp.Query):
            raise ConfigError(f"{where(item)}parenthesised joins are not supported: write them as a subquery")
        body = src.expression if isinstance(src, Scope) else item.this
        sub = self.query(body)
        label = f"View {item.name}" if isinstance(item, exp.Table) else "Subquery"
        node = Node("Alias", [sub], tuple(f"{alias}.{c.split('.')[-1]}" for c in sub.columns), f"{label} AS {alias}")
        return alias, node, node.columns

    def select(self, sel: Any) -> Node:
        scope = self.scopes[id(sel)]
        frm = from_clause(sel)
        if frm is None:
            return Node("Values", [], tuple(e.alias_or_name for e in sel.expressions), _sql(sel))
        joins = sel.args.get("joins") or []
        items = [(frm.this, None), *((j.this, j) for j in joins)]
        sources = [self._source(item, scope) for item, _ in items]
        aliases = [a for a, _, _ in sources]
        local = set(aliases)

        def pred(e: Any) -> _Pred:
            cols = [c for c in _local_columns(e) if c.table in local]
            return _Pred(e, frozenset(c.table for c in cols), frozenset(f"{c.table}.{c.name}" for c in cols))

        # columns needed above the joins: output, grouping, ordering, and subqueries' correlations
        top_exprs = list(sel.expressions)
        for key in ("group", "having", "order"):
            if sel.args.get(key):
                top_exprs.append(sel.args[key])
        top_cols = {f"{c.table}.{c.name}" for e in top_exprs for c in _local_columns(e) if c.table in local}
        for child in scope.subquery_scopes:
            top_cols |= {f"{c.table}.{c.name}" for c in child.external_columns if c.table in local}

        outer = any(
            (j.args.get("side") or j.args.get("kind") or "").upper() not in ("", "INNER", "CROSS") for j in joins
        )
        pushed: dict[str, list[_Pred]] = {a: [] for a in aliases}
        multi: list[_Pred] = []
        top: list[_Pred] = []
        on_preds: dict[int, list[_Pred]] = {}
        conds = _conjuncts(sel.args["where"].this) if sel.args.get("where") else []
        for c in conds:
            p = pred(c)
            if _subqueries(c) or not p.aliases:
                top.append(p)
            elif len(p.aliases) == 1:
                pushed[next(iter(p.aliases))].append(p)
            elif outer:
                top.append(p)
            else:
                multi.append(p)
        for pos, (_, j) in enumerate(items):
            if j is None or not j.args.get("on"):
                continue
            side = (j.args.get("side") or "").upper()
            for c in _conjuncts(j.args["on"]):
                p = pred(c)
                joining = aliases[pos]
                if len(p.aliases) == 1 and not _subqueries(c) and (side in ("", "INNER") or p.aliases == {joining}):
                    pushed[next(iter(p.aliases))].append(p)
                else:
                    on_preds.setdefault(pos, []).append(p)
        needed_by_alias: dict[str, set[str]] = {a: set() for a in aliases}
        for p in [*multi, *top, *(q for ps in on_preds.values() for q in ps)]:
            for col in p.columns:
                needed_by_alias[col.split(".")[0]].add(col)
        for col in top_cols:
            needed_by_alias[col.split(".")[0]].add(col)

        # scans read what the query uses; pushed filters sit on them
        plans: dict[str, Node] = {}
        for alias, node, offered in sources:
            want = needed_by_alias[alias]
            filters = pushed[alias]
            if node.op == "Scan":
                read = sorted(want | {col for p in filters for col in p.columns})
                node.columns = tuple(read)
            if filters:
                keep = tuple(c for c in (node.columns or offered) if c in want) if node.op == "Scan" else node.columns
                node = Node("Filter", [node], keep, " AND ".join(_sql(p.expr) for p in filters))
            plans[alias] = node

        # join order: greedy along predicates for inner joins, FROM order when outer joins occur
        order = list(range(len(items)))
        if not outer:
            order, joined, rest = [0], {aliases[0]}, list(range(1, len(items)))
            while rest:
                nxt = next(
                    (
                        r
                        for r in rest
                        if any(aliases[r] in p.aliases and p.aliases <= joined | {aliases[r]} for p in multi)
                    ),
                    rest[0],
                )
                order.append(nxt)
                rest.remove(nxt)
                joined.add(aliases[nxt])
        tree = plans[aliases[order[0]]]
        joined = {aliases[order[0]]}
        pending = list(multi)
        for step, pos in enumerate(order[1:], start=1):
            alias = aliases[pos]
            j = items[pos][1]
            right = plans[alias]
            here = [p for p in pending if p.aliases <= joined | {alias}] + on_preds.get(pos, [])
            pending = [p for p in pending if p not in here]
            side = (j.args.get("side") or "").upper() if j is not None else ""
            kind_word = (j.args.get("kind") or "").upper() if j is not None else ""
            kind = side.lower() or {"SEMI": "semi", "ANTI": "anti"}.get(kind_word, "inner" if here else "cross")
            equi: list[tuple[str, str]] = []
            residual: list[str] = []
            for p in here:
                e = p.expr
                if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column) and isinstance(e.expression, exp.Column):
                    a, b = e.this, e.expression
                    if a.table == alias and b.table in joined:
                        a, b = b, a
                    if a.table in joined and b.table == alias:
                        equi.append((f"{a.table}.{a.name}", f"{b.table}.{b.name}"))
                        continue
                residual.append(_sql(e))
            joined.add(alias)
            cols = tree.columns + right.columns
            tree = Node("Join", [tree, right], cols, kind=kind, equi=tuple(equi), residual=tuple(residual))
            # what the rest of the plan reads: later join predicates and everything above the joins
            later = {c for p in pending for c in p.columns}
            later |= {c for q in order[step + 1 :] for p in on_preds.get(q, []) for c in p.columns}
            later |= {c for p in top for c in p.columns} | top_cols
            keep = tuple(c for c in cols if c in later)
            if keep != cols:
                tree = Node("Project", [tree], keep)

        if top:
            subs = [self.query(s, "subquery") for p in top for s in _subqueries(p.expr)]
            tree = Node("Filter", [tree, *subs], tree.columns, " AND ".join(_sql(p.expr) for p in top))
        outputs = tuple(e.alias_or_name for e in sel.expressions)
        if sel.args.get("group") or any(_has_agg(e) for e in sel.expressions):
            group = ", ".join(_sql(g) for g in sel.args["group"].expressions) if sel.args.get("group") else ""
            having = [sel.args["having"]] if sel.args.get("having") else []
            aggs = list(dict.fromkeys(_sql(a) for e in [*sel.expressions, *having] for a in e.find_all(exp.AggFunc)))
            tree = Node("Aggregate", [tree], outputs, f"group=[{group}] aggs=[{', '.join(aggs)}]")
        if sel.args.get("having"):
            h = sel.args["having"].this
            subs = [self.query(s, "subquery") for s in _subqueries(h)]
            tree = Node("Filter", [tree, *subs], tree.columns, f"HAVING {_sql(h)}")
        subs = [self.query(s, "subquery") for e in sel.expressions for s in _subqueries(e)]
        tree = Node("Project", [tree, *subs], outputs, ", ".join(_sql(e) for e in sel.expressions))
        if sel.args.get("distinct"):
            tree = Node("Distinct", [tree], outputs)
        return self._order_limit(sel, tree)


def _with_views(query: Any, views: Mapping[str, Any], view_columns: Mapping[str, list[str]]) -> Any:
    """Return the query with its views as CTEs, so that qualification resolves them like any source."""
    if not views:
        return query
    ctes = [
        exp.CTE(
            this=body.copy(),
            alias=exp.TableAlias(
                this=exp.to_identifier(name), columns=[exp.to_identifier(c) for c in view_columns.get(name, [])]
            ),
        )
        for name, body in views.items()
    ]
    existing = query.args.get("with_")
    query = query.copy()
    query.set("with_", exp.With(expressions=ctes + (list(existing.expressions) if existing else [])))
    return query


def build_plan(text: str, schema: Mapping[str, Mapping[str, str]] | None = None) -> Node:
    """Build the binary plan of the query in ``text``; ``schema`` (table -> column -> type) resolves bare columns."""
    require()
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.qualify import qualify

    script = parse_script(text)
    query = _with_views(script.query, script.views, script.view_columns)
    try:
        qualified = qualify(
            query,
            schema=dict(schema or {}),
            dialect=DIALECT,
            quote_identifiers=False,
            validate_qualify_columns=True,
        )
    except OptimizeError as exc:
        hint = "" if schema else " (give the inputs' schemas to resolve unqualified columns)"
        raise ConfigError(f"cannot resolve the query's columns: {exc}{hint}") from exc
    return _Builder(qualified).query(qualified)
