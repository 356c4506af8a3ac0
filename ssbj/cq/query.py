"""A continuous query: a foreign-key-acyclic select-project-join-aggregate SQL query, planned.

The plan is what the live-tuple maintenance (:mod:`ssbj.cq.engine`) needs: one node per
relation *alias* (Q7's two nations are two nodes), arranged as the join tree whose root
is the one alias no other references; per alias its selection (the conjuncts of ``WHERE``
over that alias alone), the foreign-key columns to each child, and its *slots*, the
single-alias sub-expressions of the output (evaluated once, when a change arrives, and
carried up the tree); the equalities the tree does not imply become *assertion keys*,
checked where their aliases meet; what spans several aliases (Q7's nation-pair filter,
a multi-relation expression) is evaluated on the join results.  Anything outside the
subset (outer joins, non-key joins, cycles, HAVING, LIMIT, DISTINCT, subqueries in
``WHERE``, window functions, other aggregates) is a :class:`ConfigError` naming it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ssbj.cq._sqlglot import sqlglot
from ssbj.cq.aggregate import GroupState
from ssbj.cq.expr import evaluate, is_constant, to_array, unsupported
from ssbj.cq.jointree import AssertClass, assertions, join_tree
from ssbj.cq.schema import Table
from ssbj.errors import ConfigError

AGGREGATES = ("sum", "count", "avg")


@dataclass
class Slot:
    """A single-alias sub-expression of the output, evaluated when a change arrives."""

    alias: str
    node: Any
    type: pa.DataType | None = None


@dataclass
class AliasPlan:
    """One node of the join tree."""

    alias: str
    relation: str
    parent: str | None = None
    parent_fk: tuple[str, ...] = ()  # columns of the parent that reference this alias's key
    children: list[str] = field(default_factory=list)
    selection: list[Any] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # indices into QueryPlan.slots, own slots in order
    assert_cols: list[tuple[int, str]] = field(default_factory=list)  # (class index, own column)


@dataclass
class Aggregate:
    """One output aggregate: ``func`` over ``arg`` (``None`` for ``COUNT(*)``)."""

    func: str
    arg: Any | None
    name: str


@dataclass
class OutputColumn:
    """One output column: a group key (``key`` index), an aggregate (``agg`` index) or a constant."""

    name: str
    key: int | None = None
    agg: int | None = None
    const: Any = None


@dataclass
class QueryPlan:
    """Everything the engine needs from the SQL text and the schema."""

    sql: str
    tables: dict[str, Table]
    aliases: dict[str, AliasPlan]
    root: str
    order: list[str]  # aliases, root first (preorder)
    slots: list[Slot]
    residual: list[Any]
    keys: list[Any]  # group-by (or, without aggregates, output) expressions
    aggregates: list[Aggregate]
    outputs: list[OutputColumn]
    grouped: bool  # GROUP BY or aggregates: one row per group; else a multiset of rows
    global_agg: bool  # aggregates without GROUP BY: exactly one output row, always
    asserts: list[AssertClass]
    colref: dict[int, tuple[str, str]]
    order_by: list[tuple[str, bool]]  # (output column, descending)

    @property
    def fingerprint(self) -> str:
        """Identifies the query and schema (a checkpoint belongs to one)."""
        text = self.sql + "|" + "|".join(f"{t.name}:{t.arrow_schema()}" for t in self.tables.values())
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def relations(self) -> list[str]:
        """Relations the query reads, in first-appearance order."""
        seen: list[str] = []
        for a in self.order:
            r = self.aliases[a].relation
            if r not in seen:
                seen.append(r)
        return seen

    def aliases_of(self, relation: str) -> list[str]:
        """Aliases of ``relation``, in tree order."""
        return [a for a in self.order if self.aliases[a].relation == relation]

    def slot_resolver(self, slot_arrays: list[pa.Array]) -> Any:
        """Return a resolver for expressions over join results: a slot's node gives its array."""
        by_id = {id(s.node): i for i, s in enumerate(self.slots)}

        def resolve(node: Any) -> Any:
            i = by_id.get(id(node))
            return None if i is None else slot_arrays[i]

        return resolve

    def column_resolver(self, alias: str, table: pa.Table) -> Any:
        """Return a resolver for single-alias expressions over rows of ``alias``'s relation."""
        colref = self.colref

        def resolve(node: Any) -> Any:
            ref = colref.get(id(node))
            if ref is None:
                return None
            if ref[0] != alias:  # pragma: no cover - guarded by the planner
                raise ConfigError(f"internal: column {ref} evaluated on alias {alias}")
            return table.column(ref[1])

        return resolve


