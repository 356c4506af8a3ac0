"""Reading SQL text with sqlglot: statements, views, and where a construct is (for error messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ssbj.errors import ConfigError
from ssbj.sql._sqlglot import ParseError, exp, require, sqlglot

DIALECT = "duckdb"

__all__ = ["DIALECT", "Script", "from_clause", "line_of", "parse_schema_ddl", "parse_script", "where"]


def line_of(node: Any) -> int | None:
    """Return the first source line of ``node``: sqlglot records positions on identifiers only."""
    cur = node
    while cur is not None:
        lines = [
            n.meta["line"]
            for n in cur.walk()
            if isinstance(n, exp.Identifier | exp.Literal | exp.Star) and "line" in n.meta
        ]
        if lines:
            return int(min(lines))
        cur = cur.parent
    return None


def where(node: Any) -> str:
    """``line N: `` prefix for an error about ``node`` (empty when the position is unknown)."""
    line = line_of(node)
    return f"line {line}: " if line is not None else ""


def from_clause(select: Any) -> Any:
    """Return the FROM of a SELECT (sqlglot 30 keys it ``from_``)."""
    return select.args.get("from_") or select.args.get("from")


@dataclass
class Script:
    """A query text: its final SELECT (or set operation) and the views created before it."""

    query: Any
    views: dict[str, Any] = field(default_factory=dict)
    view_columns: dict[str, list[str]] = field(default_factory=dict)


def parse_script(text: str) -> Script:
    """Parse ``text``: ``CREATE VIEW`` statements, one query, ``DROP VIEW`` statements (TPC-H Q15's shape)."""
    require()
    try:
        statements = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except ParseError as exc:
        errs = getattr(exc, "errors", None) or []
        first = errs[0] if errs else {}
        line = first.get("line")
        desc = first.get("description") or str(exc).splitlines()[0]
        raise ConfigError(f"{f'line {line}: ' if line else ''}SQL syntax error: {desc}") from exc
    views: dict[str, Any] = {}
    view_columns: dict[str, list[str]] = {}
    queries: list[Any] = []
    for st in statements:
        if isinstance(st, exp.Create) and str(st.args.get("kind", "")).upper() == "VIEW":
            name = st.this.this.name if isinstance(st.this, exp.Schema) else st.this.name
            body = st.expression
            if not isinstance(body, exp.Query):
                raise ConfigError(f"{where(st)}view {name!r} must be defined by a SELECT")
            views[name] = body
            if isinstance(st.this, exp.Schema):
                view_columns[name] = [c.name for c in st.this.expressions]
        elif isinstance(st, exp.Drop):
            continue
        elif isinstance(st, exp.Query):
            queries.append(st)
        else:
            raise ConfigError(f"{where(st)}{st.key.upper()} statement is not supported (expected a SELECT)")
    if len(queries) != 1:
        raise ConfigError(f"expected exactly one SELECT query, found {len(queries)}")
    return Script(queries[0], views, view_columns)


def parse_schema_ddl(text: str) -> dict[str, dict[str, str]]:
    """Table -> column -> type from ``CREATE TABLE`` statements (``ssbj explain --schema``)."""
    require()
    try:
        statements = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except ParseError as exc:
        raise ConfigError(f"schema file: SQL syntax error: {str(exc).splitlines()[0]}") from exc
    tables: dict[str, dict[str, str]] = {}
    for st in statements:
        if not (isinstance(st, exp.Create) and str(st.args.get("kind", "")).upper() == "TABLE"):
            raise ConfigError(f"schema file: {where(st)}expected CREATE TABLE statements only")
        if not isinstance(st.this, exp.Schema):
            raise ConfigError(f"schema file: {where(st)}CREATE TABLE needs a column list")
        cols = {
            c.name: c.args["kind"].sql(dialect=DIALECT) if c.args.get("kind") else "UNKNOWN"
            for c in st.this.expressions
            if isinstance(c, exp.ColumnDef)
        }
        tables[st.this.this.name] = cols
    return tables
