"""The supported subset of SQL as a typed logical query (what ``ssbj query`` executes).

A SELECT over named inputs: inner and left equi-joins (explicit ``JOIN ... ON`` and comma
joins with equalities in WHERE), single-input filters (comparisons, IN, BETWEEN, LIKE,
IS NULL under AND/OR/NOT) and a list of columns (``*``, ``alias.*``, ``col AS name``).
Anything else is a :class:`ConfigError` naming the construct and its line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.multiway.spec import OutputColumn
from ssbj.errors import ConfigError
from ssbj.sql._sqlglot import exp, simplify
from ssbj.sql.band import FORM, Band, parse_band
from ssbj.sql.filters import to_arrow
from ssbj.sql.parse import from_clause, line_of, parse_script, where

__all__ = ["Equality", "Input", "LogicalQuery", "Step", "parse_query"]

Col = tuple[str, str]  # (input alias, column)

# Clauses of a SELECT the subset has no place for, with the words of the error message.
_CLAUSES = {
    "with_": "WITH (common table expression)",
    "with": "WITH (common table expression)",
    "distinct": "SELECT DISTINCT",
    "group": "GROUP BY",
    "having": "HAVING",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "laterals": "LATERAL",
    "pivots": "PIVOT",
}


@dataclass(frozen=True)
class Input:
    """One input of the FROM clause: its alias, the name it is read by, and its columns."""

    alias: str
    table: str
    schema: pa.Schema


@dataclass(frozen=True)
class Equality:
    """``left = right`` between columns of two different inputs; ``line`` where it is written."""

    left: Col
    right: Col
    line: int | None
    text: str

    def other(self, alias: str) -> Col:
        """Return the side not belonging to ``alias``."""
        return self.right if self.left[0] == alias else self.left

    def side(self, alias: str) -> Col:
        """Return the side belonging to ``alias``."""
        return self.left if self.left[0] == alias else self.right

    @property
    def aliases(self) -> frozenset[str]:
        """The two inputs it connects."""
        return frozenset((self.left[0], self.right[0]))


@dataclass(frozen=True)
class Step:
    """Input ``alias`` joins the inputs before it: ``kind`` and the equalities of its ON clause."""

    alias: str
    kind: Literal["inner", "left"]
    on: tuple[Equality, ...]


@dataclass(frozen=True)
class LogicalQuery:
    """A parsed SELECT of the supported subset.

    ``inputs`` in FROM order; ``steps[i]`` joins ``inputs[i + 1]``; ``where_equalities`` are
    the cross-input equalities of WHERE (inner joins in any order); ``filters`` one predicate
    per input over its own columns, applied before it joins (``filter_text`` the SQL of it).
    """

    inputs: tuple[Input, ...]
    steps: tuple[Step, ...]
    where_equalities: tuple[Equality, ...]
    filters: dict[str, pc.Expression]
    filter_text: dict[str, str]
    filter_columns: dict[str, tuple[str, ...]]
    output: tuple[OutputColumn, ...]
    bands: tuple[Band, ...] = ()  # event-time windows (ON clauses)

    def input(self, alias: str) -> Input:
        """Return the input named ``alias``."""
        for i in self.inputs:
            if i.alias == alias:
                return i
        raise KeyError(alias)

    def left_joined(self) -> set[str]:
        """Aliases on the null-supplying side of a LEFT JOIN."""
        return {s.alias for s in self.steps if s.kind == "left"}


def _conjuncts(node: Any) -> list[Any]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _unsupported_inside(node: Any, place: str) -> None:
    """ConfigError for a subquery, aggregate or window function anywhere inside ``node``."""
    for n in node.walk():
        if isinstance(n, exp.Subquery | exp.Exists) or (isinstance(n, exp.Select) and n is not node):
            raise ConfigError(f"{where(n)}subquery in {place} is not supported")
        if isinstance(n, exp.Window):
            raise ConfigError(f"{where(n)}window function in {place} is not supported")
        if isinstance(n, exp.AggFunc):
            raise ConfigError(f"{where(n)}aggregate {n.sql(dialect='duckdb')} in {place} is not supported")


class _Resolver:
    """Column references to (alias, column) over the inputs in scope."""

    def __init__(self, inputs: list[Input]) -> None:
        self.inputs = inputs
        self.by_alias = {i.alias: i for i in inputs}

    def resolve(self, col: Any) -> Col:
        name = col.name
        if col.table:
            inp = self.by_alias.get(col.table)
            if inp is None:
                raise ConfigError(f"{where(col)}unknown input {col.table!r} in {col.sql(dialect='duckdb')}")
            if name not in inp.schema.names:
                raise ConfigError(
                    f"{where(col)}column {name!r} not found in {inp.alias!r} (columns: {', '.join(inp.schema.names)})"
                )
            return inp.alias, name
        owners = [i.alias for i in self.inputs if name in i.schema.names]
        if not owners:
            raise ConfigError(f"{where(col)}unknown column {name!r}")
        if len(owners) > 1:
            raise ConfigError(f"{where(col)}column {name!r} is ambiguous (in {', '.join(owners)}): qualify it")
        return owners[0], name

    def aliases(self, node: Any) -> set[str]:
        return {self.resolve(c)[0] for c in node.find_all(exp.Column)}


def _sources(select: Any, schemas: Mapping[str, pa.Schema]) -> list[tuple[Input, Any]]:
    """Return the inputs of FROM and JOIN in order, each with its join node (None for the first)."""
    frm = from_clause(select)
    if frm is None:
        raise ConfigError(f"{where(select)}a query without FROM is not supported")
    items = [(frm.this, None)] + [(j.this, j) for j in select.args.get("joins") or []]
    out: list[tuple[Input, Any]] = []
    for src, join in items:
        if isinstance(src, exp.Subquery):
            raise ConfigError(f"{where(src)}subquery in FROM is not supported")
        if not isinstance(src, exp.Table) or not isinstance(src.this, exp.Identifier):
            raise ConfigError(f"{where(src)}FROM item {src.sql(dialect='duckdb')} is not supported (only named inputs)")
        if src.args.get("db") or src.args.get("catalog"):
            raise ConfigError(f"{where(src)}qualified input name {src.sql(dialect='duckdb')} is not supported")
        table = src.name
        if table not in schemas:
            known = ", ".join(sorted(schemas)) or "(none)"
            raise ConfigError(f"{where(src)}unknown input {table!r}: name it as a stream or master (known: {known})")
        out.append((Input(src.alias_or_name, table, schemas[table]), join))
    aliases = [i.alias for i, _ in out]
    dupes = sorted({a for a in aliases if aliases.count(a) > 1})
    if dupes:
        raise ConfigError(f"input alias(es) used twice: {', '.join(dupes)}")
    return out


def _join_kind(join: Any, alias: str) -> Literal["inner", "left"]:
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    method = (join.args.get("method") or "").upper()
    if method:
        raise ConfigError(f"{where(join)}{method} JOIN of {alias!r} is not supported")
    if join.args.get("using"):
        raise ConfigError(f"{where(join)}JOIN ... USING of {alias!r} is not supported: write ON a.k = b.k")
    if side in ("RIGHT", "FULL"):
        raise ConfigError(f"{where(join)}{side} JOIN of {alias!r} is not supported (only inner and LEFT joins)")
    if kind in ("SEMI", "ANTI", "ASOF", "POSITIONAL"):
        raise ConfigError(f"{where(join)}{kind} JOIN of {alias!r} is not supported")
    if isinstance(join.this, exp.Table) and join.this.args.get("joins"):
        raise ConfigError(f"{where(join)}nested (parenthesised) joins are not supported")
    if side == "LEFT":
        if not join.args.get("on"):
            raise ConfigError(f"{where(join)}LEFT JOIN of {alias!r} needs an ON clause")
        return "left"
    return "inner"


def _equality(pred: Any, res: _Resolver, aliases: set[str]) -> Equality:
    """Return ``a.x = b.y`` as an Equality; a ConfigError saying what any other cross-input predicate is."""
    text = pred.sql(dialect="duckdb")
    if any(isinstance(n, exp.Or) for n in pred.walk()):
        raise ConfigError(f"{where(pred)}OR across inputs ({', '.join(sorted(aliases))}) is not supported: {text}")
    if len(aliases) > 2:
        raise ConfigError(f"{where(pred)}predicate over more than two inputs is not supported: {text}")
    if isinstance(pred, exp.EQ) and isinstance(pred.this, exp.Column) and isinstance(pred.expression, exp.Column):
        return Equality(res.resolve(pred.this), res.resolve(pred.expression), line_of(pred), text)
    if isinstance(pred, exp.EQ):
        raise ConfigError(f"{where(pred)}join predicate over expressions is not supported (only a.x = b.y): {text}")
    raise ConfigError(
        f"{where(pred)}non-equi join predicate is not supported: {text} "
        f"(a window between two streams is written in ON as {FORM})"
    )


def _output(select: Any, res: _Resolver) -> tuple[OutputColumn, ...]:
    out: list[OutputColumn] = []
    for item in select.expressions:
        name = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star):
            out += [OutputColumn(c, i.alias, c) for i in res.inputs for c in i.schema.names]
        elif isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
            inp = res.by_alias.get(node.table)
            if inp is None:
                raise ConfigError(f"{where(node)}unknown input {node.table!r} in {node.sql(dialect='duckdb')}")
            out += [OutputColumn(c, inp.alias, c) for c in inp.schema.names]
        elif isinstance(node, exp.Column):
            alias, col = res.resolve(node)
            out.append(OutputColumn(name or col, alias, col))
        else:
            _unsupported_inside(node, "the SELECT list")
            raise ConfigError(
                f"{where(item)}expression {node.sql(dialect='duckdb')} in the SELECT list is not supported "
                "(only columns, alias.* and *)"
            )
    names = [o.name for o in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"output column name(s) {', '.join(dupes)} occur twice: give them distinct AS names")
    return tuple(out)


def parse_query(text: str, schemas: Mapping[str, pa.Schema]) -> LogicalQuery:
    """Parse ``text`` into a :class:`LogicalQuery`; ``schemas`` maps each input name to its columns."""
    script = parse_script(text)
    if script.views:
        raise ConfigError(f"CREATE VIEW is not supported here (views: {', '.join(script.views)})")
    select = script.query
    if isinstance(select, exp.SetOperation):
        raise ConfigError(f"{where(select)}{select.key.upper()} is not supported")
    if not isinstance(select, exp.Select):
        raise ConfigError(f"{where(select)}{select.key.upper()} is not supported (expected a SELECT)")
    for key, words in _CLAUSES.items():
        if select.args.get(key):
            raise ConfigError(f"{where(select.args[key])}{words} is not supported")
    srcs = _sources(select, schemas)
    inputs = [i for i, _ in srcs]
    res = _Resolver(inputs)
    filters: dict[str, list[Any]] = {}
    steps: list[Step] = []
    where_eq: list[Equality] = []
    bands: list[Band] = []
    for pos, (inp, join) in enumerate(srcs[1:], start=1):
        kind = _join_kind(join, inp.alias)
        visible = {i.alias for i in inputs[: pos + 1]}
        on: list[Equality] = []
        cond = join.args.get("on")
        for pred in _conjuncts(cond) if cond is not None else []:
            _unsupported_inside(pred, f"the ON clause of {inp.alias!r}")
            refs = res.aliases(pred)
            if not refs <= visible:
                raise ConfigError(
                    f"{where(pred)}ON clause of {inp.alias!r} refers to later input(s) "
                    f"{', '.join(sorted(refs - visible))}"
                )
            if len(refs) <= 1:
                target = next(iter(refs), inp.alias)
                if kind == "left" and target != inp.alias:
                    raise ConfigError(
                        f"{where(pred)}ON predicate on the preserved side of LEFT JOIN {inp.alias!r} "
                        f"is not supported: {pred.sql(dialect='duckdb')}"
                    )
                filters.setdefault(target, []).append(pred)
                continue
            if isinstance(pred, exp.Between) and len(refs) == 2:
                bands.append(parse_band(pred, res.resolve, lambda a: res.by_alias[a].schema))
                continue
            eq = _equality(pred, res, refs)
            if inp.alias in eq.aliases:
                on.append(eq)
            elif kind == "inner":
                where_eq.append(eq)
            else:
                raise ConfigError(
                    f"{where(pred)}ON clause of LEFT JOIN {inp.alias!r} must compare {inp.alias!r} "
                    f"with an earlier input: {eq.text}"
                )
        if kind == "left" and not on:
            raise ConfigError(f"{where(join)}LEFT JOIN of {inp.alias!r} needs an equality a.x = {inp.alias}.y in ON")
        steps.append(Step(inp.alias, kind, tuple(on)))
    nullable = {s.alias for s in steps if s.kind == "left"}
    cond = select.args.get("where")
    for pred in _conjuncts(cond.this) if cond is not None else []:
        _unsupported_inside(pred, "WHERE")
        refs = res.aliases(pred)
        if not refs:
            raise ConfigError(
                f"{where(pred)}constant predicate in WHERE is not supported: {pred.sql(dialect='duckdb')}"
            )
        bad = refs & nullable
        if bad:
            raise ConfigError(
                f"{where(pred)}WHERE predicate on {', '.join(sorted(bad))}, the null-supplying side of a "
                f"LEFT JOIN, is not supported (it would filter after the join): move it into the ON clause"
            )
        if len(refs) == 1:
            filters.setdefault(next(iter(refs)), []).append(pred)
        else:
            where_eq.append(_equality(pred, res, refs))
    arrow: dict[str, pc.Expression] = {}
    texts: dict[str, str] = {}
    used: dict[str, tuple[str, ...]] = {}
    for alias, preds in filters.items():
        used[alias] = tuple(dict.fromkeys(res.resolve(c)[1] for p in preds for c in p.find_all(exp.Column)))
        schema = res.by_alias[alias].schema
        # constant folding first: DATE '1994-01-01' + INTERVAL '1' YEAR becomes a date literal
        parts = [to_arrow(simplify(p.copy()), lambda c: res.resolve(c)[1], schema) for p in preds]
        combined = parts[0]
        for p in parts[1:]:
            combined = combined & p
        arrow[alias] = combined
        texts[alias] = " AND ".join(p.sql(dialect="duckdb") for p in preds)
    for item in select.expressions:
        _unsupported_inside(item, "the SELECT list")
    output = _output(select, res)
    return LogicalQuery(tuple(inputs), tuple(steps), tuple(where_eq), arrow, texts, used, output, tuple(bands))