def _conjuncts(node: Any, exp: Any) -> list[Any]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this, exp) + _conjuncts(node.expression, exp)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this, exp)
    return [node]


def _implied_selections(cond: Any, aliases_in: Any, exp: Any) -> list[tuple[str, Any]]:
    """Single-alias conditions a multi-alias disjunction implies, pushed down as selections.

    ``(n1 = a AND n2 = b) OR (n1 = b AND n2 = a)`` (Q7) implies ``n1 = a OR n1 = b`` and the
    same for n2: tuples failing them can never join into a result, so they need not become
    live.  The disjunction itself stays as a residual condition on the join results.
    """
    body = cond.this if isinstance(cond, exp.Paren) else cond
    if not isinstance(body, exp.Or):
        return []
    disjuncts: list[Any] = []
    stack = [body]
    while stack:
        d = stack.pop()
        d = d.this if isinstance(d, exp.Paren) else d
        if isinstance(d, exp.Or):
            stack.extend((d.this, d.expression))
        else:
            disjuncts.append(d)
    out: list[tuple[str, Any]] = []
    for alias in sorted(aliases_in(cond)):
        parts = []
        for d in disjuncts:
            mine = [x for x in _conjuncts(d, exp) if aliases_in(x) == {alias}]
            if not mine:
                break
            parts.append(exp.and_(*mine) if len(mine) > 1 else mine[0].copy())
        else:
            out.append((alias, exp.or_(*parts)))
    return out


def _reject(select: Any, exp: Any) -> None:
    for key, what in (
        ("having", "HAVING"),
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("distinct", "DISTINCT"),
        ("with_", "WITH"),
        ("qualify", "QUALIFY"),
        ("windows", "WINDOW"),
    ):
        if select.args.get(key):
            raise ConfigError(f"continuous query: {what} is not supported")
    for node in select.walk():
        if isinstance(node, exp.Window):
            raise unsupported(node, "window function")
        if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
            raise unsupported(node, "set operation")


def _flatten_derived(select: Any, exp: Any) -> Any:
    """``SELECT ... FROM (SELECT ...) AS x ...`` (Q7's form) as one SELECT over the inner tables."""
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Subquery):
        return select
    if select.args.get("joins"):
        raise ConfigError("continuous query: a derived table joined with other tables is not supported")
    inner = from_.this.this
    if not isinstance(inner, exp.Select):
        raise unsupported(inner, "derived table")
    _reject(inner, exp)
    inner = _flatten_derived(inner, exp)
    if inner.args.get("group") or any(isinstance(n, exp.AggFunc) for n in inner.walk()):
        raise ConfigError("continuous query: an aggregate inside a derived table is not supported")
    names: dict[str, Any] = {}
    for e in inner.expressions:
        if isinstance(e, exp.Star):
            raise ConfigError("continuous query: SELECT * inside a derived table is not supported")
        names[e.alias_or_name.lower()] = e.unalias() if isinstance(e, exp.Alias) else e
    sub_alias = from_.this.alias.lower() if from_.this.alias else ""

    outer = select.copy()
    for e in list(outer.expressions):
        if isinstance(e, exp.Column):  # keep the derived table's output name
            e.replace(exp.alias_(e.copy(), e.name))
    parts = [*outer.expressions, *(outer.args.get(k) for k in ("where", "group"))]
    cols = [c for part in parts if part is not None for c in part.find_all(exp.Column)]
    for node in cols:
        if node.table and node.table.lower() != sub_alias:
            raise ConfigError(f"continuous query: {node.sql()!r} names a table outside the derived table")
        target = names.get(node.name.lower())
        if target is None:
            raise ConfigError(f"continuous query: column {node.sql()!r} is not an output of the derived table")
        node.replace(target.copy() if isinstance(target, exp.Column) else exp.Paren(this=target.copy()))
    out_from = (outer.args.get("from_") and "from_") or "from"
    outer.set(out_from, inner.args.get("from_") or inner.args.get("from"))
    outer.set("joins", inner.args.get("joins"))
    where = [w for w in (inner.args.get("where"), outer.args.get("where")) if w is not None]
    if where:
        cond = where[0].this
        for w in where[1:]:
            cond = exp.and_(cond, w.this)
        outer.set("where", exp.Where(this=cond))
    return outer


