"""The inputs a query reads, without their schemas (what a job file can check before any connection)."""

from __future__ import annotations

from ssbj.errors import ConfigError
from ssbj.sql._sqlglot import exp
from ssbj.sql.parse import parse_script, where

__all__ = ["query_inputs"]


def query_inputs(text: str) -> list[str]:
    """Names of the tables the SELECT in ``text`` reads, in order of appearance; syntax errors as ConfigError."""
    script = parse_script(text)
    if script.views:
        raise ConfigError(f"CREATE VIEW is not supported here (views: {', '.join(script.views)})")
    names: list[str] = []
    for t in script.query.find_all(exp.Table):
        if t.args.get("db") or t.args.get("catalog"):
            raise ConfigError(f"{where(t)}qualified input name {t.sql(dialect='duckdb')} is not supported")
        if t.name and t.name not in names:
            names.append(t.name)
    return names
