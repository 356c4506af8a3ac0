"""A shard's share of a master table in SQL: the two pushed-down strategies, as pure statement builders.

* **key range** (:class:`ssbj.core.shards.RangeRouter`): ``key >= :lo AND key < :hi``;
  on an indexed (or clustered) key column the database reads only the shard's rows;
* **hash** (:class:`ssbj.core.shards.ModRouter`): ``((key % :p) + :p) % :p = :s``, the
  floor modulo the router computes (``%`` on integers is a truncating remainder, negative
  for a negative key; ``MOD()`` would be a float in SQLite); no plain index serves it, so
  every shard scans all of R (docs/sharding.md).

Both are combined with the page-column range of one master partition (the layout of
:class:`ssbj.adapters.master_sql.SqlMasterScan`). Identifiers must be plain (letters,
digits, ``_``, ``$``; at most 64 characters) and are always quoted; every value is a bound
parameter. Nothing here connects to a database: :func:`render` compiles a statement for a
dialect (``mysql``, ``mariadb``, ``postgresql``, ``sqlite``) to its text and parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import quoted_name
from sqlalchemy.sql.elements import ColumnElement

from ssbj.contracts import TableName
from ssbj.core.shards import ModRouter, RangeRouter
from ssbj.errors import ConfigError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,63}$")
_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "mysql": mysql.dialect,
    "mariadb": lambda: mysql.dialect(is_mariadb=True),
    "postgresql": postgresql.dialect,
    "sqlite": sqlite.dialect,
}


def identifier(name: str, what: str) -> quoted_name:
    """``name`` as an always-quoted identifier; ConfigError unless it is a plain identifier."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ConfigError(f"{what} {name!r} is not a plain identifier (letters, digits, _, $; at most 64 characters)")
    return quoted_name(name, True)


def master_table(table: str, columns: Sequence[str]) -> sa.TableClause:
    """Return a lightweight table clause (no reflection) with quoted, validated names."""
    name = TableName.parse(table)
    cols: list[sa.ColumnClause[Any]] = [sa.column(identifier(c, "column")) for c in dict.fromkeys(columns)]
    schema = identifier(name.schema, "schema") if name.schema else None
    return sa.table(identifier(name.name, "table"), *cols, schema=schema)


def _bigint(name: str, value: int) -> sa.BindParameter[int]:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    return sa.bindparam(name, value, type_=sa.BigInteger, unique=True)


def range_predicate(col: ColumnElement[Any], router: RangeRouter, shard: int) -> ColumnElement[bool]:
    """``col >= lo AND col < hi`` for ``shard`` (no lower bound for the first shard, no upper for the last)."""
    _check_shard(router.shards, shard)
    parts: list[ColumnElement[bool]] = []
    if shard > 0:
        parts.append(col >= _bigint("shard_lo", router.bounds[shard - 1]))
    if shard < router.shards - 1:
        parts.append(col < _bigint("shard_hi", router.bounds[shard]))
    return sa.and_(*parts) if parts else sa.true()


def mod_predicate(col: ColumnElement[Any], router: ModRouter, shard: int) -> ColumnElement[bool]:
    """``((col % P) + P) % P = shard``: the floor modulo of :class:`ModRouter`, for negative keys too."""
    _check_shard(router.shards, shard)
    p = _bigint("shard_p", router.shards)
    return ((col % p) + p) % p == _bigint("shard_s", shard)


def shard_predicate(col: ColumnElement[Any], router: RangeRouter | ModRouter, shard: int) -> ColumnElement[bool]:
    """Return the pushed-down predicate of ``router`` for ``shard``."""
    if isinstance(router, RangeRouter):
        return range_predicate(col, router, shard)
    if isinstance(router, ModRouter):
        return mod_predicate(col, router, shard)
    raise ConfigError(f"no SQL predicate for {type(router).__name__}: filter its shard after reading")


def _check_shard(shards: int, shard: int) -> None:
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards:
        raise ConfigError(f"shard must be an integer in 0..{shards - 1}, got {shard!r}")


def partition_query(
    table: str,
    key: str,
    columns: Sequence[str],
    router: RangeRouter | ModRouter,
    shard: int,
    page_column: str,
    lower: Any = None,
    upper: Any = None,
) -> sa.Select[Any]:
    """One master partition of one shard: ``SELECT key, cols FROM t WHERE <shard> AND lower < page <= upper``.

    ``lower``/``upper`` are the partition's page-column bounds (None: unbounded), as in
    :class:`ssbj.adapters.master_sql.SqlMasterScan`'s layout.
    """
    t = master_table(table, [key, *columns, page_column])
    where = [shard_predicate(t.c[key], router, shard)]
    page = t.c[page_column]
    if lower is not None:
        where.append(page > sa.bindparam("page_lo", lower, unique=True))
    if upper is not None:
        where.append(page <= sa.bindparam("page_hi", upper, unique=True))
    return sa.select(*[t.c[c] for c in dict.fromkeys([key, *columns])]).where(*where)


def render(stmt: sa.Select[Any], dialect: str) -> tuple[str, list[Any] | dict[str, Any]]:
    """Text and bound parameters of ``stmt`` for ``dialect`` (a list for positional paramstyles)."""
    try:
        d: Dialect = _DIALECTS[dialect]()
    except KeyError:
        raise ConfigError(f"dialect must be one of {sorted(_DIALECTS)}, got {dialect!r}") from None
    compiled = stmt.compile(dialect=d)
    params = compiled.params
    if compiled.positiontup is not None:
        return str(compiled), [params[n] for n in compiled.positiontup]
    return str(compiled), dict(params)