def plan_query(sql: str, tables: dict[str, Table]) -> QueryPlan:
    """Plan ``sql`` over ``tables``; :class:`ConfigError` names any unsupported construct."""
    sg, exp = sqlglot()
    try:
        statements = [s for s in sg.parse(sql) if s is not None]
    except sg.errors.ParseError as exc:
        raise ConfigError(f"continuous query does not parse: {exc}") from exc
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise ConfigError("continuous query: exactly one SELECT statement is supported")
    select = statements[0]
    _reject(select, exp)
    select = _flatten_derived(select, exp)
    _reject(select, exp)

    # -- relations and aliases
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise ConfigError("continuous query: a FROM clause is needed")
    sources = [from_.this]
    on_conds: list[Any] = []
    for j in select.args.get("joins") or []:
        side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
        if side or kind not in ("", "INNER", "CROSS"):
            raise ConfigError(f"continuous query: {side or kind} JOIN is not supported (inner equi-joins only)")
        if j.args.get("using"):
            raise ConfigError("continuous query: JOIN ... USING is not supported (write ON or WHERE)")
        sources.append(j.this)
        on_conds.extend(_conjuncts(j.args.get("on"), exp))
    aliases: dict[str, AliasPlan] = {}
    for src in sources:
        if not isinstance(src, exp.Table):
            raise unsupported(src, "FROM item")
        rel = src.name.lower()
        if rel not in tables:
            raise ConfigError(f"continuous query: table {rel} is not in the schema")
        alias = (src.alias or src.name).lower()
        if alias in aliases:
            raise ConfigError(f"continuous query: alias {alias} is used twice")
        aliases[alias] = AliasPlan(alias, rel)

    # -- column resolution
    colref: dict[int, tuple[str, str]] = {}

    def resolve_columns(node: Any) -> None:
        for col in node.find_all(exp.Column):
            name = col.name.lower()
            if col.table:
                a = col.table.lower()
                if a not in aliases:
                    raise ConfigError(f"continuous query: {col.sql()!r} names an unknown table or alias {a}")
                if name not in tables[aliases[a].relation].columns:
                    raise ConfigError(f"continuous query: column {col.sql()!r} is not in table {aliases[a].relation}")
            else:
                owners = [a for a, p in aliases.items() if name in tables[p.relation].columns]
                if not owners:
                    raise ConfigError(f"continuous query: column {name} is in none of the query's tables")
                if len(owners) > 1:
                    raise ConfigError(f"continuous query: column {name} is ambiguous ({', '.join(owners)})")
                a = owners[0]
            colref[id(col)] = (a, name)

    def aliases_in(node: Any) -> set[str]:
        return {colref[id(c)][0] for c in node.find_all(exp.Column)}

    for node in select.find_all(exp.Subquery, exp.Exists):
        raise unsupported(node, "subquery")

    # -- WHERE: joins, selections, residual
    where = select.args.get("where")
    conjuncts = _conjuncts(where.this if where is not None else None, exp) + on_conds
    equalities: list[tuple[tuple[str, str], tuple[str, str]]] = []
    residual: list[Any] = []
    for c in conjuncts:
        resolve_columns(c)
        used = aliases_in(c)
        if (
            isinstance(c, exp.EQ)
            and isinstance(c.this, exp.Column)
            and isinstance(c.expression, exp.Column)
            and colref[id(c.this)][0] != colref[id(c.expression)][0]
        ):
            equalities.append((colref[id(c.this)], colref[id(c.expression)]))
        elif len(used) == 1:
            aliases[next(iter(used))].selection.append(c)
        else:
            residual.append(c)
            for alias, implied in _implied_selections(c, aliases_in, exp):
                resolve_columns(implied)
                aliases[alias].selection.append(implied)

    tree_parent, tree_fk = join_tree(aliases, tables, equalities)
    roots = [a for a in aliases if tree_parent[a] is None]
    root = roots[0]
    for a, p in tree_parent.items():
        aliases[a].parent = p
        aliases[a].parent_fk = tree_fk[a]
        if p is not None:
            aliases[p].children.append(a)
    order: list[str] = []
    stack = [root]
    while stack:
        a = stack.pop()
        order.append(a)
        stack.extend(reversed(aliases[a].children))
    asserts = assertions(aliases, tables, equalities, order)

    # -- output
    for e in select.expressions:
        if isinstance(e, exp.Star):
            raise ConfigError("continuous query: SELECT * is not supported (name the output columns)")
        resolve_columns(e)
    outputs: list[OutputColumn] = []
    keys: list[Any] = []
    aggregates: list[Aggregate] = []
    select_aliases = {e.alias.lower(): e.unalias() for e in select.expressions if isinstance(e, exp.Alias) and e.alias}
    group = select.args.get("group")
    group_nodes: list[Any] = []
    for g in group.expressions if group is not None else []:
        if isinstance(g, exp.Literal) and not g.is_string:
            idx = int(g.this) - 1
            if not 0 <= idx < len(select.expressions):
                raise ConfigError(f"continuous query: GROUP BY {g.this} is out of range")
            group_nodes.append(select.expressions[idx].unalias())
        elif isinstance(g, exp.Column) and not g.table and g.name.lower() in select_aliases:
            group_nodes.append(select_aliases[g.name.lower()])
        else:
            resolve_columns(g)
            group_nodes.append(g)
    key_sql = [_canon(g, colref, exp) for g in group_nodes]
    keys.extend(group_nodes)
    has_agg = any(isinstance(n, exp.AggFunc) for e in select.expressions for n in e.walk())
    grouped = has_agg or group is not None
    for e in select.expressions:
        name = e.alias_or_name.lower() if e.alias_or_name else e.sql()
        body = e.unalias()
        if isinstance(body, exp.AggFunc):
            aggregates.append(_aggregate(body, name, exp))
            outputs.append(OutputColumn(name, agg=len(aggregates) - 1))
        elif any(isinstance(n, exp.AggFunc) for n in body.walk()):
            raise unsupported(body, "expression over aggregates")
        elif grouped:
            canon = _canon(body, colref, exp)
            if canon in key_sql:
                outputs.append(OutputColumn(name, key=key_sql.index(canon)))
            elif is_constant(body):
                outputs.append(OutputColumn(name, const=body))
            else:
                raise ConfigError(f"continuous query: output {body.sql()!r} is neither grouped nor aggregated")
        else:
            keys.append(body)
            outputs.append(OutputColumn(name, key=len(keys) - 1))
    names = [o.name for o in outputs]
    if len(set(names)) != len(names):
        raise ConfigError(f"continuous query: output column names repeat: {names}")

    order_by: list[tuple[str, bool]] = []
    ob = select.args.get("order")
    for o in ob.expressions if ob is not None else []:
        target = o.this
        desc = bool(o.args.get("desc"))
        if isinstance(target, exp.Column) and target.name.lower() in names and not target.table:
            order_by.append((target.name.lower(), desc))
        elif isinstance(target, exp.Literal) and not target.is_string:
            order_by.append((names[int(target.this) - 1], desc))
        else:
            raise ConfigError(f"continuous query: ORDER BY {target.sql()!r} must name an output column")

    plan = QueryPlan(
        sql=sql,
        tables=tables,
        aliases=aliases,
        root=root,
        order=order,
        slots=[],
        residual=residual,
        keys=keys,
        aggregates=aggregates,
        outputs=outputs,
        grouped=grouped,
        global_agg=has_agg and group is None,
        asserts=asserts,
        colref=colref,
        order_by=order_by,
    )
    _make_slots(plan, exp)
    _type_slots(plan)
    GroupState(plan)  # checks the output expressions' types
    return plan


def _canon(node: Any, colref: dict[int, tuple[str, str]], exp: Any) -> str:
    """Return the SQL text with the aliases of its columns (to match SELECT items to GROUP BY items)."""
    return _canon_walk(node, colref, exp)


def _canon_walk(node: Any, colref: dict[int, tuple[str, str]], exp: Any) -> str:
    # transform() copies nodes and loses their identity, so map columns by walking the original
    mapping = {id(c): colref.get(id(c)) for c in node.find_all(exp.Column)}
    text = node.sql()
    if isinstance(node, exp.Column) and mapping.get(id(node)):
        a, c = mapping[id(node)]  # type: ignore[misc]
        return f"{a}.{c}"
    parts = sorted(f"{a}.{c}" for a, c in (v for v in mapping.values() if v))
    return f"{text.lower()}|{','.join(parts)}"


def _aggregate(node: Any, name: str, exp: Any) -> Aggregate:
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise unsupported(node, "COUNT(DISTINCT ...)")
        return Aggregate("count", None if isinstance(arg, exp.Star) or arg is None else arg, name)
    if isinstance(node, exp.Sum):
        return Aggregate("sum", node.this, name)
    if isinstance(node, exp.Avg):
        return Aggregate("avg", node.this, name)
    raise unsupported(node, "aggregate (SUM, COUNT and AVG are)")


def _make_slots(plan: QueryPlan, exp: Any) -> None:
    """Replace single-alias sub-expressions of the output by slots (by node identity)."""

    def visit(node: Any) -> None:
        if is_constant(node):
            return
        used = {plan.colref[id(c)][0] for c in node.find_all(exp.Column)}
        if len(used) == 1 and not isinstance(node, exp.AggFunc):
            alias = next(iter(used))
            plan.slots.append(Slot(alias, node))
            return
        for child in node.iter_expressions():
            visit(child)

    for e in [*plan.residual, *plan.keys, *(a.arg for a in plan.aggregates if a.arg is not None)]:
        visit(e)
    for i, s in enumerate(plan.slots):
        plan.aliases[s.alias].slots.append(i)


def _type_slots(plan: QueryPlan) -> None:
    """Arrow type of every slot and output expression, by evaluating them on no rows."""
    for s in plan.slots:
        table = plan.tables[plan.aliases[s.alias].relation].arrow_schema().empty_table()
        s.type = to_array(evaluate(s.node, plan.column_resolver(s.alias, table), 0), 0).type
        if s.type == pa.null():
            s.type = pa.bool_()
    for a in plan.aliases.values():
        table = plan.tables[a.relation].arrow_schema().empty_table()
        for cond in a.selection:
            t = to_array(evaluate(cond, plan.column_resolver(a.alias, table), 0), 0).type
            if t not in (pa.bool_(), pa.null()):
                raise ConfigError(f"continuous query: WHERE condition {cond.sql()!r} is not a boolean")
